# Gemma 3 served by nginx: the tiny random checkpoint of
# tools/fixtures_gemma3.py (tests/fixtures/gemma3/gemma3-chat, its
# processor and chat template, prompts longer than its sliding window of
# 8) answers chats of 0, 1 and 2 images, plain and streamed, with
# transformers' greedy tokens (ref/serve-<case>/expect.json: the prompt
# ids of Gemma3Processor, which /tokenize answers too, and the
# continuation's ids, compared by their bytes in "logprobs"); a
# <start_of_image> a client types stays text; a picture sent again after
# other text comes from the image feature cache; a corrupt and a too
# large picture are 400s naming the image; /metrics shows the sliding
# layers' KV pool beside the global one; a group of two tensor-parallel
# ranks gives the same answers; vlm-cli run gives them too.

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
vlm_check_tokenize($srv, @cases);

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
    is(scalar @boi, 1,
       '/tokenize, a typed <start_of_image>: text, one such token');
    is(scalar @img, $cfg->{mm_tokens_per_image},
       '/tokenize, a typed <start_of_image>: one image\'s soft tokens');
}

vlm_check_served($srv, 'one engine', @cases);

# a picture sent again after other text comes from the image cache
vlm_check_image_cache($srv, $cases[1], 3);

# a bad picture, and one over vlm_max_image_pixels: 400, the image named
vlm_check_bad_images($srv, $cases[1], $cases[0]);

# the sliding layers' own KV pool: in /metrics, used while the chats
# ran, idle after them
{
    my $p = 'pool="kv_sliding_blocks",unit="blocks"';
    my $m = vlm_wait_pools($srv, $p, 'pool="kv_blocks",unit="blocks"');

    cmp_ok($m->{"vlm_pool_capacity{$p}"} // 0, '>', 0,
           'metrics: the sliding layers\' pool');
    cmp_ok($m->{"vlm_pool_capacity{$p}"}, '<',
           $m->{'vlm_pool_capacity{pool="kv_blocks",unit="blocks"}'},
           'metrics: smaller than the global layers\'');
    cmp_ok($m->{"vlm_pool_peak{$p}"} // 0, '>', 0,
           'metrics: the sliding pool was used');
    is($m->{"vlm_pool_used{$p}"}, 0, 'metrics: the sliding pool is idle');
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

# vlm-cli run, the same chats: the model's template, the processor's
# text and images, transformers' greedy bytes
vlm_check_cli($model, 'serve-',
              sub { join '', map { chr } map { @$_ }
                    @{ vlm_json(vlm_slurp("$_[0]/expect.json"))
                       ->{greedy_bytes} } },
              @cases);

done_testing();
