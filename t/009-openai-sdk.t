# The official OpenAI Python SDK (tests/requirements-sdk.txt, installed by
# `make venv-test` into build/venv-test) against the module: a data: URL
# image, stream=False and stream=True, usage, logprobs, models, errors as
# the SDK's exceptions.  Skipped when the SDK is not installed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";

if (!-x $python || system("$python -c 'import openai' 2>/dev/null") != 0) {
    plan skip_all => "the OpenAI Python SDK is not installed in "
        . "$build/venv-test: run `make venv-test` (needs PyPI)";
}

my $tmp = tempdir("vlm-sdk-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $png = vlm_png(56, 56, 3);

open my $out, '>:raw', "$tmp/image.png" or die;
print $out $png;
close $out;

my $srv = vlm_start(name => 'sdk');
END { VLMTest::vlm_stop($srv) if $srv }

# the same request without the SDK: what the SDK must report
my $res = vlm_post_json($srv, {
    %{ vlm_chat_body('What is in this image?',
                     vlm_data_url('image/png', $png)) },
    max_tokens => 6, temperature => 0 });
is($res->{status}, 200, 'the request without the SDK');

my $j = vlm_json($res->{body});
my $text = $j->{choices}[0]{message}{content};
my $prompt = $j->{usage}{prompt_tokens};

vlm_sdk_checks(20, $python, "$root/tests/sdk/openai_sdk.py",
    "http://127.0.0.1:$srv->{port}/v1", "$tmp/image.png", $prompt, $text);

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'sdk: every slot free, arena used 0');

VLMTest::check_log($srv, 'sdk', qr/\[error\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'sdk: no engine process left');

done_testing();
