/*
 * lock.c - lock handles: create/free, options, acquire (with pub/sub
 * waiting), release, extend and state queries.
 *
 * A handle's state lives under client->mu; io_mu serializes the handle's own
 * round trips so that a release and a re-acquire of one handle from two
 * threads cannot cross on the wire. Waiting happens outside both.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LEASE_MS 30000
#define FENCE_TTL_MIN_MS (INT64_C(24) * 3600 * 1000)
#define NO_TTL_POLL_US 1000000   /* a key without expiry: re-check this often */
#define NOT_LIVE_POLL_US 100000  /* no pub/sub: poll this often */

static atomic_uint_fast64_t next_lock_id = 1;

int wl_check_lock(const watchlock_lock *l)
{
    if (l == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "lock is NULL");
    if (l->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED,
                       "lock %s belongs to the parent process (inherited across fork); the child cannot use it",
                       l->quoted);
    if (atomic_load(&l->client->closed))
        return wl_fail(WATCHLOCK_ECLOSED, "lock %s: client is closed", l->quoted);
    return WATCHLOCK_OK;
}

int watchlock_lock_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_check_name(name, name_len);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_lock *l = calloc(1, sizeof *l);
    if (l == NULL || (l->name = malloc(name_len + 1)) == NULL) {
        free(l);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    memcpy(l->name, name, name_len);
    l->name[name_len] = '\0';
    l->name_len = name_len;
    wl_quote_name(l->quoted, sizeof l->quoted, name, name_len);
    unsigned char raw[16];
    if (wl_random_bytes(raw, sizeof raw) != 0) {
        free(l->name);
        free(l);
        return wl_fail(WATCHLOCK_EINTERNAL, "getrandom failed");
    }
    for (int i = 0; i < 16; i++)
        snprintf(l->token + 2 * i, 3, "%02x", raw[i]);
    if ((rc = wl_keys_make(&l->keys, name, name_len)) != WATCHLOCK_OK) {
        free(l->name);
        free(l);
        return rc;
    }
    if (pthread_mutex_init(&l->io_mu, NULL) != 0) {
        wl_keys_clear(&l->keys);
        free(l->name);
        free(l);
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    }
    atomic_init(&l->refs, 1);
    l->id = atomic_fetch_add(&next_lock_id, 1);
    l->fork_gen = c->fork_gen;
    l->client = c;
    l->lease_ms = DEFAULT_LEASE_MS;
    l->auto_renew = true;
    l->state = WATCHLOCK_UNLOCKED;
    l->heap_idx = WL_NOT_IN_HEAP;
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_lock(&c->mu);
    l->next = c->locks;
    if (c->locks)
        c->locks->prev = l;
    c->locks = l;
    pthread_mutex_unlock(&c->mu);
    *out = l;
    return WATCHLOCK_OK;
}

void wl_lock_unref(watchlock_lock *l)
{
    if (atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    watchlock_client *c = l->client;
    pthread_mutex_destroy(&l->io_mu);
    wl_keys_clear(&l->keys);
    free(l->name);
    free(l);
    wl_client_unref(c);
}

void watchlock_lock_free(watchlock_lock *l)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return; /* forked child: never release or touch the parent's lock */
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    l->on_lost = NULL;
    bool held = l->state == WATCHLOCK_HELD;
    if (held)
        l->hold_count = 1;
    pthread_mutex_unlock(&c->mu);
    if (held)
        watchlock_lock_release(l);
    pthread_mutex_lock(&c->mu);
    wl_watchdog_unschedule(c, l);
    if (l->state == WATCHLOCK_HELD)
        c->held--;
    l->state = WATCHLOCK_UNLOCKED;
    if (l->prev)
        l->prev->next = l->next;
    else
        c->locks = l->next;
    if (l->next)
        l->next->prev = l->prev;
    pthread_mutex_unlock(&c->mu);
    wl_lock_unref(l);
}

/* ---- options ---- */

#define WITH_LOCK_STATE(l, body)                                                                   \
    do {                                                                                           \
        int rc_ = wl_check_lock(l);                                                                \
        if (rc_ != WATCHLOCK_OK)                                                                   \
            return rc_;                                                                            \
        pthread_mutex_lock(&(l)->client->mu);                                                      \
        body;                                                                                      \
        pthread_mutex_unlock(&(l)->client->mu);                                                    \
        return WATCHLOCK_OK;                                                                       \
    } while (0)

int watchlock_lock_set_lease(watchlock_lock *l, int64_t lease_ms)
{
    if (l != NULL && (lease_ms <= 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS))
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: lease must be 1 ms .. 30 days, got %" PRId64 " ms", l->quoted,
                       lease_ms);
    WITH_LOCK_STATE(l, l->lease_ms = lease_ms);
}

int watchlock_lock_set_auto_renew(watchlock_lock *l, int on)
{
    WITH_LOCK_STATE(l, l->auto_renew = on != 0);
}

int watchlock_lock_set_renew_interval(watchlock_lock *l, int64_t interval_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    pthread_mutex_lock(&l->client->mu);
    int64_t lease = l->lease_ms;
    if (interval_ms >= 0 && interval_ms < lease)
        l->interval_ms = interval_ms;
    pthread_mutex_unlock(&l->client->mu);
    if (interval_ms < 0 || interval_ms >= lease)
        return wl_fail(WATCHLOCK_EINVAL,
                       "lock %s: renew interval must be 0 (lease/3) or 1 .. %" PRId64 " ms (below the lease)",
                       l->quoted, lease - 1);
    return WATCHLOCK_OK;
}

int watchlock_lock_set_max_renewals(watchlock_lock *l, int64_t max)
{
    if (l != NULL && max < 0)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: max renewals must be >= 0 (0 = unlimited)", l->quoted);
    WITH_LOCK_STATE(l, l->max_renewals = max);
}

int watchlock_lock_set_max_hold(watchlock_lock *l, int64_t max_hold_ms)
{
    if (l != NULL && (max_hold_ms < 0 || max_hold_ms > WATCHLOCK_MAX_LEASE_MS * 100))
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: max hold must be >= 0 ms (0 = unlimited)", l->quoted);
    WITH_LOCK_STATE(l, l->max_hold_ms = max_hold_ms);
}

int watchlock_lock_set_on_lost(watchlock_lock *l, watchlock_lost_fn fn, void *userdata)
{
    WITH_LOCK_STATE(l, {
        l->on_lost = fn;
        l->on_lost_data = userdata;
    });
}

/* ---- acquire / release / extend ---- */

void wl_release_args(const watchlock_lock *l, const char *argv[3], size_t lens[3])
{
    argv[0] = l->keys.lock;
    lens[0] = l->keys.lock_len;
    argv[1] = l->token;
    lens[1] = sizeof l->token - 1;
    argv[2] = l->keys.channel;
    lens[2] = l->keys.channel_len;
}

static void release_on_fresh_connection(watchlock_lock *l)
{
    redisContext *ctx;
    if (wl_server_connect(&l->client->server, 0, &ctx) != WATCHLOCK_OK)
        return;
    const char *argv[3];
    size_t lens[3];
    wl_release_args(l, argv, lens);
    void *reply = NULL;
    if (wl_append_script(ctx, WL_SCRIPT_RELEASE, true, 1, 2, argv, lens) == REDIS_OK &&
        redisGetReply(ctx, &reply) == REDIS_OK)
        freeReplyObject(reply);
    redisFree(ctx);
}

/* With client->mu: held, and within the local deadline. A hold past its
 * deadline is lost even before the watchdog notices (see visible_state). */
static bool held_now(const watchlock_lock *l)
{
    return l->state == WATCHLOCK_HELD && wl_now_us() < l->deadline_us;
}

/* One acquire round trip. OK: now held. ETIMEDOUT: someone else holds it,
 * *pttl_ms says for how long (-1 no expiry, -2 gone meanwhile). */
static int attempt(watchlock_lock *l, int64_t *pttl_ms)
{
    watchlock_client *c = l->client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (held_now(l)) { /* another thread got this handle meanwhile */
        l->hold_count++;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_OK;
    }
    if (l->state == WATCHLOCK_HELD) /* past its deadline, not yet noticed by the watchdog */
        wl_lock_mark_lost(c, l, wl_lock_expiry_reason(l));
    int64_t lease = l->lease_ms;
    pthread_mutex_unlock(&c->mu);

    char lease_s[24], fence_ttl_s[24];
    int64_t fence_ttl = lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS;
    snprintf(lease_s, sizeof lease_s, "%" PRId64, lease);
    snprintf(fence_ttl_s, sizeof fence_ttl_s, "%" PRId64, fence_ttl);
    const char *argv[5] = {l->keys.lock, l->keys.fence, l->token, lease_s, fence_ttl_s};
    size_t lens[5] = {l->keys.lock_len, l->keys.fence_len, 32, strlen(lease_s), strlen(fence_ttl_s)};
    char what[160];
    snprintf(what, sizeof what, "acquire %s", l->quoted);
    int64_t sent = wl_now_us();
    redisReply *r;
    int rc = wl_run_script(&c->server, WL_SCRIPT_ACQUIRE, 2, 3, argv, lens, &r, what);
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&l->io_mu);
        return rc;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
    }
    bool acquired = wl_reply_i64(r->element[0]) == 1;
    int64_t value = wl_reply_i64(r->element[1]);
    freeReplyObject(r);
    if (!acquired) {
        *pttl_ms = value;
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_ETIMEDOUT;
    }
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closed)) {
        /* Closed while our script was in flight: close has already released
         * what it knew of, so give this one back too (best effort, on a
         * connection of our own: the pool is shut). */
        pthread_mutex_unlock(&c->mu);
        release_on_fresh_connection(l);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ECLOSED, "%s: client closed", what);
    }
    l->state = WATCHLOCK_HELD;
    l->hold_count = 1;
    l->hold_gen++;
    l->fence = value;
    l->renewals = 0;
    l->lost_reason = WATCHLOCK_LOST_NONE;
    l->stop_reason = WATCHLOCK_LOST_NONE;
    l->renew_failing = false;
    l->acquired_us = sent;
    l->deadline_us = sent + lease * 1000 - wl_drift_us(lease);
    c->held++;
    wl_watchdog_schedule(c, l);
    rc = wl_watchdog_ensure_started(c);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

int watchlock_lock_acquire(watchlock_lock *l, int64_t wait_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    if (held_now(l)) { /* reentrant: no round trip */
        l->hold_count++;
        pthread_mutex_unlock(&c->mu);
        return WATCHLOCK_OK;
    }
    pthread_mutex_unlock(&c->mu);

    int64_t until = wait_ms < 0 ? -1 : wl_now_us() + wait_ms * 1000;
    int64_t pttl = 0;
    rc = attempt(l, &pttl);
    if (rc == WATCHLOCK_ETIMEDOUT && wait_ms != 0) {
        wl_sub_entry *entry;
        rc = wl_sub_join(c->sub, l->keys.channel, l->keys.channel_len, &entry);
        if (rc != WATCHLOCK_OK)
            return rc;
        for (;;) {
            bool live;
            uint64_t gen = wl_sub_ready(c->sub, entry, until, &live);
            if (atomic_load(&c->closed)) {
                rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->quoted);
                break;
            }
            rc = attempt(l, &pttl);
            int64_t now = wl_now_us();
            if (rc != WATCHLOCK_ETIMEDOUT || (until >= 0 && now >= until))
                break;
            /* Sleep until woken by a release, but never past the holder's lease. */
            int64_t bound = pttl > 0 ? pttl * 1000 + 1000 : pttl == -1 ? NO_TTL_POLL_US : 0;
            if (!live && bound > NOT_LIVE_POLL_US)
                bound = NOT_LIVE_POLL_US;
            int64_t at = now + bound;
            if (until >= 0 && until < at)
                at = until;
            if (bound > 0)
                wl_sub_wait(c->sub, entry, gen, at);
        }
        wl_sub_leave(c->sub, entry);
    }
    if (rc == WATCHLOCK_ETIMEDOUT)
        return wl_fail(rc, "lock %s is held by another owner%s", l->quoted,
                       wait_ms == 0 ? "" : " and was not released in time");
    return rc;
}

int watchlock_lock_release(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (l->state == WATCHLOCK_LOST) {
        bool last = l->hold_count <= 1;
        if (last)
            l->state = WATCHLOCK_UNLOCKED;
        if (l->hold_count > 0)
            l->hold_count--;
        int reason = l->lost_reason;
        pthread_mutex_unlock(&c->mu);
        if (last && reason != WATCHLOCK_LOST_TAKEN) {
            /* Declared lost by the local deadline: the key may still hold
             * our token for the drift margin. Delete it if so (token-checked,
             * so never someone else's) to wake waiters now. */
            const char *argv[3];
            size_t lens[3];
            wl_release_args(l, argv, lens);
            redisReply *r;
            if (wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, 2, argv, lens, &r, "release") == WATCHLOCK_OK)
                freeReplyObject(r);
        }
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "lock %s was lost (%s) before release", l->quoted,
                       watchlock_lost_reason_str(reason));
    }
    if (l->state != WATCHLOCK_HELD) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "lock %s is not held by this handle", l->quoted);
    }
    if (l->hold_count > 1) {
        l->hold_count--;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_OK;
    }
    l->state = WATCHLOCK_UNLOCKED;
    l->hold_count = 0;
    l->hold_gen++;
    c->held--;
    wl_watchdog_unschedule(c, l);
    pthread_mutex_unlock(&c->mu);

    const char *argv[3];
    size_t lens[3];
    wl_release_args(l, argv, lens);
    char what[160];
    snprintf(what, sizeof what, "release %s", l->quoted);
    redisReply *r;
    rc = wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, 2, argv, lens, &r, what);
    if (rc == WATCHLOCK_OK) {
        bool released = wl_reply_i64(r) == 1;
        freeReplyObject(r);
        if (!released) {
            pthread_mutex_lock(&c->mu);
            l->lost_reason = WATCHLOCK_LOST_TAKEN;
            pthread_mutex_unlock(&c->mu);
            rc = wl_fail(WATCHLOCK_ENOTOWNER,
                         "lock %s was lost before release (its lease ran out or another owner took it)", l->quoted);
        }
    }
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

int watchlock_lock_extend(watchlock_lock *l, int64_t lease_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (lease_ms < 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS)
        return wl_fail(WATCHLOCK_EINVAL, "extend %s: lease must be 0 (current) or 1 ms .. 30 days", l->quoted);
    watchlock_client *c = l->client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (l->state != WATCHLOCK_HELD) {
        bool lost = l->state == WATCHLOCK_LOST;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: %s", l->quoted,
                       lost ? "the lock was lost" : "not held by this handle");
    }
    if (lease_ms > 0)
        l->lease_ms = lease_ms;
    int64_t lease = l->lease_ms;
    uint64_t gen = l->hold_gen;
    pthread_mutex_unlock(&c->mu);

    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%" PRId64, lease);
    const char *argv[3] = {l->keys.lock, l->token, lease_s};
    size_t lens[3] = {l->keys.lock_len, 32, strlen(lease_s)};
    char what[160];
    snprintf(what, sizeof what, "extend %s", l->quoted);
    int64_t sent = wl_now_us();
    redisReply *r;
    rc = wl_run_script(&c->server, WL_SCRIPT_RENEW, 1, 2, argv, lens, &r, what);
    if (rc == WATCHLOCK_OK) {
        bool renewed = wl_reply_i64(r) == 1;
        freeReplyObject(r);
        pthread_mutex_lock(&c->mu);
        if (gen == l->hold_gen && l->state == WATCHLOCK_HELD) {
            if (renewed) {
                int64_t deadline = sent + lease * 1000 - wl_drift_us(lease);
                /* A watchdog renewal in flight (the lock is out of the heap)
                 * may reach the server after us with the old lease: do not
                 * count on the new one until the watchdog's reply is in. */
                if (l->heap_idx == WL_NOT_IN_HEAP && deadline > l->deadline_us)
                    deadline = l->deadline_us;
                l->deadline_us = deadline;
                l->renew_failing = false;
                wl_watchdog_schedule(c, l);
            } else {
                wl_lock_mark_lost(c, l, WATCHLOCK_LOST_TAKEN);
            }
        }
        pthread_mutex_unlock(&c->mu);
        if (!renewed)
            rc = wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: the lock was lost (another owner or no key)", l->quoted);
    }
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

/* ---- queries (no I/O) ---- */

#define READ_LOCK_STATE(l, type, fallback, expr)                                                   \
    do {                                                                                           \
        if ((l) == NULL || (l)->fork_gen != wl_fork_generation())                                  \
            return (fallback);                                                                     \
        watchlock_client *c_ = (l)->client;                                                        \
        pthread_mutex_lock(&c_->mu);                                                               \
        type v_ = (expr);                                                                          \
        pthread_mutex_unlock(&c_->mu);                                                             \
        return v_;                                                                                 \
    } while (0)

/* The state as the caller should see it: a HELD lock past its local
 * deadline is LOST even if the watchdog (starved of CPU, or just resumed
 * after SIGSTOP) has not marked it yet. */
static int visible_state(const watchlock_lock *l, int *reason)
{
    if (l->state == WATCHLOCK_HELD && wl_now_us() >= l->deadline_us) {
        *reason = wl_lock_expiry_reason(l);
        return WATCHLOCK_LOST;
    }
    *reason = l->state == WATCHLOCK_LOST ? l->lost_reason : WATCHLOCK_LOST_NONE;
    return l->state;
}

static int state_of(const watchlock_lock *l)
{
    int reason;
    return visible_state(l, &reason);
}

static int lost_reason_of(const watchlock_lock *l)
{
    int reason;
    visible_state(l, &reason);
    return reason;
}

int watchlock_lock_state(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int, WATCHLOCK_UNLOCKED, state_of(l));
}

int watchlock_lock_lost_reason(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int, WATCHLOCK_LOST_NONE, lost_reason_of(l));
}

static int64_t remaining(const watchlock_lock *l)
{
    if (l->state != WATCHLOCK_HELD)
        return 0;
    int64_t left = (l->deadline_us - wl_now_us()) / 1000;
    return left > 0 ? left : 0;
}

int64_t watchlock_lock_remaining_ms(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, remaining(l));
}

int64_t watchlock_lock_fencing_token(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->fence);
}

int64_t watchlock_lock_hold_count(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->state == WATCHLOCK_UNLOCKED ? 0 : l->hold_count);
}

int64_t watchlock_lock_renewals(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->renewals);
}

const char *watchlock_lock_name(const watchlock_lock *l, size_t *len)
{
    if (len)
        *len = l ? l->name_len : 0;
    return l ? l->name : NULL;
}

uint64_t watchlock_lock_id(const watchlock_lock *l)
{
    return l ? l->id : 0;
}
