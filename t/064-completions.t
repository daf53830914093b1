# POST /v1/completions (vlm_completions) with the tiny random model of
# tests/fixtures/serving: a prompt as a string, an array of one string,
# token ids or an array of one array of ids gives the same greedy text as
# `vlm-cli generate` on the prompt's ids (no template); usage counts them;
# max_tokens defaults to 16; logprobs as an integer in the legacy shape
# (tokens, token_logprobs, top_logprobs, text_offset); streaming as
# text_completion chunks with usage; stop strings; every bad body a 4xx
# with an OpenAI error body (echo, suffix, best_of, several prompts).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Encode ();
use Test::More;
use VLMTest;

binmode(Test::More->builder->$_, ':encoding(UTF-8)')
    for qw(output failure_output todo_output);

my $build = vlm_prereqs();
my $root = vlm_root();
my $model = "$root/tests/fixtures/serving";
my $tmp = tempdir("vlm-completions-XXXXXX", TMPDIR => 1, CLEANUP => 1);

my $srv = vlm_start(name => 'completions', locations => <<'_EOC_');
        location = /v1/completions { vlm_completions; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub post {
    my ($body) = @_;

    my $res = vlm_request($srv, 'POST', '/v1/completions',
                          ref $body ? $VLMTest::JSON->encode($body) : $body);

    return ($res, eval { vlm_json($res->{body}) });
}


my $prompt = 'The answer is';
my @ids = split ' ', `$build/vlm-cli tokenize --model $model --text '$prompt'`;
open my $out, '>', "$tmp/ids.txt" or die;
print $out "@ids\n";
close $out;
my $cmd = "$build/vlm-cli generate --model $model --ids $tmp/ids.txt "
          . '--max-tokens 6 --temperature 0';
my @gen = split ' ', `$cmd`;
my $want = Encode::decode('UTF-8',
    scalar `$build/vlm-cli detokenize --model $model --skip-special @gen`);

my $base = { model => 'serving', max_tokens => 6, temperature => 0 };

my ($res, $j) = post({ %$base, prompt => $prompt });
is($res->{status}, 200, 'a string: 200') or diag($res->{body});
is_deeply([sort keys %$j], [qw(choices created id model object usage)],
          'the keys of a text_completion');
like($j->{id}, qr/^cmpl-[0-9a-f]{32}$/, 'id cmpl-');
is($j->{object}, 'text_completion', 'object text_completion');
is($j->{model}, 'serving', 'model');
my $c = $j->{choices}[0];
is_deeply([sort keys %$c], [qw(finish_reason index logprobs text)],
          'the keys of a choice');
is($c->{text}, $want, 'the text vlm-cli generates from the same ids');
is($c->{logprobs}, undef, 'logprobs null');
is($c->{finish_reason}, 'length', 'finish_reason length');
is_deeply($j->{usage}, { prompt_tokens => scalar @ids,
                         completion_tokens => 6,
                         total_tokens => @ids + 6,
                         prompt_tokens_details => { cached_tokens => 0 } },
          'usage: the prompt\'s ids, no template');
my $text = $c->{text};

for my $p ([ 'an array of one string', [ $prompt ] ],
           [ 'token ids', [ map { $_ + 0 } @ids ] ],
           [ 'an array of one array of ids', [ [ map { $_ + 0 } @ids ] ] ])
{
    ($res, $j) = post({ %$base, prompt => $p->[1] });
    is($res->{status}, 200, "$p->[0]: 200") or diag($res->{body});
    is($j->{choices}[0]{text}, $text, "$p->[0]: the same text");
    is($j->{usage}{prompt_tokens}, scalar @ids, "$p->[0]: the same usage");
}

# max_tokens: 16 by default
($res, $j) = post({ model => 'serving', prompt => $prompt, temperature => 0,
                    logit_bias => { map { $_ => -100 } 0 .. 20 } });
ok($j->{usage}{completion_tokens} == 16
   || $j->{choices}[0]{finish_reason} eq 'stop',
   "max_tokens defaults to 16 ($j->{usage}{completion_tokens})");

# logprobs: 2
($res, $j) = post({ %$base, prompt => $prompt, logprobs => 2 });
is($res->{status}, 200, 'logprobs 2: 200') or diag($res->{body});
my $lp = $j->{choices}[0]{logprobs};
is_deeply([sort keys %$lp], [qw(text_offset token_logprobs tokens top_logprobs)],
          'logprobs: the legacy keys');
is(scalar @{ $lp->{tokens} }, 6, 'logprobs: six tokens');
is(join('', @{ $lp->{tokens} }), $text, 'logprobs: the tokens make the text');
ok(!grep({ $_ > 0 } @{ $lp->{token_logprobs} }), 'logprobs: all <= 0');
ok(!grep({ keys %$_ < 1 || keys %$_ > 2 } @{ $lp->{top_logprobs} }),
   'logprobs: one or two top tokens each');
is($lp->{text_offset}[0], 0, 'text_offset starts at 0');
my $ok = 1;
for my $i (1 .. 5) {
    $ok = 0 if $lp->{text_offset}[$i] - $lp->{text_offset}[$i - 1]
               != length(Encode::encode('UTF-8', $lp->{tokens}[$i - 1]));
}
ok($ok, 'text_offset: each token starts where the one before ends');
my %top0 = %{ $lp->{top_logprobs}[0] };
ok(exists $top0{ $lp->{tokens}[0] }, 'greedy: the token is its top one');

# streaming
$res = vlm_request($srv, 'POST', '/v1/completions', $VLMTest::JSON->encode(
    { %$base, prompt => $prompt, stream => JSON::PP::true,
      stream_options => { include_usage => JSON::PP::true },
      logprobs => 1 }));
is($res->{status}, 200, 'stream: 200');
like($res->{headers}{'content-type'}, qr{^text/event-stream}, 'stream: SSE');
my @ev = vlm_sse($res->{body});
is($ev[-1], '[DONE]', 'stream: [DONE]');
my @chunks = grep { ref $_ && $_->{choices} && @{ $_->{choices} } } @ev;
ok(!grep({ $_->{object} ne 'text_completion' } grep { ref $_ } @ev),
   'stream: text_completion chunks');
is(join('', map { $_->{choices}[0]{text} } @chunks), $text,
   'stream: the same text');
is($chunks[-1]{choices}[0]{finish_reason}, 'length', 'stream: finish');
my ($u) = grep { ref $_ && $_->{usage} } @ev;
is($u->{usage}{prompt_tokens}, scalar @ids, 'stream: usage');
my @offsets = map { @{ $_->{choices}[0]{logprobs}{text_offset} } }
              grep { $_->{choices}[0]{logprobs} } @chunks;
is_deeply(\@offsets, $lp->{text_offset}, 'stream: the same text_offset');

# stop
my $cut = substr($text, 2, 2);
($res, $j) = post({ %$base, prompt => $prompt, stop => [ $cut ] });
is($j->{choices}[0]{finish_reason}, 'stop', 'stop: finish_reason stop');
is($j->{choices}[0]{text}, substr($text, 0, index($text, $cut)),
   'stop: the text up to the stop string');


# errors

sub bad {
    my ($what, $body, $status, $param, $code, $re) = @_;

    my ($res, $j) = post($body);
    is($res->{status}, $status, "$what: $status");
    is($j->{error}{param}, $param, "$what: param");
    is($j->{error}{code}, $code, "$what: code");
    like($j->{error}{message}, $re, "$what: message") or diag($res->{body});
}

bad('no prompt', { model => 'serving' }, 400, 'prompt',
    'missing_required_parameter', qr/'prompt'/);
bad('messages instead', { model => 'serving', messages => [ { role => 'user',
    content => 'x' } ] }, 400, 'prompt', 'missing_required_parameter',
    qr/'prompt'/);
bad('an empty prompt', { model => 'serving', prompt => '' }, 400, 'prompt',
    'invalid_value', qr/empty/);
bad('an empty array', { model => 'serving', prompt => [] }, 400, 'prompt',
    'empty_array', qr/empty array/);
bad('two prompts', { model => 'serving', prompt => [ 'a', 'b' ] }, 400,
    'prompt', 'unsupported_value', qr/one prompt per request, but got 2/);
bad('a prompt of an object', { model => 'serving', prompt => {} }, 400,
    'prompt', 'invalid_type', qr/a string or an array/);
bad('a token outside the vocabulary', { model => 'serving',
    prompt => [ 1, 3014 ] }, 400, 'prompt[1]', 'invalid_value',
    qr/3014 is not a token id/);
bad('an inner token outside the vocabulary', { model => 'serving',
    prompt => [ [ 1, -1 ] ] }, 400, 'prompt[0][1]', 'invalid_value',
    qr/-1 is not a token id/);
bad('echo', { model => 'serving', prompt => 'x', echo => JSON::PP::true },
    400, 'echo', 'unsupported_value', qr/echo/);
bad('suffix', { model => 'serving', prompt => 'x', suffix => 'y' }, 400,
    'suffix', 'unsupported_parameter', qr/suffix/);
bad('best_of 2', { model => 'serving', prompt => 'x', best_of => 2 }, 400,
    'best_of', 'unsupported_value', qr/best_of/);
bad('logprobs 21', { model => 'serving', prompt => 'x', logprobs => 21 }, 400,
    'logprobs', 'invalid_value', qr/between 0 and 20/);
bad('logprobs true', { model => 'serving', prompt => 'x',
    logprobs => JSON::PP::true }, 400, 'logprobs', 'invalid_type',
    qr/expected an integer/);
bad('another model', { model => 'gpt-4', prompt => 'x' }, 404, 'model',
    'model_not_found', qr/gpt-4/);

($res, $j) = post({ model => 'serving', prompt => 'x', echo => JSON::PP::false,
                    suffix => '', best_of => 1 });
is($res->{status}, 200, 'echo false, empty suffix, best_of 1: 200');

is(vlm_request($srv, 'GET', '/v1/completions')->{status}, 405, 'GET: 405');

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'every slot free, arena used 0');

done_testing();
