/*
 * node.c - one Redis server (the node the topology points at): connect +
 * AUTH + SELECT (+ ROLE under Sentinel), a pool of idle connections shared
 * by the client's threads, error mapping, and running a script with EVALSHA
 * and the NOSCRIPT fallback. Sockets and TLS are transport.c's and tls.c's.
 * Where the node is comes from the topology: the URL's host (standalone) or
 * the sentinels (sentinel.c), asked again after a connection error or a
 * READONLY reply.
 *
 * A connection that saw any error (I/O, timeout, protocol) is never put back:
 * after a command timeout a late reply must not be matched to a later request.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_IDLE 16

int wl_server_init(wl_server *srv, const char *url)
{
    memset(srv, 0, sizeof *srv);
    int rc = wl_endpoint_parse(&srv->ep, url);
    if (rc != WATCHLOCK_OK)
        return rc;
    if ((rc = wl_tls_new(&srv->ep.tls, &srv->tls)) != WATCHLOCK_OK) {
        wl_endpoint_clear(&srv->ep);
        return rc;
    }
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        wl_tls_free(srv->tls);
        wl_endpoint_clear(&srv->ep);
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    }
    if (srv->ep.kind == WL_KIND_STANDALONE) {
        snprintf(srv->host, sizeof srv->host, "%s", srv->ep.host ? srv->ep.host : "");
        srv->port = srv->ep.port;
        srv->addr_known = true;
        snprintf(srv->label, sizeof srv->label, "%s", srv->ep.label);
    }
    if (srv->ep.kind == WL_KIND_CLUSTER && (rc = wl_cluster_new(srv, &srv->cluster)) != WATCHLOCK_OK) {
        pthread_mutex_destroy(&srv->mu);
        wl_tls_free(srv->tls);
        wl_endpoint_clear(&srv->ep);
        return rc;
    }
    return WATCHLOCK_OK;
}

int wl_server_init_node(wl_server *node, const wl_server *parent, const char *host, int port)
{
    memset(node, 0, sizeof *node);
    if (pthread_mutex_init(&node->mu, NULL) != 0)
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    node->ep = parent->ep; /* the strings stay the parent's (borrowed) */
    node->ep.kind = WL_KIND_STANDALONE;
    node->ep.host = NULL;
    node->ep.seeds = NULL;
    node->ep.n_seeds = 0;
    node->tls = parent->tls;
    node->borrowed = true;
    node->parent = (wl_server *)parent;
    snprintf(node->host, sizeof node->host, "%s", host);
    node->port = port;
    node->addr_known = true;
    snprintf(node->label, sizeof node->label, "%s:%d", host, port);
    snprintf(node->ep.label, sizeof node->ep.label, "%s:%d", host, port);
    return WATCHLOCK_OK;
}

wl_server *wl_server_route(wl_server *srv, const void *key, size_t len)
{
    if (srv->cluster == NULL)
        return srv;
    return wl_cluster_route(srv->cluster, wl_key_slot(key, len));
}

const char *wl_publish_command(const wl_server *srv)
{
    return srv->ep.kind == WL_KIND_CLUSTER ? "SPUBLISH" : "PUBLISH";
}

wl_server *wl_server_any(wl_server *srv)
{
    if (srv->cluster == NULL)
        return srv;
    wl_server *node;
    if (wl_cluster_masters(srv->cluster, &node, 1) == 1)
        return node;
    int rc = wl_cluster_refresh(srv->cluster, true);
    if (rc == WATCHLOCK_OK && wl_cluster_masters(srv->cluster, &node, 1) == 1)
        return node;
    if (rc == WATCHLOCK_OK)
        wl_fail(WATCHLOCK_ECONN, "no cluster node serves any slot (%s)", srv->ep.label);
    return NULL;
}

/* With srv->mu held: frees the idle connections. */
static void drop_idle_locked(wl_server *srv)
{
    for (int i = 0; i < srv->n_idle; i++)
        wl_conn_free(srv->idle[i]);
    srv->n_idle = 0;
}

void wl_server_close(wl_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->closed = true;
    drop_idle_locked(srv);
    pthread_mutex_unlock(&srv->mu);
    wl_cluster_close(srv->cluster);
}

uint64_t wl_server_pin(wl_server *srv)
{
    return srv->cluster != NULL ? wl_cluster_pin(srv->cluster) : 0;
}

void wl_server_unpin(wl_server *srv, uint64_t pin)
{
    if (srv->cluster != NULL)
        wl_cluster_unpin(srv->cluster, pin);
}

void wl_server_retire(wl_server *node)
{
    pthread_mutex_lock(&node->mu);
    node->retired = true;
    drop_idle_locked(node);
    wl_subscriber *sub = node->sub;
    pthread_mutex_unlock(&node->mu);
    wl_subscriber_retire(sub);
}

void wl_server_destroy(wl_server *srv)
{
    wl_server_close(srv);
    wl_cluster_free(srv->cluster);
    srv->cluster = NULL;
    wl_subscriber_free(srv->sub);
    srv->sub = NULL;
    wl_conn_free(srv->wd_conn);
    free(srv->idle);
    pthread_mutex_destroy(&srv->mu);
    if (!srv->borrowed) {
        wl_tls_free(srv->tls);
        wl_endpoint_clear(&srv->ep);
    }
}

void wl_server_label(wl_server *srv, char *out, size_t len)
{
    pthread_mutex_lock(&srv->mu);
    snprintf(out, len, "%s", srv->addr_known ? srv->label : srv->ep.label);
    pthread_mutex_unlock(&srv->mu);
}

void wl_server_set_address(wl_server *srv, const char *host, int port)
{
    pthread_mutex_lock(&srv->mu);
    if (!srv->addr_known || srv->port != port || strcmp(srv->host, host) != 0) {
        snprintf(srv->host, sizeof srv->host, "%s", host);
        srv->port = port;
        snprintf(srv->label, sizeof srv->label, "%s:%d", host, port);
        srv->addr_gen++;
        drop_idle_locked(srv);
    }
    srv->addr_known = true;
    pthread_mutex_unlock(&srv->mu);
}

bool wl_server_current(wl_server *srv, const wl_conn *conn)
{
    pthread_mutex_lock(&srv->mu);
    bool current = wl_conn_tag(conn) == srv->addr_gen;
    pthread_mutex_unlock(&srv->mu);
    return current;
}

void wl_server_suspect(wl_server *srv, uint64_t gen)
{
    if (srv->ep.kind == WL_KIND_STANDALONE)
        return;
    pthread_mutex_lock(&srv->mu);
    if (gen == srv->addr_gen && srv->addr_known) {
        /* Ask the sentinels again before the next connection. */
        srv->addr_known = false;
        srv->addr_gen++;
        drop_idle_locked(srv);
    }
    pthread_mutex_unlock(&srv->mu);
}

int wl_conn_error(const wl_server *srv, const wl_conn *conn, const char *what)
{
    WL_UNUSED(srv);
    if (conn == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "%s: out of memory", what);
    if (wl_conn_err(conn) == WL_CERR_OOM)
        return wl_fail(WATCHLOCK_ENOMEM, "%s: out of memory", what);
    const char *detail = wl_conn_errstr(conn)[0] ? wl_conn_errstr(conn) : "connection error";
    return wl_fail(WATCHLOCK_ECONN, "%s: %s (%s)", what, detail, wl_conn_label(conn));
}

int wl_reply_error(const wl_server *srv, const redisReply *reply, const char *what)
{
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return WATCHLOCK_OK;
    const char *s = reply->str ? reply->str : "";
    const char *label = srv->ep.label;
    /* Errors raised inside a script end in " script: <sha>, on
     * @user_script:N.": not for people. */
    const char *tail = strstr(s, " script: ");
    int len = tail ? (int)(tail - s) : (int)strlen(s);
    /* Inside a script, Redis 6 and 7.0 word an ACL denial as an ERR. */
    if (strncmp(s, "NOPERM", 6) == 0 || strstr(s, "The user executing the script can't") != NULL)
        return wl_fail(WATCHLOCK_EPERM, "%s: denied by the server's ACL: %.*s (%s)", what, len, s, label);
    if (strncmp(s, "NOAUTH", 6) == 0 || strncmp(s, "WRONGPASS", 9) == 0 ||
        strncasecmp(s, "ERR invalid password", 20) == 0 || strncmp(s, "ERR AUTH", 8) == 0 ||
        strstr(s, "without any password configured") != NULL)
        return wl_fail(WATCHLOCK_EAUTH, "%s: %.*s (%s)", what, len, s, label);
    if (wl_reply_is_readonly(reply))
        return wl_fail(WATCHLOCK_ECONN, "%s: the server is a read-only replica now (%s; failover?)", what, label);
    return wl_fail(WATCHLOCK_ESERVER, "%s: %.*s", what, len, s);
}

bool wl_reply_is_noscript(const redisReply *reply)
{
    return reply != NULL && reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
           strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

bool wl_reply_is_readonly(const redisReply *reply)
{
    return reply != NULL && reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
           (strncmp(reply->str, "READONLY", 8) == 0 || strncmp(reply->str, "MASTERDOWN", 10) == 0);
}

/* One command during connection setup; frees the connection on failure. */
static int setup_command(wl_server *srv, wl_conn **connp, int argc, const char **argv, const char *what,
                         redisReply **keep)
{
    redisReply *r = wl_conn_command(*connp, argc, argv, NULL);
    int rc = r == NULL ? wl_conn_error(srv, *connp, what) : wl_reply_error(srv, r, what);
    if (rc == WATCHLOCK_OK && keep != NULL)
        *keep = r;
    else if (r != NULL)
        freeReplyObject(r);
    if (rc != WATCHLOCK_OK) {
        wl_conn_free(*connp);
        *connp = NULL;
    }
    return rc;
}

/* Opens and sets up a connection to host:port (AUTH, SELECT and, when the
 * topology asks for it, ROLE = master). */
static int connect_node(wl_server *srv, const char *host, int port, const char *label, int64_t ct, int64_t cmd,
                        wl_conn **out)
{
    const wl_endpoint *ep = &srv->ep;
    wl_target t = {.host = host, .port = port, .unix_path = ep->unix_path, .keepalive = ep->keepalive != 0,
                   .tls = srv->tls, .sni = ep->tls.sni, .label = label};
    wl_conn *conn;
    int rc = wl_conn_open(&t, ct, cmd, &conn);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (ep->password) {
        const char *argv[3] = {"AUTH", ep->user ? ep->user : ep->password, ep->password};
        if ((rc = setup_command(srv, &conn, ep->user ? 3 : 2, argv, "authentication failed", NULL)) != WATCHLOCK_OK)
            return rc == WATCHLOCK_ESERVER ? wl_fail(WATCHLOCK_EAUTH, "%s", watchlock_last_error()) : rc;
    }
    if (ep->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", ep->db);
        const char *argv[2] = {"SELECT", db};
        if ((rc = setup_command(srv, &conn, 2, argv, "SELECT failed", NULL)) != WATCHLOCK_OK)
            return rc;
    }
    if (ep->kind == WL_KIND_SENTINEL) {
        const char *argv[1] = {"ROLE"};
        redisReply *r = NULL;
        if ((rc = setup_command(srv, &conn, 1, argv, "ROLE failed", &r)) != WATCHLOCK_OK)
            return rc;
        bool master = r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
                      strcmp(r->element[0]->str, "master") == 0;
        freeReplyObject(r);
        if (!master) {
            wl_conn_free(conn);
            return wl_fail(WATCHLOCK_ECONN, "%s is not a master (yet): the sentinels' view is changing", label);
        }
    }
    *out = conn;
    return WATCHLOCK_OK;
}

int wl_server_connect(wl_server *srv, int64_t timeout_cap_ms, wl_conn **out)
{
    *out = NULL;
    if (srv->cluster != NULL) { /* no key to route by: any master */
        uint64_t pin = wl_server_pin(srv);
        wl_server *node = wl_server_any(srv); /* NULL: it said why (refused, TLS, no slots) */
        int rc = node ? wl_server_connect(node, timeout_cap_ms, out) : WATCHLOCK_ECONN;
        wl_server_unpin(srv, pin);
        return rc;
    }
    const wl_endpoint *ep = &srv->ep;
    int64_t ct = ep->connect_timeout_ms, cmd = ep->command_timeout_ms;
    if (timeout_cap_ms > 0) {
        ct = ct < timeout_cap_ms ? ct : timeout_cap_ms;
        cmd = cmd < timeout_cap_ms ? cmd : timeout_cap_ms;
    }
    *out = NULL;
    int rc = WATCHLOCK_ECONN;
    /* Sentinel: a master that turned out not to be one (a failover under
     * way) is asked about once more. */
    for (int attempt = 0; attempt < 2; attempt++) {
        char host[256], label[300];
        int port;
        uint64_t gen;
        pthread_mutex_lock(&srv->mu);
        bool known = srv->addr_known;
        snprintf(host, sizeof host, "%s", srv->host);
        snprintf(label, sizeof label, "%s", srv->label);
        port = srv->port;
        gen = srv->addr_gen;
        pthread_mutex_unlock(&srv->mu);
        if (!known) {
            if ((rc = wl_sentinel_discover(srv, ct, host, sizeof host, &port)) != WATCHLOCK_OK)
                return rc;
            wl_server_set_address(srv, host, port);
            pthread_mutex_lock(&srv->mu);
            gen = srv->addr_gen;
            pthread_mutex_unlock(&srv->mu);
            snprintf(label, sizeof label, "%s:%d", host, port);
        }
        rc = connect_node(srv, ep->unix_path ? NULL : host, port, ep->unix_path ? ep->label : label, ct, cmd, out);
        if (rc == WATCHLOCK_OK) {
            wl_conn_set_tag(*out, gen);
            return rc;
        }
        if (rc != WATCHLOCK_ECONN || ep->kind == WL_KIND_STANDALONE)
            return rc;
        wl_server_suspect(srv, gen);
    }
    return rc;
}

int wl_server_get(wl_server *srv, wl_conn **out, bool *reused)
{
    if (srv->cluster != NULL) {
        *reused = false;
        return wl_server_connect(srv, 0, out);
    }
    pthread_mutex_lock(&srv->mu);
    if (srv->closed) {
        pthread_mutex_unlock(&srv->mu);
        return wl_fail(WATCHLOCK_ECLOSED, "client closed");
    }
    if (srv->n_idle > 0) {
        *out = srv->idle[--srv->n_idle];
        pthread_mutex_unlock(&srv->mu);
        *reused = true;
        return WATCHLOCK_OK;
    }
    pthread_mutex_unlock(&srv->mu);
    *reused = false;
    return wl_server_connect(srv, 0, out);
}

void wl_server_put(wl_server *srv, wl_conn *conn)
{
    if (conn == NULL)
        return;
    if (srv->cluster != NULL) { /* not routed by key (wl_server_get on the cluster): not pooled */
        wl_conn_free(conn);
        return;
    }
    if (wl_conn_err(conn) != WL_CERR_NONE)
        wl_server_suspect(srv, wl_conn_tag(conn));
    pthread_mutex_lock(&srv->mu);
    if (wl_conn_err(conn) == WL_CERR_NONE && !srv->closed && !srv->retired && srv->n_idle < MAX_IDLE &&
        wl_conn_tag(conn) == srv->addr_gen) {
        if (srv->n_idle == srv->cap_idle) {
            int cap = srv->cap_idle ? srv->cap_idle * 2 : 4;
            wl_conn **grown = realloc(srv->idle, (size_t)cap * sizeof *grown);
            if (grown != NULL) {
                srv->idle = grown;
                srv->cap_idle = cap;
            }
        }
        if (srv->n_idle < srv->cap_idle) {
            srv->idle[srv->n_idle++] = conn;
            conn = NULL;
        }
    }
    pthread_mutex_unlock(&srv->mu);
    wl_conn_free(conn);
}

int wl_append_script(wl_conn *conn, int script, bool use_body, int nkeys, int nargs, const char *const *argv,
                     const size_t *argvlen)
{
    enum { MAX_ARGS = 12 }; /* the acquire script with an owner record takes 9 */
    const char *av[3 + MAX_ARGS];
    size_t al[3 + MAX_ARGS];
    char nk[24];
    int total = nkeys + nargs;
    if (total > MAX_ARGS)
        return -1;
    wl_fmt_i64(nk, nkeys);
    use_body = use_body || !wl_scripts_have_sha();
    av[0] = use_body ? "EVAL" : "EVALSHA";
    av[1] = use_body ? wl_scripts[script].body : wl_scripts[script].sha;
    av[2] = nk;
    al[0] = strlen(av[0]);
    al[1] = strlen(av[1]);
    al[2] = strlen(nk);
    for (int i = 0; i < total; i++) {
        av[3 + i] = argv[i];
        al[3 + i] = argvlen[i];
    }
    return wl_conn_append(conn, 3 + total, av, al);
}

/* One script call on conn: EVALSHA, then EVAL when the server lost its
 * cache. *readonly: the server refused it as a replica (it did not run).
 * rd: a cluster redirect or retry-later (it did not run either). asking:
 * send ASKING first (the slot is being imported by this node). */
static int script_once(wl_server *srv, wl_conn *conn, int script, int nkeys, int nargs, const char *const *argv,
                       const size_t *argvlen, redisReply **out, const char *what, bool *readonly, wl_redirect *rd,
                       bool asking)
{
    *readonly = false;
    rd->kind = WL_REDIRECT_NONE;
    for (int use_body = 0; use_body < 2; use_body++) {
        redisReply *r = NULL;
        static const char *const asking_cmd[1] = {"ASKING"};
        if ((asking && wl_conn_append(conn, 1, asking_cmd, NULL) != 0) ||
            wl_append_script(conn, script, use_body, nkeys, nargs, argv, argvlen) != 0)
            return wl_conn_error(srv, conn, what);
        if (asking) {
            if (wl_conn_get_reply(conn, &r) != 0)
                return wl_conn_error(srv, conn, what);
            freeReplyObject(r); /* +OK */
            r = NULL;
        }
        if (wl_conn_get_reply(conn, &r) != 0)
            return wl_conn_error(srv, conn, what);
        if (!use_body && wl_reply_is_noscript(r)) {
            freeReplyObject(r);
            continue;
        }
        if (wl_parse_redirect(r, rd)) {
            if (rd->host[0] == '\0' && rd->port != 0) /* ":port": this node's host */
                snprintf(rd->host, sizeof rd->host, "%s", srv->host);
            int rc = wl_fail(WATCHLOCK_ECONN, "%s: %s (%s)", what, r->str, srv->label);
            freeReplyObject(r);
            return rc;
        }
        if (wl_reply_is_readonly(r)) {
            /* A failover demoted this server: never reuse the connection,
             * and ask the topology where the master is now. */
            *readonly = true;
            wl_conn_fail(conn, "the server became a replica");
        }
        int rc = wl_reply_error(srv, r, what);
        if (rc != WATCHLOCK_OK) {
            freeReplyObject(r);
            return rc;
        }
        *out = r;
        return WATCHLOCK_OK;
    }
    return wl_fail(WATCHLOCK_EINTERNAL, "%s: script missing after EVAL", what);
}

static _Thread_local bool script_resent;

bool wl_script_was_resent(void)
{
    return script_resent;
}

#define MAX_REDIRECTS 8
#define TRYAGAIN_PAUSE_US 20000

/* After a node could not be reached (nothing was sent): the map is asked
 * again, and the call goes on where it points now, if elsewhere. */
static wl_server *reroute_after_failure(wl_server *srv, wl_server *failed, int nkeys, const char *const *argv,
                                        const size_t *argvlen)
{
    if (srv->cluster == NULL)
        return NULL;
    wl_cluster_refresh(srv->cluster, false); /* a node went away: where are its slots now? */
    wl_server *node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
    return node != failed ? node : NULL;
}

static int run_script_pinned(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                             const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep);

int wl_run_script_keep(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                       const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep)
{
    uint64_t pin = wl_server_pin(srv); /* the nodes it routes to stay valid */
    int rc = run_script_pinned(srv, script, nkeys, nargs, argv, argvlen, out, what, keep);
    wl_server_unpin(srv, pin);
    return rc;
}

static int run_script_pinned(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                             const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep)
{
    *out = NULL;
    if (keep != NULL)
        *keep = NULL;
    script_resent = false;
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
        if (rc == WATCHLOCK_ECONN && srv->cluster != NULL) {
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
        rc = script_once(node, conn, script, nkeys, nargs, argv, argvlen, out, what, &readonly, &rd, asking);
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
        if (rd.kind != WL_REDIRECT_NONE && srv->cluster != NULL && in_time &&
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
                wl_cluster_refresh(srv->cluster, rd.kind == WL_REDIRECT_MOVED);
                node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
            } else if (rd.kind == WL_REDIRECT_MOVED) {
                wl_cluster_moved(srv->cluster, rd.slot, rd.host, rd.port);
                node = wl_cluster_node_at(srv->cluster, rd.host, rd.port);
            } else if (rd.kind == WL_REDIRECT_ASK) {
                node = wl_cluster_node_at(srv->cluster, rd.host, rd.port);
            } else { /* TRYAGAIN (a migration mid-way), CLUSTERDOWN (a failover): a moment later */
                struct timespec ts = {0, TRYAGAIN_PAUSE_US * 1000};
                nanosleep(&ts, NULL);
                if (rd.kind == WL_REDIRECT_CLUSTERDOWN)
                    wl_cluster_refresh(srv->cluster, false);
                node = nkeys > 0 ? wl_server_route(srv, argv[0], argvlen[0]) : wl_server_any(srv);
            }
            if (node == NULL)
                return wl_fail(WATCHLOCK_ECONN, "%s: %s", what, watchlock_last_error());
            continue; /* the redirected script did not run */
        }
        if (!retry || retries++ > 0)
            return rc;
        script_resent = true;
        if (srv->cluster != NULL && readonly) { /* a failed-over master: ask where the slot is now */
            wl_cluster_refresh(srv->cluster, true);
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
        if (rc == WATCHLOCK_ECONN && srv->cluster != NULL) { /* as wl_run_script_keep: where are its slots now? */
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
    return wl_run_script_keep(srv, script, nkeys, nargs, argv, argvlen, out, what, NULL);
}
