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
#include "node/node.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_IDLE 16

int wl_node_init(wl_server *srv, const char *url)
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

/* With srv->mu held: frees the idle connections. */
static void drop_idle_locked(wl_server *srv)
{
    for (int i = 0; i < srv->n_idle; i++)
        wl_conn_free(srv->idle[i]);
    srv->n_idle = 0;
}

void wl_node_close(wl_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->closed = true;
    drop_idle_locked(srv);
    pthread_mutex_unlock(&srv->mu);
}

wl_subscriber *wl_node_retire(wl_server *node)
{
    pthread_mutex_lock(&node->mu);
    node->retired = true;
    drop_idle_locked(node);
    wl_subscriber *sub = node->sub;
    pthread_mutex_unlock(&node->mu);
    return sub;
}

void wl_node_destroy(wl_server *srv)
{
    wl_node_close(srv);
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
    if (srv->hooks != NULL && srv->hooks->connect != NULL) /* the topology finds the node (cluster: any master) */
        return srv->hooks->connect(srv, timeout_cap_ms, out);
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
            if (srv->hooks == NULL || srv->hooks->discover == NULL)
                return wl_fail(WATCHLOCK_EINTERNAL, "%s: no address and no topology to ask", srv->ep.label);
            if ((rc = srv->hooks->discover(srv, ct, host, sizeof host, &port)) != WATCHLOCK_OK)
                return rc;
            wl_server_set_address(srv, host, port);
            pthread_mutex_lock(&srv->mu);
            gen = srv->addr_gen;
            pthread_mutex_unlock(&srv->mu);
            snprintf(label, sizeof label, "%s:%d", host, port);
        }
        rc = connect_node(srv, ep->unix_path ? NULL : host, port, ep->unix_path ? ep->label : label, ct, cmd, out);
        if (rc == WATCHLOCK_OK && srv->check != NULL) {
            const wl_conn_check *k = srv->check;
            for (int i = 0; rc == WATCHLOCK_OK && i < k->ncmd; i++)
                if (wl_conn_append(*out, k->argc[i], k->argv[i], NULL) != 0)
                    rc = wl_fail(WATCHLOCK_ENOMEM, "%s: out of memory", label);
            if (rc != WATCHLOCK_OK) {
                wl_conn_free(*out);
                *out = NULL;
                return rc;
            }
            wl_conn_expect(*out, k->ncmd, k->fn, k->arg);
        }
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
    if (srv->hooks != NULL && srv->hooks->connect != NULL) { /* not one node: not pooled */
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
    if (srv->hooks != NULL && srv->hooks->connect != NULL) { /* not one node (wl_server_get on a cluster) */
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

void wl_script_head(int script, bool use_body, int64_t nkeys, char nk[24], const char **argv, size_t *lens)
{
    wl_fmt_i64(nk, nkeys);
    use_body = use_body || !wl_scripts_have_sha();
    argv[0] = use_body ? "EVAL" : "EVALSHA";
    argv[1] = use_body ? wl_scripts[script].body : wl_scripts[script].sha;
    argv[2] = nk;
    lens[0] = strlen(argv[0]);
    lens[1] = strlen(argv[1]);
    lens[2] = strlen(nk);
}

int wl_append_script(wl_conn *conn, int script, bool use_body, int nkeys, int nargs, const char *const *argv,
                     const size_t *argvlen)
{
    enum { MAX_ARGS = 24 }; /* on the stack; the queue's acquire script (locks/waiter.c) takes 18 */
    const char *av_s[3 + MAX_ARGS];
    size_t al_s[3 + MAX_ARGS];
    const char **av = av_s;
    size_t *al = al_s;
    char nk[24];
    int total = nkeys + nargs;
    if (total > MAX_ARGS) { /* a batch (hold/live_round.c: the waiters' liveness) */
        av = malloc((3 + (size_t)total) * sizeof *av);
        al = malloc((3 + (size_t)total) * sizeof *al);
        if (av == NULL || al == NULL) {
            free(av);
            free(al);
            return -1;
        }
    }
    wl_script_head(script, use_body, nkeys, nk, av, al);
    for (int i = 0; i < total; i++) {
        av[3 + i] = argv[i];
        al[3 + i] = argvlen[i];
    }
    int rc = wl_conn_append(conn, 3 + total, av, al);
    if (av != av_s) {
        free(av);
        free(al);
    }
    return rc;
}

int wl_node_script_once(wl_server *srv, wl_conn *conn, int script, int nkeys, int nargs, const char *const *argv,
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

void wl_scripts_learn(wl_conn *conn)
{
    if (wl_scripts_have_sha())
        return;
    for (int i = 0; i < WL_SCRIPT_COUNT; i++) {
        const char *argv[3] = {"SCRIPT", "LOAD", wl_scripts[i].body};
        if (wl_conn_append(conn, 3, argv, NULL) != 0)
            return; /* out of memory: the connection is marked failed */
    }
    char shas[WL_SCRIPT_COUNT][41];
    bool ok = true;
    for (int i = 0; i < WL_SCRIPT_COUNT; i++) {
        redisReply *r = NULL;
        if (wl_conn_get_reply(conn, &r) != 0)
            return; /* the connection is broken: the caller drops it */
        if (r->type == REDIS_REPLY_STRING && r->len == 40 && strspn(r->str, "0123456789abcdef") == 40)
            memcpy(shas[i], r->str, 41);
        else
            ok = false; /* e.g. NOPERM: keep sending EVAL */
        freeReplyObject(r);
    }
    if (!ok)
        return;
    wl_scripts_set_shas((const char(*)[41])shas);
}

int wl_node_ping(wl_server *srv)
{
    wl_conn *ctx;
    bool reused;
    int rc = wl_server_get(srv, &ctx, &reused);
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *ping[1] = {"PING"};
    redisReply *r = wl_conn_command(ctx, 1, ping, NULL);
    rc = r == NULL ? wl_conn_error(srv, ctx, "PING failed") : wl_reply_error(srv, r, "PING failed");
    if (r != NULL)
        freeReplyObject(r);
    if (rc == WATCHLOCK_OK)
        wl_scripts_learn(ctx);
    wl_server_put(srv, ctx);
    return rc;
}

void wl_wait_args(const wl_server *srv, int64_t timeout_ms, char n[16], char ms[24], const char *argv[3])
{
    snprintf(n, 16, "%d", srv->ep.min_replicas);
    snprintf(ms, 24, "%" PRId64, timeout_ms);
    argv[0] = "WAIT";
    argv[1] = n;
    argv[2] = ms;
}

int wl_node_wait_replicas(wl_server *srv, wl_conn *conn, const char *what, long long *acked)
{
    const wl_endpoint *ep = &srv->ep;
    char n[16], ms[24];
    const char *argv[3];
    wl_wait_args(srv, ep->min_replicas_timeout_ms, n, ms, argv);
    *acked = 0;
    int64_t saved = wl_conn_timeout(conn);
    wl_conn_set_timeout(conn, ep->min_replicas_timeout_ms + saved); /* the server waits first */
    redisReply *r = wl_conn_command(conn, 3, argv, NULL);
    wl_conn_set_timeout(conn, saved);
    if (r == NULL)
        return wl_conn_error(srv, conn, what);
    int rc = wl_reply_error(srv, r, what);
    if (rc == WATCHLOCK_OK && r->type == REDIS_REPLY_INTEGER)
        *acked = r->integer;
    freeReplyObject(r);
    return rc;
}
