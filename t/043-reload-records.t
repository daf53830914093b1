# Reloads under load: 30 "nginx -s reload"s, one a second, while 12
# clients keep long streams open (each new stream starts as the last one
# ends; each client reads slowly, so a stream lasts seconds however fast
# the engine is).  The workers of each reload live on until their streams finish,
# so many generations of workers run side by side; each needs a notify
# record in the request queue only while a request of its own is there.
# Every request must be answered in full: status 200, every stream ends
# with a finish_reason and [DONE], no error event, nothing answered 503.
# Then every slot is free and the log has no alert.
#
# A plain Test::More script (the reloads and the clients run side by
# side, which Test::Nginx::Socket blocks cannot express).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select ();
use POSIX qw(WNOHANG _exit);
use Socket qw(PF_INET SOCK_STREAM SOL_SOCKET SO_RCVBUF inet_aton
              pack_sockaddr_in);
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $clients = 12;
my $reloads = 30;

# small socket buffers: a slow reader holds its stream
my $srv = vlm_start(name => 'records', workers => 2, listen => 'sndbuf=4k',
                    http_config => <<'_EOC_');
    vlm_max_running 4;
    vlm_max_queued 12;
    vlm_max_tokens 4000;
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

# a stream of a few seconds at the clients' pace
my $tokens = 0 + ($ENV{VLM_RELOAD_TOKENS} || 1000);
my $pace = 2048;                    # bytes a client reads every 50 ms
my $body = { %{ vlm_chat_body('Tell me a long story.') }, temperature => 0,
             max_tokens => $tokens, stream => JSON::PP::true };

# a stream request on a socket with a small receive buffer, so that what
# the client has not read holds nginx and the engine back
sub open_slow_stream {
    my $sock;

    socket($sock, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
    setsockopt($sock, SOL_SOCKET, SO_RCVBUF, 4096) or die "rcvbuf: $!";
    connect($sock, pack_sockaddr_in($srv->{port}, inet_aton('127.0.0.1')))
        or return undef;

    local $SIG{PIPE} = 'IGNORE';
    syswrite $sock, VLMTest::request_text('POST', '/v1/chat/completions',
                                          $VLMTest::JSON->encode($body));

    return { sock => $sock, raw => '' };
}


# reads a stream to its end at the client's pace
sub read_slowly {
    my ($st, $secs) = @_;

    my $sel = IO::Select->new($st->{sock});
    my $deadline = time + $secs;

    while (time < $deadline && $sel->can_read($deadline - time)) {
        my $n = sysread($st->{sock}, my $buf, $pace);
        last if !$n;
        $st->{raw} .= $buf;
        sleep 0.05;
    }

    close $st->{sock};
}

my $t0 = time;
my $st = open_slow_stream() or die "connect: $!";
read_slowly($st, 60);
diag(sprintf "one stream of %d tokens alone: %.1f s", $tokens, time - $t0);

# each client writes one line per request: "ok" or why not
my $dir = "$srv->{prefix}/clients";
mkdir $dir or die "$dir: $!";

my $deadline = time + $reloads + 2;
my @kids;

for my $c (1 .. $clients) {
    my $pid = fork;
    die "fork: $!" if !defined $pid;

    if ($pid == 0) {
        open my $out, '>', "$dir/$c" or _exit(1);
        $out->autoflush(1);

        while (time < $deadline) {
            my $s = open_slow_stream();

            if (!$s) {
                print $out "connect: $!\n";
                sleep 0.1;
                next;
            }

            read_slowly($s, 120);

            my $res = VLMTest::parse_response($s->{raw});
            my @ev = vlm_sse($res->{body});
            my ($fin) = grep { ref $_ && $_->{choices} && @{ $_->{choices} }
                               && $_->{choices}[0]{finish_reason} } @ev;

            if ($res->{status} != 200) {
                my $why = $res->{body} // '';
                $why =~ s/\s+/ /g;
                print $out "status $res->{status}: ", substr($why, 0, 200),
                           "\n";

            } elsif (grep { ref $_ && $_->{error} } @ev) {
                print $out "error event\n";

            } elsif (!$fin || $ev[-1] ne '[DONE]') {
                print $out "unfinished stream\n";

            } else {
                print $out "ok\n";
            }
        }

        close $out;
        _exit(0);
    }

    push @kids, $pid;
}

# let every client's first stream begin
sleep 1;

my $down = 0;

for my $i (1 .. $reloads) {
    vlm_reload($srv);
    sleep 1;
    $down++ if !vlm_alive($srv->{pid});
}

is($down, 0, "the master lived through $reloads reloads");

for my $pid (@kids) {
    waitpid $pid, 0;
}

my (%why, $n, $ok);

for my $c (1 .. $clients) {
    open my $in, '<', "$dir/$c" or next;

    while (my $l = <$in>) {
        chomp $l;
        $n++;
        $l eq 'ok' ? $ok++ : $why{$l}++;
    }

    close $in;
}

$n //= 0;
$ok //= 0;

diag("$n requests over $reloads reloads, $ok answered in full");
ok($n >= $clients, "every client made requests ($n)");
is($n - $ok, 0, 'no request failed')
    or diag(join "\n", map { "$why{$_} x $_" } sort keys %why);

my $zone = vlm_wait_idle($srv, 10);
ok(defined $zone->{slots_used} && $zone->{slots_used} == 0
   && $zone->{arena_used} == 0, 'every slot free, arena used 0')
    or diag($VLMTest::JSON->encode($zone));

my $h = vlm_health($srv);
is($h->{_status}, 200, '/health: ready after the reloads')
    or diag($VLMTest::JSON->encode($h));

VLMTest::check_log($srv, 'reloads', qr/no free worker record/);

done_testing();
