package VLMOrigin;

# The other end of the image fetch tests (t/013): HTTP origins that serve
# images, record every request they get (request line and headers) and
# misbehave on demand, and a DNS server on UDP that answers from a table
# and can change its answer after the first query (DNS rebinding).  Each
# runs in a process of its own, in its own process group, and listens on
# a loopback address only.

use strict;
use warnings;

use Exporter 'import';
use IO::Socket::INET ();
use IO::Socket::IP ();
use JSON::PP ();
use POSIX ();
use Socket qw(inet_pton AF_INET AF_INET6);
use Time::HiRes qw(sleep time);

our @EXPORT = qw(vlm_origin_start vlm_origin_requests vlm_dns_start
                 vlm_dns_queries vlm_server_stop);

my $JSON = JSON::PP->new->canonical(1);


sub spawn (&) {
    my $run = shift;

    my $pid = fork;
    die "fork: $!" if !defined $pid;

    if ($pid == 0) {
        POSIX::setpgid(0, 0);
        $run->();
        POSIX::_exit(0);
    }

    return $pid;
}


sub log_line ($$) {
    my ($file, $line) = @_;

    open my $out, '>>', $file or return;
    syswrite $out, "$line\n";
    close $out;
}


sub read_lines ($) {
    my $file = shift;

    open my $in, '<', $file or return ();
    my @lines = <$in>;
    close $in;
    chomp @lines;

    return @lines;
}


sub respond ($$$;$) {
    my ($c, $status, $body, $type) = @_;

    print $c "HTTP/1.1 $status\r\nContent-Type: "
             . ($type || 'text/plain') . "\r\nContent-Length: "
             . length($body) . "\r\nConnection: close\r\n\r\n$body";
}


sub respond_chunked ($$) {
    my ($c, $body) = @_;

    print $c "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
             . "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";

    while (length $body) {
        my $piece = substr($body, 0, 16384, '');
        printf $c "%x\r\n%s\r\n", length $piece, $piece;
    }

    print $c "0\r\n\r\n";
}


# one connection: the request is logged, a body it announces is read (as
# any origin would before answering), then the path says what comes back
sub serve ($$) {
    my ($o, $c) = @_;

    local $SIG{PIPE} = 'IGNORE';
    $c->autoflush(1);

    my $head = '';
    my $deadline = time + 10;

    while ($head !~ /\r\n\r\n/ && time < $deadline) {
        my $n = sysread($c, my $buf, 4096);
        last if !$n;
        $head .= $buf;
    }

    my ($req, $rest) = split /\r\n\r\n/, $head, 2;
    return if !defined $req;

    my ($line, @lines) = split /\r\n/, $req;
    my ($method, $path) = split / /, $line;
    my %h;

    for my $l (@lines) {
        my ($k, $v) = split /:\s*/, $l, 2;
        $h{lc $k} = $v;
    }

    log_line($o->{log}, $JSON->encode({ method => $method, path => $path,
                                        headers => \%h }));

    if ($h{'content-length'}) {
        my $body = defined $rest ? $rest : '';

        while (length $body < $h{'content-length'}) {
            my $n = sysread($c, my $buf, 65536);
            last if !$n;
            $body .= $buf;
        }
    }

    return if $o->{canary};

    my $files = $o->{files} || {};
    $path =~ s/\?.*//;

    if ($path eq '/slow.png') {
        sleep 60;

    } elsif ($path eq '/chunked.png') {
        respond_chunked($c, $files->{'/img.png'});

    } elsif ($path eq '/big.png') {
        respond($c, '200 OK', "\x89PNG" . ('x' x ($o->{big} || 300000)),
                'image/png');

    } elsif ($path eq '/big-chunked.png') {
        respond_chunked($c, "\x89PNG" . ('x' x ($o->{big} || 300000)));

    } elsif (defined $files->{$path}) {
        respond($c, '200 OK', $files->{$path}, 'image/png');

    } else {
        respond($c, '404 Not Found', "not found\n");
    }
}


# an HTTP server on addr:port; options: addr, port, log (a file),
# files ({ path => body }), big (bytes of /big.png), canary (answers
# nothing, only records)
sub vlm_origin_start (%) {
    my %o = @_;

    unlink $o{log};

    my $srv = IO::Socket::IP->new(LocalHost => $o{addr},
                                  LocalPort => $o{port}, Listen => 64,
                                  ReuseAddr => 1, Proto => 'tcp')
        or die "cannot listen on $o{addr} port $o{port}: $@";

    my $pid = spawn {
        $SIG{CHLD} = 'IGNORE';

        while (1) {
            my $c = $srv->accept or next;

            my $k = fork;

            if (defined $k && $k == 0) {
                serve(\%o, $c);
                close $c;
                POSIX::_exit(0);
            }

            close $c;
        }
    };

    close $srv;

    return { %o, pid => $pid };
}


# the requests an origin got: [ { method, path, headers } ]
sub vlm_origin_requests ($) {
    my $o = shift;

    return map { $JSON->decode($_) } read_lines($o->{log});
}


sub dns_name ($$) {
    my ($msg, $off) = @_;
    my @labels;

    while (1) {
        my $n = ord substr($msg, $off, 1);
        $off++;
        last if $n == 0;
        push @labels, substr($msg, $off, $n);
        $off += $n;
    }

    return (lc join('.', @labels), $off);
}


# a DNS server on 127.0.0.1:port (UDP); names: { name => [ answer, ... ] }
# where an answer is a list of addresses (IPv4 for A queries, IPv6 for
# AAAA ones): the n-th query of a name and type gets its n-th answer, the
# last one from then on; an unknown name is NXDOMAIN.  TTL 0.
sub vlm_dns_start (%) {
    my %o = @_;

    unlink $o{log};

    my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                     LocalPort => $o{port}, Proto => 'udp')
        or die "cannot listen on udp port $o{port}: $@";

    my $pid = spawn {
        my %count;

        while (1) {
            my $peer = $sock->recv(my $msg, 512) or next;
            next if length $msg < 17;

            my ($id) = unpack 'n', $msg;
            my ($name, $off) = dns_name($msg, 12);
            my ($qtype) = unpack 'n', substr($msg, $off, 2);
            my $question = substr($msg, 12, $off + 4 - 12);

            log_line($o{log}, "$name $qtype");

            my $answers = $o{names}{$name};
            my ($rcode, @rr) = (0);

            if (!$answers) {
                $rcode = 3;

            } else {
                my $k = $count{"$name $qtype"}++;
                my $set = $answers->[$k > $#$answers ? $#$answers : $k];

                for my $a (@$set) {
                    my $v6 = $a =~ /:/;
                    next if $qtype != ($v6 ? 28 : 1);
                    my $rdata = inet_pton($v6 ? AF_INET6 : AF_INET, $a);
                    push @rr, pack('nnnNn', 0xc00c, $qtype, 1, 0,
                                   length $rdata) . $rdata;
                }
            }

            $sock->send(pack('nnnnnn', $id, 0x8180 | $rcode, 1, scalar @rr,
                             0, 0) . $question . join('', @rr), 0, $peer);
        }
    };

    close $sock;

    return { %o, pid => $pid };
}


# the queries the DNS server got: [ "name type" ]
sub vlm_dns_queries ($) {
    return read_lines(shift->{log});
}


sub vlm_server_stop ($) {
    my $s = shift;

    return if !$s || !$s->{pid};

    local $?;    # called from END: the script's exit status stays

    kill 'TERM', -$s->{pid};
    waitpid $s->{pid}, 0;
    delete $s->{pid};
}


1;
