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
 * Telling: wl_lose() queues the lost event (for bindings) and the on-lost
 * callback, in a FIFO per client that callback threads drain, so callbacks
 * run off every timing path. A callback thread is started whenever a job is
 * queued and every live callback thread is inside a callback, up to
 * WATCHLOCK_CALLBACK_THREADS per client: below that, a slow callback delays
 * no other; beyond it, the jobs wait in the queue, in order, for a thread
 * to come free. A thread that finds the queue empty exits, but for one
 * spare: while a lock is held or any callback runs, one thread waits idle
 * for the next job (started when a hold with a callback begins, and when
 * the last free thread enters a callback), so that a loss is told after a
 * wake-up, not after a thread start at its deadline, whose margin may be a
 * few milliseconds (a TSan run: 10 ms of a 1 s lease, used up). The spare
 * leaves once no lock is held and no callback runs, at the next job or at
 * close. (One thread per
 * loss, as before, made a mass loss start a thread for each of hundreds of
 * thousands of losses: thread creation under client->mu stalled the
 * watchdog, so more holds were lost, and the threads took every free
 * process ID, which broke fork for the whole machine.) If no thread can be
 * started, the job waits for a live one; with none alive it is dropped (the
 * loss stays visible through state() and the lost events).
 *
 * A queued job holds a reference to its hold's handle (and through it, to the
 * client), so memory stays valid whatever the user frees meanwhile, and a
 * callback thread holds one to the client. Before calling, the thread checks
 * under client->mu that the lock is not being freed and the client not
 * closed (a job found so is dropped uncalled), and counts itself running.
 * watchlock_lock_free() and watchlock_client_close() set those flags and
 * wait until the count drops to zero (minus the calling thread's own
 * callback, so either may be called from inside one): no callback starts
 * after they begin, none runs after they return.
 */
#include "hold/hold.h"

#include <stdlib.h>

void (*wl_test_hook)(watchlock_client *c, int point);

/* The lock whose callback this thread is running (NULL outside callbacks). */
static _Thread_local wl_hold *running_callback;

void wl_unschedule_all(watchlock_client *c, wl_hold *h)
{
    wl_heap_remove(&c->renew_heap, h);
    wl_heap_remove(&c->deadline_heap, h);
}

void wl_set_deadline(watchlock_client *c, wl_hold *h, int64_t deadline_us)
{
    h->deadline_us = deadline_us;
    if (h->ops->deadline_moved != NULL) /* a group's member: the group's deadline follows (hold.h) */
        h->ops->deadline_moved(c, h);
    if (h->state != WATCHLOCK_HELD)
        return;
    if (wl_heap_update(&c->deadline_heap, h) != 0) {
        /* Nobody could watch this hold's deadline: give it up now rather
         * than hold a lock whose loss would go unreported. */
        wl_lose(c, h, WATCHLOCK_LOST_EXPIRED, true);
        return;
    }
    if (deadline_us < c->tm_sleep_until)
        pthread_cond_signal(&c->tm_cond);
}

typedef struct wl_callback_job {
    struct wl_callback_job *next;
    wl_hold *hold; /* counted reference */
    int reason;
} callback_job;

/* With mu held: the oldest queued job, or NULL. */
static callback_job *pop_job(watchlock_client *c)
{
    callback_job *job = c->cb_head;
    if (job != NULL) {
        c->cb_head = job->next;
        if (c->cb_head == NULL)
            c->cb_tail = NULL;
        c->cb_queued--;
    }
    return job;
}

static bool start_thread(watchlock_client *c);

static void *callback_main(void *arg)
{
    watchlock_client *c = arg; /* counted reference, taken by start_thread */
    wl_thread_start("watchlock-cb");

    pthread_mutex_lock(&c->mu);
    for (;;) {
        callback_job *job = pop_job(c);
        if (job == NULL) {
            /* The spare: while a lock is held or a callback runs on
             * another thread, one idle thread waits here, so that the next
             * loss is told at once rather than after a thread start. */
            if ((c->cb_running > 0 || c->held > 0) && c->cb_idle == 0 && !atomic_load(&c->closed)) {
                c->cb_idle++;
                pthread_cond_wait(&c->cb_job_cond, &c->mu);
                c->cb_idle--;
                continue;
            }
            break;
        }
        wl_hold *h = job->hold;
        watchlock_lost_fn fn = h->on_lost;
        void *data = h->on_lost_data;
        bool run = fn != NULL && !h->freed && !atomic_load(&c->closed);
        if (run) {
            h->cb_running++;
            c->cb_running++;
            if (c->cb_threads == c->cb_running && c->cb_threads < WATCHLOCK_CALLBACK_THREADS)
                start_thread(c); /* every thread is in a callback now: a spare, best effort */
        }
        pthread_mutex_unlock(&c->mu);
        if (run) {
            running_callback = h;
            fn(h->ops->owner(h), job->reason, data); /* the kind's handle */
            running_callback = NULL;
            pthread_mutex_lock(&c->mu);
            h->cb_running--;
            c->cb_running--;
            pthread_cond_broadcast(&c->cb_cond);
            if (c->cb_running == 0)
                pthread_cond_broadcast(&c->cb_job_cond); /* the spare goes */
            pthread_mutex_unlock(&c->mu);
        }
        free(job);
        h->ops->unref(h); /* never the client's last reference: this thread holds one */
        pthread_mutex_lock(&c->mu);
    }
    c->cb_threads--;
    pthread_mutex_unlock(&c->mu);
    c->unref(c); /* may free the client */
    return NULL;
}

/* With mu held: starts one more callback thread; false if it cannot. */
static bool start_thread(watchlock_client *c)
{
    pthread_attr_t attr;
    pthread_t t;
    bool started = false;
    atomic_fetch_add(&c->refs, 1);
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &attr, callback_main, c) == 0;
        pthread_attr_destroy(&attr);
    }
    if (started)
        c->cb_threads++;
    else
        atomic_fetch_sub(&c->refs, 1); /* never the last: the caller's lock holds one */
    return started;
}

void wl_callbacks_arm(watchlock_client *c)
{
    if (c->cb_threads > c->cb_running || c->cb_threads >= WATCHLOCK_CALLBACK_THREADS || atomic_load(&c->closed))
        return; /* a free thread is there (or can never be) */
    start_thread(c);
}

/* With mu held: queues the lock's callback, and starts a thread for it if
 * every live callback thread is busy in a callback and the cap allows. */
static void start_callback(watchlock_client *c, wl_hold *h, int reason)
{
    callback_job *job = malloc(sizeof *job);
    if (job == NULL)
        return; /* the loss stays visible through state() and lost events */
    *job = (callback_job){NULL, h, reason};
    atomic_fetch_add(&h->refs, 1);
    if (c->cb_tail)
        c->cb_tail->next = job;
    else
        c->cb_head = job;
    c->cb_tail = job;
    c->cb_queued++;
    if (c->cb_idle > 0)
        pthread_cond_signal(&c->cb_job_cond); /* the spare takes it */
    /* Threads not inside a callback take queued jobs on their own. */
    if (c->cb_queued <= c->cb_threads - c->cb_running || c->cb_threads >= WATCHLOCK_CALLBACK_THREADS)
        return;
    if (start_thread(c) || c->cb_threads > 0)
        return; /* a live thread takes it when it comes free */
    /* No thread at all: the queue held only this job. */
    c->cb_head = c->cb_tail = NULL;
    c->cb_queued = 0;
    atomic_fetch_sub(&h->refs, 1); /* never the last: the caller holds one */
    free(job);
}

static void queue_event(watchlock_client *c, wl_hold *h, int reason)
{
    wl_lost_event *e = calloc(1, sizeof *e);
    if (e == NULL)
        return;
    e->lock_id = h->id;
    e->reason = reason;
    if (c->ev_tail)
        c->ev_tail->next = e;
    else
        c->ev_head = e;
    c->ev_tail = e;
    pthread_cond_broadcast(&c->ev_cond);
}

void wl_lose(watchlock_client *c, wl_hold *h, int reason, bool fire)
{
    wl_unschedule_all(c, h);
    if (h->state != WATCHLOCK_HELD)
        return; /* LOST stays LOST; UNLOCKED has nothing to lose */
    if (h->abandoned) {
        /* Its handle was dropped (watchlock_lock_abandon): nobody to tell,
         * and the client lets go of the handle now. */
        h->ops->abandoned_end(c, h);
        return;
    }
    c->held--;
    if (h->releasing) {
        /* release() could not confirm, and now the lease has run out on
         * its own: the hold is over as the user asked, nothing to report. */
        h->releasing = false;
        h->state = WATCHLOCK_UNLOCKED;
        h->hold_count = 0;
        h->hold_gen++;
        return;
    }
    h->state = WATCHLOCK_LOST;
    h->lost_reason = reason;
    if (h->ops->lost != NULL && !h->ops->lost(c, h, reason, fire))
        return; /* a group's member: its group is told instead (hold.h) */
    wl_stats_lost(c, reason); /* stats.c */
    if (!fire)
        return;
    if (c->events_on)
        queue_event(c, h, reason);
    if (h->on_lost != NULL && !h->freed)
        start_callback(c, h, reason);
}

void wl_wait_callbacks(watchlock_client *c, wl_hold *h)
{
    const wl_hold *self = running_callback;
    int mine = h != NULL ? self == h : self != NULL && self->client == c;
    while ((h != NULL ? h->cb_running : c->cb_running) > mine)
        pthread_cond_wait(&c->cb_cond, &c->mu);
}

static void *timer_main(void *arg)
{
    watchlock_client *c = arg;
    wl_thread_start("watchlock-tm");

    pthread_mutex_lock(&c->mu);
    while (!c->wd_stop) {
        wl_hold *top = wl_heap_top(&c->deadline_heap);
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

int wl_lock_expiry_reason(const wl_hold *h)
{
    if (h->stop_reason != WATCHLOCK_LOST_NONE)
        return h->stop_reason;
    /* A renewal still on the wire at the deadline is a renewal the network
     * did not answer in time. */
    return h->renew_failing || h->renew_inflight ? WATCHLOCK_LOST_CONNECTION : WATCHLOCK_LOST_EXPIRED;
}
