# vlm_chat's answers that do not depend on a serving engine, in
# Test::Nginx::Socket blocks: methods other than POST get 405 with Allow,
# and while the engine is not ready (here a stand-in that never becomes
# ready) every chat request gets 503 with Retry-After, its body unread.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }
use Cwd qw(abs_path);

$ENV{TEST_NGINX_MODEL} = abs_path('tests/fixtures/serving');
$ENV{TEST_NGINX_FAKE_ENGINE} = abs_path('t/data/engine-never-ready');

repeat_each(2);

plan tests => repeat_each() * (5 * blocks());

no_shuffle();
run_tests();

__DATA__

=== TEST 1: GET: 405, Allow: POST, an OpenAI error
--- main_config
    thread_pool vlm threads=1;
--- http_config
    vlm_model $TEST_NGINX_MODEL;
    vlm_thread_pool vlm;
    vlm_zone vlm size=1m;
    vlm_engine_binary $TEST_NGINX_FAKE_ENGINE;
--- config
    location = /v1/chat/completions { vlm_chat; }
--- request
GET /v1/chat/completions
--- error_code: 405
--- response_headers
Allow: POST
Content-Type: application/json
--- response_body
{"error":{"message":"method GET is not allowed here, use POST","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}
--- no_error_log
[alert]



=== TEST 2: the engine is not ready: 503, Retry-After
--- main_config
    thread_pool vlm threads=1;
--- http_config
    vlm_model $TEST_NGINX_MODEL;
    vlm_thread_pool vlm;
    vlm_zone vlm size=1m;
    vlm_engine_binary $TEST_NGINX_FAKE_ENGINE;
--- config
    location = /v1/chat/completions { vlm_chat; }
--- request
POST /v1/chat/completions
{"model": "serving", "messages": [{"role": "user", "content": "hi"}]}
--- more_headers
Content-Type: application/json
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/json
--- response_body
{"error":{"message":"the inference engine is not ready, retry later","type":"server_error","param":null,"code":"engine_unavailable"}}
--- no_error_log
[alert]



=== TEST 3: not ready, whatever the body: no parsing before the engine serves
--- main_config
    thread_pool vlm threads=1;
--- http_config
    vlm_model $TEST_NGINX_MODEL;
    vlm_thread_pool vlm;
    vlm_zone vlm size=1m;
    vlm_engine_binary $TEST_NGINX_FAKE_ENGINE;
--- config
    location = /v1/chat/completions { vlm_chat; }
--- request
POST /v1/chat/completions
{"model":
--- more_headers
Content-Type: application/json
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/json
--- response_body
{"error":{"message":"the inference engine is not ready, retry later","type":"server_error","param":null,"code":"engine_unavailable"}}
--- no_error_log
[alert]
