# Preemption: a KV cache too small for every running sequence.  The
# serving fixture takes 512 bytes a token, so vlm_kv_cache 128k holds 256
# tokens (16 blocks of 16), one context of vlm_max_model_len 256.  Each
# request (a prompt of about 50 tokens, up to 200 more; one with a
# picture, one held to JSON by response_format) alone fits and is never
# preempted (vlm_preemptions_total stays 0): its text, one at a time,
# greedy or drawn with a seed and penalties, is the unpreempted run.
# Queued together while the engine is stopped, so that they start in one
# step, they need about three times the cache: the engine preempts the
# youngest sequence when a step has no room, gives its blocks back and
# recomputes its prompt and the tokens it drew later.  Every stream
# completes with the same text, and every non-streamed answer with the
# same text and number of tokens (none sent twice, none lost), and
# vlm_preemptions_total has counted them.  A sequence the whole cache
# cannot hold alone cannot be configured: nginx -t refuses a
# vlm_max_model_len over what vlm_kv_cache holds (t/087-model-sizes.t); a
# prompt past vlm_max_model_len is a 400 that names it, here too.  All of
# it twice: one engine, then a tensor-parallel group of two, whose ranks
# each hold 128k of their own heads' KV (512 tokens: the four need about
# one and a half times that).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

vlm_prereqs();

my @prompts = map { "Tell me a story, number $_." } 1 .. 4;


# greedy, then drawn with a seed and penalties: a sampler that went on
# from another place of its random stream, or forgot the counts of what
# it drew, would not give the same text
# the third with a picture: recomputed through the model's prefill; the
# fourth held to JSON: its grammar's state goes on where it was
my $png = vlm_png(64, 64, 3);
my $i = 0;
my @bodies = map {
    my $seeded = $i++ % 2;
    +{
        %{ vlm_chat_body($_, $i == 3 ? vlm_data_url('image/png', $png)
                                     : ()) },
        max_tokens => 200,
        $seeded ? (temperature => 1.0, seed => 1000 + $i,
                   frequency_penalty => 0.5, presence_penalty => 0.3)
                : (temperature => 0),
        $i == 4 ? (response_format => { type => 'json_object' }) : (),
    }
} @prompts;


sub body {
    my ($k, $stream) = @_;

    return { %{ $bodies[$k] },
             stream => $stream ? JSON::PP::true() : JSON::PP::false() };
}


# opens a request for each body, all of them queued before the engine
# takes any: its processes are stopped (SIGSTOP) until the queue holds
# them all, so that they start in one step and need more than the cache
# at once however the machine schedules the client, nginx and the ranks
sub together {
    my ($srv, @bodies) = @_;

    my @pids = vlm_engine_pids($srv);
    ok(@pids > 0, 'the engine processes are found') or return;

    kill 'STOP', @pids;

    # the engine goes on whatever happens here
    my ($queued, @st) = (0);
    my $ok = eval {
        @st = map { vlm_open_stream($srv, $_) } @bodies;
        my $deadline = time + vlm_secs(10);

        while (time < $deadline) {
            $queued = vlm_metrics($srv)->{vlm_queue_length} // 0;
            last if $queued == @bodies;
            select(undef, undef, undef, 0.02);
        }

        1;
    };

    kill 'CONT', @pids;
    die $@ if !$ok;
    is($queued, scalar @bodies, 'all of them queued before the engine '
                                . 'takes one');

    return @st;
}


# the same requests alone, then together, on a server
sub check {
    my ($srv, $as) = @_;

    # the unpreempted run: one request at a time
    my (@want, @want_tokens);
    my $total = 0;

    for my $k (0 .. $#prompts) {
        my $p = $prompts[$k];
        my $res = vlm_post_json($srv, body($k, 0));
        is($res->{status}, 200, "$as, alone: $p") or diag($res->{body});
        my $j = vlm_json($res->{body});
        push @want, $j->{choices}[0]{message}{content};
        push @want_tokens, $j->{usage}{completion_tokens};
        $total += $j->{usage}{total_tokens};
    }

    like($want[3], qr/^\{/, "$as, alone: the fourth answer is JSON");
    cmp_ok($total, '>', 2 * 256,
           "$as: together they want more than twice the cache ($total)");

    is(vlm_metrics($srv)->{vlm_preemptions_total}, 0,
       "$as, one sequence at a time: no preemption");


    # all at once: streams, then plain answers
    for my $stream (1, 0) {
        my $what = $stream ? 'stream' : 'answer';
        my $before = vlm_metrics($srv)->{vlm_preemptions_total};
        my @st = together($srv, map { body($_, $stream) } 0 .. $#prompts);
        my $deadline = time + vlm_secs(60);

        for my $st (@st) {
            while (time < $deadline && vlm_read_some($st, 1)) { }
            close $st->{sock};
        }

        for my $i (0 .. $#st) {
            my $res = VLMTest::parse_response($st[$i]{raw});
            is($res->{status}, 200, "$as, together, $what $i: 200");

            if (!$stream) {
                my $j = eval { vlm_json($res->{body}) } || {};
                is($j->{choices}[0]{message}{content}, $want[$i],
                   "$as, together, $what $i: the text of the unpreempted run");
                is($j->{usage}{completion_tokens}, $want_tokens[$i],
                   "$as, together, $what $i: as many tokens");
                next;
            }

            my @ev = vlm_sse($res->{body});
            my ($text, $chunks, $finish, $usage) = ('', 0, undef, undef);

            for my $e (@ev) {
                next if !ref $e;
                my $c = $e->{choices} && $e->{choices}[0];
                if ($c && defined $c->{delta}{content}) {
                    $text .= $c->{delta}{content};
                    $chunks++;
                }
                $finish = $c->{finish_reason} if $c && $c->{finish_reason};
            }

            ok(!grep({ ref $_ && ($_->{error} || $_->{_bad}) } @ev),
               "$as, together, $what $i: no error event");
            is($ev[-1], '[DONE]', "$as, together, $what $i: ends with [DONE]");
            is($text, $want[$i],
               "$as, together, $what $i: the text of the unpreempted run");
            ok(defined $finish, "$as, together, $what $i: a finish_reason");
        }

        my $n = vlm_metrics($srv)->{vlm_preemptions_total} - $before;
        cmp_ok($n, '>', 0,
               "$as, together, ${what}s: sequences were preempted ($n)");
    }

    # the pools are back at rest: no block held for a preempted sequence
    my $zone = vlm_wait_idle($srv, 5);
    is($zone->{slots_used}, 0, "$as, every request slot is back");
    my $used;
    for (1 .. 50) {
        $used = vlm_metrics($srv)
                ->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'};
        last if defined $used && $used == 0;
        select(undef, undef, undef, 0.1);
    }
    is($used, 0, "$as, no KV block is used by a sequence");
}


# one engine, then a tensor-parallel group of two (whose ranks preempt
# and recompute together, as they make every other call)
my $srv;
END { VLMTest::vlm_stop($srv) if $srv }

for my $tp (1, 2) {
    $srv = vlm_start(name => "preempt-tp$tp",
                     http_config => "vlm_kv_cache 128k;\n"
                                    . "    vlm_max_model_len 256;\n"
                                    . "    vlm_tensor_parallel $tp;\n"
                                    . "    vlm_max_running 4;");
    check($srv, "tp $tp");

    last if $tp == 2;

    VLMTest::vlm_stop($srv);
}

# a prompt longer than the context is refused up front
my $res = vlm_post_json($srv, { %{ vlm_chat_body('word ' x 400) },
                                max_tokens => 1 });
is($res->{status}, 400, 'a prompt past vlm_max_model_len: 400');
like($res->{body}, qr/vlm_max_model_len/, 'which names the directive');

done_testing();
