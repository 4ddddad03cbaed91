/*
 * fuzz_reply.c - libFuzzer harness for the code that reads Redis replies.
 * Arbitrary bytes go into hiredis's RESP reader (redisReaderCreate, Feed,
 * GetReply), in two pieces split where the first byte says, so that
 * replies cut across reads are exercised too. Every reply it produces, and
 * every element of it down to a few levels, is passed to the library's
 * readers: wl_reply_error (status for an error reply), wl_reply_is_noscript,
 * wl_parse_redirect (MOVED/ASK/TRYAGAIN/CLUSTERDOWN: ranges, no "?" host,
 * the same answer when written back as Redis writes it),
 * wl_reply_i64, wl_reply_acquire (acquire script) and wl_reply_renew (renew
 * script, for several hold counts and every index). Checks that their
 * answers stay in their documented ranges.
 *
 * Input format: the first byte picks where the rest is cut in two
 * (1 + byte % size); the rest is RESP.
 */
#include "node/node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A MOVED/ASK redirect: slot and port in range, a host that is a usable
 * name or "" (the sender's), never "?" (port 0 says "unknown endpoint"),
 * and the same answer when written back the way Redis writes it. */
static void check_redirect(const redisReply *r, const wl_redirect *rd)
{
    if (rd->slot < 0 || rd->slot >= WL_CLUSTER_SLOTS || rd->port < 0 || rd->port > 65535)
        abort();
    size_t len = strnlen(rd->host, sizeof rd->host);
    if (len == sizeof rd->host || (rd->port == 0 && len != 0) || strcmp(rd->host, "?") == 0)
        abort();
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)rd->host[i] <= ' ' || rd->host[i] == '[' || rd->host[i] == ']' || rd->host[i] == 0x7f)
            abort();
    char again[400];
    snprintf(again, sizeof again, "%s %d %s:%d", rd->kind == WL_REDIRECT_MOVED ? "MOVED" : "ASK", rd->slot,
             rd->port == 0 ? "?" : rd->host, rd->port == 0 ? 1 : rd->port);
    redisReply copy = *r;
    copy.str = again;
    copy.len = strlen(again);
    wl_redirect back;
    if (!wl_parse_redirect(&copy, &back) || back.kind != rd->kind || back.slot != rd->slot ||
        back.port != rd->port || strcmp(back.host, rd->host) != 0)
        abort();
}

static void interpret(const wl_server *srv, const redisReply *r, int depth)
{
    int rc = wl_reply_error(srv, r, "fuzz");
    if (r->type == REDIS_REPLY_ERROR) {
        /* READONLY / MASTERDOWN: not the master now, a connection matter */
        if (rc != WATCHLOCK_EPERM && rc != WATCHLOCK_EAUTH && rc != WATCHLOCK_ESERVER &&
            !(rc == WATCHLOCK_ECONN && wl_reply_is_readonly(r)))
            abort();
    } else if (rc != WATCHLOCK_OK) {
        abort();
    }
    if (wl_reply_is_noscript(r) && r->type != REDIS_REPLY_ERROR)
        abort();
    wl_redirect rd;
    if (wl_parse_redirect(r, &rd)) {
        if (r->type != REDIS_REPLY_ERROR || rd.kind == WL_REDIRECT_NONE)
            abort();
        if (rd.kind == WL_REDIRECT_MOVED || rd.kind == WL_REDIRECT_ASK)
            check_redirect(r, &rd);
    }
    (void)wl_reply_i64(r);

    bool acquired = false;
    int64_t value = 0;
    if (wl_reply_acquire(r, &acquired, &value) && (r->type != REDIS_REPLY_ARRAY || r->elements != 2))
        abort();

    size_t counts[4] = {0, 1, 2, r->type == REDIS_REPLY_ARRAY ? r->elements : 3};
    for (size_t c = 0; c < 4; c++) {
        for (size_t i = 0; i <= counts[c] && i < 300; i++) {
            int w = wl_reply_renew(r, counts[c], i);
            if (w != WL_WRITE_OK && w != WL_WRITE_NOT_OWNER && w != WL_WRITE_STALE && w != WL_WRITE_FAILED)
                abort();
            if (i >= counts[c] && w != WL_WRITE_FAILED)
                abort();
        }
    }
    if (r->type == REDIS_REPLY_ARRAY && depth < 4)
        for (size_t i = 0; i < r->elements && i < 300; i++)
            interpret(srv, r->element[i], depth + 1);
}

/* hiredis 0.14 allocates a multi-bulk reply's element array as soon as it
 * reads the header, from the declared count: "*1000000000" asks for 8 GB
 * and freeing the half-built reply walks a billion slots. A bug of hiredis
 * (1.x bounds the count with maxelements), not of watchlock, and harmless
 * from a server we trust: inputs that declare more than 1 << 16 elements
 * are skipped so that the fuzzer looks for bugs elsewhere. */
static bool declares_huge_array(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*')
            continue;
        size_t n = 0, j = i + 1;
        for (; j < size && data[j] >= '0' && data[j] <= '9' && n <= (1u << 16); j++)
            n = n * 10 + (size_t)(data[j] - '0');
        if (n > (1u << 16))
            return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static wl_server srv; /* wl_reply_error reads only the label */
    snprintf(srv.ep.label, sizeof srv.ep.label, "fuzz:6379");
    if (size == 0 || declares_huge_array(data, size))
        return 0;
    size_t split = 1 + (size_t)data[0] % size; /* 1 .. size */
    redisReader *reader = redisReaderCreate();
    if (reader == NULL)
        return 0;
    const char *bytes = (const char *)data + 1;
    size_t len = size - 1;
    if (split > len)
        split = len;
    int ok = redisReaderFeed(reader, bytes, split) == REDIS_OK;
    for (int round = 0; ok && round < 2; round++) {
        for (int n = 0; n < 64; n++) {
            void *reply = NULL;
            if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
                ok = 0;
                break;
            }
            if (reply == NULL)
                break; /* needs more bytes */
            interpret(&srv, reply, 0);
            freeReplyObject(reply);
        }
        if (ok && round == 0)
            ok = redisReaderFeed(reader, bytes + split, len - split) == REDIS_OK;
    }
    redisReaderFree(reader);
    return 0;
}
