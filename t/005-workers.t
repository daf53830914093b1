# With a master and two workers, every worker sees the same vlm_zone: the
# counter goes up by one per request whichever worker answers.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }

master_on();
workers(2);

repeat_each(1);

# four requests: a status and a body each; the error log is checked after
# each request
plan tests => repeat_each() * (4 * 2 + 4 * 2);

no_shuffle();
run_tests();

__DATA__

=== TEST 1: four requests, one zone
--- http_config
    vlm_zone vlm size=1m;
--- config
    location = /health { vlm_health; }
--- request eval
["GET /health", "GET /health", "GET /health", "GET /health"]
--- error_code eval
[503, 503, 503, 503]
--- response_body_like eval
['"health_requests":1,', '"health_requests":2,',
 '"health_requests":3,', '"health_requests":4,']
--- no_error_log
[alert]
[emerg]
