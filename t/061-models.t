# GET /v1/models and GET /v1/models/{id} as vLLM answers them: the served
# model with max_model_len, owned_by, root (the model directory's name,
# never its path), parent null and created, the Unix time the engine
# loaded the model (the same on every request, later after the engine is
# restarted); an id with a slash; an unknown id is a 404 model_not_found
# in OpenAI's shape; HEAD answers, POST is a 405.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);
use VLMTest;

vlm_prereqs();

my $t0 = time;
my $srv = vlm_start(name => 'models',
                    http_config => 'vlm_served_model_name org/served-1;');
END { VLMTest::vlm_stop($srv) if $srv }
my $t1 = time;

my $want = { id => 'org/served-1', object => 'model',
             owned_by => 'ngx_http_vlm_module', root => 'serving',
             parent => undef, max_model_len => 4096 };


sub get {
    my ($path, $method) = @_;

    my $res = vlm_request($srv, $method // 'GET', $path);

    return ($res, eval { vlm_json($res->{body}) });
}


my ($res, $j) = get('/v1/models');
is($res->{status}, 200, 'list: 200');
is($j->{object}, 'list', 'list: object list');
is(scalar @{ $j->{data} }, 1, 'list: one model');
my $created = delete $j->{data}[0]{created};
is_deeply($j->{data}[0], $want, 'list: the model card') or diag($res->{body});
ok($created >= $t0 && $created <= $t1,
   "list: created ($created) is when the model loaded ($t0..$t1)");

($res, $j) = get('/v1/models/org/served-1');
is($res->{status}, 200, 'retrieve: 200');
like($res->{headers}{'content-type'}, qr{^application/json},
     'retrieve: JSON');
is(delete $j->{created}, $created, 'retrieve: the same created');
is_deeply($j, $want, 'retrieve: the model card') or diag($res->{body});

($res, $j) = get('/v1/models/org%2Fserved-1');
is($res->{status}, 200, 'retrieve, the slash escaped: 200');

sleep 1.2;
($res, $j) = get('/v1/models/');
is($res->{status}, 200, '/v1/models/: the list');
is($j->{data}[0]{created}, $created, 'created stays the load time');

($res) = get('/v1/models/org/served-1', 'HEAD');
is($res->{status}, 200, 'HEAD: 200');

($res, $j) = get('/v1/models/gpt-4');
is($res->{status}, 404, 'unknown id: 404');
is_deeply($j, { error => {
    message => "The model 'gpt-4' does not exist; this server serves "
               . "'org/served-1'",
    type => 'invalid_request_error', param => 'model',
    code => 'model_not_found' } }, 'unknown id: the error body')
    or diag($res->{body});

($res, $j) = get('/v1/models/org');
is($res->{status}, 404, 'a prefix of the id: 404');

($res, $j) = get('/v1/modelsx');
is($res->{status}, 404, '/v1/modelsx: 404');
is($j->{error}{type}, 'invalid_request_error', '/v1/modelsx: an OpenAI error');

($res, $j) = get('/v1/models/org/served-1', 'POST');
is($res->{status}, 405, 'POST: 405');

# the engine restarted: the model loaded again, later
my @engine = vlm_engine_pids($srv);
is(scalar @engine, 1, 'one engine');
kill 'KILL', @engine;
sleep 0.5;
ok(vlm_wait_ready($srv, 30), 'a new engine serves');
($res, $j) = get('/v1/models/org/served-1');
ok($j->{created} > $created,
   "after a restart, created is the new load time ($j->{created})");

done_testing();
