# Empty things the chat handler copies: a body of no bytes (with a
# Content-Length of 0 and chunked), and non-streamed answers whose first
# text records are empty (the engine holds text back while it may begin
# a stop string).  Copying them once passed a null pointer to memcpy,
# which UBSan reports: under `make asan-nginx` (UBSan aborts the worker)
# these requests got no response at all.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'empty');
END { VLMTest::vlm_stop($srv) if $srv }


# a raw request on its own connection: the whole response
sub raw_request {
    my ($text) = @_;

    my $sock = VLMTest::connect_to($srv);
    local $SIG{PIPE} = 'IGNORE';
    print $sock $text;

    my $raw = '';
    my $sel = IO::Select->new($sock);

    while ($sel->can_read(30)) {
        my $n = sysread($sock, my $buf, 65536);
        last if !$n;
        $raw .= $buf;
    }

    close $sock;

    return VLMTest::parse_response($raw);
}


my $empty = '{"error":{"message":"The request body is empty: expected a '
            . 'JSON object.","type":"invalid_request_error","param":null,'
            . '"code":"invalid_json"}}';

for my $case (['Content-Length: 0', "Content-Length: 0\r\n\r\n"],
              ['chunked', "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"])
{
    my ($what, $tail) = @$case;

    my $res = raw_request("POST /v1/chat/completions HTTP/1.1\r\n"
                          . "Host: localhost\r\nConnection: close\r\n"
                          . "Content-Type: application/json\r\n" . $tail);

    is($res->{status}, 400, "empty body, $what: 400");
    is($res->{body}, $empty, "empty body, $what: invalid_json");
}


# the greedy answer streamed: its first token is U+FFFD, so a stop string
# that begins with it holds the first record's text back
my $base = { %{ vlm_chat_body('hi') }, max_tokens => 4, temperature => 0 };

my $st = vlm_post_json($srv, { %$base, stream => JSON::PP::true });
my $streamed = join '', map {
    ref $_ && $_->{choices} && @{ $_->{choices} }
        ? ($_->{choices}[0]{delta}{content} // '') : ''
} vlm_sse($st->{body});

like($streamed, qr/^\x{FFFD}./, 'the streamed answer begins with U+FFFD');

my $res = vlm_post_json($srv, { %$base, stop => ["\x{FFFD}x"] });
my $j = eval { vlm_json($res->{body}) };

is($res->{status}, 200, 'first text record empty: 200');
is($j && $j->{choices}[0]{message}{content}, $streamed,
   'first text record empty: the held-back text comes with the next');

$res = vlm_post_json($srv, { %$base, stop => ["\x{FFFD}"] });
$j = eval { vlm_json($res->{body}) };

is($res->{status}, 200, 'every text record empty: 200');
is($j && $j->{choices}[0]{message}{content}, '',
   'every text record empty: an empty answer');
is($j && $j->{choices}[0]{finish_reason}, 'stop',
   'every text record empty: finish_reason stop');

my $zone = vlm_wait_idle($srv);
is($zone->{slots_used}, 0, 'no slot left behind');

done_testing();
