/*
 * quorum_multi.c - the multi-lock on a quorum client (Redlock; issue 30.3):
 * where the multi-lock kind (multi.c, multi_io.c) meets the quorum
 * placement, as the multi-lock's table of round trips (multi.h
 * wl_multi_io): acquire here, release and extend's writes in
 * quorum_multi_release.c. docs/design.md "Quorum" says why it is safe.
 *
 * Acquire: one attempt writes the multi-lock's acquire script (all names,
 * all or nothing on each member: the members are single servers) to every
 * member at once, with a fresh token per name, as the plain quorum lock
 * does (quorum_lock.c). It holds when a majority of the members that count
 * (the restart rule, wl_quorum_counts) granted ALL its names within the
 * validity: lease - elapsed since the send - drift (wl_margin_us); the
 * majority verdict is the quorum's own (wl_quorum_verdict). Each name's
 * fencing token is the plain quorum's rule: the highest counter among the
 * members that granted, raised (never lowered) on a majority of ALL
 * members that still hold our keys before the acquire returns. A failed
 * attempt gives back every grant on every member (a token-checked release,
 * pipelined behind the acquire on a member still pending, so an uncertain
 * reply is given back too). Waiting: the channels of the names found held
 * are joined on every member before the next attempt; a release there
 * wakes it, and no sleep outlasts the shortest lease a member reported.
 *
 * Each name's hold is a plain hold of the hold layer: the watchdog renews
 * it through the quorum's round (a majority per name), the loss timer
 * declares it lost at its local deadline, the client's close releases it
 * on every member, and the group (multi.c) turns one name's loss into the
 * multi-lock's.
 *
 * Locks: the group's io_mu for a whole acquire (multi_io.c's rule), then
 * client->mu around every read and write of a hold, never across I/O.
 */
#include "locks/multi.h"
#include "topology/quorum.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FENCE_TTL_MIN_MS (INT64_C(24) * 3600 * 1000)

/* Raises each name's fencing counter to its token on a member that still
 * holds every name of the hold, by the one fence rule (proto.h
 * WL_FENCE_LUA): max(counter, member's TIME in us, token). KEYS: lock,
 * fence per name; ARGV: fence TTL, then per name "<token>." and the token.
 * -> 1 raised with all our keys there, 0 a key is not ours there. */
static const char raise_lua[] =
    WL_FENCE_LUA
    "local n = #KEYS / 2\n"
    "for i = 1, n do\n"
    "  local v, p = redis.pcall('GET', KEYS[2 * i - 1]), ARGV[2 * i]\n"
    "  if type(v) ~= 'string' or string.sub(v, 1, #p) ~= p then return 0 end\n"
    "end\n"
    "for i = 1, n do\n"
    "  local c = wl_fence(KEYS[2 * i], false, ARGV[1])\n"
    "  if type(c) ~= 'number' then return c end\n"
    "  if c < tonumber(ARGV[2 * i + 1]) then redis.call('SET', KEYS[2 * i], ARGV[2 * i + 1], 'KEEPTTL') end\n"
    "end\n"
    "return 1\n";

/* One attempt's answers. */
typedef struct qm_tally {
    wl_quorum *q;
    size_t n;         /* names */
    int64_t valid_us; /* lease - drift */
    size_t granted, held, unreach, restarted;
    bool won; /* the quorum's verdict: a majority of the members that count granted every name */
    int verdict[WL_QMAX];   /* WATCHLOCK_MEMBER_* */
    int64_t pttl[WL_QMAX];  /* a held member's: the holder's lease left (ms) */
    size_t busy[WL_QMAX];   /* a held member's: the name it found held (sorted index) */
} qm_tally;

/* A member's reply: 1 all granted (fences in r), 0 a name held, -1 not known. */
static int reply_kind(const qm_tally *t, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return -1;
    int64_t v0 = wl_reply_i64(r->element[0]);
    if (v0 == 1 && r->elements == t->n + 1)
        return 1;
    if (v0 == 0 && r->elements == 3)
        return 0;
    return -1;
}

static void count(qm_tally *t, const wl_qcall *call)
{
    wl_quorum *q = t->q;
    int res[WL_QMAX];
    t->granted = t->held = t->unreach = t->restarted = 0;
    for (size_t k = 0; k < q->n; k++) {
        t->verdict[k] = WATCHLOCK_MEMBER_UNKNOWN;
        res[k] = WL_WRITE_FAILED;
        if (call->state[k] == WL_QM_PENDING)
            continue;
        int kind = call->state[k] == WL_QM_REPLIED ? reply_kind(t, call->reply[k]) : -1;
        if (kind < 0 || (kind == 1 && !call->acked[k])) {
            t->verdict[k] = WATCHLOCK_MEMBER_UNREACHABLE;
            t->unreach++;
        } else if (kind == 0) {
            t->verdict[k] = WATCHLOCK_MEMBER_HELD;
            t->held++;
            int64_t i = wl_reply_i64(call->reply[k]->element[1]);
            t->busy[k] = i >= 1 && (size_t)i <= t->n ? (size_t)i - 1 : 0;
            t->pttl[k] = wl_reply_i64(call->reply[k]->element[2]);
            res[k] = WL_WRITE_NOT_OWNER;
        } else if (!wl_quorum_counts(q, k, call->sent_us)) { /* the restart rule, judged at the send */
            t->verdict[k] = WATCHLOCK_MEMBER_RESTARTED;
            t->restarted++;
        } else {
            t->verdict[k] = WATCHLOCK_MEMBER_GRANTED;
            t->granted++;
            res[k] = WL_WRITE_OK;
        }
    }
    t->won = wl_quorum_verdict(q, res, call->sent_us) == WL_WRITE_OK;
}

static bool decided(void *arg, wl_qcall *call)
{
    qm_tally *t = arg;
    count(t, call);
    bool won = t->won;
    call->keep_until_us = won ? call->sent_us + t->valid_us : 0;
    return won || t->held + t->unreach + t->restarted > t->q->n - t->q->majority;
}

/* A raise is decided once a majority confirmed it, or cannot any more. */
static size_t raised(const wl_quorum *q, const wl_qcall *call, size_t *no)
{
    size_t yes = 0;
    *no = 0;
    for (size_t k = 0; k < q->n; k++) {
        if (call->state[k] == WL_QM_PENDING)
            continue;
        bool ok = call->state[k] == WL_QM_REPLIED && call->acked[k] && call->reply[k]->type == REDIS_REPLY_INTEGER &&
                  call->reply[k]->integer == 1;
        yes += ok;
        *no += !ok;
    }
    return yes;
}

static bool raise_decided(void *arg, wl_qcall *call)
{
    wl_quorum *q = arg;
    size_t no, yes = raised(q, call, &no);
    return yes >= q->majority || no > q->n - q->majority;
}

/* The argument lists of one attempt (sorted members): the acquire
 * script's, the give-back's (the multi release script) and the raise's. */
typedef struct qm_args {
    const char **acq, **rel, **rai;
    size_t *acq_len, *rel_len, *rai_len;
    char (*ident)[WL_IDENT_SIZE];
    char (*prefix)[WL_IDENT_SIZE];
    char (*fence_s)[24];
    int64_t *fence;
    char lease_s[24], ttl_s[24];
} qm_args;

static void args_free(qm_args *a)
{
    free(a->acq), free(a->rel), free(a->rai), free(a->acq_len), free(a->rel_len), free(a->rai_len);
    free(a->ident), free(a->prefix), free(a->fence_s), free(a->fence);
}

static int args_new(qm_args *a, size_t n)
{
    memset(a, 0, sizeof *a);
    a->acq = malloc((3 * n + 2) * sizeof *a->acq), a->acq_len = malloc((3 * n + 2) * sizeof *a->acq_len);
    a->rel = malloc((3 * n + 1) * sizeof *a->rel), a->rel_len = malloc((3 * n + 1) * sizeof *a->rel_len);
    a->rai = malloc((4 * n + 1) * sizeof *a->rai), a->rai_len = malloc((4 * n + 1) * sizeof *a->rai_len);
    a->ident = malloc(n * sizeof *a->ident), a->prefix = malloc(n * sizeof *a->prefix);
    a->fence_s = malloc(n * sizeof *a->fence_s), a->fence = calloc(n, sizeof *a->fence);
    if (!a->acq || !a->acq_len || !a->rel || !a->rel_len || !a->rai || !a->rai_len || !a->ident || !a->prefix ||
        !a->fence_s || !a->fence) {
        args_free(a);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    return WATCHLOCK_OK;
}

/* One attempt, io_mu held. OK: every name HELD (the group not yet).
 * ETIMEDOUT: not now (*t says why). ECONN: granted too late, or the fence
 * raise failed. Other errors. Nothing is kept on failure. */
static int attempt(watchlock_lock *l, qm_tally *t, qm_args *a)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    wl_quorum *q = c->quorum;
    size_t n = m->n;
    memset(t, 0, sizeof *t);
    t->q = q;
    t->n = n;
    int rc = wl_quorum_distinct(q); /* a member turned out to be another's server */
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *publish = wl_publish_command(&c->server);
    pthread_mutex_lock(&c->mu);
    int64_t lease = l->hold.lease_ms;
    /* A fresh token per name at every attempt (quorum_lock.c's rule): a
     * give-back of this attempt that lands late never deletes a later
     * attempt's key. */
    for (size_t i = 0; i < n; i++) {
        wl_hold *h = &m->m[i].hold, *g = &l->hold;
        if (wl_random_token(h->token) != 0) {
            pthread_mutex_unlock(&c->mu);
            return wl_fail(WATCHLOCK_EINTERNAL, "acquire %s: getrandom failed", l->hold.quoted);
        }
        h->lease_ms = g->lease_ms, h->interval_ms = g->interval_ms;
        h->max_renewals = g->max_renewals, h->max_hold_ms = g->max_hold_ms;
        h->renew_num = g->renew_num, h->renew_den = g->renew_den;
        h->auto_renew = g->auto_renew;
        a->acq[2 * i] = h->keys.lock, a->acq_len[2 * i] = h->keys.lock_len;
        a->acq[2 * i + 1] = h->keys.fence, a->acq_len[2 * i + 1] = h->keys.fence_len;
        a->acq[2 * n + 2 + i] = a->ident[i], a->acq_len[2 * n + 2 + i] = wl_ident(h, 1, a->ident[i]);
        size_t plen = wl_ident(h, -1, a->prefix[i]);
        a->rel[i] = h->keys.lock, a->rel_len[i] = h->keys.lock_len;
        a->rel[n + 2 * i] = a->prefix[i], a->rel_len[n + 2 * i] = plen;
        a->rel[n + 2 * i + 1] = h->keys.channel, a->rel_len[n + 2 * i + 1] = h->keys.channel_len;
        a->rai[2 * i] = h->keys.lock, a->rai_len[2 * i] = h->keys.lock_len;
        a->rai[2 * i + 1] = h->keys.fence, a->rai_len[2 * i + 1] = h->keys.fence_len;
        a->rai[2 * n + 1 + 2 * i] = a->prefix[i], a->rai_len[2 * n + 1 + 2 * i] = plen;
    }
    l->token_used = false;
    l->token_lease_ms = lease;
    pthread_mutex_unlock(&c->mu);
    wl_quorum_note_lease(q, lease);
    wl_fmt_i64(a->lease_s, lease);
    wl_fmt_i64(a->ttl_s, lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS);
    a->acq[2 * n] = a->lease_s, a->acq_len[2 * n] = strlen(a->lease_s);
    a->acq[2 * n + 1] = a->ttl_s, a->acq_len[2 * n + 1] = strlen(a->ttl_s);
    a->rel[3 * n] = publish, a->rel_len[3 * n] = strlen(publish);
    a->rai[2 * n] = a->ttl_s, a->rai_len[2 * n] = strlen(a->ttl_s);

    wl_qscript give_back = {WL_SCRIPT_MULTI_RELEASE, NULL, (int)n, (int)(2 * n + 1), a->rel, a->rel_len};
    wl_qcall call;
    memset(&call, 0, sizeof call);
    call.s = (wl_qscript){WL_SCRIPT_MULTI_ACQUIRE, NULL, (int)(2 * n), (int)(n + 2), a->acq, a->acq_len};
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
    int64_t sent = call.sent_us, deadline = sent + lease * 1000 - margin;
    bool ok = t->won && wl_now_us() < deadline && !atomic_load(&c->closed);
    size_t grants = 0;
    for (size_t k = 0; k < q->n; k++) {
        bool got = call.state[k] == WL_QM_REPLIED && reply_kind(t, call.reply[k]) == 1;
        grants += got;
        /* each name's token: the highest among the members that granted and count */
        for (size_t i = 0; got && t->verdict[k] == WATCHLOCK_MEMBER_GRANTED && i < n; i++) {
            int64_t v = wl_reply_i64(call.reply[k]->element[i + 1]);
            if (v > a->fence[i])
                a->fence[i] = v;
        }
    }
    wl_qcall_clear(&call);
    bool raise_failed = false;
    if (ok) { /* the tokens raised on a majority of all members before they are handed out */
        for (size_t i = 0; i < n; i++) {
            wl_fmt_i64(a->fence_s[i], a->fence[i]);
            a->rai[2 * n + 2 + 2 * i] = a->fence_s[i], a->rai_len[2 * n + 2 + 2 * i] = strlen(a->fence_s[i]);
        }
        wl_qcall r;
        memset(&r, 0, sizeof r);
        r.s = (wl_qscript){-1, raise_lua, (int)(2 * n), (int)(2 * n + 1), a->rai, a->rai_len};
        r.wait_replicas = true;
        r.decided = raise_decided;
        r.arg = q;
        wl_quorum_call(q, &r, (deadline - wl_now_us()) / 1000);
        size_t no;
        ok = raised(q, &r, &no) >= q->majority && wl_now_us() < deadline && !atomic_load(&c->closed);
        raise_failed = !ok;
        wl_qcall_clear(&r);
    }
    if (!ok) {
        if (grants > 0) /* every grant back (token-checked), all members at once */
            wl_quorum_send(q, &give_back, NULL);
        if (t->granted > 0 && t->granted < q->majority)
            atomic_fetch_add(&q->splits, 1);
        if (atomic_load(&c->closed))
            return wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed", l->hold.quoted);
        if (raise_failed)
            return wl_fail(WATCHLOCK_ECONN,
                           "acquire %s: a majority granted every name, but fewer than a majority confirmed the "
                           "fencing tokens within the validity of a %" PRId64 " ms lease; the grants were given back",
                           l->hold.quoted, lease);
        if (t->won)
            return wl_fail(WATCHLOCK_ECONN,
                           "acquire %s: a majority granted every name only past the validity of a %" PRId64
                           " ms lease; the grants were given back",
                           l->hold.quoted, lease);
        return WATCHLOCK_ETIMEDOUT;
    }
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closed)) { /* closed meanwhile: close released what it knew of, not these */
        pthread_mutex_unlock(&c->mu);
        wl_quorum_send(q, &give_back, NULL);
        return wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed", l->hold.quoted);
    }
    l->token_used = true;
    for (size_t i = 0; i < n && rc == WATCHLOCK_OK; i++)
        rc = wl_hold_begin(c, &m->m[i].hold, a->fence[i], sent, lease, deadline);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Joins name i's channel on every member (once per acquire). */
static void join_name(watchlock_lock *l, size_t i, wl_sub_entry **entries, wl_sub_notify *nodes, wl_qwait *ws,
                      int64_t until)
{
    wl_quorum *q = l->hold.client->quorum;
    const wl_hold *h = &multi_of(l)->m[i].hold;
    wl_sub_entry **e = entries + i * q->n;
    for (size_t k = 0; k < q->n; k++) {
        if (wl_sub_join(q->m[k].sub, h->keys.channel, h->keys.channel_len, &e[k]) != WATCHLOCK_OK) {
            e[k] = NULL; /* that member's wake-ups are missed: the leases bound the wait */
            continue;
        }
        nodes[i * q->n + k] = (wl_sub_notify){wl_qwait_signal, ws, NULL};
        wl_sub_notify_add(q->m[k].sub, e[k], &nodes[i * q->n + k]);
    }
    int64_t ready_by = wl_now_us() + 100000; /* a stopped member's confirmation is not awaited */
    if (until >= 0 && until < ready_by)
        ready_by = until;
    for (size_t k = 0; k < q->n; k++) {
        bool live;
        if (e[k] != NULL)
            wl_sub_ready(q->m[k].sub, e[k], ready_by, &live);
    }
}

/* When another attempt may succeed (us from now), from a failed one: the
 * shortest lease a holding member reported, or a restart window's end. */
static int64_t retry_after_us(const qm_tally *t)
{
    int64_t best = INT64_MAX, now = wl_now_us();
    for (size_t k = 0; k < t->q->n; k++) {
        int64_t v = INT64_MAX;
        if (t->verdict[k] == WATCHLOCK_MEMBER_HELD)
            v = (t->pttl[k] == -1 ? 1000 : t->pttl[k] < 0 ? 0 : t->pttl[k]) * 1000 + 1000;
        else if (t->verdict[k] == WATCHLOCK_MEMBER_RESTARTED)
            v = wl_quorum_counts_in_us(t->q, k, now) + 1000;
        if (v < best)
            best = v;
    }
    return best == INT64_MAX ? 1000000 : best;
}

static int qm_acquire(watchlock_lock *l, int64_t wait_ms)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    wl_quorum *q = c->quorum;
    bool reentered;
    int rc = wl_multi_begin(l, &reentered); /* multi_io.c: io_mu held on OK */
    if (rc != WATCHLOCK_OK || reentered)
        return rc;
    qm_args a;
    if ((rc = args_new(&a, m->n)) != WATCHLOCK_OK) {
        pthread_mutex_unlock(&l->io_mu);
        return rc;
    }

    int64_t t0 = wl_now_us(), until = wl_deadline_after_ms(wait_ms), rtt_us = 0;
    size_t N = q->n;
    wl_sub_entry **entries = NULL;
    wl_sub_notify *nodes = NULL;
    bool *joined = NULL;
    wl_qwait ws = {.count = 0};
    bool ws_made = false, waited = false;
    int collisions = 0;
    uint64_t seen = 0;
    qm_tally t;
    for (;;) {
        int64_t a0 = wl_now_us();
        rc = attempt(l, &t, &a);
        if (t.unreach == 0 && wl_now_us() - a0 > rtt_us)
            rtt_us = wl_now_us() - a0;
        /* this attempt's own give-backs publish on the joined channels of
         * the members that granted: not wake-ups of ours */
        for (size_t i = 0; entries != NULL && rc != WATCHLOCK_OK && i < m->n * N; i++)
            seen += entries[i] != NULL && (t.verdict[i % N] == WATCHLOCK_MEMBER_GRANTED ||
                                           t.verdict[i % N] == WATCHLOCK_MEMBER_RESTARTED);
        if (rc == WATCHLOCK_OK) {
            pthread_mutex_lock(&c->mu);
            bool held = wl_multi_group_begin(l);
            pthread_mutex_unlock(&c->mu);
            if (held)
                break;
            wl_multi_rollback(l); /* a name was lost before the group began: again */
            rc = WATCHLOCK_ETIMEDOUT;
        }
        if (rc != WATCHLOCK_ETIMEDOUT || wait_ms == 0 || t.unreach >= q->majority)
            break;
        if (until >= 0 && wl_now_us() >= until)
            break;
        if (!ws_made) {
            entries = calloc(m->n * N, sizeof *entries);
            nodes = calloc(m->n * N, sizeof *nodes);
            joined = calloc(m->n, sizeof *joined);
            if (entries == NULL || nodes == NULL || joined == NULL) {
                rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
                break;
            }
            if (pthread_mutex_init(&ws.mu, NULL) != 0 || wl_cond_init(&ws.cond) != 0) {
                rc = wl_fail(WATCHLOCK_EINTERNAL, "cannot initialise a condition variable");
                break;
            }
            ws_made = waited = true;
        }
        /* the names found held: their channels joined before the next attempt */
        bool fresh = false;
        for (size_t k = 0; k < N; k++)
            if (t.verdict[k] == WATCHLOCK_MEMBER_HELD && !joined[t.busy[k]]) {
                joined[t.busy[k]] = fresh = true;
                join_name(l, t.busy[k], entries, nodes, &ws, until);
            }
        if (atomic_load(&c->closed)) {
            rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
            break;
        }
        if (fresh) { /* subscribed now: a release from here on wakes us; look once more */
            seen = wl_qwait_count(&ws);
            continue;
        }
        collisions = t.granted > 0 && t.granted < q->majority ? collisions + 1 : 0;
        int64_t bound = retry_after_us(&t);
        int64_t at = wl_now_us() + bound + wl_jitter_us(bound / 8 + 1000);
        if (until >= 0 && until < at)
            at = until;
        bool woken = wl_qwait_until(&ws, seen, at, true);
        if (!woken && until >= 0 && wl_now_us() >= until)
            break;
        int64_t spread_until = wl_now_us() + wl_qwait_spread_us(collisions, rtt_us, l->hold.lease_ms);
        wl_qwait_until(&ws, seen, until >= 0 && until < spread_until ? until : spread_until, false);
        if (atomic_load(&c->closed)) {
            rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
            break;
        }
        /* wake-ups so far are answered by the next attempt; its own
         * give-backs may wake us once more: bounded by the leases */
        seen = wl_qwait_count(&ws);
    }
    for (size_t i = 0; entries != NULL && i < m->n * N; i++)
        if (entries[i] != NULL) {
            wl_sub_notify_remove(q->m[i % N].sub, entries[i], &nodes[i]);
            wl_sub_leave(q->m[i % N].sub, entries[i]);
        }
    free(entries), free(nodes), free(joined);
    if (ws_made) {
        pthread_cond_destroy(&ws.cond);
        pthread_mutex_destroy(&ws.mu);
    }
    args_free(&a);
    if (rc != WATCHLOCK_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        wl_multi_rollback(l); /* nothing stays taken */
        pthread_mutex_unlock(&l->io_mu);
        wl_acquire_record(l, rc, waited, t0);
        if (rc != WATCHLOCK_ETIMEDOUT)
            return wl_fail(rc, "%s", msg);
        char why[200];
        snprintf(why, sizeof why,
                 "%zu of %zu members granted every name, %zu held one by another owner, %zu unreachable, "
                 "%zu restarted (majority %zu)",
                 t.granted, N, t.held, t.unreach, t.restarted, q->majority);
        if (t.held >= q->majority || (t.unreach == 0 && t.held > 0))
            return wl_fail(WATCHLOCK_ETIMEDOUT, "multi-lock %s: a name is held by another owner%s: %s",
                           l->hold.quoted, wait_ms == 0 ? "" : " and was not released in time", why);
        return wl_fail(WATCHLOCK_ECONN,
                       "multi-lock %s: no majority of members could grant every name (unreachable or restarted): %s",
                       l->hold.quoted, why);
    }
    pthread_mutex_unlock(&l->io_mu);
    wl_acquire_record(l, rc, waited, t0);
    return WATCHLOCK_OK;
}

static const wl_multi_io quorum_io = {.acquire = qm_acquire, .release = wl_qmulti_release, .renew = wl_qmulti_renew};

const wl_multi_io *wl_multi_io_for(const watchlock_client *c, const wl_multi_io *single)
{
    return c != NULL && c->quorum != NULL ? &quorum_io : single;
}
