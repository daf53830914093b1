# nginx -s reopen reaches the engine: after the error log is rotated
# (renamed, then reopen), the engine and its tensor-parallel ranks write
# to the new file, not to the renamed one, and say so there.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep time);
use VLMTest;

vlm_prereqs();

# where each engine process's stderr points
sub engine_logs {
    my $srv = shift;

    return map { readlink("/proc/$_/fd/2") // '' } vlm_engine_pids($srv);
}

for my $ranks (1, 2) {
    my $name = "reopen-$ranks";
    my $srv = vlm_start(name => $name, port => vlm_port(22 + $ranks),
                        http_config => $ranks > 1
                                       ? "vlm_tensor_parallel $ranks;\n"
                                       : '');
    my $log = "$srv->{prefix}/logs/error.log";

    my @before = engine_logs($srv);
    is(scalar @before, $ranks, "$ranks rank(s): the engine processes");
    is_deeply(\@before, [($log) x $ranks], "$ranks rank(s): they write to "
                                           . 'error.log');

    rename $log, "$log.1" or die "rename $log: $!";

    system("$srv->{nginx} -p $srv->{prefix}/ -c $srv->{conf} -s reopen "
           . "2>/dev/null") == 0
        or die "nginx -s reopen failed";

    my @after;
    my $deadline = time + vlm_secs(10);

    while (time < $deadline) {
        @after = engine_logs($srv);
        last if @after == $ranks && !grep { $_ ne $log } @after;
        sleep 0.1;
    }

    is_deeply(\@after, [($log) x $ranks],
              "$ranks rank(s): after nginx -s reopen they write to the new "
              . 'error.log, not the rotated one');

    my $text = '';
    $deadline = time + vlm_secs(5);

    while (time < $deadline) {
        $text = do { open my $in, '<', $log or die $!; local $/; <$in> };
        last if $text =~ /reopened its log/;
        sleep 0.1;
    }

    like($text, qr/vlm engine: reopened its log \Q$log\E/,
         "$ranks rank(s): the engine says so in the new log");

    my $res = vlm_post_json($srv, vlm_chat_body('Hello'));
    is($res->{status}, 200, "$ranks rank(s): and serves as before");

    VLMTest::check_log($srv, $name);
    vlm_stop($srv);
}

done_testing();
