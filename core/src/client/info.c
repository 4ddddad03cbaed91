/*
 * info.c - admin: what a name is used as (watchlock_client_name_info): its
 * kind, permits, holders, readers / writer and queue, in one round trip of
 * the queue's info script (proto/qscripts.c), whatever the kind.
 */
#include "client/client.h"

#include <stdlib.h>
#include <string.h>

#define RW_CAP INT64_C(1099511627776) /* locks/kinds.c: the read-write lock's capacity */

struct watchlock_name_info {
    int kind;
    int64_t permits, in_use, holders, queue, oldest_ms, fence, remaining_ms;
    int writer;
};

int watchlock_client_name_info(watchlock_name_info **out, watchlock_client *c, const void *name, size_t name_len)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    wl_keys keys;
    int rc = wl_admin_keys(c, name, name_len, &keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_qkeys q;
    if ((rc = wl_qkeys_make(&q, &keys, "0000000000000000")) != WATCHLOCK_OK) {
        wl_keys_clear(&keys);
        return rc;
    }
    char quoted[96], what[160];
    wl_quote_name(quoted, sizeof quoted, name, name_len);
    wl_what(what, sizeof what, "inspect", quoted);
    redisReply *r = NULL;
    rc = wl_run_script(&c->server, WL_SCRIPT_Q_INFO, WL_QKEY_COUNT, 0, q.k, q.len, &r, what);
    wl_qkeys_clear(&q);
    wl_keys_clear(&keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_name_info *info = calloc(1, sizeof *info);
    if (info == NULL) {
        freeReplyObject(r);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 9 || r->element[0]->str == NULL ||
        r->element[1]->str == NULL) {
        freeReplyObject(r);
        free(info);
        return wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
    }
    const char *ty = r->element[0]->str, *kind = r->element[1]->str;
    int64_t v[7];
    for (int i = 0; i < 7; i++)
        v[i] = wl_reply_i64(r->element[2 + i]);
    /* v: cap, used, holders, queue, oldest, fence, remaining */
    info->fence = v[5];
    if (strcmp(ty, "string") == 0) {
        info->kind = WATCHLOCK_KIND_PLAIN;
        info->permits = 1;
        info->in_use = info->holders = 1;
        info->remaining_ms = v[6];
    } else if (strcmp(ty, "hash") == 0) {
        info->kind = strcmp(kind, "fair") == 0  ? WATCHLOCK_KIND_FAIR
                     : strcmp(kind, "sem") == 0 ? WATCHLOCK_KIND_SEMAPHORE
                                                : WATCHLOCK_KIND_RWLOCK;
        info->permits = info->kind == WATCHLOCK_KIND_RWLOCK ? 0 : v[0];
        info->holders = v[2];
        info->queue = v[3];
        info->oldest_ms = v[4];
        info->remaining_ms = v[6];
        if (info->kind == WATCHLOCK_KIND_RWLOCK) {
            info->writer = v[1] >= RW_CAP;
            info->in_use = info->writer ? 0 : v[1];
        } else {
            info->in_use = v[1];
        }
    } else {
        info->kind = WATCHLOCK_KIND_NONE;
    }
    freeReplyObject(r);
    *out = info;
    return WATCHLOCK_OK;
}

int watchlock_name_info_kind(const watchlock_name_info *i) { return i ? i->kind : WATCHLOCK_KIND_NONE; }
int64_t watchlock_name_info_permits(const watchlock_name_info *i) { return i ? i->permits : 0; }
int64_t watchlock_name_info_in_use(const watchlock_name_info *i) { return i ? i->in_use : 0; }
int64_t watchlock_name_info_holders(const watchlock_name_info *i) { return i ? i->holders : 0; }
int watchlock_name_info_writer(const watchlock_name_info *i) { return i ? i->writer : 0; }
int64_t watchlock_name_info_queue_length(const watchlock_name_info *i) { return i ? i->queue : 0; }
int64_t watchlock_name_info_oldest_wait_ms(const watchlock_name_info *i) { return i ? i->oldest_ms : 0; }
int64_t watchlock_name_info_fence(const watchlock_name_info *i) { return i ? i->fence : 0; }
int64_t watchlock_name_info_remaining_ms(const watchlock_name_info *i) { return i ? i->remaining_ms : 0; }
void watchlock_name_info_free(watchlock_name_info *i) { free(i); }
