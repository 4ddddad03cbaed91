/*
 * quorum_wait.c - a quorum waiter's wake-ups (locks/quorum_lock.c): a
 * release on any member signals the waiter's wl_qwait (from the member's
 * subscriber thread), and the random slice a woken waiter lets pass before
 * its one attempt.
 *
 * One attempt per release, spread among the waiters: a release is
 * published by every member that held the key (up to N wake-ups), and every
 * waiter hears it. A random slice of max(4 ms, 8 attempts' time) absorbs
 * the rest of that burst, and the waiters' attempts follow one another
 * instead of colliding: the first takes the majority, the others find it
 * held (no grant to give back, so no give-back's wake-up either) and wait
 * for the next release. A split vote (every contender gave back) spreads
 * over up to 20 ms.
 *
 * wl_qwait's mutex is a leaf (taken under a subscriber's mutex by the
 * signal, under no library mutex by the waiter).
 */
#include "locks/locks.h"

#define SPLIT_JITTER_MAX_US 20000 /* a split vote: the next attempt within this (random) */
#define WAKE_JITTER_MIN_US 4000   /* a wake-up: within max(this, 8 attempts' time) (random) */

int64_t wl_jitter_us(int64_t max_us)
{
    uint32_t r = 0;
    if (max_us <= 0 || wl_random_bytes(&r, sizeof r) != 0)
        return 0;
    return (int64_t)(r % (uint64_t)max_us);
}

int64_t wl_qwait_spread_us(bool split, int64_t attempt_us)
{
    int64_t max = split ? SPLIT_JITTER_MAX_US : 8 * attempt_us;
    if (max < WAKE_JITTER_MIN_US)
        max = WAKE_JITTER_MIN_US;
    if (max > SPLIT_JITTER_MAX_US)
        max = SPLIT_JITTER_MAX_US;
    return wl_jitter_us(max);
}

void wl_qwait_signal(void *arg) /* under a subscriber's mutex: only signals */
{
    wl_qwait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->count++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

uint64_t wl_qwait_count(wl_qwait *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t v = w->count;
    pthread_mutex_unlock(&w->mu);
    return v;
}

bool wl_qwait_until(wl_qwait *w, uint64_t seen, int64_t at_us, bool wakeable)
{
    pthread_mutex_lock(&w->mu);
    while ((!wakeable || w->count <= seen) && wl_now_us() < at_us)
        wl_cond_wait_until(&w->cond, &w->mu, at_us);
    bool woken = wakeable && w->count > seen;
    pthread_mutex_unlock(&w->mu);
    return woken;
}
