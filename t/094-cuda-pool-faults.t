# The feature pool on the device (vlm_backend cuda, vlm_tensor_parallel 2:
# rank 0 encodes every image into its GPU's pool, rank 1 opens it by CUDA
# IPC and copies out), as requests fail around it, on two GPUs or on the
# emulated device of tests/cudaemu (make test-cuda-emu): a request whose
# third image is corrupt after two good ones (a 400, nothing taken); a
# client gone while the vision tower runs on eight images (its slices given
# back, no copy left in flight); rank 1 killed while an image request runs
# (the stream ends with an error event, the group comes back with no slice
# in use and serves the same answer).  After each, every rank's GPU memory
# by kind is what it was, and the next image request gives the answer it
# gave before.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

binmode(Test::More->builder->$_, ':encoding(UTF-8)')
    for qw(output failure_output todo_output);

my $build = vlm_prereqs();

my ($engine, $features) = vlm_cuda_engine($build);
my $gpus = () = `nvidia-smi -L 2>/dev/null` =~ /^GPU \d+/mg;
my $emu = !defined $engine || $gpus < 2;

if ($emu) {
    ($engine, $features) = vlm_cudaemu_engine();
    plan skip_all => "no two GPUs, no emulated engine ($features): make "
                     . "test-cuda-emu"
        if !defined $engine;
}

my $where = $emu ? 'emulated' : 'GPU';

my @img = map { vlm_data_url('image/png', vlm_png($_->[0], $_->[1], $_->[2])) }
              ([56, 56, 1], [84, 56, 7]);
my $two = vlm_chat_body('Compare them.', @img);

my $srv = vlm_start(name => 'cuda-pool-faults', wait => 0,
                    http_config => "    vlm_backend cuda;\n"
                                   . "    vlm_engine_binary $engine;\n"
                                   . "    vlm_tensor_parallel 2;\n"
                                   . "    vlm_image_cache 0;\n"
                                   . ($emu ? "    vlm_gpus 0 1;\n" : ''));
END { VLMTest::vlm_stop($srv) if $srv }

ok(vlm_wait_ready($srv, vlm_secs(20)), "$where: the group of two is ready");


sub ask {
    my ($body) = @_;

    my $res = vlm_post_json($srv, { %$body, max_tokens => 6,
                                    temperature => 0 });
    return $res->{status} == 200
        ? vlm_json($res->{body})->{choices}[0]{message}{content}
        : "status $res->{status}: $res->{body}";
}


sub ranks {
    my %r;

    for my $pid (vlm_engine_pids($srv)) {
        open my $in, '<', "/proc/$pid/cmdline" or next;
        local $/;
        my ($rank) = join(' ', split /\0/, <$in>) =~ /--rank (\d+)/;
        $r{$rank // 0} = $pid;
    }

    return \%r;
}


my @kinds = qw(weights kv activations workspace feature_pool staging free
               total);

# the metrics at rest: no request running, no slice held
sub idle {
    my $m = {};

    for (1 .. 100) {
        $m = vlm_metrics($srv);
        last if ($m->{vlm_feature_pool_slices_in_use} // -1) == 0
                && ($m->{vlm_running_requests} // -1) == 0
                && ($m->{vlm_feature_copies_in_flight} // -1) == 0;
        sleep 0.1;
    }

    return $m;
}


sub memory {
    my ($m) = @_;

    return { map { my $r = $_;
                   map { ("$r/$_" => $m->{"vlm_gpu_memory_bytes{rank=\"$r\","
                                         . "kind=\"$_\"}"}) } @kinds } 0, 1 };
}


sub at_rest {
    my ($what, $mem0) = @_;

    my $m = idle();

    is($m->{vlm_feature_pool_slices_in_use}, 0, "$what: no slice in use");
    is($m->{vlm_feature_pool_used_bytes}, 0, "$what: the pool idle");
    is($m->{vlm_feature_staging_used_bytes}, 0, "$what: staging idle");
    is($m->{vlm_feature_copies_in_flight}, 0, "$what: no copy in flight");
    is_deeply(memory($m), $mem0,
              "$what: every rank's GPU memory by kind as it was")
        if $mem0;

    return $m;
}


my $want = ask($two);
unlike($want, qr/^status/, "$where: two images answered") or diag($want);
my $m0 = at_rest("$where, first");
my $mem0 = memory($m0);
cmp_ok($mem0->{'0/feature_pool'} // 0, '>', 0,
       "$where: the pool on rank 0's device");
ok(defined $mem0->{'1/total'} && $mem0->{'1/total'} > 0,
   "$where: rank 1's device memory reported");
my $xfer0 = $m0->{'vlm_feature_transfers_total{path="pool"}'} // 0;
cmp_ok($xfer0, '>=', 2, "$where: the images went through the pool");

# --- a corrupt third image after two good ones: a 400, nothing taken

{
    my $bad = vlm_chat_body('Compare them.', @img,
                            'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA');
    my $res = vlm_post_json($srv, { %$bad, max_tokens => 6 });
    is($res->{status}, 400, 'a corrupt third image: 400');
    like($res->{body}, qr/"param":"messages\[0\]\.content\[2\]/,
         'a corrupt third image: the part named');

    my $m = at_rest('a corrupt third image', $mem0);
    is($m->{'vlm_feature_transfers_total{path="pool"}'} // 0, $xfer0,
       'a corrupt third image: no transfer made');
    is(ask($two), $want, 'a corrupt third image: then the same answer');
}

# --- the client gone while the tower runs

{
    my $eight = vlm_chat_body('Compare them.', (@img) x 4);
    my $st = vlm_open_stream($srv, { %$eight, max_tokens => 200,
                                     ignore_eos => JSON::PP::true,
                                     stream => JSON::PP::true });
    my $t0 = time;

    # the request is taken by the engine, its images being encoded (eight
    # images take seconds on the emulated device, the first token after)
    for (1 .. 200) {
        my $m = vlm_metrics($srv);
        last if ($m->{vlm_running_requests} // 0) > 0;
        sleep 0.01;
    }

    vlm_read_some($st, 0.05);
    unlike($st->{raw}, qr/"content":"[^"]+"/,
           'the client gone during the tower: no token yet');
    close $st->{sock};
    note(sprintf('client gone %.2f s after sending', time - $t0));

    at_rest('the client gone during the tower', $mem0);
    is(ask($two), $want, 'the client gone during the tower: then the same '
                         . 'answer');
}

# --- rank 1 killed while an image request runs

{
    my $r = ranks();
    ok($r->{0} && $r->{1}, 'rank killed: two rank processes');

    my $st = vlm_open_stream($srv, { %$two, temperature => 0,
                                     max_tokens => 1000,
                                     ignore_eos => JSON::PP::true,
                                     stream => JSON::PP::true });
    vlm_read_some($st, 30, qr/"content":"[^"]+"/s);
    like($st->{raw}, qr/"content":"[^"]+"/s,
         'rank killed: the image request has begun');

    kill 'KILL', $r->{1};

    vlm_read_some($st, 20);
    close $st->{sock};

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    is($ev[-1], '[DONE]', 'rank killed: the stream ends with [DONE]');
    ok(ref $ev[-2] && $ev[-2]{error}, 'rank killed: an SSE error event')
        or diag(substr($st->{raw}, -300));

    my $n = {};
    for (1 .. 300) {
        $n = ranks();
        last if $n->{0} && $n->{1} && keys %$n == 2
                && $n->{0} != $r->{0} && $n->{1} != $r->{1};
        sleep 0.1;
    }

    ok($n->{0} && $n->{1} && $n->{0} != $r->{0} && $n->{1} != $r->{1},
       'rank killed: both ranks started again');
    ok(vlm_wait_ready($srv, vlm_secs(30)), 'rank killed: the group is back');

    is(ask($two), $want, 'rank killed: the next image request, the same '
                         . 'answer');
    at_rest('rank killed, after', $mem0);
}

my $zone = vlm_wait_idle($srv, 5);
ok(defined $zone->{slots_used} && $zone->{slots_used} == 0,
   'every slot free');

VLMTest::check_log($srv, 'cuda-pool-faults', { allow => [
    qr/tensor parallel: rank process \d+ exited/,
    qr/\[alert\] .*vlm: engine \d+ exited/,
    qr/\[alert\] .*exited on signal 9/,
    qr/image .*(corrupt|decode|invalid)/i ] });

done_testing();
