# limit_rate composes with a streamed answer: the write filter delays the
# connection's write event, and the stream must go on when the delay is
# over (it used to stop after the first event until the client gave up).
# Each stream is compared with the same greedy answer streamed without a
# rate limit: every token arrives, then the finish chunk and [DONE].

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'limit-rate', locations => <<'_EOC_');
        location = /slow2k { limit_rate 2k; vlm_chat; }
        location = /slow600 { limit_rate 600; vlm_chat; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub stream_at {
    my ($path, $max_tokens) = @_;

    my $body = VLMTest::vlm_json_text({
        %{ vlm_chat_body('Count the shapes.') },
        stream => JSON::PP::true, max_tokens => $max_tokens,
        temperature => 0, stream_options => { include_usage => JSON::PP::true },
    });

    local $srv->{timeout} = 40;
    my $t0 = time;
    my $res = vlm_request($srv, 'POST', $path, $body);

    return ($res, time - $t0, [ vlm_sse($res->{body}) ]);
}


sub content_of {
    my ($ev) = @_;

    return join '', map {
        ref $_ && $_->{choices} && @{ $_->{choices} }
            ? ($_->{choices}[0]{delta}{content} // '') : ''
    } @$ev;
}


my ($ref, undef, $ref_ev) = stream_at('/v1/chat/completions', 48);
is($ref->{status}, 200, 'unlimited stream: 200');
is($ref_ev->[-1], '[DONE]', 'unlimited stream: [DONE]');
my ($ref_usage) = grep { ref $_ && $_->{usage} } @$ref_ev;
ok($ref_usage && $ref_usage->{usage}{completion_tokens} > 1,
   'unlimited stream: tokens were generated');

for my $case (['/slow2k', 48, 2048], ['/slow600', 16, 600]) {
    my ($path, $n, $rate) = @$case;

    my ($r0) = $n == 48 ? ($ref, $ref_ev)
                        : stream_at('/v1/chat/completions', $n);
    my @ev0 = $n == 48 ? @$ref_ev : vlm_sse($r0->{body});

    my ($res, $secs, $ev) = stream_at($path, $n);
    my ($u) = grep { ref $_ && $_->{usage} } @$ev;
    my ($u0) = grep { ref $_ && $_->{usage} } @ev0;
    my ($fin) = grep { ref $_ && $_->{choices} && @{ $_->{choices} }
                       && $_->{choices}[0]{finish_reason} } @$ev;

    is($res->{status}, 200, "$path: 200");
    is($ev->[-1], '[DONE]', "$path: the stream ends with [DONE]")
        or diag(substr($res->{raw}, -300));
    ok($fin, "$path: a finish_reason");
    is(content_of($ev), content_of(\@ev0),
       "$path: every token, the same text as without a limit");
    is($u && $u->{usage}{completion_tokens}, $u0->{usage}{completion_tokens},
       "$path: the same completion tokens");

    # the limit held: the body took about its size divided by the rate
    # (nginx lets the first second's worth through at once)
    my $min = length($res->{body}) / $rate - 1.5;
    ok($secs >= $min, sprintf("$path: %.1f s for %d bytes (at least %.1f)",
                              $secs, length $res->{body}, $min));
}

my $zone = vlm_wait_idle($srv);
is($zone->{slots_used}, 0, 'no slot left behind');

done_testing();
