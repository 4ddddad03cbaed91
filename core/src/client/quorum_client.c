/*
 * quorum_client.c - opening a quorum client (Redlock, topology/quorum.c),
 * its members' view, and the admin calls and check on any client: one
 * server's answer (client.c, admin.c, check.c) on a plain client, every
 * member's and a majority verdict on a quorum.
 */
#include "client/client.h"
#include "topology/quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int watchlock_client_open_quorum(watchlock_client **out, const char *const *urls, size_t n)
{
    if (out == NULL || urls == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "open quorum: NULL argument");
    *out = NULL;
    if (n == 0)
        return wl_fail(WATCHLOCK_EINVAL, "open quorum: no member URL given");
    if (n == 2)
        return wl_fail(WATCHLOCK_EINVAL, "open quorum: 2 members tolerate no failure (the majority of 2 is 2); give "
                                         "1 URL for a plain client or 3 or more (odd recommended) for a quorum");
    if (n > WL_QMAX)
        return wl_fail(WATCHLOCK_EINVAL, "open quorum: %zu members, more than the limit of %d", n, WL_QMAX);
    for (size_t i = 0; i < n; i++) {
        wl_endpoint ep;
        int rc = wl_endpoint_parse(&ep, urls[i]);
        if (rc != WATCHLOCK_OK && n > 1) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", watchlock_last_error());
            return wl_fail(rc, "quorum member %zu: %s", i + 1, msg);
        }
        if (rc != WATCHLOCK_OK)
            return rc;
        bool cluster = ep.kind == WL_KIND_CLUSTER;
        wl_endpoint_clear(&ep);
        if (cluster && n > 1)
            return wl_fail(WATCHLOCK_EINVAL,
                           "quorum member %zu: a cluster cannot be a member; give each member as a single master "
                           "(redis://, rediss://, unix:// or redis-sentinel://)",
                           i + 1);
    }
    watchlock_client *c;
    if (n == 1)
        return watchlock_client_open(out, urls[0]);
    /* member 0 unprobed: wl_quorum_new probes every member at once */
    int rc = wl_client_open_unprobed(&c, urls[0]);
    if (rc != WATCHLOCK_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error()); /* not an argument of wl_fail: the same buffer */
        return wl_fail(rc, "quorum member 1: %s", msg);
    }
    wl_quorum *q;
    if ((rc = wl_quorum_new(&q, &c->server, c->sub, urls, n)) == WATCHLOCK_OK &&
        (rc = wl_quorum_probe_all(q)) != WATCHLOCK_OK) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        wl_quorum_stop(q);
        wl_quorum_free(q);
        wl_fail(rc, "%s", msg);
    }
    if (rc != WATCHLOCK_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        watchlock_client_close(c);
        return wl_fail(rc, "%s", msg);
    }
    for (size_t i = 0; i < n; i++)
        q->m[i].srv->cluster_index = (int)i; /* renew_round.c groups a round's entries by it */
    c->quorum = q;
    c->placement = &wl_quorum_placement; /* hold/quorum_round.c */
    *out = c;
    return WATCHLOCK_OK;
}

size_t watchlock_client_member_count(watchlock_client *c)
{
    if (c == NULL)
        return 0;
    return c->quorum != NULL ? c->quorum->n : 1;
}

static wl_server *member(watchlock_client *c, size_t i)
{
    if (c == NULL)
        return NULL;
    if (c->quorum == NULL)
        return i == 0 ? &c->server : NULL;
    return i < c->quorum->n ? c->quorum->m[i].srv : NULL;
}

const char *watchlock_client_member_label(watchlock_client *c, size_t i)
{
    wl_server *s = member(c, i);
    return s != NULL ? s->ep.label : NULL;
}

int watchlock_client_member_state(watchlock_client *c, size_t i)
{
    if (member(c, i) == NULL)
        return WATCHLOCK_MEMBER_UNKNOWN;
    if (c->quorum == NULL)
        return WATCHLOCK_MEMBER_GRANTED;
    if (!wl_quorum_counts(c->quorum, i, wl_now_us()))
        return WATCHLOCK_MEMBER_RESTARTED;
    return atomic_load(&c->quorum->m[i].unreachable) ? WATCHLOCK_MEMBER_UNREACHABLE : WATCHLOCK_MEMBER_GRANTED;
}

int watchlock_client_member_open(watchlock_client **out, watchlock_client *c, size_t i)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (member(c, i) == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "member %zu: the client has %zu members", i,
                       watchlock_client_member_count(c));
    if (c->quorum == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "member_open: not a quorum client (use the client itself)");
    return watchlock_client_open(out, c->quorum->m[i].url);
}

/* ---- admin ---- */

/* Member i's own answer (topology.h wl_inspect_at), whatever the quorum's. */
int watchlock_client_member_inspect(watchlock_client *c, size_t i, const void *name, size_t name_len, int *held,
                                    int64_t *remaining_ms, int64_t *fence)
{
    int rc = wl_check_client(c);
    if (rc == WATCHLOCK_OK)
        rc = wl_check_name(name, name_len);
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_server *s = member(c, i);
    if (s == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "member %zu: out of range", i);
    wl_keys keys;
    if ((rc = wl_keys_make(&keys, name, name_len)) != WATCHLOCK_OK)
        return rc;
    rc = wl_inspect_at(s, &keys, held, remaining_ms, fence);
    wl_keys_clear(&keys);
    return rc;
}

/* inspect and force_release: the placement's (client.c, hold.h: on a
 * quorum hold/quorum_admin.c's majority verdict). */

int watchlock_client_inspect_owner(watchlock_owner **out, int *held, int64_t *remaining_ms, int64_t *fence,
                                   watchlock_client *c, const void *name, size_t name_len)
{
    if (c == NULL || c->quorum == NULL)
        return wl_client_inspect_owner_one(out, held, remaining_ms, fence, c, name, name_len);
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "out is NULL");
    *out = NULL;
    int h = 0;
    int rc = watchlock_client_inspect(c, name, name_len, &h, remaining_ms, fence);
    if (held)
        *held = h;
    /* held by a majority: the owner record of the first member whose key
     * it names (each member's hold writes its own, admin.c checks it) */
    for (size_t i = 0; rc == WATCHLOCK_OK && h && *out == NULL && i < c->quorum->n; i++) {
        int mh = 0;
        if (wl_client_inspect_owner_at(out, &mh, NULL, NULL, c, member(c, i), name, name_len) == WATCHLOCK_OK && !mh) {
            watchlock_owner_free(*out);
            *out = NULL;
        }
    }
    return rc;
}

/* A quorum's list: each member listed on a client of its own; a name is
 * listed when a majority of members hold it (by whoever: listing does not
 * know owners). ECONN when fewer than a majority of members answered. */
int watchlock_client_list(watchlock_lock_list **out, watchlock_client *c, const void *pattern, size_t pattern_len)
{
    if (c == NULL || c->quorum == NULL || out == NULL)
        return wl_client_list_one(out, c, pattern, pattern_len);
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_quorum *q = c->quorum;
    watchlock_lock_list *lists[WL_QMAX] = {0};
    size_t answered = 0;
    char why[300] = "";
    for (size_t i = 0; i < q->n; i++) {
        watchlock_client *mc;
        int mrc = watchlock_client_open(&mc, q->m[i].url);
        if (mrc == WATCHLOCK_OK) {
            mrc = wl_client_list_one(&lists[i], mc, pattern, pattern_len);
            watchlock_client_close(mc);
        }
        if (mrc == WATCHLOCK_EINVAL || mrc == WATCHLOCK_ENOMEM) {
            rc = mrc;
            break;
        }
        if (mrc == WATCHLOCK_OK)
            answered++;
        else
            snprintf(why, sizeof why, "member %zu: %s", i + 1, watchlock_last_error());
    }
    if (rc == WATCHLOCK_OK && answered < q->majority)
        rc = wl_fail(WATCHLOCK_ECONN, "list: %zu of %zu members answered, fewer than a majority (%s)", answered, q->n,
                     why);
    if (rc == WATCHLOCK_OK)
        rc = wl_lock_list_majority(out, lists, q->n, q->majority);
    for (size_t i = 0; i < q->n; i++)
        watchlock_lock_list_free(lists[i]);
    return rc;
}

/* A quorum's check: every member's findings (prefixed with the member),
 * and the members the restart rule keeps out or that did not answer. */
int watchlock_client_check(watchlock_report **out, watchlock_client *c)
{
    if (c == NULL || c->quorum == NULL || out == NULL)
        return wl_client_check_one(out, c);
    *out = NULL;
    int rc = wl_check_client(c);
    if (rc != WATCHLOCK_OK)
        return rc;
    wl_quorum *q = c->quorum;
    watchlock_report *rep = wl_report_new();
    if (rep == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "check: out of memory");
    size_t answered = 0;
    int64_t now = wl_now_us(), lease = wl_quorum_window_ms(q);
    for (size_t i = 0; i < q->n && rc == WATCHLOCK_OK; i++) {
        const char *label = q->m[i].srv->ep.label;
        if (!wl_quorum_counts(q, i, now))
            rc = wl_report_add(rep, WATCHLOCK_CHECK_RESTARTED,
                               "member %zu (%s) restarted (or was first seen with an uptime below the restart window, "
                               "%lld ms: the longest lease in use by any client, or restart_window=): it does not "
                               "count toward a majority for %lld ms more",
                               i + 1, label, (long long)lease, (long long)(wl_quorum_counts_in_us(q, i, now) / 1000));
        watchlock_client *mc;
        watchlock_report *mr = NULL;
        int mrc = watchlock_client_open(&mc, q->m[i].url);
        if (mrc == WATCHLOCK_OK) {
            mrc = wl_client_check_one(&mr, mc);
            watchlock_client_close(mc);
        }
        if (mrc != WATCHLOCK_OK) {
            if (rc == WATCHLOCK_OK)
                rc = wl_report_add(rep, WATCHLOCK_CHECK_MEMBER_UNREACHABLE,
                                   "member %zu (%s) could not be checked (%s): %s; it counts against every majority "
                                   "until it is back",
                                   i + 1, label, watchlock_strerror(mrc), watchlock_last_error());
            continue;
        }
        answered++;
        for (size_t j = 0; j < watchlock_report_count(mr) && rc == WATCHLOCK_OK; j++)
            rc = wl_report_add(rep, watchlock_report_code(mr, j), "member %zu (%s): %s", i + 1, label,
                               watchlock_report_message(mr, j));
        watchlock_report_free(mr);
    }
    if (rc != WATCHLOCK_OK) {
        watchlock_report_free(rep);
        return rc;
    }
    (void)answered;
    *out = rep;
    return WATCHLOCK_OK;
}
