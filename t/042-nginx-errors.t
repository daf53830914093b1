# What nginx answers itself in the module's locations is an OpenAI error
# too, not nginx's HTML page: a body over client_max_body_size (413), a
# chunked body nginx cannot read (400), limit_req and limit_conn (a
# rate_limit_error with Retry-After, 503 or their *_status), any status a
# location returns without a body (500, 502, 503, 504), and, with
# "vlm_errors on" in a server, what nginx answers before it picks a
# location (414).  An operator's error_page still wins, locations that
# are not the module's keep nginx's pages, and vlm_requests_total counts
# every status of the chat locations (405, 413, 400, 503, 408 included).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);
use VLMTest;

my $build = vlm_prereqs();

my $port = $ENV{TEST_NGINX_PORT} || 1994;
my $port2 = $port + 1;

my $srv = vlm_start(name => 'nginx-errors', http_config => <<"_EOC_",
    limit_req_zone \$binary_remote_addr zone=one:1m rate=1r/m;
    limit_req_zone \$binary_remote_addr zone=two:1m rate=1r/m;
    limit_conn_zone \$binary_remote_addr zone=addr:1m;

    server {
        listen 127.0.0.1:$port2;
        vlm_errors on;
        large_client_header_buffers 2 1k;

        location / { return 404; }
    }
_EOC_
    locations => <<'_EOC_');
        location = /small { client_max_body_size 1k; vlm_chat; }
        location = /limited { limit_req zone=one; vlm_chat; }
        location = /limited429 {
            limit_req zone=two;
            limit_req_status 429;
            vlm_retry_after 7s;
            vlm_chat;
        }
        location = /conn { limit_conn addr 1; vlm_chat; }
        location = /r429 { vlm_models; vlm_retry_after 0; return 429; }
        location = /short { client_body_timeout 1s; vlm_chat; }
        location = /custom {
            client_max_body_size 1k;
            error_page 413 /custom413;
            vlm_chat;
        }
        location = /custom413 {
            internal;
            default_type text/plain;
            return 200 "the operator's page\n";
        }
        location = /r500 { vlm_models; return 500; }
        location = /r502 { vlm_models; return 502; }
        location = /r503 { vlm_models; return 503; }
        location = /r504 { vlm_models; return 504; }
        location = /off { vlm_models; vlm_errors off; return 503; }
        location = /static { return 503; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }


sub raw_request {
    my ($text, $p) = @_;

    my $sock = VLMTest::connect_to({ %$srv, port => $p || $port });
    local $SIG{PIPE} = 'IGNORE';
    print $sock $text;

    my $raw = '';
    my $sel = IO::Select->new($sock);

    while ($sel->can_read(10)) {
        my $n = sysread($sock, my $buf, 65536);
        last if !$n;
        $raw .= $buf;
    }

    close $sock;

    return VLMTest::parse_response($raw);
}


sub is_error {
    my ($res, $status, $type, $code, $what, $message) = @_;

    is($res->{status}, $status, "$what: $status");
    is($res->{headers}{'content-type'}, 'application/json',
       "$what: application/json");

    my $j = eval { vlm_json($res->{body}) };

    ok($j && $j->{error}, "$what: an error object")
        or diag($res->{raw});
    is($j && $j->{error}{type}, $type, "$what: type $type");
    is($j && $j->{error}{code}, $code, "$what: code " . ($code // 'null'));
    ok($j && exists $j->{error}{param} && !defined $j->{error}{param},
       "$what: param null");
    like($j && $j->{error}{message}, $message, "$what: the message")
        if $message;
    is($res->{headers}{'content-length'}, length $res->{body},
       "$what: Content-Length");
}


my $m0 = vlm_metrics($srv);
my $big = VLMTest::vlm_json_text({ %{ vlm_chat_body('x' x 2000) } });

is_error(vlm_request($srv, 'POST', '/small', $big), 413,
         'invalid_request_error', 'request_too_large',
         'a body over client_max_body_size',
         qr/client_max_body_size: 1024 bytes/);

is_error(raw_request("POST /v1/chat/completions HTTP/1.1\r\n"
                     . "Host: localhost\r\nConnection: close\r\n"
                     . "Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n"),
         400, 'invalid_request_error', 'bad_request',
         'a chunked body nginx cannot read');

my $ok = vlm_post_json($srv, vlm_chat_body('hi'));
my $first = vlm_request($srv, 'POST', '/limited',
                        VLMTest::vlm_json_text({ %{ vlm_chat_body('hi') },
                                                 max_tokens => 1 }));
is($first->{status}, 200, 'limit_req: the first request passes');
my $limited = vlm_request($srv, 'POST', '/limited',
                          VLMTest::vlm_json_text(vlm_chat_body('hi')));
is_error($limited, 503, 'rate_limit_error', 'rate_limit_exceeded',
         'limit_req refuses', qr/over the request rate/);
is($limited->{headers}{'retry-after'}, '1', 'limit_req: Retry-After: 1');

vlm_request($srv, 'POST', '/limited429',
            VLMTest::vlm_json_text({ %{ vlm_chat_body('hi') },
                                     max_tokens => 1 }));
my $limited429 = vlm_request($srv, 'POST', '/limited429',
                             VLMTest::vlm_json_text(vlm_chat_body('hi')));
is_error($limited429, 429, 'rate_limit_error', 'rate_limit_exceeded',
         'limit_req_status 429', qr/over the request rate/);
is($limited429->{headers}{'retry-after'}, '7',
   'limit_req_status 429: Retry-After: vlm_retry_after');

my $conn = vlm_request($srv, 'POST', '/conn',
                       VLMTest::vlm_json_text({ %{ vlm_chat_body('hi') },
                                                max_tokens => 1 }));
is($conn->{status}, 200, 'limit_conn: one request at a time passes');

# a request whose body is still coming holds the one limit_conn allows
my $held = VLMTest::connect_to($srv);
print {$held} "POST /conn HTTP/1.1\r\nHost: localhost\r\n"
               . "Content-Type: application/json\r\nContent-Length: 5000"
               . "\r\n\r\n{";
sleep 0.3;
my $refused = vlm_request($srv, 'POST', '/conn',
                          VLMTest::vlm_json_text(vlm_chat_body('hi')));
is_error($refused, 503, 'rate_limit_error', 'rate_limit_exceeded',
         'limit_conn refuses', qr/over the connections/);
is($refused->{headers}{'retry-after'}, '1', 'limit_conn: Retry-After: 1');
close $held;

my $r429 = vlm_request($srv, 'GET', '/r429');
is_error($r429, 429, 'rate_limit_error', 'rate_limit_exceeded',
         'return 429 in a vlm_models location');
ok(!exists $r429->{headers}{'retry-after'}, 'vlm_retry_after 0: none');

for my $s (500, 502, 503, 504) {
    is_error(vlm_request($srv, 'GET', "/r$s"), $s, 'server_error',
             { 500 => 'internal_error', 502 => 'bad_gateway',
               503 => 'service_unavailable',
               504 => 'gateway_timeout' }->{$s},
             "return $s in a vlm_models location");
}

my $head = vlm_request($srv, 'HEAD', '/r503');
is($head->{status}, 503, 'HEAD: 503');
is($head->{headers}{'content-type'}, 'application/json',
   'HEAD: application/json');
is($head->{body}, '', 'HEAD: no body');

is_error(raw_request("GET /" . ('a' x 3000) . " HTTP/1.1\r\n"
                     . "Host: localhost\r\nConnection: close\r\n\r\n",
                     $port2),
         414, 'invalid_request_error', 'uri_too_long',
         'vlm_errors on in a server: a URI too long');

my $nf = raw_request("GET /x HTTP/1.1\r\nHost: localhost\r\n"
                     . "Connection: close\r\n\r\n", $port2);
is_error($nf, 404, 'invalid_request_error', 'not_found',
         'vlm_errors on in a server: its other locations');

# the operator's error_page, vlm_errors off, and other locations
my $custom = vlm_request($srv, 'POST', '/custom', $big);
is($custom->{status}, 413, 'error_page: 413');
is($custom->{body}, "the operator's page\n", "error_page: the operator's page");

for my $path ('/off', '/static') {
    my $res = vlm_request($srv, 'GET', $path);
    is($res->{status}, 503, "$path: 503");
    like($res->{headers}{'content-type'}, qr{^text/html},
         "$path: nginx's page");
    like($res->{body}, qr{<title>503 Service}, "$path: its HTML");
}

# a body that stops coming: nginx closes after client_body_timeout (408,
# no response), which the chat location counts too
my $sock = VLMTest::connect_to($srv);
print $sock "POST /short HTTP/1.1\r\nHost: localhost\r\n"
            . "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
my $sel = IO::Select->new($sock);
my $got = $sel->can_read(5) ? sysread($sock, my $buf, 100) : undef;
is($got, 0, 'client_body_timeout: the connection closes without a response');
close $sock;

my $get = vlm_request($srv, 'GET', '/v1/chat/completions');
is($get->{status}, 405, 'GET on the chat location: 405');

sleep 0.2;
my $m1 = vlm_metrics($srv);

for my $s (qw(405 413 400 503 408 429 200)) {
    my $k = "vlm_requests_total{status=\"$s\"}";
    # /custom's 413 went on to the error_page's location, out of the chat
    # (the request that held limit_conn's place ended unread: a 400)
    my $want = { 200 => 4, 503 => 2, 400 => 2 }->{$s} || 1;
    is(($m1->{$k} || 0) - ($m0->{$k} || 0), $want,
       "vlm_requests_total counts $want of status $s");
}

for my $s (qw(500 502 504)) {
    my $k = "vlm_requests_total{status=\"$s\"}";
    ok(!$m1->{$k}, "a vlm_models location's $s is no chat request");
}

# vlm_errors takes on or off, and nginx -t says so
my $bad = "$srv->{prefix}/bad";
mkdir $bad or die "$bad: $!";
open my $out, '>', "$bad/nginx.conf" or die;
print $out "load_module "
           . ($ENV{TEST_NGINX_LOAD_MODULES} || "$build/ngx_http_vlm_module.so")
           . ";\nerror_log $bad/error.log;\nevents {}\n"
           . "http { server { location / { vlm_errors maybe; } } }\n";
close $out;
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $t = `$nginx -t -p $bad/ -c $bad/nginx.conf -e $bad/error.log 2>&1`;
like($t, qr/invalid value "maybe" in "vlm_errors" directive, it must be/,
     'nginx -t: vlm_errors maybe');

my $zone = vlm_wait_idle($srv);
is($zone->{slots_used}, 0, 'no slot left behind');

done_testing();
