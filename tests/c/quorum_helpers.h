/*
 * quorum_helpers.h - five real redis-servers as a quorum's members, shared
 * by test_quorum.c and test_quorum_restart.c (header-only, as
 * queue_helpers.h): start/free them, open a quorum client over them, a
 * lock with a lease, and a lock's per-member verdict counts.
 */
#ifndef WATCHLOCK_QUORUM_HELPERS_H
#define WATCHLOCK_QUORUM_HELPERS_H

#include "testing.h"

#include <stdio.h>

#define N 5
#define LEASE 1000
#define OPTS "connect_timeout=1s&command_timeout=1s&safety_margin=250ms"

typedef struct five {
    rh_server *s[N];
    char url[N][512];
    const char *urls[N];
} five;

/* Five fresh servers, their URLs with `opts` as the query. */
static inline void five_start_opts(five *f, const char *opts)
{
    for (int i = 0; i < N; i++) {
        f->s[i] = rh_start(NULL);
        CHECK(f->s[i] != NULL);
        snprintf(f->url[i], sizeof f->url[i], "%s?%s", rh_url(f->s[i]), opts);
        f->urls[i] = f->url[i];
    }
}

static inline void five_free(five *f)
{
    for (int i = 0; i < N; i++)
        rh_free(f->s[i]);
}

static inline watchlock_client *open_q(const char *const *urls, size_t n)
{
    watchlock_client *c = NULL;
    CHECK_OK(watchlock_client_open_quorum(&c, urls, n));
    CHECK_EQ(watchlock_client_member_count(c), n);
    return c;
}

static inline watchlock_lock *lock_lease(watchlock_client *c, const char *name, int64_t lease)
{
    watchlock_lock *l = new_lock(c, name);
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

/* How many of the N members gave the lock's last attempt `status`. */
static inline int count_status(watchlock_lock *l, int status)
{
    int k = 0;
    for (size_t i = 0; i < N; i++)
        k += watchlock_lock_member_status(l, i) == status;
    return k;
}

/* A quorum client over the first n of the five, past the restart window
 * of `lease` (recorded on the members by its first acquire; a wait on a
 * condition, never a fixed sleep). */
static inline watchlock_client *settled_lease(five *f, size_t n, int64_t lease)
{
    watchlock_client *c = open_q(f->urls, n);
    watchlock_lock *l = lock_lease(c, "settle", lease);
    CHECK_OK(watchlock_lock_acquire(l, 8 * LEASE));
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_QUORUM_KEPT_OUT) == 0, 8 * LEASE);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_QUORUM_KEPT_OUT), 0);
    return c;
}

/* A client over all five past the restart window of LEASE. */
static inline watchlock_client *settled(five *f)
{
    return settled_lease(f, N, LEASE);
}

static inline void five_start(five *f)
{
    five_start_opts(f, OPTS);
}

/* The plain lock's key of `name` on one member: exists, its PTTL. */
static inline long long key_exists(rh_server *s, const char *name)
{
    return rh_int(s, "EXISTS watchlock:{%s}", name);
}

static inline long long key_pttl(rh_server *s, const char *name)
{
    return rh_int(s, "PTTL watchlock:{%s}", name);
}

#endif
