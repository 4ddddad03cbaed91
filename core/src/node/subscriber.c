/*
 * subscriber.c - one pub/sub connection per client that wakes waiters when a
 * lock is released.
 *
 * Waiters join a channel entry (a reference count), wait for the
 * subscription to be confirmed, then remember the entry's generation before
 * each acquire attempt and sleep until the generation moves (a release
 * message arrived) or their bound runs out. Any message after the attempt
 * therefore wakes them: no lost wake-ups.
 *
 * The subscriber thread owns the connection. It polls the socket and an
 * eventfd that joiners poke; it sends SUBSCRIBE for new entries and
 * UNSUBSCRIBE for entries nobody used for LINGER_US (so a busy name does not
 * re-subscribe for every wait). When the connection fails every waiter is
 * woken (generation bump) and `live` turns false; waiters then sleep until
 * the holder's lease ends or the thread reconnects and resubscribes (which
 * wakes them again: every confirmed SUBSCRIBE is a wake-up, so a waiter
 * re-checks at once whatever was published while the channel had no
 * subscription). The connection follows the server's address: once it is
 * no longer current (a Sentinel failover learnt by any path: the
 * sentinels' +switch-master, a READONLY reply, a failed connection), the
 * thread drops it and subscribes again where the master is now (issue
 * 29.16: a release published on the new master while the subscription
 * stayed on the old one was never heard). A SUBSCRIBE the server refuses (ACL) marks the entry
 * denied: its waiters are bounded by the holder's lease alone, and the
 * client's WATCHLOCK_STAT_SUBSCRIBE_DENIED counts it.
 *
 * Under Cluster each node has its own subscriber (SSUBSCRIBE). When the
 * node leaves the slot map its subscriber is retired: the thread is told
 * to stop, every entry is marked moved (its waiters join the channel again
 * where the map points), and the cluster frees it once the thread has
 * returned, or, while waiters still hold entries, the last of them does.
 *
 * Locking: sub->mu guards the entries and flags. The thread holds it while
 * handling replies and queueing commands; socket writes of these small
 * commands happen under it too, reads only after poll() said readable.
 */
#include "node/node.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define LINGER_US 2000000
#define FOLLOW_US 250000 /* with waiters: how soon a moved master is followed (a local check, no I/O) */
#define RECONNECT_DELAY_US 200000

struct wl_sub_entry {
    char *channel;
    size_t len;
    int refs;
    uint64_t gen;
    bool subscribed; /* confirmed by the server */
    bool requested;  /* SUBSCRIBE sent on the current connection */
    bool denied;     /* the server refused SUBSCRIBE (ACL): no wake-ups on this connection */
    bool moved;      /* Cluster: the channel's slot is served elsewhere now (join again there) */
    int64_t idle_since;
    char msg[WL_SUB_MSG_MAX]; /* the latest message's payload (msg_len 0: none, or too long to keep) */
    size_t msg_len;
    pthread_cond_t cond;
    /* called with the subscriber's mutex held whenever the entry's waiters
     * are woken (wl_sub_notify_add: a quorum waits on several at once) */
    wl_sub_notify *notify;
    wl_sub_entry *next;
};

struct wl_subscriber {
    wl_server *server;
    pthread_mutex_t mu;
    pthread_t thread;
    bool started, stop;
    bool live;   /* connected and able to deliver wake-ups */
    bool failed; /* the last connection attempt failed */
    int efd;
    int64_t denied; /* SUBSCRIBEs the server refused (WATCHLOCK_STAT_SUBSCRIBE_DENIED) */
    wl_sub_entry *entries;
    bool reconnect; /* wl_subscriber_reconnect: drop the connection and start again */
    bool sharded;   /* Cluster: SSUBSCRIBE/SUNSUBSCRIBE, messages are "smessage" */
    wl_redirect moved_to; /* Cluster: the last MOVED an SSUBSCRIBE got (kind NONE: none) */
    bool retired; /* Cluster: the node left the slot map (wl_subscriber_retire) */
    bool exited;  /* the thread has returned (or is returning) */
    bool orphan;  /* released by its node: the last wl_sub_leave frees it */
    wl_conn *ctx;   /* thread only */
};

wl_subscriber *wl_subscriber_new(wl_server *srv)
{
    wl_subscriber *sub = calloc(1, sizeof *sub);
    if (sub == NULL)
        return NULL;
    sub->server = srv;
    sub->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sub->efd < 0 || pthread_mutex_init(&sub->mu, NULL) != 0) {
        if (sub->efd >= 0)
            close(sub->efd);
        free(sub);
        return NULL;
    }
    return sub;
}

static void poke(wl_subscriber *sub)
{
    uint64_t one = 1;
    ssize_t n = write(sub->efd, &one, sizeof one);
    WL_UNUSED(n);
}

static void entry_wake(wl_sub_entry *e)
{
    pthread_cond_broadcast(&e->cond);
    for (wl_sub_notify *n = e->notify; n != NULL; n = n->next)
        n->fn(n->arg);
}

static void wake_all(wl_subscriber *sub)
{
    for (wl_sub_entry *e = sub->entries; e; e = e->next) {
        e->gen++;
        entry_wake(e);
    }
}

static void free_entry(wl_sub_entry *e)
{
    pthread_cond_destroy(&e->cond);
    free(e->channel);
    free(e);
}

/* With mu held: drop the connection and tell every waiter. */
static void drop_connection(wl_subscriber *sub)
{
    if (sub->ctx) {
        wl_conn_free(sub->ctx);
        sub->ctx = NULL;
    }
    sub->live = false;
    for (wl_sub_entry *e = sub->entries; e; e = e->next)
        e->subscribed = e->requested = e->denied = false;
    wake_all(sub);
}

static void send_command(wl_subscriber *sub, const char *cmd, wl_sub_entry *e)
{
    const char *argv[2] = {cmd, e->channel};
    size_t lens[2] = {strlen(cmd), e->len};
    wl_conn_append(sub->ctx, 2, argv, lens); /* out of memory fails the connection */
}

/* With mu held: queue SUBSCRIBE/UNSUBSCRIBE as the entries require. */
static void sync_subscriptions(wl_subscriber *sub, int64_t now)
{
    wl_sub_entry **pp = &sub->entries;
    while (*pp) {
        wl_sub_entry *e = *pp;
        if (e->refs > 0 && !e->requested && !e->moved) {
            send_command(sub, sub->sharded ? "SSUBSCRIBE" : "SUBSCRIBE", e);
            e->requested = true;
        } else if (e->refs == 0 && now - e->idle_since > LINGER_US) {
            if (e->requested && !e->denied && !e->moved)
                send_command(sub, sub->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE", e);
            *pp = e->next;
            free_entry(e);
            continue;
        }
        pp = &e->next;
    }
}

static wl_sub_entry *find_entry(wl_subscriber *sub, const char *ch, size_t len)
{
    for (wl_sub_entry *e = sub->entries; e; e = e->next)
        if (e->len == len && memcmp(e->channel, ch, len) == 0)
            return e;
    return NULL;
}

/* With mu held: one reply from the server. */
static void handle_reply(wl_subscriber *sub, redisReply *r)
{
    wl_redirect rd;
    if (r->type == REDIS_REPLY_ERROR && wl_parse_redirect(r, &rd)) {
        /* Cluster: SSUBSCRIBE on a node that does not serve the channel's
         * slot (MOVED), or not now (TRYAGAIN, CLUSTERDOWN). Its waiters are
         * woken to join again where the slot map points. */
        if (rd.kind == WL_REDIRECT_MOVED) {
            if (rd.host[0] == '\0')
                snprintf(rd.host, sizeof rd.host, "%s", sub->server->host);
            sub->moved_to = rd;
        }
        for (wl_sub_entry *e = sub->entries; e; e = e->next) {
            if (e->requested && !e->subscribed && !e->denied) {
                e->requested = false;
                e->moved = true;
                e->gen++;
                entry_wake(e);
            }
        }
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* A refused SUBSCRIBE (NOPERM: the ACL user may not use the
         * channel). The reply does not say which channel, so every request
         * still unconfirmed is marked: its waiters stop waiting for a
         * confirmation and sleep until the holder's lease ends instead. */
        for (wl_sub_entry *e = sub->entries; e; e = e->next) {
            if (e->requested && !e->subscribed && !e->denied) {
                e->denied = true;
                sub->denied++;
                entry_wake(e);
            }
        }
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    wl_sub_entry *e = find_entry(sub, r->element[1]->str, r->element[1]->len);
    if (e == NULL)
        return;
    if (strcmp(kind, "message") == 0 || strcmp(kind, "smessage") == 0) {
        const redisReply *m = r->element[2];
        e->msg_len = m->type == REDIS_REPLY_STRING && m->len < sizeof e->msg ? m->len : 0;
        if (e->msg_len > 0)
            memcpy(e->msg, m->str, m->len);
        e->gen++;
        entry_wake(e);
    } else if (strcmp(kind, "sunsubscribe") == 0 && e->refs > 0 && e->requested) {
        /* Unasked: the server dropped the subscription because the slot
         * moved (resharding, failover). Wake the waiters to join again on
         * the slot's new node. */
        e->subscribed = e->requested = false;
        e->moved = true;
        e->gen++;
        entry_wake(e);
    } else if (strcmp(kind, "subscribe") == 0 || strcmp(kind, "ssubscribe") == 0) {
        /* Also a wake-up: a release may have gone unheard while the
         * channel was not subscribed (first join, or after a reconnect). */
        e->subscribed = true;
        e->gen++;
        entry_wake(e);
    }
}

static void *subscriber_main(void *arg)
{
    wl_subscriber *sub = arg;
    wl_thread_start("watchlock-sub");

    pthread_mutex_lock(&sub->mu);
    while (!sub->stop) {
        if (sub->reconnect) {
            sub->reconnect = false;
            if (sub->ctx != NULL)
                drop_connection(sub);
        }
        if (sub->ctx == NULL) {
            pthread_mutex_unlock(&sub->mu);
            wl_conn *ctx = NULL;
            int rc = wl_server_connect(sub->server, 0, &ctx);
            pthread_mutex_lock(&sub->mu);
            if (rc != WATCHLOCK_OK) {
                sub->failed = true;
                wake_all(sub);
                pthread_mutex_unlock(&sub->mu);
                struct pollfd pf = {sub->efd, POLLIN, 0};
                poll(&pf, 1, RECONNECT_DELAY_US / 1000);
                pthread_mutex_lock(&sub->mu);
                continue;
            }
            sub->ctx = ctx;
            sub->failed = false;
            sub->live = true;
        }
        int64_t now = wl_now_us();
        sync_subscriptions(sub, now);
        bool flushed;
        if (wl_conn_write_some(sub->ctx, &flushed) != 0) {
            drop_connection(sub);
            continue;
        }
        int fd = wl_conn_fd(sub->ctx);
        short events = (short)(POLLIN | (wl_conn_wants_write(sub->ctx) ? POLLOUT : 0));
        bool waiters = false;
        for (const wl_sub_entry *e = sub->entries; e != NULL && !waiters; e = e->next)
            waiters = e->refs > 0;
        pthread_mutex_unlock(&sub->mu);

        struct pollfd pf[2] = {{fd, events, 0}, {sub->efd, POLLIN, 0}};
        int n = poll(pf, 2, (waiters ? FOLLOW_US : LINGER_US) / 1000);
        if (pf[1].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(sub->efd, &v, sizeof v);
            WL_UNUSED(r);
        }
        /* ctx is this thread's; the server's mutex is taken without ours */
        bool moved = !wl_server_current(sub->server, sub->ctx);
        pthread_mutex_lock(&sub->mu);
        if (moved && sub->ctx != NULL) { /* the master moved: subscribe again there */
            drop_connection(sub);
            continue;
        }
        if (n > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) && sub->ctx != NULL && !sub->reconnect) {
            if (wl_conn_read_some(sub->ctx) != 0) {
                drop_connection(sub);
                continue;
            }
            redisReply *reply;
            int got;
            while ((got = wl_conn_next_reply(sub->ctx, &reply)) > 0) {
                handle_reply(sub, reply);
                freeReplyObject(reply);
            }
            if (got < 0) {
                drop_connection(sub);
                continue;
            }
        }
    }
    if (sub->ctx) {
        wl_conn_free(sub->ctx);
        sub->ctx = NULL;
    }
    sub->live = false;
    wake_all(sub);
    sub->exited = true;
    pthread_mutex_unlock(&sub->mu);
    return NULL;
}

void wl_subscriber_set_sharded(wl_subscriber *sub)
{
    sub->sharded = true;
}

bool wl_sub_take_redirect(wl_subscriber *sub, wl_redirect *out)
{
    pthread_mutex_lock(&sub->mu);
    *out = sub->moved_to;
    sub->moved_to.kind = WL_REDIRECT_NONE;
    pthread_mutex_unlock(&sub->mu);
    return out->kind != WL_REDIRECT_NONE;
}

bool wl_sub_moved(wl_subscriber *sub, wl_sub_entry *entry)
{
    pthread_mutex_lock(&sub->mu);
    bool moved = entry->moved;
    pthread_mutex_unlock(&sub->mu);
    return moved;
}

void wl_subscriber_reconnect(wl_subscriber *sub)
{
    if (sub == NULL)
        return;
    pthread_mutex_lock(&sub->mu);
    sub->reconnect = sub->started;
    pthread_mutex_unlock(&sub->mu);
    poke(sub);
}

void wl_subscriber_stop(wl_subscriber *sub)
{
    if (sub == NULL)
        return;
    pthread_mutex_lock(&sub->mu);
    bool started = sub->started;
    sub->stop = true;
    wake_all(sub);
    pthread_mutex_unlock(&sub->mu);
    poke(sub);
    if (started)
        pthread_join(sub->thread, NULL);
    pthread_mutex_lock(&sub->mu);
    sub->started = false;
    pthread_mutex_unlock(&sub->mu);
}

void wl_subscriber_retire(wl_subscriber *sub)
{
    if (sub == NULL)
        return;
    pthread_mutex_lock(&sub->mu);
    sub->retired = true;
    sub->stop = true;
    for (wl_sub_entry *e = sub->entries; e; e = e->next) {
        e->moved = true;
        e->subscribed = e->requested = false;
    }
    wake_all(sub);
    pthread_mutex_unlock(&sub->mu);
    poke(sub);
}

static bool any_refs_locked(const wl_subscriber *sub)
{
    for (const wl_sub_entry *e = sub->entries; e; e = e->next)
        if (e->refs > 0)
            return true;
    return false;
}

bool wl_subscriber_release(wl_subscriber *sub)
{
    if (sub == NULL)
        return true;
    pthread_mutex_lock(&sub->mu);
    bool started = sub->started;
    if (started && !sub->exited) {
        pthread_mutex_unlock(&sub->mu);
        return false;
    }
    pthread_mutex_unlock(&sub->mu);
    if (started)
        pthread_join(sub->thread, NULL); /* it has returned or is returning */
    pthread_mutex_lock(&sub->mu);
    sub->started = false;
    bool busy = any_refs_locked(sub);
    sub->orphan = busy;
    pthread_mutex_unlock(&sub->mu);
    if (!busy)
        wl_subscriber_free(sub);
    return true;
}

void wl_subscriber_free(wl_subscriber *sub)
{
    if (sub == NULL)
        return;
    wl_subscriber_stop(sub);
    while (sub->entries) {
        wl_sub_entry *e = sub->entries;
        sub->entries = e->next;
        free_entry(e);
    }
    close(sub->efd);
    pthread_mutex_destroy(&sub->mu);
    free(sub);
}

int wl_sub_join(wl_subscriber *sub, const char *channel, size_t len, wl_sub_entry **out)
{
    *out = NULL;
    pthread_mutex_lock(&sub->mu);
    if (sub->stop && !sub->retired) {
        pthread_mutex_unlock(&sub->mu);
        return wl_fail(WATCHLOCK_ECLOSED, "client closed");
    }
    if (!sub->started && !sub->retired) {
        if (pthread_create(&sub->thread, NULL, subscriber_main, sub) != 0) {
            pthread_mutex_unlock(&sub->mu);
            return wl_fail(WATCHLOCK_EINTERNAL, "cannot start the subscriber thread");
        }
        sub->started = true;
    }
    wl_sub_entry *e = find_entry(sub, channel, len);
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL || (e->channel = malloc(len)) == NULL || wl_cond_init(&e->cond) != 0) {
            if (e)
                free(e->channel);
            free(e);
            pthread_mutex_unlock(&sub->mu);
            return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        }
        memcpy(e->channel, channel, len);
        e->len = len;
        e->next = sub->entries;
        sub->entries = e;
    }
    if (e->moved && e->refs == 0 && !sub->retired) {
        e->moved = false; /* routed here again (after a fresh slot map): ask again */
    }
    if (sub->retired) /* the node left the map meanwhile: join again where it points */
        e->moved = true;
    bool need_poke = !e->requested;
    e->refs++;
    pthread_mutex_unlock(&sub->mu);
    if (need_poke)
        poke(sub);
    *out = e;
    return WATCHLOCK_OK;
}

void wl_sub_leave(wl_subscriber *sub, wl_sub_entry *entry)
{
    pthread_mutex_lock(&sub->mu);
    if (--entry->refs == 0)
        entry->idle_since = wl_now_us();
    bool last = sub->orphan && !any_refs_locked(sub); /* its node is gone: the last waiter frees it */
    pthread_mutex_unlock(&sub->mu);
    if (last)
        wl_subscriber_free(sub);
}

uint64_t wl_sub_ready(wl_subscriber *sub, wl_sub_entry *entry, int64_t at_us, bool *live)
{
    pthread_mutex_lock(&sub->mu);
    while (!entry->subscribed && !entry->denied && !entry->moved && !sub->failed && !sub->stop &&
           (at_us < 0 || wl_now_us() < at_us))
        wl_cond_wait_until(&entry->cond, &sub->mu, at_us);
    *live = entry->subscribed && sub->live;
    uint64_t gen = entry->gen;
    pthread_mutex_unlock(&sub->mu);
    return gen;
}

bool wl_sub_wait(wl_subscriber *sub, wl_sub_entry *entry, uint64_t gen, int64_t at_us)
{
    pthread_mutex_lock(&sub->mu);
    while (entry->gen == gen && !entry->moved && !sub->stop && (at_us < 0 || wl_now_us() < at_us))
        wl_cond_wait_until(&entry->cond, &sub->mu, at_us);
    bool woken = entry->gen != gen || entry->moved || sub->stop;
    pthread_mutex_unlock(&sub->mu);
    return woken;
}

uint64_t wl_sub_generation(wl_subscriber *sub, wl_sub_entry *entry)
{
    pthread_mutex_lock(&sub->mu);
    uint64_t gen = entry->gen;
    pthread_mutex_unlock(&sub->mu);
    return gen;
}

size_t wl_sub_last_message(wl_subscriber *sub, wl_sub_entry *entry, char buf[WL_SUB_MSG_MAX])
{
    pthread_mutex_lock(&sub->mu);
    size_t n = entry->msg_len;
    memcpy(buf, entry->msg, n);
    pthread_mutex_unlock(&sub->mu);
    buf[n] = '\0';
    return n;
}

int64_t wl_sub_denied(wl_subscriber *sub)
{
    pthread_mutex_lock(&sub->mu);
    int64_t n = sub->denied;
    pthread_mutex_unlock(&sub->mu);
    return n;
}

void wl_sub_poke(wl_subscriber *sub, wl_sub_entry *entry)
{
    pthread_mutex_lock(&sub->mu);
    entry->gen++;
    entry_wake(entry);
    pthread_mutex_unlock(&sub->mu);
}

void wl_sub_notify_add(wl_subscriber *sub, wl_sub_entry *entry, wl_sub_notify *n)
{
    pthread_mutex_lock(&sub->mu);
    n->next = entry->notify;
    entry->notify = n;
    pthread_mutex_unlock(&sub->mu);
}

void wl_sub_notify_remove(wl_subscriber *sub, wl_sub_entry *entry, wl_sub_notify *n)
{
    pthread_mutex_lock(&sub->mu);
    for (wl_sub_notify **p = &entry->notify; *p != NULL; p = &(*p)->next)
        if (*p == n) {
            *p = n->next;
            break;
        }
    pthread_mutex_unlock(&sub->mu);
}
