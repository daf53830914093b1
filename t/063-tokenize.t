# POST /tokenize and /detokenize (vlm_tokenize) in vLLM's shapes, against
# vlm-cli's template and tokenizer: a prompt (special-token strings in it
# recognized, as Hugging Face's tokenizer does), messages with and
# without the generation prompt, images counted as their pad tokens (the
# count the chat's usage.prompt_tokens reports for the same messages),
# tools in the prompt as the chat puts them (the same count), model
# optional, detokenize back to the text; every bad body a 4xx with an
# OpenAI error body.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $model = "$root/tests/fixtures/serving";
my $tmp = tempdir("vlm-tokenize-XXXXXX", TMPDIR => 1, CLEANUP => 1);

my $srv = vlm_start(name => 'tokenize', locations => <<'_EOC_');
        location = /tokenize { vlm_tokenize; }
        location = /detokenize { vlm_tokenize; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub cli_ids {
    my ($text) = @_;

    open my $out, '>', "$tmp/p.txt" or die;
    print $out $text;
    close $out;

    return [ map { $_ + 0 } split ' ',
             `$build/vlm-cli tokenize --model $model --file $tmp/p.txt` ];
}


sub cli_template {
    my ($messages, $no_gen) = @_;

    open my $out, '>', "$tmp/m.json" or die;
    print $out $VLMTest::JSON->encode($messages);
    close $out;

    my $flag = $no_gen ? ' --no-generation-prompt' : '';
    my $cmd = "$build/vlm-cli template --model $model "
              . "--messages $tmp/m.json$flag";
    my $text = `$cmd`;

    return $text;
}


sub post {
    my ($path, $body) = @_;

    my $res = vlm_request($srv, 'POST', $path,
                          ref $body ? $VLMTest::JSON->encode($body) : $body);

    return ($res, eval { vlm_json($res->{body}) });
}


# a prompt
my ($res, $j) = post('/tokenize', { model => 'serving',
                                    prompt => 'hello world' });
is($res->{status}, 200, 'prompt: 200') or diag($res->{body});
like($res->{headers}{'content-type'}, qr{^application/json}, 'JSON');
my $want = cli_ids('hello world');
is_deeply($j, { count => scalar @$want, max_model_len => 4096,
                tokens => $want, token_strs => undef },
          'prompt: the ids vlm-cli gives, count, max_model_len');

($res, $j) = post('/tokenize', { prompt => 'a<|im_start|>b' });
is($res->{status}, 200, 'no model: 200');
is_deeply($j->{tokens}, cli_ids('a<|im_start|>b'),
          'a special-token string in a prompt is the special token');
ok(scalar @{ $j->{tokens} } == 3, 'a, <|im_start|>, b: three tokens');

($res, $j) = post('/tokenize', { prompt => '', add_special_tokens => JSON::PP::true });
is_deeply($j, { count => 0, max_model_len => 4096, tokens => [],
                token_strs => undef }, 'an empty prompt: no tokens');

# messages
my $msgs = [ { role => 'system', content => 'Be brief.' },
             { role => 'user', content => 'Describe nginx.' } ];

($res, $j) = post('/tokenize', { model => 'serving', messages => $msgs });
is($res->{status}, 200, 'messages: 200') or diag($res->{body});
is_deeply($j->{tokens}, cli_ids(cli_template($msgs)),
          'messages: the template and tokenizer of vlm-cli');

($res, $j) = post('/tokenize', { messages => $msgs,
                                 add_generation_prompt => JSON::PP::false });
is_deeply($j->{tokens}, cli_ids(cli_template($msgs, 1)),
          'add_generation_prompt false: the template without it');

# an image: its pad expanded to its tokens, as the chat counts it
my $png = vlm_data_url('image/png', vlm_png(56, 56, 1));      # 4 tokens
my $body = vlm_chat_body('What is this?', $png);
($res, $j) = post('/tokenize', $body);
is($res->{status}, 200, 'an image: 200') or diag($res->{body});
my $chat = vlm_json(vlm_post_json($srv, { %$body, max_tokens => 1 })->{body});
is($j->{count}, $chat->{usage}{prompt_tokens},
   "an image: the count is the chat's prompt_tokens ($j->{count})");
my $pad = cli_ids('<|image_pad|>')->[0];
is(scalar(grep { $_ == $pad } @{ $j->{tokens} }), 4,
   'an image: four pad tokens (a 56x56 picture)');

# tools: told to the template as the chat tells it, so the count is the
# chat's prompt_tokens; tool_choice "none" leaves them out, as the chat
my $tools = [ { type => 'function', function => {
                  name => 'get_weather', description => 'Weather now.',
                  parameters => { type => 'object', properties => {
                      city => { type => 'string' } },
                      required => ['city'] } } } ];
$body = { messages => $msgs, tools => $tools };
($res, $j) = post('/tokenize', $body);
is($res->{status}, 200, 'tools: 200') or diag($res->{body});
$chat = vlm_json(vlm_post_json($srv, { %$body, model => 'serving',
                                        max_tokens => 1 })->{body});
is($j->{count}, $chat->{usage}{prompt_tokens},
   "tools: the count is the chat's prompt_tokens ($j->{count})");
my ($plain_res, $plain) = post('/tokenize', { messages => $msgs });
ok($j->{count} > $plain->{count} + 20,
   "tools: the tools' block counted ($j->{count} against $plain->{count})");
($res, $j) = post('/tokenize', { %$body, tool_choice => 'none' });
is($j->{count}, $plain->{count}, 'tool_choice none: no tools block');
($res, $j) = post('/tokenize', { messages => $msgs, tools => 'x' });
is($res->{status}, 400, 'tools not an array: 400');
like($res->{body}, qr/"param":"tools"/, 'the error names tools');

# detokenize
($res, $j) = post('/detokenize', { model => 'serving', tokens => $want });
is($res->{status}, 200, 'detokenize: 200') or diag($res->{body});
is_deeply($j, { prompt => 'hello world' }, 'detokenize: the text back');

my $ids = cli_ids(cli_template($msgs));
my $text = `$build/vlm-cli detokenize --model $model @$ids`;
($res, $j) = post('/detokenize', { tokens => $ids });
is($j->{prompt}, $text, 'detokenize: special tokens kept, as vLLM');


# errors

sub bad {
    my ($what, $path, $body, $status, $param, $code, $re) = @_;

    my ($res, $j) = post($path, $body);
    is($res->{status}, $status, "$what: $status");
    is($j->{error}{param}, $param, "$what: param");
    is($j->{error}{code}, $code, "$what: code");
    like($j->{error}{message}, $re, "$what: message") or diag($res->{body});
}

bad('no prompt nor messages', '/tokenize', { model => 'serving' }, 400,
    'prompt', 'missing_required_parameter', qr/Missing required parameter/);
bad('both', '/tokenize', { prompt => 'x', messages => $msgs }, 400,
    'messages', 'invalid_value', qr/either 'prompt' or 'messages'/);
bad('a prompt of numbers', '/tokenize', { prompt => [ 1, 2 ] }, 400,
    'prompt', 'invalid_type', qr/expected a string, but got an array/);
bad('add_special_tokens a string', '/tokenize',
    { prompt => 'x', add_special_tokens => 'yes' }, 400,
    'add_special_tokens', 'invalid_type', qr/expected a boolean/);
bad('return_token_strs', '/tokenize',
    { prompt => 'x', return_token_strs => JSON::PP::true }, 400,
    'return_token_strs', 'unsupported_parameter', qr/not supported/);
bad('another model', '/tokenize', { model => 'gpt-4', prompt => 'x' },
    404, 'model', 'model_not_found', qr/"gpt-4" does not exist/);
bad('a bad message', '/tokenize', { messages => [ { role => 'tool',
                                                     content => 'x' } ] },
    400, 'messages[0].tool_call_id', 'missing_required_parameter',
    qr/tool_call_id/);
bad('invalid JSON', '/tokenize', '{"prompt":', 400, undef, 'invalid_json',
    qr/JSON/);
bad('no tokens', '/detokenize', { model => 'serving' }, 400, 'tokens',
    'missing_required_parameter', qr/'tokens'/);
bad('tokens empty', '/detokenize', { tokens => [] }, 400, 'tokens',
    'empty_array', qr/empty array/);
bad('a token not an integer', '/detokenize', { tokens => [ 1, 'a' ] }, 400,
    'tokens[1]', 'invalid_type', qr/expected an integer, but got a string/);
bad('a negative token', '/detokenize', { tokens => [ -1 ] }, 400,
    'tokens[0]', 'invalid_value', qr/-1 is not a token id of this model \(0 to 3013\)/);
bad('a token outside the vocabulary', '/detokenize', { tokens => [ 3014 ] },
    400, 'tokens[0]', 'invalid_value', qr/3014 is not a token id/);

is(vlm_request($srv, 'GET', '/tokenize')->{status}, 405, 'GET: 405');

is(vlm_health($srv)->{_status}, 200, 'still healthy');

done_testing();
