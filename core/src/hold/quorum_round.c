/*
 * quorum_round.c - a hold's writes on a quorum (Redlock): the watchdog's
 * renewal round on every member at once, the majority verdict of a write,
 * and releases on every member.
 *
 * A renewal round sends every due hold's renewal to every member in one
 * round (renew_round.c's poll loop over the members, batched per member as
 * for one server), then folds each hold's N answers into one: renewed when
 * a majority of members that count (the restart rule, topology/quorum.c)
 * renewed it; not ours when so many members answered "not ours" that no
 * majority can renew it any more; otherwise failed (retried until the local
 * deadline, as a network failure is on one server). The hold layer then
 * applies the verdict as it applies one server's answer: the deadline moves
 * to the send time of the round + lease - drift only on a majority.
 *
 * Runs on the watchdog thread (the round) or the caller's (release),
 * without any library mutex held.
 */
#include "hold/hold.h"
#include "topology/quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wl_quorum_verdict(wl_quorum *q, const int *res, int64_t at)
{
    size_t ok = 0, stale = 0, not_ours = 0;
    for (size_t k = 0; k < q->n; k++) {
        bool counts = wl_quorum_counts(q, k, at);
        if (res[k] == WL_WRITE_OK && counts)
            ok++;
        else if (res[k] == WL_WRITE_STALE && counts)
            stale++;
        else if (res[k] == WL_WRITE_NOT_OWNER)
            not_ours++;
    }
    if (ok >= q->majority)
        return WL_WRITE_OK;
    if (ok + stale >= q->majority)
        return WL_WRITE_STALE;
    if (not_ours > q->n - q->majority)
        return WL_WRITE_NOT_OWNER;
    return WL_WRITE_FAILED;
}

typedef struct by_hold {
    const wl_hold *h;
    size_t i;
} by_hold;

static int cmp_hold(const void *a, const void *b)
{
    const wl_hold *x = ((const by_hold *)a)->h, *y = ((const by_hold *)b)->h;
    return x < y ? -1 : x > y;
}

typedef struct round_ctx {
    wl_quorum *q;
    const by_hold *idx;
    size_t n;
    int *res; /* n * N scratch */
} round_ctx;

/* Whether every hold of the round has its verdict already (a majority
 * renewed it, or it can no longer reach one): the round need not wait for
 * the members that have not answered (a frozen one would hold it up to
 * the command timeout, past short leases' deadlines). */
static bool round_decided(void *arg, const round_entry *all, size_t total)
{
    round_ctx *x = arg;
    size_t N = x->q->n;
    for (size_t j = 0; j < x->n * N; j++)
        x->res[j] = WL_WRITE_FAILED;
    for (size_t j = 0; j < total; j++) {
        by_hold key = {all[j].hold, 0};
        const by_hold *f = bsearch(&key, x->idx, x->n, sizeof *x->idx, cmp_hold);
        size_t k = (size_t)all[j].node->cluster_index;
        if (f != NULL && k < N)
            x->res[f->i * N + k] = all[j].result;
    }
    int64_t now = wl_now_us();
    for (size_t i = 0; i < x->n; i++) {
        int v = wl_quorum_verdict(x->q, x->res + i * N, now);
        if (v != WL_WRITE_OK && v != WL_WRITE_NOT_OWNER)
            return false;
    }
    return true;
}

int wl_quorum_renew_round(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms)
{
    wl_quorum *q = c->quorum;
    size_t N = q->n;
    size_t total = n * N > 0 ? n * N : 1;
    round_entry *all = malloc(total * sizeof *all);
    by_hold *idx = malloc((n > 0 ? n : 1) * sizeof *idx);
    int *res = malloc(total * sizeof *res);
    if (all == NULL || idx == NULL || res == NULL) {
        free(all);
        free(idx);
        free(res);
        for (size_t i = 0; i < n; i++)
            es[i].result = WL_WRITE_FAILED;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        idx[i] = (by_hold){es[i].hold, i};
        for (size_t k = 0; k < N; k++) {
            all[i * N + k] = es[i];
            all[i * N + k].node = q->m[k].srv;
        }
    }
    qsort(idx, n, sizeof *idx, cmp_hold);
    int *scratch = malloc(total * sizeof *scratch);
    round_ctx ctx = {q, idx, n, scratch};
    int trips = wl_renew_round_nodes(c, all, n * N, cap_ms, scratch != NULL ? round_decided : NULL, &ctx);
    free(scratch);
    for (size_t j = 0; j < n * N; j++)
        res[j] = WL_WRITE_FAILED;
    for (size_t j = 0; j < n * N; j++) {
        by_hold key = {all[j].hold, 0};
        const by_hold *f = bsearch(&key, idx, n, sizeof *idx, cmp_hold);
        size_t k = (size_t)all[j].node->cluster_index;
        if (f != NULL && k < N)
            res[f->i * N + k] = all[j].result;
    }
    for (size_t i = 0; i < n; i++)
        es[i].result = wl_quorum_verdict(q, res + i * N, es[i].w.sent);
    free(all);
    free(idx);
    free(res);
    return trips;
}

/* A release's answers, in one place: members known free of our key (they
 * answered deleted, absent, or another owner's key) and members that cannot
 * say (an error reply: the script may not have run, our key may be there;
 * no answer). */
typedef struct release_tally {
    size_t free, released, others, unsure;
    const redisReply *error; /* the first error reply */
} release_tally;

static release_tally release_count(const wl_quorum *q, const wl_qcall *call)
{
    release_tally t = {0, 0, 0, 0, NULL};
    for (size_t k = 0; k < q->n; k++) {
        if (call->state[k] == WL_QM_PENDING)
            continue;
        const redisReply *r = call->state[k] == WL_QM_REPLIED ? call->reply[k] : NULL;
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            t.unsure++;
            if (r != NULL && t.error == NULL)
                t.error = r;
            continue;
        }
        int64_t v = wl_reply_i64(r);
        t.free++;
        t.released += v == 1;
        t.others += v == -1;
    }
    return t;
}

/* A release is decided once a majority is known free of our key, or can no
 * longer be (the rest are read by the drain: their keys, if the release
 * does not reach them, end with their lease, counted in
 * WATCHLOCK_STAT_QUORUM_UNREACHED). An error reply does not end it early:
 * the members still pending may yet confirm. */
static bool release_decided(void *arg, wl_qcall *call)
{
    wl_quorum *q = arg;
    release_tally t = release_count(q, call);
    return t.free >= q->majority || t.unsure > q->n - q->majority;
}

int wl_quorum_release(watchlock_client *c, const wl_release_args *a, int64_t cap_ms, int *result)
{
    wl_quorum *q = c->quorum;
    wl_qcall call;
    memset(&call, 0, sizeof call);
    call.s = (wl_qscript){WL_SCRIPT_RELEASE, NULL, 1, WL_RELEASE_NARGS, a->argv, a->lens};
    call.decided = release_decided;
    call.arg = q;
    wl_quorum_call(q, &call, cap_ms);
    release_tally t = release_count(q, &call);
    char error[120] = "";
    if (t.error != NULL)
        snprintf(error, sizeof error, "; a member answered: %.*s", (int)(t.error->len < 90 ? t.error->len : 90),
                 t.error->str);
    size_t failed = 0; /* the members still pending are the drain's (it counts those that never answer) */
    for (size_t k = 0; k < q->n; k++)
        failed += call.state[k] == WL_QM_FAILED;
    wl_qcall_clear(&call);
    atomic_fetch_add(&q->unreached, (long long)failed);
    *result = t.others > q->n - q->majority ? -1 : t.released > 0 ? 1 : 0;
    if (t.free < q->majority)
        return wl_fail(WATCHLOCK_ECONN,
                       "release: %zu of %zu members confirmed they no longer hold this hold's key, fewer than the "
                       "majority of %zu%s",
                       t.free, q->n, q->majority, error);
    return WATCHLOCK_OK;
}

void wl_quorum_release_best_effort(watchlock_client *c, const wl_release_args *a)
{
    wl_qscript s = {WL_SCRIPT_RELEASE, NULL, 1, WL_RELEASE_NARGS, a->argv, a->lens};
    wl_quorum_send(c->quorum, &s, NULL);
}

/* ---- the quorum's placement (hold.h wl_placement) ---- */

static void quorum_close_conns(watchlock_client *c)
{
    for (size_t i = 1; i < c->quorum->n; i++) { /* member 0 is c->server (renew_round.c) */
        wl_conn_free(c->quorum->m[i].srv->wd_conn);
        c->quorum->m[i].srv->wd_conn = NULL;
    }
}

/* On every member at once, one by one; then the drain, the members'
 * Sentinel watchers and subscribers stop. */
static void quorum_close_release(watchlock_client *c, const wl_release_args *args, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int result;
        wl_quorum_release(c, &args[i], c->server.ep.command_timeout_ms, &result);
    }
    wl_quorum_stop(c->quorum);
}

static void quorum_close(watchlock_client *c)
{
    wl_quorum_close(c->quorum); /* members' idle connections */
}

static void quorum_free(watchlock_client *c)
{
    wl_quorum_free(c->quorum); /* members 1..n-1 (member 0 is c->server) */
    c->quorum = NULL;
}

static int64_t quorum_stat(watchlock_client *c, int which)
{
    wl_quorum *q = c->quorum;
    switch (which) {
    case WATCHLOCK_STAT_QUORUM_RESTARTS: return atomic_load(&q->restarts);
    case WATCHLOCK_STAT_QUORUM_KEPT_OUT: return (int64_t)wl_quorum_kept_out(q);
    case WATCHLOCK_STAT_QUORUM_UNREACHED: return atomic_load(&q->unreached);
    case WATCHLOCK_STAT_QUORUM_LATE_GRANTS: return atomic_load(&q->late_grants);
    case WATCHLOCK_STAT_QUORUM_FENCE_UNAVAILABLE: return atomic_load(&q->fence_unavailable);
    default: return atomic_load(&q->splits);
    }
}

/* The kinds a quorum serves: the plain lock, the read-write lock's sides
 * and the multi-lock. A fair queue or a k-permit semaphore over majorities
 * is not built (docs/design.md: a k-permit semaphore over majorities can
 * admit more than k holders). */
static int quorum_refuse(watchlock_client *c, int kind)
{
    static const char *const refused[] = {[WATCHLOCK_KIND_FAIR] = "fair", [WATCHLOCK_KIND_SEMAPHORE] = "semaphore"};
    const char *word = kind >= 0 && (size_t)kind < sizeof refused / sizeof *refused ? refused[kind] : NULL;
    if (word == NULL)
        return WATCHLOCK_OK;
    return wl_fail(WATCHLOCK_EINVAL,
                   "%s locks are not available on a quorum client (%zu members) in this version: use a plain lock, "
                   "or a client on one server",
                   word, c->quorum->n);
}

const wl_placement wl_quorum_placement = {.renew_round = wl_quorum_renew_round,
                                          .close_conns = quorum_close_conns,
                                          .close_release = quorum_close_release,
                                          .close = quorum_close,
                                          .free = quorum_free,
                                          .stat = quorum_stat,
                                          .inspect = wl_quorum_inspect,             /* quorum_admin.c */
                                          .force_release = wl_quorum_force_release,
                                          .refuse = quorum_refuse};
