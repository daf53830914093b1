# What the README and docs/ tell an operator to do works: every path of
# their layout tables exists, the front-proxy example of docs/serving.md
# passes nginx -t (the variables it hashes on exist), the quick start's
# picture generator runs even with another python3 first in PATH, and
# `make run`'s port and log files are the ones the Makefile, scripts/serve
# and conf/nginx.conf use.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Temp qw(tempdir);
use FindBin;
use Test::More;

my $root = abs_path("$FindBin::Bin/..");
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';

sub slurp {
    my ($path) = @_;
    open my $in, '<', $path or die "$path: $!";
    local $/;
    return scalar <$in>;
}

my $readme = slurp("$root/README.md");
my $serving = slurp("$root/docs/serving.md");

# the indented (code) block of a page holding a line that matches re
sub code_block {
    my ($text, $re) = @_;
    my @lines = split /\n/, $text;
    for my $i (0 .. $#lines) {
        next unless $lines[$i] =~ /^    / && $lines[$i] =~ $re;
        my ($first, $last) = ($i, $i);
        $first-- while $first > 0 && $lines[$first - 1] =~ /^(    |$)/;
        $last++ while $last < $#lines && $lines[$last + 1] =~ /^(    |$)/;
        return join "\n", map { length $_ > 4 ? substr($_, 4) : "" }
                          @lines[$first .. $last];
    }
    return undef;
}

# --- the layout tables: every path they list is in the tree

for my $page ('README.md', 'docs/architecture.md') {
    my ($layout) = slurp("$root/$page") =~ /^## Layout\n(.*?)(?=^## |\z)/ms;
    my @paths = ($layout // '') =~ /^\| `([^`]+)` \|/mg;
    ok(@paths > 10, "layout: the table of $page lists the tree");
    for my $p (@paths) {
        ok(-e "$root/$p", "layout: $p exists");
    }
}

# --- the front nginx of "Scaling out" passes nginx -t

{
    my $block = code_block($serving, qr/^\s*upstream vlm \{/);
    ok(defined $block, 'scaling out: docs/serving.md has a front-proxy example');

    my $dir = tempdir("vlm-readme-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/logs";
    open my $out, '>', "$dir/nginx.conf" or die $!;
    # the front loads the module for $vlm_prefix_key
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES}
              || ($ENV{VLM_BUILD} || "$root/build") . "/ngx_http_vlm_module.so";
    print $out "load_module $mod;\nerror_log stderr;\npid $dir/nginx.pid;\n"
               . "events { }\nhttp {\n" . ($block // '') . "\n}\n";
    close $out;

    my $log = `$nginx -t -p $dir -c $dir/nginx.conf 2>&1`;
    is($? >> 8, 0, 'scaling out: the example passes nginx -t') or diag($log);
    like($block // '', qr/proxy_next_upstream\s+error timeout http_503 http_429\s+non_idempotent;/,
         'scaling out: POSTs go to the next host on 503 and 429');
    like($block // '', qr/hash \$vlm_prefix_key consistent;/,
         'scaling out: conversations go where their prefix is cached');
    like($serving, qr/`X-Accel-Buffering: no`/,
         'docs/serving.md says streams carry X-Accel-Buffering: no');
    my $glue = join '', map { slurp($_) } glob("$root/src/http/*.c");
    like($glue, qr/ngx_str_set\(&h->key, "X-Accel-Buffering"\);\s*ngx_str_set\(&h->value, "no"\);/,
         'and the chat handler sends it');
}

# --- the quick start's generator, with a python3 that is not Debian's
# first in PATH (pyenv, conda: no PIL)

SKIP: {
    skip 'no /usr/bin/python3', 3 unless -x '/usr/bin/python3';

    my $cmd = code_block($readme, qr{tools/shapes_dataset\.py});
    ok(defined $cmd, 'quick start: the generator command');
    ($cmd) = ($cmd // '') =~ /^(\S*python3?\s+tools\/shapes_dataset\.py.*?[^\\])$/ms;

    my $dir = tempdir("vlm-readme-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/bin";
    open my $fake, '>', "$dir/bin/python3" or die $!;
    print $fake "#!/bin/sh\necho 'this python3 has no PIL' >&2\nexit 1\n";
    close $fake;
    chmod 0755, "$dir/bin/python3";

    (my $run = $cmd // 'false') =~ s{/tmp/two\.png}{$dir/two.png}g;
    my $out = `cd $root && PATH=$dir/bin:\$PATH sh -c '$run' 2>&1`;
    is($? >> 8, 0, 'quick start: the generator runs with another python3 '
                   . 'first in PATH') or diag("$run\n$out");
    ok(-s "$dir/two.png", 'quick start: it drew the picture');
}

# --- make run: its port and its logs

{
    my $makefile = slurp("$root/Makefile");
    my ($port) = $makefile =~ /^PORT\s*\?=\s*(\d+)/m;
    like($readme, qr/make run\s+# .*serves on 127\.0\.0\.1:\Q$port\E/,
         "make run: the README's port is the Makefile's $port");

    my $serve = slurp("$root/scripts/serve");
    my ($prefix) = $serve =~ /PREFIX=\$\{VLM_PREFIX:-\$ROOT\/([^}]+)\}/;
    my $conf = slurp("$root/conf/nginx.conf");
    my ($log) = $conf =~ /^error_log\s+(\S+)/m;
    my ($access) = $conf =~ /^\s*access_log\s+(\S+?);?\s/m;

    ok(defined $prefix && defined $log && defined $access,
       'make run: scripts/serve and conf/nginx.conf name the prefix and logs');
    like($readme, qr/`\Q$prefix\/$log\E`/,
         "make run: the README names its error log, $prefix/$log");
    like($readme, qr/`\Q$prefix\/$access\E`/,
         "make run: the README names its access log, $prefix/$access");
}

done_testing();
