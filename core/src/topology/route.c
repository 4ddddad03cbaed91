/*
 * route.c - calls on the node that serves a key, whatever the topology:
 * routing (the server itself, or the cluster node of the key's slot), the
 * pin that keeps routed nodes alive, and scripts and pipelines that follow
 * MOVED/ASK/TRYAGAIN and reroute after an unreachable node. One call on one
 * connection is node.c's (wl_node_script_once).
 */
#include "topology/topology.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

wl_server *wl_server_route(wl_server *srv, const void *key, size_t len)
{
    return srv->topo != NULL ? srv->topo->route(srv, key, len) : srv;
}

wl_server *wl_server_route_slot(wl_server *srv, int slot)
{
    return srv->topo != NULL ? srv->topo->route_slot(srv, slot) : srv;
}

const char *wl_publish_command(const wl_server *srv)
{
    return srv->topo != NULL ? srv->topo->publish : "PUBLISH";
}

bool wl_server_sharded(const wl_server *srv)
{
    return srv->topo != NULL && srv->topo->sharded;
}

wl_server *wl_server_any(wl_server *srv)
{
    return srv->topo != NULL ? srv->topo->any(srv) : srv;
}

wl_server *wl_server_node_at(wl_server *srv, const char *host, int port)
{
    return srv->topo != NULL ? srv->topo->node_at(srv, host, port) : srv;
}

int wl_server_masters(wl_server *srv, wl_server **out, size_t max, size_t *n)
{
    if (srv->topo != NULL)
        return srv->topo->masters(srv, out, max, n);
    out[0] = srv;
    *n = 1;
    return WATCHLOCK_OK;
}

wl_server *wl_server_node(wl_server *srv, size_t i)
{
    return srv->topo != NULL ? srv->topo->node(srv, i) : NULL;
}

uint64_t wl_server_pin(wl_server *srv)
{
    return srv->topo != NULL ? srv->topo->pin(srv) : 0;
}

void wl_server_unpin(wl_server *srv, uint64_t pin)
{
    if (srv->topo != NULL)
        srv->topo->unpin(srv, pin);
}

void wl_server_moved(wl_server *srv, int slot, const char *host, int port)
{
    if (srv->topo != NULL)
        srv->topo->moved(srv, slot, host, port);
}

int wl_server_refresh(wl_server *srv, bool force)
{
    return srv->topo != NULL ? srv->topo->refresh(srv, force) : WATCHLOCK_OK;
}

wl_subscriber *wl_server_subscriber(wl_server *srv, const char *channel, size_t len, bool closed, wl_subscriber *own)
{
    return srv->topo != NULL ? srv->topo->subscriber(srv, channel, len, closed, own) : own;
}

int64_t wl_server_retired_denied(wl_server *srv)
{
    return srv->topo != NULL ? srv->topo->retired_denied(srv) : 0;
}

#define MAX_REDIRECTS 8
#define TRYAGAIN_PAUSE_US 20000

/* After a node could not be reached (nothing was sent): the map is asked
 * again, and the call goes on where it points now, if elsewhere. */
static wl_server *reroute_after_failure(wl_server *srv, wl_server *failed, int nkeys, const char *const *argv,
                                        const size_t *argvlen)
{
    if (!wl_server_sharded(srv))
        return NULL;
    wl_server_refresh(srv, false); /* a node went away: where are its slots now? */
    wl_server *node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
    return node != failed ? node : NULL;
}

static int run_script_pinned(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                             const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep,
                             bool *resent);

int wl_run_script_keep(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                       const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep, bool *resent)
{
    uint64_t pin = wl_server_pin(srv); /* the nodes it routes to stay valid */
    int rc = run_script_pinned(srv, script, nkeys, nargs, argv, argvlen, out, what, keep, resent);
    wl_server_unpin(srv, pin);
    return rc;
}

static int run_script_pinned(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                             const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep,
                             bool *resent)
{
    *out = NULL;
    if (keep != NULL)
        *keep = NULL;
    if (resent != NULL)
        *resent = false;
    /* Under Cluster: the node of the first key's slot, then wherever
     * MOVED/ASK point, within the command timeout. */
    wl_server *node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
    if (node == NULL)
        return wl_fail(WATCHLOCK_ECONN, "%s: %s", what, watchlock_last_error());
    int64_t deadline = wl_deadline_after_ms(srv->ep.command_timeout_ms);
    bool asking = false;
    int retries = 0, redirects = 0, reroutes = 0;
    for (;;) {
        wl_conn *conn;
        bool reused;
        int rc = wl_server_get(node, &conn, &reused);
        if (rc == WATCHLOCK_ECONN && wl_server_sharded(srv)) {
            /* Not reached, nothing sent: a node that left the cluster (a
             * replaced pod) is asked about once, then the slot's owner now. */
            char msg[400];
            snprintf(msg, sizeof msg, "%s", watchlock_last_error());
            wl_server *next = reroute_after_failure(srv, node, nkeys, argv, argvlen);
            if (next != NULL && reroutes++ < MAX_REDIRECTS && (deadline < 0 || wl_now_us() < deadline)) {
                node = next;
                asking = false;
                continue;
            }
            return wl_fail(rc, "%s", msg);
        }
        if (rc != WATCHLOCK_OK)
            return rc;
        bool readonly;
        wl_redirect rd;
        rc = wl_node_script_once(node, conn, script, nkeys, nargs, argv, argvlen, out, what, &readonly, &rd, asking);
        /* A pooled connection the server dropped while idle (restart, CLIENT
         * KILL, idle timeout) fails at once with EOF/reset: the command never
         * ran, so one retry on a fresh connection is safe. So is a script a
         * demoted master refused (READONLY), or one a cluster node redirected
         * (MOVED, ASK) or asked to try again (TRYAGAIN, CLUSTERDOWN).
         * Timeouts are not retried. */
        int err = wl_conn_err(conn);
        bool retry = readonly || (rc == WATCHLOCK_ECONN && reused && (err == WL_CERR_EOF || err == WL_CERR_RESET));
        if (rc == WATCHLOCK_OK && keep != NULL)
            *keep = conn;
        else
            wl_server_put(node, conn);
        if (rc == WATCHLOCK_ESERVER && nkeys > 0) { /* name the key the server objected to */
            char msg[400];
            snprintf(msg, sizeof msg, "%s", watchlock_last_error());
            return wl_fail(rc, "%s (key %.*s)", msg, (int)(argvlen[0] < 200 ? argvlen[0] : 200), argv[0]);
        }
        bool in_time = deadline < 0 || wl_now_us() < deadline;
        /* MOVED at most MAX_REDIRECTS times (a map in flux); ASK and
         * TRYAGAIN go back and forth while a slot migrates: until the
         * deadline. */
        if (rd.kind != WL_REDIRECT_NONE && wl_server_sharded(srv) && in_time &&
            (rd.kind != WL_REDIRECT_MOVED || redirects++ < MAX_REDIRECTS)) {
            asking = rd.kind == WL_REDIRECT_ASK && rd.port != 0;
            if (rd.port == 0 && (rd.kind == WL_REDIRECT_MOVED || rd.kind == WL_REDIRECT_ASK)) {
                /* "?": a node without a usable address: ask the map (MOVED:
                 * at once, at most MAX_REDIRECTS times; ASK, which repeats
                 * until the deadline: 20 ms later, rate-limited), go where
                 * it points */
                if (rd.kind == WL_REDIRECT_ASK) {
                    struct timespec ts = {0, TRYAGAIN_PAUSE_US * 1000};
                    nanosleep(&ts, NULL);
                }
                wl_server_refresh(srv, rd.kind == WL_REDIRECT_MOVED);
                node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
            } else if (rd.kind == WL_REDIRECT_MOVED) {
                wl_server_moved(srv, rd.slot, rd.host, rd.port);
                node = wl_server_node_at(srv, rd.host, rd.port);
            } else if (rd.kind == WL_REDIRECT_ASK) {
                node = wl_server_node_at(srv, rd.host, rd.port);
            } else { /* TRYAGAIN (a migration mid-way), CLUSTERDOWN (a failover): a moment later */
                struct timespec ts = {0, TRYAGAIN_PAUSE_US * 1000};
                nanosleep(&ts, NULL);
                if (rd.kind == WL_REDIRECT_CLUSTERDOWN)
                    wl_server_refresh(srv, false);
                node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
            }
            if (node == NULL)
                return wl_fail(WATCHLOCK_ECONN, "%s: %s", what, watchlock_last_error());
            continue; /* the redirected script did not run */
        }
        if (!retry || retries++ > 0)
            return rc;
        if (resent != NULL)
            *resent = true;
        if (wl_server_sharded(srv) && readonly) { /* a failed-over master: ask where the slot is now */
            wl_server_refresh(srv, true);
            node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
            if (node == NULL)
                return wl_fail(WATCHLOCK_ECONN, "%s: %s", what, watchlock_last_error());
        }
    }
}

/* Plain commands, pipelined: every command is written, then every reply
 * read, one round trip on one pooled connection of the node that serves
 * the first command's key (the server itself unless it is a cluster). A
 * pooled connection the server dropped while idle fails at once
 * (EOF/reset, nothing ran): one retry on a fresh one, as for scripts. A
 * READONLY reply (a failover demoted the server) drops the connection and
 * puts the address in doubt. Redirects (MOVED, ASK, TRYAGAIN) are not
 * followed: under Cluster each command of the pipeline may have run or
 * been redirected on its own, so the replies, redirects included, are the
 * caller's to judge (and to repeat with a script, which follows them). */
static int run_pipeline_pinned(wl_server *srv, int ncmds, const wl_cmd *cmds, redisReply **replies,
                               const char *what, wl_conn **keep);

int wl_run_pipeline(wl_server *srv, int ncmds, const wl_cmd *cmds, redisReply **replies, const char *what,
                    wl_conn **keep)
{
    uint64_t pin = wl_server_pin(srv);
    int rc = run_pipeline_pinned(srv, ncmds, cmds, replies, what, keep);
    wl_server_unpin(srv, pin);
    return rc;
}

static int run_pipeline_pinned(wl_server *srv, int ncmds, const wl_cmd *cmds, redisReply **replies,
                               const char *what, wl_conn **keep)
{
    if (keep != NULL)
        *keep = NULL;
    for (int i = 0; i < ncmds; i++)
        replies[i] = NULL;
    const wl_cmd *k = cmds[0].argc > 1 || ncmds == 1 ? &cmds[0] : &cmds[1]; /* MULTI: route by the next */
    wl_server *node = wl_server_route(srv, k->argv[1], k->lens ? k->lens[1] : strlen(k->argv[1]));
    if (node == NULL)
        return wl_fail(WATCHLOCK_ECONN, "%s: %s", what, watchlock_last_error());
    int reroutes = 0;
    for (int attempt = 0;; attempt++) {
        wl_conn *conn;
        bool reused;
        int rc = wl_server_get(node, &conn, &reused);
        if (rc == WATCHLOCK_ECONN && wl_server_sharded(srv)) { /* as wl_run_script_keep: where are its slots now? */
            const char *key = k->argv[1];
            size_t key_len = k->lens ? k->lens[1] : strlen(key);
            char msg[400];
            snprintf(msg, sizeof msg, "%s", watchlock_last_error());
            wl_server *next = reroute_after_failure(srv, node, 1, &key, &key_len);
            if (next != NULL && reroutes++ < MAX_REDIRECTS) {
                node = next;
                attempt--;
                continue;
            }
            return wl_fail(rc, "%s", msg);
        }
        if (rc != WATCHLOCK_OK)
            return rc;
        int i = 0;
        while (i < ncmds && wl_conn_append(conn, cmds[i].argc, cmds[i].argv, cmds[i].lens) == 0)
            i++;
        int got = 0;
        if (i == ncmds)
            while (got < ncmds && wl_conn_get_reply(conn, &replies[got]) == 0)
                got++;
        if (got == ncmds) {
            for (i = 0; i < ncmds; i++)
                if (wl_reply_is_readonly(replies[i]))
                    wl_conn_fail(conn, "the server became a replica");
            if (keep != NULL && wl_conn_err(conn) == WL_CERR_NONE)
                *keep = conn;
            else
                wl_server_put(node, conn);
            return WATCHLOCK_OK;
        }
        for (i = 0; i < got; i++) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
        rc = wl_conn_error(node, conn, what);
        int err = wl_conn_err(conn);
        wl_server_put(node, conn);
        if (attempt > 0 || !reused || (err != WL_CERR_EOF && err != WL_CERR_RESET))
            return rc;
    }
}

int wl_run_script(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv, const size_t *argvlen,
                  redisReply **out, const char *what)
{
    return wl_run_script_keep(srv, script, nkeys, nargs, argv, argvlen, out, what, NULL, NULL);
}
