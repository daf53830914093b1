# Serving with "vlm_backend cuda": the tiny model of tests/fixtures/serving
# through nginx on the GPU, or without one on the emulated device of
# tests/cudaemu (make test-cuda-emu builds its engine in build-cudaemu/
# and runs this suite).  The same greedy requests as on the CPU (the
# prompt counts equal, every answer complete; whether the text is the
# CPU's is noted), seeded sampled requests (top_p, top_k, min_p,
# logit_bias, a JSON object's grammar, logprobs, penalties, n choices of
# a text prompt and of a new picture's) with the CPU's tokens and
# logprobs, each token drawn on the device (vlm_sampled_tokens_total),
# the first ones included, an image, the same image again from the
# image cache, a stream with the same text, and the KV blocks and
# sequence slots back to idle afterwards, the same answers with
# "vlm_cuda_graphs on" (decode steps replayed from CUDA graphs; the
# seeded requests of one choice with the CPU's tokens there too), the
# answers with "vlm_kv_dtype fp8"; then "vlm_tensor_parallel 2" (two
# GPUs, or twice the emulated device), and on the emulated device a
# kernel that faults (CUDAEMU_FAULT): that request fails with a 5xx, the
# engine is started again and the next request is served.  A real CUDA
# engine and a GPU
# come first; without either, the emulated engine that VLM_CUDAEMU_BUILD
# names (make test-cuda-emu); skipped without both.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

# the answers of this random model are any characters of its vocabulary
binmode(Test::More->builder->$_, ':encoding(UTF-8)')
    for qw(output failure_output todo_output);

my $build = vlm_prereqs();

my ($engine, $features) = vlm_cuda_engine($build);
$features =~ s/\s+\z//;
my $gpus = () = `nvidia-smi -L 2>/dev/null` =~ /^GPU \d+/mg;
my $emu = !defined $engine || $gpus == 0;

if ($emu) {
    my $why = !defined $engine ? "no engine has the CUDA backend ($features)"
                               : 'no GPU visible (nvidia-smi -L)';
    ($engine, $features) = vlm_cudaemu_engine();
    plan skip_all => "$why; on the emulated device: make test-cuda-emu "
                     . "($features)"
        if !defined $engine;
}

my $where = $emu ? 'on the emulated device' : 'on the GPU';
my $t_start = time;

my $png = vlm_data_url('image/png', vlm_png(56, 56, 1));
my $T0 = { temperature => 0, max_tokens => 6 };
my @bodies = (
    { %{ vlm_chat_body('Hello there') }, %$T0 },
    { %{ vlm_chat_body('What is in the picture?', $png) }, %$T0 },
);

# seeded sampling: the CUDA backend draws these on the device (a JSON
# object's grammar mask included) with the uniform numbers of the
# request's own generator, so an f32 checkpoint (the CPU's logits within
# float rounding) gives the CPU's tokens and logprobs, the penalties'
# token counts kept on the device; a prompt's first token and its other
# choices' first tokens too, in the step that feeds its last chunk or in
# the prefill's last work (a picture not seen before)
my $LP = { logprobs => JSON::PP::true, top_logprobs => 5 };
my @seeded = (
    { %{ vlm_chat_body('Tell me a story') }, %$LP, temperature => 0.9,
      top_p => 0.9, seed => 42, max_tokens => 16 },
    { %{ vlm_chat_body('Hello there') }, %$LP, temperature => 1.2,
      top_k => 20, min_p => 0.05, seed => 7, max_tokens => 16,
      logit_bias => { 100 => 5, 101 => -100, 2000 => 3 } },
    { %{ vlm_chat_body('A list, please') }, temperature => 1.0, seed => 3,
      max_tokens => 24, response_format => { type => 'json_object' } },
    { %{ vlm_chat_body('Hello there') }, %$LP, temperature => 0,
      max_tokens => 8 },
    { %{ vlm_chat_body('Once more') }, %$LP, temperature => 1.0, seed => 11,
      presence_penalty => 1.5, frequency_penalty => 0.7,
      max_tokens => 12 },
    { %{ vlm_chat_body('Tell me a story') }, %$LP, temperature => 0.8,
      seed => 5, repetition_penalty => 1.3, top_p => 0.95,
      max_tokens => 12 },
    { %{ vlm_chat_body('Count with me') }, %$LP, n => 3, temperature => 1.1,
      seed => 21, presence_penalty => 0.8, frequency_penalty => 0.4,
      logit_bias => { 100 => 4, 2000 => -100 }, max_tokens => 8 },
    { %{ vlm_chat_body('What is this?',
                       vlm_data_url('image/png', vlm_png(56, 56, 5))) },
      %$LP, n => 2, temperature => 0.9, seed => 17,
      repetition_penalty => 1.2, max_tokens => 8 },
);

# 18 choices with penalties at once: the engine keeps the token counts of
# 16 on the device, the other two draw on the host (and take an array of
# counts when one is given back)
my $many = { %{ vlm_chat_body('Count with me') }, n => 18, seed => 99,
             temperature => 1.0, presence_penalty => 1.0,
             frequency_penalty => 0.5, max_tokens => 10 };
my $many_conf = "    vlm_max_running 20;\n    vlm_max_n 18;\n";

# every token and logprob of a seeded answer's choices against the CPU's
sub seeded_ok {
    my ($got, $ref, $what) = @_;

    is($got->{status}, 200, "$what: 200") or return;

    my @gc = sort { $a->{index} <=> $b->{index} }
             @{ $got->{j}{choices} // [] };
    my @rc = sort { $a->{index} <=> $b->{index} }
             @{ $ref->{j}{choices} // [] };

    is(scalar @gc, scalar @rc, "$what: the CPU's number of choices");

    for my $c (0 .. $#rc) {
        choice_ok($gc[$c] // {}, $rc[$c], @rc > 1 ? "$what, choice $c"
                                                  : $what);
    }
}

sub choice_ok {
    my ($gc, $rc, $what) = @_;

    is($gc->{message}{content} // '', $rc->{message}{content} // '',
       "$what: the CPU's text");
    is($gc->{finish_reason}, $rc->{finish_reason}, "$what: the CPU's finish");

    my @g = @{ $gc->{logprobs}{content} // [] };
    my @r = @{ $rc->{logprobs}{content} // [] };
    my $far = 0;

    for my $i (0 .. $#r) {
        my @gt = @{ $g[$i]{top_logprobs} // [] };
        my @rt = @{ $r[$i]{top_logprobs} // [] };

        $far++ if !defined $g[$i] || $g[$i]{token} ne $r[$i]{token}
                  || abs($g[$i]{logprob} - $r[$i]{logprob}) > 1e-4
                  || @gt != @rt;
        for my $k (0 .. $#rt) {
            $far++ if ($gt[$k]{token} // '') ne $rt[$k]{token}
                      || abs(($gt[$k]{logprob} // 0) - $rt[$k]{logprob})
                         > 1e-4;
        }
    }

    is(scalar @g, scalar @r, "$what: as many logprobs as the CPU");
    is($far, 0, "$what: the CPU's tokens, logprobs within 1e-4");
}

# the picture again after another system prompt: no prefix in common
# with the first, so its features come from the image cache
my $again = { %{ vlm_chat_body('And now?', $png) }, %$T0 };
unshift @{ $again->{messages} }, { role => 'system', content => 'Be brief.' };

sub answer {
    my ($srv, $b) = @_;

    my $res = vlm_post_json($srv, $b);
    my $j = eval { vlm_json($res->{body}) } || {};

    return { status => $res->{status}, j => $j, raw => $res->{raw} };
}

sub text { $_[0]{j}{choices}[0]{message}{content} // '' }

# the answers of @bodies, each checked against the CPU's
sub served_ok {
    my ($srv, $ref, $what) = @_;
    my @got = map { answer($srv, $_) } @bodies;

    for my $i (0 .. $#bodies) {
        is($got[$i]{status}, 200, "$what, request $i: 200")
            or diag(substr($got[$i]{raw} // '', 0, 400));
        is($got[$i]{j}{usage}{prompt_tokens},
           $ref->[$i]{j}{usage}{prompt_tokens},
           "$what, request $i: the CPU's prompt token count");
        ok($got[$i]{j}{choices}[0]{finish_reason},
           "$what, request $i: finished");
        # bf16 weights may flip a near tie of this random model's logits:
        # the CUDA parity tests hold the numbers, this says what it saw
        my ($a, $b) = (text($got[$i]), text($ref->[$i]));
        note("$what, request $i: " . ($a eq $b ? 'the CPU\'s greedy answer'
                                               : "\"$a\", CPU \"$b\""));
    }

    return @got;
}

# /metrics counts decode graphs captured and more steps replayed
sub graphs_ok {
    my ($m, $what) = @_;

    cmp_ok($m->{vlm_cuda_graph_captures_total} // 0, '>=', 1,
           "$what: /metrics counts the graphs captured");
    cmp_ok($m->{vlm_cuda_graph_replays_total} // 0, '>',
           $m->{vlm_cuda_graph_captures_total} // 0,
           "$what: and more steps replayed from them");
}

# the engine's log lines in nginx's error log since the last look
sub engine_log {
    my ($srv) = @_;

    return join '', VLMTest::error_log_since($srv);
}

sub whole_log {
    my ($srv) = @_;

    open my $in, '<', "$srv->{prefix}/logs/error.log" or return '';
    local $/;
    my $log = <$in>;
    close $in;

    return $log;
}

# a rank's GPU memory by kind, as /metrics says it
my @gpu_kinds = qw(weights kv activations workspace feature_pool staging
                   free total);

sub gpu_memory {
    my ($m, $rank) = @_;

    return { map { $_ => $m->{"vlm_gpu_memory_bytes{rank=\"$rank\","
                              . "kind=\"$_\"}"} } @gpu_kinds };
}

# every kind as it was: none grows with requests served
sub gpu_memory_same {
    my ($before, $after, $what) = @_;

    ok(defined $before->{total} && $before->{total} > 0
       && $before->{free} <= $before->{total},
       "$what: vlm_gpu_memory_bytes has the device's free and total");
    is_deeply($after, $before, "$what: the GPU memory of every kind as it "
                               . "was");
}

# why an engine that is not ready exited, each reason once
sub why_down {
    my ($srv) = @_;
    my %seen;

    return join '', grep { !$seen{$_}++ }
                    map { /vlm: engine \d+ exited: (.*)$/ ? "$1\n" : () }
                    split /\n/, engine_log($srv);
}

my $cpu = vlm_start(name => 'cuda-cpu', http_config => $many_conf);
my @ref = map { answer($cpu, $_) } @bodies;
my @seeded_ref = map { answer($cpu, $_) } @seeded;
my $many_ref = answer($cpu, $many);
VLMTest::vlm_stop($cpu);

my $cuda_conf = "    vlm_backend cuda;\n    vlm_engine_binary $engine;\n";

my $srv = vlm_start(name => 'cuda', http_config => $cuda_conf . $many_conf);
my @servers = ($srv);
my %tp_staging;     # each rank's pinned staging with NCCL between them
END { VLMTest::vlm_stop($_) for grep { $_ } @servers }

is(vlm_health($srv)->{backend}, 'cuda', "/health: backend cuda $where");

if ($emu) {
    like($features, qr/^cpu cuda nccl cudaemu$/,
         'the emulated engine says so in its --features');
    like(engine_log($srv), qr/cuda backend: cudaemu \(emulated on the CPU\)/,
         'the engine\'s log names the emulated device');
}

my @got = served_ok($srv, \@ref, $where);

# every token of the seeded requests drawn by the device's sampler, a
# prompt's first and the first of each of its choices included: none by
# the host
sub seeded_drawn_ok {
    my ($srv, $what) = @_;

    for my $i (0 .. $#seeded) {
        my $m0 = vlm_metrics($srv);
        my $got = answer($srv, $seeded[$i]);
        my $m1 = vlm_metrics($srv);
        my $drawn = sub {
            my $k = "vlm_sampled_tokens_total{where=\"$_[0]\"}";
            return ($m1->{$k} // 0) - ($m0->{$k} // 0);
        };

        seeded_ok($got, $seeded_ref[$i], "$what, seeded request $i");
        is($drawn->('host'), 0, "$what, seeded request $i: no token drawn "
                                . "on the host");
        is($drawn->('device'), $got->{j}{usage}{completion_tokens} // -1,
           "$what, seeded request $i: every token drawn on the device");
    }
}

seeded_drawn_ok($srv, $where);

# 18 choices with penalties: 16 with their counts on the device, the
# others drawn on the host from the prompt's logits brought there
sub many_ok {
    my ($srv, $where) = @_;
    my $m0 = vlm_metrics($srv);
    my $got = answer($srv, $many);
    my $texts = sub {
        join "\n", map { "$_->{index}: $_->{message}{content}" }
                   sort { $a->{index} <=> $b->{index} }
                   @{ $_[0]{j}{choices} // [] };
    };

    is($got->{status}, 200, "$where, 18 choices with penalties: 200");
    is(scalar @{ $got->{j}{choices} // [] }, 18,
       "$where, 18 choices with penalties: 18 answers");
    is($texts->($got), $texts->($many_ref),
       "$where, 18 choices with penalties: the CPU's texts");

    my $m = vlm_metrics($srv);
    is($m->{'vlm_pool_capacity{pool="sample_counts",unit="slots"}'}, 16,
       "$where: 16 arrays of token counts on the device");
    cmp_ok($m->{'vlm_pool_failures_total{pool="sample_counts"}'} // 0,
           '>=', 2, "$where: the choices beyond them drew on the host");

    # and the prompt's logits came to the host for their first tokens
    my %drawn = map {
        my $k = "vlm_sampled_tokens_total{where=\"$_\"}";
        ($_ => ($m->{$k} // 0) - ($m0->{$k} // 0))
    } qw(host device);

    ok($drawn{host} > 0 && $drawn{device} > 0,
       "$where, 18 choices with penalties: tokens drawn on both "
       . "($drawn{host} on the host, $drawn{device} on the device)");
    is($drawn{host} + $drawn{device}, $got->{j}{usage}{completion_tokens},
       "$where, 18 choices with penalties: every token drawn once");
}

many_ok($srv, $where);

my $m0 = vlm_metrics($srv);
my $gpu0 = gpu_memory($m0, 0);
my $cached = answer($srv, $again);
my $m1 = vlm_metrics($srv);
is($cached->{status}, 200, "$where: the picture again: 200");
is(($m1->{vlm_image_cache_hits_total} // 0)
   - ($m0->{vlm_image_cache_hits_total} // 0), 1,
   "$where: the picture again is an image cache hit");
is(($m1->{vlm_image_cache_misses_total} // 0)
   - ($m0->{vlm_image_cache_misses_total} // 0), 0,
   "$where: and no miss");

my $res = vlm_post_json($srv, { %{ $bodies[0] }, stream => JSON::PP::true });
my @ev = vlm_sse($res->{body});
is($ev[-1], '[DONE]', "a stream $where ends with [DONE]");
is(join('', map { ref $_ && $_->{choices} && @{ $_->{choices} }
                  ? $_->{choices}[0]{delta}{content} // '' : '' } @ev),
   text($got[0]), "the stream $where: the same text as without");

# a few more, then everything back
answer($srv, $_) for (@bodies) x 3;
vlm_wait_idle($srv, vlm_secs(10));
my $m = vlm_wait_pools($srv, 'pool="kv_blocks",unit="blocks"',
                       'pool="sequences",unit="slots"',
                       'pool="sample_counts",unit="slots"');
is($m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'}, 0,
   "$where: no KV block left in use");
is($m->{'vlm_pool_used{pool="sequences",unit="slots"}'}, 0,
   "$where: no sequence left in use");
is($m->{'vlm_pool_used{pool="sample_counts",unit="slots"}'}, 0,
   "$where: no token counts left in use on the device");
gpu_memory_same($gpu0, gpu_memory($m, 0), $where);
is($m->{vlm_cuda_graph_replays_total}, 0,
   "$where: without vlm_cuda_graphs, no step replayed from a graph");
my $f32_token = $m->{'vlm_engine_rank_kv_token_bytes{rank="0"}'};

VLMTest::vlm_stop($srv);

# decode steps replayed from CUDA graphs: the answers of the steps run
# without them, the graphs captured as the engine says
my $gsrv = vlm_start(name => 'cuda-graphs',
                     http_config => $cuda_conf . "    vlm_cuda_graphs on;\n");
push @servers, $gsrv;
my @ggot = served_ok($gsrv, \@ref, "vlm_cuda_graphs on $where");
is(text($ggot[$_]), text($got[$_]),
   "vlm_cuda_graphs on $where, request $_: the answer without graphs")
    for 0 .. $#bodies;
like(engine_log($gsrv), qr/model: a decode graph of 1 rows, \d+ blocks a /,
     "vlm_cuda_graphs on $where: the engine captured a decode graph");

# the seeded requests of one choice, their rows drawn in graph steps
for my $i (grep { !$seeded[$_]{n} } 0 .. $#seeded) {
    seeded_ok(answer($gsrv, $seeded[$i]), $seeded_ref[$i],
              "vlm_cuda_graphs on $where, seeded request $i");
}
vlm_wait_idle($gsrv, vlm_secs(10));
$m = vlm_wait_pools($gsrv);
is($m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'}, 0,
   "vlm_cuda_graphs on $where: no KV block left in use");
graphs_ok($m, "vlm_cuda_graphs on $where");
VLMTest::vlm_stop($gsrv);

# vlm_kv_dtype fp8: keys and values as float8 e4m3, a quarter of this f32
# checkpoint's cache bytes a token; the answers complete (test_cuda_models
# holds the numbers); the checkpoint has no scales, so the engine
# calibrated them on its own text before it served
my $fp8 = vlm_start(name => 'cuda-fp8',
                    http_config => "$cuda_conf    vlm_kv_dtype fp8;\n");
push @servers, $fp8;
like(engine_log($fp8),
     qr/fp8 KV cache: the scales calibrated on \d+ tokens/,
     "$where: the engine calibrated the fp8 cache's scales at start-up");
served_ok($fp8, \@ref, "$where, fp8 KV cache");
$m = vlm_metrics($fp8);
is($m->{'vlm_engine_rank_kv_dtype{rank="0",dtype="fp8"}'}, 1,
   "$where: the engine holds an fp8 KV cache");
is($m->{'vlm_engine_rank_kv_token_bytes{rank="0"}'} * 4, $f32_token,
   "$where: a quarter of f32's bytes a token");
VLMTest::vlm_stop($fp8);

# tensor parallel: the ranks' collectives through NCCL (on the emulated
# device, its stand-in between the rank processes)
SKIP: {
    skip "vlm_tensor_parallel 2 needs two GPUs ($gpus visible)", 1
        if !$emu && $gpus < 2;

    my $tp = vlm_start(name => 'cuda-tp', wait => 0,
                       http_config => $cuda_conf . $many_conf
                                      . "    vlm_tensor_parallel 2;\n"
                                      . ($emu ? "    vlm_gpus 0 1;\n" : ''));
    push @servers, $tp;

    my $ready = vlm_wait_ready($tp, vlm_secs(15));
    my $why = $ready ? '' : why_down($tp);

    ok($ready, "tensor parallel 2 $where: ready") or diag($why);

    # a group that cannot start says what NCCL said
    like($why, qr/nccl rank \d of 2: nccl\w+( on device \d+)?: /,
         "tensor parallel 2 $where: an exit names NCCL's error")
        if !$ready;

    my @tgot = served_ok($tp, \@ref, "tensor parallel 2 $where");

    # rank 0 draws the group's tokens on its device, from the rows the
    # ranks' slices of the logits make: the CPU's tokens and logprobs
    seeded_drawn_ok($tp, "tensor parallel 2 $where");
    many_ok($tp, "tensor parallel 2 $where");
    my $tm0 = vlm_metrics($tp);

    $res = vlm_post_json($tp, { %{ $bodies[1] }, stream => JSON::PP::true });
    @ev = vlm_sse($res->{body});
    is($ev[-1], '[DONE]', "tensor parallel 2 $where: a stream ends");

    # every rank's GPU memory as after the first requests; rank 0 holds
    # the feature pool on its device, rank 1 opened it (none of its own)
    served_ok($tp, \@ref, "tensor parallel 2 $where, again");
    vlm_wait_idle($tp, vlm_secs(10));
    my $tm1 = vlm_metrics($tp);
    $tp_staging{$_} = gpu_memory($tm1, $_)->{staging} for 0, 1;
    for my $r (0, 1) {
        gpu_memory_same(gpu_memory($tm0, $r), gpu_memory($tm1, $r),
                        "tensor parallel 2 $where, rank $r");
    }
    cmp_ok(gpu_memory($tm1, 0)->{feature_pool} // 0, '>', 0,
           "tensor parallel 2 $where: the feature pool on rank 0's GPU");
    is(gpu_memory($tm1, 1)->{feature_pool}, 0,
       "tensor parallel 2 $where: rank 1 takes no pool of its own");
    is($tm1->{vlm_feature_copies_in_flight}, 0,
       "tensor parallel 2 $where: no feature copy in flight");

    ok(kill(0, $tp->{pid}), "tensor parallel 2 $where: nginx is up");
    my @silent = grep { /exited without a word/ } split /\n/, whole_log($tp);
    ok(!@silent, "tensor parallel 2 $where: every engine that exited said why")
        or diag(join "\n", @silent);
    VLMTest::vlm_stop($tp);

    # the group's decode steps replayed from each rank's graphs, NCCL's
    # sums captured in them: the answers of the group without graphs,
    # the seeded requests drawn on rank 0's device as before
    my $tg = vlm_start(name => 'cuda-tp-graphs',
                       http_config => $cuda_conf . $many_conf
                                      . "    vlm_tensor_parallel 2;\n"
                                      . "    vlm_cuda_graphs on;\n"
                                      . ($emu ? "    vlm_gpus 0 1;\n" : ''));
    push @servers, $tg;
    my @tggot = served_ok($tg, \@ref, "tensor parallel 2 $where, graphs");
    is(text($tggot[$_]), text($tgot[$_]),
       "tensor parallel 2 $where, graphs, request $_: the answer without "
       . "graphs")
        for 0 .. $#bodies;
    seeded_drawn_ok($tg, "tensor parallel 2 $where, graphs");
    vlm_wait_idle($tg, vlm_secs(10));
    graphs_ok(vlm_metrics($tg), "tensor parallel 2 $where, graphs");
    VLMTest::vlm_stop($tg);
}

# two ranks on one GPU, which NCCL refuses: their collectives through
# pinned host memory and the ranks' shared memory communicator
SKIP: {
    skip "vlm_gpus 0 0 needs a GPU", 1 if !$emu && $gpus < 1;

    my $one = vlm_start(name => 'cuda-tp1', wait => 0,
                        http_config => $cuda_conf
                                       . "    vlm_tensor_parallel 2;\n"
                                       . "    vlm_gpus 0 0;\n");
    push @servers, $one;

    my $ready = vlm_wait_ready($one, vlm_secs(15));

    ok($ready, "two ranks on one GPU $where: ready") or diag(why_down($one));
    like(engine_log($one), qr/staged communicator: rank 1 of 2 on device 0/,
         "two ranks on one GPU $where: the staged communicator");

    served_ok($one, \@ref, "two ranks on one GPU $where");
    my $om0 = vlm_metrics($one);

    $res = vlm_post_json($one, { %{ $bodies[1] }, stream => JSON::PP::true });
    @ev = vlm_sse($res->{body});
    is($ev[-1], '[DONE]', "two ranks on one GPU $where: a stream ends");

    vlm_wait_idle($one, vlm_secs(10));
    my $om1 = vlm_wait_pools($one);
    is($om1->{vlm_feature_copies_in_flight}, 0,
       "two ranks on one GPU $where: no feature copy in flight");

    # the staged communicator's pinned host memory (4 MiB a rank, taken
    # at open) is in each rank's staging gauge, and nothing grew
    for my $r (0, 1) {
        my $staging = gpu_memory($om1, $r)->{staging} // 0;

        if (defined $tp_staging{$r}) {
            is($staging, $tp_staging{$r} + 4194304,
               "two ranks on one GPU $where, rank $r: the communicator's "
               . "staging in the staging gauge");
        } else {
            cmp_ok($staging, '>=', 4194304,
                   "two ranks on one GPU $where, rank $r: the "
                   . "communicator's staging in the staging gauge");
        }

        gpu_memory_same(gpu_memory($om0, $r), gpu_memory($om1, $r),
                        "two ranks on one GPU $where, rank $r");
    }
    VLMTest::vlm_stop($one);
}

# a kernel of the vision encoder faults at its first launch in every
# engine (a sticky illegal address, as a GPU's): the image request fails,
# the engine is started again, and a text request is served
SKIP: {
    skip 'a kernel fault is injected on the emulated device only', 1
        if !$emu;

    my $fault = vlm_start(name => 'cuda-fault', http_config => $cuda_conf,
                          main_config => 'env CUDAEMU_FAULT='
                                         . 'vlm_layer_norm_kernel:1;');
    push @servers, $fault;

    my @before = vlm_engine_pids($fault);
    my $t0 = time;
    my $r = answer($fault, $bodies[1]);

    cmp_ok($r->{status}, '>=', 500, 'a kernel fault: a 5xx')
        or diag(substr($r->{raw} // '', 0, 400));
    ok($r->{j}{error} && $r->{j}{error}{message},
       'a kernel fault: an error in JSON')
        or diag(substr($r->{raw} // '', 0, 400));
    note("a kernel fault: $r->{status} after " . sprintf('%.1f s', time - $t0)
         . ': ' . ($r->{j}{error}{message} // ''));
    like(engine_log($fault), qr/illegal memory access/i,
         'a kernel fault: the engine\'s log says what the device said');

    ok(kill(0, $fault->{pid}), 'a kernel fault: nginx is up');

    my @after;
    for (1 .. 100) {
        @after = vlm_engine_pids($fault);
        last if @after == 1 && @before == 1 && $after[0] != $before[0]
                && vlm_health($fault)->{_status} == 200;
        sleep 0.1;
    }

    ok(@after == 1 && @before == 1 && $after[0] != $before[0],
       'a kernel fault: another engine is started');

    my $next = answer($fault, $bodies[0]);
    is($next->{status}, 200, 'a kernel fault: the next request is served');
    is(text($next), text($got[0]),
       'a kernel fault: the next request: the same answer as before');
}

# a memory plan past the device: the engine refuses to load, naming the
# directive, before it allocates anything (nginx -t cannot see the GPU)
SKIP: {
    my $total = gpu_memory($m0, 0)->{total} // 0;
    skip 'the device\'s memory is not known', 3 if $total == 0;

    my $kv = int($total / 1024 / 1024 * 1.2);
    my $big = vlm_start(name => 'cuda-big', wait => 0, port => vlm_port(5),
                        http_config => $cuda_conf . "    vlm_kv_cache ${kv}m;\n");
    push @servers, $big;

    my $said = '';
    for (1 .. 300) {
        $said = whole_log($big);
        last if $said =~ /memory plan takes/;
        sleep 0.1;
    }

    like($said, qr/the memory plan takes \d+ MiB, more than the \d+ MiB of the GPU's pool \(90 % of its free memory\): lower vlm_kv_cache or vlm_max_model_len/,
         "a KV cache of $kv MiB $where: the engine names the directive");
    like($said, qr/cuda device \d+: \d+ MiB free of \d+ MiB/,
         'the engine logs the device\'s free memory');
    isnt(vlm_health($big)->{_status}, 200, 'and the server is not ready');
    VLMTest::vlm_stop($big);
}

note(sprintf('%s: %.1f s', $where, time - $t_start));

done_testing();
