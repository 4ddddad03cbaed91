/*
 * hold/quorum_admin.c - the quorum placement's admin calls (hold.h
 * wl_placement: inspect, force_release): the script on every member (each
 * member's connection opened by topology/quorum's member server, under the
 * restart rule), a majority verdict. Runs on the caller's thread; no
 * library mutex held.
 */
#include "hold/hold.h"
#include "topology/quorum.h"

#include <stdlib.h>

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x > y ? -1 : x < y;
}

/* Held when a majority of members hold the name (by anyone: inspect does
 * not know owners); remaining the lease the majority still holds (the
 * majority-th longest); fence the highest. */
int wl_quorum_inspect(watchlock_client *c, const wl_keys *keys, int *held, int64_t *remaining_ms, int64_t *fence)
{
    wl_quorum *q = c->quorum;
    size_t answered = 0, holding = 0;
    int64_t left[WL_QMAX], top = 0;
    for (size_t i = 0; i < q->n; i++) {
        int h;
        int64_t rem, f;
        if (wl_inspect_at(q->m[i].srv, keys, &h, &rem, &f) != WATCHLOCK_OK)
            continue;
        answered++;
        if (h)
            left[holding++] = rem < 0 ? INT64_MAX : rem;
        if (f > top)
            top = f;
    }
    if (answered < q->majority)
        return wl_fail(WATCHLOCK_ECONN, "inspect: %zu of %zu members answered, fewer than a majority", answered,
                       q->n);
    qsort(left, holding, sizeof *left, cmp_desc);
    bool maj = holding >= q->majority;
    if (held)
        *held = maj;
    if (remaining_ms)
        *remaining_ms = !maj ? 0 : left[q->majority - 1] == INT64_MAX ? -1 : left[q->majority - 1];
    if (fence)
        *fence = top;
    return WATCHLOCK_OK;
}

/* Deleted on every member that answers; *released when any had the key. */
int wl_quorum_force_release(watchlock_client *c, const wl_keys *keys, int *released)
{
    wl_quorum *q = c->quorum;
    size_t answered = 0, deleted = 0;
    for (size_t i = 0; i < q->n; i++) {
        int d;
        if (wl_force_release_at(q->m[i].srv, keys, &d) != WATCHLOCK_OK)
            continue;
        answered++;
        deleted += d != 0;
    }
    if (released)
        *released = deleted > 0;
    if (answered < q->majority)
        return wl_fail(WATCHLOCK_ECONN, "force release: %zu of %zu members answered, fewer than a majority", answered,
                       q->n);
    return WATCHLOCK_OK;
}
