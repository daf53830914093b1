# logit_bias on POST /v1/chat/completions with the tiny random model of
# tests/fixtures/serving: +100 on a token makes every greedy token that
# one, of two tokens pushed up the larger bias wins and the other is the
# runner-up, -100 bans a token, the reported log probabilities are those
# of the biased distribution (as OpenAI reports them), a request
# without bias is unchanged after one with bias, and every bad map is a
# 400 with an OpenAI error body.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $model = "$root/tests/fixtures/serving";

my $srv = vlm_start(name => 'logit-bias');
END { VLMTest::vlm_stop($srv) if $srv }

my @hello = split ' ', `$build/vlm-cli tokenize --model $model --text hello`;
my $x = $hello[0];
my $x_text = `$build/vlm-cli detokenize --model $model $x`;
ok(defined $x && length $x_text, "token $x has a text");


sub chat {
    my (%o) = @_;

    my $res = vlm_post_json($srv, {
        %{ vlm_chat_body('Describe the picture.') },
        temperature => 0, max_tokens => 6, %o });

    return ($res, eval { vlm_json($res->{body}) });
}


# the greedy answer
my ($res, $j) = chat();
is($res->{status}, 200, 'no bias: 200') or diag($res->{body});
my $plain = $j->{choices}[0]{message}{content};

# +100 on one token: every token is that one, log probability about 0
($res, $j) = chat(logit_bias => { $x => 100 }, logprobs => JSON::PP::true);
is($res->{status}, 200, '+100: 200') or diag($res->{body});
is($j->{choices}[0]{message}{content}, $x_text x 6,
   "+100 on $x: six times its text");
is($j->{choices}[0]{finish_reason}, 'length', '+100: finish_reason length');
ok(!grep({ $_->{logprob} < -0.01 } @{ $j->{choices}[0]{logprobs}{content} }),
   '+100: the biased token has a log probability of about 0');

# two tokens pushed up: the larger bias wins every step, the other is the
# runner-up, and the two share all the probability (the biased logprobs)
my $y = $hello[1];
my $y_text = `$build/vlm-cli detokenize --model $model $y`;

($res, $j) = chat(logit_bias => { $x => 100, $y => 99.5 },
                  logprobs => JSON::PP::true, top_logprobs => 2);
is($res->{status}, 200, 'two biases: 200') or diag($res->{body});
is($j->{choices}[0]{message}{content}, $x_text x 6,
   'two biases: the larger wins');
my $c = $j->{choices}[0]{logprobs}{content}[0];
is($c->{top_logprobs}[1]{token}, $y_text, 'two biases: the other is second');
ok(exp($c->{logprob}) + exp($c->{top_logprobs}[1]{logprob}) > 0.99,
   'two biases: the two hold all the probability');

# -100 on the one and +99.5 on the other: the other every step
($res, $j) = chat(logit_bias => { $x => -100, $y => 99.5 },
                  logprobs => JSON::PP::true, top_logprobs => 5);
is($j->{choices}[0]{message}{content}, $y_text x 6, '-100: never drawn');
my $top = $j->{choices}[0]{logprobs}{content}[0]{top_logprobs};
ok(!grep({ $_->{token} eq $x_text } @$top),
   '-100: not among the top log probabilities');

# an empty map and no map answer the same
($res, $j) = chat(logit_bias => {});
is($res->{status}, 200, 'empty map: 200');
is($j->{choices}[0]{message}{content}, $plain, 'empty map: the plain answer');

# streamed, the same as not streamed
$res = vlm_post_json($srv, {
    %{ vlm_chat_body('Describe the picture.') }, temperature => 0,
    max_tokens => 6, logit_bias => { $x => 100 }, stream => JSON::PP::true });
my $text = join '', map {
    ref $_ && $_->{choices} && @{ $_->{choices} }
        ? ($_->{choices}[0]{delta}{content} // '') : ''
} vlm_sse($res->{body});
is($text, $x_text x 6, 'streamed: the same biased answer');

# the sampler forgets the bias: the next request is the plain one
($res, $j) = chat();
is($j->{choices}[0]{message}{content}, $plain,
   'after a biased request, the plain answer again');


# errors

sub bad {
    my ($what, $bias, $message, $code) = @_;

    my ($res, $j) = chat(logit_bias => $bias);
    is($res->{status}, 400, "$what: 400");
    is_deeply($j, { error => { message => $message,
                               type => 'invalid_request_error',
                               param => 'logit_bias',
                               code => $code // 'invalid_value' } },
              "$what: the error body") or diag($res->{body});
}

bad('an array', [ 1 ], "Invalid type for 'logit_bias': expected an object, "
    . 'but got an array instead.', 'invalid_type');
bad('a key that is no token id', { abc => 1 }, "Invalid key in "
    . "'logit_bias': \"abc\" is not a token id (a non-negative integer).");
bad('a negative key', { -1 => 1 }, "Invalid key in 'logit_bias': \"-1\" is "
    . 'not a token id (a non-negative integer).');
bad('an id outside the vocabulary', { 3014 => 1 }, "Invalid token id in "
    . "'logit_bias': 3014; token ids are between 0 and 3013 on this "
    . 'server.');
bad('a bias over 100', { 5 => 100.5 }, "Invalid 'logit_bias.5': expected a "
    . 'value between -100 and 100, but got 100.5 instead.');
bad('a string bias', { 5 => 'x' }, "Invalid type for 'logit_bias.5': "
    . 'expected a number, but got a string instead.', 'invalid_type');
bad('301 entries', { map { $_ => 1 } 0 .. 300 }, "Invalid 'logit_bias': "
    . 'expected an object with at most 300 properties, but got an object '
    . 'with 301 properties instead.', 'object_above_max_properties');

($res, $j) = chat(logit_bias => { map { $_ => 0.5 } 0 .. 299 });
is($res->{status}, 200, '300 entries: 200') or diag($res->{body});

is(vlm_health($srv)->{_status}, 200, 'still healthy');

done_testing();
