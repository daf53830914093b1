package Test::Nginx::Socket;

# A Test::Nginx::Socket for this project's suites: the block format and
# the semantics (one TAP test per check, same names, same counts) of
# openresty's Test::Nginx::Socket, for the sections listed below, built on
# Test::Base like the original.  Suites written for it run unchanged under
# the original; a section this runner does not know stops the run instead
# of being ignored.
#
# Sections: config, http_config, main_config, post_main_config, request
# (a string or, with "eval", a string or an array of requests),
# raw_request, more_headers, error_code, error_code_like,
# response_headers, response_body (a string or, with "eval", a regex),
# response_body_like, error_log, no_error_log, timeout, must_die,
# suppress_stderr, log_level, SKIP (ONLY and LAST come from Test::Base).
# Functions: plan, blocks, run_tests, repeat_each, no_shuffle, use_hup,
# master_on/off, workers, env_to_nginx and the other settings exported.

use strict;
use warnings;

use Test::Base -base;

use IO::Select ();
use IO::Socket::INET ();
use POSIX qw(EAGAIN EWOULDBLOCK EINTR);
use Text::Diff ();
use Time::HiRes qw(sleep time);

use Test::Nginx::Util;

our @EXPORT = qw(
    env_to_nginx plan run_tests repeat_each no_shuffle use_hup
    master_on master_off master_process_enabled workers worker_connections
    log_level timeout no_root_location server_addr server_name
    server_root html_dir server_port server_port_for_client bail_out
    check_accum_error_log config_preamble add_block_preprocessor
    add_cleanup_handler add_test_cleanup_handler
);

$Test::Nginx::Util::RunTestHelper = \&run_test_helper;
$Test::Nginx::Util::CheckErrorLog = \&check_error_log;

my %known_sections = map { $_ => 1 } qw(
    config http_config main_config post_main_config request raw_request
    more_headers
    error_code error_code_like response_headers response_body
    response_body_like error_log no_error_log timeout must_die
    suppress_stderr log_level SKIP ONLY LAST
);


sub run_tests () {
    for my $block (Test::Base::blocks()) {
        for my $section (keys %{ $block->_section_map || {} }) {
            next if $known_sections{$section};
            Test::Nginx::Util::bail_out($block->name . " - section "
                . "\"--- $section\" is not supported by t/lib/Test/Nginx");
        }
    }

    Test::Nginx::Util::run_tests();
}


# the expected value for request number $idx of a block: a block with
# several requests gives its expectations as arrays
sub indexed ($$$$) {
    my ($name, $value, $idx, $need_array) = @_;

    if (ref $value && ref $value eq 'ARRAY') {
        return $value->[$idx];
    }

    bail_out("$name - several requests need arrays of expected results")
        if $need_array;

    return $value;
}


sub build_request ($$$) {
    my ($name, $request, $more_headers) = @_;

    $request =~ s/^(?:\s*#[^\n]*\n|\s+)+//s;

    my ($first, $body) = split /\n/, $request, 2;

    bail_out("$name - Request line should be non-empty")
        if !defined $first || $first !~ /\S/;

    my ($method, $uri, $version) = split ' ', $first;
    $uri = '/' if !defined $uri;
    $version = 'HTTP/1.1' if !defined $version;

    my $headers = '';
    my $chunked;

    for my $line (split /\n+/, $more_headers) {
        next if $line =~ /^\s*#/;
        my ($key, $val) = split /:\s*/, $line, 2;
        $val = '' if !defined $val;
        $chunked = 1 if lc $key eq 'transfer-encoding' && $val eq 'chunked';
        $headers .= "$key: $val\r\n";
    }

    my $host = $headers =~ /(?:^|\n)Host:/i ? '' : "Host: $ServerName\r\n";
    my $conn = $headers =~ /(?:^|\n)Connection/i ? ''
                                                 : "Connection: close\r\n";

    $body = '' if !defined $body;

    if (!$chunked && $body ne '' && $headers !~ /(?:^|\n)Content-Length:/) {
        $body =~ s/^\s+|\s+$//gs;
        $headers .= "Content-Length: " . length($body) . "\r\n";
    }

    return "$method $uri $version\r\n$host$conn$headers\r\n$body";
}


sub requests_of_block ($) {
    my $block = shift;
    my $name = $block->name;

    if (defined $block->raw_request) {
        my $raw = $block->raw_request;
        return [ref $raw eq 'ARRAY' ? join('', @$raw) : $raw];
    }

    my $request = $block->request;
    bail_out("$name - request empty") if !defined $request;

    my $more = $block->more_headers;
    $more = '' if !defined $more;

    my @requests = ref $request eq 'ARRAY' ? @$request : ($request);
    my @out;

    for my $i (0 .. $#requests) {
        bail_out("$name - request packets (arrays) are not supported by "
                 . "t/lib/Test/Nginx") if ref $requests[$i];

        my $hdrs = ref $more eq 'ARRAY' ? $more->[$i] : $more;
        bail_out("$name - --- more_headers lacks data for request $i")
            if !defined $hdrs;

        push @out, build_request($name, $requests[$i], $hdrs);
    }

    return \@out;
}


# sends one request and reads until the server closes or the block's
# timeout passes; returns the raw response, or undef on a timeout
sub send_request ($$$) {
    my ($block, $req, $timeout) = @_;

    my $name = $block->name;
    my $sock;

    # nginx may close the connection before reading the whole request
    local $SIG{PIPE} = 'IGNORE';

    for my $try (1 .. 50) {
        $sock = IO::Socket::INET->new(PeerAddr => $ServerAddr,
                                      PeerPort => $ServerPortForClient,
                                      Proto => 'tcp',
                                      Timeout => $timeout);
        last if $sock;
        sleep($try * 0.02 > 0.5 ? 0.5 : $try * 0.02);
    }

    if (!$sock) {
        Test::More::fail("$name - Can't connect to "
                         . "$ServerAddr:$ServerPortForClient: $!");
        return '';
    }

    $sock->blocking(0);

    my $sel = IO::Select->new($sock);
    my $deadline = time + $timeout;
    my ($off, $resp) = (0, '');

    while ($off < length $req) {
        my $left = $deadline - time;
        last if $left <= 0 || !$sel->can_write($left);

        my $n = syswrite($sock, $req, length($req) - $off, $off);

        if (!defined $n) {
            next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
            last;    # the server may answer before reading everything
        }

        $off += $n;
    }

    while (1) {
        my $left = $deadline - time;

        if ($left <= 0 || !$sel->can_read($left)) {
            close $sock;
            Test::More::fail("ERROR: client socket timed out - $name\n");
            return $resp;
        }

        my $n = sysread($sock, my $buf, 65536);

        if (!defined $n) {
            next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
            warn "WARNING: $name - HTTP response read failure: $!\n";
            last;
        }

        last if $n == 0;
        $resp .= $buf;
    }

    close $sock;
    return $resp;
}


# splits a raw response into status, headers and the decoded body
sub parse_response ($$$) {
    my ($name, $raw, $head) = @_;

    my %res = (code => '', headers => {}, raw_headers => '', body => '');

    return \%res if !defined $raw || $raw eq '';

    my ($hdr, $body) = split /\r\n\r\n/, $raw, 2;
    $body = '' if !defined $body;

    $res{raw_headers} = "$hdr\r\n";

    my ($status, @lines) = split /\r\n/, $hdr;

    if (defined $status && $status =~ m{^HTTP/\d+\.\d+\s+(\d{3})}) {
        $res{code} = $1;
    }

    for my $line (@lines) {
        my ($key, $val) = split /:\s*/, $line, 2;
        next if !defined $val;
        push @{ $res{headers}{lc $key} }, $val;
    }

    my $te = header_value(\%res, 'Transfer-Encoding');
    my $len = header_value(\%res, 'Content-Length');

    if ($head || $res{code} eq '304' || $res{code} eq '101') {
        $res{body} = $body;

    } elsif (defined $te && $te eq 'chunked') {
        my $decoded = '';

        while (1) {
            if ($body !~ s/^[ \t]*([A-Fa-f0-9]+)[^\r\n]*\r\n//) {
                Test::More::fail("$name - invalid chunked body received: "
                                 . substr($body, 0, 64));
                last;
            }

            my $size = hex $1;
            last if $size == 0;

            if (length $body < $size + 2
                || substr($body, $size, 2) ne "\r\n")
            {
                Test::More::fail("$name - invalid chunked data received");
                last;
            }

            $decoded .= substr($body, 0, $size);
            substr($body, 0, $size + 2) = '';
        }

        $res{body} = $decoded;

    } elsif (defined $len && $len =~ /^\d+$/) {
        warn "WARNING: $name - response body truncated: $len expected, "
             . "but got " . length($body) . "\n" if length $body < $len;
        $res{body} = substr $body, 0, $len;

    } else {
        $res{body} = $body;
    }

    return \%res;
}


# all values of a header joined by ", ", as HTTP::Headers returns them
sub header_value ($$) {
    my ($res, $key) = @_;

    my $vals = $res->{headers}{lc $key};
    return undef if !$vals;
    return join ', ', @$vals;
}


sub check_error_code ($$$$) {
    my ($block, $res, $idx, $need_array) = @_;
    my $name = $block->name;

    if (defined $block->error_code_like) {
        my $pat = indexed($name, $block->error_code_like, $idx, $need_array);
        Test::More::like($res->{code}, qr/$pat/sm, "$name - status code ok");

    } elsif (defined $block->error_code) {
        my $code = indexed($name, $block->error_code, $idx, $need_array);
        Test::More::is($res->{code}, $code, "$name - status code ok");

    } else {
        Test::More::is($res->{code}, 200, "$name - status code ok");
    }
}


sub check_response_headers ($$$$) {
    my ($block, $res, $idx, $need_array) = @_;
    my $name = $block->name;

    return if !defined $block->response_headers;

    my $headers = parse_headers(indexed($name, $block->response_headers,
                                        $idx, $need_array));

    for my $key (sort keys %$headers) {
        my $val = $headers->{$key};

        if (!defined $val) {
            Test::More::unlike($res->{raw_headers}, qr/^\s*\Q$key\E\s*:/ms,
                "$name - header $key not present in the raw headers");
            next;
        }

        $val =~ s/\$ServerPort\b/$ServerPort/g;
        $val =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;

        my $got = header_value($res, $key);
        Test::More::is(defined $got ? $got : '', $val,
                       "$name - header $key ok");
    }
}


sub check_response_body ($$$$$) {
    my ($block, $res, $idx, $repeat, $need_array) = @_;
    my $name = $block->name;
    my $body = $res->{body};

    if (defined $block->response_body) {
        my $expected = indexed($name, $block->response_body, $idx,
                               $need_array);
        my $what = "$name - response_body - response is expected "
                   . "(repeated req $repeat, req $idx)";

        if (ref $expected) {
            Test::More::like($body, $expected,
                             "$name - response_body - like (repeated req "
                             . "$repeat, req $idx)");
            return;
        }

        $expected =~ s/\$ServerPort\b/$ServerPort/g;
        $expected =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;
        $expected = expand_env_in_text($expected, $name);

        if (!Test::More::is($body, $expected, $what)) {
            Test::More::diag(Text::Diff::diff(\$expected, \$body,
                                              { STYLE => 'Unified' }));
        }

    } elsif (defined $block->response_body_like) {
        my $pat = indexed($name, $block->response_body_like, $idx,
                          $need_array);
        $pat =~ s/\$ServerPort\b/$ServerPort/g;
        $pat =~ s/\$ServerPortForClient\b/$ServerPortForClient/g;

        (my $summary = $body) =~ s/\s+/ /g;
        $summary =~ s/^ | $//g;

        Test::More::like($body, qr/$pat/s,
                         "$name - response_body_like - response is "
                         . "expected ($summary)");
    }
}


# the patterns of an error_log / no_error_log section: lines of plain
# text, or with "eval" a regex or an array of strings and regexes
sub log_patterns ($) {
    my $pats = shift;

    if (!ref $pats) {
        chomp $pats;
        return [split /\n+/, $pats];
    }

    return [$pats] if ref $pats eq 'Regexp';
    return [@$pats];
}


sub log_line_matches ($$) {
    my ($line, $pat) = @_;

    return ref $pat ? $line =~ $pat : index($line, $pat) >= 0;
}


sub check_error_log ($$$$) {
    my ($block, $res, $repeat, $need_array) = @_;
    my $name = $block->name;
    my $lines = error_log_data();
    my %warn_on = map { $_ => 1 } qw(alert crit emerg);

    if (defined $block->error_log) {
        my $pats = log_patterns($block->error_log);

        for my $pat (@$pats) {
            for my $level (keys %warn_on) {
                delete $warn_on{$level} if "$pat" =~ /\Q[$level\E/;
            }

            if (grep { log_line_matches($_, $pat) } @$lines) {
                Test::More::pass("$name - pattern \"$pat\" matches a line "
                                 . "in error.log (req $repeat)");
            } else {
                Test::More::fail("$name - pattern \"$pat\" should match a "
                                 . "line in error.log (req $repeat)");
            }
        }
    }

    if (defined $block->no_error_log) {
        my $pats = log_patterns($block->no_error_log);

        for my $pat (@$pats) {
            for my $level (keys %warn_on) {
                delete $warn_on{$level} if "$pat" =~ /\Q[$level\E/;
            }

            my ($hit) = grep { log_line_matches($_, $pat) } @$lines;

            if (defined $hit) {
                chomp $hit;
                Test::More::fail("$name - pattern \"$pat\" should not match "
                                 . "any line in error.log but matches line "
                                 . "\"$hit\" (req $repeat)");
            } else {
                Test::More::pass("$name - pattern \"$pat\" does not match a "
                                 . "line in error.log (req $repeat)");
            }
        }
    }

    for my $line (@$lines) {
        for my $level (keys %warn_on) {
            warn "WARNING: $name - $line" if $line =~ /\[$level\]/;
        }
    }
}


sub run_test_helper ($$) {
    my ($block, $repeat) = @_;

    my $name = $block->name;
    my $requests = requests_of_block($block);
    my $need_array = @$requests > 1;
    my $timeout = parse_time($block->timeout);
    my $res;

    $timeout = timeout() if !defined $timeout;

    for my $idx (0 .. $#$requests) {
        my $req = $requests->[$idx];
        my $head = $req =~ /^\s*HEAD\s+/ ? 1 : 0;
        my $raw = send_request($block, $req, $timeout);

        $res = parse_response($name, $raw, $head);

        check_error_code($block, $res, $idx, $need_array);
        check_response_headers($block, $res, $idx, $need_array);
        check_response_body($block, $res, $idx, $repeat, $need_array);

        check_error_log($block, $res, $repeat, $need_array)
            if $idx < $#$requests;
    }

    check_error_log($block, $res, $repeat, $need_array);
}

1;
