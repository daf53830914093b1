# chat_template_kwargs: a request's variables for the model's own chat
# template, as vLLM passes them.  The serving fixture with a template
# that, like Qwen3's, closes an empty <think> block when enable_thinking
# is false and names a variable of the client's otherwise: the prompt of
# /tokenize, the chat and /v1/responses grows by those tokens, and
# neither the messages nor add_generation_prompt can be replaced; a
# chat_template_kwargs that is no object is a 400.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $tmp = tempdir("vlm-kwargs-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $tmp;

my $model = vlm_model_with_template("$tmp/thinking", <<'_EOT_');
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{%- if enable_thinking is defined and enable_thinking is false %}
<think>

</think>
{%- endif %}
{%- if persona is defined %}{{ persona }}{% endif %}
{% endif %}
_EOT_

my $srv = vlm_start(name => 'kwargs', model => $model,
                    locations => <<'_EOC_');
        location = /tokenize { vlm_tokenize; }
        location = /v1/responses { vlm_responses; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

my $messages = [ { role => 'user', content => 'Hello' } ];

sub count {
    my ($path, %o) = @_;

    my $body = $path eq '/v1/responses'
        ? { model => 'thinking', input => 'Hello', max_output_tokens => 1,
            %o }
        : { model => 'thinking', messages => $messages, max_tokens => 1,
            %o };
    my $res = vlm_request($srv, 'POST', $path,
                          $VLMTest::JSON->encode($body));
    my $j = eval { vlm_json($res->{body}) } || {};

    return ($res->{status},
            $j->{count} // $j->{usage}{prompt_tokens}
            // $j->{usage}{input_tokens}, $j);
}

my ($st, $plain) = count('/tokenize');
is($st, 200, '/tokenize: 200');

my ($st2, $think) = count('/tokenize', chat_template_kwargs => {
    enable_thinking => JSON::PP::false() });
is($st2, 200, 'enable_thinking false: 200');
ok($think > $plain + 2, "enable_thinking false: the <think> block "
                        . "($plain tokens, then $think)");

my (undef, $on) = count('/tokenize', chat_template_kwargs => {
    enable_thinking => JSON::PP::true() });
is($on, $plain, 'enable_thinking true: no block');

for my $path ('/v1/chat/completions', '/v1/responses') {
    my ($s, $n) = count($path, chat_template_kwargs => {
        enable_thinking => JSON::PP::false() });
    is($s, 200, "$path: 200");
    is($n, $think, "$path: the prompt with the block");
}

my (undef, $persona) = count('/tokenize', chat_template_kwargs => {
    persona => 'Hello there' });
ok($persona > $plain, 'a string variable reaches the template');

# a long string (the parser elides those it reads verbatim) is the
# client's whole text, in /tokenize, the chat and /v1/responses
my $long = 'xy ' x 700;

for my $path ('/tokenize', '/v1/chat/completions', '/v1/responses') {
    my ($s, $n) = count($path, chat_template_kwargs => { persona => $long });
    is($s, 200, "$path: a long string: 200");
    ok($n > $plain + 500, "$path: a long string reaches the template "
                          . "($plain tokens, then $n)");
}

my (undef, $same) = count('/tokenize', chat_template_kwargs => {
    messages => [], add_generation_prompt => JSON::PP::false() });
is($same, $plain, 'messages and add_generation_prompt stay the request\'s');

for my $path ('/tokenize', '/v1/chat/completions', '/v1/responses') {
    my ($s, undef, $j) = count($path, chat_template_kwargs => [ 1 ]);
    is($s, 400, "$path: chat_template_kwargs an array: 400");
    is($j->{error}{code}, 'invalid_type', "$path: invalid_type");
    is($j->{error}{param}, 'chat_template_kwargs', "$path: its param");
}

done_testing();
