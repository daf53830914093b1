# InternVL 3 served by nginx: the tiny random checkpoint of
# tools/fixtures_internvl.py (tests/fixtures/internvl/internvl-chat, its
# GotOcr2 processor and the -hf chat template) answers chats of 0, 1 and
# 2 images (2x3 tiles and the thumbnail; 1x3 and the thumbnail, and one
# tile), plain and streamed, with transformers' greedy tokens
# (ref/serve-<case>/expect.json: the prompt ids, which /tokenize answers
# too, and the continuation's ids, compared by their bytes in
# "logprobs"), and vlm-cli run gives the same answers; a picture sent
# again after other text comes from the image feature cache; a group of
# two tensor-parallel ranks gives the same answers.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;
use VLMServed;

vlm_prereqs();

my $root = vlm_root();
my $model = "$root/tests/fixtures/internvl/internvl-chat";

my @cases = vlm_served_cases($model, 'serve-', 'internvl-chat');

my $srv = vlm_start(name => 'internvl', port => vlm_port(89), model => $model,
                    http_config => "    vlm_max_image_pixels 40000;\n",
                    locations => <<'_EOC_');
        location = /tokenize { vlm_tokenize; }
_EOC_

# vlm-cli run, the same chats: the model's template, the GotOcr2
# processor, each <IMG_CONTEXT> expanded, transformers' decoded answer
vlm_check_cli($model, 'serve-', sub { vlm_slurp("$_[0]/answer.txt") },
              @cases);

# the prompt ids of the whole processor
vlm_check_tokenize($srv, @cases);

# "<IMG_CONTEXT>" a client writes is text, not a picture's place
{
    my $res = vlm_request($srv, 'POST', '/tokenize',
                          VLMTest::vlm_json_text({
                              model => 'internvl-chat',
                              messages => [ { role => 'user', content =>
                                              'Say <IMG_CONTEXT> here.' } ]
                          }));
    is($res->{status}, 200, '/tokenize, a typed <IMG_CONTEXT>: 200')
        or diag($res->{body});
    my $j = eval { vlm_json($res->{body}) } || {};
    my $image = vlm_json(vlm_slurp("$model/config.json"))->{image_token_id};
    ok(@{ $j->{tokens} || [] } > 10
       && !grep({ $_ == $image } @{ $j->{tokens} }),
       '/tokenize, a typed <IMG_CONTEXT>: plain text, no image token');
}

vlm_check_served($srv, 'one engine', @cases);

# a question before a picture seen already: an image feature cache hit
vlm_check_image_cache($srv, $cases[1], 3);

# a bad picture, and one over vlm_max_image_pixels: 400, the image named
vlm_check_bad_images($srv, $cases[1], $cases[0]);

my @left = vlm_stop($srv);
is(scalar @left, 0, 'no engine process left');

# tensor parallel: two ranks, the same greedy tokens
my $tp = vlm_start(name => 'internvl-tp', port => vlm_port(90), model => $model,
                   http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
_EOC_

vlm_check_served($tp, 'two ranks', @cases);

{
    my $m = vlm_metrics($tp);
    is($m->{vlm_tensor_parallel_ranks}, 2, 'two ranks: in /metrics');
    # rank 0 encodes each picture and hands its features to rank 1
    # through the feature pool (the projector's frames * (side / 2)^2
    # features each)
    cmp_ok($m->{'vlm_feature_transfers_total{path="pool"}'} // 0, '>=', 3,
           'two ranks: the features went through the pool');
}

vlm_stop($tp);

done_testing();
