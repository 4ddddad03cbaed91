/*
 * sentinel.c - the Sentinel topology: where the master is, and following it
 * through a failover.
 *
 * Discovery asks each sentinel of the URL in turn SENTINEL
 * GET-MASTER-ADDR-BY-NAME; node.c then checks with ROLE that the address
 * really is a master. node.c asks again whenever a connection to the master
 * fails or a script is refused with READONLY (wl_server_suspect). On top of
 * that a thread of its own stays subscribed to +switch-master on one
 * sentinel, so a failover moves new connections (and the subscriber's, for
 * wake-ups) to the new master as soon as the sentinels announce it.
 *
 * Locks held across a failover are not this file's business: the
 * watchdog's next renewal goes to the new master and either finds the key
 * (it was replicated) or reports the hold LOST ("taken"/"expired"); it never
 * continues silently.
 *
 * Locking: wl_sentinel.mu guards stop; it is a leaf. The thread takes
 * wl_server.mu only through wl_server_set_address / wl_server_suspect.
 */
#include "topology/topology.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define RECONNECT_DELAY_MS 500

struct wl_sentinel {
    wl_server *srv;
    pthread_t thread;
    pthread_mutex_t mu;
    bool stop;
    int efd;
    void (*on_switch)(void *);
    void *arg;
};

/* A connection to sentinel i, authenticated with the sentinel credentials. */
static int connect_sentinel(wl_server *srv, size_t i, int64_t connect_ms, wl_conn **out)
{
    const wl_endpoint *ep = &srv->ep;
    char label[300];
    snprintf(label, sizeof label, "sentinel %s:%d", ep->seeds[i].host, ep->seeds[i].port);
    wl_target t = {.host = ep->seeds[i].host, .port = ep->seeds[i].port, .keepalive = ep->keepalive != 0,
                   .tls = srv->tls, .sni = ep->tls.sni, .label = label};
    int rc = wl_conn_open(&t, connect_ms, ep->command_timeout_ms, out);
    if (rc != WATCHLOCK_OK || ep->sentinel_password == NULL)
        return rc;
    const char *argv[3] = {"AUTH", ep->sentinel_user ? ep->sentinel_user : ep->sentinel_password,
                           ep->sentinel_password};
    redisReply *r = wl_conn_command(*out, ep->sentinel_user ? 3 : 2, argv, NULL);
    rc = r == NULL ? wl_conn_error(srv, *out, "sentinel authentication failed")
         : r->type == REDIS_REPLY_ERROR
             ? wl_fail(WATCHLOCK_EAUTH, "sentinel authentication failed: %s (%s)", r->str, label)
             : WATCHLOCK_OK;
    if (r != NULL)
        freeReplyObject(r);
    if (rc != WATCHLOCK_OK) {
        wl_conn_free(*out);
        *out = NULL;
    }
    return rc;
}

int wl_sentinel_discover(wl_server *srv, int64_t connect_ms, char *host, size_t host_len, int *port)
{
    const wl_endpoint *ep = &srv->ep;
    char tried[600] = "";
    size_t used = 0;
    int worst = WATCHLOCK_ECONN;
    bool unknown = false;
    for (size_t i = 0; i < ep->n_seeds; i++) {
        wl_conn *conn;
        int rc = connect_sentinel(srv, i, connect_ms, &conn);
        if (rc == WATCHLOCK_OK) {
            const char *argv[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", ep->master_name};
            redisReply *r = wl_conn_command(conn, 3, argv, NULL);
            if (r == NULL) {
                rc = wl_conn_error(srv, conn, "SENTINEL GET-MASTER-ADDR-BY-NAME");
            } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                       r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
                long p = strtol(r->element[1]->str, NULL, 10);
                if (p > 0 && p < 65536 && r->element[0]->len < host_len) {
                    snprintf(host, host_len, "%s", r->element[0]->str);
                    *port = (int)p;
                    freeReplyObject(r);
                    wl_conn_free(conn);
                    return WATCHLOCK_OK;
                }
                rc = wl_fail(WATCHLOCK_ESERVER, "sentinel gave a bad address");
            } else if (r->type == REDIS_REPLY_NIL) {
                unknown = true;
                rc = wl_fail(WATCHLOCK_ECONN, "does not know master '%s'", ep->master_name);
            } else if (r->type == REDIS_REPLY_ERROR) {
                rc = wl_reply_error(srv, r, "SENTINEL GET-MASTER-ADDR-BY-NAME");
            } else {
                rc = wl_fail(WATCHLOCK_ESERVER, "unexpected reply to SENTINEL GET-MASTER-ADDR-BY-NAME");
            }
            if (r != NULL)
                freeReplyObject(r);
            wl_conn_free(conn);
        }
        if (rc == WATCHLOCK_EAUTH || rc == WATCHLOCK_EPERM)
            worst = rc;
        if (used < sizeof tried) {
            int n = snprintf(tried + used, sizeof tried - used, "%s%s:%d: %.120s", used ? "; " : "",
                             ep->seeds[i].host, ep->seeds[i].port, watchlock_last_error());
            used += n > 0 ? (size_t)n : 0;
        }
    }
    if (unknown && worst == WATCHLOCK_ECONN)
        return wl_fail(WATCHLOCK_ECONN, "no sentinel knows master '%s' (%s)", ep->master_name, tried);
    return wl_fail(worst, "cannot find master '%s' through the sentinels (%s)", ep->master_name, tried);
}

/* "+switch-master" payload: "<name> <old-ip> <old-port> <new-ip> <new-port>". */
static bool parse_switch(const char *msg, const char *name, char *host, size_t host_len, int *port)
{
    char mname[256], oldip[256], newip[256];
    int oldport, newport;
    if (sscanf(msg, "%255s %255s %d %255s %d", mname, oldip, &oldport, newip, &newport) != 5)
        return false;
    if (strcmp(mname, name) != 0 || strlen(newip) >= host_len || newport <= 0 || newport > 65535)
        return false;
    snprintf(host, host_len, "%s", newip);
    *port = newport;
    return true;
}

static bool stopping(wl_sentinel *s)
{
    pthread_mutex_lock(&s->mu);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Sleeps up to ms or until stopped. */
static void nap(wl_sentinel *s, int ms)
{
    struct pollfd pf = {s->efd, POLLIN, 0};
    poll(&pf, 1, ms);
}

static void *watcher_main(void *arg)
{
    wl_sentinel *s = arg;
    wl_server *srv = s->srv;
    wl_thread_start("watchlock-snt");
    size_t next = 0;
    while (!stopping(s)) {
        wl_conn *conn = NULL;
        size_t i = next++ % srv->ep.n_seeds;
        if (connect_sentinel(srv, i, srv->ep.connect_timeout_ms, &conn) != WATCHLOCK_OK) {
            nap(s, RECONNECT_DELAY_MS);
            continue;
        }
        const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
        redisReply *r = wl_conn_command(conn, 2, argv, NULL);
        bool ok = r != NULL && r->type == REDIS_REPLY_ARRAY;
        if (r != NULL)
            freeReplyObject(r);
        /* A switch may have happened while we were not listening: the
         * next connection asks again (cheap), unless it is the one we know. */
        while (ok && !stopping(s)) {
            struct pollfd pf[2] = {{wl_conn_fd(conn), POLLIN, 0}, {s->efd, POLLIN, 0}};
            int n = poll(pf, 2, -1);
            if (n < 0 || (pf[1].revents & POLLIN))
                continue;
            if (wl_conn_read_some(conn) != 0)
                break;
            redisReply *m;
            int got;
            while ((got = wl_conn_next_reply(conn, &m)) > 0) {
                char host[256];
                int port;
                if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 && m->element[2]->type == REDIS_REPLY_STRING &&
                    parse_switch(m->element[2]->str, srv->ep.master_name, host, sizeof host, &port)) {
                    wl_server_set_address(srv, host, port);
                    if (s->on_switch)
                        s->on_switch(s->arg);
                }
                freeReplyObject(m);
            }
            if (got < 0)
                break;
        }
        wl_conn_free(conn);
        if (!stopping(s))
            nap(s, RECONNECT_DELAY_MS);
    }
    return NULL;
}

int wl_sentinel_start(wl_server *srv, void (*on_switch)(void *), void *arg)
{
    if (srv->ep.kind != WL_KIND_SENTINEL || srv->sentinel != NULL)
        return WATCHLOCK_OK;
    wl_sentinel *s = calloc(1, sizeof *s);
    if (s == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    s->srv = srv;
    s->on_switch = on_switch;
    s->arg = arg;
    s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->efd < 0 || pthread_mutex_init(&s->mu, NULL) != 0) {
        if (s->efd >= 0)
            close(s->efd);
        free(s);
        return wl_fail(WATCHLOCK_EINTERNAL, "cannot start the sentinel watcher");
    }
    if (pthread_create(&s->thread, NULL, watcher_main, s) != 0) {
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return wl_fail(WATCHLOCK_EINTERNAL, "cannot start the sentinel watcher thread");
    }
    srv->sentinel = s;
    return WATCHLOCK_OK;
}

void wl_sentinel_stop(wl_server *srv)
{
    wl_sentinel *s = srv->sentinel;
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_mutex_unlock(&s->mu);
    uint64_t one = 1;
    ssize_t n = write(s->efd, &one, sizeof one);
    WL_UNUSED(n);
    pthread_join(s->thread, NULL);
    close(s->efd);
    pthread_mutex_destroy(&s->mu);
    free(s);
    srv->sentinel = NULL;
}
