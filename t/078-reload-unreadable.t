# A reload onto a model the engine's user cannot read is refused as a
# broken config.json is: nginx -s reload leaves the running configuration
# and its engine serving, and the error log says why (vlm_model's line,
# the file and the user).  Run as root, with the workers (and so the
# engine) as user nobody.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use File::Temp qw(tempdir);
use Test::More;
use Time::HiRes qw(sleep);
use VLMTest;

vlm_prereqs();

plan skip_all => 'run as root only: the engine needs another user'
    if $> != 0;
plan skip_all => 'no user nobody' if !defined getpwnam('nobody');

my $root = vlm_root();
my $dir = tempdir("vlm-unreadable-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $dir;

for my $name (qw(good bad)) {
    mkdir "$dir/$name" or die;
    chmod 0755, "$dir/$name";
    for my $f (glob "$root/tests/fixtures/serving/*") {
        next if -d $f;
        (my $base = $f) =~ s{.*/}{};
        copy($f, "$dir/$name/$base") or die "$f: $!";
        chmod 0644, "$dir/$name/$base";
    }
}

# root reads it, nobody does not
chmod 0600, "$dir/bad/model.safetensors" or die;

my $group = getgrnam('nogroup') ? 'nogroup' : 'nobody';
my $srv = vlm_start(name => 'reload-unreadable', port => vlm_port(26),
                    model => "$dir/good", user => "nobody $group",
                    http_config => "    vlm_served_model_name serving;\n");

END { VLMTest::vlm_stop($srv) if $srv && $srv->{pid} }

my ($engine) = vlm_engine_pids($srv);
ok($engine, 'the engine runs');
is(vlm_post_json($srv, vlm_chat_body('Hello'))->{status}, 200,
   'and answers');

VLMTest::error_log_since($srv);
vlm_reload($srv, "$dir/good;", "$dir/bad;");

my $said = '';

for (1 .. 50) {
    $said .= join '', VLMTest::error_log_since($srv);
    last if $said =~ /vlm_model/;
    sleep 0.1;
}

like($said, qr{\[emerg\] .*vlm_model "\Q$dir\E/bad": .*Permission denied \(the engine runs as user "nobody"\) in \S+nginx\.conf:\d+$}m,
     'the reload is refused, naming the file and the user');
unlike($said, qr/\[alert\]/, 'with no alert');

sleep 1;

is_deeply([vlm_engine_pids($srv)], [$engine],
          'the engine that served goes on');
is(vlm_health($srv)->{_status}, 200, '/health: ready');
is(vlm_post_json($srv, vlm_chat_body('Hello'))->{status}, 200,
   'and chat answers as before');

done_testing();
