/*
 * watchdog.c - the one renewal thread of a client.
 *
 * What it does: every lock being renewed sits in client->renew_heap, keyed
 * on its next renewal (the newest confirmed write's send time + interval).
 * The thread sleeps on wd_cond until the top entry is due, then takes every
 * lock that is due, or due within 1/PIGGYBACK_DIV of its interval (so that
 * locks due a moment apart share a round without shortening anyone's
 * interval by more than 2%), at most ROUND_MAX of them, and sends their
 * renewals in one pipeline on its own connection: one round trip per round.
 * A lock is renewed at its interval, not before: each renewal costs server
 * time, and with a million locks held, renewing early is what the server
 * pays for. ROUND_MAX bounds how long the thread holds client->mu while it
 * collects and applies a round, so acquires and releases on other threads
 * wait for a few milliseconds at most, however many locks are held; what is
 * still due is taken by the next round at once.
 *
 * Each renewal is a hold write (hold.c): it names the hold's token and the
 * epochs it accepts, and wl_write_applied() takes its reply: a confirmed
 * write moves the local deadline to send time + lease - margin, "not ours"
 * loses the hold (taken), a network failure is retried every RETRY_US until
 * the deadline.
 *
 * Loss by deadline is not this thread's job: the loss timer (loss.c)
 * declares it, so a round stuck on the network delays no loss. A round's
 * connect and command timeouts end by the nearest deadline among its own
 * holds (round_budget_ms: those at least ROUND_FLOOR_MS away, and never
 * sooner than that floor), so a stuck round gives way to a retry in time,
 * and no hold outside the round, nor one within the floor of its end, can
 * make the round fail for the others.
 *
 * Under overload (renewals fall due faster than the server answers them)
 * the thread degrades, it does not collapse: rounds run back to back, each
 * takes at most ROUND_MAX holds in the order their renewals fell due and
 * sends them nearest deadline first; a hold the backlog left too near its
 * deadline is not sent but given up (shed()), so the backlog catches up and
 * every other hold goes on being renewed in time at the rate the server
 * allows. Replies that came before a round failed still count.
 *
 * Locking: the heap and every lock's state are guarded by client->mu. The
 * thread holds it while choosing and while applying results, never during
 * I/O. A lock in flight holds an extra reference and is out of the heap;
 * the write's hold_gen tells whether its hold still exists when the reply
 * comes back.
 */
#include "hold/hold.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETRY_US 100000      /* retry a failed renewal this soon (capped by the interval) */
#define IDLE_TICK_US 1000000 /* with no lock held, look at the heap this often */
#define ROUND_MAX 4000       /* locks renewed by one round */
#define PIGGYBACK_DIV 50     /* renew up to interval/50 early to share a round */
#define ROUND_FLOOR_MS 250   /* a round's network waits are never cut shorter (round_budget_ms) */

static int64_t interval_us(const wl_hold *h)
{
    return wl_renew_interval_us(h); /* renew_option.c: fraction, absolute or lease/3 */
}

static bool renewing(const wl_hold *h)
{
    return h->auto_renew && h->stop_reason == WATCHLOCK_LOST_NONE && !h->releasing;
}

/* When the thread must look at h next: when its renewal is due. */
static int64_t trigger_us(const wl_hold *h)
{
    return h->wake_us;
}

void wl_watchdog_unschedule(watchlock_client *c, wl_hold *h)
{
    wl_heap_remove(&c->renew_heap, h);
}

/* (Re)inserts a held lock to be looked at by renew_at (or, when it is not
 * renewed, not at all: the loss timer ends it at its deadline). */
static void schedule_at(watchlock_client *c, wl_hold *h, int64_t renew_at)
{
    h->renew_at_us = renew_at;
    if (!renewing(h)) {
        wl_heap_remove(&c->renew_heap, h);
        return;
    }
    h->wake_us = renew_at;
    if (wl_heap_update(&c->renew_heap, h) != 0) {
        /* Cannot track it: give it up now rather than hold a lock nobody renews. */
        wl_lose(c, h, WATCHLOCK_LOST_EXPIRED, true);
        return;
    }
    /* Wake the thread only if it would otherwise sleep past this lock's
     * first moment of interest (it re-reads the heap after every round and
     * every idle tick anyway): a plain acquire+release then costs no
     * context switch. */
    if (trigger_us(h) < c->wd_sleep_until)
        pthread_cond_signal(&c->wd_cond);
}

void wl_watchdog_schedule(watchlock_client *c, wl_hold *h)
{
    schedule_at(c, h, h->confirmed_us + interval_us(h));
}

void wl_watchdog_renew_by(watchlock_client *c, wl_hold *h, int64_t due_us)
{
    if (h->state == WATCHLOCK_HELD && due_us < h->renew_at_us)
        schedule_at(c, h, due_us);
}

/* ---- one round ---- */


typedef struct vec {
    void *items;
    size_t len, cap, size;
} vec;

static void *vec_push(vec *v)
{
    if (wl_grow(&v->items, &v->cap, v->len, v->size, 16) != 0)
        return NULL;
    return (char *)v->items + v->size * v->len++;
}

/* With mu held: how long the network waits of a round may last, from its
 * own holds only: until the nearest deadline among them that is at least
 * ROUND_FLOOR_MS away (a stuck round then gives way to a retry on a fresh
 * connection in time for them), and never less than ROUND_FLOOR_MS. A hold
 * whose deadline is nearer than the floor is still sent, but does not
 * shorten the round: if its reply comes too late, the loss timer has ended
 * it and the reply is ignored (wl_write_applied). Holds outside the round
 * (not due, not renewed at all, being released) play no part: before, the
 * nearest deadline of every held lock capped every round, so one hold near
 * its end (or a crowd of short unrenewed ones) gave all rounds a ~1 ms
 * budget, every round failed at connect or read and took all its renewals
 * with it — a cascade. */
static int64_t round_budget_ms(const round_entry *es, size_t n, int64_t now)
{
    int64_t nearest = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        int64_t left = es[i].hold->deadline_us - now;
        if (left >= ROUND_FLOOR_MS * 1000 && left < nearest)
            nearest = left;
    }
    return nearest == INT64_MAX ? ROUND_FLOOR_MS : nearest / 1000;
}

static int by_deadline(const void *a, const void *b)
{
    int64_t x = ((const round_entry *)a)->hold->deadline_us, y = ((const round_entry *)b)->hold->deadline_us;
    return x < y ? -1 : x > y;
}

/* With mu held: the round's renewals in deadline order, nearest first (the
 * server runs a pipeline in order). Collected in the order they fell due,
 * which is deadline order already for holds of one lease and interval: the
 * sort runs only when it is not. */
static void sort_by_deadline(round_entry *es, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (es[i].hold->deadline_us < es[i - 1].hold->deadline_us) {
            qsort(es, n, sizeof *es, by_deadline);
            return;
        }
}

static void update_cpu(watchlock_client *c)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        atomic_store(&c->wd_cpu_us, (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

/* Load shedding. When the thread is behind (a renewal overdue by more
 * than the shedding margin: renewals fall due faster than the server
 * answers them) and a hold has less than that margin left, its renewal is
 * not sent: the hold is given up and ends at its deadline (loss timer,
 * reason "expired"). Sending it would spend server time on a reply that
 * likely comes too late, and with every hold served in turn the backlog
 * would then keep every hold that reaches the front of the queue near its
 * deadline — a lost cause each, until all are lost (measured: 500,000 holds
 * with 3 s leases on one server all lost). Giving up the holds at the front
 * lets the backlog catch up, so the others are renewed in time: under
 * overload the holds lost are about the excess the server cannot renew.
 * A retry after a failed renewal is not overdue, so a hold whose renewals
 * failed on the network is still tried until its deadline. The margin:
 * ROUND_FLOOR_MS (at most an eighth of the lease), or twice the time
 * recent rounds took (at most half the lease) when that is longer. */
static bool shed(const wl_hold *h, int64_t now, int64_t round_us)
{
    int64_t margin = h->lease_ms * 1000 / 8;
    if (margin > ROUND_FLOOR_MS * 1000)
        margin = ROUND_FLOOR_MS * 1000;
    int64_t slow = 2 * round_us, half = h->lease_ms * 1000 / 2;
    if (slow > half)
        slow = half;
    if (slow > margin)
        margin = slow;
    return now - h->wake_us > margin && h->deadline_us - now < margin;
}

/* With mu held: a waiter's liveness renewal into the round's waiters. */
static void collect_waiter(watchlock_client *c, wl_hold *h, int64_t now, vec *waiters)
{
    wl_live_entry *e = vec_push(waiters);
    if (e == NULL) { /* out of memory: try again shortly */
        h->wake_us = h->renew_at_us = now + RETRY_US;
        if (wl_heap_update(&c->renew_heap, h) != 0)
            h->waiting = false; /* its thread renews nothing then: the liveness lease ends the wait */
        return;
    }
    atomic_fetch_add(&h->refs, 1);
    *e = (wl_live_entry){.hold = h, .gen = h->wait_gen};
    h->ops->live_args(h, &e->a);
    e->ident_len = wl_ident(h, 1, e->ident);
    wl_fmt_i64(e->live_s, h->live_ms);
    wl_fmt_i64(e->lease_s, h->lease_ms);
}

/* With mu held: pops what is due now and prepares its renewals (and the
 * waiters' liveness renewals). */
static void collect(watchlock_client *c, int64_t now, int64_t round_us, vec *batch, vec *waiters)
{
    while (batch->len + waiters->len < ROUND_MAX) {
        wl_hold *h = wl_heap_top(&c->renew_heap);
        /* Piggyback renewals due within a 50th of their interval on this
         * round: locks due a moment apart share a pipeline, and nobody's
         * interval shrinks by more than 2%. A waiter's liveness (renewed
         * every third of it) rides along when due within half of that: its
         * lease never lapses, and waiters that queued at different moments
         * share one batched call from their next round on. */
        if (h == NULL || !(h->wake_us <= now || (h->waiting ? h->wake_us - h->live_ms * 1000 / 6
                                                             : h->renew_at_us - interval_us(h) / PIGGYBACK_DIV) <= now))
            break;
        wl_heap_remove(&c->renew_heap, h);
        if (h->waiting) {
            collect_waiter(c, h, now, waiters);
            continue;
        }
        if (!renewing(h))
            continue; /* auto-renew turned off or release begun: the loss timer ends it */
        if (now >= h->deadline_us) {
            wl_lose(c, h, wl_lock_expiry_reason(h), true);
            continue;
        }
        if (shed(h, now, round_us))
            continue; /* not renewed any more: the loss timer ends it at its deadline */
        int64_t ms = h->lease_ms;
        bool final_hold = false;
        if (h->max_hold_ms > 0) {
            int64_t left_us = h->acquired_us + h->max_hold_ms * 1000 - now;
            if (left_us <= 0) {
                h->stop_reason = WATCHLOCK_LOST_MAX_HOLD;
                continue; /* not renewed any more: the loss timer ends it */
            }
            if (left_us < ms * 1000) {
                ms = (left_us + 999) / 1000;
                final_hold = true;
            }
        }
        round_entry *e = vec_push(batch);
        if (e == NULL) { /* out of memory: try again shortly */
            schedule_at(c, h, now + RETRY_US);
            break;
        }
        atomic_fetch_add(&h->refs, 1);
        h->renew_inflight = true;
        *e = (round_entry){.hold = h, .final_hold = final_hold};
        wl_write_prepare(c, h, ms, now, &e->w);
        e->ident_len = (unsigned char)wl_ident(h, e->w.to, e->ident);
        e->from_len = (unsigned char)wl_fmt_i64(e->from_s, e->w.from);
        e->ms_len = (unsigned char)wl_fmt_i64(e->ms_s, e->w.ms);
    }
}

/* With mu held: applies a round's replies, all of which arrived by `now`
 * (read once after the round's I/O: a clock read per entry was 7% of the
 * thread's time with 150,000 locks). */
static void apply(watchlock_client *c, round_entry *es, size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        wl_hold *h = es[i].hold;
        int result = es[i].result;
        /* Still in flight while the reply is judged: a reply (or a
         * timeout) that comes at or after the deadline is the network's
         * fault, and the loss says "connection lost". */
        bool still_held = wl_write_applied(c, h, &es[i].w, result, true, now);
        if (h->hold_gen == es[i].w.gen)
            h->renew_inflight = false;
        if (still_held) {
            if (result == WL_WRITE_OK) {
                h->renewals++;
                c->renewals++;
                if (h->max_renewals > 0 && h->renewals >= h->max_renewals)
                    h->stop_reason = WATCHLOCK_LOST_MAX_RENEWALS;
                if (es[i].final_hold)
                    h->stop_reason = WATCHLOCK_LOST_MAX_HOLD;
                wl_watchdog_schedule(c, h);
            } else if (!wl_heap_contains(&c->renew_heap, h)) {
                int64_t retry = interval_us(h) < RETRY_US ? interval_us(h) : RETRY_US;
                schedule_at(c, h, now + retry);
            }
        }
        h->ops->unref(h); /* never the last reference of the client: close joins us first */
    }
}

/* A waiter's liveness, every third of it (sooner after a failure). */
static void schedule_waiter(watchlock_client *c, wl_hold *h, int64_t at)
{
    h->wake_us = h->renew_at_us = at;
    if (wl_heap_update(&c->renew_heap, h) != 0) {
        h->waiting = false; /* cannot track it: its thread falls back to its own calls */
        return;
    }
    if (at < c->wd_sleep_until)
        pthread_cond_signal(&c->wd_cond);
}

int wl_watchdog_wait_begin(watchlock_client *c, wl_hold *h, int64_t live_ms)
{
    h->waiting = true;
    h->wait_gen++;
    h->live_ms = live_ms;
    schedule_waiter(c, h, wl_now_us() + live_ms * 1000 / 3);
    return wl_watchdog_ensure_started(c);
}

void wl_watchdog_wait_end(watchlock_client *c, wl_hold *h)
{
    if (!h->waiting)
        return;
    h->waiting = false;
    wl_heap_remove(&c->renew_heap, h);
}

/* With mu held: reschedules the waiters of a round that still wait. */
static void apply_waiters(watchlock_client *c, wl_live_entry *es, size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        wl_hold *h = es[i].hold;
        if (!h->waiting || h->wait_gen != es[i].gen || wl_heap_contains(&c->renew_heap, h))
            continue;
        int64_t every = h->live_ms * 1000 / 3;
        schedule_waiter(c, h, now + (es[i].result >= 0 || every < RETRY_US ? every : RETRY_US));
    }
}

static void *watchdog_main(void *arg)
{
    watchlock_client *c = arg;
    wl_thread_start("watchlock-wd");

    vec batch = {.size = sizeof(round_entry)}, waiters = {.size = sizeof(wl_live_entry)};
    int64_t round_us = 0; /* how long recent rounds' I/O took (moving average), for shed() */
    pthread_mutex_lock(&c->mu);
    while (!c->wd_stop) {
        int64_t now = wl_now_us();
        /* Sleep until the top lock needs a look; with nothing held, tick
         * once per IDLE_TICK_US so that acquiring a long-lease lock need
         * not wake the thread. */
        wl_hold *top = wl_heap_top(&c->renew_heap);
        int64_t at = top == NULL ? now + IDLE_TICK_US : trigger_us(top);
        if (at > now) {
            c->wd_sleep_until = at;
            wl_cond_wait_until(&c->wd_cond, &c->mu, at);
            c->wd_sleep_until = 0;
            continue;
        }
        batch.len = waiters.len = 0;
        collect(c, now, round_us, &batch, &waiters);
        if (batch.len > 0 || waiters.len > 0) {
            round_entry *es = batch.items;
            sort_by_deadline(es, batch.len);
            int64_t cap_ms = round_budget_ms(es, batch.len, wl_now_us());
            pthread_mutex_unlock(&c->mu);
            int64_t t_io = wl_now_us();
            int trips = batch.len == 0 ? 0 : c->placement->renew_round(c, es, batch.len, cap_ms); /* hold.h */
            wl_live_entry *ws = waiters.items;
            if (waiters.len > 0) { /* after the holds: waiters never delay a renewal */
                trips += wl_live_round(c, ws, waiters.len, ROUND_FLOOR_MS);
                for (size_t i = 0; i < waiters.len; i++)
                    if (ws[i].result >= 0)
                        ws[i].hold->ops->live_done(ws[i].hold, ws[i].result);
            }
            wl_stats_renew_round(c, wl_now_us() - t_io); /* stats.c: renewal round trip */
            round_us += (wl_now_us() - t_io - round_us) / 4;
            update_cpu(c);
            if (wl_test_hook != NULL)
                wl_test_hook(c, WL_HOOK_ROUND_DONE);
            pthread_mutex_lock(&c->mu);
            /* Judged against a time read under the mutex: a reply applied
             * after the deadline is too late, whenever it arrived, so a
             * hold that anyone has seen LOST (state() records it, under
             * this mutex) is never renewed back to HELD. */
            int64_t done = wl_now_us();
            c->renew_rounds++;
            c->renew_roundtrips += trips;
            apply(c, es, batch.len, done);
            apply_waiters(c, ws, waiters.len, done);
            for (size_t i = 0; i < waiters.len; i++)
                ws[i].hold->ops->unref(ws[i].hold);
        }
    }
    pthread_mutex_unlock(&c->mu);
    wl_renew_round_close(c);
    update_cpu(c);
    free(batch.items);
    free(waiters.items);
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

/* A hold begins (client->mu held): what every kind's acquire does once the
 * server granted it — the first epoch with this fence, confirmed at `sent`,
 * LOST at `deadline_us` unless renewed; scheduled for renewal, and the
 * watchdog and the loss timer started (and, for a hold with an on-lost
 * callback, a callback thread waiting: loss.c). */
int wl_hold_begin(watchlock_client *c, wl_hold *h, int64_t fence, int64_t sent, int64_t lease_ms, int64_t deadline_us)
{
    h->state = WATCHLOCK_HELD;
    h->hold_count = 1;
    h->hold_gen++;
    h->epoch = h->epoch_to = 1;
    h->epoch_ms = lease_ms;
    h->fence = fence;
    h->renewals = 0;
    h->lost_reason = WATCHLOCK_LOST_NONE;
    h->stop_reason = WATCHLOCK_LOST_NONE;
    h->renew_failing = false;
    h->renew_inflight = false;
    h->releasing = false;
    h->acquired_us = h->confirmed_us = sent;
    c->held++;
    wl_set_deadline(c, h, deadline_us);
    if (h->state == WATCHLOCK_HELD)
        wl_watchdog_schedule(c, h);
    if (h->on_lost != NULL)
        wl_callbacks_arm(c); /* its loss is told by a waiting thread, not one started at the deadline */
    int rc = wl_watchdog_ensure_started(c);
    return rc == WATCHLOCK_OK ? wl_timer_ensure_started(c) : rc;
}
