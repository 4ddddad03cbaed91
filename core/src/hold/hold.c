/*
 * hold.c - one hold's identity and the writes that move its lease, whatever
 * the lock kind: the key holds "<token>.<epoch>"; renewals and extend send
 * (token, epoch, epoch_to, ms); wl_write_prepare picks the epoch and lowers
 * the local deadline to what the write may leave on the server,
 * wl_write_applied takes its reply (docs/design.md, hold identity).
 * Called with client->mu held.
 */
#include "hold/hold.h"

#include <inttypes.h>
#include <string.h>

int64_t wl_margin_us(const watchlock_client *c, int64_t lease_ms)
{
    /* 1% of the lease + the fixed safety margin (URL option safety_margin),
     * never more than half the lease. */
    int64_t margin = lease_ms * 10 + c->server.ep.safety_margin_ms * 1000;
    int64_t half = lease_ms * 500;
    return margin < half ? margin : half;
}

size_t wl_ident(const wl_hold *h, int64_t epoch, char *buf)
{
    size_t n = strlen(h->token); /* 32 hex digits, or a caller's token without '.' (plain_value) */
    memcpy(buf, h->token, n);
    if (h->plain_value) { /* redis-py's layout: the value is the token, whatever the epoch */
        buf[n] = '\0';
        return n;
    }
    buf[n++] = '.';
    if (epoch < 0) {
        buf[n] = '\0';
        return n;
    }
    return n + wl_fmt_i64(buf + n, epoch);
}

void wl_release_args_make(const wl_hold *h, wl_release_args *a)
{
    a->argv[0] = h->keys.lock;
    a->lens[0] = h->keys.lock_len;
    a->lens[1] = wl_ident(h, -1, a->prefix);
    a->argv[1] = a->prefix;
    a->argv[2] = h->keys.channel;
    a->lens[2] = h->keys.channel_len;
    a->argv[3] = wl_publish_command(&h->client->server);
    a->lens[3] = strlen(a->argv[3]);
}

void wl_write_prepare(watchlock_client *c, wl_hold *h, int64_t ms, int64_t sent, wl_write *w)
{
    if (ms != h->epoch_ms) { /* a different lease: a new epoch */
        h->epoch_to++;
        h->epoch_ms = ms;
    }
    *w = (wl_write){.gen = h->hold_gen, .from = h->epoch, .to = h->epoch_to, .ms = ms, .sent = sent};
    /* From now on this write may land at any moment, and leave `ms` from
     * then on: never count on more than that. */
    int64_t d = sent + ms * 1000 - wl_margin_us(c, ms);
    if (d < h->deadline_us)
        wl_set_deadline(c, h, d);
}

bool wl_write_applied(watchlock_client *c, wl_hold *h, const wl_write *w, int result, bool fire,
                      int64_t now)
{
    if (h->hold_gen != w->gen || h->state != WATCHLOCK_HELD)
        return false; /* that hold is over */
    if (now >= h->deadline_us) {
        /* Too late: the hold was LOST at its deadline (state() may already
         * have said so), and LOST stays LOST whatever the reply says. */
        wl_lose(c, h, wl_lock_expiry_reason(h), fire);
        return false;
    }
    switch (result) {
    case WL_WRITE_OK:
        if (w->to > h->epoch)
            h->epoch = w->to;
        if (w->to == h->epoch_to) { /* the newest lease: count on it */
            int64_t d = w->sent + w->ms * 1000 - wl_margin_us(c, w->ms);
            if (d > h->deadline_us)
                wl_set_deadline(c, h, d);
            if (w->sent > h->confirmed_us)
                h->confirmed_us = w->sent;
        }
        h->renew_failing = false;
        return true;
    case WL_WRITE_STALE: /* a newer write of ours is on the server */
        if (w->to < h->epoch_to)
            return true;
        break; /* cannot happen for the newest epoch: treat as not ours */
    case WL_WRITE_NOT_OWNER:
        if (h->releasing)
            return true; /* our own release got there first */
        break;
    default:
        h->renew_failing = true;
        return true;
    }
    wl_lose(c, h, WATCHLOCK_LOST_TAKEN, fire);
    return false;
}

void wl_release_best_effort(wl_server *srv, const wl_release_args *a)
{
    redisReply *r;
    if (wl_run_script(srv, WL_SCRIPT_RELEASE, 1, WL_RELEASE_NARGS, a->argv, a->lens, &r, "release") == WATCHLOCK_OK)
        freeReplyObject(r);
}

int wl_release_fresh(wl_server *srv, const wl_release_args *a, size_t n, int64_t cap_ms, redisReply **out,
                     const char *what)
{
    wl_conn *ctx;
    uint64_t pin = wl_server_pin(srv); /* cluster.c: the node stays valid while used */
    wl_server *node = wl_server_route(srv, a[0].argv[0], a[0].lens[0]);
    int rc = node == NULL ? WATCHLOCK_ECONN : wl_server_connect(node, cap_ms, &ctx);
    wl_server_unpin(srv, pin);
    if (rc != WATCHLOCK_OK)
        return rc;
    size_t queued = 0;
    while (queued < n &&
           wl_append_script(ctx, WL_SCRIPT_RELEASE, true, 1, WL_RELEASE_NARGS, a[queued].argv, a[queued].lens) == 0)
        queued++;
    if (queued < n)
        rc = wl_conn_error(srv, ctx, what);
    for (size_t i = 0; i < queued; i++) {
        redisReply *reply = NULL;
        if (wl_conn_get_reply(ctx, &reply) != 0) {
            if (rc == WATCHLOCK_OK)
                rc = wl_conn_error(srv, ctx, what);
            break;
        }
        int got = wl_reply_error(srv, reply, what);
        if (got == WATCHLOCK_OK && out != NULL && n == 1)
            *out = reply;
        else
            freeReplyObject(reply);
        if (rc == WATCHLOCK_OK)
            rc = got;
    }
    wl_server_put(srv, ctx); /* the node itself without cluster; under it, freed (unpinned node) */
    return rc;
}

/* ---- the renew interval (its options: locks/renew_option.c) ---- */

int64_t wl_renew_interval_us(const wl_hold *h)
{
    int64_t iv_us;
    if (h->renew_den > 0)
        iv_us = h->lease_ms * 1000 / h->renew_den * h->renew_num +
                h->lease_ms * 1000 % h->renew_den * h->renew_num / h->renew_den;
    else if (h->interval_ms > 0 && h->interval_ms < h->lease_ms)
        iv_us = h->interval_ms * 1000;
    else /* 0 = lease/3; a lease changed while held keeps renewing */
        iv_us = h->lease_ms / 3 * 1000;
    return iv_us > 0 ? iv_us : 1000;
}

int wl_renew_check(const wl_hold *h)
{
    if (h->renew_den == 0 && h->interval_ms > 0 && h->interval_ms >= h->lease_ms)
        return wl_fail(WATCHLOCK_EINVAL,
                       "acquire %s: renew interval %" PRId64 " ms is not below the lease of %" PRId64
                       " ms (set a shorter interval, or a fraction such as \"1/3\")",
                       h->quoted, h->interval_ms, h->lease_ms);
    return WATCHLOCK_OK;
}
