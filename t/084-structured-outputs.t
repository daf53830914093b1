# vLLM's structured outputs through nginx with the random-weight fixture
# model, in chat completions and completions: structured_outputs' regex,
# choice, grammar (GBNF), json and json_object, and the older
# guided_regex, guided_choice, guided_grammar and guided_json; every
# answer at temperature 1 matches its regex or grammar, is one of its
# choices or validates.  Two forms at once, a form beside
# response_format, a left-recursive grammar and a bad regex are 400s
# naming the field (recursive grammars: t/095-grammar-recursive.t).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'structured-outputs', locations => <<'_EOC_');
        location = /v1/completions { vlm_completions; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

my $text = JSON::PP->new->allow_nonref;

# one request's answer text, through either endpoint
sub answer {
    my ($endpoint, %extra) = @_;

    my $body = $endpoint eq 'chat'
        ? { %{ vlm_chat_body('hi') }, %extra }
        : { model => 'serving', prompt => 'The answer is', %extra };

    my $res = vlm_request($srv, 'POST', $endpoint eq 'chat'
                          ? '/v1/chat/completions' : '/v1/completions',
                          $VLMTest::JSON->encode($body));

    return ($res, undef) if $res->{status} != 200;

    my $c = vlm_json($res->{body})->{choices}[0];

    return ($res, $endpoint eq 'chat' ? $c->{message}{content} : $c->{text},
            $c->{finish_reason});
}

# GBNF without recursion (one expression): one to three numbers, then ok
# or ko
my $gbnf = <<'_EOG_';
# a few numbers and a word
root ::= (num ",") {1,3} word
num  ::= "-"? [0-9]+
word ::= "ok" | "ko"
_EOG_

my @forms = (
    [ 'regex', qr/\A[0-9]{3}-[A-Z]{2}(x|yy)?\z/,
      { structured_outputs => { regex => '[0-9]{3}-[A-Z]{2}(x|yy)?' } },
      { guided_regex => '[0-9]{3}-[A-Z]{2}(x|yy)?' } ],
    [ 'choice', qr/\A(?:yes|no|maybe not)\z/,
      { structured_outputs => { choice => ['yes', 'no', 'maybe not'] } },
      { guided_choice => ['yes', 'no', 'maybe not'] } ],
    [ 'grammar', qr/\A(?:-?[0-9]+,){1,3}(?:ok|ko)\z/,
      { structured_outputs => { grammar => $gbnf } },
      { guided_grammar => $gbnf } ],
);

for my $f (@forms) {
    my ($name, $re, @bodies) = @$f;

    for my $endpoint ('chat', 'completions') {
        for my $i (0, 1) {
            my $ok = 0;

            for (1 .. 8) {
                my ($res, $out, $finish) = answer($endpoint, max_tokens => 40,
                    temperature => 1, %{ $bodies[$i] });

                if (defined $out && $out =~ $re && $finish eq 'stop') {
                    $ok++;

                } else {
                    diag("$name: " . ($out // $res->{body}));
                }
            }

            is($ok, 8, "$endpoint, " . ($i ? 'guided_' : 'structured_outputs.')
               . "$name: 8 answers match");
        }
    }
}

# json: a schema, or its text; json_object
my $schema = { type => 'object', properties => {
    n => { type => 'integer', minimum => 1, maximum => 9 },
    tag => { enum => ['a', 'b'] } }, required => ['n', 'tag'],
    additionalProperties => JSON::PP::false };

for my $endpoint ('chat', 'completions') {
    for my $extra ({ structured_outputs => { json => $schema } },
                   { guided_json => $VLMTest::JSON->encode($schema) })
    {
        my $ok = 0;

        for (1 .. 6) {
            my ($res, $out) = answer($endpoint, max_tokens => 60,
                                     temperature => 1, %$extra);
            my $doc = defined $out ? eval { $text->decode($out) } : undef;

            if (ref $doc eq 'HASH' && keys %$doc == 2
                && $doc->{n} =~ /\A[1-9]\z/ && $doc->{tag} =~ /\A[ab]\z/)
            {
                $ok++;

            } else {
                diag('json: ' . ($out // $res->{body}));
            }
        }

        is($ok, 6, "$endpoint, " . (keys %$extra)[0] . ": 6 answers validate");
    }

    my ($res, $out) = answer($endpoint, max_tokens => 40, temperature => 1,
                             structured_outputs => { json_object => \1 });
    my $doc = defined $out ? eval { $text->decode($out) } : undef;
    is(ref $doc, 'HASH', "$endpoint, json_object: an object");
}

# refusals, each naming its field
my @bad = (
    [ { structured_outputs => { regex => 'a', choice => ['a'] } },
      'structured_outputs', 'two forms' ],
    [ { structured_outputs => { regex => 'a' }, guided_choice => ['b'] },
      'structured_outputs', 'a form and a guided_ field' ],
    [ { guided_regex => '(a)\\1' }, 'guided_regex', 'a backreference' ],
    [ { structured_outputs => { grammar => 'root ::= root? "()"' } },
      'structured_outputs.grammar', 'a left-recursive grammar' ],
    [ { guided_grammar => 'root ::= a' }, 'guided_grammar',
      'a grammar without its rule' ],
    [ { guided_choice => [] }, 'guided_choice', 'no choice' ],
    [ { structured_outputs => { json => { type => 'integer',
                                          maximum => 1, minimum => 2 } } },
      'structured_outputs.json', 'a schema with no value' ],
    [ { structured_outputs => 'regex' }, 'structured_outputs', 'no object' ],
    [ { guided_regex => 'a', response_format => { type => 'json_object' } },
      'guided_regex', 'beside response_format' ],
);

for my $b (@bad) {
    my ($extra, $param, $what) = @$b;
    my ($res) = answer('chat', max_tokens => 4, %$extra);

    is($res->{status}, 400, "$what: 400");
    like($res->{body}, qr/"param":"\Q$param\E"/, "$what: param $param");
}

VLMTest::check_log($srv, 'structured-outputs', qr/\[(error|crit|alert)\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'structured-outputs: no engine process left');

done_testing();
