# The limits of structured output, one set for response_format and tool
# parameters: a schema whose documents nest as deep as the grammar's
# stack holds (64 values) decodes to a valid answer; one nested deeper,
# or a schema text nested deeper than 128 levels, is a 400 that names the
# limit, whether it comes as a response_format or a tool's parameters,
# with any tool_choice: a client's schema never becomes a 5xx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use VLMTest;

vlm_prereqs();

# the answers' text, already characters
my $text = JSON::PP->new->allow_nonref;

my $srv = vlm_start(name => 'schema-limits');
END { VLMTest::vlm_stop($srv) if $srv }

# n objects, each with one required property "a", around a string
sub nest {
    my ($n) = @_;

    my $s = { type => 'string', maxLength => 2 };

    for (1 .. $n) {
        $s = { type => 'object', properties => { a => $s },
               required => ['a'], additionalProperties => JSON::PP::false };
    }

    return $s;
}

# n arrays of one item around a string: a level of the schema's text each
sub nest_arrays {
    my ($n) = @_;

    my $s = { type => 'string', maxLength => 2 };

    for (1 .. $n) {
        $s = { type => 'array', items => $s, minItems => 1, maxItems => 1 };
    }

    return $s;
}

# how deep the objects of a decoded answer go along "a"
sub depth_of {
    my ($v) = @_;

    my $d = 0;

    while (ref $v eq 'HASH') {
        $v = $v->{a};
        $d++;
    }

    return $d;
}

sub schema_body {
    my ($schema, $max) = @_;

    return { %{ vlm_chat_body('hi') }, max_tokens => $max, temperature => 1,
             response_format => { type => 'json_schema', json_schema => {
                 name => 'deep', schema => $schema } } };
}

sub tool_body {
    my ($schema, $choice, $max) = @_;

    return { %{ vlm_chat_body('hi') }, max_tokens => $max, temperature => 1,
             tools => [ { type => 'function', function => {
                 name => 'deep', parameters => $schema } } ],
             tool_choice => $choice };
}

# as deep as the stack holds: answers, complete and valid
for my $n (40, 63) {
    my $res = vlm_post_json($srv, schema_body(nest($n), 1000));
    is($res->{status}, 200, "response_format $n objects deep: 200")
        or diag($res->{body});

    my $c = $res->{status} == 200
            ? vlm_json($res->{body})->{choices}[0] : {};
    my $doc = eval { $text->decode($c->{message}{content}) };
    is(depth_of($doc), $n, "response_format $n objects deep: the answer "
       . "nests $n objects");
}

my $res = vlm_post_json($srv, schema_body(nest_arrays(63), 1000));
is($res->{status}, 200, 'response_format 63 arrays deep: 200')
    or diag($res->{body});

my $c = $res->{status} == 200 ? vlm_json($res->{body})->{choices}[0] : {};
my $doc = eval { $text->decode($c->{message}{content}) };
my $d = 0;

while (ref $doc eq 'ARRAY') {
    $doc = $doc->[0];
    $d++;
}

is($d, 63, 'response_format 63 arrays deep: the answer nests 63 arrays');

$res = vlm_post_json($srv, tool_body(nest(40), 'required', 1000));
is($res->{status}, 200, 'tool parameters 40 objects deep: 200')
    or diag($res->{body});

$c = eval { vlm_json($res->{body})->{choices}[0] } || {};
diag($res->{body}) if !%$c;
my $args = eval {
    $text->decode($c->{message}{tool_calls}[0]{function}{arguments})
};
is(depth_of($args), 40, 'tool parameters 40 objects deep: valid arguments')
    or diag($res->{body});

# deeper than the stack: a 400 that names the limit
$res = vlm_post_json($srv, schema_body(nest_arrays(64), 16));
is($res->{status}, 400, 'response_format 64 arrays deep: 400');
like($res->{body}, qr/"code":"invalid_json_schema"/,
     'response_format 64 arrays deep: invalid_json_schema');
like($res->{body}, qr/deeper than 64 levels/,
     'response_format 64 arrays deep: the message names the limit');

# 64 objects: the schema's text nests 129 levels
$res = vlm_post_json($srv, schema_body(nest(64), 16));
is($res->{status}, 400, 'response_format 64 objects deep: 400');
like($res->{body}, qr/deeper than 128 levels/,
     'response_format 64 objects deep: the message names the limit');

$res = vlm_post_json($srv, tool_body(nest(63), 'required', 16));
is($res->{status}, 400, 'tool parameters 63 objects deep: 400 (the call '
   . 'takes two levels)');
like($res->{body}, qr/"param":"tools\[0\]\.function\.parameters[.\w]*"/,
     'tool parameters 63 objects deep: the param is the parameters');
like($res->{body}, qr/deeper than 62 levels/,
     'tool parameters 63 objects deep: the message names the limit');

# a schema text nested deeper than the prompt's renderers take it
for my $choice ('auto', 'required', 'none') {
    $res = vlm_post_json($srv, tool_body(nest(100), $choice, 16));
    is($res->{status}, 400, "tool parameters 100 objects deep, "
       . "tool_choice $choice: 400") or diag($res->{body});
    like($res->{body}, qr/deeper than 128 levels/,
         "tool parameters 100 objects deep, tool_choice $choice: the "
         . "message names the limit");
}

$res = vlm_post_json($srv, schema_body(nest(100), 16));
is($res->{status}, 400, 'response_format 100 objects deep: 400');
like($res->{body}, qr/deeper than 128 levels/,
     'response_format 100 objects deep: the message names the limit');

VLMTest::check_log($srv, 'schema-limits', qr/\[(error|crit|alert)\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'schema-limits: no engine process left');

done_testing();
