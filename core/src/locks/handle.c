/*
 * handle.c - the lock handle: create, free, abandon, options, the owner
 * label, and the state queries (no I/O). Acquire, release and extend of the
 * plain lock are lock.c's; the wait between attempts is wait.c's.
 *
 * A handle's state lives under client->mu; io_mu serializes the handle's own
 * round trips so that a release and a re-acquire of one handle from two
 * threads cannot cross on the wire.
 */
#include "locks/locks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LEASE_MS 30000

static atomic_uint_fast64_t next_lock_id = 1;

int wl_check_lock(const watchlock_lock *l)
{
    if (l == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "lock is NULL");
    if (l->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED,
                       "lock %s belongs to the parent process (inherited across fork); the child cannot use it",
                       l->hold.quoted);
    if (atomic_load(&l->hold.client->closed))
        return wl_fail(WATCHLOCK_ECLOSED, "lock %s: client is closed", l->hold.quoted);
    return WATCHLOCK_OK;
}

int wl_extend_lease_check(const watchlock_lock *l, int64_t lease_ms)
{
    if (lease_ms < 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS)
        return wl_fail(WATCHLOCK_EINVAL, "extend %s: lease must be 0 (current) or 1 ms .. 30 days, got %" PRId64,
                       l->hold.quoted, lease_ms);
    return WATCHLOCK_OK;
}

int wl_extend_begin(watchlock_lock *l, int64_t lease_ms)
{
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (!wl_held_now(l)) {
        if (l->hold.state == WATCHLOCK_HELD && !l->hold.releasing)
            wl_lose(c, &l->hold, wl_lock_expiry_reason(&l->hold), false); /* past its deadline */
        const char *why = l->hold.state == WATCHLOCK_LOST   ? "the lock was lost"
                          : l->hold.state == WATCHLOCK_HELD ? "the lock is being released"
                                                            : "not held by this handle";
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: %s", l->hold.quoted, why);
    }
    if (lease_ms > 0)
        l->hold.lease_ms = lease_ms;
    return WATCHLOCK_OK;
}

int wl_handle_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len, const wl_hold_ops *ops,
                  const wl_lock_ops *kind, int kind_code)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_check_name(name, name_len);
    if (rc == WATCHLOCK_OK)
        rc = c->placement->refuse(c, kind_code); /* hold.h: the kinds the client's placement serves */
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
    wl_quote_name(l->hold.quoted, sizeof l->hold.quoted, name, name_len);
    if (wl_random_token(l->hold.token) != 0) {
        free(l->name);
        free(l);
        return wl_fail(WATCHLOCK_EINTERNAL, "getrandom failed");
    }
    if ((rc = wl_keys_make(&l->hold.keys, name, name_len)) != WATCHLOCK_OK) {
        free(l->name);
        free(l);
        return rc;
    }
    if (pthread_mutex_init(&l->io_mu, NULL) != 0) {
        wl_keys_clear(&l->hold.keys);
        free(l->name);
        free(l);
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    }
    atomic_init(&l->hold.refs, 1);
    l->key_hash = UINT64_C(14695981039346656037); /* FNV-1a */
    for (size_t i = 0; i < l->hold.keys.lock_len; i++)
        l->key_hash = (l->key_hash ^ (unsigned char)l->hold.keys.lock[i]) * UINT64_C(1099511628211);
    l->key_hash |= 1;
    l->hold.id = atomic_fetch_add(&next_lock_id, 1);
    l->fork_gen = c->fork_gen;
    l->hold.client = c;
    l->hold.ops = ops;
    l->kind = kind;
    l->hold.lease_ms = DEFAULT_LEASE_MS;
    l->hold.auto_renew = true;
    l->hold.state = WATCHLOCK_UNLOCKED;
    l->hold.heap_idx = WL_NOT_IN_HEAP;
    l->hold.dl_idx = WL_NOT_IN_HEAP;
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_lock(&c->mu);
    l->hold.next = c->holds;
    if (c->holds)
        c->holds->prev = &l->hold;
    c->holds = &l->hold;
    pthread_mutex_unlock(&c->mu);
    *out = l;
    return WATCHLOCK_OK;
}

void wl_lock_unref(watchlock_lock *l)
{
    if (atomic_fetch_sub(&l->hold.refs, 1) != 1)
        return;
    watchlock_client *c = l->hold.client;
    if (l->kind->destroy != NULL) /* the kind's own data (a queued kind gives hold.keys.lock back first) */
        l->kind->destroy(l);
    pthread_mutex_destroy(&l->io_mu);
    wl_keys_clear(&l->hold.keys);
    free(l->name);
    free(l->owner_label);
    free(l);
    wl_client_unref(c);
}

void watchlock_lock_free(watchlock_lock *l)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return; /* forked child: never release or touch the parent's lock */
    if (atomic_exchange(&l->timeout_pending, false)) /* wait.c: a sliced wait given up by the free */
        wl_stats_acquire(l->hold.client, WATCHLOCK_ETIMEDOUT, false, false, 0);
    l->kind->free(l); /* the handle's kind (locks.h) */
}

bool wl_handle_free_begin(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&c->mu);
    l->hold.freed = true; /* no callback starts from now on */
    l->hold.on_lost = NULL;
    wl_wait_callbacks(c, &l->hold);
    /* Held: release it. Lost by its deadline: release deletes the key if
     * it still holds this hold (for the safety margin), so waiters need not
     * wait for it to expire. */
    bool held = l->hold.state != WATCHLOCK_UNLOCKED;
    if (held)
        l->hold.hold_count = 1;
    pthread_mutex_unlock(&c->mu);
    return held;
}

void wl_handle_free(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    bool held = wl_handle_free_begin(l);
    if (held && !atomic_load(&c->closed))
        l->hold.ops->release(&l->hold);
    wl_wait_forget(l);
    pthread_mutex_lock(&c->mu);
    wl_unschedule_all(c, &l->hold);
    if (l->hold.state == WATCHLOCK_HELD)
        c->held--;
    l->hold.state = WATCHLOCK_UNLOCKED;
    if (l->hold.prev)
        l->hold.prev->next = l->hold.next;
    else
        c->holds = l->hold.next;
    if (l->hold.next)
        l->hold.next->prev = l->hold.prev;
    pthread_mutex_unlock(&c->mu);
    wl_lock_unref(l);
}

/* ---- dropped handles: abandon ---- */

static void unlink_lock(watchlock_client *c, watchlock_lock *l)
{
    if (l->hold.prev)
        l->hold.prev->next = l->hold.next;
    else
        c->holds = l->hold.next;
    if (l->hold.next)
        l->hold.next->prev = l->hold.prev;
    l->hold.prev = l->hold.next = NULL;
}

void wl_abandoned_end(watchlock_client *c, watchlock_lock *l)
{
    wl_unschedule_all(c, &l->hold);
    if (l->hold.state == WATCHLOCK_HELD)
        c->held--;
    l->hold.state = WATCHLOCK_UNLOCKED;
    l->hold.releasing = false;
    l->hold.hold_count = 0;
    l->hold.hold_gen++;
    l->hold.abandoned = false;
    unlink_lock(c, l);
    wl_lock_unref(l);
}

/* A dropped handle is not an unlock (docs/design.md, "Dropped handles"): a
 * held lock stays in the client's hands, no longer renewed, until its
 * local deadline (the loss timer then calls wl_abandoned_end through
 * wl_lose, silently), a renewal already on the wire finds it taken, or
 * close releases it with the other held locks. The client's list keeps
 * the handle meanwhile, with the user's reference. */
int watchlock_lock_abandon(watchlock_lock *l)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return 0; /* forked child: the parent's lock is none of its business */
    return l->kind->abandon(l); /* the handle's kind (locks.h) */
}

int wl_handle_abandon(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_wait_give_up(l);
    pthread_mutex_lock(&c->mu);
    l->hold.freed = true; /* no callback starts from now on */
    l->hold.on_lost = NULL;
    wl_wait_callbacks(c, &l->hold);
    /* Whether close has already ended the hold is read here, under mu:
     * close marks every hold UNLOCKED under it before releasing them. */
    int dropped = 0;
    if (l->hold.state == WATCHLOCK_HELD) {
        dropped = !l->hold.releasing && wl_now_us() < l->hold.deadline_us;
        l->hold.abandoned = true;
        l->hold.auto_renew = false;          /* a renewal in flight is not rescheduled */
        wl_watchdog_unschedule(c, &l->hold);   /* the deadline heap keeps it: the loss timer ends it */
        pthread_mutex_unlock(&c->mu);
        return dropped;
    }
    wl_unschedule_all(c, &l->hold);
    l->hold.state = WATCHLOCK_UNLOCKED;
    unlink_lock(c, l);
    pthread_mutex_unlock(&c->mu);
    wl_lock_unref(l);
    return 0;
}

/* ---- options ---- */

/* The setters' frame (here and layout.c): the handle checked, then
 * client->mu held until wl_set_end. OK, or the check's error with nothing
 * taken. */
int wl_set_begin(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc == WATCHLOCK_OK)
        pthread_mutex_lock(&l->hold.client->mu);
    return rc;
}

int wl_set_end(watchlock_lock *l)
{
    pthread_mutex_unlock(&l->hold.client->mu);
    return WATCHLOCK_OK;
}

int watchlock_lock_set_lease(watchlock_lock *l, int64_t lease_ms)
{
    if (l != NULL && (lease_ms <= 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS))
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: lease must be 1 ms .. 30 days, got %" PRId64 " ms (%s)",
                       l->hold.quoted, lease_ms,
                       lease_ms < 0 ? "negative" : lease_ms == 0 ? "zero: a lock that expires at once" : "too long");
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    l->hold.lease_ms = lease_ms;
    return wl_set_end(l);
}

int watchlock_lock_set_auto_renew(watchlock_lock *l, int on)
{
    if (l != NULL && on != 0 && on != 1)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: auto-renew must be 0 or 1, got %d", l->hold.quoted, on);
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    l->hold.auto_renew = on != 0;
    return wl_set_end(l);
}

int watchlock_lock_set_renew_interval(watchlock_lock *l, int64_t interval_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    pthread_mutex_lock(&l->hold.client->mu);
    int64_t lease = l->hold.lease_ms;
    if (interval_ms >= 0 && interval_ms < lease) {
        l->hold.interval_ms = interval_ms;
        l->hold.renew_den = l->hold.renew_num = 0; /* replaces a fraction (renew_option.c) */
    }
    pthread_mutex_unlock(&l->hold.client->mu);
    if ((interval_ms < 0 || interval_ms >= lease) && lease < 2)
        return wl_fail(WATCHLOCK_EINVAL,
                       "lock %s: a lease of %" PRId64 " ms leaves no room for a renew interval (only 0 = lease/3)",
                       l->hold.quoted, lease);
    if (interval_ms < 0 || interval_ms >= lease)
        return wl_fail(WATCHLOCK_EINVAL,
                       "lock %s: renew interval must be 0 (lease/3) or 1 .. %" PRId64 " ms (below the lease), got %" PRId64,
                       l->hold.quoted, lease - 1, interval_ms);
    return WATCHLOCK_OK;
}

int watchlock_lock_set_max_renewals(watchlock_lock *l, int64_t max)
{
    if (l != NULL && max < 0)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: max renewals must be >= 0 (0 = unlimited)", l->hold.quoted);
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    l->hold.max_renewals = max;
    return wl_set_end(l);
}

int watchlock_lock_set_max_hold(watchlock_lock *l, int64_t max_hold_ms)
{
    if (l != NULL && (max_hold_ms < 0 || max_hold_ms > WATCHLOCK_MAX_LEASE_MS * 100))
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: max hold must be >= 0 ms (0 = unlimited)", l->hold.quoted);
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    l->hold.max_hold_ms = max_hold_ms;
    return wl_set_end(l);
}

int watchlock_lock_set_on_lost(watchlock_lock *l, watchlock_lost_fn fn, void *userdata)
{
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    l->hold.on_lost = fn;
    l->hold.on_lost_data = userdata;
    if (fn != NULL && l->hold.state == WATCHLOCK_HELD)
        wl_callbacks_arm(l->hold.client); /* set on a held lock: armed as a hold that began with it (loss.c) */
    return wl_set_end(l);
}

int watchlock_lock_set_owner_label(watchlock_lock *l, const char *label)
{
    size_t len = label != NULL ? strnlen(label, WATCHLOCK_MAX_LABEL + 1) : 0;
    if (l != NULL && len > WATCHLOCK_MAX_LABEL)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: owner label is longer than %d bytes", l->hold.quoted,
                       WATCHLOCK_MAX_LABEL);
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    char *copy = NULL;
    if (label != NULL) {
        if ((copy = malloc(len + 1)) == NULL)
            return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        memcpy(copy, label, len + 1);
    }
    pthread_mutex_lock(&l->hold.client->mu);
    char *old = l->owner_label;
    l->owner_label = copy;
    pthread_mutex_unlock(&l->hold.client->mu);
    free(old);
    return WATCHLOCK_OK;
}

/* The owner record's fields for one acquire: the label as set when the
 * attempt began, this host's name and this process's pid. */
/* ---- queries (no I/O) ---- */

/* The getters' frame: false for a handle that cannot be read here (NULL,
 * or the parent's after fork: the getter answers its default); else
 * client->mu is held until read_end. */
static bool read_begin(const watchlock_lock *l)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return false;
    pthread_mutex_lock(&l->hold.client->mu);
    return true;
}

static void read_end(const watchlock_lock *l)
{
    pthread_mutex_unlock(&l->hold.client->mu);
}

/* The state as the caller should see it: a HELD lock past its local
 * deadline is LOST even if the loss timer (starved of CPU, or just resumed
 * after SIGSTOP) has not marked it yet. The first reader past the deadline
 * records the loss through the normal path (the on-lost callback and the
 * lost event fire once), so LOST, once seen, stays: a renewal reply
 * applied later finds the hold over (wl_write_applied). A hold being
 * released just ends (UNLOCKED) when its lease runs out. Handles are never
 * const objects: the cast only undoes the read-only view of the getters. */
static int visible_state(const watchlock_lock *l, int *reason)
{
    if (l->hold.state == WATCHLOCK_HELD && wl_now_us() >= l->hold.deadline_us) {
        watchlock_lock *m = (watchlock_lock *)l;
        wl_lose(m->hold.client, &m->hold, wl_lock_expiry_reason(&l->hold), true);
    }
    *reason = l->hold.state == WATCHLOCK_LOST ? l->hold.lost_reason : WATCHLOCK_LOST_NONE;
    return l->hold.state;
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
    if (!read_begin(l))
        return WATCHLOCK_UNLOCKED;
    int v = state_of(l);
    read_end(l);
    return v;
}

int watchlock_lock_lost_reason(const watchlock_lock *l)
{
    if (!read_begin(l))
        return WATCHLOCK_LOST_NONE;
    int v = lost_reason_of(l);
    read_end(l);
    return v;
}

static int64_t remaining(const watchlock_lock *l)
{
    if (l->hold.state != WATCHLOCK_HELD)
        return 0;
    int64_t left = (l->hold.deadline_us - wl_now_us()) / 1000;
    return left > 0 ? left : 0;
}

int64_t watchlock_lock_remaining_ms(const watchlock_lock *l)
{
    if (!read_begin(l))
        return 0;
    int64_t v = remaining(l);
    read_end(l);
    return v;
}

/* watchlock_lock_fencing_token is quorum_lock.c's (a quorum raises it
 * first); this is the token as the hold recorded it. */
int64_t wl_lock_fence(const watchlock_lock *l)
{
    if (!read_begin(l))
        return 0;
    int64_t v = l->hold.fence;
    read_end(l);
    return v;
}

int64_t watchlock_lock_hold_count(const watchlock_lock *l)
{
    if (!read_begin(l))
        return 0;
    int64_t v = l->hold.state == WATCHLOCK_UNLOCKED ? 0 : l->hold.hold_count;
    read_end(l);
    return v;
}

int64_t watchlock_lock_renewals(const watchlock_lock *l)
{
    if (!read_begin(l))
        return 0;
    int64_t v = l->hold.renewals;
    read_end(l);
    return v;
}

const char *watchlock_lock_name(const watchlock_lock *l, size_t *len)
{
    if (len)
        *len = l ? l->name_len : 0;
    return l ? l->name : NULL;
}

uint64_t watchlock_lock_id(const watchlock_lock *l)
{
    return l ? l->hold.id : 0;
}

int64_t watchlock_lock_lease(const watchlock_lock *l)
{
    if (!read_begin(l))
        return 0;
    int64_t v = l->hold.lease_ms;
    read_end(l);
    return v;
}

/* lost_reason is set by wl_lose and cleared only by the next successful
 * acquire, so once the handle is UNLOCKED it still names the last hold's
 * loss (NONE when that hold was released normally). */
int watchlock_lock_last_lost_reason(const watchlock_lock *l)
{
    if (!read_begin(l))
        return WATCHLOCK_LOST_NONE;
    int v = l->hold.state == WATCHLOCK_UNLOCKED ? l->hold.lost_reason : lost_reason_of(l);
    read_end(l);
    return v;
}

/* issue 25.2: public, for bindings that stop a sliced wait for good. */
