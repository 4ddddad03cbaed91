/*
 * run_exit.c - how `watchlock run` ends (run.h): COMMAND's wait status as a
 * shell's exit code, a library status as the CLI's exit code with one line
 * naming the option, and death by the signal that stopped watchlock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

/* Ends the process by `sig` (so that a calling shell sees "killed by
 * signal"), after the caller has released everything. */
void run_die_by_signal(int sig)
{
    signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    raise(sig);
    pthread_sigmask(SIG_UNBLOCK, &only, NULL);
    /* Not reached unless the signal does not terminate. */
    exit(128 + sig);
}

int run_exit_code_of(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return CLI_EXIT_SOFTWARE;
}

const char *run_detail_of(int status)
{
    const char *detail = watchlock_last_error();
    return *detail ? detail : watchlock_strerror(status);
}

/* 0, or the exit code after one line naming the option: a value the
 * library's setter refused (EINVAL) is a usage error in its words. */
int run_option_status(int status, const char *opt, const char *text)
{
    if (status == WATCHLOCK_OK)
        return 0;
    if (status == WATCHLOCK_EINVAL)
        return cli_usage_error("run", "%s%s%s: %s", opt, text ? " " : "", text ? text : "",
                               run_detail_of(status));
    return cli_fail(status, "run");
}
