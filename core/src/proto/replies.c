/*
 * replies.c - what the lock scripts' replies mean (scripts.c documents the
 * shapes). Pure functions of a hiredis reply: no I/O, no locks, no detail
 * message, so that tests/fuzz/fuzz_reply.c can feed them every reply the
 * RESP reader produces from arbitrary bytes. A reply of an unexpected shape
 * is reported as such, never read past its end.
 */
#include "internal.h"

#include <stdlib.h>

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
