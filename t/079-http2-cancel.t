# HTTP/2 cancels (RST_STREAM) free the engine's sequence at once, as a
# closed HTTP/1.1 connection does: a stream stalled on flow control (the
# client's window is 0, so not a byte of the answer can go out) and a
# stream still queued behind a running one are both cancelled within a
# second, counted as 499 in vlm_requests_total, and the queued one is
# never run.  A plain HTTP/2 client (prior knowledge, cleartext) written
# here: frames by hand, headers as HPACK literals.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select ();
use IO::Socket::INET ();
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $h2port = vlm_port(28);
my $srv = vlm_start(name => 'http2-cancel', port => vlm_port(27),
                    http_config => <<"_EOC_");
    vlm_max_running 1;

    server {
        listen 127.0.0.1:$h2port http2;

        location = /v1/chat/completions { vlm_chat; }
    }
_EOC_

END { VLMTest::vlm_stop($srv) if $srv && $srv->{pid} }


sub frame {
    my ($type, $flags, $sid, $payload) = @_;

    my $len = length $payload;

    return pack('C3 C C N', $len >> 16, ($len >> 8) & 0xff, $len & 0xff,
                $type, $flags, $sid) . $payload;
}


# an HPACK literal header field without indexing, a new name
sub literal {
    my ($name, $value) = @_;

    return "\x00" . chr(length $name) . $name . chr(length $value) . $value;
}


# a connection whose streams get no window: the server can send headers,
# not a byte of a body
sub h2_connect {
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $h2port, Proto => 'tcp')
        or die "connect: $!";

    print {$sock} "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                  . frame(4, 0, 0, pack('nN', 4, 0))     # INITIAL_WINDOW 0
                  . frame(4, 1, 0, '');                  # ACK theirs

    return $sock;
}


sub h2_post {
    my ($sock, $sid, $body) = @_;

    my $headers = literal(':method', 'POST') . literal(':scheme', 'http')
                  . literal(':path', '/v1/chat/completions')
                  . literal(':authority', 'localhost')
                  . literal('content-type', 'application/json')
                  . literal('content-length', length $body);

    print {$sock} frame(1, 0x4, $sid, $headers)          # END_HEADERS
                  . frame(0, 0x1, $sid, $body);          # END_STREAM
}


sub h2_cancel {
    my ($sock, $sid) = @_;

    print {$sock} frame(3, 0, $sid, pack('N', 0x8));     # CANCEL
}


# waits until what($zone, $metrics) holds; returns the seconds it took,
# or undef
sub within {
    my ($secs, $what) = @_;

    my $t0 = time;

    while (time - $t0 < $secs) {
        my $h = vlm_health($srv);
        return time - $t0 if $what->($h->{zone} || {}, vlm_metrics($srv));
        sleep 0.05;
    }

    return undef;
}


# 1000 tokens, none of which can leave: ignore_eos, or the random model's
# end of text, drawn now and then in the first tokens, would end the
# request in the engine before the checks below see it run
my $long = VLMTest::vlm_json_text({ %{ vlm_chat_body('Tell a story.') },
                                    max_tokens => 1000,
                                    ignore_eos => JSON::PP::true,
                                    stream => JSON::PP::true });

my $m0 = vlm_metrics($srv);
my $c499 = 'vlm_requests_total{status="499"}';

# --- a stream stalled on flow control, cancelled

my $sock = h2_connect();
h2_post($sock, 1, $long);

ok(defined within(vlm_secs(10), sub { $_[0]{slots_used} == 1
                                      && $_[1]{vlm_running_requests} == 1 }),
   'stalled: the engine runs the HTTP/2 request');

sleep 0.5;
is(vlm_health($srv)->{zone}{slots_used}, 1,
   'stalled: it holds its slot while the client reads nothing');

h2_cancel($sock, 1);

my $took = within(vlm_secs(2), sub { $_[0]{slots_used} == 0
                                     && $_[1]{vlm_running_requests} == 0 });
ok(defined $took, 'stalled: RST_STREAM frees its slot and sequence at once')
    and diag(sprintf 'freed in %.2f s', $took);

my $m1 = vlm_metrics($srv);
is(($m1->{$c499} || 0) - ($m0->{$c499} || 0), 1,
   'stalled: counted as 499');

# --- queued behind a running request, cancelled

# the engine looks each prompt it starts up in the prefix cache
my $looked = 'vlm_prefix_cache_queries_tokens_total';
my $q0 = vlm_metrics($srv)->{$looked} || 0;

my $busy = h2_connect();
h2_post($busy, 1, $long);
ok(defined within(vlm_secs(10), sub { $_[1]{vlm_running_requests} == 1 }),
   'queued: one request runs (vlm_max_running 1)');
# the engine publishes its counters after the step that took the
# request, a moment after the slot shows it running
ok(defined within(vlm_secs(5), sub { ($_[1]{$looked} || 0) > $q0 }),
   'queued: the engine looked its prompt up');

h2_post($sock, 3, $long);
ok(defined within(vlm_secs(5), sub { $_[0]{slots_used} == 2
                                     && $_[1]{vlm_queue_length} == 1 }),
   'queued: a second one waits in the queue');

my $q1 = vlm_metrics($srv)->{$looked} || 0;

h2_cancel($sock, 3);

ok(defined within(vlm_secs(2), sub { $_[0]{slots_used} == 1
                                     && $_[1]{vlm_queue_length} == 0 }),
   'queued: RST_STREAM takes it out of the queue at once');

h2_cancel($busy, 1);
ok(defined within(vlm_secs(2), sub { $_[0]{slots_used} == 0 }),
   'queued: the running one cancelled too, every slot is back');

my $m2 = vlm_metrics($srv);
is(($m2->{$c499} || 0) - ($m1->{$c499} || 0), 2,
   'queued: both counted as 499');
is($m2->{$looked} || 0, $q1, 'queued: the cancelled request was never run');

close $sock;
close $busy;

# HTTP/2 still serves a whole request
my $ok = h2_connect();
print {$ok} frame(4, 0, 0, pack('nN', 4, 65535));       # a window now
h2_post($ok, 1, VLMTest::vlm_json_text({ %{ vlm_chat_body('Hello') },
                                         max_tokens => 4 }));
my ($raw, $sel) = ('', IO::Select->new($ok));
while ($raw !~ /"finish_reason"/ && $sel->can_read(vlm_secs(10))) {
    last if !sysread($ok, my $buf, 65536);
    $raw .= $buf;
}
like($raw, qr/"finish_reason"/, 'a request with a window is answered');
close $ok;

VLMTest::check_log($srv, 'http2-cancel');

done_testing();
