/*
 * release.c - the release of a handle that is one hold (the plain, quorum
 * and queued kinds' release entry, locks.h): the count, the LOST path and
 * the kind's send_release; the plain lock's send_release on one server
 * (the release script on a pooled connection, once more on a fresh one when
 * the first try could not be confirmed); a release left pending (the hold
 * is not renewed, and kept until confirmed or expired) that the next call
 * on the handle finishes; the one-hold kinds' acquire prologue (per call
 * and per attempt) and their answers to the hold layer.
 */
#include "locks/locks.h"

#include <stdio.h>
#include <string.h>

/* The plain lock's release on one server (the send_release of the plain
 * and one-server tables, locks.h): the release script on a pooled
 * connection; a first try whose outcome is unknown (the connection failed)
 * is sent once more on a fresh connection whose timeouts end by the hold's
 * deadline. */
int wl_send_release_single(watchlock_lock *l, const wl_release_args *a, int64_t deadline_us, const char *what,
                           int64_t *result, bool *resent)
{
    watchlock_client *c = l->hold.client;
    redisReply *r = NULL;
    int rc = wl_run_script_keep(&c->server, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, a->argv, a->lens, &r, what, NULL,
                                resent);
    if (rc == WATCHLOCK_ECONN && wl_now_us() < deadline_us) {
        if (*resent) /* stats.c: counted once per sending, as the caller counts *resent once */
            wl_stats_release_retry(c);
        *resent = true;
        int64_t cap_ms = (deadline_us - wl_now_us()) / 1000;
        rc = cap_ms < 1 ? wl_fail(WATCHLOCK_ECONN, "%s: not confirmed before the lease ran out", what)
                        : wl_release_fresh(&c->server, a, 1, cap_ms, &r, what);
    }
    if (r != NULL) {
        *result = wl_reply_i64(r);
        freeReplyObject(r);
    }
    return rc;
}

/* The plain lock's release of a hold declared lost by its local deadline
 * (release_lost, locks.h): the key may still hold this hold for the safety
 * margin; delete it if so (checked, so never someone else's) to wake
 * waiters now. */
void wl_release_lost_single(watchlock_lock *l, const wl_release_args *a, int reason)
{
    if (reason != WATCHLOCK_LOST_TAKEN)
        wl_release_best_effort(&l->hold.client->server, a);
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
    watchlock_client *c = l->hold.client;
    if (retry) /* stats.c: an earlier try's outcome is unknown, sent again */
        wl_stats_release_retry(c);
    wl_release_args a;
    pthread_mutex_lock(&c->mu);
    wl_release_args_make(&l->hold, &a);
    int64_t deadline = l->hold.deadline_us;
    uint64_t gen = l->hold.hold_gen;
    pthread_mutex_unlock(&c->mu);

    char what[160];
    wl_what(what, sizeof what, "release", l->hold.quoted);
    bool resent = false;
    int64_t result = 0;
    int rc = l->kind->send_release(l, &a, deadline, what, &result, &resent); /* the kind's (locks.h) */
    if (resent) /* stats.c: sent again on a fresh connection */
        wl_stats_release_retry(c);
    retry = retry || resent;
    pthread_mutex_lock(&c->mu);
    if (gen != l->hold.hold_gen || l->hold.state != WATCHLOCK_HELD) {
        /* Ended meanwhile: its lease ran out (the key is gone by expiry),
         * or the client was closed (close released it). */
        pthread_mutex_unlock(&c->mu);
        return WATCHLOCK_OK;
    }
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&c->mu);
        if (rc != WATCHLOCK_ECONN)
            return rc;
        char why[400]; /* a copy: the message is formatted into the same per-thread buffer */
        snprintf(why, sizeof why, "%s", watchlock_last_error());
        return wl_fail(rc, "%s: not confirmed by the server (%s); the hold is kept, not renewed, until a later "
                           "release confirms it or its lease runs out", what, why);
    }
    /* After a try whose outcome is unknown (it may have run: DEL +
     * PUBLISH, and a waiter may have taken the name since), "no key" and
     * "another owner" both mean released: the hold was ours until that
     * first try, and nothing says otherwise (issue 19 item 5). Only a
     * first try that is certain (its reply arrived) reports "another
     * owner" as a loss. */
    bool released = result == 1 || (retry && (result == 0 || result == -1));
    wl_unschedule_all(c, &l->hold);
    c->held--;
    l->hold.state = WATCHLOCK_UNLOCKED;
    l->hold.hold_count = 0;
    l->hold.hold_gen++;
    l->hold.releasing = false;
    if (!released)
        l->hold.lost_reason = WATCHLOCK_LOST_TAKEN;
    if (released) /* stats.c: hold time; else a loss */
        wl_stats_hold(c, l->hold.acquired_us);
    else
        wl_stats_lost(c, WATCHLOCK_LOST_TAKEN);
    pthread_mutex_unlock(&c->mu);
    if (!released)
        return wl_fail(WATCHLOCK_ENOTOWNER,
                       "lock %s was lost before release (its lease ran out or another owner took it)", l->hold.quoted);
    return WATCHLOCK_OK;
}

/* acquire() on a handle whose last release is not confirmed: finish it first. */
int wl_lock_finish_pending_release(watchlock_lock *l)
{
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&l->hold.client->mu);
    bool pending = l->hold.state == WATCHLOCK_HELD && l->hold.releasing;
    pthread_mutex_unlock(&l->hold.client->mu);
    int rc = pending ? release_hold(l, true) : WATCHLOCK_OK;
    pthread_mutex_unlock(&l->io_mu);
    return rc == WATCHLOCK_ENOTOWNER ? WATCHLOCK_OK : rc;
}

/* The acquire prologue of a kind whose handle is one hold (issue 30.5;
 * lock.c, quorum_lock.c): a handle that holds now counts one more
 * (reentrant, no round trip: *done); an interval a later lease made too
 * long is refused (hold.c wl_renew_check); a release whose outcome is
 * unknown is finished first. OK with !*done: go on to the attempt. */
int wl_acquire_begin(watchlock_lock *l, bool *done)
{
    watchlock_client *c = l->hold.client;
    *done = false;
    pthread_mutex_lock(&c->mu);
    if (wl_held_now(l)) { /* reentrant: no round trip */
        l->hold.hold_count++;
        pthread_mutex_unlock(&c->mu);
        *done = true;
        return WATCHLOCK_OK;
    }
    bool releasing = l->hold.state == WATCHLOCK_HELD && l->hold.releasing;
    int rc = wl_renew_check(&l->hold); /* an interval a later lease made too long (hold.c) */
    pthread_mutex_unlock(&c->mu);
    if (rc == WATCHLOCK_OK && releasing)
        rc = wl_lock_finish_pending_release(l);
    return rc;
}

bool wl_attempt_enter(watchlock_lock *l)
{
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (wl_held_now(l)) { /* another thread got this handle meanwhile */
        l->hold.hold_count++;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return true;
    }
    if (l->hold.state == WATCHLOCK_HELD && !l->hold.releasing) /* past its deadline, not yet marked */
        wl_lose(c, &l->hold, wl_lock_expiry_reason(&l->hold), true);
    return false;
}

int wl_attempt_begin(watchlock_lock *l, bool fresh, wl_release_args *old, bool *drop_old, bool *reentered)
{
    watchlock_client *c = l->hold.client;
    if (drop_old != NULL)
        *drop_old = false;
    if ((*reentered = wl_attempt_enter(l)))
        return WATCHLOCK_OK;
    /* A hold lost by its local deadline may still have its key for the
     * safety margin: the caller deletes it (checked, never someone else's)
     * so that the new hold, which has a new token, need not wait for it. */
    if (old != NULL && l->hold.state == WATCHLOCK_LOST && l->hold.lost_reason != WATCHLOCK_LOST_TAKEN &&
        l->token_used) {
        wl_release_args_make(&l->hold, old);
        *drop_old = true;
    }
    int64_t lease = l->hold.lease_ms;
    /* A new hold gets a new token. Failed attempts keep theirs, so that a
     * retry after a lost reply finds its own key (a waiter: the queue knows
     * it by it); a different lease gets a new one too, so that an old
     * attempt landing late never sets a lease this hold does not count on. */
    if (fresh || l->token_used || (l->token_lease_ms != lease && !l->hold.plain_value)) { /* (a token set: kept) */
        if (wl_random_token(l->hold.token) != 0) {
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_unlock(&l->io_mu);
            return wl_fail(WATCHLOCK_EINTERNAL, "acquire %s: getrandom failed", l->hold.quoted);
        }
        l->token_used = false;
        l->token_lease_ms = lease;
    }
    return WATCHLOCK_OK;
}

/* The one-hold kinds' answers to the hold layer (hold.h wl_hold_ops;
 * locks.h wl_one_hold_ops): each finds the handle that embeds the hold. */
void wl_one_hold_unref(wl_hold *h)
{
    wl_lock_unref(wl_lock_of(h));
}

void wl_one_hold_abandoned_end(watchlock_client *c, wl_hold *h)
{
    wl_abandoned_end(c, wl_lock_of(h));
}

int wl_one_hold_release(wl_hold *h)
{
    return watchlock_lock_release(wl_lock_of(h));
}

void *wl_one_hold_owner(wl_hold *h)
{
    return wl_lock_of(h);
}

const wl_hold_ops wl_one_hold_ops = {.unref = wl_one_hold_unref,
                                     .abandoned_end = wl_one_hold_abandoned_end,
                                     .release = wl_one_hold_release,
                                     .owner = wl_one_hold_owner};

int watchlock_lock_release(watchlock_lock *l)
{
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    return l->kind->release(l); /* the handle's kind (locks.h) */
}

int wl_release_one(watchlock_lock *l)
{
    int rc;
    watchlock_client *c = l->hold.client;
    pthread_mutex_lock(&l->io_mu);
    pthread_mutex_lock(&c->mu);
    if (l->hold.state == WATCHLOCK_HELD && !l->hold.releasing && wl_now_us() >= l->hold.deadline_us)
        wl_lose(c, &l->hold, wl_lock_expiry_reason(&l->hold), true); /* past its deadline: LOST, as state() says */
    if (l->hold.state == WATCHLOCK_LOST) {
        bool last = l->hold.hold_count <= 1;
        if (last)
            l->hold.state = WATCHLOCK_UNLOCKED;
        if (l->hold.hold_count > 0)
            l->hold.hold_count--;
        int reason = l->hold.lost_reason;
        wl_release_args a;
        wl_release_args_make(&l->hold, &a);
        pthread_mutex_unlock(&c->mu);
        if (last) /* the kind's: a queued kind's queue hands it on (issue 29.11) */
            l->kind->release_lost(l, &a, reason);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "lock %s was lost (%s) before release", l->hold.quoted,
                       watchlock_lost_reason_str(reason));
    }
    if (l->hold.state != WATCHLOCK_HELD) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return wl_fail(WATCHLOCK_ENOTOWNER, "lock %s is not held by this handle", l->hold.quoted);
    }
    if (l->hold.hold_count > 1 && !l->hold.releasing) {
        l->hold.hold_count--;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&l->io_mu);
        return WATCHLOCK_OK;
    }
    bool retry = l->hold.releasing; /* an earlier release's outcome is unknown */
    l->hold.releasing = true;
    wl_heap_remove(&c->renew_heap, &l->hold); /* no more renewals; the deadline still ends it */
    pthread_mutex_unlock(&c->mu);
    rc = release_hold(l, retry);
    pthread_mutex_unlock(&l->io_mu);
    return rc;
}

