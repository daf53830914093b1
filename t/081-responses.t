# POST /v1/responses (vlm_responses) with the tiny random model of
# tests/fixtures/serving: a greedy answer is the chat's answer to the same
# conversation (input as a string or items, instructions, an image with
# its detail, a function_call round trip), in the response object with
# usage; streamed, the typed events in order whose deltas make the same
# text; max_output_tokens gives an incomplete response; text.format
# json_schema gives a document of the schema; a required function tool a
# function_call item; every bad body a 400 with the Responses path; and
# the OpenAI Python SDK's responses.create and responses.stream
# (tests/sdk/responses.py) and an agent of the OpenAI Agents SDK
# (tests/sdk/agents_sdk.py) when build/venv-test has them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Socket qw(SOL_SOCKET SO_RCVBUF);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();

my $srv = vlm_start(name => 'responses', listen => 'sndbuf=4k',
                    http_config => 'vlm_max_tokens 2000;',
                    locations => <<'_EOC_');
        location = /v1/responses { vlm_responses; }
        location = /tokenize { vlm_tokenize; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub post {
    my ($path, $body) = @_;

    my $res = vlm_request($srv, 'POST', $path,
                          ref $body ? $VLMTest::JSON->encode($body) : $body);

    return ($res, eval { vlm_json($res->{body}) });
}

sub chat_text {
    my ($messages, %o) = @_;

    my ($res, $j) = post('/v1/chat/completions',
                         { model => 'serving', temperature => 0,
                           max_tokens => 8, messages => $messages, %o });
    return $j->{choices}[0]{message}{content};
}

# the text of a response's message item
sub output_text {
    my ($r) = @_;
    my @m = grep { $_->{type} eq 'message' } @{ $r->{output} || [] };
    return @m ? $m[0]{content}[0]{text} : undef;
}

# the events of a stream, "event: type" and "data: {...}" each
sub events {
    my ($body) = @_;
    my @ev;

    for my $e (split /\n\n/, $body) {
        my ($name, $data) = $e =~ /^event: (\S+)\ndata: (.*)\z/s;
        my $d = defined $data ? eval { vlm_json($data) } : undef;
        push @ev, $d && $d->{type} eq $name ? $d : { type => "bad: $e" };
    }

    return @ev;
}

my $base = { model => 'serving', temperature => 0, max_output_tokens => 8 };
my $image = vlm_data_url('image/png', vlm_png(40, 28, 3));

# --- a string, with instructions

my ($res, $j) = post('/v1/responses', { %$base, input => 'Hello',
                                        instructions => 'Be brief.' });
is($res->{status}, 200, 'a string input: 200') or diag($res->{body});
like($j->{id}, qr/^resp_[0-9a-f]{32}$/, 'id resp_');
is($j->{object}, 'response', 'object response');
is($j->{model}, 'serving', 'model');
is($j->{instructions}, 'Be brief.', 'the instructions echoed');
ok(!$j->{store}, 'store false');
is($j->{output}[0]{type}, 'message', 'a message item');
is($j->{output}[0]{role}, 'assistant', 'of the assistant');
is(output_text($j),
   chat_text([ { role => 'system', content => 'Be brief.' },
               { role => 'user', content => 'Hello' } ]),
   'the text of the chat on the same messages');
is($j->{status}, 'incomplete', 'max_output_tokens 8: incomplete');
is($j->{incomplete_details}{reason}, 'max_output_tokens',
   'incomplete_details.reason');
is($j->{usage}{output_tokens}, 8, 'usage.output_tokens');
is($j->{usage}{total_tokens},
   $j->{usage}{input_tokens} + $j->{usage}{output_tokens},
   'usage.total_tokens');

# --- items: text, an image with detail, an assistant turn, a tool round

my $items = [
    { role => 'user', content => [
        { type => 'input_image', image_url => $image, detail => 'low' },
        { type => 'input_text', text => 'What is it?' } ] },
    { type => 'message', role => 'assistant',
      content => [ { type => 'output_text', text => 'A square.' } ] },
    { type => 'function_call', call_id => 'call_1', name => 'area',
      arguments => '{"side":2}' },
    { type => 'function_call_output', call_id => 'call_1', output => '4' },
];

($res, $j) = post('/v1/responses', { %$base, input => $items });
is($res->{status}, 200, 'items: 200') or diag($res->{body});
is(output_text($j),
   chat_text([
       { role => 'user', content => [
           { type => 'image_url',
             image_url => { url => $image, detail => 'low' } },
           { type => 'text', text => 'What is it?' } ] },
       { role => 'assistant', content => 'A square.' },
       { role => 'assistant', content => undef, tool_calls => [
           { id => 'call_1', type => 'function',
             function => { name => 'area', arguments => '{"side":2}' } } ] },
       { role => 'tool', tool_call_id => 'call_1', content => '4' } ]),
   'items: the text of the chat on the same conversation');

my ($tres, $tok) = post('/tokenize', { model => 'serving', messages => [
    { role => 'user', content => [
        { type => 'image_url', image_url => { url => $image,
                                              detail => 'low' } },
        { type => 'text', text => 'What is it?' } ] } ] });
($res, $j) = post('/v1/responses', { %$base, max_output_tokens => 1,
                                     input => [ $items->[0] ] });
is($j->{usage}{input_tokens}, $tok->{count},
   'usage.input_tokens: the chat\'s prompt, the image counted')
    or diag($tres->{body});

# --- streamed: the events, in order, make the same answer

my $st = vlm_request($srv, 'POST', '/v1/responses',
                     $VLMTest::JSON->encode({ %$base, input => 'Hello',
                                              instructions => 'Be brief.',
                                              stream => JSON::PP::true() }));
is($st->{status}, 200, 'stream: 200');
like($st->{headers}{'content-type'}, qr{^text/event-stream},
     'stream: text/event-stream');

my @ev = events($st->{body});

my @types = map { $_->{type} } @ev;
is_deeply([ @types[0 .. 3] ],
          [ qw(response.created response.in_progress
               response.output_item.added response.content_part.added) ],
          'stream: created, in_progress, the item and its part');
is_deeply([ @types[-4 .. -1] ],
          [ qw(response.output_text.done response.content_part.done
               response.output_item.done response.incomplete) ],
          'stream: the text, part and item done, then incomplete');
my %text_events = map { ("response.$_" => 1) } qw(
    created in_progress output_item.added content_part.added
    output_text.delta output_text.done content_part.done output_item.done
    incomplete);
ok(!grep({ !$text_events{$_} } @types), 'stream: no other event')
    or diag("@types");
is_deeply([ map { $_->{sequence_number} } @ev ], [ 0 .. $#ev ],
          'stream: sequence_number 0, 1, ...');
my $deltas = join '', map { $_->{delta} }
                      grep { $_->{type} eq 'response.output_text.delta' } @ev;
my $final = $ev[-1]{response};
is($deltas, chat_text([ { role => 'system', content => 'Be brief.' },
                        { role => 'user', content => 'Hello' } ]),
   'stream: the deltas make the chat\'s text');
is(output_text($final), $deltas, 'stream: the final response holds it');
is($final->{usage}{output_tokens}, 8, 'stream: the final usage');
is($ev[0]{response}{status}, 'in_progress', 'stream: created in_progress');

# --- a client that reads slowly: the events wait for it, and all come

{
    my $sock = VLMTest::connect_to($srv);
    setsockopt($sock, SOL_SOCKET, SO_RCVBUF, 4096);
    print $sock VLMTest::request_text('POST', '/v1/responses',
        $VLMTest::JSON->encode({ model => 'serving', input => 'Hello',
                                 max_output_tokens => 2000,
                                 # no end of text: every token comes
                                 logit_bias => { 3000 => -100,
                                                 3002 => -100 },
                                 stream => JSON::PP::true() }));
    my $st = { sock => $sock, raw => '' };

    ok(vlm_read_some($st, 10, qr/output_text\.delta/),
       'slow reader: the stream has begun');
    sleep 2;
    vlm_read_some($st, 60);
    close $sock;

    my @slow = events(VLMTest::parse_response($st->{raw})->{body});
    my $last = $slow[-1]{response};
    like($slow[-1]{type}, qr/^response\.(completed|incomplete)$/,
         'slow reader: the stream ends with the response')
        or diag(substr($st->{raw}, -400));
    ok($last && $last->{usage}{output_tokens} > 200,
       'slow reader: a long one') or diag(substr($st->{raw}, -1500));
    is(join('', map { $_->{delta} }
                grep { $_->{type} eq 'response.output_text.delta' } @slow),
       output_text($last), 'slow reader: every delta came');
    ok(!grep({ $_->{type} =~ /^bad/ } @slow),
       'slow reader: every event whole');
}

# --- text.format json_schema, and a required function tool

my $schema = { type => 'object', properties => {
                   n => { type => 'integer' },
                   s => { type => 'string', maxLength => 4 } },
               required => [ 'n', 's' ], additionalProperties => 0 };

($res, $j) = post('/v1/responses', {
    model => 'serving', input => 'A document.', max_output_tokens => 40,
    text => { format => { type => 'json_schema', name => 'doc',
                          schema => $schema, strict => JSON::PP::true() } } });
is($res->{status}, 200, 'json_schema: 200') or diag($res->{body});
my $doc = eval { JSON::PP->new->decode(output_text($j)) };
ok($doc && exists $doc->{n} && exists $doc->{s}
   && $doc->{n} =~ /^-?\d+$/ && length($doc->{s}) <= 4,
   'json_schema: a document of the schema') or diag(output_text($j));
is($j->{text}{format}{name}, 'doc', 'json_schema: text echoed');

my $tools = [ { type => 'function', name => 'area',
                parameters => { type => 'object',
                                properties => { side => { type => 'integer' } },
                                required => [ 'side' ] } } ];

for my $stream (0, 1) {
    my $what = $stream ? 'a required tool, streamed' : 'a required tool';
    ($res, $j) = post('/v1/responses', {
        model => 'serving', input => 'Area?', max_output_tokens => 200,
        parallel_tool_calls => JSON::PP::false(),
        tools => $tools, tool_choice => 'required',
        $stream ? (stream => JSON::PP::true()) : () });
    is($res->{status}, 200, "$what: 200");

    if ($stream) {
        my @ev = events($res->{body});
        $j = $ev[-1]{response};
        ok(grep({ $_->{type} eq 'response.function_call_arguments.delta' }
                @ev), "$what: the arguments as deltas");
    }

    my ($call) = grep { $_->{type} eq 'function_call' } @{ $j->{output} };
    is($call && $call->{name}, 'area', "$what: a function_call item");
    like($call && $call->{call_id}, qr/^call_/, "$what: its call_id");
    my $args = eval { vlm_json($call->{arguments}) };
    ok($args && $args->{side} =~ /^-?\d+$/, "$what: its arguments")
        or diag($res->{body});
    is($j->{status}, 'completed', "$what: completed")
        or diag(substr($res->{body}, -1500));
}

# --- bad bodies: 400s with the Responses path

for my $c (
    [ '{"model":"serving","input":"x","previous_response_id":"resp_1"}',
      'unsupported_parameter', 'previous_response_id' ],
    [ '{"model":"serving","input":"x","store":true}',
      'unsupported_value', 'store' ],
    [ '{"model":"serving"}', 'missing_required_parameter', 'input' ],
    [ '{"model":"serving","input":[]}', 'empty_array', 'input' ],
    [ '{"model":"serving","input":[{"role":"user","content":[{"type":'
      . '"input_image","image_url":"data:image/png;base64,AAAA"}]}]}',
      'invalid_value', 'input[0].content[0].image_url' ],
    [ '{"model":"serving","input":[{"role":"user","content":[{"type":'
      . '"input_file","file_id":"f"}]}]}',
      'unsupported_value', 'input[0].content[0].type' ],
    [ '{"model":"serving","input":"x","max_output_tokens":0}',
      'invalid_value', 'max_output_tokens' ],
    [ '{"model":"serving","input":"x","tools":[{"type":"web_search"}]}',
      'unsupported_value', 'tools[0].type' ],
    [ '{"model":"serving","input":"x","text":{"format":{"type":'
      . '"json_schema","name":"a","schema":{"type":"string","not":{}}}}}',
      'invalid_json_schema', 'text.format.schema' ],
    [ '{"model":"serving","input":[{"type":"function_call","call_id":"c",'
      . '"name":"f"}]}', 'missing_required_parameter', 'input[0].arguments' ],
    [ '{"model":"serving","input":"x","n":2}', 'unknown_parameter', 'n' ],
    [ '{"model":"serving","input":"x","stop":["a"]}',
      'unknown_parameter', 'stop' ],
    [ '{"model":"serving","input":"x","logprobs":true}',
      'unknown_parameter', 'logprobs' ],
    [ '{"model":"serving","input":"x","top_logprobs":21}',
      'invalid_value', 'top_logprobs' ],
    [ '{"model":"serving","input":"x","metadata":{'
      . join(',', map { "\"k$_\":\"v\"" } 1 .. 17) . '}}',
      'object_above_max_properties', 'metadata' ],
    [ '{"model":"serving","input":"x","metadata":{"' . ('k' x 65)
      . '":"v"}}', 'string_above_max_length', 'metadata' ],
    [ '{"model":"serving","input":"x","metadata":{"k":"' . ('v' x 2000)
      . '"}}', 'string_above_max_length', 'metadata.k' ],
    [ '{"model":"serving","input":"x","metadata":{"k":7}}',
      'invalid_type', 'metadata.k' ],
    [ '{"model":"serving","input":"x"', 'invalid_json', undef ],
    [ '', 'invalid_json', undef ],
) {
    my ($body, $code, $param) = @$c;
    ($res, $j) = post('/v1/responses', $body);
    is($res->{status}, 400, "400: $code at " . ($param // 'null'));
    like($res->{headers}{'content-type'}, qr{^application/json},
         "400: $code: JSON");
    is($j->{error}{code}, $code, "400: $code") or diag($res->{body});
    is($j->{error}{param}, $param, "400: $code: param");
    is($j->{error}{type}, 'invalid_request_error', "400: $code: type");
}

# --- logprobs: include's message.output_text.logprobs and top_logprobs,
# the chat's logprobs for the same conversation

{
    my %body = (model => 'serving', input => 'Hello', temperature => 0,
                max_output_tokens => 6, top_logprobs => 2,
                include => [ 'message.output_text.logprobs' ]);
    my ($r, $o) = post('/v1/responses', \%body);
    my ($cr, $chat) = post('/v1/chat/completions', {
        model => 'serving', temperature => 0, max_tokens => 6,
        logprobs => JSON::PP::true, top_logprobs => 2,
        messages => [ { role => 'user', content => 'Hello' } ] });
    my ($part) = map { @{ $_->{content} } }
                 grep { $_->{type} eq 'message' } @{ $o->{output} || [] };

    is($r->{status}, 200, 'logprobs: 200');
    is_deeply($part->{logprobs}, $chat->{choices}[0]{logprobs}{content},
              'logprobs: the chat\'s, top_logprobs included');
    is(scalar @{ $part->{logprobs}[0]{top_logprobs} || [] }, 2,
       'logprobs: 2 top_logprobs');

    ($r) = post('/v1/responses', { %body, stream => JSON::PP::true });
    my @ev = events($r->{body});
    my @lp = map { @{ $_->{logprobs} || [] } }
             grep { $_->{type} eq 'response.output_text.delta' } @ev;
    my ($done) = grep { $_->{type} eq 'response.output_text.done' } @ev;
    my $tokens = sub { join '|', map { $_->{token} } @{ $_[0] || [] } };

    # the same tokens (their logprobs may differ in the last digits: the
    # prompt's KV now comes from the prefix cache); a last token that
    # brought no text has its logprob in the done event only
    is($tokens->($done->{logprobs}), $tokens->($part->{logprobs}),
       'logprobs: the stream\'s, token by token');
    is($tokens->(\@lp),
       $tokens->([ @{ $done->{logprobs} }[0 .. $#lp] ]),
       'logprobs: the deltas\' are the first of them');
    ok(@lp && !grep({ !defined $_->{logprob} || $_->{logprob} > 0 } @lp),
       'logprobs: the stream\'s, each a log probability');

    ($r, $o) = post('/v1/responses', { %body, include => [] });
    ($part) = map { @{ $_->{content} } }
              grep { $_->{type} eq 'message' } @{ $o->{output} || [] };
    is_deeply($part->{logprobs}, [], 'logprobs: none without include');
}

($res, $j) = post('/v1/responses', { model => 'other', input => 'x' });
is($res->{status}, 404, 'another model: 404');
is($j->{error}{code}, 'model_not_found', 'another model: model_not_found');

$res = vlm_request($srv, 'GET', '/v1/responses');
is($res->{status}, 405, 'GET: 405');

# --- a model's own chat template (Qwen3-VL's, by the Jinja interpreter)
# gets the conversation and the tools in the chat's shapes

{
    my $q3 = vlm_start(name => 'responses-qwen3vl', port => vlm_port(31),
                       model => "$root/tests/fixtures/serving-qwen3vl",
                       locations => <<'_EOC_');
        location = /v1/responses { vlm_responses; }
_EOC_

    my $name = 'serving-qwen3vl';
    my @chat = (
        { role => 'system', content => 'Be brief.' },
        { role => 'user', content => [
            { type => 'image_url', image_url => { url => $image } },
            { type => 'text', text => 'What is it?' } ] },
        { role => 'assistant', content => undef, tool_calls => [
            { id => 'call_1', type => 'function',
              function => { name => 'area', arguments => '{"side":2}' } } ] },
        { role => 'tool', tool_call_id => 'call_1', content => '4' });
    my @input = (
        { role => 'user', content => [
            { type => 'input_image', image_url => $image },
            { type => 'input_text', text => 'What is it?' } ] },
        { type => 'function_call', call_id => 'call_1', name => 'area',
          arguments => '{"side":2}' },
        { type => 'function_call_output', call_id => 'call_1',
          output => '4' });

    # the tool's keys in the order clients send them: the template
    # writes them in that order
    my $chat = $VLMTest::JSON->encode({ model => $name, messages => \@chat,
                                        max_tokens => 1 });
    my $params = $VLMTest::JSON->encode($tools->[0]{parameters});
    my $tool = '{"type":"function","function":{"name":"area",'
               . '"parameters":' . $params . '}}';
    $chat =~ s/^\{/{"tools":[$tool],/;
    my $t = vlm_request($q3, 'POST', '/v1/chat/completions', $chat);
    my $r = vlm_request($q3, 'POST', '/v1/responses', $VLMTest::JSON->encode(
        { model => $name, instructions => 'Be brief.', input => \@input,
          tools => $tools, max_output_tokens => 1 }));
    my $tj = eval { vlm_json($t->{body}) } || {};
    my $rj = eval { vlm_json($r->{body}) } || {};

    is($r->{status}, 200, 'a model\'s template: 200') or diag($r->{body});
    ok($tj->{usage}{prompt_tokens} > 100, 'a model\'s template: the chat')
        or diag($t->{body});
    is($rj->{usage}{input_tokens}, $tj->{usage}{prompt_tokens},
       'a model\'s template: the prompt of the chat\'s messages and tools');

    VLMTest::vlm_stop($q3);
}

# --- the OpenAI Python SDK

my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";

SKIP: {
    skip "the OpenAI Python SDK is not installed in $build/venv-test: run "
         . "`make venv-test` (needs PyPI)", 2
        if !-x $python
           || system("$python -c 'import openai' 2>/dev/null") != 0;

    vlm_sdk_checks(10, $python, "$root/tests/sdk/responses.py",
                   "http://127.0.0.1:$srv->{port}/v1");
}

# --- an agent framework on it: the OpenAI Agents SDK
# (tests/sdk/agents_sdk.py): a tool call, its output sent back, an answer of
# the agent's output type, run whole and streamed

SKIP: {
    skip "the OpenAI Agents SDK is not installed in $build/venv-test: run "
         . "`make venv-test` (needs PyPI)", 2
        if !-x $python
           || system("$python -c 'import agents' 2>/dev/null") != 0;

    vlm_sdk_checks(10, $python, "$root/tests/sdk/agents_sdk.py",
                   "http://127.0.0.1:$srv->{port}/v1");
}

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'every slot free, arena used 0');

done_testing();
