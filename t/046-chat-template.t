# A model that brings its own chat template: the serving fixture with
# Qwen3-VL's template in chat_template.jinja (which comes before its
# chat_template.json, Qwen2-VL's), behind a guard that raises for one
# message.  Prompts are counted against transformers' text for the same
# conversations (tests/fixtures/chat_template/cases.json) through the
# tokenizer; a template error is a 400 naming it and the server goes on;
# a client's special-token text stays plain text.  vlm-cli run renders
# the same template.  Plain Test::More, as t/006-chat.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode qw(decode);
use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $tmp = tempdir("vlm-tmpl-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $tmp;


sub slurp {
    my ($path) = @_;
    open my $in, '<:raw', $path or die "cannot read $path: $!";
    local $/;
    return scalar <$in>;
}

my $fixture = VLMTest::vlm_json(
    slurp("$root/tests/fixtures/chat_template/cases.json"));

my $guard = "{%- if messages[0].content == 'boom' %}"
          . "{{- raise_exception('no boom here, ' ~ messages | length) }}"
          . "{%- endif %}";

my $model = vlm_model_with_template("$tmp/qwen3vl",
                                    $guard . $fixture->{templates}{qwen3_vl});

# transformers' text of a fixture conversation with Qwen3-VL's template
sub expected {
    my ($conv) = @_;

    for my $c (@{ $fixture->{cases} }) {
        next unless $c->{template} eq 'qwen3_vl'
                    && $c->{conversation} eq $conv
                    && !$c->{client}{tools}
                    && $c->{trusted}{add_generation_prompt}
                    && !$c->{trusted}{add_vision_id};
        return ($c->{expected}, $c->{client}{messages});
    }

    die "no fixture case for $conv";
}

sub n_tokens {
    my ($text) = @_;

    open my $out, '>:raw', "$tmp/p.txt" or die;
    print $out $text;
    close $out;

    my $ids = `$build/vlm-cli tokenize --model $model --file $tmp/p.txt`;
    $? == 0 or die "vlm-cli tokenize failed";

    return scalar(split ' ', $ids);
}

my $png = vlm_data_url('image/png', vlm_png(56, 56, 1));      # 4 tokens

# the fixture's placeholder image URLs become a real picture
sub with_images {
    my ($msgs) = @_;
    my $n = 0;

    for my $m (@$msgs) {
        next unless ref $m->{content};
        for my $p (@{ $m->{content} }) {
            next unless $p->{type} eq 'image_url';
            $p->{image_url}{url} = $png;
            $n++;
        }
    }

    return $n;
}

my $srv = vlm_start(name => 'chat-template', model => $model);
END { VLMTest::vlm_stop($srv) if $srv }

sub chat {
    my ($msgs) = @_;

    my $res = vlm_post_json($srv, { model => 'qwen3vl', messages => $msgs,
                                    temperature => 0, max_tokens => 2 });
    my $j = eval { vlm_json($res->{body}) };

    return ($res, $j);
}

for my $conv (qw(text system image multi_turn)) {
    my ($text, $msgs) = expected($conv);
    my $n_images = with_images($msgs);
    my ($res, $j) = chat($msgs);

    is($res->{status}, 200, "$conv: 200") or diag($res->{body});
    is($j->{usage}{prompt_tokens}, n_tokens($text) + 3 * $n_images,
       "$conv: the prompt is transformers' text with Qwen3-VL's template");
}

# "developer" is "system", as for the built-in template
{
    my ($text) = expected('system');
    my ($res, $j) = chat([ { role => 'developer', content => 'Be brief.' },
                           { role => 'user', content => 'Hi' } ]);

    is($res->{status}, 200, "developer: 200");
    is($j->{usage}{prompt_tokens}, n_tokens($text),
       "developer: rendered as a system turn");
}

# special-token text typed by a client is plain text: more tokens than
# the same text read with its special tokens
{
    my ($text, $msgs) = expected('special_text');
    with_images($msgs);
    my ($res, $j) = chat($msgs);

    is($res->{status}, 200, "special text: 200");
    cmp_ok($j->{usage}{prompt_tokens}, '>', n_tokens($text) + 3,
           "special text: the client's <|im_end|> is not a special token");
}

# raise_exception: a 400 that says what the template said
{
    my ($res, $j) = chat([ { role => 'user', content => 'boom' } ]);

    is($res->{status}, 400, "raise_exception: 400");
    is($j->{error}{type}, 'invalid_request_error', "an invalid request");
    like($j->{error}{message}, qr/^chat template: no boom here, 1$/,
         "with the template's message");
}

# and the next request is served
{
    my ($res) = chat([ { role => 'user', content => 'still there?' } ]);
    is($res->{status}, 200, "the server goes on after a template error");
}

# vlm-cli run: the model's template too, the same answer as the server's
{
    my $cli = "$build/vlm-cli run --model $model --threads 1"
            . " --temperature 0 --max-tokens 8";
    my $want = `$cli --system 'Be brief.' --prompt 'Hi' 2>&1`;
    is($?, 0, "vlm-cli run answers") or diag($want);
    $want = decode('UTF-8', $want);
    $want =~ s/\n\z//;
    $want =~ s/\x{FFFD}\z//;

    my $res = vlm_post_json($srv, {
        model => 'qwen3vl', temperature => 0, max_tokens => 8,
        messages => [ { role => 'system', content => 'Be brief.' },
                      { role => 'user', content => 'Hi' } ] });
    is(vlm_json($res->{body})->{choices}[0]{message}{content}, $want,
       "vlm-cli run and the server give the same answer");

    my $err = `$cli --system boom --prompt x 2>&1`;
    isnt($?, 0, "vlm-cli run fails where the template raises");
    like($err, qr/chat template: no boom here, 2/,
         "with the template's message");
}

# vlm-cli run renders its prompt with Qwen2-VL's template in C too (it
# used to render no message then): a prompt too long for the model's
# sequence budget is refused
{
    my $long = join ' ', map { "w$_" } 1 .. 3000;
    my $cmd = "$build/vlm-cli run --model $root/tests/fixtures/serving"
            . " --threads 1 --max-tokens 1 --prompt '$long' 2>&1";
    my $out = `$cmd`;
    isnt($?, 0, "vlm-cli run reads the prompt it is given");
    like($out, qr/tokens exceed the sequence length budget/,
         "and refuses one longer than the model's budget");
}

# vlm-cli run names why an image is refused (it used to say "no memory"
# for a file that does not decode)
{
    my $cmd = "$build/vlm-cli run --model $root/tests/fixtures/serving"
            . " --threads 1 --max-tokens 1 --prompt 'What is it?'"
            . " --image $0 2>&1";
    my $out = `$cmd`;
    isnt($?, 0, "vlm-cli run refuses a file that is not an image");
    like($out, qr/\Q$0\E: .*(image|format)/i, "naming the file and why");
    unlike($out, qr/no memory/, "not as a lack of memory");
}

VLMTest::check_log($srv, "no worker died", qr/exited on signal/);

done_testing();
