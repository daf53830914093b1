# Prefix affinity over hosts, on loopback: two instances of the module
# (each with its model and engine) behind a front nginx that loads the
# module without a model and balances with "hash $vlm_prefix_key
# consistent" and proxy_next_upstream.  Every turn of a 10-turn
# conversation with an image lands on one instance, which serves the
# later turns from its prefix cache; when that instance is stopped the
# conversation moves to the other one without a failed request.  A body
# over the front's client_max_body_size is refused there (413), and a
# body nginx keeps in a temporary file is keyed too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(make_path remove_tree);
use Test::More;
use VLMTest;

vlm_prereqs();

my $root = vlm_root();
my $build = $ENV{VLM_BUILD} || "$root/build";
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $mod = $ENV{TEST_NGINX_LOAD_MODULES} || "$build/ngx_http_vlm_module.so";

my %port = (a => vlm_port(19), b => vlm_port(20));
my $front_port = vlm_port(21);
my %host;

for my $n (sort keys %port) {
    $host{$n} = vlm_start(name => "route-$n", port => $port{$n});
}

# the front: the module loaded, no vlm_model, no engine
my $prefix = "$root/t/servroot-route-front";
remove_tree($prefix);
make_path("$prefix/logs", "$prefix/conf");

my $user = $> == 0 ? 'user root;' : '';
my $conf = <<"_EOC_";
load_module $mod;
worker_processes 1;
daemon on;
error_log $prefix/logs/error.log info;
pid $prefix/logs/nginx.pid;
$user

events {
    worker_connections 256;
}

http {
    log_format route '\$upstream_addr \$vlm_prefix_key';
    access_log $prefix/logs/access.log route;
    client_body_temp_path $prefix/client_body_temp;
    proxy_temp_path $prefix/proxy_temp;
    client_max_body_size 8m;
    client_body_buffer_size 8m;

    upstream vlm {
        hash \$vlm_prefix_key consistent;
        server 127.0.0.1:$port{a};
        server 127.0.0.1:$port{b};
    }

    server {
        listen 127.0.0.1:$front_port;

        location /v1/ {
            proxy_pass http://vlm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 60s;
            proxy_next_upstream error timeout http_503 http_429
                                non_idempotent;
            add_header X-Upstream \$upstream_addr always;
        }

        # bodies beyond the buffer go to a temporary file here
        location /small/ {
            client_body_buffer_size 1k;
            proxy_pass http://vlm/;
            add_header X-Upstream \$upstream_addr always;
            add_header X-Prefix-Key \$vlm_prefix_key always;
        }
    }
}
_EOC_

open my $out, '>', "$prefix/conf/nginx.conf" or die $!;
print $out $conf;
close $out;

system("$nginx -p $prefix/ -c $prefix/conf/nginx.conf -e $prefix/logs/error.log")
    == 0 or die "cannot start the front nginx";

for (1 .. 100) {
    last if -s "$prefix/logs/nginx.pid";
    select(undef, undef, undef, 0.05);
}

my $front = { name => 'route-front', port => $front_port, prefix => $prefix,
              conf => "$prefix/conf/nginx.conf", log_pos => 0 };
$front->{pid} = VLMTest::master_pid($front);

END {
    VLMTest::vlm_stop($front) if $front && $front->{pid};
    for my $n (keys %host) {
        VLMTest::vlm_stop($host{$n}) if $host{$n};
    }
}

my %by_port = map { ("127.0.0.1:$port{$_}" => $_) } keys %port;

my $image = vlm_data_url('image/png', vlm_png(120, 80, 9));
my @messages = (
    { role => 'system', content => 'You describe pictures. ' x 10 },
    { role => 'user',
      content => [ { type => 'image_url', image_url => { url => $image } },
                   { type => 'text', text => 'What is in the picture?' } ] },
);

sub turn {
    my ($t) = @_;

    my $res = vlm_post_json($front, { model => 'serving',
                                      messages => \@messages,
                                      max_tokens => 6, temperature => 0 });
    my $j = $res->{status} == 200 ? vlm_json($res->{body}) : {};
    my $text = $j->{choices} ? $j->{choices}[0]{message}{content} : '';

    push @messages, { role => 'assistant', content => $text },
                    { role => 'user', content => "Turn $t: and then?" };

    # after a failover: every address tried, the one that answered last
    my @tried = split /, /, $res->{headers}{'x-upstream'} // '';

    return ($res->{status}, $by_port{ $tried[-1] // '' }, $j->{usage} || {});
}

# ten turns: one instance for all
my (@status, @where, $cached);

for my $t (1 .. 10) {
    my ($s, $w, $u) = turn($t);
    push @status, $s;
    push @where, $w // '?';
    $cached += $u->{prompt_tokens_details}{cached_tokens} // 0 if $t > 1;
}

is_deeply(\@status, [ (200) x 10 ], 'ten turns: every one 200');
is(scalar(grep { $_ eq $where[0] } @where), 10,
   "ten turns: all on instance $where[0]") or diag("@where");

my $home = $where[0];
my $other = $home eq 'a' ? 'b' : 'a';

{
    my $m = vlm_metrics($host{$home});
    my $q = $m->{vlm_prefix_cache_queries_tokens_total} || 0;
    my $h = $m->{vlm_prefix_cache_hits_tokens_total} || 0;
    my $ratio = $q ? $h / $q : 0;

    diag(sprintf "instance %s: prefix cache hit ratio %.1f %% (%d of %d "
         . "prompt tokens)", $home, 100 * $ratio, $h, $q);
    cmp_ok($ratio, '>', 0.5, 'ten turns: most prompt tokens from the cache');
    is($h, $cached, 'ten turns: the hits are the cached tokens reported');

    my $o = vlm_metrics($host{$other});
    is($o->{vlm_prefix_cache_queries_tokens_total} || 0, 0,
       "ten turns: instance $other saw none of it");
}

# the keys of the front's access log (a line is written just after its
# response went out: waits for n lines)
sub logged_keys {
    my ($n) = @_;
    my @keys;

    for (1 .. 40) {
        open my $in, '<', "$prefix/logs/access.log" or die $!;
        @keys = map { (split / /)[1] } grep { /\S/ } <$in>;
        close $in;
        last if @keys >= $n;
        select(undef, undef, undef, 0.05);
    }

    chomp @keys;

    return @keys;
}

# the key is the same every turn, in the front's access log
{
    my @keys = logged_keys(10);

    is(scalar(@keys), 10, 'the access log has the ten turns');
    ok((grep { $_ eq $keys[0] } @keys) == 10 && $keys[0] =~ /^[0-9a-f]{32}$/,
       "one key for the conversation: $keys[0]");
}

# the instance goes away: the conversation moves, no request fails
VLMTest::vlm_stop($host{$home});
delete $host{$home};

{
    my (@s, @w);

    for my $t (11 .. 14) {
        my ($s, $w) = turn($t);
        push @s, $s;
        push @w, $w // '?';
    }

    is_deeply(\@s, [ (200) x 4 ], 'after the stop: every turn 200');
    is(scalar(grep { $_ eq $other } @w), 4,
       "after the stop: all on instance $other") or diag("@w");
}

# a body in a temporary file of the front: keyed by its head, the same
# key as the same conversation in memory
{
    my $body = VLMTest::vlm_json_text({ model => 'serving', max_tokens => 2,
                                        messages => [ @messages[0, 1] ] });
    ok(length($body) > 1024, 'a body larger than the 1k buffer');

    my $res = vlm_request($front, 'POST', '/small/v1/chat/completions',
                          $body);
    is($res->{status}, 200, 'in a file: 200');
    my @keys = logged_keys(1);
    is($res->{headers}{'x-prefix-key'}, $keys[0],
       'in a file: the conversation\'s key');
}

# over the front's client_max_body_size: refused at the front
{
    my $big = 'x' x (9 * 1024 * 1024);
    my $res = vlm_post_json($front, { model => 'serving',
                                      messages => [ { role => 'user',
                                                      content => $big } ] });
    is($res->{status}, 413, 'a body over client_max_body_size: 413');
}

VLMTest::check_log($front, 'route-front');
VLMTest::check_log($host{$other}, "route-$other");

done_testing();
