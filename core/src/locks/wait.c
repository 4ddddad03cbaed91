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

