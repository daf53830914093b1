package Test::Nginx::Util;

# Server management for the Test::Nginx::Socket runner of this project:
# the server root, the generated nginx.conf, starting, reloading and
# stopping nginx, and reading its error log.  It follows the defaults and
# environment variables of openresty's Test::Nginx (lib/Test/Nginx/Util.pm)
# so that the suites under t/ run unchanged under either implementation.

use strict;
use warnings;

use base 'Exporter';

use Carp qw(croak);
use Cwd ();
use File::Path qw(make_path remove_tree);
use File::Spec ();
use IO::Socket::INET ();
use List::Util qw(shuffle);
use POSIX qw(SIGQUIT SIGTERM SIGKILL SIGHUP SIGUSR1 :sys_wait_h);
use Scalar::Util qw(looks_like_number);
use Time::HiRes qw(sleep time);

our @EXPORT = qw(
    env_to_nginx repeat_each no_shuffle use_hup master_on master_off
    master_process_enabled workers worker_connections log_level timeout
    no_root_location server_addr server_name server_port
    server_port_for_client server_root html_dir bail_out
    check_accum_error_log config_preamble add_block_preprocessor
    add_cleanup_handler add_test_cleanup_handler
    expand_env_in_text parse_time parse_headers error_log_data
    get_pid_from_pidfile is_running
    $ServerPort $ServerPortForClient $ServerAddr $ServerName
    $ServRoot $ConfFile $PidFile $ErrLogFile $NginxBinary
);

our $NginxBinary    = $ENV{TEST_NGINX_BINARY} || 'nginx';
our $LoadModules    = $ENV{TEST_NGINX_LOAD_MODULES};
our $ServerPort     = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT}
                      || 1984;
our $ServerPortForClient = $ENV{TEST_NGINX_CLIENT_PORT} || $ServerPort;
our $ServerAddr     = '127.0.0.1';
our $ServerName     = 'localhost';
our $Workers        = 1;
our $WorkerConnections = 64;
our $LogLevel       = $ENV{TEST_NGINX_LOG_LEVEL} || 'debug';
our $MasterProcessEnabled = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
our $UseHup         = $ENV{TEST_NGINX_USE_HUP};
our $NoShuffle      = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
our $Timeout        = $ENV{TEST_NGINX_TIMEOUT} || 3;
our $Sleep          = $ENV{TEST_NGINX_SLEEP} || 0.015;
our $Verbose        = $ENV{TEST_NGINX_VERBOSE};
our $WorkerUser     = $ENV{TEST_NGINX_WORKER_USER};
our $ForceRestart   = defined $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST}
                      ? $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST} : 1;
our $RepeatEach     = 1;
our $NoRootLocation = 0;
our $CheckAccumErrLog = $ENV{TEST_NGINX_CHECK_ACCUM_ERR_LOG};
our $ConfigPreamble = '';
our @EnvToNginx;
our @BlockPreprocessors;
our @CleanupHandlers;
our @TestCleanupHandlers;

our $ServRoot   = $ENV{TEST_NGINX_SERVROOT}
                  || File::Spec->rel2abs('t/servroot');
our $LogDir     = "$ServRoot/logs";
our $ErrLogFile = "$LogDir/error.log";
our $AccLogFile = "$LogDir/access.log";
our $HtmlDir    = "$ServRoot/html";
our $CacheDir   = "$ServRoot/cache";
our $ConfDir    = "$ServRoot/conf";
our $ConfFile   = "$ConfDir/nginx.conf";
our $PidFile    = "$LogDir/nginx.pid";

$ENV{TEST_NGINX_SERVER_ROOT} = $ServRoot;

# set by Test::Nginx::Socket: runs the requests and checks of one block,
# and checks the error log of a block
our $RunTestHelper;
our $CheckErrorLog;

our $ErrLogFilePos = 0;
our $ConfigVersion;
our $PrevConfig;
our $FirstTime = 1;


sub env_to_nginx (@) {
    croak "env_to_nginx: no arguments specified" if !@_;

    for my $v (@_) {
        croak "env_to_nginx: bad argument value: $v"
            if $v !~ /^[A-Za-z_]/ || $v =~ /\n/;
        push @EnvToNginx, $v;
    }
}

sub repeat_each (@) {
    $RepeatEach = shift if @_;
    return $RepeatEach;
}

sub no_shuffle ()           { $NoShuffle = 1 }
sub use_hup ()              { $UseHup = 1 }
sub master_on ()            { $MasterProcessEnabled = 'on' }
sub master_off ()           { $MasterProcessEnabled = 'off' }
sub no_root_location ()     { $NoRootLocation = 1 }
sub check_accum_error_log () { $CheckAccumErrLog = 1 }
sub config_preamble ($)     { $ConfigPreamble = shift }
sub server_root ()          { $ServRoot }
sub html_dir ()             { $HtmlDir }

sub master_process_enabled (@) {
    return $MasterProcessEnabled if !@_;
    $MasterProcessEnabled = shift() ? 'on' : 'off';
}

sub workers (@)            { @_ ? ($Workers = shift) : $Workers }
sub worker_connections (@) { @_ ? ($WorkerConnections = shift)
                                 : $WorkerConnections }
sub log_level (@)          { @_ ? ($LogLevel = shift) : $LogLevel }
sub timeout (@)            { @_ ? ($Timeout = shift) : $Timeout }
sub server_addr (@)        { @_ ? ($ServerAddr = shift) : $ServerAddr }
sub server_name (@)        { @_ ? ($ServerName = shift) : $ServerName }
sub server_port (@)        { @_ ? ($ServerPort = shift) : $ServerPort }
sub server_port_for_client (@) {
    @_ ? ($ServerPortForClient = shift) : $ServerPortForClient;
}

sub add_block_preprocessor (&) { unshift @BlockPreprocessors, shift }
sub add_cleanup_handler ($)     { unshift @CleanupHandlers, shift }
sub add_test_cleanup_handler ($) { unshift @TestCleanupHandlers, shift }

# a daemonized nginx is reaped by init: an exited one that init has not
# reaped yet (a zombie) is not running
sub is_running ($) {
    my $pid = shift;

    return 0 if !$pid || !kill(0, $pid);

    if (open my $in, '<', "/proc/$pid/stat") {
        my $stat = <$in>;
        close $in;
        return 0 if defined $stat && $stat =~ /^\d+ \(.*\) Z /;
    }

    return 1;
}

sub bail_out (@) {
    cleanup();
    Test::More::BAIL_OUT(join '', @_);
}

# "1.5", "1.5s" and "1500ms" are all 1.5 seconds
sub parse_time ($) {
    my $t = shift;

    return undef if !defined $t;
    $t =~ s/^\s+|\s+$//g;
    return $1 / 1000 if $t =~ /^([\d.]+)ms$/;
    return $1 if $t =~ /^([\d.]+)s?$/;
    return $t;
}

# "Name: value" lines; "!Name" says the header must be absent (undef)
sub parse_headers ($) {
    my $text = shift;
    my %headers;

    for my $line (split /\n/, $text) {
        $line =~ s/^\s+|\s+$//g;
        next if $line eq '';

        if ($line =~ s/^!\s*//) {
            $headers{$line} = undef;
            next;
        }

        my ($key, $val) = split /\s*:\s*/, $line, 2;
        $headers{$key} = defined $val ? $val : '';
    }

    return \%headers;
}

# $TEST_NGINX_FOO in a section is replaced by the environment variable
sub expand_env_in_text ($$) {
    my ($text, $name) = @_;

    return undef if !defined $text;

    $text =~ s{\$(TEST_NGINX_[_A-Z0-9]+)}{
        defined $ENV{$1} ? $ENV{$1}
                         : bail_out("$name - No environment $1 defined.\n")
    }ge;

    return $text;
}

sub get_pid_from_pidfile ($) {
    my $name = shift;

    open my $in, '<', $PidFile or return undef;
    my $pid = do { local $/; <$in> };
    close $in;

    return undef if !defined $pid;
    chomp $pid;
    return $pid =~ /^\d+$/ ? $pid : undef;
}

# the error log lines written since the last call (or all of them with
# check_accum_error_log)
sub error_log_data () {
    sleep $Sleep * 3;

    open my $in, '<', $ErrLogFile or return [];

    seek $in, $ErrLogFilePos, 0 if !$CheckAccumErrLog && $ErrLogFilePos;
    my @lines = <$in>;
    $ErrLogFilePos = tell $in if !$CheckAccumErrLog;
    close $in;

    return \@lines;
}

sub setup_server_root () {
    if (-d $ServRoot) {
        # as the original: only what the runner itself makes, *_cache and
        # *_temp go; anything else left in the server root (a directory
        # a module made there uninvited) stops the run
        remove_tree($ConfDir, glob("$ServRoot/*_cache"),
                    glob("$ServRoot/*_temp"));

        if ($UseHup) {

            # keep the pid file of the running nginx, empty the logs
            for my $f (glob("$LogDir/*"), glob("$HtmlDir/*")) {
                next if $f eq $PidFile && !$FirstTime;
                unlink $f;
            }

        } else {
            remove_tree($CacheDir, $HtmlDir, $LogDir);
            rmdir $ServRoot
                or bail_out("Can't remove $ServRoot (not empty?): $!");
        }
    }

    for my $dir ($ServRoot, $LogDir, $HtmlDir, $ConfDir) {
        next if -d $dir;
        make_path($dir) or bail_out("Failed to create $dir: $!\n");
    }

    my $index = "$HtmlDir/index.html";
    open my $out, '>', $index or bail_out("Can't write $index: $!\n");
    print $out '<html><head><title>It works!</title></head>'
               . '<body>It works!</body></html>';
    close $out;
}

sub write_config_file ($$) {
    my ($block, $config) = @_;

    my $name = $block->name;
    my $main_config = expand_env_in_text($block->main_config, $name);
    my $http_config = expand_env_in_text($block->http_config, $name);
    my $post_main_config = expand_env_in_text($block->post_main_config,
                                              $name);

    $main_config = '' if !defined $main_config;
    $http_config = '' if !defined $http_config;
    $post_main_config = '' if !defined $post_main_config;
    $config = '' if !defined $config;

    if ($LoadModules) {
        my @mods = map { "load_module $_;" } grep { $_ } split /\s+/,
                   $LoadModules;
        $main_config = join(' ', @mods) . "\n$main_config";
    }

    my $temp = '';
    for my $t (qw(client_body proxy fastcgi scgi uwsgi)) {
        next if $http_config =~ /\b${t}_temp_path\b/;
        $temp .= " ${t}_temp_path $ServRoot/${t}_temp;";
    }

    my $env = '';
    for my $v (qw(LD_PRELOAD LD_LIBRARY_PATH ASAN_OPTIONS), @EnvToNginx) {
        $env .= "env " . ($v =~ /\s/ ? "'$v'" : $v) . ";\n";
    }

    (my $quoted_name = $ServerName) =~ s/(['\\])/\\$1/g;

    my $root_location = $NoRootLocation ? '' : <<_EOC_;
        location / {
            root $HtmlDir;
            index index.html index.htm;
        }
_EOC_

    my $ver_server = !$UseHup ? '' : <<_EOC_;
    server {
        listen          $ServerPort;
        server_name     'Test-Nginx';

        location = /ver {
            return 200 '$ConfigVersion';
        }
    }
_EOC_

    my $user = '';
    if (defined $WorkerUser) {
        $user = "user $WorkerUser;\n";

    } elsif ($> == 0) {
        # running as root: workers would otherwise switch to "nobody"
        $user = "user root;\n";
    }

    open my $out, '>', $ConfFile or bail_out("Can't write $ConfFile: $!\n");
    print $out <<_EOC_;
worker_processes  $Workers;
daemon on;
master_process $MasterProcessEnabled;
error_log $ErrLogFile $LogLevel;
pid       $PidFile;
$env
$main_config

http {
    access_log $AccLogFile;$temp

    default_type text/plain;
    keepalive_timeout  68000ms;

$http_config

    server {
        listen          $ServerPort;
        server_name     '$quoted_name';

        client_max_body_size 30M;

        # Begin preamble config...
$ConfigPreamble
        # End preamble config...

        # Begin test case config...
$config
        # End test case config.

$root_location    }
$ver_server}

$post_main_config

events {
    accept_mutex off;
    worker_connections  $WorkerConnections;
}
$user
_EOC_
    close $out;
}

sub nginx_command () {
    return "$NginxBinary -e $ErrLogFile -p $ServRoot/ -c $ConfFile";
}

# stops the nginx this run started: QUIT, then TERM and KILL if it hangs
sub stop_nginx ($) {
    my $name = shift;

    my $pid = get_pid_from_pidfile($name);

    if (!is_running($pid)) {
        unlink $PidFile;
        return;
    }

    kill SIGQUIT, $pid;

    my $left = $Timeout;
    while ($left > 0 && is_running($pid)) {
        waitpid($pid, WNOHANG);
        sleep 0.02;
        $left -= 0.02;
    }

    for my $sig (SIGTERM, SIGKILL) {
        last if !is_running($pid);
        warn "$name - nginx $pid did not exit in time, sending signal $sig\n";
        kill $sig, $pid;
        sleep 0.2;
    }

    unlink $PidFile;
}

# the pids of the master's worker processes (Linux /proc; none where it
# cannot be read)
sub worker_pids ($) {
    my $pid = shift;
    my @pids;

    for my $f (glob("/proc/$pid/task/*/children")) {
        open my $in, '<', $f or next;
        push @pids, split ' ', (<$in> // '');
        close $in;
    }

    return grep {
        open my $in, '<', "/proc/$_/cmdline";
        defined $in && (<$in> // '') =~ /worker process/;
    } @pids;
}

# reloads the running nginx with the new configuration (TEST_NGINX_USE_HUP)
# and waits until a request is answered by the new configuration, then
# until the old workers are gone (until then an old worker that has not
# yet closed its listening socket may still take the block's request)
sub reload_nginx ($$) {
    my ($name, $pid) = @_;
    my @old = worker_pids($pid);

    kill SIGUSR1, $pid;
    sleep $Sleep;
    kill SIGHUP, $pid or return 0;
    sleep $Sleep * 3;

    my $deadline = time + 10;
    my $matched = 0;

    while (time < $deadline) {
        my $got = http_get_ver();

        if (defined $got && $got eq $ConfigVersion) {
            next if ++$matched < 3;

            while (time < $deadline && grep { kill 0, $_ } @old) {
                sleep 0.05;
            }

            return 1;
        }

        $matched = 0;
        sleep 0.05;
    }

    Test::More::fail("$name - failed to reload the configuration");
    return 1;
}

sub http_get_ver () {
    my $sock = IO::Socket::INET->new(PeerAddr => $ServerAddr,
                                     PeerPort => $ServerPort,
                                     Proto => 'tcp', Timeout => 1)
        or return undef;

    print $sock "GET /ver HTTP/1.0\r\nHost: Test-Nginx\r\n\r\n";
    my $resp = do { local $/; <$sock> };
    close $sock;

    return undef if !defined $resp || $resp !~ /\r\n\r\n(.*)\z/s;
    return $1;
}

sub gen_config_version () {
    return join '', map { ('a' .. 'z')[int rand 26] } 1 .. 10;
}

sub run_tests () {
    $ENV{TEST_NGINX_SERVER_PORT} = $ServerPort
        if !defined $ENV{TEST_NGINX_SERVER_PORT};

    my @blocks = Test::Base::blocks();
    @blocks = shuffle @blocks if !$NoShuffle;

    for my $block (@blocks) {
        $_->($block) for @BlockPreprocessors;

        $block->set_value("name", "$0 " . $block->name);
        run_test($block);
        $_->($block) for @TestCleanupHandlers;
    }

    cleanup();
}

# starts nginx on the block's configuration; for must_die blocks checks
# that it fails instead and returns 0 (nothing left to request)
sub start_nginx ($$) {
    my ($block, $config) = @_;

    my $name = $block->name;
    my $must_die = $block->must_die;

    my $pid = get_pid_from_pidfile($name);

    if (is_running($pid)) {
        if ($UseHup && !defined $must_die && !$FirstTime) {
            setup_server_root();
            write_config_file($block, $config);
            $FirstTime = 0;
            return 1 if reload_nginx($name, $pid);
        }

        stop_nginx($name);
    }

    setup_server_root();
    write_config_file($block, $config);
    $FirstTime = 0;

    my $cmd = nginx_command();
    $cmd .= " > /dev/null";
    $cmd .= " 2> /dev/null" if defined $block->suppress_stderr;

    if (defined $must_die) {
        $ErrLogFilePos = 0;

        for my $i (0 .. $RepeatEach - 1) {
            system($cmd);
            my $status = $?;
            my $code = $status >> 8;

            if ($status == -1) {
                Test::More::fail("$name - failed to execute the nginx "
                                 . "command line");

            } elsif ($status & 127) {

                # stricter than the original, which passes a crash without
                # a core dump as a death
                Test::More::fail("$name - nginx was killed by signal "
                                 . ($status & 127));

            } elsif (looks_like_number($must_die)) {
                Test::More::is($must_die, $code,
                               "$name - die with the expected exit code");

            } else {
                Test::More::isnt($status, 0, "$name - die as expected");
            }

            $CheckErrorLog->($block, undef, $i, 0);

            if ($status == 0) {
                warn "WARNING: $name - nginx must die but it does not; "
                     . "killing it (req $i)\n";
                for (1 .. 20) {
                    last if -f $PidFile;
                    sleep $Sleep;
                }
                stop_nginx($name);
            }
        }

        return 0;
    }

    my $waited = 0;
    for (my $i = 1; ; $i++) {
        $ErrLogFilePos = 0;
        system($cmd);
        last if $? == 0;

        # a previous nginx may still hold the port for a moment
        my $delay = $i * 0.1 > 1 ? 1 : $i * 0.1;
        $waited += $delay;

        if ($waited >= 5) {
            my $log = '';
            if (open my $in, '<', $ErrLogFile) {
                $log = join '', (<$in>)[-5 .. -1];
            }
            bail_out("$name - Cannot start nginx using command \"$cmd\" "
                     . "(status code $?).\n$log");
        }

        sleep $delay;
    }

    sleep $Sleep;

    return 1;
}

sub run_test ($) {
    my $block = shift;

    return if defined $block->SKIP;

    my $name = $block->name;
    my $config = expand_env_in_text($block->config, $name);

    local $LogLevel = $block->log_level if $block->log_level;
    local $UseHup = defined $block->must_die ? undef : $UseHup;
    local $MasterProcessEnabled = $UseHup ? 'on' : $MasterProcessEnabled;

    # like the original: a block without "--- config" runs its requests
    # on the nginx of the previous block, whatever its other sections say

    my $restart;

    if (!defined $config) {
        bail_out("$name - No '--- config' section specified and could "
                 . "not get previous one.") if !defined $PrevConfig;

    } else {
        $restart = $ForceRestart || !defined $PrevConfig
                   || $config ne $PrevConfig;
        $PrevConfig = $config;
    }

    if ($restart) {
        $ConfigVersion = gen_config_version() if $UseHup;
        return if !start_nginx($block, $config);
    }

    $ErrLogFilePos = 0;

    for my $i (0 .. $RepeatEach - 1) {
        $RunTestHelper->($block, $i);
    }
}

sub cleanup () {
    $_->() for @CleanupHandlers;
    @CleanupHandlers = ();

    stop_nginx('cleanup') if !$ENV{TEST_NGINX_NO_CLEAN};
}

END {
    local $?;
    cleanup();
}

1;
