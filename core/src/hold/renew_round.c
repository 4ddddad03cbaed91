/*
 * renew_round.c - the network half of a watchdog round: the renewals of
 * every due hold, sent as pipelines, one per node, all nodes at once.
 *
 * A round's entries are grouped by node (one node unless the URL is a
 * cluster) and, under Cluster, by slot: a script may only touch keys of one
 * slot, so a script call renews up to RENEW_CHUNK holds of the same slot.
 * Every node's pipeline is written and read without blocking, from one
 * poll() loop, so a slow or dead node holds back only its own holds'
 * renewals; the loss timer declares losses on time regardless.
 *
 * Per node: EVALSHA for each chunk, then (pass 2) EVAL for the chunks the
 * node had no script for; with min_replicas a WAIT after each pass's
 * scripts, whose answer decides whether that pass's renewals count.
 * Renewals a node redirected (MOVED/ASK: a resharding or a failover) are
 * sent once more one by one through wl_run_script_keep, which follows
 * redirects (MOVED updates the map, ASK goes to the importing node with
 * ASKING); with min_replicas each is followed by a WAIT on the connection
 * that ran it. A connection that failed or timed out is dropped.
 *
 * Runs on the watchdog thread without any library mutex held; each node's
 * wd_conn belongs to that thread.
 */
#include "hold/hold.h"
#include "topology/quorum.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_CHUNK 100 /* holds renewed by one script call */

typedef struct node_round {
    wl_server *node;
    size_t from, to;   /* es[from, to) go to this node */
    size_t cursor;     /* the next chunk whose reply is due */
    int replies_left;  /* scripts (+ WAIT) not answered yet */
    bool wait;         /* a WAIT follows the scripts */
    bool failed;
} node_round;

/* The end of the chunk that starts at es[i] (entries of one slot, at most
 * RENEW_CHUNK, all of the same need_eval). */
static size_t chunk_end(const round_entry *es, size_t i, size_t to)
{
    size_t j = i + 1;
    while (j < to && j - i < RENEW_CHUNK && es[j].slot == es[i].slot && es[j].need_eval == es[i].need_eval)
        j++;
    return j;
}

/* The renew script's key and three arguments for one hold: its lock key;
 * "<token>.<to>", the epoch it accepts, the lease it sets. */
static void entry_args(const round_entry *e, const char **key, size_t *key_len, const char **a, size_t *al)
{
    *key = e->hold->keys.lock;
    *key_len = e->hold->keys.lock_len;
    a[0] = e->ident;
    a[1] = e->from_s;
    a[2] = e->ms_s;
    al[0] = e->ident_len;
    al[1] = e->from_len;
    al[2] = e->ms_len;
}

/* Appends one batch-renewal script call for es[from, to). */
static int append_chunk(wl_conn *conn, const round_entry *es, size_t from, size_t to, bool use_eval)
{
    size_t n = to - from, argc = 3 + 4 * n; /* command, script, numkeys; n keys; 3 arguments per key */
    const char **argv = malloc(argc * sizeof *argv);
    size_t *lens = malloc(argc * sizeof *lens);
    int rc = -1;
    if (argv != NULL && lens != NULL) {
        char nkeys[24];
        wl_script_head(WL_SCRIPT_RENEW, use_eval, (int64_t)n, nkeys, argv, lens);
        for (size_t i = 0; i < n; i++)
            entry_args(&es[from + i], &argv[3 + i], &lens[3 + i], argv + 3 + n + 3 * i, lens + 3 + n + 3 * i);
        rc = wl_conn_append(conn, (int)argc, argv, lens);
    }
    free(argv);
    free(lens);
    return rc;
}

static void fail_node(node_round *g, const char *why)
{
    g->failed = true;
    if (g->node->wd_conn != NULL)
        wl_conn_fail(g->node->wd_conn, why);
}

/* Queues one pass's commands for a node; false when nothing was queued. */
static bool queue_node(node_round *g, round_entry *es, int64_t t_ms, bool use_eval)
{
    wl_server *node = g->node;
    g->replies_left = 0;
    g->wait = false;
    g->cursor = g->from;
    int count = 0;
    for (size_t i = g->from; i < g->to; i = chunk_end(es, i, g->to))
        if (!use_eval || es[i].need_eval)
            count++;
    if (count == 0 || g->failed)
        return false;
    if (node->wd_conn != NULL && !wl_server_current(node, node->wd_conn)) {
        /* The sentinels named a new master: renew there. */
        wl_conn_free(node->wd_conn);
        node->wd_conn = NULL;
    }
    if (node->wd_conn == NULL && wl_server_connect(node, t_ms, &node->wd_conn) != WATCHLOCK_OK) {
        g->failed = true;
        return false;
    }
    wl_conn_set_timeout(node->wd_conn, t_ms);
    for (size_t i = g->from; i < g->to;) {
        size_t j = chunk_end(es, i, g->to);
        if ((!use_eval || es[i].need_eval) && append_chunk(node->wd_conn, es, i, j, use_eval) != 0) {
            fail_node(g, "out of memory");
            return false;
        }
        i = j;
    }
    g->replies_left = count;
    if (node->ep.min_replicas > 0) { /* the node's own (a quorum member's URL may set it) */
        char n[16], ms[24];
        int64_t budget = node->ep.min_replicas_timeout_ms < t_ms ? node->ep.min_replicas_timeout_ms : t_ms;
        const char *argv[3];
        wl_wait_args(node, budget, n, ms, argv);
        if (wl_conn_append(node->wd_conn, 3, argv, NULL) != 0) {
            fail_node(g, "out of memory");
            return false;
        }
        g->wait = true;
        g->replies_left++;
    }
    return true;
}

/* One reply for node g, in the order its commands were queued. */
static void take_reply(watchlock_client *c, node_round *g, round_entry *es, redisReply *r, bool use_eval)
{
    if (g->replies_left == 1 && g->wait) {
        /* WAIT: without the acknowledgements, this pass's renewals landed
         * on the master only; do not count on them. */
        if (r->type != REDIS_REPLY_INTEGER || r->integer < g->node->ep.min_replicas)
            for (size_t i = g->from; i < g->to; i++)
                if (!use_eval || es[i].need_eval)
                    es[i].result = WL_WRITE_FAILED;
        g->replies_left--;
        return;
    }
    while (g->cursor < g->to && use_eval && !es[g->cursor].need_eval)
        g->cursor = chunk_end(es, g->cursor, g->to);
    size_t from = g->cursor, to = chunk_end(es, from, g->to);
    g->cursor = to;
    g->replies_left--;
    wl_redirect rd;
    if (wl_reply_is_readonly(r)) {
        fail_node(g, "the server became a replica"); /* renew on the new master */
        return;
    }
    if (wl_parse_redirect(r, &rd)) {
        for (size_t i = from; i < to; i++)
            es[i].redirected = true;
        if (rd.kind == WL_REDIRECT_MOVED)
            wl_server_moved(&c->server, rd.slot, rd.host[0] ? rd.host : g->node->host, rd.port);
        return;
    }
    bool noscript = !use_eval && wl_reply_is_noscript(r);
    for (size_t i = from; i < to; i++) {
        /* need_eval is set by the first pass only: in the second it names
         * the entries of that pass, which its WAIT reply (or a failure of
         * the node before it) must still demote. */
        if (!use_eval)
            es[i].need_eval = noscript;
        if (noscript)
            continue;
        /* An unexpected reply (an error for the whole script, such as OOM)
         * says nothing about ownership: retry until the deadline. */
        es[i].result = wl_reply_renew(r, to - from, i - from);
    }
}

/* Reads whatever replies a node's connection has; false on failure. */
static bool drain(watchlock_client *c, node_round *g, round_entry *es, bool use_eval)
{
    redisReply *r;
    int got = 0;
    while (g->replies_left > 0 && (got = wl_conn_next_reply(g->node->wd_conn, &r)) > 0) {
        take_reply(c, g, es, r, use_eval);
        freeReplyObject(r);
        if (g->failed)
            return false;
    }
    return g->replies_left == 0 || got == 0;
}

/* One pass over every node at once. Returns whether anything was sent. */
/* A quorum's round may end before every member answered: once each hold's
 * verdict is decided (quorum_round.c), the members still pending are
 * dropped (their renewals count as failed). NULL for other rounds. */
typedef struct round_stop {
    bool (*fn)(void *arg, const round_entry *es, size_t n);
    void *arg;
    size_t n;
} round_stop;

static bool run_pass(watchlock_client *c, node_round *gs, size_t ng, round_entry *es, int64_t t_ms, bool use_eval,
                     const round_stop *stop)
{
    bool any = false;
    for (size_t k = 0; k < ng; k++)
        any |= queue_node(&gs[k], es, t_ms, use_eval);
    if (!any)
        return false;
    /* The WAIT's own budget comes on top of the round's time. */
    int64_t extra = 0; /* the longest WAIT of the round's nodes (a quorum's members may differ) */
    for (size_t k = 0; k < ng; k++)
        if (gs[k].node->ep.min_replicas > 0 && gs[k].node->ep.min_replicas_timeout_ms > extra)
            extra = gs[k].node->ep.min_replicas_timeout_ms;
    int64_t deadline = wl_now_us() + (t_ms + (extra < t_ms ? extra : t_ms)) * 1000;
    struct pollfd *pfd = calloc(ng, sizeof *pfd);
    size_t *who = calloc(ng, sizeof *who);
    if (pfd == NULL || who == NULL) {
        for (size_t k = 0; k < ng; k++)
            if (gs[k].replies_left > 0)
                fail_node(&gs[k], "out of memory");
    }
    while (pfd != NULL && who != NULL) {
        size_t np = 0;
        for (size_t k = 0; k < ng; k++) {
            node_round *g = &gs[k];
            if (g->failed || g->replies_left == 0)
                continue;
            bool done;
            if (wl_conn_write_some(g->node->wd_conn, &done) != 0 || !drain(c, g, es, use_eval)) {
                g->failed = true;
                continue;
            }
            if (g->replies_left == 0)
                continue;
            pfd[np] = (struct pollfd){.fd = wl_conn_fd(g->node->wd_conn),
                                      .events = (short)(POLLIN | (wl_conn_wants_write(g->node->wd_conn) ? POLLOUT : 0))};
            who[np++] = k;
        }
        if (np == 0)
            break;
        int64_t left = deadline - wl_now_us();
        int n = left > 0 ? poll(pfd, np, (int)((left + 999) / 1000)) : 0;
        if (n == 0 && wl_now_us() >= deadline) {
            for (size_t p = 0; p < np; p++)
                fail_node(&gs[who[p]], "timed out");
            break;
        }
        for (size_t p = 0; n > 0 && p < np; p++) {
            node_round *g = &gs[who[p]];
            if (pfd[p].revents == 0)
                continue;
            if ((pfd[p].revents & (POLLIN | POLLHUP | POLLERR)) && wl_conn_read_some(g->node->wd_conn) != 0)
                g->failed = true;
            else if (!drain(c, g, es, use_eval))
                g->failed = true;
        }
        if (stop != NULL && stop->fn(stop->arg, es, stop->n)) {
            for (size_t k = 0; k < ng; k++)
                if (!gs[k].failed && gs[k].replies_left > 0)
                    fail_node(&gs[k], "not needed: the round is decided");
            break;
        }
    }
    free(pfd);
    free(who);
    for (size_t k = 0; k < ng; k++) {
        node_round *g = &gs[k];
        if (!g->failed)
            continue;
        /* The replies that came before the failure (a timeout, a dropped
         * connection) still count: a round is sent nearest deadline first,
         * so a slow server renews what it answered in time instead of
         * failing the whole round. Under min_replicas none of the pass's
         * renewals counts without its WAIT's answer. */
        size_t answered = g->node->ep.min_replicas > 0 ? g->from : g->cursor;
        for (size_t i = g->from; i < g->to; i++)
            if (!use_eval || es[i].need_eval) {
                if (i >= answered)
                    es[i].result = WL_WRITE_FAILED;
                es[i].need_eval = false;
            }
        if (g->node->wd_conn != NULL) {
            wl_server_put(g->node, g->node->wd_conn); /* frees it; under Sentinel, asks where the master is */
            g->node->wd_conn = NULL;
        }
    }
    return true;
}

static int by_node_then_slot(const void *a, const void *b)
{
    const round_entry *x = a, *y = b;
    int nx = x->node ? x->node->cluster_index : -1, ny = y->node ? y->node->cluster_index : -1;
    if (nx != ny)
        return nx < ny ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* A redirected renewal, once more on its own, following MOVED (the map is
 * updated and the script sent to the slot's new node) and ASK (ASKING +
 * the script at the importing node, the map unchanged) through
 * wl_run_script_keep. With min_replicas it counts only when the WAIT on
 * the connection that ran it (the ASK target's, during a migration) says
 * enough replicas have it. */
static void renew_alone(watchlock_client *c, round_entry *e)
{
    const char *argv[4];
    size_t lens[4];
    entry_args(e, &argv[0], &lens[0], argv + 1, lens + 1);
    redisReply *r;
    wl_conn *wrote = NULL;
    wl_conn **keep = c->server.ep.min_replicas > 0 ? &wrote : NULL;
    if (wl_run_script_keep(&c->server, WL_SCRIPT_RENEW, 1, 3, argv, lens, &r, "renew", keep, NULL) == WATCHLOCK_OK) {
        e->result = wl_reply_renew(r, 1, 0);
        freeReplyObject(r);
        long long acked;
        if (wrote != NULL && e->result == WL_WRITE_OK &&
            (wl_node_wait_replicas(&c->server, wrote, "renew", &acked) != WATCHLOCK_OK ||
             acked < c->server.ep.min_replicas))
            e->result = WL_WRITE_FAILED;
    }
    wl_server_put(&c->server, wrote); /* not pooled under Cluster: freed */
}

/* preset: es[i].node is set by the caller (a quorum's members, quorum_round.c):
 * grouped by node (cluster_index), never routed nor redirected. */
static int renew_round(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms, bool preset,
                       const round_stop *stop)
{
    if (cap_ms < 1)
        cap_ms = 1;
    uint64_t pin = wl_server_pin(&c->server); /* cluster.c: the round's nodes stay valid */
    int64_t t = c->server.ep.command_timeout_ms < cap_ms ? c->server.ep.command_timeout_ms : cap_ms;
    bool routed = wl_server_sharded(&c->server), sharded = routed || preset;
    for (size_t i = 0; i < n; i++) {
        es[i].result = WL_WRITE_FAILED;
        es[i].need_eval = es[i].redirected = false;
        if (preset) {
            es[i].slot = 0;
        } else if (sharded) {
            es[i].slot = wl_key_slot(es[i].hold->keys.lock, es[i].hold->keys.lock_len);
            es[i].node = wl_server_route_slot(&c->server, es[i].slot); /* NULL: stays FAILED, retried */
        } else {
            es[i].slot = 0;
            es[i].node = &c->server;
        }
    }
    if (sharded)
        qsort(es, n, sizeof *es, by_node_then_slot);
    size_t ng = 0;
    node_round *gs = calloc(n ? n : 1, sizeof *gs);
    if (gs == NULL) {
        wl_server_unpin(&c->server, pin);
        return 0;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && es[j].node == es[i].node)
            j++;
        if (es[i].node != NULL)
            gs[ng++] = (node_round){.node = es[i].node, .from = i, .to = j};
        i = j;
    }
    int trips = 0;
    if (run_pass(c, gs, ng, es, t, false, stop))
        trips++;
    if (run_pass(c, gs, ng, es, t, true, stop))
        trips++;
    bool any_failed = false;
    for (size_t k = 0; k < ng; k++)
        any_failed |= gs[k].failed;
    for (size_t i = 0; i < n; i++)
        any_failed |= es[i].node == NULL;
    free(gs);
    if (any_failed && routed)
        wl_server_refresh(&c->server, false); /* a node down or demoted: where are its slots now? */
    /* Redirected renewals once more, one by one (with min_replicas, each
     * with its own WAIT on the connection that ran it). */
    int64_t end = wl_now_us() + cap_ms * 1000;
    for (size_t i = 0; i < n; i++)
        if (es[i].redirected && wl_now_us() < end) {
            renew_alone(c, &es[i]);
            trips++;
        }
    wl_server_unpin(&c->server, pin);
    return trips;
}

int wl_renew_round(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms)
{
    return renew_round(c, es, n, cap_ms, false, NULL);
}

int wl_renew_round_nodes(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms,
                         bool (*decided)(void *arg, const round_entry *es, size_t n), void *arg)
{
    round_stop stop = {decided, arg, n};
    return renew_round(c, es, n, cap_ms, true, decided != NULL ? &stop : NULL);
}

void wl_renew_round_close(watchlock_client *c)
{
    wl_conn_free(c->server.wd_conn);
    c->server.wd_conn = NULL;
    c->placement->close_conns(c); /* a quorum's members (hold.h) */
    wl_server *node;
    uint64_t pin = wl_server_pin(&c->server); /* retired nodes: freed with theirs later */
    for (size_t i = 0; (node = wl_server_node(&c->server, i)) != NULL; i++) {
        wl_conn_free(node->wd_conn);
        node->wd_conn = NULL;
    }
    wl_server_unpin(&c->server, pin);
}
