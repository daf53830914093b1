# Video input through nginx: video_url parts as data: and http URLs on
# the serving fixture (Qwen2-VL, min_pixels 3136, max_pixels 12544).
# The 12-frame 32x24 files of t/data (2 s at 6 frames a second;
# tools/fixtures_video.py) sample 4 frames at fps 2, resized to 84x56: a
# grid of 2x4x6, 12 video tokens, so the prompt grows by 14
# (<|vision_start|>, 12 <|video_pad|>, <|vision_end|>) over the same text
# alone, as /tokenize counts it too.  An H.264 mp4 and a VP9 webm, a
# video and an image in one request, an mp4 fetched from an http URL
# (vlm_image_fetch) and a JPEG fetched as a video (400), vLLM's list of
# JPEG frames, 96 PNG frames of more tokens than the prompt's text has
# bytes (vlm_max_image_patches 1024; and frames of two sizes, an empty
# one, bad base64: 400),
# the image cache hit by a video sent again, streamed; a cut file, bytes
# that are no video, an image media type, a header that declares
# 65535x65535 frames (refused from the header, fast), a video in an
# assistant message, and vlm_max_video_bytes (its data: URL's base64
# length), vlm_max_video_duration and vlm_max_image_pixels (a frame's
# area) below the file's: each a 400 naming the problem;
# vlm_max_video_frames 4 takes the 4 sampled frames; vLLM's
# mm_processor_kwargs fps 4 and 6 sample 8 and 12 frames (more tokens),
# and an fps asking for more frames than vlm_max_video_frames is a 400
# naming it; a SmolVLM model
# refuses a video (400) and serves an image; afterwards every slot is
# free and error.log has no alert.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use MIME::Base64 qw(encode_base64);
use Time::HiRes qw(time);
use Test::More;
use VLMTest;

vlm_prereqs();
my $root = vlm_root();

sub slurp {
    my ($path) = @_;
    open my $in, '<:raw', $path or die "$path: $!";
    local $/;
    return <$in>;
}

my $mp4 = slurp("$root/t/data/video-h264.mp4");
my $webm = slurp("$root/t/data/video-vp9.webm");
my $mp4_url = vlm_data_url('video/mp4', $mp4);
my $webm_url = vlm_data_url('video/webm', $webm);
my $png_url = vlm_data_url('image/png', vlm_png(56, 56, 1));

# the files of t/data served by the same nginx, fetched from loopback
my $srv = vlm_start(name => 'video',
                    http_config => <<'_EOC_',
    vlm_served_model_name serving;
    vlm_max_image_patches 1024;
    vlm_image_fetch /_vlm_image;
    vlm_image_fetch_allow 127.0.0.1/32;
_EOC_
                    locations => <<"_EOC_");
        location = /tokenize { vlm_tokenize; }
        location /files/ { alias $root/t/data/; }
        location = /_vlm_image {
            internal;
            proxy_pass \$vlm_image_url;
            subrequest_output_buffer_size 64k;
        }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub body {
    my (@parts) = @_;

    return { model => 'serving', max_tokens => 4, temperature => 0,
             messages => [ { role => 'user',
                             content => [ @parts,
                                          { type => 'text',
                                            text => 'What happens?' } ] } ] };
}


sub video { { type => 'video_url', video_url => { url => $_[0] } } }
sub image { { type => 'image_url', image_url => { url => $_[0] } } }


sub prompt_tokens {
    my ($body, $what) = @_;

    my $res = vlm_post_json($srv, $body);
    is($res->{status}, 200, "$what: 200") or diag($res->{body});
    my $j = eval { vlm_json($res->{body}) } || {};
    ok(defined $j->{choices}[0]{message}{content}, "$what: an answer");

    my %b = %$body;
    delete @b{qw(max_tokens temperature)};
    $res = vlm_request($srv, 'POST', '/tokenize', $VLMTest::JSON->encode(\%b));
    my $tok = eval { vlm_json($res->{body})->{count} };
    is($tok, $j->{usage}{prompt_tokens},
       "$what: /tokenize counts what the chat counts");

    return $j->{usage}{prompt_tokens} || 0;
}


sub refused {
    my ($body, $what, $re, $param) = @_;

    my $t0 = time;
    my $res = vlm_post_json($srv, $body);
    my $dt = time - $t0;

    is($res->{status}, 400, "$what: 400");
    my $e = eval { vlm_json($res->{body})->{error} } || {};
    like($e->{message} // '', $re, "$what: the message names it")
        or diag($res->{body});
    is($e->{param}, $param, "$what: param $param") if defined $param;

    return $dt;
}


my $text = prompt_tokens(body(), 'text alone');
my $image = prompt_tokens(body(image($png_url)), 'an image');

is(prompt_tokens(body(video($mp4_url)), 'an H.264 mp4'), $text + 14,
   'an H.264 mp4: 12 video tokens and the two vision tags');
is(prompt_tokens(body(video($webm_url)), 'a VP9 webm'), $text + 14,
   'a VP9 webm: 12 video tokens and the two vision tags');
is(prompt_tokens(body(image($png_url), video($mp4_url)),
                 'an image and a video'), $image + 14,
   'an image and a video: both counted');
is(prompt_tokens(body(video($webm_url), image($png_url), video($mp4_url)),
                 'a video, an image, a video'), $image + 28,
   'a video, an image and a video: all counted');

# vLLM's mm_processor_kwargs fps: the 12 frames at 6 a second sampled at
# 4 a second are 8 frames, 4 temporal patches (24 tokens); at 6, all 12
# (36 tokens)
{
    my $b = body(video($mp4_url));
    $b->{mm_processor_kwargs} = { fps => 4 };
    is(prompt_tokens($b, 'fps 4'), $text + 26,
       'fps 4: 8 frames, 24 video tokens');
    $b->{mm_processor_kwargs} = { fps => 6 };
    is(prompt_tokens($b, 'fps 6'), $text + 38,
       'fps 6: 12 frames, 36 video tokens');
}

# fetched from http URLs, as images are
{
    my $base = "http://127.0.0.1:$srv->{port}/files";
    is(prompt_tokens(body(video("$base/video-h264.mp4"),
                          image($png_url)), 'an http mp4 and an image'),
       $image + 14, 'an http mp4: fetched, 12 video tokens');
    refused(body(video("$base/image-100x60.jpg")), 'an http JPEG as a video',
            qr/not an mp4, mov or webm/, 'messages[0].content[0].video_url');
}

# vLLM's frames: data:video/jpeg;base64,<frame>,<frame>,... kept whole;
# four 100x60 JPEG frames resized to 112x56: a grid of 2x4x8, 16 tokens
{
    (my $jpeg = encode_base64(slurp("$root/t/data/image-100x60.jpg")))
        =~ s/\s+//g;
    (my $png = encode_base64(vlm_png(56, 56, 2))) =~ s/\s+//g;
    my $frames = 'data:video/jpeg;base64,' . join(',', ($jpeg) x 4);

    is(prompt_tokens(body(video($frames)), 'four JPEG frames'), $text + 18,
       'four JPEG frames: 16 video tokens and the two vision tags');
    # more video tokens than the prompt text has bytes: 96 frames of
    # 56x56, 48 temporal patches of 4 tokens (768 patches)
    is(prompt_tokens(body(video('data:video/jpeg;base64,'
                                . join(',', ($png) x 96))),
                     'ninety-six frames'), $text + 194,
       'ninety-six frames: 192 video tokens and the two vision tags');
    refused(body(video("data:video/jpeg;base64,$jpeg,$png")),
            'frames of two sizes', qr/frame 1 is 56x56, frame 0 100x60/);
    refused(body(video("data:video/jpeg;base64,$jpeg,,$jpeg")),
            'an empty frame', qr/frame 1 of the list is empty/);
    refused(body(video("data:video/jpeg;base64,$jpeg,\@\@\@\@")),
            'a frame of bad base64', qr/base64/);
}

# the image cache keys a video by its frames' pixels: a new video after
# two different texts is encoded once, then found
{
    (my $f = encode_base64(vlm_png(56, 56, 7))) =~ s/\s+//g;
    my $m0 = vlm_metrics($srv);
    for my $t ('First.', 'Second.') {
        my $b = body(video("data:video/jpeg;base64,$f,$f"));
        unshift @{ $b->{messages}[0]{content} }, { type => 'text',
                                                   text => $t };
        is(vlm_post_json($srv, $b)->{status}, 200, "a video after '$t': 200");
    }
    my $m1 = vlm_metrics($srv);
    is(($m1->{vlm_image_cache_misses_total} // 0)
       - ($m0->{vlm_image_cache_misses_total} // 0), 1,
       'the new video: one image cache miss');
    is(($m1->{vlm_image_cache_hits_total} // 0)
       - ($m0->{vlm_image_cache_hits_total} // 0), 1,
       'the same video again: one image cache hit');
}

# streamed
{
    my %b = %{ body(video($mp4_url), image($png_url)) };
    $b{stream} = JSON::PP::true;
    my $st = vlm_open_stream($srv, \%b);
    vlm_stream_ok($st, 'a video and an image, streamed', 'length');
}

# refused
my $cut = vlm_data_url('video/mp4', substr($mp4, 0, length($mp4) / 2));
refused(body(video($cut)), 'a cut mp4', qr/video/,
        'messages[0].content[0].video_url');
refused(body(image($png_url), video(vlm_data_url('video/mp4',
                                                 vlm_png(32, 32)))),
        'a PNG as a video', qr/not an mp4, mov or webm/,
        'messages[0].content[1].video_url');
refused(body(video($png_url)), 'an image media type in a video_url part',
        qr{not video/\*});

{
    my $bomb = $mp4;
    my $at = index($bomb, 'avc1', index($bomb, 'stsd'));
    substr($bomb, $at + 28, 4) = "\xff\xff\xff\xff";
    my $dt = refused(body(video(vlm_data_url('video/mp4', $bomb))),
                     'a header declaring 65535x65535 frames',
                     qr/65535x65535/);
    cmp_ok($dt, '<', 2, 'the 65535x65535 video refused fast');
}

{
    my $b = body(video($mp4_url));
    unshift @{ $b->{messages} },
        { role => 'user', content => 'hi' },
        { role => 'assistant', content => [ video($mp4_url) ] };
    refused($b, 'a video in an assistant message',
            qr/only allowed in user messages/);
}

vlm_wait_idle($srv);
is(vlm_health($srv)->{zone}{slots_used}, 0, 'every slot is free');
is(vlm_health($srv)->{zone}{arena_used}, 0, 'the arena is empty');
VLMTest::check_log($srv, 'video requests');

# the limits as directives
VLMTest::vlm_stop($srv);
$srv = vlm_start(name => 'video-limits',
                 http_config => "vlm_served_model_name serving;\n"
                                . "    vlm_max_video_bytes 2k;\n"
                                . "    vlm_max_video_frames 4;");

refused(body(video($mp4_url)), 'an mp4 over vlm_max_video_bytes 2k',
        qr/4368 base64 characters exceed the limit of 2734/);
{
    my $res = vlm_post_json($srv, body(video($webm_url)));
    is($res->{status}, 200, 'a webm under 2k: 200') or diag($res->{body});

    my $b = body(video($webm_url));
    $b->{mm_processor_kwargs} = { fps => 4 };
    my $msg = 'mm_processor_kwargs.fps 4 asks for 8 of the 12 frames of '
              . "this video (6 a second), more than this server's "
              . 'vlm_max_video_frames (4)';
    refused($b, 'fps 4 asking for 8 frames over vlm_max_video_frames 4',
            qr/\Q$msg\E/,
            'messages[0].content[0].video_url');
}

VLMTest::vlm_stop($srv);
$srv = vlm_start(name => 'video-duration',
                 http_config => "vlm_served_model_name serving;\n"
                                . "    vlm_max_video_duration 1s;");
refused(body(video($webm_url)), 'a 2 s webm over vlm_max_video_duration 1s',
        qr/2\.0 seconds, more than the 1 allowed/);

VLMTest::vlm_stop($srv);
$srv = vlm_start(name => 'video-pixels',
                 http_config => "vlm_served_model_name serving;\n"
                                . "    vlm_max_image_pixels 700;");
refused(body(video($mp4_url)), '32x24 frames over vlm_max_image_pixels 700',
        qr/frames of 32x24 pixels, more than .* 700 in all allowed/);

# a model without videos (SmolVLM): a 400 that says so (Qwen3-VL's
# videos: t/097-video-qwen3vl.t)
VLMTest::vlm_stop($srv);
$srv = vlm_start(name => 'video-smolvlm',
                 model => "$root/tests/fixtures/idefics3/smolvlm-chat",
                 http_config => 'vlm_served_model_name serving;');
refused(body(video($mp4_url)), 'a video for SmolVLM',
        qr/this model does not take videos/,
        'messages[0].content[0].video_url');
{
    my $res = vlm_post_json($srv, body(image($png_url)));
    is($res->{status}, 200, 'an image for SmolVLM: 200')
        or diag($res->{body});

    my $b = body(image($png_url));
    $b->{mm_processor_kwargs} = { fps => 2 };
    refused($b, 'an fps for SmolVLM', qr/This model takes no video/,
            'mm_processor_kwargs.fps');
}

vlm_wait_idle($srv);
VLMTest::check_log($srv, 'limits');

done_testing();
