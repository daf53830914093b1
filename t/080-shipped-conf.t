# Every endpoint of the module is in the configuration `make run` serves
# (conf/nginx.conf) and in the README's shortest configuration, and the
# shipped configuration answers each: scripts/serve generates it as
# `make run` does, this test starts nginx on it and posts to every
# endpoint; an unknown path answers an OpenAI error object, not HTML.
#
# A plain Test::More script: it starts its own nginx (master process, one
# worker, the engine) under t/servroot-conf and stops it at the end, the
# directory removed when every test passed.

use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib "$FindBin::Bin/lib";
use File::Path qw(remove_tree);
use VLMTest;
use Test::More;
use Time::HiRes qw(sleep);

vlm_prereqs();

my $root = abs_path("$FindBin::Bin/..");
my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $module = $ENV{TEST_NGINX_LOAD_MODULES}
             || ($ENV{VLM_BUILD} || "$root/build") . "/ngx_http_vlm_module.so";
my $port = vlm_port(32);
my $prefix = "$root/t/servroot-conf";

sub slurp {
    my ($path) = @_;
    open my $in, '<', $path or die "$path: $!";
    local $/;
    return scalar <$in>;
}

# the endpoints of the OpenAI layer and the handler that serves each
my @api = (
    [ '= /v1/chat/completions', 'vlm_chat' ],
    [ '= /v1/completions',      'vlm_completions' ],
    [ '= /v1/responses',        'vlm_responses' ],
    [ '= /tokenize',            'vlm_tokenize' ],
    [ '= /detokenize',          'vlm_tokenize' ],
    [ '/v1/models',             'vlm_models' ],
    [ '= /health',              'vlm_health' ],
);

# location => handler, of a configuration's text
sub locations {
    my ($text) = @_;
    my %loc;
    while ($text =~ /^\s*location\s+((?:=\s*)?\S+)\s*\{\s*(vlm_\w+);/mg) {
        my ($uri, $handler) = ($1, $2);
        $uri =~ s/^=\s*/= /;
        $loc{$uri} = $handler;
    }
    return \%loc;
}

my $conf = slurp("$root/conf/nginx.conf");
my ($example) = slurp("$root/README.md")
                =~ /^## Using it in your nginx\n.*?\n((?:    .*\n|\n)+)/ms;

my %pages = ('conf/nginx.conf' => locations($conf),
             'the README' => locations($example // ''));

for my $page (sort keys %pages) {
    for my $e (@api) {
        is($pages{$page}{ $e->[0] }, $e->[1],
           "$page: location $e->[0] { $e->[1]; }");
    }
}

like($conf, qr/^\s*vlm_errors\s+on;/m,
     'conf/nginx.conf: nginx\'s own errors are JSON (vlm_errors on)');
like($example // '', qr/^\s*vlm_errors\s+on;/m,
     'the README: nginx\'s own errors are JSON (vlm_errors on)');
for my $h ('vlm_metrics', 'vlm_version') {
    like($conf, qr/\{\s*$h;/, "conf/nginx.conf: $h");
}

# --- the shipped configuration, generated as make run does

remove_tree($prefix);

$ENV{NGINX} = $nginx;
$ENV{VLM_MODULE} = $module;
$ENV{VLM_PREFIX} = $prefix;

my $out = `$root/scripts/serve --test $port 2>&1`;
delete $ENV{NGINX};     # nginx itself reads NGINX (inherited sockets)
is($? >> 8, 0, 'scripts/serve --test: the generated configuration passes')
    or diag($out);

# as root, the workers and the engine would run as nobody: the test may
# run from a tree nobody cannot read
my @user = $> == 0 ? ('-g', 'user root;') : ();

system($nginx, '-p', "$prefix/", '-c', 'conf/nginx.conf',
       '-e', 'logs/error.log', @user) == 0
    or BAIL_OUT("nginx did not start on the shipped configuration");

my $srv = { name => 'conf', port => $port, prefix => $prefix,
            nginx => $nginx, conf => "$prefix/conf/nginx.conf",
            log_pos => 0 };

for (1 .. 100) {
    last if -s "$prefix/logs/nginx.pid";
    sleep 0.05;
}

$srv->{pid} = VLMTest::master_pid($srv);
END { VLMTest::vlm_stop($srv) if $srv && $srv->{pid} }

ok(vlm_wait_ready($srv, 30), 'GET /health: the engine serves the model');

sub post {
    my ($path, $body) = @_;
    my $res = vlm_request($srv, 'POST', $path, $VLMTest::JSON->encode($body));
    return ($res, eval { vlm_json($res->{body}) });
}

my ($res, $json);

($res, $json) = post('/v1/chat/completions', {
    model => 'default', max_tokens => 4,
    messages => [{ role => 'user', content => 'Hello' }] });
is($res->{status}, 200, 'POST /v1/chat/completions: 200');
is($json->{object}, 'chat.completion', 'a chat.completion');

($res, $json) = post('/v1/completions', {
    model => 'default', max_tokens => 4, prompt => 'Hello' });
is($res->{status}, 200, 'POST /v1/completions: 200');
is($json->{object}, 'text_completion', 'a text_completion');

($res, $json) = post('/v1/responses', {
    model => 'default', max_output_tokens => 4, input => 'Hello' });
is($res->{status}, 200, 'POST /v1/responses: 200');
is($json->{object}, 'response', 'a response');

($res, $json) = post('/tokenize', { prompt => 'Hello world' });
is($res->{status}, 200, 'POST /tokenize: 200');
ok($json->{count} > 0, 'it counts tokens');

($res, $json) = post('/detokenize', { tokens => $json->{tokens} });
is($res->{status}, 200, 'POST /detokenize: 200');
is($json->{prompt}, 'Hello world', 'the tokens are the prompt');

for my $get ('/v1/models', '/v1/models/default', '/metrics', '/version') {
    $res = vlm_request($srv, 'GET', $get);
    is($res->{status}, 200, "GET $get: 200");
}

# nginx's own answers, as OpenAI error objects
for my $case ([ 'GET', '/v1/unknown' ], [ 'POST', '/v1/embeddings' ],
              [ 'GET', '/nothing/here' ])
{
    my ($method, $path) = @$case;
    $res = vlm_request($srv, $method, $path, '{}');
    is($res->{status}, 404, "$method $path: 404");
    like($res->{headers}{'content-type'} // '', qr{^application/json},
         "$method $path: application/json");
    $json = eval { vlm_json($res->{body}) };
    is($json && $json->{error}{code}, 'not_found',
       "$method $path: an OpenAI error object") or diag($res->{body});
    is($json && $json->{error}{type}, 'invalid_request_error',
       "$method $path: invalid_request_error");
}

my @left = VLMTest::vlm_stop($srv);
is(scalar @left, 0, 'no engine process left after stop');

done_testing();
