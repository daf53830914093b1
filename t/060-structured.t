# Structured output and tool calls through nginx with the random-weight
# fixture model (tests/sdk/structured.py, on the OpenAI SDK and jsonschema
# of tests/requirements-sdk.txt, installed by `make venv-test`): answers
# at temperature 1 under a JSON schema all validate (also where only the
# plan in tokens, not the bound in bytes, fits in max_tokens), json_object
# answers are objects, unsupported schemas are 400s naming the JSON path, the
# SDK's parse() with a Pydantic model, tool calls required and named,
# streamed and not.  Skipped when the SDK is not installed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";
my $n = $ENV{VLM_STRUCTURED_REQUESTS} || 200;

if (!-x $python
    || system("$python -c 'import openai, jsonschema' 2>/dev/null") != 0)
{
    plan skip_all => "the OpenAI Python SDK or jsonschema is not installed "
        . "in $build/venv-test: run `make venv-test` (needs PyPI)";
}

my $srv = vlm_start(name => 'structured');
END { VLMTest::vlm_stop($srv) if $srv }

# the raw protocol first: a schema error names the path
my $res = vlm_post_json($srv, {
    %{ vlm_chat_body('hi') }, max_tokens => 4,
    response_format => { type => 'json_schema', json_schema => {
        name => 'x', schema => { type => 'object', properties => {
            a => { type => 'string', not => { const => 'x' } } } } } } });
is($res->{status}, 400, 'an unsupported keyword is a 400');
like($res->{body}, qr/"param":"response_format\.json_schema\.schema"/,
     'the param is the schema');
like($res->{body}, qr/\$\.properties\.a: unsupported keyword 'not'/,
     'the message names the JSON path and the keyword');

$res = vlm_post_json($srv, {
    %{ vlm_chat_body('hi') }, max_tokens => 4,
    response_format => { type => 'json_schema' } });
is($res->{status}, 400, 'json_schema without json_schema is a 400');

$res = vlm_post_json($srv, {
    %{ vlm_chat_body('hi') }, max_tokens => 4, tool_choice => 'required' });
is($res->{status}, 400, 'tool_choice required without tools is a 400');

$res = vlm_post_json($srv, {
    %{ vlm_chat_body('hi') }, max_tokens => 4,
    tools => [ { type => 'function', function => { name => 'f' } } ],
    tool_choice => { type => 'function', function => { name => 'g' } } });
is($res->{status}, 400, 'a named tool_choice not in tools is a 400');

# tools reach the prompt (Qwen2.5's tools block), except with "none"
my $tool = { type => 'function', function => { name => 'add',
    parameters => { type => 'object', properties => {
        a => { type => 'integer' }, b => { type => 'integer' } },
        required => ['a', 'b'] } } };
my %tokens;

for my $case (['plain'], ['auto', tools => [$tool]],
              ['none', tools => [$tool], tool_choice => 'none'])
{
    my ($name, @extra) = @$case;
    $res = vlm_post_json($srv, {
        %{ vlm_chat_body('hi') }, max_tokens => 1, @extra });
    is($res->{status}, 200, "tools in the prompt: $name");
    $tokens{$name} = vlm_json($res->{body})->{usage}{prompt_tokens};
}

ok($tokens{auto} > $tokens{plain} + 50, 'the tools block is in the prompt');
is($tokens{none}, $tokens{plain}, 'tool_choice none: no tools block');

# parallel_tool_calls false: one call, always
my $single = 0;

for (1 .. 5) {
    $res = vlm_post_json($srv, {
        %{ vlm_chat_body('hi') }, max_tokens => 80, temperature => 1,
        tools => [$tool], tool_choice => 'required',
        parallel_tool_calls => JSON::PP::false });
    my $c = vlm_json($res->{body})->{choices}[0];
    $single++ if $res->{status} == 200 && @{ $c->{message}{tool_calls} } == 1
                 && $c->{finish_reason} eq 'tool_calls';
}

is($single, 5, 'parallel_tool_calls false: one call each time');

# max_tokens too small for the shortest document: cut, never an error
$res = vlm_post_json($srv, {
    %{ vlm_chat_body('hi') }, max_tokens => 3, temperature => 1,
    response_format => { type => 'json_object' } });
is($res->{status}, 200, 'json_object with max_tokens 3');

my $pid = open my $py, '-|', $python, "$root/tests/sdk/structured.py",
    "http://127.0.0.1:$srv->{port}/v1", $n, qw(constrained tight json_object
    refused parse tools)
    or die "cannot run $python: $!";

my $checks = 0;

while (my $line = <$py>) {
    chomp $line;

    if ($line =~ /^(not )?ok - (.*)$/) {
        ok(!$1, "structured: $2");
        $checks++;

    } else {
        diag($line);
    }
}

close $py;
is($?, 0, 'structured: the script ran to its end');
ok($checks >= 24, "structured: $checks checks");

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'structured: every slot free, arena used 0');

VLMTest::check_log($srv, 'structured', qr/\[error\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'structured: no engine process left');

done_testing();
