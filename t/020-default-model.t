# The default model sees: the held-out shapes questions of
# tests/fixtures/default_model go through nginx as data: URLs (half of
# them streamed), and the answers are scored against the generator's
# ground truth and against transformers' own answers on the same items;
# then the pictures drawn to order (examples.jsonl, and the README's two
# blue triangles drawn here by tools/shapes_dataset.py) must be answered
# right.
#
# A plain Test::More script: it starts its own nginx (master process, one
# worker, the engine) under t/servroot-default and stops it at the end,
# the directory removed when every test passed.

use strict;
use warnings;

use Cwd qw(getcwd);
use FindBin;
use lib "$FindBin::Bin/lib";
use File::Path qw(make_path remove_tree);
use HTTP::Tiny;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use VLMTest qw(vlm_port);
use Test::More;
use Time::HiRes qw(sleep time);

my $root = getcwd();
my $model = "$root/models/default";
my $fixtures = "$root/tests/fixtures/default_model";
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $module = $ENV{TEST_NGINX_LOAD_MODULES}
             || "$root/build/ngx_http_vlm_module.so";
my $port = vlm_port(-4);
my $prefix = "$root/t/servroot-default";

if (!-f "$model/config.json" || !-f "$fixtures/items.jsonl") {
    plan skip_all => "models/default or its held-out set is missing "
                     . "(make default-model writes them)";
}

my @items = map { decode_json($_) } do {
    open my $in, '<', "$fixtures/items.jsonl" or die "$fixtures: $!";
    grep { /\S/ } <$in>;
};

remove_tree($prefix);
make_path("$prefix/conf", "$prefix/logs");

my $user = $> == 0 ? "user root;" : "";

open my $conf, '>', "$prefix/conf/nginx.conf" or die;
print $conf <<"CONF";
load_module $module;
$user
worker_processes 1;
error_log logs/error.log info;
pid logs/nginx.pid;
thread_pool vlm threads=2;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $prefix/body;
    vlm_model $model;
    vlm_thread_pool vlm;
    vlm_engine_threads 2;
    vlm_zone vlm size=32m;
    vlm_max_running 4;
    server {
        listen 127.0.0.1:$port;
        location = /v1/chat/completions { vlm_chat; }
        location = /health { vlm_health; }
    }
}
CONF
close $conf;

system($nginx, '-p', "$prefix/", '-c', 'conf/nginx.conf') == 0
    or BAIL_OUT("nginx did not start");

my $http = HTTP::Tiny->new(timeout => 60);

# the engine loads the model: wait for /health
my $ready = 0;
for (1 .. 200) {
    my $res = $http->get("http://127.0.0.1:$port/health");
    if ($res->{status} == 200) { $ready = 1; last }
    sleep 0.1;
}

ok($ready, "the engine serves models/default");

# as tools/shapes_dataset.py's normalize_answer
sub normalize {
    my ($s) = @_;
    $s = lc($s // '');
    $s =~ s/^\s+|\s+$//g;
    $s =~ s/\.$//;
    $s =~ s/\s+/ /g;
    return $s;
}

sub ask {
    my ($item, $stream) = @_;
    my $path = $item->{image} =~ m{^/} ? $item->{image}
                                        : "$fixtures/$item->{image}";

    open my $in, '<:raw', $path or die "$path: $!";
    local $/;
    my $png = <$in>;
    close $in;

    my $body = encode_json({
        model => 'default',
        temperature => 0,
        max_tokens => 32,
        stream => $stream ? JSON::PP::true : JSON::PP::false,
        messages => [{ role => 'user', content => [
            { type => 'image_url', image_url => {
                url => 'data:image/png;base64,'
                       . encode_base64($png, '') } },
            { type => 'text', text => $item->{question} } ] }],
    });

    my $res = $http->post("http://127.0.0.1:$port/v1/chat/completions",
                          { content => $body,
                            headers => { 'Content-Type' =>
                                         'application/json' } });

    return (undef, "HTTP $res->{status}: $res->{content}")
        if $res->{status} != 200;

    return (decode_json($res->{content})->{choices}[0]{message}{content})
        if !$stream;

    my ($text, $done) = ('', 0);

    for my $line (split /\n/, $res->{content}) {
        next unless $line =~ /^data: (.*)$/;
        if ($1 eq '[DONE]') { $done = 1; next }
        my $chunk = decode_json($1);
        for my $c (@{ $chunk->{choices} }) {
            $text .= $c->{delta}{content} // '';
        }
    }

    return $done ? ($text) : (undef, "the stream did not end with [DONE]");
}

my ($right, $hf_right, $same, $failed) = (0, 0, 0, 0);
my $t0 = time;

for my $i (0 .. $#items) {
    my $item = $items[$i];
    my ($answer, $error) = ask($item, $i % 2);

    if (!defined $answer) {
        $failed++;
        diag("item $item->{id}: $error");
        next;
    }

    my $got = normalize($answer);
    $right++ if $got eq normalize($item->{answer});
    $hf_right++ if normalize($item->{transformers_answer})
                   eq normalize($item->{answer});
    $same++ if $got eq normalize($item->{transformers_answer});
}

my $n = scalar @items;
my $acc = 100 * $right / $n;
my $hf_acc = 100 * $hf_right / $n;

diag(sprintf("held-out accuracy: through nginx %.1f%% (%d/%d), "
             . "transformers %.1f%% (%d/%d); same answer as transformers "
             . "on %d/%d; %.1f s", $acc, $right, $n, $hf_acc, $hf_right, $n,
             $same, $n, time - $t0));

is($failed, 0, "every request answered");
cmp_ok(abs($acc - $hf_acc), '<=', 1,
       "within one point of transformers' accuracy");

# the serving stack is exact: greedy answers are transformers' answers
cmp_ok($same, '>=', int(0.98 * $n + 0.5),
       "the same answer as transformers on at least 98% of the items");

# the model's own quality: what its card reports, measured here again
cmp_ok($acc, '>=', 95, "accuracy through nginx is at least 95%");
cmp_ok($hf_acc, '>=', 95, "transformers' recorded accuracy is at least 95%");

# pictures drawn to order: every question they answer, right
my @examples;

if (open my $in, '<', "$fixtures/examples.jsonl") {
    @examples = map { decode_json($_) } grep { /\S/ } <$in>;
}

# the README's quick start: two blue triangles, drawn by the generator
# (with Debian's python3 and PIL, which scripts/install-deps installs,
# as a user would)
my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my $drawn = "$prefix/two-blue-triangles.png";
my $draw = "$python $root/tools/shapes_dataset.py --out $drawn --draw "
           . "'blue triangle top left' 'blue triangle bottom right' 2>&1";
my @qs = `$draw`;

if ($? == 0) {
    push @examples, map { my $q = decode_json($_);
                          { image => $drawn, question => $q->{question},
                            answer => $q->{answer} } } @qs;
    ok((grep { $_->{answer} eq 'two' } @examples),
       "the generator's two blue triangles are asked how many");
} else {
    diag("tools/shapes_dataset.py --draw failed: @qs");
    fail("the generator draws the README's picture");
}

for my $i (0 .. $#examples) {
    my $ex = $examples[$i];
    my ($answer, $error) = ask($ex, $i % 2);
    is(normalize($answer // $error), $ex->{answer},
       "drawn picture ($ex->{image}): $ex->{question}");
}

# the model's embedding table has rows the tokenizer has no token for:
# hot sampling must never draw them (it would end the request in error)
my $hot_ok = 0;

for my $seed (1 .. 8) {
    my $res = $http->post("http://127.0.0.1:$port/v1/chat/completions",
        { content => encode_json({
              model => 'default', temperature => 2, seed => $seed,
              max_tokens => 48,
              messages => [{ role => 'user',
                             content => 'Describe the image.' }] }),
          headers => { 'Content-Type' => 'application/json' } });

    $hot_ok++ if $res->{status} == 200
                 && decode_json($res->{content})->{choices}[0]{finish_reason};
}

is($hot_ok, 8, "temperature 2 draws only tokens the tokenizer has");

# this nginx's engines, by the master's pid on their command line: another
# nginx serving the same model (make run) is none of this test's business
my $master = do {
    open my $in, '<', "$prefix/logs/nginx.pid" or die "$prefix: $!";
    my $pid = <$in>;
    close $in;
    chomp $pid;
    $pid;
};

system($nginx, '-p', "$prefix/", '-c', 'conf/nginx.conf', '-s', 'stop');

# nothing left behind: the engine exits with the master
my $left = 1;
for (1 .. 50) {
    $left = `pgrep -f 'vlm-engin[e] .*--master-pid $master ' | wc -l` + 0;
    last if $left == 0;
    sleep 0.1;
}

is($left, 0, "no engine process left after stop");

# the prefix stays for a look when something failed, as vlm_stop's
remove_tree($prefix)
    if !$ENV{TEST_NGINX_NO_CLEAN} && !$left
       && Test::More->builder->is_passing;

done_testing();
