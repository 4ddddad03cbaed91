/*
 * test_quorum_multi.c - the multi-lock on a quorum client (issue 30.3):
 * on 3 and 5 real redis-servers, a multi-lock is held when a majority of
 * the members that count granted every one of its names within the
 * validity. Exclusion against another multi-lock sharing a name and
 * against a plain lock on one of its names; a frozen minority costs
 * nothing; a frozen majority refuses within the validity and leaves
 * nothing; a member restarted inside the window does not vote; release
 * and close give back on every member; force-releasing one name loses the
 * multi-lock, abandoning it leaves its keys to their lease; loss is told by the timer when a
 * majority is frozen, before a frozen member's key could expire.
 * No fixed sleeps: waits are on conditions (key state, callbacks).
 */
#include "quorum_helpers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static watchlock_client *settled_n(five *f, size_t n)
{
    return settled_lease(f, n, LEASE);
}

/* The watchdog renewed the client's holds `k` more times (each name's
 * hold is renewed on its own, a majority per name). */
static void renewed(watchlock_client *c, int64_t k)
{
    int64_t r0 = watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS);
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS) >= r0 + k, (k + 2) * LEASE);
    CHECK_INT(watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS), >=, r0 + k);
}

static watchlock_lock *multi(watchlock_client *c, const char *const *names, size_t k, int64_t lease)
{
    size_t lens[8];
    for (size_t i = 0; i < k; i++)
        lens[i] = strlen(names[i]);
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_multi_lock_new(&l, c, (const void *const *)names, lens, k));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

/* Members [0, n) holding `name`. */
static int holders(five *f, size_t n, const char *name)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += key_exists(f->s[i], name) == 1;
    return k;
}

static int majority(size_t n)
{
    return (int)(n / 2 + 1);
}

/* ---- exclusion, release on every member, tokens ---- */

typedef struct waiter {
    watchlock_lock *l;
    atomic_int done;
    int rc;
} waiter;

static void *wait_acquire(void *arg)
{
    waiter *w = arg;
    w->rc = watchlock_lock_acquire(w->l, 20 * LEASE);
    atomic_store(&w->done, 1);
    return NULL;
}

static void exclusion(size_t n)
{
    five f;
    five_start(&f);
    /* a's extend to 3 leases below: the members must be up longer than that to count */
    watchlock_client *a = settled_lease(&f, n, 3 * LEASE), *b = settled_n(&f, n);
    const char *an[] = {"qa", "qb", "qc"}, *bn[] = {"qd", "qc"};
    watchlock_lock *la = multi(a, an, 3, LEASE), *lb = multi(b, bn, 2, LEASE);
    watchlock_lock *plain = lock_lease(b, "qb", LEASE);
    CHECK_OK(watchlock_lock_acquire(la, 0));
    CHECK_EQ(watchlock_lock_state(la), WATCHLOCK_HELD);
    for (int i = 0; i < 3; i++)
        CHECK_INT(holders(&f, n, an[i]), >=, majority(n));
    int64_t t1[3];
    for (size_t i = 0; i < 3; i++) {
        t1[i] = watchlock_lock_fencing_token_at(la, i);
        CHECK_INT(t1[i], >, 0);
    }
    CHECK_EQ(watchlock_lock_fencing_token(la), t1[0]);
    /* a multi-lock sharing qc, and a plain lock on qb: refused */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(lb, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(holders(&f, n, "qd"), 0); /* what it got was given back */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(plain, 0), WATCHLOCK_ETIMEDOUT);
    /* reentrant */
    CHECK_OK(watchlock_lock_acquire(la, 0));
    CHECK_OK(watchlock_lock_release(la));
    CHECK_EQ(watchlock_lock_state(la), WATCHLOCK_HELD);
    /* renewed by the watchdog past its first lease (a renewal seen on a member) */
    renewed(a, 6);
    /* extend on every member */
    CHECK_OK(watchlock_lock_extend(la, 3 * LEASE));
    for (int i = 0; i < 3; i++) {
        int longer = 0;
        for (size_t k = 0; k < n; k++)
            longer += key_pttl(f.s[k], an[i]) > LEASE;
        CHECK_INT(longer, >=, majority(n));
    }
    /* a waiter on the shared name gets in when la releases */
    waiter w = {.l = lb, .done = 0, .rc = -1};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, wait_acquire, &w), 0);
    CHECK_OK(watchlock_lock_release(la));
    CHECK_EQ(watchlock_lock_state(la), WATCHLOCK_UNLOCKED);
    WAIT_FOR(holders(&f, n, "qa") + holders(&f, n, "qb") == 0, 2 * LEASE); /* a majority confirmed at once */
    CHECK_EQ(holders(&f, n, "qa") + holders(&f, n, "qb"), 0);
    pthread_join(th, NULL);
    CHECK_OK(w.rc);
    CHECK_EQ(watchlock_lock_state(lb), WATCHLOCK_HELD);
    CHECK_INT(watchlock_lock_fencing_token_at(lb, 1), >, t1[2]); /* qc's tokens rise across holders */
    /* a plain lock on qb now, and its token above the multi-lock's */
    CHECK_OK(watchlock_lock_acquire(plain, 0));
    CHECK_INT(watchlock_lock_fencing_token(plain), >, t1[1]);
    CHECK_OK(watchlock_lock_release(plain));
    CHECK_OK(watchlock_lock_release(lb));
    WAIT_FOR(holders(&f, n, "qc") + holders(&f, n, "qd") == 0, 2 * LEASE);
    CHECK_EQ(holders(&f, n, "qc") + holders(&f, n, "qd"), 0);
    watchlock_lock_free(plain);
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

static void exclusion_3(void)
{
    exclusion(3);
}

static void exclusion_5(void)
{
    exclusion(5);
}

/* ---- a frozen minority costs nothing ---- */

static void minority_frozen(size_t n)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled_n(&f, n);
    size_t live = (size_t)majority(n);
    for (size_t i = live; i < n; i++)
        CHECK_EQ(rh_pause(f.s[i]), 0);
    const char *names[] = {"ma", "mb"};
    watchlock_lock *l = multi(c, names, 2, LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    for (size_t i = 0; i < live; i++)
        CHECK_EQ(key_exists(f.s[i], "ma") + key_exists(f.s[i], "mb"), 2);
    CHECK_INT(watchlock_lock_fencing_token_at(l, 1), >, 0);
    /* renewed on the live majority past several leases */
    renewed(c, 8); /* four rounds of two names: more than one lease */
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(l));
    for (size_t i = 0; i < live; i++)
        CHECK_EQ(key_exists(f.s[i], "ma") + key_exists(f.s[i], "mb"), 0);
    for (size_t i = live; i < n; i++)
        CHECK_EQ(rh_resume(f.s[i]), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

static void minority_frozen_3(void)
{
    minority_frozen(3);
}

static void minority_frozen_5(void)
{
    minority_frozen(5);
}

/* ---- a frozen majority: refused within the validity, nothing held ---- */

static void majority_frozen(size_t n)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled_n(&f, n);
    size_t live = (size_t)majority(n) - 1;
    for (size_t i = live; i < n; i++)
        CHECK_EQ(rh_pause(f.s[i]), 0);
    const char *names[] = {"ja", "jb", "jc"};
    watchlock_lock *l = multi(c, names, 3, LEASE);
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), WATCHLOCK_ECONN);
    int64_t took = now_ms() - t0;
    testing_note("%zu members, %zu frozen: refused in %lld ms: %s", n, n - live, (long long)took,
                 watchlock_last_error());
    /* one attempt is capped at the validity (lease - drift) plus the give-back */
    CHECK_INT(took, <, 2 * LEASE);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    for (int k = 0; k < 3; k++) {
        WAIT_FOR(holders(&f, live, names[k]) == 0, 2 * LEASE);
        CHECK_EQ(holders(&f, live, names[k]), 0);
    }
    for (size_t i = live; i < n; i++)
        CHECK_EQ(rh_resume(f.s[i]), 0);
    /* the frozen members' late grants are given back behind them */
    for (int k = 0; k < 3; k++) {
        WAIT_FOR(holders(&f, n, names[k]) == 0, 3 * LEASE);
        CHECK_EQ(holders(&f, n, names[k]), 0);
    }
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

static void majority_frozen_3(void)
{
    majority_frozen(3);
}

static void majority_frozen_5(void)
{
    majority_frozen(5);
}

/* ---- a member restarted inside the window does not vote ---- */

static void restarted_kept_out(size_t n)
{
    five f;
    five_start(&f);
    int64_t lease_a = 3 * LEASE; /* a's keys outlast the restarts below; the window covers it */
    watchlock_client *a = settled_lease(&f, n, lease_a), *b = settled_n(&f, n);
    size_t m = (size_t)majority(n);
    /* a holds on members [0, m) only, with no renewal: its keys just run */
    for (size_t i = m; i < n; i++)
        CHECK_EQ(rh_pause(f.s[i]), 0);
    const char *an[] = {"ra", "rb"}, *bn[] = {"rb", "rx"};
    watchlock_lock *la = multi(a, an, 2, lease_a), *lb = multi(b, bn, 2, LEASE);
    CHECK_OK(watchlock_lock_set_auto_renew(la, 0));
    int64_t a_sent = now_ms(); /* a's keys are set after this: they end lease_a after it at the earliest */
    CHECK_OK(watchlock_lock_acquire(la, 0));
    int64_t ta = watchlock_lock_fencing_token_at(la, 1);
    CHECK(ta > 0);
    for (size_t i = m; i < n; i++)
        CHECK_EQ(rh_resume(f.s[i]), 0);
    /* their grants (late, kept) are taken away: only the restart rule may keep b out */
    for (size_t i = m; i < n; i++) {
        WAIT_FOR(key_exists(f.s[i], "rb") == 1, LEASE);
        rh_int(f.s[i], "DEL watchlock:{ra} watchlock:{rb}");
    }
    /* members 1 .. m-1 restart empty: a's keys there are gone; member 0 keeps them */
    for (size_t i = 1; i < m; i++)
        CHECK_EQ(rh_restart(f.s[i]), 0);
    CHECK_EQ(key_exists(f.s[0], "rb"), 1);
    /* every member but 0 would grant b: the restarted ones do not vote */
    int rc = watchlock_lock_acquire(lb, 0);
    if (rc != WATCHLOCK_OK && watchlock_client_stat(b, WATCHLOCK_STAT_QUORUM_KEPT_OUT) < (int64_t)(m - 1))
        rc = watchlock_lock_acquire(lb, 0); /* the first try may meet the connections the restart dropped */
    CHECK_MSG(rc != WATCHLOCK_OK, "b acquired rb while a's key is on member 0 and members 1..%zu restarted empty",
              m - 1);
    CHECK_INT(watchlock_client_stat(b, WATCHLOCK_STAT_QUORUM_KEPT_OUT), >=, (long long)(m - 1));
    CHECK_EQ(watchlock_lock_state(lb), WATCHLOCK_UNLOCKED);
    /* b gets in once a's key on member 0 ran out or the window (a's lease,
     * the longest recorded) has passed, whichever comes first: both come
     * after a's lease, never inside it; with a higher token */
    CHECK_OK(watchlock_lock_acquire(lb, 6 * lease_a));
    CHECK_INT(now_ms() - a_sent, >=, lease_a);
    CHECK_INT(watchlock_lock_fencing_token_at(lb, 0), >, ta);
    CHECK_OK(watchlock_lock_release(lb));
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

static void restarted_kept_out_3(void)
{
    restarted_kept_out(3);
}

static void restarted_kept_out_5(void)
{
    restarted_kept_out(5);
}

/* ---- close and free give back on every member ---- */

static void close_gives_back(size_t n)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled_n(&f, n);
    const char *names[] = {"ca", "cb", "cc"};
    watchlock_lock *l = multi(c, names, 3, LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    for (int k = 0; k < 3; k++)
        CHECK_INT(holders(&f, n, names[k]), >=, majority(n));
    watchlock_lock *l2 = multi(c, names + 1, 2, LEASE);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l2, 0), WATCHLOCK_ETIMEDOUT);
    watchlock_lock_free(l2);
    watchlock_client_close(c); /* close releases what is held, on every member */
    for (int k = 0; k < 3; k++) {
        WAIT_FOR(holders(&f, n, names[k]) == 0, 2 * LEASE);
        CHECK_EQ(holders(&f, n, names[k]), 0);
    }
    watchlock_lock_free(l);
    /* free of a held handle releases it too */
    c = settled_n(&f, n);
    l = multi(c, names, 3, LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    watchlock_lock_free(l);
    for (int k = 0; k < 3; k++) {
        WAIT_FOR(holders(&f, n, names[k]) == 0, 2 * LEASE);
        CHECK_EQ(holders(&f, n, names[k]), 0);
    }
    watchlock_client_close(c);
    five_free(&f);
}

static void close_gives_back_3(void)
{
    close_gives_back(3);
}

static void close_gives_back_5(void)
{
    close_gives_back(5);
}

/* ---- loss told by the timer when a majority is frozen ---- */

static atomic_llong lost_at;
static atomic_int lost_reason;
static void on_lost(watchlock_lock *l, int reason, void *arg)
{
    (void)l, (void)arg;
    atomic_store(&lost_reason, reason);
    atomic_store(&lost_at, now_ms());
}

static void loss_by_timer(size_t n)
{
    five f;
    five_start(&f);
    atomic_store(&lost_at, 0);
    watchlock_client *c = settled_n(&f, n);
    const char *names[] = {"la", "lb"};
    watchlock_lock *l = multi(c, names, 2, LEASE);
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, NULL));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    /* freeze all members but majority-1 among those holding: renewals reach too few */
    size_t keep = (size_t)majority(n) - 1, nf = 0;
    int frozen[N];
    int64_t first = INT64_MAX;
    for (size_t i = keep; i < n; i++) {
        if (key_exists(f.s[i], "la") != 1)
            continue;
        /* its keys end by what it says now at the latest: renewals sent later wait unread */
        int64_t t = now_ms();
        long long p = key_pttl(f.s[i], "la"), q = key_pttl(f.s[i], "lb");
        CHECK_EQ(rh_pause(f.s[i]), 0);
        CHECK_INT(p, >, 0);
        int64_t end = t + (p < q ? p : q);
        first = end < first ? end : first;
        frozen[nf++] = (int)i;
    }
    WAIT_FOR(atomic_load(&lost_at) != 0, 3 * LEASE);
    int64_t at = atomic_load(&lost_at);
    CHECK(at != 0);
    for (size_t i = 0; i < nf; i++)
        CHECK_EQ(rh_resume(f.s[frozen[i]]), 0);
    CHECK_EQ(atomic_load(&lost_reason), WATCHLOCK_LOST_CONNECTION);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK(watchlock_lock_lost_name(l, NULL) != NULL);
    testing_note("%zu members, %zu frozen: told LOST %lld ms before a frozen member's key expired", n, nf,
                 (long long)(first - at));
    CHECK_INT(at, <, first);
    CHECK_EQ(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    /* what was left on the live members is given back */
    for (size_t i = 0; i < keep; i++) {
        WAIT_FOR(key_exists(f.s[i], "la") + key_exists(f.s[i], "lb") == 0, 2 * LEASE);
        CHECK_EQ(key_exists(f.s[i], "la") + key_exists(f.s[i], "lb"), 0);
    }
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

static void loss_by_timer_3(void)
{
    loss_by_timer(3);
}

static void loss_by_timer_5(void)
{
    loss_by_timer(5);
}

/* ---- force-release of one name, abandon ---- */

/* Force-releasing one name on the quorum is the loss of the multi-lock
 * (taken, that name), its other names given back at release; an
 * abandoned multi-lock is not an unlock: its keys stay until their lease
 * ends, then nothing is left. */
static void force_release_and_abandon(void)
{
    five f;
    five_start(&f);
    size_t n = 3;
    watchlock_client *c = settled_n(&f, n);
    const char *names[] = {"fa", "fb"};
    watchlock_lock *l = multi(c, names, 2, LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int released = 0;
    CHECK_OK(watchlock_client_force_release(c, "fb", 2, &released));
    CHECK_EQ(released, 1);
    CHECK_EQ(holders(&f, n, "fb"), 0);
    WAIT_FOR(watchlock_lock_state(l) == WATCHLOCK_LOST, 3 * LEASE);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK_EQ(watchlock_lock_last_lost_reason(l), WATCHLOCK_LOST_TAKEN);
    CHECK_STR(watchlock_lock_lost_name(l, NULL), "fb");
    CHECK_EQ(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    WAIT_FOR(holders(&f, n, "fa") == 0, 2 * LEASE);
    CHECK_EQ(holders(&f, n, "fa"), 0);
    /* abandon: held keys stay (no release), their lease ends them */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_INT(holders(&f, n, "fa"), >=, majority(n));
    CHECK_EQ(watchlock_lock_abandon(l), 1);
    CHECK_INT(holders(&f, n, "fa") + holders(&f, n, "fb"), >=, 2 * majority(n));
    WAIT_FOR(holders(&f, n, "fa") + holders(&f, n, "fb") == 0, 3 * LEASE);
    CHECK_EQ(holders(&f, n, "fa") + holders(&f, n, "fb"), 0);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- the owner record of a labelled quorum hold ---- */

/* A labelled plain lock on a quorum writes its owner record on the
 * members (it was dropped: only one server's acquire wrote it), and
 * inspect_owner on the quorum client shows it. */
static void owner_label_on_quorum(void)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled_n(&f, 3);
    watchlock_lock *l = lock_lease(c, "owned", LEASE);
    CHECK_OK(watchlock_lock_set_owner_label(l, "job-7"));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int records = 0;
    for (size_t i = 0; i < 3; i++)
        records += rh_int(f.s[i], "EXISTS watchlock:{owned}:owner") == 1;
    CHECK_INT(records, >=, 2);
    watchlock_owner *o = NULL;
    int held = 0;
    int64_t rem = 0, fence = 0;
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, &rem, &fence, c, "owned", 5));
    CHECK_EQ(held, 1);
    CHECK(o != NULL);
    CHECK_STR(watchlock_owner_label(o, NULL), "job-7");
    CHECK_EQ(watchlock_owner_pid(o), getpid());
    watchlock_owner_free(o);
    CHECK_OK(watchlock_lock_release(l));
    o = NULL;
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, &rem, &fence, c, "owned", 5));
    CHECK_EQ(held, 0);
    CHECK(o == NULL);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

static const test_case tests[] = {
    {"owner_label_on_quorum", owner_label_on_quorum, 0},
    {"force_release_and_abandon", force_release_and_abandon, 0},
    {"exclusion_3", exclusion_3, 0},
    {"exclusion_5", exclusion_5, 0},
    {"minority_frozen_3", minority_frozen_3, 0},
    {"minority_frozen_5", minority_frozen_5, 0},
    {"majority_frozen_3", majority_frozen_3, 0},
    {"majority_frozen_5", majority_frozen_5, 0},
    {"restarted_kept_out_3", restarted_kept_out_3, 0},
    {"restarted_kept_out_5", restarted_kept_out_5, 0},
    {"close_gives_back_3", close_gives_back_3, 0},
    {"close_gives_back_5", close_gives_back_5, 0},
    {"loss_by_timer_3", loss_by_timer_3, 0},
    {"loss_by_timer_5", loss_by_timer_5, 0},
    {NULL, NULL, 0},
};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
