# vlm-cli run on a SmolVLM checkpoint (tests/fixtures/idefics3/
# smolvlm-chat): the PNG through the Idefics3 image processor, the
# question in SmolVLM's chat format with the image's tiles expanded, the
# tokenizer, the engine; its greedy answer is transformers' (ref/chat/
# answer.txt, from tools/fixtures_idefics3.py).  A second image the
# prompt has no room for, and a missing image, are refused.

use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use Test::More;

my $root = abs_path("$FindBin::Bin/..");
my $build = $ENV{VLM_BUILD} || "$root/build";
my $cli = "$build/vlm-cli";
my $model = "$root/tests/fixtures/idefics3/smolvlm-chat";
my $image = "$model/ref/chat/image.png";

-x $cli or die "$cli is not built (make cli)\n";

sub slurp {
    my ($path) = @_;
    open my $in, '<:raw', $path or die "$path: $!";
    local $/;
    return scalar <$in>;
}

my $answer = slurp("$model/ref/chat/answer.txt");

my $run = "$cli run --model $model --threads 1";

my $cmd = "$run --image $image --prompt 'What is in it?' --max-tokens 8"
          . " --temperature 0 --ignore-eos 2>&1";
my $out = `$cmd`;
is($?, 0, 'vlm-cli run exits 0');
is($out, "$answer\n", "the greedy answer is transformers'");

$out = `$run --image $root/no-such.png --prompt 'Hi' --max-tokens 2 2>&1`;
isnt($?, 0, 'a missing image fails');
like($out, qr/cannot read .*no-such\.png/, 'naming the file');

$out = `$run --prompt 'Say <image> here' --max-tokens 2 2>&1`;
isnt($?, 0, 'an <image> tag without an image fails');
like($out, qr/1 <image> tags for 0 images/, 'saying so');

done_testing();
