/*
 * heap.c - a min-heap of lock handles on one of their int64_t fields.
 *
 * A client keeps two: the watchdog's (keyed on wake_us: when a lock needs
 * its next renewal) and the loss timer's (keyed on deadline_us: when a lock
 * is lost unless renewed). Each handle stores its position in each heap so
 * that a changed key is re-sifted, or the handle removed, in O(log n).
 * Callers hold client->mu.
 */
#include "internal.h"

#include <stdlib.h>

static int64_t key_of(const wl_heap *h, const watchlock_lock *l)
{
    return *(const int64_t *)((const char *)l + h->key_off);
}

static size_t *idx_of(const wl_heap *h, watchlock_lock *l)
{
    return (size_t *)((char *)l + h->idx_off);
}

static void put(wl_heap *h, size_t i, watchlock_lock *l)
{
    h->items[i] = l;
    *idx_of(h, l) = i;
}

static void sift_up(wl_heap *h, size_t i)
{
    watchlock_lock *l = h->items[i];
    int64_t k = key_of(h, l);
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (key_of(h, h->items[parent]) <= k)
            break;
        put(h, i, h->items[parent]);
        i = parent;
    }
    put(h, i, l);
}

static void sift_down(wl_heap *h, size_t i)
{
    watchlock_lock *l = h->items[i];
    int64_t k = key_of(h, l);
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && key_of(h, h->items[child + 1]) < key_of(h, h->items[child]))
            child++;
        if (key_of(h, h->items[child]) >= k)
            break;
        put(h, i, h->items[child]);
        i = child;
    }
    put(h, i, l);
}

void wl_heap_init(wl_heap *h, size_t key_off, size_t idx_off)
{
    h->items = NULL;
    h->len = h->cap = 0;
    h->key_off = key_off;
    h->idx_off = idx_off;
}

void wl_heap_free(wl_heap *h)
{
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}

bool wl_heap_contains(const wl_heap *h, const watchlock_lock *l)
{
    return *(const size_t *)((const char *)l + h->idx_off) != WL_NOT_IN_HEAP;
}

int wl_heap_update(wl_heap *h, watchlock_lock *l)
{
    size_t *idx = idx_of(h, l);
    if (*idx != WL_NOT_IN_HEAP) {
        sift_down(h, *idx);
        sift_up(h, *idx);
        return 0;
    }
    void *items = h->items;
    int grown = wl_grow(&items, &h->cap, h->len, sizeof *h->items, 16);
    h->items = items;
    if (grown != 0)
        return -1;
    put(h, h->len, l);
    h->len++;
    sift_up(h, h->len - 1);
    return 0;
}

void wl_heap_remove(wl_heap *h, watchlock_lock *l)
{
    size_t *idx = idx_of(h, l);
    size_t i = *idx;
    if (i == WL_NOT_IN_HEAP)
        return;
    *idx = WL_NOT_IN_HEAP;
    h->len--;
    if (i == h->len)
        return;
    watchlock_lock *moved = h->items[h->len];
    put(h, i, moved);
    sift_down(h, i);
    sift_up(h, *idx_of(h, moved));
}

watchlock_lock *wl_heap_top(const wl_heap *h)
{
    return h->len > 0 ? h->items[0] : NULL;
}
