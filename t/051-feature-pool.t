# The feature pool of a tensor-parallel group (vlm_tensor_parallel 2):
# rank 0 encodes every image and hands its features to rank 1 through the
# pool, or through the host staging area when the pool has no room.
# Forced fallback (vlm_feature_pool too small for any image): every image
# goes through the host, the answers are those of one engine, the fallback
# counter is the number of images, and pool and staging are idle after.
# A mixed run (room for the smaller images only): each image by the path
# its size allows, counted apart.  A rank killed in the middle of an image
# request: the group comes back with no slice in use, and serves the same.
# The first group is placed by vlm_engine_numa_nodes (node 0, both ranks:
# this host has one node), which the engine applies with set_mempolicy.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my @img = map { vlm_data_url("image/png", vlm_png($_->[0], $_->[1], $_->[2])) }
              ([120, 80, 5], [56, 56, 9], [224, 140, 3]);

# name, body, images
my @asks = (
    [ 'a', vlm_chat_body('Describe the picture.', $img[0]), 1 ],
    [ 'b', vlm_chat_body('What is this?', $img[1]), 1 ],
    [ 'c', vlm_chat_body('And this one?', $img[2]), 1 ],
    [ 'b+c', vlm_chat_body('Compare them.', $img[1], $img[2]), 2 ],
);

my $n_images = 0;
$n_images += $_->[2] for @asks;


sub ask {
    my ($srv, $body) = @_;

    my $res = vlm_post_json($srv, { %$body, max_tokens => 16,
                                    temperature => 0 });
    return $res->{status} == 200
        ? vlm_json($res->{body})->{choices}[0]{message}{content}
        : "status $res->{status}: $res->{body}";
}


# the pool's gauges once the engine has published them at rest
sub idle_metrics {
    my $srv = shift;
    my $m = {};

    for (1 .. 50) {
        $m = vlm_metrics($srv);
        last if defined $m->{vlm_feature_pool_slices_in_use}
                && $m->{vlm_feature_pool_slices_in_use} == 0
                && $m->{vlm_running_requests} == 0;
        sleep 0.1;
    }

    return $m;
}


sub transfers {
    my ($m, $path) = @_;
    return $m->{"vlm_feature_transfers_total{path=\"$path\"}"};
}


sub ranks {
    my $srv = shift;
    my %r;

    for my $pid (vlm_engine_pids($srv)) {
        open my $in, '<', "/proc/$pid/cmdline" or next;
        local $/;
        my ($rank) = join(' ', split /\0/, <$in>) =~ /--rank (\d+)/;
        $r{$rank // 0} = $pid;
    }

    return \%r;
}


# --- one engine: the answers to match

my $one = vlm_start(name => 'pool1', port => vlm_port(11));
my %want = map { $_->[0] => ask($one, $_->[1]) } @asks;
ok(length($want{$_}) > 5, "one engine, $_: an answer") for sort keys %want;
VLMTest::vlm_stop($one);

my $srv;
END { VLMTest::vlm_stop($srv) if $srv }

# --- forced fallback: no image fits the pool

# (the ranks placed by NUMA node: this host's one node, both of them)
$srv = vlm_start(name => 'pool-host', port => vlm_port(12), http_config => <<'_EOC_');
    vlm_tensor_parallel 2;
    vlm_engine_numa_nodes 0 0;
    vlm_feature_pool 64;
_EOC_

{
    my $r = ranks($srv);
    my $node = do { local @ARGV = '/sys/devices/system/node/node0/cpulist';
                    my $l = <>; chomp $l; $l };

    for my $rank (0, 1) {
        open my $in, '<', "/proc/$r->{$rank}/status" or next;
        my ($cpus) = join('', <$in>) =~ /^Cpus_allowed_list:\s*(\S+)/m;
        is($cpus, $node, "rank $rank runs on node 0's CPUs ($node)");
    }
}

my (%bytes, $before);
$before = 0;

for my $a (@asks) {
    my ($name, $body) = @$a;

    is(ask($srv, $body), $want{$name},
       "fallback, $name: the answer of one engine");

    my $m = idle_metrics($srv);
    $bytes{$name} = $m->{vlm_feature_fallback_bytes_total} - $before;
    $before = $m->{vlm_feature_fallback_bytes_total};
}

{
    my $m = idle_metrics($srv);

    is($m->{vlm_feature_pool_capacity_bytes}, 64, 'fallback: a 64-byte pool');
    cmp_ok($m->{vlm_feature_staging_capacity_bytes}, '>=', $bytes{c},
           'fallback: staging holds the largest image');
    is(transfers($m, 'host'), $n_images,
       'fallback: every image through the host');
    is(transfers($m, 'pool'), 0, 'fallback: none through the pool');
    is($m->{vlm_feature_fallback_bytes_total},
       $bytes{a} + $bytes{b} + $bytes{c} + $bytes{'b+c'},
       'fallback: bytes counted');
    is($bytes{'b+c'}, $bytes{b} + $bytes{c},
       'fallback: two images, the bytes of both');
    cmp_ok($bytes{b}, '<', $bytes{c}, 'fallback: the smaller image');
    is($m->{vlm_feature_pool_slices_in_use}, 0, 'fallback: no slice held');
    is($m->{vlm_feature_pool_used_bytes}, 0, 'fallback: pool idle');
    is($m->{vlm_feature_pool_peak_bytes}, 0, 'fallback: pool never used');
    is($m->{vlm_feature_staging_used_bytes}, 0, 'fallback: staging idle');
}

VLMTest::check_log($srv, 'pool-host');
VLMTest::vlm_stop($srv);

# --- mixed: room for the smaller images, not for the largest

my $room = $bytes{b} > $bytes{a} ? $bytes{b} : $bytes{a};
my ($fit, $over, $over_bytes) = (0, 0, 0);

for my $a (@asks) {
    for my $name (split /\+/, $a->[0]) {
        if ($bytes{$name} <= $room) {
            $fit++;
        } else {
            $over++;
            $over_bytes += $bytes{$name};
        }
    }
}

ok($fit > 0 && $over > 0, "mixed: $fit images fit, $over do not");

$srv = vlm_start(name => 'pool-mixed', port => vlm_port(13), http_config => <<"_EOC_");
    vlm_tensor_parallel 2;
    vlm_engine_cpus 0 1;
    vlm_image_cache 0;
    vlm_feature_pool $room;
    vlm_max_tokens 4000;
_EOC_

for my $a (@asks) {
    is(ask($srv, $a->[1]), $want{ $a->[0] },
       "mixed, $a->[0]: the answer of one engine");
}

{
    my $m = idle_metrics($srv);

    is(transfers($m, 'pool'), $fit, 'mixed: the smaller through the pool');
    is(transfers($m, 'host'), $over, 'mixed: the largest through the host');
    is($m->{vlm_feature_fallback_bytes_total}, $over_bytes,
       'mixed: fallback bytes of the largest');
    is($m->{vlm_feature_pool_peak_bytes}, $room, 'mixed: the pool was full');
    is($m->{vlm_feature_pool_used_bytes}, 0, 'mixed: pool idle');
    is($m->{vlm_feature_staging_used_bytes}, 0, 'mixed: staging idle');
    is($m->{vlm_feature_pool_slices_in_use}, 0, 'mixed: no slice held');
    cmp_ok($m->{'vlm_engine_rank_weight_bytes{rank="1"}'}, '>', 0,
           'metrics: rank 1 weights');
    is($m->{'vlm_engine_rank_weight_bytes{rank="0"}'},
       $m->{'vlm_engine_rank_weight_bytes{rank="1"}'},
       'metrics: the ranks hold equal shares');
    cmp_ok($m->{'vlm_engine_rank_kv_bytes{rank="0"}'}, '>', 0,
           'metrics: rank 0 KV bytes');
}

# --- rank 1 killed during an image request

{
    my $r = ranks($srv);
    my $st = vlm_open_stream($srv, { %{ $asks[3][1] }, temperature => 0,
                                     max_tokens => 4000,
                                     stream => JSON::PP::true });
    ok(vlm_read_some($st, 10, qr/"content":"[^"]+"/s),
       'rank killed: the image request has begun');

    kill 'KILL', $r->{1};

    vlm_read_some($st, 15);
    close $st->{sock};

    my @ev = vlm_sse(VLMTest::parse_response($st->{raw})->{body});
    is($ev[-1], '[DONE]', 'rank killed: the stream ends with [DONE]');
    ok(ref $ev[-2] && $ev[-2]{error}, 'rank killed: an SSE error event')
        or diag(substr($st->{raw}, -300));

    my $n = {};
    for (1 .. 200) {
        $n = ranks($srv);
        last if $n->{0} && $n->{1} && keys %$n == 2
                && $n->{0} != $r->{0} && $n->{1} != $r->{1};
        sleep 0.1;
    }

    ok(vlm_wait_ready($srv, 20), 'rank killed: the group is back');

    my $m = idle_metrics($srv);
    is($m->{vlm_feature_pool_slices_in_use}, 0,
       'rank killed: no slice in use');
    is($m->{vlm_feature_pool_used_bytes}, 0, 'rank killed: pool idle');

    is(ask($srv, $asks[3][1]), $want{'b+c'},
       'rank killed: the next image request, the answer of one engine');

    $m = idle_metrics($srv);
    is($m->{vlm_feature_pool_slices_in_use}, 0, 'after: no slice in use');
    is($m->{vlm_feature_staging_used_bytes}, 0, 'after: staging idle');
}

my $zone = vlm_wait_idle($srv, 3);
ok(defined $zone->{slots_used} && $zone->{slots_used} == 0
   && $zone->{arena_used} == 0, 'every slot free, arena used 0');

VLMTest::check_log($srv, 'pool-mixed', { allow => [
    qr/tensor parallel: rank process \d+ exited/,
    qr/\[alert\] .*vlm: engine \d+ exited/,
    qr/\[alert\] .*exited on signal 9/ ] });

my @left = VLMTest::vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'no rank process is left after the stop');

done_testing();
