/*
 * test_fence_restart.c - fencing tokens never go back when a server comes
 * back from an old RDB snapshot (issue 29.3), against real redis-servers:
 * SAVE, more holds, SIGKILL, restart from the file (its counters are the
 * snapshot's, below the tokens handed out since), then the next hold's
 * token must be above every earlier one. On one server for the plain lock
 * (the fast transaction and the script), the multi-lock and the fair lock;
 * on a quorum of three, where the restored member and one that never got
 * the earlier holder's raise grant the next hold.
 *
 * Before the fix every token was INCR of the counter, so the restored
 * counter handed out numbers already used (the plain lock: the last
 * token's predecessors; the quorum: the earlier holder's very token).
 */
#include "testing.h"

#include <stdbool.h>
#include <stdlib.h>

#define LEASE 1000

static long long fence_of(rh_server *s, const char *name)
{
    redisReply *r = rh_command(s, "GET watchlock:{%s}:fence", name);
    long long v = r != NULL && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* An acquire right after the server restarted may meet a pooled
 * connection the restart broke: one more try then. */
static int acquire_after_restart(watchlock_lock *l, int64_t wait_ms)
{
    int rc = watchlock_lock_acquire(l, wait_ms);
    for (int i = 0; i < 3 && rc == WATCHLOCK_ECONN; i++)
        rc = watchlock_lock_acquire(l, wait_ms);
    return rc;
}

/* Holds l once and returns its token (which must be above *last). */
static int64_t cycle(watchlock_lock *l, int64_t *last)
{
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int64_t t = watchlock_lock_fencing_token(l);
    CHECK_INT(t, >, *last);
    *last = t;
    CHECK_OK(watchlock_lock_release(l));
    return t;
}

static void kill_and_restore(rh_server *s)
{
    rh_kill(s);
    CHECK_EQ(rh_restart(s), 0);
}

/* ---- one server ---- */

static void one_server_snapshot(void)
{
    rh_server *s = rh_start(NULL);
    CHECK(s != NULL);
    watchlock_client *c = open_client(rh_url(s));
    watchlock_lock *plain = new_lock(c, "snap");
    watchlock_lock *fair = NULL, *multi = NULL;
    CHECK_OK(watchlock_fair_lock_new(&fair, c, "snap-fair", 9));
    const char *names[2] = {"snap-m1", "snap-m2"};
    size_t lens[2] = {7, 7};
    CHECK_OK(watchlock_multi_lock_new(&multi, c, (const void *const *)names, lens, 2));
    int64_t last_plain = 0, last_fair = 0, last_multi = 0;
    /* the first holds seed the counters (the script), the next ones take
     * the fast transaction (a name this client has held before) */
    for (int i = 0; i < 2; i++) {
        cycle(plain, &last_plain);
        cycle(fair, &last_fair);
        cycle(multi, &last_multi);
    }
    CHECK(rh_ok(s, "SAVE"));
    for (int i = 0; i < 5; i++) {
        cycle(plain, &last_plain);
        cycle(fair, &last_fair);
        cycle(multi, &last_multi);
    }
    kill_and_restore(s);
    /* the snapshot's counter is below the last token: the ground of the test */
    long long restored = fence_of(s, "snap");
    CHECK_MSG(restored > 0 && restored < last_plain, "restored counter %lld, last token %lld", restored,
              (long long)last_plain);
    testing_note("restored counter %lld is %lld below the last token", restored, (long long)last_plain - restored);

    /* the same client, the same handles: the fast transaction for the plain lock and the multi-lock */
    CHECK_OK(acquire_after_restart(plain, 0));
    int64_t t = watchlock_lock_fencing_token(plain);
    CHECK_MSG(t > last_plain, "plain lock after the restart: token %lld, before it %lld", (long long)t,
              (long long)last_plain);
    last_plain = t;
    CHECK_OK(watchlock_lock_release(plain));
    CHECK_OK(acquire_after_restart(multi, 0));
    t = watchlock_lock_fencing_token(multi);
    CHECK_MSG(t > last_multi, "multi-lock after the restart: token %lld, before it %lld", (long long)t,
              (long long)last_multi);
    CHECK_OK(watchlock_lock_release(multi));
    CHECK_OK(acquire_after_restart(fair, 0));
    t = watchlock_lock_fencing_token(fair);
    CHECK_MSG(t > last_fair, "fair lock after the restart: token %lld, before it %lld", (long long)t,
              (long long)last_fair);
    CHECK_OK(watchlock_lock_release(fair));

    /* and once more from the snapshot, for a new client (the script's path) */
    kill_and_restore(s);
    watchlock_client *d = open_client(rh_url(s));
    watchlock_lock *fresh = new_lock(d, "snap");
    CHECK_OK(watchlock_lock_acquire(fresh, 0));
    t = watchlock_lock_fencing_token(fresh);
    CHECK_MSG(t > last_plain, "a new client after the restart: token %lld, before it %lld", (long long)t,
              (long long)last_plain);
    CHECK_OK(watchlock_lock_release(fresh));
    /* the counter still has its TTL (set once, kept by every token since) */
    CHECK_INT(rh_int(s, "PTTL watchlock:{snap}:fence"), >, 0);

    watchlock_lock_free(fresh);
    watchlock_client_close(d);
    watchlock_lock_free(plain);
    watchlock_lock_free(fair);
    watchlock_lock_free(multi);
    watchlock_client_close(c);
    rh_free(s);
}

/* ---- a quorum of three ---- */

#define QOPTS "connect_timeout=1s&command_timeout=1s&safety_margin=250ms"

static void quorum_member_snapshot(void)
{
    rh_server *s[3];
    char url[3][512];
    const char *urls[3];
    for (int i = 0; i < 3; i++) {
        s[i] = rh_start(NULL);
        CHECK(s[i] != NULL);
        snprintf(url[i], sizeof url[i], "%s?%s", rh_url(s[i]), QOPTS);
        urls[i] = url[i];
    }
    watchlock_client *c = NULL;
    CHECK_OK(watchlock_client_open_quorum(&c, urls, 3));
    watchlock_lock *settle = new_lock(c, "settle");
    CHECK_OK(watchlock_lock_set_lease(settle, LEASE));
    CHECK_OK(watchlock_lock_acquire(settle, 4 * LEASE)); /* fresh servers: waits out the restart window */
    CHECK_OK(watchlock_lock_release(settle));
    watchlock_lock_free(settle);

    /* The members' counters differ, as they do in use: member 0's is the
     * highest. Its snapshot is taken before a's hold. */
    redisReply *tm = rh_command(s[0], "TIME");
    CHECK(tm != NULL && tm->type == REDIS_REPLY_ARRAY && tm->elements == 2);
    long long base = atoll(tm->element[0]->str) * 1000000LL - 60 * 1000000LL; /* a minute ago */
    freeReplyObject(tm);
    for (int i = 0; i < 3; i++)
        CHECK(rh_ok(s[i], "SET watchlock:{qsnap}:fence %lld PX 86400000", base + (i == 0 ? 1000 : 0)));
    CHECK(rh_ok(s[0], "SAVE"));

    /* a is granted by members 0 and 1 (2 is held by someone else), and
     * its token raised there */
    CHECK(rh_ok(s[2], "SET watchlock:{qsnap} someone-else PX 60000"));
    watchlock_lock *la = new_lock(c, "qsnap"), *lb = new_lock(c, "qsnap");
    CHECK_OK(watchlock_lock_set_lease(la, LEASE));
    CHECK_OK(watchlock_lock_set_lease(lb, LEASE));
    CHECK_OK(watchlock_lock_acquire(la, 0));
    int64_t ta = watchlock_lock_fencing_token(la);
    CHECK_INT(ta, >, 0);
    CHECK_OK(watchlock_lock_release(la));
    CHECK_EQ(rh_int(s[2], "DEL watchlock:{qsnap}"), 1);

    /* member 0 comes back from its snapshot; member 1 (which has a's
     * raise) is held by someone else: b's majority is 0 and 2 */
    kill_and_restore(s[0]);
    CHECK_INT(fence_of(s[0], "qsnap"), <, ta);
    CHECK(rh_ok(s[1], "SET watchlock:{qsnap} someone-else PX 60000"));
    /* member 0 counts once its restart window has passed: another name
     * finds out when (each attempt on qsnap itself would count its
     * counters up on members 0 and 2 and hide what is tested) */
    watchlock_lock *probe = new_lock(c, "probe");
    CHECK_OK(watchlock_lock_set_lease(probe, LEASE));
    bool counted = false;
    for (int64_t end = now_ms() + 20 * LEASE; !counted && now_ms() < end; sleep_ms(50)) {
        int rc = watchlock_lock_acquire(probe, 0);
        counted = rc == WATCHLOCK_OK && watchlock_lock_member_status(probe, 0) == WATCHLOCK_MEMBER_GRANTED;
        if (rc == WATCHLOCK_OK)
            CHECK_OK(watchlock_lock_release(probe));
    }
    CHECK_MSG(counted, "member 0 was not counted again within %d ms of its restart", 20 * LEASE);
    watchlock_lock_free(probe);
    CHECK_OK(watchlock_lock_acquire(lb, 0));
    int64_t tb = watchlock_lock_fencing_token(lb);
    testing_note("a's token %lld, b's %lld (member 0 restored to %lld)", (long long)ta, (long long)tb,
                 (long long)base + 1000);
    CHECK_MSG(tb > ta, "b's token %lld is not above a's %lld after member 0 came back from its snapshot",
              (long long)tb, (long long)ta);
    CHECK_OK(watchlock_lock_release(lb));

    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(c);
    for (int i = 0; i < 3; i++)
        rh_free(s[i]);
}

static const test_case tests[] = {
    {"one_server_snapshot", one_server_snapshot, 0},
    {"quorum_member_snapshot", quorum_member_snapshot, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
