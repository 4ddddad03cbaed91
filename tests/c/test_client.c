/*
 * test_client.c - the client against real redis-servers: URL forms (TCP,
 * unix socket, db, options, percent-escapes), AUTH with a password and with
 * an ACL user, wrong credentials, SELECT, reconnecting after a restart and
 * after CLIENT KILL, SCRIPT FLUSH, closing with held locks, inspect and
 * force_release, stats.
 */
#include "testing.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

/* EXISTS key in database db of srv. */
static long long exists_in_db(rh_server *srv, int db, const char *key)
{
    redisContext *ctx = rh_connect(srv);
    CHECK(ctx != NULL);
    redisReply *r = redisCommand(ctx, "SELECT %d", db);
    CHECK(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(ctx, "EXISTS %s", key);
    CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    redisFree(ctx);
    return v;
}

/* Opens url, takes and releases `name` once, closes. */
static void roundtrip(const char *url, const char *name)
{
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, name);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_url_tcp_forms(void)
{
    char url[512];
    int port = rh_port(test_server());
    roundtrip(test_url(""), "tcp-plain");
    roundtrip(test_url("/"), "tcp-slash");
    roundtrip(test_url("/0"), "tcp-db0");
    snprintf(url, sizeof url, "redis://localhost:%d", port);
    roundtrip(url, "tcp-localhost");
    snprintf(url, sizeof url, "redis://[127.0.0.1]:%d", port);
    roundtrip(url, "tcp-bracketed");
    roundtrip(test_url("?connect_timeout=500ms&command_timeout=1s&keepalive=0"), "tcp-options");
    roundtrip(test_url("/0?connect_timeout=1.5&command_timeout=2s&keepalive=1"), "tcp-options2");
    roundtrip(test_url("?"), "tcp-empty-query");
}

static void test_url_unix_socket(void)
{
    char url[600];
    snprintf(url, sizeof url, "unix://%s", rh_unixsocket(test_server()));
    roundtrip(url, "unix-plain");
    /* db as a query option on a unix socket */
    snprintf(url, sizeof url, "unix://%s?db=2&command_timeout=1s", rh_unixsocket(test_server()));
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "unix-db");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(exists_in_db(test_server(), 2, "watchlock:{unix-db}"), 1);
    CHECK_EQ(exists_in_db(test_server(), 0, "watchlock:{unix-db}"), 0);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(exists_in_db(test_server(), 2, "watchlock:{unix-db}"), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_select_db(void)
{
    watchlock_client *c5 = open_client(test_url("/5"));
    watchlock_client *c7 = open_client(test_url("?db=7"));
    watchlock_client *c0 = open_client(test_url(""));
    watchlock_lock *l5 = new_lock(c5, "dbtest");
    watchlock_lock *l7 = new_lock(c7, "dbtest");
    watchlock_lock *l0 = new_lock(c0, "dbtest");
    CHECK_OK(watchlock_lock_acquire(l5, 0));
    CHECK_EQ(exists_in_db(test_server(), 5, "watchlock:{dbtest}"), 1);
    CHECK_EQ(exists_in_db(test_server(), 5, "watchlock:{dbtest}:fence"), 1);
    CHECK_EQ(exists_in_db(test_server(), 0, "watchlock:{dbtest}"), 0);
    CHECK_EQ(exists_in_db(test_server(), 7, "watchlock:{dbtest}"), 0);
    /* Different databases are different lock spaces. */
    CHECK_OK(watchlock_lock_acquire(l7, 0));
    CHECK_EQ(exists_in_db(test_server(), 7, "watchlock:{dbtest}"), 1);
    CHECK_OK(watchlock_lock_acquire(l0, 0));
    CHECK_EQ(exists_in_db(test_server(), 0, "watchlock:{dbtest}"), 1);
    /* inspect looks in the client's database. */
    int held = 0;
    CHECK_OK(watchlock_client_inspect(c5, "dbtest", 6, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    CHECK_OK(watchlock_lock_release(l5));
    CHECK_OK(watchlock_client_inspect(c5, "dbtest", 6, &held, NULL, NULL));
    CHECK_EQ(held, 0);
    CHECK_OK(watchlock_client_inspect(c7, "dbtest", 6, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    CHECK_OK(watchlock_lock_release(l7));
    CHECK_OK(watchlock_lock_release(l0));
    watchlock_lock_free(l5);
    watchlock_lock_free(l7);
    watchlock_lock_free(l0);
    watchlock_client_close(c5);
    watchlock_client_close(c7);
    watchlock_client_close(c0);
    /* A database the server does not have. */
    watchlock_client *bad = (watchlock_client *)1;
    int rc = watchlock_client_open(&bad, test_url("/999"));
    CHECK_MSG(rc == WATCHLOCK_ESERVER, "db 999: status %d (%s): %s", rc, watchlock_strerror(rc),
              watchlock_last_error());
    CHECK(bad == NULL);
    CHECK(watchlock_last_error()[0] != '\0');
}

static void test_auth_password(void)
{
    rh_options opts = {.password = "p@ss:w/rd", .unixsocket = 1};
    rh_server *srv = rh_start(&opts);
    CHECK(srv != NULL);
    char url[700];
    int port = rh_port(srv);
    snprintf(url, sizeof url, "redis://:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d", port);
    roundtrip(url, "auth");
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?password=p%%40ss%%3Aw%%2Frd", port);
    roundtrip(url, "auth-query");
    snprintf(url, sizeof url, "unix://%s?password=p%%40ss%%3Aw%%2Frd&db=1", rh_unixsocket(srv));
    roundtrip(url, "auth-unix");
    /* The default user by name. */
    snprintf(url, sizeof url, "redis://default:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d/3", port);
    roundtrip(url, "auth-default-user");

    watchlock_client *c = (watchlock_client *)1;
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", port);
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&c, url), WATCHLOCK_EAUTH);
    CHECK(c == NULL);
    testing_note("wrong password: %s", watchlock_last_error());
    CHECK_MSG(strstr(watchlock_last_error(), "wrong") == NULL, "the message leaks the password: %s",
              watchlock_last_error());
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&c, url), WATCHLOCK_EAUTH);
    testing_note("no password: %s", watchlock_last_error());
    snprintf(url, sizeof url, "redis://nosuchuser:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d", port);
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&c, url), WATCHLOCK_EAUTH);
    rh_free(srv);
}

static void test_auth_acl_user(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER alice reset on >alicepw ~watchlock:* &* +@all"));
    /* A user that may not run scripts. */
    CHECK(rh_ok(srv, "ACL SETUSER bob reset on >bobpw ~* &* +@all -@scripting"));
    char url[300];
    int port = rh_port(srv);
    snprintf(url, sizeof url, "redis://alice:alicepw@127.0.0.1:%d", port);
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "acl");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{acl}"), 1);
    redisReply *r = rh_command(srv, "CLIENT LIST");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
    CHECK_MSG(strstr(r->str, "user=alice") != NULL, "no connection authenticated as alice:\n%s", r->str);
    freeReplyObject(r);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);

    watchlock_client *bad = (watchlock_client *)1;
    snprintf(url, sizeof url, "redis://alice:wrongpw@127.0.0.1:%d", port);
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&bad, url), WATCHLOCK_EAUTH);
    CHECK(bad == NULL);
    snprintf(url, sizeof url, "redis://carol:alicepw@127.0.0.1:%d", port);
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&bad, url), WATCHLOCK_EAUTH);
    /* bob connects but may not run the lock scripts: a clear error, no crash. */
    snprintf(url, sizeof url, "redis://bob:bobpw@127.0.0.1:%d", port);
    int rc = watchlock_client_open(&bad, url);
    if (rc == WATCHLOCK_OK) {
        watchlock_lock *b = new_lock(bad, "acl");
        rc = watchlock_lock_acquire(b, 0);
        /* NOPERM is a permission error, not a failed authentication. */
        CHECK_MSG(rc == WATCHLOCK_EPERM, "NOPERM gave %d (%s)", rc, watchlock_strerror(rc));
        CHECK(strstr(watchlock_last_error(), "NOPERM") != NULL);
        CHECK(watchlock_last_error()[0] != '\0');
        testing_note("user without scripting: %s", watchlock_last_error());
        watchlock_lock_free(b);
        watchlock_client_close(bad);
    } else {
        CHECK_MSG(rc == WATCHLOCK_EPERM, "NOPERM at open gave %d", rc);
    }
    CHECK_EQ(rh_int(srv, "ACL DELUSER alice bob"), 2);
}

typedef struct lost_log {
    atomic_int count;
    atomic_int reason;
} lost_log;

static void on_lost(watchlock_lock *l, int reason, void *data)
{
    (void)l;
    lost_log *log = data;
    atomic_store(&log->reason, reason);
    atomic_fetch_add(&log->count, 1);
}

static void test_reconnect_after_restart(void)
{
    rh_server *srv = rh_start(NULL);
    CHECK(srv != NULL);
    watchlock_client *c = open_client(rh_url(srv));
    watchlock_lock *l = new_lock(c, "restart");
    watchlock_lock *held = new_lock(c, "restart-held");
    lost_log log = {0};
    CHECK_OK(watchlock_lock_set_lease(held, 4000));
    CHECK_OK(watchlock_lock_set_renew_interval(held, 300));
    CHECK_OK(watchlock_lock_set_on_lost(held, on_lost, &log));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    CHECK_OK(watchlock_lock_acquire(held, 0));
    CHECK(rh_restart(srv) == 0);
    /* Pooled connections are dead now: the next calls reconnect. */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{restart}"), 1);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{restart}"), 0);
    /* The restarted server lost the held key (no persistence): the watchdog
     * reconnects and learns it is not the owner any more. */
    WAIT_FOR(atomic_load(&log.count) > 0, 8000);
    CHECK_EQ(atomic_load(&log.count), 1);
    CHECK_EQ(watchlock_lock_state(held), WATCHLOCK_LOST);
    testing_note("held lock after restart: lost, reason %s", watchlock_lost_reason_str(atomic_load(&log.reason)));
    CHECK_EQ(atomic_load(&log.reason), WATCHLOCK_LOST_TAKEN);
    CHECK_STATUS(watchlock_lock_release(held), WATCHLOCK_ENOTOWNER);
    /* Re-acquiring it after the restart works and the watchdog renews it. */
    CHECK_OK(watchlock_lock_set_lease(held, 900));
    CHECK_OK(watchlock_lock_acquire(held, 0));
    sleep_ms(1500);
    CHECK_EQ(watchlock_lock_state(held), WATCHLOCK_HELD);
    CHECK_INT(watchlock_lock_renewals(held), >=, 1);
    CHECK_OK(watchlock_lock_release(held));
    watchlock_lock_free(l);
    watchlock_lock_free(held);
    watchlock_client_close(c);
    rh_free(srv);
}

typedef struct waiter {
    watchlock_lock *lock;
    int64_t wait_ms; /* 0 (unset) waits forever */
    int rc;
    _Atomic int64_t done_at;
    atomic_int started;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->rc = watchlock_lock_acquire(w->lock, w->wait_ms ? w->wait_ms : -1);
    atomic_store(&w->done_at, now_ms());
    return NULL;
}

static void test_reconnect_after_client_kill(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *c2 = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "killed");
    watchlock_lock *held = new_lock(c, "killed-held");
    CHECK_OK(watchlock_lock_set_lease(held, 1500));
    CHECK_OK(watchlock_lock_set_renew_interval(held, 250));
    CHECK_OK(watchlock_lock_acquire(held, 0));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    /* Make the subscriber connection exist: one wait woken by a release. */
    watchlock_lock *h2 = new_lock(c2, "killed");
    CHECK_OK(watchlock_lock_acquire(h2, 0));
    waiter w = {.lock = l, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
    sleep_ms(200);
    CHECK_OK(watchlock_lock_release(h2));
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(w.rc);
    CHECK_OK(watchlock_lock_release(l));

    long long killed = rh_int(srv, "CLIENT KILL TYPE normal") + rh_int(srv, "CLIENT KILL TYPE pubsub");
    testing_note("CLIENT KILL closed %lld connections", killed);
    CHECK_INT(killed, >=, 3); /* pool, watchdog, subscriber of c (and c2's) */

    /* Plain commands reconnect. */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    /* The watchdog reconnects: the held lock outlives its lease. */
    int64_t renewals = watchlock_lock_renewals(held);
    sleep_ms(2000);
    CHECK_EQ(watchlock_lock_state(held), WATCHLOCK_HELD);
    CHECK_INT(watchlock_lock_renewals(held), >, renewals);
    CHECK_INT(rh_int(srv, "PTTL watchlock:{killed-held}"), >, 0);
    /* The subscriber reconnects: a waiter is still woken by the release
     * (long before the holder's 30 s lease). */
    CHECK_OK(watchlock_lock_set_lease(h2, 30000));
    CHECK_OK(watchlock_lock_acquire(h2, 0));
    rh_int(srv, "CLIENT KILL TYPE pubsub");
    waiter w2 = {.lock = l, .rc = -1};
    CHECK(pthread_create(&th, NULL, waiter_main, &w2) == 0);
    sleep_ms(300);
    int64_t released_at = now_ms();
    CHECK_OK(watchlock_lock_release(h2));
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(w2.rc);
    testing_note("waiter after CLIENT KILL acquired %lld ms after the release",
                 (long long)(atomic_load(&w2.done_at) - released_at));
    CHECK_INT(atomic_load(&w2.done_at) - released_at, <, 5000);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_OK(watchlock_lock_release(held));
    watchlock_lock_free(l);
    watchlock_lock_free(h2);
    watchlock_lock_free(held);
    watchlock_client_close(c);
    watchlock_client_close(c2);
}

static void test_script_flush(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "flushed");
    watchlock_lock *held = new_lock(c, "flushed-held");
    CHECK_OK(watchlock_lock_set_lease(held, 1200));
    CHECK_OK(watchlock_lock_set_renew_interval(held, 200));
    CHECK_OK(watchlock_lock_acquire(held, 0));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    long long evals = rh_info(srv, "commandstats", "cmdstat_eval");
    CHECK_OK(watchlock_lock_release(l)); /* NOSCRIPT -> reloaded */
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{flushed}"), 0);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{flushed}"), 1);
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    CHECK_OK(watchlock_lock_extend(l, 5000));
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    int held_flag = 0;
    CHECK_OK(watchlock_client_inspect(c, "flushed", 7, &held_flag, NULL, NULL));
    CHECK_EQ(held_flag, 1);
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    CHECK_OK(watchlock_client_force_release(c, "flushed", 7, NULL));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{flushed}"), 0);
    CHECK_INT(rh_info(srv, "commandstats", "cmdstat_eval"), >, evals);
    /* The watchdog reloads too: the held lock lives past its lease. */
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    int64_t renewals = watchlock_lock_renewals(held);
    sleep_ms(1500);
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    sleep_ms(500);
    CHECK_EQ(watchlock_lock_state(held), WATCHLOCK_HELD);
    CHECK_INT(watchlock_lock_renewals(held), >=, renewals + 3);
    CHECK_INT(watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDTRIPS), >,
              watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS));
    CHECK_OK(watchlock_lock_release(held));
    watchlock_lock_free(l);
    watchlock_lock_free(held);
    watchlock_client_close(c);
}

static void test_close_with_held_locks(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *other = open_client(test_url(""));
    lost_log log = {0};
    watchlock_lock *a = new_lock(c, "close-a");
    watchlock_lock *b = new_lock(c, "close-b");
    watchlock_lock *e = new_lock(c, "close-expiring");
    watchlock_lock *blocked = new_lock(c, "close-blocked");
    watchlock_lock *holder = new_lock(other, "close-blocked");
    CHECK_OK(watchlock_lock_set_on_lost(a, on_lost, &log));
    CHECK_OK(watchlock_lock_set_on_lost(b, on_lost, &log));
    CHECK_OK(watchlock_lock_set_on_lost(e, on_lost, &log));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_OK(watchlock_lock_acquire(b, 0)); /* reentrant: count 2 */
    /* Would be LOST (expired) in 800 ms if the client stayed open. */
    CHECK_OK(watchlock_lock_set_auto_renew(e, 0));
    CHECK_OK(watchlock_lock_set_lease(e, 800));
    CHECK_OK(watchlock_lock_acquire(e, 0));
    /* A thread blocked in acquire on this client. */
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter w = {.lock = blocked, .wait_ms = 60000, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
    WAIT_FOR(atomic_load(&w.started), 5000);
    sleep_ms(300);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 3);

    int64_t t0 = now_ms();
    watchlock_client_close(c);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_STATUS(w.rc, WATCHLOCK_ECLOSED);
    CHECK_INT(atomic_load(&w.done_at) - t0, <, 5000);
    /* Released best effort: the keys are gone at once. */
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{close-a} watchlock:{close-b} watchlock:{close-expiring}"), 0);
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{close-blocked}"), 1); /* other client's */
    CHECK_EQ(watchlock_lock_state(a), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_state(b), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_state(e), WATCHLOCK_UNLOCKED);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(a, 0), WATCHLOCK_ECLOSED);
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(b), WATCHLOCK_ECLOSED);
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(e, 1000), WATCHLOCK_ECLOSED);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(blocked, -1), WATCHLOCK_ECLOSED);
    /* No callback after close, even past e's lease. */
    sleep_ms(1200);
    CHECK_EQ(atomic_load(&log.count), 0);
    /* Another client can take the names at once. */
    watchlock_lock *x = new_lock(other, "close-a");
    CHECK_OK(watchlock_lock_acquire(x, 0));
    CHECK_OK(watchlock_lock_release(x));
    watchlock_lock_free(x);
    /* Handles outlive the client; freed in any order. */
    watchlock_lock_free(b);
    watchlock_lock_free(a);
    watchlock_lock_free(e);
    watchlock_lock_free(blocked);
    CHECK_OK(watchlock_lock_release(holder));
    watchlock_lock_free(holder);
    watchlock_client_close(other);
}

static void test_free_lock_releases(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    lost_log log = {0};
    watchlock_lock *l = new_lock(c, "freed");
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, &log));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{freed}"), 1);
    watchlock_lock_free(l);
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{freed}"), 0);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    /* Client closed before its last lock is freed. */
    watchlock_lock *m = new_lock(c, "freed-late");
    CHECK_OK(watchlock_lock_acquire(m, 0));
    watchlock_client_close(c);
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{freed-late}"), 0);
    CHECK_EQ(watchlock_lock_state(m), WATCHLOCK_UNLOCKED);
    watchlock_lock_free(m);
    CHECK_EQ(atomic_load(&log.count), 0);
}

static void test_inspect_and_force_release(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *admin = open_client(test_url(""));
    int held = -1, released = -1;
    int64_t rem = -5, fence = -5;
    CHECK_OK(watchlock_client_inspect(admin, "insp", 4, &held, &rem, &fence));
    CHECK_EQ(held, 0);
    CHECK_EQ(rem, 0);
    CHECK_EQ(fence, 0);
    CHECK_OK(watchlock_client_inspect(admin, "insp", 4, NULL, NULL, NULL));
    watchlock_lock *l = new_lock(c, "insp");
    lost_log log = {0};
    CHECK_OK(watchlock_lock_set_lease(l, 6000));
    CHECK_OK(watchlock_lock_set_renew_interval(l, 300));
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, &log));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_client_inspect(admin, "insp", 4, &held, &rem, &fence));
    CHECK_EQ(held, 1);
    CHECK_INT(rem, >, 4000);
    CHECK_INT(rem, <=, 6000);
    CHECK_EQ(fence, watchlock_lock_fencing_token(l));
    /* A key with no expiry reads as -1. */
    CHECK(rh_ok(srv, "SET watchlock:{noexp} sometoken"));
    CHECK_OK(watchlock_client_inspect(admin, "noexp", 5, &held, &rem, NULL));
    CHECK_EQ(held, 1);
    CHECK_EQ(rem, -1);
    CHECK_OK(watchlock_client_force_release(admin, "noexp", 5, &released));
    CHECK_EQ(released, 1);
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{noexp}"), 0);

    /* force_release wakes a waiter and the holder learns at its next renewal. */
    watchlock_lock *w = new_lock(admin, "insp");
    waiter wt = {.lock = w, .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &wt) == 0);
    WAIT_FOR(atomic_load(&wt.started), 5000);
    sleep_ms(200);
    int64_t forced_at = now_ms();
    CHECK_OK(watchlock_client_force_release(admin, "insp", 4, &released));
    CHECK_EQ(released, 1);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(wt.rc);
    CHECK_INT(atomic_load(&wt.done_at) - forced_at, <, 4000);
    WAIT_FOR(atomic_load(&log.count) > 0, 5000);
    CHECK_EQ(atomic_load(&log.count), 1);
    CHECK_EQ(atomic_load(&log.reason), WATCHLOCK_LOST_TAKEN);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK_EQ(watchlock_lock_lost_reason(l), WATCHLOCK_LOST_TAKEN);
    CHECK_STATUS(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    CHECK_EQ(watchlock_lock_state(w), WATCHLOCK_HELD); /* the old holder did not disturb the new one */
    CHECK_OK(watchlock_lock_release(w));
    CHECK_OK(watchlock_client_force_release(admin, "insp", 4, &released));
    CHECK_EQ(released, 0);
    CHECK_OK(watchlock_client_force_release(admin, "insp", 4, NULL));
    /* The fence survives force_release. */
    CHECK_OK(watchlock_client_inspect(admin, "insp", 4, &held, &rem, &fence));
    CHECK_EQ(held, 0);
    CHECK_EQ(fence, watchlock_lock_fencing_token(w));
    watchlock_lock_free(l);
    watchlock_lock_free(w);
    watchlock_client_close(c);
    watchlock_client_close(admin);
}

static void test_stats(void)
{
    watchlock_client *c = open_client(test_url(""));
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS), 0);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS), 0);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDTRIPS), 0);
    CHECK_INT(watchlock_client_stat(c, WATCHLOCK_STAT_WATCHDOG_CPU_US), >=, 0);
    watchlock_lock *a = new_lock(c, "stat-a");
    watchlock_lock *b = new_lock(c, "stat-b");
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 2);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 2);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 1);
    CHECK_OK(watchlock_lock_release(b));
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(c);
}

/* Marks the socket descriptors open now in seen[]. */
static void mark_sockets(bool *seen, int max)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (fd > 0 && fd < max && fd != dirfd(d) && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
            seen[fd] = true;
    }
    closedir(d);
}

/* Every socket the library opens (pool, watchdog, subscriber) is
 * close-on-exec, so programs the application runs do not inherit them. */
static void test_sockets_close_on_exec(void)
{
    enum { MAX_FD = 4096 };
    static bool before[MAX_FD], after[MAX_FD];
    mark_sockets(before, MAX_FD);
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "cloexec");
    watchlock_lock *b = new_lock(c, "cloexec");
    CHECK_OK(watchlock_lock_set_lease(a, 900));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_STATUS(watchlock_lock_acquire(b, 100), WATCHLOCK_ETIMEDOUT); /* subscriber connection */
    WAIT_FOR(watchlock_lock_renewals(a) >= 1, 5000);                  /* watchdog connection */
    mark_sockets(after, MAX_FD);
    int fresh = 0;
    for (int fd = 0; fd < MAX_FD; fd++) {
        if (!after[fd] || before[fd])
            continue;
        fresh++;
        CHECK_MSG(fcntl(fd, F_GETFD) & FD_CLOEXEC, "socket fd %d opened by the library is not close-on-exec", fd);
    }
    CHECK_INT(fresh, >=, 3);
    CHECK_OK(watchlock_lock_release(a));
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(c);
}

/* Sockets the client opens that were not in `before`, in fds[]. */
static int new_sockets(const bool *before, int *fds, int max_fds)
{
    enum { MAX_FD = 4096 };
    static bool now[MAX_FD];
    memset(now, 0, sizeof now);
    mark_sockets(now, MAX_FD);
    int n = 0;
    for (int fd = 0; fd < MAX_FD && n < max_fds; fd++)
        if (now[fd] && !before[fd])
            fds[n++] = fd;
    return n;
}

/* TCP keepalive is on by default and off with keepalive=0. */
static void test_tcp_keepalive(void)
{
    enum { MAX_FD = 4096 };
    for (int on = 1; on >= 0; on--) {
        static bool before[MAX_FD];
        memset(before, 0, sizeof before);
        mark_sockets(before, MAX_FD);
        watchlock_client *c = open_client(test_url(on ? "" : "?keepalive=0"));
        int fds[8];
        int n = new_sockets(before, fds, 8);
        CHECK_INT(n, >=, 1);
        for (int i = 0; i < n; i++) {
            int v = -1;
            socklen_t len = sizeof v;
            CHECK(getsockopt(fds[i], SOL_SOCKET, SO_KEEPALIVE, &v, &len) == 0);
            CHECK_MSG((v != 0) == on, "keepalive=%d in the URL, SO_KEEPALIVE=%d on fd %d", on, v, fds[i]);
        }
        watchlock_client_close(c);
    }
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"url_tcp_forms", test_url_tcp_forms, 0},
        {"url_unix_socket", test_url_unix_socket, 0},
        {"select_db", test_select_db, 0},
        {"auth_password", test_auth_password, 0},
        {"auth_acl_user", test_auth_acl_user, 0},
        {"reconnect_after_restart", test_reconnect_after_restart, 0},
        {"reconnect_after_client_kill", test_reconnect_after_client_kill, 0},
        {"script_flush", test_script_flush, 0},
        {"close_with_held_locks", test_close_with_held_locks, 0},
        {"free_lock_releases", test_free_lock_releases, 0},
        {"inspect_and_force_release", test_inspect_and_force_release, 0},
        {"stats", test_stats, 0},
        {"sockets_close_on_exec", test_sockets_close_on_exec, 0},
        {"tcp_keepalive", test_tcp_keepalive, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
