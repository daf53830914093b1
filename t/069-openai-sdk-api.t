# The OpenAI Python SDK (build/venv-test, `make venv-test`) on the rest of
# the API surface: logit_bias, completions (plain, streamed, token ids,
# logprobs), n (two choices, plain and streamed), models.list and
# models.retrieve, with
# errors as the SDK's exceptions (tests/sdk/openai_sdk_api.py).  Skipped
# when the SDK is not installed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $model = "$root/tests/fixtures/serving";
my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";

if (!-x $python || system("$python -c 'import openai' 2>/dev/null") != 0) {
    plan skip_all => "the OpenAI Python SDK is not installed in "
        . "$build/venv-test: run `make venv-test` (needs PyPI)";
}

my $srv = vlm_start(name => 'sdk-api', locations => <<'_EOC_');
        location = /v1/completions { vlm_completions; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

my ($a, $b) = split ' ', `$build/vlm-cli tokenize --model $model --text hello`;
my $a_text = `$build/vlm-cli detokenize --model $model $a`;
my $b_text = `$build/vlm-cli detokenize --model $model $b`;

vlm_sdk_checks(19, $python, "$root/tests/sdk/openai_sdk_api.py",
    "http://127.0.0.1:$srv->{port}/v1", $a, $a_text, $b, $b_text);

my $zone = vlm_wait_idle($srv, 3);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'sdk: every slot free, arena used 0');

done_testing();
