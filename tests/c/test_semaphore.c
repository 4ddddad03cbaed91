/*
 * test_semaphore.c - the semaphore with leased permits (issue 22 items 1,
 * 3, 5) against a real redis-server, with real processes: permits never
 * exceeded, a large request at the head blocks later ones, a release wakes
 * exactly the waiters it can satisfy, SIGKILL of a permit holder, the
 * count's rules (first user, mismatch, set_permits).
 */
#include "queue_helpers.h"

static watchlock_lock *sem(watchlock_client *c, const char *name, int64_t n, int64_t lease)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_semaphore_new(&l, c, name, strlen(name), n));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

static void test_basics(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = sem(c, "s-basic", 3, 5000), *b = sem(c, "s-basic", 3, 5000), *d = sem(c, "s-basic", 0, 5000),
                   *e = sem(c, "s-basic", 3, 5000), *bad = sem(c, "s-basic", 4, 5000);
    CHECK_EQ(watchlock_lock_kind(a), WATCHLOCK_KIND_SEMAPHORE);
    CHECK_OK(watchlock_semaphore_acquire(a, 2, 0));
    CHECK_EQ(watchlock_lock_permits(a), 2);
    CHECK_OK(watchlock_semaphore_acquire(a, 2, 0)); /* reentrant with the same k */
    CHECK_OK(watchlock_lock_acquire(a, 0));         /* and with the plain call: what it holds */
    CHECK_EQ(watchlock_lock_hold_count(a), 3);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_STATUS(watchlock_semaphore_acquire(a, 1, 0), WATCHLOCK_EINVAL); /* another k while held */
    CHECK_OK(watchlock_lock_acquire(d, 0));        /* permits 0: the name's count (3) */
    CHECK_EQ(q_info(c, "s-basic", Q_IN_USE), 3);
    CHECK_EQ(q_info(c, "s-basic", Q_HOLDERS), 2);
    CHECK_STATUS(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(bad, 0), WATCHLOCK_EWRONGTYPE); /* another count */
    CHECK(strstr(watchlock_last_error(), "3 permits") != NULL);
    CHECK_STATUS(watchlock_semaphore_acquire(e, 4, 0), WATCHLOCK_EINVAL); /* more than the count */
    CHECK(watchlock_lock_fencing_token(d) > watchlock_lock_fencing_token(a));
    /* set_permits: a larger count wakes a waiter it can satisfy */
    watchlock_client *c2 = open_client(test_url(""));
    CHECK_OK(watchlock_client_set_permits(c2, "s-basic", 7, 4));
    CHECK_OK(watchlock_lock_acquire(bad, 0)); /* the count is 4 now */
    CHECK_OK(watchlock_lock_release(bad));
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_release(d));
    CHECK_EQ(q_info(c, "s-basic", Q_IN_USE), 0);

    CHECK_STATUS(watchlock_client_set_permits(c2, "s-basic", 7, 0), WATCHLOCK_EINVAL);
    /* a name with a count set by set_permits keeps it: a handle with 0 uses it */
    CHECK_OK(watchlock_semaphore_acquire(d, 4, 0));
    CHECK_OK(watchlock_lock_release(d));
    CHECK_OK(watchlock_lock_acquire(d, 0)); /* a new hold by the plain call: 1 permit, not the last k */
    CHECK_EQ(watchlock_lock_permits(d), 1);
    CHECK_EQ(q_info(c, "s-basic", Q_IN_USE), 1);
    CHECK_OK(watchlock_lock_release(d));
    /* a name not in use has no count: permits 0 is refused clearly */
    watchlock_lock *z = sem(c, "s-none", 0, 5000);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(z, 0), WATCHLOCK_EWRONGTYPE);
    watchlock_lock_free(z);
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_lock_free(d);
    watchlock_lock_free(e);
    watchlock_lock_free(bad);
    watchlock_client_close(c2);
    watchlock_client_close(c);
}

/* 6 processes x 15 holds of one permit of 3: the number of holders inside,
 * counted in Redis, never exceeds 3 (and reaches it). */
static void test_permits_never_exceeded(void)
{
    enum { P = 6, ROUNDS = 15 };
    pid_t pids[P];
    CHECK(rh_ok(test_server(), "SET s-inside 0"));
    CHECK(rh_ok(test_server(), "SET s-max 0"));
    for (int i = 0; i < P; i++) {
        fflush(stdout);
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            watchlock_client *c = open_client(test_url(""));
            watchlock_lock *l = sem(c, "s-many", 3, 5000);
            for (int r = 0; r < ROUNDS; r++) {
                CHECK_OK(watchlock_lock_acquire(l, 30000));
                long long in = rh_int(test_server(), "INCR s-inside");
                CHECK_MSG(in <= 3, "%lld holders inside a semaphore of 3", in);
                redisReply *x = rh_command(test_server(), "EVAL %s 1 s-max %lld",
                                           "if tonumber(redis.call('GET', KEYS[1])) < tonumber(ARGV[1]) then "
                                           "redis.call('SET', KEYS[1], ARGV[1]) end return 1",
                                           in);
                CHECK(x != NULL);
                freeReplyObject(x);
                sleep_ms(3);
                CHECK(rh_int(test_server(), "DECR s-inside") >= 0);
                CHECK_OK(watchlock_lock_release(l));
            }
            _exit(0);
        }
    }
    for (int i = 0; i < P; i++)
        q_wait_child(pids[i], "semaphore user");
    long long mx = rh_int(test_server(), "INCRBY s-max 0");
    testing_note("most holders inside at once: %lld of 3", mx);
    CHECK_INT(mx, <=, 3);
    CHECK_INT(mx, >=, 2);
}

/* A child that takes k permits of name (count n), pushes its tag, and
 * holds until the key <name>-go-<tag> exists. */
static void holder_body(const q_args *a)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = sem(c, a->name, a->n, 5000);
    CHECK_OK(watchlock_semaphore_acquire(l, a->k, 60000));
    CHECK(rh_int(test_server(), "RPUSH %s-got %d", a->name, a->tag) > 0);
    WAIT_FOR(rh_int(test_server(), "EXISTS %s-go-%d", a->name, a->tag) == 1, 60000);
    CHECK_OK(watchlock_lock_release(l));
}

static q_child holder(const char *name, int64_t n, int64_t k, int tag)
{
    return q_fork(holder_body, (q_args){.name = name, .n = n, .k = k, .tag = tag});
}

static long long got(const char *name)
{
    return rh_int(test_server(), "LLEN %s-got", name);
}

/* FIFO with head-blocking: with 1 permit free of 3, a waiter at the head
 * that wants 3 blocks a later one that wants 1; a release then wakes
 * exactly the waiters it can satisfy. */
static void test_large_request_blocks_later(void)
{
    q_child cbig = holder("s-head", 3, 3, 1), csmall = holder("s-head", 3, 1, 2);
    pid_t big = cbig.pid, small = csmall.pid;
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = sem(c, "s-head", 3, 5000);
    CHECK_OK(watchlock_semaphore_acquire(a, 2, 0));
    q_go(&cbig);
    WAIT_FOR(q_info(c, "s-head", Q_LEN) == 1, 20000);
    q_go(&csmall);
    WAIT_FOR(q_info(c, "s-head", Q_LEN) == 2, 20000);
    CHECK_EQ(q_info(c, "s-head", Q_LEN), 2);
    /* one permit is free, but the small request waits behind the big one, and so does a try */
    watchlock_lock *t = sem(c, "s-head", 3, 5000);
    CHECK_STATUS(watchlock_lock_acquire(t, 0), WATCHLOCK_ETIMEDOUT);
    sleep_ms(300); /* a few liveness renewals: none of them lets the small one pass */
    CHECK_EQ(got("s-head"), 0);
    CHECK_OK(watchlock_lock_release(a)); /* 3 free: the big one */
    WAIT_FOR(got("s-head") == 1, 10000);
    CHECK_EQ(got("s-head"), 1);
    CHECK_EQ(q_info(c, "s-head", Q_IN_USE), 3);
    CHECK(rh_ok(test_server(), "SET s-head-go-1 1"));
    q_wait_child(big, "big");
    WAIT_FOR(got("s-head") == 2, 10000);
    CHECK(rh_ok(test_server(), "SET s-head-go-2 1"));
    q_wait_child(small, "small");
    watchlock_lock_free(t);
    watchlock_lock_free(a);
    watchlock_client_close(c);
}

/* All 4 permits held as one hold; waiters want 1, 2, 2: the release grants
 * the first two (3 permits) and leaves the third waiting (1 free < 2). */
static void test_release_wakes_exactly(void)
{
    pid_t w[3];
    q_child ch[3];
    int64_t ks[3] = {1, 2, 2};
    for (int i = 0; i < 3; i++) {
        ch[i] = holder("s-exact", 4, ks[i], i + 1);
        w[i] = ch[i].pid;
    }
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = sem(c, "s-exact", 4, 5000);
    CHECK_OK(watchlock_semaphore_acquire(a, 4, 0));
    for (int i = 0; i < 3; i++) {
        q_go(&ch[i]);
        WAIT_FOR(q_info(c, "s-exact", Q_LEN) == i + 1, 20000);
    }
    CHECK_EQ(q_info(c, "s-exact", Q_LEN), 3);
    CHECK_OK(watchlock_lock_release(a));
    WAIT_FOR(got("s-exact") == 2, 10000);
    sleep_ms(300);
    CHECK_EQ(got("s-exact"), 2);
    CHECK_EQ(q_info(c, "s-exact", Q_IN_USE), 3);
    CHECK_EQ(q_info(c, "s-exact", Q_LEN), 1);
    CHECK(rh_ok(test_server(), "SET s-exact-go-1 1"));
    q_wait_child(w[0], "w1");
    WAIT_FOR(got("s-exact") == 3, 10000); /* 2 free now: the third */
    CHECK_EQ(got("s-exact"), 3);
    CHECK(rh_ok(test_server(), "SET s-exact-go-2 1"));
    CHECK(rh_ok(test_server(), "SET s-exact-go-3 1"));
    q_wait_child(w[1], "w2");
    q_wait_child(w[2], "w3");
    watchlock_lock_free(a);
    watchlock_client_close(c);
}

/* A permit holder SIGKILLed: its permits come back within its lease. */
static void test_sigkill_permit_holder(void)
{
    const int64_t lease = 1000;
    int p[2];
    CHECK(pipe(p) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        watchlock_client *c = open_client(test_url(""));
        watchlock_lock *l = sem(c, "s-kill", 2, lease);
        CHECK_OK(watchlock_semaphore_acquire(l, 2, 0));
        CHECK(write(p[1], "1", 1) == 1);
        for (;;)
            pause();
    }
    char b;
    CHECK(read(p[0], &b, 1) == 1);
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = sem(c, "s-kill", 2, 5000);
    sleep_ms(lease + 200); /* renewed by its watchdog meanwhile */
    CHECK_STATUS(watchlock_lock_acquire(l, 0), WATCHLOCK_ETIMEDOUT);
    int64_t t0 = now_ms();
    q_kill_child(pid);
    CHECK_OK(watchlock_semaphore_acquire(l, 2, 10000));
    int64_t took = now_ms() - t0;
    testing_note("permit holder SIGKILLed (lease %lld ms): its permits came back after %lld ms", (long long)lease,
                 (long long)took);
    CHECK_INT(took, <, lease + 2000);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static const test_case tests[] = {
    {"basics", test_basics, 0},
    {"permits_never_exceeded", test_permits_never_exceeded, 0},
    {"large_request_blocks_later", test_large_request_blocks_later, 0},
    {"release_wakes_exactly", test_release_wakes_exactly, 0},
    {"sigkill_permit_holder", test_sigkill_permit_holder, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
