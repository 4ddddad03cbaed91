/*
 * stats.c - the client's monitoring counters and histograms (stats.h,
 * issue 25 item 5), read with watchlock_client_stat() and
 * watchlock_client_histogram(). Every update is a relaxed atomic add: no
 * mutex, no allocation; the acquire path adds one clock read per call.
 */
#include "hold/hold.h"

#include <limits.h>

#define RELAXED memory_order_relaxed

static void add(atomic_uint_fast64_t *v, uint64_t n)
{
    atomic_fetch_add_explicit(v, n, RELAXED);
}

/* Bucket of a value: 0 for <= 64 us, else ceil(log4(us / 64)), capped. */
static int bucket_of(int64_t us)
{
    if (us <= 64)
        return 0;
    uint64_t v = (uint64_t)(us - 1) >> 6; /* >= 1 */
    int bits = 64 - __builtin_clzll(v);
    int i = (bits + 1) / 2;
    return i < WL_HIST_BUCKETS - 1 ? i : WL_HIST_BUCKETS - 1;
}

static int64_t upper_of(int i)
{
    return i >= WL_HIST_BUCKETS - 1 ? INT64_MAX : INT64_C(64) << (2 * i);
}

static void hist_add(wl_hist *h, int64_t us)
{
    if (us < 0)
        us = 0;
    add(&h->bucket[bucket_of(us)], 1);
    add(&h->count, 1);
    add(&h->sum_us, (uint64_t)us);
}

/* pending: a timed-out slice of a wait that goes on (locks/wait.c
 * wl_acquire_record): not a timeout yet, counted when the wait is given up. */
void wl_stats_acquire(watchlock_client *c, int rc, bool waited, bool pending, int64_t t0_us)
{
    if (rc == WATCHLOCK_OK) {
        add(&c->stats.acquires, 1);
        if (waited)
            add(&c->stats.contended, 1);
        hist_add(&c->stats.wait, wl_now_us() - t0_us);
    } else if (rc == WATCHLOCK_ETIMEDOUT && !pending) { /* an acquire that returned without the lock */
        add(&c->stats.acquire_timeouts, 1);
    }
}

void wl_stats_hold(watchlock_client *c, int64_t acquired_us)
{
    hist_add(&c->stats.hold, wl_now_us() - acquired_us);
}

void wl_stats_lost(watchlock_client *c, int reason)
{
    if (reason > 0 && reason < WL_LOST_REASONS)
        add(&c->stats.lost[reason], 1);
}

void wl_stats_release_retry(watchlock_client *c)
{
    add(&c->stats.release_retries, 1);
}

void wl_stats_renew_round(watchlock_client *c, int64_t took_us)
{
    hist_add(&c->stats.renew_rtt, took_us);
}

static const wl_hist *hist(const watchlock_client *c, int which)
{
    switch (which) {
    case WATCHLOCK_HIST_WAIT: return &c->stats.wait;
    case WATCHLOCK_HIST_HOLD: return &c->stats.hold;
    case WATCHLOCK_HIST_RENEW_RTT: return &c->stats.renew_rtt;
    default: return NULL;
    }
}

static int64_t load(const atomic_uint_fast64_t *v)
{
    uint64_t n = atomic_load_explicit((atomic_uint_fast64_t *)v, RELAXED);
    return n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n;
}

int64_t wl_stats_get(const watchlock_client *c, int which)
{
    const wl_stats *s = &c->stats;
    switch (which) {
    case WATCHLOCK_STAT_ACQUIRES: return load(&s->acquires);
    case WATCHLOCK_STAT_CONTENDED_ACQUIRES: return load(&s->contended);
    case WATCHLOCK_STAT_ACQUIRE_TIMEOUTS: return load(&s->acquire_timeouts);
    case WATCHLOCK_STAT_RELEASE_RETRIES: return load(&s->release_retries);
    case WATCHLOCK_STAT_LOST_TAKEN:
    case WATCHLOCK_STAT_LOST_EXPIRED:
    case WATCHLOCK_STAT_LOST_MAX_RENEWALS:
    case WATCHLOCK_STAT_LOST_MAX_HOLD:
    case WATCHLOCK_STAT_LOST_CONNECTION:
        return load(&s->lost[which - WATCHLOCK_STAT_LOST_TAKEN + WATCHLOCK_LOST_TAKEN]);
    case WATCHLOCK_STAT_WAIT_US_SUM: return load(&s->wait.sum_us);
    case WATCHLOCK_STAT_HOLD_US_SUM: return load(&s->hold.sum_us);
    case WATCHLOCK_STAT_RENEW_RTT_US_SUM: return load(&s->renew_rtt.sum_us);
    default: return -1;
    }
}

int watchlock_client_histogram(watchlock_client *c, int which, int bucket, int64_t *upper_us, int64_t *count)
{
    if (c == NULL || upper_us == NULL || count == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "histogram: NULL argument");
    if (c->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED, "histogram: client inherited across fork()");
    const wl_hist *h = hist(c, which);
    if (h == NULL || bucket < 0 || bucket >= WL_HIST_BUCKETS)
        return wl_fail(WATCHLOCK_EINVAL, "histogram %d, bucket %d: no such histogram or bucket (0 .. %d)", which,
                       bucket, WL_HIST_BUCKETS - 1);
    *upper_us = upper_of(bucket);
    *count = load(&h->bucket[bucket]);
    return WATCHLOCK_OK;
}
