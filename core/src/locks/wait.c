/*
 * wait.c - waiting for a name held by another owner: the channel joined on
 * the subscriber that carries the name's wake-ups, and the wait a timed-out
 * acquire leaves for the next acquire of the handle to resume.
 *
 * A wait that timed out while the holder's lease still ran is kept on the
 * handle (subscription, wake-up generation, end of the holder's lease), so
 * that the next acquire with a wait resumes it instead of sending another
 * acquire that would fail the same way. Bindings that wait in slices (to
 * stay interruptible) therefore never poll the server.
 */
#include "locks/locks.h"

#define NO_TTL_POLL_US 1000000   /* a key without expiry (not ours): re-check this often */

void wl_wait_save(watchlock_lock *l, wl_subscriber *sub, wl_sub_entry *entry, uint64_t gen, int64_t until_us)
{
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&c->mu);
    wl_sub_entry *old = l->wait_entry;
    wl_subscriber *old_sub = l->wait_sub;
    l->wait_entry = entry;
    l->wait_sub = sub;
    l->wait_gen = gen;
    l->wait_until_us = until_us;
    pthread_mutex_unlock(&c->mu);
    if (old != NULL)
        wl_sub_leave(old_sub, old);
}

wl_sub_entry *wl_wait_take(watchlock_lock *l, wl_subscriber **sub, uint64_t *gen, int64_t *until_us)
{
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&c->mu);
    wl_sub_entry *entry = l->wait_entry;
    *sub = l->wait_sub;
    *gen = l->wait_gen;
    *until_us = l->wait_until_us;
    l->wait_entry = NULL;
    l->wait_sub = NULL;
    pthread_mutex_unlock(&c->mu);
    return entry;
}

void wl_wait_forget(watchlock_lock *l)
{
    uint64_t gen;
    int64_t until;
    wl_subscriber *sub;
    wl_sub_entry *entry = wl_wait_take(l, &sub, &gen, &until);
    if (entry != NULL)
        wl_sub_leave(sub, entry);
}

/* "A timeout is an acquire that returned without the lock" (stats.c):
 * a caller that waits in slices (watchlock_lock_set_wait_slices) makes
 * several acquire calls for one wait, so a slice that times out is not yet
 * a timeout: it stays pending, the next call goes on with the wait (its
 * outcome replaces the pending one: the lock, or an error), and the wait
 * ends without the lock only when the caller gives it up
 * (watchlock_lock_forget_wait, close, abandon): counted then, once.
 * Without slices every call is a whole acquire and counts at once. */
void wl_acquire_record(watchlock_lock *l, int rc, bool waited, int64_t t0_us)
{
    bool sliced = atomic_load(&l->wait_slices);
    atomic_store(&l->timeout_pending, rc == WATCHLOCK_ETIMEDOUT && sliced);
    wl_stats_acquire(l->hold.client, rc, waited, rc == WATCHLOCK_ETIMEDOUT && sliced, t0_us);
}

void wl_wait_give_up(watchlock_lock *l)
{
    wl_wait_forget(l);
    if (atomic_exchange(&l->timeout_pending, false))
        wl_stats_acquire(l->hold.client, WATCHLOCK_ETIMEDOUT, false, false, 0);
}

/* Joins the lock's release channel on the subscriber that carries it. */
int wl_wait_join(watchlock_lock *l, wl_subscriber **sub, wl_sub_entry **entry)
{
    char what[120];
    wl_what(what, sizeof what, "acquire", l->hold.quoted);
    return wl_client_join(l->hold.client, l->hold.keys.channel, l->hold.keys.channel_len, what, sub, entry);
}

/* When the holder's lease ends, by the PTTL an attempt saw. */
int64_t wl_wait_holder_end(int64_t pttl_ms)
{
    int64_t now = wl_now_us();
    if (pttl_ms > 0)
        return now + pttl_ms * 1000 + 1000;
    return pttl_ms == -1 ? now + NO_TTL_POLL_US : now;
}

