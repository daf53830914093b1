package VLMTest;

# Helpers of the plain Perl suites (t/006..t/009) that need more
# orchestration than Test::Nginx::Socket blocks express: an nginx of their
# own under t/servroot-NAME serving the tiny model of tests/fixtures/serving,
# HTTP/1.1 requests (whole, streamed, or abandoned half way), Server-Sent
# Events, /metrics and /health, the engine process, and small images (PNG
# made here, a JPEG from t/data).

use strict;
use warnings;

use Cwd qw(abs_path);
use Compress::Zlib ();
use Encode ();
use Exporter 'import';
use File::Copy ();
use File::Path qw(make_path remove_tree);
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use MIME::Base64 qw(encode_base64);
use POSIX qw(WNOHANG);
use Test::More ();
use Time::HiRes qw(sleep time);

our @EXPORT = qw(
    vlm_start vlm_stop vlm_request vlm_post_json vlm_sse vlm_metrics
    vlm_health vlm_wait_idle vlm_wait_ready vlm_engine_pids vlm_png
    vlm_wait_pools
    vlm_jpeg vlm_data_url vlm_json vlm_chat_body vlm_open_stream
    vlm_read_some vlm_prereqs vlm_root vlm_reload vlm_stream_ok vlm_secs
    vlm_engine_arg vlm_reload_engine vlm_answer_ok vlm_port vlm_cuda_engine
    vlm_cudaemu_engine vlm_sdk_checks vlm_model_with_template
    vlm_photo_served vlm_alive
);

my $ROOT = abs_path(__FILE__ . '/../../..');

our $JSON = JSON::PP->new->utf8(1)->canonical(1)->allow_nonref(1);

sub vlm_root () { $ROOT }

# a wait of $secs seconds, times VLM_TIME_SCALE: a sanitizer build serves
# several times slower (make asan-nginx sets it), while what a test
# checks stays the same
sub vlm_secs ($) {
    my ($secs) = @_;

    return $secs * ($ENV{VLM_TIME_SCALE} || 1);
}

sub vlm_json ($) { $JSON->decode(shift) }


# the port $offset above TEST_NGINX_PORT (1994 without it): a suite's
# every listener derives from it, so that two runs on one machine with
# different TEST_NGINX_PORT do not collide
sub vlm_port ($) {
    my ($offset) = @_;

    return ($ENV{TEST_NGINX_PORT} || 1994) + $offset;
}


# skips the whole script when the module or the engine is not built
sub vlm_prereqs () {
    my $build = $ENV{VLM_BUILD} || "$ROOT/build";
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES} || "$build/ngx_http_vlm_module.so";

    for my $f ($mod, "$build/vlm-engine") {
        next if -e $f;
        Test::More::plan(skip_all => "$f is not built (make all)");
    }

    return $build;
}


# an engine built with the CUDA backend: the build's own, else make cuda's
# (VLM_CUDA_BUILD, build-cuda/: the CPU build has none); undef and what
# the last one looked at said, when there is none
sub vlm_cuda_engine ($) {
    my ($build) = @_;
    my $said = '';

    for my $dir ($build, $ENV{VLM_CUDA_BUILD} || "$ROOT/build-cuda") {
        my $engine = "$dir/vlm-engine";
        next if !-x $engine;

        $said = `$engine --features 2>/dev/null` // '';
        return ($engine, $said) if $said =~ /\bcuda\b/;
    }

    return (undef, $said);
}


# the engine of make test-cuda-emu: the CUDA backend on the emulated
# device of tests/cudaemu, in the folder VLM_CUDAEMU_BUILD names (make
# test-cuda-emu sets it, make prove does not, so that make test runs the
# emulated suites once), which its --features says ("cudaemu"); undef and
# why when there is none
sub vlm_cudaemu_engine () {
    return (undef, 'VLM_CUDAEMU_BUILD is not set') if !$ENV{VLM_CUDAEMU_BUILD};

    my $engine = "$ENV{VLM_CUDAEMU_BUILD}/vlm-engine";

    return (undef, "$engine is not built") if !-x $engine;

    my $said = `$engine --features 2>/dev/null` // '';
    chomp $said;

    return ($said =~ /\bcudaemu\b/ ? $engine : undef, $said);
}


# starts nginx; options: name, port, listen (more listen parameters),
# zone (its size, 16m by default), workers, master (on|off), main_config, http_config, locations (extra
# server text), model, wait, user (the workers' "user": root's own by
# default when run as root), threads (vlm_engine_threads, 1 by default)
sub vlm_start (%) {
    my %o = @_;

    my $build = $ENV{VLM_BUILD} || "$ROOT/build";
    my $name = $o{name} or die "vlm_start needs a name";
    my $port = $o{port} || vlm_port(0);
    my $prefix = "$ROOT/t/servroot-$name";
    my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES}
              || "$build/ngx_http_vlm_module.so";
    my $model = $o{model} || "$ROOT/tests/fixtures/serving";
    my $workers = $o{workers} || 1;
    my $master = $o{master} || 'on';
    my $main = $o{main_config} || '';
    my $http = $o{http_config} || '';
    my $extra = $o{locations} || '';
    my $listen = $o{listen} || '';
    my $zone = $o{zone} || '16m';
    my $threads = $o{threads} || 1;
    my $user = $o{user} ? "user $o{user};" : $> == 0 ? 'user root;' : '';

    remove_tree($prefix);
    make_path("$prefix/logs", "$prefix/conf");

    my $conf = <<"_EOC_";
load_module $mod;
worker_processes $workers;
daemon on;
master_process $master;
error_log $prefix/logs/error.log info;
pid $prefix/logs/nginx.pid;
thread_pool vlm threads=2;
$user
$main

events {
    worker_connections 256;
}

http {
    access_log $prefix/logs/access.log;
    client_body_temp_path $prefix/client_body_temp;
    proxy_temp_path $prefix/proxy_temp;
    fastcgi_temp_path $prefix/fastcgi_temp;
    uwsgi_temp_path $prefix/uwsgi_temp;
    scgi_temp_path $prefix/scgi_temp;
    client_max_body_size 30m;

    vlm_model $model;
    vlm_thread_pool vlm;
    vlm_engine_threads $threads;
    vlm_zone vlm size=$zone;
$http

    server {
        listen 127.0.0.1:$port $listen;

        location = /v1/chat/completions { vlm_chat; }
        location /v1/models { vlm_models; }
        location = /metrics { vlm_metrics; }
        location = /health { vlm_health; }
$extra
    }
}
_EOC_

    open my $out, '>', "$prefix/conf/nginx.conf" or die "$prefix: $!";
    print $out $conf;
    close $out;

    my $srv = {
        name => $name, port => $port, prefix => $prefix, nginx => $nginx,
        conf => "$prefix/conf/nginx.conf", log_pos => 0,
    };

    system("$nginx -p $prefix/ -c $srv->{conf} -e $prefix/logs/error.log")
        == 0 or die "cannot start nginx in $prefix: see its error.log";

    for (1 .. 100) {
        last if -s "$prefix/logs/nginx.pid";
        sleep 0.05;
    }

    $srv->{pid} = master_pid($srv);

    if (!defined $o{wait} || $o{wait}) {
        vlm_wait_ready($srv, 30)
            or die "the engine of $name is not ready after 30 s";
    }

    return $srv;
}


# edits the configuration (replaces $from by $to) and reloads with HUP
sub vlm_reload ($;$$) {
    my ($srv, $from, $to) = @_;

    if (defined $from) {
        open my $in, '<', $srv->{conf} or die "$srv->{conf}: $!";
        my $conf = do { local $/; <$in> };
        close $in;

        $conf =~ s/\Q$from\E/$to/ or die "\"$from\" is not in the conf";

        open my $out, '>', $srv->{conf} or die "$srv->{conf}: $!";
        print $out $conf;
        close $out;
    }

    kill 'HUP', $srv->{pid};
}


sub master_pid ($) {
    my $srv = shift;

    open my $in, '<', "$srv->{prefix}/logs/nginx.pid" or return undef;
    my $pid = <$in>;
    close $in;
    chomp $pid if defined $pid;

    return $pid;
}


# the vlm-engine processes this nginx started (by its master's pid)
sub vlm_engine_pids ($) {
    my $srv = shift;
    my @pids;

    my $master = $srv->{pid};
    return () if !$master;

    for my $d (glob "/proc/[0-9]*") {
        open my $in, '<', "$d/cmdline" or next;
        local $/;
        my $cmd = <$in>;
        close $in;
        next if !defined $cmd;

        my @argv = split /\0/, $cmd;
        next if !@argv || $argv[0] !~ m{vlm-engine$};

        for my $i (0 .. $#argv - 1) {
            if ($argv[$i] eq '--master-pid' && $argv[$i + 1] eq $master) {
                push @pids, ($d =~ m{(\d+)$})[0];
            }
        }
    }

    return @pids;
}


# the value that follows $flag on the command line of the one engine
# (undef: not one engine; '': it has no such option)
sub vlm_engine_arg ($$) {
    my ($srv, $flag) = @_;

    my @pids = vlm_engine_pids($srv);
    return undef if @pids != 1;

    open my $in, '<', "/proc/$pids[0]/cmdline" or return undef;
    local $/;
    my @argv = split /\0/, <$in>;
    close $in;

    for my $i (0 .. $#argv - 1) {
        return $argv[$i + 1] if $argv[$i] eq $flag;
    }

    return '';
}


# reloads with $from replaced by $to (an engine setting): checks that
# another engine serves
sub vlm_reload_engine ($$$$) {
    my ($srv, $from, $to, $what) = @_;

    my @old = vlm_engine_pids($srv);
    vlm_reload($srv, $from, $to);

    my @new;
    for (1 .. 200) {
        @new = vlm_engine_pids($srv);
        last if @new == 1 && $new[0] != $old[0]
                && vlm_health($srv)->{_status} == 200;
        sleep 0.1;
    }

    Test::More::isnt($new[0], $old[0],
                     "$what: another setting, another engine");
}


# a greedy answer of a few tokens: 200 and tokens generated
sub vlm_answer_ok ($$) {
    my ($srv, $what) = @_;

    my $res = vlm_post_json($srv, { %{ vlm_chat_body('hi') },
                                    temperature => 0, max_tokens => 4 });
    my $j = eval { vlm_json($res->{body}) };

    Test::More::is($res->{status}, 200, "$what: 200")
        or Test::More::diag($res->{raw});
    Test::More::ok($j && $j->{usage}{completion_tokens} > 0,
                   "$what: tokens generated");
}


# whether $pid has not exited yet.  kill(pid, 0) succeeds for a zombie
# too, a process that has exited and waits for its parent to reap it:
# the parent of a daemon (nginx's master, and its engines once it is
# gone) is init, which in some sandboxes reaps about once a second, so
# every stop waited for that.  Without /proc, kill's word.
sub vlm_alive ($) {
    my $pid = shift;

    return 0 if !kill 0, $pid;

    open my $in, '<', "/proc/$pid/stat" or return !-e '/proc/self/stat';
    my $stat = <$in> // '';
    close $in;

    # "pid (comm) state ...", comm as the process named itself
    my ($state) = $stat =~ /^.*\) (\S)/s;

    return !defined $state || $state ne 'Z';
}


# stops nginx (QUIT, then TERM, then KILL) and removes its prefix unless
# a test failed; returns the engine pids that were still there 5 s later
# (none expected)
sub vlm_stop ($) {
    my $srv = shift;

    my $pid = $srv->{pid};
    return () if !$pid;

    kill 'QUIT', $pid;

    for my $i (1 .. 200) {
        last if !vlm_alive($pid);
        kill 'TERM', $pid if $i == 100;
        sleep 0.05;
    }

    kill 'KILL', $pid if vlm_alive($pid);

    my @left;

    for (1 .. 100) {
        @left = vlm_engine_pids($srv);
        last if !@left;
        sleep 0.05;
    }

    kill 'KILL', @left if @left;
    delete $srv->{pid};

    # the prefix stays for a look when something failed
    remove_tree($srv->{prefix})
        if !$ENV{TEST_NGINX_NO_CLEAN} && !$srv->{keep} && !@left
           && Test::More->builder->is_passing;

    return @left;
}


# the error log lines written since the last call
sub error_log_since ($) {
    my $srv = shift;

    open my $in, '<', "$srv->{prefix}/logs/error.log" or return ();
    seek $in, $srv->{log_pos}, 0;
    my @lines = <$in>;
    $srv->{log_pos} = tell $in;
    close $in;

    return @lines;
}


# fails for each [alert], [crit] or [emerg] line (and the given extra
# patterns) written since the last check; a first argument { allow =>
# [patterns] } excuses the lines that match one of them
sub check_log ($$;@) {
    my ($srv, $what, @pats) = @_;

    my $allow = @pats && ref $pats[0] eq 'HASH' ? shift(@pats)->{allow} : [];

    my @bad = grep {
        my $l = $_;
        ($l =~ /\[(alert|crit|emerg)\]/ || grep { $l =~ $_ } @pats)
        && !grep { $l =~ $_ } @$allow
    } error_log_since($srv);

    Test::More::ok(!@bad, "$what: no alert, crit or emerg in error.log")
        or Test::More::diag(join '', @bad[0 .. ($#bad > 9 ? 9 : $#bad)]);
}


sub connect_to ($) {
    my $srv = shift;

    for my $try (1 .. 50) {
        my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                         PeerPort => $srv->{port},
                                         Proto => 'tcp', Timeout => 5);
        return $sock if $sock;
        sleep 0.05;
    }

    die "cannot connect to 127.0.0.1:$srv->{port}: $!";
}


sub request_text ($$$;$) {
    my ($method, $path, $body, $headers) = @_;

    my $req = "$method $path HTTP/1.1\r\nHost: localhost\r\n"
              . "Connection: close\r\n";

    for my $h (@{ $headers || [] }) {
        $req .= "$h\r\n";
    }

    if (defined $body) {
        $req .= "Content-Type: application/json\r\n"
                if !grep { /^content-type:/i } @{ $headers || [] };
        $req .= "Content-Length: " . length($body) . "\r\n";
    }

    return $req . "\r\n" . (defined $body ? $body : '');
}


sub parse_response ($) {
    my $raw = shift;

    my %res = (status => 0, headers => {}, body => '', raw => $raw);
    my ($head, $body) = split /\r\n\r\n/, $raw, 2;
    return \%res if !defined $head;

    $body = '' if !defined $body;
    my ($line, @lines) = split /\r\n/, $head;
    ($res{status}) = $line =~ m{^HTTP/1\.[01] (\d+)};

    for my $l (@lines) {
        my ($k, $v) = split /:\s*/, $l, 2;
        $res{headers}{lc $k} = $v;
    }

    if (($res{headers}{'transfer-encoding'} || '') eq 'chunked') {
        my $out = '';

        while ($body =~ s/^([0-9a-fA-F]+)\r\n//) {
            my $n = hex $1;
            last if $n == 0;
            $out .= substr($body, 0, $n);
            substr($body, 0, $n + 2) = '';
        }

        $body = $out;
    }

    $res{body} = $body;

    return \%res;
}


# one request, the whole response: { status, headers, body }
sub vlm_request ($$$;$$) {
    my ($srv, $method, $path, $body, $headers) = @_;

    my $sock = connect_to($srv);
    local $SIG{PIPE} = 'IGNORE';

    print $sock request_text($method, $path, $body, $headers);

    my $raw = '';
    my $sel = IO::Select->new($sock);
    my $deadline = time + vlm_secs($srv->{timeout} || 60);

    while (time < $deadline && $sel->can_read($deadline - time)) {
        my $n = sysread($sock, my $buf, 65536);
        last if !$n;
        $raw .= $buf;
    }

    close $sock;

    return parse_response($raw);
}


# a structure as JSON text (canonical, so tests may edit it)
sub vlm_json_text ($) {
    return $JSON->encode(shift);
}


sub vlm_post_json ($$;$) {
    my ($srv, $body, $headers) = @_;

    $body = $JSON->encode($body) if ref $body;

    return vlm_request($srv, 'POST', '/v1/chat/completions', $body,
                       $headers);
}


# a chat request body: text, then images (data: URLs)
sub vlm_chat_body ($@) {
    my ($text, @urls) = @_;

    my @content = map {
        { type => 'image_url', image_url => { url => $_ } }
    } @urls;

    push @content, { type => 'text', text => $text };

    return {
        model => 'serving',
        messages => [ { role => 'user',
                        content => @urls ? \@content : $text } ],
    };
}


# the events of an SSE body: decoded JSON objects, and '[DONE]'
sub vlm_sse ($) {
    my $body = shift;
    my @events;

    for my $ev (split /\n\n/, $body) {
        next if $ev !~ /\S/;

        if ($ev !~ /^data: (.*)\z/s) {
            push @events, { _bad => $ev };
            next;
        }

        my $data = $1;
        push @events, $data eq '[DONE]' ? '[DONE]'
                                        : (eval { vlm_json($data) }
                                           || { _bad => $data });
    }

    return @events;
}


# reads an open stream to its end (30 s at most) and checks that it ends
# with [DONE], a finish_reason ($reason, when given) and no error event
sub vlm_stream_ok ($$;$) {
    my ($st, $what, $reason) = @_;

    vlm_read_some($st, 30);
    close $st->{sock};

    my @ev = vlm_sse(parse_response($st->{raw})->{body});
    my ($fin) = grep { ref $_ && $_->{choices} && @{ $_->{choices} }
                       && $_->{choices}[0]{finish_reason} } @ev;

    Test::More::is($ev[-1], '[DONE]', "$what: ends with [DONE]");
    Test::More::ok($fin && (!defined $reason
                            || $fin->{choices}[0]{finish_reason} eq $reason),
                   "$what: completed" . ($reason ? " ($reason)" : ''));
    Test::More::ok(!grep({ ref $_ && $_->{error} } @ev),
                   "$what: no error event")
        or Test::More::diag(substr($st->{raw}, -400));
}


# /metrics as { "name{labels}" => value }, the model_name label left out
# (_unlabeled counts the series without it)
sub vlm_metrics ($) {
    my $srv = shift;

    my $res = vlm_request($srv, 'GET', '/metrics');
    my %m;

    for my $l (split /\n/, $res->{body}) {
        next if $l =~ /^#/;
        my ($k, $v) = $l =~ /^(\S+) (\S+)$/ or next;

        # every series has model_name first; the keys go without it
        $k =~ s/^([^{]+)\{model_name="(?:[^"\\]|\\.)*"(?:,|\}$)/$1\{/
            or $m{_unlabeled}++;
        $k =~ s/\{$//;
        $m{$k} = $v;
    }

    return \%m;
}


sub vlm_health ($) {
    my $srv = shift;

    my $res = vlm_request($srv, 'GET', '/health');

    my $h = eval { vlm_json($res->{body}) } || {};

    return { _status => $res->{status}, %$h };
}


sub vlm_wait_ready ($;$) {
    my ($srv, $secs) = @_;

    my $deadline = time + ($secs || 10);

    while (time < $deadline) {
        my $h = eval { vlm_health($srv) };
        return 1 if $h && $h->{_status} == 200;
        sleep 0.1;
    }

    return 0;
}


# waits until every request slot and arena byte is back; returns the
# last health zone object (slots_used, arena_used)
sub vlm_wait_idle ($;$) {
    my ($srv, $secs) = @_;

    my $deadline = time + ($secs || 3);
    my $zone;

    while (1) {
        my $h = vlm_health($srv);
        $zone = $h->{zone} || {};
        last if defined $zone->{slots_used} && $zone->{slots_used} == 0
                && $zone->{arena_used} == 0;
        last if time > $deadline;
        sleep 0.05;
    }

    return $zone;
}


# /metrics once the engine's pools named (kv_blocks and sequences by
# default) are idle, or after 4 s: the engine lets go of a sequence a
# moment after its request's slot is done
sub vlm_wait_pools ($;@) {
    my ($srv, @pools) = @_;
    my $m;

    @pools = ('pool="kv_blocks",unit="blocks"',
              'pool="sequences",unit="slots"') if !@pools;

    for (1 .. 40) {
        $m = vlm_metrics($srv);
        last if !grep { $m->{"vlm_pool_used{$_}"} } @pools;
        sleep 0.1;
    }

    return $m;
}


# a request whose response is read piece by piece (vlm_read_some)
sub vlm_open_stream ($$) {
    my ($srv, $body) = @_;

    $body = $JSON->encode($body) if ref $body;

    my $sock = connect_to($srv);
    local $SIG{PIPE} = 'IGNORE';

    print $sock request_text('POST', '/v1/chat/completions', $body);

    return { sock => $sock, raw => '' };
}


# reads what arrives within $secs (or until $until matches the raw
# response); returns 0 once the server closed the connection, and, with
# $until, when the time ran out before it matched
sub vlm_read_some ($$;$) {
    my ($st, $secs, $until) = @_;

    my $sel = IO::Select->new($st->{sock});
    my $deadline = time + vlm_secs($secs);

    while (time < $deadline) {
        return 1 if defined $until && $st->{raw} =~ $until;
        last if !$sel->can_read($deadline - time);

        my $n = sysread($st->{sock}, my $buf, 65536);
        return 0 if !$n;
        $st->{raw} .= $buf;
    }

    # out of time: true only where what was waited for came
    return defined $until ? ($st->{raw} =~ $until ? 1 : 0) : 1;
}


# an RGB PNG of w x h: a gradient that depends on $seed
sub vlm_png ($$;$) {
    my ($w, $h, $seed) = @_;

    $seed ||= 0;
    my $raw = '';

    for my $y (0 .. $h - 1) {
        $raw .= "\0";
        for my $x (0 .. $w - 1) {
            $raw .= pack 'C3', ($x * 7 + $seed) & 255, ($y * 5) & 255,
                               ($x + $y + 3 * $seed) & 255;
        }
    }

    my $chunk = sub {
        my ($type, $data) = @_;
        return pack('N', length $data) . $type . $data
               . pack('N', Compress::Zlib::crc32($type . $data));
    };

    return "\x89PNG\r\n\x1a\n"
           . $chunk->('IHDR', pack('NNCCCCC', $w, $h, 8, 2, 0, 0, 0))
           . $chunk->('IDAT', Compress::Zlib::compress($raw))
           . $chunk->('IEND', '');
}


# the committed JPEG fixture (t/data/image-100x60.jpg)
sub vlm_jpeg () {
    open my $in, '<:raw', "$ROOT/t/data/image-100x60.jpg" or die $!;
    local $/;
    my $data = <$in>;
    close $in;

    return $data;
}


sub vlm_data_url ($$) {
    my ($mime, $data) = @_;

    (my $b64 = encode_base64($data)) =~ s/\s+//g;

    return "data:$mime;base64,$b64";
}


# runs a Python script of tests/sdk/ (its argv after the interpreter),
# each "ok - name" or "not ok - name" line it prints a test; then that it
# ran to its end and printed at least $min checks
sub vlm_sdk_checks ($@) {
    my ($min, @argv) = @_;

    open my $py, '-|', @argv or die "cannot run $argv[0]: $!";

    my $n = 0;

    while (my $line = <$py>) {
        chomp $line;

        if ($line =~ /^(not )?ok - (.*)$/) {
            Test::More::ok(!$1, "sdk: $2");
            $n++;

        } else {
            Test::More::diag($line);
        }
    }

    close $py;
    Test::More::is($?, 0, 'sdk: the script ran to its end');
    Test::More::ok($n >= $min, "sdk: $n checks");
}


# a copy of the serving fixture in $dir (made here) with $template as its
# chat_template.jinja: a model that brings its own chat template
sub vlm_model_with_template ($$) {
    my ($dir, $template) = @_;

    mkdir $dir or die "$dir: $!";
    chmod 0755, $dir;

    for my $f (glob "$ROOT/tests/fixtures/serving/*") {
        File::Copy::copy($f, $dir) or die "cannot copy $f: $!";
    }

    open my $out, '>:raw', "$dir/chat_template.jinja" or die "$dir: $!";
    print $out $template;
    close $out;

    return $dir;
}



# A $o{w}x$o{h} PNG (seed $o{seed}) at Qwen2-VL's published max_pixels
# (12845056) on the serving fixture, its config.json's
# max_position_embeddings set to $o{max_pos} where given, served by a
# server named $o{name} with a zone of $o{zone} (vlm_max_tokens
# $o{max_tokens}, 4000 by default): the default vision
# budget is what max_pixels needs (65536), a 200, $o{tokens} image tokens
# and the vision tags counted as the processor counts them, the greedy
# answer vlm-cli run gives on the same picture and prompt; the request's
# time and the engine's peak RSS printed (diag).  Returns the server, the
# answer's JSON and the prompt.
sub vlm_photo_served (%) {
    my %o = @_;

    my $build = $ENV{VLM_BUILD} || "$ROOT/build";
    my $fixture = "$ROOT/tests/fixtures/serving";
    my $tmp = File::Temp::tempdir("vlm-photo-XXXXXX", TMPDIR => 1,
                                  CLEANUP => 1);
    my $model = "$tmp/model";
    my %edit = ('preprocessor_config.json' => [qr/"max_pixels": \d+/,
                                               '"max_pixels": 12845056']);

    $edit{'config.json'} = [qr/"max_position_embeddings": \d+/,
                            "\"max_position_embeddings\": $o{max_pos}"]
        if $o{max_pos};

    chmod 0755, $tmp;
    mkdir $model or die;
    chmod 0755, $model;

    for my $f (glob "$fixture/*") {
        my ($name) = $f =~ m{([^/]+)$};

        if (!$edit{$name}) {
            symlink($f, "$model/$name") or die "$f: $!";
            next;
        }

        open my $in, '<', $f or die;
        local $/;
        my $text = <$in>;
        $text =~ s/$edit{$name}[0]/$edit{$name}[1]/ or die $name;
        open my $out, '>', "$model/$name" or die;
        print $out $text;
    }

    my $png = vlm_png($o{w}, $o{h}, $o{seed});
    my $file = "$tmp/photo.png";
    {
        open my $out, '>:raw', $file or die;
        print $out $png;
    }

    my $srv = vlm_start(name => $o{name}, model => $model, zone => $o{zone},
                        http_config => "vlm_served_model_name serving;\n"
                                       . "    vlm_max_tokens "
                                       . ($o{max_tokens} || 4000) . ";");

    Test::More::is(vlm_engine_arg($srv, '--max-image-patches'), 65536,
                   'the vision budget: what max_pixels needs');

    my $prompt = 'Describe the picture.';
    my $t0 = time;
    my $res = vlm_post_json($srv, {
        %{ vlm_chat_body($prompt, vlm_data_url('image/png', $png)) },
        max_tokens => 8, temperature => 0 });
    my $took = time - $t0;

    Test::More::is($res->{status}, 200, "a $o{w}x$o{h} image is served")
        or Test::More::diag($res->{body});
    my $j = vlm_json($res->{body});

    my $text = vlm_post_json($srv, { %{ vlm_chat_body($prompt) },
                                     max_tokens => 1, temperature => 0 });
    my $n_text = vlm_json($text->{body})->{usage}{prompt_tokens};
    Test::More::is($j->{usage}{prompt_tokens} - $n_text, $o{tokens} + 2,
                   "$o{tokens} image tokens and the vision tags");

    my ($engine) = vlm_engine_pids($srv);
    my $hwm = 0;
    if (open my $st, '<', "/proc/$engine/status") {
        while (<$st>) {
            $hwm = $1 if /^VmHWM:\s+(\d+)/;
        }
    }
    Test::More::diag(sprintf("%dx%d image: %.2f s for the request, engine "
                             . "peak RSS %.1f MB", $o{w}, $o{h}, $took,
                             $hwm / 1024));

    # the same picture and prompt through vlm-cli run
    $t0 = time;
    my $want = `$build/vlm-cli run --model $model --image $file --threads 1 --temperature 0 --max-tokens 8 --prompt '$prompt' 2>&1`;
    Test::More::is($?, 0, 'vlm-cli run answers') or Test::More::diag($want);
    Test::More::diag(sprintf("vlm-cli run on it: %.2f s", time - $t0));
    $want = Encode::decode('UTF-8', $want);
    $want =~ s/\n\z//;
    Test::More::is($j->{choices}[0]{message}{content}, $want,
                   'the answer vlm-cli run gives on the same picture');

    check_log($srv, $o{name});

    return ($srv, $j, $prompt);
}

1;
