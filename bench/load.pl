#!/usr/bin/perl
# A load test of the whole serving path: starts nginx (a master, two
# workers) with the tiny model of tests/fixtures/serving, sends N requests
# at concurrency C (text, data: URL images in PNG and JPEG, streaming,
# clients that disconnect early while streaming or right after sending),
# and checks that memory stays flat: the engine's RSS (vlm_engine_rss_bytes)
# and the nginx workers' private RSS after the first --warmup (300)
# requests and at the end may differ by at most --rss-growth bytes, and
# every pool's used value is 0 at the end.
#
#   perl -It/lib bench/load.pl [--requests 1000] [--concurrency 16]
#                              [--port 1994] [--rss-growth 1048576]
#                              [--warmup 300]
#                              [--workload mixed|images] [--model DIR]
#                              [--images 7] [--image-size 1120x700]
#                              [--image-cache SIZE]
#                              [--tensor-parallel N]
#                              [--output-tokens N] [--backend cpu|cuda]
#                              [--directive 'vlm_... value']...
#
# --workload images is the image benchmark of VLM serving reports: every
# request carries --images JPEG pictures of --image-size (shape scenes
# drawn by tools/shapes_dataset.py) and asks about them, half of them
# streamed; served by models/default unless --model says otherwise.
# --output-tokens N asks N tokens of each (max_tokens and min_tokens: a
# random checkpoint's early end would flatter the rate; default 8, no
# min_tokens); --backend cuda serves with vlm_backend cuda (VLM_BUILD's
# engine then a CUDA build's), --directive adds an http-level directive
# (vlm_max_model_len 8192, for seven pictures' tokens).
#
# --tensor-parallel N serves with an engine group of N ranks (rank r on
# CPU r % the CPUs there are): each rank's private RSS (RssAnon) must stay
# flat like the engine's, and at the end the feature pool must hold only
# what the image cache keeps and its host staging area nothing.
#
# Exits 0 when every check passes.  make load runs it; t/010-load.t runs
# a shorter one.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/lib";

use Getopt::Long qw(GetOptions);
use IO::Select ();
use POSIX qw(_exit);
use Time::HiRes qw(sleep time);
use VLMTest;

my %o = (requests => 1000, concurrency => 16, port => 1994,
         'rss-growth' => 1024 * 1024, warmup => 300, name => 'load',
         workload => 'mixed', images => 7, 'image-size' => '1120x700',
         backend => 'cpu', directive => []);

GetOptions(\%o, 'requests=i', 'concurrency=i', 'port=i', 'rss-growth=i',
           'warmup=i', 'name=s', 'workload=s', 'model=s', 'images=i',
           'image-size=s', 'image-cache=s', 'tensor-parallel=i',
           'output-tokens=i', 'backend=s', 'directive=s@')
    or die "bad options\n";

die "--backend is cpu or cuda\n" if $o{backend} !~ /^(cpu|cuda)$/;
die "--output-tokens is 1 or more\n"
    if defined $o{'output-tokens'} && $o{'output-tokens'} < 1;

my $ncpu = `nproc` + 0 || 1;
my $conf = '';
$conf .= "vlm_image_cache $o{'image-cache'};\n"
    if defined $o{'image-cache'};
$conf .= "vlm_tensor_parallel $o{'tensor-parallel'};\n"
         . "vlm_engine_cpus "
         . join(' ', map { $_ % $ncpu } 0 .. $o{'tensor-parallel'} - 1)
         . ";\n"
    if $o{'tensor-parallel'} && $o{'tensor-parallel'} > 1;
$conf .= "vlm_backend cuda;\n" if $o{backend} eq 'cuda';
$conf .= "$_;\n" for @{ $o{directive} };

die "--workload is mixed or images\n"
    if $o{workload} !~ /^(mixed|images)$/;

$o{model} //= vlm_root() . ($o{workload} eq 'images' ? '/models/default'
                                                     : '/tests/fixtures/serving');
(my $model_name = $o{model}) =~ s{.*/}{};

$| = 1;

my @images = (
    vlm_data_url('image/png', vlm_png(56, 56, 1)),
    vlm_data_url('image/jpeg', vlm_jpeg()),
    vlm_data_url('image/png', vlm_png(120, 80, 7)),
    vlm_data_url('image/png', vlm_png(30, 200, 9)),
);

my @texts = ('Hello!', 'Describe the picture.',
             'Write a haiku about shared memory. ' x 4,
             'What colour is it?');

# the images workload's pictures: JPEGs drawn by the scene generator
my @pictures;

if ($o{workload} eq 'images') {
    my $dir = "/tmp/vlm-load-$$";
    mkdir $dir;
    my @scenes = (['blue triangle top left', 'blue triangle bottom right'],
                  ['red circle center', 'yellow star top right'],
                  ['green square bottom left'],
                  ['purple diamond top', 'orange circle left',
                   'black star bottom right']);
    my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';

    for my $k (0 .. $#scenes) {
        my $file = "$dir/$k.jpg";
        my $draw = join ' ', map { "'$_'" } @{ $scenes[$k] };
        system("$python " . vlm_root() . "/tools/shapes_dataset.py --out "
               . "$file --size $o{'image-size'} --draw $draw >/dev/null") == 0
            or die "tools/shapes_dataset.py could not draw $file\n";
        open my $in, '<:raw', $file or die "$file: $!";
        local $/;
        push @pictures, vlm_data_url('image/jpeg', <$in>);
        close $in;
        unlink $file;
    }

    rmdir $dir;
}


# request $i of the images workload: --images pictures and a question
sub images_request_of {
    my $i = shift;

    my @urls = map { $pictures[($i + $_) % @pictures] } 1 .. $o{images};
    my $body = { %{ vlm_chat_body('How many shapes are there?', @urls) },
                 model => $model_name, max_tokens => 8, temperature => 0 };

    if (defined $o{'output-tokens'}) {
        $body->{max_tokens} = $o{'output-tokens'};
        $body->{min_tokens} = $o{'output-tokens'};
    }

    return ('full', $body) if $i % 2;

    $body->{stream} = JSON::PP::true;

    return ('stream', $body);
}


# request $i: (kind, body); kinds: full, stream, gone-stream, gone-send
sub request_of {
    my $i = shift;

    return images_request_of($i) if $o{workload} eq 'images';

    my $k = $i % 10;
    my $text = $texts[$i % @texts];
    my @urls;

    push @urls, $images[$i % @images] if $k =~ /^[2357]$/;
    push @urls, $images[($i + 1) % @images] if $k == 5;

    my $body = { %{ vlm_chat_body($text, @urls) },
                 max_tokens => 1 + $i % 24,
                 temperature => ($i % 3) * 0.5, seed => $i };

    my $kind = $k =~ /^[0123]$/ ? 'full'
             : $k =~ /^[456]$/ ? 'stream'
             : $k =~ /^[78]$/ ? 'gone-stream'
             : 'gone-send';

    if ($kind ne 'full') {
        $body->{stream} = JSON::PP::true;
        $body->{max_tokens} = 64 if $kind eq 'gone-stream';
    }

    return ($kind, $body);
}


# one request; returns a status word for the tally
sub run_one {
    my ($srv, $i) = @_;

    my ($kind, $body) = request_of($i);

    if ($kind eq 'full') {
        my $res = vlm_post_json($srv, $body);
        return "full-$res->{status}" if $res->{status} != 200;

        my $j = eval { vlm_json($res->{body}) };
        return 'full-badjson' if !$j || !$j->{usage};

        return 'full-ok';
    }

    my $st = vlm_open_stream($srv, $body);

    if ($kind eq 'gone-send') {
        close $st->{sock};
        return 'gone-send';
    }

    if ($kind eq 'gone-stream') {
        vlm_read_some($st, 30, qr/"content":"[^"]+"/);
        close $st->{sock};
        return 'gone-stream';
    }

    vlm_read_some($st, 60);
    close $st->{sock};

    my $res = VLMTest::parse_response($st->{raw});
    return "stream-$res->{status}" if $res->{status} != 200;

    my @ev = vlm_sse($res->{body});
    return 'stream-nodone' if !@ev || $ev[-1] ne '[DONE]';
    return 'stream-error' if grep { ref $_ && $_->{error} } @ev;

    return 'stream-ok';
}


# requests [$from, $to) at the given concurrency; returns the tally
sub run_batch {
    my ($srv, $from, $to, $conc) = @_;

    my (%tally, @kids);

    for my $c (0 .. $conc - 1) {
        pipe my $r, my $w or die "pipe: $!";
        my $pid = fork;
        die "fork: $!" if !defined $pid;

        if ($pid == 0) {
            close $r;
            my %t;

            for (my $i = $from + $c; $i < $to; $i += $conc) {
                my $s = eval { run_one($srv, $i) } || "died: $@";
                $t{$s}++;
            }

            print $w map { "$_\t$t{$_}\n" } keys %t;
            close $w;
            _exit(0);
        }

        close $w;
        push @kids, [$pid, $r];
    }

    for my $k (@kids) {
        my $fh = $k->[1];

        while (my $l = <$fh>) {
            chomp $l;
            my ($s, $n) = split /\t/, $l;
            $tally{$s} += $n;
        }

        waitpid $k->[0], 0;
    }

    return \%tally;
}


# the engine's resident memory by kind, from /proc (informational)
sub rss_detail {
    my $srv = shift;

    my ($pid) = vlm_engine_pids($srv);
    return '' if !$pid || !open my $in, '<', "/proc/$pid/status";

    my %v = map { /^(Rss\w+):\s+(\d+) kB/ ? ($1 => $2) : () } <$in>;

    return join ', ', map { "$_ $v{$_} kB" } sort keys %v;
}


# each engine rank's private resident memory (RssAnon), by rank
sub ranks_rss {
    my $srv = shift;
    my %r;

    for my $pid (vlm_engine_pids($srv)) {
        open my $cmd, '<', "/proc/$pid/cmdline" or next;
        my ($rank) = join(' ', split /\0/, do { local $/; <$cmd> })
                     =~ /--rank (\d+)/;
        open my $in, '<', "/proc/$pid/status" or next;
        my ($anon) = join('', <$in>) =~ /^RssAnon:\s+(\d+) kB/m;
        $r{$rank // 0} = ($anon // 0) * 1024;
    }

    return \%r;
}


# the nginx workers' resident memory, summed (they decode the images):
# (private, shared); the shared part is the pages of the queue segment
# they have touched, which grows up to the zone's size and no further
sub workers_rss {
    my $srv = shift;
    my ($anon, $shmem) = (0, 0);

    for my $dir (glob '/proc/[0-9]*') {
        open my $st, '<', "$dir/stat" or next;
        my $stat = <$st>;
        close $st;

        # pid (comm) state ppid: the master's children
        next if !$stat || $stat !~ /\) \S (\d+)/ || $1 != $srv->{pid};

        open my $cmd, '<', "$dir/cmdline" or next;
        my $line = <$cmd> // '';
        close $cmd;
        next if $line !~ /worker process/;

        open my $in, '<', "$dir/status" or next;
        for (<$in>) {
            $anon += $1 * 1024 if /^RssAnon:\s+(\d+) kB/;
            $shmem += $1 * 1024 if /^RssShmem:\s+(\d+) kB/;
        }
    }

    return ($anon, $shmem);
}


# the engine republishes its RSS and pools every second while it runs;
# waits until the queue is idle and a fresh value is out
sub settle {
    my $srv = shift;

    vlm_wait_idle($srv, 10);
    sleep 1.6;

    return vlm_metrics($srv);
}


my $srv = vlm_start(name => $o{name}, port => $o{port}, workers => 2,
                    model => $o{model},
                    $o{workload} eq 'images' ? (zone => '128m') : (),
                    $conf ne '' ? (http_config => $conf) : ());
$srv->{timeout} = 120;

my $t0 = time;
my %tally;

my $warm = $o{warmup} < $o{requests} ? $o{warmup} : $o{requests};
my $t = run_batch($srv, 0, $warm, $o{concurrency});
$tally{$_} += $t->{$_} for keys %$t;

my $m1 = settle($srv);
my $rss1 = $m1->{vlm_engine_rss_bytes};
my $detail1 = rss_detail($srv);
my ($wrss1, $wshm1) = workers_rss($srv);
my $ranks1 = ranks_rss($srv);

my $t1 = time;
$t = run_batch($srv, $warm, $o{requests}, $o{concurrency});
$tally{$_} += $t->{$_} for keys %$t;
my $t2 = time;

my $m2 = settle($srv);
my $rss2 = $m2->{vlm_engine_rss_bytes};
my $detail2 = rss_detail($srv);
my ($wrss2, $wshm2) = workers_rss($srv);
my $ranks2 = ranks_rss($srv);

my $fail = 0;

printf "%s workload%s: %d requests at concurrency %d in %.1f s "
       . "(%.1f requests/s after the first %d)\n", $o{workload},
       $o{workload} eq 'images'
           ? " ($o{images} JPEG images of $o{'image-size'} a request, "
             . (defined $o{'output-tokens'}
                ? "$o{'output-tokens'} output tokens, " : '')
             . "$model_name, $o{backend})" : '',
       $o{requests}, $o{concurrency}, $t2 - $t0,
       ($o{requests} - $warm) / ($t2 - $t1 || 1), $warm;

printf "images/s after the first %d: %.1f\n", $warm,
       ($o{requests} - $warm) * $o{images} / ($t2 - $t1 || 1)
    if $o{workload} eq 'images';

for my $s (sort keys %tally) {
    printf "  %-14s %d\n", $s, $tally{$s};
    $fail++ if $s !~ /^(full-ok|stream-ok|gone-send|gone-stream)$/;
}

printf "engine RSS after %d requests: %d bytes (%s)\n", $warm, $rss1,
       $detail1;
printf "engine RSS at the end:        %d bytes (%+d) (%s)\n", $rss2,
       $rss2 - $rss1, $detail2;

if ($rss2 - $rss1 > $o{'rss-growth'}) {
    print "FAIL: the engine grew by more than $o{'rss-growth'} bytes\n";
    $fail++;
}

if ($o{'tensor-parallel'} && $o{'tensor-parallel'} > 1) {
    for my $r (sort { $a <=> $b } keys %$ranks2) {
        my $d = $ranks2->{$r} - ($ranks1->{$r} // 0);

        printf "rank %d private RSS (RssAnon) after %d requests: %d bytes, "
               . "at the end: %d bytes (%+d)\n", $r, $warm,
               $ranks1->{$r} // 0, $ranks2->{$r}, $d;

        if (!defined $ranks1->{$r} || $d > $o{'rss-growth'}) {
            print "FAIL: rank $r grew by more than $o{'rss-growth'} bytes "
                  . "(or was restarted)\n";
            $fail++;
        }
    }

    printf "feature pool: %d of %d bytes used (peak %d), %d slices, "
           . "staging %d of %d bytes; transfers: pool %d, host %d "
           . "(%d bytes)\n",
           map({ $m2->{$_} // -1 } qw(vlm_feature_pool_used_bytes
               vlm_feature_pool_capacity_bytes vlm_feature_pool_peak_bytes
               vlm_feature_pool_slices_in_use vlm_feature_staging_used_bytes
               vlm_feature_staging_capacity_bytes)),
           $m2->{'vlm_feature_transfers_total{path="pool"}'} // -1,
           $m2->{'vlm_feature_transfers_total{path="host"}'} // -1,
           $m2->{vlm_feature_fallback_bytes_total} // -1;

    # what is left in the pool is what the image cache keeps, no more
    if (($m2->{vlm_feature_pool_used_bytes} // -1)
        != $m2->{vlm_image_cache_used_bytes})
    {
        print "FAIL: the feature pool holds more than the image cache\n";
        $fail++;
    }

    if (($m2->{vlm_feature_staging_used_bytes} // -1) != 0) {
        print "FAIL: vlm_feature_staging_used_bytes is not back to 0\n";
        $fail++;
    }
}

printf "nginx workers' private RSS after %d requests: %d bytes "
       . "(queue segment pages: %d)\n", $warm, $wrss1, $wshm1;
printf "nginx workers' private RSS at the end:        %d bytes (%+d) "
       . "(queue segment pages: %d)\n", $wrss2, $wrss2 - $wrss1, $wshm2;

if ($wrss2 - $wrss1 > $o{'rss-growth'}) {
    print "FAIL: the workers grew by more than $o{'rss-growth'} bytes\n";
    $fail++;
}

printf "image cache: %d hits, %d misses, %d of %d bytes\n",
       $m2->{vlm_image_cache_hits_total}, $m2->{vlm_image_cache_misses_total},
       $m2->{vlm_image_cache_used_bytes}, $m2->{vlm_image_cache_bytes};

for my $k (sort grep { /^vlm_requests_total\{/ } keys %$m2) {
    printf "  %-58s %s\n", $k, $m2->{$k};
}

for my $k (sort grep { /^vlm_pool_(used|peak|capacity)\{/ } keys %$m2) {
    printf "  %-58s %s\n", $k, $m2->{$k};

    if ($k =~ /^vlm_pool_used/ && $m2->{$k} != 0) {
        print "FAIL: $k is not back to 0\n";
        $fail++;
    }
}

for my $k (qw(vlm_queue_length vlm_running_requests vlm_engine_restarts_total)) {
    printf "  %-58s %s\n", $k, $m2->{$k};
    $fail++ if $m2->{$k} != 0;
}

my ($errors) = grep { /\[(alert|crit|emerg)\]/ }
               do { open my $in, '<', "$srv->{prefix}/logs/error.log";
                    <$in> };

if ($errors) {
    print "FAIL: error.log has $errors";
    $fail++;
}

$srv->{keep} = 1 if $fail;
my @left = vlm_stop($srv);

if (@left) {
    print "FAIL: engine processes left: @left\n";
    $fail++;
}

print $fail ? "load: FAIL ($fail)\n" : "load: PASS\n";
exit($fail ? 1 : 0);
