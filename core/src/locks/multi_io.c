/*
 * multi_io.c - the multi-lock's round trips: acquire (runs of one slot in
 * the global order, the fast transaction, waiting by pub/sub, rollback)
 * and release. The types and the hold ops are multi.h's
 * and multi.c's; docs/design.md "Multi-lock" says why it is built so.
 *
 * Threads and locks: the group's io_mu for the whole of an acquire, a
 * release or an extend (an acquire's waits included); client->mu around
 * every read and write of a hold's state, never across I/O.
 */
#include "locks/multi.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FENCE_TTL_MIN_MS (INT64_C(24) * 3600 * 1000)
#define RESULT_UNKNOWN WL_MULTI_UNKNOWN

/* The release script for the selected members (sel[i] for sorted member
 * i), one call per run of one slot; results[i] gets 1 released, 0 no key,
 * -1 another owner, RESULT_UNKNOWN when its call failed. Returns OK or the
 * first error. Without client->mu. */
void wl_multi_release_argv(watchlock_lock *l, const size_t *idx, size_t k, const char *publish,
                           char (*prefix)[WL_IDENT_SIZE], const char **argv, size_t *lens)
{
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&c->mu); /* the tokens */
    for (size_t j = 0; j < k; j++) {
        const wl_hold *h = &multi_of(l)->m[idx[j]].hold;
        argv[j] = h->keys.lock, lens[j] = h->keys.lock_len;
        argv[k + 2 * j] = prefix[j], lens[k + 2 * j] = wl_ident(h, -1, prefix[j]);
        argv[k + 2 * j + 1] = h->keys.channel, lens[k + 2 * j + 1] = h->keys.channel_len;
    }
    pthread_mutex_unlock(&c->mu);
    argv[3 * k] = publish, lens[3 * k] = strlen(publish);
}

int wl_multi_release_single(watchlock_lock *l, const bool *sel, int *results)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    bool sharded = wl_server_sharded(&c->server);
    const char *publish = wl_publish_command(&c->server);
    const char **argv = malloc((3 * m->n + 1) * sizeof *argv);
    size_t *lens = malloc((3 * m->n + 1) * sizeof *lens);
    size_t *idx = malloc(m->n * sizeof *idx);
    char (*prefix)[WL_IDENT_SIZE] = malloc(m->n * sizeof *prefix);
    int first = WATCHLOCK_OK;
    for (size_t i = 0; i < m->n; i++)
        results[i] = RESULT_UNKNOWN;
    if (argv == NULL || lens == NULL || idx == NULL || prefix == NULL) {
        free(argv), free(lens), free(idx), free(prefix);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    for (size_t from = 0; from < m->n;) {
        size_t to = run_end(m, from, sharded), k = 0;
        for (size_t i = from; i < to; i++)
            if (sel[i])
                idx[k++] = i;
        from = to;
        if (k == 0)
            continue;
        wl_multi_release_argv(l, idx, k, publish, prefix, argv, lens);
        char what[160];
        wl_what(what, sizeof what, "release", l->hold.quoted);
        redisReply *r;
        int rc = wl_run_script(&c->server, WL_SCRIPT_MULTI_RELEASE, (int)k, (int)(2 * k + 1), argv, lens, &r, what);
        if (rc == WATCHLOCK_OK) {
            if (r->type == REDIS_REPLY_ARRAY && r->elements == k)
                for (size_t j = 0; j < k; j++)
                    results[idx[j]] = (int)wl_reply_i64(r->element[j]);
            else
                rc = wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
            freeReplyObject(r);
        }
        if (first == WATCHLOCK_OK)
            first = rc;
    }
    free(argv), free(lens), free(idx), free(prefix);
    return first;
}

/* Gives back every member that is not UNLOCKED (this acquire's partial
 * hold, an old hold's keys), best effort, and marks them UNLOCKED. A
 * closed client has released what it held already. Without client->mu. */
void wl_multi_rollback(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    bool *sel = calloc(m->n, sizeof *sel);
    int *results = calloc(m->n, sizeof *results);
    bool any = false;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold;
        if (h->state != WATCHLOCK_UNLOCKED) {
            if (sel != NULL)
                sel[i] = any = true;
            h->releasing = h->state == WATCHLOCK_HELD; /* not renewed; ends silently */
            wl_watchdog_unschedule(c, h);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (any && results != NULL && !atomic_load(&c->closed))
        m->io->release(l, sel, results);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < m->n; i++)
        end_hold(c, &m->m[i].hold);
    pthread_mutex_unlock(&c->mu);
    free(sel);
    free(results);
}

/* The fast acquire of sorted members [from, to) (one slot, or the one
 * server), as the plain lock's (lock.c acquire_fast) for several names: one
 * transaction in one round trip, Lua only for the tokens,
 *   MULTI, SET lock_i <ident_i> NX PX lease (each),
 *   EVALSHA fence-script k fence_1 .. fence_k ttl, EXEC
 * *done: every SET took its key and the fence script gave every token
 * (fences[]; each drawn while its key was the hold's, by the one fence
 * rule, proto.h WL_FENCE_LUA). Otherwise the script decides one round trip
 * later: when only some SETs took their keys (a name was held), those keys
 * are given back first (checked release), so a refusal leaves nothing;
 * when all did but the tokens failed (NOSCRIPT, ...), the script takes
 * them as a retry of its own, with fresh fences. Sends to the node of the
 * first key. */
static int take_fast(watchlock_lock *l, size_t from, size_t to, const char *const *argv, const size_t *lens,
                     bool *done, int64_t *fences)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    size_t k = to - from, ncmds = k + 3;
    static const char *const multi[1] = {"MULTI"}, *const exec[1] = {"EXEC"};
    wl_cmd *cmds = malloc(ncmds * sizeof *cmds);
    const char **a = malloc((7 * k + 4) * sizeof *a);
    size_t *al = malloc((7 * k + 4) * sizeof *al);
    redisReply **r = calloc(ncmds, sizeof *r);
    char nk[24];
    *done = false;
    int rc = WATCHLOCK_OK;
    if (cmds == NULL || a == NULL || al == NULL || r == NULL) {
        rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        goto out;
    }
    cmds[0] = (wl_cmd){1, multi, NULL};
    cmds[ncmds - 1] = (wl_cmd){1, exec, NULL};
    /* argv as take_run makes it: lock, fence per name; lease, fence TTL, idents */
    const char *lease = argv[2 * k], *ttl = argv[2 * k + 1];
    const char **ev = a + 6 * k;
    size_t *evl = al + 6 * k;
    wl_script_head(WL_SCRIPT_FENCE, atomic_exchange(&c->fence_body, false), (int64_t)k, nk, ev, evl);
    for (size_t i = 0; i < k; i++) {
        const char **s1 = a + 6 * i;
        size_t *l1 = al + 6 * i;
        s1[0] = "SET", s1[1] = argv[2 * i], s1[2] = argv[2 * k + 2 + i], s1[3] = "NX", s1[4] = "PX", s1[5] = lease;
        l1[0] = 3, l1[1] = lens[2 * i], l1[2] = lens[2 * k + 2 + i], l1[3] = 2, l1[4] = 2, l1[5] = lens[2 * k];
        ev[3 + i] = argv[2 * i + 1], evl[3 + i] = lens[2 * i + 1];
        cmds[1 + i] = (wl_cmd){6, s1, l1};
    }
    ev[3 + k] = ttl, evl[3 + k] = lens[2 * k + 1];
    cmds[1 + k] = (wl_cmd){(int)(k + 4), ev, evl};
    char what[160];
    wl_what(what, sizeof what, "acquire", l->hold.quoted);
    if ((rc = wl_run_pipeline(&c->server, (int)ncmds, cmds, r, what, NULL)) != WATCHLOCK_OK)
        goto out;
    if (r[0]->type == REDIS_REPLY_ERROR && r[0]->str != NULL && strncmp(r[0]->str, "NOPERM", 6) == 0)
        atomic_store(&c->no_fast, true); /* ran one by one: the script decides, now and later */
    const redisReply *x = r[ncmds - 1];
    size_t took = 0;
    bool shaped = x->type == REDIS_REPLY_ARRAY && x->elements == k + 1;
    const redisReply *t = shaped ? x->element[k] : NULL;
    if (t != NULL && t->type == REDIS_REPLY_ERROR && wl_reply_is_noscript(t))
        atomic_store(&c->fence_body, true); /* the next fast attempt loads it */
    bool tokens = t != NULL && t->type == REDIS_REPLY_ARRAY && t->elements == k;
    for (size_t i = 0; shaped && i < k; i++) {
        took += x->element[i]->type == REDIS_REPLY_STATUS;
        tokens = tokens && t->element[i]->type == REDIS_REPLY_INTEGER && t->element[i]->integer >= WL_FENCE_SEEDED;
        if (tokens)
            fences[i] = t->element[i]->integer;
    }
    *done = tokens && took == k;
    if (!*done && shaped && took > 0 && took < k) {
        /* some names were held: give back the keys this transaction took */
        bool *sel = calloc(m->n, sizeof *sel);
        int *results = calloc(m->n, sizeof *results);
        if (sel != NULL && results != NULL) {
            for (size_t i = 0; i < k; i++)
                sel[from + i] = x->element[i]->type == REDIS_REPLY_STATUS;
            wl_multi_release_single(l, sel, results);
        }
        free(sel), free(results);
    }
out:
    for (size_t i = 0; r != NULL && i < ncmds; i++)
        if (r[i] != NULL)
            freeReplyObject(r[i]);
    free(cmds), free(a), free(al), free(r);
    return rc;
}

/* One script takes sorted members [from, to). OK: all HELD, scheduled.
 * ETIMEDOUT: *busy (sorted index) is held by another owner for *pttl ms
 * (nothing taken). Any other error: nothing taken. io_mu held. */
static int take_run(watchlock_lock *l, size_t from, size_t to, int64_t lease, size_t *busy, int64_t *pttl)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    size_t k = to - from;
    char lease_s[24], ttl_s[24];
    wl_fmt_i64(lease_s, lease);
    wl_fmt_i64(ttl_s, lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS);
    const char **argv = malloc((3 * k + 2) * sizeof *argv);
    size_t *lens = malloc((3 * k + 2) * sizeof *lens);
    char (*ident)[WL_IDENT_SIZE] = malloc(k * sizeof *ident);
    if (argv == NULL || lens == NULL || ident == NULL) {
        free(argv), free(lens), free(ident);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    argv[2 * k] = lease_s, lens[2 * k] = strlen(lease_s);
    argv[2 * k + 1] = ttl_s, lens[2 * k + 1] = strlen(ttl_s);
    pthread_mutex_lock(&c->mu); /* the tokens */
    for (size_t i = 0; i < k; i++) {
        const wl_hold *h = &m->m[from + i].hold;
        argv[2 * i] = h->keys.lock, lens[2 * i] = h->keys.lock_len;
        argv[2 * i + 1] = h->keys.fence, lens[2 * i + 1] = h->keys.fence_len;
        argv[2 * k + 2 + i] = ident[i], lens[2 * k + 2 + i] = wl_ident(h, 1, ident[i]);
    }
    pthread_mutex_unlock(&c->mu);
    char what[160];
    wl_what(what, sizeof what, "acquire", l->hold.quoted);
    int64_t sent = wl_now_us();
    redisReply *r = NULL;
    int64_t *fast = NULL;
    bool fast_done = false;
    int rc = WATCHLOCK_OK;
    if (m->seeded && !m->last_busy && !atomic_load_explicit(&c->no_fast, memory_order_relaxed) &&
        (fast = malloc(k * sizeof *fast)) != NULL)
        rc = take_fast(l, from, to, argv, lens, &fast_done, fast);
    if (rc == WATCHLOCK_OK && !fast_done)
        rc = wl_run_script(&c->server, WL_SCRIPT_MULTI_ACQUIRE, (int)(2 * k), (int)k + 2, argv, lens, &r, what);
    free(argv), free(lens), free(ident);
    if (rc != WATCHLOCK_OK) {
        free(fast);
        return rc;
    }
    m->last_busy = false;
    if (!fast_done) { /* the script's reply */
        int64_t v0 = r->type == REDIS_REPLY_ARRAY && r->elements >= 2 ? wl_reply_i64(r->element[0]) : -9;
        int64_t v1 = v0 != -9 ? wl_reply_i64(r->element[1]) : 0;
        if ((v0 == 0 || v0 == -1) && v1 >= 1 && (size_t)v1 <= k) {
            size_t i = from + (size_t)v1 - 1;
            free(fast);
            if (v0 == 0 && r->elements == 3) {
                *busy = i;
                *pttl = wl_reply_i64(r->element[2]);
                freeReplyObject(r);
                m->last_busy = true; /* the next attempt goes to the script */
                return WATCHLOCK_ETIMEDOUT;
            }
            freeReplyObject(r);
            return wl_fail(WATCHLOCK_EWRONGTYPE,
                           "%s: name %s is in use as another lock kind (its key is not a plain lock's string: "
                           "WRONGTYPE); nothing was taken",
                           what, m->m[i].hold.quoted);
        }
        if (v0 != 1 || r->elements != k + 1) {
            free(fast);
            freeReplyObject(r);
            return wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
        }
    }
    int64_t deadline = sent + lease * 1000 - wl_margin_us(c, lease);
    bool late = wl_now_us() >= deadline;
    pthread_mutex_lock(&c->mu);
    l->token_used = true; /* holds begin with these tokens: the next acquire makes new ones */
    for (size_t i = 0; i < k; i++) {
        wl_hold *h = &m->m[from + i].hold;
        h->fence = fast_done ? fast[i] : wl_reply_i64(r->element[i + 1]);
        h->state = WATCHLOCK_HELD;
        h->hold_count = 1;
        h->hold_gen++;
        h->epoch = h->epoch_to = 1;
        h->epoch_ms = lease;
        h->renewals = 0;
        h->lost_reason = h->stop_reason = WATCHLOCK_LOST_NONE;
        h->renew_failing = h->renew_inflight = h->releasing = false;
        h->acquired_us = h->confirmed_us = sent;
        c->held++;
        wl_set_deadline(c, h, deadline);
        if (h->state == WATCHLOCK_HELD)
            wl_watchdog_schedule(c, h);
    }
    if (r != NULL)
        freeReplyObject(r);
    free(fast);
    m->seeded = true; /* these names' counters are seeded: the next acquire may take the fast path */
    rc = wl_watchdog_ensure_started(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_timer_ensure_started(c);
    bool closed = atomic_load(&c->closed);
    pthread_mutex_unlock(&c->mu);
    if (closed) {
        /* Closed while the script was in flight: close released what it
         * knew of; give this run back on connections of our own. */
        for (size_t i = from; i < to; i++) {
            wl_release_args a;
            pthread_mutex_lock(&c->mu);
            wl_release_args_make(&m->m[i].hold, &a);
            pthread_mutex_unlock(&c->mu);
            wl_release_fresh(&c->server, &a, 1, 0, NULL, "release");
        }
        return wl_fail(WATCHLOCK_ECLOSED, "%s: client closed", what);
    }
    if (late) /* the reply came past the hold's own local deadline: unusable */
        return wl_fail(WATCHLOCK_ECONN, "%s: the server's reply came past the local deadline of a %" PRId64
                                        " ms lease; the names were given back", what, lease);
    return rc;
}

/* The run [from, to) failed uncertainly (ECONN: a timeout, a dropped
 * connection): its keys may have been taken on the server. Gives them back
 * at once (a checked release with this attempt's tokens: never anyone
 * else's keys), so the names are not held by nobody for a lease (issue
 * 29.15). Confirmed: the tokens stay for the next attempt. Not confirmed:
 * the give-back may still land later, so the next attempt takes new
 * tokens (a later hold with these would lose its keys to it). */
static void give_back_run(watchlock_lock *l, size_t from, size_t to)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    bool *sel = calloc(m->n, sizeof *sel);
    int *results = calloc(m->n, sizeof *results);
    bool confirmed = false;
    if (sel != NULL && results != NULL && !atomic_load(&c->closed)) {
        bool any = false;
        pthread_mutex_lock(&c->mu); /* members that became holds (a reply past the deadline) are the rollback's */
        for (size_t i = from; i < to; i++) {
            sel[i] = m->m[i].hold.state == WATCHLOCK_UNLOCKED;
            any = any || sel[i];
        }
        pthread_mutex_unlock(&c->mu);
        confirmed = !any || wl_multi_release_single(l, sel, results) == WATCHLOCK_OK;
    }
    free(sel), free(results);
    if (!confirmed) {
        pthread_mutex_lock(&c->mu);
        l->token_used = true;
        pthread_mutex_unlock(&c->mu);
    }
}

/* With client->mu, at the end of an acquire: every member held → the
 * group is HELD (true); else false (a member was lost meanwhile). */
bool wl_multi_group_begin(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    for (size_t i = 0; i < m->n; i++)
        if (m->m[i].hold.state != WATCHLOCK_HELD || wl_now_us() >= m->m[i].hold.deadline_us)
            return false;
    l->hold.state = WATCHLOCK_HELD;
    l->hold.hold_count = 1;
    l->hold.hold_gen++;
    l->hold.releasing = false;
    l->hold.lost_reason = WATCHLOCK_LOST_NONE;
    l->hold.fence = m->by_user[0]->hold.fence;
    l->hold.acquired_us = m->m[0].hold.acquired_us;
    l->hold.renewals = 0;
    m->lost = -1;
    c->held++;
    group_deadline(l);
    if (l->hold.on_lost != NULL)
        wl_callbacks_arm(c); /* the group's loss is told as a single hold's is (loss.c) */
    return true;
}

int wl_multi_begin(watchlock_lock *l, bool *reentered)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    if ((*reentered = wl_attempt_enter(l))) /* release.c: io_mu, client->mu; reentrant */
        return WATCHLOCK_OK;
    int rc = wl_renew_check(&l->hold);
    bool old = false;
    for (size_t i = 0; i < m->n; i++)
        old = old || m->m[i].hold.state != WATCHLOCK_UNLOCKED;
    pthread_mutex_unlock(&c->mu);
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&l->io_mu);
        return rc;
    }
    if (old) /* an earlier hold's keys (lost, or a release not confirmed): delete what is still ours */
        wl_multi_rollback(l);
    pthread_mutex_lock(&c->mu);
    if (l->hold.state != WATCHLOCK_UNLOCKED)
        end_hold(c, &l->hold);
    pthread_mutex_unlock(&c->mu);
    return WATCHLOCK_OK;
}

int wl_multi_acquire(watchlock_lock *l, int64_t wait_ms)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    if (c->server.ep.min_replicas > 0)
        return wl_fail(WATCHLOCK_EINVAL, "acquire %s: a multi-lock does not support min_replicas", l->hold.quoted);
    bool reentered;
    int rc = wl_multi_begin(l, &reentered); /* io_mu held on OK */
    if (rc != WATCHLOCK_OK || reentered)
        return rc;
    pthread_mutex_lock(&c->mu);
    int64_t lease = l->hold.lease_ms;
    /* A token of its own for each name's hold (the hold identity rule: a
     * hold of its own per name, as the renewals and releases name them).
     * A new hold gets new tokens; failed attempts keep theirs, as the
     * plain lock's do (lock.c attempt), so that a retry after a lost reply
     * finds its own keys (issue 29.15). New ones also for another lease,
     * and after a give-back that was not confirmed (give_back_run): it may
     * still land and must not delete a later hold's keys. */
    bool fresh = l->token_used || l->token_lease_ms != lease;
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold, *g = &l->hold;
        if (fresh && wl_random_token(h->token) != 0) {
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_unlock(&l->io_mu);
            return wl_fail(WATCHLOCK_EINTERNAL, "acquire %s: getrandom failed", l->hold.quoted);
        }
        h->lease_ms = g->lease_ms, h->interval_ms = g->interval_ms;
        h->max_renewals = g->max_renewals, h->max_hold_ms = g->max_hold_ms;
        h->renew_num = g->renew_num, h->renew_den = g->renew_den;
        h->auto_renew = g->auto_renew;
    }
    if (fresh) {
        l->token_used = false;
        l->token_lease_ms = lease;
    }
    pthread_mutex_unlock(&c->mu);

    int64_t t0 = wl_now_us(), until = wl_deadline_after_ms(wait_ms), lease_end = 0;
    bool sharded = wl_server_sharded(&c->server), waited = false;
    wl_subscriber *sub = NULL;
    wl_sub_entry *entry = NULL;
    size_t next = 0, joined = SIZE_MAX;
    uint64_t gen = 0;
    while (next < m->n) {
        if (entry != NULL) { /* subscribed before trying: a release after the try wakes us */
            bool live;
            gen = wl_sub_ready(sub, entry, until >= 0 && until < lease_end ? until : lease_end, &live);
        }
        size_t end = run_end(m, next, sharded), busy = 0;
        int64_t pttl = 0;
        rc = take_run(l, next, end, lease, &busy, &pttl);
        if (rc == WATCHLOCK_ECONN) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", watchlock_last_error());
            give_back_run(l, next, end);
            wl_fail(rc, "%s", msg); /* the failure told is the acquire's */
        }
        if (rc == WATCHLOCK_OK) {
            next = end;
            if (next < m->n)
                continue;
            pthread_mutex_lock(&c->mu);
            bool held = wl_multi_group_begin(l);
            pthread_mutex_unlock(&c->mu);
            if (held)
                break;
            wl_multi_rollback(l); /* a name was lost while a later one was waited for: start over */
            next = 0;
            continue;
        }
        if (rc != WATCHLOCK_ETIMEDOUT || wait_ms == 0)
            break;
        lease_end = wl_wait_holder_end(pttl);
        if (joined != busy) { /* wait on the blocking name's channel, then try once more */
            if (entry != NULL)
                wl_sub_leave(sub, entry);
            entry = NULL;
            joined = SIZE_MAX;
            char what[160];
            wl_what(what, sizeof what, "acquire", m->m[busy].hold.quoted);
            const wl_hold *h = &m->m[busy].hold;
            if ((rc = wl_client_join(c, h->keys.channel, h->keys.channel_len, what, &sub, &entry)) != WATCHLOCK_OK)
                break;
            joined = busy;
            waited = true;
            continue;
        }
        int64_t at = until >= 0 && until < lease_end ? until : lease_end;
        bool woken = at > wl_now_us() && wl_sub_wait(sub, entry, gen, at);
        if (atomic_load(&c->closed)) {
            rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
            break;
        }
        if (!woken && until >= 0 && wl_now_us() >= until) {
            rc = WATCHLOCK_ETIMEDOUT;
            break;
        }
    }
    if (entry != NULL)
        wl_sub_leave(sub, entry);
    if (rc != WATCHLOCK_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        wl_multi_rollback(l); /* nothing stays taken */
        pthread_mutex_unlock(&l->io_mu);
        wl_acquire_record(l, rc, waited, t0);
        if (rc == WATCHLOCK_ETIMEDOUT)
            return wl_fail(rc, "multi-lock %s: a name is held by another owner%s", l->hold.quoted,
                           wait_ms == 0 ? "" : " and was not released in time");
        return wl_fail(rc, "%s", msg);
    }
    pthread_mutex_unlock(&l->io_mu);
    wl_acquire_record(l, rc, waited, t0);
    return WATCHLOCK_OK;
}

int wl_multi_release(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    bool *sel = calloc(m->n, sizeof *sel);
    int *results = calloc(m->n, sizeof *results);
    if (sel == NULL || results == NULL) {
        free(sel), free(results);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (l->hold.state == WATCHLOCK_HELD && !l->hold.releasing && wl_now_us() >= l->hold.deadline_us)
        wl_lose(c, &l->hold, wl_lock_expiry_reason(&l->hold), true); /* past its deadline: LOST */
    int rc = WATCHLOCK_OK;
    if (l->hold.state == WATCHLOCK_LOST) {
        bool last = l->hold.hold_count <= 1;
        if (l->hold.hold_count > 0)
            l->hold.hold_count--;
        int reason = l->hold.lost_reason;
        long k = m->lost;
        if (last)
            l->hold.state = WATCHLOCK_UNLOCKED;
        pthread_mutex_unlock(&c->mu);
        if (last) /* the names still ours: deleted now, so waiters need not wait for their leases */
            wl_multi_rollback(l);
        rc = wl_fail(WATCHLOCK_ENOTOWNER, "multi-lock %s was lost (%s, name %s) before release", l->hold.quoted,
                     watchlock_lost_reason_str(reason), k >= 0 ? m->by_user[k]->hold.quoted : "?");
        goto out;
    }
    if (l->hold.state != WATCHLOCK_HELD) {
        pthread_mutex_unlock(&c->mu);
        rc = wl_fail(WATCHLOCK_ENOTOWNER, "multi-lock %s is not held by this handle", l->hold.quoted);
        goto out;
    }
    if (l->hold.hold_count > 1) {
        l->hold.hold_count--;
        pthread_mutex_unlock(&c->mu);
        goto out;
    }
    l->hold.releasing = true;
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold;
        sel[i] = h->state == WATCHLOCK_HELD;
        h->releasing = true; /* not renewed; a lease that runs out meanwhile ends it silently */
        wl_watchdog_unschedule(c, h);
    }
    uint64_t gen = l->hold.hold_gen;
    pthread_mutex_unlock(&c->mu);
    rc = m->io->release(l, sel, results);
    pthread_mutex_lock(&c->mu);
    if (gen != l->hold.hold_gen || l->hold.state != WATCHLOCK_HELD) { /* closed meanwhile: close released it */
        pthread_mutex_unlock(&c->mu);
        rc = WATCHLOCK_OK;
        goto out;
    }
    long taken = -1;
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold;
        if (results[i] == RESULT_UNKNOWN && h->state == WATCHLOCK_HELD)
            continue; /* not confirmed: kept (releasing, not renewed) until its lease runs out */
        if (sel[i] && results[i] != 1 && results[i] != RESULT_UNKNOWN && taken < 0)
            taken = (long)m->m[i].index;
        end_hold(c, h);
    }
    int64_t acquired = l->hold.acquired_us;
    end_hold(c, &l->hold);
    if (taken >= 0) {
        l->hold.lost_reason = WATCHLOCK_LOST_TAKEN;
        m->lost = taken;
        wl_stats_lost(c, WATCHLOCK_LOST_TAKEN);
    } else if (rc == WATCHLOCK_OK) {
        wl_stats_hold(c, acquired);
    }
    pthread_mutex_unlock(&c->mu);
    if (taken >= 0)
        rc = wl_fail(WATCHLOCK_ENOTOWNER, "multi-lock %s: name %s was lost before release", l->hold.quoted,
                     m->by_user[taken]->hold.quoted);
out:
    pthread_mutex_unlock(&l->io_mu);
    free(sel), free(results);
    return rc;
}
