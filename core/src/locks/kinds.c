/*
 * kinds.c - the queued lock kinds on the waiter queue engine (queue.c,
 * waiter.c): the fair lock (one permit), the semaphore (N permits, k per
 * hold) and the read-write lock (a reader takes one share of a capacity no
 * reader count reaches, a writer takes all of it; FIFO head-blocking makes
 * it phase-fair). Each returns a watchlock_lock handle whose hold is a hold
 * of the hold layer like the plain lock's.
 */
#include "locks/locks.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MAX_PERMITS INT64_C(2147483648)
/* The read-write lock's capacity: more readers than this never share a name. */
#define RW_CAP WL_RW_CAP

static const wl_hold_ops queued_ops = {
    .unref = wl_one_hold_unref, /* release.c: a handle that is one hold */
    .abandoned_end = wl_one_hold_abandoned_end,
    .release = wl_one_hold_release,
    .owner = wl_one_hold_owner,
    .live_args = wl_q_live_args, /* waiter.c: the watchdog renews a waiter's liveness */
    .live_done = wl_q_live_done,
    .release_best_effort = wl_q_release_best_effort}; /* queue.c: close and loss hand on through the queue */

/* The queued kinds' table (locks.h): the waiter queue's acquire
 * (waiter.c), the one-hold release whose script is the queue's (it grants
 * to the head, queue.c), the plain extend and renewals on the hold key. */
static int q_acquire(watchlock_lock *l, int64_t wait_ms)
{
    return wl_q_acquire(l, 0, wait_ms); /* k 0: the handle's share, or what it holds (reentrant) */
}

static int q_send_release(watchlock_lock *l, const wl_release_args *a, int64_t deadline_us, const char *what,
                          int64_t *result, bool *resent)
{
    (void)a;
    (void)deadline_us;
    (void)what;
    return wl_q_script(l, "release", result, resent);
}

/* A queued hold that ended LOST, whatever ended it: its queue's release
 * (the key deleted only while it holds this hold; the hold's entry and
 * permits dropped) grants the next waiter now rather than when the
 * holders entry runs out (issue 29.11). */
static void q_release_lost(watchlock_lock *l, const wl_release_args *a, int reason)
{
    (void)a;
    (void)reason;
    wl_q_release_best_effort(&l->hold);
}

static void q_destroy(watchlock_lock *l)
{
    if (l->q != NULL) /* NULL when wl_queued_init failed */
        wl_queued_free(l); /* gives hold.keys.lock back first */
}

static int q_downgrade(watchlock_lock *l); /* below, with the public downgrade */

static const wl_lock_ops queued_kind = {.acquire = q_acquire,
                                        .release = wl_release_one,
                                        .extend = wl_plain_extend,
                                        .free = wl_handle_free,
                                        .abandon = wl_handle_abandon,
                                        .destroy = q_destroy,
                                        .send_release = q_send_release,
                                        .release_lost = q_release_lost,
                                        .downgrade = q_downgrade,
                                        .name_layout = false};

static int queued_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len, int kind,
                      int64_t cap)
{
    if (out != NULL)
        *out = NULL;
    int rc = wl_handle_new(out, c, name, name_len, &queued_ops, &queued_kind, kind);
    if (rc != WATCHLOCK_OK)
        return rc;
    int64_t k = kind == WATCHLOCK_KIND_WRITE ? RW_CAP : 1;
    if ((rc = wl_queued_init(*out, kind, cap, k)) != WATCHLOCK_OK) {
        watchlock_lock_free(*out);
        *out = NULL;
    }
    return rc;
}

int watchlock_fair_lock_new(watchlock_lock **out, watchlock_client *client, const void *name, size_t name_len)
{
    return queued_new(out, client, name, name_len, WATCHLOCK_KIND_FAIR, 1);
}

int watchlock_semaphore_new(watchlock_lock **out, watchlock_client *client, const void *name, size_t name_len,
                            int64_t permits)
{
    if (out != NULL)
        *out = NULL;
    if (permits < 0 || permits > MAX_PERMITS)
        return wl_fail(WATCHLOCK_EINVAL, "semaphore: permits must be 0 (the name's) or 1 .. %" PRId64 ", got %" PRId64,
                       MAX_PERMITS, permits);
    return queued_new(out, client, name, name_len, WATCHLOCK_KIND_SEMAPHORE, permits);
}

int watchlock_rwlock_new(watchlock_lock **out, watchlock_client *client, const void *name, size_t name_len, int write)
{
    bool taken = false; /* a quorum client's read-write lock is quorum_rw.c's */
    int rc = wl_quorum_rwlock_new(out, client, name, name_len, write != 0, &taken);
    if (taken)
        return rc;
    return queued_new(out, client, name, name_len, write ? WATCHLOCK_KIND_WRITE : WATCHLOCK_KIND_READ, RW_CAP);
}

int watchlock_semaphore_acquire(watchlock_lock *sem, int64_t k, int64_t wait_ms)
{
    int rc = wl_check_lock(sem);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (sem->q == NULL || atomic_load(&sem->q->kind) != WATCHLOCK_KIND_SEMAPHORE)
        return wl_fail(WATCHLOCK_EINVAL, "semaphore acquire %s: not a semaphore handle", sem->hold.quoted);
    if (k < 1)
        return wl_fail(WATCHLOCK_EINVAL, "semaphore acquire %s: k must be >= 1, got %" PRId64, sem->hold.quoted, k);
    return wl_q_acquire(sem, k, wait_ms);
}

int watchlock_lock_kind(const watchlock_lock *lock)
{
    if (lock == NULL)
        return -1;
    if (lock->q == NULL)
        return WATCHLOCK_KIND_PLAIN;
    if (lock->fork_gen != wl_fork_generation())
        return atomic_load(&lock->q->kind); /* a forked child holds nothing; the parent's mutex is not ours */
    pthread_mutex_lock(&lock->hold.client->mu);
    int side = wl_q_side(lock); /* the hold's side: a downgraded write hold is a read share */
    pthread_mutex_unlock(&lock->hold.client->mu);
    return side;
}

int64_t watchlock_lock_permits(const watchlock_lock *lock)
{
    if (lock == NULL || lock->q == NULL || atomic_load(&lock->q->kind) != WATCHLOCK_KIND_SEMAPHORE)
        return 1;
    pthread_mutex_lock(&lock->hold.client->mu);
    int64_t k = lock->q->k;
    pthread_mutex_unlock(&lock->hold.client->mu);
    return k;
}

int watchlock_rwlock_downgrade(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (l->q == NULL || atomic_load(&l->q->kind) != WATCHLOCK_KIND_WRITE || l->kind->downgrade == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "downgrade %s: not a read-write lock's write side", l->hold.quoted);
    return l->kind->downgrade(l);
}

/* The one-server downgrade: the queue's script converts the hold's permits. */
static int q_downgrade(watchlock_lock *l)
{
    int rc;
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    bool held = l->hold.state == WATCHLOCK_HELD && !l->hold.releasing && wl_now_us() < l->hold.deadline_us;
    bool shared = wl_q_side(l) == WATCHLOCK_KIND_READ;
    uint64_t gen = l->hold.hold_gen;
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
    int64_t result = 0;
    rc = wl_q_script(l, "downgrade", &result, NULL);
    if (rc == WATCHLOCK_OK && result == 1) {
        pthread_mutex_lock(&c->mu);
        if (l->hold.hold_gen == gen) { /* the same hold, a read share from now on; the handle stays a writer's */
            l->q->k = 1;
            l->q->read_gen = gen;
        }
        pthread_mutex_unlock(&c->mu);
    } else if (rc == WATCHLOCK_OK) {
        rc = wl_fail(WATCHLOCK_ENOTOWNER, "downgrade %s: the write side was lost", l->hold.quoted);
    }
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

int watchlock_client_set_permits(watchlock_client *c, const void *name, size_t name_len, int64_t permits)
{
    if (permits < 1 || permits > MAX_PERMITS)
        return wl_fail(WATCHLOCK_EINVAL, "set_permits: permits must be 1 .. %" PRId64 ", got %" PRId64, MAX_PERMITS,
                       permits);
    wl_keys keys;
    int rc = wl_admin_keys(c, name, name_len, &keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_qkeys q;
    if ((rc = wl_qkeys_make(&q, &keys, "0000000000000000")) != WATCHLOCK_OK) {
        wl_keys_clear(&keys);
        return rc;
    }
    char n_s[24], fttl[24], keep[24], quoted[96], what[160];
    wl_fmt_i64(n_s, permits);
    wl_fmt_i64(fttl, WL_Q_FENCE_TTL_MS);
    wl_fmt_i64(keep, WL_Q_FENCE_TTL_MS); /* a name not in use keeps its count a day */
    const char *argv[WL_QKEY_COUNT + 6];
    size_t lens[WL_QKEY_COUNT + 6];
    for (int i = 0; i < WL_QKEY_COUNT; i++)
        argv[i] = q.k[i], lens[i] = q.len[i];
    const char *a[6] = {n_s, q.hold_prefix, q.chan_prefix, wl_publish_command(&c->server), fttl, keep};
    for (int i = 0; i < 6; i++)
        argv[WL_QKEY_COUNT + i] = a[i], lens[WL_QKEY_COUNT + i] = strlen(a[i]);
    wl_quote_name(quoted, sizeof quoted, name, name_len);
    wl_what(what, sizeof what, "set_permits", quoted);
    redisReply *r;
    rc = wl_run_script(&c->server, WL_SCRIPT_Q_SET_PERMITS, WL_QKEY_COUNT, 6, argv, lens, &r, what);
    if (rc == WATCHLOCK_OK) {
        int64_t code = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? wl_reply_i64(r->element[0]) : -99;
        if (code == -3)
            rc = wl_fail(WATCHLOCK_EWRONGTYPE, "%s: the name is in use as another lock kind (%.*s), not a semaphore",
                         what, r->elements >= 2 ? (int)r->element[1]->len : 0,
                         r->elements >= 2 && r->element[1]->str ? r->element[1]->str : "");
        else if (code != 1)
            rc = wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
        freeReplyObject(r);
    }
    wl_qkeys_clear(&q);
    wl_keys_clear(&keys);
    return rc;
}
