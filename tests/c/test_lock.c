/*
 * test_lock.c - lock semantics against a real redis-server: acquire with
 * try/forever/bounded waits, reentrancy without round trips, exclusion
 * between handles, release from another thread, extend, fencing tokens,
 * the name-to-key mapping (binary names, braces, 64 KiB names), bad
 * arguments, wrong key types, double release, state queries.
 *
 * Key layout used by the checks (DESIGN.md): for a plain name N the lock key
 * is "watchlock:{N}" and the fence key "watchlock:{N}:fence".
 */
#include "proxy_harness.h"
#include "testing.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static long long pttl(const char *key)
{
    return rh_int(test_server(), "PTTL %s", key);
}

static long long script_calls(void)
{
    return rh_info(test_server(), "commandstats", "cmdstat_evalsha") +
           rh_info(test_server(), "commandstats", "cmdstat_eval");
}

static void test_try_once(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "try-once");
    watchlock_lock *b = new_lock(c, "try-once");
    CHECK_OK(watchlock_lock_acquire(a, 0));
    /* Two handles of one name exclude each other, even in one thread. */
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_INT(now_ms() - t0, <, 2000); /* try once: no waiting for the 30 s lease */
    CHECK_EQ(watchlock_lock_state(b), WATCHLOCK_UNLOCKED);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_STATUS(watchlock_lock_acquire(a, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(b));
    /* A handle on another client excludes too. */
    watchlock_client *c2 = open_client(test_url(""));
    watchlock_lock *d = new_lock(c2, "try-once");
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_STATUS(watchlock_lock_acquire(d, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_acquire(d, 0));
    CHECK_OK(watchlock_lock_release(d));
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_lock_free(d);
    watchlock_client_close(c);
    watchlock_client_close(c2);
}

static void test_bounded_wait_times_out(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "bounded");
    watchlock_lock *b = new_lock(c, "bounded");
    CHECK_OK(watchlock_lock_acquire(a, 0));
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 400), WATCHLOCK_ETIMEDOUT);
    int64_t took = now_ms() - t0;
    testing_note("acquire(400) gave up after %lld ms", (long long)took);
    CHECK_INT(took, >=, 390);
    CHECK_INT(took, <, 5000); /* far less than the holder's 30 s lease */
    CHECK_OK(watchlock_lock_release(a));
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(c);
}

typedef struct waiter {
    watchlock_lock *lock;
    int64_t wait_ms;
    int rc;
    _Atomic int64_t done_at;
    atomic_int started;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->rc = watchlock_lock_acquire(w->lock, w->wait_ms);
    atomic_store(&w->done_at, now_ms());
    return NULL;
}

static long long subscribers(const char *channel);
static long long subscribers_n(const char *channel, size_t len);

/* A waiter is woken by the release itself: with a 30 s lease on the holder,
 * it gets the lock soon after the release, not at the lease's end. */
static void check_woken_by_release(int64_t wait_ms, const char *name)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *c2 = open_client(test_url(""));
    watchlock_lock *holder = new_lock(c, name);
    CHECK_OK(watchlock_lock_set_lease(holder, 30000));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter w = {.lock = new_lock(c2, name), .wait_ms = wait_ms, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
    WAIT_FOR(atomic_load(&w.started), 5000);
    char channel[128];
    snprintf(channel, sizeof channel, "watchlock:{%s}:released", name);
    WAIT_FOR(subscribers(channel) >= 1, 20000); /* it waits: subscribed to the release channel */
    CHECK_INT(subscribers(channel), >=, 1);
    CHECK_MSG(atomic_load(&w.done_at) == 0, "waiter returned %d while the lock was held", w.rc);
    int64_t released_at = now_ms();
    CHECK_OK(watchlock_lock_release(holder));
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(w.rc);
    int64_t lag = atomic_load(&w.done_at) - released_at;
    testing_note("waiter(wait=%lld) acquired %lld ms after the release (holder lease 30000 ms)",
                 (long long)wait_ms, (long long)lag);
    CHECK_INT(lag, <, 5000);
    CHECK_EQ(watchlock_lock_state(w.lock), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(w.lock));
    watchlock_lock_free(w.lock);
    watchlock_lock_free(holder);
    watchlock_client_close(c2);
    watchlock_client_close(c);
}

static void test_wait_forever_woken_by_release(void)
{
    check_woken_by_release(-1, "woken-forever");
}

static void test_bounded_wait_woken_by_release(void)
{
    check_woken_by_release(25000, "woken-bounded");
}

static void test_binary_name_waiter_woken(void)
{
    /* The release channel of a name with NUL and braces works too. */
    watchlock_client *c = open_client(test_url(""));
    static const char name[] = "bin\0{wake}";
    watchlock_lock *holder = NULL, *other = NULL;
    CHECK_OK(watchlock_lock_new(&holder, c, name, sizeof name - 1));
    CHECK_OK(watchlock_lock_new(&other, c, name, sizeof name - 1));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter w = {.lock = other, .wait_ms = -1, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
    WAIT_FOR(atomic_load(&w.started), 5000);
    static const char channel[] = "watchlock:{bin\0%7Bwake%7D}:released"; /* core/src/proto/keys.c */
    WAIT_FOR(subscribers_n(channel, sizeof channel - 1) >= 1, 20000); /* it waits: subscribed */
    CHECK_INT(subscribers_n(channel, sizeof channel - 1), >=, 1);
    CHECK(atomic_load(&w.done_at) == 0);
    int64_t released_at = now_ms();
    CHECK_OK(watchlock_lock_release(holder));
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(w.rc);
    CHECK_INT(atomic_load(&w.done_at) - released_at, <, 5000);
    CHECK_OK(watchlock_lock_release(other));
    watchlock_lock_free(holder);
    watchlock_lock_free(other);
    watchlock_client_close(c);
}

/* A crashed holder never releases and never publishes: waiting is bounded by
 * its lease (the acquire script's TTL hint), not by polling forever. */
static void test_wait_bounded_by_crashed_holder(void)
{
    watchlock_client *c = open_client(test_url(""));
    CHECK(rh_ok(test_server(), "SET watchlock:{crashed} deadbeefdeadbeefdeadbeefdeadbeef PX 1500"));
    int64_t t0 = now_ms();
    watchlock_lock *l = new_lock(c, "crashed");
    CHECK_OK(watchlock_lock_acquire(l, -1));
    int64_t took = now_ms() - t0;
    testing_note("acquired %lld ms after a crashed holder's 1500 ms lease began", (long long)took);
    CHECK_INT(took, >=, 1300);
    CHECK_INT(took, <, 1500 + 1500);
    CHECK_OK(watchlock_lock_release(l));
    /* A bounded wait shorter than the lease still times out. */
    CHECK(rh_ok(test_server(), "SET watchlock:{crashed} deadbeefdeadbeefdeadbeefdeadbeef PX 5000"));
    t0 = now_ms();
    CHECK_STATUS(watchlock_lock_acquire(l, 300), WATCHLOCK_ETIMEDOUT);
    CHECK_INT(now_ms() - t0, <, 3000);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_reentrant_no_round_trip(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "reentrant");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_hold_count(l), 1);
    int64_t fence = watchlock_lock_fencing_token(l);
    long long calls = script_calls();
    long long total = rh_info(test_server(), "stats", "total_commands_processed");
    CHECK_INT(calls, >=, 1);
    for (int i = 0; i < 3; i++)
        CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_acquire(l, -1));
    CHECK_OK(watchlock_lock_acquire(l, 1000));
    CHECK_EQ(watchlock_lock_hold_count(l), 6);
    CHECK_EQ(watchlock_lock_fencing_token(l), fence);
    /* Inner releases only count down. */
    for (int i = 0; i < 5; i++)
        CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(watchlock_lock_hold_count(l), 1);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    /* The harness's own INFO and EXISTS are the only commands in between
     * (INFO stats counts itself after the snapshot: +2 for the INFO
     * commandstats pair, +1 for INFO stats). */
    CHECK_EQ(script_calls(), calls);
    long long total_after = rh_info(test_server(), "stats", "total_commands_processed");
    CHECK_MSG(total_after - total <= 3, "%lld commands reached the server during reentrant acquire/release",
              total_after - total - 3);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{reentrant}"), 1);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(watchlock_lock_hold_count(l), 0);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{reentrant}"), 0);
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void *release_main(void *arg)
{
    return (void *)(intptr_t)watchlock_lock_release(arg);
}

static void test_release_from_other_thread(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "cross-thread");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    pthread_t th;
    void *ret;
    CHECK(pthread_create(&th, NULL, release_main, l) == 0);
    CHECK(pthread_join(th, &ret) == 0);
    CHECK_EQ((intptr_t)ret, WATCHLOCK_OK);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{cross-thread}"), 0);
    /* And another handle can take it at once. */
    watchlock_lock *o = new_lock(c, "cross-thread");
    CHECK_OK(watchlock_lock_acquire(o, 0));
    CHECK_OK(watchlock_lock_release(o));
    watchlock_lock_free(o);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_extend_sets_lease(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "extend");
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(l, 1000), WATCHLOCK_ENOTOWNER);
    CHECK_OK(watchlock_lock_set_auto_renew(l, 0));
    CHECK_OK(watchlock_lock_set_lease(l, 10000));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    long long t = pttl("watchlock:{extend}");
    CHECK_INT(t, >, 8000);
    CHECK_INT(t, <=, 10000);
    /* Shorter: the lease is set, not added to the 10 s left. */
    CHECK_OK(watchlock_lock_extend(l, 2000));
    t = pttl("watchlock:{extend}");
    CHECK_INT(t, >, 1000);
    CHECK_INT(t, <=, 2000);
    CHECK_INT(watchlock_lock_remaining_ms(l), <=, 2000);
    CHECK_INT(watchlock_lock_remaining_ms(l), >, 0);
    /* After a while, extending by 2 s again gives 2 s, not 2 s + what was left. */
    sleep_ms(300);
    CHECK_OK(watchlock_lock_extend(l, 2000));
    t = pttl("watchlock:{extend}");
    CHECK_INT(t, >, 1000);
    CHECK_INT(t, <=, 2000);
    /* 0 = the handle's lease, which the last extend set to 2000. */
    CHECK_OK(watchlock_lock_extend(l, 0));
    t = pttl("watchlock:{extend}");
    CHECK_INT(t, >, 1000);
    CHECK_INT(t, <=, 2000);
    CHECK_OK(watchlock_lock_extend(l, 6000));
    t = pttl("watchlock:{extend}");
    CHECK_INT(t, >, 5000);
    CHECK_INT(t, <=, 6000);
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(l, -1), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(l, WATCHLOCK_MAX_LEASE_MS + 1), WATCHLOCK_EINVAL);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    /* Deleted behind our back: extend says not owner and the handle is LOST. */
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{extend}"), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(l, 1000), WATCHLOCK_ENOTOWNER);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{extend}"), 0); /* not recreated */
    CHECK_STATUS(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_extend_does_not_touch_other_owner(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "extend-other");
    CHECK_OK(watchlock_lock_set_auto_renew(l, 0));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK(rh_ok(test_server(), "SET watchlock:{extend-other} someoneelse PX 3000"));
    CHECK_STATUS(watchlock_lock_extend(l, 60000), WATCHLOCK_ENOTOWNER);
    CHECK_INT(pttl("watchlock:{extend-other}"), <=, 3000);
    CHECK_STATUS(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    redisReply *r = rh_command(test_server(), "GET watchlock:{extend-other}");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "someoneelse") == 0);
    freeReplyObject(r);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_fencing_tokens(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *c2 = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "fence");
    watchlock_lock *b = new_lock(c2, "fence");
    CHECK_EQ(watchlock_lock_fencing_token(a), 0);
    int64_t last = 0;
    for (int i = 0; i < 10; i++) {
        watchlock_lock *h = (i % 2) ? b : a;
        CHECK_OK(watchlock_lock_acquire(h, 5000));
        int64_t f = watchlock_lock_fencing_token(h);
        CHECK_MSG(f > last, "token %lld after %lld (round %d)", (long long)f, (long long)last, i);
        last = f;
        int held = 0;
        int64_t rem = 0, fence = 0;
        CHECK_OK(watchlock_client_inspect(c, "fence", 5, &held, &rem, &fence));
        CHECK_EQ(fence, f);
        CHECK_OK(watchlock_lock_release(h));
        /* The token of the last hold stays readable after release. */
        CHECK_EQ(watchlock_lock_fencing_token(h), f);
    }
    /* The counter key has a TTL: no key is kept forever. */
    long long fttl = pttl("watchlock:{fence}:fence");
    CHECK_MSG(fttl > 0, "fence key PTTL %lld (no expiry or missing)", fttl);
    /* Tokens keep increasing after the counter key is gone (deleted or expired). */
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{fence}:fence"), 1);
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_MSG(watchlock_lock_fencing_token(a) > last, "token %lld after the counter was deleted, last %lld",
              (long long)watchlock_lock_fencing_token(a), (long long)last);
    last = watchlock_lock_fencing_token(a);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_EQ(rh_int(test_server(), "PEXPIRE watchlock:{fence}:fence 1"), 1);
    sleep_ms(20);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{fence}:fence"), 0);
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_MSG(watchlock_lock_fencing_token(b) > last, "token %lld after the counter expired, last %lld",
              (long long)watchlock_lock_fencing_token(b), (long long)last);
    last = watchlock_lock_fencing_token(b);
    CHECK_OK(watchlock_lock_release(b));
    /* A counter far ahead of the clock is still honoured (+1). */
    long long ahead = (long long)last + 1000000000000LL;
    CHECK(rh_ok(test_server(), "SET watchlock:{fence}:fence %lld PX 600000", ahead));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_EQ(watchlock_lock_fencing_token(a), ahead + 1);
    CHECK_OK(watchlock_lock_release(a));
    /* Reentrant acquire keeps the token. */
    CHECK_OK(watchlock_lock_acquire(b, 0));
    int64_t f = watchlock_lock_fencing_token(b);
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_EQ(watchlock_lock_fencing_token(b), f);
    CHECK_OK(watchlock_lock_release(b));
    CHECK_OK(watchlock_lock_release(b));
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(c);
    watchlock_client_close(c2);
}

/* The set of keys, as (bytes, len) pairs. */
typedef struct keyset {
    char **keys;
    size_t *lens;
    size_t n;
} keyset;

static keyset all_keys(void)
{
    keyset s = {0};
    redisReply *r = rh_command(test_server(), "KEYS *");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    s.n = r->elements;
    s.keys = calloc(s.n + 1, sizeof *s.keys);
    s.lens = calloc(s.n + 1, sizeof *s.lens);
    for (size_t i = 0; i < s.n; i++) {
        s.lens[i] = r->element[i]->len;
        s.keys[i] = malloc(s.lens[i] + 1);
        memcpy(s.keys[i], r->element[i]->str, s.lens[i] + 1);
    }
    freeReplyObject(r);
    return s;
}

static int keyset_has(const keyset *s, const char *k, size_t len)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->lens[i] == len && memcmp(s->keys[i], k, len) == 0)
            return 1;
    return 0;
}

static void keyset_free(keyset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->keys[i]);
    free(s->keys);
    free(s->lens);
}

/* Acquires `name` and checks that exactly two new keys appeared (lock and
 * fence), both in one Cluster slot, the lock key holding a token. */
static void acquire_and_check_keys(watchlock_lock *l, const char *name, size_t len)
{
    keyset before = all_keys();
    CHECK_MSG(watchlock_lock_acquire(l, 0) == WATCHLOCK_OK, "name #%zu bytes: %s", len, watchlock_last_error());
    keyset after = all_keys();
    CHECK_MSG(after.n == before.n + 2, "acquiring a %zu-byte name added %zu keys (expected lock + fence)", len,
              after.n - before.n);
    const char *newk[2];
    size_t newl[2], k = 0;
    for (size_t i = 0; i < after.n; i++)
        if (!keyset_has(&before, after.keys[i], after.lens[i])) {
            CHECK(k < 2);
            newk[k] = after.keys[i];
            newl[k++] = after.lens[i];
        }
    CHECK_EQ(k, 2);
    CHECK_MSG(key_slot(newk[0], newl[0]) == key_slot(newk[1], newl[1]), "lock and fence keys in different slots");
    /* Exactly one of them holds the hold identity: 32 hex digits, ".1". */
    int tokens = 0;
    for (int i = 0; i < 2; i++) {
        const char *argv[2] = {"GET", newk[i]};
        size_t argvlen[2] = {3, newl[i]};
        redisReply *r = rh_command_argv(test_server(), 2, argv, argvlen);
        CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
        if (r->len == 34 && strspn(r->str, "0123456789abcdef") == 32 && strcmp(r->str + 32, ".1") == 0)
            tokens++;
        freeReplyObject(r);
    }
    CHECK_EQ(tokens, 1);
    (void)name;
    keyset_free(&before);
    keyset_free(&after);
}

static void test_binary_names_distinct_keys(void)
{
    watchlock_client *c = open_client(test_url(""));
    static const struct {
        const char *bytes;
        size_t len;
    } names[] = {
        {"x", 1},        {"x}:fence", 8},   {"x}", 2},         {"x%7D", 4},      {"{x}", 3},
        {"x}:released", 11}, {"a", 1},      {"a\0b", 3},       {"a\0c", 3},      {"\0", 1},
        {"\0\0", 2},     {"{", 1},          {"}", 1},          {"%", 1},         {"%25", 3},
        {"}{", 2},       {"\xff\xfe", 2},   {"watchlock:{x}", 13}, {"a b\r\n", 5},
    };
    size_t n = sizeof names / sizeof names[0];
    watchlock_lock **locks = calloc(n, sizeof *locks);
    for (size_t i = 0; i < n; i++) {
        CHECK_OK(watchlock_lock_new(&locks[i], c, names[i].bytes, names[i].len));
        size_t len = 0;
        const char *got = watchlock_lock_name(locks[i], &len);
        CHECK_EQ(len, names[i].len);
        CHECK(memcmp(got, names[i].bytes, len) == 0 && got[len] == '\0');
        /* All held at once: no name's keys collide with another's. */
        acquire_and_check_keys(locks[i], names[i].bytes, names[i].len);
    }
    keyset s = all_keys();
    CHECK_EQ(s.n, 2 * n);
    keyset_free(&s);
    for (size_t i = 0; i < n; i++) {
        int held = 0;
        CHECK_OK(watchlock_client_inspect(c, names[i].bytes, names[i].len, &held, NULL, NULL));
        CHECK_MSG(held == 1, "name %zu not seen as held", i);
    }
    /* Releasing "a\0b" leaves "a" and "a\0c" held. */
    CHECK_OK(watchlock_lock_release(locks[7]));
    int held = 1;
    CHECK_OK(watchlock_client_inspect(c, "a\0b", 3, &held, NULL, NULL));
    CHECK_EQ(held, 0);
    CHECK_OK(watchlock_client_inspect(c, "a", 1, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    CHECK_OK(watchlock_client_inspect(c, "a\0c", 3, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    for (size_t i = 0; i < n; i++) {
        if (i != 7)
            CHECK_OK(watchlock_lock_release(locks[i]));
        watchlock_lock_free(locks[i]);
    }
    free(locks);
    watchlock_client_close(c);
}

static void test_long_names(void)
{
    watchlock_client *c = open_client(test_url(""));
    size_t max = WATCHLOCK_MAX_NAME;
    char *name = malloc(max + 2);
    for (size_t i = 0; i < max + 1; i++)
        name[i] = "ab{}\0%:"[i % 7];
    watchlock_lock *a = NULL, *b = NULL, *d = NULL;
    CHECK_OK(watchlock_lock_new(&a, c, name, max));
    CHECK_OK(watchlock_lock_new(&b, c, name, max));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_STATUS(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    int held = 0;
    CHECK_OK(watchlock_client_inspect(c, name, max, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    /* A name differing in its last byte is another lock. */
    name[max - 1] = 'Z';
    CHECK_OK(watchlock_lock_new(&d, c, name, max));
    CHECK_OK(watchlock_lock_acquire(d, 0));
    CHECK_OK(watchlock_lock_release(d));
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_OK(watchlock_lock_release(b));
    watchlock_lock *e = (watchlock_lock *)1;
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(&e, c, name, max + 1), WATCHLOCK_EINVAL);
    CHECK(e == NULL);
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect(c, name, max + 1, &held, NULL, NULL), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_force_release(c, name, max + 1, NULL), WATCHLOCK_EINVAL);
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_lock_free(d);
    free(name);
    watchlock_client_close(c);
}

static void test_invalid_arguments(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = (watchlock_lock *)1;
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(&l, c, "", 0), WATCHLOCK_EINVAL);
    CHECK(l == NULL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(&l, c, "x", 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(&l, c, NULL, 3), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(NULL, c, "x", 1), WATCHLOCK_EINVAL);
    int held;
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect(c, NULL, 1, &held, NULL, NULL), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect(c, "x", 0, &held, NULL, NULL), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_force_release(c, NULL, 1, NULL), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_force_release(c, "x", 0, NULL), WATCHLOCK_EINVAL);
    CHECK_EQ(watchlock_client_stat(c, 999), -1);
    CHECK_EQ(watchlock_client_stat(c, -1), -1);

    l = new_lock(c, "args");
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_lease(l, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_lease(l, -1), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_lease(l, WATCHLOCK_MAX_LEASE_MS + 1), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_lease(l, INT64_MAX), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_lease(l, INT64_MIN), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_lease(l, WATCHLOCK_MAX_LEASE_MS));
    CHECK_OK(watchlock_lock_set_lease(l, 1));
    CHECK_OK(watchlock_lock_set_lease(l, 3000));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_interval(l, -1), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_interval(l, 3000), WATCHLOCK_EINVAL); /* 1..lease-1 */
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_interval(l, 3001), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_interval(l, INT64_MAX), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_renew_interval(l, 2999));
    CHECK_OK(watchlock_lock_set_renew_interval(l, 1));
    CHECK_OK(watchlock_lock_set_renew_interval(l, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_max_renewals(l, -1), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_max_renewals(l, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_max_hold(l, -1), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_max_hold(l, 0));
    CHECK_OK(watchlock_lock_set_on_lost(l, NULL, NULL));
    /* The lock still works with the options it kept. */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    long long t = rh_int(test_server(), "PTTL watchlock:{args}");
    CHECK_INT(t, >, 2000);
    CHECK_INT(t, <=, 3000);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_wrong_type_key(void)
{
    watchlock_client *c = open_client(test_url(""));
    CHECK_EQ(rh_int(test_server(), "HSET watchlock:{hashed} field value"), 1);
    watchlock_lock *l = new_lock(c, "hashed");
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), WATCHLOCK_ESERVER);
    testing_note("key holding a hash: %s", watchlock_last_error());
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 2000), WATCHLOCK_ESERVER); /* an error, not a wait */
    CHECK_INT(now_ms() - t0, <, 1500);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_hold_count(l), 0);
    /* The hash is untouched. */
    redisReply *r = rh_command(test_server(), "HGET watchlock:{hashed} field");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "value") == 0);
    freeReplyObject(r);
    /* A list too. */
    CHECK_EQ(rh_int(test_server(), "RPUSH watchlock:{listed} a"), 1);
    watchlock_lock *m = new_lock(c, "listed");
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(m, -1), WATCHLOCK_ESERVER);
    /* The client is still fine afterwards. */
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{hashed}"), 1);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_lock_free(m);
    watchlock_client_close(c);
}

/* The acquire script writes the lock key before it bumps the fence counter
 * (so a name held by someone else never touches the counter). A counter
 * that cannot be incremented (another type, not a number) must fail the
 * acquire and take the lock key back: nothing is left held. */
static void test_broken_fence_counter(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "badfence");
    CHECK(rh_ok(test_server(), "SET watchlock:{badfence}:fence notanumber"));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), WATCHLOCK_ESERVER);
    testing_note("fence counter not a number: %s", watchlock_last_error());
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{badfence}"), 0);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{badfence}:fence"), 1);
    CHECK_EQ(rh_int(test_server(), "RPUSH watchlock:{badfence}:fence x"), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), WATCHLOCK_ESERVER);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{badfence}"), 0);
    /* Repaired, it works again, and the new counter has a TTL. */
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{badfence}:fence"), 1);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_INT(pttl("watchlock:{badfence}:fence"), >, 0);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static long long fence_value(const char *key)
{
    redisReply *r = rh_command(test_server(), "GET %s", key);
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
    long long v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

/* The common acquire is one transaction in one round trip (SET NX PX and
 * the fence script: lock.c acquire_fast), not the acquire script; its
 * token is drawn even when the name is held by someone else, so contended
 * attempts spend numbers. Tokens must still strictly increase, the counter
 * must always have a TTL, and a counter made anew after it was gone must
 * start at the server's clock (issue 29.3: every token is max(counter + 1,
 * TIME in us)), never below earlier tokens. */
static void test_contended_attempts_and_fence(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "fencequiet");
    watchlock_lock *b = new_lock(c, "fencequiet");
    /* A name's first acquire on this client: the script alone, one INCR
     * (no fast attempt that would find a new counter first). */
    long long scripts = script_calls();
    long long incrs = rh_info(test_server(), "commandstats", "cmdstat_incr");
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_EQ(script_calls(), scripts + 1);
    CHECK_EQ(rh_info(test_server(), "commandstats", "cmdstat_incr"), incrs + 1);
    CHECK_OK(watchlock_lock_release(a));
    scripts = script_calls();
    long long execs = rh_info(test_server(), "commandstats", "cmdstat_exec");
    CHECK_OK(watchlock_lock_acquire(a, 0)); /* a seeded counter: the transaction, its fence script only */
    CHECK_EQ(script_calls(), scripts + 1);
    CHECK_EQ(rh_info(test_server(), "commandstats", "cmdstat_exec"), execs + 1);
    int64_t f = watchlock_lock_fencing_token(a);
    CHECK_INT(f, >=, 1000000000000000LL);
    for (int i = 0; i < 5; i++) {
        watchlock_lock *once = new_lock(c, "fencequiet");
        CHECK_EQ(watchlock_lock_acquire(once, 0), WATCHLOCK_ETIMEDOUT);
        watchlock_lock_free(once);
        CHECK_EQ(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    }
    CHECK_INT(fence_value("watchlock:{fencequiet}:fence"), >=, f);
    CHECK_INT(pttl("watchlock:{fencequiet}:fence"), >, 0);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_INT(watchlock_lock_fencing_token(b), >, f);
    int64_t last = watchlock_lock_fencing_token(b);
    /* The counter goes away while b holds; contended attempts make it anew
     * at the server's clock (with its TTL) and count it up. */
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{fencequiet}:fence"), 1);
    for (int i = 0; i < 3; i++) {
        watchlock_lock *once = new_lock(c, "fencequiet");
        CHECK_EQ(watchlock_lock_acquire(once, 0), WATCHLOCK_ETIMEDOUT);
        watchlock_lock_free(once);
    }
    CHECK_INT(fence_value("watchlock:{fencequiet}:fence"), >, last);
    CHECK_INT(pttl("watchlock:{fencequiet}:fence"), >, 0);
    CHECK_OK(watchlock_lock_release(b));
    watchlock_lock *d = new_lock(c, "fencequiet");
    CHECK_OK(watchlock_lock_acquire(d, 0));
    CHECK_MSG(watchlock_lock_fencing_token(d) > last, "token %lld after a re-made counter, last %lld",
              (long long)watchlock_lock_fencing_token(d), (long long)last);
    CHECK_INT(pttl("watchlock:{fencequiet}:fence"), >, 0);
    CHECK_OK(watchlock_lock_release(d));
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_lock_free(d);
    watchlock_client_close(c);
}

static void test_double_release(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "double");
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    /* A second release must not delete a later owner's key. */
    watchlock_lock *o = new_lock(c, "double");
    CHECK_OK(watchlock_lock_acquire(o, 0));
    CHECK_STATUS(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{double}"), 1);
    CHECK_EQ(watchlock_lock_state(o), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(o));
    watchlock_lock_free(o);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_state_and_remaining(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "state");
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_lost_reason(l), WATCHLOCK_LOST_NONE);
    CHECK_EQ(watchlock_lock_remaining_ms(l), 0);
    CHECK_EQ(watchlock_lock_fencing_token(l), 0);
    CHECK_EQ(watchlock_lock_hold_count(l), 0);
    CHECK_EQ(watchlock_lock_renewals(l), 0);
    CHECK_OK(watchlock_lock_set_lease(l, 5000));
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    int64_t rem = watchlock_lock_remaining_ms(l);
    CHECK_INT(rem, >, 5000 - (now_ms() - t0) - 200);
    CHECK_INT(rem, <=, 5000);
    /* Conservative: what the server has left is at least what we think. */
    long long server_ttl = rh_int(test_server(), "PTTL watchlock:{state}");
    CHECK_INT(watchlock_lock_remaining_ms(l), <=, server_ttl);
    sleep_ms(200);
    CHECK_INT(watchlock_lock_remaining_ms(l), <, rem); /* counts down */
    CHECK_EQ(watchlock_lock_hold_count(l), 1);
    CHECK_INT(watchlock_lock_fencing_token(l), >, 0);
    int64_t fence = watchlock_lock_fencing_token(l);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_remaining_ms(l), 0);
    CHECK_EQ(watchlock_lock_hold_count(l), 0);
    CHECK_EQ(watchlock_lock_fencing_token(l), fence);
    /* Ids are unique per handle. */
    watchlock_lock *m = new_lock(c, "state");
    CHECK(watchlock_lock_id(l) != watchlock_lock_id(m));
    CHECK(watchlock_lock_id(l) != 0);
    watchlock_lock_free(m);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* The proxy's pending bytes client->server on connection `id` (-1 when
 * that connection is not listed). */
static long proxy_pending_up(ph_proxy *p, int id)
{
    char reply[4096];
    if (ph_cmd_reply(p, reply, sizeof reply, "list") != 0)
        return -1;
    char want[32];
    int n = snprintf(want, sizeof want, " %d:", id);
    const char *at = strstr(reply, want); /* "OK 0:12:0:normal 1:..." */
    return at == NULL ? -1 : strtol(at + n, NULL, 10);
}

typedef struct fast_attempt {
    watchlock_lock *lock;
    int rc;
    int64_t fence;
} fast_attempt;

static void *fast_attempt_main(void *arg)
{
    fast_attempt *f = arg;
    f->rc = watchlock_lock_acquire(f->lock, 0);
    f->fence = watchlock_lock_fencing_token(f->lock);
    return NULL;
}

/* Issue 19 item 4: the fast acquire (SET NX PX, SET fence NX PX, INCR in
 * one round trip) split on the wire before its INCR (the proxy holds the
 * INCR and what follows): A's SET is on the server, an admin force-release
 * deletes the key, B acquires (and INCRs), and only then A's INCR runs.
 * Before: A was told "acquired" with a token above B's although B holds
 * the lock, so a fenced store would reject the real holder. Now the three
 * commands run in MULTI/EXEC: nothing comes between them, and A's attempt
 * runs after B's acquire as a whole and finds the name held. */
static void test_fast_acquire_token_order(void)
{
    ph_proxy *px = ph_start(rh_port(test_server()));
    CHECK(px != NULL);
    watchlock_client *ca = open_client(ph_url(px));
    watchlock_client *cb = open_client(test_url(""));
    watchlock_lock *a = new_lock(ca, "fast-order");
    watchlock_lock *b = new_lock(cb, "fast-order");
    /* A's first acquire seeds the counter (the script); its next one takes
     * the fast path on the same pooled connection. */
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_release(a));
    CHECK_EQ(ph_stat(px, "conns"), 1);
    CHECK_EQ(ph_cmd(px, "conn 0 hold-up-at EVAL"), 0); /* the fence script (issue 29.3; an INCR before) */
    fast_attempt fa = {.lock = a};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fast_attempt_main, &fa), 0);
    WAIT_FOR(proxy_pending_up(px, 0) > 0, 10000); /* the INCR is held, what came before it ran */
    CHECK_INT(proxy_pending_up(px, 0), >, 0);
    int released;
    CHECK_OK(watchlock_client_force_release(cb, "fast-order", strlen("fast-order"), &released));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    int64_t fence_b = watchlock_lock_fencing_token(b);
    CHECK_EQ(ph_cmd(px, "conn 0 resume"), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    testing_note("A: status %d token %lld; B: token %lld", fa.rc, (long long)fa.fence, (long long)fence_b);
    CHECK_MSG(!(fa.rc == WATCHLOCK_OK && fa.fence > fence_b),
              "A was told acquired with token %lld above the holder B's %lld", (long long)fa.fence,
              (long long)fence_b);
    CHECK_EQ(fa.rc, WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(watchlock_lock_state(a), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_state(b), WATCHLOCK_HELD);
    /* B's hold is intact: it releases its own key. */
    CHECK_OK(watchlock_lock_release(b));
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{fast-order}"), 0);
    /* And A's fast path still works when nothing interferes. */
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_INT(watchlock_lock_fencing_token(a), >, fence_b);
    CHECK_OK(watchlock_lock_release(a));
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(ca);
    watchlock_client_close(cb);
    ph_free(px);
}

/* The fast acquire's MULTI refused by the user's ACL (no @transaction):
 * acquires still work, tokens still increase, and after the first refusal
 * the client sends acquires straight to the script. */
static void test_fast_acquire_without_transactions(void)
{
    CHECK(rh_ok(test_server(), "ACL SETUSER notx reset on >pw ~* &* +@all -@transaction"));
    char url[300];
    snprintf(url, sizeof url, "redis://notx:pw@127.0.0.1:%d", rh_port(test_server()));
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "no-multi");
    int64_t last = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(watchlock_lock_acquire(l, 0));
        CHECK_INT(watchlock_lock_fencing_token(l), >, last);
        last = watchlock_lock_fencing_token(l);
        CHECK_OK(watchlock_lock_release(l));
    }
    long long incrs = rh_info(test_server(), "commandstats", "cmdstat_incr");
    long long scripts = script_calls();
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(script_calls(), scripts + 1);
    /* the script's INCR only: no fast attempt (whose INCR would run on its own) */
    CHECK_EQ(rh_info(test_server(), "commandstats", "cmdstat_incr"), incrs + 1);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    CHECK(rh_int(test_server(), "ACL DELUSER notx") == 1);
}

/* ---- dropped handles (issue 19.12): watchlock_lock_abandon ---- */

static atomic_int abandon_callbacks;

static void count_callback(watchlock_lock *l, int reason, void *userdata)
{
    (void)l;
    (void)reason;
    (void)userdata;
    atomic_fetch_add(&abandon_callbacks, 1);
}

/* The key's value (the hold identity) into out; "" when there is no key. */
static void key_value(const char *key, char *out, size_t size)
{
    redisReply *r = rh_command(test_server(), "GET %s", key);
    CHECK(r != NULL);
    snprintf(out, size, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

/* A dropped handle is not an unlock: abandoning a held lock leaves its key
 * with the same owner until Redis expires it at its lease, never renewed
 * (a 1 s lease renewed every 333 ms while owned: its PTTL only goes down),
 * no callback or lost event fires, and then another client gets the lock
 * and the client no longer counts the hold. */
static void test_abandon_leaves_hold_to_lease(void)
{
    const char *key = "watchlock:{abandon}";
    const int64_t lease = 1000;
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *c2 = open_client(test_url(""));
    CHECK_OK(watchlock_client_enable_lost_events(c, 1));
    watchlock_lock *l = new_lock(c, "abandon");
    CHECK_OK(watchlock_lock_set_lease(l, lease)); /* renewed every lease/3 while owned */
    CHECK_OK(watchlock_lock_set_on_lost(l, count_callback, NULL));
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_acquire(l, 0)); /* reentrant: all holds are given up at once */
    char owner[128], now[128];
    key_value(key, owner, sizeof owner);
    CHECK(owner[0] != '\0');
    CHECK_EQ(watchlock_lock_abandon(l), 1);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 1); /* still held */
    watchlock_lock *other = new_lock(c2, "abandon");
    CHECK_STATUS(watchlock_lock_acquire(other, 0), WATCHLOCK_ETIMEDOUT);

    /* Poll until the key is gone, for at least the lease (and a margin). */
    long long last = lease, polls = 0;
    int64_t gone_at = -1, end = t0 + lease + 3000;
    while (now_ms() < end) {
        long long ttl = pttl(key);
        if (ttl == -2) {
            gone_at = now_ms();
            break;
        }
        CHECK_INT(ttl, >=, 0); /* 0: expires within the millisecond */
        CHECK_INT(ttl, <=, last); /* never renewed: the lease only runs down */
        last = ttl;
        key_value(key, now, sizeof now);
        CHECK_MSG(now[0] == '\0' || strcmp(now, owner) == 0, "owner changed from %s to %s", owner, now);
        polls++;
        sleep_ms(20);
    }
    testing_note("abandoned key gone %lld ms after acquire (lease %lld ms, %lld polls, last PTTL %lld)",
                 (long long)(gone_at - t0), (long long)lease, polls, last);
    CHECK_MSG(gone_at >= 0, "the abandoned key was still there %lld ms after its acquire",
              (long long)(now_ms() - t0));
    CHECK_INT(gone_at - t0, >=, lease - 50); /* kept for its whole lease... */
    CHECK_INT(gone_at - t0, <, lease + 2500); /* ...and not renewed past it */

    CHECK_OK(watchlock_lock_acquire(other, 0)); /* free for everyone once expired */
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS) == 0, 5000);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    CHECK_EQ(atomic_load(&abandon_callbacks), 0);
    uint64_t id;
    int reason;
    CHECK_STATUS(watchlock_client_next_lost_event(c, 0, &id, &reason), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(other));
    watchlock_lock_free(other);
    watchlock_client_close(c);
    watchlock_client_close(c2);
}

/* Closing the client releases an abandoned hold as it releases held ones
 * (and frees the handle: valgrind sees no leak). */
static void test_abandon_then_close_releases(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "abandon-close");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_abandon(l), 1);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{abandon-close}"), 1);
    CHECK_INT(pttl("watchlock:{abandon-close}"), >, 20000);
    watchlock_client_close(c);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{abandon-close}"), 0);
}

/* A handle that holds nothing is freed at once, without I/O, and reports 0. */
static void test_abandon_unheld(void)
{
    CHECK_EQ(watchlock_lock_abandon(NULL), 0);
    watchlock_client *c = open_client(test_url(""));
    CHECK_EQ(watchlock_lock_abandon(new_lock(c, "abandon-unheld")), 0); /* never acquired */
    watchlock_lock *l = new_lock(c, "abandon-unheld");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(watchlock_lock_abandon(l), 0); /* released */
    /* LOST (its lease ran out without renewal): not released by abandon. */
    l = new_lock(c, "abandon-lost");
    CHECK_OK(watchlock_lock_set_lease(l, 300));
    CHECK_OK(watchlock_lock_set_auto_renew(l, 0));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    WAIT_FOR(watchlock_lock_state(l) == WATCHLOCK_LOST, 5000);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    long long dels = rh_info(test_server(), "commandstats", "cmdstat_del");
    CHECK_EQ(watchlock_lock_abandon(l), 0);
    CHECK_EQ(rh_info(test_server(), "commandstats", "cmdstat_del"), dels);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    /* Held on a client closed meanwhile: close released it already. */
    l = new_lock(c, "abandon-closed");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    watchlock_client_close(c);
    CHECK_EQ(watchlock_lock_abandon(l), 0);
}

/* Abandoning holds while the watchdog renews them (renewals on the wire at
 * that moment): every key still ends by its lease counted from the abandon
 * (a renewal already sent may land once, none is sent after), and the
 * client lets go of all of them. Run under ASan/TSan for the races. */
static void test_abandon_while_renewing(void)
{
    enum { N = 40 };
    const int64_t lease = 2000;
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *locks[N];
    char keys[N][48];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "abandon-busy-%d", i);
        snprintf(keys[i], sizeof keys[i], "watchlock:{%s}", name);
        locks[i] = new_lock(c, name);
        CHECK_OK(watchlock_lock_set_lease(locks[i], lease));
        CHECK_OK(watchlock_lock_set_renew_interval(locks[i], 10));
        CHECK_OK(watchlock_lock_acquire(locks[i], 0));
    }
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS) >= 4 * N, 20000);
    CHECK_INT(watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS), >=, 4 * N);
    int64_t abandoned_at = now_ms();
    for (int i = 0; i < N; i++)
        CHECK_EQ(watchlock_lock_abandon(locks[i]), 1);
    for (int i = 0; i < N; i++)
        CHECK_INT(pttl(keys[i]), >, 0); /* kept, not released */
    int left = N;
    int64_t end = abandoned_at + lease + 3000;
    while (left > 0 && now_ms() < end) {
        left = 0;
        for (int i = 0; i < N; i++) {
            long long ttl = pttl(keys[i]);
            CHECK_INT(ttl, <=, lease);
            left += ttl != -2;
        }
        if (left > 0)
            sleep_ms(20);
    }
    testing_note("%d locks abandoned while renewed every 10 ms: all gone %lld ms later (lease %lld ms)", N,
                 (long long)(now_ms() - abandoned_at), (long long)lease);
    CHECK_EQ(left, 0);
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS) == 0, 5000);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    watchlock_client_close(c);
}

static long long subscribers_n(const char *channel, size_t len)
{
    redisReply *r = rh_command(test_server(), "PUBSUB NUMSUB %b", channel, len);
    long long n = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    freeReplyObject(r);
    return n;
}

static long long subscribers(const char *channel)
{
    redisReply *r = rh_command(test_server(), "PUBSUB NUMSUB %s", channel);
    long long n = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    freeReplyObject(r);
    return n;
}

/* issue 25.2: a wait kept by a timed-out acquire holds its subscription until
 * the holder's lease ends; watchlock_lock_forget_wait gives it up at once,
 * and the next acquire starts with a fresh attempt. */
static void test_forget_wait_drops_kept_subscription(void)
{
    static const char channel[] = "watchlock:{forget-wait}:released";
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *c2 = open_client(test_url(""));
    watchlock_lock *holder = new_lock(c, "forget-wait");
    watchlock_lock *waiter = new_lock(c2, "forget-wait");
    CHECK_OK(watchlock_lock_set_lease(holder, 60000));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    CHECK_OK(watchlock_lock_forget_wait(waiter)); /* nothing kept: OK, no-op */
    CHECK_STATUS(watchlock_lock_acquire(waiter, 50), WATCHLOCK_ETIMEDOUT);
    /* kept for the next acquire (under valgrind the 50 ms wait can end
     * before the subscriber thread's SUBSCRIBE reached the server) */
    WAIT_FOR(subscribers(channel) == 1, 10000);
    CHECK_EQ(subscribers(channel), 1);
    long long calls = script_calls();
    CHECK_OK(watchlock_lock_forget_wait(waiter));
    /* The subscriber unsubscribes a channel nobody uses after its linger (2 s). */
    WAIT_FOR(subscribers(channel) == 0, 10000);
    CHECK_EQ(subscribers(channel), 0);
    CHECK_EQ(watchlock_lock_state(holder), WATCHLOCK_HELD);
    /* Nothing to resume: the next acquire asks the server again. */
    CHECK_STATUS(watchlock_lock_acquire(waiter, 50), WATCHLOCK_ETIMEDOUT);
    CHECK_INT(script_calls(), >, calls);
    CHECK_OK(watchlock_lock_forget_wait(waiter));
    CHECK_STATUS(watchlock_lock_forget_wait(NULL), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_release(holder));
    watchlock_lock_free(holder);
    watchlock_lock_free(waiter);
    watchlock_client_close(c);
    watchlock_client_close(c2);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"try_once", test_try_once, 0},
        {"bounded_wait_times_out", test_bounded_wait_times_out, 0},
        {"wait_forever_woken_by_release", test_wait_forever_woken_by_release, 0},
        {"bounded_wait_woken_by_release", test_bounded_wait_woken_by_release, 0},
        {"binary_name_waiter_woken", test_binary_name_waiter_woken, 0},
        {"wait_bounded_by_crashed_holder", test_wait_bounded_by_crashed_holder, 0},
        {"reentrant_no_round_trip", test_reentrant_no_round_trip, 0},
        {"release_from_other_thread", test_release_from_other_thread, 0},
        {"extend_sets_lease", test_extend_sets_lease, 0},
        {"extend_does_not_touch_other_owner", test_extend_does_not_touch_other_owner, 0},
        {"fencing_tokens", test_fencing_tokens, 0},
        {"binary_names_distinct_keys", test_binary_names_distinct_keys, 0},
        {"long_names", test_long_names, 0},
        {"invalid_arguments", test_invalid_arguments, 0},
        {"wrong_type_key", test_wrong_type_key, 0},
        {"broken_fence_counter", test_broken_fence_counter, 0},
        {"contended_attempts_and_fence", test_contended_attempts_and_fence, 0},
        {"double_release", test_double_release, 0},
        {"state_and_remaining", test_state_and_remaining, 0},
        {"fast_acquire_token_order", test_fast_acquire_token_order, 0},
        {"fast_acquire_without_transactions", test_fast_acquire_without_transactions, 0},
        {"abandon_leaves_hold_to_lease", test_abandon_leaves_hold_to_lease, 0},
        {"abandon_then_close_releases", test_abandon_then_close_releases, 0},
        {"abandon_unheld", test_abandon_unheld, 0},
        {"abandon_while_renewing", test_abandon_while_renewing, 0},
        {"forget_wait_drops_kept_subscription", test_forget_wait_drops_kept_subscription, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
