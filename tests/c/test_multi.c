/*
 * test_multi.c - the multi-lock (issue 23 item 2) against a real
 * redis-server: all or nothing; two processes locking [a,b] and [b,a]
 * 1,000 times each without deadlock (and never both inside); an acquire
 * interrupted (a wait that runs out, the client closed under a waiter)
 * leaves no key on the server; the loss of one name is the loss of the
 * whole hold, told once, with that name, and the other names are deleted
 * by release; a name in use as another kind fails clearly, taking
 * nothing; per-name fencing tokens follow the plain lock's. Cluster runs
 * across slots and nodes are in test_cluster.c.
 */
#include "proxy_harness.h"
#include "testing.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static watchlock_lock *new_multi(watchlock_client *c, const char *const *names, size_t n)
{
    size_t lens[16];
    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(names[i]);
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_multi_lock_new(&l, c, (const void *const *)names, lens, n));
    return l;
}

static long long exists(const char *name)
{
    return rh_int(test_server(), "EXISTS watchlock:{%s}", name);
}

typedef struct waiter {
    watchlock_lock *m;
    atomic_int started;
    int rc;
} waiter;

static void *wait_forever(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->rc = watchlock_lock_acquire(w->m, -1);
    return NULL;
}

static void *wait_5s(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->rc = watchlock_lock_acquire(w->m, 5000);
    return NULL;
}

static void test_all_or_nothing(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *other = open_client(test_url(""));
    watchlock_lock *b = new_lock(other, "aon-b");
    CHECK_OK(watchlock_lock_acquire(b, 0));
    const char *names[] = {"aon-c", "aon-a", "aon-b"};
    watchlock_lock *m = new_multi(c, names, 3);
    CHECK_EQ(watchlock_lock_name_count(m), 3);
    CHECK_STR(watchlock_lock_name_at(m, 0, NULL), "aon-c");
    /* b is held: nothing is taken, with or without a (short) wait */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(m, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(exists("aon-a") + exists("aon-c"), 0);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(m, 150), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(exists("aon-a") + exists("aon-c"), 0);
    CHECK_EQ(watchlock_lock_state(m), WATCHLOCK_UNLOCKED);
    /* a waiter is woken by b's release and takes all three */
    CHECK_OK(watchlock_lock_set_lease(b, 30000));
    waiter w = {.m = m};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_5s, &w) == 0);
    WAIT_FOR(atomic_load(&w.started), 5000);
    sleep_ms(100); /* let it wait (either way it must get all three) */
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_release(b));
    pthread_join(t, NULL);
    CHECK_OK(w.rc);
    testing_note("acquired %lld ms after b's release (b's lease: 30 s)", (long long)(now_ms() - t0));
    CHECK_INT(now_ms() - t0, <, 10000);
    CHECK_EQ(watchlock_lock_state(m), WATCHLOCK_HELD);
    CHECK_EQ(exists("aon-a") + exists("aon-b") + exists("aon-c"), 3);
    /* per-name fencing tokens, as the server's counters say */
    for (size_t i = 0; i < 3; i++) {
        int held = 0;
        int64_t fence = 0;
        CHECK_OK(watchlock_client_inspect(other, names[i], strlen(names[i]), &held, NULL, &fence));
        CHECK_EQ(held, 1);
        CHECK_EQ(watchlock_lock_fencing_token_at(m, i), fence);
    }
    CHECK_EQ(watchlock_lock_fencing_token(m), watchlock_lock_fencing_token_at(m, 0));
    CHECK_EQ(watchlock_lock_fencing_token_at(m, 3), 0);
    int64_t fb = watchlock_lock_fencing_token(b);
    CHECK_INT(watchlock_lock_fencing_token_at(m, 2), >, fb); /* b's counter went on */
    /* a plain handle on one of them is refused; reentrant on the handle */
    CHECK_STATUS(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_acquire(m, 0));
    CHECK_EQ(watchlock_lock_hold_count(m), 2);
    CHECK_OK(watchlock_lock_release(m));
    CHECK_EQ(exists("aon-a"), 1);
    CHECK_OK(watchlock_lock_extend(m, 20000));
    long long ttl = rh_int(test_server(), "PTTL watchlock:{aon-b}");
    CHECK_MSG(ttl > 15000, "PTTL after extend(20 s): %lld", ttl);
    CHECK_OK(watchlock_lock_release(m));
    CHECK_EQ(exists("aon-a") + exists("aon-b") + exists("aon-c"), 0);
    CHECK_EQ(watchlock_lock_state(m), WATCHLOCK_UNLOCKED);
    CHECK_STATUS(watchlock_lock_release(m), WATCHLOCK_ENOTOWNER);
    CHECK(watchlock_lock_lost_name(m, NULL) == NULL);
    /* plain after multi: tokens keep increasing per name */
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_INT(watchlock_lock_fencing_token(b), >, watchlock_lock_fencing_token_at(m, 2));
    watchlock_lock_free(b);
    /* bad arguments */
    const char *twice[] = {"x", "y", "x"};
    size_t lens[] = {1, 1, 1};
    watchlock_lock *bad = NULL;
    CHECK_FAILS_WITH_MSG(watchlock_multi_lock_new(&bad, c, (const void *const *)twice, lens, 3), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_multi_lock_new(&bad, c, (const void *const *)twice, lens, 0), WATCHLOCK_EINVAL);
    CHECK(bad == NULL);
    watchlock_lock_free(m);
    watchlock_client_close(other);
    watchlock_client_close(c);
}

/* One of two processes: `rounds` multi-acquires of [first, second]; while
 * holding, INCR of a shared counter must find it 0 (nobody else inside). */
static void deadlock_worker(const char *first, const char *second, int rounds)
{
    watchlock_client *c = open_client(test_url(""));
    const char *names[] = {first, second};
    watchlock_lock *m = new_multi(c, names, 2);
    CHECK_OK(watchlock_lock_set_lease(m, 2000));
    redisContext *r = rh_connect(test_server());
    CHECK(r != NULL);
    redisReply *x;
    for (int i = 0; i < rounds; i++) {
        CHECK_OK(watchlock_lock_acquire(m, 10000));
        x = redisCommand(r, "INCR multi-inside");
        CHECK(x != NULL && x->type == REDIS_REPLY_INTEGER);
        CHECK_MSG(x->integer == 1, "two holders of [a, b] at once (round %d)", i);
        freeReplyObject(x);
        x = redisCommand(r, "DECR multi-inside");
        CHECK(x != NULL);
        freeReplyObject(x);
        CHECK_OK(watchlock_lock_release(m));
        /* one round trip before the next acquire (not a sleep): the other
         * process, woken by the release, gets its turn instead of watching
         * this one barge in again (plain locks are not fair) */
        x = redisCommand(r, "PING");
        CHECK(x != NULL);
        freeReplyObject(x);
    }
    /* how many acquires found a name held (so the two really met) */
    x = redisCommand(r, "INCRBY multi-contended %lld",
                                 (long long)watchlock_client_stat(c, WATCHLOCK_STAT_CONTENDED_ACQUIRES));
    CHECK(x != NULL);
    freeReplyObject(x);
    redisFree(r);
    watchlock_lock_free(m);
    watchlock_client_close(c);
}

static void test_opposite_orders_never_deadlock(void)
{
    int64_t t0 = now_ms();
    pid_t p[2];
    for (int k = 0; k < 2; k++) {
        p[k] = fork();
        CHECK(p[k] >= 0);
        if (p[k] == 0) {
            deadlock_worker(k ? "dl-b" : "dl-a", k ? "dl-a" : "dl-b", 1000);
            _exit(0);
        }
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        CHECK(waitpid(p[k], &st, 0) == p[k]);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d failed (status %d)", k, st);
    }
    long long met = rh_int(test_server(), "INCRBY multi-contended 0");
    testing_note("2 x 1000 multi-lock cycles over [a,b] / [b,a] in %lld ms, %lld acquires found a name held",
                 (long long)(now_ms() - t0), met);
    CHECK_INT(met, >, 0);
    CHECK_EQ(exists("dl-a") + exists("dl-b"), 0);
}

static void test_interrupted_acquire_leaves_nothing(void)
{
    watchlock_client *other = open_client(test_url(""));
    watchlock_lock *hold = new_lock(other, "int-z");
    CHECK_OK(watchlock_lock_acquire(hold, 0));
    /* a wait that runs out */
    watchlock_client *c = open_client(test_url(""));
    const char *names[] = {"int-a", "int-z", "int-m"};
    watchlock_lock *m = new_multi(c, names, 3);
    CHECK_STATUS(watchlock_lock_acquire(m, 300), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(exists("int-a") + exists("int-m"), 0);
    /* the client closed under a waiter that waits forever */
    waiter w = {.m = m};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_forever, &w) == 0);
    WAIT_FOR(atomic_load(&w.started), 5000);
    sleep_ms(100); /* let it subscribe and sleep; the check below holds either way */
    watchlock_client_close(c);
    pthread_join(t, NULL);
    CHECK_MSG(w.rc == WATCHLOCK_ECLOSED, "acquire returned %d", w.rc);
    CHECK_EQ(exists("int-a") + exists("int-m"), 0);
    watchlock_lock_free(m);
    CHECK_EQ(exists("int-z"), 1);
    watchlock_lock_free(hold);
    watchlock_client_close(other);
}

static atomic_int lost_calls, lost_reason_seen;

static void on_lost(watchlock_lock *l, int reason, void *data)
{
    (void)l, (void)data;
    atomic_fetch_add(&lost_calls, 1);
    atomic_store(&lost_reason_seen, reason);
}

static void test_loss_of_one_name_loses_all(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *admin = open_client(test_url(""));
    CHECK_OK(watchlock_client_enable_lost_events(c, 1));
    const char *names[] = {"loss-a", "loss-b", "loss-c"};
    watchlock_lock *m = new_multi(c, names, 3);
    CHECK_OK(watchlock_lock_set_lease(m, 900));
    CHECK_OK(watchlock_lock_set_on_lost(m, on_lost, NULL));
    CHECK_OK(watchlock_lock_acquire(m, 0));
    /* renewed: still held after several leases */
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 2000) {
        CHECK_EQ(watchlock_lock_state(m), WATCHLOCK_HELD);
        sleep_ms(50);
    }
    CHECK_EQ(exists("loss-a") + exists("loss-b") + exists("loss-c"), 3);
    int released = 0;
    CHECK_OK(watchlock_client_force_release(admin, "loss-b", 6, &released));
    CHECK_EQ(released, 1);
    WAIT_FOR(watchlock_lock_state(m) == WATCHLOCK_LOST, 5000);
    CHECK_EQ(watchlock_lock_state(m), WATCHLOCK_LOST);
    CHECK_EQ(watchlock_lock_lost_reason(m), WATCHLOCK_LOST_TAKEN);
    size_t len = 0;
    const char *lost = watchlock_lock_lost_name(m, &len);
    CHECK_STR(lost, "loss-b");
    CHECK_EQ(len, 6);
    WAIT_FOR(atomic_load(&lost_calls) >= 1, 5000);
    uint64_t id = 0;
    int reason = 0;
    CHECK_OK(watchlock_client_next_lost_event(c, 1000, &id, &reason));
    CHECK_EQ(id, watchlock_lock_id(m));
    CHECK_EQ(reason, WATCHLOCK_LOST_TAKEN);
    /* told once: no second callback, no second event, within two more leases */
    CHECK_STATUS(watchlock_client_next_lost_event(c, 1800, &id, &reason), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(atomic_load(&lost_calls), 1);
    CHECK_EQ(atomic_load(&lost_reason_seen), WATCHLOCK_LOST_TAKEN);
    /* the other names were no longer renewed (or are deleted by release) */
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(m), WATCHLOCK_ENOTOWNER);
    CHECK(strstr(watchlock_last_error(), "loss-b") != NULL);
    CHECK_EQ(exists("loss-a") + exists("loss-c"), 0);
    CHECK_STR(watchlock_lock_lost_name(m, NULL), "loss-b");
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    /* and it can be taken again */
    CHECK_OK(watchlock_lock_acquire(m, 0));
    CHECK(watchlock_lock_lost_name(m, NULL) == NULL);
    CHECK_OK(watchlock_lock_release(m));
    watchlock_lock_free(m);
    watchlock_client_close(admin);
    watchlock_client_close(c);
}

static void test_other_kind_fails_clearly(void)
{
    CHECK_EQ(rh_int(test_server(), "HSET watchlock:{kind-q} owner x"), 1);
    watchlock_client *c = open_client(test_url(""));
    const char *names[] = {"kind-a", "kind-q"};
    watchlock_lock *m = new_multi(c, names, 2);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(m, 0), WATCHLOCK_EWRONGTYPE);
    CHECK_MSG(strstr(watchlock_last_error(), "another lock kind") != NULL, "message: %s", watchlock_last_error());
    CHECK_EQ(exists("kind-a"), 0);
    watchlock_lock_free(m);
    watchlock_client_close(c);
}

static void test_free_and_abandon(void)
{
    watchlock_client *c = open_client(test_url(""));
    const char *names[] = {"fa-a", "fa-b"};
    watchlock_lock *m = new_multi(c, names, 2);
    CHECK_OK(watchlock_lock_acquire(m, 0));
    watchlock_lock_free(m); /* held: released */
    CHECK_EQ(exists("fa-a") + exists("fa-b"), 0);
    m = new_multi(c, names, 2);
    CHECK_OK(watchlock_lock_set_lease(m, 600));
    CHECK_OK(watchlock_lock_acquire(m, 0));
    CHECK_EQ(watchlock_lock_abandon(m), 1); /* not released: left to its lease */
    CHECK_EQ(exists("fa-a") + exists("fa-b"), 2);
    WAIT_FOR(exists("fa-a") + exists("fa-b") == 0, 5000);
    CHECK_EQ(exists("fa-a") + exists("fa-b"), 0);
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS) == 0, 5000);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    /* close releases a held multi-lock's names */
    m = new_multi(c, names, 2);
    CHECK_OK(watchlock_lock_acquire(m, 0));
    watchlock_client_close(c);
    CHECK_EQ(exists("fa-a") + exists("fa-b"), 0);
    watchlock_lock_free(m);
}

/* The fast acquire (a transaction of SET NX / INCR, no Lua) once the
 * names' counters are seeded: tokens keep increasing, and when a name is
 * held the names the transaction took are given back before the script
 * answers "held". */
static void test_fast_acquire(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *other = open_client(test_url(""));
    const char *names[] = {"fast-a", "fast-b", "fast-c"};
    watchlock_lock *m = new_multi(c, names, 3);
    int64_t last[3] = {0, 0, 0};
    for (int round = 0; round < 20; round++) {
        CHECK_OK(watchlock_lock_acquire(m, 0));
        for (size_t i = 0; i < 3; i++) {
            int64_t t = watchlock_lock_fencing_token_at(m, i);
            CHECK_INT(t, >, last[i]);
            int held = 0;
            int64_t fence = 0;
            CHECK_OK(watchlock_client_inspect(other, names[i], strlen(names[i]), &held, NULL, &fence));
            CHECK_EQ(fence, t);
            last[i] = t;
        }
        CHECK_OK(watchlock_lock_release(m));
    }
    watchlock_lock *b = new_lock(other, "fast-b");
    CHECK_OK(watchlock_lock_acquire(b, 0));
    for (int round = 0; round < 5; round++) {
        CHECK_STATUS(watchlock_lock_acquire(m, 0), WATCHLOCK_ETIMEDOUT);
        CHECK_EQ(exists("fast-a") + exists("fast-c"), 0);
        watchlock_lock_forget_wait(m);
        CHECK_OK(watchlock_lock_release(b)); /* the next attempt is fast again after a success */
        CHECK_OK(watchlock_lock_acquire(m, 0));
        CHECK_OK(watchlock_lock_release(m));
        CHECK_OK(watchlock_lock_acquire(b, 0));
    }
    CHECK_EQ(exists("fast-a") + exists("fast-c"), 0);
    watchlock_lock_free(b);
    watchlock_lock_free(m);
    watchlock_client_close(other);
    watchlock_client_close(c);
}

/* Issue 29.15: the acquire's reply is lost (it comes after the command
 * timeout): the names are given back at once, and the same handle's retry
 * gets them. Before: each call drew fresh tokens and nothing gave the
 * attempt's keys back, so every name stayed held by nobody for the whole
 * lease and the retry found them "held by another owner". */
static void test_lost_reply(void)
{
    ph_proxy *px = ph_start(rh_port(test_server()));
    CHECK(px != NULL);
    char url[300];
    snprintf(url, sizeof url, "%s?command_timeout=300ms", ph_url(px));
    watchlock_client *c = open_client(url);
    const char *names[] = {"lost-a", "lost-b", "lost-c"};
    watchlock_lock *m = new_multi(c, names, 3);
    CHECK_OK(watchlock_lock_set_lease(m, 60000));
    for (int round = 0; round < 2; round++) { /* the script, then the fast transaction */
        CHECK_EQ(ph_cmd(px, "delay down 1000"), 0); /* every reply comes after the command timeout */
        CHECK_STATUS(watchlock_lock_acquire(m, 0), WATCHLOCK_ECONN);
        CHECK_EQ(ph_cmd(px, "clear"), 0);
        CHECK_MSG(exists("lost-a") + exists("lost-b") + exists("lost-c") == 0,
                  "round %d: %lld of 3 names left held by the failed attempt (PTTL %lld ms)", round,
                  exists("lost-a") + exists("lost-b") + exists("lost-c"),
                  rh_int(test_server(), "PTTL watchlock:{lost-a}"));
        CHECK_OK(watchlock_lock_acquire(m, 0)); /* the same handle's retry */
        CHECK_OK(watchlock_lock_release(m));
    }
    /* the reply dropped and the connection reset: a retry finds the names free or its own */
    CHECK_EQ(ph_cmd(px, "drop-reply-once"), 0);
    int rc = watchlock_lock_acquire(m, 0);
    CHECK_MSG(rc == WATCHLOCK_OK || rc == WATCHLOCK_ECONN, "acquire returned %d", rc);
    if (rc != WATCHLOCK_OK)
        CHECK_OK(watchlock_lock_acquire(m, 0));
    CHECK_OK(watchlock_lock_release(m));
    CHECK_EQ(exists("lost-a") + exists("lost-b") + exists("lost-c"), 0);
    watchlock_lock_free(m);
    watchlock_client_close(c);
    ph_free(px);
}

static const test_case tests[] = {
    {"lost_reply", test_lost_reply, 0},
    {"fast_acquire", test_fast_acquire, 0},
    {"all_or_nothing", test_all_or_nothing, 0},
    {"opposite_orders_never_deadlock", test_opposite_orders_never_deadlock, 120},
    {"interrupted_acquire_leaves_nothing", test_interrupted_acquire_leaves_nothing, 0},
    {"loss_of_one_name_loses_all", test_loss_of_one_name_loses_all, 0},
    {"other_kind_fails_clearly", test_other_kind_fails_clearly, 0},
    {"free_and_abandon", test_free_and_abandon, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
