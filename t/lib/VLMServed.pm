# The fixtures whose transformers references a model-family suite serves
# (t/071-qwen3vl.t, t/072-smolvlm.t, t/089-internvl.t, t/090-gemma3.t):
# ref/<prefix><case>/ of the model directory holds the images, the
# question and expect.json
# (the prompt ids and the greedy continuation's ids and bytes).

package VLMServed;

use strict;
use warnings;

use Exporter 'import';
use Test::More ();
use VLMTest;

our @EXPORT = qw(vlm_slurp vlm_served_cases vlm_served_body
                 vlm_check_served vlm_check_tokenize vlm_check_image_cache
                 vlm_check_bad_images vlm_check_cli);

sub vlm_slurp ($) {
    my ($path) = @_;
    open my $in, '<:raw', $path or die "$path: $!";
    local $/;
    return scalar <$in>;
}

# the text, image1 and image2 cases, for the served model $name
sub vlm_served_cases ($$$) {
    my ($model, $prefix, $name) = @_;
    my @cases;

    for my $case (qw(text image1 image2)) {
        my $d = "$model/ref/$prefix$case";
        my @urls = map { vlm_data_url('image/png', vlm_slurp($_)) }
                   sort glob("$d/image_*.png");
        push @cases, {
            name => $case,
            model => $name,
            urls => \@urls,
            question => vlm_slurp("$d/question.txt"),
            expect => vlm_json(vlm_slurp("$d/expect.json")),
        };
    }

    return @cases;
}

# a greedy chat of a case's images (or its content parts) and question,
# as long as its answer, with the case's extra fields
sub vlm_served_body ($@) {
    my ($c, %more) = @_;
    my @content = $c->{parts}
                  ? @{ $c->{parts} }
                  : map { { type => 'image_url', image_url => { url => $_ } } }
                    @{ $c->{urls} };
    push @content, { type => 'text', text => $c->{question} };

    return { model => $c->{model}, temperature => 0,
             max_tokens => scalar @{ $c->{expect}{greedy_ids} },
             messages => [ { role => 'user', content => \@content } ],
             %{ $c->{extra} || {} }, %more };
}

# the greedy answer of each case: plain (token bytes from logprobs) and
# streamed
sub vlm_check_served ($$@) {
    my ($srv, $what, @cases) = @_;

    for my $c (@cases) {
        my $name = "$what, $c->{name}";
        my $res = vlm_post_json(
            $srv, vlm_served_body($c, logprobs => JSON::PP::true));
        Test::More::is($res->{status}, 200, "$name: 200")
            or Test::More::diag($res->{body});
        my $j = eval { vlm_json($res->{body}) } || {};
        my @got = map { $_->{bytes} }
                  @{ $j->{choices}[0]{logprobs}{content} || [] };
        Test::More::is_deeply(\@got, $c->{expect}{greedy_bytes},
                              "$name: transformers' greedy tokens");
        Test::More::is($j->{usage}{prompt_tokens},
                       scalar @{ $c->{expect}{prompt_ids} },
                       "$name: the prompt's tokens in usage");
        Test::More::is($j->{choices}[0]{finish_reason}, 'length',
                       "$name: length");

        my $want = join '', map { pack 'C*', @$_ }
                   @{ $c->{expect}{greedy_bytes} };
        my $st = vlm_open_stream(
            $srv, vlm_served_body($c, stream => JSON::PP::true));
        vlm_read_some($st, 30);
        close $st->{sock};
        my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
        Test::More::is($ev[-1], '[DONE]', "$name streamed: [DONE]");
        my $text = join '', map {
            ref $_ && $_->{choices} && @{ $_->{choices} }
                ? $_->{choices}[0]{delta}{content} // '' : ''
        } @ev;
        utf8::encode($text);
        # a token that ends inside a character is held back to its end
        my $plain = $j->{choices}[0]{message}{content} // '';
        utf8::encode($plain);
        Test::More::is($text, $plain,
                       "$name streamed: the plain answer's text");
        Test::More::ok(length $text && index($want, substr($text, 0, 1)) == 0,
                       "$name streamed: it starts as the greedy bytes do");
    }
}

# /tokenize (a location of $srv) gives each case's prompt ids
sub vlm_check_tokenize ($@) {
    my ($srv, @cases) = @_;

    for my $c (@cases) {
        my $b = vlm_served_body($c);
        my $res = vlm_request($srv, 'POST', '/tokenize',
                              VLMTest::vlm_json_text({
                                  model => $b->{model},
                                  messages => $b->{messages},
                                  %{ $c->{extra} || {} } }));
        Test::More::is($res->{status}, 200, "/tokenize, $c->{name}: 200")
            or Test::More::diag($res->{body});
        my $j = eval { vlm_json($res->{body}) } || {};
        Test::More::is_deeply($j->{tokens}, $c->{expect}{prompt_ids},
                              "/tokenize, $c->{name}: transformers' prompt "
                              . "ids");
    }
}

# vlm-cli run, the cases' chats: the model's template and processor, its
# greedy 8 tokens printed as &$answer(the case's ref directory) says
sub vlm_check_cli ($$$@) {
    my ($model, $prefix, $answer, @cases) = @_;
    my $cli = ($ENV{VLM_BUILD} || VLMTest::vlm_root() . "/build")
              . "/vlm-cli";

    for my $c (@cases) {
        my $d = "$model/ref/$prefix$c->{name}";
        my @img = map { ('--image', $_) } sort glob("$d/image_*.png");
        open my $p, '-|', $cli, 'run', '--model', $model, @img,
             '--prompt', $c->{question}, '--temperature', '0',
             '--max-tokens', '8', '--ignore-eos', '--threads', '1'
            or die "$cli: $!";
        my $out = do { local $/; <$p> };
        close $p;
        Test::More::is($?, 0, "vlm-cli run, $c->{name}: exits 0");
        Test::More::is($out, $answer->($d) . "\n",
                       "vlm-cli run, $c->{name}: transformers' answer");
    }
}

# after the cases' $misses pictures, a question before a picture seen
# already changes the prefix but not the picture: its features come from
# the image feature cache
sub vlm_check_image_cache ($$$) {
    my ($srv, $c, $misses) = @_;

    my $m = vlm_metrics($srv);
    Test::More::is($m->{vlm_image_cache_misses_total}, $misses,
                   'image cache: one miss a picture');
    my $hits = $m->{vlm_image_cache_hits_total};

    my $b = vlm_served_body($c);
    unshift @{ $b->{messages}[0]{content} },
        { type => 'text', text => 'A question first.' };
    my $res = vlm_post_json($srv, $b);
    Test::More::is($res->{status}, 200, 'a picture seen before: 200');

    $m = vlm_metrics($srv);
    Test::More::is($m->{vlm_image_cache_misses_total}, $misses,
                   'image cache: no new miss');
    Test::More::is($m->{vlm_image_cache_hits_total}, $hits + 1,
                   'image cache: a hit');
}

# a bad picture, and one over vlm_max_image_pixels 40000, in case $c's
# first image's place: 400, the image named; then $ok answers
sub vlm_check_bad_images ($$$) {
    my ($srv, $c, $ok) = @_;
    my $param = 'messages[0].content[0].image_url';
    my @bad = (
        [ 'a corrupt image', "\x89PNG\r\n\x1a\n" . 'x' x 24,
          'PNG: truncated before the end of IHDR' ],
        [ 'an image too large', vlm_png(250, 200),
          'PNG: 250x200 is over the limit of 40000 pixels' ],
    );

    for my $b (@bad) {
        my ($what, $data, $msg) = @$b;
        my $body = vlm_served_body($c);
        $body->{messages}[0]{content}[0]{image_url}{url}
            = vlm_data_url('image/png', $data);
        my $res = vlm_post_json($srv, $body);
        Test::More::is($res->{status}, 400, "$what: 400");
        my $e = (eval { vlm_json($res->{body}) } || {})->{error} || {};
        Test::More::is($e->{message}, $msg, "$what: the message");
        Test::More::is($e->{param}, $param, "$what: the image named");
        Test::More::is($e->{type}, 'invalid_request_error',
                       "$what: its type");
    }

    # the server goes on
    my $res = vlm_post_json($srv, vlm_served_body($ok));
    Test::More::is($res->{status}, 200, 'after them: 200');
}

1;
