# vlm_zone across "nginx -s reload": a zone of the same name and size keeps
# its contents (the counters go on), another size starts a new zone.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }

# every block after the first reloads the running nginx with SIGHUP
use_hup();

repeat_each(1);

plan tests => repeat_each() * (4 * blocks());

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a new zone
--- http_config
    vlm_zone vlm size=1m;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "zone":\{"name":"vlm","reloads":0,"health_requests":1,
--- no_error_log
[alert]
[emerg]



=== TEST 2: reloaded with the same zone: its contents survive
--- http_config
    vlm_zone vlm size=1m;
--- config
    location = /health { vlm_health; }
    location = /other { return 204; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "zone":\{"name":"vlm","reloads":1,"health_requests":2,
--- no_error_log
[alert]
[emerg]



=== TEST 3: reloaded with another size: a new zone
--- http_config
    vlm_zone vlm size=2m;
--- config
    location = /health { vlm_health; }
--- request
GET /health
--- error_code: 503
--- response_body_like: "zone":\{"name":"vlm","reloads":0,"health_requests":1,
--- no_error_log
[alert]
[emerg]
