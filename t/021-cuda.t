# Serving with "vlm_backend cuda": the tiny model of tests/fixtures/serving
# through nginx on the GPU, the same greedy requests as on the CPU (the
# prompt counts equal, every answer complete; whether the text is the
# CPU's is noted), a streamed one, an image,
# and the KV blocks and sequence slots back to idle afterwards.  Skipped
# unless an engine was built with CUDA (the build's, or make cuda's in
# build-cuda/) and nvidia-smi sees a GPU.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();

my ($engine, $features) = vlm_cuda_engine($build);
plan skip_all => "no engine has the CUDA backend ($features): make cuda"
    if !defined $engine;
plan skip_all => 'no GPU visible (nvidia-smi -L)'
    if system('nvidia-smi -L >/dev/null 2>&1') != 0;

my $png = vlm_data_url('image/png', vlm_png(56, 56, 1));
my $T0 = { temperature => 0, max_tokens => 8 };
my @bodies = (
    { %{ vlm_chat_body('Hello there') }, %$T0 },
    { %{ vlm_chat_body('What is in the picture?', $png) }, %$T0 },
);

sub answers {
    my ($srv) = @_;
    my @out;

    for my $b (@bodies) {
        my $res = vlm_post_json($srv, $b);
        my $j = eval { vlm_json($res->{body}) } || {};
        push @out, { status => $res->{status}, j => $j };
    }

    return @out;
}

my $cpu = vlm_start(name => 'cuda-cpu');
my @ref = answers($cpu);
VLMTest::vlm_stop($cpu);

my $gpu = vlm_start(name => 'cuda-gpu',
                    http_config => "    vlm_backend cuda;\n"
                                   . "    vlm_engine_binary $engine;\n");
END { VLMTest::vlm_stop($gpu) if $gpu }

is(vlm_health($gpu)->{backend}, 'cuda', '/health: backend cuda');

my @got = answers($gpu);

for my $i (0 .. $#bodies) {
    is($got[$i]{status}, 200, "request $i: 200 on the GPU");
    is($got[$i]{j}{usage}{prompt_tokens}, $ref[$i]{j}{usage}{prompt_tokens},
       "request $i: the CPU's prompt token count");
    ok($got[$i]{j}{choices}[0]{finish_reason}, "request $i: finished");
    # bf16 weights may flip a near tie of this random model's logits:
    # test_backend_ops holds the numbers, this says what it saw
    my ($a, $b) = map { $_->{j}{choices}[0]{message}{content} // '' }
                  $got[$i], $ref[$i];
    note("request $i: " . ($a eq $b ? 'the CPU\'s greedy answer'
                                    : "GPU \"$a\", CPU \"$b\""));
}

my $res = vlm_post_json($gpu, { %{ $bodies[0] }, stream => JSON::PP::true });
my @ev = vlm_sse($res->{body});
is($ev[-1], '[DONE]', 'a stream on the GPU ends with [DONE]');

# 50 more, then everything back
answers($gpu) for 1 .. 25;
vlm_wait_idle($gpu, 5);
my $m = vlm_metrics($gpu);
is($m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'}, 0,
   'no KV block left in use');
is($m->{'vlm_pool_used{pool="sequences",unit="slots"}'}, 0,
   'no sequence left in use');

done_testing();
