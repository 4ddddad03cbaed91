/*
 * replies.c - what the lock scripts' replies mean (scripts.c documents the
 * shapes). Pure functions of a hiredis reply: no I/O, no locks, no detail
 * message, so that tests/fuzz/fuzz_reply.c can feed them every reply the
 * RESP reader produces from arbitrary bytes. A reply of an unexpected shape
 * is reported as such, never read past its end.
 */
#include "proto/proto.h"

#include <stdlib.h>
#include <string.h>

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

int64_t wl_reply_i64(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

bool wl_reply_acquire(const redisReply *r, bool *acquired, int64_t *value)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return false;
    *acquired = wl_reply_i64(r->element[0]) == 1;
    *value = wl_reply_i64(r->element[1]);
    return true;
}

int wl_reply_renew(const redisReply *r, size_t n, size_t i)
{
    /* An unexpected reply (an error for the whole script, such as OOM, or a
     * value the script never returns) says nothing about ownership: the
     * caller retries until the hold's deadline. */
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != n || i >= n)
        return WL_WRITE_FAILED;
    const redisReply *one = r->element[i];
    if (one->type != REDIS_REPLY_INTEGER)
        return WL_WRITE_FAILED;
    switch (one->integer) {
    case WL_WRITE_OK: return WL_WRITE_OK;
    case WL_WRITE_STALE: return WL_WRITE_STALE;
    case WL_WRITE_NOT_OWNER: return WL_WRITE_NOT_OWNER;
    default: return WL_WRITE_FAILED;
    }
}

/* A decimal number of digits only (no sign, no space), at most max; -1 otherwise. */
static long parse_decimal(const char *p, size_t len, long max)
{
    if (len == 0 || len > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v <= max ? v : -1;
}

/* "MOVED <slot> <endpoint>:<port>" and "ASK ..." as Redis writes them
 * (cluster.c, clusterRedirectClient): the endpoint is the node's preferred
 * endpoint (cluster-preferred-endpoint-type): an IP (IPv6 without
 * brackets, so the port follows the last ':'), a hostname, "" for
 * unknown-endpoint (use the node that sent the redirect, with this port)
 * or "?" for a node told to prefer its hostname that has none (no address
 * at all: port 0 tells the caller to ask the slot map). Anything else,
 * bad slots and ports included, is not a redirect. */
bool wl_parse_redirect(const redisReply *r, wl_redirect *rd)
{
    memset(rd, 0, sizeof *rd);
    if (r == NULL || r->type != REDIS_REPLY_ERROR || r->str == NULL)
        return false;
    const char *s = r->str;
    size_t len = strnlen(s, r->len);
    if (len >= 8 && strncmp(s, "TRYAGAIN", 8) == 0) {
        rd->kind = WL_REDIRECT_TRYAGAIN;
        return true;
    }
    if (len >= 11 && strncmp(s, "CLUSTERDOWN", 11) == 0) {
        rd->kind = WL_REDIRECT_CLUSTERDOWN;
        return true;
    }
    bool moved = len >= 6 && strncmp(s, "MOVED ", 6) == 0, ask = len >= 4 && strncmp(s, "ASK ", 4) == 0;
    if (!moved && !ask)
        return false;
    const char *p = s + (moved ? 6 : 4), *end = s + len;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    if (sp == NULL)
        return false;
    long slot = parse_decimal(p, (size_t)(sp - p), WL_CLUSTER_SLOTS - 1);
    const char *host = sp + 1;
    const char *colon = NULL;
    for (const char *q = host; q < end; q++)
        if (*q == ':')
            colon = q;
    if (slot < 0 || colon == NULL)
        return false;
    long port = parse_decimal(colon + 1, (size_t)(end - colon - 1), 65535);
    size_t host_len = (size_t)(colon - host);
    if (port < 1)
        return false;
    if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') { /* [IPv6]:port */
        host++;
        host_len -= 2;
        if (host_len == 0)
            return false;
    }
    for (size_t i = 0; i < host_len; i++)
        if ((unsigned char)host[i] <= ' ' || host[i] == '[' || host[i] == ']' || host[i] == 0x7f)
            return false;
    if (host_len >= sizeof rd->host)
        return false;
    rd->kind = moved ? WL_REDIRECT_MOVED : WL_REDIRECT_ASK;
    rd->slot = (int)slot;
    if (host_len == 1 && host[0] == '?') {
        rd->port = 0; /* unknown endpoint: where the slot map says */
        return true;
    }
    memcpy(rd->host, host, host_len); /* "" = the node that answered; the caller fills it in */
    rd->host[host_len] = '\0';
    rd->port = (int)port;
    return true;
}
