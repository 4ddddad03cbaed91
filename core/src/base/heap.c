/*
 * heap.c - a min-heap of items on one of their int64_t fields. It knows
 * no watchlock type: an item is a pointer, its key and its position live
 * in the item at the offsets given to wl_heap_init.
 *
 * A client keeps two over its holds: the watchdog's (keyed on wake_us:
 * when a hold needs its next renewal) and the loss timer's (keyed on
 * deadline_us: when a hold is lost unless renewed). Each item stores its
 * position in each heap so that a changed key is re-sifted, or the item
 * removed, in O(log n). Callers serialize (the client's mutex).
 *
 * 4-ary: every level a sift passes writes the moved handle's position into
 * that handle, a cache miss with many locks held, and a renewal moves its
 * lock's deadline down the loss timer's heap. Four children per node halve
 * the levels (9 instead of 17 at 150,000 locks); the extra comparisons are
 * within one cache line of the item array.
 */
#include "base/base.h"

#include <stdlib.h>

static int64_t key_of(const wl_heap *h, const void *l)
{
    return *(const int64_t *)((const char *)l + h->key_off);
}

static size_t *idx_of(const wl_heap *h, void *l)
{
    return (size_t *)((char *)l + h->idx_off);
}

static void put(wl_heap *h, size_t i, wl_heap_item it)
{
    h->items[i] = it;
    *idx_of(h, it.item) = i;
}

#define ARITY 4

static void sift_up(wl_heap *h, size_t i)
{
    wl_heap_item it = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / ARITY;
        if (h->items[parent].key <= it.key)
            break;
        put(h, i, h->items[parent]);
        i = parent;
    }
    put(h, i, it);
}

static void sift_down(wl_heap *h, size_t i)
{
    wl_heap_item it = h->items[i];
    for (;;) {
        size_t first = ARITY * i + 1, child = first;
        if (first >= h->len)
            break;
        size_t end = first + ARITY < h->len ? first + ARITY : h->len;
        for (size_t k = first + 1; k < end; k++)
            if (h->items[k].key < h->items[child].key)
                child = k;
        if (h->items[child].key >= it.key)
            break;
        put(h, i, h->items[child]);
        i = child;
    }
    put(h, i, it);
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

bool wl_heap_contains(const wl_heap *h, const void *l)
{
    return *(const size_t *)((const char *)l + h->idx_off) != WL_NOT_IN_HEAP;
}

int wl_heap_update(wl_heap *h, void *l)
{
    size_t *idx = idx_of(h, l);
    int64_t key = key_of(h, l);
    if (*idx != WL_NOT_IN_HEAP) {
        size_t i = *idx;
        int64_t old = h->items[i].key;
        h->items[i].key = key;
        if (key > old)
            sift_down(h, i);
        else if (key < old)
            sift_up(h, i);
        return 0;
    }
    void *items = h->items;
    int grown = wl_grow(&items, &h->cap, h->len, sizeof *h->items, 16);
    h->items = items;
    if (grown != 0)
        return -1;
    put(h, h->len, (wl_heap_item){key, l});
    h->len++;
    sift_up(h, h->len - 1);
    return 0;
}

void wl_heap_remove(wl_heap *h, void *l)
{
    size_t *idx = idx_of(h, l);
    size_t i = *idx;
    if (i == WL_NOT_IN_HEAP)
        return;
    *idx = WL_NOT_IN_HEAP;
    h->len--;
    if (i == h->len)
        return;
    wl_heap_item moved = h->items[h->len];
    put(h, i, moved);
    sift_down(h, i);
    sift_up(h, *idx_of(h, moved.item));
}

void *wl_heap_top(const wl_heap *h)
{
    return h->len > 0 ? h->items[0].item : NULL;
}
