/*
 * conn.c - connections to one Redis server: connect + AUTH + SELECT, a pool
 * of idle connections shared by the client's threads, error mapping, and
 * running a script with EVALSHA and the NOSCRIPT fallback.
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
#include <sys/time.h>

#define MAX_IDLE 16

static struct timeval ms_to_tv(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

int wl_server_init(wl_server *srv, const char *url)
{
    memset(srv, 0, sizeof *srv);
    int rc = wl_endpoint_parse(&srv->ep, url);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        wl_endpoint_clear(&srv->ep);
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    }
    return WATCHLOCK_OK;
}

void wl_server_close(wl_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->closed = true;
    for (int i = 0; i < srv->n_idle; i++)
        redisFree(srv->idle[i]);
    srv->n_idle = 0;
    pthread_mutex_unlock(&srv->mu);
}

void wl_server_destroy(wl_server *srv)
{
    wl_server_close(srv);
    free(srv->idle);
    pthread_mutex_destroy(&srv->mu);
    wl_endpoint_clear(&srv->ep);
}

int wl_conn_error(const wl_server *srv, const redisContext *ctx, const char *what)
{
    if (ctx == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "%s: out of memory", what);
    const char *detail = ctx->errstr[0] ? ctx->errstr : "connection error";
    if (ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT))
        detail = "timed out";
    if (ctx->err == REDIS_ERR_EOF)
        detail = "connection closed by server";
    if (ctx->err == REDIS_ERR_OOM)
        return wl_fail(WATCHLOCK_ENOMEM, "%s: out of memory", what);
    return wl_fail(WATCHLOCK_ECONN, "%s: %s (%s)", what, detail, srv->ep.label);
}

int wl_reply_error(const wl_server *srv, const redisReply *reply, const char *what)
{
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return WATCHLOCK_OK;
    const char *s = reply->str ? reply->str : "";
    /* Errors raised inside a script end in " script: <sha>, on
     * @user_script:N.": not for people. */
    const char *tail = strstr(s, " script: ");
    int len = tail ? (int)(tail - s) : (int)strlen(s);
    /* Inside a script, Redis 6 and 7.0 word an ACL denial as an ERR. */
    if (strncmp(s, "NOPERM", 6) == 0 || strstr(s, "The user executing the script can't") != NULL)
        return wl_fail(WATCHLOCK_EPERM, "%s: denied by the server's ACL: %.*s (%s)", what, len, s, srv->ep.label);
    if (strncmp(s, "NOAUTH", 6) == 0 || strncmp(s, "WRONGPASS", 9) == 0 ||
        strncasecmp(s, "ERR invalid password", 20) == 0 || strncmp(s, "ERR AUTH", 8) == 0 ||
        strstr(s, "without any password configured") != NULL)
        return wl_fail(WATCHLOCK_EAUTH, "%s: %.*s (%s)", what, len, s, srv->ep.label);
    return wl_fail(WATCHLOCK_ESERVER, "%s: %.*s", what, len, s);
}

bool wl_reply_is_noscript(const redisReply *reply)
{
    return reply != NULL && reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
           strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* One command during connection setup; frees ctx on failure. */
static int setup_command(wl_server *srv, redisContext **ctxp, int argc, const char **argv, const char *what)
{
    redisReply *r = redisCommandArgv(*ctxp, argc, argv, NULL);
    int rc = r == NULL ? wl_conn_error(srv, *ctxp, what) : wl_reply_error(srv, r, what);
    if (r != NULL)
        freeReplyObject(r);
    if (rc != WATCHLOCK_OK) {
        redisFree(*ctxp);
        *ctxp = NULL;
    }
    return rc;
}

int wl_server_connect(wl_server *srv, int64_t timeout_cap_ms, redisContext **out)
{
    const wl_endpoint *ep = &srv->ep;
    int64_t ct = ep->connect_timeout_ms, cmd = ep->command_timeout_ms;
    if (timeout_cap_ms > 0) {
        ct = ct < timeout_cap_ms ? ct : timeout_cap_ms;
        cmd = cmd < timeout_cap_ms ? cmd : timeout_cap_ms;
    }
    *out = NULL;
    redisContext *ctx = ep->unix_path ? redisConnectUnixWithTimeout(ep->unix_path, ms_to_tv(ct))
                                      : redisConnectWithTimeout(ep->host, ep->port, ms_to_tv(ct));
    if (ctx == NULL || ctx->err) {
        int rc;
        if (ctx == NULL)
            rc = wl_fail(WATCHLOCK_ENOMEM, "connect: out of memory");
        else if (ctx->err == REDIS_ERR_IO && (errno == EINPROGRESS || errno == ETIMEDOUT || errno == EAGAIN))
            rc = wl_fail(WATCHLOCK_ECONN, "cannot connect to %s: connect timed out", ep->label);
        else
            rc = wl_fail(WATCHLOCK_ECONN, "cannot connect to %s: %s", ep->label, ctx->errstr);
        redisFree(ctx);
        return rc;
    }
    /* hiredis 0.14 opens sockets without close-on-exec: keep them out of
     * programs the application execs. */
    int fdflags = fcntl(ctx->fd, F_GETFD);
    if (fdflags >= 0)
        fcntl(ctx->fd, F_SETFD, fdflags | FD_CLOEXEC);
    if (!ep->unix_path && ep->keepalive)
        redisEnableKeepAlive(ctx);
    redisSetTimeout(ctx, ms_to_tv(cmd));
    int rc;
    if (ep->password) {
        const char *argv[3] = {"AUTH", ep->user ? ep->user : ep->password, ep->password};
        if ((rc = setup_command(srv, &ctx, ep->user ? 3 : 2, argv, "authentication failed")) != WATCHLOCK_OK)
            return rc == WATCHLOCK_ESERVER ? wl_fail(WATCHLOCK_EAUTH, "%s", watchlock_last_error()) : rc;
    }
    if (ep->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", ep->db);
        const char *argv[2] = {"SELECT", db};
        if ((rc = setup_command(srv, &ctx, 2, argv, "SELECT failed")) != WATCHLOCK_OK)
            return rc;
    }
    *out = ctx;
    return WATCHLOCK_OK;
}

int wl_server_get(wl_server *srv, redisContext **out, bool *reused)
{
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

void wl_server_put(wl_server *srv, redisContext *ctx)
{
    if (ctx == NULL)
        return;
    pthread_mutex_lock(&srv->mu);
    if (ctx->err == 0 && !srv->closed && srv->n_idle < MAX_IDLE) {
        if (srv->n_idle == srv->cap_idle) {
            int cap = srv->cap_idle ? srv->cap_idle * 2 : 4;
            redisContext **grown = realloc(srv->idle, (size_t)cap * sizeof *grown);
            if (grown != NULL) {
                srv->idle = grown;
                srv->cap_idle = cap;
            }
        }
        if (srv->n_idle < srv->cap_idle) {
            srv->idle[srv->n_idle++] = ctx;
            ctx = NULL;
        }
    }
    pthread_mutex_unlock(&srv->mu);
    if (ctx != NULL)
        redisFree(ctx);
}

int wl_append_script(redisContext *ctx, int script, bool use_body, int nkeys, int nargs, const char *const *argv,
                     const size_t *argvlen)
{
    enum { MAX_ARGS = 12 }; /* the acquire script with an owner record takes 9 */
    const char *av[3 + MAX_ARGS];
    size_t al[3 + MAX_ARGS];
    char nk[8];
    int total = nkeys + nargs;
    if (total > MAX_ARGS)
        return REDIS_ERR;
    snprintf(nk, sizeof nk, "%d", nkeys);
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
    return redisAppendCommandArgv(ctx, 3 + total, av, al);
}

/* One script call on ctx: EVALSHA, then EVAL when the server lost its cache. */
static int script_once(wl_server *srv, redisContext *ctx, int script, int nkeys, int nargs, const char *const *argv,
                       const size_t *argvlen, redisReply **out, const char *what)
{
    for (int use_body = 0; use_body < 2; use_body++) {
        void *reply = NULL;
        if (wl_append_script(ctx, script, use_body, nkeys, nargs, argv, argvlen) != REDIS_OK ||
            redisGetReply(ctx, &reply) != REDIS_OK)
            return wl_conn_error(srv, ctx, what);
        redisReply *r = reply;
        if (!use_body && wl_reply_is_noscript(r)) {
            freeReplyObject(r);
            continue;
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

int wl_run_script(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv, const size_t *argvlen,
                  redisReply **out, const char *what)
{
    *out = NULL;
    script_resent = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        script_resent = attempt > 0;
        redisContext *ctx;
        bool reused;
        int rc = wl_server_get(srv, &ctx, &reused);
        if (rc != WATCHLOCK_OK)
            return rc;
        rc = script_once(srv, ctx, script, nkeys, nargs, argv, argvlen, out, what);
        /* A pooled connection the server dropped while idle (restart, CLIENT
         * KILL, idle timeout) fails at once with EOF/reset: the command never
         * ran, so one retry on a fresh connection is safe. Timeouts are not
         * retried. */
        bool stale = rc == WATCHLOCK_ECONN && reused &&
                     (ctx->err == REDIS_ERR_EOF ||
                      (ctx->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE)));
        wl_server_put(srv, ctx);
        if (rc == WATCHLOCK_ESERVER && nkeys > 0) { /* name the key the server objected to */
            char msg[400];
            snprintf(msg, sizeof msg, "%s", watchlock_last_error());
            return wl_fail(rc, "%s (key %.*s)", msg, (int)(argvlen[0] < 200 ? argvlen[0] : 200), argv[0]);
        }
        if (!stale)
            return rc;
    }
    return WATCHLOCK_ECONN;
}
