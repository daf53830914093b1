#!/usr/bin/perl
# An HTTP-level fuzzer of POST /v1/chat/completions and /v1/responses (a
# quarter of the requests, made into its input items) against a real nginx
# with the module and its engine (t/lib/VLMTest.pm starts them): valid
# chat requests (text, several turns, streaming, sampling parameters,
# data: URL images from tests/fixtures/image/in, data: URL videos from
# t/data, bit-flipped, cut, declaring huge frames, or as vLLM's frames) are
# mutated as data
# (values of other types and ranges, special-token strings, invalid UTF-8,
# data: URLs with bad base64, bad media types, truncated and bit-flipped
# image bytes, http URLs) and as bytes (flips, cuts, insertions from
# fuzz/openai.dict), and sent plain, chunked, or by a client that leaves
# early.  Deterministic for a given --seed; bounded by --requests (and
# --seconds, when given).
#
# Every answer must be a 200 with a whole completion or stream (a
# response object, or events that end with the response completed or
# incomplete), or a 4xx with an OpenAI error body; no 5xx, no connection without an answer, no
# [alert] or sanitizer report in error.log (or under VLM_SANITIZER_LOGS),
# the same engine at the end as at the start, and every slot back.
#
#   perl -It/lib fuzz/http_fuzz.pl [--requests N] [--seed S]
#       [--seconds T] [--port P] [--verbose] [--keep DIR]
#
# --keep DIR writes each failing request whole to DIR/request-N.
#
# make asan-nginx runs it against the ASan + UBSan build; make test runs a
# short run of it there too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/lib";

use Getopt::Long;
use IO::Select;
use MIME::Base64 qw(encode_base64);
use Time::HiRes qw(time sleep);
use VLMTest;

my %o = (requests => 1000, seed => 1, seconds => 0, verbose => 0,
         port => $ENV{TEST_NGINX_PORT} || 1994, keep => '');

GetOptions(\%o, 'requests=i', 'seed=i', 'seconds=f', 'port=i', 'verbose',
           'keep=s')
    or die "usage: $0 [--requests N] [--seed S] [--seconds T] [--port P] "
           . "[--keep DIR]\n";

vlm_prereqs();

my $root = vlm_root();
my $JSON = JSON::PP->new->canonical(1)->allow_nonref(1);

srand($o{seed});


# the pieces mutations are made of

my @images;

for my $f (sort glob "$root/tests/fixtures/image/in/*") {
    next if -s $f > 24 * 1024;
    open my $in, '<:raw', $f or die "$f: $!";
    local $/;
    my $data = <$in>;
    close $in;
    my ($ext) = $f =~ /\.(\w+)$/;
    push @images, [ $ext eq 'jpg' ? 'jpeg' : $ext, $data ];
}

push @images, [ 'png', vlm_png(56, 56, 1) ], [ 'jpeg', vlm_jpeg() ];

my @videos;

for my $f (sort glob "$root/t/data/video-*") {
    open my $in, '<:raw', $f or die "$f: $!";
    local $/;
    my $data = <$in>;
    close $in;
    my ($ext) = $f =~ /\.(\w+)$/;
    push @videos, [ $ext, $data ];
}

my @dict;

if (open my $in, '<', "$root/fuzz/openai.dict") {
    while (<$in>) {
        next if !/^"(.*)"\s*$/;
        (my $t = $1) =~ s/\\"/"/g;
        $t =~ s/\\\\/\\/g;
        push @dict, $t;
    }
    close $in;
}

my @special = qw(<|endoftext|> <|im_start|> <|im_end|> <|vision_start|>
                 <|vision_end|> <|vision_pad|> <|image_pad|> <|video_pad|>
                 <|box_start|> <|object_ref_start|>);

my @values = (undef, JSON::PP::true, JSON::PP::false, 0, -1, 1, 2.5, 1e308,
              -1e308, 4294967296, 9223372036854775807, '', 'x', 'serving',
              'user', 'assistant', 'system', 'tool', [], {}, [[[[[[]]]]]],
              { type => 'text', text => 'hi' }, "\x{0}", "\x{FFFD}",
              'a' x 5000, "\x{1F600}" x 10, 'image_url', 'text');

my @roles = qw(system developer user assistant);

sub pick { return $_[int rand @_] }

# one of @values, a copy: a shared [] or {} that a later mutation filled
# would grow across requests, and could come to hold itself
sub value {
    my $v = pick(@values);
    return ref $v ? $JSON->decode($JSON->encode($v)) : $v;
}


sub rand_text {
    my @parts = map {
        my $r = rand;
        $r < 0.3 ? pick(@special)
        : $r < 0.4 ? "\x{4E2D}\x{6587}"
        : $r < 0.5 ? ' ' x (1 + int rand 20)
        : pick(qw(hi what colour count shapes Describe the image . ? \n))
    } 1 .. 1 + int rand 8;

    return join ' ', @parts;
}


sub image_url {
    my ($type, $data) = @{ pick(@images) };
    my $r = rand;

    if ($r < 0.15) {
        # bit flips in the picture
        my $d = $data;
        for (1 .. 1 + int rand 8) {
            my $i = int rand length $d;
            substr($d, $i, 1) = chr(ord(substr($d, $i, 1)) ^ (1 << int rand 8));
        }
        $data = $d;

    } elsif ($r < 0.25) {
        $data = substr($data, 0, int rand length $data);

    } elsif ($r < 0.3) {
        $type = pick(qw(gif webp bmp svg+xml x));
    }

    (my $b64 = encode_base64($data)) =~ s/\s+//g;
    $b64 = 'AAAA' if $b64 eq '';
    $r = rand;

    return pick('data:', 'data:image/png;base64,', 'data:,hello',
                "data:image/$type,$b64", "data:text/plain;base64,$b64",
                'http://', 'http://example.invalid/a.png',
                'https://[::1]/x.png', 'ftp://x/y.png', 'file:///etc/passwd',
                "data:image/$type;base64," . substr($b64, 1),
                "data:image/$type;base64,${b64}=",
                "data:image/$type;base64,$b64 ")
        if $r < 0.15;

    if ($r < 0.25) {
        my $i = int rand(length($b64) || 1);
        substr($b64, $i, 1) = pick('*', '-', '_', ' ', '%', "\\/", '=');
    }

    return "data:image/$type;base64,$b64";
}


# a video_url's URL: a file bit-flipped, cut, declaring huge frames, or
# vLLM's list of frames made of the pictures
sub video_url {
    my ($type, $data) = @{ pick(@videos) };
    my $r = rand;

    if ($r < 0.15) {
        my @frames = map {
            (my $b = encode_base64($_->[1])) =~ s/\s+//g;
            $b
        } map { pick(@images) } 1 .. 1 + int rand 4;

        return 'data:video/jpeg;base64,' . join(',', @frames);
    }

    if ($r < 0.4) {
        for (1 .. 1 + int rand 8) {
            my $i = int rand length $data;
            substr($data, $i, 1) = chr(ord(substr($data, $i, 1))
                                       ^ (1 << int rand 8));
        }

    } elsif ($r < 0.55) {
        $data = substr($data, 0, int rand length $data);

    } elsif ($r < 0.65 && $type eq 'mp4') {
        my $at = index($data, 'avc1', index($data, 'stsd'));
        substr($data, $at + 28, 4) = pack('nn', map { int rand 65536 } 1, 2)
            if $at > 0;
    }

    (my $b64 = encode_base64($data)) =~ s/\s+//g;
    $b64 = 'AAAA' if $b64 eq '';

    return pick("data:video/$type;base64,$b64", "data:image/png;base64,$b64",
                "data:video/$type;base64," . substr($b64, 1))
        if rand() < 0.1;

    return "data:video/$type;base64,$b64";
}


sub message {
    my $role = rand() < 0.8 ? 'user' : pick(@roles);

    # a tool round trip's history: an assistant's calls, a tool's result
    if (rand() < 0.05) {
        return { role => 'assistant', content => undef, tool_calls => [
            map { { id => "call_$_", type => 'function', function => {
                name => "f$_", arguments => pick('{}', '{"a": [1, 2.5]}',
                                                 '"s"', '{"b": "\\u00e9"}',
                                                 '{"a":', rand_text()) } } }
            1 .. 1 + int rand 3 ] };
    }

    return { role => 'tool', tool_call_id => 'call_1',
             content => rand() < 0.5 ? rand_text()
                                     : [ { type => 'text',
                                           text => rand_text() } ] }
        if rand() < 0.05;

    return { role => $role, content => rand_text() }
        if $role ne 'user' || rand() < 0.4;

    my @content;

    for (1 .. 1 + int rand 3) {
        push @content, rand() < 0.1
            ? { type => 'video_url',
                video_url => rand() < 0.5 ? { url => video_url() }
                                          : video_url() }
            : rand() < 0.4
            ? { type => 'image_url',
                image_url => rand() < 0.5 ? { url => image_url(),
                                            detail => pick(qw(auto low high)) }
                                        : image_url() }
            : { type => 'text', text => rand_text() };
    }

    return { role => $role, content => \@content };
}


sub request {
    my %r = (model => 'serving', max_tokens => 1 + int rand 6,
             messages => [ map { message() } 1 .. 1 + int rand 3 ]);

    $r{stream} = JSON::PP::true if rand() < 0.4;
    $r{stream_options} = { include_usage => JSON::PP::true }
        if $r{stream} && rand() < 0.5;
    $r{temperature} = rand 2 if rand() < 0.3;
    $r{top_p} = rand if rand() < 0.2;
    $r{top_k} = int rand 50 if rand() < 0.2;
    $r{seed} = int rand 1000 if rand() < 0.3;
    $r{stop} = [ map { rand_text() } 1 .. 1 + int rand 3 ] if rand() < 0.2;
    $r{logprobs} = JSON::PP::true, $r{top_logprobs} = int rand 5
        if rand() < 0.2;
    # n choices: mostly within vlm_max_n (4 here), sometimes above or below
    $r{n} = pick(1, 2, 3, 4, 4, 0, 5, -1, 64) if rand() < 0.25;
        $r{presence_penalty} = rand(4) - 2 if rand() < 0.1;
    $r{repetition_penalty} = rand 2 if rand() < 0.1;

    if (rand() < 0.15) {
        $r{response_format} = rand() < 0.3 ? { type => 'json_object' }
            : { type => 'json_schema',
                json_schema => { name => 'x', schema => schema(3) } };
    }

    if (rand() < 0.1) {
        $r{tools} = [ map { { type => 'function', function => {
            name => "f$_", parameters => schema(2) } } } 1 .. 1 + int rand 3 ];
        $r{tool_choice} = pick('auto', 'none', 'required',
            { type => 'function', function => { name => 'f1' } });
        $r{parallel_tool_calls} = JSON::PP::false if rand() < 0.5;
    }

    return \%r;
}


# the same request for POST /v1/responses: the messages as input items
# (a tool round trip's as function calls and their outputs), the format
# as text.format, the tools flat
sub responses_request {
    my ($r) = @_;
    my %q = (model => $r->{model}, max_output_tokens => $r->{max_tokens},
             input => []);

    for my $m (@{ $r->{messages} }) {
        if ($m->{tool_calls}) {
            push @{ $q{input} }, map { { type => 'function_call',
                call_id => $_->{id}, name => $_->{function}{name},
                arguments => $_->{function}{arguments} } }
                @{ $m->{tool_calls} };
            next;
        }

        if ($m->{role} eq 'tool') {
            push @{ $q{input} }, { type => 'function_call_output',
                call_id => $m->{tool_call_id}, output => $m->{content} };
            next;
        }

        my $c = $m->{content};
        $c = [ map {
            $_->{type} eq 'text'
                ? { type => $m->{role} eq 'assistant' ? 'output_text'
                                                      : 'input_text',
                    text => $_->{text} }
            : $_->{type} eq 'image_url'
                ? { type => 'input_image',
                    image_url => ref $_->{image_url} ? $_->{image_url}{url}
                                                     : $_->{image_url},
                    ref $_->{image_url} ? (detail => $_->{image_url}{detail})
                                        : () }
            : $_ } @$c ] if ref $c eq 'ARRAY';

        push @{ $q{input} }, { role => $m->{role}, content => $c };
    }

    $q{$_} = $r->{$_} for grep { exists $r->{$_} }
                              qw(stream temperature top_p seed);

    if (my $f = $r->{response_format}) {
        $q{text} = { format => $f->{type} eq 'json_schema'
            ? { type => 'json_schema', name => 'x',
                schema => $f->{json_schema}{schema} }
            : { type => $f->{type} } };
    }

    if ($r->{tools}) {
        $q{tools} = [ map { { type => 'function', name => $_->{function}{name},
                              parameters => $_->{function}{parameters} } }
                      @{ $r->{tools} } ];
        my $tc = $r->{tool_choice};
        $q{tool_choice} = ref $tc ? { type => 'function',
                                      name => $tc->{function}{name} } : $tc;
        $q{parallel_tool_calls} = $r->{parallel_tool_calls}
            if exists $r->{parallel_tool_calls};
    }

    return \%q;
}


# a random JSON schema (mutate_value may break it further)
sub schema {
    my ($depth) = @_;
    my $t = pick('string', 'integer', 'number', 'boolean', 'null', 'object',
                 'array', 'enum', 'anyOf');

    $t = 'string' if $depth <= 0 && ($t eq 'object' || $t eq 'array'
                                     || $t eq 'anyOf');

    return { enum => [ 'a', 1, JSON::PP::true, undef ] } if $t eq 'enum';
    return { anyOf => [ schema($depth - 1), { type => 'null' } ] }
        if $t eq 'anyOf';
    return { type => 'string', maxLength => int rand 8 } if $t eq 'string';

    if ($t eq 'object') {
        my %p = map { ("k$_" => schema($depth - 1)) } 1 .. int rand 3;
        return { type => 'object', properties => \%p,
                 required => [ grep { rand() < 0.5 } sort keys %p ] };
    }

    return { type => 'array', items => schema($depth - 1),
             maxItems => int rand 4 } if $t eq 'array';

    return { type => $t };
}


# a value somewhere in the structure becomes another
sub mutate_value {
    my ($v) = @_;

    my @slots;
    my $walk;

    $walk = sub {
        my ($x) = @_;
        if (ref $x eq 'HASH') {
            for my $k (sort keys %$x) {
                push @slots, [ $x, $k ];
                $walk->($x->{$k});
            }
        } elsif (ref $x eq 'ARRAY') {
            for my $i (0 .. $#$x) {
                push @slots, [ $x, $i ];
                $walk->($x->[$i]);
            }
        }
    };
    $walk->($v);

    return if !@slots;

    my ($c, $k) = @{ pick(@slots) };
    my $r = rand;
    my $new = $r < 0.6 ? value()
            : $r < 0.8 ? rand_text()
            : undef;

    if (ref $c eq 'HASH') {
        if ($r >= 0.8 && $r < 0.9) {
            delete $c->{$k};
        } elsif ($r >= 0.9) {
            $c->{ pick(qw(tools functions n logit_bias response_format
                          tool_choice max_completion_tokens min_p name
                          tool_calls unknown)) } = value();
        } else {
            $c->{$k} = $new;
        }
    } else {
        $c->[$k] = $new;
    }
}


# bytes: flips, cuts, insertions, invalid UTF-8
sub mutate_bytes {
    my ($s) = @_;

    for (1 .. 1 + int rand 4) {
        my $i = int rand(length($s) + 1);
        my $r = rand;

        if ($r < 0.25) {
            next if !length $s;
            $i = int rand length $s;
            substr($s, $i, 1) = chr(ord(substr($s, $i, 1)) ^ (1 << int rand 8));
        } elsif ($r < 0.4) {
            substr($s, $i) = '';
        } elsif ($r < 0.6) {
            substr($s, $i, 0) = @dict ? pick(@dict) : '"';
        } elsif ($r < 0.7) {
            substr($s, $i, 0) = pick("\xff", "\xc3", "\xe4\xb8", "\xed\xa0\x80",
                                     "\xf4\x90\x80\x80", "\x00", "\\u0000",
                                     "\\ud800", "\\udc00\\ud800");
        } elsif ($r < 0.8) {
            substr($s, $i, 0) = ('[' x 200) . (']' x 200);
        } elsif ($r < 0.9) {
            my $n = int rand 64;
            substr($s, $i, $n) = '';
        } else {
            my $n = int rand 64;
            substr($s, $i, 0) = substr($s, int rand(length($s) || 1), $n);
        }
    }

    return $s;
}


sub http_text {
    my ($body, $how, $path) = @_;

    my $head = "POST $path HTTP/1.1\r\nHost: localhost\r\n"
               . "Connection: close\r\n"
               . (rand() < 0.95 ? "Content-Type: application/json\r\n"
                              : "Content-Type: text/plain\r\n");

    return $head . "Content-Length: " . length($body) . "\r\n\r\n$body"
        if $how ne 'chunked';

    my $out = $head . "Transfer-Encoding: chunked\r\n\r\n";
    my $rest = $body;

    while (length $rest) {
        my $n = 1 + int rand 4096;
        my $piece = substr($rest, 0, $n, '');
        $out .= sprintf("%x\r\n", length $piece) . $piece . "\r\n";
    }

    return $out . "0\r\n\r\n";
}


my $srv = vlm_start(name => 'fuzz', port => $o{port}, http_config => <<'_EOC_',
    vlm_max_tokens 8;
    vlm_max_n 4;
    vlm_max_images 4;
    vlm_max_image_pixels 4m;
_EOC_
                    locations => <<'_EOC_');
        location = /v1/responses { vlm_responses; }
_EOC_

my $engine0 = join ',', vlm_engine_pids($srv);
my (%status, @failures);
my $t0 = time;
my $n = 0;

END { VLMTest::vlm_stop($srv) if $srv }


sub fail {
    my ($what, $req, $res) = @_;

    push @failures, "request $n: $what";
    print STDERR "request $n: $what\n  request: ", substr($req, 0, 600),
                 "\n  response: ", substr($res // '', 0, 600), "\n";

    # the whole request, to send again (--keep DIR)
    if ($o{keep} && open my $out, '>:raw', "$o{keep}/request-$n") {
        print $out $req;
        close $out;
    }
}


# the events of a Responses stream: "event: type" and "data: {...}" each
sub responses_events {
    my ($body) = @_;

    return map {
        my ($name, $data) = /^event: (\S+)\ndata: (.*)\z/s;
        my $j = defined $data ? eval { $JSON->decode($data) } : undef;
        $j && $j->{type} eq $name ? $j : { _bad => $_ };
    } grep { /\S/ } split /\n\n/, $body;
}


sub check {
    my ($req, $raw, $left, $path) = @_;

    if ($raw eq '') {
        fail('no response', $req) if !$left;
        return;
    }

    my $res = VLMTest::parse_response($raw);
    my $s = $res->{status} || 0;

    $status{$s}++;

    if ($s >= 500 || $s < 200) {
        fail("status $s", $req, $raw);
        return;
    }

    return if $left;

    my $type = $res->{headers}{'content-type'} || '';

    if ($s != 200) {
        my $j = eval { $JSON->decode($res->{body}) };
        fail("$s without an OpenAI error body", $req, $raw)
            if $type ne 'application/json' || !$j || !$j->{error}
               || !defined $j->{error}{message} || !$j->{error}{type};
        return;
    }

    if ($path eq '/v1/responses') {
        if ($type eq 'text/event-stream') {
            my @ev = responses_events($res->{body});
            fail('a stream that does not end with the response', $req, $raw)
                if !@ev || grep({ $_->{_bad} } @ev)
                   || $ev[-1]{type} !~ /^response\.(completed|incomplete)$/;
            return;
        }

        my $j = eval { $JSON->decode($res->{body}) };
        fail('a 200 without a response', $req, $raw)
            if !$j || ($j->{object} // '') ne 'response'
               || ref $j->{output} ne 'ARRAY';
        return;
    }

    if ($type eq 'text/event-stream') {
        my @ev = vlm_sse($res->{body});
        fail('a stream that does not end with [DONE]', $req, $raw)
            if !@ev || $ev[-1] ne '[DONE]' || grep { ref $_ && $_->{_bad} } @ev;
        return;
    }

    my $j = eval { $JSON->decode($res->{body}) };
    fail('a 200 without a completion', $req, $raw)
        if !$j || ref $j->{choices} ne 'ARRAY'
           || !defined $j->{choices}[0]{finish_reason};
}


while ($n < $o{requests}) {
    last if $o{seconds} && time - $t0 > $o{seconds};
    $n++;

    my $r = request();
    my $path = rand() < 0.25 ? '/v1/responses' : '/v1/chat/completions';
    my $m = rand;

    $r = responses_request($r) if $path eq '/v1/responses';

    # a third as made, a third mutated as data, a third as bytes
    mutate_value($r) if $m < 0.35;
    mutate_value($r) if $m < 0.1;

    my $body = $JSON->encode($r);
    utf8::encode($body);
    $body = mutate_bytes($body) if $m >= 0.3 && $m < 0.65;

    my $how = rand() < 0.15 ? 'chunked' : 'plain';
    my $leave = rand() < 0.05 ? (rand() < 0.5 ? 'at once' : 'soon') : '';
    my $req = http_text($body, $how, $path);

    my $sock = VLMTest::connect_to($srv);
    local $SIG{PIPE} = 'IGNORE';
    print $sock $req;

    my $raw = '';
    my $sel = IO::Select->new($sock);
    my $deadline = time + ($leave eq 'at once' ? 0 : $leave ? 0.05 : 60);

    while ((my $wait = $deadline - time) > 0 || !$leave) {
        last if $wait <= 0;
        last if !$sel->can_read($wait);
        my $got = sysread($sock, my $buf, 65536);
        last if !$got;
        $raw .= $buf;
    }

    close $sock;

    print "$n: $path ", length $body, " bytes $how",
          ($leave ? " left $leave" : ''),
          ': ', ($raw =~ m{^HTTP/1\.1 (\d+)} ? $1 : '-'), "\n"
        if $o{verbose};

    check($req, $raw, $leave, $path);
}

my $secs = time - $t0;

# afterwards: the server is whole
my $zone = vlm_wait_idle($srv, 10);
push @failures, "slots left in use: $zone->{slots_used}"
    if $zone->{slots_used};
push @failures, "arena bytes left in use: $zone->{arena_used}"
    if $zone->{arena_used};

my $h = vlm_health($srv);
push @failures, "/health is $h->{_status} after the run"
    if $h->{_status} != 200;

my $engine1 = join ',', vlm_engine_pids($srv);
push @failures, "the engine changed: $engine0 -> $engine1"
    if $engine0 ne $engine1;

if (open my $log, '<', "$srv->{prefix}/logs/error.log") {
    while (<$log>) {
        push @failures, "error.log: $_"
            if /\[(alert|emerg|crit)\]|exited on signal|Sanitizer/
               || /runtime error:/;
    }
    close $log;
}

if (my $dir = $ENV{VLM_SANITIZER_LOGS}) {
    push @failures, "sanitizer report: $_" for glob "$dir/*";
}

printf "http_fuzz: %d requests in %.1f s (seed %d), statuses: %s\n",
       $n, $secs, $o{seed},
       join(' ', map { "$_:$status{$_}" } sort keys %status);

if (@failures) {
    my $last = $#failures > 19 ? 19 : $#failures;
    print "http_fuzz: FAILED\n", map { "  $_\n" } @failures[0 .. $last];
    $srv->{keep} = 1;
    exit 1;
}

print "http_fuzz: ok\n";
