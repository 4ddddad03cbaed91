/*
 * test_quorum_rw.c - the read-write lock on a quorum client (issue 30.3)
 * against 3 and 5 real redis-servers: readers share, a writer excludes
 * readers and writers, a frozen minority costs nothing, a frozen majority
 * refuses, a member restarted empty inside the restart window does not
 * vote, a reader's loss is told by its timer before the frozen members'
 * keys expire, downgrade, and a waiting writer is woken by the release
 * (not by polling: the members' script calls stay bounded while it waits).
 *
 * Fresh servers have an uptime below the lease, so the restart rule keeps
 * them out for one lease after a client first sees them: `settled` waits
 * that out through an acquire with a wait, never a fixed sleep.
 */
#include "quorum_helpers.h"
#include "testing.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int members = N; /* 3 or 5: the test case's */

static watchlock_client *settled_n(five *f)
{
    return settled_lease(f, (size_t)members, LEASE);
}

static watchlock_lock *rw(watchlock_client *c, const char *name, int write, int64_t lease)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_rwlock_new(&l, c, name, strlen(name), write));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

static int count_n(watchlock_lock *l, int status)
{
    int k = 0;
    for (int i = 0; i < members; i++)
        k += watchlock_lock_member_status(l, (size_t)i) == status;
    return k;
}

/* The keys of a name on one member but its fencing counter. */
static long long name_keys(rh_server *s, const char *name)
{
    redisReply *r = rh_command(s, "KEYS watchlock:{%s}*", name);
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    long long n = 0;
    for (size_t i = 0; i < r->elements; i++)
        n += strstr(r->element[i]->str, ":fence") == NULL;
    freeReplyObject(r);
    return n;
}

/* The longest PTTL among a name's hold keys on one member (-2: none). */
static long long hold_pttl(rh_server *s, const char *name)
{
    redisReply *r = rh_command(s, "KEYS watchlock:{%s}:q:h:*", name);
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    long long best = -2;
    for (size_t i = 0; i < r->elements; i++) {
        long long p = rh_int(s, "PTTL %s", r->element[i]->str);
        best = p > best ? p : best;
    }
    freeReplyObject(r);
    return best;
}

static void del_name(rh_server *s, const char *name)
{
    redisReply *r = rh_command(s, "KEYS watchlock:{%s}*", name);
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++)
        if (strstr(r->element[i]->str, ":fence") == NULL)
            rh_int(s, "DEL %s", r->element[i]->str);
    freeReplyObject(r);
}

static long long scripts_run(rh_server *s)
{
    return rh_info(s, "commandstats", "cmdstat_evalsha") + rh_info(s, "commandstats", "cmdstat_eval");
}

/* ---- readers share, a writer excludes both ---- */

static void share_and_exclude(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f), *b = settled_n(&f);
    watchlock_lock *r1 = rw(a, "doc", 0, LEASE), *r2 = rw(b, "doc", 0, LEASE);
    watchlock_lock *w1 = rw(a, "doc", 1, LEASE), *w2 = rw(b, "doc", 1, LEASE);
    CHECK_EQ(watchlock_lock_kind(r1), WATCHLOCK_KIND_READ);
    CHECK_EQ(watchlock_lock_kind(w1), WATCHLOCK_KIND_WRITE);
    CHECK_OK(watchlock_lock_acquire(r1, 0));
    CHECK_OK(watchlock_lock_acquire(r2, 0)); /* readers share */
    CHECK_EQ(count_n(r2, WATCHLOCK_MEMBER_GRANTED) >= members / 2 + 1, 1);
    CHECK(watchlock_lock_fencing_token(r1) > 0);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w1, 0), WATCHLOCK_ETIMEDOUT); /* no writer beside readers */
    CHECK(strstr(watchlock_last_error(), "held by another owner") != NULL);
    CHECK_INT(count_n(w1, WATCHLOCK_MEMBER_HELD), >=, members / 2 + 1); /* decided at a majority */
    CHECK_EQ(watchlock_lock_state(w1), WATCHLOCK_UNLOCKED);
    int held = 0;
    int64_t left = 0;
    CHECK_OK(watchlock_client_inspect(a, "doc", 3, &held, &left, NULL)); /* held, by the readers */
    CHECK_EQ(held, 1);
    CHECK_INT(left, >, 0);
    /* renewed by the watchdog for several leases on both readers */
    WAIT_FOR(watchlock_lock_renewals(r1) >= 4 && watchlock_lock_renewals(r2) >= 4, 4 * LEASE);
    CHECK_INT(watchlock_lock_renewals(r2), >=, 4);
    CHECK_EQ(watchlock_lock_state(r1), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_extend(r1, 2 * LEASE));
    CHECK_OK(watchlock_lock_release(r1));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w1, 0), WATCHLOCK_ETIMEDOUT); /* r2 still reads */
    CHECK_OK(watchlock_lock_release(r2));
    CHECK_OK(watchlock_lock_acquire(w1, 0));
    int64_t tw = watchlock_lock_fencing_token(w1);
    CHECK(tw > 0);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w2, 0), WATCHLOCK_ETIMEDOUT); /* one writer */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(r2, 0), WATCHLOCK_ETIMEDOUT); /* no reader beside it */
    CHECK_OK(watchlock_lock_acquire(w1, 0)); /* reentrant */
    CHECK_OK(watchlock_lock_release(w1));
    CHECK_OK(watchlock_lock_release(w1));
    CHECK_OK(watchlock_lock_acquire(w2, 0));
    CHECK_INT(watchlock_lock_fencing_token(w2), >, tw); /* tokens rise across writers */
    CHECK_OK(watchlock_lock_release(w2));
    CHECK_STATUS(watchlock_lock_release(w2), WATCHLOCK_ENOTOWNER);
    for (int i = 0; i < members; i++) /* nothing left behind */
        CHECK_EQ(name_keys(f.s[i], "doc"), 0);
    watchlock_lock_free(r1);
    watchlock_lock_free(r2);
    watchlock_lock_free(w1);
    watchlock_lock_free(w2);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- a frozen minority, a frozen majority ---- */

static void minority_frozen(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f);
    int frozen = members - (members / 2 + 1);
    for (int i = 0; i < frozen; i++)
        CHECK_EQ(rh_pause(f.s[members - 1 - i]), 0);
    watchlock_lock *r = rw(a, "minor", 0, LEASE), *w = rw(a, "minor", 1, LEASE);
    CHECK_OK(watchlock_lock_acquire(r, 0));
    CHECK_EQ(count_n(r, WATCHLOCK_MEMBER_GRANTED), members - frozen);
    WAIT_FOR(watchlock_lock_renewals(r) >= 4, 4 * LEASE); /* renewed by the live majority */
    CHECK_INT(watchlock_lock_renewals(r), >=, 4);
    CHECK_EQ(watchlock_lock_state(r), WATCHLOCK_HELD);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(r));
    CHECK_OK(watchlock_lock_acquire(w, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(r, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(w));
    for (int i = 0; i < frozen; i++)
        CHECK_EQ(rh_resume(f.s[members - 1 - i]), 0);
    watchlock_lock_free(r);
    watchlock_lock_free(w);
    watchlock_client_close(a);
    five_free(&f);
}

static void majority_frozen(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f);
    int frozen = members / 2 + 1;
    for (int i = 0; i < frozen; i++)
        CHECK_EQ(rh_pause(f.s[members - 1 - i]), 0);
    for (int write = 0; write <= 1; write++) {
        watchlock_lock *l = rw(a, "major", write, LEASE);
        CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 3 * LEASE), WATCHLOCK_ECONN);
        testing_note("%s with %d of %d frozen: %s", write ? "write" : "read", frozen, members,
                     watchlock_last_error());
        CHECK(strstr(watchlock_last_error(), "unreachable") != NULL);
        CHECK_EQ(count_n(l, WATCHLOCK_MEMBER_UNREACHABLE), frozen);
        CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
        watchlock_lock_free(l);
    }
    /* the live members' grants were given back */
    WAIT_FOR(name_keys(f.s[0], "major") == 0, 2 * LEASE);
    for (int i = 0; i < members - frozen; i++)
        CHECK_EQ(name_keys(f.s[i], "major"), 0);
    for (int i = 0; i < frozen; i++)
        CHECK_EQ(rh_resume(f.s[members - 1 - i]), 0);
    watchlock_client_close(a);
    five_free(&f);
}

/* ---- a member restarted inside the restart window does not vote ---- */

static void restarted_member_no_vote(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f), *b = settled_n(&f);
    int maj = members / 2 + 1;
    /* a reads on members 0 .. maj-1 only */
    for (int i = maj; i < members; i++)
        CHECK_EQ(rh_pause(f.s[i]), 0);
    watchlock_lock *ra = rw(a, "rst", 0, LEASE), *wb = rw(b, "rst", 1, LEASE);
    CHECK_OK(watchlock_lock_set_auto_renew(ra, 0)); /* its lease just runs: its key stays on member 0 */
    int64_t a_sent = now_ms();
    CHECK_OK(watchlock_lock_acquire(ra, 0));
    for (int i = maj; i < members; i++)
        CHECK_EQ(rh_resume(f.s[i]), 0);
    /* late grants there are a's (kept): taken away, so that only the
     * restart rule can keep b out below */
    WAIT_FOR(watchlock_client_stat(a, WATCHLOCK_STAT_QUORUM_LATE_GRANTS) >= members - maj, LEASE / 2);
    for (int i = maj; i < members; i++)
        del_name(f.s[i], "rst");
    /* members 1 .. maj-1 restart empty: a's read shares there are gone */
    for (int i = 1; i < maj; i++)
        CHECK_EQ(rh_restart(f.s[i]), 0);
    CHECK_INT(hold_pttl(f.s[0], "rst"), >, 0);
    /* every member but 0 would grant b's write: only the restart rule keeps it out */
    int rc = watchlock_lock_acquire(wb, 0);
    if (rc != WATCHLOCK_OK && count_n(wb, WATCHLOCK_MEMBER_RESTARTED) < maj - 1)
        rc = watchlock_lock_acquire(wb, 0); /* the first try met the connections the restart dropped */
    CHECK_MSG(rc != WATCHLOCK_OK, "a writer got in while a's read share is on member 0 and members restarted");
    CHECK_EQ(count_n(wb, WATCHLOCK_MEMBER_RESTARTED), maj - 1);
    CHECK_EQ(watchlock_lock_member_status(wb, 0), WATCHLOCK_MEMBER_HELD);
    /* b writes once a's share on member 0 has run out (members 0, 3, 4 are
     * a majority), or the restarted ones count again: either way no sooner
     * than a lease after a's acquire was sent. (Not a lease after the restarts: a
     * clean-clone run measured 992 ms from there, a's share having ended
     * first.) */
    CHECK_OK(watchlock_lock_acquire(wb, 4 * LEASE));
    CHECK_INT(now_ms() - a_sent, >=, LEASE);
    CHECK_OK(watchlock_lock_release(wb));
    watchlock_lock_free(ra);
    watchlock_lock_free(wb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- a reader's loss, told by its timer ---- */

static int64_t lost_at;
static int lost_reason;
static void on_lost(watchlock_lock *l, int reason, void *arg)
{
    (void)l, (void)arg;
    lost_reason = reason;
    __atomic_store_n(&lost_at, now_ms(), __ATOMIC_SEQ_CST);
}

static void reader_loss_by_timer(void)
{
    five f;
    five_start(&f);
    __atomic_store_n(&lost_at, 0, __ATOMIC_SEQ_CST);
    watchlock_client *c = settled_n(&f);
    watchlock_lock *l = rw(c, "loss", 0, LEASE);
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, NULL));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    WAIT_FOR(watchlock_lock_renewals(l) >= 1, 2 * LEASE);
    int holders[N], nh = 0, frozen[N], nf = 0;
    int64_t expiry[N];
    for (int i = 0; i < members; i++)
        if (hold_pttl(f.s[i], "loss") > 0)
            holders[nh++] = i;
    CHECK_INT(nh, >=, members / 2 + 1);
    int keep = members / 2; /* below the majority */
    for (int i = 0; i < nh - keep; i++)
        frozen[nf++] = holders[i];
    int64_t r0 = watchlock_lock_renewals(l);
    WAIT_FOR(watchlock_lock_renewals(l) > r0, 2 * LEASE); /* right after a round: each key's end is read */
    for (int i = 0; i < nf; i++) {
        int64_t t = now_ms();
        long long p = hold_pttl(f.s[frozen[i]], "loss");
        CHECK_INT(p, >, 0);
        expiry[i] = t + p;
    }
    for (int i = 0; i < nf; i++)
        CHECK_EQ(rh_pause(f.s[frozen[i]]), 0);
    WAIT_FOR(__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) != 0, 3 * LEASE);
    int64_t at = __atomic_load_n(&lost_at, __ATOMIC_SEQ_CST);
    CHECK(at != 0);
    for (int i = 0; i < nf; i++)
        CHECK_EQ(rh_resume(f.s[frozen[i]]), 0);
    int64_t first = expiry[0];
    for (int i = 1; i < nf; i++)
        first = expiry[i] < first ? expiry[i] : first;
    CHECK_EQ(lost_reason, WATCHLOCK_LOST_CONNECTION);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    testing_note("reader told LOST %lld ms before the first frozen member's key expired", (long long)(first - at));
    CHECK_INT(at, <, first);
    CHECK_EQ(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    /* a writer gets in once the frozen shares ended */
    watchlock_lock *w = rw(c, "loss", 1, LEASE);
    CHECK_OK(watchlock_lock_acquire(w, 4 * LEASE));
    CHECK_OK(watchlock_lock_release(w));
    watchlock_lock_free(w);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- downgrade ---- */

static void downgrade_majority(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f), *b = settled_n(&f);
    watchlock_lock *w = rw(a, "dg", 1, LEASE), *r = rw(b, "dg", 0, LEASE), *w2 = rw(b, "dg", 1, LEASE);
    CHECK_FAILS_WITH_MSG(watchlock_rwlock_downgrade(w), WATCHLOCK_ENOTOWNER); /* nothing held */
    CHECK_FAILS_WITH_MSG(watchlock_rwlock_downgrade(r), WATCHLOCK_EINVAL);    /* a reader's handle */
    CHECK_OK(watchlock_lock_acquire(w, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(r, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_rwlock_downgrade(w));
    CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_READ);
    CHECK_FAILS_WITH_MSG(watchlock_rwlock_downgrade(w), WATCHLOCK_EINVAL); /* a read share already */
    CHECK_OK(watchlock_lock_acquire(r, 0));                                 /* readers share now */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w2, 0), WATCHLOCK_ETIMEDOUT);
    WAIT_FOR(watchlock_lock_renewals(w) >= 3, 3 * LEASE); /* the share is renewed as any hold */
    CHECK_EQ(watchlock_lock_state(w), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(w));
    CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_WRITE); /* the handle is a writer's again */
    CHECK_OK(watchlock_lock_release(r));
    CHECK_OK(watchlock_lock_acquire(w, 0)); /* a new hold is a write hold */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(r, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(w));
    for (int i = 0; i < members; i++)
        CHECK_EQ(name_keys(f.s[i], "dg"), 0);
    watchlock_lock_free(w);
    watchlock_lock_free(r);
    watchlock_lock_free(w2);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- force-release, the other kinds refused ---- */

static void force_release_and_refusals(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f);
    watchlock_lock *r = rw(a, "force", 0, LEASE);
    CHECK_OK(watchlock_lock_acquire(r, 0));
    int released = 0;
    CHECK_OK(watchlock_client_force_release(a, "force", 5, &released));
    CHECK_EQ(released, 1);
    WAIT_FOR(watchlock_lock_state(r) == WATCHLOCK_LOST, 3 * LEASE); /* told at its next renewal */
    CHECK_EQ(watchlock_lock_state(r), WATCHLOCK_LOST);
    CHECK_EQ(watchlock_lock_lost_reason(r), WATCHLOCK_LOST_TAKEN);
    watchlock_lock_free(r);
    watchlock_lock *l = NULL;
    CHECK_FAILS_WITH_MSG(watchlock_fair_lock_new(&l, a, "x", 1), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "fair") != NULL && strstr(watchlock_last_error(), "quorum") != NULL);
    CHECK_FAILS_WITH_MSG(watchlock_semaphore_new(&l, a, "x", 1, 2), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "semaphore") != NULL);
    CHECK(l == NULL);
    /* a name held as a plain lock is not a read-write lock's */
    watchlock_lock *p = lock_lease(a, "mixed", LEASE);
    CHECK_OK(watchlock_lock_acquire(p, 0));
    watchlock_lock *w = rw(a, "mixed", 1, LEASE);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w, 0), WATCHLOCK_EWRONGTYPE);
    CHECK(strstr(watchlock_last_error(), "another lock kind") != NULL);
    CHECK_EQ(watchlock_lock_state(w), WATCHLOCK_UNLOCKED);
    CHECK_OK(watchlock_lock_release(p));
    /* and the other way round: a plain lock on a name read-locked */
    watchlock_lock *rd = rw(a, "mixed", 0, LEASE);
    CHECK_OK(watchlock_lock_acquire(rd, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(p, 0), WATCHLOCK_EWRONGTYPE);
    CHECK_OK(watchlock_lock_release(rd));
    CHECK_OK(watchlock_lock_acquire(p, 0)); /* the name is free again: plain works */
    CHECK_OK(watchlock_lock_release(p));
    watchlock_lock_free(rd);
    watchlock_lock_free(p);
    watchlock_lock_free(w);
    watchlock_client_close(a);
    five_free(&f);
}

/* ---- a waiting writer is woken by the release, not by polling ---- */

typedef struct waiter_arg {
    watchlock_lock *l;
    int rc;
    int64_t got_at;
} waiter_arg;

static void *wait_write(void *arg)
{
    waiter_arg *w = arg;
    w->rc = watchlock_lock_acquire(w->l, 60 * LEASE);
    __atomic_store_n(&w->got_at, now_ms(), __ATOMIC_SEQ_CST);
    return NULL;
}

static long long subscribers(rh_server *s, const char *channel)
{
    redisReply *r = rh_command(s, "PUBSUB NUMSUB %s", channel);
    long long n = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : -1;
    freeReplyObject(r);
    return n;
}

static void release_wakes_writer(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled_n(&f), *b = settled_n(&f);
    int64_t lease = 3 * LEASE; /* the waiter's retry bound: far beyond a wake-up */
    watchlock_lock *r = rw(a, "wake", 0, lease), *w = rw(b, "wake", 1, lease);
    CHECK_OK(watchlock_lock_acquire(r, 4 * lease)); /* the restart window grew to this lease: waited out */
    waiter_arg wa = {w, -1, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_write, &wa) == 0);
    /* subscribed on every member, then its attempt after subscribing done */
    for (int i = 0; i < members; i++)
        WAIT_FOR(subscribers(f.s[i], "watchlock:{wake}:released") >= 1, 4 * LEASE);
    for (int i = 0; i < members; i++)
        CHECK_INT(subscribers(f.s[i], "watchlock:{wake}:released"), >=, 1);
    WAIT_FOR(count_n(w, WATCHLOCK_MEMBER_HELD) == members, 4 * LEASE);
    long long runs0 = 0;
    for (int i = 0; i < members; i++)
        runs0 += scripts_run(f.s[i]);
    /* the reader holds for three renewal rounds (a lease) */
    int64_t r0 = watchlock_lock_renewals(r);
    WAIT_FOR(watchlock_lock_renewals(r) >= r0 + 3, 4 * lease);
    long long runs = -runs0;
    for (int i = 0; i < members; i++)
        runs += scripts_run(f.s[i]);
    int64_t rounds = watchlock_lock_renewals(r) - r0;
    testing_note("while a writer waited through %lld renewal rounds: %lld scripts on %d members", (long long)rounds,
                 runs, members);
    /* the reader's renewals (one per member per round) and at most a couple of the waiter's attempts */
    CHECK_INT(runs, <=, (rounds + 3) * members);
    CHECK_EQ(__atomic_load_n(&wa.got_at, __ATOMIC_SEQ_CST), 0);
    int64_t released_at = now_ms();
    CHECK_OK(watchlock_lock_release(r));
    pthread_join(th, NULL);
    CHECK_OK(wa.rc);
    int64_t took = wa.got_at - released_at;
    testing_note("writer in %lld ms after the release (its retry bound: a %lld ms lease)", (long long)took,
                 (long long)lease);
    CHECK_INT(took, <, lease / 2); /* woken by the release, not by the end of the reader's lease */
    CHECK_OK(watchlock_lock_release(w));
    watchlock_lock_free(r);
    watchlock_lock_free(w);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* Each case on 3 members, then on 5. */
#define BOTH(fn)                                                                                                   \
    static void fn##_3(void)                                                                                       \
    {                                                                                                              \
        members = 3;                                                                                               \
        fn();                                                                                                      \
    }                                                                                                              \
    static void fn##_5(void)                                                                                       \
    {                                                                                                              \
        members = 5;                                                                                               \
        fn();                                                                                                      \
    }
BOTH(share_and_exclude)
BOTH(minority_frozen)
BOTH(majority_frozen)
BOTH(restarted_member_no_vote)
BOTH(reader_loss_by_timer)
BOTH(downgrade_majority)
BOTH(force_release_and_refusals)
BOTH(release_wakes_writer)

static const test_case tests[] = {
    {"share_and_exclude_3", share_and_exclude_3, 0},
    {"share_and_exclude_5", share_and_exclude_5, 0},
    {"minority_frozen_3", minority_frozen_3, 0},
    {"minority_frozen_5", minority_frozen_5, 0},
    {"majority_frozen_3", majority_frozen_3, 0},
    {"majority_frozen_5", majority_frozen_5, 0},
    {"restarted_member_no_vote_3", restarted_member_no_vote_3, 0},
    {"restarted_member_no_vote_5", restarted_member_no_vote_5, 0},
    {"reader_loss_by_timer_3", reader_loss_by_timer_3, 0},
    {"reader_loss_by_timer_5", reader_loss_by_timer_5, 0},
    {"downgrade_majority_3", downgrade_majority_3, 0},
    {"downgrade_majority_5", downgrade_majority_5, 0},
    {"force_release_and_refusals_3", force_release_and_refusals_3, 0},
    {"force_release_and_refusals_5", force_release_and_refusals_5, 0},
    {"release_wakes_writer_3", release_wakes_writer_3, 0},
    {"release_wakes_writer_5", release_wakes_writer_5, 0},
    {NULL, NULL, 0},
};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
