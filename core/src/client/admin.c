/*
 * admin.c - who holds a lock, and which locks are held: the owner record
 * (watchlock_client_inspect_owner) and listing (watchlock_client_list).
 *
 * The owner record is a hash watchlock:{E}:owner {token, host, pid, label}
 * written by the acquire script of a handle with an owner label (lock.c,
 * scripts.c). It counts only while its token is the "<token>." prefix of
 * the lock key's value "<token>.<epoch>": a record an earlier hold left
 * behind (the next holder set no label) names another token and is never
 * shown. The comparison runs inside one read-only script per name
 * (WL_SCRIPT_INSPECT_OWNER), so the owner and the hold it is checked
 * against are read at one instant.
 *
 * Listing SCANs for lock keys (never KEYS: it would block the server) and
 * pipelines that script for every key of a SCAN page: one round trip per
 * page, each script on one name's keys (one Cluster slot). Names are
 * patterns on *names*, not keys: the escaping of keys.c ('%' -> %25,
 * '{' -> %7B, '}' -> %7D) turns one name byte into three key bytes, so a
 * name glob cannot be handed to MATCH as it is. MATCH gets a superset (the
 * literal bytes escaped, every '?' and [class] widened to '*'), and each
 * key's decoded name is then matched against the user's glob here, with
 * Redis's own glob rules.
 */
#include "client/client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_COUNT "1000"

struct watchlock_owner {
    const char *host;
    size_t host_len;
    int64_t pid;
    const char *label;
    size_t label_len;
    char bytes[]; /* host NUL label NUL */
};

typedef struct list_entry {
    char *name;
    size_t name_len;
    int64_t remaining_ms;
    int64_t fence;
    watchlock_owner *owner;
    int kind; /* WATCHLOCK_KIND_PLAIN / FAIR / SEMAPHORE / RWLOCK */
} list_entry;

struct watchlock_lock_list {
    list_entry *items;
    size_t n, cap;
};

/* ---- owner records ---- */

watchlock_owner *wl_owner_new(const redisReply *host, const redisReply *pid, const redisReply *label)
{
    watchlock_owner *o = malloc(sizeof *o + host->len + 1 + label->len + 1);
    if (o == NULL)
        return NULL;
    char *p = o->bytes;
    memcpy(p, host->str, host->len);
    p[host->len] = '\0';
    o->host = p;
    o->host_len = host->len;
    p += host->len + 1;
    memcpy(p, label->str, label->len);
    p[label->len] = '\0';
    o->label = p;
    o->label_len = label->len;
    o->pid = wl_reply_i64(pid);
    return o;
}

/* What the inspect-owner script says about one name. */
typedef struct inspected {
    int state; /* 0 no key, 1 held (a string value), 2 a key of another type */
    int64_t remaining_ms;
    int64_t fence;
    watchlock_owner *owner; /* NULL: none recorded for the current hold */
    const redisReply *name; /* a digested name's stored name (borrowed from the reply), or NULL */
} inspected;

static int parse_inspected(const redisReply *r, inspected *out, const char *what)
{
    memset(out, 0, sizeof *out);
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != 3 && r->elements != 6 && r->elements != 7))
        return wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
    if (r->elements == 7) { /* with a digested name's name key: owner fields may be nil */
        if (r->element[6]->type == REDIS_REPLY_STRING)
            out->name = r->element[6];
        if (r->element[3]->type != REDIS_REPLY_STRING) {
            out->state = (int)wl_reply_i64(r->element[0]);
            int64_t ttl = wl_reply_i64(r->element[1]);
            out->remaining_ms = out->state == 0 ? 0 : ttl < 0 ? -1 : ttl;
            out->fence = wl_reply_i64(r->element[2]);
            return WATCHLOCK_OK;
        }
    }
    out->state = (int)wl_reply_i64(r->element[0]);
    int64_t pttl = wl_reply_i64(r->element[1]);
    out->remaining_ms = out->state == 0 ? 0 : pttl < 0 ? -1 : pttl;
    out->fence = wl_reply_i64(r->element[2]);
    if (r->elements >= 6) {
        for (size_t i = 3; i < 6; i++)
            if (r->element[i]->type != REDIS_REPLY_STRING)
                return wl_fail(WATCHLOCK_ESERVER, "%s: unexpected owner record from server", what);
        out->owner = wl_owner_new(r->element[3], r->element[4], r->element[5]);
        if (out->owner == NULL)
            return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    return WATCHLOCK_OK;
}

/* The public calls are quorum_client.c's (a quorum answers with its verdict). */
int wl_client_inspect_owner_one(watchlock_owner **out, int *held, int64_t *remaining_ms, int64_t *fence,
                                watchlock_client *c, const void *name, size_t name_len)
{
    return wl_client_inspect_owner_at(out, held, remaining_ms, fence, c, c != NULL ? &c->server : NULL, name,
                                      name_len); /* a NULL client: wl_admin_keys says so */
}

int wl_client_inspect_owner_at(watchlock_owner **out, int *held, int64_t *remaining_ms, int64_t *fence,
                               watchlock_client *c, wl_server *s, const void *name, size_t name_len)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    wl_keys keys;
    int rc = wl_admin_keys(c, name, name_len, &keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *argv[3] = {keys.lock, keys.fence, keys.owner};
    size_t lens[3] = {keys.lock_len, keys.fence_len, keys.owner_len};
    redisReply *r;
    rc = wl_run_script(s, WL_SCRIPT_INSPECT_OWNER, 3, 0, argv, lens, &r, "inspect failed");
    wl_keys_clear(&keys);
    if (rc != WATCHLOCK_OK)
        return rc;
    inspected got;
    rc = parse_inspected(r, &got, "inspect");
    freeReplyObject(r);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (held)
        *held = got.state != 0;
    if (remaining_ms)
        *remaining_ms = got.remaining_ms;
    if (fence)
        *fence = got.fence;
    *out = got.owner;
    return WATCHLOCK_OK;
}

const char *watchlock_owner_host(const watchlock_owner *o, size_t *len)
{
    if (len)
        *len = o ? o->host_len : 0;
    return o ? o->host : "";
}

int64_t watchlock_owner_pid(const watchlock_owner *o)
{
    return o ? o->pid : 0;
}

const char *watchlock_owner_label(const watchlock_owner *o, size_t *len)
{
    if (len)
        *len = o ? o->label_len : 0;
    return o ? o->label : "";
}

void watchlock_owner_free(watchlock_owner *o)
{
    free(o);
}

/* ---- listing ---- */

static int list_add(watchlock_lock_list *list, const char *name, size_t name_len, const inspected *got)
{
    void *items = list->items;
    int grown = wl_grow(&items, &list->cap, list->n, sizeof *list->items, 16);
    list->items = items;
    if (grown != 0)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    char *copy = malloc(name_len + 1);
    if (copy == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    memcpy(copy, name, name_len);
    copy[name_len] = '\0';
    int kind = got->state == 3   ? WATCHLOCK_KIND_FAIR
               : got->state == 4 ? WATCHLOCK_KIND_SEMAPHORE
               : got->state == 5 ? WATCHLOCK_KIND_RWLOCK
                                 : WATCHLOCK_KIND_PLAIN;
    list->items[list->n++] = (list_entry){copy, name_len, got->remaining_ms, got->fence, got->owner, kind};
    return WATCHLOCK_OK;
}

static int entry_cmp(const void *a, const void *b)
{
    const list_entry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int d = memcmp(x->name, y->name, n);
    if (d != 0)
        return d;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

/* The keys of one SCAN page that are lock keys of matching names. */
typedef struct page_key {
    const char *key; /* in the SCAN reply */
    size_t key_len;
    char *name;
    size_t name_len;
    char *fence, *owner; /* the name's other keys: key + ":fence" / ":owner" */
    char *name_key;      /* a digested name's key + ":name"; NULL for names read from the key */
} page_key;

static void page_keys_free(page_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(keys[i].name);
        free(keys[i].fence);
        free(keys[i].owner);
        free(keys[i].name_key);
    }
    free(keys);
}

static char *with_suffix(const char *key, size_t len, const char *suffix)
{
    size_t sl = strlen(suffix);
    char *s = malloc(len + sl + 1);
    if (s != NULL) {
        memcpy(s, key, len);
        memcpy(s + len, suffix, sl + 1);
    }
    return s;
}

/* A digested (long) name's entry: its name as stored by the acquire (the
 * key cannot be read backwards), matched against the pattern here since
 * SCAN could not. A name key that is gone (it has the fence's TTL, and a
 * hold can outlast it) leaves the name unknown: such an entry is listed,
 * under the key's tag "%H<hex>", only when listing everything. */
static bool digest_entry_name(const page_key *k, const inspected *got, const unsigned char *pat, size_t pat_len,
                              const char **name, size_t *name_len)
{
    if (got->name != NULL) {
        *name = got->name->str;
        *name_len = got->name->len;
    } else {
        *name = k->key + 11; /* the tag: after "watchlock:{", before '}' */
        *name_len = k->key_len - 12;
        if (pat_len > 0)
            return false;
    }
    bool give_up = false;
    return pat_len == 0 || wl_glob_match(pat, pat_len, (const unsigned char *)*name, *name_len, &give_up);
}

/* Runs the inspect-owner script for every key of the page, pipelined
 * (EVALSHA; those that meet NOSCRIPT again with EVAL), and adds the held
 * ones to the list. */
static int inspect_page(wl_server *srv, wl_conn *ctx, page_key *keys, size_t n, watchlock_lock_list *list,
                        const unsigned char *pat, size_t pat_len)
{
    bool *again = calloc(n ? n : 1, sizeof *again);
    if (again == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    int rc = WATCHLOCK_OK;
    for (int use_body = 0; use_body < 2 && rc == WATCHLOCK_OK; use_body++) {
        size_t sent = 0;
        for (size_t i = 0; i < n; i++) {
            if (use_body && !again[i])
                continue;
            const char *argv[4] = {keys[i].key, keys[i].fence, keys[i].owner, keys[i].name_key};
            size_t lens[4] = {keys[i].key_len, keys[i].key_len + 6, keys[i].key_len + 6, keys[i].key_len + 5};
            int nkeys = keys[i].name_key != NULL ? 4 : 3;
            if (wl_append_script(ctx, WL_SCRIPT_INSPECT_OWNER, use_body, nkeys, 0, argv, lens) != 0) {
                free(again);
                return wl_conn_error(srv, ctx, "list");
            }
            sent++;
        }
        bool retry = false;
        for (size_t i = 0; i < n && sent > 0; i++) {
            if (use_body && !again[i])
                continue;
            redisReply *r = NULL;
            if (wl_conn_get_reply(ctx, &r) != 0) {
                free(again);
                return wl_conn_error(srv, ctx, "list");
            }
            sent--;
            again[i] = false;
            if (!use_body && wl_reply_is_noscript(r)) {
                again[i] = retry = true;
            } else if (rc == WATCHLOCK_OK && (rc = wl_reply_error(srv, r, "list")) == WATCHLOCK_OK) {
                inspected got;
                rc = parse_inspected(r, &got, "list");
                const char *name = keys[i].name;
                size_t name_len = keys[i].name_len;
                bool wanted = keys[i].name_key == NULL ||
                              (rc == WATCHLOCK_OK && digest_entry_name(&keys[i], &got, pat, pat_len, &name, &name_len));
                if (rc == WATCHLOCK_OK && (got.state == 1 || got.state >= 3) && wanted) {
                    rc = list_add(list, name, name_len, &got);
                    if (rc != WATCHLOCK_OK)
                        watchlock_owner_free(got.owner);
                } else {
                    watchlock_owner_free(got.owner);
                }
            }
            freeReplyObject(r); /* read every reply, also after an error */
        }
        if (!retry)
            break;
    }
    free(again);
    return rc;
}

/* One SCAN page from `cursor`: the next cursor into next (decimal), the
 * page's matching lock keys inspected into the list. */
static int scan_page(wl_server *srv, wl_conn *ctx, const char *cursor, char next[32], const char *kglob,
                     size_t kglob_len, const unsigned char *pat, size_t pat_len, watchlock_lock_list *list)
{
    const char *argv[6] = {"SCAN", cursor, "MATCH", kglob, "COUNT", SCAN_COUNT};
    size_t lens[6] = {4, strlen(cursor), 5, kglob_len, 5, strlen(SCAN_COUNT)};
    redisReply *r = wl_conn_command(ctx, 6, argv, lens);
    if (r == NULL)
        return wl_conn_error(srv, ctx, "list: SCAN failed");
    int rc = wl_reply_error(srv, r, "list: SCAN failed");
    if (rc != WATCHLOCK_OK) {
        freeReplyObject(r);
        return rc;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= 32 || r->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return wl_fail(WATCHLOCK_ESERVER, "list: unexpected reply to SCAN");
    }
    memcpy(next, r->element[0]->str, r->element[0]->len + 1);
    const redisReply *found = r->element[1];
    page_key *keys = calloc(found->elements ? found->elements : 1, sizeof *keys);
    if (keys == NULL) {
        freeReplyObject(r);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < found->elements && rc == WATCHLOCK_OK; i++) {
        const redisReply *k = found->element[i];
        if (k->type != REDIS_REPLY_STRING)
            continue;
        page_key *pk = &keys[n];
        if ((pk->name = malloc(k->len + 1)) == NULL) {
            rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
            break;
        }
        bool give_up = false;
        bool digest = wl_lock_key_is_digest(k->str, k->len); /* its name is matched once read */
        if (!digest && (wl_name_from_lock_key(k->str, k->len, pk->name, &pk->name_len) != 0 ||
                        (pat_len > 0 &&
                         !wl_glob_match(pat, pat_len, (const unsigned char *)pk->name, pk->name_len, &give_up)))) {
            free(pk->name);
            pk->name = NULL;
            continue;
        }
        pk->key = k->str;
        pk->key_len = k->len;
        pk->fence = with_suffix(k->str, k->len, ":fence");
        pk->owner = with_suffix(k->str, k->len, ":owner");
        pk->name_key = digest ? with_suffix(k->str, k->len, ":name") : NULL;
        n++;
        if (pk->fence == NULL || pk->owner == NULL || (digest && pk->name_key == NULL))
            rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    if (rc == WATCHLOCK_OK && n > 0)
        rc = inspect_page(srv, ctx, keys, n, list, pat, pat_len);
    page_keys_free(keys, n);
    freeReplyObject(r);
    return rc;
}

/* Every lock key of one node: SCAN from 0 to the end. */
static int scan_node(wl_server *node, const char *kglob, size_t kglob_len, const unsigned char *pat,
                     size_t pattern_len, watchlock_lock_list *list)
{
    char cursor[32] = "0";
    int rc = WATCHLOCK_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        wl_conn *ctx;
        bool reused;
        if ((rc = wl_server_get(node, &ctx, &reused)) != WATCHLOCK_OK)
            break;
        bool first = true;
        do {
            char next[32];
            rc = scan_page(node, ctx, cursor, next, kglob, kglob_len, pat, pattern_len, list);
            if (rc != WATCHLOCK_OK)
                break;
            memcpy(cursor, next, sizeof cursor);
            first = false;
        } while (strcmp(cursor, "0") != 0);
        /* A pooled connection the server dropped while idle fails at once
         * with EOF/reset: start again on a fresh one (SCAN only reads). */
        bool stale = rc == WATCHLOCK_ECONN && reused && first &&
                     (wl_conn_err(ctx) == WL_CERR_EOF || wl_conn_err(ctx) == WL_CERR_RESET);
        wl_server_put(node, ctx);
        if (!stale)
            break;
    }
    return rc;
}

int wl_client_list_one(watchlock_lock_list **out, watchlock_client *c, const void *pattern, size_t pattern_len)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (pattern == NULL)
        pattern_len = 0;
    if (pattern_len > WATCHLOCK_MAX_NAME)
        return wl_fail(WATCHLOCK_EINVAL, "list: pattern is %zu bytes, more than the limit of %d", pattern_len,
                       WATCHLOCK_MAX_NAME);
    const unsigned char *pat = pattern;
    size_t kglob_len = 0;
    char *kglob = pattern_len > 0 ? wl_key_glob(pat, pattern_len, &kglob_len) : NULL;
    if (pattern_len == 0) {
        static const char all[] = "watchlock:{*}";
        kglob = malloc(sizeof all);
        if (kglob != NULL)
            memcpy(kglob, all, sizeof all);
        kglob_len = sizeof all - 1;
    }
    watchlock_lock_list *list = calloc(1, sizeof *list);
    if (kglob == NULL || list == NULL) {
        free(kglob);
        free(list);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }

    /* With a pattern, a second pass finds the digested (long) names, whose
     * keys the pattern's key glob cannot match (keys.c). Under Cluster:
     * every master, from a fresh slot map. */
    static const char digests[] = "watchlock:{%H*}";
    wl_server *nodes[256];
    size_t n_nodes;
    uint64_t pin = wl_server_pin(&c->server); /* the masters listed stay valid */
    rc = wl_server_masters(&c->server, nodes, 256, &n_nodes);
    for (int pass = 0; pass < (pattern_len > 0 ? 2 : 1) && rc == WATCHLOCK_OK; pass++) {
        const char *glob = pass == 0 ? kglob : digests;
        size_t glob_len = pass == 0 ? kglob_len : sizeof digests - 1;
        for (size_t i = 0; i < n_nodes && rc == WATCHLOCK_OK; i++)
            rc = scan_node(nodes[i], glob, glob_len, pat, pattern_len, list);
    }
    wl_server_unpin(&c->server, pin);
    free(kglob);
    if (rc != WATCHLOCK_OK) {
        watchlock_lock_list_free(list);
        return rc;
    }
    /* SCAN may return a key twice (while the keyspace is rehashed). */
    if (list->n > 1)
        qsort(list->items, list->n, sizeof *list->items, entry_cmp);
    size_t k = 0;
    for (size_t i = 0; i < list->n; i++) {
        if (k > 0 && entry_cmp(&list->items[k - 1], &list->items[i]) == 0) {
            free(list->items[i].name);
            watchlock_owner_free(list->items[i].owner);
            continue;
        }
        list->items[k++] = list->items[i];
    }
    list->n = k;
    *out = list;
    return WATCHLOCK_OK;
}

/* A quorum's list (quorum_client.c): the names held on at least `need`
 * of the member lists; remaining_ms the need-th longest (how long that
 * many still hold it), fence the highest; no owner. */
typedef struct merged_ref {
    const list_entry *e;
} merged_ref;

static int merged_cmp(const void *a, const void *b)
{
    return entry_cmp(((const merged_ref *)a)->e, ((const merged_ref *)b)->e);
}

static int rem_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a < 0 ? INT64_MAX : *(const int64_t *)a;
    int64_t y = *(const int64_t *)b < 0 ? INT64_MAX : *(const int64_t *)b;
    return x > y ? -1 : x < y;
}

int wl_lock_list_majority(watchlock_lock_list **out, watchlock_lock_list *const *lists, size_t n, size_t need)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += lists[i] ? lists[i]->n : 0;
    merged_ref *all = malloc((total ? total : 1) * sizeof *all);
    int64_t *rems = malloc((n ? n : 1) * sizeof *rems);
    watchlock_lock_list *list = calloc(1, sizeof *list);
    int rc = all && rems && list ? WATCHLOCK_OK : wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; rc == WATCHLOCK_OK && i < n; i++)
        for (size_t j = 0; lists[i] && j < lists[i]->n; j++)
            all[k++].e = &lists[i]->items[j];
    if (rc == WATCHLOCK_OK)
        qsort(all, k, sizeof *all, merged_cmp);
    for (size_t i = 0; rc == WATCHLOCK_OK && i < k;) {
        size_t j = i, m = 0;
        int64_t fence = 0;
        while (j < k && entry_cmp(all[i].e, all[j].e) == 0) {
            if (m < n)
                rems[m++] = all[j].e->remaining_ms;
            fence = all[j].e->fence > fence ? all[j].e->fence : fence;
            j++;
        }
        if (m >= need && need > 0) {
            qsort(rems, m, sizeof *rems, rem_desc);
            inspected got = {.remaining_ms = rems[need - 1], .fence = fence, .owner = NULL};
            rc = list_add(list, all[i].e->name, all[i].e->name_len, &got);
        }
        i = j;
    }
    free(all);
    free(rems);
    if (rc != WATCHLOCK_OK) {
        watchlock_lock_list_free(list);
        return rc;
    }
    *out = list;
    return WATCHLOCK_OK;
}

size_t watchlock_lock_list_count(const watchlock_lock_list *list)
{
    return list ? list->n : 0;
}

static const list_entry *entry_at(const watchlock_lock_list *list, size_t i)
{
    return list && i < list->n ? &list->items[i] : NULL;
}

const char *watchlock_lock_list_name(const watchlock_lock_list *list, size_t i, size_t *len)
{
    const list_entry *e = entry_at(list, i);
    if (len)
        *len = e ? e->name_len : 0;
    return e ? e->name : NULL;
}

int64_t watchlock_lock_list_remaining_ms(const watchlock_lock_list *list, size_t i)
{
    const list_entry *e = entry_at(list, i);
    return e ? e->remaining_ms : 0;
}

int64_t watchlock_lock_list_fence(const watchlock_lock_list *list, size_t i)
{
    const list_entry *e = entry_at(list, i);
    return e ? e->fence : 0;
}

int watchlock_lock_list_kind(const watchlock_lock_list *list, size_t i)
{
    const list_entry *e = entry_at(list, i);
    return e ? e->kind : WATCHLOCK_KIND_NONE;
}

const watchlock_owner *watchlock_lock_list_owner(const watchlock_lock_list *list, size_t i)
{
    const list_entry *e = entry_at(list, i);
    return e ? e->owner : NULL;
}

void watchlock_lock_list_free(watchlock_lock_list *list)
{
    if (list == NULL)
        return;
    for (size_t i = 0; i < list->n; i++) {
        free(list->items[i].name);
        watchlock_owner_free(list->items[i].owner);
    }
    free(list->items);
    free(list);
}
