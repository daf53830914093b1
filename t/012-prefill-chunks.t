# Text prompts longer than one forward step (max_batch_tokens, 256 rows)
# are fed in chunks next to the running streams' decode tokens, and alone
# in steps of vlm_max_prefill_tokens (1,024 rows: this one in a step):
# the answer is the one vlm-cli gives when it prefills the whole prompt at
# once (the path the parity tests hold to transformers), alone and while
# another stream is running; the running stream keeps going meanwhile and
# completes.  An image prompt, prefilled a piece per step, gets the same
# answer alone and next to a running stream; the second time, its vision
# features come from the engine's image cache.  (The prefix cache is off
# here: with it, a prompt seen before skips these paths; t/014 tests it.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode qw(decode);
use Test::More;
use VLMTest;

vlm_prereqs();

my $root = vlm_root();
my $cli = ($ENV{VLM_BUILD} || "$root/build") . "/vlm-cli";
my $model = "$root/tests/fixtures/serving";

plan skip_all => "$cli is not built" if !-x $cli;

my $srv = vlm_start(name => 'chunks', port => vlm_port(5),
                    http_config => <<'_EOC_');
    vlm_max_running 2;
    vlm_max_tokens 4000;
    vlm_prefix_cache off;
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

# about 900 tokens of the fixture's tokenizer: four chunks next to a
# stream, one step alone
my $prompt = join ' ', map { "word$_" } 1 .. 300;

my $ids = `$cli tokenize --model $model --text '$prompt'`;
my $n = () = $ids =~ /\d+/g;
cmp_ok($n, '>', 3 * 256, "the prompt is $n tokens, more than three steps");

my $want = `$cli run --model $model --prompt '$prompt' --max-tokens 24 --temperature 0 2>/dev/null`;
is($?, 0, 'vlm-cli answers the prompt');
$want = decode('UTF-8', $want);
# vlm-cli ends its output with a newline, and prints the bytes of a
# character the last token left unfinished as U+FFFD; the server leaves
# them out (an answer cut by max_tokens is a prefix of the longer one)
$want =~ s/\n\z//;
$want =~ s/\x{FFFD}\z//;

sub ask {
    my $res = vlm_post_json($srv, { %{ vlm_chat_body($prompt) },
                                    max_tokens => 24, temperature => 0 });
    is($res->{status}, 200, "$_[0]: 200") or diag($res->{body});

    my $body = vlm_json($res->{body});
    is($body->{usage}{prompt_tokens} > 3 * 256 ? 1 : 0, 1,
       "$_[0]: the whole prompt was read");

    return $body->{choices}[0]{message}{content};
}

is(ask('alone'), $want, 'alone: the answer of a whole prefill');

# while another stream runs
{
    my $st = vlm_open_stream($srv, { %{ vlm_chat_body('Tell me a story.') },
                                     temperature => 0, max_tokens => 400,
                                     stream => JSON::PP::true });
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){3}/s),
       'the running stream has begun');

    is(ask('next to a stream'), $want,
       'next to a stream: the answer of a whole prefill');

    vlm_stream_ok($st, 'the running stream');
}

# an image prompt is prefilled a piece per step (vision blocks, then
# chunks): the same answer alone and next to a running stream
my $image = vlm_data_url('image/png', vlm_png(120, 80, 3));

sub ask_image {
    my $res = vlm_post_json($srv, {
        %{ vlm_chat_body('Describe the picture. ' x 20, $image) },
        max_tokens => 16, temperature => 0 });
    is($res->{status}, 200, "$_[0]: 200") or diag($res->{body});

    return vlm_json($res->{body})->{choices}[0]{message}{content};
}

{
    my $alone = ask_image('image alone');

    my $st = vlm_open_stream($srv, { %{ vlm_chat_body('Tell me a story.') },
                                     temperature => 0, max_tokens => 400,
                                     stream => JSON::PP::true });
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){3}/s),
       'image: the running stream has begun');

    is(ask_image('image next to a stream'), $alone,
       'image next to a stream: the answer it gets alone');

    vlm_stream_ok($st, 'image: the running stream');

    # the second time, the picture's vision features came from the cache
    my $m = vlm_metrics($srv);
    is($m->{vlm_image_cache_misses_total}, 1, 'image cache: one miss');
    is($m->{vlm_image_cache_hits_total}, 1, 'image cache: one hit');
    cmp_ok($m->{vlm_image_cache_used_bytes}, '>', 0,
           'image cache: the features are held');
    is($m->{vlm_image_cache_bytes}, 64 * 1024 * 1024,
       'image cache: the default pool of 64 MB');
}

# the same picture with every "/" of its base64 written "\/" in the JSON
# (as some encoders do): decoded from its own buffer, not in the body,
# and the same answer
{
    my $body = VLMTest::vlm_json_text({
        %{ vlm_chat_body('Describe the picture. ' x 20, $image) },
        max_tokens => 16, temperature => 0 });
    my $n = ($body =~ s{(data:image/png;base64,[^"]*)}{
                            (my $u = $1) =~ s{/}{\\/}g; $u }e);
    ok($n && $body =~ m{\\/}, 'escaped: the payload has escaped slashes');

    my $res = vlm_post_json($srv, $body);
    is($res->{status}, 200, 'escaped: 200');
    is(vlm_json($res->{body})->{choices}[0]{message}{content},
       ask_image('image again'), 'escaped: the same answer');
}

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'every slot free, arena used 0');

VLMTest::check_log($srv, 'chunks');

done_testing();
