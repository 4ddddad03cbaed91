/*
 * waiter.c - acquire for the queued kinds (fair lock, semaphore, read-write
 * lock): one call of the queue's acquire script per attempt, which takes the
 * name at once when the queue is empty and enough permits are free, or
 * queues the handle (FIFO) with a liveness lease. While it waits, the
 * client's watchdog renews that lease every third of it, in one batched
 * script call per round for all the client's waiters (hold/live_round.c;
 * the same call purges dead holders and waiters, grants what is free to
 * the head of the queue, and tells whether each waiter has been granted:
 * the watchdog then wakes its thread). The thread calls the acquire script
 * again when the grant's wake-up arrives on its own channel, when the
 * watchdog wakes it, or, when no renewal came for a whole liveness lease,
 * by itself. A grant is made inside whatever script frees the
 * permits (direct hand-off): the waiter's hold key holds its identity and
 * a fresh fencing token is recorded for it; the waiter's call that learns
 * of it sets the full lease, so the local deadline counts from that call's
 * send; or the grant's wake-up message carries the grant and the waiter
 * holds without that call (take_grant, issue 32.2). A waiter that gives up (timeout, client closed) leaves the queue at
 * once (a grant made meanwhile is given back).
 */
#include "locks/locks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *kind_word(const char *kind)
{
    return strcmp(kind, "fair") == 0  ? "a fair lock"
           : strcmp(kind, "sem") == 0 ? "a semaphore"
           : strcmp(kind, "rw") == 0  ? "a read-write lock"
           : strcmp(kind, "plain") == 0 ? "a plain lock"
                                         : "a key of another type";
}

/* What the handle is, for messages: a read-write lock's handle names its side. */
static const char *handle_word(const watchlock_lock *l)
{
    int k = atomic_load(&l->q->kind);
    return k == WATCHLOCK_KIND_WRITE  ? "the write side of a read-write lock"
           : k == WATCHLOCK_KIND_READ ? "the read side of a read-write lock"
           : k == WATCHLOCK_KIND_FAIR ? "a fair lock"
                                      : "a semaphore";
}

static const char *my_kind(const watchlock_lock *l)
{
    int k = atomic_load(&l->q->kind);
    return k == WATCHLOCK_KIND_FAIR ? "fair" : k == WATCHLOCK_KIND_SEMAPHORE ? "sem" : "rw";
}

/* The hold begins (client->mu held): as the plain lock's acquire does. */
static int begin_hold(watchlock_client *c, watchlock_lock *l, int64_t fence, int64_t sent, int64_t lease)
{
    l->token_used = true;
    return wl_hold_begin(c, &l->hold, fence, sent, lease, sent + lease * 1000 - wl_margin_us(c, lease));
}

/* One call of the acquire script. OK: held. ETIMEDOUT: not held (queued
 * when live_ms > 0). */
static int attempt(watchlock_lock *l, int64_t k, int64_t live_ms)
{
    watchlock_client *c = l->hold.client;
    /* a waiter keeps its token across its calls (the queue knows it by it) */
    bool reentered;
    int rc = wl_attempt_begin(l, false, NULL, NULL, &reentered); /* wait.c: io_mu, client->mu */
    if (rc != WATCHLOCK_OK || reentered)
        return rc;
    int64_t lease = l->hold.lease_ms;
    l->q->k = k;
    char ident[WL_IDENT_SIZE];
    size_t ident_len = wl_ident(&l->hold, 1, ident);
    /* The owner record "<host>\n<pid>\n<label>" of a labelled handle, kept
     * per hold in the queue's data (admin: watchlock_name_info_holder_owner) */
    char label[WATCHLOCK_MAX_LABEL + 1];
    bool labelled = l->owner_label != NULL;
    if (labelled)
        snprintf(label, sizeof label, "%s", l->owner_label);
    pthread_mutex_unlock(&c->mu);
    char owner[256 + 24 + WATCHLOCK_MAX_LABEL + 3] = "";
    if (labelled) {
        char host[256];
        if (gethostname(host, sizeof host) != 0)
            host[0] = '\0';
        host[sizeof host - 1] = '\0';
        host[strcspn(host, "\n")] = '\0';
        snprintf(owner, sizeof owner, "%s\n%ld\n%s", host, (long)getpid(), label);
    }

    char cap_s[24], k_s[24], lease_s[24], live_s[24], fttl_s[24];
    wl_fmt_i64(cap_s, l->q->cap);
    wl_fmt_i64(k_s, k);
    wl_fmt_i64(lease_s, lease);
    wl_fmt_i64(live_s, live_ms);
    wl_fmt_i64(fttl_s, WL_Q_FENCE_TTL_MS);
    const char *kind = my_kind(l);
    bool reader = atomic_load(&l->q->kind) == WATCHLOCK_KIND_READ;
    const char *argv[WL_QKEY_COUNT + 13];
    size_t lens[WL_QKEY_COUNT + 13];
    wl_q_keys_argv(l, argv, lens);
    const char *a[13] = {kind,  cap_s, l->q->id, k_s, ident, lease_s, live_s, l->q->keys.hold_prefix,
                         l->q->keys.chan_prefix, wl_publish_command(&c->server), fttl_s, reader ? "1" : "0",
                         owner};
    size_t al[13];
    for (int i = 0; i < 13; i++)
        al[i] = strlen(a[i]);
    al[2] = 16;
    al[4] = ident_len;
    memcpy(argv + WL_QKEY_COUNT, a, sizeof a);
    memcpy(lens + WL_QKEY_COUNT, al, sizeof al);
    char what[160];
    wl_what(what, sizeof what, "acquire", l->hold.quoted);
    int64_t sent = wl_now_us();
    redisReply *r;
    rc = wl_run_script_keep(&c->server, WL_SCRIPT_Q_ACQUIRE, WL_QKEY_COUNT, 13, argv, lens, &r, what, NULL, NULL);
    if (rc == WATCHLOCK_ESERVER && strstr(watchlock_last_error(), "WRONGTYPE") != NULL)
        rc = wl_fail(WATCHLOCK_EWRONGTYPE, "%s: a key of the name holds another type", what);
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&l->io_mu);
        return rc;
    }
    int64_t code = -99, value = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_INTEGER)
        code = r->element[0]->integer;
    if (r->elements >= 2)
        value = wl_reply_i64(r->element[1]);
    l->q->last_server_us = INT64_MAX;
    if (code == 0 && live_ms > 0 && r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER) {
        l->q->last_sent_us = sent; /* queued: a grant from now on was made after this send */
        l->q->last_server_us = r->element[2]->integer;
    }
    char other[32] = "", other_cap[24] = "";
    if (code == -3 && r->elements >= 3) {
        snprintf(other, sizeof other, "%.*s", (int)r->element[1]->len, r->element[1]->str ? r->element[1]->str : "");
        snprintf(other_cap, sizeof other_cap, "%.*s", (int)r->element[2]->len,
                 r->element[2]->str ? r->element[2]->str : "");
    }
    freeReplyObject(r);
    if (code != 1) {
        pthread_mutex_unlock(&l->io_mu);
        if (code == 0)
            return WATCHLOCK_ETIMEDOUT;
        if (code == -3 && strcmp(other, kind) == 0)
            return wl_fail(WATCHLOCK_EWRONGTYPE,
                           "%s: the semaphore has %s permits, this handle was made for %" PRId64
                           " (use permits 0 for the name's count, or watchlock_client_set_permits to change it)",
                           what, other_cap, l->q->cap);
        if (code == -3)
            return wl_fail(WATCHLOCK_EWRONGTYPE, "%s: the name is in use as %s, this handle is %s", what,
                           kind_word(other), handle_word(l));
        if (code == -4)
            return wl_fail(WATCHLOCK_EWRONGTYPE,
                           "%s: the name is not in use as a semaphore, so it has no permit count: give the handle "
                           "one (permits > 0) or set it with watchlock_client_set_permits",
                           what);
        if (code == -5)
            return wl_fail(WATCHLOCK_EINVAL, "%s: asks for %" PRId64 " permits, the semaphore has %" PRId64, what, k,
                           value);
        return wl_fail(WATCHLOCK_ESERVER, "%s: unexpected reply from server", what);
    }
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closed)) {
        l->token_used = true;
        pthread_mutex_unlock(&c->mu);
        int64_t res;
        wl_q_script(l, "release", &res, NULL); /* closed while in flight: give it back (best effort) */
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ECLOSED, "%s: client closed", what);
    }
    if (wl_now_us() >= sent + lease * 1000 - wl_margin_us(c, lease)) {
        l->token_used = true;
        pthread_mutex_unlock(&c->mu);
        int64_t res;
        wl_q_script(l, "release", &res, NULL);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ECONN, "%s: the server's reply came past the local deadline of a %" PRId64
                                        " ms lease; the hold was given back", what, lease);
    }
    wl_watchdog_wait_end(c, &l->hold); /* a waiter no more: the heap entry becomes the hold's */
    rc = begin_hold(c, l, value, sent, lease);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

/* The grant a wake-up carries (qscripts.c grant_head publishes
 * "g1 <ident> <fence> <ttl ms> <server time µs>" on the waiter's own
 * channel; older versions publish an empty message): the waiter holds
 * without another call of the acquire script (issue 32.2) when the message
 * names its waiting identity and was made after the latest call that
 * queued it (its server time is later than that call's, so a message of an
 * earlier grant, given back or expired since, is never taken), and the
 * local deadline counted from that call's send (before the grant, so no
 * later than the server's expiry) leaves at least half of the grant's TTL.
 * A grant shorter than the lease (the waiter's liveness lease, qscripts.c)
 * is taken only by a hold the watchdog renews with no cap: its first
 * renewal is due within a third of that TTL. Anything else (another
 * identity, an unparsable or old message, too late, the client closed)
 * returns ETIMEDOUT: the caller calls the script, as before. OK: held. */
static int take_grant(watchlock_lock *l, wl_subscriber *sub, wl_sub_entry *entry)
{
    char msg[WL_SUB_MSG_MAX], *end;
    if (wl_sub_last_message(sub, entry, msg) == 0 || strncmp(msg, "g1 ", 3) != 0)
        return WATCHLOCK_ETIMEDOUT;
    char *ident_m = msg + 3, *sp = strchr(ident_m, ' ');
    if (sp == NULL)
        return WATCHLOCK_ETIMEDOUT;
    size_t ident_m_len = (size_t)(sp - ident_m);
    int64_t v[3];
    const char *p = sp;
    for (int i = 0; i < 3; i++) {
        if (*p != ' ' || p[1] < '0' || p[1] > '9')
            return WATCHLOCK_ETIMEDOUT;
        errno = 0;
        long long x = strtoll(p + 1, &end, 10);
        if (errno != 0)
            return WATCHLOCK_ETIMEDOUT;
        v[i] = x;
        p = end;
    }
    if (*p != '\0')
        return WATCHLOCK_ETIMEDOUT;
    int64_t fence = v[0], ttl = v[1], at_us = v[2];
    watchlock_client *c = l->hold.client;
    int rc = WATCHLOCK_ETIMEDOUT;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    int64_t lease = l->hold.lease_ms;
    char ident[WL_IDENT_SIZE];
    size_t ident_len = wl_ident(&l->hold, 1, ident);
    if (atomic_load(&c->closed) || l->token_used || l->token_lease_ms != lease || l->hold.state == WATCHLOCK_HELD ||
        ident_len != ident_m_len || memcmp(ident, ident_m, ident_len) != 0 || l->q->last_server_us == INT64_MAX ||
        at_us <= l->q->last_server_us || ttl <= 0 || ttl > lease)
        goto out;
    bool renewed = l->hold.auto_renew && l->hold.max_renewals <= 0 && l->hold.max_hold_ms <= 0;
    if (ttl < lease && !renewed)
        goto out;
    int64_t sent = l->q->last_sent_us;
    int64_t deadline = sent + ttl * 1000 - wl_margin_us(c, ttl);
    if (deadline - wl_now_us() < ttl * 1000 / 2)
        goto out; /* delivered late: ask the server */
    wl_watchdog_wait_end(c, &l->hold); /* a waiter no more: the heap entry becomes the hold's */
    l->token_used = true;
    rc = wl_hold_begin(c, &l->hold, fence, sent, lease, deadline);
    if (ttl < lease && l->hold.state == WATCHLOCK_HELD)
        wl_watchdog_renew_by(c, &l->hold, sent + ttl * 1000 / 3);
out:
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

/* The watchdog's batched liveness renewal (hold/live_round.c): the keys
 * and arguments of this waiter (client->mu held; pointers into the handle). */
void wl_q_live_args(wl_hold *h, wl_live_args *a)
{
    watchlock_lock *l = wl_lock_of(h);
    for (int i = 0; i < WL_LIVE_NKEYS; i++) {
        a->key[i] = l->q->keys.k[i];
        a->key_len[i] = l->q->keys.len[i];
    }
    a->id = l->q->id;
    a->id_len = 16;
    a->hold_prefix = l->q->keys.hold_prefix;
    a->hold_prefix_len = l->q->keys.hold_prefix_len;
    a->chan_prefix = l->q->keys.chan_prefix;
    a->chan_prefix_len = l->q->keys.chan_prefix_len;
}

/* Its answer (no library mutex held): granted (2) or no longer queued (0)
 * wakes the waiting thread, whose next acquire call takes the grant (or
 * enqueues again); a lost channel message costs at most one round. */
void wl_q_live_done(wl_hold *h, int result)
{
    watchlock_lock *l = wl_lock_of(h);
    atomic_fetch_add(&l->q->live_reports, 1);
    if (result == 1)
        return;
    pthread_mutex_lock(&l->q->wake_mu);
    if (l->q->wentry != NULL)
        wl_sub_poke(l->q->wsub, l->q->wentry);
    pthread_mutex_unlock(&l->q->wake_mu);
}

static void set_wake_entry(watchlock_lock *l, wl_subscriber *sub, wl_sub_entry *entry)
{
    pthread_mutex_lock(&l->q->wake_mu);
    l->q->wsub = sub;
    l->q->wentry = entry;
    pthread_mutex_unlock(&l->q->wake_mu);
}

/* The waiter gives up: out of the queue now (a grant made meanwhile is
 * given back). Best effort: a waiter that cannot say so leaves when its
 * liveness lease ends. */
static void leave(watchlock_lock *l)
{
    int64_t res;
    pthread_mutex_lock(&l->io_mu);
    wl_q_script(l, "leave", &res, NULL);
    pthread_mutex_unlock(&l->io_mu);
}

int watchlock_lock_set_wait_slices(watchlock_lock *l, int on)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    atomic_store(&l->wait_slices, on != 0); /* wait.c: the calls up to forget_wait are one wait (stats) */
    if (l->q != NULL)
        atomic_store(&l->q->keep_place, on != 0);
    return rc;
}

int watchlock_lock_forget_wait(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_wait_give_up(l);
    if (l->q != NULL && atomic_exchange(&l->q->queued, false))
        leave(l); /* a queued kind's kept place: one round trip */
    return WATCHLOCK_OK;
}

int wl_q_acquire(watchlock_lock *l, int64_t k, int64_t wait_ms)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&c->mu);
    /* k 0 (watchlock_lock_acquire): what a held handle holds (reentrant),
     * else the kind's share (1 permit for a semaphore): a new hold never
     * inherits the last hold's k or side (issue 29.9) */
    if (k == 0)
        k = wl_held_now(l) ? l->q->k : l->q->share;
    if (wl_held_now(l)) { /* reentrant: no round trip */
        if (k != l->q->k) {
            pthread_mutex_unlock(&c->mu);
            return wl_fail(WATCHLOCK_EINVAL, "acquire %s: this handle holds %" PRId64 " permits, not %" PRId64,
                           l->hold.quoted, l->q->k, k);
        }
        l->hold.hold_count++;
        pthread_mutex_unlock(&c->mu);
        return WATCHLOCK_OK;
    }
    bool releasing = l->hold.state == WATCHLOCK_HELD && l->hold.releasing;
    rc = wl_renew_check(&l->hold);
    int64_t live_ms = wl_q_liveness_ms(l->hold.lease_ms);
    pthread_mutex_unlock(&c->mu);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (k < 1 || (l->q->cap > 0 && k > l->q->cap))
        return wl_fail(WATCHLOCK_EINVAL, "acquire %s: permits must be 1 .. %" PRId64 ", got %" PRId64,
                       l->hold.quoted, l->q->cap > 0 ? l->q->cap : INT64_C(2147483648), k);
    if (releasing && (rc = wl_lock_finish_pending_release(l)) != WATCHLOCK_OK)
        return rc;
    wl_wait_forget(l);

    int64_t t0_us = wl_now_us();
    int64_t until = wl_deadline_after_ms(wait_ms); /* -1: forever */
    /* A kept place (the previous slice timed out): a try ends the wait */
    bool kept = atomic_exchange(&l->q->queued, false);
    pthread_mutex_lock(&c->mu);
    int64_t kept_k = l->q->kept_k;
    pthread_mutex_unlock(&c->mu);
    /* ... and so does another k (issue 29.10): the queue grants a place the
     * k it was queued with, so a slice that asks for another leaves it and
     * queues again (at the tail) with the k it asks for now */
    if (kept && (wait_ms == 0 || kept_k != k))
        leave(l);
    wl_subscriber *sub = NULL;
    wl_sub_entry *entry = NULL;
    bool queued = false;
    if (wait_ms == 0) {
        rc = attempt(l, k, 0);
        goto out;
    }
    /* Subscribed to the waiter's own channel before the first call, so a
     * grant made right after it wakes us. */
    char what[160];
    wl_what(what, sizeof what, "acquire", l->hold.quoted);
    if ((rc = wl_client_join(c, l->q->keys.chan, l->q->keys.chan_len, what, &sub, &entry)) != WATCHLOCK_OK)
        return rc;
    bool live;
    int64_t ready_by = wl_now_us() + live_ms * 1000 / 3;
    uint64_t gen = wl_sub_ready(sub, entry, until >= 0 && until < ready_by ? until : ready_by, &live);
    set_wake_entry(l, sub, entry);
    bool registered = false;
    for (;;) {
        if (atomic_load(&c->closed)) {
            rc = wl_fail(WATCHLOCK_ECLOSED, "acquire %s: client closed while waiting", l->hold.quoted);
            break; /* the liveness lease takes it out of the queue */
        }
        gen = wl_sub_generation(sub, entry);
        rc = attempt(l, k, live_ms);
        if (rc != WATCHLOCK_ETIMEDOUT)
            break;
        queued = true;
        if (!registered) {
            /* From now on the client's watchdog renews this waiter's
             * liveness in its batched rounds (issue 22.1) and wakes this
             * thread when a renewal finds it granted or dropped. */
            pthread_mutex_lock(&c->mu);
            rc = wl_watchdog_wait_begin(c, &l->hold, live_ms);
            pthread_mutex_unlock(&c->mu);
            if (rc != WATCHLOCK_OK) {
                leave(l);
                break;
            }
            registered = true;
        }
        /* Wait for the grant's message on the waiter's channel or the
         * watchdog's poke; on neither, sleep on while the watchdog's
         * renewals come (each a third of the liveness lease). Without them
         * for a whole liveness lease (the watchdog stuck on the network),
         * this thread calls the script itself. */
        bool timed_out = false;
        for (;;) {
            unsigned seen = atomic_load(&l->q->live_reports);
            int64_t now = wl_now_us();
            if (until >= 0 && now >= until) {
                timed_out = true;
                break;
            }
            int64_t at = now + live_ms * 1000;
            if (until >= 0 && until < at)
                at = until;
            if (wl_sub_wait(sub, entry, gen, at) || wl_sub_moved(sub, entry))
                break;
            if (!(until >= 0 && wl_now_us() >= until) && atomic_load(&l->q->live_reports) == seen)
                break;
        }
        if (timed_out) {
            if (atomic_load(&l->q->keep_place)) {
                pthread_mutex_lock(&c->mu);
                l->q->kept_k = k;
                pthread_mutex_unlock(&c->mu);
                atomic_store(&l->q->queued, true); /* the next slice resumes it; forget_wait leaves */
            } else {
                leave(l);
            }
            rc = WATCHLOCK_ETIMEDOUT;
            break;
        }
        if (!wl_sub_moved(sub, entry) && (rc = take_grant(l, sub, entry)) != WATCHLOCK_ETIMEDOUT)
            break; /* held on the wake-up's grant (or the hold could not begin) */
        if (wl_sub_moved(sub, entry)) { /* Cluster: the channel's slot moved; follow it */
            wl_redirect rd;
            bool redirected = wl_sub_take_redirect(sub, &rd);
            set_wake_entry(l, NULL, NULL);
            wl_sub_leave(sub, entry);
            entry = NULL;
            if (redirected)
                wl_server_moved(&c->server, rd.slot, rd.host, rd.port);
            else
                wl_server_refresh(&c->server, true);
            if ((rc = wl_client_join(c, l->q->keys.chan, l->q->keys.chan_len, what, &sub, &entry)) != WATCHLOCK_OK) {
                leave(l);
                sub = NULL;
                break;
            }
            set_wake_entry(l, sub, entry);
        }
    }
    pthread_mutex_lock(&c->mu);
    wl_watchdog_wait_end(c, &l->hold);
    pthread_mutex_unlock(&c->mu);
    set_wake_entry(l, NULL, NULL);
    if (entry != NULL)
        wl_sub_leave(sub, entry);
out:
    wl_acquire_record(l, rc, queued, t0_us);
    if (rc == WATCHLOCK_ETIMEDOUT)
        return wl_fail(rc, "%s %s: no permit%s free for this handle%s", kind_word(my_kind(l)), l->hold.quoted,
                       k > 1 ? "s" : "", wait_ms == 0 ? "" : " in time (it left the queue)");
    return rc;
}
