# The load test of bench/load.pl as part of make test: 1,000 requests at
# concurrency 16 (text, PNG and JPEG data: URLs, streaming, clients that
# leave early) against a real nginx with two workers; the engine's RSS and
# the workers' private RSS may not grow by more than 1 MB between request
# 300 (when their malloc arenas and per-thread image scratch have settled)
# and the end, and every pool must be back to 0 used.  It takes a few
# seconds on two cores.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

vlm_prereqs();

my $root = vlm_root();
my $port = $ENV{TEST_NGINX_PORT} || 1994;
my $n = $ENV{VLM_LOAD_REQUESTS} || 1000;

my $out = `$^X -I$root/t/lib $root/bench/load.pl --requests $n --concurrency 16 --port $port --name load-t 2>&1`;
my $rc = $?;

diag($out) if $ENV{TEST_VERBOSE} || $rc != 0;

is($rc, 0, "load: $n requests at concurrency 16 pass");
like($out, qr/^load: PASS$/m, 'load: PASS');

my ($rss1) = $out =~ /engine RSS after \d+ requests: (\d+)/;
my ($rss2) = $out =~ /engine RSS at the end: +(\d+)/;

ok(defined $rss1 && defined $rss2 && $rss2 - $rss1 <= 1024 * 1024,
   sprintf('load: engine RSS %s -> %s bytes', $rss1 // '?', $rss2 // '?'));

for my $pool (qw(request_slots queue_arena kv_blocks sequences)) {
    like($out, qr/vlm_pool_used\{pool="$pool",[^}]*\} +0$/m,
         "load: pool $pool back to 0 used");
}

done_testing();
