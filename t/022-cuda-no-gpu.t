# "vlm_backend cuda" with an engine built with CUDA on a machine with no
# GPU (CI): nginx starts, the engine's start-up fails with a message that
# says no GPU is visible (in nginx's error log, where the engine writes,
# and in /health's last_error, the model's directory left out), /health
# stays 503 and chat requests get 503.  The engine is the build's
# if it has CUDA, else make cuda's (build-cuda/); skipped where none has
# or a GPU is visible (t/021 serves on it there).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

my $build = vlm_prereqs();

my ($engine, $features) = vlm_cuda_engine($build);
plan skip_all => "no engine has the CUDA backend ($features): make cuda"
    if !defined $engine;
plan skip_all => 'a GPU is visible: t/021-cuda.t serves on it'
    if system('nvidia-smi -L >/dev/null 2>&1') == 0;

my $srv = vlm_start(name => 'cuda-nogpu', wait => 0,
                    http_config => "    vlm_backend cuda;\n"
                                   . "    vlm_engine_binary $engine;\n");
END { VLMTest::vlm_stop($srv) if $srv }

my ($line, $log) = (undef, '');
my $deadline = time + 15;

while (!$line && time < $deadline) {
    $log .= join '', VLMTest::error_log_since($srv);
    ($line) = $log =~ /^(.*vlm engine: loading .*: cuda backend: no GPU is visible \(cudaGetDeviceCount: .*\))$/m;
    sleep 0.2;
}

ok($line, 'the engine says no GPU is visible') or diag($log);
note($line) if $line;

my $h = vlm_health($srv);
is($h->{_status}, 503, '/health: 503');
is($h->{backend}, 'cuda', '/health: backend cuda');
isnt($h->{engine}, 'ready', '/health: the engine is not ready');
like($h->{last_error} // '',
     qr/^loading <model>: cuda backend: no GPU is visible \(cudaGetDeviceCount: /,
     '/health: last_error says no GPU is visible');

my $res = vlm_post_json($srv, vlm_chat_body('hi'));
is($res->{status}, 503, 'a chat request: 503');

done_testing();
