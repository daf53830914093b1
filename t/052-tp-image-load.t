# Tensor parallel under steady image traffic: 600 requests of seven
# pictures each (a 1120x700 JPEG and small PNGs, max_tokens 4, half of
# them streamed) at concurrency 16, twice vlm_max_running, through an
# engine group of two ranks.  No request may wait much longer than the
# others: the slowest within 8 times the median (or 3 s), where a
# request left behind by the scheduler waited until the traffic stopped.
# /metrics and /health show the age of the oldest queued and running
# request, which stays within the same bound while the traffic runs.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(_exit);
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $root = vlm_root();
my $n = 600;
my $conc = 16;

my $jpeg = "/tmp/vlm-tp-load-$$.jpg";
system("/usr/bin/python3 $root/tools/shapes_dataset.py --out $jpeg "
       . "--size 1120x700 --draw 'blue triangle top left' "
       . "'red circle center' >/dev/null") == 0
    or plan skip_all => 'tools/shapes_dataset.py cannot draw (python3-pil)';

my $big = do {
    open my $in, '<:raw', $jpeg or die "$jpeg: $!";
    local $/;
    vlm_data_url('image/jpeg', <$in>);
};
unlink $jpeg;

my @pictures = ($big, vlm_data_url('image/png', vlm_png(56, 56, 1)),
                vlm_data_url('image/png', vlm_png(120, 80, 7)));

my $srv = vlm_start(name => 'tp-image-load', port => vlm_port(14),
                    workers => 2, zone => '128m',
                    model => "$root/models/default",
                    http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
    vlm_max_running 8;
_EOC_
$srv->{timeout} = 300;

END { VLMTest::vlm_stop($srv) if $srv && $srv->{pid} }

# the gauges, sampled while the traffic runs
pipe my $mr, my $mw or die "pipe: $!";
my $sampler = fork;
die "fork: $!" if !defined $sampler;

if ($sampler == 0) {
    close $mr;
    my ($queued, $running) = (0, 0);
    my $stop = 0;
    local $SIG{TERM} = sub { $stop = 1 };

    while (!$stop) {
        my $m = eval { vlm_metrics($srv) } || {};
        my $q = $m->{vlm_oldest_queued_request_seconds} // 0;
        my $r = $m->{vlm_oldest_running_request_seconds} // 0;
        $queued = $q if $q > $queued;
        $running = $r if $r > $running;
        print $mw "$queued $running\n";
        sleep 0.2;
    }

    close $mw;
    _exit(0);
}

close $mw;

my $t0 = time;
my @kids;

for my $c (0 .. $conc - 1) {
    pipe my $r, my $w or die "pipe: $!";
    my $pid = fork;
    die "fork: $!" if !defined $pid;

    if ($pid == 0) {
        close $r;

        for (my $i = $c; $i < $n; $i += $conc) {
            my @urls = map { $pictures[($i + $_) % @pictures] } 1 .. 7;
            my $body = { %{ vlm_chat_body('How many shapes are there?',
                                          @urls) },
                         model => 'default', max_tokens => 4,
                         temperature => 0 };
            my $start = time;
            my $status;

            if ($i % 2) {
                $status = eval { vlm_post_json($srv, $body)->{status} };

            } else {
                $body->{stream} = JSON::PP::true;
                $status = eval {
                    my $st = vlm_open_stream($srv, $body);
                    vlm_read_some($st, 300);
                    close $st->{sock};
                    VLMTest::parse_response($st->{raw})->{status};
                };
            }

            printf $w "%d %s %.3f\n", $i, $status // 'died', time - $start;
        }

        close $w;
        _exit(0);
    }

    close $w;
    push @kids, [$pid, $r];
}

my (@lat, %status);

for my $k (@kids) {
    my $fh = $k->[1];

    while (my $l = <$fh>) {
        my ($i, $st, $secs) = split ' ', $l;
        $status{$st}++;
        push @lat, $secs;
    }

    waitpid $k->[0], 0;
}

my $wall = time - $t0;

kill 'TERM', $sampler;
my $last = '0 0';
while (my $l = <$mr>) { $last = $l }
waitpid $sampler, 0;
my ($max_queued, $max_running) = split ' ', $last;

@lat = sort { $a <=> $b } @lat;
my $median = $lat[@lat / 2];
my $bound = $median * 8 > vlm_secs(3) ? $median * 8 : vlm_secs(3);

diag(sprintf "%d requests in %.1f s: median %.2f s, p99 %.2f s, "
             . "max %.2f s (bound %.2f s); oldest queued %.2f s, "
             . "running %.2f s", scalar @lat, $wall, $median,
             $lat[int(@lat * 0.99)], $lat[-1], $bound, $max_queued,
             $max_running);

is_deeply(\%status, { 200 => $n }, "all $n requests answered 200");
cmp_ok($lat[-1], '<=', $bound,
       'the slowest request within 8 times the median');
cmp_ok($max_running, '>', 0, '/metrics showed the oldest running request');
cmp_ok($max_running, '<=', $bound + 1,
       'and its age stayed within the bound');
cmp_ok($max_queued, '<=', $bound + 1,
       'so did the oldest queued request\'s');

my $zone = vlm_wait_idle($srv, 10);
cmp_ok($zone->{oldest_queued_seconds} // -1, '==', 0,
       '/health: nothing queued at the end');
cmp_ok($zone->{oldest_running_seconds} // -1, '==', 0,
       '/health: nothing running');

my $m = vlm_metrics($srv);
cmp_ok($m->{vlm_oldest_running_request_seconds} // -1, '==', 0,
       '/metrics: the oldest running request\'s age back to 0');

done_testing();
