/*
 * lock.c - lock handles: create/free, options, acquire (with pub/sub
 * waiting), release, extend, the hold writes shared with the watchdog, and
 * state queries.
 *
 * A handle's state lives under client->mu; io_mu serializes the handle's own
 * round trips so that a release and a re-acquire of one handle from two
 * threads cannot cross on the wire. Waiting happens outside both.
 *
 * Hold identity (docs/design.md): every hold has its own random token; the
 * key holds "<token>.<epoch>", and every write that sets a different lease
 * moves to a new epoch. Renewals and extend name the epochs they accept, so
 * a write delayed on the wire never acts on a later hold nor shortens a
 * lease a later write set. Release names the hold (any epoch).
 */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_LEASE_MS 30000
#define FENCE_TTL_MIN_MS (INT64_C(24) * 3600 * 1000)
#define NO_TTL_POLL_US 1000000   /* a key without expiry (not ours): re-check this often */
/* A digested long name's ":name" key is written by the first acquire of a
 * handle and again once this much time has passed (it has the fence's TTL,
 * at least a day): a 10 KiB name sent with every acquire cost the server
 * more than the rest of the cycle (Lua hashes every byte of an argument). */
#define NAME_REFRESH_US (INT64_C(3600) * 1000000)

static atomic_uint_fast64_t next_lock_id = 1;

int wl_check_lock(const watchlock_lock *l)
{
    if (l == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "lock is NULL");
    if (l->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED,
                       "lock %s belongs to the parent process (inherited across fork); the child cannot use it",
                       l->quoted);
    if (atomic_load(&l->client->closed))
        return wl_fail(WATCHLOCK_ECLOSED, "lock %s: client is closed", l->quoted);
    return WATCHLOCK_OK;
}

int watchlock_lock_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_check_name(name, name_len);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_lock *l = calloc(1, sizeof *l);
    if (l == NULL || (l->name = malloc(name_len + 1)) == NULL) {
        free(l);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    memcpy(l->name, name, name_len);
    l->name[name_len] = '\0';
    l->name_len = name_len;
    wl_quote_name(l->quoted, sizeof l->quoted, name, name_len);
    if (wl_random_token(l->token) != 0) {
        free(l->name);
        free(l);
        return wl_fail(WATCHLOCK_EINTERNAL, "getrandom failed");
    }
    if ((rc = wl_keys_make(&l->keys, name, name_len)) != WATCHLOCK_OK) {
        free(l->name);
        free(l);
        return rc;
    }
    if (pthread_mutex_init(&l->io_mu, NULL) != 0) {
        wl_keys_clear(&l->keys);
        free(l->name);
        free(l);
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    }
    atomic_init(&l->refs, 1);
    l->key_hash = UINT64_C(14695981039346656037); /* FNV-1a */
    for (size_t i = 0; i < l->keys.lock_len; i++)
        l->key_hash = (l->key_hash ^ (unsigned char)l->keys.lock[i]) * UINT64_C(1099511628211);
    l->key_hash |= 1;
    l->id = atomic_fetch_add(&next_lock_id, 1);
    l->fork_gen = c->fork_gen;
    l->client = c;
    l->lease_ms = DEFAULT_LEASE_MS;
    l->auto_renew = true;
    l->state = WATCHLOCK_UNLOCKED;
    l->heap_idx = WL_NOT_IN_HEAP;
    l->dl_idx = WL_NOT_IN_HEAP;
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_lock(&c->mu);
    l->next = c->locks;
    if (c->locks)
        c->locks->prev = l;
    c->locks = l;
    pthread_mutex_unlock(&c->mu);
    *out = l;
    return WATCHLOCK_OK;
}

void wl_lock_unref(watchlock_lock *l)
{
    if (atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    watchlock_client *c = l->client;
    pthread_mutex_destroy(&l->io_mu);
    wl_keys_clear(&l->keys);
    free(l->name);
    free(l->owner_label);
    free(l);
    wl_client_unref(c);
}

static void forget_wait(watchlock_lock *l);

void watchlock_lock_free(watchlock_lock *l)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return; /* forked child: never release or touch the parent's lock */
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    l->freed = true; /* no callback starts from now on */
    l->on_lost = NULL;
    wl_wait_callbacks(c, l);
    /* Held: release it. Lost by its deadline: release deletes the key if
     * it still holds this hold (for the safety margin), so waiters need not
     * wait for it to expire. */
    bool held = l->state != WATCHLOCK_UNLOCKED;
    if (held)
        l->hold_count = 1;
    pthread_mutex_unlock(&c->mu);
    if (held && !atomic_load(&c->closed))
        watchlock_lock_release(l);
    forget_wait(l);
    pthread_mutex_lock(&c->mu);
    wl_unschedule_all(c, l);
    if (l->state == WATCHLOCK_HELD)
        c->held--;
    l->state = WATCHLOCK_UNLOCKED;
    if (l->prev)
        l->prev->next = l->next;
    else
        c->locks = l->next;
    if (l->next)
        l->next->prev = l->prev;
    pthread_mutex_unlock(&c->mu);
    wl_lock_unref(l);
}

/* ---- dropped handles: abandon ---- */

static void unlink_lock(watchlock_client *c, watchlock_lock *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        c->locks = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

void wl_abandoned_end(watchlock_client *c, watchlock_lock *l)
{
    wl_unschedule_all(c, l);
    if (l->state == WATCHLOCK_HELD)
        c->held--;
    l->state = WATCHLOCK_UNLOCKED;
    l->releasing = false;
    l->hold_count = 0;
    l->hold_gen++;
    l->abandoned = false;
    unlink_lock(c, l);
    wl_lock_unref(l);
}

/* A dropped handle is not an unlock (docs/design.md, "Dropped handles"): a
 * held lock stays in the client's hands, no longer renewed, until its
 * local deadline (the loss timer then calls wl_abandoned_end through
 * wl_lose, silently), a renewal already on the wire finds it taken, or
 * close releases it with the other held locks. The client's list keeps
 * the handle meanwhile, with the user's reference. */
int watchlock_lock_abandon(watchlock_lock *l)
{
    if (l == NULL || l->fork_gen != wl_fork_generation())
        return 0; /* forked child: the parent's lock is none of its business */
    watchlock_client *c = l->client;
    forget_wait(l);
    pthread_mutex_lock(&c->mu);
    l->freed = true; /* no callback starts from now on */
    l->on_lost = NULL;
    wl_wait_callbacks(c, l);
    /* Whether close has already ended the hold is read here, under mu:
     * close marks every hold UNLOCKED under it before releasing them. */
    int dropped = 0;
    if (l->state == WATCHLOCK_HELD) {
        dropped = !l->releasing && wl_now_us() < l->deadline_us;
        l->abandoned = true;
        l->auto_renew = false;          /* a renewal in flight is not rescheduled */
        wl_watchdog_unschedule(c, l);   /* the deadline heap keeps it: the loss timer ends it */
        pthread_mutex_unlock(&c->mu);
        return dropped;
    }
    wl_unschedule_all(c, l);
    l->state = WATCHLOCK_UNLOCKED;
    unlink_lock(c, l);
    pthread_mutex_unlock(&c->mu);
    wl_lock_unref(l);
    return 0;
}

/* ---- options ---- */

#define WITH_LOCK_STATE(l, body)                                                                   \
    do {                                                                                           \
        int rc_ = wl_check_lock(l);                                                                \
        if (rc_ != WATCHLOCK_OK)                                                                   \
            return rc_;                                                                            \
        pthread_mutex_lock(&(l)->client->mu);                                                      \
        body;                                                                                      \
        pthread_mutex_unlock(&(l)->client->mu);                                                    \
        return WATCHLOCK_OK;                                                                       \
    } while (0)

int watchlock_lock_set_lease(watchlock_lock *l, int64_t lease_ms)
{
    if (l != NULL && (lease_ms <= 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS))
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: lease must be 1 ms .. 30 days, got %" PRId64 " ms", l->quoted,
                       lease_ms);
    WITH_LOCK_STATE(l, l->lease_ms = lease_ms);
}

int watchlock_lock_set_auto_renew(watchlock_lock *l, int on)
{
    if (l != NULL && on != 0 && on != 1)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: auto-renew must be 0 or 1, got %d", l->quoted, on);
    WITH_LOCK_STATE(l, l->auto_renew = on != 0);
}

int watchlock_lock_set_renew_interval(watchlock_lock *l, int64_t interval_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    pthread_mutex_lock(&l->client->mu);
    int64_t lease = l->lease_ms;
    if (interval_ms >= 0 && interval_ms < lease) {
        l->interval_ms = interval_ms;
        l->renew_den = l->renew_num = 0; /* replaces a fraction (renew_option.c) */
    }
    pthread_mutex_unlock(&l->client->mu);
    if ((interval_ms < 0 || interval_ms >= lease) && lease < 2)
        return wl_fail(WATCHLOCK_EINVAL,
                       "lock %s: a lease of %" PRId64 " ms leaves no room for a renew interval (only 0 = lease/3)",
                       l->quoted, lease);
    if (interval_ms < 0 || interval_ms >= lease)
        return wl_fail(WATCHLOCK_EINVAL,
                       "lock %s: renew interval must be 0 (lease/3) or 1 .. %" PRId64 " ms (below the lease), got %" PRId64,
                       l->quoted, lease - 1, interval_ms);
    return WATCHLOCK_OK;
}

int watchlock_lock_set_max_renewals(watchlock_lock *l, int64_t max)
{
    if (l != NULL && max < 0)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: max renewals must be >= 0 (0 = unlimited)", l->quoted);
    WITH_LOCK_STATE(l, l->max_renewals = max);
}

int watchlock_lock_set_max_hold(watchlock_lock *l, int64_t max_hold_ms)
{
    if (l != NULL && (max_hold_ms < 0 || max_hold_ms > WATCHLOCK_MAX_LEASE_MS * 100))
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: max hold must be >= 0 ms (0 = unlimited)", l->quoted);
    WITH_LOCK_STATE(l, l->max_hold_ms = max_hold_ms);
}

int watchlock_lock_set_on_lost(watchlock_lock *l, watchlock_lost_fn fn, void *userdata)
{
    WITH_LOCK_STATE(l, {
        l->on_lost = fn;
        l->on_lost_data = userdata;
    });
}

/* ---- owner record (written by acquire, read by admin.c) ---- */

int watchlock_lock_set_owner_label(watchlock_lock *l, const char *label)
{
    size_t len = label != NULL ? strnlen(label, WATCHLOCK_MAX_LABEL + 1) : 0;
    if (l != NULL && len > WATCHLOCK_MAX_LABEL)
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: owner label is longer than %d bytes", l->quoted,
                       WATCHLOCK_MAX_LABEL);
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    char *copy = NULL;
    if (label != NULL) {
        if ((copy = malloc(len + 1)) == NULL)
            return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        memcpy(copy, label, len + 1);
    }
    pthread_mutex_lock(&l->client->mu);
    char *old = l->owner_label;
    l->owner_label = copy;
    pthread_mutex_unlock(&l->client->mu);
    free(old);
    return WATCHLOCK_OK;
}

/* The owner record's fields for one acquire: the label as set when the
 * attempt began, this host's name and this process's pid. */
typedef struct owner_args {
    bool set;
    char label[WATCHLOCK_MAX_LABEL + 1];
    char host[256];
    char pid[24];
} owner_args;

/* With client->mu held: copies the label (no owner record without one). */
static void owner_args_take(const watchlock_lock *l, owner_args *o)
{
    o->set = l->owner_label != NULL;
    if (o->set)
        snprintf(o->label, sizeof o->label, "%s", l->owner_label);
}

/* Makes argv/lens (lock, fence, ident, lease, fence TTL) the acquire
 * script's KEYS lock, fence, owner and ARGV ident, lease, fence TTL,
 * host, pid, label. Returns the number of keys (3). */
static int owner_args_add(const watchlock_lock *l, owner_args *o, const char **argv, size_t *lens)
{
    if (gethostname(o->host, sizeof o->host) != 0)
        o->host[0] = '\0';
    o->host[sizeof o->host - 1] = '\0';
    snprintf(o->pid, sizeof o->pid, "%ld", (long)getpid());
    for (int i = 4; i >= 2; i--) {
        argv[i + 1] = argv[i];
        lens[i + 1] = lens[i];
    }
    argv[2] = l->keys.owner;
    lens[2] = l->keys.owner_len;
    argv[6] = o->host;
    lens[6] = strlen(o->host);
    argv[7] = o->pid;
    lens[7] = strlen(o->pid);
    argv[8] = o->label;
    lens[8] = strlen(o->label);
    return 3;
}

/* ---- hold identity and writes (shared with the watchdog) ---- */

int64_t wl_margin_us(const watchlock_client *c, int64_t lease_ms)
{
    /* 1% of the lease + the fixed safety margin (URL option safety_margin),
     * never more than half the lease. */
    int64_t margin = lease_ms * 10 + c->server.ep.safety_margin_ms * 1000;
    int64_t half = lease_ms * 500;
    return margin < half ? margin : half;
}

size_t wl_ident(const watchlock_lock *l, int64_t epoch, char *buf)
{
    size_t n = strlen(l->token); /* 32 hex digits */
    memcpy(buf, l->token, n);
    buf[n++] = '.';
    if (epoch < 0) {
        buf[n] = '\0';
        return n;
    }
    return n + wl_fmt_i64(buf + n, epoch);
}

void wl_release_args_make(const watchlock_lock *l, wl_release_args *a)
{
    a->argv[0] = l->keys.lock;
    a->lens[0] = l->keys.lock_len;
    a->lens[1] = wl_ident(l, -1, a->prefix);
    a->argv[1] = a->prefix;
    a->argv[2] = l->keys.channel;
    a->lens[2] = l->keys.channel_len;
    a->argv[3] = wl_publish_command(&l->client->server);
    a->lens[3] = strlen(a->argv[3]);
}

void wl_write_prepare(watchlock_client *c, watchlock_lock *l, int64_t ms, int64_t sent, wl_write *w)
{
    if (ms != l->epoch_ms) { /* a different lease: a new epoch */
        l->epoch_to++;
        l->epoch_ms = ms;
    }
    *w = (wl_write){.gen = l->hold_gen, .from = l->epoch, .to = l->epoch_to, .ms = ms, .sent = sent};
    /* From now on this write may land at any moment, and leave `ms` from
     * then on: never count on more than that. */
    int64_t d = sent + ms * 1000 - wl_margin_us(c, ms);
    if (d < l->deadline_us)
        wl_set_deadline(c, l, d);
}

bool wl_write_applied(watchlock_client *c, watchlock_lock *l, const wl_write *w, int result, bool fire,
                      int64_t now)
{
    if (l->hold_gen != w->gen || l->state != WATCHLOCK_HELD)
        return false; /* that hold is over */
    if (now >= l->deadline_us) {
        /* Too late: the hold was LOST at its deadline (state() may already
         * have said so), and LOST stays LOST whatever the reply says. */
        wl_lose(c, l, wl_lock_expiry_reason(l), fire);
        return false;
    }
    switch (result) {
    case WL_WRITE_OK:
        if (w->to > l->epoch)
            l->epoch = w->to;
        if (w->to == l->epoch_to) { /* the newest lease: count on it */
            int64_t d = w->sent + w->ms * 1000 - wl_margin_us(c, w->ms);
            if (d > l->deadline_us)
                wl_set_deadline(c, l, d);
            if (w->sent > l->confirmed_us)
                l->confirmed_us = w->sent;
        }
        l->renew_failing = false;
        return true;
    case WL_WRITE_STALE: /* a newer write of ours is on the server */
        if (w->to < l->epoch_to)
            return true;
        break; /* cannot happen for the newest epoch: treat as not ours */
    case WL_WRITE_NOT_OWNER:
        if (l->releasing)
            return true; /* our own release got there first */
        break;
    default:
        l->renew_failing = true;
        return true;
    }
    wl_lose(c, l, WATCHLOCK_LOST_TAKEN, fire);
    return false;
}

/* ---- acquire ---- */

/* With client->mu: held, not being released, and within the local
 * deadline. A hold past its deadline is lost even before the loss timer
 * marks it (see visible_state). */
static bool held_now(const watchlock_lock *l)
{
    return l->state == WATCHLOCK_HELD && !l->releasing && wl_now_us() < l->deadline_us;
}

static void release_on_fresh_connection(watchlock_client *c, const wl_release_args *a)
{
    wl_conn *ctx;
    uint64_t pin = wl_server_pin(&c->server); /* cluster.c: the node stays valid while used */
    wl_server *node = wl_server_route(&c->server, a->argv[0], a->lens[0]);
    int rc = node == NULL ? WATCHLOCK_ECONN : wl_server_connect(node, 0, &ctx);
    wl_server_unpin(&c->server, pin);
    if (rc != WATCHLOCK_OK)
        return;
    redisReply *reply = NULL;
    if (wl_append_script(ctx, WL_SCRIPT_RELEASE, true, 1, WL_RELEASE_NARGS, a->argv, a->lens) == 0 &&
        wl_conn_get_reply(ctx, &reply) == 0)
        freeReplyObject(reply);
    wl_conn_free(ctx);
}

/* min_replicas: WAIT on the connection that wrote the key (WAIT counts
 * the replicas that have this connection's writes). OK, EREPLICAS when
 * fewer acknowledged within min_replicas_timeout, or a connection error. */
static int wait_replicas(watchlock_client *c, wl_conn *conn, const char *what, const char *outcome)
{
    const wl_endpoint *ep = &c->server.ep;
    char n[16], ms[24];
    snprintf(n, sizeof n, "%d", ep->min_replicas);
    snprintf(ms, sizeof ms, "%" PRId64, ep->min_replicas_timeout_ms);
    const char *argv[3] = {"WAIT", n, ms};
    int64_t saved = wl_conn_timeout(conn);
    wl_conn_set_timeout(conn, ep->min_replicas_timeout_ms + saved); /* the server waits first */
    redisReply *r = wl_conn_command(conn, 3, argv, NULL);
    wl_conn_set_timeout(conn, saved);
    if (r == NULL)
        return wl_conn_error(&c->server, conn, what);
    int rc = wl_reply_error(&c->server, r, what);
    if (rc == WATCHLOCK_OK && (r->type != REDIS_REPLY_INTEGER || r->integer < ep->min_replicas))
        rc = wl_fail(WATCHLOCK_EREPLICAS,
                     "%s: %lld of min_replicas=%d replicas acknowledged the write within %" PRId64 " ms; %s",
                     what, r->type == REDIS_REPLY_INTEGER ? r->integer : 0LL, ep->min_replicas,
                     ep->min_replicas_timeout_ms, outcome);
    freeReplyObject(r);
    return rc;
}

/* The common acquire (no owner record, no name key) as one transaction of
 * three plain commands in one round trip, which costs the server about
 * half of the acquire script (docs/design.md, "Fencing"):
 *   MULTI
 *   SET lock <ident> NX PX lease
 *   SET fence 0 NX PX fence-ttl   a counter made here has its TTL at once
 *   INCR fence
 *   EXEC
 * *done: the SET took the key and INCR gave a seeded counter's next value
 * (>= WL_FENCE_SEEDED): acquired, *fence is the token. Anything else
 * (someone else holds it, a counter not yet seeded with the server's time,
 * an error reply, an aborted or refused transaction, a demoted server, a
 * cluster redirect: the three keys share a slot, so the transaction runs
 * on the one node that serves it, or not at all) leaves *done false and
 * the acquire script decides one round trip later; it takes a key that
 * already holds this very identity as ours, with a fresh token. The INCR
 * runs even when the SET failed: a contended attempt spends a number,
 * which keeps tokens increasing.
 * MULTI/EXEC is what makes the token follow the order of holds: nothing
 * runs between the SET and the INCR, so the INCR runs while the key is
 * this hold's. Plain pipelined commands could be interleaved with other
 * clients' commands: A's SET, a force-release, B's acquire and INCR, then
 * A's INCR would hand A, who holds nothing, a token above the holder B's
 * (issue 19 item 4; tests/c/test_lock.c fast_acquire_token_order).
 * A user whose ACL denies MULTI (no @transaction) sees the three commands
 * run one by one and EXEC fail: the script then decides, and its own INCR
 * is the token, taken atomically with the check that the key is this
 * hold's; the client sends later acquires straight to the script.
 * Only names this client has acquired before take this path
 * (client->seeded): a name's first acquire takes the script. */
static int acquire_fast(watchlock_client *c, const char *const *argv, const size_t *lens, const char *what,
                        wl_conn **keep, bool *done, int64_t *fence)
{
    static const char *const set_nx[] = {"SET", NULL, NULL, "NX", "PX", NULL};
    static const char *const multi[1] = {"MULTI"}, *const exec[1] = {"EXEC"};
    const char *a1[6], *a2[6], *a3[2] = {"INCR", argv[1]};
    size_t l1[6], l2[6], l3[2] = {4, lens[1]};
    memcpy(a1, set_nx, sizeof a1);
    memcpy(a2, set_nx, sizeof a2);
    a1[1] = argv[0], a1[2] = argv[2], a1[5] = argv[3];
    a2[1] = argv[1], a2[2] = "0", a2[5] = argv[4];
    l1[0] = l2[0] = 3, l1[3] = l2[3] = 2, l1[4] = l2[4] = 2;
    l1[1] = lens[0], l1[2] = lens[2], l1[5] = lens[3];
    l2[1] = lens[1], l2[2] = 1, l2[5] = lens[4];
    const wl_cmd cmds[5] = {{1, multi, NULL}, {6, a1, l1}, {6, a2, l2}, {2, a3, l3}, {1, exec, NULL}};
    redisReply *r[5];
    *done = false;
    int rc = wl_run_pipeline(&c->server, 5, cmds, r, what, keep);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (r[0]->type == REDIS_REPLY_ERROR && r[0]->str != NULL && strncmp(r[0]->str, "NOPERM", 6) == 0)
        atomic_store(&c->no_fast, true); /* the commands ran one by one: the script decides, now and later */
    const redisReply *x = r[4]; /* EXEC: the three replies, or an error (EXECABORT) / nil */
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 3 && x->element[0]->type == REDIS_REPLY_STATUS &&
        x->element[2]->type == REDIS_REPLY_INTEGER && x->element[2]->integer >= WL_FENCE_SEEDED) {
        *done = true;
        *fence = x->element[2]->integer;
    }
    for (int i = 0; i < 5; i++)
        freeReplyObject(r[i]);
    if (!*done && keep != NULL) { /* the script's own connection is the one to WAIT on */
        wl_server_put(&c->server, *keep);
        *keep = NULL;
    }
    return WATCHLOCK_OK;
}

/* One acquire round trip. OK: now held. ETIMEDOUT: someone else holds it,
 * *pttl_ms says for how long (-1 no expiry, -2 gone meanwhile). */
static int attempt(watchlock_lock *l, int64_t *pttl_ms)
{
    watchlock_client *c = l->client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (held_now(l)) { /* another thread got this handle meanwhile */
        l->hold_count++;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_OK;
    }
    if (l->state == WATCHLOCK_HELD && !l->releasing) /* past its deadline, not yet marked */
        wl_lose(c, l, wl_lock_expiry_reason(l), true);
    /* A hold lost by its local deadline may still have its key for the
     * safety margin: delete it (checked, never someone else's) so that the
     * new hold, which has a new token, need not wait for it. */
    bool drop_old = l->state == WATCHLOCK_LOST && l->lost_reason != WATCHLOCK_LOST_TAKEN && l->token_used;
    wl_release_args old;
    if (drop_old)
        wl_release_args_make(l, &old);
    int64_t lease = l->lease_ms;
    /* A new hold gets a new token. Failed attempts keep theirs, so that a
     * retry after a lost reply finds its own key; a different lease gets a
     * new one too, so that an old attempt landing late never sets a lease
     * this hold does not count on. */
    if (l->token_used || l->token_lease_ms != lease) {
        if (wl_random_token(l->token) != 0) {
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_unlock(&l->io_mu);
            return wl_fail(WATCHLOCK_EINTERNAL, "acquire %s: getrandom failed", l->quoted);
        }
        l->token_used = false;
        l->token_lease_ms = lease;
    }
    char ident[WL_IDENT_SIZE];
    size_t ident_len = wl_ident(l, 1, ident);
    owner_args owner;
    owner_args_take(l, &owner);
    bool store_name = l->keys.name != NULL &&
                      (l->name_stored_us == 0 || wl_now_us() - l->name_stored_us >= NAME_REFRESH_US);
    pthread_mutex_unlock(&c->mu);
    if (drop_old) {
        redisReply *r;
        if (wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, old.argv, old.lens, &r, "release") == WATCHLOCK_OK)
            freeReplyObject(r);
    }

    char lease_s[24], fence_ttl_s[24];
    int64_t fence_ttl = lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS;
    wl_fmt_i64(lease_s, lease);
    wl_fmt_i64(fence_ttl_s, fence_ttl);
    const char *argv[11] = {l->keys.lock, l->keys.fence, ident, lease_s, fence_ttl_s};
    size_t lens[11] = {l->keys.lock_len, l->keys.fence_len, ident_len, strlen(lease_s), strlen(fence_ttl_s)};
    int nkeys = owner.set ? owner_args_add(l, &owner, argv, lens) : 2; /* + owner key, host, pid, label */
    int nargs = nkeys == 2 ? 3 : 6;
    if (store_name) { /* a digested long name: the hold also stores the name (keys.c) */
        memmove(argv + nkeys + 1, argv + nkeys, (size_t)nargs * sizeof *argv);
        memmove(lens + nkeys + 1, lens + nkeys, (size_t)nargs * sizeof *lens);
        argv[nkeys] = l->keys.name;
        lens[nkeys++] = l->keys.name_len;
        argv[nkeys + nargs] = l->name;
        lens[nkeys + nargs++] = l->name_len;
    }
    char what[160];
    wl_what(what, sizeof what, "acquire", l->quoted);
    int64_t sent = wl_now_us();
    wl_conn *wrote = NULL; /* kept for WAIT when min_replicas is set */
    wl_conn **keep = c->server.ep.min_replicas > 0 ? &wrote : NULL;
    bool acquired = false;
    int64_t value = 0;
    int rc = WATCHLOCK_OK;
    /* A waiter's retries (the name was held last time) go straight to the
     * script, which answers "held" with the remaining lease in one round
     * trip. */
    atomic_uint_fast64_t *seeded = &c->seeded[l->key_hash % WL_SEEDED_SLOTS];
    if (nkeys == 2 && !l->last_busy && atomic_load_explicit(seeded, memory_order_relaxed) == l->key_hash &&
        !atomic_load_explicit(&c->no_fast, memory_order_relaxed))
        rc = acquire_fast(c, argv, lens, what, keep, &acquired, &value);
    if (rc == WATCHLOCK_OK && !acquired) {
        redisReply *r;
        rc = wl_run_script_keep(&c->server, WL_SCRIPT_ACQUIRE, nkeys, nargs, argv, lens, &r, what, keep);
        if (rc == WATCHLOCK_OK) {
            if (!wl_reply_acquire(r, &acquired, &value)) {
                wl_server_put(&c->server, wrote);
                rc = wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
            }
            freeReplyObject(r);
        }
    }
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&l->io_mu);
        return rc;
    }
    if (acquired && wrote != NULL)
        rc = wait_replicas(c, wrote, what, "the key was given back");
    wl_server_put(&c->server, wrote);
    l->last_busy = !acquired;
    if (acquired)
        atomic_store_explicit(seeded, l->key_hash, memory_order_relaxed);
    if (!acquired) {
        *pttl_ms = value;
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_ETIMEDOUT;
    }
    pthread_mutex_lock(&c->mu);
    l->token_used = true;
    if (rc != WATCHLOCK_OK) {
        /* Too few replicas have the key: a failover now could lose it.
         * Give it back (checked) and report. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        wl_release_args a;
        wl_release_args_make(l, &a);
        pthread_mutex_unlock(&c->mu);
        redisReply *rr;
        if (wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, a.argv, a.lens, &rr, "release") == WATCHLOCK_OK)
            freeReplyObject(rr);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(rc, "%s", msg);
    }
    if (store_name)
        l->name_stored_us = sent;
    if (atomic_load(&c->closed)) {
        /* Closed while our script was in flight: close has already released
         * what it knew of, so give this one back too (best effort, on a
         * connection of our own: the pool is shut). */
        wl_release_args a;
        wl_release_args_make(l, &a);
        pthread_mutex_unlock(&c->mu);
        release_on_fresh_connection(c, &a);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ECLOSED, "%s: client closed", what);
    }
    int64_t deadline = sent + lease * 1000 - wl_margin_us(c, lease);
    int64_t took_us = wl_now_us() - sent;
    if (sent + took_us >= deadline) {
        /* The reply came after the hold's own local deadline (a frozen
         * server, a link slower than the lease): the hold would be LOST on
         * arrival. Give the key back (checked) and report the slow link
         * instead of handing the caller a lock it cannot use. */
        wl_release_args a;
        wl_release_args_make(l, &a);
        pthread_mutex_unlock(&c->mu);
        redisReply *rr;
        if (wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, a.argv, a.lens, &rr, "release") == WATCHLOCK_OK)
            freeReplyObject(rr);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ECONN,
                       "%s: the server's reply took %" PRId64 " ms, past the local deadline of a %" PRId64
                       " ms lease; the key was given back",
                       what, took_us / 1000, lease);
    }
    l->state = WATCHLOCK_HELD;
    l->hold_count = 1;
    l->hold_gen++;
    l->epoch = l->epoch_to = 1;
    l->epoch_ms = lease;
    l->fence = value;
    l->renewals = 0;
    l->lost_reason = WATCHLOCK_LOST_NONE;
    l->stop_reason = WATCHLOCK_LOST_NONE;
    l->renew_failing = false;
    l->renew_inflight = false;
    l->releasing = false;
    l->acquired_us = l->confirmed_us = sent;
    c->held++;
    wl_set_deadline(c, l, deadline);
    if (l->state == WATCHLOCK_HELD)
        wl_watchdog_schedule(c, l);
    rc = wl_watchdog_ensure_started(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_timer_ensure_started(c);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

/* A wait that timed out while the holder's lease still ran is kept on the
 * handle (subscription, wake-up generation, end of the holder's lease), so
 * that the next acquire with a wait resumes it instead of sending another
 * acquire that would fail the same way. Bindings that wait in slices (to
 * stay interruptible) therefore never poll the server. */
static void save_wait(watchlock_lock *l, wl_subscriber *sub, wl_sub_entry *entry, uint64_t gen, int64_t until_us)
{
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    wl_sub_entry *old = l->wait_entry;
    wl_subscriber *old_sub = l->wait_sub;
    l->wait_entry = entry;
    l->wait_sub = sub;
    l->wait_gen = gen;
    l->wait_until_us = until_us;
    pthread_mutex_unlock(&c->mu);
    if (old != NULL)
        wl_sub_leave(old_sub, old);
}

static wl_sub_entry *take_wait(watchlock_lock *l, wl_subscriber **sub, uint64_t *gen, int64_t *until_us)
{
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    wl_sub_entry *entry = l->wait_entry;
    *sub = l->wait_sub;
    *gen = l->wait_gen;
    *until_us = l->wait_until_us;
    l->wait_entry = NULL;
    l->wait_sub = NULL;
    pthread_mutex_unlock(&c->mu);
    return entry;
}

static void forget_wait(watchlock_lock *l)
{
    uint64_t gen;
    int64_t until;
    wl_subscriber *sub;
    wl_sub_entry *entry = take_wait(l, &sub, &gen, &until);
    if (entry != NULL)
        wl_sub_leave(sub, entry);
}

/* issue 25.2: public, for bindings that stop a sliced wait for good. */
int watchlock_lock_forget_wait(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc == WATCHLOCK_OK)
        forget_wait(l);
    return rc;
}

/* Joins the lock's release channel on the subscriber that carries it. */
static int join_channel(watchlock_lock *l, wl_subscriber **sub, wl_sub_entry **entry)
{
    char what[120];
    wl_what(what, sizeof what, "acquire", l->quoted);
    return wl_client_join(l->client, l->keys.channel, l->keys.channel_len, what, sub, entry);
}

/* When the holder's lease ends, by the PTTL an attempt saw. */
static int64_t holder_end(int64_t pttl_ms)
{
    int64_t now = wl_now_us();
    if (pttl_ms > 0)
        return now + pttl_ms * 1000 + 1000;
    return pttl_ms == -1 ? now + NO_TTL_POLL_US : now;
}

static int finish_pending_release(watchlock_lock *l);

int watchlock_lock_acquire(watchlock_lock *l, int64_t wait_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    if (held_now(l)) { /* reentrant: no round trip */
        l->hold_count++;
        pthread_mutex_unlock(&c->mu);
        return WATCHLOCK_OK;
    }
    bool releasing = l->state == WATCHLOCK_HELD && l->releasing;
    rc = wl_renew_check(l); /* renew_option.c: an interval a later lease made too long */
    pthread_mutex_unlock(&c->mu);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (releasing && (rc = finish_pending_release(l)) != WATCHLOCK_OK)
        return rc;

    int64_t t0_us = wl_now_us(); /* stats.c: the wait time */
    bool continued = false;      /* stats.c: this call resumed a wait kept by an earlier one */
    int64_t until = wl_deadline_after_ms(wait_ms); /* -1: forever */
    uint64_t gen = 0;
    int64_t lease_end = 0, pttl = 0;
    wl_sub_entry *entry = NULL;
    wl_subscriber *sub = NULL;
    bool resume = false;
    if (wait_ms != 0) {
        entry = take_wait(l, &sub, &gen, &lease_end);
        resume = entry != NULL && wl_sub_generation(sub, entry) == gen && wl_now_us() < lease_end;
        if ((continued = resume)) /* stats.c: a kept wait goes on; its time counts from its start */
            t0_us = atomic_load_explicit(&l->wait_t0_us, memory_order_relaxed);
    }
    if (entry == NULL) {
        rc = attempt(l, &pttl);
        if (rc != WATCHLOCK_ETIMEDOUT || wait_ms == 0)
            goto out;
        if ((rc = join_channel(l, &sub, &entry)) != WATCHLOCK_OK)
            return rc;
        lease_end = holder_end(pttl);
    }
    rc = WATCHLOCK_ETIMEDOUT;
    for (;;) {
        if (!resume && (wl_sub_moved(sub, entry) ||
                        (c->server.cluster != NULL && wl_client_sub(c, l->keys.channel, l->keys.channel_len) != sub))) {
            /* Cluster: the channel's slot moved (or its node failed over);
             * follow it. */
            wl_redirect rd;
            bool redirected = wl_sub_take_redirect(sub, &rd);
            wl_sub_leave(sub, entry);
            entry = NULL;
            if (c->server.cluster != NULL && redirected)
                wl_cluster_moved(c->server.cluster, rd.slot, rd.host, rd.port);
            else if (c->server.cluster != NULL)
                wl_cluster_refresh(c->server.cluster, true); /* the slot moved: a fresh map */
            if ((rc = join_channel(l, &sub, &entry)) != WATCHLOCK_OK)
                return rc;
        }
        if (!resume) {
            /* Subscribed before trying, so a release after the try wakes us. */
            bool live;
            int64_t ready_by = until >= 0 && until < lease_end ? until : lease_end;
            gen = wl_sub_ready(sub, entry, ready_by, &live);
            if (atomic_load(&c->closed)) {
                rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->quoted);
                break;
            }
            rc = attempt(l, &pttl);
            if (rc != WATCHLOCK_ETIMEDOUT)
                break;
            lease_end = holder_end(pttl);
        }
        resume = false;
        /* Sleep until woken by a release, but never past the holder's lease. */
        int64_t at = until >= 0 && until < lease_end ? until : lease_end;
        bool woken = at > wl_now_us() && wl_sub_wait(sub, entry, gen, at);
        if (!woken && until >= 0 && wl_now_us() >= until) {
            if (wl_now_us() < lease_end) { /* keep the wait for the next call */
                atomic_store_explicit(&l->wait_t0_us, t0_us, memory_order_relaxed); /* stats.c */
                save_wait(l, sub, entry, gen, lease_end);
                entry = NULL;
            }
            rc = WATCHLOCK_ETIMEDOUT;
            break;
        }
    }
    if (entry != NULL)
        wl_sub_leave(sub, entry);
out:
    wl_stats_acquire(c, rc, sub != NULL, continued, t0_us); /* stats.c; sub: it found the lock held and waited */
    if (rc == WATCHLOCK_ETIMEDOUT)
        return wl_fail(rc, "lock %s is held by another owner%s", l->quoted,
                       wait_ms == 0 ? "" : " and was not released in time");
    return rc;
}

/* ---- release ---- */

/* The release script once more, on a fresh connection whose timeouts end
 * by the hold's deadline. */
static int release_fresh(watchlock_client *c, const wl_release_args *a, int64_t deadline_us, redisReply **out,
                         const char *what)
{
    int64_t cap_ms = (deadline_us - wl_now_us()) / 1000;
    if (cap_ms < 1)
        return wl_fail(WATCHLOCK_ECONN, "%s: not confirmed before the lease ran out", what);
    wl_conn *ctx;
    uint64_t pin = wl_server_pin(&c->server); /* cluster.c: the node stays valid while used */
    wl_server *node = wl_server_route(&c->server, a->argv[0], a->lens[0]);
    int rc = node == NULL ? WATCHLOCK_ECONN : wl_server_connect(node, cap_ms, &ctx);
    wl_server_unpin(&c->server, pin);
    if (rc != WATCHLOCK_OK)
        return rc;
    redisReply *reply = NULL;
    if (wl_append_script(ctx, WL_SCRIPT_RELEASE, true, 1, WL_RELEASE_NARGS, a->argv, a->lens) != 0 ||
        wl_conn_get_reply(ctx, &reply) != 0) {
        rc = wl_conn_error(&c->server, ctx, what);
    } else {
        rc = wl_reply_error(&c->server, reply, what);
        if (rc == WATCHLOCK_OK)
            *out = reply;
        else
            freeReplyObject(reply);
    }
    wl_server_put(&c->server, ctx); /* the node itself without cluster; under it, freed (unpinned node) */
    return rc;
}

/* With io_mu held, for a hold whose count reached 0 and that is marked
 * releasing (no longer renewed): deletes the key if it still holds this
 * hold. A first try whose outcome is unknown (the connection failed) is
 * tried once more on a fresh connection while the lease lasts; a retry that
 * finds no key, or another owner's (a waiter got in after the earlier try
 * ran), means released: the earlier try's outcome is unknown, and the
 * hold was ours until then. If nothing is confirmed, the hold
 * stays (HELD, releasing, not renewed) until a later release confirms it or
 * its lease runs out. */
static int release_hold(watchlock_lock *l, bool retry)
{
    watchlock_client *c = l->client;
    if (retry) /* stats.c: an earlier try's outcome is unknown, sent again */
        wl_stats_release_retry(c);
    wl_release_args a;
    pthread_mutex_lock(&c->mu);
    wl_release_args_make(l, &a);
    int64_t deadline = l->deadline_us;
    uint64_t gen = l->hold_gen;
    pthread_mutex_unlock(&c->mu);

    char what[160];
    wl_what(what, sizeof what, "release", l->quoted);
    redisReply *r = NULL;
    int rc = wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, a.argv, a.lens, &r, what);
    if (wl_script_was_resent()) /* stats.c: sent again on a fresh connection */
        wl_stats_release_retry(c);
    retry = retry || wl_script_was_resent();
    if (rc == WATCHLOCK_ECONN && wl_now_us() < deadline) {
        retry = true;
        wl_stats_release_retry(c); /* stats.c */
        rc = release_fresh(c, &a, deadline, &r, what);
    }
    int64_t result = 0;
    if (r != NULL) {
        result = wl_reply_i64(r);
        freeReplyObject(r);
    }
    pthread_mutex_lock(&c->mu);
    if (gen != l->hold_gen || l->state != WATCHLOCK_HELD) {
        /* Ended meanwhile: its lease ran out (the key is gone by expiry),
         * or the client was closed (close released it). */
        pthread_mutex_unlock(&c->mu);
        return WATCHLOCK_OK;
    }
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&c->mu);
        return rc == WATCHLOCK_ECONN
                   ? wl_fail(rc, "%s: not confirmed by the server (%s); the hold is kept, not renewed, until a "
                                 "later release confirms it or its lease runs out", what, watchlock_last_error())
                   : rc;
    }
    /* After a try whose outcome is unknown (it may have run: DEL +
     * PUBLISH, and a waiter may have taken the name since), "no key" and
     * "another owner" both mean released: the hold was ours until that
     * first try, and nothing says otherwise (issue 19 item 5). Only a
     * first try that is certain (its reply arrived) reports "another
     * owner" as a loss. */
    bool released = result == 1 || (retry && (result == 0 || result == -1));
    wl_unschedule_all(c, l);
    c->held--;
    l->state = WATCHLOCK_UNLOCKED;
    l->hold_count = 0;
    l->hold_gen++;
    l->releasing = false;
    if (!released)
        l->lost_reason = WATCHLOCK_LOST_TAKEN;
    if (released) /* stats.c: hold time; else a loss */
        wl_stats_hold(c, l->acquired_us);
    else
        wl_stats_lost(c, WATCHLOCK_LOST_TAKEN);
    pthread_mutex_unlock(&c->mu);
    if (!released)
        return wl_fail(WATCHLOCK_ENOTOWNER,
                       "lock %s was lost before release (its lease ran out or another owner took it)", l->quoted);
    return WATCHLOCK_OK;
}

/* acquire() on a handle whose last release is not confirmed: finish it first. */
static int finish_pending_release(watchlock_lock *l)
{
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&l->client->mu);
    bool pending = l->state == WATCHLOCK_HELD && l->releasing;
    pthread_mutex_unlock(&l->client->mu);
    int rc = pending ? release_hold(l, true) : WATCHLOCK_OK;
    pthread_mutex_unlock(&l->io_mu);
    return rc == WATCHLOCK_ENOTOWNER ? WATCHLOCK_OK : rc;
}

int watchlock_lock_release(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (l->state == WATCHLOCK_HELD && !l->releasing && wl_now_us() >= l->deadline_us)
        wl_lose(c, l, wl_lock_expiry_reason(l), true); /* past its deadline: LOST, as state() says */
    if (l->state == WATCHLOCK_LOST) {
        bool last = l->hold_count <= 1;
        if (last)
            l->state = WATCHLOCK_UNLOCKED;
        if (l->hold_count > 0)
            l->hold_count--;
        int reason = l->lost_reason;
        wl_release_args a;
        wl_release_args_make(l, &a);
        pthread_mutex_unlock(&c->mu);
        if (last && reason != WATCHLOCK_LOST_TAKEN) {
            /* Declared lost by the local deadline: the key may still hold
             * this hold for the safety margin. Delete it if so (checked, so
             * never someone else's) to wake waiters now. */
            redisReply *r;
            if (wl_run_script(&c->server, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, a.argv, a.lens, &r, "release") == WATCHLOCK_OK)
                freeReplyObject(r);
        }
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "lock %s was lost (%s) before release", l->quoted,
                       watchlock_lost_reason_str(reason));
    }
    if (l->state != WATCHLOCK_HELD) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "lock %s is not held by this handle", l->quoted);
    }
    if (l->hold_count > 1 && !l->releasing) {
        l->hold_count--;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_OK;
    }
    bool retry = l->releasing; /* an earlier release's outcome is unknown */
    l->releasing = true;
    wl_heap_remove(&c->renew_heap, l); /* no more renewals; the deadline still ends it */
    pthread_mutex_unlock(&c->mu);
    rc = release_hold(l, retry);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

/* ---- extend ---- */

int watchlock_lock_extend(watchlock_lock *l, int64_t lease_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (lease_ms < 0 || lease_ms > WATCHLOCK_MAX_LEASE_MS)
        return wl_fail(WATCHLOCK_EINVAL, "extend %s: lease must be 0 (current) or 1 ms .. 30 days, got %" PRId64,
                       l->quoted, lease_ms);
    watchlock_client *c = l->client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (!held_now(l)) {
        if (l->state == WATCHLOCK_HELD && !l->releasing)
            wl_lose(c, l, wl_lock_expiry_reason(l), false); /* past its deadline */
        const char *why = l->state == WATCHLOCK_LOST ? "the lock was lost"
                          : l->state == WATCHLOCK_HELD ? "the lock is being released"
                                                       : "not held by this handle";
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: %s", l->quoted, why);
    }
    if (lease_ms > 0)
        l->lease_ms = lease_ms;
    wl_write w;
    wl_write_prepare(c, l, l->lease_ms, wl_now_us(), &w);
    char ident[WL_IDENT_SIZE], from_s[24], ms_s[24];
    size_t ident_len = wl_ident(l, w.to, ident);
    wl_fmt_i64(from_s, w.from);
    wl_fmt_i64(ms_s, w.ms);
    pthread_mutex_unlock(&c->mu);

    const char *argv[4] = {l->keys.lock, ident, from_s, ms_s};
    size_t lens[4] = {l->keys.lock_len, ident_len, strlen(from_s), strlen(ms_s)};
    char what[160];
    wl_what(what, sizeof what, "extend", l->quoted);
    redisReply *r;
    /* min_replicas: the write counts only once the replicas acknowledged
     * it (WAIT on the connection that wrote), like every other write of a
     * hold; until then it is on the master alone, and a failover would
     * forget it (issue 19 item 1). */
    wl_conn *wrote = NULL;
    wl_conn **keep = c->server.ep.min_replicas > 0 ? &wrote : NULL;
    rc = wl_run_script_keep(&c->server, WL_SCRIPT_RENEW, 1, 3, argv, lens, &r, what, keep);
    int result = WL_WRITE_FAILED;
    if (rc == WATCHLOCK_OK) {
        result = wl_reply_renew(r, 1, 0);
        freeReplyObject(r);
        if (result == WL_WRITE_FAILED)
            rc = wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
    }
    if (rc == WATCHLOCK_OK && result == WL_WRITE_OK && wrote != NULL) {
        rc = wait_replicas(c, wrote, what, "the local deadline was not moved");
        if (rc != WATCHLOCK_OK)
            result = WL_WRITE_FAILED; /* as the watchdog treats a failed WAIT: not counted on */
    }
    wl_server_put(&c->server, wrote); /* as acquire does (NULL-safe) */
    pthread_mutex_lock(&c->mu);
    bool held = wl_write_applied(c, l, &w, result, false, wl_now_us());
    if (held && result == WL_WRITE_OK)
        wl_watchdog_schedule(c, l);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (!held)
        return wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: the lock was lost (another owner, no key, or its lease ran out)",
                       l->quoted);
    return WATCHLOCK_OK;
}

/* ---- queries (no I/O) ---- */

#define READ_LOCK_STATE(l, type, fallback, expr)                                                   \
    do {                                                                                           \
        if ((l) == NULL || (l)->fork_gen != wl_fork_generation())                                  \
            return (fallback);                                                                     \
        watchlock_client *c_ = (l)->client;                                                        \
        pthread_mutex_lock(&c_->mu);                                                               \
        type v_ = (expr);                                                                          \
        pthread_mutex_unlock(&c_->mu);                                                             \
        return v_;                                                                                 \
    } while (0)

/* The state as the caller should see it: a HELD lock past its local
 * deadline is LOST even if the loss timer (starved of CPU, or just resumed
 * after SIGSTOP) has not marked it yet. The first reader past the deadline
 * records the loss through the normal path (the on-lost callback and the
 * lost event fire once), so LOST, once seen, stays: a renewal reply
 * applied later finds the hold over (wl_write_applied). A hold being
 * released just ends (UNLOCKED) when its lease runs out. Handles are never
 * const objects: the cast only undoes the read-only view of the getters. */
static int visible_state(const watchlock_lock *l, int *reason)
{
    if (l->state == WATCHLOCK_HELD && wl_now_us() >= l->deadline_us) {
        watchlock_lock *m = (watchlock_lock *)l;
        wl_lose(m->client, m, wl_lock_expiry_reason(l), true);
    }
    *reason = l->state == WATCHLOCK_LOST ? l->lost_reason : WATCHLOCK_LOST_NONE;
    return l->state;
}

static int state_of(const watchlock_lock *l)
{
    int reason;
    return visible_state(l, &reason);
}

static int lost_reason_of(const watchlock_lock *l)
{
    int reason;
    visible_state(l, &reason);
    return reason;
}

int watchlock_lock_state(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int, WATCHLOCK_UNLOCKED, state_of(l));
}

int watchlock_lock_lost_reason(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int, WATCHLOCK_LOST_NONE, lost_reason_of(l));
}

static int64_t remaining(const watchlock_lock *l)
{
    if (l->state != WATCHLOCK_HELD)
        return 0;
    int64_t left = (l->deadline_us - wl_now_us()) / 1000;
    return left > 0 ? left : 0;
}

int64_t watchlock_lock_remaining_ms(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, remaining(l));
}

int64_t watchlock_lock_fencing_token(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->fence);
}

int64_t watchlock_lock_hold_count(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->state == WATCHLOCK_UNLOCKED ? 0 : l->hold_count);
}

int64_t watchlock_lock_renewals(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->renewals);
}

const char *watchlock_lock_name(const watchlock_lock *l, size_t *len)
{
    if (len)
        *len = l ? l->name_len : 0;
    return l ? l->name : NULL;
}

uint64_t watchlock_lock_id(const watchlock_lock *l)
{
    return l ? l->id : 0;
}

int64_t watchlock_lock_lease(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int64_t, 0, l->lease_ms);
}

/* lost_reason is set by wl_lose and cleared only by the next successful
 * acquire, so once the handle is UNLOCKED it still names the last hold's
 * loss (NONE when that hold was released normally). */
int watchlock_lock_last_lost_reason(const watchlock_lock *l)
{
    READ_LOCK_STATE(l, int, WATCHLOCK_LOST_NONE, l->state == WATCHLOCK_UNLOCKED ? l->lost_reason : lost_reason_of(l));
}
