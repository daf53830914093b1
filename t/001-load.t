# The module loads into nginx, a configuration like conf/nginx.conf starts,
# and the configuration scripts/serve generates from conf/nginx.conf passes
# nginx -t.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }
use Cwd qw(cwd);
use File::Temp qw(tempdir);

repeat_each(1);

plan tests => repeat_each() * (5 * blocks()) + 1;

no_shuffle();

# scripts/serve --test: the configuration `make run` serves
{
    my $root = cwd();
    my ($module) = grep { /ngx_http_vlm_module\.so$/ } split /\s+/,
                   $ENV{TEST_NGINX_LOAD_MODULES} || '';
    local $ENV{NGINX} = $ENV{TEST_NGINX_BINARY} || 'nginx';
    local $ENV{VLM_MODULE} = $module || "$root/build/ngx_http_vlm_module.so";
    # nginx -t's prefix, removed when the suite ends
    local $ENV{VLM_PREFIX} = tempdir('vlm-serve-XXXXXX', TMPDIR => 1,
                                     CLEANUP => 1);

    my $out = `sh $root/scripts/serve --test 1985 2>&1`;
    my $rc = $?;
    is($rc, 0, "nginx -t passes on the configuration generated from "
               . "conf/nginx.conf")
        or diag($out);
}

run_tests();

__DATA__

=== TEST 1: the module loads and a plain location still works
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]
[alert]
[emerg]



=== TEST 2: a configuration like conf/nginx.conf starts and serves vlm_health
--- main_config
    thread_pool vlm threads=2;
--- http_config
    vlm_backend          cpu;
    vlm_engine_threads   2;
    vlm_thread_pool      vlm;
    vlm_zone             vlm size=1m;
    vlm_max_images       8;
    vlm_max_image_pixels 16m;
--- config
    location = /health {
        vlm_health;
    }
--- request
GET /health
--- error_code: 503
--- response_body_like: ^\{"status":"unavailable",.*"thread_pool":"vlm",.*"zone":\{"name":"vlm","reloads":0,
--- no_error_log
[error]
[alert]
[emerg]
