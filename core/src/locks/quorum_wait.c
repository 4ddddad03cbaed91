/*
 * quorum_wait.c - a quorum waiter's wake-ups (locks/quorum_lock.c): a
 * release on any member signals the waiter's wl_qwait (from the member's
 * subscriber thread), and the random slice a woken waiter lets pass before
 * its one attempt.
 *
 * One attempt per release, spread among the waiters: a release is
 * published by every member that held the key (up to N wake-ups), and every
 * waiter hears it. A random slice of max(4 ms, 8 round trips) absorbs the
 * rest of that burst, and the waiters' attempts follow one another instead
 * of colliding: the first takes the majority, the others find it held (no
 * grant to give back, so no give-back's wake-up either) and wait for the
 * next release. The round trip is the longest attempt of the wait (one
 * that met no unreachable member): with far members an attempt lasts as
 * long as the far majority's answers, and two attempts closer than that
 * interleave on the members. An attempt that failed with grants collided
 * (a split: 2/2/1 whatever the 1 is, another waiter's grant or a key still
 * on its way out); after each collision in a row the slice doubles (up to
 * 16 times), so contenders that keep colliding spread out until one
 * wins. A slice is at most a quarter of the lease.
 *
 * wl_qwait's mutex is a leaf (taken under a subscriber's mutex by the
 * signal, under no library mutex by the waiter).
 */
#include "locks/locks.h"

#define SLICE_MIN_US 4000   /* a slice spans at least this */
#define SLICE_ROUND_TRIPS 8 /* ... and this many round trips */
#define BACKOFF_MAX_SHIFT 4 /* doubled per collision in a row, up to 2^this */

int64_t wl_jitter_us(int64_t max_us)
{
    uint32_t r = 0;
    if (max_us <= 0 || wl_random_bytes(&r, sizeof r) != 0)
        return 0;
    return (int64_t)(r % (uint64_t)max_us);
}

int64_t wl_qwait_spread_us(int collisions, int64_t rtt_us, int64_t lease_ms)
{
    int64_t max = SLICE_ROUND_TRIPS * (rtt_us > 0 ? rtt_us : 0);
    if (max < SLICE_MIN_US)
        max = SLICE_MIN_US;
    max <<= collisions < BACKOFF_MAX_SHIFT ? (collisions > 0 ? collisions : 0) : BACKOFF_MAX_SHIFT;
    if (max > lease_ms * 250 && lease_ms * 250 >= SLICE_MIN_US)
        max = lease_ms * 250;
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
