# The reasoning of a thinking model read apart from its answer
# (vlm_reasoning_parser): the tiny random Qwen3-VL of
# tests/fixtures/serving-qwen3vl with <think> and </think> added to its
# tokenizer as Qwen3's are (ids 3014 and 3015, inside its embedding) and a
# template that opens <think> in the generation prompt unless
# enable_thinking is false.  A logit_bias on </think> makes the greedy
# output close the reasoning somewhere; a location with the parser off
# gives the raw text, which the parsed answers must split exactly as
# Qwen3's template does: message.reasoning_content and content, the
# streamed reasoning_content and content deltas, the Responses API's
# reasoning item and message, the reasoning tokens in the usage, and the
# same for each of n choices.
# With json_object the grammar applies after </think> only; with the
# parser off, from the first token; a required tool call is the answer;
# the OpenAI Python SDK reads it all with its own types.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode ();
use File::Copy ();
use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $tmp = tempdir("vlm-reasoning-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $tmp;

my $OPEN = 3014;
my $CLOSE = 3015;

# the fixture with Qwen3's think tokens, not special (they are text)
my $model = "$tmp/thinking";
mkdir $model or die "$model: $!";
chmod 0755, $model;

for my $f (glob "$root/tests/fixtures/serving-qwen3vl/*") {
    next if -d $f;
    File::Copy::copy($f, $model) or die "cannot copy $f: $!";
}

sub edit_json {
    my ($file, $edit) = @_;

    open my $in, '<:raw', $file or die "$file: $!";
    my $j = vlm_json(do { local $/; <$in> });
    close $in;

    $edit->($j);

    open my $out, '>:raw', $file or die "$file: $!";
    print $out $VLMTest::JSON->encode($j);
    close $out;
}

edit_json("$model/tokenizer.json", sub {
    my ($j) = @_;
    for ([$OPEN, '<think>'], [$CLOSE, '</think>']) {
        push @{ $j->{added_tokens} }, {
            id => $_->[0], content => $_->[1], single_word => JSON::PP::false,
            lstrip => JSON::PP::false, rstrip => JSON::PP::false,
            normalized => JSON::PP::false, special => JSON::PP::false };
    }
});

edit_json("$model/tokenizer_config.json", sub {
    my ($j) = @_;
    for ([$OPEN, '<think>'], [$CLOSE, '</think>']) {
        $j->{added_tokens_decoder}{$_->[0]} = {
            content => $_->[1], single_word => JSON::PP::false,
            lstrip => JSON::PP::false, rstrip => JSON::PP::false,
            normalized => JSON::PP::false, special => JSON::PP::false };
    }
});

open my $tpl, '>:raw', "$model/chat_template.jinja" or die "$model: $!";
print $tpl <<'_EOT_';
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% else %}<think>
{% endif %}{% endif %}
_EOT_
close $tpl;

my $srv = vlm_start(name => 'reasoning', model => $model,
                    locations => <<'_EOC_');
        location = /v1/responses { vlm_responses; }
        location = /off/v1/chat/completions {
            vlm_chat;
            vlm_reasoning_parser off;
        }
        location = /qwen3/v1/chat/completions {
            vlm_chat;
            vlm_reasoning_parser qwen3;
        }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

my $messages = [ { role => 'user', content => 'Why is the sky blue?' } ];

sub post {
    my ($path, $body) = @_;

    my $res = vlm_request($srv, 'POST', $path,
                          $VLMTest::JSON->encode($body));

    return ($res, eval { vlm_json($res->{body}) } || {});
}

sub chat {
    my ($path, %o) = @_;

    return post($path, { model => 'thinking', messages => $messages,
                         temperature => 0, max_tokens => 16, %o });
}

# what Qwen3's template makes of a raw turn: the reasoning before
# </think> (opened by the prompt), newlines stripped; the answer after
sub split_raw {
    my ($raw) = @_;

    my $at = index($raw, '</think>');
    my ($r, $c) = $at < 0 ? ($raw, '')
                          : (substr($raw, 0, $at), substr($raw, $at + 8));
    $r =~ s/^\n+//;
    $r =~ s/\n+\z//;
    $c =~ s/^\n+//;

    return ($r, $c);
}

# a bias on </think> that closes the reasoning after some text and
# leaves an answer after it
my ($bias, $raw, $raw_tokens);

for my $b (map { $_ / 2 } 1 .. 60) {
    my ($res, $j) = chat('/off/v1/chat/completions', logprobs => JSON::PP::true,
                         logit_bias => { $CLOSE => $b });
    my $text = $j->{choices}[0]{message}{content} // '';
    my $at = index($text, '</think>');

    if ($at > 0 && length($text) > $at + 8) {
        ($bias, $raw, $raw_tokens) = ($b, $text,
                                      $j->{choices}[0]{logprobs}{content});
        last;
    }
}

ok(defined $bias, 'a logit_bias on </think> closes the reasoning midway'
                  . (defined $bias ? " ($bias)" : ''))
    or BAIL_OUT('no bias closes the reasoning: nothing to test');

my ($want_r, $want_c) = split_raw($raw);
my $n_think = 0;

for my $t (@$raw_tokens) {
    $n_think++;
    last if $t->{token} eq '</think>';
}

note('raw: ' . JSON::PP->new->ascii->encode([ $raw ]));

# non-streamed, auto (the tokenizer has both tags) and qwen3
for my $path ('/v1/chat/completions', '/qwen3/v1/chat/completions') {
    my ($res, $j) = chat($path, logit_bias => { $CLOSE => $bias });
    my $m = $j->{choices}[0]{message};

    is($res->{status}, 200, "$path: 200");
    is($m->{reasoning_content}, $want_r, "$path: reasoning_content");
    is($m->{content}, $want_c, "$path: the answer after </think>");
    is($j->{usage}{completion_tokens_details}{reasoning_tokens}, $n_think,
       "$path: reasoning_tokens, up to </think>");
}

# streamed: the deltas make the same reasoning and answer
{
    my ($res) = chat('/v1/chat/completions', logit_bias => { $CLOSE => $bias },
                     stream => JSON::PP::true,
                     stream_options => { include_usage => JSON::PP::true });
    my @ev = vlm_sse($res->{body});
    my ($r, $c, $both, $usage) = ('', '', 0, undef);

    for my $e (@ev) {
        next unless ref $e;
        $usage = $e->{usage} if $e->{usage};
        my $d = $e->{choices}[0]{delta} or next;
        $both++ if defined $d->{reasoning_content}
                   && length($d->{content} // '');
        $r .= $d->{reasoning_content} // '';
        $c .= $d->{content} // '';
    }

    is($ev[-1], '[DONE]', 'stream: [DONE]');
    is($r, $want_r, 'stream: the reasoning_content deltas');
    is($c, $want_c, 'stream: the content deltas');
    is($both, 0, 'stream: no delta has both');
    is($usage->{completion_tokens_details}{reasoning_tokens}, $n_think,
       'stream: reasoning_tokens');
}

# n choices: each its own reader, the usage their sum
{
    my ($res, $j) = chat('/v1/chat/completions', n => 2,
                         logit_bias => { $CLOSE => $bias });
    my @c = @{ $j->{choices} || [] };

    is(scalar @c, 2, 'n 2: two choices');
    is(scalar(grep { ($_->{message}{reasoning_content} // '') eq $want_r
                     && $_->{message}{content} eq $want_c } @c), 2,
       'n 2: each split');
    is($j->{usage}{completion_tokens_details}{reasoning_tokens},
       2 * $n_think, 'n 2: the reasoning tokens of both');

    ($res) = chat('/v1/chat/completions', n => 2, stream => JSON::PP::true,
                  logit_bias => { $CLOSE => $bias });
    my (@r, @a);

    for my $e (vlm_sse($res->{body})) {
        next unless ref $e && $e->{choices} && @{ $e->{choices} };
        my $ch = $e->{choices}[0];
        $r[$ch->{index}] .= $ch->{delta}{reasoning_content} // '';
        $a[$ch->{index}] .= $ch->{delta}{content} // '';
    }

    is_deeply([ @r, @a ], [ $want_r, $want_r, $want_c, $want_c ],
              'n 2, streamed: each choice split');
}

# no </think>: all reasoning, no answer
{
    my (undef, $off) = chat('/off/v1/chat/completions');
    my (undef, $on) = chat('/v1/chat/completions');
    my ($r) = split_raw($off->{choices}[0]{message}{content});

    is($on->{choices}[0]{message}{reasoning_content}, $r,
       'unclosed: the whole output is reasoning');
    is($on->{choices}[0]{message}{content}, '', 'unclosed: no answer');
    is($on->{usage}{completion_tokens_details}{reasoning_tokens},
       $on->{usage}{completion_tokens}, 'unclosed: every token reasons');
}

# enable_thinking false: the template closes the block, all is answer
{
    my %kw = (chat_template_kwargs => { enable_thinking => JSON::PP::false });
    my (undef, $off) = chat('/off/v1/chat/completions', %kw);
    my (undef, $on) = chat('/v1/chat/completions', %kw);
    my $m = $on->{choices}[0]{message};

    ok(exists $m->{reasoning_content} && !defined $m->{reasoning_content},
       'enable_thinking false: reasoning_content null');
    is($m->{content}, $off->{choices}[0]{message}{content},
       'enable_thinking false: the answer as generated');
    is($on->{usage}{completion_tokens_details}{reasoning_tokens}, 0,
       'enable_thinking false: no reasoning tokens');
}

# parser off: no reasoning_content, no details
{
    my (undef, $j) = chat('/off/v1/chat/completions',
                          logit_bias => { $CLOSE => $bias });
    ok(!exists $j->{choices}[0]{message}{reasoning_content},
       'off: no reasoning_content');
    ok(!exists $j->{usage}{completion_tokens_details}, 'off: no details');
}

# the Responses API: a reasoning item, then the message
{
    my %body = (model => 'thinking', input => 'Why is the sky blue?',
                temperature => 0, max_output_tokens => 16,
                logit_bias => { $CLOSE => $bias });
    my ($res, $j) = post('/v1/responses', \%body);
    my @out = @{ $j->{output} || [] };

    is($res->{status}, 200, 'responses: 200');
    is($out[0]{type}, 'reasoning', 'responses: a reasoning item first');
    is($out[0]{content}[0]{type}, 'reasoning_text',
       'responses: its reasoning_text');
    is($out[0]{content}[0]{text}, $want_r, 'responses: the reasoning');
    is($out[1]{type}, 'message', 'responses: then the message');
    is($out[1]{content}[0]{text}, $want_c, 'responses: the answer');
    is($j->{usage}{output_tokens_details}{reasoning_tokens}, $n_think,
       'responses: reasoning_tokens');

    ($res) = post('/v1/responses', { %body, stream => JSON::PP::true });

    my (@types, $r, $c, $done);

    for my $ev (split /\n\n/, $res->{body}) {
        next unless $ev =~ /^event: (\S+)\ndata: (.*)\z/s;
        my ($type, $d) = ($1, vlm_json($2));
        push @types, $type;
        $r .= $d->{delta} if $type eq 'response.reasoning_text.delta';
        $c .= $d->{delta} if $type eq 'response.output_text.delta';
        $done = $d->{response} if $type eq 'response.incomplete';
    }

    is(join(' ', grep { !/delta/ } @types),
       'response.created response.in_progress response.output_item.added '
       . 'response.content_part.added response.reasoning_text.done '
       . 'response.content_part.done response.output_item.done '
       . 'response.output_item.added response.content_part.added '
       . 'response.output_text.done response.content_part.done '
       . 'response.output_item.done response.incomplete',
       'responses stream: the events in order');
    is($r, $want_r, 'responses stream: the reasoning deltas');
    is($c, $want_c, 'responses stream: the answer deltas');
    is($done->{usage}{output_tokens_details}{reasoning_tokens}, $n_think,
       'responses stream: reasoning_tokens');
}

# structured output applies after the reasoning
{
    my %o = (response_format => { type => 'json_object' }, max_tokens => 40,
             logit_bias => { $CLOSE => 100 });
    my ($res, $j) = chat('/v1/chat/completions', %o);
    my $m = $j->{choices}[0]{message};

    is($res->{status}, 200, 'json_object: 200');
    is($m->{reasoning_content}, undef,
       'json_object: </think> drawn at once (its bias), no reasoning');
    ok(eval { vlm_json($m->{content}); 1 },
       'json_object: the answer after </think> is JSON')
        or diag($m->{content});

    # the parser off: the grammar from the first token, </think> masked
    ($res, $j) = chat('/off/v1/chat/completions', %o);
    my $text = $j->{choices}[0]{message}{content};
    ok(eval { vlm_json($text); 1 } && $text =~ /^\{/,
       'json_object, parser off: JSON from the first token')
        or diag($text);
}

# a required tool call is the answer's, after the reasoning; its
# arguments wander until only the plan in tokens fits, and the plan keeps
# a token for the end of text (it used them all: finish_reason "length")
{
    my ($res, $j) = chat('/v1/chat/completions', max_tokens => 60,
                         logit_bias => { $CLOSE => 100 },
                         tools => [ { type => 'function', function => {
                             name => 'get_weather', parameters => {
                                 type => 'object',
                                 properties => { city => {
                                     type => 'string', maxLength => 8 } },
                                 required => [ 'city' ] } } } ],
                         tool_choice => 'required');
    my $c = $j->{choices}[0];

    is($res->{status}, 200, 'required tool: 200');
    is($c->{finish_reason}, 'tool_calls', 'required tool: tool_calls')
        or diag($res->{body});
    is($c->{message}{tool_calls}[0]{function}{name}, 'get_weather',
       'required tool: the call');
    ok(eval { defined JSON::PP->new->decode(
                  $c->{message}{tool_calls}[0]{function}{arguments})
                  ->{city} }, 'required tool: its arguments');
}

# the OpenAI Python SDK's own types on the same answers
# (tests/sdk/reasoning.py)
my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";

SKIP: {
    skip "the OpenAI Python SDK is not installed in $build/venv-test: run "
         . "`make venv-test` (needs PyPI)", 2
        if !-x $python
           || system("$python -c 'import openai' 2>/dev/null") != 0;

    vlm_sdk_checks(10, $python, "$root/tests/sdk/reasoning.py",
                   "http://127.0.0.1:$srv->{port}/v1", 'thinking',
                   $VLMTest::JSON->encode({ $CLOSE => $bias }),
                   map { Encode::encode_utf8($_) } $want_r, $want_c);
}

done_testing();
