/*
 * multi.c - the multi-lock: several names held all or nothing, with one
 * lease (issue 23; docs/design.md "Multi-lock").
 *
 * The handle is a watchlock_lock whose own hold is the *group*: what the
 * user sees (state, on-lost callback, lost event, hold count, deadline =
 * the earliest of its names'). It is never renewed and never in the
 * client's heaps. Each name is a *member*: a plain hold of the hold layer
 * (wl_hold: its own keys, its own token, fence and epochs), in the
 * client's list and heaps like any lock's, renewed in the watchdog's
 * batched rounds and declared lost by the loss timer. The members'
 * wl_hold_ops tie them to the group: `lost` turns the loss of one member
 * into the loss of the group (told once, with that name: the member's own
 * loss is not told), and the group's `lost` then marks the other members
 * lost (no longer renewed); `deadline_moved` keeps the group's deadline at
 * the earliest member's.
 *
 * Acquire (multi_io.c): members are sorted by lock key bytes, the one
 * global order. Consecutive members of one slot (every member, when the
 * server is not a cluster) form a run, taken all or nothing by one script
 * (or, once the names' counters are seeded, by one MULTI/EXEC transaction
 * that gives back what it took when a name was held). Runs are taken in
 * order; a run held by someone else is waited for (its channel, the
 * holder's lease) while the earlier runs stay held and renewed. Two
 * acquires over overlapping names therefore never wait for each other in a
 * cycle (ordered locking), and every way out that is not success (the wait
 * ran out, an error, the client closed) gives back what this call took.
 *
 * Threads and locks: as lock.c. The group's io_mu is held for a whole
 * acquire (waits included: a second thread acquiring or releasing the same
 * handle waits for it), every state field under client->mu, no I/O under
 * client->mu. The ops run with client->mu held and do no I/O.
 */
#include "locks/multi.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void member_abandoned_end(watchlock_client *c, wl_hold *h)
{
    end_hold(c, h);
    h->abandoned = false;
    unlink_hold(c, h);
    member_unref(h);
}

static int member_release(wl_hold *h)
{
    (void)h; /* members are released by their group */
    return WATCHLOCK_OK;
}

static void *member_owner(wl_hold *h)
{
    return member_of(h)->group;
}

static void member_deadline_moved(watchlock_client *c, wl_hold *h)
{
    (void)c;
    watchlock_lock *g = member_of(h)->group;
    if (g->hold.state == WATCHLOCK_HELD)
        group_deadline(g);
}

static bool member_lost(watchlock_client *c, wl_hold *h, int reason, bool fire)
{
    watchlock_lock *g = member_of(h)->group;
    if (g->hold.state == WATCHLOCK_HELD && !g->hold.releasing) {
        multi_of(g)->lost = (long)member_of(h)->index;
        wl_lose(c, &g->hold, reason, fire); /* told once, as the group's loss */
    }
    return false;
}

static const wl_hold_ops member_ops = {.unref = member_unref,
                                       .abandoned_end = member_abandoned_end,
                                       .release = member_release,
                                       .owner = member_owner,
                                       .lost = member_lost,
                                       .deadline_moved = member_deadline_moved};

static void group_unref(wl_hold *h)
{
    wl_lock_unref(wl_lock_of(h));
}

static void group_abandoned_end(watchlock_client *c, wl_hold *h)
{
    end_hold(c, h); /* the group is unlinked by abandon itself */
    h->abandoned = false;
}

static int group_release(wl_hold *h)
{
    return watchlock_lock_release(wl_lock_of(h));
}

static void *group_owner(wl_hold *h)
{
    return wl_lock_of(h);
}

/* The group is lost: every member still held is lost with it (no longer
 * renewed, not told on its own). The name is the one whose loss this is,
 * or, lost by the group's deadline, the member with the earliest one. */
static bool group_lost(watchlock_client *c, wl_hold *h, int reason, bool fire)
{
    (void)fire;
    watchlock_lock *l = wl_lock_of(h);
    wl_multi *m = multi_of(l);
    if (m->lost < 0) {
        int64_t d = INT64_MAX;
        for (size_t i = 0; i < m->n; i++)
            if (m->m[i].hold.state == WATCHLOCK_HELD && m->m[i].hold.deadline_us <= d) {
                d = m->m[i].hold.deadline_us;
                m->lost = (long)m->m[i].index;
            }
    }
    for (size_t i = 0; i < m->n; i++)
        if (m->m[i].hold.state == WATCHLOCK_HELD && !m->m[i].hold.releasing)
            wl_lose(c, &m->m[i].hold, reason, false);
    return true;
}

static const wl_hold_ops group_ops = {.unref = group_unref,
                                      .abandoned_end = group_abandoned_end,
                                      .release = group_release,
                                      .owner = group_owner,
                                      .lost = group_lost};

/* ---- the handle ---- */

static void multi_destroy(watchlock_lock *l);
static void multi_free(watchlock_lock *l);
static int multi_extend(watchlock_lock *l, int64_t lease_ms);
static int multi_abandon(watchlock_lock *l);
static const wl_multi_io single_io; /* one server's, below */

/* The multi-lock's table (locks.h): a hold per name, its own release. */
static int multi_acquire(watchlock_lock *l, int64_t wait_ms)
{
    return multi_of(l)->io->acquire(l, wait_ms); /* the placement's (multi.h wl_multi_io) */
}

static const wl_lock_ops multi_kind = {.acquire = multi_acquire,
                                       .release = wl_multi_release,
                                       .extend = multi_extend,
                                       .free = multi_free,
                                       .abandon = multi_abandon,
                                       .destroy = multi_destroy,
                                       .name_layout = false};

static int key_cmp(const void *a, const void *b)
{
    const wl_member *x = a, *y = b;
    size_t n = x->hold.keys.lock_len < y->hold.keys.lock_len ? x->hold.keys.lock_len : y->hold.keys.lock_len;
    int d = memcmp(x->hold.keys.lock, y->hold.keys.lock, n);
    if (d != 0)
        return d;
    return x->hold.keys.lock_len < y->hold.keys.lock_len ? -1 : x->hold.keys.lock_len > y->hold.keys.lock_len;
}

static void multi_destroy(watchlock_lock *l)
{
    wl_multi *m = multi_of(l);
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++) {
        wl_keys_clear(&m->m[i].hold.keys);
        free(m->m[i].name);
    }
    free(m->m);
    free(m->by_user);
    free(m);
    l->kind_data = NULL;
}

int watchlock_multi_lock_new(watchlock_lock **out, watchlock_client *c, const void *const *names,
                             const size_t *name_lens, size_t n)
{
    if (out != NULL)
        *out = NULL;
    if (names == NULL || name_lens == NULL || n == 0)
        return wl_fail(WATCHLOCK_EINVAL, "multi-lock: no names");
    if (n > 1024)
        return wl_fail(WATCHLOCK_EINVAL, "multi-lock: %zu names, more than the limit of 1024", n);
    for (size_t i = 0; i < n; i++) {
        int rc = wl_check_name(names[i], name_lens[i]);
        if (rc != WATCHLOCK_OK)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (name_lens[j] == name_lens[i] && memcmp(names[j], names[i], name_lens[i]) == 0)
                return wl_fail(WATCHLOCK_EINVAL, "multi-lock: name %zu is listed twice", i);
    }
    watchlock_lock *l;
    int rc = wl_handle_new(&l, c, names[0], name_lens[0], &group_ops, &wl_plain_lock_ops,
                           WATCHLOCK_KIND_MULTI); /* freed as one plain hold until its members are made */
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_multi *m = calloc(1, sizeof *m);
    if (m == NULL || (m->m = calloc(n, sizeof *m->m)) == NULL || (m->by_user = calloc(n, sizeof *m->by_user)) == NULL) {
        if (m != NULL)
            free(m->m);
        free(m);
        watchlock_lock_free(l);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    m->lost = -1;
    m->io = wl_multi_io_for(c, &single_io);
    l->kind_data = m;
    l->kind = &multi_kind;
    bool sharded = wl_server_sharded(&c->server);
    for (size_t i = 0; i < n; i++) {
        wl_member *e = &m->m[i];
        e->group = l;
        e->index = i;
        e->hold.ops = &member_ops;
        e->hold.client = c;
        e->hold.id = l->hold.id;
        e->hold.heap_idx = e->hold.dl_idx = WL_NOT_IN_HEAP;
        e->hold.state = WATCHLOCK_UNLOCKED;
        wl_quote_name(e->hold.quoted, sizeof e->hold.quoted, names[i], name_lens[i]);
        if ((e->name = malloc(name_lens[i] + 1)) == NULL ||
            (rc = wl_keys_make(&e->hold.keys, names[i], name_lens[i])) != WATCHLOCK_OK) {
            m->n = i + (e->name != NULL); /* destroy frees what was made */
            l->kind = &wl_plain_lock_ops;
            multi_destroy(l);
            watchlock_lock_free(l);
            return rc != WATCHLOCK_OK ? rc : wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        }
        memcpy(e->name, names[i], name_lens[i]);
        e->name[name_lens[i]] = '\0';
        e->name_len = name_lens[i];
        e->slot = sharded ? wl_key_slot(e->hold.keys.lock, e->hold.keys.lock_len) : 0;
        m->n = i + 1;
    }
    qsort(m->m, n, sizeof *m->m, key_cmp);
    /* A name's quoted form for messages: "[a, b, ...]" (cut to fit). */
    size_t q = 0;
    char *quoted = l->hold.quoted;
    quoted[q++] = '[';
    for (size_t i = 0; i < n; i++) {
        m->by_user[m->m[i].index] = &m->m[i];
        atomic_init(&m->m[i].hold.refs, 1); /* the group's: dropped when unlinked */
    }
    for (size_t i = 0; i < n && q + 8 < sizeof l->hold.quoted; i++)
        q += (size_t)snprintf(quoted + q, sizeof l->hold.quoted - q, "%s%s", i ? ", " : "", m->by_user[i]->hold.quoted);
    if (q >= sizeof l->hold.quoted - 2)
        q = sizeof l->hold.quoted - 5, memcpy(quoted + q, "...", 3), q += 3;
    quoted[q++] = ']';
    quoted[q] = '\0';
    atomic_fetch_add(&l->hold.refs, (int)n); /* one per member (member_unref) */
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++)
        link_hold(c, &m->m[i].hold);
    pthread_mutex_unlock(&c->mu);
    *out = l;
    return WATCHLOCK_OK;
}

/* ---- extend ---- */

static int multi_extend(watchlock_lock *l, int64_t lease_ms)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    if (lease_ms < 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS)
        return wl_fail(WATCHLOCK_EINVAL, "extend %s: lease must be 0 (current) or 1 ms .. 30 days, got %" PRId64,
                       l->hold.quoted, lease_ms);
    typedef struct ext {
        wl_write w;
        char ident[WL_IDENT_SIZE], from_s[24], ms_s[24];
        int result;
    } ext;
    ext *x = calloc(m->n, sizeof *x);
    const char **idents = malloc(3 * m->n * sizeof *idents), **froms = idents + m->n, **mss = froms + m->n;
    int *results = malloc(m->n * sizeof *results);
    if (x == NULL || idents == NULL || results == NULL) {
        free(x), free(idents), free(results);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < m->n; i++)
        results[i] = WL_WRITE_FAILED;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    int rc = WATCHLOCK_OK;
    if (!wl_held_now(l)) {
        if (l->hold.state == WATCHLOCK_HELD && !l->hold.releasing)
            wl_lose(c, &l->hold, wl_lock_expiry_reason(&l->hold), false);
        pthread_mutex_unlock(&c->mu);
        rc = wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: %s", l->hold.quoted,
                     l->hold.state == WATCHLOCK_LOST ? "the multi-lock was lost" : "not held by this handle");
        goto out;
    }
    if (lease_ms > 0)
        l->hold.lease_ms = lease_ms;
    int64_t now = wl_now_us();
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold;
        h->lease_ms = l->hold.lease_ms;
        wl_write_prepare(c, h, h->lease_ms, now, &x[i].w);
        wl_ident(h, x[i].w.to, x[i].ident);
        wl_fmt_i64(x[i].from_s, x[i].w.from);
        wl_fmt_i64(x[i].ms_s, x[i].w.ms);
        x[i].result = WL_WRITE_FAILED;
    }
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < m->n; i++)
        idents[i] = x[i].ident, froms[i] = x[i].from_s, mss[i] = x[i].ms_s;
    rc = m->io->renew(l, idents, froms, mss, results);
    for (size_t i = 0; i < m->n; i++)
        x[i].result = results[i];
    pthread_mutex_lock(&c->mu);
    bool held = true;
    now = wl_now_us();
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold;
        bool ok = wl_write_applied(c, h, &x[i].w, x[i].result, false, now);
        if (ok && x[i].result == WL_WRITE_OK)
            wl_watchdog_schedule(c, h);
        held = held && ok;
    }
    held = held && l->hold.state == WATCHLOCK_HELD;
    pthread_mutex_unlock(&c->mu);
    if (rc == WATCHLOCK_OK && !held)
        rc = wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: the multi-lock was lost (a name has another owner, no key, "
                                          "or its lease ran out)", l->hold.quoted);
out:
    pthread_mutex_unlock(&l->io_mu);
    free(x), free(idents), free(results);
    return rc;
}

/* One server's extend writes: one renew script per run of one slot. */
static int single_renew(watchlock_lock *l, const char *const *ident, const char *const *from, const char *const *ms,
                        int *results)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    const char **argv = malloc(4 * m->n * sizeof *argv);
    size_t *lens = malloc(4 * m->n * sizeof *lens);
    if (argv == NULL || lens == NULL) {
        free(argv), free(lens);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    bool sharded = wl_server_sharded(&c->server);
    char what[160];
    wl_what(what, sizeof what, "extend", l->hold.quoted);
    int rc = WATCHLOCK_OK;
    for (size_t from_i = 0; from_i < m->n && rc == WATCHLOCK_OK;) {
        size_t to = run_end(m, from_i, sharded), k = to - from_i;
        for (size_t j = 0; j < k; j++) {
            argv[j] = m->m[from_i + j].hold.keys.lock, lens[j] = m->m[from_i + j].hold.keys.lock_len;
            const char **a = argv + k + 3 * j;
            size_t *al = lens + k + 3 * j;
            a[0] = ident[from_i + j], al[0] = strlen(ident[from_i + j]);
            a[1] = from[from_i + j], al[1] = strlen(from[from_i + j]);
            a[2] = ms[from_i + j], al[2] = strlen(ms[from_i + j]);
        }
        redisReply *r;
        rc = wl_run_script(&c->server, WL_SCRIPT_RENEW, (int)k, (int)(3 * k), argv, lens, &r, what);
        if (rc == WATCHLOCK_OK) {
            for (size_t j = 0; j < k; j++)
                results[from_i + j] = wl_reply_renew(r, k, j);
            freeReplyObject(r);
        }
        from_i = to;
    }
    free(argv), free(lens);
    return rc;
}

static const wl_multi_io single_io = {
    .acquire = wl_multi_acquire, .release = wl_multi_release_single, .renew = single_renew};

/* ---- free, abandon ---- */

static void multi_free(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    bool held = wl_handle_free_begin(l); /* handle.c: as every kind's free begins */
    if (held && !atomic_load(&c->closed))
        wl_multi_release(l);
    if (!atomic_load(&c->closed))
        wl_multi_rollback(l); /* names a failed release left (no-op when none) */
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < m->n; i++) {
        end_hold(c, &m->m[i].hold);
        m->m[i].hold.freed = true;
        unlink_hold(c, &m->m[i].hold);
    }
    end_hold(c, &l->hold);
    unlink_hold(c, &l->hold);
    pthread_mutex_unlock(&c->mu);
    size_t n = m->n;
    for (size_t i = 0; i < n; i++)
        member_unref(&m->m[i].hold);
    wl_lock_unref(l); /* the user's: may free the handle (and m) */
}

/* A dropped multi-lock is not an unlock (handle.c's abandon): each name
 * still held stays in the client's hands, unrenewed, until its deadline
 * (the member's abandoned_end then lets go of it) or close. */
static int multi_abandon(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    bool *drop = calloc(m->n, sizeof *drop);
    pthread_mutex_lock(&c->mu);
    l->hold.freed = true;
    l->hold.on_lost = NULL;
    wl_wait_callbacks(c, &l->hold);
    int dropped = wl_held_now(l);
    for (size_t i = 0; i < m->n; i++) {
        wl_hold *h = &m->m[i].hold;
        h->freed = true;
        if (h->state == WATCHLOCK_HELD && drop != NULL) {
            h->abandoned = true;
            h->auto_renew = false;
            wl_watchdog_unschedule(c, h); /* the deadline heap keeps it: the loss timer ends it */
        } else {
            end_hold(c, h);
            unlink_hold(c, h);
            if (drop != NULL)
                drop[i] = true;
        }
    }
    end_hold(c, &l->hold);
    unlink_hold(c, &l->hold);
    pthread_mutex_unlock(&c->mu);
    size_t n = m->n;
    for (size_t i = 0; i < n; i++)
        if (drop != NULL && drop[i])
            member_unref(&m->m[i].hold);
    free(drop);
    wl_lock_unref(l);
    return dropped;
}

/* ---- queries ---- */

size_t watchlock_lock_name_count(const watchlock_lock *l)
{
    if (l == NULL)
        return 0;
    return l->kind == &multi_kind ? multi_of(l)->n : 1;
}

const char *watchlock_lock_name_at(const watchlock_lock *l, size_t i, size_t *len)
{
    if (len)
        *len = 0;
    if (l == NULL || i >= watchlock_lock_name_count(l))
        return NULL;
    if (l->kind != &multi_kind)
        return watchlock_lock_name(l, len);
    const wl_member *e = multi_of(l)->by_user[i];
    if (len)
        *len = e->name_len;
    return e->name;
}

int64_t watchlock_lock_fencing_token_at(const watchlock_lock *l, size_t i)
{
    if (l == NULL || l->fork_gen != wl_fork_generation() || i >= watchlock_lock_name_count(l))
        return 0;
    pthread_mutex_lock(&l->hold.client->mu);
    int64_t v = l->kind == &multi_kind ? multi_of(l)->by_user[i]->hold.fence : l->hold.fence;
    pthread_mutex_unlock(&l->hold.client->mu);
    return v;
}

const char *watchlock_lock_lost_name(const watchlock_lock *l, size_t *len)
{
    if (len)
        *len = 0;
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return NULL;
    int state = watchlock_lock_state(l); /* a hold past its deadline is lost now */
    int reason = watchlock_lock_last_lost_reason(l);
    if (reason == WATCHLOCK_LOST_NONE && state != WATCHLOCK_LOST)
        return NULL;
    if (l->kind != &multi_kind)
        return watchlock_lock_name(l, len);
    pthread_mutex_lock(&l->hold.client->mu);
    long k = multi_of(l)->lost;
    pthread_mutex_unlock(&l->hold.client->mu);
    return k < 0 ? NULL : watchlock_lock_name_at(l, (size_t)k, len);
}

