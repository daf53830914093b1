# vlm_head_quant through nginx: the serving model with its LM head rounded
# to int8 at load: the engine is started with --head-quant int8, logs the
# head's new size and answers; reloaded with int4 (another engine
# setting: the engine restarts) the new engine has --head-quant int4 and
# answers; with off (the default) it has --head-quant off.  The engine
# refuses a value it does not know, naming it.
#
# Plain Test::More: the reload and the engine's command line are
# orchestration that Test::Nginx::Socket blocks cannot express.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $model = "$root/tests/fixtures/serving";

my $srv = vlm_start(name => 'headquant', model => $model,
                    http_config => "    vlm_head_quant int8;\n");
END { VLMTest::vlm_stop($srv) if $srv }


is(vlm_engine_arg($srv, '--head-quant'), 'int8',
   'int8: the engine has --head-quant int8');
vlm_answer_ok($srv, 'head int8');
ok((grep { /the LM head rounded to int8 at load/ }
        VLMTest::error_log_since($srv)),
   'int8: the engine logs the rounded head');

vlm_reload_engine($srv, 'vlm_head_quant int8;', 'vlm_head_quant int4;',
                  'int4');
is(vlm_engine_arg($srv, '--head-quant'), 'int4',
   'int4: the engine has --head-quant int4');
vlm_answer_ok($srv, 'head int4');

vlm_reload_engine($srv, 'vlm_head_quant int4;', 'vlm_head_quant off;',
                  'off');
is(vlm_engine_arg($srv, '--head-quant'), 'off',
   'off: the engine has --head-quant off');
vlm_answer_ok($srv, 'head as the checkpoint holds it');
VLMTest::check_log($srv, 'after the reloads');

my $out = `$build/vlm-engine --model $model --head-quant int2 2>&1`;
isnt($? >> 8, 0, 'the engine refuses --head-quant int2');
like($out, qr/--head-quant takes off, int8 or int4, not "int2"/,
     'and names the value');

done_testing();
