# The schema corpus of tests/fixtures/schemas through nginx with the
# random-weight fixture model (tests/sdk/corpus.py, on the OpenAI SDK and
# jsonschema of tests/requirements-sdk.txt, installed by `make
# venv-test`): OpenAI's structured-outputs examples, Pydantic models as
# Pydantic and the SDK's parse() write them, LangChain and OpenAI-agents
# tool schemas and edge cases; every accepted schema's answers at
# temperature 1 over VLM_CORPUS_SEEDS seeds (8 by default) validate,
# every refused one is a 400 naming its path and keyword.  Skipped when
# the SDK is not installed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $python = $ENV{VLM_SDK_PYTHON} || "$build/venv-test/bin/python";
my $seeds = $ENV{VLM_CORPUS_SEEDS} || 8;

if (!-x $python
    || system("$python -c 'import openai, jsonschema' 2>/dev/null") != 0)
{
    plan skip_all => "the OpenAI Python SDK or jsonschema is not installed "
        . "in $build/venv-test: run `make venv-test` (needs PyPI)";
}

my $srv = vlm_start(name => 'schema-corpus');
END { VLMTest::vlm_stop($srv) if $srv }

my @accepted = glob("$root/tests/fixtures/schemas/accepted/*.json");
my @refused = glob("$root/tests/fixtures/schemas/refused/*.json");

open my $py, '-|', $python, "$root/tests/sdk/corpus.py",
    "http://127.0.0.1:$srv->{port}/v1", "$root/tests/fixtures/schemas",
    $seeds
    or die "cannot run $python: $!";

my $checks = 0;

while (my $line = <$py>) {
    chomp $line;

    if ($line =~ /^(not )?ok - (.*)$/) {
        ok(!$1, "corpus: $2");
        $checks++;

    } else {
        diag($line);
    }
}

close $py;
is($?, 0, 'corpus: the script ran to its end');
is($checks, @accepted + @refused, "corpus: $checks checks, one a schema");

VLMTest::check_log($srv, 'schema-corpus', qr/\[(error|crit|alert)\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'schema-corpus: no engine process left');

done_testing();
