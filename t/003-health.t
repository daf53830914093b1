# vlm_health: a JSON report of what the module knows (model, zone, engine
# state), 503 until the engine serves; GET and HEAD only, anything else
# gets 405 with an OpenAI-style error body.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }
use Cwd qw(abs_path);
use File::Temp qw(tempdir);

my $models = tempdir("vlm-models-XXXXXX", TMPDIR => 1, CLEANUP => 1);
# a real model (nginx -t checks it as the engine would), and an engine
# that starts but never serves (t/011's): the engine never serves
mkdir "$models/good" or die;
for my $f (glob "tests/fixtures/serving/*") {
    system("cp", $f, "$models/good/") == 0 or die "cannot copy $f";
}

$ENV{TEST_NGINX_MODELS} = $models;
$ENV{TEST_NGINX_FAKE_ENGINE} = abs_path('t/data/engine-never-ready');

repeat_each(2);

# each block: the status, two headers, the body and two error log checks
plan tests => repeat_each() * (6 * blocks());

no_shuffle();
run_tests();

__DATA__

=== TEST 1: nothing configured: 503 and the reason
--- http_config
    vlm_engine_threads 2;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_headers
Content-Type: application/json
!Allow
--- response_body
{"status":"unavailable","reason":"vlm_model is not configured","engine":"absent","last_error":null,"model":null,"backend":"cpu","thread_pool":null,"max_images":8,"max_image_pixels":16777216,"zone":null}
--- no_error_log
[error]
[alert]



=== TEST 2: a model without vlm_zone gets the default queue; 503 until the engine serves
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_engine_binary $TEST_NGINX_FAKE_ENGINE;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_headers
Content-Type: application/json
!Allow
--- response_body_like: ^\{"status":"unavailable","reason":"the engine is (not running|loading the model)","engine":"(absent|loading)",(?!.*/good)"last_error":(null|"[^"]*"),"model":"good",.*"zone":\{"name":"vlm","reloads":0,
--- no_error_log
[emerg]
[crit]



=== TEST 3: a model and a zone: 503 until the engine runs, zone counters
--- http_config
    vlm_model $TEST_NGINX_MODELS/good;
    vlm_zone vlm size=1m;
    vlm_engine_binary $TEST_NGINX_FAKE_ENGINE;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_headers
Content-Type: application/json
!Allow
--- response_body_like: ^\{"status":"unavailable","reason":"the engine is (not running|loading the model)","engine":"(absent|loading)",.*"zone":\{"name":"vlm","reloads":0,"health_requests":[1-9][0-9]*,"slots_used":0,"arena_used":0,"engine_restarts":[0-9]+,"oldest_queued_seconds":0\.000,"oldest_running_seconds":0\.000\}\}$
--- no_error_log
[emerg]
[crit]



=== TEST 4: HEAD: the status and headers of TEST 1 (203 bytes), no body
--- http_config
    vlm_engine_threads 2;
--- config
    location = /health { vlm_health; }
--- request
HEAD /health
--- error_code: 503
--- response_headers
Content-Type: application/json
Content-Length: 203
--- response_body
--- no_error_log
[error]
[alert]



=== TEST 5: POST with a body: 405, Allow, an OpenAI-style error, logged at info
--- config
    location = /health { vlm_health; }
--- request
POST /health
{"model": "default", "messages": []}
--- more_headers
Content-Type: application/json
--- error_code: 405
--- response_headers
Content-Type: application/json
Allow: GET, HEAD
--- response_body
{"error":{"message":"method POST is not allowed here, use GET, HEAD","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}
--- error_log eval
qr/\[info\] .*vlm: method "POST" is not allowed, only GET, HEAD/
--- no_error_log
[error]



=== TEST 6: PUT: 405
--- config
    location = /health { vlm_health; }
--- request
PUT /health
x
--- error_code: 405
--- response_headers
Content-Type: application/json
Allow: GET, HEAD
--- response_body
{"error":{"message":"method PUT is not allowed here, use GET, HEAD","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}
--- no_error_log
[error]
[alert]



=== TEST 7: DELETE: 405
--- config
    location = /health { vlm_health; }
--- request
DELETE /health
--- error_code: 405
--- response_headers
Content-Type: application/json
Allow: GET, HEAD
--- response_body
{"error":{"message":"method DELETE is not allowed here, use GET, HEAD","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}
--- no_error_log
[error]
[alert]



=== TEST 8: OPTIONS: 405
--- config
    location = /health { vlm_health; }
--- request
OPTIONS /health
--- error_code: 405
--- response_headers
Content-Type: application/json
Allow: GET, HEAD
--- response_body
{"error":{"message":"method OPTIONS is not allowed here, use GET, HEAD","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}
--- no_error_log
[error]
[alert]



=== TEST 9: POST with a 1 MB body: read and discarded, then 405
--- config
    location = /health { vlm_health; }
--- request eval
"POST /health\n" . ("x" x (1024 * 1024))
--- error_code: 405
--- response_headers
Content-Type: application/json
Allow: GET, HEAD
--- response_body
{"error":{"message":"method POST is not allowed here, use GET, HEAD","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}
--- no_error_log
[error]
[alert]
