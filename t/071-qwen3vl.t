# Qwen3-VL served by nginx: the tiny random checkpoint of
# tools/fixtures_serving_qwen3vl.py (tests/fixtures/serving-qwen3vl, the
# fixture tokenizer with Qwen3-VL's chat template) answers chats of 0, 1
# and 2 images, plain and streamed, with transformers' greedy tokens
# (ref/<case>/expect.json: the prompt ids, which /tokenize answers too,
# and the continuation's ids, compared by their bytes in "logprobs"); a
# picture sent again after other text comes from the image feature cache;
# a group of two
# tensor-parallel ranks gives the same answers.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;
use VLMServed;

vlm_prereqs();

my $root = vlm_root();
my $model = "$root/tests/fixtures/serving-qwen3vl";

my @cases = vlm_served_cases($model, '', 'serving-qwen3vl');

my $srv = vlm_start(name => 'qwen3vl', port => vlm_port(77), model => $model,
                    locations => <<'_EOC_');
        location = /tokenize { vlm_tokenize; }
_EOC_

# the prompt ids of the whole processor
vlm_check_tokenize($srv, @cases);

vlm_check_served($srv, 'one engine', @cases);

# every picture was encoded once (the streamed requests found the whole
# prompt in the prefix cache); a question before a picture seen already
# changes the prefix but not the picture: its features come from the
# image feature cache
{
    my $m = vlm_metrics($srv);
    is($m->{vlm_image_cache_misses_total}, 3, 'image cache: three misses');
    is($m->{vlm_image_cache_hits_total}, 0, 'image cache: no hit yet');

    my $b = vlm_served_body($cases[1]);
    unshift @{ $b->{messages}[0]{content} },
        { type => 'text', text => 'A question first.' };
    my $res = vlm_post_json($srv, $b);
    is($res->{status}, 200, 'a picture seen before: 200');

    $m = vlm_metrics($srv);
    is($m->{vlm_image_cache_misses_total}, 3, 'image cache: no new miss');
    is($m->{vlm_image_cache_hits_total}, 1, 'image cache: one hit');
}

vlm_stop($srv);

# tensor parallel: two ranks, the same greedy tokens
my $tp = vlm_start(name => 'qwen3vl-tp', port => vlm_port(78), model => $model,
                   http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
_EOC_

vlm_check_served($tp, 'two ranks', @cases);

{
    my $m = vlm_metrics($tp);
    is($m->{vlm_tensor_parallel_ranks}, 2, 'two ranks: in /metrics');
    # rank 0 encodes each picture and hands its features, DeepStack's
    # levels with them, to rank 1 through the feature pool
    cmp_ok($m->{'vlm_feature_transfers_total{path="pool"}'} // 0, '>=', 3,
           'two ranks: the features went through the pool');
}

vlm_stop($tp);

done_testing();
