# Makes the test process the child subreaper of what it starts (Linux's
# prctl PR_SET_CHILD_SUBREAPER).  nginx daemonises, so the master a test
# block starts is an orphan, which the kernel gives to the nearest
# subreaper instead of PID 1.  Test::Nginx stops a block's nginx and
# waits until kill(pid, 0) fails, and a master that has exited stays a
# zombie, for which kill(pid, 0) still succeeds, until its parent reaps
# it: Test::Nginx's waitpid(pid, WNOHANG) can only reap its own child.
# Under an init that reaps orphans about once a second, every block that
# started nginx waited one to two seconds for it (t/002: 57 s under
# openresty's Test::Nginx, 12 s with this).  Where prctl cannot be
# called (not Linux, no syscall.ph) nothing changes but that wait.
#
# Loaded by path, not through @INC, so that a t/ file that runs under
# openresty's Test::Nginx does not put t/lib (with this project's
# Test::Nginx) before it:
#
#   use FindBin;
#   BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }

package VLMReap;

use strict;
use warnings;

my $PR_SET_CHILD_SUBREAPER = 36;

eval {
    package main;
    require 'syscall.ph';
    syscall(SYS_prctl(), $PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        or die "prctl: $!\n";
    1;
} or warn "VLMReap: not a subreaper, a stopped nginx is reaped by init: "
          . ($@ =~ s/\n//r) . "\n";

1;
