# /metrics labels every series with model_name, the served model's name,
# as vLLM does: the first label of every sample line (histogram buckets,
# pools and the module's own series included), escaped as Prometheus
# escapes label values; # HELP and # TYPE lines are left alone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use VLMTest;

vlm_prereqs();

my $srv = vlm_start(name => 'metrics-label',
                    http_config => q{vlm_served_model_name 'my"model\x';});
END { VLMTest::vlm_stop($srv) if $srv }

# a request, so that the histograms have samples
vlm_post_json($srv, { %{ vlm_chat_body('hi') }, model => 'my"model\x',
                      max_tokens => 2 });

my $res = vlm_request($srv, 'GET', '/metrics');
is($res->{status}, 200, '/metrics: 200');

my @samples = grep { !/^#/ && /\S/ } split /\n/, $res->{body};
my @comments = grep { /^#/ } split /\n/, $res->{body};
ok(@samples >= 30, scalar(@samples) . ' sample lines');

my $label = 'model_name="my\\"model\\\\x"';
my @bad = grep { !/^[a-zA-Z_:][a-zA-Z0-9_:]*\{\Q$label\E[,}]/ } @samples;
is(scalar @bad, 0, "every sample line starts its labels with $label")
    or diag(join "\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]);
ok(grep({ /^vlm_requests_total\{\Q$label\E,status="200"\} 1$/ } @samples),
   'a series with labels of its own keeps them after model_name');
ok(grep({ /_bucket\{\Q$label\E,le="/ } @samples), 'histogram buckets too');
ok(!grep({ /model_name/ } @comments), 'HELP and TYPE lines unchanged');

my $m = vlm_metrics($srv);
ok(!$m->{_unlabeled}, 'vlm_metrics: no series without the label');
is($m->{'vlm_requests_total{status="200"}'}, 1,
   'vlm_metrics: the keys without the label');

done_testing();
