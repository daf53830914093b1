# vlm_quant_activations through nginx: the serving model quantized by
# `vlm-cli quantize` (AWQ int4, groups of 32), served with f32
# activations: the engine is started with --quant-activations f32 and
# answers; reloaded with int8 (another engine setting: the engine
# restarts) the new engine has --quant-activations int8 and answers.  The
# engine refuses a value it does not know, naming it.
#
# Plain Test::More: the reload and the engine's command line are
# orchestration that Test::Nginx::Socket blocks cannot express.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $tmp = tempdir("vlm-quantact-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $model = "$tmp/serving";

system("$build/vlm-cli quantize --model $root/tests/fixtures/serving "
       . "--out $model --format awq --group 32 >$tmp/quantize.log 2>&1") == 0
    or BAIL_OUT("vlm-cli quantize failed: " . `cat $tmp/quantize.log`);

for my $f (glob "$root/tests/fixtures/serving/*") {
    my ($name) = $f =~ m{([^/]+)$};
    next if -e "$model/$name" || $name =~ /safetensors/;
    copy($f, "$model/$name") or die "cannot copy $f: $!";
}

my $srv = vlm_start(name => 'quantact', model => $model,
                    http_config => "    vlm_quant_activations f32;\n");
END { VLMTest::vlm_stop($srv) if $srv }


is(vlm_engine_arg($srv, '--quant-activations'), 'f32',
   'f32: the engine has --quant-activations f32');
vlm_answer_ok($srv, 'f32 activations');

vlm_reload_engine($srv, 'vlm_quant_activations f32;',
                  'vlm_quant_activations int8;', 'int8');
is(vlm_engine_arg($srv, '--quant-activations'), 'int8',
   'int8: the engine has --quant-activations int8');
vlm_answer_ok($srv, 'int8 activations');

my $out = `$build/vlm-engine --model $model --quant-activations int4 2>&1`;
isnt($? >> 8, 0, 'the engine refuses --quant-activations int4');
like($out, qr/--quant-activations takes int8 or f32, not "int4"/,
     'and names the value');

done_testing();
