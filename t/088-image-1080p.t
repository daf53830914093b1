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

use Encode qw(decode);
use File::Temp qw(tempdir);
use Time::HiRes qw(time);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $fixture = "$root/tests/fixtures/serving";
my $tmp = tempdir("vlm-1080p-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $model = "$tmp/model";
chmod 0755, $tmp;

mkdir $model or die;
chmod 0755, $model;
for my $f (glob "$fixture/*") {
    my ($name) = $f =~ m{([^/]+)$};
    next if $name eq 'preprocessor_config.json';
    symlink($f, "$model/$name") or die "$f: $!";
}
{
    open my $in, '<', "$fixture/preprocessor_config.json" or die;
    local $/;
    my $pp = <$in>;
    $pp =~ s/"max_pixels": \d+/"max_pixels": 12845056/ or die;
    open my $out, '>', "$model/preprocessor_config.json" or die;
    print $out $pp;
}

my $png = vlm_png(1920, 1080, 5);
my $file = "$tmp/photo.png";
{
    open my $out, '>:raw', $file or die;
    print $out $png;
}

# the pixel values of one such image are 50.6 MB of the zone's arena
my $srv = vlm_start(name => '1080p', model => $model, zone => '96m',
                    http_config => "vlm_served_model_name serving;\n"
                                   . "    vlm_max_tokens 4000;");
END { VLMTest::vlm_stop($srv) if $srv }

is(vlm_engine_arg($srv, '--max-image-patches'), 65536,
   'the vision budget: what max_pixels needs');

my $prompt = 'Describe the picture.';
my $t0 = time;
my $res = vlm_post_json($srv, {
    %{ vlm_chat_body($prompt, vlm_data_url('image/png', $png)) },
    max_tokens => 8, temperature => 0 });
my $took = time - $t0;

is($res->{status}, 200, 'a 1920x1080 image is served') or diag($res->{body});
my $j = vlm_json($res->{body});

my $text = vlm_post_json($srv, { %{ vlm_chat_body($prompt) },
                                 max_tokens => 1, temperature => 0 });
my $n_text = vlm_json($text->{body})->{usage}{prompt_tokens};
is($j->{usage}{prompt_tokens} - $n_text, 2691 + 2,
   '2691 image tokens (138x78 patches merged 2x2) and the vision tags');

my ($engine) = VLMTest::vlm_engine_pids($srv);
my $hwm = 0;
if (open my $st, '<', "/proc/$engine/status") {
    while (<$st>) {
        $hwm = $1 if /^VmHWM:\s+(\d+)/;
    }
}
diag(sprintf("1920x1080 image: %.2f s for the request, engine peak RSS "
             . "%.1f MB", $took, $hwm / 1024));

# the same picture and prompt through vlm-cli run
my $want = `$build/vlm-cli run --model $model --image $file --threads 1 --temperature 0 --max-tokens 8 --prompt '$prompt' 2>&1`;
is($?, 0, 'vlm-cli run answers') or diag($want);
$want = decode('UTF-8', $want);
$want =~ s/\n\z//;
is($j->{choices}[0]{message}{content}, $want,
   'the answer vlm-cli run gives on the same picture');

VLMTest::check_log($srv, '1080p');

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
