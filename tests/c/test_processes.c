/*
 * test_processes.c - issue 2's scenarios with real processes (fork()ed
 * copies of this test, each with its own client):
 *   b. SIGKILL of a holder: another process acquires within about a lease;
 *   c. SIGSTOP of a holder past its lease: another process acquires; after
 *      SIGCONT the first reports LOST (callback fired, release answers
 *      not-owner) and the second's lock is untouched;
 *   d. 4 processes x 500 increments of a plain GET/SET counter guarded by
 *      one lock: exact total;
 *   e. the fencing tokens of (d), recorded into a Redis list by each holder
 *      right after acquiring, strictly increase in hold order.
 * Children exit with 0 on success; a failed CHECK in a child prints and
 * exits 1, which the parent reports.
 */
#include "testing.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Reads exactly len bytes from fd within timeout_ms; 0 on success. */
static int read_full(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    int64_t end = now_ms() + timeout_ms;
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (left <= 0)
            return -1;
        int r = poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

static void wait_child_ok(pid_t pid, const char *what)
{
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    CHECK(r == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child status 0x%x", what, st);
}

/* ---- b. SIGKILL of a holder ---------------------------------------------- */

static void test_scenario_b_sigkill_holder(void)
{
    const int64_t lease = 1000;
    int ready[2];
    CHECK(pipe(ready) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        watchlock_client *c = open_client(test_url(""));
        watchlock_lock *l = new_lock(c, "proc-kill");
        CHECK_OK(watchlock_lock_set_lease(l, lease));
        CHECK_OK(watchlock_lock_acquire(l, 0));
        write_full(ready[1], "1", 1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char b;
    CHECK_MSG(read_full(ready[0], &b, 1, 20000) == 0, "holder did not report the lock");
    close(ready[0]);
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "proc-kill");
    /* The holder's watchdog keeps it past its lease. */
    sleep_ms(lease + 300);
    CHECK_STATUS(watchlock_lock_acquire(l, 0), WATCHLOCK_ETIMEDOUT);
    int64_t t_kill = now_ms();
    CHECK(kill(pid, SIGKILL) == 0);
    long long ttl_at_kill = rh_int(test_server(), "PTTL watchlock:{proc-kill}");
    CHECK_OK(watchlock_lock_acquire(l, -1));
    int64_t took = now_ms() - t_kill;
    testing_note("SIGKILLed holder (lease %lld ms, %lld ms left at the kill): acquired %lld ms after the kill",
                 (long long)lease, ttl_at_kill, (long long)took);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Not before the dead holder's lease ran out (mutual exclusion)... */
    CHECK_INT(took, >=, ttl_at_kill - 50);
    /* ...and within the lease + 200 ms of the issue, with slack for a loaded machine. */
    CHECK_INT(took, <, lease + 1000);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* ---- c. SIGSTOP of a holder past its lease -------------------------------- */

typedef struct stop_report {
    int callbacks;
    int reason;
    int state_after;
    int release_rc;
    int state_after_release;
} stop_report;

static atomic_int stop_callbacks;
static atomic_int stop_reason;

static void stop_on_lost(watchlock_lock *l, int reason, void *data)
{
    (void)l;
    (void)data;
    atomic_store(&stop_reason, reason);
    atomic_fetch_add(&stop_callbacks, 1);
}

static void stop_child(int ready_fd, int cmd_fd, int report_fd, int64_t lease)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "proc-stop");
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    CHECK_OK(watchlock_lock_set_on_lost(l, stop_on_lost, NULL));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    write_full(ready_fd, "1", 1);
    char cmd;
    CHECK(read_full(cmd_fd, &cmd, 1, 60000) == 0);
    /* Continued: the watchdog must notice the lease ran out while stopped. */
    WAIT_FOR(atomic_load(&stop_callbacks) > 0, 10000);
    stop_report rep;
    rep.callbacks = atomic_load(&stop_callbacks);
    rep.reason = atomic_load(&stop_reason);
    rep.state_after = watchlock_lock_state(l);
    rep.release_rc = watchlock_lock_release(l);
    rep.state_after_release = watchlock_lock_state(l);
    write_full(report_fd, &rep, sizeof rep);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_scenario_c_sigstop_holder(void)
{
    const int64_t lease = 1000;
    int ready[2], cmd[2], report[2];
    CHECK(pipe(ready) == 0 && pipe(cmd) == 0 && pipe(report) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(cmd[1]);
        close(report[0]);
        stop_child(ready[1], cmd[0], report[1], lease);
        fflush(stdout);
        exit(0);
    }
    close(ready[1]);
    close(cmd[0]);
    close(report[1]);
    char b;
    CHECK_MSG(read_full(ready[0], &b, 1, 20000) == 0, "holder did not report the lock");
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "proc-stop");
    CHECK_OK(watchlock_lock_set_lease(l, 5000));
    CHECK_STATUS(watchlock_lock_acquire(l, 0), WATCHLOCK_ETIMEDOUT);
    int64_t t_stop = now_ms();
    CHECK(kill(pid, SIGSTOP) == 0);
    int st;
    CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
    CHECK_OK(watchlock_lock_acquire(l, -1));
    int64_t took = now_ms() - t_stop;
    int64_t fence = watchlock_lock_fencing_token(l);
    testing_note("stopped holder (lease %lld ms): acquired %lld ms after SIGSTOP", (long long)lease,
                 (long long)took);
    CHECK_INT(took, <, lease + 1000);
    /* Thaw the old holder and let it find out. */
    CHECK(kill(pid, SIGCONT) == 0);
    write_full(cmd[1], "c", 1);
    stop_report rep;
    CHECK_MSG(read_full(report[0], &rep, sizeof rep, 30000) == 0, "no report from the continued holder");
    wait_child_ok(pid, "stopped holder");
    testing_note("continued holder: %d callback(s), reason %s, release -> %s", rep.callbacks,
                 watchlock_lost_reason_str(rep.reason), watchlock_strerror(rep.release_rc));
    CHECK_EQ(rep.callbacks, 1);
    CHECK_EQ(rep.reason, WATCHLOCK_LOST_EXPIRED); /* the lease ran out locally while stopped */
    CHECK_EQ(rep.state_after, WATCHLOCK_LOST);
    CHECK_EQ(rep.release_rc, WATCHLOCK_ENOTOWNER);
    CHECK_EQ(rep.state_after_release, WATCHLOCK_UNLOCKED);
    /* The new holder's lock is untouched. */
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    int held = 0;
    int64_t rem = 0, last_fence = 0;
    CHECK_OK(watchlock_client_inspect(c, "proc-stop", 9, &held, &rem, &last_fence));
    CHECK_EQ(held, 1);
    CHECK_INT(rem, >, 0);
    CHECK_EQ(last_fence, fence);
    CHECK_OK(watchlock_lock_release(l)); /* the key still holds our token */
    close(ready[0]);
    close(cmd[1]);
    close(report[0]);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* ---- d + e. 4 processes x 500 increments, fencing order ------------------- */

enum { COUNTER_PROCS = 4, COUNTER_INCREMENTS = 500 };

static void counter_child(int go_fd)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "proc-counter");
    CHECK_OK(watchlock_lock_set_lease(l, 10000));
    redisContext *r = rh_connect(test_server());
    CHECK(r != NULL);
    char go;
    CHECK(read_full(go_fd, &go, 1, 30000) == 0);
    for (int i = 0; i < COUNTER_INCREMENTS; i++) {
        CHECK_OK(watchlock_lock_acquire(l, -1));
        long long fence = watchlock_lock_fencing_token(l);
        redisReply *rep = redisCommand(r, "RPUSH proc-tokens %lld", fence);
        CHECK(rep != NULL && rep->type == REDIS_REPLY_INTEGER);
        freeReplyObject(rep);
        rep = redisCommand(r, "GET proc-counter");
        CHECK(rep != NULL && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_NIL));
        long long v = rep->type == REDIS_REPLY_STRING ? atoll(rep->str) : 0;
        freeReplyObject(rep);
        rep = redisCommand(r, "SET proc-counter %lld", v + 1);
        CHECK(rep != NULL && rep->type == REDIS_REPLY_STATUS);
        freeReplyObject(rep);
        CHECK_OK(watchlock_lock_release(l));
    }
    redisFree(r);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_scenario_d_e_counter_and_fencing(void)
{
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pids[COUNTER_PROCS];
    fflush(stdout);
    for (int i = 0; i < COUNTER_PROCS; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            close(go[1]);
            counter_child(go[0]);
            fflush(stdout);
            exit(0);
        }
    }
    close(go[0]);
    int64_t t0 = now_ms();
    char ones[COUNTER_PROCS];
    memset(ones, '1', sizeof ones);
    write_full(go[1], ones, sizeof ones); /* start together */
    close(go[1]);
    for (int i = 0; i < COUNTER_PROCS; i++)
        wait_child_ok(pids[i], "counter process");
    testing_note("%d processes x %d locked increments in %lld ms", COUNTER_PROCS, COUNTER_INCREMENTS,
                 (long long)(now_ms() - t0));
    /* d: exact total. */
    redisReply *r = rh_command(test_server(), "GET proc-counter");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
    CHECK_EQ(atoll(r->str), COUNTER_PROCS * COUNTER_INCREMENTS);
    freeReplyObject(r);
    /* e: tokens in hold order strictly increase. */
    r = rh_command(test_server(), "LRANGE proc-tokens 0 -1");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    CHECK_EQ(r->elements, COUNTER_PROCS * COUNTER_INCREMENTS);
    long long prev = 0;
    for (size_t i = 0; i < r->elements; i++) {
        long long t = atoll(r->element[i]->str);
        CHECK_MSG(t > prev, "token #%zu = %lld not above the previous %lld", i, t, prev);
        prev = t;
    }
    freeReplyObject(r);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{proc-counter}"), 0);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"scenario_b_sigkill_holder", test_scenario_b_sigkill_holder, 0},
        {"scenario_c_sigstop_holder", test_scenario_c_sigstop_holder, 0},
        {"scenario_d_e_counter_and_fencing", test_scenario_d_e_counter_and_fencing, 120},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
