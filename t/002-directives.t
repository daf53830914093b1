# Every directive of ngx_http_vlm_module: good values (reflected by
# vlm_health) and every bad value, which must stop nginx with a message
# that names the value at fault.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }
use Cwd ();
use File::Spec ();
use File::Temp qw(tempdir);

# model directories for vlm_model: a good one, and the ways one goes wrong
my $models = tempdir("vlm-models-XXXXXX", TMPDIR => 1, CLEANUP => 1);

sub write_file {
    my ($path, $text) = @_;
    open my $out, '>', $path or die "cannot write $path: $!";
    print $out $text;
    close $out;
}

mkdir "$models/good" or die;
# a real (tiny, random) model, so that the engine can load it
for my $f (glob "tests/fixtures/serving/*") {
    system("cp", $f, "$models/good/") == 0 or die "cannot copy $f";
}
mkdir "$models/empty" or die;
write_file("$models/file", "not a directory\n");
mkdir "$models/config-dir" or die;
mkdir "$models/config-dir/config.json" or die;

$ENV{TEST_NGINX_MODELS} = $models;

# stand-ins for engines with and without the CUDA backend
$ENV{TEST_NGINX_ENGINES} = Cwd::abs_path('t/data');

# the same model directory, relative to the nginx prefix (the server root)
$ENV{TEST_NGINX_MODEL_RELATIVE} =
    File::Spec->abs2rel("$models/good", $ENV{TEST_NGINX_SERVER_ROOT});

repeat_each(1);

# a block that serves: status, body, no [emerg]; a must_die block: the
# failure and its message
my $must_die = grep { defined $_->must_die } blocks();
plan tests => repeat_each() * (3 * (blocks() - $must_die) + 2 * $must_die);

no_shuffle();
run_tests();

__DATA__

=== TEST 1: defaults without any vlm directive
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "model":null,"backend":"cpu","thread_pool":null,"max_images":8,"max_image_pixels":16777216,"zone":null\}
--- no_error_log
[emerg]



=== TEST 1a: the engine's sizing by default, in /metrics (not in /health)
--- http_config
    vlm_zone vlm size=1m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_engine_threads\{model_name="[^"]*"\} [1-9][0-9]*\n.*\nvlm_max_running\{model_name="[^"]*"\} 8\n.*\nvlm_max_batch_tokens\{model_name="[^"]*"\} 256\n.*\nvlm_prefix_cache\{model_name="[^"]*"\} 1\n.*\nvlm_zone_size_bytes\{model_name="[^"]*"\} 1048576\n
--- no_error_log
[emerg]



=== TEST 2: vlm_model with a model directory (ready once the engine loaded it): /health names the served model, never its directory
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code_like: ^(200|503)$
--- response_body_like: ^(?!.*/good)\{.*"model":"good","backend":"cpu",.*"thread_pool":"default"
--- no_error_log
[emerg]



=== TEST 3: vlm_model relative to the prefix (its directory in /metrics)
--- http_config
    vlm_model $TEST_NGINX_MODEL_RELATIVE;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like eval
'\nvlm_model_info\{model_name="[^"]*",model="good",path="'
. quotemeta($ENV{TEST_NGINX_SERVER_ROOT})
. '/(\.\./)+[^"]*/good",backend="cpu"\} 1\n'
--- no_error_log
[emerg]



=== TEST 4: vlm_model: a directory that does not exist
--- http_config
    vlm_model $TEST_NGINX_MODELS/none;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model directory "[^"]+/none" is not accessible \(2: No such file or directory\) in \S+nginx\.conf:\d+$}



=== TEST 5: vlm_model: a file, not a directory
--- http_config
    vlm_model $TEST_NGINX_MODELS/file;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/file" is not a directory in \S+nginx\.conf:\d+$}



=== TEST 6: vlm_model: a directory without config.json
--- http_config
    vlm_model $TEST_NGINX_MODELS/empty;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model directory "[^"]+/empty" has no config.json \(2: No such file or directory\) in \S+nginx\.conf:\d+$}



=== TEST 7: vlm_model: config.json is not a regular file
--- http_config
    vlm_model $TEST_NGINX_MODELS/config-dir;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/config-dir/config\.json" is not a regular file in \S+nginx\.conf:\d+$}



=== TEST 8: vlm_model: an empty path
--- http_config
    vlm_model "";
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_model" needs a model directory, not an empty path in \S+nginx\.conf:\d+$}



=== TEST 9: vlm_model: given twice
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_model $TEST_NGINX_MODELS/good;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_model" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 10: vlm_model: not allowed in a location
--- config
    location = /t { vlm_model $TEST_NGINX_MODELS/good; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_model" directive is not allowed here in \S+nginx\.conf:\d+$}



=== TEST 11: vlm_backend cuda: refused with an engine built without CUDA
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-cpu-only;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_backend cuda": the engine "[^"]+/engine-cpu-only" has no CUDA backend \(its backends: "cpu"\); build it where nvcc is found, or use "cpu" in \S+nginx\.conf:\d+$}



=== TEST 11a: vlm_backend cuda: an engine that does not answer --features
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_engine_binary /bin/false;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_backend cuda": the engine "/bin/false" did not answer --features \(exit status 1\); use "cpu" or an engine built with CUDA in \S+nginx\.conf:\d+$}



=== TEST 11b: vlm_backend cuda: accepted with an engine built with CUDA
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "model":"good","backend":"cuda",
--- no_error_log
[emerg]



=== TEST 11c: vlm_backend cuda without vlm_model: no engine to ask
--- http_config
    vlm_backend cuda;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "model":null,"backend":"cuda",
--- no_error_log
[emerg]



=== TEST 12: vlm_backend: an unknown backend
--- http_config
    vlm_backend gpu;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "gpu" in \S+nginx\.conf:\d+$}



=== TEST 13: vlm_engine_threads 3
--- http_config
    vlm_engine_threads 3;
    vlm_zone vlm size=1m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_engine_threads\{model_name="[^"]*"\} 3\n
--- no_error_log
[emerg]



=== TEST 14: vlm_engine_threads: zero
--- http_config
    vlm_engine_threads 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_threads" must be between 1 and 1024, not "0" in \S+nginx\.conf:\d+$}



=== TEST 15: vlm_engine_threads: too many
--- http_config
    vlm_engine_threads 1025;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_threads" must be between 1 and 1024, not "1025" in \S+nginx\.conf:\d+$}



=== TEST 16: vlm_engine_threads: not a number
--- http_config
    vlm_engine_threads two;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_threads" directive invalid number in \S+nginx\.conf:\d+$}



=== TEST 17: vlm_thread_pool names a declared pool
--- main_config
    thread_pool vlmpool threads=2;
--- http_config
    vlm_thread_pool vlmpool;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "thread_pool":"vlmpool",
--- no_error_log
[emerg]



=== TEST 18: vlm_thread_pool names a pool declared after the http block
--- http_config
    vlm_thread_pool late;
--- post_main_config
    thread_pool late threads=2;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "thread_pool":"late",
--- no_error_log
[emerg]



=== TEST 19: vlm_thread_pool: a pool no thread_pool directive declares
--- http_config
    vlm_thread_pool nosuch;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: unknown thread pool "nosuch" in \S+nginx\.conf:\d+$}



=== TEST 20: vlm_thread_pool: given twice
--- main_config
    thread_pool vlmpool threads=2;
--- http_config
    vlm_thread_pool vlmpool;
    vlm_thread_pool vlmpool;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_thread_pool" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 21: vlm_zone with a size in nginx units
--- http_config
    vlm_zone vlm size=2m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_pool_capacity\{model_name="[^"]*",pool="request_slots",unit="slots"\} 64\nvlm_pool_capacity\{model_name="[^"]*",pool="queue_arena",unit="bytes"\} [1-9][0-9]*\n.*\nvlm_zone_size_bytes\{model_name="[^"]*"\} 2097152\n
--- no_error_log
[emerg]



=== TEST 22: vlm_zone: a parameter other than size=
--- http_config
    vlm_zone vlm bytes=1m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid parameter "bytes=1m", expected "size=<size>" in \S+nginx\.conf:\d+$}



=== TEST 23: vlm_zone: a size that is not a size
--- http_config
    vlm_zone vlm size=big;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid zone size "size=big" in \S+nginx\.conf:\d+$}



=== TEST 24: vlm_zone: too small
--- http_config
    vlm_zone vlm size=4k;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: zone "vlm" is too small: "size=4k", at least \d+k in \S+nginx\.conf:\d+$}



=== TEST 25: vlm_zone: an empty name
--- http_config
    vlm_zone "" size=1m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid zone name "" in \S+nginx\.conf:\d+$}



=== TEST 26: vlm_zone: without size
--- http_config
    vlm_zone vlm;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid number of arguments in "vlm_zone" directive in \S+nginx\.conf:\d+$}



=== TEST 27: vlm_zone: given twice
--- http_config
    vlm_zone vlm size=1m;
    vlm_zone vlm2 size=1m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_zone" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 28: vlm_zone: too small for the request slots
--- http_config
    vlm_max_queued 4000;
    vlm_zone vlm size=1m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_zone "vlm" of 1048576 bytes is too small for 4008 request slots: at least \d+k in \S+nginx\.conf:\d+$}



=== TEST 29: vlm_max_image_pixels in nginx units
--- http_config
    vlm_max_image_pixels 4m;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "max_image_pixels":4194304,
--- no_error_log
[emerg]



=== TEST 30: vlm_max_image_pixels: zero
--- http_config
    vlm_max_image_pixels 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_image_pixels" must be between 1 and 268435456, not "0" in \S+nginx\.conf:\d+$}



=== TEST 31: vlm_max_image_pixels: above the limit
--- http_config
    vlm_max_image_pixels 257m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_image_pixels" must be between 1 and 268435456, not "257m" in \S+nginx\.conf:\d+$}



=== TEST 32: vlm_max_image_pixels: not a size
--- http_config
    vlm_max_image_pixels lots;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_image_pixels" directive invalid value in \S+nginx\.conf:\d+$}



=== TEST 33: vlm_max_images 2
--- http_config
    vlm_max_images 2;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "max_images":2,
--- no_error_log
[emerg]



=== TEST 34: vlm_max_images: zero
--- http_config
    vlm_max_images 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_images" must be between 1 and 256, not "0" in \S+nginx\.conf:\d+$}



=== TEST 35: vlm_max_images: too many
--- http_config
    vlm_max_images 257;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_images" must be between 1 and 256, not "257" in \S+nginx\.conf:\d+$}



=== TEST 36: vlm_max_images: not a number
--- http_config
    vlm_max_images -1;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_images" directive invalid number in \S+nginx\.conf:\d+$}



=== TEST 36a: vlm_max_batch_tokens 16
--- http_config
    vlm_max_batch_tokens 16;
    vlm_zone vlm size=1m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_max_batch_tokens\{model_name="[^"]*"\} 16\n
--- no_error_log
[emerg]



=== TEST 36b: vlm_max_batch_tokens: too few
--- http_config
    vlm_max_batch_tokens 15;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_batch_tokens" must be between 16 and 65536, not "15" in \S+nginx\.conf:\d+$}



=== TEST 36b1: vlm_max_prefill_tokens: four times vlm_max_batch_tokens unless set
--- http_config
    vlm_max_batch_tokens 32;
    vlm_zone vlm size=1m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_max_batch_tokens\{model_name="[^"]*"\} 32\n.*\nvlm_max_prefill_tokens\{model_name="[^"]*"\} 128\n
--- no_error_log
[emerg]



=== TEST 36b2: vlm_max_prefill_tokens 2048
--- http_config
    vlm_max_prefill_tokens 2048;
    vlm_zone vlm size=1m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_max_prefill_tokens\{model_name="[^"]*"\} 2048\n
--- no_error_log
[emerg]



=== TEST 36b3: vlm_max_prefill_tokens: fewer than vlm_max_batch_tokens
--- http_config
    vlm_max_batch_tokens 512;
    vlm_max_prefill_tokens 256;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*"vlm_max_prefill_tokens 256" is less than vlm_max_batch_tokens \(512\)}



=== TEST 36b4: vlm_max_prefill_tokens: too many
--- http_config
    vlm_max_prefill_tokens 262145;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_prefill_tokens" must be between 16 and 262144, not "262145" in \S+nginx\.conf:\d+$}



=== TEST 36ba: vlm_max_n 4
--- http_config
    vlm_max_n 4;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body_like: ^$
--- no_error_log
[emerg]



=== TEST 36bb: vlm_max_n: zero
--- http_config
    vlm_max_n 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_n" must be between 1 and 64, not "0" in \S+nginx\.conf:\d+$}



=== TEST 36bc: vlm_max_n: above 64
--- http_config
    vlm_max_n 65;
    vlm_max_running 128;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_n" must be between 1 and 64, not "65" in \S+nginx\.conf:\d+$}



=== TEST 36bd: vlm_max_n: not a number
--- http_config
    vlm_max_n many;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_n" directive invalid number in \S+nginx\.conf:\d+$}



=== TEST 36be: vlm_max_n: more than vlm_max_running
--- http_config
    vlm_max_running 2;
    vlm_max_n 3;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*"vlm_max_n 3" is more than vlm_max_running \(2\): the n choices of a request run at once}



=== TEST 36bf: vlm_max_n: not allowed in a location
--- config
    location = /t { vlm_max_n 2; return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_n" directive is not allowed here in \S+nginx\.conf:\d+$}



=== TEST 36c: vlm_tensor_parallel: none
--- http_config
    vlm_tensor_parallel 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_tensor_parallel" must be between 1 and 8, not "0" in \S+nginx\.conf:\d+$}



=== TEST 36d: vlm_tensor_parallel: more ranks than a group has
--- http_config
    vlm_tensor_parallel 9;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_tensor_parallel" must be between 1 and 8, not "9" in \S+nginx\.conf:\d+$}



=== TEST 36d2: vlm_tensor_parallel: a model whose heads do not split
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_tensor_parallel 3;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+": model: 4 attention heads, 2 KV heads, intermediate size 128 and vocabulary \d+ do not split evenly over 3 tensor-parallel ranks in \S+nginx\.conf:\d+$}



=== TEST 36e: vlm_engine_cpus: not a CPU list
--- http_config
    vlm_engine_cpus 0-x;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_cpus": "0-x" is not a CPU list such as "0-3,8" \(CPUs 0 to 1023\) in \S+nginx\.conf:\d+$}



=== TEST 36f: vlm_engine_cpus: a list a rank
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_tensor_parallel 2;
    vlm_engine_cpus 0-1;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_cpus" has 1 CPU lists, one for each of the 2 ranks of "vlm_tensor_parallel" is needed in \S+nginx\.conf:\d+$}



=== TEST 36g: vlm_feature_pool: larger than a pool can be
--- http_config
    vlm_feature_pool 70000m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_feature_pool" must be between 0 and 68719476736, not "70000m" in \S+nginx\.conf:\d+$}



=== TEST 36h: vlm_feature_pool: not a size
--- http_config
    vlm_feature_pool lots;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_feature_pool" directive invalid value in \S+nginx\.conf:\d+$}



=== TEST 36i: vlm_engine_numa_nodes: node 0, which every host has
--- http_config
    vlm_engine_numa_nodes 0;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body
--- no_error_log
[emerg]



=== TEST 36j: vlm_engine_numa_nodes: a node this host does not have
--- http_config
    vlm_engine_numa_nodes 0 1000;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_numa_nodes": this host has no NUMA node 1000 \(/sys/devices/system/node/node1000/cpulist\) \(2: No such file or directory\) in \S+nginx\.conf:\d+$}



=== TEST 36k: vlm_engine_numa_nodes: not a node number
--- http_config
    vlm_engine_numa_nodes first;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_numa_nodes": "first" is not a node number in \S+nginx\.conf:\d+$}



=== TEST 36l: vlm_engine_numa_nodes and vlm_engine_cpus together
--- http_config
    vlm_engine_cpus 0;
    vlm_engine_numa_nodes 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_cpus" and "vlm_engine_numa_nodes" both place the ranks: set one of them in \S+nginx\.conf:\d+$}



=== TEST 36m: vlm_engine_numa_nodes: a node a rank
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_tensor_parallel 2;
    vlm_engine_numa_nodes 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_engine_numa_nodes" has 1 nodes, one for each of the 2 ranks of "vlm_tensor_parallel" is needed in \S+nginx\.conf:\d+$}



=== TEST 36n: vlm_gpus: needs the cuda backend
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_gpus 0;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_gpus" needs "vlm_backend cuda" in \S+nginx\.conf:\d+$}



=== TEST 36n2: vlm_cuda_graphs on: needs the cuda backend
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_cuda_graphs on;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_cuda_graphs on" needs "vlm_backend cuda" in \S+nginx\.conf:\d+$}



=== TEST 36n3: vlm_cuda_graphs: on or off
--- http_config
    vlm_cuda_graphs maybe;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*invalid value "maybe" in "vlm_cuda_graphs" directive, it must be "on" or "off"}



=== TEST 36o: vlm_gpus: not a device index
--- http_config
    vlm_gpus 0 x;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_gpus": "x" is not a device index \(0 to 1023\) in \S+nginx\.conf:\d+$}



=== TEST 36p: vlm_gpus: a device a rank
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
    vlm_tensor_parallel 2;
    vlm_gpus 3;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_gpus" names 1 devices, one for each of the 2 ranks of "vlm_tensor_parallel" is needed in \S+nginx\.conf:\d+$}



=== TEST 36q: vlm_tensor_parallel on GPUs: an engine without NCCL
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-cuda-no-nccl;
    vlm_tensor_parallel 2;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_tensor_parallel 2" with "vlm_backend cuda": the engine "[^"]+/engine-cuda-no-nccl" has no NCCL \(its features: "cpu cuda"\) in \S+nginx\.conf:\d+$}



=== TEST 36r: vlm_tensor_parallel on GPUs: two ranks on the devices named
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
    vlm_tensor_parallel 2;
    vlm_gpus 1 0;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "model":"good","backend":"cuda",
--- no_error_log
[emerg]



=== TEST 37: vlm_health: not allowed at the http level
--- http_config
    vlm_health;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_health" directive is not allowed here in \S+nginx\.conf:\d+$}



=== TEST 38: vlm_health: takes no arguments
--- config
    location = /health { vlm_health on; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid number of arguments in "vlm_health" directive in \S+nginx\.conf:\d+$}



=== TEST 39: vlm_health: given twice
--- config
    location = /health { vlm_health; vlm_health; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_health" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 40: vlm_prefix_cache off, in /metrics
--- http_config
    vlm_zone vlm size=1m;
    vlm_prefix_cache off;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_prefix_cache\{model_name="[^"]*"\} 0\n
--- no_error_log
[emerg]



=== TEST 41: vlm_prefix_cache: neither on nor off
--- http_config
    vlm_prefix_cache yes;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "yes" in "vlm_prefix_cache" directive, it must be "on" or "off" in \S+nginx\.conf:\d+$}



=== TEST 41a: vlm_kv_dtype: auto by default, in /metrics
--- http_config
    vlm_zone vlm size=1m;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_kv_dtype\{model_name="[^"]*",dtype="auto"\} 1\n
--- no_error_log
[emerg]



=== TEST 41b: vlm_kv_dtype bf16, in /metrics
--- http_config
    vlm_zone vlm size=1m;
    vlm_kv_dtype bf16;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_kv_dtype\{model_name="[^"]*",dtype="bf16"\} 1\n
--- no_error_log
[emerg]



=== TEST 41c: vlm_kv_dtype f16 and f32 are values too
--- http_config
    vlm_zone vlm size=1m;
    vlm_kv_dtype f16;
--- config
    location = /metrics { vlm_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: \nvlm_kv_dtype\{model_name="[^"]*",dtype="f16"\} 1\n
--- no_error_log
[emerg]



=== TEST 41d: vlm_kv_dtype: an unknown dtype
--- http_config
    vlm_kv_dtype fp4;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "fp4" in \S+nginx\.conf:\d+$}



=== TEST 41d2: vlm_kv_dtype fp8: the cuda backend's only
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_kv_dtype fp8;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_kv_dtype fp8" needs "vlm_backend cuda": the CPU backend keeps no float8 keys and values in \S+nginx\.conf:\d+$}



=== TEST 41e: vlm_kv_dtype: given twice
--- http_config
    vlm_kv_dtype f32;
    vlm_kv_dtype bf16;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_kv_dtype" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 41f: vlm_kv_dtype: not allowed in a location
--- config
    location = /t { vlm_kv_dtype f32; return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_kv_dtype" directive is not allowed here in \S+nginx\.conf:\d+$}



=== TEST 41g: vlm_kv_dtype bf16 and f16 with vlm_backend cuda: its KV cache holds them too
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_kv_dtype f16;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body
--- no_error_log
[emerg]



=== TEST 41h: vlm_head_quant: off, int8 and int4 are its values
--- http_config
    vlm_head_quant int4;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body
--- no_error_log
[emerg]



=== TEST 41i: vlm_head_quant: an unknown value
--- http_config
    vlm_head_quant int2;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "int2" in \S+nginx\.conf:\d+$}



=== TEST 41j: vlm_head_quant: given twice
--- http_config
    vlm_head_quant int8;
    vlm_head_quant off;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_head_quant" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 41k: vlm_head_quant int8 with vlm_backend cuda
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_head_quant int8;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_head_quant int8" needs "vlm_backend cpu": the CUDA backend runs no quantized weights in \S+nginx\.conf:\d+$}



=== TEST 41l: vlm_cpu_weight_layout: plain and tiles are its values
--- http_config
    vlm_cpu_weight_layout tiles;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body
--- no_error_log
[emerg]



=== TEST 41m: vlm_cpu_weight_layout: an unknown value
--- http_config
    vlm_cpu_weight_layout vnni;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "vnni" in \S+nginx\.conf:\d+$}



=== TEST 41n: vlm_cpu_weight_layout: given twice
--- http_config
    vlm_cpu_weight_layout tiles;
    vlm_cpu_weight_layout plain;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_cpu_weight_layout" directive is duplicate in \S+nginx\.conf:\d+$}



=== TEST 41o: vlm_cpu_weight_layout: not in a location (an engine setting)
--- config
    location = /t { vlm_cpu_weight_layout tiles; return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_cpu_weight_layout" directive is not allowed here in \S+nginx\.conf:\d+$}



=== TEST 41p: vlm_cpu_weight_layout tiles with vlm_backend cuda
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_cpu_weight_layout tiles;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_cpu_weight_layout tiles" needs "vlm_backend cpu" in \S+nginx\.conf:\d+$}



=== TEST 41h: vlm_kv_dtype f32 with vlm_backend cuda
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_backend cuda;
    vlm_kv_dtype f32;
    vlm_engine_binary $TEST_NGINX_ENGINES/engine-with-cuda;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "model":"good","backend":"cuda",
--- no_error_log
[emerg]



=== TEST 42: vlm_quant_activations f32 (and int8, the default)
--- http_config
    vlm_zone vlm size=1m;
    vlm_quant_activations f32;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body_like: ^$
--- no_error_log
[emerg]



=== TEST 43: vlm_quant_activations: a value it does not know
--- http_config
    vlm_quant_activations int4;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "int4" in \S+nginx\.conf:\d+$}



=== TEST 44: vlm_quant_activations: not in a location (an engine setting)
--- config
    location = /t { vlm_quant_activations f32; return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_quant_activations" directive is not allowed here in \S+nginx\.conf:\d+$}



=== TEST 45: vlm_reasoning_parser in http, server and location
--- http_config
    vlm_reasoning_parser off;
--- config
    vlm_reasoning_parser auto;
    location = /t { vlm_reasoning_parser qwen3; return 204; }
--- request
GET /t
--- error_code: 204
--- response_body_like: ^$
--- no_error_log
[emerg]



=== TEST 46: vlm_reasoning_parser: a value it does not know
--- config
    location = /t { vlm_reasoning_parser deepseek; return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: invalid value "deepseek" in \S+nginx\.conf:\d+$}



=== TEST 47: vlm_max_video_frames, vlm_max_video_bytes, vlm_max_video_duration
--- http_config
    vlm_max_video_frames 32;
    vlm_max_video_bytes 16m;
    vlm_max_video_duration 90s;
--- config
    location = /t { return 204; }
--- request
GET /t
--- error_code: 204
--- response_body_like: ^$
--- no_error_log
[emerg]



=== TEST 48: vlm_max_video_frames: fewer than one temporal patch
--- http_config
    vlm_max_video_frames 1;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_video_frames" must be between 2 and 768, not "1" in \S+nginx\.conf:\d+$}



=== TEST 49: vlm_max_video_frames: more than the processor's max_frames
--- http_config
    vlm_max_video_frames 769;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_video_frames" must be between 2 and 768, not "769" in \S+nginx\.conf:\d+$}



=== TEST 50: vlm_max_video_bytes: over 1024m
--- http_config
    vlm_max_video_bytes 1025m;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_video_bytes" must be between 1 and 1073741824, not "1025m" in \S+nginx\.conf:\d+$}



=== TEST 51: vlm_max_video_duration: under a second
--- http_config
    vlm_max_video_duration 500ms;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: "vlm_max_video_duration" must be between 1000 and 86400000, not "500ms" in \S+nginx\.conf:\d+$}
