# The per-request limits (vlm_max_tokens, vlm_max_images,
# vlm_max_image_pixels, vlm_max_prompt_bytes, vlm_request_timeout) in
# server and location, merged as nginx's own limits are: a location
# without them inherits its server's, a server without them the http
# level's, and a location may tighten them (a public endpoint next to an
# internal one).  Plain Test::More on one nginx with two servers: the
# engine must be ready before the first request.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp ();
use Test::More;
use Time::HiRes qw(time);
use VLMTest;

vlm_prereqs();

my $port = $ENV{TEST_NGINX_PORT} || 1994;
my $port2 = $port + 1;

my $srv = vlm_start(name => 'limits-loc', port => $port,
                    http_config => <<"_EOC_", locations => <<'_EOC_');
    vlm_max_tokens 4000;
    vlm_max_images 2;
    vlm_max_image_pixels 5000;
    vlm_max_prompt_bytes 4k;
    vlm_request_timeout 30s;

    server {
        listen 127.0.0.1:$port2;
        vlm_max_tokens 8;

        location = /v1/chat/completions { vlm_chat; }
        location = /tight { vlm_chat; vlm_max_tokens 2; }
    }
_EOC_
        location = /public/v1/chat/completions {
            vlm_chat;
            vlm_max_tokens 4;
            vlm_max_images 1;
            vlm_max_image_pixels 2000;
            vlm_max_prompt_bytes 1k;
        }

        location = /slow {
            vlm_chat;
            vlm_request_timeout 300ms;
        }
_EOC_

END { VLMTest::vlm_stop($srv) if $srv }

my $srv2 = { %$srv, port => $port2 };

sub post {
    my ($s, $path, $body) = @_;
    return vlm_request($s, 'POST', $path, $VLMTest::JSON->encode($body));
}

sub message {
    my ($res) = @_;
    my $j = eval { vlm_json($res->{body}) };
    return ref $j && $j->{error} ? $j->{error}{message} : $res->{body};
}

my $hi = { %{ vlm_chat_body('hi') }, temperature => 0 };
my $png = vlm_data_url('image/png', vlm_png(56, 56, 1));      # 3136 px
my $two = { %{ vlm_chat_body('x', $png, $png) }, max_tokens => 2 };
my $long = { %{ vlm_chat_body('y' x 2000) }, max_tokens => 2 };
my $chat = '/v1/chat/completions';
my $public = '/public/v1/chat/completions';

# the location without limits of its own: the http level's

{
    my $res = post($srv, $chat, { %$hi, max_tokens => 4001 });
    is($res->{status}, 400, 'inherited: max_tokens over 4000 is 400');
    like(message($res), qr/at most 4000 on this server/,
         'inherited: the http level\'s vlm_max_tokens');

    $res = post($srv, $chat, { %$hi, max_tokens => 10 });
    is($res->{status}, 200, 'inherited: max_tokens 10 is served');

    $res = post($srv, $chat, $two);
    is($res->{status}, 200, 'inherited: two images of 3136 pixels');

    $res = post($srv, $chat, $long);
    is($res->{status}, 200, 'inherited: a prompt of 2000 bytes');
}

# the public location: tighter on every limit

{
    my $res = post($srv, $public, { %$hi, max_tokens => 10 });
    is($res->{status}, 400, 'public: max_tokens 10 is 400');
    like(message($res), qr/at most 4 on this server, but got 10/,
         'public: its own vlm_max_tokens');

    $res = post($srv, $public, $hi);
    is($res->{status}, 200, 'public: no max_tokens is served');
    my $j = eval { vlm_json($res->{body}) } || {};
    ok(($j->{usage}{completion_tokens} // 99) <= 4,
       'public: the default max_tokens is the location\'s 4');

    $res = post($srv, $public, $two);
    is($res->{status}, 400, 'public: two images are 400');
    like(message($res), qr/at most 1 images per request/,
         'public: its own vlm_max_images');

    $res = post($srv, $public, { %{ vlm_chat_body('x', $png) },
                                 max_tokens => 2 });
    is($res->{status}, 400, 'public: an image of 3136 pixels is 400');
    like(message($res), qr/56x56 is over the limit of 2000 pixels/,
         'public: its own vlm_max_image_pixels');

    $res = post($srv, $public, $long);
    is($res->{status}, 400, 'public: a prompt of 2000 bytes is 400');
    like(message($res), qr/more than the 1024 this server accepts/,
         'public: its own vlm_max_prompt_bytes');
}

# a location with a shorter vlm_request_timeout

{
    my $t0 = time;
    my $res = post($srv, '/slow', { %$hi, max_tokens => 4000 });
    my $took = time - $t0;

    is($res->{status}, 504, 'slow: 504');
    is(message($res), 'the request took longer than 300 ms',
       'slow: its own vlm_request_timeout');
    ok($took < 5, sprintf('slow: after %.2f s', $took));
}

# a server with its own limit, and a location of it with a tighter one

{
    my $res = post($srv2, $chat, { %$hi, max_tokens => 10 });
    is($res->{status}, 400, 'server: max_tokens 10 is 400');
    like(message($res), qr/at most 8 on this server/,
         'server: its location inherits the server\'s vlm_max_tokens');

    $res = post($srv2, $chat, $two);
    is($res->{status}, 200, 'server: the http level\'s vlm_max_images');

    $res = post($srv2, '/tight', { %$hi, max_tokens => 3 });
    is($res->{status}, 400, 'server: max_tokens 3 at /tight is 400');
    like(message($res), qr/at most 2 on this server/,
         'server: the location overrides the server');
}

# nginx -t: a server or location may lower the http level's limits, never
# raise them (those size the server)

# the configurations below only pass nginx -t, which binds nothing
my $check_port = vlm_port(-12);

sub nginx_t {
    my ($http) = @_;
    my $dir = File::Temp::tempdir("vlm-limits-XXXXXX", TMPDIR => 1,
                                  CLEANUP => 1);
    my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES}
              || ($ENV{VLM_BUILD} || VLMTest::vlm_root() . "/build")
                 . "/ngx_http_vlm_module.so";
    open my $out, '>', "$dir/nginx.conf" or die $!;
    print $out "load_module $mod;\nerror_log stderr;\npid $dir/nginx.pid;\n"
               . "events { }\nhttp {\n$http\n}\n";
    close $out;
    mkdir "$dir/logs";
    my $log = `$nginx -t -p $dir -c $dir/nginx.conf 2>&1`;
    return ($? >> 8, $log);
}

{
    my ($rc, $log) = nginx_t(<<"_EOC_");
    vlm_max_tokens 100;
    server {
        listen 127.0.0.1:$check_port;
        location /a { vlm_max_tokens 50; vlm_request_timeout 1m; }
        location /b { vlm_max_images 1; vlm_max_prompt_bytes 2k; }
    }
_EOC_
    is($rc, 0, 'nginx -t: lower limits in a location pass') or diag($log);

    ($rc, $log) = nginx_t(<<"_EOC_");
    vlm_max_tokens 100;
    server {
        listen 127.0.0.1:$check_port;
        location /a { vlm_max_tokens 200; }
    }
_EOC_
    isnt($rc, 0, 'nginx -t: a location above the http level fails');
    like($log, qr/\[emerg\] .*"vlm_max_tokens 200" in a server or location is larger than the http level's 100, which sizes the server: a server or location may only lower it \(set the largest at the http level\)/,
         'nginx -t: and names the directive and both values');

    ($rc, $log) = nginx_t(<<"_EOC_");
    server {
        listen 127.0.0.1:$check_port;
        vlm_max_image_pixels 32m;
    }
_EOC_
    like($log, qr/\[emerg\] .*"vlm_max_image_pixels 33554432" in a server or location is larger than the http level's 16777216/,
         'nginx -t: a server above the default of the http level fails');

    ($rc, $log) = nginx_t(<<"_EOC_");
    vlm_request_timeout 1m;
    server {
        listen 127.0.0.1:$check_port;
        location /a { vlm_request_timeout 2m; }
    }
_EOC_
    like($log, qr/\[emerg\] .*"vlm_request_timeout 120000ms" in a server or location is larger than the http level's 60000ms/,
         'nginx -t: a longer vlm_request_timeout fails');
}

my $zone = vlm_wait_idle($srv, 5);
ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
   'nothing left in use');

# the /slow request's 504 is logged at error level, as in t/007
VLMTest::check_log($srv, 'limits-loc',
                   { allow => [ qr/vlm: 504 timeout: .*"POST \/slow / ] },
                   qr/\[error\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'no engine process left');

done_testing();
