/*
 * stats.h - the client's counters and histograms for monitoring (issue 25
 * item 5): acquires, contended acquires, acquire timeouts, losses by
 * reason, release retries, and log-scale histograms of the wait time (an
 * acquire call until the hold starts), the hold time (hold start until its
 * release) and the renewal round trip (a watchdog round's network time).
 *
 * Lock-free: relaxed atomic adds on the hot path, no mutex; a reader sees
 * each counter exactly but not all of them at one instant.
 */
#ifndef WATCHLOCK_STATS_H
#define WATCHLOCK_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bucket i counts values <= 64 us * 4^i (64 us .. 1073 s), the last one
 * everything above (+Inf): WATCHLOCK_HIST_BUCKETS in watchlock.h. */
#define WL_HIST_BUCKETS 14
#define WL_LOST_REASONS 6 /* WATCHLOCK_LOST_NONE .. WATCHLOCK_LOST_CONNECTION */

typedef struct wl_hist {
    atomic_uint_fast64_t bucket[WL_HIST_BUCKETS];
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_us;
} wl_hist;

typedef struct wl_stats {
    atomic_uint_fast64_t acquires, contended, acquire_timeouts, release_retries;
    atomic_uint_fast64_t lost[WL_LOST_REASONS];
    wl_hist wait, hold, renew_rtt;
} wl_stats;

struct watchlock_client;
struct watchlock_lock;
/* An acquire call that started at t0_us ended with rc; `waited`: it found
 * the lock held at least once (contended); `pending`: a timeout that is
 * not one yet (a slice of a wait that goes on: locks/wait.c
 * wl_acquire_record), not counted. t0_us is the wait's start. */
void wl_stats_acquire(struct watchlock_client *c, int rc, bool waited, bool pending, int64_t t0_us);
/* A hold that started at acquired_us was released now. */
void wl_stats_hold(struct watchlock_client *c, int64_t acquired_us);
void wl_stats_lost(struct watchlock_client *c, int reason);
void wl_stats_release_retry(struct watchlock_client *c);
void wl_stats_renew_round(struct watchlock_client *c, int64_t took_us);
/* watchlock_client_stat() for the ids this file keeps; -1 for others. */
int64_t wl_stats_get(const struct watchlock_client *c, int which);

#endif
