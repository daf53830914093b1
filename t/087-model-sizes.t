# The sizes an operator sets: vlm_max_model_len, vlm_kv_cache,
# vlm_max_image_patches and vlm_max_prefill_tokens.  nginx -t names a value out of bounds, a context
# past the model's max_position_embeddings, a KV cache too small for the
# context, and an image budget below min_pixels.  Served: the context
# defaults to what the KV cache holds (the serving fixture's 512 bytes a
# token: 256k hold 512 tokens), /v1/models says so, a prompt past it is a
# 400 that names vlm_max_model_len; vlm_max_image_patches resizes the
# images into it (a model with max_pixels of 1024 patches, held to 64) and
# an image that still takes more (200:1) is a 400 that names it; each
# setting is on the engine's command line, and a reload that changes one
# starts another engine.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use VLMTest;

vlm_prereqs();
my $root = vlm_root();
my $fixture = "$root/tests/fixtures/serving";
my $tmp = tempdir("vlm-sizes-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $tmp;


sub conf_test {
    my ($directives, $model) = @_;

    $model ||= $fixture;

    my $dir = "$tmp/conf-" . int(rand(1e9));
    mkdir $dir;
    mkdir "$dir/logs";

    my $build = $ENV{VLM_BUILD} || "$root/build";
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES}
              || "$build/ngx_http_vlm_module.so";
    my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';

    open my $out, '>', "$dir/nginx.conf" or die $!;
    print $out "load_module $mod;\nerror_log $dir/logs/error.log;\n"
               . "pid $dir/logs/nginx.pid;\nevents {}\n"
               . "http {\n    vlm_model $model;\n"
               . "    vlm_zone vlm size=16m;\n    $directives\n}\n";
    close $out;

    my $text = `$nginx -t -p $dir/ -c $dir/nginx.conf 2>&1`;

    return ($? >> 8, $text);
}


# --- nginx -t

for my $c (
    [ 'vlm_max_model_len 15;',
      qr/"vlm_max_model_len" must be between 16 and 1048576, not "15"/ ],
    [ 'vlm_max_model_len 8192;',
      qr/vlm_max_model_len 8192 is more than the model's max_position_embeddings \(4096\)/ ],
    [ 'vlm_kv_cache 1k;',
      qr/"vlm_kv_cache" must be between 65536 and \d+, not "1k"/ ],
    [ 'vlm_kv_cache 10x;', qr/"vlm_kv_cache".*"10x"/ ],
    [ 'vlm_kv_cache 64k; vlm_max_model_len 4096;',
      qr/the KV cache of 65536 bytes \(vlm_kv_cache\) holds 128 tokens, less than a context of 4096 \(vlm_max_model_len\); 512 bytes a token/ ],
    [ 'vlm_max_image_patches 63;',
      qr/"vlm_max_image_patches" must be between 64 and 16777216, not "63"/ ],
) {
    my ($rc, $text) = conf_test($c->[0]);
    isnt($rc, 0, "nginx -t fails: $c->[0]");
    like($text, $c->[1], "and names it: $c->[0]");
}

{
    my $model = "$tmp/minpx";
    model_copy($model, 200704, 50176);
    my ($rc, $text) = conf_test("vlm_max_image_patches 64;", $model);
    isnt($rc, 0, 'nginx -t fails: 64 patches under min_pixels of 256');
    like($text, qr/"vlm_max_image_patches 64" is too few for the smallest images of "\S+" \(min_pixels 50176 is 256 patches\)/,
         'and names it');
    ($rc, $text) = conf_test("vlm_max_image_patches 256;", $model);
    is($rc, 0, 'nginx -t passes: 256 patches') or diag($text);
}

# a memory plan past this machine's memory (about 250 GB)
SKIP: {
    my $mem = 0;
    if (open my $mi, '<', '/proc/meminfo') {
        while (<$mi>) {
            $mem = $1 * 1024 if /^MemTotal:\s+(\d+) kB/;
        }
    }
    skip 'this machine has more than 200 GB of memory', 2
        if $mem == 0 || $mem > 200 * 1024 ** 3;

    my ($rc, $text) = conf_test('vlm_kv_cache 130048m; '
                                . 'vlm_max_image_patches 16777216;');
    isnt($rc, 0, 'nginx -t fails: a plan past the machine');
    like($text, qr/the memory plan takes \d+ MiB, more than the \d+ MiB of this machine: lower vlm_kv_cache or vlm_max_model_len/,
         'and names the directive of its largest part');
}

my ($ok, $ok_text) = conf_test('vlm_kv_cache 256k; vlm_max_model_len 512;');
is($ok, 0, 'nginx -t passes: a KV cache that holds the context')
    or diag($ok_text);


# a copy of the serving fixture with other max_pixels (and min_pixels)
sub model_copy {
    my ($model, $max, $min) = @_;

    mkdir $model or die "$model: $!";
    chmod 0755, $model;
    for my $f (glob "$fixture/*") {
        my ($name) = $f =~ m{([^/]+)$};
        next if $name eq 'preprocessor_config.json';
        symlink($f, "$model/$name") or die "$f: $!";
    }

    open my $in, '<', "$fixture/preprocessor_config.json" or die;
    local $/;
    my $pp = <$in>;
    $pp =~ s/"max_pixels": \d+/"max_pixels": $max/ or die;
    $pp =~ s/"min_pixels": \d+/"min_pixels": $min/ if defined $min;
    open my $out, '>', "$model/preprocessor_config.json" or die;
    print $out $pp;
    close $out;
}


# --- vlm-cli plan: the table the engine logs, for the sizes given

{
    my $build = $ENV{VLM_BUILD} || "$root/build";
    my $out = `$build/vlm-cli plan --model $fixture --kv-cache 256k 2>&1`;
    is($? >> 8, 0, 'vlm-cli plan: 0') or diag($out);
    like($out, qr/KV cache +0\.2 MiB +512 tokens of f32 \(vlm_kv_cache\); a context of 512 \(vlm_max_model_len\)/,
         'vlm-cli plan: the KV cache and the context it holds');
    like($out, qr/vision workspace .* 230 patches \(vlm_max_image_patches\)/,
         'vlm-cli plan: the processor\'s image budget by default');

    $out = `$build/vlm-cli plan --model $fixture --max-model-len 8192 2>&1`;
    is($? >> 8, 1, 'vlm-cli plan: past max_position_embeddings, 1');
    like($out, qr/vlm_max_model_len 8192 is more than/, 'and says why');
}


# --- served: the context from the KV cache

my $srv = vlm_start(name => 'sizes', http_config => 'vlm_kv_cache 256k;');

is(vlm_engine_arg($srv, '--kv-cache-bytes'), 262144,
   'the engine is told the KV cache');
is(vlm_engine_arg($srv, '--max-seq-len'), '',
   'and no context: it takes what the cache holds');
is(vlm_engine_arg($srv, '--max-prefill-tokens'), 1024,
   'and a prompt alone four times vlm_max_batch_tokens');

{
    open my $log, '<', "$srv->{prefix}/logs/error.log" or die;
    local $/;
    my $text = <$log>;
    like($text, qr/memory plan of rank 0 of 1:/,
         'the engine logs its memory plan');
    like($text, qr/KV cache +0\.2 MiB +512 tokens of f32 \(vlm_kv_cache\); a context of 512 \(vlm_max_model_len\)/,
         'the KV cache line: 256k, 512 tokens');
    like($text, qr/total +[\d.]+ MiB +of [\d.]+ MiB/,
         'and the total against the machine');
    like($text, qr/activations +[\d.]+ MiB +512 rows a step \(vlm_max_prefill_tokens, cut to the context\), 8 sequences \(vlm_max_running\)/,
         'the activations: a step of a prompt alone, at most a context');
}

my $res = vlm_request($srv, 'GET', '/v1/models');
is(vlm_json($res->{body})->{data}[0]{max_model_len}, 512,
   '/v1/models: the 512 tokens 256k hold');

$res = vlm_post_json($srv, { %{ vlm_chat_body('Say hi.') },
                             max_tokens => 2, temperature => 0 });
is($res->{status}, 200, 'a short prompt is served') or diag($res->{body});

$res = vlm_post_json($srv, { %{ vlm_chat_body('hello world ' x 400) },
                             max_tokens => 2 });
is($res->{status}, 400, 'a prompt past 512 tokens is a 400');
like($res->{body}, qr/"message":"This model's maximum context length is 512 tokens \(vlm_max_model_len\), but the messages resulted in \d+ tokens\.".*"code":"context_length_exceeded"/,
     'that names vlm_max_model_len');

VLMTest::check_log($srv, 'sizes');
VLMTest::vlm_stop($srv);
undef $srv;


# --- served: vlm_max_model_len below the cache, vlm_max_image_patches

my $model = "$tmp/model";
model_copy($model, 200704);

$srv = vlm_start(name => 'sizes2', model => $model,
                 http_config => "vlm_served_model_name serving;\n"
                                . "    vlm_max_model_len 300;\n"
                                . "    vlm_max_image_patches 64;\n"
                                . "    vlm_max_prefill_tokens 300;");

is(vlm_engine_arg($srv, '--max-seq-len'), 300, 'the engine is told 300');
is(vlm_engine_arg($srv, '--max-image-patches'), 64, 'and 64 patches');
is(vlm_engine_arg($srv, '--max-prefill-tokens'), 300,
   'and 300 rows a step alone');

$res = vlm_request($srv, 'GET', '/v1/models');
is(vlm_json($res->{body})->{data}[0]{max_model_len}, 300,
   '/v1/models: vlm_max_model_len');

$res = vlm_post_json($srv, { %{ vlm_chat_body('What?',
                                   vlm_data_url('image/png',
                                                vlm_png(560, 560))) },
                             max_tokens => 2, temperature => 0 });
is($res->{status}, 200, 'a 560x560 image is served') or diag($res->{body});
my $with = vlm_json($res->{body})->{usage}{prompt_tokens};

$res = vlm_post_json($srv, { %{ vlm_chat_body('What?') },
                             max_tokens => 2, temperature => 0 });
my $without = vlm_json($res->{body})->{usage}{prompt_tokens};
# 64 patches, 16 features, and the vision start and end tokens
is($with - $without, 16 + 2, 'resized into 64 patches (16 image tokens)');

$res = vlm_post_json($srv, { %{ vlm_chat_body('What?',
                                   vlm_data_url('image/png',
                                                vlm_png(5600, 28))) },
                             max_tokens => 2 });
is($res->{status}, 400, 'a 200:1 image of more patches is a 400');
like($res->{body}, qr/"message":"an image of 5600x28 pixels takes \d+ patches, more than this server's vlm_max_image_patches \(64\)"/,
     'that names vlm_max_image_patches') or diag($res->{body});

VLMTest::vlm_reload_engine($srv, 'vlm_max_model_len 300;',
                           'vlm_max_model_len 200;', 'vlm_max_model_len');
VLMTest::vlm_reload_engine($srv, 'vlm_max_image_patches 64;',
                           'vlm_max_image_patches 128;',
                           'vlm_max_image_patches');
VLMTest::vlm_reload_engine($srv, 'vlm_max_prefill_tokens 300;',
                           'vlm_max_prefill_tokens 256;',
                           'vlm_max_prefill_tokens');
is(vlm_engine_arg($srv, '--max-prefill-tokens'), 256,
   'the reloaded vlm_max_prefill_tokens');
$res = vlm_request($srv, 'GET', '/v1/models');
is(vlm_json($res->{body})->{data}[0]{max_model_len}, 200,
   '/v1/models: the reloaded vlm_max_model_len');

VLMTest::check_log($srv, 'sizes2');

done_testing();

END { VLMTest::vlm_stop($srv) if $srv }
