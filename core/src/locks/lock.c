/*
 * lock.c - the plain lock: acquire (the fast path, the acquire script, the
 * owner record, WAIT for replicas, waiting by pub/sub between attempts)
 * and extend. The handle is handle.c's, release release.c's, the wait
 * wait.c's, the hold's identity and writes hold/hold.c's.
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
#include "locks/locks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FENCE_TTL_MIN_MS (INT64_C(24) * 3600 * 1000)
#define NO_TTL_POLL_US 1000000   /* a key without expiry (not ours): re-check this often */
/* A digested long name's ":name" key is written by the first acquire of a
 * handle and again once this much time has passed (it has the fence's TTL,
 * at least a day): a 10 KiB name sent with every acquire cost the server
 * more than the rest of the cycle (Lua hashes every byte of an argument). */
#define NAME_REFRESH_US (INT64_C(3600) * 1000000)

/* ---- owner record (written by acquire, read by admin.c) ---- */

typedef struct owner_args {
    bool set;
    char label[WATCHLOCK_MAX_LABEL + 1];
    char host[256];
    char pid[24];
} owner_args;

/* With client->mu held: copies the label (no owner record without one). */
static void owner_args_take(const watchlock_lock *l, owner_args *o)
{
    o->set = l->owner_label != NULL && !l->hold.plain_value; /* the name layout keeps redis-py's keys only */
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
    argv[2] = l->hold.keys.owner;
    lens[2] = l->hold.keys.owner_len;
    argv[6] = o->host;
    lens[6] = strlen(o->host);
    argv[7] = o->pid;
    lens[7] = strlen(o->pid);
    argv[8] = o->label;
    lens[8] = strlen(o->label);
    return 3;
}

int watchlock_lock_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len)
{
    /* the plain lock's table, or its quorum client's (quorum_lock.c) */
    return wl_handle_new(out, c, name, name_len, &wl_one_hold_ops, wl_quorum_kind(c, &wl_plain_lock_ops),
                         WATCHLOCK_KIND_PLAIN);
}

/* ---- acquire ---- */

/* min_replicas: WAIT on the connection that wrote the key (WAIT counts
 * the replicas that have this connection's writes). OK, EREPLICAS when
 * fewer acknowledged within min_replicas_timeout, or a connection error. */
static int wait_replicas(watchlock_client *c, wl_conn *conn, const char *what, const char *outcome)
{
    const wl_endpoint *ep = &c->server.ep;
    long long acked;
    int rc = wl_node_wait_replicas(&c->server, conn, what, &acked);
    if (rc == WATCHLOCK_OK && acked < ep->min_replicas)
        rc = wl_fail(WATCHLOCK_EREPLICAS,
                     "%s: %lld of min_replicas=%d replicas acknowledged the write within %" PRId64 " ms; %s",
                     what, acked, ep->min_replicas, ep->min_replicas_timeout_ms, outcome);
    return rc;
}

/* The common acquire (no owner record, no name key) as one transaction
 * in one round trip, with Lua only for the token:
 *   MULTI
 *   SET lock <ident> NX PX lease
 *   EVALSHA fence-script 1 fence fence-ttl   the token: proto.h WL_FENCE_LUA
 *   EXEC
 * *done: the SET took the key and the fence script gave the token:
 * acquired, *fence is the token. Anything else (someone else holds it, an
 * error reply such as NOSCRIPT, an aborted or refused transaction, a
 * demoted server, a cluster redirect: the keys share a slot, so the
 * transaction runs on the one node that serves it, or not at all) leaves
 * *done false and the acquire script decides one round trip later; it
 * takes a key that already holds this very identity as ours, with a fresh
 * token. The fence script runs even when the SET failed: a contended
 * attempt spends a number, which keeps tokens increasing.
 * MULTI/EXEC is what makes the token follow the order of holds: nothing
 * runs between the SET and the token. Plain pipelined commands could be
 * interleaved with other clients' commands: A's SET, a force-release, B's
 * acquire and token, then A's token would hand A, who holds nothing, a
 * token above the holder B's (issue 19 item 4; tests/c/test_lock.c
 * fast_acquire_token_order).
 * Until issue 29.3 the token was a plain INCR here; it is the fence rule's
 * now, max(counter + 1, server TIME in us), which no plain command can
 * compute: an INCR of a counter restored from an old snapshot handed out
 * tokens below earlier ones (tests/c/test_fence_restart.c).
 * A user whose ACL denies MULTI (no @transaction) sees the commands run
 * one by one and EXEC fail: the script then decides, and its own fence is
 * the token, taken atomically with the check that the key is this hold's;
 * the client sends later acquires straight to the script.
 * Only names this client has acquired before take this path
 * (client->seeded): a name's first acquire takes the script. */
static int acquire_fast(watchlock_client *c, const char *const *argv, const size_t *lens, const char *what,
                        wl_conn **keep, bool *done, int64_t *fence)
{
    static const char *const set_nx[] = {"SET", NULL, NULL, "NX", "PX", NULL};
    static const char *const multi[1] = {"MULTI"}, *const exec[1] = {"EXEC"};
    const char *a1[6], *a2[5];
    size_t l1[6], l2[5];
    char nk[24];
    memcpy(a1, set_nx, sizeof a1);
    a1[1] = argv[0], a1[2] = argv[2], a1[5] = argv[3];
    l1[0] = 3, l1[3] = 2, l1[4] = 2;
    l1[1] = lens[0], l1[2] = lens[2], l1[5] = lens[3];
    bool body = atomic_exchange(&c->fence_body, false);
    wl_script_head(WL_SCRIPT_FENCE, body, 1, nk, a2, l2);
    a2[3] = argv[1], a2[4] = argv[4];
    l2[3] = lens[1], l2[4] = lens[4];
    const wl_cmd cmds[4] = {{1, multi, NULL}, {6, a1, l1}, {5, a2, l2}, {1, exec, NULL}};
    redisReply *r[4];
    *done = false;
    int rc = wl_run_pipeline(&c->server, 4, cmds, r, what, keep);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (r[0]->type == REDIS_REPLY_ERROR && r[0]->str != NULL && strncmp(r[0]->str, "NOPERM", 6) == 0)
        atomic_store(&c->no_fast, true); /* the commands ran one by one: the script decides, now and later */
    const redisReply *x = r[3]; /* EXEC: the two replies, or an error (EXECABORT) / nil */
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 && x->element[1]->type == REDIS_REPLY_ERROR &&
        wl_reply_is_noscript(x->element[1]))
        atomic_store(&c->fence_body, true);
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 && x->element[0]->type == REDIS_REPLY_STATUS &&
        x->element[1]->type == REDIS_REPLY_ARRAY && x->element[1]->elements == 1 &&
        x->element[1]->element[0]->type == REDIS_REPLY_INTEGER &&
        x->element[1]->element[0]->integer >= WL_FENCE_SEEDED) {
        *done = true;
        *fence = x->element[1]->element[0]->integer;
    }
    for (int i = 0; i < 4; i++)
        freeReplyObject(r[i]);
    if (!*done && keep != NULL) { /* the script's own connection is the one to WAIT on */
        wl_server_put(&c->server, *keep);
        *keep = NULL;
    }
    return WATCHLOCK_OK;
}

/* The acquire script met a key of another type: when the lock key is a
 * queued kind's state (proto/qscripts.c: a hash with a "kind"), the name
 * is in use as that kind, and a plain acquire never barges past its queue:
 * EWRONGTYPE, naming the kind. Any other key keeps the server's error. */
static int queued_kind_error(watchlock_lock *l, const char *what, int rc)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", watchlock_last_error());
    const char *argv[3] = {"HGET", l->hold.keys.lock, "kind"};
    size_t lens[3] = {4, l->hold.keys.lock_len, 4};
    const wl_cmd cmd = {3, argv, lens};
    redisReply *r = NULL;
    const char *kind = NULL;
    if (wl_run_pipeline(&l->hold.client->server, 1, &cmd, &r, what, NULL) == WATCHLOCK_OK) {
        if (r->type == REDIS_REPLY_STRING)
            kind = strcmp(r->str, "fair") == 0  ? "a fair lock"
                   : strcmp(r->str, "sem") == 0 ? "a semaphore"
                   : strcmp(r->str, "rw") == 0  ? "a read-write lock"
                                                : NULL;
        freeReplyObject(r);
    }
    if (kind == NULL)
        return wl_fail(rc, "%s", msg);
    return wl_fail(WATCHLOCK_EWRONGTYPE, "%s: the name is in use as %s; a plain lock never barges past its queue "
                                         "(use that kind's handle; see watchlock status)", what, kind);
}

/* One acquire round trip. OK: now held. ETIMEDOUT: someone else holds it,
 * *pttl_ms says for how long (-1 no expiry, -2 gone meanwhile). */
static int attempt(watchlock_lock *l, int64_t *pttl_ms)
{
    watchlock_client *c = l->hold.client;
    wl_release_args old;
    bool drop_old, reentered;
    int rc = wl_attempt_begin(l, false, &old, &drop_old, &reentered); /* wait.c: io_mu, client->mu */
    if (rc != WATCHLOCK_OK || reentered)
        return rc;
    int64_t lease = l->hold.lease_ms;
    char ident[WL_IDENT_SIZE];
    size_t ident_len = wl_ident(&l->hold, 1, ident);
    owner_args owner;
    owner_args_take(l, &owner);
    bool no_expiry = l->no_expiry;
    bool store_name = l->hold.keys.name != NULL &&
                      (l->name_stored_us == 0 || wl_now_us() - l->name_stored_us >= NAME_REFRESH_US);
    pthread_mutex_unlock(&c->mu);
    if (drop_old) {
        wl_release_best_effort(&c->server, &old);
    }

    char lease_s[24], fence_ttl_s[24];
    int64_t fence_ttl = lease * 2 > FENCE_TTL_MIN_MS ? lease * 2 : FENCE_TTL_MIN_MS;
    wl_fmt_i64(lease_s, no_expiry ? 0 : lease); /* 0: the key without expiry (scripts.c) */
    wl_fmt_i64(fence_ttl_s, fence_ttl);
    const char *argv[11] = {l->hold.keys.lock, l->hold.keys.fence, ident, lease_s, fence_ttl_s};
    size_t lens[11] = {l->hold.keys.lock_len, l->hold.keys.fence_len, ident_len, strlen(lease_s), strlen(fence_ttl_s)};
    int nkeys = owner.set ? owner_args_add(l, &owner, argv, lens) : 2; /* + owner key, host, pid, label */
    int nargs = nkeys == 2 ? 3 : 6;
    if (store_name) { /* a digested long name: the hold also stores the name (keys.c) */
        memmove(argv + nkeys + 1, argv + nkeys, (size_t)nargs * sizeof *argv);
        memmove(lens + nkeys + 1, lens + nkeys, (size_t)nargs * sizeof *lens);
        argv[nkeys] = l->hold.keys.name;
        lens[nkeys++] = l->hold.keys.name_len;
        argv[nkeys + nargs] = l->name;
        lens[nkeys + nargs++] = l->name_len;
    }
    char what[160];
    wl_what(what, sizeof what, "acquire", l->hold.quoted);
    int64_t sent = wl_now_us();
    wl_conn *wrote = NULL; /* kept for WAIT when min_replicas is set */
    wl_conn **keep = c->server.ep.min_replicas > 0 ? &wrote : NULL;
    bool acquired = false;
    int64_t value = 0;
    /* A waiter's retries (the name was held last time) go straight to the
     * script, which answers "held" with the remaining lease in one round
     * trip. */
    atomic_uint_fast64_t *seeded = &c->seeded[l->key_hash % WL_SEEDED_SLOTS];
    if (nkeys == 2 && !no_expiry && !l->last_busy && atomic_load_explicit(seeded, memory_order_relaxed) == l->key_hash &&
        !atomic_load_explicit(&c->no_fast, memory_order_relaxed))
        rc = acquire_fast(c, argv, lens, what, keep, &acquired, &value);
    if (rc == WATCHLOCK_OK && !acquired) {
        redisReply *r;
        rc = wl_run_script_keep(&c->server, WL_SCRIPT_ACQUIRE, nkeys, nargs, argv, lens, &r, what, keep, NULL);
        if (rc == WATCHLOCK_ESERVER && strstr(watchlock_last_error(), "WRONGTYPE") != NULL)
            rc = queued_kind_error(l, what, rc);
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
        wl_release_args_make(&l->hold, &a);
        pthread_mutex_unlock(&c->mu);
        wl_release_best_effort(&c->server, &a);
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
        wl_release_args_make(&l->hold, &a);
        pthread_mutex_unlock(&c->mu);
        wl_release_fresh(&c->server, &a, 1, 0, NULL, "release");
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
        wl_release_args_make(&l->hold, &a);
        pthread_mutex_unlock(&c->mu);
        wl_release_best_effort(&c->server, &a);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ECONN,
                       "%s: the server's reply took %" PRId64 " ms, past the local deadline of a %" PRId64
                       " ms lease; the key was given back",
                       what, took_us / 1000, lease);
    }
    rc = wl_hold_begin(c, &l->hold, value, sent, lease, deadline);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}


/* When to look again at a name held by another owner: when its lease
 * ends (wait.c), or, in the name layout, within a second: a redis-py
 * holder there releases without a message on the release channel. */
static int64_t holder_end(const watchlock_lock *l, int64_t pttl_ms)
{
    int64_t end = wl_wait_holder_end(pttl_ms);
    int64_t soon = wl_now_us() + 1000000;
    return l->hold.plain_value && end > soon ? soon : end;
}

int watchlock_lock_acquire(watchlock_lock *l, int64_t wait_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    return l->kind->acquire(l, wait_ms); /* the handle's kind (locks.h) */
}

static int plain_acquire(watchlock_lock *l, int64_t wait_ms)
{
    watchlock_client *c = l->hold.client;
    bool done;
    int rc = wl_acquire_begin(l, &done); /* release.c: reentrant, the interval's check, a pending release */
    if (rc != WATCHLOCK_OK || done)
        return rc;

    int64_t t0_us = wl_now_us(); /* stats.c: the wait time */
        int64_t until = wl_deadline_after_ms(wait_ms); /* -1: forever */
    uint64_t gen = 0;
    int64_t lease_end = 0, pttl = 0;
    wl_sub_entry *entry = NULL;
    wl_subscriber *sub = NULL;
    bool resume = false;
    if (wait_ms != 0) {
        entry = wl_wait_take(l, &sub, &gen, &lease_end);
        resume = entry != NULL && wl_sub_generation(sub, entry) == gen && wl_now_us() < lease_end;
        if (resume) /* stats.c: a kept wait goes on; its time counts from its start */
            t0_us = atomic_load_explicit(&l->wait_t0_us, memory_order_relaxed);
    }
    if (entry == NULL) {
        rc = attempt(l, &pttl);
        if (rc != WATCHLOCK_ETIMEDOUT || wait_ms == 0)
            goto out;
        if ((rc = wl_wait_join(l, &sub, &entry)) != WATCHLOCK_OK)
            return rc;
        lease_end = holder_end(l, pttl);
    }
    rc = WATCHLOCK_ETIMEDOUT;
    for (;;) {
        if (!resume && (wl_sub_moved(sub, entry) ||
                        (wl_server_sharded(&c->server) &&
                         wl_client_sub(c, l->hold.keys.channel, l->hold.keys.channel_len) != sub))) {
            /* Cluster: the channel's slot moved (or its node failed over);
             * follow it. */
            wl_redirect rd;
            bool redirected = wl_sub_take_redirect(sub, &rd);
            wl_sub_leave(sub, entry);
            entry = NULL;
            if (redirected)
                wl_server_moved(&c->server, rd.slot, rd.host, rd.port);
            else
                wl_server_refresh(&c->server, true); /* the slot moved: a fresh map */
            if ((rc = wl_wait_join(l, &sub, &entry)) != WATCHLOCK_OK)
                return rc;
        }
        if (!resume) {
            /* Subscribed before trying, so a release after the try wakes us. */
            bool live;
            int64_t ready_by = until >= 0 && until < lease_end ? until : lease_end;
            gen = wl_sub_ready(sub, entry, ready_by, &live);
            if (atomic_load(&c->closed)) {
                rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
                break;
            }
            rc = attempt(l, &pttl);
            if (rc != WATCHLOCK_ETIMEDOUT)
                break;
            lease_end = holder_end(l, pttl);
        }
        resume = false;
        /* Sleep until woken by a release, but never past the holder's lease. */
        int64_t at = until >= 0 && until < lease_end ? until : lease_end;
        bool woken = at > wl_now_us() && wl_sub_wait(sub, entry, gen, at);
        if (!woken && until >= 0 && wl_now_us() >= until) {
            if (wl_now_us() < lease_end) { /* keep the wait for the next call */
                atomic_store_explicit(&l->wait_t0_us, t0_us, memory_order_relaxed); /* stats.c */
                wl_wait_save(l, sub, entry, gen, lease_end);
                entry = NULL;
            }
            rc = WATCHLOCK_ETIMEDOUT;
            break;
        }
    }
    if (entry != NULL)
        wl_sub_leave(sub, entry);
out:
    wl_acquire_record(l, rc, sub != NULL, t0_us); /* wait.c; sub: it found the lock held and waited */
    if (rc == WATCHLOCK_ETIMEDOUT)
        return wl_fail(rc, "lock %s is held by another owner%s", l->hold.quoted,
                       wait_ms == 0 ? "" : " and was not released in time");
    return rc;
}

/* ---- extend ---- */

int watchlock_lock_extend(watchlock_lock *l, int64_t lease_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    return l->kind->extend(l, lease_ms); /* the handle's kind (locks.h) */
}

int wl_plain_extend(watchlock_lock *l, int64_t lease_ms)
{
    int rc = wl_extend_lease_check(l, lease_ms);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->hold.client;
    if ((rc = wl_extend_begin(l, lease_ms)) != WATCHLOCK_OK) /* handle.c: io_mu, client->mu held on OK */
        return rc;
    wl_write w;
    wl_write_prepare(c, &l->hold, l->hold.lease_ms, wl_now_us(), &w);
    char ident[WL_IDENT_SIZE], from_s[24], ms_s[24];
    size_t ident_len = wl_ident(&l->hold, w.to, ident);
    wl_fmt_i64(from_s, w.from);
    wl_fmt_i64(ms_s, w.ms);
    pthread_mutex_unlock(&c->mu);

    const char *argv[4] = {l->hold.keys.lock, ident, from_s, ms_s};
    size_t lens[4] = {l->hold.keys.lock_len, ident_len, strlen(from_s), strlen(ms_s)};
    char what[160];
    wl_what(what, sizeof what, "extend", l->hold.quoted);
    redisReply *r;
    /* min_replicas: the write counts only once the replicas acknowledged
     * it (WAIT on the connection that wrote), like every other write of a
     * hold; until then it is on the master alone, and a failover would
     * forget it (issue 19 item 1). */
    wl_conn *wrote = NULL;
    wl_conn **keep = c->server.ep.min_replicas > 0 ? &wrote : NULL;
    rc = wl_run_script_keep(&c->server, WL_SCRIPT_RENEW, 1, 3, argv, lens, &r, what, keep, NULL);
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
    bool held = wl_write_applied(c, &l->hold, &w, result, false, wl_now_us());
    if (held && result == WL_WRITE_OK)
        wl_watchdog_schedule(c, &l->hold);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (!held)
        return wl_fail(WATCHLOCK_ENOTOWNER, "extend %s: the lock was lost (another owner, no key, or its lease ran out)",
                       l->hold.quoted);
    return WATCHLOCK_OK;
}


/* The plain lock's table (locks.h): its hold on the client's one server,
 * Sentinel's master or Cluster's slot (a quorum client's plain lock is
 * quorum_lock.c's table). */
const wl_lock_ops wl_plain_lock_ops = {.acquire = plain_acquire,
                                       .release = wl_release_one,
                                       .extend = wl_plain_extend,
                                       .free = wl_handle_free,
                                       .abandon = wl_handle_abandon,
                                       .send_release = wl_send_release_single,
                                       .release_lost = wl_release_lost_single,
                                       .name_layout = true};
