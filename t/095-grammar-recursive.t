# Recursive GBNF grammars (vLLM's guided_grammar and
# structured_outputs.grammar) through nginx with the random-weight fixture
# model, in chat completions and completions: arithmetic with + * and
# parentheses, nested lists and a small JSON, written as grammars whose
# rules refer to themselves; every answer at temperature 1, over several
# seeds, parses under its grammar (Perl's recursive patterns) and stops
# by itself within max_tokens, ambiguous grammars too.  Left recursion
# and a grammar without an end are 400s that name the rule.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'grammar-recursive', locations => <<'_EOC_');
        location = /v1/completions { vlm_completions; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

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

my $arith = <<'_EOG_';
# sums of products of digits and parenthesized sums
root   ::= expr
expr   ::= term ("+" term)*
term   ::= factor ("*" factor)*
factor ::= [0-9] | "(" expr ")"
_EOG_

my $arith_re = qr{
    \A (?&expr) \z
    (?(DEFINE)
        (?<expr>   (?&term) (?: \+ (?&term) )* )
        (?<term>   (?&factor) (?: \* (?&factor) )* )
        (?<factor> [0-9] | \( (?&expr) \) ) )
}x;

my $lists = <<'_EOG_';
root ::= list
list ::= "[" (elem ("," elem)*)? "]"
elem ::= [xy] | list
_EOG_

my $lists_re = qr{
    \A (?&list) \z
    (?(DEFINE)
        (?<list> \[ (?: (?&elem) (?: , (?&elem) )* )? \] )
        (?<elem> [xy] | (?&list) ) )
}x;

my $json = <<'_EOG_';
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" (pair ("," pair)*)? "}"
pair   ::= string ":" value
array  ::= "[" (value ("," value)*)? "]"
string ::= "\"" [a-z]{0,6} "\""
number ::= "-"? ("0" | [1-9] [0-9]{0,2})
_EOG_

my $json_re = qr{
    \A (?&value) \z
    (?(DEFINE)
        (?<value>  (?&object) | (?&array) | (?&string) | (?&number)
                   | true | false | null )
        (?<object> \{ (?: (?&pair) (?: , (?&pair) )* )? \} )
        (?<pair>   (?&string) : (?&value) )
        (?<array>  \[ (?: (?&value) (?: , (?&value) )* )? \] )
        (?<string> " [a-z]{0,6} " )
        (?<number> -? (?: 0 | [1-9][0-9]{0,2} ) ) )
}x;

my $text = JSON::PP->new->allow_nonref;

# each with what an answer that nests holds
my @grammars = (
    [ 'arithmetic', $arith, $arith_re, qr/\(/ ],
    [ 'nested lists', $lists, $lists_re, qr/\[.*\[/ ],
    [ 'json', $json, $json_re, qr/[\[{].*[\[{]/ ],
);

for my $g (@grammars) {
    my ($name, $gbnf, $re, $nested) = @$g;
    my $nests = 0;

    for my $endpoint ('chat', 'completions') {
        for my $form ({ structured_outputs => { grammar => $gbnf } },
                      { guided_grammar => $gbnf })
        {
            my $ok = 0;
            my $field = (keys %$form)[0];

            for my $seed (1 .. 6) {
                my ($res, $out, $finish) = answer($endpoint,
                    max_tokens => 48, temperature => 1, seed => $seed,
                    %$form);

                my $good = defined $out && $out =~ $re
                           && $finish eq 'stop';

                # JSON as the grammar writes it is JSON
                $good &&= defined eval { $text->decode($out); 1 }
                    if $name eq 'json';

                if ($good) {
                    $ok++;
                    $nests++ if $out =~ $nested;

                } else {
                    diag("$name: " . ($out // $res->{body}));
                }
            }

            is($ok, 6, "$endpoint, $field, $name: 6 answers parse");
        }
    }

    # the recursion at work: some answers nest
    ok($nests > 0, "$name: $nests answers nest");
}

# one deep answer: a list nested as deep as the budget lets it, closed
{
    my $deep = <<'_EOG_';
root ::= list
list ::= "[" list? "]"
_EOG_
    my ($res, $out, $finish) = answer('completions', max_tokens => 40,
        temperature => 1, seed => 7, guided_grammar => $deep);

    ok(defined $out && $out =~ /\A(\[(?1)?\])\z/ && $finish eq 'stop',
       'a nested list closes within max_tokens')
        or diag($out // $res->{body});
}

# t ::= [a-c] t* "x" | [a-c], by its table of substrings (CYK's way):
# $t[i][j] when chars i to j - 1 are a t, $s[i][j] when they are t*
sub nested_x {
    my @c = split //, $_[0] // '';
    my $n = @c;
    my (@t, @s);

    return 0 if $n == 0;

    for my $len (0 .. $n) {
        for my $i (0 .. $n - $len) {
            my $j = $i + $len;

            $t[$i][$j] = $len >= 1 && $c[$i] =~ /[a-c]/
                         && ($len == 1
                             || ($len >= 2 && $c[$j - 1] eq 'x'
                                 && $s[$i + 1][$j - 1])) ? 1 : 0;

            $s[$i][$j] = $len == 0 ? 1 : 0;

            for my $k ($i + 1 .. $j) {
                if ($t[$i][$k] && $s[$k][$j]) {
                    $s[$i][$j] = 1;
                    last;
                }
            }
        }
    }

    return $t[0][$n];
}


# ambiguous grammars, read more ways at once than the matcher keeps (8):
# the readings nearest an end are kept, so every answer still parses and
# stops by itself within max_tokens (never a 5xx)
{
    my @amb = (
        [ "root ::= s\ns ::= \"a\" s | \"a\" s \"b\" | \"a\"\n",
          sub { $_[0] =~ /\A(a+)(b*)\z/ && length($2) < length($1) },
          'a^n b^m, m < n' ],
        [ "root ::= t\nt ::= [a-c] t* \"x\" | [a-c]\n", \&nested_x,
          'letters nested, each level closed by x' ],
    );

    for my $a (@amb) {
        my ($gbnf, $parses, $what) = @$a;

        for my $endpoint ('chat', 'completions') {
            my $ok = 0;

            for my $seed (1 .. 4) {
                my ($res, $out, $finish) = answer($endpoint,
                    max_tokens => 24, temperature => 1, seed => $seed,
                    guided_grammar => $gbnf);

                if ($res->{status} == 200 && $parses->($out)
                    && $finish eq 'stop')
                {
                    $ok++;

                } else {
                    diag("$what: $res->{status} " . ($out // $res->{body}));
                }
            }

            is($ok, 4, "$endpoint, ambiguous ($what): 4 answers parse");
        }
    }
}

# refusals, each naming its field and the rule
my @bad = (
    [ { structured_outputs => { grammar =>
          "root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]+" } },
      'structured_outputs.grammar', qr/rule 'expr'.*left recursion/,
      'left recursion' ],
    [ { guided_grammar => "root ::= a\na ::= b | \"x\"\nb ::= a \"y\"" },
      'guided_grammar', qr/rule '[ab]'.*left recursion/,
      'left recursion through another rule' ],
    [ { guided_grammar => 'root ::= "(" root ")"' },
      'guided_grammar', qr/rule 'root'.*no finite text/,
      'a grammar without an end' ],
    [ { guided_grammar => "root ::= \"(\" root \")\" | x" },
      'guided_grammar', qr/no rule named 'x'/, 'a missing rule' ],
);

for my $b (@bad) {
    my ($extra, $param, $msg, $what) = @$b;

    for my $endpoint ('chat', 'completions') {
        my ($res) = answer($endpoint, max_tokens => 4, %$extra);

        is($res->{status}, 400, "$endpoint, $what: 400");
        like($res->{body}, qr/"param":"\Q$param\E"/,
             "$endpoint, $what: param $param");
        like($res->{body}, $msg, "$endpoint, $what: the message");
    }
}

VLMTest::check_log($srv, 'grammar-recursive', qr/\[(error|crit|alert)\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'grammar-recursive: no engine process left');

done_testing();
