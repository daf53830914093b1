# The fixtures whose transformers references a model-family suite serves
# (t/071-qwen3vl.t, t/072-smolvlm.t): ref/<prefix><case>/ of the model
# directory holds the images, the question and expect.json (the prompt
# ids and the greedy continuation's ids and bytes).

package VLMServed;

use strict;
use warnings;

use Exporter 'import';
use Test::More ();
use VLMTest;

our @EXPORT = qw(vlm_slurp vlm_served_cases vlm_served_body
                 vlm_check_served);

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

# a greedy chat of a case's images and question, as long as its answer
sub vlm_served_body ($@) {
    my ($c, %more) = @_;
    my @content = map { { type => 'image_url', image_url => { url => $_ } } }
                  @{ $c->{urls} };
    push @content, { type => 'text', text => $c->{question} };

    return { model => $c->{model}, temperature => 0,
             max_tokens => scalar @{ $c->{expect}{greedy_ids} },
             messages => [ { role => 'user', content => \@content } ],
             %more };
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

1;
