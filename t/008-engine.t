# The engine process under nginx's master (two workers): killed with -9
# mid-stream (the stream ends with an SSE error event and [DONE], the
# engine comes back, the next request is served, engine_restarts is 1),
# nginx reloaded mid-stream (the stream completes, the same engine keeps
# serving: no model reload), reloaded mid-stream with other engine
# settings (the old engine drains: the stream completes, a request queued
# meanwhile is served by the new engine), clients that disconnect mid-stream or while
# queued (their slots come back within a second and the engine stops
# generating for them), a client that does not read (held without
# spinning), a worker killed mid-stream, a stop that leaves no engine
# behind, and the same without a master process.  After
# every scenario every slot is free and the arena is empty.  Plain
# Test::More: killing the engine mid-stream is orchestration that
# Test::Nginx::Socket blocks cannot express.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(sysconf _SC_CLK_TCK);
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

# small socket buffers, so that a client that does not read holds its
# stream in the engine
my $srv = vlm_start(name => 'engine', workers => 2, listen => 'sndbuf=4k',
                    http_config => <<'_EOC_');
    vlm_max_running 1;
    vlm_max_queued 4;
    vlm_max_tokens 4000;
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

my $long = { %{ vlm_chat_body('Tell me a long story.') }, temperature => 0,
             max_tokens => 4000, stream => JSON::PP::true };


sub idle_ok {
    my ($what) = @_;

    my $zone = vlm_wait_idle($srv, 3);

    ok(defined $zone->{slots_used} && $zone->{slots_used} == 0
       && $zone->{arena_used} == 0,
       "$what: every slot free, arena used 0")
        or diag($VLMTest::JSON->encode($zone));
}


sub itl_count {
    return vlm_metrics($srv)->{vlm_inter_token_latency_seconds_count};
}


# --- the engine is killed mid-stream

{
    my @pids = vlm_engine_pids($srv);
    is(scalar @pids, 1, 'crash: one engine');

    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){5}/s),
       'crash: the stream has begun');

    kill 'KILL', $pids[0];

    vlm_read_some($st, 15);
    close $st->{sock};

    my $raw = $st->{raw};
    my ($body) = $raw =~ /\r\n\r\n(.*)\z/s;
    my @ev = vlm_sse(VLMTest::parse_response($raw)->{body});

    like($raw, qr{^HTTP/1\.1 200 }, 'crash: the stream had started');
    is($ev[-1], '[DONE]', 'crash: the stream ends with [DONE]');

    my $err = ref $ev[-2] ? $ev[-2]{error} : undef;
    ok($err, 'crash: an SSE error event before [DONE]');
    is($err->{type}, 'server_error', 'crash: a server_error') if $err;
    like($err->{message} // '', qr/engine stopped unexpectedly/,
         'crash: the message says the engine stopped');
    ok(!grep({ ref $_ && $_->{choices} && @{ $_->{choices} }
               && $_->{choices}[0]{finish_reason} } @ev),
       'crash: no finish_reason');

    my $t0 = time;
    ok(vlm_wait_ready($srv, 10), 'crash: the engine is back');
    my $back = time - $t0;
    ok($back < 5, sprintf('crash: ready again within 5 s (%.2f s)', $back));

    my @new = vlm_engine_pids($srv);
    is(scalar @new, 1, 'crash: one engine again');
    isnt($new[0], $pids[0], 'crash: a new engine process');

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                    max_tokens => 4, temperature => 0 });
    is($res->{status}, 200, 'crash: the next request is served');
    is(vlm_json($res->{body})->{usage}{completion_tokens}, 4,
       'crash: with its four tokens');

    my $m = vlm_metrics($srv);
    is($m->{vlm_engine_restarts_total}, 1, 'crash: engine_restarts 1');
    is($m->{vlm_engine_up}, 1, 'crash: engine up');
    is($m->{'vlm_requests_total{status="503"}'}, 1,
       'crash: the failed stream is counted as a 503');

    idle_ok('crash');
    # the helper process reports its child's death, the supervisor its
    # consequence; nothing else
    VLMTest::check_log($srv, 'crash', { allow => [
        qr/\[alert\] .*process $pids[0] exited on signal 9/,
        qr/\[alert\] .*vlm: engine $pids[0] exited: .*; 1 running requests/,
        qr/\[error\] .*vlm: 503 : the inference engine stopped/ ] },
        qr/\[error\]/);
}

# --- a client gone mid-stream: the engine stops generating for it

{
    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){5}/s),
       'disconnect: the stream has begun');

    close $st->{sock};
    my $t0 = time;

    my $zone;
    while (time - $t0 < 1) {
        $zone = vlm_health($srv)->{zone};
        last if $zone->{slots_used} == 0;
        sleep 0.02;
    }

    is($zone->{slots_used}, 0, sprintf('disconnect: slot free after %.2f s',
                                       time - $t0));

    my $c1 = itl_count();
    sleep 0.3;
    my $c2 = itl_count();
    is($c2, $c1, "disconnect: the engine generates no more tokens ($c2)");

    idle_ok('disconnect');
}

# --- a client gone while queued behind a running request

{
    my $a = vlm_open_stream($srv, $long);
    ok(vlm_read_some($a, 10, qr/"content":"[^"]+"/),
       'queued: the first stream runs');

    # the running one is not read any more: the engine holds it
    my $b = vlm_open_stream($srv, $long);

    my ($zone, $t0);
    $t0 = time;
    while (time - $t0 < 3) {
        $zone = vlm_health($srv)->{zone};
        last if $zone->{slots_used} == 2;
        sleep 0.02;
    }

    is($zone->{slots_used}, 2, 'queued: two slots in use');

    # a slot is taken before its images and prompt are prepared; it is
    # queued once they are
    my $queued;
    $t0 = time;
    while (time - $t0 < 3) {
        $queued = vlm_metrics($srv)->{vlm_queue_length};
        last if $queued == 1;
        sleep 0.02;
    }

    is($queued, 1, 'queued: one waits');

    close $b->{sock};
    $t0 = time;

    while (time - $t0 < 1) {
        $zone = vlm_health($srv)->{zone};
        last if $zone->{slots_used} == 1;
        sleep 0.02;
    }

    is($zone->{slots_used}, 1,
       sprintf('queued: its slot is free after %.2f s', time - $t0));
    is(vlm_metrics($srv)->{vlm_queue_length}, 0, 'queued: none waits');

    close $a->{sock};
    idle_ok('queued');

    my $c1 = itl_count();
    sleep 0.3;
    is(itl_count(), $c1, 'queued: the engine generates nothing more');

    my $m;
    for (1 .. 30) {
        $m = vlm_metrics($srv);
        last if !$m->{'vlm_pool_used{pool="sequences",unit="slots"}'};
        sleep 0.1;
    }

    is($m->{'vlm_pool_used{pool="sequences",unit="slots"}'}, 0,
       'queued: the engine has no sequence left');
    is($m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'}, 0,
       'queued: nor any KV block');
}

# --- a client that does not read: the engine holds its stream without
# spinning, and the stream completes once it is read

{
    my ($pid) = vlm_engine_pids($srv);
    my $cpu = sub {
        open my $in, '<', "/proc/$pid/stat" or return 0;
        my @f = split ' ', scalar <$in>;
        return ($f[13] + $f[14]) / sysconf(_SC_CLK_TCK);
    };

    my $st = vlm_open_stream($srv, $long);
    setsockopt($st->{sock}, SOL_SOCKET, SO_RCVBUF, 4096);
    ok(vlm_read_some($st, 10, qr/"content":"[^"]+"/),
       'slow reader: the stream has begun');

    # the buffers on the way fill up, then the engine holds the stream
    my ($c1, $c0) = (itl_count(), -1);
    for (1 .. 20) {
        last if $c1 == $c0;
        sleep 0.5;
        ($c0, $c1) = ($c1, itl_count());
    }

    my $t0 = $cpu->();
    sleep 1;
    my $used = $cpu->() - $t0;
    my $c2 = itl_count();

    ok($c2 == $c1, "slow reader: the engine holds the stream ($c1 -> $c2 "
       . "tokens)");
    ok($used < 0.3, sprintf('slow reader: the engine waits without '
                            . 'spinning (%.2f s of CPU in 1 s)', $used));

    my $open = vlm_read_some($st, 30);
    close $st->{sock};

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    my ($fin) = grep { ref $_ && $_->{choices} && @{ $_->{choices} }
                       && $_->{choices}[0]{finish_reason} } @ev;

    is($ev[-1], '[DONE]', 'slow reader: the stream ends with [DONE]')
        or diag("open $open: " . substr($st->{raw}, -600));
    is($fin && $fin->{choices}[0]{finish_reason}, 'length',
       'slow reader: all of it (finish_reason length)');

    idle_ok('slow reader');
}

# --- nginx reloaded mid-stream: the stream completes, same engine

{
    my @pids = vlm_engine_pids($srv);
    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){5}/s),
       'reload: the stream has begun');

    kill 'HUP', $srv->{pid};

    vlm_read_some($st, 30);
    close $st->{sock};

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    my ($fin) = grep { ref $_ && $_->{choices} && @{ $_->{choices} }
                       && $_->{choices}[0]{finish_reason} } @ev;

    is($ev[-1], '[DONE]', 'reload: the stream ends with [DONE]');
    is($fin && $fin->{choices}[0]{finish_reason}, 'length',
       'reload: the stream completed (finish_reason length)');
    ok(!grep({ ref $_ && $_->{error} } @ev), 'reload: no error event');

    ok(vlm_wait_ready($srv, 5), 'reload: ready');
    is_deeply([vlm_engine_pids($srv)], \@pids,
              'reload: the same engine process (no model reload)');

    my $h = vlm_health($srv);
    is($h->{zone}{reloads}, 1, 'reload: the zone saw one reload');

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                    max_tokens => 3, temperature => 0 });
    is($res->{status}, 200, 'reload: the new workers serve');

    idle_ok('reload');
    VLMTest::check_log($srv, 'reload');
}

# --- reloaded mid-stream with other engine settings: the old engine
# drains (the stream completes, a request queued meanwhile waits and is
# served by the new engine), then one new engine, one restart, and the old
# helper process leaves the engine to the new one

{
    my @pids = vlm_engine_pids($srv);
    my $r0 = vlm_metrics($srv)->{vlm_engine_restarts_total};

    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){5}/s),
       'new settings: the stream has begun');

    vlm_reload($srv, 'vlm_engine_threads 1;', 'vlm_engine_threads 2;');

    # wait for the new workers; vlm_max_running 1 queues this one
    sleep 0.5;
    my $queued = vlm_open_stream($srv, { %$long, max_tokens => 3 });

    vlm_stream_ok($st, 'new settings: the draining stream', 'length');
    vlm_stream_ok($queued, 'new settings: the request queued while draining',
                  'length');

    my @new;
    for (1 .. 100) {
        @new = vlm_engine_pids($srv);
        last if @new == 1 && $new[0] != $pids[0]
                && vlm_health($srv)->{_status} == 200;
        sleep 0.1;
    }

    is(scalar @new, 1, 'new settings: one engine');
    isnt($new[0], $pids[0], 'new settings: a new engine');

    # the old helper's last timers would have seen the old engine die
    sleep 1;
    is_deeply([vlm_engine_pids($srv)], \@new, 'new settings: still that one');
    is(vlm_metrics($srv)->{vlm_engine_restarts_total} - $r0, 1,
       'new settings: engine_restarts went up by one');

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                    max_tokens => 3, temperature => 0 });
    is($res->{status}, 200, 'new settings: served');

    idle_ok('new settings');
    VLMTest::check_log($srv, 'new settings');
}

# --- a worker killed mid-stream: the supervisor frees what it held

{
    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/"content":"[^"]+"/),
       'worker killed: the stream has begun');

    my $port = $srv->{port};
    my ($worker) = `ss -Htnp state established '( sport = :$port )'`
                   =~ /pid=(\d+)/;

    ok($worker && $worker != $srv->{pid}, 'worker killed: its worker found');
    kill 'KILL', $worker if $worker;
    close $st->{sock};

    idle_ok('worker killed');

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                    max_tokens => 3, temperature => 0 });
    is($res->{status}, 200, 'worker killed: the new worker serves');

    VLMTest::check_log($srv, 'worker killed', { allow => [
        qr/\[alert\] .*worker process $worker exited on signal 9/ ] });
}

# --- stop: nothing left behind

{
    my @left = vlm_stop($srv);
    undef $srv;
    is(scalar @left, 0, 'stop: no engine process left');
}

# --- without a master: the single process supervises the engine from a
# timer, and its client connections are not inherited by the engine

{
    $srv = vlm_start(name => 'single', master => 'off',
                     http_config => "    vlm_max_tokens 4000;\n");

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                    max_tokens => 3, temperature => 0 });
    is($res->{status}, 200, 'single process: served');

    my ($pid) = vlm_engine_pids($srv);
    my @socks = grep { (readlink($_) // '') =~ /^socket:/ }
                glob "/proc/$pid/fd/*";
    is(scalar @socks, 0, 'single process: the engine holds no socket');

    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/"content":"[^"]+"/),
       'single process: the stream has begun');

    kill 'KILL', $pid;
    vlm_read_some($st, 10);
    close $st->{sock};

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    is($ev[-1], '[DONE]', 'single process: the stream ends with [DONE]');
    ok(ref $ev[-2] && $ev[-2]{error}, 'single process: after an error');

    ok(vlm_wait_ready($srv, 10), 'single process: the engine is back');
    $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                 max_tokens => 3, temperature => 0 });
    is($res->{status}, 200, 'single process: served again');
    is(vlm_metrics($srv)->{vlm_engine_restarts_total}, 1,
       'single process: engine_restarts 1');

    idle_ok('single process');

    my @left = vlm_stop($srv);
    undef $srv;
    is(scalar @left, 0, 'single process: no engine process left');
}

done_testing();
