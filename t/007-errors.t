# Every error path of POST /v1/chat/completions: the exact status and the
# exact OpenAI error body (message, type, param, code), Retry-After on 429
# and 503, and no slot or arena byte left behind by any of them.  Five
# nginx instances: limits (port P = TEST_NGINX_PORT), a queue of one
# (P + 1), an engine that never serves (P + 2), a request timeout (P + 3)
# and a small queue arena (P + 4).  Plain Test::More: the engine must be ready
# before the first request, which Test::Nginx::Socket blocks cannot wait
# for.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

my $port = $ENV{TEST_NGINX_PORT} || 1994;

my $srv = vlm_start(name => 'errors', port => $port, http_config => <<'_EOC_');
    vlm_max_images 2;
    vlm_max_image_pixels 5000;
_EOC_

my ($busy, $down, $slow, $small);

END {
    VLMTest::vlm_stop($_) for grep { $_ } $srv, $busy, $down, $slow, $small;
}


sub err_body {
    my ($message, $type, $param, $code) = @_;

    my $j = JSON::PP->new->allow_nonref(1);

    # the order OpenAI writes them in
    return '{"error":{"message":' . $j->encode($message)
           . ',"type":' . $j->encode($type)
           . ',"param":' . $j->encode($param)
           . ',"code":' . $j->encode($code) . '}}';
}


sub bad {
    my ($message, $param, $code) = @_;

    return err_body($message, 'invalid_request_error', $param,
                    $code || 'invalid_value');
}


my $png = vlm_png(56, 56, 1);
my $png_url = vlm_data_url('image/png', $png);
my $corrupt = $png;
substr($corrupt, 60, 30) = "\xff" x 30;
my $hi = [ { role => 'user', content => 'hi' } ];
my $im0 = 'messages[0].content[0].image_url';

my @cases = (
    [ 'bad JSON', '{"model":', 400,
      bad('Invalid JSON body at line 1, column 9 (byte 9): unexpected '
          . 'token near end of file.', undef, 'invalid_json') ],
    [ 'a JSON array', '[1,2]', 400,
      bad('The request body must be a JSON object, but got an array.',
          undef, 'invalid_json') ],
    [ 'an empty body', '', 400,
      bad('The request body is empty: expected a JSON object.', undef,
          'invalid_json') ],
    [ 'messages of the wrong type', { model => 'serving',
                                      messages => 'hi' }, 400,
      bad("Invalid type for 'messages': expected an array, but got a "
          . "string instead.", 'messages', 'invalid_type') ],
    [ 'no messages', { model => 'serving', messages => [] }, 400,
      bad("Invalid 'messages': empty array. Expected an array with "
          . "minimum length 1, but got an empty array instead.",
          'messages', 'empty_array') ],
    [ 'an unknown role', { model => 'serving',
                           messages => [ { role => 'robot',
                                           content => 'hi' } ] }, 400,
      bad("Invalid value for 'messages[0].role': 'robot'. Supported "
          . "values are: 'system', 'developer', 'user', 'assistant' and "
          . "'tool'.",
          'messages[0].role') ],
    [ 'temperature of the wrong type', { model => 'serving',
                                         messages => $hi,
                                         temperature => 'hot' }, 400,
      bad("Invalid type for 'temperature': expected a number, but got a "
          . "string instead.", 'temperature', 'invalid_type') ],
    [ 'stream of the wrong type', { model => 'serving', messages => $hi,
                                    stream => 'yes' }, 400,
      bad("Invalid type for 'stream': expected a boolean, but got a "
          . "string instead.", 'stream', 'invalid_type') ],
    [ 'a negative max_tokens', { model => 'serving', messages => $hi,
                                 max_tokens => -1 }, 400,
      bad("Invalid 'max_tokens': expected a value between 1 and "
          . "2147483647, but got -1 instead.", 'max_tokens') ],
    [ 'max_tokens over vlm_max_tokens', { model => 'serving',
                                          messages => $hi,
                                          max_tokens => 100000000 }, 400,
      bad("Invalid 'max_tokens': expected a value of at most 1024 on this "
          . "server, but got 100000000 instead.", 'max_tokens') ],
    [ 'top_logprobs without logprobs', { model => 'serving',
                                         messages => $hi,
                                         top_logprobs => 2 }, 400,
      bad("Invalid 'top_logprobs': 'logprobs' must be true when "
          . "'top_logprobs' is given.", 'top_logprobs') ],
    [ 'an unknown model', { model => 'gpt-4', messages => $hi }, 404,
      bad('The model "gpt-4" does not exist; this server serves '
          . '"serving"', 'model', 'model_not_found') ],
    [ 'n above vlm_max_n', { model => 'serving', messages => $hi, n => 9 },
      400, bad("Invalid 'n': expected a value of at most 8 on this server "
               . "(vlm_max_n), but got 9 instead.", 'n') ],
    [ 'more images than vlm_max_images',
      vlm_chat_body('x', $png_url, $png_url, $png_url), 400,
      bad('Too many images: this server accepts at most 2 images per '
          . 'request.', 'messages[0].content[2]',
          'array_above_max_length') ],
    [ 'an image over vlm_max_image_pixels',
      vlm_chat_body('x', vlm_data_url('image/png', vlm_png(100, 60))), 400,
      bad('PNG: 100x60 is over the limit of 5000 pixels', $im0) ],
    [ 'a corrupt image header',
      vlm_chat_body('x', vlm_data_url('image/png',
                                      "\x89PNG\r\n\x1a\n" . 'x' x 24)), 400,
      bad('PNG: truncated before the end of IHDR', $im0) ],
    [ 'corrupt image data (found while decoding, after admission)',
      vlm_chat_body('x', vlm_data_url('image/png', $corrupt)), 400,
      bad('PNG: IDAT stream error', $im0) ],
    [ 'an unsupported image format',
      vlm_chat_body('x', vlm_data_url('image/bmp', 'BM' . 'x' x 16)), 400,
      bad('image: unknown format (not JPEG, PNG, WebP or GIF by its first '
          . 'bytes)', $im0) ],
    [ 'a media type that is no image',
      vlm_chat_body('x', 'data:text/plain;base64,aGVsbG8='), 400,
      bad('data URL: the media type is not image/*', $im0) ],
    [ 'a data: URL that is not base64',
      vlm_chat_body('x', 'data:image/png,hello'), 400,
      bad("Invalid 'messages[0].content[0].image_url.url': only "
          . "base64-encoded data: URLs are supported (data:<media "
          . "type>;base64,...).", "$im0.url", 'unsupported_value') ],
    [ 'truncated base64',
      vlm_chat_body('x', substr($png_url, 0, length($png_url) - 3)), 400,
      bad('base64: length ' . (length($png_url) - 3 - length
          'data:image/png;base64,') . ' is not a multiple of 4', $im0) ],
    [ 'an http:// image URL (remote fetching not configured)',
      vlm_chat_body('x', 'http://127.0.0.1:1/a.png'), 400,
      bad('image URLs other than data: URLs are not enabled on this '
          . 'server', $im0, 'unsupported_image_url') ],
    [ 'a prompt longer than the context',
      vlm_chat_body(join ' ', map { "w$_" } 1 .. 6000), 400,
      undef ],
    [ 'a prompt longer than the context, streamed',
      { %{ vlm_chat_body(join ' ', map { "w$_" } 1 .. 6000) },
        stream => JSON::PP::true }, 400, undef ],
);

for my $c (@cases) {
    my ($what, $body, $status, $want) = @$c;

    my $res = vlm_post_json($srv, $body);

    is($res->{status}, $status, "$what: $status");
    like($res->{headers}{'content-type'} // '', qr{^application/json},
         "$what: JSON");

    if (defined $want) {
        is($res->{body}, $want, "$what: the error body");

    } else {
        like($res->{body}, qr/^\{"error":\{"message":"This model's maximum context length is 4096 tokens \(vlm_max_model_len\), but the messages resulted in \d+ tokens\.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"\}\}$/,
             "$what: the error body");
    }

    my $zone = vlm_wait_idle($srv, 2);
    ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
       "$what: no slot or arena byte left");
}

# a request without a body at all, and methods other than POST

{
    my $res = vlm_request($srv, 'POST', '/v1/chat/completions');
    is($res->{status}, 400, 'no body: 400');
    is($res->{body}, bad('the request has no body: send the chat request '
                         . 'as JSON', undef, 'invalid_body'),
       'no body: the error body');

    for my $m (qw(GET PUT DELETE)) {
        $res = vlm_request($srv, $m, '/v1/chat/completions');
        is($res->{status}, 405, "$m: 405");
        is($res->{headers}{allow}, 'POST', "$m: Allow: POST");
        is($res->{body}, bad("method $m is not allowed here, use POST",
                             undef, 'method_not_allowed') . "\n",
           "$m: the error body");
    }
}

# the errors were answered at info level, nothing worse

VLMTest::check_log($srv, 'limits', qr/\[error\]/);

my @left = vlm_stop($srv);
undef $srv;
is(scalar @left, 0, 'limits: no engine process left');

# --- a queue of one: the second request gets 429 with Retry-After; a
# prompt over vlm_max_prompt_bytes gets 400

$busy = vlm_start(name => 'busy', port => $port + 1, http_config => <<'_EOC_');
    vlm_max_running 1;
    vlm_max_queued 0;
    vlm_max_tokens 4000;
    vlm_max_prompt_bytes 1k;
_EOC_

{
    my $st = vlm_open_stream($busy, {
        %{ vlm_chat_body('hi') }, max_tokens => 4000, temperature => 0,
        stream => JSON::PP::true });

    ok(vlm_read_some($st, 5, qr/"content":"[^"]+"/),
       'queue of one: the first request streams');

    my $res = vlm_post_json($busy, { model => 'serving', messages => $hi });

    is($res->{status}, 429, 'queue full: 429');
    is($res->{headers}{'retry-after'}, '1', 'queue full: Retry-After');
    is($res->{body},
       err_body('the server is busy (all 1 request slots are busy), retry '
                . 'later', 'rate_limit_error', undef, 'queue_full'),
       'queue full: the error body');

    close $st->{sock};

    my $zone = vlm_wait_idle($busy, 2);
    is($zone->{slots_used}, 0, 'queue full: the abandoned stream frees '
       . 'its slot');

    $res = vlm_post_json($busy, { model => 'serving', messages => $hi,
                                  max_tokens => 2 });
    is($res->{status}, 200, 'queue of one: served again');

    $res = vlm_post_json($busy, vlm_chat_body('x' x 2000));
    is($res->{status}, 400, 'prompt over vlm_max_prompt_bytes: 400');
    like($res->{body}, qr/^\{"error":\{"message":"the prompt text has \d+ bytes, more than the 1024 this server accepts","type":"invalid_request_error","param":"messages","code":"prompt_too_long"\}\}$/,
         'prompt over vlm_max_prompt_bytes: the error body');

    my $m = vlm_metrics($busy);
    is($m->{'vlm_pool_failures_total{pool="request_slots"}'}, 1,
       'metrics: one slot allocation failed');
    is($m->{'vlm_requests_total{status="429"}'}, 1, 'metrics: one 429');

    $zone = vlm_wait_idle($busy, 2);
    ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
       'queue of one: nothing left in use');
}

VLMTest::check_log($busy, 'queue of one', qr/\[error\]/);
@left = vlm_stop($busy);
undef $busy;
is(scalar @left, 0, 'queue of one: no engine process left');

# --- an engine binary that is not the engine: 503 with Retry-After

$down = vlm_start(name => 'down', port => $port + 2, wait => 0,
                  http_config => "    vlm_engine_binary /bin/true;\n");

{
    sleep 0.5;

    my $res = vlm_post_json($down, { model => 'serving', messages => $hi });

    is($res->{status}, 503, 'engine not ready: 503');
    is($res->{headers}{'retry-after'}, '1', 'engine not ready: Retry-After');
    is($res->{body},
       err_body('the inference engine is not ready, retry later',
                'server_error', undef, 'engine_unavailable') . "\n",
       'engine not ready: the error body');

    my $h = vlm_health($down);
    is($h->{_status}, 503, 'engine not ready: health 503');
    is($h->{zone}{slots_used}, 0, 'engine not ready: no slot used');
}

VLMTest::vlm_stop($down);
undef $down;

# --- vlm_request_timeout: 504 before the response began, an SSE error
# event after; the slot comes back either way

$slow = vlm_start(name => 'timeout', port => $port + 3,
                  http_config => <<'_EOC_');
    vlm_max_tokens 4000;
    vlm_request_timeout 300ms;
_EOC_

{
    my $long = { %{ vlm_chat_body('hi') }, max_tokens => 4000,
                 temperature => 0 };
    my $timeout = err_body('the request took longer than 300 ms',
                           'server_error', undef, 'timeout');

    my $t0 = time;
    my $res = vlm_post_json($slow, $long);
    my $took = time - $t0;

    is($res->{status}, 504, 'timeout: 504');
    is($res->{body}, $timeout, 'timeout: the error body');
    ok($took < 2, sprintf('timeout: after %.2f s', $took));

    $res = vlm_post_json($slow, { %$long, stream => JSON::PP::true });
    my @ev = vlm_sse($res->{body});

    is($res->{status}, 200, 'timeout, streamed: the stream had begun');
    is($ev[-1], '[DONE]', 'timeout, streamed: ends with [DONE]');
    is(ref $ev[-2] ? $VLMTest::JSON->encode($ev[-2]) : '',
       $VLMTest::JSON->encode(vlm_json($timeout)),
       'timeout, streamed: the error event');

    my $zone = vlm_wait_idle($slow, 2);
    ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
       'timeout: nothing left in use');
    is(vlm_metrics($slow)->{'vlm_requests_total{status="504"}'}, 2,
       'timeout: two 504 in the metrics');
}

VLMTest::check_log($slow, 'timeout');
@left = vlm_stop($slow);
undef $slow;
is(scalar @left, 0, 'timeout: no engine process left');

# --- a queue arena of 320 KB (vlm_zone size=1m): a request larger than
# the whole arena gets 400, one that does not fit while another holds the
# arena gets 503 with Retry-After

$small = vlm_start(name => 'small', port => $port + 4, zone => '1m',
                   http_config => "    vlm_max_tokens 4000;\n");

{
    my $p = vlm_data_url('image/png', vlm_png(112, 112, 1));

    my $res = vlm_post_json($small, { %{ vlm_chat_body('x', ($p) x 4) },
                                      max_tokens => 2 });
    is($res->{status}, 400, 'larger than the arena: 400');
    like($res->{body}, qr/^\{"error":\{"message":"request needs \d+ bytes of queue arena, more than its whole size \(\d+: vlm_zone\)","type":"invalid_request_error","param":"messages","code":"request_too_large"\}\}$/,
         'larger than the arena: the error body');

    my $st = vlm_open_stream($small, { %{ vlm_chat_body('x', $p) },
                                       max_tokens => 4000, temperature => 0,
                                       stream => JSON::PP::true });
    ok(vlm_read_some($st, 10, qr/"content":"[^"]+"/),
       'arena held: the first request runs');

    $res = vlm_post_json($small, { %{ vlm_chat_body('y', $p) },
                                   max_tokens => 2 });
    is($res->{status}, 503, 'arena full: 503');
    is($res->{headers}{'retry-after'}, '1', 'arena full: Retry-After');
    like($res->{body}, qr/^\{"error":\{"message":"the server is busy \(queue arena has no room for \d+ bytes\), retry later","type":"server_error","param":null,"code":"queue_full"\}\}$/,
         'arena full: the error body');

    close $st->{sock};

    my $zone = vlm_wait_idle($small, 2);
    ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
       'arena: nothing left in use');

    $res = vlm_post_json($small, { %{ vlm_chat_body('y', $p) },
                                   max_tokens => 2 });
    is($res->{status}, 200, 'arena free again: served');
    is(vlm_metrics($small)->{'vlm_pool_failures_total{pool="queue_arena"}'},
       1, 'arena: one allocation failure in the metrics');
}

VLMTest::check_log($small, 'small arena');
@left = vlm_stop($small);
undef $small;
is(scalar @left, 0, 'small arena: no engine process left');

done_testing();
