/*
 * base/base.h - the lowest layer: errors, clocks, randomness, fork
 * generation, small helpers, SHA-256 and a generic min-heap. No watchlock
 * types here. See core/src/LAYERS for the layers and docs/design.md.
 *
 * Lock order of the whole library (never take an earlier one while holding
 * a later one):
 *   1. watchlock_lock.io_mu   serializes one handle's acquire/release/extend round trips
 *   2. watchlock_client.mu    lock states, both heaps, lost events, callbacks, stats
 *   3. wl_server.mu           the idle connection pool and the node's address
 *   wl_sentinel.mu (sentinel.c) is a leaf like wl_subscriber.mu.
 *   wl_subscriber.mu is a leaf: nothing else is taken while holding it, and
 *   it is never taken while holding client.mu.
 *   wl_queued.wake_mu (locks/waiter.c: a waiting thread's channel entry, for
 *   the watchdog's wake-up) is taken under no other library mutex; only
 *   wl_subscriber.mu is taken under it.
 * No network I/O is done while holding client.mu or a pool/subscriber mutex,
 * except the subscriber thread's non-blocking reads/writes of small commands
 * on its own socket. No user callback runs while any library mutex is held.
 */
#ifndef WATCHLOCK_BASE_H
#define WATCHLOCK_BASE_H

#include "watchlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define WL_UNUSED(x) ((void)(x))
#define WL_FORMAT(a, b) __attribute__((format(printf, a, b)))

/* ---- errors (errors.c) ---- */
/* Records a detail message for this thread and returns `status`. */
int wl_fail(int status, const char *fmt, ...) WL_FORMAT(2, 3);

/* ---- time, randomness, fork (util.c) ---- */
/* CLOCK_BOOTTIME in microseconds (it runs on while the host is suspended,
 * as the server's clock does): every deadline and timestamp of the
 * library. */
int64_t wl_now_us(void);
/* Test hook (tests/c/test_clock.c, which links the static library; hidden
 * like every internal symbol, so libwatchlock.so does not export it):
 * microseconds added to CLOCK_BOOTTIME only, as a suspend of the host
 * would. Always 0 outside that test. */
extern atomic_llong wl_test_suspend_us;
void wl_timespec_at(struct timespec *ts, int64_t at_us);
int wl_cond_init(pthread_cond_t *cond); /* a condvar on CLOCK_MONOTONIC */
/* Waits until signalled or at_us (wl_now_us time), or at most a second
 * (the condvar sleeps on CLOCK_MONOTONIC, which a suspend stops): callers
 * loop and re-check; at_us < 0 waits without limit. */
void wl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t at_us);
int wl_random_bytes(void *buf, size_t len);
/* Incremented in every child after fork(); handles remember their value. */
unsigned wl_fork_generation(void);
/* Makes a printable label of bytes for messages: 'name' (truncated, escaped). */
void wl_quote_name(char *out, size_t out_size, const void *name, size_t len);
/* First call of every library thread: blocks all signals (they belong to
 * the application's threads) and names the thread. */
void wl_thread_start(const char *name);
/* Makes room for one more item in a growing array (doubling from `first`).
 * 0, or -1 out of memory (the array is unchanged). */
int wl_grow(void **items, size_t *cap, size_t len, size_t size, size_t first);
/* Now + ms, saturating (never overflows); ms < 0 gives -1 ("no limit"). */
int64_t wl_deadline_after_ms(int64_t ms);
/* Hex text of 16 random bytes into out[33]; -1 when getrandom fails. */
int wl_random_token(char out[33]);
/* The decimal digits of v into buf (at least 21 bytes), NUL-terminated;
 * returns their number. For the hot paths' arguments (snprintf was a
 * visible share of a lock cycle's client time). */
size_t wl_fmt_i64(char *buf, int64_t v);
/* "<verb> <quoted name>" into buf (size bytes, truncated): the `what` of
 * a call's error messages. */
void wl_what(char *buf, size_t size, const char *verb, const char *quoted);

/* ---- SHA-256 (sha256.c) ---- */
void wl_sha256(const void *data, size_t len, unsigned char out[32]);

/* ---- a min-heap of items on one of their int64_t fields (heap.c) ----
 * Each slot keeps a copy of its item's key, so sifting compares keys in the
 * array instead of reading an item per level (a cache miss each with a
 * million items). The item keeps its own index in the heap (idx_off);
 * callers serialize (the client's mutex). */
typedef struct wl_heap_item {
    int64_t key;
    void *item;
} wl_heap_item;
typedef struct wl_heap {
    wl_heap_item *items;
    size_t len, cap;
    size_t key_off, idx_off; /* offsetof the key and of the item's index in this heap */
} wl_heap;
#define WL_NOT_IN_HEAP ((size_t)-1)
void wl_heap_init(wl_heap *h, size_t key_off, size_t idx_off);
void wl_heap_free(wl_heap *h);
int wl_heap_update(wl_heap *h, void *item); /* insert or re-sift; -1 out of memory */
void wl_heap_remove(wl_heap *h, void *item);
bool wl_heap_contains(const wl_heap *h, const void *item);
void *wl_heap_top(const wl_heap *h);

#endif
