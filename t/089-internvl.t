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
{
    my $cli = ($ENV{VLM_BUILD} || "$root/build") . "/vlm-cli";
    for my $c (@cases) {
        my $d = "$model/ref/serve-$c->{name}";
        my @img = map { ('--image', $_) } sort glob("$d/image_*.png");
        open my $p, '-|', $cli, 'run', '--model', $model, @img,
             '--prompt', $c->{question}, '--temperature', '0',
             '--max-tokens', '8', '--ignore-eos', '--threads', '1'
            or die "$cli: $!";
        my $out = do { local $/; <$p> };
        close $p;
        is($?, 0, "vlm-cli run, $c->{name}: exits 0");
        is($out, vlm_slurp("$d/answer.txt") . "\n",
           "vlm-cli run, $c->{name}: transformers' answer");
    }
}

# the prompt ids of the whole processor
for my $c (@cases) {
    my $b = vlm_served_body($c);
    my $res = vlm_request($srv, 'POST', '/tokenize',
                          VLMTest::vlm_json_text({
                              model => $b->{model},
                              messages => $b->{messages} }));
    is($res->{status}, 200, "/tokenize, $c->{name}: 200")
        or diag($res->{body});
    my $j = eval { vlm_json($res->{body}) } || {};
    is_deeply($j->{tokens}, $c->{expect}{prompt_ids},
              "/tokenize, $c->{name}: transformers' prompt ids");
}

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

# a question before a picture seen already changes the prefix but not
# the picture: its features come from the image feature cache
{
    my $m = vlm_metrics($srv);
    is($m->{vlm_image_cache_misses_total}, 3,
       'image cache: one miss a picture');
    my $hits = $m->{vlm_image_cache_hits_total};

    my $b = vlm_served_body($cases[1]);
    unshift @{ $b->{messages}[0]{content} },
        { type => 'text', text => 'A question first.' };
    my $res = vlm_post_json($srv, $b);
    is($res->{status}, 200, 'a picture seen before: 200');

    $m = vlm_metrics($srv);
    is($m->{vlm_image_cache_misses_total}, 3, 'image cache: no new miss');
    is($m->{vlm_image_cache_hits_total}, $hits + 1, 'image cache: a hit');
}

# a bad picture, and one over vlm_max_image_pixels: 400, the image named
{
    my $param = 'messages[0].content[0].image_url';
    my @bad = (
        [ 'a corrupt image', "\x89PNG\r\n\x1a\n" . 'x' x 24,
          'PNG: truncated before the end of IHDR' ],
        [ 'an image too large', vlm_png(250, 200),
          'PNG: 250x200 is over the limit of 40000 pixels' ],
    );

    for my $b (@bad) {
        my ($what, $data, $msg) = @$b;
        my $body = vlm_served_body($cases[1]);
        $body->{messages}[0]{content}[0]{image_url}{url}
            = vlm_data_url('image/png', $data);
        my $res = vlm_post_json($srv, $body);
        is($res->{status}, 400, "$what: 400");
        my $e = (eval { vlm_json($res->{body}) } || {})->{error} || {};
        is($e->{message}, $msg, "$what: the message");
        is($e->{param}, $param, "$what: the image named");
        is($e->{type}, 'invalid_request_error', "$what: its type");
    }

    # the server goes on
    my $res = vlm_post_json($srv, vlm_served_body($cases[0]));
    is($res->{status}, 200, 'after them: 200');
}

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
