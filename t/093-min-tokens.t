# vLLM's min_tokens, ignore_eos and stop_token_ids on POST
# /v1/chat/completions and
# /v1/completions with the tiny random model of tests/fixtures/serving:
# a logit_bias of +100 on the end of text makes it the greedy token, so
# the answer ends at once; ignore_eos runs it to max_tokens, min_tokens
# holds the end of text (and the stop strings) back for that many tokens;
# a grammar still ends its document; a token pushed up the same way and
# named in stop_token_ids ends the answer without its text; bad values are
# 400s.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

my $build = vlm_prereqs();
my $model = vlm_root() . '/tests/fixtures/serving';

my $srv = vlm_start(name => 'min-tokens', locations => <<'_EOC_');
        location = /v1/completions { vlm_completions; }
_EOC_
END { VLMTest::vlm_stop($srv) if $srv }

# the model's end of text (generation_config.json's first eos_token_id)
my $eos = 3002;


sub chat {
    my (%o) = @_;

    my $res = vlm_post_json($srv, {
        %{ vlm_chat_body('Describe the picture.') },
        temperature => 0, max_tokens => 6, %o });

    return ($res, eval { vlm_json($res->{body}) } || {});
}


my ($res, $j) = chat(logit_bias => { $eos => 100 });
is($res->{status}, 200, 'end of text pushed up: 200') or diag($res->{body});
is($j->{choices}[0]{finish_reason}, 'stop', 'it ends at once');
is($j->{choices}[0]{message}{content}, '', 'with no text');
is($j->{usage}{completion_tokens}, 1, 'after one token');

($res, $j) = chat(logit_bias => { $eos => 100 }, ignore_eos => JSON::PP::true);
is($res->{status}, 200, 'ignore_eos: 200') or diag($res->{body});
is($j->{choices}[0]{finish_reason}, 'length', 'ignore_eos: to max_tokens');
is($j->{usage}{completion_tokens}, 6, 'ignore_eos: six tokens');

($res, $j) = chat(logit_bias => { $eos => 100 }, min_tokens => 3);
is($res->{status}, 200, 'min_tokens: 200') or diag($res->{body});
is($j->{choices}[0]{finish_reason}, 'stop', 'min_tokens: then it stops');
is($j->{usage}{completion_tokens}, 4,
   'min_tokens 3: three tokens, then the end of text');
my $three = $j->{choices}[0]{message}{content};
ok(length $three, "min_tokens: the three tokens have text");

# the first token's text as a stop string: min_tokens 2 does not stop there
($res, $j) = chat(max_tokens => 1);
my $first = $j->{choices}[0]{message}{content};
ok(length $first, 'the greedy first token has text');

($res, $j) = chat(stop => [ $first ]);
is($j->{choices}[0]{message}{content}, '', 'a stop string at once: no text');

($res, $j) = chat(stop => [ $first ], min_tokens => 2);
is($res->{status}, 200, 'stop with min_tokens: 200') or diag($res->{body});
like($j->{choices}[0]{message}{content}, qr/^\Q$first\E./s,
     'before min_tokens the stop string goes out as text');

# streamed, the same
($res, $j) = chat(logit_bias => { $eos => 100 }, min_tokens => 3,
                  stream => JSON::PP::true);
my @ev = vlm_sse($res->{body});
is(join('', map { ref $_ ? $_->{choices}[0]{delta}{content} // '' : '' } @ev),
   $three, 'streamed: the same three tokens');
is((grep { ref $_ && $_->{choices}[0]{finish_reason} } @ev)[0]
       ->{choices}[0]{finish_reason}, 'stop', 'streamed: stop');

# stop_token_ids: the biased token would fill the answer; named, it ends
# the answer at once, without its text, even with ignore_eos
my ($x) = split ' ', `$build/vlm-cli tokenize --model $model --text hello`;

($res, $j) = chat(logit_bias => { $x => 100 });
is($j->{choices}[0]{finish_reason}, 'length', "token $x pushed up: length");

($res, $j) = chat(logit_bias => { $x => 100 }, stop_token_ids => [ 0 + $x ],
                  ignore_eos => JSON::PP::true);
is($res->{status}, 200, 'stop_token_ids: 200') or diag($res->{body});
is($j->{choices}[0]{finish_reason}, 'stop', 'stop_token_ids: stop');
is($j->{choices}[0]{message}{content}, '', 'stop_token_ids: no text');
is($j->{usage}{completion_tokens}, 1, 'stop_token_ids: one token');

($res, $j) = chat(logit_bias => { $x => 100 }, stop_token_ids => [ 0 + $x ],
                  min_tokens => 2);
is($j->{usage}{completion_tokens}, 3,
   'stop_token_ids after min_tokens 2: the third token');

# a grammar's document still ends where it is complete
($res, $j) = chat(ignore_eos => JSON::PP::true, max_tokens => 60,
                  response_format => { type => 'json_object' });
is($res->{status}, 200, 'ignore_eos with json_object: 200')
    or diag($res->{body});
is($j->{choices}[0]{finish_reason}, 'stop',
   'ignore_eos with json_object: the document ends it');
ok(eval { vlm_json($j->{choices}[0]{message}{content}); 1 },
   'ignore_eos with json_object: JSON');

# /v1/completions
$res = vlm_request($srv, 'POST', '/v1/completions', VLMTest::vlm_json_text({
    model => 'serving', prompt => 'Once', temperature => 0, max_tokens => 5,
    logit_bias => { $eos => 100 }, ignore_eos => JSON::PP::true }));
is($res->{status}, 200, 'completions ignore_eos: 200') or diag($res->{body});
$j = eval { vlm_json($res->{body}) } || {};
is($j->{usage}{completion_tokens}, 5, 'completions ignore_eos: five tokens');
is($j->{choices}[0]{finish_reason}, 'length',
   'completions ignore_eos: length');

# bad values
for my $case ([ { min_tokens => -1 }, 'min_tokens', 'of at least 0' ],
              [ { min_tokens => 7 }, 'min_tokens',
                'at most max_tokens \(6\)' ],
              [ { min_tokens => '3' }, 'min_tokens', 'an integer' ],
              [ { ignore_eos => 1 }, 'ignore_eos', 'a boolean' ],
              [ { stop_token_ids => [ 3014 ] }, 'stop_token_ids[0]',
                'below the vocabulary size' ])
{
    my ($o, $param, $msg) = @$case;

    ($res, $j) = chat(%$o);
    is($res->{status}, 400, "$param bad: 400");
    is($j->{error}{param}, $param, "$param bad: param");
    like($j->{error}{message}, qr/$msg/, "$param bad: $msg");
}

VLMTest::check_log($srv, 'min-tokens');

done_testing();
