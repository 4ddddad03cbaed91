/*
 * quorum_rw.c - the read-write lock on a quorum client (Redlock): a read
 * share or a write hold, each granted by a majority of members, as the
 * plain lock on a quorum is (quorum_lock.c: the attempt, the validity, the
 * restart rule, the wait woken by releases, the fencing raise), with
 * qrw_scripts.c's script per member. Everything after the grant is the
 * plain quorum lock's, on the hold's own key: renewals (the watchdog's
 * quorum rounds), extend, release, give-back, close and loss.
 *
 * Safety (docs/design.md, "The read-write lock on a quorum"): on each
 * member a write hold excludes every other hold and a read share excludes
 * writes (qrw_scripts.c); a hold needs a majority of members that count;
 * two majorities share a member, and that member never granted both at
 * once, so a writer never runs beside a reader or another writer while
 * both holds are within their validity. No queue: a waiter is woken by
 * the releases (on any member) and tries again; fairness is not promised.
 *
 * Downgrade: every member converts the write hold into a read share of
 * the same identity (the queue's downgrade, qscripts.c). The hold is a
 * read share from the moment it is sent, whatever the answers (a member
 * that converted it may let readers in: the write side cannot be trusted
 * any more); OK when a majority confirmed, else an error saying so. The
 * handle stays a writer's: its next hold is a write hold.
 *
 * Locks: io_mu (the handle's round trips) then client->mu, as
 * quorum_lock.c; no mutex is held during I/O.
 */
#include "locks/locks.h"
#include "topology/quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A handle's constant arguments (kind_data). */
typedef struct qrw {
    char k[24];   /* what a new hold asks for: 1, or the whole capacity */
    char cap[24]; /* the capacity */
    const char *reader; /* "1" | "0" */
} qrw;

/* One attempt's script (wl_qacquire_fn): the queue's 6 keys, then
 * qrw_scripts.c's arguments. */
static void qrw_script(watchlock_lock *l, const char *ident, size_t ident_len, const char *lease_s,
                       const char *fence_ttl_s, const char *const *owner, const char **argv, size_t *lens,
                       wl_qscript *s)
{
    const qrw *x = l->kind_data;
    wl_q_keys_argv(l, argv, lens);
    const char *o = owner != NULL ? owner[3] : ""; /* the owner record, kept per hold as on one server */
    const char *a[9] = {l->q->id, x->k, ident, lease_s, l->q->keys.hold_prefix, fence_ttl_s, x->reader, o, x->cap};
    size_t n[9] = {16, strlen(x->k), ident_len, strlen(lease_s), l->q->keys.hold_prefix_len, strlen(fence_ttl_s),
                   1, strlen(o), strlen(x->cap)};
    memcpy(argv + WL_QKEY_COUNT, a, sizeof a);
    memcpy(lens + WL_QKEY_COUNT, n, sizeof n);
    *s = (wl_qscript){WL_SCRIPT_QRW_ACQUIRE, NULL, WL_QKEY_COUNT, 9, argv, lens};
}

static int qrw_acquire(watchlock_lock *l, int64_t wait_ms)
{
    return wl_quorum_acquire_with(l, wait_ms, qrw_script);
}

/* ---- downgrade ---- */

typedef struct dg_tally {
    wl_quorum *q;
    size_t yes, no;
} dg_tally;

static int64_t dg_result(const redisReply *r)
{
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1)
        r = r->element[0];
    return r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

static void dg_count(dg_tally *t, const wl_qcall *call)
{
    t->yes = t->no = 0;
    for (size_t k = 0; k < t->q->n; k++) {
        if (call->state[k] != WL_QM_REPLIED)
            continue;
        int64_t v = dg_result(call->reply[k]);
        if (v == 1 && call->acked[k] && wl_quorum_counts(t->q, k, call->sent_us))
            t->yes++;
        else if (v == 0)
            t->no++;
    }
}

/* Decided once a majority confirmed, or cannot any more. */
static bool dg_decided(void *arg, wl_qcall *call)
{
    dg_tally *t = arg;
    dg_count(t, call);
    return t->yes >= t->q->majority || t->no > t->q->n - t->q->majority;
}

/* Wakes the readers waiting on any member: a read share is free now. */
static const char publish_lua[] = "return redis.pcall(ARGV[2], ARGV[1], '')\n";

static int qrw_downgrade(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_quorum *q = c->quorum;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    bool held = wl_held_now(l);
    bool shared = wl_q_side(l) == WATCHLOCK_KIND_READ;
    uint64_t gen = l->hold.hold_gen;
    char prefix[WL_IDENT_SIZE];
    size_t prefix_len = wl_ident(&l->hold, -1, prefix); /* the hold, whatever its epoch: "<token>." */
    int64_t keep_ms = 2 * l->hold.lease_ms + 1000, left_ms = (l->hold.deadline_us - wl_now_us()) / 1000;
    if (held && !shared) { /* from now on a read share: a member that converted it may let readers in */
        l->q->k = 1;
        l->q->read_gen = gen;
    }
    pthread_mutex_unlock(&c->mu);
    if (held && shared) {
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_EINVAL, "downgrade %s: this handle's hold is a read share already", l->hold.quoted);
    }
    if (!held) {
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "downgrade %s: the write side is not held by this handle",
                       l->hold.quoted);
    }
    char fttl[24], keep[24];
    wl_fmt_i64(fttl, WL_Q_FENCE_TTL_MS);
    wl_fmt_i64(keep, keep_ms);
    const char *pub = wl_publish_command(&c->server);
    const char *argv[WL_QKEY_COUNT + 8];
    size_t lens[WL_QKEY_COUNT + 8];
    wl_q_keys_argv(l, argv, lens);
    const char *a[8] = {"downgrade", l->q->id, prefix, l->q->keys.hold_prefix, l->q->keys.chan_prefix, pub,
                        fttl, keep};
    size_t al[8] = {9, 16, prefix_len, l->q->keys.hold_prefix_len, l->q->keys.chan_prefix_len, strlen(pub),
                    strlen(fttl), strlen(keep)};
    memcpy(argv + WL_QKEY_COUNT, a, sizeof a);
    memcpy(lens + WL_QKEY_COUNT, al, sizeof al);
    dg_tally t = {q, 0, 0};
    wl_qcall call;
    memset(&call, 0, sizeof call);
    call.s = (wl_qscript){WL_SCRIPT_Q_RELEASE, NULL, WL_QKEY_COUNT, 8, argv, lens};
    call.wait_replicas = true;
    call.decided = dg_decided;
    call.arg = &t;
    int64_t cap_ms = c->server.ep.command_timeout_ms < left_ms ? c->server.ep.command_timeout_ms : left_ms;
    wl_quorum_call(q, &call, cap_ms > 0 ? cap_ms : 1);
    dg_count(&t, &call);
    wl_qcall_clear(&call);
    const char *pargv[2] = {l->hold.keys.channel, pub};
    size_t plens[2] = {l->hold.keys.channel_len, strlen(pub)};
    wl_qscript wake = {-1, publish_lua, 0, 2, pargv, plens};
    wl_quorum_send(q, &wake, NULL);
    pthread_mutex_unlock(&l->io_mu);
    if (t.yes >= q->majority)
        return WATCHLOCK_OK;
    if (t.no > q->n - q->majority)
        return wl_fail(WATCHLOCK_ENOTOWNER, "downgrade %s: the write side was lost (no majority of members holds it)",
                       l->hold.quoted);
    return wl_fail(WATCHLOCK_ECONN,
                   "downgrade %s: %zu of %zu members confirmed it, fewer than the majority of %zu; the hold is a read "
                   "share from now on (it can no longer be trusted as the write side)",
                   l->hold.quoted, t.yes, q->n, q->majority);
}

/* ---- the handle ---- */

static void qrw_destroy(watchlock_lock *l)
{
    free(l->quorum); /* quorum_lock.c's per-member state, made at the first acquire */
    l->quorum = NULL;
    if (l->q != NULL) /* NULL when wl_queued_init failed */
        wl_queued_free(l);
    free(l->kind_data);
    l->kind_data = NULL;
}

static const wl_lock_ops qrw_kind = {.acquire = qrw_acquire,
                                     .release = wl_release_one,
                                     .extend = wl_quorum_extend_checked,
                                     .free = wl_handle_free,
                                     .abandon = wl_handle_abandon,
                                     .destroy = qrw_destroy,
                                     .send_release = wl_quorum_send_release,
                                     .release_lost = wl_quorum_release_lost,
                                     .downgrade = qrw_downgrade,
                                     .name_layout = false};

int wl_quorum_rwlock_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len, bool write,
                         bool *taken)
{
    *taken = c != NULL && c->quorum != NULL;
    if (!*taken)
        return WATCHLOCK_OK;
    if (out != NULL)
        *out = NULL;
    qrw *x = calloc(1, sizeof *x);
    if (x == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    wl_fmt_i64(x->k, write ? WL_RW_CAP : 1);
    wl_fmt_i64(x->cap, WL_RW_CAP);
    x->reader = write ? "0" : "1";
    /* the one-hold ops, no release_best_effort: the release script on the
     * hold's key (every member) also drops its holders entry (scripts.c) */
    int rc = wl_handle_new(out, c, name, name_len, &wl_one_hold_ops, &qrw_kind,
                           write ? WATCHLOCK_KIND_WRITE : WATCHLOCK_KIND_READ);
    if (rc != WATCHLOCK_OK) {
        free(x);
        return rc;
    }
    (*out)->kind_data = x; /* no other thread sees the handle yet */
    if ((rc = wl_queued_init(*out, write ? WATCHLOCK_KIND_WRITE : WATCHLOCK_KIND_READ, WL_RW_CAP,
                             write ? WL_RW_CAP : 1)) != WATCHLOCK_OK) {
        watchlock_lock_free(*out);
        *out = NULL;
    }
    return rc;
}
