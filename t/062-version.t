# GET /version (vlm_version): the module's version (VLM_VERSION), the
# nginx version, and the running engine's build: its version, the
# backend it runs, the backends built in (as `vlm-engine --features`
# says), the instruction set of the CPU kernels on this CPU (from
# /proc/cpuinfo's flags), the CUDA version it was built with (nvcc's, in
# a CUDA build) and its ranks; HEAD answers, POST is a 405.  With
# AVX512_BF16, OpenBLAS runs its AVX-512 kernels in the engine.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();

my ($version) = do {
    open my $in, '<', "$root/src/core/vlm_common.h" or die;
    local $/;
    <$in> =~ /#define VLM_VERSION\s+"([^"]+)"/;
};
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
# the core's version (NGINX_VERSION, what the module reports): the
# binary says nginx/1.30.4, or openresty/1.31.1.1 for OpenResty's
# nginx 1.31.1
my ($nginx_version) = `$nginx -v 2>&1` =~ m{version: [^/\s]+/(\d+\.\d+\.\d+)};
my @features = split ' ', `$build/vlm-engine --features`;
# the backends among them ("nccl" is the CUDA backend's communicator)
my @backends = grep { $_ ne 'nccl' } @features;

my $flags = do {
    open my $in, '<', '/proc/cpuinfo' or die;
    my ($l) = grep { /^flags/ } <$in>;
    " $l ";
};
my $simd = $flags =~ / avx512_bf16 / && $flags =~ / avx512bw /
           && $flags =~ / avx512vl /
           ? ($flags =~ / amx_bf16 / && $flags =~ / amx_tile /
              ? 'amx' : 'avx512bf16')
         : $flags =~ / avx2 / && $flags =~ / fma / && $flags =~ / f16c /
           ? 'avx2' : 'scalar';

my $cuda;
if (grep { $_ eq 'cuda' } @features) {
    my $nvcc = -x '/usr/local/cuda/bin/nvcc' ? '/usr/local/cuda/bin/nvcc'
                                             : 'nvcc';
    ($cuda) = `$nvcc --version 2>/dev/null` =~ /release (\d+\.\d+)/;
}

my $srv = vlm_start(name => 'version',
                    locations => 'location = /version { vlm_version; }');
END { VLMTest::vlm_stop($srv) if $srv }

my $res = vlm_request($srv, 'GET', '/version');
is($res->{status}, 200, '/version: 200');
like($res->{headers}{'content-type'}, qr{^application/json}, 'JSON');
my $j = eval { vlm_json($res->{body}) };

is_deeply($j, {
    version => $version, nginx => $nginx_version,
    engine => { version => $version, backend => 'cpu',
                backends => \@backends, simd => $simd, cuda => $cuda,
                tensor_parallel => 1 } },
    "the versions and the engine's build ($simd, cuda "
    . ($cuda // 'none') . ')') or diag($res->{body});
like($res->{body}, qr/^\{"version":/, 'the version comes first, as vLLM');

# OpenBLAS 0.3.21 takes its SSE3 or Haswell kernels on CPUs newer than it
# knows; with AVX512_BF16 the engine names the core type it runs
my ($blas) = map { /cpu backend: .* kernels, OpenBLAS (\S+)/ ? $1 : () }
             VLMTest::error_log_since($srv);
ok(defined $blas, 'the engine logs the OpenBLAS kernels it runs ('
   . ($blas // 'none') . ')');
if ($simd eq 'amx' || $simd eq 'avx512bf16') {
    like($blas // '', qr/^(cooperlake|skylakex|sapphirerapids)$/i,
         "$simd: OpenBLAS runs its AVX-512 kernels");
}

is(vlm_request($srv, 'HEAD', '/version')->{status}, 200, 'HEAD: 200');
is(vlm_request($srv, 'POST', '/version', '{}')->{status}, 405, 'POST: 405');

done_testing();
