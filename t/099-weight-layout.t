# vlm_cpu_weight_layout through nginx: the serving model in bf16 (its f32
# tensors rounded to nearest even here), served with tiles: the engine is
# started with --weight-layout tiles and logs it (on a CPU with AMX the
# bf16 matrices packed at load and the plan's "weight tiles" line; else
# that there is no tile GEMM), and answers a prompt long enough for
# prefill's tile GEMM; reloaded with plain (another engine setting: the
# engine restarts) the new engine has --weight-layout plain and gives the
# same greedy answer.  The engine refuses a value it does not know,
# naming it.
#
# Plain Test::More: the reload and the engine's command line are
# orchestration that Test::Nginx::Socket blocks cannot express.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $tmp = tempdir("vlm-wlayout-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $model = "$tmp/serving";
my $src = "$root/tests/fixtures/serving";

mkdir $model or die "mkdir $model: $!";

for my $f (glob "$src/*") {
    my ($name) = $f =~ m{([^/]+)$};
    next if $name =~ /safetensors/;
    copy($f, "$model/$name") or die "cannot copy $f: $!";
}

# the checkpoint in bf16: every F32 tensor rounded to nearest even
{
    open my $in, '<:raw', "$src/model.safetensors" or die "$src: $!";
    local $/;
    my $st = <$in>;
    close $in;

    my $n = unpack 'Q<', substr($st, 0, 8);
    my $hdr = decode_json(substr($st, 8, $n));
    my $data = substr($st, 8 + $n);
    my ($out, $off) = ('', 0);

    for my $name (sort { $hdr->{$a}{data_offsets}[0]
                         <=> $hdr->{$b}{data_offsets}[0] }
                  grep { $_ ne '__metadata__' } keys %$hdr)
    {
        my $t = $hdr->{$name};
        my ($b, $e) = @{ $t->{data_offsets} };
        my $bytes = substr($data, $b, $e - $b);

        if ($t->{dtype} eq 'F32') {
            $bytes = pack 'v*', map {
                ($_ + 0x7fff + (($_ >> 16) & 1)) >> 16 & 0xffff
            } unpack 'V*', $bytes;
            $t->{dtype} = 'BF16';
        }

        $t->{data_offsets} = [ $off, $off + length $bytes ];
        $off += length $bytes;
        $out .= $bytes;
    }

    my $h = encode_json($hdr);
    $h .= ' ' x ((8 - length($h) % 8) % 8);

    open my $o, '>:raw', "$model/model.safetensors" or die "$model: $!";
    print $o pack('Q<', length $h), $h, $out;
    close $o;
}

my $amx = `grep -c amx_tile /proc/cpuinfo 2>/dev/null` + 0 > 0;

my $srv = vlm_start(name => 'wlayout', model => $model,
                    http_config => "    vlm_cpu_weight_layout tiles;\n");
END { VLMTest::vlm_stop($srv) if $srv }


# a prompt of some 300 tokens: one prefill piece of 128 rows or more
sub answer ($) {
    my $what = shift;
    my $res = vlm_post_json($srv, {
        %{ vlm_chat_body(join ' ', map { "word$_" } 1 .. 100) },
        temperature => 0, max_tokens => 8 });
    my $j = eval { vlm_json($res->{body}) };

    is($res->{status}, 200, "$what: 200") or diag($res->{raw});
    ok($j && $j->{usage}{prompt_tokens} >= 128,
       "$what: a prompt of 128 tokens or more")
        or diag($res->{raw});

    return $j ? $j->{choices}[0]{message}{content} : undef;
}


is(vlm_engine_arg($srv, '--weight-layout'), 'tiles',
   'tiles: the engine has --weight-layout tiles');
my $tiles = answer('tiles');

my @log = VLMTest::error_log_since($srv);

if ($amx) {
    ok((grep { /weight layout tiles: bf16 matrices packed once at load/ }
            @log), 'tiles: the engine logs the matrices packed');
    ok((grep { /weight tiles .* MiB/ } @log),
       'tiles: the memory plan has the weight tiles')
        or diag(join '', grep { /plan|MiB/ } @log);

} else {
    ok((grep { /weight layout tiles: no AMX tile GEMM here/ } @log),
       'tiles: the engine logs that this CPU has no tile GEMM');
}

vlm_reload_engine($srv, 'vlm_cpu_weight_layout tiles;',
                  'vlm_cpu_weight_layout plain;', 'plain');
is(vlm_engine_arg($srv, '--weight-layout'), 'plain',
   'plain: the engine has --weight-layout plain');
my $plain = answer('plain');

ok(defined $tiles && length $tiles, 'tiles: an answer');
is($plain, $tiles, 'plain: the same greedy answer as tiles');
VLMTest::check_log($srv, 'after the reload');

my $out = `$build/vlm-engine --model $model --weight-layout vnni 2>&1`;
isnt($? >> 8, 0, 'the engine refuses --weight-layout vnni');
like($out, qr/--weight-layout takes plain or tiles, not "vnni"/,
     'and names the value');

done_testing();
