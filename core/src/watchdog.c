/*
 * watchdog.c - the one renewal thread of a client.
 *
 * What it does: every held lock of the client sits in a min-heap keyed on
 * its next wake-up time: the next renewal (acquire or last renewal sent +
 * interval) while it is being renewed, else its local deadline. The thread
 * sleeps on wd_cond until the top entry is due (or a quarter interval before
 * its renewal), then takes every lock that is due, or whose renewal is due
 * within half its interval (early renewal is harmless: it sets, never adds;
 * and it makes locks acquired at different moments converge into one
 * round), and sends all their renewals in one pipeline on its own
 * connection: one round trip per round.
 *
 * Deadlines: a lock's local deadline is the CLOCK_MONOTONIC time at which
 * its last successful renewal (or the acquire) was *sent*, plus the lease,
 * minus a drift margin (1% + 2 ms). A lock past its deadline is LOST, with
 * the reason that stopped its renewals: max renewals / max hold when a cap
 * stopped them, connection when renewals were failing on the network,
 * expired otherwise (auto-renew off, or the process was stopped). Network
 * time is bounded so that the deadline check never waits on the network:
 * the round's connect and command timeouts end at the nearest deadline of
 * any held lock. A "not owner" reply marks the lock LOST (taken) at once.
 *
 * Locking: the heap and every lock's state are guarded by client->mu. The
 * thread holds it while choosing and while applying results, never during
 * I/O or while running on-lost callbacks. A lock in flight holds an extra
 * reference and is out of the heap; hold_gen tells whether the hold the
 * renewal was for still exists when the reply comes back.
 */
#include "internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETRY_US 100000      /* retry a failed renewal this soon (capped by the interval) */
#define IDLE_TICK_US 1000000 /* with no lock held, look at the heap this often */
#define RENEW_CHUNK 100      /* locks renewed by one script call */

/* ---- heap on wake_us ---- */

static void heap_set(watchlock_client *c, size_t i, watchlock_lock *l)
{
    c->heap[i] = l;
    l->heap_idx = i;
}

static void sift_up(watchlock_client *c, size_t i)
{
    watchlock_lock *l = c->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (c->heap[parent]->wake_us <= l->wake_us)
            break;
        heap_set(c, i, c->heap[parent]);
        i = parent;
    }
    heap_set(c, i, l);
}

static void sift_down(watchlock_client *c, size_t i)
{
    watchlock_lock *l = c->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= c->heap_len)
            break;
        if (child + 1 < c->heap_len && c->heap[child + 1]->wake_us < c->heap[child]->wake_us)
            child++;
        if (c->heap[child]->wake_us >= l->wake_us)
            break;
        heap_set(c, i, c->heap[child]);
        i = child;
    }
    heap_set(c, i, l);
}

static void heap_remove_at(watchlock_client *c, size_t i)
{
    watchlock_lock *l = c->heap[i];
    l->heap_idx = WL_NOT_IN_HEAP;
    c->heap_len--;
    if (i == c->heap_len)
        return;
    heap_set(c, i, c->heap[c->heap_len]);
    sift_down(c, i);
    sift_up(c, c->heap[i]->heap_idx);
}

static int64_t interval_us(const watchlock_lock *l)
{
    int64_t iv = l->interval_ms > 0 && l->interval_ms < l->lease_ms ? l->interval_ms : l->lease_ms / 3;
    return (iv > 0 ? iv : 1) * 1000;
}

static bool renewing(const watchlock_lock *l)
{
    return l->auto_renew && l->stop_reason == WATCHLOCK_LOST_NONE;
}

/* When the thread must look at l next: its wake-up, or a quarter interval
 * before its renewal (the start of the batching window). */
static int64_t trigger_us(const watchlock_lock *l)
{
    if (!renewing(l))
        return l->wake_us;
    int64_t early = l->renew_at_us - interval_us(l) / 4;
    return early < l->wake_us ? early : l->wake_us;
}

void wl_watchdog_unschedule(watchlock_client *c, watchlock_lock *l)
{
    if (l->heap_idx != WL_NOT_IN_HEAP)
        heap_remove_at(c, l->heap_idx);
}

/* (Re)inserts a held lock. Callers set deadline_us; renew_at_us follows
 * from when that lease was sent unless a retry set it earlier. */
static void schedule_at(watchlock_client *c, watchlock_lock *l, int64_t renew_at)
{
    l->renew_at_us = renew_at;
    l->wake_us = renewing(l) && renew_at < l->deadline_us ? renew_at : l->deadline_us;
    if (l->heap_idx != WL_NOT_IN_HEAP) {
        size_t i = l->heap_idx;
        sift_down(c, i);
        sift_up(c, l->heap_idx);
    } else {
        if (c->heap_len == c->heap_cap) {
            size_t cap = c->heap_cap ? c->heap_cap * 2 : 16;
            watchlock_lock **grown = realloc(c->heap, cap * sizeof *grown);
            if (grown == NULL) {
                /* Cannot track it: treat as expired at once rather than hold
                 * a lock nobody watches. */
                wl_lock_mark_lost(c, l, WATCHLOCK_LOST_EXPIRED);
                return;
            }
            c->heap = grown;
            c->heap_cap = cap;
        }
        heap_set(c, c->heap_len, l);
        c->heap_len++;
        sift_up(c, c->heap_len - 1);
    }
    /* Wake the thread only if it would otherwise sleep past this lock's
     * first moment of interest (it re-reads the heap after every round and
     * every idle tick anyway): a plain acquire+release then costs no
     * context switch. */
    if (trigger_us(l) < c->wd_sleep_until)
        pthread_cond_signal(&c->wd_cond);
}

void wl_watchdog_schedule(watchlock_client *c, watchlock_lock *l)
{
    int64_t lease_us = l->lease_ms * 1000;
    int64_t sent = l->deadline_us + wl_drift_us(l->lease_ms) - lease_us;
    schedule_at(c, l, sent + interval_us(l));
}

int wl_lock_expiry_reason(const watchlock_lock *l)
{
    if (l->stop_reason != WATCHLOCK_LOST_NONE)
        return l->stop_reason;
    return l->renew_failing ? WATCHLOCK_LOST_CONNECTION : WATCHLOCK_LOST_EXPIRED;
}

void wl_lock_mark_lost(watchlock_client *c, watchlock_lock *l, int reason)
{
    wl_watchdog_unschedule(c, l);
    if (l->state == WATCHLOCK_HELD)
        c->held--;
    l->state = WATCHLOCK_LOST;
    l->lost_reason = reason;
}

/* ---- one round ---- */

enum { RENEWED, RENEW_NOT_OWNER, RENEW_CONN_FAILED };

typedef struct round_entry {
    watchlock_lock *lock;
    uint64_t gen;
    int64_t ms;      /* the lease this renewal sets */
    char ms_s[24];   /* ms as the script's argument */
    bool final_hold; /* the last renewal allowed by max_hold */
    int64_t sent;
    int result;
    bool need_eval;
} round_entry;

typedef struct lost_note {
    watchlock_lock *lock;
    int reason;
    watchlock_lost_fn fn;
    void *data;
} lost_note;

typedef struct vec {
    void *items;
    size_t len, cap, size;
} vec;

static void *vec_push(vec *v)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        void *grown = realloc(v->items, cap * v->size);
        if (grown == NULL)
            return NULL;
        v->items = grown;
        v->cap = cap;
    }
    return (char *)v->items + v->size * v->len++;
}

/* With mu held: the lock is lost; queue its event and callback. */
static void lose(watchlock_client *c, watchlock_lock *l, int reason, vec *lost)
{
    wl_lock_mark_lost(c, l, reason);
    if (c->events_on) {
        wl_lost_event *e = calloc(1, sizeof *e);
        if (e != NULL) {
            e->lock_id = l->id;
            e->reason = reason;
            if (c->ev_tail)
                c->ev_tail->next = e;
            else
                c->ev_head = e;
            c->ev_tail = e;
            pthread_cond_broadcast(&c->ev_cond);
        }
    }
    if (l->on_lost != NULL) {
        lost_note *n = vec_push(lost);
        if (n != NULL) {
            atomic_fetch_add(&l->refs, 1);
            *n = (lost_note){l, reason, l->on_lost, l->on_lost_data};
        }
    }
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* Appends one batch-renewal script call for es[from, to). */
static int append_chunk(redisContext *ctx, round_entry *es, size_t from, size_t to, bool use_eval)
{
    size_t n = to - from, argc = 3 + 3 * n;
    const char **argv = malloc(argc * sizeof *argv);
    size_t *lens = malloc(argc * sizeof *lens);
    int rc = REDIS_ERR;
    if (argv != NULL && lens != NULL) {
        char nkeys[24];
        snprintf(nkeys, sizeof nkeys, "%zu", n);
        const wl_script *script = &wl_scripts[WL_SCRIPT_RENEW_MANY];
        argv[0] = use_eval ? "EVAL" : "EVALSHA";
        argv[1] = use_eval ? script->body : script->sha;
        argv[2] = nkeys;
        for (size_t k = 0; k < 3; k++)
            lens[k] = strlen(argv[k]);
        for (size_t i = 0; i < n; i++) {
            round_entry *e = &es[from + i];
            argv[3 + i] = e->lock->keys.lock;
            lens[3 + i] = e->lock->keys.lock_len;
            argv[3 + n + 2 * i] = e->lock->token;
            lens[3 + n + 2 * i] = sizeof e->lock->token - 1;
            argv[3 + n + 2 * i + 1] = e->ms_s;
            lens[3 + n + 2 * i + 1] = strlen(e->ms_s);
        }
        rc = redisAppendCommandArgv(ctx, (int)argc, argv, lens);
    }
    free(argv);
    free(lens);
    return rc;
}

/* Sends one pipeline of renewals: one script call per RENEW_CHUNK locks
 * (EVALSHA, or EVAL for the chunks the server had no script for). Returns
 * false when the connection failed. */
static bool send_pipeline(redisContext *ctx, round_entry *es, size_t n, bool use_eval)
{
    int64_t sent = wl_now_us();
    for (size_t from = 0; from < n; from += RENEW_CHUNK) {
        size_t to = from + RENEW_CHUNK < n ? from + RENEW_CHUNK : n;
        if (use_eval && !es[from].need_eval)
            continue;
        if (append_chunk(ctx, es, from, to, use_eval) != REDIS_OK)
            return false;
        for (size_t i = from; i < to; i++)
            es[i].sent = sent;
    }
    for (size_t from = 0; from < n; from += RENEW_CHUNK) {
        size_t to = from + RENEW_CHUNK < n ? from + RENEW_CHUNK : n;
        if (use_eval && !es[from].need_eval)
            continue;
        void *reply = NULL;
        if (redisGetReply(ctx, &reply) != REDIS_OK)
            return false;
        redisReply *r = reply;
        bool noscript = !use_eval && wl_reply_is_noscript(r);
        bool well_formed = r->type == REDIS_REPLY_ARRAY && r->elements == to - from;
        for (size_t i = from; i < to; i++) {
            es[i].need_eval = noscript;
            if (noscript)
                continue;
            /* An unexpected reply (an error for the whole script, such as
             * OOM) says nothing about ownership: retry until the deadline. */
            const redisReply *one = well_formed ? r->element[i - from] : NULL;
            es[i].result = one == NULL                                           ? RENEW_CONN_FAILED
                           : one->type == REDIS_REPLY_INTEGER && one->integer == 1 ? RENEWED
                                                                                  : RENEW_NOT_OWNER;
        }
        freeReplyObject(r);
    }
    return true;
}

/* Without mu: renews es[0..n) on the watchdog connection, ending all network
 * waits by cap_ms. Returns the number of round trips. */
static int run_round(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms)
{
    if (cap_ms < 1)
        cap_ms = 1;
    for (size_t i = 0; i < n; i++)
        es[i].result = RENEW_CONN_FAILED;
    if (c->wd_conn == NULL && wl_server_connect(&c->server, cap_ms, &c->wd_conn) != WATCHLOCK_OK)
        return 0;
    int64_t t = c->server.ep.command_timeout_ms < cap_ms ? c->server.ep.command_timeout_ms : cap_ms;
    redisSetTimeout(c->wd_conn, ms_tv(t));
    int trips = 1;
    bool ok = send_pipeline(c->wd_conn, es, n, false);
    bool any_eval = false;
    for (size_t i = 0; ok && i < n; i++)
        any_eval |= es[i].need_eval;
    if (ok && any_eval) {
        trips++;
        ok = send_pipeline(c->wd_conn, es, n, true);
    }
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            if (es[i].need_eval || es[i].result == RENEW_CONN_FAILED)
                es[i].result = RENEW_CONN_FAILED;
        redisFree(c->wd_conn);
        c->wd_conn = NULL;
    }
    return trips;
}

/* With mu held: the nearest local deadline of any held lock. */
static int64_t nearest_deadline(watchlock_client *c, const round_entry *es, size_t n)
{
    int64_t d = INT64_MAX;
    for (size_t i = 0; i < c->heap_len; i++)
        if (c->heap[i]->deadline_us < d)
            d = c->heap[i]->deadline_us;
    for (size_t i = 0; i < n; i++)
        if (es[i].lock->deadline_us < d)
            d = es[i].lock->deadline_us;
    return d;
}

static void update_cpu(watchlock_client *c)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        atomic_store(&c->wd_cpu_us, (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

/* With mu held: pops what is due now and prepares renewals / losses. */
static void collect(watchlock_client *c, int64_t now, vec *batch, vec *lost)
{
    while (c->heap_len > 0) {
        watchlock_lock *l = c->heap[0];
        /* Piggyback renewals due within half an interval on this round, so
         * locks acquired at different moments converge into one pipeline. */
        bool due = l->wake_us <= now || (renewing(l) && l->renew_at_us - interval_us(l) / 2 <= now);
        if (!due)
            break;
        heap_remove_at(c, 0);
        if (now >= l->deadline_us) {
            lose(c, l, wl_lock_expiry_reason(l), lost);
            continue;
        }
        if (!renewing(l)) { /* auto-renew turned off while held: wait for the deadline */
            schedule_at(c, l, l->renew_at_us);
            continue;
        }
        int64_t ms = l->lease_ms;
        bool final_hold = false;
        if (l->max_hold_ms > 0) {
            int64_t left_us = l->acquired_us + l->max_hold_ms * 1000 - now;
            if (left_us <= 0) {
                l->stop_reason = WATCHLOCK_LOST_MAX_HOLD;
                schedule_at(c, l, l->renew_at_us);
                continue;
            }
            if (left_us < ms * 1000) {
                ms = (left_us + 999) / 1000;
                final_hold = true;
            }
        }
        round_entry *e = vec_push(batch);
        if (e == NULL) { /* out of memory: try again shortly */
            schedule_at(c, l, now + RETRY_US);
            break;
        }
        atomic_fetch_add(&l->refs, 1);
        *e = (round_entry){.lock = l, .gen = l->hold_gen, .ms = ms, .final_hold = final_hold};
        snprintf(e->ms_s, sizeof e->ms_s, "%" PRId64, ms);
    }
}

/* With mu held: applies a round's replies. */
static void apply(watchlock_client *c, round_entry *es, size_t n, vec *lost)
{
    int64_t now = wl_now_us();
    for (size_t i = 0; i < n; i++) {
        watchlock_lock *l = es[i].lock;
        if (l->hold_gen == es[i].gen && l->state == WATCHLOCK_HELD) {
            if (es[i].result == RENEWED) {
                l->renewals++;
                c->renewals++;
                int64_t deadline = es[i].sent + es[i].ms * 1000 - wl_drift_us(es[i].ms);
                /* An extend() to a shorter lease while this renewal was in
                 * flight may have reached the server after it: never trust
                 * the longer lease then. */
                if (l->lease_ms < es[i].ms && l->deadline_us < deadline)
                    deadline = l->deadline_us;
                l->deadline_us = deadline;
                l->renew_failing = false;
                if (l->max_renewals > 0 && l->renewals >= l->max_renewals)
                    l->stop_reason = WATCHLOCK_LOST_MAX_RENEWALS;
                if (es[i].final_hold)
                    l->stop_reason = WATCHLOCK_LOST_MAX_HOLD;
                schedule_at(c, l, es[i].sent + interval_us(l));
            } else if (es[i].result == RENEW_NOT_OWNER) {
                lose(c, l, WATCHLOCK_LOST_TAKEN, lost);
            } else {
                l->renew_failing = true;
                if (now >= l->deadline_us) {
                    lose(c, l, WATCHLOCK_LOST_CONNECTION, lost);
                } else {
                    int64_t retry = interval_us(l) < RETRY_US ? interval_us(l) : RETRY_US;
                    schedule_at(c, l, now + retry);
                }
            }
        }
        wl_lock_unref(l); /* never the last reference of the client: close joins us first */
    }
}

static void *watchdog_main(void *arg)
{
    watchlock_client *c = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_setname_np(pthread_self(), "watchlock-wd");

    vec batch = {.size = sizeof(round_entry)}, lost = {.size = sizeof(lost_note)};
    pthread_mutex_lock(&c->mu);
    while (!c->wd_stop) {
        int64_t now = wl_now_us();
        /* Sleep until the top lock needs a look; with nothing held, tick
         * once per IDLE_TICK_US so that acquiring a long-lease lock need
         * not wake the thread. */
        int64_t at = c->heap_len == 0 ? now + IDLE_TICK_US : trigger_us(c->heap[0]);
        if (at > now) {
            c->wd_sleep_until = at;
            wl_cond_wait_until(&c->wd_cond, &c->mu, at);
            c->wd_sleep_until = 0;
            continue;
        }
        batch.len = lost.len = 0;
        collect(c, now, &batch, &lost);
        if (batch.len > 0) {
            round_entry *es = batch.items;
            int64_t cap_ms = (nearest_deadline(c, es, batch.len) - wl_now_us()) / 1000;
            pthread_mutex_unlock(&c->mu);
            int trips = run_round(c, es, batch.len, cap_ms);
            update_cpu(c);
            pthread_mutex_lock(&c->mu);
            c->renew_rounds++;
            c->renew_roundtrips += trips;
            apply(c, es, batch.len, &lost);
        }
        if (lost.len > 0) {
            pthread_mutex_unlock(&c->mu);
            lost_note *ns = lost.items;
            for (size_t i = 0; i < lost.len; i++) {
                if (!atomic_load(&c->closed))
                    ns[i].fn(ns[i].lock, ns[i].reason, ns[i].data);
                wl_lock_unref(ns[i].lock);
            }
            pthread_mutex_lock(&c->mu);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (c->wd_conn) {
        redisFree(c->wd_conn);
        c->wd_conn = NULL;
    }
    update_cpu(c);
    free(batch.items);
    free(lost.items);
    return NULL;
}

int wl_watchdog_ensure_started(watchlock_client *c)
{
    if (c->wd_started || c->wd_stop)
        return WATCHLOCK_OK;
    if (pthread_create(&c->wd_thread, NULL, watchdog_main, c) != 0)
        return wl_fail(WATCHLOCK_EINTERNAL, "cannot start the watchdog thread");
    c->wd_started = true;
    return WATCHLOCK_OK;
}

void wl_watchdog_stop(watchlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->wd_stop = true;
    bool started = c->wd_started;
    c->wd_started = false;
    pthread_cond_broadcast(&c->wd_cond);
    pthread_mutex_unlock(&c->mu);
    if (started)
        pthread_join(c->wd_thread, NULL);
}
