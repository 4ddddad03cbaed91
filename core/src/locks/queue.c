/*
 * queue.c - the waiter queue engine shared by the queued lock kinds (fair
 * lock, semaphore, read-write lock: kinds.c). The state lives in Redis
 * (proto/qscripts.c says which keys hold what); this file makes the
 * scripts' arguments for a handle and runs the release script, whose ops
 * are a hold's release, a waiter leaving the queue and a downgrade.
 *
 * A handle of a queued kind has an id (16 hex digits, made at creation);
 * its hold key watchlock:{N}:q:h:<id> holds "<token>.<epoch>" like a plain
 * lock's key, so the watchdog renews it in its batched rounds, and extend
 * and the hold layer's best-effort release work on it unchanged.
 */
#include "locks/locks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVENESS_MIN_MS 300
#define LIVENESS_MAX_MS 2000

/* A waiter's liveness lease: the lease, within [300 ms, 2 s]. A waiter
 * renews it every third of it, and that renewal is also when it learns of
 * a grant a lost wake-up did not tell it about, and when a holder's expiry
 * is noticed and handed on. */
int64_t wl_q_liveness_ms(int64_t lease_ms)
{
    return lease_ms < LIVENESS_MIN_MS ? LIVENESS_MIN_MS : lease_ms > LIVENESS_MAX_MS ? LIVENESS_MAX_MS : lease_ms;
}

int64_t wl_q_keep_ms(const watchlock_lock *l)
{
    int64_t lease = l->hold.lease_ms, live = wl_q_liveness_ms(lease);
    return 2 * (lease > live ? lease : live) + 1000;
}

void wl_q_keys_argv(const watchlock_lock *l, const char **argv, size_t *lens)
{
    for (int i = 0; i < WL_QKEY_COUNT; i++) {
        argv[i] = l->q->keys.k[i];
        lens[i] = l->q->keys.len[i];
    }
}

/* One call of the queue's release script; *more: its hand-off ran out of
 * its budget (qscripts.c wl_q_release_lua). */
static int q_script_once(watchlock_lock *l, const char *op, int64_t *result, bool *more, bool *resent)
{
    watchlock_client *c = l->hold.client;
    char ident[WL_IDENT_SIZE], fttl[24], keep[24];
    pthread_mutex_lock(&c->mu);
    /* leave names the waiter's identity ("<token>.1"), the others the hold
     * whatever its epoch ("<token>.") */
    size_t ident_len = wl_ident(&l->hold, strcmp(op, "leave") == 0 ? 1 : -1, ident);
    int64_t keep_ms = wl_q_keep_ms(l);
    pthread_mutex_unlock(&c->mu);
    wl_fmt_i64(fttl, WL_Q_FENCE_TTL_MS);
    wl_fmt_i64(keep, keep_ms);
    const char *argv[WL_QKEY_COUNT + 8];
    size_t lens[WL_QKEY_COUNT + 8];
    wl_q_keys_argv(l, argv, lens);
    const char *a[8] = {op, l->q->id, ident, l->q->keys.hold_prefix, l->q->keys.chan_prefix,
                        wl_publish_command(&c->server), fttl, keep};
    size_t al[8] = {strlen(op), 16, ident_len, l->q->keys.hold_prefix_len, l->q->keys.chan_prefix_len,
                    strlen(a[5]), strlen(fttl), strlen(keep)};
    memcpy(argv + WL_QKEY_COUNT, a, sizeof a);
    memcpy(lens + WL_QKEY_COUNT, al, sizeof al);
    char what[160];
    wl_what(what, sizeof what, op, l->hold.quoted);
    redisReply *r = NULL;
    int rc = wl_run_script_keep(&c->server, WL_SCRIPT_Q_RELEASE, WL_QKEY_COUNT, 8, argv, lens, &r, what, NULL,
                                resent);
    if (rc != WATCHLOCK_OK)
        return rc;
    const redisReply *v = r;
    *more = false;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
        v = r->element[0];
        *more = r->element[1]->integer == 1;
    }
    bool ok = v->type == REDIS_REPLY_INTEGER;
    *result = ok ? v->integer : 0;
    freeReplyObject(r);
    return ok ? WATCHLOCK_OK : wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
}

/* The hand-off a call began goes on at once while its script says it ran
 * out of its budget (many dead waiters at the head, or a release that can
 * serve more than one call grants): bounded work per call, no wait for the
 * waiters' next round (issue 29.14). Best effort: the waiters' rounds do
 * the same if a call fails. */
#define Q_MORE_CALLS 64

int wl_q_script(watchlock_lock *l, const char *op, int64_t *result, bool *resent)
{
    bool more = false;
    int rc = q_script_once(l, op, result, &more, resent);
    for (int i = 0; rc == WATCHLOCK_OK && more && i < Q_MORE_CALLS; i++) {
        int64_t ignored;
        if (q_script_once(l, "purge", &ignored, &more, NULL) != WATCHLOCK_OK)
            break;
    }
    return rc;
}

int wl_q_side(const watchlock_lock *l)
{
    bool read_share = l->q->read_gen != 0 && l->q->read_gen == l->hold.hold_gen &&
                      l->hold.state != WATCHLOCK_UNLOCKED;
    return read_share ? WATCHLOCK_KIND_READ : atomic_load(&l->q->kind);
}

/* Whatever ended the hold (the client's close, a loss), the queue learns
 * of it from its own release script: the holder's entry and permits go and
 * the head of the queue is granted now, not when the old lease runs out
 * (issue 29.11). The handle's token is the hold's until a new hold begins;
 * the caller keeps a reference to the handle. */
void wl_q_release_best_effort(wl_hold *h)
{
    int64_t result;
    wl_q_script(wl_lock_of(h), "release", &result, NULL);
}

/* ---- a queued kind's part of a handle (made by kinds.c's constructors) ---- */

int wl_queued_init(watchlock_lock *l, int kind, int64_t cap, int64_t k)
{
    wl_queued *q = calloc(1, sizeof *q);
    char token[33];
    if (q == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    if (wl_random_token(token) != 0) {
        free(q);
        return wl_fail(WATCHLOCK_EINTERNAL, "getrandom failed");
    }
    memcpy(q->id, token, 16);
    q->id[16] = '\0';
    int rc = wl_qkeys_make(&q->keys, &l->hold.keys, q->id);
    if (rc != WATCHLOCK_OK) {
        free(q);
        return rc;
    }
    atomic_init(&q->kind, kind);
    pthread_mutex_init(&q->wake_mu, NULL);
    q->cap = cap;
    q->share = k;
    q->k = k;
    q->last_server_us = INT64_MAX; /* no queued call yet: no grant message is taken (waiter.c) */
    q->lock_key = l->hold.keys.lock;
    q->lock_key_len = l->hold.keys.lock_len;
    /* The hold is the handle's own key: renewals, extend and the hold
     * layer's best-effort release act on it as on a plain lock's key. No
     * other thread sees the handle yet. */
    l->hold.keys.lock = q->keys.hold;
    l->hold.keys.lock_len = q->keys.hold_len;
    l->q = q;
    return WATCHLOCK_OK;
}

void wl_queued_free(watchlock_lock *l)
{
    l->hold.keys.lock = l->q->lock_key; /* the block wl_keys_clear frees */
    l->hold.keys.lock_len = l->q->lock_key_len;
    wl_qkeys_clear(&l->q->keys);
    pthread_mutex_destroy(&l->q->wake_mu);
    free(l->q);
    l->q = NULL;
}
