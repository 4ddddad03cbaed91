/*
 * client.c - opening and closing clients, reference counting, admin calls,
 * lost events and stats.
 */
#include "client/client.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int wl_check_client(const watchlock_client *c)
{
    if (c == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "client is NULL");
    if (c->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED, "client was opened by the parent process before fork(); open a new one");
    if (atomic_load(&c->closed))
        return wl_fail(WATCHLOCK_ECLOSED, "client is closed");
    return WATCHLOCK_OK;
}

static void client_free(watchlock_client *c)
{
    c->placement->free(c); /* a quorum's members 1..n-1 (member 0 is c->server) */
    wl_subscriber_free(c->sub);
    wl_server_destroy(&c->server);
    while (c->ev_head) {
        wl_lost_event *e = c->ev_head;
        c->ev_head = e->next;
        free(e);
    }
    wl_heap_free(&c->renew_heap);
    wl_heap_free(&c->deadline_heap);
    pthread_cond_destroy(&c->wd_cond);
    pthread_cond_destroy(&c->tm_cond);
    pthread_cond_destroy(&c->cb_cond);
    pthread_cond_destroy(&c->cb_job_cond);
    pthread_cond_destroy(&c->ev_cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void wl_client_unref(watchlock_client *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        client_free(c);
}

wl_subscriber *wl_client_sub(watchlock_client *c, const char *channel, size_t len)
{
    uint64_t pin = wl_server_pin(&c->server);
    wl_subscriber *sub = wl_server_subscriber(&c->server, channel, len, atomic_load(&c->closed), c->sub);
    wl_server_unpin(&c->server, pin); /* the pointer is only compared after this */
    return sub;
}

int wl_client_join(watchlock_client *c, const char *channel, size_t len, const char *what, wl_subscriber **sub,
                   wl_sub_entry **entry)
{
    *entry = NULL;
    uint64_t pin = wl_server_pin(&c->server); /* the node's subscriber stays until joined */
    *sub = wl_server_subscriber(&c->server, channel, len, atomic_load(&c->closed), c->sub);
    int rc = *sub == NULL ? wl_fail(WATCHLOCK_ECONN, "%s: %s", what, watchlock_last_error())
                          : wl_sub_join(*sub, channel, len, entry);
    wl_server_unpin(&c->server, pin);
    return rc;
}

/* The sentinels announced a new master: waiters resubscribe there (and
 * are woken to try again). */
static void on_switch_master(void *arg)
{
    watchlock_client *c = arg;
    wl_subscriber_reconnect(c->sub);
}

/* Checks the server once: reachable, credentials good, scripts runnable. */
/* ping: PING the server now (any client); false for a quorum's member 0,
 * which quorum.c probes in parallel with the other members. */
static int client_open(watchlock_client **out, const char *url, bool ping)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    watchlock_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    c->placement = &wl_single_placement; /* hold.h: a quorum's open installs its own */
    int rc = wl_server_init(&c->server, url);
    if (rc != WATCHLOCK_OK) {
        free(c);
        return rc;
    }
    wl_heap_init(&c->renew_heap, offsetof(wl_hold, wake_us), offsetof(wl_hold, heap_idx));
    wl_heap_init(&c->deadline_heap, offsetof(wl_hold, deadline_us), offsetof(wl_hold, dl_idx));
    if (pthread_mutex_init(&c->mu, NULL) != 0 || wl_cond_init(&c->wd_cond) != 0 || wl_cond_init(&c->ev_cond) != 0 ||
        wl_cond_init(&c->tm_cond) != 0 || wl_cond_init(&c->cb_cond) != 0 || wl_cond_init(&c->cb_job_cond) != 0) {
        wl_server_destroy(&c->server);
        free(c);
        return wl_fail(WATCHLOCK_EINTERNAL, "cannot initialise mutexes");
    }
    atomic_init(&c->refs, 1);
    c->unref = wl_client_unref;
    atomic_init(&c->closed, false);
    atomic_init(&c->wd_cpu_us, 0);
    c->fork_gen = wl_fork_generation();
    c->sub = wl_subscriber_new(&c->server);
    if (c->sub == NULL) {
        client_free(c);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    if ((ping && (rc = wl_node_ping(&c->server)) != WATCHLOCK_OK) ||
        (rc = wl_sentinel_start(&c->server, on_switch_master, c)) != WATCHLOCK_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        client_free(c);
        return wl_fail(rc, "%s", msg);
    }
    *out = c;
    return WATCHLOCK_OK;
}

int watchlock_client_open(watchlock_client **out, const char *url)
{
    return client_open(out, url, true);
}

int wl_client_open_unprobed(watchlock_client **out, const char *url)
{
    return client_open(out, url, false);
}

void watchlock_client_close(watchlock_client *c)
{
    if (c == NULL || c->fork_gen != wl_fork_generation())
        return; /* forked child: leak rather than touch the parent's state */
    if (atomic_exchange(&c->closed, true))
        return;

    /* Take every held lock out of the watchdog's hands, and wait for
     * callbacks that already run (none starts from now on). */
    pthread_mutex_lock(&c->mu);
    wl_wait_callbacks(c, NULL);
    c->wd_stop = true;
    pthread_cond_broadcast(&c->wd_cond);
    pthread_cond_broadcast(&c->tm_cond);
    pthread_cond_broadcast(&c->ev_cond);
    pthread_cond_broadcast(&c->cb_job_cond); /* the spare callback thread goes (loss.c) */
    size_t n = 0;
    for (wl_hold *h = c->holds; h; h = h->next)
        if (h->state == WATCHLOCK_HELD)
            n++;
    wl_hold **held = n ? calloc(n, sizeof *held) : NULL;
    wl_release_args *args = n ? calloc(n, sizeof *args) : NULL;
    size_t k = 0, kp = 0; /* holds kept to release; those released by the plain script (args) */
    for (wl_hold *h = c->holds, *next; h; h = next) {
        next = h->next;
        if (h->state != WATCHLOCK_UNLOCKED) {
            if (held && args && h->state == WATCHLOCK_HELD && k < n) {
                atomic_fetch_add(&h->refs, 1);
                if (h->ops->release_best_effort == NULL) /* else the kind's own release, below */
                    wl_release_args_make(h, &args[kp++]);
                held[k++] = h;
            }
            wl_unschedule_all(c, h);
            h->state = WATCHLOCK_UNLOCKED;
            h->releasing = false;
            h->hold_count = 0;
            h->hold_gen++;
        }
        if (h->abandoned) /* a dropped handle's hold: released above, like the others */
            h->ops->abandoned_end(c, h);
    }
    c->held = 0;
    pthread_mutex_unlock(&c->mu);

    wl_watchdog_stop(c);
    wl_timer_stop(c);
    wl_sentinel_stop(&c->server);
    wl_subscriber_stop(c->sub);
    wl_server *node;
    uint64_t pin = wl_server_pin(&c->server);
    for (size_t i = 0; (node = wl_server_node(&c->server, i)) != NULL; i++) {
        pthread_mutex_lock(&node->mu); /* wl_client_sub makes no new one: c->closed */
        wl_subscriber *sub = node->sub;
        pthread_mutex_unlock(&node->mu);
        wl_subscriber_stop(sub);
    }
    wl_server_unpin(&c->server, pin);

    /* Release what was held, best effort: a kind that keeps a structure
     * of its own (a queued kind's queue) through its own release, so that
     * its next waiter is granted now (issue 29.11); the others pipelined
     * (one by one, routed by key, under Cluster; on every member at once,
     * one by one, on a quorum). */
    for (size_t i = 0; i < k; i++)
        if (held[i]->ops->release_best_effort != NULL)
            held[i]->ops->release_best_effort(held[i]);
    c->placement->close_release(c, args, kp); /* hold.h: the placement's, then its background work stops */
    for (size_t i = 0; i < n && held != NULL && held[i] != NULL; i++)
        held[i]->ops->unref(held[i]);
    free(held);
    free(args);
    wl_server_close(&c->server);
    c->placement->close(c);
    wl_client_unref(c);
}

int wl_check_name(const void *name, size_t len)
{
    if (name == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "lock name is NULL");
    if (len == 0)
        return wl_fail(WATCHLOCK_EINVAL, "lock name is empty");
    if (len > WATCHLOCK_MAX_NAME)
        return wl_fail(WATCHLOCK_EINVAL, "lock name is %zu bytes, more than the limit of %d", len,
                       WATCHLOCK_MAX_NAME);
    return WATCHLOCK_OK;
}

int wl_admin_keys(watchlock_client *c, const void *name, size_t name_len, wl_keys *keys)
{
    int rc = wl_check_client(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_check_name(name, name_len);
    if (rc == WATCHLOCK_OK)
        rc = wl_keys_make(keys, name, name_len);
    return rc;
}

/* Inspect and force-release: the client and name checked here, then the
 * client's placement runs the script on its servers and gives its verdict
 * (hold.h wl_placement: one server's answer, or a quorum's majority). */
int watchlock_client_inspect(watchlock_client *c, const void *name, size_t name_len, int *held, int64_t *remaining_ms,
                             int64_t *fence)
{
    wl_keys keys;
    int rc = wl_admin_keys(c, name, name_len, &keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    rc = c->placement->inspect(c, &keys, held, remaining_ms, fence);
    wl_keys_clear(&keys);
    return rc;
}

int watchlock_client_force_release(watchlock_client *c, const void *name, size_t name_len, int *released)
{
    wl_keys keys;
    int rc = wl_admin_keys(c, name, name_len, &keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    rc = c->placement->force_release(c, &keys, released);
    wl_keys_clear(&keys);
    return rc;
}

int watchlock_client_enable_lost_events(watchlock_client *c, int on)
{
    int rc = wl_check_client(c);
    if (rc != WATCHLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    c->events_on = on != 0;
    pthread_mutex_unlock(&c->mu);
    return WATCHLOCK_OK;
}

int watchlock_client_next_lost_event(watchlock_client *c, int64_t timeout_ms, uint64_t *lock_id, int *reason)
{
    if (c == NULL || lock_id == NULL || reason == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "NULL argument");
    if (c->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED, "client was opened by the parent process before fork()");
    atomic_fetch_add(&c->refs, 1); /* stay alive while waiting, even across close */
    int64_t until = wl_deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&c->mu);
    while (c->ev_head == NULL && !atomic_load(&c->closed) && (until < 0 || wl_now_us() < until))
        wl_cond_wait_until(&c->ev_cond, &c->mu, until);
    int rc;
    wl_lost_event *e = c->ev_head;
    if (e != NULL) {
        c->ev_head = e->next;
        if (c->ev_head == NULL)
            c->ev_tail = NULL;
        *lock_id = e->lock_id;
        *reason = e->reason;
        rc = WATCHLOCK_OK;
    } else if (atomic_load(&c->closed)) {
        rc = wl_fail(WATCHLOCK_ECLOSED, "client is closed");
    } else {
        rc = wl_fail(WATCHLOCK_ETIMEDOUT, "no lost event within %lld ms", (long long)timeout_ms);
    }
    pthread_mutex_unlock(&c->mu);
    free(e);
    wl_client_unref(c);
    return rc;
}

int64_t watchlock_client_stat(watchlock_client *c, int which)
{
    if (c == NULL || c->fork_gen != wl_fork_generation())
        return -1;
    int64_t v = -1;
    if (which == WATCHLOCK_STAT_WATCHDOG_CPU_US)
        return atomic_load(&c->wd_cpu_us);
    if (which >= WATCHLOCK_STAT_QUORUM_RESTARTS && which <= WATCHLOCK_STAT_QUORUM_SPLIT_VOTES) {
        return c->placement->stat(c, which); /* hold.h: 0 for a client that is not a quorum */
    }
    if (which >= WATCHLOCK_STAT_ACQUIRES) /* stats.c: lock-free counters */
        return wl_stats_get(c, which);
    if (which == WATCHLOCK_STAT_SUBSCRIBE_DENIED) { /* subscriber.mu: never under client.mu */
        int64_t n = wl_sub_denied(c->sub);
        wl_server *node;
        uint64_t pin = wl_server_pin(&c->server);
        for (size_t i = 0; (node = wl_server_node(&c->server, i)) != NULL; i++) {
            pthread_mutex_lock(&node->mu);
            wl_subscriber *sub = node->sub;
            pthread_mutex_unlock(&node->mu);
            n += sub ? wl_sub_denied(sub) : 0;
        }
        n += wl_server_retired_denied(&c->server);
        wl_server_unpin(&c->server, pin);
        return n;
    }
    pthread_mutex_lock(&c->mu);
    switch (which) {
    case WATCHLOCK_STAT_HELD_LOCKS: v = c->held; break;
    case WATCHLOCK_STAT_RENEW_ROUNDS: v = c->renew_rounds; break;
    case WATCHLOCK_STAT_RENEW_ROUNDTRIPS: v = c->renew_roundtrips; break;
    case WATCHLOCK_STAT_RENEWALS: v = c->renewals; break;
    default: break;
    }
    pthread_mutex_unlock(&c->mu);
    return v;
}
