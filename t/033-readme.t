# What the README and docs/ tell an operator to do works: every path of
# their layout tables exists, the README's shortest configuration and the
# front-proxy example of docs/serving.md pass nginx -t (the variables it
# hashes on exist), the quick start's picture generator runs even with
# another python3 first in PATH, and `make run`'s port and log files are
# the ones the Makefile, scripts/serve and conf/nginx.conf use.
#
# And the pages agree with the tree: the README links every page of
# docs/, every relative link of the README and docs/ reaches a file (and
# a heading, for a #fragment), every repository path they write in
# backticks exists, and docs/directives.md has every directive of the
# module with its context, and every variable.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Glob qw(bsd_glob GLOB_BRACE);
use File::Spec;
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
my @docs = map { "docs/" . (split m{/}, $_)[-1] } sort glob("$root/docs/*.md");
my @pages = ('README.md', @docs);

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

# nginx -t on a configuration of the module: the exit status and the log
sub nginx_t {
    my ($conf) = @_;
    my $dir = tempdir("vlm-readme-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/logs";
    my $mod = $ENV{TEST_NGINX_LOAD_MODULES}
              || ($ENV{VLM_BUILD} || "$root/build") . "/ngx_http_vlm_module.so";
    open my $out, '>', "$dir/nginx.conf" or die $!;
    print $out "load_module $mod;\nerror_log stderr;\npid $dir/nginx.pid;\n"
               . "events { }\n$conf\n";
    close $out;
    my $log = `$nginx -t -p $dir -c $dir/nginx.conf 2>&1`;
    return ($? >> 8, $log);
}

# --- the README's shortest configuration passes nginx -t, with the
# model make run serves

{
    my $block = code_block($readme, qr/^\s*vlm_model\s/);
    ok(defined $block, 'using it: the README has a configuration');
    $block //= '';
    $block =~ s/^load_module .*\n//m;
    $block =~ s{^(\s*vlm_model\s+)\S+;}{$1$root/models/default;}m;
    like($block, qr/\bvlm_chat;/, 'using it: it serves the chat');
    my ($rc, $log) = nginx_t($block);
    is($rc, 0, 'using it: the configuration passes nginx -t') or diag($log);
}

# --- the front nginx of "Scaling out" passes nginx -t

{
    my $block = code_block($serving, qr/^\s*upstream vlm \{/);
    ok(defined $block,
       'scaling out: docs/serving.md has a front-proxy example');

    # the front loads the module for $vlm_prefix_key
    my ($rc, $log) = nginx_t("http {\n" . ($block // '') . "\n}");
    is($rc, 0, 'scaling out: the example passes nginx -t') or diag($log);
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

# --- the pages agree with the tree

# a page's text without its code blocks (fenced or indented), where
# brackets and backticks are not markdown
sub prose {
    my ($text) = @_;
    $text =~ s/^```.*?^```[^\n]*\n//msg;
    my ($out, $prev_blank, $in_code) = ('', 1, 0);
    for my $line (split /\n/, $text) {
        $in_code = 1 if $prev_blank && $line =~ /^(    |\t)/;
        $in_code = 0 if $line !~ /^(    |\t)/ && $line =~ /\S/;
        $out .= ($in_code ? '' : $line) . "\n";
        $prev_blank = $line !~ /\S/;
    }
    return $out;
}

# the anchors GitHub gives a page's headings
my %anchors;
sub anchors {
    my ($page) = @_;
    return $anchors{$page} if $anchors{$page};
    my (%seen, %set);
    for my $h (prose(slurp("$root/$page")) =~ /^#{1,6}\s+(.*?)\s*#*\s*$/mg) {
        (my $slug = lc $h) =~ s/[^\w\- ]//g;
        $slug =~ tr/ /-/;
        my $n = $seen{$slug}++;
        $set{$n ? "$slug-$n" : $slug} = 1;
    }
    return $anchors{$page} = \%set;
}

# the repository's ignored paths (.gitignore's anchored patterns): what
# a build or a test run makes, such as t/servroot
my @ignored = map { (my $g = $_) =~ s{^/|/$}{}g; $g }
              grep { m{^/} } split /\n/, slurp("$root/.gitignore");

sub in_tree {
    my ($path) = @_;
    return 1 if grep { -e } bsd_glob("$root/$path", GLOB_BRACE);
    my @parts = split m{/}, $path;
    for my $n (1 .. @parts) {
        my $head = join '/', @parts[0 .. $n - 1];
        for my $g (@ignored) {
            (my $re = quotemeta $g) =~ s/\\\*/[^\/]*/g;
            return 1 if $head =~ /^$re$/;
        }
    }
    return 0;
}

# the top folders whose paths a page names in backticks
my $tree_top = qr{(?:src|kernels|conf|t|tests|bench|tools|scripts|fuzz
                     |models|docs)}x;

ok(@docs >= 5, 'docs: the reference pages');

for my $page (@docs) {
    like($readme, qr/\]\(\Q$page\E(#[^)]*)?\)/, "the README links $page");
}

for my $page (@pages) {
    my $text = prose(slurp("$root/$page"));
    my $dir = dirname($page);

    for my $link ($text =~ /\]\(([^)\s]+)\)/g) {
        next if $link =~ m{^[a-z][a-z0-9+.-]*:}i;      # http:, mailto:
        my ($file, $frag) = $link =~ /^([^#]*)(?:#(.*))?$/;
        my $target = $file eq '' ? $page
                     : File::Spec->abs2rel(abs_path("$root/$dir/$file")
                                           // "$root/$dir/$file", $root);
        ok(-e "$root/$target", "$page: the link $link reaches a file")
            or next;
        next unless defined $frag && $target =~ /\.md$/;
        ok(anchors($target)->{$frag},
           "$page: the link $link reaches a heading");
    }

    (my $spans = $text) =~ s/\n/ /g;
    for my $code ($spans =~ /`([^`]+)`/g) {
        my ($path) = $code =~ m{^\s*($tree_top/\S*)};
        next unless defined $path;
        $path =~ s/[.,;:]$//;
        ok(in_tree($path), "$page: $path is in the tree");
    }
}

# --- docs/directives.md: every directive of the module, with its context,
# and every variable

{
    my $doc = slurp("$root/docs/directives.md");
    my (%directive, %variable);
    for my $file ("$root/ngx_http_vlm_module.c", glob("$root/src/http/*.c")) {
        my $c = slurp($file);
        while ($c =~ /\{ \s* ngx_string\("(vlm_\w+)"\), \s*
                      ((?:NGX_\w+ \s* \|? \s*)+),/xg)
        {
            my ($name, $flags) = ($1, $2);
            my @ctx = ($flags =~ /NGX_HTTP_MAIN_CONF\b/ ? 'http' : (),
                       $flags =~ /NGX_HTTP_SRV_CONF\b/ ? 'server' : (),
                       $flags =~ /NGX_HTTP_LOC_CONF\b/ ? 'location' : ());
            $directive{$name} = join ', ', @ctx;
        }
        $variable{$1} = 1 while $c =~ /ngx_string\("(vlm_[a-z_]+)"\)/g;
    }
    delete @variable{keys %directive};

    ok(keys %directive > 30, 'directives: the module\'s command tables');
    ok(keys %variable >= 8, 'directives: the module\'s variables');

    for my $name (sort keys %directive) {
        my ($entry) = $doc =~ /^### \Q$name\E\n\n(.*?)(?=^##|\z)/ms;
        ok(defined $entry, "docs/directives.md has $name") or next;
        like($entry, qr/^    Syntax:\s+\Q$name\E[ ;]/m,
             "docs/directives.md: the syntax of $name");
        like($entry, qr/^    Default:\s+\S/m,
             "docs/directives.md: the default of $name");
        my ($ctx) = $entry =~ /^    Context:\s+(.*?)\s*$/m;
        is($ctx, $directive{$name}, "docs/directives.md: the context of $name");
    }
    for my $name ($doc =~ /^### (vlm_\w+)$/mg) {
        ok($directive{$name}, "docs/directives.md: $name is a directive");
    }
    for my $name (sort keys %variable) {
        like($doc, qr/`\$\Q$name\E`/, "docs/directives.md has \$$name");
    }
}

done_testing();
