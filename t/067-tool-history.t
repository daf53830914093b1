# A tool round trip through nginx: a request with tools gets tool_calls,
# a second request carries the assistant's tool_calls (content null) and
# the tool results and is answered; its prompt has as many tokens as
# transformers' apply_chat_template text of the same conversation
# (tests/fixtures/chat_template/cases.json), with the C fast path of the
# serving fixture (Qwen2-VL's template, tools Qwen2.5's way:
# qwen2_vl_tools) and with the model's own template in the interpreter
# (Qwen3-VL's).  Malformed tool messages and tool calls are 400s naming
# the field, and the server goes on.  Then the OpenAI SDK's round trip
# and LangChain's with_structured_output and tool loop
# (tests/sdk/tool_round.py; skipped without `make venv-test`).  Plain
# Test::More, as t/046-chat-template.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode qw(encode);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";
my $tmp = tempdir("vlm-tools-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $tmp;

sub slurp {
    my ($path) = @_;
    open my $in, '<:raw', $path or die "cannot read $path: $!";
    local $/;
    return scalar <$in>;
}

my $fixture = VLMTest::vlm_json(
    slurp("$root/tests/fixtures/chat_template/cases.json"));

# transformers' text of a fixture case, and the body that carries its
# conversation (JSON text: the order of the objects stays, and so the text)
sub expected {
    my ($tmpl, $conv, $tools, $model) = @_;

    for my $c (@{ $fixture->{cases} }) {
        next unless $c->{template} eq $tmpl && $c->{conversation} eq $conv
                    && !!$c->{client}{tools} == !!$tools
                    && $c->{trusted}{add_generation_prompt}
                    && !$c->{trusted}{add_vision_id};
        defined $c->{expected} or die "$tmpl $conv: transformers failed";
        my $body = qq({"model": "$model", "max_tokens": 1, )
                 . qq("temperature": 0, $c->{request}});
        return (encode('UTF-8', $c->{expected}), encode('UTF-8', $body));
    }

    die "no fixture case for $tmpl $conv";
}

sub n_tokens {
    my ($model, $text) = @_;

    open my $out, '>:raw', "$tmp/p.txt" or die;
    print $out $text;
    close $out;

    my $ids = `$build/vlm-cli tokenize --model $model --file $tmp/p.txt`;
    $? == 0 or die "vlm-cli tokenize failed";

    return scalar(split ' ', $ids);
}

my $serving = "$root/tests/fixtures/serving";
my $srv = vlm_start(name => 'tool-history');
END { VLMTest::vlm_stop($srv) if $srv }

my $tool = { type => 'function', function => { name => 'get_weather',
    parameters => { type => 'object', properties => {
        city => { type => 'string', maxLength => 12 } },
        required => ['city'], additionalProperties => JSON::PP::false } } };

# the round trip, raw
my @history = ({ role => 'user', content => 'Weather in Paris?' });

my $res = vlm_post_json($srv, {
    model => 'serving', messages => \@history, max_tokens => 120,
    temperature => 1, tools => [$tool], tool_choice => 'required',
    parallel_tool_calls => JSON::PP::false });
is($res->{status}, 200, 'round trip: the first request') or diag($res->{body});

my $first = vlm_json($res->{body});
my $msg = $first->{choices}[0]{message};
is($first->{choices}[0]{finish_reason}, 'tool_calls',
   'round trip: the answer calls a tool') or diag($res->{body});
ok(!defined $msg->{content}, 'round trip: content null');

push @history, $msg;
push @history, map {
    { role => 'tool', tool_call_id => $_->{id}, content => '18 C' }
} @{ $msg->{tool_calls} };

$res = vlm_post_json($srv, {
    model => 'serving', messages => \@history, max_tokens => 4,
    temperature => 0, tools => [$tool] });
is($res->{status}, 200, 'round trip: the second request, with the tool '
   . 'calls and results') or diag($res->{body});
cmp_ok(vlm_json($res->{body})->{usage}{prompt_tokens}, '>',
       $first->{usage}{prompt_tokens} + 10,
       'round trip: the history is in the prompt');

# the prompt is transformers' text: fast path, tools Qwen2.5's way
for my $case (['tool_round', 1], ['tool_round', 0], ['tool_first', 0]) {
    my ($conv, $tools) = @$case;
    my ($text, $body) = expected('qwen2_vl_tools', $conv, $tools,
                                 'serving');

    $res = vlm_post_json($srv, $body);
    is($res->{status}, 200, "fast path, $conv, tools $tools: 200")
        or diag($res->{body});
    is(vlm_json($res->{body})->{usage}{prompt_tokens},
       n_tokens($serving, $text),
       "fast path, $conv, tools $tools: the prompt is qwen2_vl_tools' text");
}

# tool_choice "none": the model is not told of the tools
sub tools_none {
    my ($tmpl, $model, $dir, $what) = @_;
    my ($text) = expected($tmpl, 'tool_round', 0, $model);
    my (undef, $body) = expected($tmpl, 'tool_round', 1, $model);

    $body =~ s/^\{/{"tool_choice": "none", / or die;
    $res = vlm_post_json($srv, $body);
    is($res->{status}, 200, "$what, tool_choice none: 200")
        or diag($res->{body});
    is(vlm_json($res->{body})->{usage}{prompt_tokens}, n_tokens($dir, $text),
       "$what, tool_choice none: the prompt is the one without tools");
}

tools_none('qwen2_vl_tools', 'serving', $serving, 'fast path');

# malformed shapes: 400s naming the field
my $q = { role => 'user', content => 'q' };
my $call = sub {
    my (%f) = @_;
    return { role => 'assistant', content => undef, tool_calls => [ {
        id => 'c1', type => 'function',
        function => { name => 'f', arguments => '{}' }, %f } ] };
};

for my $bad (
    [ 'tool without tool_call_id', 'messages[1].tool_call_id',
      [ $q, { role => 'tool', content => 'x' } ] ],
    [ 'tool_call_id not a string', 'messages[1].tool_call_id',
      [ $q, { role => 'tool', tool_call_id => 5, content => 'x' } ] ],
    [ 'tool without content', 'messages[1].content',
      [ $q, { role => 'tool', tool_call_id => 'c1' } ] ],
    [ 'tool with an image', 'messages[1].content[0].type',
      [ $q, { role => 'tool', tool_call_id => 'c1', content => [
          { type => 'image_url', image_url => { url => 'http://h/a' } } ] }
      ] ],
    [ 'tool_calls not an array', 'messages[1].tool_calls',
      [ $q, { role => 'assistant', tool_calls => { id => 'c1' } } ] ],
    [ 'tool_calls of a user', 'messages[0].tool_calls',
      [ { %$q, tool_calls => [] } ] ],
    [ 'a call without id', 'messages[1].tool_calls[0].id',
      [ $q, $call->(id => undef) ] ],
    [ 'a call of another type', 'messages[1].tool_calls[0].type',
      [ $q, $call->(type => 'custom') ] ],
    [ 'a call without function', 'messages[1].tool_calls[0].function',
      [ $q, $call->(function => undef) ] ],
    [ 'a function without name',
      'messages[1].tool_calls[0].function.name',
      [ $q, $call->(function => { arguments => '{}' }) ] ],
    [ 'arguments as an object',
      'messages[1].tool_calls[0].function.arguments',
      [ $q, $call->(function => { name => 'f', arguments => { a => 1 } }) ]
    ],
    [ 'arguments not JSON',
      'messages[1].tool_calls[0].function.arguments',
      [ $q, $call->(function => { name => 'f', arguments => '{"a":' }) ] ],
    [ "a 'function' message", 'messages[1].role',
      [ $q, { role => 'function', name => 'f', content => 'x' } ] ],
) {
    my ($name, $param, $msgs) = @$bad;

    $res = vlm_post_json($srv, { model => 'serving', messages => $msgs,
                                 max_tokens => 1 });
    my $j = eval { vlm_json($res->{body}) } || {};
    is($res->{status}, 400, "$name: 400");
    is($j->{error}{param}, $param, "$name: param $param");
    like($j->{error}{message} // '', qr/\Q$param\E/,
         "$name: the message names it");
}

$res = vlm_post_json($srv, { model => 'serving', messages => \@history,
                             max_tokens => 2 });
is($res->{status}, 200, 'the server goes on after the 400s');

# the OpenAI SDK and LangChain
SKIP: {
    skip "the OpenAI Python SDK is not installed in $build/venv-test: run "
         . "`make venv-test` (needs PyPI)", 1
        if !-x $python
           || system("$python -c 'import openai' 2>/dev/null") != 0;

    my @parts = ('openai');
    if (system("$python -c 'import langchain_openai' 2>/dev/null") == 0) {
        push @parts, 'langchain';
    } else {
        diag('langchain-openai is not installed: its checks are skipped');
    }

    my $pid = open my $py, '-|', $python, "$root/tests/sdk/tool_round.py",
        "http://127.0.0.1:$srv->{port}/v1", @parts
        or die "cannot run $python: $!";

    my $checks = 0;

    while (my $line = <$py>) {
        chomp $line;

        if ($line =~ /^(not )?ok - (.*)$/) {
            ok(!$1, "sdk: $2");
            $checks++;

        } else {
            diag($line);
        }
    }

    close $py;
    is($?, 0, 'sdk: the script ran to its end');
    ok($checks >= (@parts == 2 ? 12 : 7), "sdk: $checks checks");
}

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'every slot free, arena used 0');

VLMTest::check_log($srv, 'tool-history', qr/\[error\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'no engine process left');

# the model's own template in the interpreter: Qwen3-VL's
my $model = vlm_model_with_template("$tmp/qwen3vl",
                                    $fixture->{templates}{qwen3_vl});

$srv = vlm_start(name => 'tool-history-jinja', model => $model);

for my $case (['tool_round', 1], ['tool_round', 0], ['tool_first', 1]) {
    my ($conv, $tools) = @$case;
    my ($text, $body) = expected('qwen3_vl', $conv, $tools, 'qwen3vl');

    $res = vlm_post_json($srv, $body);
    is($res->{status}, 200, "template, $conv, tools $tools: 200")
        or diag($res->{body});
    is(vlm_json($res->{body})->{usage}{prompt_tokens},
       n_tokens($model, $text),
       "template, $conv, tools $tools: the prompt is transformers' text "
       . "with Qwen3-VL's template");
}

tools_none('qwen3_vl', 'qwen3vl', $model, 'template');

# a long tool result (a string the parser reads from the body in place)
# reaches the template as its text, as a string and as a text part
{
    my $long = join ' ', ('result') x 300;
    my @n;

    for my $content ($long, "$long.",
                     [ { type => 'text', text => 'x' },
                       { type => 'text', text => $long } ])
    {
        $res = vlm_post_json($srv, { model => 'qwen3vl', max_tokens => 1,
            messages => [ @history[0, 1], { role => 'tool',
                tool_call_id => $history[1]{tool_calls}[0]{id},
                content => $content } ] });
        is($res->{status}, 200, 'template: a long tool result')
            or diag($res->{body});
        push @n, vlm_json($res->{body})->{usage}{prompt_tokens};
    }

    cmp_ok($n[0], '>', 300, "template: the long result is in the prompt "
           . "($n[0] tokens)");
    cmp_ok($n[1] - $n[0], '<=', 2, 'template: as long as the same text '
           . 'with one more byte');
    cmp_ok(abs($n[2] - $n[0]), '<=', 2, 'template: a long text part too');
}

# the raw round trip's history too
$res = vlm_post_json($srv, { model => 'qwen3vl', messages => \@history,
                             max_tokens => 2, tools => [$tool] });
is($res->{status}, 200, 'template: the round trip history')
    or diag($res->{body});

VLMTest::check_log($srv, 'tool-history-jinja', qr/\[error\]/);

@left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'template: no engine process left');

done_testing();
