# An image part's "detail" is a pixel budget (the processor's max_pixels):
# "low" at most 64 image tokens (64 * 28 * 28 pixels), "high" and "auto"
# (and no detail) the configured max_pixels.  The serving fixture with a
# max_pixels of 256 tokens (200704 pixels): a 560x560 picture is 256
# tokens in high, auto and by default, 64 in low; the chat's prompt_tokens
# and /tokenize's count agree; both answer; the same picture in low and
# high in one request.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

vlm_prereqs();
my $root = vlm_root();
my $fixture = "$root/tests/fixtures/serving";
my $tmp = tempdir("vlm-detail-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $model = "$tmp/model";

mkdir $model or die;
for my $f (glob "$fixture/*") {
    my ($name) = $f =~ m{([^/]+)$};
    next if $name eq 'preprocessor_config.json';
    symlink($f, "$model/$name") or die "$f: $!";
}
{
    open my $in, '<', "$fixture/preprocessor_config.json" or die;
    local $/;
    my $pp = <$in>;
    $pp =~ s/"max_pixels": \d+/"max_pixels": 200704/ or die;
    open my $out, '>', "$model/preprocessor_config.json" or die;
    print $out $pp;
}

my $srv = vlm_start(name => 'detail', model => $model,
                    http_config => 'vlm_served_model_name serving;',
                    locations => 'location = /tokenize { vlm_tokenize; }');
END { VLMTest::vlm_stop($srv) if $srv }

my $url = vlm_data_url('image/png', vlm_png(560, 560, 2));


sub body {
    my (@details) = @_;

    my @parts = map {
        { type => 'image_url',
          image_url => { url => $url, defined $_ ? (detail => $_) : () } }
    } @details;

    return { model => 'serving', max_tokens => 2, temperature => 0,
             messages => [ { role => 'user',
                             content => [ @parts, { type => 'text',
                                                    text => 'What?' } ] } ] };
}


sub count {
    my ($body) = @_;

    my $res = vlm_post_json($srv, $body);
    is($res->{status}, 200, 'the chat answers') or diag($res->{body});
    my $chat = vlm_json($res->{body})->{usage}{prompt_tokens};

    my %b = %$body;
    delete @b{qw(max_tokens temperature)};
    $res = vlm_request($srv, 'POST', '/tokenize', $VLMTest::JSON->encode(\%b));
    my $tok = vlm_json($res->{body})->{count};
    is($tok, $chat, "/tokenize counts what the chat counts ($chat)");

    return $chat;
}


my $text = count({ model => 'serving', messages => [
    { role => 'user', content => [ { type => 'text', text => 'What?' } ] } ]
});

my $high = count(body('high')) - $text;
my $low = count(body('low')) - $text;
my $auto = count(body('auto')) - $text;
my $none = count(body(undef)) - $text;

# the template's vision markers around the pad: 2 tokens per image
is($high, 256 + 2, 'high: 256 image tokens');
is($low, 64 + 2, 'low: 64 image tokens');
is($auto, $high, 'auto: as high');
is($none, $high, 'no detail: as high');
is(count(body('low', 'high')) - $text, $low + $high,
   'low and high in one request');

my $res = vlm_post_json($srv, body('medium'));
is($res->{status}, 400, 'detail medium: 400');
like($res->{body}, qr/detail/, 'detail medium: the error names detail');

done_testing();
