# An image part's "detail" is a pixel budget (the processor's max_pixels):
# "low" at most 64 image tokens (64 * 28 * 28 pixels), "high" and "auto"
# (and no detail) the configured max_pixels.  The serving fixture with a
# max_pixels of 256 tokens (200704 pixels): a 560x560 picture is 256
# tokens in high, auto and by default, 64 in low; the chat's prompt_tokens
# and /tokenize's count agree; both answer; the same picture in low and
# high in one request.  vLLM's mm_processor_kwargs: max_pixels of 64
# tokens is low's budget, min_pixels raises a small picture, both within
# the server's max_pixels (a 400 that names it above), nothing else of
# the processor's, and a detail low under them.

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


sub kwargs {
    my ($kw, @details) = @_;

    return { %{ body(@details) }, mm_processor_kwargs => $kw };
}

is(count(kwargs({ max_pixels => 64 * 28 * 28 }, undef)) - $text, $low,
   'mm_processor_kwargs max_pixels of 64 tokens: as low');
is(count(kwargs({ max_pixels => 100 * 28 * 28 }, 'low')) - $text, $low,
   'and a detail low under a larger one: low');
is(count(kwargs({ min_pixels => 3136, max_pixels => 200704 }, undef))
   - $text, $high, 'the server\'s own bounds: as high');

# a 56x56 picture: 4x4 patches, 4 tokens; with min_pixels of 112x112,
# 8x8 patches, 16 tokens
my $small = vlm_data_url('image/png', vlm_png(56, 56, 3));
my $small_body = sub {
    my ($kw) = @_;
    my $b = { model => 'serving', max_tokens => 2, temperature => 0,
              messages => [ { role => 'user', content => [
                  { type => 'image_url', image_url => { url => $small } },
                  { type => 'text', text => 'What?' } ] } ] };
    $b->{mm_processor_kwargs} = $kw if $kw;
    return $b;
};
is(count($small_body->()) - $text, 4 + 2, '56x56: 4 image tokens');
is(count($small_body->({ min_pixels => 112 * 112 })) - $text, 16 + 2,
   'min_pixels of 112x112: 16 image tokens');

for my $c (
    [ { max_pixels => 200705 }, 'mm_processor_kwargs.max_pixels',
      qr/between 1 and this server's max_pixels \(200704\), but got 200705/ ],
    [ { min_pixels => 300000 }, 'mm_processor_kwargs.min_pixels',
      qr/this server's max_pixels \(200704\)/ ],
    [ { max_pixels => 0 }, 'mm_processor_kwargs.max_pixels',
      qr/but got 0/ ],
    [ { max_pixels => '1000' }, 'mm_processor_kwargs.max_pixels',
      qr/integer/ ],
    [ { min_pixels => 50000, max_pixels => 40000 },
      'mm_processor_kwargs.min_pixels', qr/50000 is more than max_pixels/ ],
    [ { do_resize => JSON::PP::false }, 'mm_processor_kwargs.do_resize',
      qr/Unsupported parameter/ ],
    [ 'big', 'mm_processor_kwargs', qr/object/ ],
) {
    my ($kw, $param, $re) = @$c;
    $res = vlm_post_json($srv, kwargs($kw, undef));
    is($res->{status}, 400, "mm_processor_kwargs $param: 400");
    my $e = vlm_json($res->{body})->{error} || {};
    is($e->{param}, $param, "it names $param");
    like($e->{message}, $re, "and says why ($param)");
}

done_testing();
