/*
 * loss.c - declaring holds lost, and telling their owners.
 *
 * The loss timer: one thread per client sleeps until the earliest local
 * deadline of any held lock (client->deadline_heap) and marks what is due
 * LOST. It never does I/O and never runs user code, so a renewal stuck on
 * the network or a slow on-lost callback cannot delay the declaration of
 * any loss: a hold is LOST at its deadline, whatever else is going on.
 * (state() also reads LOST past the deadline on its own, without waiting
 * for this thread.)
 *
 * Telling: wl_lose() queues the lost event (for bindings) and starts one
 * detached thread per on-lost callback, so callbacks run off every timing
 * path and a slow one delays nobody else's. A callback thread holds a
 * reference to its lock (and through it, to the client), so memory stays
 * valid whatever the user frees meanwhile; before calling, it checks under
 * client->mu that the lock is not being freed and the client not closed,
 * and counts itself running. watchlock_lock_free() and
 * watchlock_client_close() wait until the count drops to zero (minus the
 * calling thread's own callback, so either may be called from inside one).
 */
#include "internal.h"

#include <stdlib.h>

void (*wl_test_hook)(watchlock_client *c, int point);

/* The lock whose callback this thread is running (NULL outside callbacks). */
static _Thread_local watchlock_lock *running_callback;

void wl_unschedule_all(watchlock_client *c, watchlock_lock *l)
{
    wl_heap_remove(&c->renew_heap, l);
    wl_heap_remove(&c->deadline_heap, l);
}

void wl_set_deadline(watchlock_client *c, watchlock_lock *l, int64_t deadline_us)
{
    l->deadline_us = deadline_us;
    if (l->state != WATCHLOCK_HELD)
        return;
    if (wl_heap_update(&c->deadline_heap, l) != 0) {
        /* Nobody could watch this hold's deadline: give it up now rather
         * than hold a lock whose loss would go unreported. */
        wl_lose(c, l, WATCHLOCK_LOST_EXPIRED, true);
        return;
    }
    if (deadline_us < c->tm_sleep_until)
        pthread_cond_signal(&c->tm_cond);
}

typedef struct callback_job {
    watchlock_lock *lock;
    int reason;
} callback_job;

static void *callback_main(void *arg)
{
    callback_job job = *(callback_job *)arg;
    free(arg);
    wl_thread_start("watchlock-cb");

    watchlock_lock *l = job.lock;
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    watchlock_lost_fn fn = l->on_lost;
    void *data = l->on_lost_data;
    bool run = fn != NULL && !l->freed && !atomic_load(&c->closed);
    if (run) {
        l->cb_running++;
        c->cb_running++;
    }
    pthread_mutex_unlock(&c->mu);
    if (run) {
        running_callback = l;
        fn(l, job.reason, data);
        running_callback = NULL;
        pthread_mutex_lock(&c->mu);
        l->cb_running--;
        c->cb_running--;
        pthread_cond_broadcast(&c->cb_cond);
        pthread_mutex_unlock(&c->mu);
    }
    wl_lock_unref(l); /* may free the lock, and then the client */
    return NULL;
}

/* With mu held: starts the lock's callback on a thread of its own. */
static void start_callback(watchlock_lock *l, int reason)
{
    callback_job *job = malloc(sizeof *job);
    if (job == NULL)
        return; /* the loss stays visible through state() and lost events */
    *job = (callback_job){l, reason};
    atomic_fetch_add(&l->refs, 1);
    pthread_attr_t attr;
    pthread_t t;
    bool started = false;
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &attr, callback_main, job) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        atomic_fetch_sub(&l->refs, 1); /* never the last: the caller holds one */
        free(job);
    }
}

static void queue_event(watchlock_client *c, watchlock_lock *l, int reason)
{
    wl_lost_event *e = calloc(1, sizeof *e);
    if (e == NULL)
        return;
    e->lock_id = l->id;
    e->reason = reason;
    if (c->ev_tail)
        c->ev_tail->next = e;
    else
        c->ev_head = e;
    c->ev_tail = e;
    pthread_cond_broadcast(&c->ev_cond);
}

void wl_lose(watchlock_client *c, watchlock_lock *l, int reason, bool fire)
{
    wl_unschedule_all(c, l);
    if (l->state != WATCHLOCK_HELD)
        return; /* LOST stays LOST; UNLOCKED has nothing to lose */
    if (l->abandoned) {
        /* Its handle was dropped (watchlock_lock_abandon): nobody to tell,
         * and the client lets go of the handle now. */
        wl_abandoned_end(c, l);
        return;
    }
    c->held--;
    if (l->releasing) {
        /* release() could not confirm, and now the lease has run out on
         * its own: the hold is over as the user asked, nothing to report. */
        l->releasing = false;
        l->state = WATCHLOCK_UNLOCKED;
        l->hold_count = 0;
        l->hold_gen++;
        return;
    }
    l->state = WATCHLOCK_LOST;
    l->lost_reason = reason;
    wl_stats_lost(c, reason); /* stats.c */
    if (!fire)
        return;
    if (c->events_on)
        queue_event(c, l, reason);
    if (l->on_lost != NULL && !l->freed)
        start_callback(l, reason);
}

void wl_wait_callbacks(watchlock_client *c, watchlock_lock *l)
{
    const watchlock_lock *self = running_callback;
    int mine = l != NULL ? self == l : self != NULL && self->client == c;
    while ((l != NULL ? l->cb_running : c->cb_running) > mine)
        pthread_cond_wait(&c->cb_cond, &c->mu);
}

static void *timer_main(void *arg)
{
    watchlock_client *c = arg;
    wl_thread_start("watchlock-tm");

    pthread_mutex_lock(&c->mu);
    while (!c->wd_stop) {
        watchlock_lock *top = wl_heap_top(&c->deadline_heap);
        int64_t now = wl_now_us();
        if (top == NULL || top->deadline_us > now) {
            c->tm_sleep_until = top ? top->deadline_us : INT64_MAX;
            wl_cond_wait_until(&c->tm_cond, &c->mu, top ? top->deadline_us : -1);
            c->tm_sleep_until = 0;
            continue;
        }
        if (wl_test_hook != NULL) {
            pthread_mutex_unlock(&c->mu);
            wl_test_hook(c, WL_HOOK_TIMER_DUE);
            pthread_mutex_lock(&c->mu);
            top = wl_heap_top(&c->deadline_heap);
            if (c->wd_stop || top == NULL || top->deadline_us > wl_now_us())
                continue;
        }
        wl_lose(c, top, wl_lock_expiry_reason(top), true);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int wl_timer_ensure_started(watchlock_client *c)
{
    if (c->tm_started || c->wd_stop)
        return WATCHLOCK_OK;
    if (pthread_create(&c->tm_thread, NULL, timer_main, c) != 0)
        return wl_fail(WATCHLOCK_EINTERNAL, "cannot start the loss timer thread");
    c->tm_started = true;
    return WATCHLOCK_OK;
}

void wl_timer_stop(watchlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->wd_stop = true;
    bool started = c->tm_started;
    c->tm_started = false;
    pthread_cond_broadcast(&c->tm_cond);
    pthread_mutex_unlock(&c->mu);
    if (started)
        pthread_join(c->tm_thread, NULL);
}
