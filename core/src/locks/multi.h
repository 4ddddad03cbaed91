/*
 * locks/multi.h - the multi-lock's private types (multi.c: the handle, its
 * hold ops, extend, free, abandon, queries; multi_io.c: acquire,
 * release, rollback). Only these two files include it.
 */
#ifndef WATCHLOCK_MULTI_H
#define WATCHLOCK_MULTI_H

#include "locks/locks.h"

typedef struct wl_member {
    wl_hold hold;       /* first: the ops get the member back */
    watchlock_lock *group;
    size_t index;       /* in the user's order */
    int slot;           /* cluster slot of its keys (0 without cluster) */
    char *name;
    size_t name_len;
} wl_member;

/* How a multi-lock's names reach the servers: the client's placement
 * meets the kind here, once, chosen by the constructor (multi.c, through
 * quorum_multi.c's wl_multi_io_for): one server / Sentinel / Cluster
 * (multi.c's table over multi_io.c) or a quorum (quorum_multi.c).
 * - acquire: the kind's acquire entry (io_mu is taken inside);
 * - release: the release script for the selected sorted members (sel),
 *   results[i] 1 released, 0 no key, -1 another owner's, WL_MULTI_UNKNOWN
 *   when not confirmed; OK or the first error. Without client->mu;
 * - renew: extend's writes, one per sorted member (ident, from, ms as the
 *   renew script takes them), results[i] WL_WRITE_*; OK or an error. */
#define WL_MULTI_UNKNOWN (-2)
typedef struct wl_multi_io {
    int (*acquire)(watchlock_lock *l, int64_t wait_ms);
    int (*release)(watchlock_lock *l, const bool *sel, int *results);
    int (*renew)(watchlock_lock *l, const char *const *ident, const char *const *from, const char *const *ms,
                 int *results);
} wl_multi_io;

typedef struct wl_multi {
    const wl_multi_io *io; /* the placement's, never NULL (set by the constructor) */
    size_t n;
    wl_member *m;        /* sorted by lock key */
    wl_member **by_user; /* the user's order */
    long lost;           /* user index of the name whose loss lost the group, -1 none */
    /* io_mu: the fast acquire (multi_io.c take_fast) is tried once a script
     * acquire has seeded these names' counters, and not right after an
     * attempt that found a name held */
    bool seeded, last_busy;
} wl_multi;

static inline wl_multi *multi_of(const watchlock_lock *l)
{
    return l->kind_data;
}

static inline wl_member *member_of(wl_hold *h)
{
    return (wl_member *)h;
}

/* ---- the members' and the group's answers to the hold layer ---- */

/* Drops one reference of a member (the group's while linked, the
 * watchdog's while a renewal is in flight, ...): the last one drops the
 * member's reference to its group. */
static inline void member_unref(wl_hold *h)
{
    if (atomic_fetch_sub(&h->refs, 1) == 1)
        wl_lock_unref(member_of(h)->group);
}

static inline void unlink_hold(watchlock_client *c, wl_hold *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else if (c->holds == h)
        c->holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
}

static inline void link_hold(watchlock_client *c, wl_hold *h)
{
    h->prev = NULL;
    h->next = c->holds;
    if (c->holds)
        c->holds->prev = h;
    c->holds = h;
}

/* The hold ends, with client->mu held: out of the heaps, UNLOCKED. */
static inline void end_hold(watchlock_client *c, wl_hold *h)
{
    wl_unschedule_all(c, h);
    if (h->state == WATCHLOCK_HELD)
        c->held--;
    h->state = WATCHLOCK_UNLOCKED;
    h->releasing = false;
    h->hold_count = 0;
    h->hold_gen++;
}

/* The earliest deadline of the group's held members. */
static inline void group_deadline(watchlock_lock *l)
{
    wl_multi *m = multi_of(l);
    int64_t d = INT64_MAX;
    for (size_t i = 0; i < m->n; i++)
        if (m->m[i].hold.state == WATCHLOCK_HELD && m->m[i].hold.deadline_us < d)
            d = m->m[i].hold.deadline_us;
    l->hold.deadline_us = d;
}

/* The run of sorted members that starts at i: [i, end) share a slot
 * (every member shares the one server without cluster). */
static inline size_t run_end(const wl_multi *m, size_t i, bool sharded)
{
    size_t j = i + 1;
    while (j < m->n && (!sharded || m->m[j].slot == m->m[i].slot))
        j++;
    return j;
}

/* The multi-lock's acquire prologue (multi_io.c; its acquire and the
 * quorum's, quorum_multi.c): a group held now is entered again
 * (*reentered, no mutex held); otherwise the renew interval checked, an
 * earlier hold's keys given back and the group UNLOCKED, OK with io_mu
 * held (client->mu not); an error with neither. */
int wl_multi_begin(watchlock_lock *l, bool *reentered);
int wl_multi_acquire(watchlock_lock *l, int64_t wait_ms);
int wl_multi_release(watchlock_lock *l);
/* The multi-release script's keys and arguments for the k sorted members
 * idx[0..k) (multi_io.c; one server's and the quorum's release): their lock
 * keys, then each one's token prefix (in prefix[j]) and channel, then the
 * publish command; argv/lens hold 3k + 1. Takes client->mu. */
void wl_multi_release_argv(watchlock_lock *l, const size_t *idx, size_t k, const char *publish,
                           char (*prefix)[WL_IDENT_SIZE], const char **argv, size_t *lens);
/* multi_io.c's release entry (one server, a run per slot). */
int wl_multi_release_single(watchlock_lock *l, const bool *sel, int *results);
/* With client->mu, at the end of an acquire: every member held, the group
 * becomes HELD (true); false when one was lost meanwhile (multi_io.c). */
bool wl_multi_group_begin(watchlock_lock *l);
/* The quorum's release and extend writes (quorum_multi_release.c). */
int wl_qmulti_release(watchlock_lock *l, const bool *sel, int *results);
int wl_qmulti_renew(watchlock_lock *l, const char *const *ident, const char *const *from, const char *const *ms,
                    int *results);
/* The table of the client's placement (quorum_multi.c): the quorum's on
 * a quorum client, `single` on any other. */
const wl_multi_io *wl_multi_io_for(const watchlock_client *c, const wl_multi_io *single);
/* Gives back every name not UNLOCKED (best effort) and marks them UNLOCKED. */
void wl_multi_rollback(watchlock_lock *l);

#endif
