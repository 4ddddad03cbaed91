/*
 * test_rwlock.c - the read-write lock on the waiter queue (issue 23 items
 * 1 and 4) against a real redis-server, with real processes: readers
 * overlap, a writer never overlaps anyone, a reader that arrives after a
 * waiting writer waits, the readers queued before the next writer enter
 * together, a writer is not starved by a stream of readers (its wait
 * measured), SIGKILL of a reader, of the writer and of a queued waiter,
 * fencing tokens, downgrade, kinds on one name, each holder's owner record.
 */
#include "queue_helpers.h"

#include <pthread.h>

static watchlock_lock *rw(watchlock_client *c, const char *name, int write, int64_t lease)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_rwlock_new(&l, c, name, strlen(name), write));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

static long long got(const char *name)
{
    return rh_int(test_server(), "LLEN %s-got", name);
}

/* A child that takes the read (write 0) or write side of name, pushes its
 * tag, holds until <name>-go-<tag> exists, and releases. */
static void side_body(const q_args *a)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = rw(c, a->name, a->write, a->lease);
    CHECK_OK(watchlock_lock_acquire(l, 60000));
    CHECK(rh_int(test_server(), "RPUSH %s-got %d", a->name, a->tag) > 0);
    WAIT_FOR(rh_int(test_server(), "EXISTS %s-go-%d", a->name, a->tag) == 1, 60000);
    CHECK_OK(watchlock_lock_release(l));
}

static q_child side(const char *name, int write, int tag, int64_t lease)
{
    return q_fork(side_body, (q_args){.name = name, .write = write, .tag = tag, .lease = lease});
}

static void go(const char *name, int tag)
{
    CHECK(rh_ok(test_server(), "SET %s-go-%d 1", name, tag));
}

static void test_readers_overlap_writer_excludes(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *r1 = rw(c, "rw-basic", 0, 5000), *r2 = rw(c, "rw-basic", 0, 5000), *w = rw(c, "rw-basic", 1, 5000);
    CHECK_EQ(watchlock_lock_kind(r1), WATCHLOCK_KIND_READ);
    CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_WRITE);
    CHECK_OK(watchlock_lock_acquire(r1, 0));
    CHECK_OK(watchlock_lock_acquire(r2, 0));
    CHECK_EQ(q_info(c, "rw-basic", Q_KIND), WATCHLOCK_KIND_RWLOCK);
    CHECK_EQ(q_info(c, "rw-basic", Q_IN_USE), 2);
    CHECK_EQ(q_info(c, "rw-basic", Q_WRITER), 0);
    CHECK_STATUS(watchlock_lock_acquire(w, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_acquire(r1, 0)); /* reentrant */
    CHECK_OK(watchlock_lock_release(r1));
    CHECK_OK(watchlock_lock_release(r1));
    CHECK_OK(watchlock_lock_release(r2));
    CHECK_OK(watchlock_lock_acquire(w, 0));
    CHECK_EQ(q_info(c, "rw-basic", Q_WRITER), 1);
    int64_t wf = watchlock_lock_fencing_token(w);
    CHECK_STATUS(watchlock_lock_acquire(r1, 0), WATCHLOCK_ETIMEDOUT);
    watchlock_lock *w2 = rw(c, "rw-basic", 1, 5000);
    CHECK_STATUS(watchlock_lock_acquire(w2, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(w));
    /* a reader's token is at least the last writer's (max(counter, TIME in
     * us): issue 29.3); the next writer's is larger than both */
    CHECK_OK(watchlock_lock_acquire(r1, 0));
    int64_t rf = watchlock_lock_fencing_token(r1);
    CHECK_INT(rf, >=, wf);
    CHECK_OK(watchlock_lock_release(r1));
    CHECK_OK(watchlock_lock_acquire(w2, 0));
    CHECK_INT(watchlock_lock_fencing_token(w2), >, rf);
    CHECK_OK(watchlock_lock_release(w2));
    watchlock_lock_free(r1);
    watchlock_lock_free(r2);
    watchlock_lock_free(w);
    watchlock_lock_free(w2);
    watchlock_client_close(c);
}

/* Phase order: W1 holds; R1, R2 queue, then W2, then R3. W1's release lets
 * R1 and R2 in together; R3 (after the waiting W2) waits, and a try of a
 * new reader fails; W2 enters when both readers left, R3 after W2. */
static void test_phase_order(void)
{
    pid_t p[4];
    q_child ch[4];
    int writes[4] = {0, 0, 1, 0};
    for (int i = 0; i < 4; i++) {
        ch[i] = side("rw-phase", writes[i], i + 1, 5000);
        p[i] = ch[i].pid;
    }
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *w1 = rw(c, "rw-phase", 1, 5000);
    CHECK_OK(watchlock_lock_acquire(w1, 0));
    for (int i = 0; i < 4; i++) {
        q_go(&ch[i]);
        WAIT_FOR(q_info(c, "rw-phase", Q_LEN) == i + 1, 20000);
        CHECK_EQ(q_info(c, "rw-phase", Q_LEN), i + 1);
    }
    CHECK_OK(watchlock_lock_release(w1));
    WAIT_FOR(got("rw-phase") == 2, 10000);
    CHECK_EQ(q_info(c, "rw-phase", Q_IN_USE), 2); /* R1 and R2 together */
    watchlock_lock *r = rw(c, "rw-phase", 0, 5000);
    CHECK_STATUS(watchlock_lock_acquire(r, 0), WATCHLOCK_ETIMEDOUT); /* behind the waiting writer */
    sleep_ms(300);
    CHECK_EQ(got("rw-phase"), 2);
    go("rw-phase", 1);
    q_wait_child(p[0], "R1");
    sleep_ms(200);
    CHECK_EQ(got("rw-phase"), 2); /* W2 waits for R2 too */
    go("rw-phase", 2);
    q_wait_child(p[1], "R2");
    WAIT_FOR(got("rw-phase") == 3, 10000);
    CHECK_EQ(q_info(c, "rw-phase", Q_WRITER), 1);
    redisReply *x = rh_command(test_server(), "LINDEX rw-phase-got 2");
    CHECK(x != NULL && x->type == REDIS_REPLY_STRING && strcmp(x->str, "3") == 0); /* W2, then R3 */
    freeReplyObject(x);
    go("rw-phase", 3);
    q_wait_child(p[2], "W2");
    WAIT_FOR(got("rw-phase") == 4, 10000);
    go("rw-phase", 4);
    q_wait_child(p[3], "R3");
    watchlock_lock_free(r);
    watchlock_lock_free(w1);
    watchlock_client_close(c);
}

/* Three reader processes keep the name read-held without a gap (their
 * holds overlap); a writer that starts waiting meanwhile gets in once the
 * readers already inside leave: its wait is bounded by one reader hold,
 * however long the stream goes on. */
static void test_writer_not_starved(void)
{
    enum { READERS = 3 };
    const int hold_ms = 150;
    pid_t p[READERS];
    CHECK(rh_ok(test_server(), "SET rw-stream-stop 0"));
    for (int i = 0; i < READERS; i++) {
        fflush(stdout);
        p[i] = fork();
        CHECK(p[i] >= 0);
        if (p[i] == 0) {
            watchlock_client *c = open_client(test_url(""));
            watchlock_lock *l = rw(c, "rw-stream", 0, 5000);
            sleep_ms(i * hold_ms / READERS); /* staggered: the name is never free of readers */
            while (rh_int(test_server(), "INCRBY rw-stream-stop 0") == 0) {
                CHECK_OK(watchlock_lock_acquire(l, 30000));
                sleep_ms(hold_ms);
                CHECK_OK(watchlock_lock_release(l));
            }
            _exit(0);
        }
    }
    watchlock_client *c = open_client(test_url(""));
    WAIT_FOR(q_info(c, "rw-stream", Q_IN_USE) >= 2, 10000);
    watchlock_lock *w = rw(c, "rw-stream", 1, 5000);
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(w, 20000));
    int64_t waited = now_ms() - t0;
    CHECK_EQ(q_info(c, "rw-stream", Q_WRITER), 1);
    CHECK_EQ(q_info(c, "rw-stream", Q_HOLDERS), 1);
    CHECK_OK(watchlock_lock_release(w));
    CHECK(rh_ok(test_server(), "SET rw-stream-stop 1"));
    for (int i = 0; i < READERS; i++)
        q_wait_child(p[i], "reader");
    testing_note("writer waited %lld ms behind a stream of readers holding %d ms each", (long long)waited, hold_ms);
    CHECK_INT(waited, <, hold_ms + 1000);
    watchlock_lock_free(w);
    watchlock_client_close(c);
}

/* A child holding one side with a 1 s lease, killed: the other side gets in
 * within the lease + a liveness interval. */
static void kill_holder_case(const char *name, int dead_write, int next_write)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        watchlock_client *c = open_client(test_url(""));
        watchlock_lock *l = rw(c, name, dead_write, 1000);
        CHECK_OK(watchlock_lock_acquire(l, 0));
        CHECK(write(fds[1], "1", 1) == 1);
        for (;;)
            pause();
    }
    char b;
    CHECK(read(fds[0], &b, 1) == 1);
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = rw(c, name, next_write, 5000);
    int64_t t0 = now_ms();
    q_kill_child(pid);
    CHECK_OK(watchlock_lock_acquire(l, 10000));
    int64_t took = now_ms() - t0;
    testing_note("%s SIGKILLed: the %s got in %lld ms later (lease 1000 ms)", dead_write ? "writer" : "reader",
                 next_write ? "writer" : "reader", (long long)took);
    CHECK_INT(took, <, 3000);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_sigkill_reader(void)
{
    kill_holder_case("rw-kr", 0, 1);
}

static void test_sigkill_writer(void)
{
    kill_holder_case("rw-kw", 1, 0);
}

/* A writer queued behind a reader is killed: it leaves the queue within
 * its liveness lease, and a reader that arrived after it gets in. */
static void test_sigkill_queued_writer(void)
{
    q_child ch = side("rw-kq", 1, 1, 1000);
    pid_t wpid = ch.pid;
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *r1 = rw(c, "rw-kq", 0, 5000), *r2 = rw(c, "rw-kq", 0, 5000);
    CHECK_OK(watchlock_lock_acquire(r1, 0));
    q_go(&ch);
    WAIT_FOR(q_info(c, "rw-kq", Q_LEN) == 1, 20000);
    CHECK_STATUS(watchlock_lock_acquire(r2, 0), WATCHLOCK_ETIMEDOUT); /* behind the waiting writer */
    int64_t t0 = now_ms();
    q_kill_child(wpid);
    CHECK_OK(watchlock_lock_acquire(r2, 10000));
    int64_t took = now_ms() - t0;
    testing_note("queued writer SIGKILLed: a later reader got in %lld ms later (liveness 1000 ms)", (long long)took);
    CHECK_INT(took, <, 3000);
    CHECK_EQ(q_info(c, "rw-kq", Q_IN_USE), 2);
    CHECK_OK(watchlock_lock_release(r1));
    CHECK_OK(watchlock_lock_release(r2));
    watchlock_lock_free(r1);
    watchlock_lock_free(r2);
    watchlock_client_close(c);
}

/* Downgrade: the write hold becomes a read share without a gap (same
 * token), and readers waiting at the head enter at once; writers still
 * wait. */
static void test_downgrade(void)
{
    q_child ch = side("rw-down", 0, 1, 5000);
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *w = rw(c, "rw-down", 1, 5000), *w2 = rw(c, "rw-down", 1, 5000), *r = rw(c, "rw-down", 0, 5000);
    CHECK_STATUS(watchlock_rwlock_downgrade(r), WATCHLOCK_EINVAL);
    CHECK_STATUS(watchlock_rwlock_downgrade(w), WATCHLOCK_ENOTOWNER);
    CHECK_OK(watchlock_lock_acquire(w, 0));
    int64_t f = watchlock_lock_fencing_token(w);
    q_go(&ch);
    pid_t rp = ch.pid;
    WAIT_FOR(q_info(c, "rw-down", Q_LEN) == 1, 20000);
    CHECK_OK(watchlock_rwlock_downgrade(w));
    CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_READ);
    CHECK_EQ(watchlock_lock_state(w), WATCHLOCK_HELD);
    CHECK_EQ(watchlock_lock_fencing_token(w), f);
    WAIT_FOR(got("rw-down") == 1, 10000);
    CHECK_EQ(q_info(c, "rw-down", Q_IN_USE), 2);
    CHECK_STATUS(watchlock_lock_acquire(w2, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_acquire(r, 0)); /* a new reader too: the queue is empty */
    CHECK_OK(watchlock_lock_release(r));
    go("rw-down", 1);
    q_wait_child(rp, "reader");
    CHECK_OK(watchlock_lock_release(w));
    CHECK_OK(watchlock_lock_acquire(w2, 0));
    CHECK_OK(watchlock_lock_release(w2));
    watchlock_lock_free(w);
    watchlock_lock_free(w2);
    watchlock_lock_free(r);
    watchlock_client_close(c);
}

/* Kinds on one name (issue 23.4). */
static void test_kinds_on_one_name(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *r = rw(c, "rw-kinds", 0, 5000), *plain = new_lock(c, "rw-kinds"), *f = NULL;
    CHECK_OK(watchlock_fair_lock_new(&f, c, "rw-kinds", 8));
    CHECK_OK(watchlock_lock_acquire(r, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(plain, 0), WATCHLOCK_EWRONGTYPE);
    CHECK(strstr(watchlock_last_error(), "read-write lock") != NULL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(f, 0), WATCHLOCK_EWRONGTYPE);
    CHECK_OK(watchlock_lock_release(r));
    CHECK_OK(watchlock_lock_acquire(plain, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(r, 0), WATCHLOCK_EWRONGTYPE);
    CHECK_OK(watchlock_lock_release(plain));
    watchlock_lock_free(r);
    watchlock_lock_free(plain);
    watchlock_lock_free(f);
    watchlock_client_close(c);
}

/* A writer that waits (in a thread) for its turn. */
static void *waiting_writer(void *arg)
{
    watchlock_lock *w = arg;
    if (watchlock_lock_acquire(w, 20000) != WATCHLOCK_OK)
        return w;
    return NULL;
}

/* Holder i's owner (pid, label) as name_info lists it; 1 when it matches. */
static int has_holder(const watchlock_name_info *info, const char *label, int64_t pid, int writer)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (size_t i = 0; i < watchlock_name_info_holder_count(info); i++) {
        const watchlock_owner *o = watchlock_name_info_holder_owner(info, i);
        if (o != NULL && strcmp(watchlock_owner_label(o, NULL), label) == 0 && watchlock_owner_pid(o) == pid &&
            strcmp(watchlock_owner_host(o, NULL), host) == 0 && watchlock_name_info_holder_writer(info, i) == writer &&
            watchlock_name_info_holder_permits(info, i) == 1 && watchlock_name_info_holder_remaining_ms(info, i) > 0)
            return 1;
    }
    return 0;
}

/* Each hold records its owner (host, pid, label) when granted, directly or
 * by hand-off, and loses it with the hold: two readers, then a writer the
 * readers' release hands the name to (issue 22.4, 24.7). */
static void test_holder_owners(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *r1 = rw(c, "rw-own", 0, 5000), *r2 = rw(c, "rw-own", 0, 5000), *r3 = rw(c, "rw-own", 0, 5000),
                   *w = rw(c, "rw-own", 1, 5000);
    CHECK_OK(watchlock_lock_set_owner_label(r1, "reader one"));
    CHECK_OK(watchlock_lock_set_owner_label(r2, "reader two"));
    CHECK_OK(watchlock_lock_set_owner_label(w, "the writer"));
    CHECK_OK(watchlock_lock_acquire(r1, 0));
    CHECK_OK(watchlock_lock_acquire(r2, 0));
    CHECK_OK(watchlock_lock_acquire(r3, 0)); /* no label: no owner */
    watchlock_name_info *info = NULL;
    CHECK_OK(watchlock_client_name_info(&info, c, "rw-own", 6));
    CHECK_EQ(watchlock_name_info_holder_count(info), 3);
    CHECK(has_holder(info, "reader one", getpid(), 0));
    CHECK(has_holder(info, "reader two", getpid(), 0));
    int unlabelled = 0;
    for (size_t i = 0; i < 3; i++)
        unlabelled += watchlock_name_info_holder_owner(info, i) == NULL;
    CHECK_EQ(unlabelled, 1);
    CHECK(watchlock_name_info_holder_owner(info, 3) == NULL);
    CHECK_EQ(watchlock_name_info_holder_permits(info, 3), 0);
    watchlock_name_info_free(info);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiting_writer, w) == 0);
    WAIT_FOR(q_info(c, "rw-own", Q_LEN) == 1, 20000);
    CHECK_OK(watchlock_lock_release(r1));
    CHECK_OK(watchlock_lock_release(r2));
    CHECK_OK(watchlock_lock_release(r3));
    void *res = NULL;
    pthread_join(th, &res);
    CHECK(res == NULL);
    CHECK_OK(watchlock_client_name_info(&info, c, "rw-own", 6));
    CHECK_EQ(watchlock_name_info_holder_count(info), 1);
    CHECK(has_holder(info, "the writer", getpid(), 1));
    watchlock_name_info_free(info);
    CHECK_OK(watchlock_lock_release(w));
    CHECK_OK(watchlock_client_name_info(&info, c, "rw-own", 6));
    CHECK_EQ(watchlock_name_info_holder_count(info), 0);
    watchlock_name_info_free(info);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{rw-own}:q:d"), 0);
    watchlock_lock_free(r1);
    watchlock_lock_free(r2);
    watchlock_lock_free(r3);
    watchlock_lock_free(w);
    watchlock_client_close(c);
}

static const test_case tests[] = {
    {"readers_overlap_writer_excludes", test_readers_overlap_writer_excludes, 0},
    {"phase_order", test_phase_order, 0},
    {"writer_not_starved", test_writer_not_starved, 0},
    {"sigkill_reader", test_sigkill_reader, 0},
    {"sigkill_writer", test_sigkill_writer, 0},
    {"sigkill_queued_writer", test_sigkill_queued_writer, 0},
    {"downgrade", test_downgrade, 0},
    {"kinds_on_one_name", test_kinds_on_one_name, 0},
    {"holder_owners", test_holder_owners, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
