# A reload that changes the engine's settings while streams run and more
# wait in the queue: vlm_max_running 8 -> 4 and 4 -> 8 (another number of
# request slots, so another queue: "queue geometry changed, the engine
# restarts").  The old engine finishes every request of the old queue,
# running or still queued; a request sent 0.2 s after the reload waits in
# the new queue and is answered by the new engine, which starts once the
# old one is done.  No stream may hang: each one ends with a finish_reason
# and [DONE].
#
# A plain Test::More script: streams, reloads and requests interleave.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select ();
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'settings', workers => 2,
                    http_config => <<'_EOC_');
    vlm_max_running 8;
    vlm_max_queued 8;
    vlm_max_tokens 4000;
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

my $tokens = 0 + ($ENV{VLM_RELOAD_TOKENS} || 1500);
my $long = { %{ vlm_chat_body('Tell me a long story.') }, temperature => 0,
             max_tokens => $tokens, stream => JSON::PP::true };
my $short = { %{ vlm_chat_body('hi') }, temperature => 0, max_tokens => 3 };


# reads every stream until the server closes it ($secs at most)
sub read_all {
    my ($streams, $secs) = @_;

    my %by = map { fileno($_->{sock}) => $_ } @$streams;
    my $sel = IO::Select->new(map { $_->{sock} } @$streams);
    my $deadline = time + $secs;

    while ($sel->count && time < $deadline) {
        for my $sock ($sel->can_read($deadline - time)) {
            my $n = sysread($sock, my $buf, 65536);

            if (!$n) {
                $sel->remove($sock);
                close $sock;
                next;
            }

            $by{fileno $sock}{raw} .= $buf;
        }
    }

    return $sel->count;
}


# reads the streams until one of them has content ($secs at most)
sub some_content {
    my ($streams, $secs) = @_;

    my %by = map { fileno($_->{sock}) => $_ } @$streams;
    my $sel = IO::Select->new(map { $_->{sock} } @$streams);
    my $deadline = time + vlm_secs($secs);

    while (time < $deadline) {
        return 1 if grep { $_->{raw} =~ /"content":"[^"]+"/ } @$streams;

        for my $sock ($sel->can_read($deadline - time)) {
            my $n = sysread($sock, my $buf, 65536);

            if (!$n) {
                $sel->remove($sock);
                next;
            }

            $by{fileno $sock}{raw} .= $buf;
        }
    }

    return 0;
}


sub finished {
    my ($st) = @_;

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    my ($fin) = grep { ref $_ && $_->{choices} && @{ $_->{choices} }
                       && $_->{choices}[0]{finish_reason} } @ev;

    return 'no [DONE]' if !@ev || $ev[-1] ne '[DONE]';
    return 'an error event' if grep { ref $_ && $_->{error} } @ev;
    return 'no finish_reason' if !$fin;
    return 'ok';
}


sub change {
    my ($from, $to, $n_streams) = @_;

    my $what = "vlm_max_running $from -> $to";
    my ($old) = vlm_engine_pids($srv);

    my @streams = map { vlm_open_stream($srv, $long) } 1 .. $n_streams;

    # the first ones run, the others wait in the queue; which ones run is
    # the workers' order, not the order the streams were opened in
    ok(some_content(\@streams, 10), "$what: the streams have begun");

    # every stream's request reaches the queue (a loaded machine may take
    # a while to read them all)
    my $m;
    for (1 .. 600) {
        $m = vlm_metrics($srv);
        last if $m->{vlm_queue_length} > 0;
        sleep 0.05;
    }

    ok($m->{vlm_queue_length} > 0, "$what: requests are queued "
       . "($m->{vlm_queue_length})");

    vlm_reload($srv, "vlm_max_running $from;", "vlm_max_running $to;");
    sleep 0.2;

    my $t0 = time;
    my $res = vlm_post_json($srv, $short);
    is($res->{status}, 200, "$what: a request sent 0.2 s after the reload "
       . "is served") or diag($res->{body});
    diag(sprintf "$what: that request took %.1f s", time - $t0);

    my $left = read_all(\@streams, vlm_secs($ENV{VLM_STREAM_WAIT} || 120));
    is($left, 0, "$what: every stream ended");

    my %why;
    $why{ finished($_) }++ for @streams;

    is($why{ok} // 0, $n_streams, "$what: every stream completed")
        or diag(join ', ', map { "$why{$_} $_" } sort keys %why);

    ok(vlm_wait_ready($srv, 30), "$what: the new engine serves");

    my @pids = vlm_engine_pids($srv);
    is(scalar @pids, 1, "$what: one engine");
    isnt($pids[0] // 0, $old, "$what: a new engine");

    my $h = vlm_health($srv);
    is($h->{_status}, 200, "$what: /health is ready");

    $m = vlm_metrics($srv);
    is($m->{vlm_max_running}, $to, "$what: /metrics has the new setting");

    my $zone = vlm_wait_idle($srv, 5);
    ok(defined $zone->{slots_used} && $zone->{slots_used} == 0
       && $zone->{arena_used} == 0, "$what: every slot free, arena used 0")
        or diag($VLMTest::JSON->encode($zone));

    VLMTest::check_log($srv, $what);
}

change(8, 4, 12);
change(4, 8, 8);

done_testing();
