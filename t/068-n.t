# OpenAI's n (vlm_max_n): n choices of one prompt, prefilled once and
# forked.  Non-streamed: "choices" with index 0..n-1, each its own
# finish_reason and logprobs, usage counting the prompt once and the
# completions of every choice, each token counted as a draw of the host
# (vlm_sampled_tokens_total, the CPU backend); streamed: a role chunk,
# content chunks and a finish chunk per index, the usage chunk once at
# the end.  With a seed the answer is reproducible and the choices
# differ at temperature 1; greedy choices are the same; n = 1 is the
# request without n; choice 0 of a seeded request draws as the request
# without n.  Tool calls and json_object per choice (a grammar matcher
# each), /v1/completions too.  n above vlm_max_n or below 1 is a 400
# naming n; a client that leaves a stream of n = 4 leaves no KV block
# used by a sequence.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode ();
use Test::More;
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'n', http_config => <<'_EOC_',
    vlm_max_n 4;
_EOC_
    locations => <<'_EOC_');
        location = /v1/completions { vlm_completions; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub chat {
    my ($body) = @_;

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('Tell me a story.') },
                                    %$body });
    return ($res, eval { vlm_json($res->{body}) });
}

sub texts {
    my ($j) = @_;
    return [ map { $_->{message}{content} } @{ $j->{choices} } ];
}

# the tokens a choice generated: its logprobs, and the stop token
sub tokens {
    my ($c) = @_;
    return scalar(@{ $c->{logprobs}{content} })
           + ($c->{finish_reason} eq 'stop' ? 1 : 0);
}


# n = 3: three choices, each with its finish and logprobs, usage once
my $drawn0 = vlm_metrics($srv);
my ($res, $j) = chat({ n => 3, max_tokens => 8, temperature => 1,
                       seed => 7, logprobs => JSON::PP::true });
my $drawn1 = vlm_metrics($srv);
is($res->{status}, 200, 'n=3: 200') or diag($res->{body});
is_deeply([ map { $_->{index} } @{ $j->{choices} } ], [0, 1, 2],
          'n=3: choices 0, 1, 2');
ok(!grep({ $_->{finish_reason} !~ /^(stop|length)$/ } @{ $j->{choices} }),
   'n=3: each choice has its finish_reason');
ok(!grep({ tokens($_) > 8 } @{ $j->{choices} }),
   'n=3: max_tokens holds for each choice');
my $sum = 0;
$sum += tokens($_) for @{ $j->{choices} };
is($j->{usage}{completion_tokens}, $sum,
   'n=3: completion_tokens is the sum over the choices');

# on the CPU, every token of every choice is drawn on the host
{
    my %drawn = map {
        my $k = "vlm_sampled_tokens_total{where=\"$_\"}";
        ($_ => ($drawn1->{$k} // -1) - ($drawn0->{$k} // 0))
    } qw(host device);

    is($drawn{host}, $sum, 'n=3: vlm_sampled_tokens_total counts the '
                           . 'host\'s draws');
    is($drawn{device}, 0, 'n=3: and none on the device');
}

my ($res1, $j1) = chat({ max_tokens => 8, temperature => 1, seed => 7,
                         logprobs => JSON::PP::true });
is($j->{usage}{prompt_tokens}, $j1->{usage}{prompt_tokens},
   'n=3: the prompt counted once');
is($j->{usage}{total_tokens}, $j->{usage}{prompt_tokens} + $sum,
   'n=3: total_tokens');
is($j->{choices}[0]{message}{content}, $j1->{choices}[0]{message}{content},
   'seeded: choice 0 draws as the request without n');

# the prompt is looked up and prefilled once, its image encoded once
{
    my $q = 'vlm_prefix_cache_queries_tokens_total';
    my $before = vlm_metrics($srv)->{$q};
    chat({ max_tokens => 2 });
    my $one = vlm_metrics($srv)->{$q} - $before;
    $before = vlm_metrics($srv)->{$q};
    chat({ n => 4, max_tokens => 2 });
    my $four = vlm_metrics($srv)->{$q} - $before;
    ok($one > 0 && $four == $one,
       "n=4: the prompt looked up once ($four tokens, n=1: $one)");

    my $img = vlm_data_url('image/png', vlm_png(56, 56, 67));
    my $m = vlm_metrics($srv)->{vlm_image_cache_misses_total};
    my $r = vlm_post_json($srv, { %{ vlm_chat_body('What is it?', $img) },
                                  n => 3, max_tokens => 3,
                                  temperature => 1 });
    my $jj = eval { vlm_json($r->{body}) };
    is(scalar @{ $jj->{choices} || [] }, 3, 'an image, n=3: three choices')
        or diag($r->{body});
    is(vlm_metrics($srv)->{vlm_image_cache_misses_total} - $m, 1,
       'an image, n=3: encoded once');
}

# reproducible with a seed, and the choices differ from each other
my ($res2, $j2) = chat({ n => 3, max_tokens => 8, temperature => 1,
                         seed => 7, logprobs => JSON::PP::true });
is_deeply(texts($j2), texts($j), 'seeded: the same choices again');
my %seen = map { $_ => 1 } @{ texts($j) };
ok(keys %seen >= 2, 'seeded, temperature 1: the choices differ')
    or diag(explain(texts($j)));

# without a seed: independent streams
($res2, $j2) = chat({ n => 4, max_tokens => 8, temperature => 1 });
%seen = map { $_ => 1 } @{ texts($j2) };
ok(keys %seen >= 2, 'no seed: the choices differ') or diag($res2->{body});

# n = 1 is the request without n
($res, $j) = chat({ n => 1, max_tokens => 8, temperature => 0 });
($res1, $j1) = chat({ max_tokens => 8, temperature => 0 });
is_deeply(texts($j), texts($j1), 'n=1: the answer without n');
is_deeply($j->{usage}, $j1->{usage}, 'n=1: the usage without n');

# greedy: the same choice twice
($res, $j) = chat({ n => 2, max_tokens => 8, temperature => 0 });
is(scalar @{ $j->{choices} }, 2, 'greedy n=2: two choices');
is_deeply(texts($j), [ $j1->{choices}[0]{message}{content},
                       $j1->{choices}[0]{message}{content} ],
          'greedy n=2: both the greedy answer');
is($j->{usage}{completion_tokens}, 2 * $j1->{usage}{completion_tokens},
   'greedy n=2: twice the completion tokens');

# stop applies to each choice
my $greedy = $j1->{choices}[0]{message}{content};
SKIP: {
    skip 'the greedy answer is too short for a stop string', 2
        if length($greedy) < 4;

    my $cut = substr($greedy, 2, 2);
    ($res, $j) = chat({ n => 2, max_tokens => 8, temperature => 0,
                        stop => [ $cut ] });
    is_deeply(texts($j), [ (substr($greedy, 0, index($greedy, $cut))) x 2 ],
              'stop: each choice cut before the stop string');
    is_deeply([ map { $_->{finish_reason} } @{ $j->{choices} } ],
              [ 'stop', 'stop' ], 'stop: each choice finished by it');
}

# streamed: interleaved by index, a role and a finish chunk each, usage once
($res, $j) = chat({ n => 3, max_tokens => 8, temperature => 1, seed => 11 });
$res2 = vlm_post_json($srv, { %{ vlm_chat_body('Tell me a story.') },
    n => 3, max_tokens => 8, temperature => 1, seed => 11,
    stream => JSON::PP::true,
    stream_options => { include_usage => JSON::PP::true } });
is($res2->{status}, 200, 'stream n=3: 200');
my @ev = vlm_sse($res2->{body});
is($ev[-1], '[DONE]', 'stream n=3: [DONE]');
my @chunks = grep { ref $_ && $_->{choices} && @{ $_->{choices} } } @ev;
ok(!grep({ @{ $_->{choices} } != 1 } @chunks),
   'stream n=3: one choice a chunk');
my (%role, %finish, %text);
for my $c (map { $_->{choices}[0] } @chunks) {
    $role{ $c->{index} }++ if defined $c->{delta}{role};
    $finish{ $c->{index} }++ if defined $c->{finish_reason};
    $text{ $c->{index} } .= $c->{delta}{content} // '';
}
is_deeply(\%role, { 0 => 1, 1 => 1, 2 => 1 }, 'stream n=3: a role chunk each');
is_deeply(\%finish, { 0 => 1, 1 => 1, 2 => 1 },
          'stream n=3: a finish_reason each');
is_deeply([ map { $text{$_} } 0 .. 2 ], texts($j),
          'stream n=3: the texts of the non-streamed answer');
my @usage = grep { ref $_ && $_->{usage} } @ev;
is(scalar @usage, 1, 'stream n=3: one usage chunk');
is_deeply($usage[0]{usage}, $j->{usage}, 'stream n=3: the same usage');
ok(!@{ $usage[0]{choices} } && ref $ev[-2] && $ev[-2]{usage},
   'stream n=3: usage last, with no choices');
ok(!grep({ ref $_ && $_->{error} } @ev), 'stream n=3: no error event');

# a grammar matcher each: tool calls and json_object per choice
my $tool = { type => 'function', function => { name => 'add',
    parameters => { type => 'object', properties => {
        a => { type => 'integer' }, b => { type => 'integer' } },
        required => ['a', 'b'] } } };
($res, $j) = chat({ n => 3, max_tokens => 80, temperature => 1,
                    tools => [$tool], tool_choice => 'required' });
is($res->{status}, 200, 'tools n=3: 200') or diag($res->{body});
ok(@{ $j->{choices} } == 3 && !grep({ $_->{finish_reason} ne 'tool_calls'
                                      || !@{ $_->{message}{tool_calls} } }
                                    @{ $j->{choices} }),
   'tools n=3: a call in each choice') or diag($res->{body});
my %ids = map { $_->{id} => 1 }
          map { @{ $_->{message}{tool_calls} || [] } } @{ $j->{choices} };
my $n_calls = 0;
$n_calls += @{ $_->{message}{tool_calls} || [] } for @{ $j->{choices} };
is(scalar keys %ids, $n_calls, 'tools n=3: every call id its own');

$res2 = vlm_post_json($srv, { %{ vlm_chat_body('Tell me a story.') },
    n => 2, max_tokens => 80, temperature => 1, stream => JSON::PP::true,
    tools => [$tool], tool_choice => 'required' });
@chunks = grep { ref $_ && $_->{choices} && @{ $_->{choices} } }
          vlm_sse($res2->{body});
my %named = map { $_->{choices}[0]{index} => 1 }
            grep { $_->{choices}[0]{delta}{tool_calls} } @chunks;
my %called = map { $_->{choices}[0]{index} => 1 }
             grep { ($_->{choices}[0]{finish_reason} // '') eq 'tool_calls' }
             @chunks;
is_deeply([ \%named, \%called ], [ { 0 => 1, 1 => 1 }, { 0 => 1, 1 => 1 } ],
          'tools, stream n=2: calls and tool_calls finish in each choice');

($res, $j) = chat({ n => 3, max_tokens => 60, temperature => 1,
                    response_format => { type => 'json_object' } });
my $parsed = grep { $_->{finish_reason} ne 'stop'
                    || eval { vlm_json(Encode::encode('UTF-8',
                                              $_->{message}{content})); 1 } }
             @{ $j->{choices} };
is($parsed, 3, 'json_object n=3: each choice a JSON document (or cut)')
    or diag($res->{body});

# /v1/completions
$res = vlm_request($srv, 'POST', '/v1/completions', $VLMTest::JSON->encode(
    { model => 'serving', prompt => 'The answer is', n => 2, max_tokens => 4,
      temperature => 0 }));
$j = eval { vlm_json($res->{body}) };
is($res->{status}, 200, 'completions n=2: 200') or diag($res->{body});
is_deeply([ map { $_->{index} } @{ $j->{choices} } ], [0, 1],
          'completions n=2: choices 0, 1');
is($j->{choices}[0]{text}, $j->{choices}[1]{text},
   'completions n=2, greedy: the same text');

# the limits
for my $n (5, 0, -1) {
    ($res, $j) = chat({ n => $n });
    is($res->{status}, 400, "n=$n: 400");
    is($j->{error}{param}, 'n', "n=$n: names n");
}
like($j->{error}{message}, qr/at least 1/, 'n=-1: the message says why');
($res, $j) = chat({ n => 5 });
like($j->{error}{message}, qr/at most 4/, 'n=5: the message says the limit');

# a client that leaves a stream of n = 4: every sequence and block freed
{
    my $long = join ' ', map { "word$_" } 1 .. 100;
    my $st = vlm_open_stream($srv, {
        %{ vlm_chat_body("Tell me a story. $long") }, n => 4,
        max_tokens => 400, temperature => 1, stream => JSON::PP::true });
    ok(vlm_read_some($st, 20, qr/("content":"[^"]+".*){6}/s),
       'abort n=4: the stream has begun');
    close $st->{sock};

    my $zone = vlm_wait_idle($srv, 10);
    ok($zone->{slots_used} == 0, 'abort n=4: the slot is free');

    my ($used, $seqs);
    for (1 .. 50) {
        my $m = vlm_metrics($srv);
        $used = $m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'};
        $seqs = $m->{'vlm_pool_used{pool="sequences",unit="slots"}'};
        last if defined $used && $used == 0 && $seqs == 0;
        select(undef, undef, undef, 0.1);
    }
    is($used, 0, 'abort n=4: no KV block used by a sequence');
    is($seqs, 0, 'abort n=4: no sequence in use');
}

# more choices than free sequences wait, then run (vlm_max_running 8)
{
    my @st = map {
        vlm_open_stream($srv, { %{ vlm_chat_body("Story $_") }, n => 4,
                                max_tokens => 6, temperature => 1,
                                stream => JSON::PP::true })
    } 1 .. 4;
    vlm_stream_ok($_, 'four requests of n=4 at once') for @st;
}

# a tensor-parallel engine: its follower rank forks the same sequences
{
    my $tp = vlm_start(name => 'n-tp', port => vlm_port(74), http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
_EOC_

    my $r1 = vlm_post_json($tp, { %{ vlm_chat_body('Tell me a story.') },
                                  max_tokens => 8, temperature => 0 });
    my $r2 = vlm_post_json($tp, { %{ vlm_chat_body('Tell me a story.') },
                                  n => 3, max_tokens => 8, temperature => 0 });
    my ($a, $b) = map { eval { vlm_json($_->{body}) } } $r1, $r2;
    is($r2->{status}, 200, 'tensor parallel n=3: 200') or diag($r2->{body});
    is_deeply(texts($b), [ ($a->{choices}[0]{message}{content}) x 3 ],
              'tensor parallel, greedy n=3: the greedy answer three times');
    is($a->{choices}[0]{message}{content}, $greedy,
       'tensor parallel: the answer of one rank');

    my $st = vlm_open_stream($tp, {
        %{ vlm_chat_body('Tell me a long story.') }, n => 4,
        max_tokens => 400, temperature => 1, stream => JSON::PP::true });
    ok(vlm_read_some($st, 20, qr/("content":"[^"]+".*){6}/s),
       'tensor parallel, abort n=4: the stream has begun');
    close $st->{sock};
    vlm_wait_idle($tp, 10);

    my $used;
    for (1 .. 50) {
        $used = vlm_metrics($tp)
                    ->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'};
        last if defined $used && $used == 0;
        select(undef, undef, undef, 0.1);
    }
    is($used, 0, 'tensor parallel, abort n=4: no KV block used');

    $r2 = vlm_post_json($tp, { %{ vlm_chat_body('Tell me a story.') },
                               n => 2, max_tokens => 8, temperature => 0 });
    is($r2->{status}, 200, 'tensor parallel: serving after the abort');

    VLMTest::check_log($tp, 'tensor parallel n', qr/\[(error|alert|crit)\]/);
    VLMTest::vlm_stop($tp);
}

my $zone = vlm_wait_idle($srv, 5);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'every slot free, arena used 0');

VLMTest::check_log($srv, 'n', qr/\[(error|alert|crit)\]/);

done_testing();
