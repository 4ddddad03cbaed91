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

#endif
