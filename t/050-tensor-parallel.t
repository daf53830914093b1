# The engine as a tensor-parallel group (vlm_tensor_parallel 2): two rank
# processes, each on the CPU vlm_engine_cpus gives it, serve the same
# answers as one engine, text and image prompts (and a text prompt of
# about 900 tokens, in one step of vlm_max_prefill_tokens), streamed or
# not, the streamed ones from the prefix cache both ranks
# keep in step; a rank killed mid-stream takes the group down (the
# stream ends with an SSE error event and [DONE]), the supervisor starts
# both ranks again, and the next request gets the same answer; every slot
# and the arena are free at the end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $image = vlm_data_url('image/png', vlm_png(120, 80, 5));

my @asks = (
    [ 'text', vlm_chat_body('Tell me about the sea.') ],
    [ 'image', vlm_chat_body('Describe the picture.', $image) ],
    [ 'long text', vlm_chat_body(join ' ', map { "word$_" } 1 .. 300) ],
);


# the answers of a server: each prompt plain, and streamed
sub answers {
    my ($srv, $what) = @_;
    my %got;

    for my $a (@asks) {
        my ($name, $body) = @$a;

        my $res = vlm_post_json($srv, { %$body, max_tokens => 24,
                                        temperature => 0 });
        is($res->{status}, 200, "$what, $name: 200") or diag($res->{body});
        $got{$name} = vlm_json($res->{body})->{choices}[0]{message}{content};

        my $st = vlm_open_stream($srv, { %$body, max_tokens => 24,
                                         temperature => 0,
                                         stream => JSON::PP::true });
        vlm_read_some($st, 30);
        close $st->{sock};

        my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
        is($ev[-1], '[DONE]', "$what, $name streamed: [DONE]");
        $got{"$name streamed"} = join '', map {
            ref $_ && $_->{choices} && @{ $_->{choices} }
                ? $_->{choices}[0]{delta}{content} // '' : ''
        } @ev;
    }

    return \%got;
}


sub ranks {
    my $srv = shift;
    my %r;

    for my $pid (vlm_engine_pids($srv)) {
        open my $in, '<', "/proc/$pid/cmdline" or next;
        local $/;
        my @argv = split /\0/, <$in>;
        my ($rank) = join(' ', @argv) =~ /--rank (\d+)/;
        $r{$rank // 0} = $pid;
    }

    return \%r;
}


# the harness runs the engine with one thread (in each rank)
my $one = vlm_start(name => 'tp1', port => vlm_port(9));
my $want = answers($one, 'one engine');
VLMTest::vlm_stop($one);

my $srv = vlm_start(name => 'tp2', port => vlm_port(10), http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
    vlm_engine_cpus 0 1;
    vlm_max_tokens 4000;
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

my $r = ranks($srv);
ok($r->{0} && $r->{1} && keys %$r == 2, 'two rank processes')
    or diag(join ' ', %$r);

# vlm_engine_cpus: each rank on its own CPU
for my $rank (0, 1) {
    open my $in, '<', "/proc/$r->{$rank}/status" or next;
    my ($cpus) = join('', <$in>) =~ /^Cpus_allowed_list:\s*(\S+)/m;
    is($cpus, $rank, "rank $rank runs on CPU $rank");
}

my $got = answers($srv, "two ranks");
ok(length($want->{$_}) > 10, "one engine, $_: an answer of some length")
    for sort keys %$want;

for my $k (sort keys %$want) {
    is($got->{$k}, $want->{$k}, "two ranks, $k: the answer of one engine");
}

# /metrics: the group's size and its collectives
{
    my $m = vlm_metrics($srv);

    # the streamed asks resent the plain ones: both ranks mapped the same
    # cached blocks (or the answers above would differ)
    cmp_ok($m->{vlm_prefix_cache_hits_tokens_total}, '>', 0,
           'metrics: the prefix cache served both ranks');
    is($m->{vlm_tensor_parallel_ranks}, 2, 'metrics: two ranks');
    cmp_ok($m->{vlm_tensor_parallel_collectives_total}, '>', 100,
           'metrics: the collectives of the requests so far');
    cmp_ok($m->{vlm_tensor_parallel_collective_seconds_total}, '>', 0,
           'metrics: and their time');
}

# --- rank 1 is killed mid-stream

{
    my $st = vlm_open_stream($srv, { %{ vlm_chat_body('Tell me a story.') },
                                     temperature => 0, max_tokens => 4000,
                                     stream => JSON::PP::true });
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){5}/s),
       'rank killed: the stream has begun');

    kill 'KILL', $r->{1};

    vlm_read_some($st, 15);
    close $st->{sock};

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    is($ev[-1], '[DONE]', 'rank killed: the stream ends with [DONE]');
    my $err = ref $ev[-2] ? $ev[-2]{error} : undef;
    ok($err, 'rank killed: an SSE error event before [DONE]')
        or diag(substr($st->{raw}, -300));

    # the old rank 0 notices, ends the stream and exits; the supervisor
    # starts a new group
    my $n = {};
    for (1 .. 200) {
        $n = ranks($srv);
        last if $n->{0} && $n->{1} && keys %$n == 2
                && $n->{0} != $r->{0} && $n->{1} != $r->{1};
        sleep 0.1;
    }

    ok($n->{0} && $n->{1} && keys %$n == 2
       && $n->{0} != $r->{0} && $n->{1} != $r->{1},
       'rank killed: two new rank processes') or diag(join ' ', %$n);
    ok(vlm_wait_ready($srv, 20), 'rank killed: the group is back');

    my $res = vlm_post_json($srv, { %{ $asks[1][1] }, max_tokens => 24,
                                    temperature => 0 });
    is($res->{status}, 200, 'rank killed: the next request is served');
    is(vlm_json($res->{body})->{choices}[0]{message}{content},
       $want->{image}, 'rank killed: with the answer of one engine');
}

my $zone = vlm_wait_idle($srv, 3);
ok(defined $zone->{slots_used} && $zone->{slots_used} == 0
   && $zone->{arena_used} == 0, 'every slot free, arena used 0');

VLMTest::check_log($srv, 'tp2', { allow => [
    qr/tensor parallel: rank process \d+ exited/,
    qr/\[alert\] .*vlm: engine \d+ exited/,
    qr/\[alert\] .*exited on signal 9/ ] });

my @left = VLMTest::vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'no rank process is left after the stop');

done_testing();
