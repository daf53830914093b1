# A 3840x2160 photo at Qwen2-VL's published preprocessor settings
# (min_pixels 3136, max_pixels 12845056): 3836x2156 after smart_resize,
# 274x154 = 42,196 patches, 10,549 image tokens.  The default
# vlm_max_image_patches is what max_pixels needs (65,536), so the serving
# fixture takes it, its max_position_embeddings raised to 16,384 for the
# prompt: 200, the prompt's tokens counted as the processor counts them,
# and the greedy answer vlm-cli run gives on the same picture and prompt.
# The tower goes through in pieces of vlm_max_batch_tokens rows or
# queries; its attention runs in blocks of queries, never a score matrix
# of 42k x 42k.  The request's time and the engine's peak resident memory
# are printed (diag) for docs/performance.md.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

vlm_prereqs();

# the pixel values of one such image are 198.5 MB of the zone's arena
my ($srv) = vlm_photo_served(name => '4k', w => 3840, h => 2160, seed => 7,
                             zone => '256m', max_pos => 16384,
                             max_tokens => 16000, tokens => 10549);
END { VLMTest::vlm_stop($srv) if $srv }

done_testing();
