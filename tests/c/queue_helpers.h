/*
 * queue_helpers.h - helpers shared by the queued kinds' tests
 * (test_fair.c, test_semaphore.c, test_rwlock.c): the name's queue as the
 * server sees it, and forked waiter processes.
 */
#ifndef WATCHLOCK_QUEUE_HELPERS_H
#define WATCHLOCK_QUEUE_HELPERS_H

#include "testing.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Queue length / holders / in-use of a name (name_info), or fails. */
static inline int64_t q_info(watchlock_client *c, const char *name, int which)
{
    watchlock_name_info *info = NULL;
    CHECK_OK(watchlock_client_name_info(&info, c, name, strlen(name)));
    int64_t v = which == 0   ? watchlock_name_info_queue_length(info)
                : which == 1 ? watchlock_name_info_holders(info)
                : which == 2 ? watchlock_name_info_in_use(info)
                : which == 3 ? watchlock_name_info_kind(info)
                : which == 4 ? watchlock_name_info_writer(info)
                             : watchlock_name_info_oldest_wait_ms(info);
    watchlock_name_info_free(info);
    return v;
}
#define Q_LEN 0
#define Q_HOLDERS 1
#define Q_IN_USE 2
#define Q_KIND 3
#define Q_WRITER 4
#define Q_OLDEST 5

/* The Redis commands the queue's scripts run (INFO commandstats counts the
 * commands inside scripts too), summed: what a script call costs the
 * server, command by command (test_fair.c, test_handoff.c). */
static inline long long q_commands(void)
{
    static const char *const cmds[] = {"cmdstat_exists", "cmdstat_type", "cmdstat_del", "cmdstat_time",
                                       "cmdstat_incr", "cmdstat_get", "cmdstat_set", "cmdstat_zadd",
                                       "cmdstat_hset", "cmdstat_pexpire", "cmdstat_hmget", "cmdstat_hget",
                                       "cmdstat_hdel", "cmdstat_zrem", "cmdstat_zcard", "cmdstat_zscore",
                                       "cmdstat_zrangebyscore", "cmdstat_zrange", "cmdstat_pttl",
                                       "cmdstat_hincrby", "cmdstat_zrank", "cmdstat_publish"};
    long long n = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        n += rh_info(test_server(), "commandstats", cmds[i]);
    return n;
}

static inline void q_wait_child(pid_t pid, const char *what)
{
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    CHECK(r == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child status 0x%x", what, st);
}

static inline void q_kill_child(pid_t pid)
{
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
}

/* What a forked child does (each test file has its bodies). */
typedef struct q_args {
    const char *name;
    int64_t lease, n, k;
    int write, tag;
} q_args;
typedef struct q_child {
    pid_t pid;
    int gate; /* the parent writes one byte: go */
} q_child;

/* Forks a child that waits for q_go() and then runs body(args) and exits 0.
 * Tests fork their children before their own client starts threads: a
 * child forked from a process with threads running trips ThreadSanitizer
 * ("dup thread with used id") once it starts its own. */
static inline q_child q_fork(void (*body)(const q_args *), q_args args)
{
    int p[2];
    CHECK(pipe(p) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        char b;
        ssize_t n;
        while ((n = read(p[0], &b, 1)) < 0 && errno == EINTR) {
        }
        if (n != 1)
            _exit(1); /* the parent ended first */
        body(&args);
        _exit(0);
    }
    close(p[0]);
    return (q_child){pid, p[1]};
}

static inline void q_go(q_child *ch)
{
    CHECK(write(ch->gate, "g", 1) == 1);
    close(ch->gate);
    ch->gate = -1;
}

#endif
