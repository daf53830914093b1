# The engine's life and death as an operator sees it:
#
# - an engine that crashes (SIGSEGV) or is killed (SIGKILL): /health says
#   which, /metrics counts it by reason, the engine comes back;
# - a model the engine can no longer load (its weights spoiled, then the
#   engine killed): /health says why (the engine's own last error, not
#   only "the engine is not running"), /metrics counts the exits;
# - a normal stop (QUIT, TERM, and Ctrl-C on a foreground nginx) logs no
#   [alert]: the engine's exit at stop is no emergency;
# - the master SIGKILLed: /health answers 503 (the master is gone), the
#   worker shuts down, and no engine runs for that prefix and the
#   cache manager helper is gone (it must not start an engine with
#   --master-pid 1).
#
# A plain Test::More script: it kills processes and reads /proc.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(make_path);
use POSIX qw(setpgid WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $root = vlm_root();

# whatever happens, no nginx of this script stays behind
my @servers;
END { VLMTest::vlm_stop($_) for grep { $_->{pid} } @servers }


# the vlm-engine processes whose working directory is under $prefix,
# whatever their --master-pid says
sub engines_in {
    my ($prefix) = @_;
    my @pids;

    for my $d (glob "/proc/[0-9]*") {
        my $exe = readlink("$d/exe") // next;
        next if $exe !~ m{/vlm-engine$};

        my $cwd = readlink("$d/cwd") // next;
        push @pids, ($d =~ m{(\d+)$})[0] if index($cwd, $prefix) == 0;
    }

    return @pids;
}


# waits until an engine other than $old serves
sub engine_back {
    my ($srv, $old) = @_;

    for (1 .. 200) {
        my ($pid) = vlm_engine_pids($srv);
        return $pid if $pid && $pid != $old
                       && vlm_health($srv)->{_status} == 200;
        sleep 0.1;
    }

    return undef;
}


# the children of $pid
sub children {
    my ($pid) = @_;
    my @kids;

    for my $d (glob "/proc/[0-9]*") {
        open my $in, '<', "$d/stat" or next;
        my $stat = <$in>;
        close $in;
        next if !defined $stat;

        my ($ppid) = $stat =~ /\) \S (\d+)/;
        push @kids, ($d =~ m{(\d+)$})[0] if defined $ppid && $ppid == $pid;
    }

    return @kids;
}


# running, not a zombie
sub alive {
    my ($pid) = @_;

    open my $in, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$in> // '';
    close $in;

    return $stat =~ /\) ([A-Za-z])/ && $1 ne 'Z' && $1 ne 'X';
}


sub cmdline {
    my ($pid) = @_;

    open my $in, '<', "/proc/$pid/cmdline" or return '';
    local $/;
    my $cmd = <$in> // '';
    close $in;
    $cmd =~ s/\0/ /g;

    return $cmd;
}


# --- crashes, kills, and a model the engine can no longer load

{
    # a copy of the test model, spoiled later
    my $model = "$root/t/servroot-lifecycle-model";
    system('rm', '-rf', $model);
    make_path($model);

    for my $f (glob "$root/tests/fixtures/serving/*") {
        system('cp', $f, "$model/") == 0 or die "cannot copy $f";
    }

    my $srv = vlm_start(name => 'lifecycle', workers => 1, model => $model);
    push @servers, $srv;

    my ($pid) = vlm_engine_pids($srv);
    kill 'SEGV', $pid;

    my $h;
    for (1 .. 100) {
        $h = vlm_health($srv);
        last if ($h->{last_error} // '') =~ /SIGSEGV/;
        sleep 0.05;
    }

    like($h->{last_error} // '', qr/the engine crashed: SIGSEGV/,
         'SIGSEGV: /health says the engine crashed')
        or diag($VLMTest::JSON->encode($h));
    $pid = engine_back($srv, $pid);
    ok($pid, 'SIGSEGV: the engine is back');

    kill 'KILL', $pid;

    for (1 .. 100) {
        $h = vlm_health($srv);
        last if ($h->{last_error} // '') =~ /without a word/;
        sleep 0.05;
    }

    like($h->{last_error} // '', qr/exited without a word/,
         'SIGKILL: /health says the engine died without a word');
    $pid = engine_back($srv, $pid);
    ok($pid, 'SIGKILL: the engine is back');

    VLMTest::check_log($srv, 'crashes', { allow => [
        qr/\[alert\] .*vlm: engine \d+ exited: the engine (crashed|exited)/,
        qr/\[alert\] .*exited on signal (9|11)/ ] });

    # told to stop from outside, as a service manager stopping nginx
    # signals all its processes at once: a notice, no alert
    kill 'TERM', $pid;

    for (1 .. 100) {
        $h = vlm_health($srv);
        last if ($h->{last_error} // '') =~ /told to stop/;
        sleep 0.05;
    }

    like($h->{last_error} // '', qr/the engine was told to stop \(SIGTERM\)/,
         'SIGTERM: /health says the engine was told to stop');
    $pid = engine_back($srv, $pid);
    ok($pid, 'SIGTERM: the engine is back');
    VLMTest::check_log($srv, 'SIGTERM to the engine');

    my $m = vlm_metrics($srv);
    is($m->{'vlm_engine_exits_total{reason="crash"}'}, 2,
       '/metrics: two crashes');
    is($m->{'vlm_engine_exits_total{reason="stop"}'}, 1,
       '/metrics: one stop');
    is($m->{'vlm_engine_exits_total{reason="error"}'}, 0,
       '/metrics: no error exit');
    is($m->{vlm_engine_restarts_total}, 3, '/metrics: three restarts');

    # the weights spoiled under the running engine (a new file: the
    # engine's mapping stays whole), then the engine killed: every
    # restart fails to load the model
    open my $out, '>', "$model/model.safetensors.new" or die "$model: $!";
    print $out "\x08\0\0\0\0\0\0\0{}      ";
    close $out;
    rename "$model/model.safetensors.new", "$model/model.safetensors"
        or die "rename: $!";

    kill 'KILL', $pid;

    for (1 .. 100) {
        $h = vlm_health($srv);
        last if ($h->{last_error} // '') =~ /^loading/
                && $h->{reason} =~ /not running/;
        sleep 0.05;
    }

    is($h->{_status}, 503, 'bad model: /health answers 503');
    like($h->{reason} // '', qr/the engine is not running/,
         'bad model: the engine is not running');
    like($h->{last_error} // '', qr/^loading <model>: .*\btensor\b/,
         'bad model: /health carries the error the engine died with')
        or diag($VLMTest::JSON->encode($h));
    unlike(VLMTest::vlm_request($srv, 'GET', '/health')->{body},
           qr/\Q$model\E/, 'bad model: but not the model\'s directory');

    $m = vlm_metrics($srv);
    ok(($m->{'vlm_engine_exits_total{reason="error"}'} // 0) >= 1,
       '/metrics: the exits on an error are counted (reason "error")');
    is($m->{'vlm_engine_exits_total{reason="crash"}'}, 3,
       '/metrics: three crashes');

    VLMTest::check_log($srv, 'bad model', { allow => [
        qr/\[alert\] .*vlm: engine \d+ exited: the engine exited/,
        qr/\[alert\] .*exited on signal 9/ ] });

    # a normal stop after that: no alert
    my @left = VLMTest::vlm_stop($srv);
    is(scalar @left, 0, 'QUIT: no engine left');
    VLMTest::check_log($srv, 'QUIT');

    system('rm', '-rf', $model);
}

# --- normal stops: TERM, and Ctrl-C on nginx in the foreground

for my $how ('TERM', 'INT') {
    for my $master ('on', 'off') {
        my $what = "$how, master_process $master";
        my $srv = vlm_start(name => 'lifecycle-stop', master => $master,
                            wait => 0);
        push @servers, $srv;

        # vlm_start runs it as a daemon: start it again in the foreground,
        # in a process group of its own as a shell would
        $srv->{keep} = 1;
        VLMTest::vlm_stop($srv);

        open my $in, '<', $srv->{conf} or die;
        my $conf = do { local $/; <$in> };
        close $in;
        $conf =~ s/^daemon on;$/daemon off;/m or die "no daemon on";
        open my $out, '>', $srv->{conf} or die;
        print $out $conf;
        close $out;

        my $pid = fork;
        die "fork: $!" if !defined $pid;

        if ($pid == 0) {
            setpgid(0, 0);
            { exec $srv->{nginx}, "-p", "$srv->{prefix}/", "-c", $srv->{conf} };
            POSIX::_exit(127);
        }

        $srv->{pid} = $pid;
        $srv->{log_pos} = -s "$srv->{prefix}/logs/error.log";

        ok(vlm_wait_ready($srv, 20), "$what: serving");

        my ($engine) = vlm_engine_pids($srv);

        if ($how eq 'INT') {
            kill 'INT', -$pid;      # Ctrl-C: the whole process group

        } else {
            kill 'TERM', $pid;
        }

        my $t = time + 10;
        while (time < $t && waitpid($pid, WNOHANG) == 0) {
            sleep 0.05;
        }

        $t = time + 5;
        sleep 0.05 while time < $t && $engine && vlm_alive($engine);

        ok(!$engine || !vlm_alive($engine), "$what: the engine is gone");
        VLMTest::check_log($srv, $what);

        delete $srv->{pid};
        system('rm', '-rf', $srv->{prefix}) if Test::More->builder->is_passing;
    }
}

# --- the master killed

{
    my $srv = vlm_start(name => 'lifecycle-master', workers => 1);
    push @servers, $srv;
    my $prefix = $srv->{prefix};
    my $master = $srv->{pid};

    my @kids = children($master);
    my ($helper) = grep { cmdline($_) =~ /cache manager/ } @kids;
    ok($helper, 'master killed: the cache manager helper runs');
    is(scalar engines_in($prefix), 1, 'master killed: one engine');

    my @workers = grep { cmdline($_) =~ /worker process/ } @kids;
    is(vlm_health($srv)->{_status}, 200, 'master killed: ready before');

    kill 'KILL', $master;
    my $killed = time;

    # the workers outlive a killed master, as in stock nginx, but cannot
    # serve (the engine follows the master): /health says so, then they
    # shut down
    my (@late_ok, @said);

    while (time - $killed < vlm_secs(5) && grep { alive($_) } @workers) {
        my $h = eval { vlm_health($srv) } || {};
        my $s = $h->{_status} // 0;
        push @late_ok, $s if $s == 200 && time - $killed > vlm_secs(1);
        push @said, $h->{reason} // '' if $s == 503;
        sleep 0.05;
    }

    is_deeply(\@late_ok, [], 'master killed: /health no longer says ready');
    is_deeply([grep { !/the nginx master process is gone/ } @said], [],
              'master killed: a 503 that says the master is gone');
    is_deeply([grep { alive($_) } @workers], [],
              'master killed: the worker exited');
    sleep 1 if time - $killed < 2;

    my @left = engines_in($prefix);
    is(scalar @left, 0, 'master killed: no engine runs')
        or diag(join "\n", map { cmdline($_) } @left);
    ok(!$helper || !alive($helper), 'master killed: the helper exited');

    kill 'KILL', @left, grep { alive($_) } @kids;
    delete $srv->{pid};

    system('rm', '-rf', $prefix) if Test::More->builder->is_passing;
}

done_testing();
