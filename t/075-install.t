# make install: the module, vlm-engine beside it, vlm-cli, the default
# model and a sample configuration land under the paths it is given, and
# the installed sample serves with the installed files alone (the module
# starts the vlm-engine it finds next to itself).

use strict;
use warnings;

use File::Temp qw(tempdir);
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $mod = $ENV{TEST_NGINX_LOAD_MODULES} || "$build/ngx_http_vlm_module.so";
my $port = vlm_port(85);

my $dir = tempdir("vlm-install-XXXXXX", TMPDIR => 1,
                  CLEANUP => !$ENV{TEST_NGINX_NO_CLEAN});
chmod 0755, $dir;

my $modules = "$dir/lib/nginx/modules";
my $data = "$dir/share/ngx_http_vlm_module";

# what is built already, installed as it is: -o all keeps make from
# building anything (a sanitizer build's objects stay as they are)
my $out = `make -C $root -o all install BUILD=$build MODULE=$mod \\
           PREFIX=$dir NGX_MODULES_PATH=$modules 2>&1`;
is($? >> 8, 0, 'make install') or diag($out);

ok(-f "$modules/ngx_http_vlm_module.so", 'the module in the modules path');
ok(-x "$modules/vlm-engine", 'vlm-engine beside it');
ok(-x "$dir/bin/vlm-cli", 'vlm-cli in BINDIR');
ok(-f "$data/models/default/model.safetensors", 'the default model');

my $load = do {
    open my $in, '<', "$data/mod-http-vlm.conf" or die $!;
    local $/;
    <$in>;
};
is($load, "load_module $modules/ngx_http_vlm_module.so;\n",
   'mod-http-vlm.conf loads the installed module');

my $conf = do {
    open my $in, '<', "$data/nginx.conf" or die $!;
    local $/;
    <$in>;
};
like($conf, qr/^load_module \Q$modules\E\/ngx_http_vlm_module\.so;$/m,
     'the sample loads the installed module');
like($conf, qr/^\s*vlm_model\s+\Q$data\E\/models\/default;$/m,
     'the sample serves the installed model');

# the sample as it is, but for the port (and the user, when root)
my $prefix = "$dir/prefix";
mkdir $prefix;
mkdir "$prefix/$_" for qw(conf logs temp);

(my $run = $conf) =~ s/(listen\s+127\.0\.0\.1:)\d+/$1$port/;
$run = "user root;\n$run" if $> == 0;
$run =~ s/^daemon\s.*$//m;

open my $w, '>', "$prefix/conf/nginx.conf" or die $!;
print $w $run;
close $w;

my $t = `$nginx -p $prefix/ -c conf/nginx.conf -e logs/error.log -t 2>&1`;
is($? >> 8, 0, 'the sample passes nginx -t') or diag($t);

system("$nginx -p $prefix/ -c conf/nginx.conf -e logs/error.log") == 0
    or BAIL_OUT("cannot start nginx in $prefix");

my $srv = { name => 'install', port => $port, prefix => $prefix,
            nginx => $nginx, conf => "$prefix/conf/nginx.conf",
            log_pos => 0, keep => 1 };

for (1 .. 100) {
    last if -s "$prefix/logs/nginx.pid";
    select undef, undef, undef, 0.05;
}
$srv->{pid} = VLMTest::master_pid($srv);

ok(vlm_wait_ready($srv, vlm_secs(30)), 'the installed sample is ready');

my @engines = vlm_engine_pids($srv);
ok(@engines > 0, 'an engine runs');
is(readlink("/proc/$engines[0]/exe") // '', "$modules/vlm-engine",
   'it is the vlm-engine installed beside the module') if @engines;

my $res = vlm_post_json($srv, {
    model => 'default', max_tokens => 4,
    messages => [ { role => 'user', content => 'Hello' } ],
});
is($res->{status}, 200, 'a chat completion from the installed server');
my $body = eval { vlm_json($res->{body}) } || {};
ok(defined $body->{choices}[0]{message}{content}, 'with an answer');

is_deeply([vlm_stop($srv)], [], 'no engine left behind');

done_testing();
