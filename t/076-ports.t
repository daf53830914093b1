# Every port a suite listens on derives from TEST_NGINX_PORT (vlm_port in
# t/lib/VLMTest.pm, or Test::Nginx's own), so that two runs on one
# machine with different TEST_NGINX_PORT never collide: no suite names a
# literal port in a listen line, a vlm_start() or a default of its own.

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
    my @literal;

    for my $line (split /\n/, $text) {
        next if $line =~ /^\s*#/;
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
}

done_testing();
