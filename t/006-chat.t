# POST /v1/chat/completions end to end on the CPU engine with the tiny
# random model of tests/fixtures/serving (its answers are gibberish, so
# the checks are about shapes, counts and determinism): non-streaming and
# streaming, text and data: URL images (PNG and JPEG of different sizes),
# usage counts against vlm-cli's template + tokenizer, max_tokens and
# max_completion_tokens, stop strings, seeds, logprobs, /v1/models and
# /metrics.  Plain Test::More: the engine must be ready before the first
# request, which Test::Nginx::Socket blocks cannot wait for.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Time::HiRes qw(sleep);
use VLMTest;

my $build = vlm_prereqs();
my $root = vlm_root();
my $model = "$root/tests/fixtures/serving";
my $tmp = tempdir("vlm-chat-XXXXXX", TMPDIR => 1, CLEANUP => 1);

my $srv = vlm_start(name => 'chat');
END { VLMTest::vlm_stop($srv) if $srv }

my $png = vlm_data_url('image/png', vlm_png(56, 56, 1));      # 4 tokens
my $jpeg = vlm_data_url('image/jpeg', vlm_jpeg());            # 100x60: 8

my $m0 = vlm_metrics($srv);
my ($n_ok, $n_prompt, $n_completion, $n_images) = (0, 0, 0, 0);


# the prompt's token count as vlm-cli makes it: template, then tokenizer,
# then each image's single pad expanded to its grid's tokens
sub cli_prompt_tokens {
    my ($messages, @image_tokens) = @_;

    open my $out, '>', "$tmp/m.json" or die;
    print $out $VLMTest::JSON->encode($messages);
    close $out;

    system("$build/vlm-cli template --model $model --messages $tmp/m.json"
           . " > $tmp/p.txt") == 0 or die "vlm-cli template failed";
    my $ids = `$build/vlm-cli tokenize --model $model --file $tmp/p.txt`;
    my @ids = split ' ', $ids;

    my $n = @ids;
    $n += $_ - 1 for @image_tokens;

    return $n;
}


sub chat {
    my ($body) = @_;

    my $res = vlm_post_json($srv, $body);
    my $j = eval { vlm_json($res->{body}) };

    if ($res->{status} == 200 && $j && !$body->{stream}) {
        $n_ok++;
        $n_prompt += $j->{usage}{prompt_tokens};
        $n_completion += $j->{usage}{completion_tokens};
    }

    return ($res, $j);
}


# streams ask for usage (to account for it) unless $no_usage, in which case
# the caller passes the counts it knows
sub stream {
    my ($body, $no_usage, $prompt, $completion) = @_;

    my %so = $no_usage ? ()
                       : (stream_options => { include_usage => JSON::PP::true });
    my $res = vlm_post_json($srv, { %$body, stream => JSON::PP::true, %so });
    my @ev = vlm_sse($res->{body});
    my ($u) = grep { ref $_ && $_->{usage} } @ev;

    if ($u) {
        $n_prompt += $u->{usage}{prompt_tokens};
        $n_completion += $u->{usage}{completion_tokens};

    } elsif ($no_usage) {
        $n_prompt += $prompt;
        $n_completion += $completion;
    }

    my $text = join '', map {
        ref $_ && $_->{choices} && @{ $_->{choices} }
            ? ($_->{choices}[0]{delta}{content} // '') : ''
    } @ev;

    $n_ok++ if $res->{status} == 200;

    return ($res, \@ev, $text);
}


sub check_completion {
    my ($what, $j, %want) = @_;

    is_deeply([sort keys %$j],
              [qw(choices created id model object usage)],
              "$what: the keys of a chat.completion");
    like($j->{id}, qr/^chatcmpl-[0-9a-f]{32}$/, "$what: id");
    is($j->{object}, 'chat.completion', "$what: object");
    ok(abs($j->{created} - time) < 60, "$what: created is now");
    is($j->{model}, 'serving', "$what: model");
    is(scalar @{ $j->{choices} }, 1, "$what: one choice");

    my $c = $j->{choices}[0];

    is_deeply([sort keys %$c], [qw(finish_reason index logprobs message)],
              "$what: the keys of a choice");
    is($c->{index}, 0, "$what: index 0");
    is($c->{message}{role}, 'assistant', "$what: role");
    ok(defined $c->{message}{content} && !ref $c->{message}{content},
       "$what: content is a string");
    is($c->{finish_reason}, $want{finish}, "$what: finish_reason")
        if $want{finish};
    ok(!defined $c->{logprobs}, "$what: logprobs null") if !$want{logprobs};

    my $u = $j->{usage};

    is_deeply([sort keys %$u],
              [qw(completion_tokens prompt_tokens prompt_tokens_details
                  total_tokens)],
              "$what: usage keys");
    is($u->{prompt_tokens}, $want{prompt}, "$what: prompt_tokens")
        if defined $want{prompt};
    is($u->{completion_tokens}, $want{completion},
       "$what: completion_tokens") if defined $want{completion};
    is($u->{total_tokens}, $u->{prompt_tokens} + $u->{completion_tokens},
       "$what: total_tokens");
}


sub check_chunks {
    my ($what, $ev, %want) = @_;

    my @ev = @$ev;

    ok(@ev >= 3, "$what: at least the role, finish and [DONE] events");
    is($ev[-1], '[DONE]', "$what: ends with [DONE]");
    ok(!grep({ ref $_ && $_->{_bad} } @ev), "$what: every event is JSON");

    my @chunks = grep { ref $_ } @ev;
    my %ids = map { $_->{id} => 1 } @chunks;

    is(scalar keys %ids, 1, "$what: one id in every chunk");
    like($chunks[0]{id}, qr/^chatcmpl-[0-9a-f]{32}$/, "$what: id");
    ok(!grep({ $_->{object} ne 'chat.completion.chunk' } @chunks),
       "$what: object chat.completion.chunk");
    ok(!grep({ $_->{model} ne 'serving' } @chunks), "$what: model");
    is($chunks[0]{choices}[0]{delta}{role}, 'assistant',
       "$what: the first delta has the role");

    my @want_keys = $want{usage}
                    ? qw(choices created id model object usage)
                    : qw(choices created id model object);
    my $bad_keys = grep {
        join(' ', sort keys %$_) ne join(' ', @want_keys)
        || (@{ $_->{choices} }
            && join(' ', sort keys %{ $_->{choices}[0] })
               ne 'delta finish_reason index logprobs')
        || (@{ $_->{choices} } && $_->{choices}[0]{index} != 0)
    } @chunks;

    is($bad_keys, 0, "$what: every chunk has the keys of a "
       . "chat.completion.chunk (@want_keys)");
    ok(!grep({ abs($_->{created} - time) > 60 } @chunks),
       "$what: created is now");

    my @fin = grep { @{ $_->{choices} }
                     && defined $_->{choices}[0]{finish_reason} } @chunks;

    is(scalar @fin, 1, "$what: one chunk has a finish_reason");
    is($fin[0]{choices}[0]{finish_reason}, $want{finish},
       "$what: finish_reason") if @fin && $want{finish};

    my @usage = grep { defined $_->{usage} } @chunks;

    if ($want{usage}) {
        is(scalar @usage, 1, "$what: one usage chunk");
        is($usage[0], $chunks[-1], "$what: usage comes last");
        is_deeply($usage[0]{choices}, [], "$what: usage chunk has no "
                  . "choices");
        is($usage[0]{usage}{prompt_tokens}, $want{prompt},
           "$what: stream prompt_tokens") if defined $want{prompt};
        is($usage[0]{usage}{completion_tokens}, $want{completion},
           "$what: stream completion_tokens") if defined $want{completion};

    } else {
        is(scalar @usage, 0, "$what: no usage without include_usage");
    }
}


my $T0 = { temperature => 0, max_tokens => 8 };

# --- /v1/models

{
    my $res = vlm_request($srv, 'GET', '/v1/models');
    my $j = vlm_json($res->{body});

    is($res->{status}, 200, 'models: 200');
    like($res->{headers}{'content-type'}, qr{^application/json},
         'models: JSON');
    is($j->{object}, 'list', 'models: a list');
    is(scalar @{ $j->{data} }, 1, 'models: one model');
    is($j->{data}[0]{id}, 'serving', 'models: the served name');
    is($j->{data}[0]{object}, 'model', 'models: object model');
    is($j->{data}[0]{owned_by}, 'ngx_http_vlm_module', 'models: owned_by');
    like($j->{data}[0]{created}, qr/^\d+$/, 'models: created');
    # the serving fixture's context: max_position_embeddings 4096
    is($j->{data}[0]{max_model_len}, 4096,
       'models: max_model_len, the context the engine serves');
}

# --- text, non-streaming: shape, usage checked against vlm-cli

my $msgs = [ { role => 'user', content => 'Describe nginx in one word.' } ];
my $text_prompt = cli_prompt_tokens($msgs);
my $answer;

{
    my ($res, $j) = chat({ model => 'serving', messages => $msgs, %$T0 });

    is($res->{status}, 200, 'text: 200');
    like($res->{headers}{'content-type'}, qr{^application/json},
         'text: JSON');
    check_completion('text', $j, finish => 'length', prompt => $text_prompt,
                     completion => 8);
    $answer = $j->{choices}[0]{message}{content};

    my ($res2, $j2) = chat({ model => 'serving', messages => $msgs, %$T0 });
    is($j2->{choices}[0]{message}{content}, $answer,
       'text: temperature 0 gives the same answer twice');
    isnt($j2->{id}, $j->{id}, 'text: every response has its own id');
}

# --- the same, streamed

{
    my ($res, $ev, $text) = stream({ model => 'serving', messages => $msgs,
                                     %$T0, stream_options =>
                                         { include_usage => JSON::PP::true }
                                   });

    is($res->{status}, 200, 'stream: 200');
    like($res->{headers}{'content-type'}, qr{^text/event-stream},
         'stream: text/event-stream');
    is($res->{headers}{'transfer-encoding'}, 'chunked', 'stream: chunked');
    # docs/serving.md says so: a proxy in front passes the events on at once
    is($res->{headers}{'x-accel-buffering'}, 'no',
       'stream: X-Accel-Buffering: no');
    check_chunks('stream', $ev, finish => 'length', usage => 1,
                 prompt => $text_prompt, completion => 8);
    is($text, $answer, 'stream: the deltas make the non-streamed answer');

    ($res, $ev, $text) = stream({ model => 'serving', messages => $msgs,
                                  %$T0 }, 1, $text_prompt, 8);
    check_chunks('stream without include_usage', $ev, finish => 'length');
    is($text, $answer, 'stream without include_usage: same text');
}

# --- max_tokens and max_completion_tokens

{
    my ($res, $j) = chat({ model => 'serving', messages => $msgs,
                           temperature => 0, max_completion_tokens => 3 });
    is($j->{usage}{completion_tokens}, 3, 'max_completion_tokens 3');
    is($j->{choices}[0]{finish_reason}, 'length',
       'max_completion_tokens: length');

    ($res, $j) = chat({ model => 'serving', messages => $msgs,
                        temperature => 0, max_tokens => 2 });
    is($j->{usage}{completion_tokens}, 2, 'max_tokens 2');

    ($res, $j) = chat({ model => 'serving', messages => $msgs,
                        temperature => 0, max_tokens => 9,
                        max_completion_tokens => 4 });
    is($j->{usage}{completion_tokens}, 4,
       'max_completion_tokens wins over max_tokens');
    ok(index($answer, $j->{choices}[0]{message}{content}) == 0,
       'a shorter answer is a prefix of the longer one');
}

# --- stop strings: cut before the first match, not returned, "stop"

{
    my ($res, $j) = chat({ model => 'serving', messages => $msgs,
                           temperature => 0, max_tokens => 16 });
    my $long = $j->{choices}[0]{message}{content};
    my $chars = length $long;

    ok($chars >= 4, "stop: a long enough answer ($chars characters)");

    # a stop string from the middle of the answer
    my $stop = substr($long, int($chars / 2), 2);
    my $want = substr($long, 0, index($long, $stop));

    ($res, $j) = chat({ model => 'serving', messages => $msgs,
                        temperature => 0, max_tokens => 16,
                        stop => [ "never-there", $stop ] });

    is($res->{status}, 200, 'stop: 200');
    is($j->{choices}[0]{message}{content}, $want,
       'stop: the text before the stop string');
    is($j->{choices}[0]{finish_reason}, 'stop', 'stop: finish_reason stop');
    ok($j->{usage}{completion_tokens} < 16, 'stop: fewer tokens');

    my ($sres, $ev, $text) = stream({ model => 'serving', messages => $msgs,
                                      temperature => 0, max_tokens => 16,
                                      stop => $stop });
    is($text, $want, 'stop, streamed: the same text');
    check_chunks('stop, streamed', $ev, finish => 'stop', usage => 1,
                 prompt => $text_prompt,
                 completion => $j->{usage}{completion_tokens});
}

# --- seeds: temperature 1 and a seed give the same text twice

{
    my %b = (model => 'serving', messages => $msgs, temperature => 1,
             max_tokens => 12);

    my (undef, $a1) = chat({ %b, seed => 1234 });
    my (undef, $a2) = chat({ %b, seed => 1234 });
    my (undef, $a3) = chat({ %b, seed => 99 });

    is($a2->{choices}[0]{message}{content}, $a1->{choices}[0]{message}{content},
       'seed: same seed, same text');
    isnt($a3->{choices}[0]{message}{content},
         $a1->{choices}[0]{message}{content},
         'seed: another seed, another text');

    my (undef, undef, $s1) = stream({ %b, seed => 1234 });
    is($s1, $a1->{choices}[0]{message}{content},
       'seed: streamed, same text');
}

# --- logprobs

{
    my ($res, $j) = chat({ model => 'serving', messages => $msgs, %$T0,
                           logprobs => JSON::PP::true, top_logprobs => 3 });
    my $lp = $j->{choices}[0]{logprobs};

    is($res->{status}, 200, 'logprobs: 200');
    ok($lp && ref $lp->{content} eq 'ARRAY', 'logprobs: content array');
    is(scalar @{ $lp->{content} || [] }, $j->{usage}{completion_tokens},
       'logprobs: one entry per completion token');

    my ($bad, $greedy) = (0, 0);

    for my $e (@{ $lp->{content} || [] }) {
        $bad++ if !defined $e->{token} || $e->{logprob} > 0
                  || ref $e->{bytes} ne 'ARRAY'
                  || @{ $e->{top_logprobs} } != 3;
        my @t = @{ $e->{top_logprobs} };
        $bad++ if $t[0]{logprob} < $t[1]{logprob}
                  || $t[1]{logprob} < $t[2]{logprob};
        $greedy++ if $t[0]{token} eq $e->{token}
                     && abs($t[0]{logprob} - $e->{logprob}) < 1e-5;
    }

    is($bad, 0, 'logprobs: token, logprob <= 0, bytes, three sorted tops');
    is($greedy, scalar @{ $lp->{content} || [] },
       'logprobs: at temperature 0 the token is the best one');

    my ($sres, $ev) = stream({ model => 'serving', messages => $msgs, %$T0,
                               logprobs => JSON::PP::true,
                               top_logprobs => 2 });
    my @lps = map { @{ $_->{choices}[0]{logprobs}{content} || [] } }
              grep { ref $_ && @{ $_->{choices} || [] }
                     && $_->{choices}[0]{logprobs} } @$ev;

    is(scalar @lps, 8, 'logprobs, streamed: eight entries');
    is(scalar(grep { @{ $_->{top_logprobs} } == 2 } @lps), 8,
       'logprobs, streamed: two tops each');
}

# --- images: one PNG, then a PNG and a JPEG of another size

{
    my $m1 = [ { role => 'user', content => [
                   { type => 'image' },
                   { type => 'text', text => 'What is this?' } ] } ];
    my $want1 = cli_prompt_tokens($m1, 4);

    my ($res, $j) = chat({ %{ vlm_chat_body('What is this?', $png) },
                           %$T0 });
    is($res->{status}, 200, 'one image: 200');
    check_completion('one image', $j, finish => 'length', prompt => $want1,
                     completion => 8);
    $n_images += 1;

    my $m2 = [ { role => 'user', content => [
                   { type => 'image' }, { type => 'image' },
                   { type => 'text', text => 'Compare them.' } ] } ];
    my $want2 = cli_prompt_tokens($m2, 4, 8);

    ($res, $j) = chat({ %{ vlm_chat_body('Compare them.', $png, $jpeg) },
                        %$T0 });
    is($res->{status}, 200, 'two images: 200');
    check_completion('two images', $j, finish => 'length', prompt => $want2,
                     completion => 8);
    $n_images += 2;

    my $a2 = $j->{choices}[0]{message}{content};

    my ($sres, $ev, $text) = stream({
        %{ vlm_chat_body('Compare them.', $png, $jpeg) }, %$T0,
        stream_options => { include_usage => JSON::PP::true } });
    check_chunks('two images, streamed', $ev, finish => 'length',
                 usage => 1, prompt => $want2, completion => 8);
    is($text, $a2, 'two images, streamed: same text');
    $n_images += 2;

    my $pj = vlm_data_url('image/png', vlm_png(56, 56, 200));
    my $lp = { logprobs => JSON::PP::true, top_logprobs => 1 };
    my (undef, $l1) = chat({ %{ vlm_chat_body('What is this?', $png) },
                             %$T0, %$lp });
    my (undef, $l2) = chat({ %{ vlm_chat_body('What is this?', $pj) },
                             %$T0, %$lp });
    my $first = sub { $_[0]{choices}[0]{logprobs}{content}[0]{logprob} };

    ok(defined $first->($l1) && defined $first->($l2)
       && $first->($l1) != $first->($l2),
       'other pixels, other logprobs: the pixels reach the model');
    $n_images += 2;
}

# --- /metrics: the counters moved by what was sent, the pools are idle

{
    my $zone = vlm_wait_idle($srv, 3);
    is($zone->{slots_used}, 0, 'health: no slot in use');
    is($zone->{arena_used}, 0, 'health: no arena byte in use');

    my $m = vlm_wait_pools($srv);

    my $d = sub { ($m->{$_[0]} // 0) - ($m0->{$_[0]} // 0) };

    is($d->('vlm_requests_total{status="200"}'), $n_ok,
       "metrics: $n_ok requests with status 200");
    is($d->('vlm_prompt_tokens_total'), $n_prompt,
       "metrics: $n_prompt prompt tokens");
    is($d->('vlm_completion_tokens_total'), $n_completion,
       "metrics: $n_completion completion tokens");
    is($d->('vlm_images_total'), $n_images, "metrics: $n_images images");
    ok($d->('vlm_time_to_first_token_seconds_count') >= $n_ok,
       'metrics: a time to first token for each request');
    is($m->{vlm_engine_up}, 1, 'metrics: engine up');
    ok($m->{vlm_engine_rss_bytes} > 0, 'metrics: engine RSS');
    ok($m->{'vlm_pool_peak{pool="request_slots",unit="slots"}'} >= 1,
       'metrics: the slot pool was used');

    for my $pool (qw(request_slots queue_arena kv_blocks sequences)) {
        my ($k) = grep { /^vlm_pool_used\{pool="$pool"/ } keys %$m;
        ok(defined $k, "metrics: pool $pool is exported");
        is($m->{$k // ''}, 0, "metrics: pool $pool back to 0 used");
    }

    is($m->{vlm_queue_length}, 0, 'metrics: nothing queued');
    is($m->{vlm_running_requests}, 0, 'metrics: nothing running');
}

VLMTest::check_log($srv, 'chat', qr/\[error\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'stop: no engine process left');

done_testing();
