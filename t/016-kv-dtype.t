# vlm_kv_dtype: the engine's KV cache in bf16, then f32, then auto (the
# serving checkpoint is f32, so auto keeps f32), each change a reload that
# starts a new engine.  /metrics says what was asked (vlm_kv_dtype) and
# what the engine holds (vlm_engine_rank_kv_dtype, a token's bytes: half
# at 16 bits, the same number of blocks in half the bytes); every engine
# answers.
#
# A plain Test::More script: reloads and requests interleave.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'kvdtype', http_config => <<'_EOC_');
    vlm_kv_dtype bf16;
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

my $ask = { %{ vlm_chat_body('Say something.') }, temperature => 0,
            max_tokens => 8 };


# the engine that holds a $dtype cache, once it serves ($secs at most),
# answered by a worker whose vlm_kv_dtype is $asked (the old workers of a
# reload may still answer for a while)
sub engine_with {
    my ($dtype, $secs, $asked) = @_;

    my $deadline = time + $secs;
    my $m = {};

    while (time < $deadline) {
        if (vlm_wait_ready($srv, 1)) {
            $m = vlm_metrics($srv);
            return $m
                if $m->{"vlm_engine_rank_kv_dtype{rank=\"0\",dtype=\"$dtype\"}"}
                   && (!defined $asked
                       || $m->{"vlm_kv_dtype{dtype=\"$asked\"}"});
        }

        sleep 0.1;
    }

    return $m;
}


sub answer {
    my ($what) = @_;

    my $res = vlm_post_json($srv, $ask);
    is($res->{status}, 200, "$what: a chat completion") or diag($res->{body});

    my $j = eval { vlm_json($res->{body}) } || {};
    my $text = $j->{choices} && $j->{choices}[0]{message}{content};
    ok(defined $text && length $text, "$what: with an answer");

    return $text // '';
}


my $m = engine_with('bf16', 30, 'bf16');

is($m->{'vlm_engine_rank_kv_dtype{rank="0",dtype="bf16"}'}, 1,
   'bf16: the engine holds a bf16 cache');
is($m->{'vlm_kv_dtype{dtype="bf16"}'}, 1, 'bf16: as vlm_kv_dtype asks');

my $tok16 = $m->{'vlm_engine_rank_kv_token_bytes{rank="0"}'} // 0;
my $kv16 = $m->{'vlm_engine_rank_kv_bytes{rank="0"}'} // 0;
cmp_ok($tok16, '>', 0, 'bf16: bytes a token');
answer('bf16');

my ($old) = vlm_engine_pids($srv);

vlm_reload($srv, 'vlm_kv_dtype bf16;', 'vlm_kv_dtype f32;');
$m = engine_with('f32', 60, 'f32');

is($m->{'vlm_engine_rank_kv_dtype{rank="0",dtype="f32"}'}, 1,
   'f32: the engine holds an f32 cache');
is($m->{'vlm_kv_dtype{dtype="f32"}'}, 1, 'f32: as vlm_kv_dtype asks');
is($m->{'vlm_engine_rank_kv_token_bytes{rank="0"}'}, 2 * $tok16,
   'f32: twice the bytes a token');
is($m->{'vlm_engine_rank_kv_bytes{rank="0"}'}, 2 * $kv16,
   'f32: the same blocks in twice the bytes');
isnt((vlm_engine_pids($srv))[0] // 0, $old, 'f32: a new engine');

my $f32 = answer('f32');

vlm_reload($srv, 'vlm_kv_dtype f32;', 'vlm_kv_dtype auto;');

# the f32 engine holds f32 too: wait for the config to be the new one
$m = engine_with('f32', 60, 'auto');

is($m->{'vlm_kv_dtype{dtype="auto"}'}, 1, 'auto: as vlm_kv_dtype asks');
is($m->{'vlm_engine_rank_kv_dtype{rank="0",dtype="f32"}'}, 1,
   'auto: an f32 checkpoint keeps an f32 cache');
is(answer('auto'), $f32, 'auto: the answer of the f32 cache');

VLMTest::check_log($srv, 'kv dtype');

done_testing();
