# The prefix cache across requests (vlm_prefix_cache, on by default): a
# conversation with an image resent turn after turn gets the greedy
# answers it gets with the cache off, its later turns report the prompt
# tokens the cache had in usage.prompt_tokens_details.cached_tokens (plain
# and streamed), and /metrics counts the tokens looked up and found.
# Requests cancelled while their long prompt is prefilled or while they
# decode, and a soak of requests sharing a system prompt, leave no KV
# block used by a sequence; the cached ones stay within the pool.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

vlm_prereqs();

my $image = vlm_data_url('image/png', vlm_png(120, 80, 5));
my $system = 'You answer in short sentences about pictures. ' x 12;

# a 4-turn conversation, its answers and usage, on one server
sub conversation {
    my ($srv, $what) = @_;

    my @messages = (
        { role => 'system', content => $system },
        { role => 'user',
          content => [ { type => 'image_url', image_url => { url => $image } },
                       { type => 'text', text => 'What is in the picture?' } ] },
    );
    my (@answers, @usage);

    for my $turn (1 .. 4) {
        my $res = vlm_post_json($srv, {
            model => 'serving', messages => \@messages,
            max_tokens => 12, temperature => 0 });
        is($res->{status}, 200, "$what: turn $turn: 200")
            or diag($res->{body});

        my $j = vlm_json($res->{body});
        my $text = $j->{choices}[0]{message}{content};

        push @answers, $text;
        push @usage, $j->{usage};
        push @messages, { role => 'assistant', content => $text },
                        { role => 'user',
                          content => "And what about part $turn of it?" };
    }

    return (\@answers, \@usage);
}

sub kv_used {
    my $m = vlm_metrics(shift);
    return $m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'};
}

my ($on_answers, $on_usage, $on_metrics);

# the cache on
{
    my $srv = vlm_start(name => 'prefix-on', port => vlm_port(17),
                        http_config => "    vlm_max_tokens 4000;\n");

    my ($answers, $usage) = conversation($srv, 'on');
    ($on_answers, $on_usage) = ($answers, $usage);

    is($usage->[0]{prompt_tokens_details}{cached_tokens}, 0,
       'on: turn 1 found nothing');

    for my $t (1 .. 3) {
        my $u = $usage->[$t];
        my $c = $u->{prompt_tokens_details}{cached_tokens};

        # turn t resends turn t-1's prompt: at least its full blocks (16)
        cmp_ok($c, '>=', int($usage->[$t - 1]{prompt_tokens} / 16) * 16 - 16,
               'on: turn ' . ($t + 1) . " had $c of $u->{prompt_tokens} "
               . 'prompt tokens cached');
        ok($c < $u->{prompt_tokens} && $c % 16 == 0,
           'on: turn ' . ($t + 1) . ': whole blocks, the last token '
           . 'computed');
    }

    my $m = vlm_metrics($srv);
    my ($prompt, $cached) = (0, 0);
    for my $u (@$usage) {
        $prompt += $u->{prompt_tokens};
        $cached += $u->{prompt_tokens_details}{cached_tokens};
    }

    is($m->{vlm_prefix_cache_queries_tokens_total}, $prompt,
       'on: every prompt token was looked up');
    is($m->{vlm_prefix_cache_hits_tokens_total}, $cached,
       'on: the hits are the cached tokens reported');
    cmp_ok($m->{vlm_kv_blocks_cached}, '>', 0, 'on: blocks stay cached');

    # streamed, with include_usage: the same prompt again
    {
        my $res = vlm_post_json($srv, {
            model => 'serving', temperature => 0, max_tokens => 4,
            messages => [ { role => 'system', content => $system },
                          { role => 'user', content => 'Hello there.' } ],
            stream => JSON::PP::true,
            stream_options => { include_usage => JSON::PP::true } });
        $res = vlm_post_json($srv, {
            model => 'serving', temperature => 0, max_tokens => 4,
            messages => [ { role => 'system', content => $system },
                          { role => 'user', content => 'Hello there.' } ],
            stream => JSON::PP::true,
            stream_options => { include_usage => JSON::PP::true } });
        is($res->{status}, 200, 'stream: 200');

        my @ev = grep { ref $_ && $_->{usage} } vlm_sse($res->{body});
        my $u = @ev ? $ev[-1]{usage} : {};
        cmp_ok($u->{prompt_tokens_details}{cached_tokens} // 0, '>', 0,
               'stream: the usage chunk reports cached tokens');
        ok(($u->{prompt_tokens_details}{cached_tokens} // 0)
           < ($u->{prompt_tokens} // 0), 'stream: fewer than the prompt');
    }

    # a long prompt abandoned while it is prefilled, and one while it
    # decodes: their blocks are given back
    {
        my $long = join ' ', map { "word$_" } 1 .. 400;

        for my $i (1 .. 3) {
            my $st = vlm_open_stream($srv, {
                %{ vlm_chat_body("$i $long") }, max_tokens => 200,
                stream => JSON::PP::true });
            select(undef, undef, undef, 0.02 * $i);
            close $st->{sock};
        }

        my $st = vlm_open_stream($srv, {
            %{ vlm_chat_body("Tell me a story. $long") }, max_tokens => 400,
            temperature => 0, stream => JSON::PP::true });
        ok(vlm_read_some($st, 20, qr/("content":"[^"]+".*){3}/s),
           'cancel: the stream has begun');
        close $st->{sock};

        vlm_wait_idle($srv, 10);
        my $used;
        for (1 .. 50) {
            $used = kv_used($srv);
            last if defined $used && $used == 0;
            select(undef, undef, undef, 0.1);
        }
        is($used, 0, 'cancel: no KV block is used by a sequence');
    }

    # a soak: many requests over one system prompt, some cancelled
    {
        my $ok = 0;

        for my $i (1 .. 24) {
            my $body = {
                model => 'serving', temperature => 0, max_tokens => 3,
                messages => [ { role => 'system', content => $system },
                              { role => 'user',
                                content => "Question number $i?" } ] };

            if ($i % 6 == 0) {
                my $st = vlm_open_stream($srv, { %$body,
                                                 stream => JSON::PP::true });
                close $st->{sock};
                next;
            }

            my $res = vlm_post_json($srv, $body);
            $ok++ if $res->{status} == 200
                     && vlm_json($res->{body})->{usage}
                            {prompt_tokens_details}{cached_tokens} > 0;
        }

        is($ok, 20, 'soak: every answered request found the system prompt');

        my $zone = vlm_wait_idle($srv, 10);
        ok($zone->{slots_used} == 0 && $zone->{arena_used} == 0,
           'soak: every slot free, arena used 0');

        my ($m, $used);
        for (1 .. 50) {
            $m = vlm_metrics($srv);
            $used = $m->{'vlm_pool_used{pool="kv_blocks",unit="blocks"}'};
            last if defined $used && $used == 0;
            select(undef, undef, undef, 0.1);
        }
        is($used, 0, 'soak: no KV block is used by a sequence');
        my $cap = $m->{'vlm_pool_capacity{pool="kv_blocks",unit="blocks"}'};
        ok($m->{vlm_kv_blocks_cached} > 0
           && $m->{vlm_kv_blocks_cached} <= $cap,
           "soak: $m->{vlm_kv_blocks_cached} blocks cached of $cap");
    }

    VLMTest::check_log($srv, 'prefix-on');
    VLMTest::vlm_stop($srv);
}

# the cache off: the same answers, nothing cached
{
    my $srv = vlm_start(name => 'prefix-off', port => vlm_port(18),
                        http_config => "    vlm_prefix_cache off;\n");

    my ($answers, $usage) = conversation($srv, 'off');

    is_deeply($answers, $on_answers,
              'off: the greedy answers of every turn are those with it on');
    is_deeply([ map { $_->{prompt_tokens} } @$usage ],
              [ map { $_->{prompt_tokens} } @$on_usage ],
              'off: the same prompts');
    is_deeply([ map { $_->{prompt_tokens_details}{cached_tokens} } @$usage ],
              [ 0, 0, 0, 0 ], 'off: nothing cached');

    my $m = vlm_metrics($srv);
    is($m->{vlm_prefix_cache_hits_tokens_total}, 0, 'off: no hits');
    is($m->{vlm_kv_blocks_cached}, 0, 'off: no block cached');

    VLMTest::check_log($srv, 'prefix-off');
    VLMTest::vlm_stop($srv);
}

done_testing();
