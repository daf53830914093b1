# A 1920x1080 photo at Qwen2-VL's published preprocessor settings
# (min_pixels 3136, max_pixels 12845056): 1932x1092 after smart_resize,
# 138x78 = 10764 patches, 2691 image tokens.  The default
# vlm_max_image_patches is what max_pixels needs (65536), so the serving
# fixture takes it: 200, the prompt's tokens counted as the processor
# counts them, and the greedy answer vlm-cli run gives on the same picture
# and prompt.  The request's time and the engine's peak resident memory
# are printed (diag) for docs/performance.md, and, sent next to a running
# stream, that the stream keeps getting tokens, with its longest gap.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Time::HiRes qw(time);
use Test::More;
use VLMTest;

vlm_prereqs();

# the pixel values of one such image are 50.6 MB of the zone's arena
my ($srv, $j, $prompt) = vlm_photo_served(name => '1080p', w => 1920,
                                          h => 1080, seed => 5,
                                          zone => '96m', tokens => 2691);
END { VLMTest::vlm_stop($srv) if $srv }

# next to a running stream: it keeps getting tokens while the image goes
# through (the tower in pieces of vlm_max_batch_tokens rows or queries,
# the prompt in chunks of as many); the longest gap between its pieces is
# printed
{
    my $long = { %{ vlm_chat_body('Tell me a long story.') },
                 temperature => 0, max_tokens => 4000,
                 stream => JSON::PP::true };
    my $st = vlm_open_stream($srv, $long);
    ok(vlm_read_some($st, 10, qr/("content":"[^"]+".*){5}/s),
       'a stream has begun') or diag(substr($st->{raw}, 0, 600));

    # another picture: the image cache would skip the tower for the first
    my $img = vlm_open_stream($srv, {
        %{ vlm_chat_body($prompt, vlm_data_url('image/png',
                                               vlm_png(1920, 1080, 6))) },
        max_tokens => 8, temperature => 0 });
    my $t_start = time;
    my ($last, $gap, $pieces, $open) = (time, 0, 0, 1);

    while ($open && time - $t_start < 60) {
        my $had = length $st->{raw};
        vlm_read_some($st, 0.002);
        if (length $st->{raw} > $had) {
            my $now = time;
            $gap = $now - $last if $now - $last > $gap;
            $last = $now;
            $pieces++;
        }
        $open = vlm_read_some($img, 0.001);
    }

    my $took2 = time - $t_start;
    $gap = $took2 - ($last - $t_start) if $took2 - ($last - $t_start) > $gap;
    my $r = VLMTest::parse_response($img->{raw});
    is($r->{status}, 200, 'the image is served next to the stream');
    is(vlm_json($r->{body})->{usage}{prompt_tokens},
       $j->{usage}{prompt_tokens}, 'as many tokens as the first');
    cmp_ok($pieces, '>', 0, 'the stream got tokens meanwhile');
    diag(sprintf("next to a stream: %.2f s for the image request; the "
                 . "stream's longest gap %.3f s, %d pieces meanwhile",
                 $took2, $gap, $pieces));
    close $st->{sock};
}

done_testing();
