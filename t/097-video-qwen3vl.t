# Qwen3-VL videos through nginx: the serving fixture
# (tests/fixtures/serving-qwen3vl, with Qwen3-VL's published
# video_preprocessor_config.json) given t/data/video-64x48.mp4 (20 frames
# of 64x48 at 8 frames a second).  Qwen3VLVideoProcessor samples 5 of
# them at fps 2 (np.linspace: 0, 5, 10, 14, 19), resizes them to 64x64
# and pads them to 3 temporal patches; Qwen3VLProcessor writes each patch
# as "<t seconds>" (0.3, 1.5, 2.4) and a <|vision_start|> block of 4
# <|video_pad|>.  Each case of tools/fixtures_video.py (ref/video1: a
# video; ref/image_video: a picture, then the video; ref/video1_fps4:
# the video at vLLM's mm_processor_kwargs fps 4, 10 frames, 5 temporal
# patches) gets the processor's prompt ids from /tokenize and in usage,
# and transformers' 8 greedy tokens, plain (their bytes in logprobs) and
# streamed; the video fetched from an http URL answers the same, and in
# the Responses API (vLLM's video_url part; a bad one a 400 with its
# Responses path); the video sent again after other text comes from the
# image feature cache; vLLM's frame list is written with its frames'
# times at 2 frames a second; an fps of 0, over 240 or not a number, and
# frames under 32 pixels a side (the 32x24 mp4), as transformers refuses
# them, are 400s naming them; every slot free and no alert afterwards;
# a group of two tensor-parallel ranks gives the same answers, the
# videos' features handed over through the feature pool.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use MIME::Base64 qw(encode_base64);
use Test::More;
use VLMTest;
use VLMServed;

vlm_prereqs();

my $root = vlm_root();
my $model = "$root/tests/fixtures/serving-qwen3vl";
my $mp4 = vlm_slurp("$root/t/data/video-64x48.mp4");
my $mp4_url = vlm_data_url('video/mp4', $mp4);

sub video { { type => 'video_url', video_url => { url => $_[0] } } }
sub image { { type => 'image_url', image_url => { url => $_[0] } } }

sub video_case {
    my ($name, $video, %extra) = @_;
    my $d = "$model/ref/$name";
    my @images = map { image(vlm_data_url('image/png', vlm_slurp($_))) }
                 sort glob("$d/image_*.png");

    return { name => $name, model => 'serving',
             parts => [ @images, video($video) ],
             question => vlm_slurp("$d/question.txt"),
             expect => vlm_json(vlm_slurp("$d/expect.json")),
             extra => \%extra };
}

# the third at vLLM's mm_processor_kwargs fps 4: 10 frames, 5 patches
my @cases = ((map { video_case($_, $mp4_url) } qw(video1 image_video)),
             video_case('video1_fps4', $mp4_url,
                        mm_processor_kwargs => { fps => 4 }));

my $srv = vlm_start(name => 'video-qwen3vl', port => vlm_port(97),
                    model => $model,
                    http_config => <<'_EOC_',
    vlm_served_model_name serving;
    vlm_image_fetch /_vlm_image;
    vlm_image_fetch_allow 127.0.0.1/32;
_EOC_
                    locations => <<"_EOC_");
        location = /tokenize { vlm_tokenize; }
        location = /detokenize { vlm_tokenize; }
        location = /v1/responses { vlm_responses; }
        location /files/ { alias $root/t/data/; }
        location = /_vlm_image {
            internal;
            proxy_pass \$vlm_image_url;
            subrequest_output_buffer_size 64k;
        }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

# the processor's prompt: the timestamps and blocks in the ids
vlm_check_tokenize($srv, @cases);
vlm_check_served($srv, 'a Qwen3-VL video', @cases);

# the same video from an http URL
{
    my $c = video_case('video1',
                       "http://127.0.0.1:$srv->{port}/files/video-64x48.mp4");
    $c->{name} = 'video1 from an http URL';
    vlm_check_served($srv, 'fetched', $c);
}

# the video's features: encoded once, then from the image feature cache
{
    my $m0 = vlm_metrics($srv);
    my $b = vlm_served_body($cases[0]);
    unshift @{ $b->{messages}[0]{content} },
        { type => 'text', text => 'A question first.' };
    is(vlm_post_json($srv, $b)->{status}, 200, 'the video again: 200');
    my $m1 = vlm_metrics($srv);
    is(($m1->{vlm_image_cache_hits_total} // 0)
       - ($m0->{vlm_image_cache_hits_total} // 0), 1,
       'the video again: one image cache hit');
    is(($m1->{vlm_image_cache_misses_total} // 0)
       - ($m0->{vlm_image_cache_misses_total} // 0), 0,
       'the video again: no miss');
}

# the Responses API: vLLM's video part (the chat's video_url) in an input
# message, the chat's prompt and greedy answer; a bad one with its
# Responses path
{
    my $c = $cases[0];
    my $chat = eval { vlm_json(vlm_post_json($srv,
                                             vlm_served_body($c))->{body}) }
               || {};
    my $b = { model => 'serving', temperature => 0,
              max_output_tokens => scalar @{ $c->{expect}{greedy_ids} },
              input => [ { role => 'user',
                           content => [ video($mp4_url),
                                        { type => 'input_text',
                                          text => $c->{question} } ] } ] };
    my $res = vlm_request($srv, 'POST', '/v1/responses',
                          VLMTest::vlm_json_text($b));
    ok(length($chat->{choices}[0]{message}{content} // ''),
       'the chat of that video: an answer');
    is($res->{status}, 200, 'Responses, a video: 200') or diag($res->{body});
    my $j = eval { vlm_json($res->{body}) } || {};
    my @m = grep { $_->{type} eq 'message' } @{ $j->{output} || [] };
    is(@m ? $m[0]{content}[0]{text} : undef,
       $chat->{choices}[0]{message}{content},
       "Responses, a video: the chat's greedy answer");
    is($j->{usage}{input_tokens}, scalar @{ $c->{expect}{prompt_ids} },
       "Responses, a video: the processor's prompt tokens");

    $b->{input}[0]{content}[0] = video('data:video/mp4;base64,AAAA');
    $res = vlm_request($srv, 'POST', '/v1/responses',
                       VLMTest::vlm_json_text($b));
    is($res->{status}, 400, 'Responses, a bad video: 400');
    my $e = eval { vlm_json($res->{body})->{error} } || {};
    is($e->{param}, 'input[0].content[0].video_url',
       'Responses, a bad video: its Responses path');
}

# vLLM's frames: every frame kept, at 2 frames a second; five 64x64
# frames make 3 temporal patches of 4 tokens at 0.2, 1.2 and 2.0 s
{
    (my $png = encode_base64(vlm_png(64, 64, 3))) =~ s/\s+//g;
    my $frames = 'data:video/jpeg;base64,' . join(',', ($png) x 5);
    my $c = { name => 'frames', model => 'serving',
              parts => [ video($frames) ], question => 'What happens?',
              expect => { greedy_ids => [ 0 ] } };
    my $b = vlm_served_body($c);
    delete @$b{qw(max_tokens temperature)};
    my $res = vlm_request($srv, 'POST', '/tokenize',
                          VLMTest::vlm_json_text($b));
    is($res->{status}, 200, 'five frames: /tokenize 200')
        or diag($res->{body});
    my $ids = eval { vlm_json($res->{body})->{tokens} } || [];

    $res = vlm_request($srv, 'POST', '/detokenize',
                       VLMTest::vlm_json_text({ model => 'serving',
                                                tokens => $ids }));
    my $text = eval { vlm_json($res->{body})->{prompt} } // '';
    my $block = '<|vision_start|>' . ('<|video_pad|>' x 4) . '<|vision_end|>';
    my $want = join '', map { "<$_ seconds>$block" } qw(0.2 1.2 2.0);
    like($text, qr/\Q$want\E/,
         'five frames: three blocks after their times');
}

# fps out of the server's range, or asking for more frames than
# vlm_max_video_frames (768) takes from a long video
{
    my @bad = ([0, qr/above 0 and at most this server's 240, but got 0/,
                'mm_processor_kwargs.fps'],
               [241, qr/at most this server's 240, but got 241/,
                'mm_processor_kwargs.fps'],
               ['4', qr/expected a number/, 'mm_processor_kwargs.fps']);
    for my $b (@bad) {
        my ($fps, $re, $param) = @$b;
        my $body = vlm_served_body($cases[0],
                                   mm_processor_kwargs => { fps => $fps });
        my $res = vlm_post_json($srv, $body);
        is($res->{status}, 400, "fps '$fps': 400");
        my $e = eval { vlm_json($res->{body})->{error} } || {};
        like($e->{message} // '', $re, "fps '$fps': the message says why")
            or diag($res->{body});
        is($e->{param}, $param, "fps '$fps': param $param");
    }
}

# frames under 32 pixels a side
{
    my $b = vlm_served_body($cases[0]);
    $b->{messages}[0]{content}[0] =
        video(vlm_data_url('video/mp4',
                           vlm_slurp("$root/t/data/video-h264.mp4")));
    my $res = vlm_post_json($srv, $b);
    is($res->{status}, 400, 'a 32x24 video: 400');
    my $e = eval { vlm_json($res->{body})->{error} } || {};
    like($e->{message} // '',
         qr/frames of 32x24 pixels, smaller than 32 a side/,
         'a 32x24 video: the message names its frames');
    is($e->{param}, 'messages[0].content[0].video_url',
       'a 32x24 video: its param');
}

vlm_wait_idle($srv);
is(vlm_health($srv)->{zone}{slots_used}, 0, 'every slot is free');
is(vlm_health($srv)->{zone}{arena_used}, 0, 'the arena is empty');
VLMTest::check_log($srv, 'Qwen3-VL video requests');
VLMTest::vlm_stop($srv);
undef $srv;

# tensor parallel: rank 0 encodes each video and hands its features
# (DeepStack's levels with them) to rank 1 through the feature pool
my $tp = vlm_start(name => 'video-qwen3vl-tp', port => vlm_port(98),
                   model => $model,
                   http_config => "    vlm_served_model_name serving;\n"
                                  . "    vlm_tensor_parallel 2;\n");
END { VLMTest::vlm_stop($tp) if $tp }

vlm_check_served($tp, 'two ranks', @cases);
{
    my $m = vlm_metrics($tp);
    cmp_ok($m->{'vlm_feature_transfers_total{path="pool"}'} // 0, '>=', 3,
           'two ranks: the videos went through the pool');
}

done_testing();
