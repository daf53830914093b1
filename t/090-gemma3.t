# Gemma 3 served by nginx: the tiny random checkpoint of
# tools/fixtures_gemma3.py (tests/fixtures/gemma3/gemma3-chat, its
# processor and chat template, prompts longer than its sliding window of
# 8) answers chats of 0, 1 and 2 images, plain and streamed, with
# transformers' greedy tokens (ref/serve-<case>/expect.json: the prompt
# ids of Gemma3Processor, which /tokenize answers too, and the
# continuation's ids, compared by their bytes in "logprobs"); a
# <start_of_image> a client types stays text; a picture sent again after
# other text comes from the image feature cache; a corrupt and a too
# large picture are 400s naming the image; a group of two tensor-parallel
# ranks gives the same answers.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;
use VLMServed;

vlm_prereqs();

my $root = vlm_root();
my $model = "$root/tests/fixtures/gemma3/gemma3-chat";

my @cases = vlm_served_cases($model, 'serve-', 'gemma3-chat');

my $srv = vlm_start(name => 'gemma3', port => vlm_port(90), model => $model,
                    http_config => "    vlm_max_image_pixels 40000;\n",
                    locations => <<'_EOC_');
        location = /tokenize { vlm_tokenize; }
_EOC_

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

# "<start_of_image>" a client writes is text, not a picture's place,
# beside a picture's own
{
    my $b = vlm_served_body($cases[1]);
    $b->{messages}[0]{content}[1]{text} = 'Say <start_of_image> here.';
    my $res = vlm_request($srv, 'POST', '/tokenize',
                          VLMTest::vlm_json_text({
                              model => $b->{model},
                              messages => $b->{messages} }));
    is($res->{status}, 200, '/tokenize, a typed <start_of_image>: 200')
        or diag($res->{body});
    my $j = eval { vlm_json($res->{body}) } || {};
    my $cfg = vlm_json(vlm_slurp("$model/config.json"));
    my @boi = grep { $_ == $cfg->{boi_token_index} } @{ $j->{tokens} || [] };
    my @img = grep { $_ == $cfg->{image_token_index} }
              @{ $j->{tokens} || [] };
    is(scalar @boi, 1, '/tokenize, a typed <start_of_image>: plain text');
    is(scalar @img, $cfg->{mm_tokens_per_image},
       '/tokenize, a typed <start_of_image>: one image\'s soft tokens');
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
my $tp = vlm_start(name => 'gemma3-tp', port => vlm_port(91), model => $model,
                   http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
_EOC_

vlm_check_served($tp, 'two ranks', @cases);

{
    my $m = vlm_metrics($tp);
    is($m->{vlm_tensor_parallel_ranks}, 2, 'two ranks: in /metrics');
    # rank 0 encodes each picture and hands its features to rank 1
    # through the feature pool (the projector's mm_tokens_per_image
    # features each)
    cmp_ok($m->{'vlm_feature_transfers_total{path="pool"}'} // 0, '>=', 3,
           'two ranks: the features went through the pool');
}

vlm_stop($tp);

done_testing();
