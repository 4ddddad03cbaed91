/*
 * info.c - admin: what a name is used as (watchlock_client_name_info): its
 * kind, permits, holders, readers / writer and queue, in one round trip of
 * the queue's info script (proto/qscripts.c), whatever the kind; and the
 * first WATCHLOCK_INFO_MAX_HOLDERS holders with their owner records.
 */
#include "client/client.h"

#include <stdlib.h>
#include <string.h>

#define RW_CAP INT64_C(1099511627776) /* locks/kinds.c: the read-write lock's capacity */

/* An owner record as the queued kinds store it: "<host>\n<pid>\n<label>"
 * (locks/waiter.c writes it, proto/qscripts.c keeps it per hold). NULL for
 * "" or a malformed record (no owner), and when out of memory (*oom set). */
watchlock_owner *wl_owner_parse(const char *rec, size_t len, bool *oom)
{
    const char *nl1 = len ? memchr(rec, '\n', len) : NULL;
    const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', len - (size_t)(nl1 + 1 - rec)) : NULL;
    if (nl2 == NULL)
        return NULL;
    char pid[24];
    size_t pid_len = (size_t)(nl2 - nl1 - 1);
    if (pid_len == 0 || pid_len >= sizeof pid)
        return NULL;
    memcpy(pid, nl1 + 1, pid_len);
    pid[pid_len] = '\0';
    redisReply host = {.type = REDIS_REPLY_STRING, .str = (char *)rec, .len = (size_t)(nl1 - rec)};
    redisReply label = {.type = REDIS_REPLY_STRING, .str = (char *)nl2 + 1, .len = len - (size_t)(nl2 + 1 - rec)};
    redisReply p = {.type = REDIS_REPLY_STRING, .str = pid, .len = pid_len};
    watchlock_owner *o = wl_owner_new(&host, &p, &label);
    if (o == NULL)
        *oom = true;
    return o;
}

typedef struct holder {
    int64_t remaining_ms, permits;
    watchlock_owner *owner; /* NULL: none recorded */
} holder;

struct watchlock_name_info {
    int kind;
    int64_t permits, in_use, holders, queue, oldest_ms, fence, remaining_ms;
    int writer;
    size_t n_listed; /* at most WATCHLOCK_INFO_MAX_HOLDERS (the script's bound) */
    holder *listed;
};

/* The holders the info script listed (its 10th element), with their owner
 * records. Returns false when out of memory. */
static bool take_holders(watchlock_name_info *info, const redisReply *hl)
{
    if (hl == NULL || hl->type != REDIS_REPLY_ARRAY || hl->elements == 0)
        return true;
    size_t n = hl->elements < WATCHLOCK_INFO_MAX_HOLDERS ? hl->elements : WATCHLOCK_INFO_MAX_HOLDERS;
    if ((info->listed = calloc(n, sizeof *info->listed)) == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = hl->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
            continue;
        holder *h = &info->listed[info->n_listed++];
        h->remaining_ms = wl_reply_i64(e->element[0]);
        h->permits = wl_reply_i64(e->element[1]);
        bool oom = false;
        if (e->element[2]->type == REDIS_REPLY_STRING)
            h->owner = wl_owner_parse(e->element[2]->str, e->element[2]->len, &oom);
        if (oom)
            return false;
    }
    return true;
}

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
    const char *argv[WL_QKEY_COUNT + 1];
    size_t lens[WL_QKEY_COUNT + 1];
    for (int i = 0; i < WL_QKEY_COUNT; i++)
        argv[i] = q.k[i], lens[i] = q.len[i];
    argv[WL_QKEY_COUNT] = q.hold_prefix;
    lens[WL_QKEY_COUNT] = q.hold_prefix_len;
    rc = wl_run_script(&c->server, WL_SCRIPT_Q_INFO, WL_QKEY_COUNT, 1, argv, lens, &r, what);
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
        if (!take_holders(info, r->elements >= 10 ? r->element[9] : NULL)) {
            freeReplyObject(r);
            watchlock_name_info_free(info);
            return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
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

size_t watchlock_name_info_holder_count(const watchlock_name_info *i) { return i ? i->n_listed : 0; }

static const holder *holder_at(const watchlock_name_info *i, size_t n)
{
    return i != NULL && n < i->n_listed ? &i->listed[n] : NULL;
}

const watchlock_owner *watchlock_name_info_holder_owner(const watchlock_name_info *i, size_t n)
{
    const holder *h = holder_at(i, n);
    return h ? h->owner : NULL;
}

int64_t watchlock_name_info_holder_permits(const watchlock_name_info *i, size_t n)
{
    const holder *h = holder_at(i, n);
    return h == NULL ? 0 : h->permits >= RW_CAP ? 1 : h->permits;
}

int watchlock_name_info_holder_writer(const watchlock_name_info *i, size_t n)
{
    const holder *h = holder_at(i, n);
    return h != NULL && i->kind == WATCHLOCK_KIND_RWLOCK && h->permits >= RW_CAP;
}

int64_t watchlock_name_info_holder_remaining_ms(const watchlock_name_info *i, size_t n)
{
    const holder *h = holder_at(i, n);
    return h ? h->remaining_ms : 0;
}

void watchlock_name_info_free(watchlock_name_info *i)
{
    if (i == NULL)
        return;
    for (size_t n = 0; n < i->n_listed; n++)
        watchlock_owner_free(i->listed[n].owner);
    free(i->listed);
    free(i);
}
