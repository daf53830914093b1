# Images given as http(s) URLs (vlm_image_fetch): a fetch that fails in
# any way ends the chat request at once with 400 image_fetch_failed
# naming the image and the cause; an image over the size limit is a 400,
# never a closed connection; the fetch is a plain GET (no body headers,
# none of the client's headers); and no fetch reaches a loopback,
# private, link-local or reserved address unless vlm_image_fetch_allow
# says so, however the address is spelled and whatever a name resolves
# to, even when its DNS answer changes between two lookups.
#
# Three nginx instances: docs/serving.md's configuration (port P =
# TEST_NGINX_PORT), one that allows 127.0.0.1/32 (P + 1) and one with
# small fetch limits and no resolver (P + 2).  Origins: an image server
# on 127.0.0.1:P+10, canaries that must never be hit on 127.0.0.1,
# 127.0.0.2 and [::1] port P+11, and a DNS server on 127.0.0.1:P+12
# (UDP).  Only loopback addresses are ever connected to: the fetch
# location of every instance also refuses (418) any URL that is not
# loopback, so even a module that let one through would not connect.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Time::HiRes qw(sleep time);
use VLMOrigin;
use VLMTest;

vlm_prereqs();

my $port = $ENV{TEST_NGINX_PORT} || 1994;
my ($oport, $cport, $dport) = ($port + 10, $port + 11, $port + 12);
my $tmp = tempdir(CLEANUP => 1);
my $png = vlm_png(56, 56, 3);

my (@servers, @nginx);

END {
    VLMTest::vlm_stop($_) for grep { $_ } @nginx;
    vlm_server_stop($_) for @servers;
}

my $origin = vlm_origin_start(addr => '127.0.0.1', port => $oport,
                              log => "$tmp/origin.log",
                              files => { '/img.png' => $png });
my @canaries = map {
    vlm_origin_start(addr => $_, port => $cport, canary => 1,
                     log => "$tmp/canary-$_.log")
} '127.0.0.1', '127.0.0.2', '::1';
my $dns = vlm_dns_start(port => $dport, log => "$tmp/dns.log", names => {
    'img.test' => [ [ '127.0.0.1' ] ],
    'canary.test' => [ [ '127.0.0.1' ] ],
    'v6.test' => [ [ '::1' ] ],
    'ten.test' => [ [ '10.0.0.1' ] ],
    'meta.test' => [ [ '169.254.169.254', 'fd00::1' ] ],
    'rebind.test' => [ [ '127.0.0.1' ], [ '127.0.0.2' ] ],
});
push @servers, $origin, @canaries, $dns;


# the fetch location: as in docs/serving.md, behind the tests' own net
sub fetch_location {
    my ($extra, $read_timeout) = @_;

    $read_timeout ||= '3s';

    return <<"_EOC_";
        location = /_vlm_image {
            internal;
            if (\$vlm_image_url !~ "^http://(127\\.[0-9]+\\.[0-9]+\\.[0-9]+|\\[::1\\]|(img|canary|rebind|v6|nx)\\.test)(:[0-9]+)?/") {
                return 418;
            }
            proxy_pass                  \$vlm_image_url;
            proxy_connect_timeout       2s;
            proxy_read_timeout          $read_timeout;
            subrequest_output_buffer_size 64k;
$extra
        }
_EOC_
}


my $readme = vlm_start(name => 'fetch', port => $port,
                       http_config => <<"_EOC_",
    vlm_image_fetch /_vlm_image;
    vlm_request_timeout 60s;
    resolver 127.0.0.1:$dport valid=1s;
    resolver_timeout 2s;
_EOC_
                       locations => fetch_location(<<'_EOC_'));
            proxy_pass_request_body     off;
            proxy_pass_request_headers  off;
            proxy_ssl_server_name       on;
_EOC_
push @nginx, $readme;


sub image_body {
    my ($url) = @_;

    my $body = vlm_chat_body('What is in the picture?', $url);
    $body->{max_tokens} = 2;
    $body->{temperature} = 0;

    return $body;
}


# posts a chat request with one image URL: (response, error, seconds)
sub fetch {
    my ($srv, $url, $headers) = @_;

    my $t0 = time;
    my $res = vlm_post_json($srv, image_body($url), $headers);
    my $err = eval { vlm_json($res->{body})->{error} } || {};

    return ($res, $err, time - $t0);
}


my $im0 = 'messages[0].content[0].image_url';

# an image the request names could not be fetched: at once, 400, named
sub fetch_fails {
    my ($srv, $url, $why, $what) = @_;

    my ($res, $err, $secs) = fetch($srv, $url);

    is($res->{status}, 400, "$what: 400")
        or diag("status $res->{status} after ${secs}s: $res->{body}");
    ok($secs < 5, "$what: answered at once") or diag("${secs}s");
    is($err->{code}, 'image_fetch_failed', "$what: image_fetch_failed");
    is($err->{param}, $im0, "$what: the image is named");
    like($err->{message} || '', $why, "$what: says why");

    return $err;
}


# --- 6. SSRF: docs/serving.md's configuration refuses every internal target

my @loopback = (
    [ "http://127.0.0.1:$cport/a.png", 'loopback' ],
    [ "http://127.0.0.2:$cport/a.png", 'loopback' ],
    [ "http://[::1]:$cport/a.png", 'loopback' ],
    [ "http://0.0.0.0:$cport/a.png", "'this network'" ],
    [ "http://0:$cport/a.png", "'this network'" ],
    [ "http://2130706433:$cport/a.png", 'loopback' ],
    [ "http://0x7f000001:$cport/a.png", 'loopback' ],
    [ "http://0x7f.1:$cport/a.png", 'loopback' ],
    [ "http://0177.0.0.1:$cport/a.png", 'loopback' ],
    [ "http://127.1:$cport/a.png", 'loopback' ],
    [ "http://127.0.0.1.:$cport/a.png", 'loopback' ],
    [ "http://[::ffff:127.0.0.1]:$cport/a.png", 'loopback' ],
    [ "http://[::ffff:7f00:1]:$cport/a.png", 'loopback' ],
    [ "http://canary.test:$cport/a.png", 'loopback' ],
    [ "http://CANARY.test.:$cport/a.png", 'loopback' ],
    [ "http://v6.test:$cport/a.png", 'loopback' ],
);

for my $c (@loopback) {
    my ($url, $what) = @$c;

    fetch_fails($readme, $url,
                qr/^fetching the image URL "\Q$url\E" failed: .*\Q$what\E.*not fetched from/,
                "refused by default: $url");
}

is(scalar(vlm_origin_requests($_)), 0, "no request reached the canary "
   . "on $_->{addr}") for @canaries;

# the ranges beyond loopback: refused before any connect (and the fetch
# location's net would stop them too)
my @internal = (
    [ 'http://169.254.169.254/latest/meta-data/', 'link-local' ],
    [ 'http://10.0.0.1/a.png', 'private' ],
    [ 'http://10.255.255.254:8080/a.png', 'private' ],
    [ 'http://172.16.0.1/a.png', 'private' ],
    [ 'http://192.168.1.1/a.png', 'private' ],
    [ 'http://100.64.0.1/a.png', 'shared' ],
    [ 'http://224.0.0.1/a.png', 'multicast' ],
    [ 'http://240.0.0.1/a.png', 'reserved' ],
    [ 'http://192.0.2.1/a.png', 'documentation' ],
    [ 'http://0xa9fea9fe/a.png', 'link-local' ],
    [ 'http://012.0.0.1/a.png', 'private' ],
    [ 'http://[fe80::1]/a.png', 'link-local' ],
    [ 'http://[fc00::1]/a.png', 'private' ],
    [ 'http://[ff02::1]/a.png', 'multicast' ],
    [ 'http://[::]/a.png', "'this network'" ],
    [ 'http://[::ffff:10.0.0.1]/a.png', 'private' ],
    [ 'http://[::ffff:169.254.169.254]/a.png', 'link-local' ],
    [ 'http://[64:ff9b::a9fe:a9fe]/a.png', 'link-local' ],
    [ 'http://[2001:db8::1]/a.png', 'documentation' ],
    [ 'http://ten.test/a.png', 'private' ],
    [ 'http://meta.test/a.png', 'link-local' ],
);

for my $c (@internal) {
    my ($url, $what) = @$c;

    fetch_fails($readme, $url,
                qr/^fetching the image URL "\Q$url\E" failed: .*\Q$what\E.*not fetched from/,
                "refused by default: $url");
}

# a name's address is not told to the client, only what kind it is
{
    my ($res, $err) = fetch($readme, 'http://ten.test/a.png');
    unlike($err->{message} || '', qr/10\.0\.0\.1/,
           'the address a name resolves to is not shown to the client');
}

# schemes and URL forms that are not fetched at all
fetch_fails($readme, "http://user:pass\@127.0.0.1:$oport/img.png",
            qr/user information/, 'a user:pass@ URL');
fetch_fails($readme, "http://img.test\@127.0.0.1:$oport/img.png",
            qr/user information/, 'a host@host URL');
fetch_fails($readme, "http://nx.test:$oport/img.png",
            qr/"nx\.test" could not be resolved/, 'a name without address');

is(scalar(vlm_origin_requests($origin)), 0,
   'the origin got no request from the default configuration');
is(scalar(vlm_origin_requests($_)), 0, "no request reached the canary "
   . "on $_->{addr}") for @canaries;
is(vlm_wait_idle($readme)->{slots_used}, 0, 'default: no slot left');
VLMTest::check_log($readme, 'default configuration');


# --- vlm_image_fetch_allow 127.0.0.1/32: internal origins, on purpose

my $allow = vlm_start(name => 'fetch-allow', port => $port + 1,
                      http_config => <<"_EOC_",
    vlm_image_fetch /_vlm_image;
    vlm_image_fetch_allow 127.0.0.1/32;
    vlm_image_fetch_allow 192.0.2.0/24;
    vlm_request_timeout 60s;
    resolver 127.0.0.1:$dport valid=1s;
    resolver_timeout 2s;
_EOC_
                      locations => fetch_location(<<'_EOC_'));
            proxy_set_header            Host $vlm_image_host;
            if ($vlm_image_url ~ "/forbidden") {
                return 403;
            }
_EOC_
push @nginx, $allow;

# 5. a plain GET: no body headers, none of the client's headers, and so
# an origin that reads the announced body does not stall
{
    my ($res, $err, $secs) = fetch($allow, "http://127.0.0.1:$oport/img.png",
                                   [ 'Authorization: Bearer sk-secret',
                                     'Cookie: session=1' ]);
    is($res->{status}, 200, 'an allowed origin: fetched and answered')
        or diag($res->{body});
    ok($secs < 5, 'an allowed origin: at once') or diag("${secs}s");

    my @req = vlm_origin_requests($origin);
    is(scalar @req, 1, 'the origin got one request');
    my $h = $req[0]{headers} || {};
    is($req[0]{method}, 'GET', 'a GET');
    is($req[0]{path}, '/img.png', 'of the path of the URL');
    ok(!exists $h->{'content-length'}, 'no Content-Length')
        or diag("Content-Length: $h->{'content-length'}");
    ok(!exists $h->{'transfer-encoding'}, 'no Transfer-Encoding');
    ok(!exists $h->{'content-type'}, 'no Content-Type');
    ok(!exists $h->{authorization}, "not the client's Authorization");
    ok(!exists $h->{cookie}, "not the client's Cookie");
    is($h->{host}, "127.0.0.1:$oport", 'Host: the URL\'s');
}

# a name is resolved once, checked, and its checked address connected to,
# with the name in Host
{
    my ($res, $err) = fetch($allow, "http://img.test:$oport/img.png");
    is($res->{status}, 200, 'a name resolving to an allowed address')
        or diag($res->{body});

    my @req = vlm_origin_requests($origin);
    is($req[-1]{headers}{host}, "img.test:$oport", 'Host: the name');

    ($res, $err) = fetch($allow, "http://127.0.0.1:$oport/chunked.png");
    is($res->{status}, 200, 'a chunked image') or diag($res->{body});
}

# DNS rebinding: the first answer (127.0.0.1) is checked and connected
# to; the next one (127.0.0.2, not allowed) is never connected to
{
    my ($res, $err) = fetch($allow, "http://rebind.test:$oport/img.png");
    is($res->{status}, 200, 'rebinding: the first answer is fetched from')
        or diag($res->{body});
    my @a = grep { /^rebind\.test 1$/ } vlm_dns_queries($dns);
    is(scalar @a, 1, 'rebinding: one lookup for one fetch');

    sleep 2.1;    # the resolver keeps an answer valid=1s, to the second

    fetch_fails($allow, "http://rebind.test:$cport/img.png",
                qr/loopback.*not fetched from/,
                'rebinding: the second answer is refused');
}

fetch_fails($allow, "http://127.0.0.2:$cport/a.png",
            qr/loopback.*not fetched from/,
            'allow 127.0.0.1/32 does not allow 127.0.0.2');
fetch_fails($allow, "http://[::1]:$cport/a.png",
            qr/loopback.*not fetched from/,
            'allow 127.0.0.1/32 does not allow ::1');

# 3. every way a fetch can fail inside nginx ends the request at once
my $closed = $port + 13;    # nothing listens there

fetch_fails($allow, "http://127.0.0.1:$closed/img.png",
            qr/could not connect to the origin or read its answer/,
            'connection refused');
fetch_fails($allow, "http://127.0.0.1:$oport/forbidden.png",
            qr/the fetch location answered HTTP 403/, 'return 403');
fetch_fails($allow, "http://127.0.0.1:$oport/slow.png",
            qr/the origin did not answer in time/, 'proxy_read_timeout');
fetch_fails($allow, "http://127.0.0.1:$oport/missing.png",
            qr/the origin answered HTTP 404/, 'a 404 from the origin');
fetch_fails($allow, 'http://192.0.2.1/a.png',
            qr/the fetch location answered HTTP 418/,
            'an allowed address the fetch location refuses');
fetch_fails($allow, "http://nx.test:$oport/img.png",
            qr/"nx\.test" could not be resolved/, 'NXDOMAIN');

# one image of several fails: the request ends at once all the same
{
    my $body = image_body("http://127.0.0.1:$oport/img.png");
    unshift @{ $body->{messages}[0]{content} },
        { type => 'image_url',
          image_url => { url => "http://127.0.0.1:$oport/slow.png" } },
        { type => 'image_url',
          image_url => { url => "http://127.0.0.1:$closed/a.png" } };

    my $t0 = time;
    my $res = vlm_post_json($allow, $body);
    my $secs = time - $t0;
    my $err = eval { vlm_json($res->{body})->{error} } || {};

    is($res->{status}, 400, 'three images, one refused: 400');
    ok($secs < 2, 'three images, one refused: at once') or diag("${secs}s");
    is($err->{param}, 'messages[0].content[1].image_url',
       'three images, one refused: that one is named');
}

is(scalar(vlm_origin_requests($_)), 0, "no request reached the canary "
   . "on $_->{addr}") for @canaries;

{
    my ($res) = fetch($allow, "http://127.0.0.1:$oport/img.png");
    is($res->{status}, 200, 'after all that, a fetch still works');
}

is(vlm_wait_idle($allow, 5)->{slots_used}, 0, 'allow: no slot left');
VLMTest::check_log($allow, 'allow');


# --- 4. limits of its own: size, time; no resolver

my $limits = vlm_start(name => 'fetch-limits', port => $port + 2,
                       http_config => <<"_EOC_",
    vlm_image_fetch /_vlm_image;
    vlm_image_fetch_allow 127.0.0.0/8;
    vlm_image_fetch_max_size 64k;
    vlm_image_fetch_timeout 2s;
    vlm_request_timeout 60s;
_EOC_
                       locations => fetch_location('', '30s'));
push @nginx, $limits;

for my $c ([ '/big.png', 'with Content-Length' ],
           [ '/big-chunked.png', 'chunked' ]) {
    my ($path, $what) = @$c;
    my ($res, $err, $secs) = fetch($limits, "http://127.0.0.1:$oport$path");

    is($res->{status}, 400, "an image over the limit ($what): 400")
        or diag("status $res->{status}: $res->{body}");
    ok($secs < 5, "an image over the limit ($what): at once");
    is($err->{code}, 'image_too_large', "$what: image_too_large");
    is($err->{param}, $im0, "$what: the image is named");
    like($err->{message} || '', qr/image too large: more than 65536 bytes/,
         "$what: says the limit");
}

{
    my ($res) = fetch($limits, "http://127.0.0.1:$oport/img.png");
    is($res->{status}, 200, 'an image under the limit is fetched')
        or diag($res->{body});
}

{
    my ($res, $err, $secs) = fetch($limits,
                                   "http://127.0.0.1:$oport/slow.png");
    is($res->{status}, 400, 'vlm_image_fetch_timeout: 400');
    ok($secs >= 1.8 && $secs < 4, 'vlm_image_fetch_timeout: after 2 s, '
       . 'not the 30 s of proxy_read_timeout') or diag("${secs}s");
    like($err->{message} || '', qr/did not arrive within 2000 ms/,
         'vlm_image_fetch_timeout: says so');
}

fetch_fails($limits, "http://img.test:$oport/img.png",
            qr/no resolver/, 'a name without a resolver');

{
    my ($res) = fetch($limits, "http://127.0.0.1:$oport/img.png");
    is($res->{status}, 200, 'limits: a fetch still works');
}

is(vlm_wait_idle($limits, 5)->{slots_used}, 0, 'limits: no slot left');
VLMTest::check_log($limits, 'limits');


# --- nginx -t names a bad value

sub conf_test {
    my ($directive) = @_;

    my $dir = "$tmp/conf-" . int(rand(1e9));
    mkdir $dir;
    mkdir "$dir/logs";

    my $build = $ENV{VLM_BUILD} || vlm_root() . '/build';
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES}
              || "$build/ngx_http_vlm_module.so";
    my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';

    open my $out, '>', "$dir/nginx.conf" or die $!;
    print $out "load_module $mod;\nerror_log $dir/logs/error.log;\n"
               . "pid $dir/logs/nginx.pid;\nevents {}\n"
               . "http {\n    vlm_image_fetch /_vlm_image;\n"
               . "    $directive\n}\n";
    close $out;

    my $text = `$nginx -t -p $dir/ -c $dir/nginx.conf 2>&1`;

    return ($? >> 8, $text);
}

for my $c (
    [ 'vlm_image_fetch_allow 300.0.0.0/8;', qr/"300\.0\.0\.0\/8"/ ],
    [ 'vlm_image_fetch_allow 10.0.0.0/33;', qr/"10\.0\.0\.0\/33"/ ],
    [ 'vlm_image_fetch_allow localhost;', qr/"localhost"/ ],
    [ 'vlm_image_fetch_timeout 0;', qr/"vlm_image_fetch_timeout".*"0"/ ],
    [ 'vlm_image_fetch_timeout 10x;', qr/"vlm_image_fetch_timeout".*"10x"/ ],
    [ 'vlm_image_fetch_max_size 0;', qr/"vlm_image_fetch_max_size".*"0"/ ],
    [ 'vlm_image_fetch_max_size 1g;', qr/"vlm_image_fetch_max_size".*"1g"/ ],
) {
    my ($directive, $says) = @$c;
    my ($rc, $text) = conf_test($directive);

    isnt($rc, 0, "nginx -t fails: $directive");
    like($text, $says, "nginx -t names the value: $directive")
        or diag($text);
}

{
    my ($rc, $text) = conf_test('vlm_image_fetch_allow ::1; '
                                . 'vlm_image_fetch_allow 10.0.0.0/8; '
                                . 'vlm_image_fetch_timeout 30s; '
                                . 'vlm_image_fetch_max_size 8m;');
    is($rc, 0, 'nginx -t: good values pass') or diag($text);
}

done_testing();
