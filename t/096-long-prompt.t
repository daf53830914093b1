# A prompt of 30,000 tokens through nginx on the default model (its
# max_position_embeddings is 32768, which the default KV cache holds:
# /v1/models says so).  The answer is a 200 whose usage counts the prompt
# as /tokenize counts the same messages, and the engine is back at rest
# after it.  The prompt's prefill, three layers' attention over 30k
# positions, takes tens of seconds of CPU: the engine runs two threads,
# and the request's time is printed (diag) for docs/performance.md.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);
use VLMTest;

vlm_prereqs();
my $model = vlm_root() . '/models/default';

plan skip_all => 'models/default is missing (make default-model)'
    if !-f "$model/config.json";

my $srv = vlm_start(name => 'long-prompt', model => $model, zone => '64m',
                    threads => 2, locations => <<'_EOC_');
        location = /tokenize { vlm_tokenize; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }
$srv->{timeout} = 300;

my $models = vlm_json(vlm_request($srv, 'GET', '/v1/models')->{body});
is($models->{data}[0]{max_model_len}, 32768,
   'the context: max_position_embeddings, which the KV cache holds');

my $messages = [ { role => 'user',
                   content => join(' ', ('circle') x 30000) } ];

my $tok = vlm_request($srv, 'POST', '/tokenize',
                      VLMTest::vlm_json_text({ messages => $messages }));
is($tok->{status}, 200, '/tokenize: 200') or diag($tok->{body});
my $count = vlm_json($tok->{body})->{count};
cmp_ok($count, '>=', 30000, "the messages are $count tokens");
cmp_ok($count, '<', 32768, 'within the context');

my $t0 = time;
my $res = vlm_post_json($srv, { model => 'default', messages => $messages,
                                max_tokens => 2,
                                temperature => 0 });
my $took = time - $t0;

is($res->{status}, 200, 'a prompt of 30k tokens: 200') or diag($res->{body});
my $j = eval { vlm_json($res->{body}) } || {};
is($j->{usage}{prompt_tokens}, $count, 'usage counts the whole prompt');
cmp_ok($j->{usage}{completion_tokens}, '>=', 1, 'and a token of answer');
is($j->{usage}{total_tokens},
   $count + ($j->{usage}{completion_tokens} || 0), 'total_tokens adds up');
ok(defined $j->{choices}[0]{finish_reason}, 'a finish_reason');
diag(sprintf "%d prompt tokens answered in %.1f s", $count, $took);

my $zone = vlm_wait_idle($srv, 10);
is($zone->{slots_used}, 0, 'the request slot is back');
is($zone->{arena_used}, 0, 'and its arena bytes');

done_testing();
