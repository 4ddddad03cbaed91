/*
 * quorum_lock.c - the plain lock on a quorum client (Redlock): acquire
 * (one parallel attempt on every member, a majority verdict), the wait
 * between attempts (woken by a release on any member), extend, the
 * fencing token raised across the members that granted, and each member's
 * verdict of the last attempt. Release is release.c's (its I/O goes to
 * every member through hold/quorum_round.c); renewals are the watchdog's
 * (quorum_round.c).
 *
 * Every attempt has a fresh token: the give-back of a failed attempt (a
 * token-checked release that may land late, behind the attempt on a slow
 * member) can then never delete a later attempt's key. A successful
 * attempt keeps the late grants that come within its validity (renewed,
 * released like the others); a failed one gives back every grant.
 *
 * Validity: an attempt counts only if a majority of members that count
 * (the restart rule) granted before sent + lease - drift, where sent is
 * read just before the first member's write and drift = 1% of the lease +
 * the safety margin (wl_margin_us), on the monotonic clock; that is the
 * hold's local deadline, as on one server.
 *
 * Locks: io_mu (the handle's round trips) then client->mu, as lock.c; no
 * mutex is held during I/O or while waiting.
 */
#include "locks/locks.h"
#include "topology/quorum.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FENCE_TTL_MIN_MS (INT64_C(24) * 3600 * 1000)
#define SUB_WAITED_US 200 /* a subscription wait this long or longer ended with its confirmation */

struct wl_qlock {
    int verdict[WL_QMAX]; /* the last attempt's, WATCHLOCK_MEMBER_* */
    int64_t fence_max;    /* the highest counter among the members that granted the hold */
    int64_t token;        /* > 0 raised; -WATCHLOCK_EUNAVAIL; 0 not asked yet */
    uint64_t token_gen;   /* the hold (hold_gen) token belongs to */
};

/* Raises the fencing counter to ARGV[2] on a member that still holds the
 * hold ("<token>." prefix ARGV[1]); never lowers it, and keeps the one
 * fence rule (proto.h WL_FENCE_LUA, issue 29.3): the counter becomes
 * max(counter, member's TIME in us, ARGV[2]), a new one with its TTL
 * ARGV[3]. -> 1 raised (or already that high) with our key there, 0 our
 * key is not there; an error when the counter cannot count. */
static const char raise_lua[] =
    WL_FENCE_LUA
    "local v = redis.pcall('GET', KEYS[1])\n"
    "if type(v) ~= 'string' or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then return 0 end\n"
    "local n = wl_fence(KEYS[2], false, ARGV[3])\n"
    "if type(n) ~= 'number' then return n end\n"
    "if n < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL') end\n"
    "return 1\n";

/* ---- one attempt ---- */

typedef struct tally {
    wl_quorum *q;
    int64_t valid_us; /* lease - drift */
    size_t granted, held, unreach, restarted;
    size_t wrongtype; /* of the unreachable: answered that the name is another kind there */
    int64_t fence;
    int64_t pttl[WL_QMAX]; /* the holders' leases left (ms) */
    size_t npttl;
    int verdict[WL_QMAX];
} tally;

static void count(tally *t, wl_qcall *call)
{
    wl_quorum *q = t->q;
    /* The restart rule is judged at this attempt's send: a member kept out
     * then stays out for the attempt, also when the tally is made again
     * after a call that ran to its time limit (a later `now` would count a
     * grant the decision did not, and turn a wait into a too-late grant). */
    int64_t now = call->sent_us;
    t->granted = t->held = t->unreach = t->restarted = t->npttl = t->wrongtype = 0;
    t->fence = 0;
    for (size_t k = 0; k < q->n; k++) {
        t->verdict[k] = WATCHLOCK_MEMBER_UNKNOWN;
        bool acquired;
        int64_t v;
        if (call->state[k] == WL_QM_PENDING)
            continue;
        if (call->state[k] != WL_QM_REPLIED || !wl_reply_acquire(call->reply[k], &acquired, &v) ||
            (acquired && !call->acked[k])) {
            t->verdict[k] = WATCHLOCK_MEMBER_UNREACHABLE;
            t->unreach++;
            const redisReply *r = call->state[k] == WL_QM_REPLIED ? call->reply[k] : NULL;
            t->wrongtype += r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
                            strstr(r->str, "WRONGTYPE") != NULL;
        } else if (!acquired) {
            t->verdict[k] = WATCHLOCK_MEMBER_HELD;
            t->held++;
            t->pttl[t->npttl++] = v;
        } else if (!wl_quorum_counts(q, k, now)) {
            t->verdict[k] = WATCHLOCK_MEMBER_RESTARTED;
            t->restarted++;
        } else {
            t->verdict[k] = WATCHLOCK_MEMBER_GRANTED;
            t->granted++;
            if (v > t->fence)
                t->fence = v;
        }
    }
}

/* A majority granted (late grants within the validity kept), or cannot. */
static bool decided(void *arg, wl_qcall *call)
{
    tally *t = arg;
    count(t, call);
    call->keep_until_us = t->granted >= t->q->majority ? call->sent_us + t->valid_us : 0;
    return t->granted >= t->q->majority || t->held + t->unreach + t->restarted > t->q->n - t->q->majority;
}

/* A failed attempt that had grants collided with another contender (a
 * split vote, whatever kept it from a majority: other waiters' grants, or
 * a key still on its way out): one rule, for the stats and the backoff. */
static bool collided(const tally *t)
{
    return t->granted > 0 && t->granted < t->q->majority;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The majority-th smallest of the members' times (us from now): when a
 * majority may be ours. INT64_MAX: a member unreachable; with too few
 * known, the latest known (0 if none). */
static int64_t majority_at(wl_quorum *q, int64_t *at)
{
    qsort(at, q->n, sizeof *at, cmp_i64);
    for (size_t k = q->majority; k-- > 0;)
        if (at[k] != INT64_MAX)
            return at[k];
    return 0;
}

/* How long until another attempt may succeed (us), from a failed one: the
 * time by which a majority of members may be ours, each member's own time
 * (one place): one that granted, now; one held by another owner, when the
 * lease it reported ends; one kept out by the restart rule, when its window
 * closes; one unreachable, not known (never). So a waiter kept out only by
 * a restart window wakes when it closes, also when other members are held
 * for longer (it slept until their leases ended: the retry time asked for
 * one held member more than a majority needed). *floor_us: the same with
 * every holder releasing now: before it no release can let us in (only the
 * restart windows' ends can), so no wake-up is worth an attempt before it
 * (the give-backs of other waiters in a window woke each other into a
 * storm of attempts). */
static int64_t retry_after_us(const tally *t, int64_t *floor_us)
{
    wl_quorum *q = t->q;
    int64_t at[WL_QMAX], free_at[WL_QMAX], now = wl_now_us();
    size_t held = 0;
    for (size_t k = 0; k < q->n; k++) {
        int64_t v = INT64_MAX, f = INT64_MAX;
        if (t->verdict[k] == WATCHLOCK_MEMBER_GRANTED) {
            v = f = 0;
        } else if (t->verdict[k] == WATCHLOCK_MEMBER_HELD && held < t->npttl) {
            int64_t p = t->pttl[held++];
            v = (p == -1 ? 1000 : p < 0 ? 0 : p) * 1000 + 1000; /* no expiry (not ours): look again in 1 s */
            f = 0;
        } else if (t->verdict[k] == WATCHLOCK_MEMBER_RESTARTED) {
            v = wl_quorum_counts_in_us(q, k, now) + 1000; /* the window's one rule (quorum_rule.c) */
            f = v;
        }
        at[k] = v;
        free_at[k] = f;
    }
    *floor_us = majority_at(q, free_at);
    return majority_at(q, at);
}

static void describe(const tally *t, char *buf, size_t size)
{
    snprintf(buf, size, "%zu of %zu members granted, %zu held by another owner, %zu unreachable, %zu restarted "
                        "(majority %zu)",
             t->granted, t->q->n, t->held, t->unreach, t->restarted, t->q->majority);
}

/* The plain lock's script of one attempt (wl_qacquire_fn, locks.h). */
static void plain_acquire_script(watchlock_lock *l, const char *ident, size_t ident_len, const char *lease_s,
                                 const char *fence_ttl_s, const char *const *owner, const char **argv, size_t *lens,
                                 wl_qscript *s)
{
    if (owner == NULL) {
        const char *a[5] = {l->hold.keys.lock, l->hold.keys.fence, ident, lease_s, fence_ttl_s};
        size_t n[5] = {l->hold.keys.lock_len, l->hold.keys.fence_len, ident_len, strlen(lease_s),
                       strlen(fence_ttl_s)};
        memcpy(argv, a, sizeof a);
        memcpy(lens, n, sizeof n);
        *s = (wl_qscript){WL_SCRIPT_ACQUIRE, NULL, 2, 3, argv, lens};
        return;
    }
    /* KEYS lock, fence, owner; ARGV ident, lease, fence TTL, host, pid, label */
    const char *a[9] = {l->hold.keys.lock, l->hold.keys.fence, l->hold.keys.owner, ident, lease_s, fence_ttl_s,
                        owner[0], owner[1], owner[2]};
    for (int i = 0; i < 9; i++)
        argv[i] = a[i], lens[i] = strlen(a[i]);
    lens[0] = l->hold.keys.lock_len, lens[1] = l->hold.keys.fence_len, lens[2] = l->hold.keys.owner_len;
    lens[3] = ident_len;
    *s = (wl_qscript){WL_SCRIPT_ACQUIRE, NULL, 3, 6, argv, lens};
}

/* One attempt. OK: held. ETIMEDOUT: not now (*t says why). Other errors. */
static int attempt(watchlock_lock *l, tally *t, wl_qacquire_fn script)
{
    watchlock_client *c = l->hold.client;
    wl_quorum *q = c->quorum;
    memset(t, 0, sizeof *t);
    t->q = q;
    if (wl_quorum_distinct(q) != WATCHLOCK_OK) /* a member turned out to be another's server */
        return WATCHLOCK_EINVAL;
    wl_release_args old, mine;
    bool drop_old, reentered;
    int brc = wl_attempt_begin(l, true, &old, &drop_old, &reentered); /* wait.c: a new token every attempt */
    if (brc != WATCHLOCK_OK || reentered)
        return brc;
    int64_t lease = l->hold.lease_ms;
    char ident[WL_IDENT_SIZE];
    size_t ident_len = wl_ident(&l->hold, 1, ident);
    wl_release_args_make(&l->hold, &mine);
    /* the owner record of a labelled handle, written on every member as
     * one server's acquire writes it (scripts.c: best effort) */
    char label[WATCHLOCK_MAX_LABEL + 1], host[256], pid[24];
    bool owned = l->owner_label != NULL && !l->hold.plain_value;
    if (owned)
        snprintf(label, sizeof label, "%s", l->owner_label);
    pthread_mutex_unlock(&c->mu);
    if (owned) {
        if (gethostname(host, sizeof host) != 0)
            host[0] = '\0';
        host[sizeof host - 1] = '\0';
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
    }
    if (drop_old)
        wl_quorum_release_best_effort(c, &old);
    wl_quorum_note_lease(q, lease);

    char lease_s[24], fence_ttl_s[24];
    wl_fmt_i64(lease_s, lease);
    wl_fmt_i64(fence_ttl_s, lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS);
    const char *argv[WL_QACQUIRE_MAX];
    size_t lens[WL_QACQUIRE_MAX];
    char record[sizeof host + sizeof pid + sizeof label + 3]; /* the queued kinds' form: host\npid\nlabel */
    if (owned)
        snprintf(record, sizeof record, "%s\n%s\n%s", host, pid, label);
    const char *owner[4] = {host, pid, label, record};
    wl_qscript give_back = {WL_SCRIPT_RELEASE, NULL, 1, WL_RELEASE_NARGS, mine.argv, mine.lens};
    wl_qcall call;
    memset(&call, 0, sizeof call);
    script(l, ident, ident_len, lease_s, fence_ttl_s, owned ? owner : NULL, argv, lens, &call.s);
    call.wait_replicas = true;
    call.after = &give_back;
    call.decided = decided;
    call.arg = t;
    int64_t margin = wl_margin_us(c, lease);
    int64_t cap_ms = (t->valid_us = lease * 1000 - margin) / 1000;
    if (c->server.ep.command_timeout_ms < cap_ms)
        cap_ms = c->server.ep.command_timeout_ms;
    wl_quorum_call(q, &call, cap_ms);
    count(t, &call);
    int64_t sent = call.sent_us, now = wl_now_us();
    int64_t deadline = sent + lease * 1000 - margin;
    bool ok = t->granted >= q->majority && now < deadline;
    bool skip[WL_QMAX];
    size_t grants = 0;
    for (size_t k = 0; k < q->n; k++) {
        bool acquired = false;
        int64_t v;
        skip[k] = !(call.state[k] == WL_QM_REPLIED && wl_reply_acquire(call.reply[k], &acquired, &v) && acquired);
        grants += !skip[k];
    }
    wl_qcall_clear(&call);
    pthread_mutex_lock(&c->mu);
    memcpy(l->quorum->verdict, t->verdict, sizeof t->verdict);
    if (ok && atomic_load(&c->closed))
        ok = false;
    if (!ok) {
        pthread_mutex_unlock(&c->mu);
        if (grants > 0) /* give back every grant (token-checked), all members at once */
            wl_quorum_release_best_effort(c, &mine);
        if (collided(t))
            atomic_fetch_add(&q->splits, 1);
        pthread_mutex_unlock(&l->io_mu);
        if (atomic_load(&c->closed))
            return wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed", l->hold.quoted);
        if (t->granted >= q->majority) /* granted, but too late to be valid */
            return wl_fail(WATCHLOCK_ECONN,
                           "acquire %s: a majority granted only after %" PRId64
                           " ms, past the validity of a %" PRId64 " ms lease; the grants were given back",
                           l->hold.quoted, (now - sent) / 1000, lease);
        return WATCHLOCK_ETIMEDOUT;
    }
    l->token_used = true;
    l->quorum->fence_max = t->fence;
    l->quorum->token = 0;
    int rc = wl_hold_begin(c, &l->hold, t->fence, sent, lease, deadline);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

/* The wake-ups a failed attempt causes itself: its give-back publishes a
 * release on every member that granted it (counted or not) and that we
 * listen to. Not counted as wake-ups (it would wake itself into a loop);
 * one missing (a key gone before the give-back) costs at most an
 * answered wake-up, and the wait stays bounded by the lease. */
static uint64_t own_wakeups(const tally *t, wl_sub_entry *const *entries)
{
    uint64_t n = 0;
    for (size_t k = 0; k < t->q->n; k++)
        n += entries[k] != NULL &&
             (t->verdict[k] == WATCHLOCK_MEMBER_GRANTED || t->verdict[k] == WATCHLOCK_MEMBER_RESTARTED);
    return n;
}

int wl_quorum_acquire(watchlock_lock *l, int64_t wait_ms)
{
    return wl_quorum_acquire_with(l, wait_ms, plain_acquire_script);
}

int wl_quorum_acquire_with(watchlock_lock *l, int64_t wait_ms, wl_qacquire_fn script)
{
    watchlock_client *c = l->hold.client;
    wl_quorum *q = c->quorum;
    bool done;
    int rc = wl_acquire_begin(l, &done); /* release.c: reentrant, the interval's check, a pending release */
    if (rc != WATCHLOCK_OK || done)
        return rc;
    pthread_mutex_lock(&c->mu);
    if (l->quorum == NULL && (l->quorum = calloc(1, sizeof *l->quorum)) == NULL)
        rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    pthread_mutex_unlock(&c->mu);
    if (rc != WATCHLOCK_OK)
        return rc;

    int64_t t0_us = wl_now_us();
    int64_t until = wl_deadline_after_ms(wait_ms);
    tally t;
    rc = attempt(l, &t, script);
    int64_t rtt_us = t.unreach == 0 ? wl_now_us() - t0_us : 0; /* the longest attempt: scales the slice */
    int collisions = 0;                                          /* attempts in a row that collided */
    bool waited = false;
    wl_sub_entry *entries[WL_QMAX] = {0};
    wl_sub_notify nodes[WL_QMAX];
    wl_qwait ws = {.count = 0};
    bool ws_made = false;
    uint64_t seen = 0; /* wake-ups answered: counted before the last attempt, plus its give-backs' */
    while (rc == WATCHLOCK_ETIMEDOUT && wait_ms != 0 && t.unreach < q->majority) {
        if (!ws_made) {
            if (pthread_mutex_init(&ws.mu, NULL) != 0 || wl_cond_init(&ws.cond) != 0) {
                rc = wl_fail(WATCHLOCK_EINTERNAL, "cannot initialise a condition variable");
                break;
            }
            ws_made = true;
            waited = true;
            /* Subscribed on every member before the next attempt, so that a
             * release after it wakes us, whichever member publishes first. */
            int64_t subscribed_us = wl_now_us();
            for (size_t k = 0; k < q->n; k++) {
                if (wl_sub_join(q->m[k].sub, l->hold.keys.channel, l->hold.keys.channel_len, &entries[k]) !=
                    WATCHLOCK_OK) {
                    entries[k] = NULL; /* that member's wake-ups are missed: the lease bounds the wait */
                    continue;
                }
                nodes[k] = (wl_sub_notify){wl_qwait_signal, &ws, NULL};
                wl_sub_notify_add(q->m[k].sub, entries[k], &nodes[k]);
            }
            int64_t ready_by = wl_now_us() + 100000; /* subscriptions run in parallel; a stopped member's is not awaited */
            if (until >= 0 && until < ready_by)
                ready_by = until;
            /* A member's subscription is confirmed one round trip (to that
             * member) after it was sent: the longest of the confirmed ones
             * measures the far members, whose answers an attempt decided by
             * near members never waits for. Only a wait that ended with the
             * confirmation times it (one confirmed earlier, while we waited
             * for a frozen member, would take that wait for its own). */
            for (size_t k = 0; k < q->n; k++) {
                bool live = false;
                int64_t before = wl_now_us();
                if (entries[k] != NULL)
                    wl_sub_ready(q->m[k].sub, entries[k], ready_by, &live);
                int64_t after = wl_now_us();
                if (live && after - before > SUB_WAITED_US && after - subscribed_us > rtt_us)
                    rtt_us = after - subscribed_us;
            }
            seen = wl_qwait_count(&ws);
            if (atomic_load(&c->closed)) {
                rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
                break;
            }
            rc = attempt(l, &t, script);
            seen += own_wakeups(&t, entries);
            if (rc != WATCHLOCK_ETIMEDOUT || t.unreach >= q->majority)
                break;
        }
        collisions = collided(&t) ? collisions + 1 : 0;
        int64_t floor_us, bound = retry_after_us(&t, &floor_us);
        int64_t at = wl_now_us() + bound + wl_jitter_us(bound / 8 + 1000);
        if (until >= 0 && until < at)
            at = until;
        if (floor_us > 0) /* only time lets us in before then: releases are not worth an attempt */
            wl_qwait_until(&ws, seen, until >= 0 && until < wl_now_us() + floor_us ? until : wl_now_us() + floor_us,
                           false);
        bool woken = wl_qwait_until(&ws, seen, at, true);
        if (!woken && until >= 0 && wl_now_us() >= until)
            break;
        int64_t spread_until = /* one attempt per release */
            wl_now_us() + wl_qwait_spread_us(collisions, rtt_us, l->hold.lease_ms);
        wl_qwait_until(&ws, seen, until >= 0 && until < spread_until ? until : spread_until, false);
        if (atomic_load(&c->closed)) {
            rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
            break;
        }
        seen = wl_qwait_count(&ws); /* the wake-ups so far are answered by this attempt */
        int64_t a0 = wl_now_us();
        rc = attempt(l, &t, script);
        if (t.unreach == 0 && wl_now_us() - a0 > rtt_us)
            rtt_us = wl_now_us() - a0;
        seen += own_wakeups(&t, entries);
    }
    for (size_t k = 0; k < q->n; k++)
        if (entries[k] != NULL) {
            wl_sub_notify_remove(q->m[k].sub, entries[k], &nodes[k]);
            wl_sub_leave(q->m[k].sub, entries[k]);
        }
    if (ws_made) {
        pthread_cond_destroy(&ws.cond);
        pthread_mutex_destroy(&ws.mu);
    }
    wl_acquire_record(l, rc, waited, t0_us);
    if (rc != WATCHLOCK_ETIMEDOUT)
        return rc;
    char why[200];
    describe(&t, why, sizeof why);
    if (t.held >= q->majority || (t.unreach == 0 && t.held > 0))
        return wl_fail(WATCHLOCK_ETIMEDOUT, "lock %s is held by another owner%s: %s", l->hold.quoted,
                       wait_ms == 0 ? "" : " and was not released in time", why);
    if (t.wrongtype >= q->majority)
        return wl_fail(WATCHLOCK_EWRONGTYPE, "lock %s: a majority of members use the name as another lock kind: %s",
                       l->hold.quoted, why);
    return wl_fail(WATCHLOCK_ECONN, "lock %s: no majority of members could grant it (unreachable or restarted): %s",
                   l->hold.quoted, why);
}

/* ---- extend ---- */

int wl_quorum_extend(watchlock_lock *l, int64_t lease_ms)
{
    watchlock_client *c = l->hold.client;
    wl_quorum *q = c->quorum;
    int brc = wl_extend_begin(l, lease_ms); /* handle.c: io_mu, client->mu held on OK */
    if (brc != WATCHLOCK_OK)
        return brc;
    wl_quorum_note_lease(q, l->hold.lease_ms);
    wl_write w;
    wl_write_prepare(c, &l->hold, l->hold.lease_ms, wl_now_us(), &w);
    char ident[WL_IDENT_SIZE], from_s[24], ms_s[24];
    size_t ident_len = wl_ident(&l->hold, w.to, ident);
    wl_fmt_i64(from_s, w.from);
    wl_fmt_i64(ms_s, w.ms);
    int64_t left_ms = (l->hold.deadline_us - wl_now_us()) / 1000;
    pthread_mutex_unlock(&c->mu);

    const char *argv[4] = {l->hold.keys.lock, ident, from_s, ms_s};
    size_t lens[4] = {l->hold.keys.lock_len, ident_len, strlen(from_s), strlen(ms_s)};
    wl_qcall call;
    memset(&call, 0, sizeof call);
    call.s = (wl_qscript){WL_SCRIPT_RENEW, NULL, 1, 3, argv, lens};
    call.wait_replicas = true;
    int64_t cap_ms = c->server.ep.command_timeout_ms < left_ms ? c->server.ep.command_timeout_ms : left_ms;
    wl_quorum_call(q, &call, cap_ms);
    int res[WL_QMAX];
    for (size_t k = 0; k < q->n; k++) {
        res[k] = call.state[k] == WL_QM_REPLIED ? wl_reply_renew(call.reply[k], 1, 0) : WL_WRITE_FAILED;
        if (res[k] == WL_WRITE_OK && !call.acked[k])
            res[k] = WL_WRITE_FAILED;
    }
    wl_qcall_clear(&call);
    int result = wl_quorum_verdict(q, res, w.sent);
    pthread_mutex_lock(&c->mu);
    bool held = wl_write_applied(c, &l->hold, &w, result, false, wl_now_us());
    if (held && result == WL_WRITE_OK)
        wl_watchdog_schedule(c, &l->hold);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    if (!held)
        return wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: the lock was lost (no majority of members holds it)",
                       l->hold.quoted);
    if (result != WL_WRITE_OK)
        return wl_fail(WATCHLOCK_ECONN, "extend %s: fewer than a majority (%zu of %zu) of members confirmed it",
                       l->hold.quoted, q->majority, q->n);
    return WATCHLOCK_OK;
}

/* ---- fencing ---- */

/* A raise is decided once a majority confirmed it, or cannot any more. */
static bool raise_decided(void *arg, wl_qcall *call)
{
    wl_quorum *q = arg;
    size_t yes = 0, no = 0;
    for (size_t k = 0; k < q->n; k++) {
        if (call->state[k] == WL_QM_PENDING)
            continue;
        bool ok = call->state[k] == WL_QM_REPLIED && call->acked[k] && call->reply[k]->type == REDIS_REPLY_INTEGER &&
                  call->reply[k]->integer == 1;
        yes += ok;
        no += !ok;
    }
    return yes >= q->majority || no > q->n - q->majority;
}

static int64_t raise_token(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_quorum *q = c->quorum;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    struct wl_qlock *ql = l->quorum;
    uint64_t gen = l->hold.hold_gen;
    if (ql->token != 0 && ql->token_gen == gen) { /* raised by another thread meanwhile */
        int64_t v = ql->token;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return v;
    }
    int64_t T = ql->fence_max, deadline = l->hold.deadline_us;
    bool held = wl_held_now(l);
    wl_release_args a;
    wl_release_args_make(&l->hold, &a); /* a.prefix: "<token>." */
    int64_t lease = l->hold.lease_ms;
    pthread_mutex_unlock(&c->mu);
    size_t confirmed = 0;
    if (held) {
        char t_s[24], ttl_s[24];
        wl_fmt_i64(t_s, T);
        wl_fmt_i64(ttl_s, lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS);
        const char *argv[5] = {l->hold.keys.lock, l->hold.keys.fence, a.prefix, t_s, ttl_s};
        size_t lens[5] = {l->hold.keys.lock_len, l->hold.keys.fence_len, strlen(a.prefix), strlen(t_s),
                          strlen(ttl_s)};
        wl_qcall call;
        memset(&call, 0, sizeof call);
        call.s = (wl_qscript){-1, raise_lua, 2, 3, argv, lens};
        call.wait_replicas = true;
        call.decided = raise_decided;
        call.arg = q;
        wl_quorum_call(q, &call, (deadline - wl_now_us()) / 1000);
        for (size_t k = 0; k < q->n; k++)
            confirmed += call.state[k] == WL_QM_REPLIED && call.acked[k] && call.reply[k]->type == REDIS_REPLY_INTEGER &&
                         call.reply[k]->integer == 1;
        wl_qcall_clear(&call);
    }
    pthread_mutex_lock(&c->mu);
    int64_t v = confirmed >= q->majority && wl_now_us() < deadline ? T : -WATCHLOCK_EUNAVAIL;
    if (l->hold.hold_gen == gen) {
        ql->token = v;
        ql->token_gen = gen;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    if (v < 0)
        atomic_fetch_add(&q->fence_unavailable, 1);
    return v;
}

int64_t watchlock_lock_fencing_token(const watchlock_lock *cl)
{
    if (cl == NULL || cl->fork_gen != wl_fork_generation())
        return 0;
    watchlock_client *c = cl->hold.client;
    if (c->quorum == NULL || cl->quorum == NULL) /* not acquired yet, or a kind of its own (multi: raised at acquire) */
        return wl_lock_fence(cl);
    watchlock_lock *l = (watchlock_lock *)cl; /* the raise changes the handle's state */
    pthread_mutex_lock(&c->mu);
    struct wl_qlock *ql = l->quorum;
    int64_t v = ql == NULL ? 0 : ql->token;
    bool ask = ql != NULL && ql->fence_max != 0 && (ql->token == 0 || ql->token_gen != l->hold.hold_gen) &&
               l->hold.state == WATCHLOCK_HELD;
    if (ql != NULL && !ask && v == 0 && ql->fence_max != 0)
        v = -WATCHLOCK_EUNAVAIL; /* never raised, and the hold is over */
    pthread_mutex_unlock(&c->mu);
    return ask ? raise_token(l) : v;
}

int watchlock_lock_member_status(const watchlock_lock *l, size_t i)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return WATCHLOCK_MEMBER_UNKNOWN;
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&c->mu);
    int v = WATCHLOCK_MEMBER_UNKNOWN;
    if (c->quorum != NULL && l->quorum != NULL && i < c->quorum->n)
        v = l->quorum->verdict[i];
    else if (c->quorum == NULL && i == 0 && l->token_used)
        v = l->last_busy ? WATCHLOCK_MEMBER_HELD : WATCHLOCK_MEMBER_GRANTED;
    pthread_mutex_unlock(&c->mu);
    return v;
}

/* ---- the quorum client's plain lock: its table (locks.h) ---- */

int wl_quorum_extend_checked(watchlock_lock *l, int64_t lease_ms)
{
    int rc = wl_extend_lease_check(l, lease_ms);
    return rc != WATCHLOCK_OK ? rc : wl_quorum_extend(l, lease_ms);
}

/* Every member at once, a majority confirms (hold/quorum_round.c). */
int wl_quorum_send_release(watchlock_lock *l, const wl_release_args *a, int64_t deadline_us, const char *what,
                           int64_t *result, bool *resent)
{
    (void)what;
    (void)resent;
    watchlock_client *c = l->hold.client;
    int64_t cap_ms = c->server.ep.command_timeout_ms, left_ms = (deadline_us - wl_now_us()) / 1000;
    int r = 0;
    int rc = wl_quorum_release(c, a, left_ms > 0 && left_ms < cap_ms ? left_ms : cap_ms, &r);
    *result = r;
    return rc;
}

/* A hold declared lost by its local deadline: every member (as one server's). */
void wl_quorum_release_lost(watchlock_lock *l, const wl_release_args *a, int reason)
{
    if (reason != WATCHLOCK_LOST_TAKEN)
        wl_quorum_release_best_effort(l->hold.client, a);
}

static void quorum_destroy(watchlock_lock *l)
{
    free(l->quorum); /* the per-member state, made at the first acquire */
    l->quorum = NULL;
}

static const wl_lock_ops quorum_lock_ops = {.acquire = wl_quorum_acquire,
                                            .release = wl_release_one,
                                            .extend = wl_quorum_extend_checked,
                                            .free = wl_handle_free,
                                            .abandon = wl_handle_abandon,
                                            .destroy = quorum_destroy,
                                            .send_release = wl_quorum_send_release,
                                            .release_lost = wl_quorum_release_lost,
                                            .name_layout = false};

const wl_lock_ops *wl_quorum_kind(const watchlock_client *c, const wl_lock_ops *single)
{
    return c != NULL && c->quorum != NULL ? &quorum_lock_ops : single;
}
