# Every port a suite listens on derives from TEST_NGINX_PORT (vlm_port in
# t/lib/VLMTest.pm, or Test::Nginx's own), so that two runs on one
# machine with different TEST_NGINX_PORT never collide: no suite names a
# literal port in a listen line, a vlm_start() or a default of its own.
# scripts/prove-slot runs suites at once with bases 200 apart, so every
# offset a suite adds to its base (vlm_port(N), $port + N) lies within
# -50 and +149.

use strict;
use warnings;

use FindBin;
use Test::More;

my @files = ((grep { !/076-ports\.t$/ } sort glob("$FindBin::Bin/*.t")),
             sort glob("$FindBin::Bin/lib/*.pm"));

for my $f (@files) {
    open my $in, '<', $f or die "$f: $!";
    my $text = do { local $/; <$in> };
    close $in;

    (my $name = $f) =~ s{^\Q$FindBin::Bin\E/}{t/};
    my (@literal, @far);

    for my $line (split /\n/, $text) {
        next if $line =~ /^\s*#/;

        my @offsets = $line =~ /\bvlm_port\(\s*(-?\d+)/g;

        while ($line =~ /(?:\$port|\|\|\s*\d+\))\s*([-+])\s*(\d+)/g) {
            push @offsets, $1 eq '-' ? -$2 : $2;
        }

        push @far, $line if grep { $_ < -50 || $_ > 149 } @offsets;

        # the one default: the base itself when TEST_NGINX_PORT is unset
        next if $line =~ /TEST_NGINX_PORT\}\s*\|\|\s*\d+/;

        push @literal, $line
            if $line =~ /\bport\s*=>\s*\d/
               || $line =~ /\blisten\s+(?:[\d.]+:)?\d{2,5}(?![\d.])/
               || $line =~ /\$port\s*=\s*\d/
               || $line =~ /TEST_NGINX_\w*_PORT\}/;
    }

    is_deeply(\@literal, [], "$name: no literal port")
        or diag(join "\n", @literal);
    is_deeply(\@far, [], "$name: its ports within -50 and +149 of the base")
        or diag(join "\n", @far);
}

done_testing();
