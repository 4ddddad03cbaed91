/*
 * test_resubscribe.c - a waiter's wake-up across a re-subscribe (issue
 * 29.16), against real redis-servers and a Sentinel group.
 *
 * follows_master: the client's sentinel watcher is held back through the
 * delay proxy (paused: it never hears +switch-master), the master is frozen
 * (SIGSTOP) and the sentinels fail over; the client learns of the new
 * master through its own commands (a failed connection, then the
 * sentinels it can still reach). Its subscription must move there too:
 * before the fix it stayed on the frozen master, so a release published
 * on the new one was never heard and a plain waiter slept until the
 * holder's lease ran out. Deterministic: the check is that the waiter's
 * channel gets its subscriber on the new master (PUBSUB NUMSUB), then
 * that the waiter gets the lock woken by the release (long before the
 * holder's lease would have ended).
 *
 * held_back_subscribe: on one server through the proxy, the subscriber's
 * connection is reset and its new SUBSCRIBE held back (delay up) while the
 * holder releases: the release is published while the channel has no
 * subscription. Once the SUBSCRIBE lands, the waiter (plain, fair) must
 * re-check at once and get the lock, not sleep for the holder's lease.
 * held_back_subscribe_quorum: the same for a quorum waiter (three members,
 * each subscriber's connection killed, CLIENT KILL TYPE pubsub, and its
 * re-SUBSCRIBE held back), woken through its notify hook.
 */
#include "proxy_harness.h"
#include "testing.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define HOLDER_LEASE 60000

typedef struct waiter {
    watchlock_lock *lock;
    int64_t wait_ms;
    atomic_int started;
    int rc;
    int64_t done_ms;
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->rc = watchlock_lock_acquire(w->lock, w->wait_ms);
    w->done_ms = now_ms();
    return NULL;
}

static long long numsub(rh_server *s, const char *channel)
{
    redisReply *r = rh_command(s, "PUBSUB NUMSUB %s", channel);
    long long n = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/* Subscribers of the channels matching a pattern (PUBSUB CHANNELS, then NUMSUB). */
static long long numsub_pattern(rh_server *s, const char *pattern)
{
    redisReply *r = rh_command(s, "PUBSUB CHANNELS %s", pattern);
    long long n = 0;
    for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        n += numsub(s, r->element[i]->str);
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

static int is_master(rh_server *s)
{
    redisReply *r = rh_command(s, "ROLE");
    int yes = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (r != NULL)
        freeReplyObject(r);
    return yes;
}

static int release_retrying(watchlock_lock *l)
{
    int rc = watchlock_lock_release(l);
    for (int64_t end = now_ms() + 30000; rc == WATCHLOCK_ECONN && now_ms() < end; sleep_ms(100))
        rc = watchlock_lock_release(l);
    return rc;
}

/* ---- Sentinel: the subscription follows the master the client found ---- */

static void follows_master(void)
{
    rh_sentinel_group *g = rh_sentinel_start(0);
    CHECK_MSG(g != NULL, "could not start a sentinel group");
    rh_server *master = rh_sentinel_master(g), *replica = rh_sentinel_replica(g);
    /* "redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/NAME": S1 behind the proxy for b */
    const char *url = rh_sentinel_url(g);
    const char *first = url + strlen("redis-sentinel://127.0.0.1:");
    int s1 = atoi(first);
    const char *rest = strchr(first, ',');
    CHECK(rest != NULL);
    ph_proxy *px = ph_start(s1);
    CHECK(px != NULL);
    char burl[2300];
    snprintf(burl, sizeof burl, "redis-sentinel://127.0.0.1:%d%s?connect_timeout=500ms&command_timeout=500ms",
             ph_port(px), rest);
    watchlock_client *a = open_client(url), *b = open_client(burl);

    watchlock_lock *holder = new_lock(a, "follow");
    CHECK_OK(watchlock_lock_set_lease(holder, HOLDER_LEASE));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter w = {.lock = new_lock(b, "follow"), .wait_ms = 2 * HOLDER_LEASE, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_main, &w) == 0);
    const char *channel = "watchlock:{follow}:released";
    WAIT_FOR(numsub(master, channel) == 1, 10000);
    CHECK_EQ(numsub(master, channel), 1);
    WAIT_FOR(rh_int(replica, "EXISTS watchlock:{follow}") == 1, 10000);

    /* b's sentinel watcher hears nothing from now on; the master freezes */
    CHECK_EQ(ph_cmd(px, "pause"), 0);
    CHECK_EQ(ph_cmd(px, "refuse on"), 0);
    long long pid = rh_info(master, "server", "process_id");
    CHECK(pid > 0);
    CHECK_EQ(kill((pid_t)pid, SIGSTOP), 0);
    WAIT_FOR(is_master(replica), 60000);
    CHECK_MSG(is_master(replica), "the sentinels did not promote the replica");

    /* b finds the new master through a command of its own */
    watchlock_lock *probe = new_lock(b, "follow-probe");
    int rc = -1;
    for (int64_t end = now_ms() + 60000; rc != WATCHLOCK_OK && now_ms() < end;)
        rc = watchlock_lock_acquire(probe, 0);
    CHECK_OK(rc);
    CHECK_OK(release_retrying(probe));
    watchlock_lock_free(probe);

    /* the waiter's subscription must follow it there */
    WAIT_FOR(numsub(replica, channel) == 1, 30000);
    CHECK_MSG(numsub(replica, channel) == 1,
              "the waiter's channel has no subscriber on the new master 30 s after the client found it");

    int64_t t0 = now_ms();
    CHECK_OK(release_retrying(holder));
    pthread_join(th, NULL);
    CHECK_OK(w.rc);
    testing_note("the waiter got the lock %lld ms after the release (the holder's lease: %d ms)",
                 (long long)(w.done_ms - t0), HOLDER_LEASE);
    CHECK_INT(w.done_ms - t0, <, HOLDER_LEASE / 2); /* woken by the release, not by the lease's end */
    CHECK_OK(release_retrying(w.lock));

    kill((pid_t)pid, SIGCONT);
    watchlock_lock_free(w.lock);
    watchlock_lock_free(holder);
    watchlock_client_close(b);
    watchlock_client_close(a);
    ph_free(px);
    rh_sentinel_free(g);
}

/* ---- one server: the SUBSCRIBE held back past the release ---- */

static void held_back_kind(rh_server *s, ph_proxy *px, watchlock_client *direct, watchlock_client *proxied, int fair,
                           const char *name, const char *pattern)
{
    watchlock_lock *holder = NULL, *wl = NULL;
    if (fair) {
        CHECK_OK(watchlock_fair_lock_new(&holder, direct, name, strlen(name)));
        CHECK_OK(watchlock_fair_lock_new(&wl, proxied, name, strlen(name)));
    } else {
        holder = new_lock(direct, name);
        wl = new_lock(proxied, name);
    }
    CHECK_OK(watchlock_lock_set_lease(holder, HOLDER_LEASE));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter w = {.lock = wl, .wait_ms = 2 * HOLDER_LEASE, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_main, &w) == 0);
    WAIT_FOR(numsub_pattern(s, pattern) == 1, 10000); /* the waiter is subscribed */
    CHECK_EQ(numsub_pattern(s, pattern), 1);
    /* every connection through the proxy is reset; the new ones' requests are held back */
    CHECK_EQ(ph_cmd(px, "delay up 1500"), 0);
    CHECK_EQ(ph_cmd(px, "reset"), 0);
    WAIT_FOR(numsub_pattern(s, pattern) == 0, 10000);
    CHECK_EQ(numsub_pattern(s, pattern), 0);
    /* released while the channel has no subscription: the message is lost */
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_release(holder));
    CHECK_EQ(ph_cmd(px, "clear"), 0);
    pthread_join(th, NULL);
    CHECK_OK(w.rc);
    testing_note("%s waiter: got the lock %lld ms after the release (the holder's lease: %d ms)",
                 fair ? "fair" : "plain", (long long)(w.done_ms - t0), HOLDER_LEASE);
    CHECK_INT(w.done_ms - t0, <, HOLDER_LEASE / 2);
    CHECK_OK(watchlock_lock_release(wl));
    watchlock_lock_free(wl);
    watchlock_lock_free(holder);
}

static void held_back_subscribe(void)
{
    rh_server *s = rh_start(NULL);
    CHECK(s != NULL);
    ph_proxy *px = ph_start(rh_port(s));
    CHECK(px != NULL);
    watchlock_client *direct = open_client(rh_url(s));
    watchlock_client *proxied = open_client(ph_url(px));
    held_back_kind(s, px, direct, proxied, 0, "held-plain", "watchlock:{held-plain}:released");
    held_back_kind(s, px, direct, proxied, 1, "held-fair", "watchlock:{held-fair}:q:c:*");
    watchlock_client_close(proxied);
    watchlock_client_close(direct);
    ph_free(px);
    rh_free(s);
}

/* The same for a quorum waiter: three members, each behind a proxy for
 * the waiting client; every member's re-SUBSCRIBE is held back past the
 * release (published on every member, heard on none). The waiter's notify
 * hook must make it re-check once a subscription lands. */
static void held_back_subscribe_quorum(void)
{
    rh_server *s[3];
    ph_proxy *px[3];
    char direct[3][300], proxied[3][300];
    const char *du[3], *pu[3];
    for (int i = 0; i < 3; i++) {
        s[i] = rh_start(NULL);
        CHECK(s[i] != NULL);
        px[i] = ph_start(rh_port(s[i]));
        CHECK(px[i] != NULL);
        snprintf(direct[i], sizeof direct[i], "%s?connect_timeout=1s&command_timeout=1s", rh_url(s[i]));
        snprintf(proxied[i], sizeof proxied[i], "%s?connect_timeout=3s&command_timeout=3s", ph_url(px[i])); /* above the held-back 1.5 s */
        du[i] = direct[i], pu[i] = proxied[i];
    }
    watchlock_client *a = NULL, *b = NULL;
    CHECK_OK(watchlock_client_open_quorum(&a, du, 3));
    CHECK_OK(watchlock_client_open_quorum(&b, pu, 3));
    /* a 10 s lease: fresh servers keep out of majorities for the longest
     * lease recorded on them (the restart rule), waited out first */
    enum { Q_LEASE = 10000 };
    watchlock_lock *holder = new_lock(a, "held-quorum");
    CHECK_OK(watchlock_lock_set_lease(holder, Q_LEASE));
    CHECK_OK(watchlock_lock_acquire(holder, 4 * Q_LEASE));
    const char *channel = "watchlock:{held-quorum}:released";
    for (int i = 0; i < 3; i++) /* the holder's own wait's subscription lingers a while */
        WAIT_FOR(numsub(s[i], channel) == 0, 20000);
    waiter w = {.lock = new_lock(b, "held-quorum"), .wait_ms = 4 * Q_LEASE, .rc = -1};
    CHECK_OK(watchlock_lock_set_lease(w.lock, Q_LEASE));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_main, &w) == 0);
    for (int i = 0; i < 3; i++) {
        WAIT_FOR(numsub(s[i], channel) == 1, 4 * Q_LEASE); /* b's restart window first */
        CHECK_EQ(numsub(s[i], channel), 1);
    }
    for (int i = 0; i < 3; i++) { /* the subscribers' connections only (the proxy closes b's side) */
        CHECK_EQ(ph_cmd(px[i], "delay up 1500"), 0);
        CHECK_INT(rh_int(s[i], "CLIENT KILL TYPE pubsub"), >=, 1);
    }
    for (int i = 0; i < 3; i++) {
        WAIT_FOR(numsub(s[i], channel) == 0, 10000);
        CHECK_EQ(numsub(s[i], channel), 0);
    }
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_release(holder)); /* published on every member, heard on none */
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ph_cmd(px[i], "clear"), 0);
    pthread_join(th, NULL);
    CHECK_OK(w.rc);
    testing_note("quorum waiter: got the lock %lld ms after the release (the holder's lease: %d ms)",
                 (long long)(w.done_ms - t0), (int)Q_LEASE);
    CHECK_INT(w.done_ms - t0, <, Q_LEASE / 2);
    CHECK_OK(watchlock_lock_release(w.lock));
    watchlock_lock_free(w.lock);
    watchlock_lock_free(holder);
    watchlock_client_close(b);
    watchlock_client_close(a);
    for (int i = 0; i < 3; i++) {
        ph_free(px[i]);
        rh_free(s[i]);
    }
}

static const test_case tests[] = {
    {"held_back_subscribe_quorum", held_back_subscribe_quorum, 180},
    {"follows_master", follows_master, 180},
    {"held_back_subscribe", held_back_subscribe, 120},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
