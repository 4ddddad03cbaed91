/*
 * quorum.c - the quorum topology (Redlock): the members, the restart rule,
 * one call written to every member at once, and the drain.
 *
 * Members. Member 0 is the client's own server (opened as any client's);
 * members 1..n-1 are wl_servers made here from their URLs, each with its
 * own credentials, TLS and Sentinel watcher, and a subscriber for wake-ups.
 *
 * The restart rule, the restart window's records and the members'
 * identity (run_id) live in quorum_rule.c.
 *
 * One call. wl_quorum_call writes the script to every member before it
 * reads any reply, then reads them all from one poll() loop, and stops as
 * soon as the caller's predicate says the outcome is decided. Members
 * still pending then get the caller's give-back script pipelined behind
 * (a late grant is released, token-checked; when the predicate said the
 * call succeeded, the drain sends it behind a grant that comes too late
 * only: an acquire keeps the late grants that come within its validity,
 * see locks/quorum_lock.c), and their connections go to the drain: a
 * thread that reads and drops their replies and returns each connection
 * to its member's pool once every reply on it was read (freed when one is
 * still missing at its time limit), so a late reply is never matched to a
 * later request.
 *
 * Threads: calls run on the caller's thread without any library mutex;
 * the drain thread takes q->drain->mu (a leaf) to pick up connections; q->mu
 * (a leaf) guards the run_ids.
 */
#include "topology/quorum.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "quorum member <i+1>: <last error>" (copied first: wl_fail writes the
 * buffer watchlock_last_error() returns). */
static int member_fail(int rc, size_t i)
{
    char msg[400];
    snprintf(msg, sizeof msg, "%s", watchlock_last_error());
    return wl_fail(rc, "quorum member %zu: %s", i + 1, msg);
}

static void on_member_switch(void *arg)
{
    wl_qmember *m = arg;
    wl_subscriber_reconnect(m->sub);
}

static int member_open(wl_quorum *q, size_t i, const char *url)
{
    wl_qmember *m = &q->m[i];
    if ((m->url = strdup(url ? url : "")) == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    if (i == 0) {
        wl_quorum_check_install(q, 0);
        return WATCHLOCK_OK;
    }
    if ((m->srv = calloc(1, sizeof *m->srv)) == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    int rc = wl_server_init(m->srv, url);
    if (rc != WATCHLOCK_OK) {
        free(m->srv);
        m->srv = NULL;
        return member_fail(rc, i);
    }
    if (m->srv->ep.kind == WL_KIND_CLUSTER)
        return wl_fail(WATCHLOCK_EINVAL,
                       "quorum member %zu (%s): a cluster cannot be a member; give each member as a single master "
                       "(redis://, rediss://, unix:// or redis-sentinel://)",
                       i + 1, m->srv->ep.label);
    wl_quorum_check_install(q, i);
    if ((m->sub = wl_subscriber_new(m->srv)) == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    if ((rc = wl_sentinel_start(m->srv, on_member_switch, m)) != WATCHLOCK_OK)
        return member_fail(rc, i);
    return WATCHLOCK_OK;
}

int wl_quorum_new(wl_quorum **out, wl_server *first, wl_subscriber *first_sub, const char *const *urls, size_t n)
{
    *out = NULL;
    if (first->ep.kind == WL_KIND_CLUSTER)
        return wl_fail(WATCHLOCK_EINVAL,
                       "quorum member 1 (%s): a cluster cannot be a member; give each member as a single master "
                       "(redis://, rediss://, unix:// or redis-sentinel://)",
                       first->ep.label);
    wl_quorum *q = calloc(1, sizeof *q);
    if (q == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    pthread_mutex_init(&q->mu, NULL);
    int rc = wl_qdrain_new(q, &q->drain);
    q->n = n;
    q->majority = n / 2 + 1;
    q->m[0].srv = first;
    q->m[0].sub = first_sub;
    for (size_t i = 0; rc == WATCHLOCK_OK && i < n; i++)
        rc = member_open(q, i, urls[i]);
    if (rc != WATCHLOCK_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", watchlock_last_error());
        wl_quorum_stop(q);
        wl_quorum_free(q);
        return wl_fail(rc, "%s", msg);
    }
    for (size_t i = 0; i < n; i++)
        if (q->m[i].srv->ep.restart_window_ms > q->window_opt_ms)
            q->window_opt_ms = q->m[i].srv->ep.restart_window_ms;
    *out = q;
    return WATCHLOCK_OK;
}

void wl_quorum_stop(wl_quorum *q)
{
    if (q == NULL)
        return;
    if (q->stop_probes != NULL)
        q->stop_probes(q); /* the open's probes still waiting on a member (quorum_open.c) */
    wl_qdrain_stop(q->drain);
    for (size_t i = 1; i < q->n; i++)
        if (q->m[i].srv != NULL) {
            wl_sentinel_stop(q->m[i].srv);
            wl_subscriber_stop(q->m[i].sub);
        }
}

void wl_quorum_close(wl_quorum *q)
{
    for (size_t i = 1; q != NULL && i < q->n; i++)
        if (q->m[i].srv != NULL)
            wl_server_close(q->m[i].srv);
}

void wl_quorum_free(wl_quorum *q)
{
    if (q == NULL)
        return;
    for (size_t i = 0; i < q->n; i++) {
        wl_qmember *m = &q->m[i];
        if (i > 0 && m->srv != NULL) {
            wl_subscriber_free(m->sub);
            wl_conn_free(m->srv->wd_conn);
            m->srv->wd_conn = NULL;
            wl_server_destroy(m->srv);
            free(m->srv);
        }
        free(m->url);
    }
    if (q->m[0].srv != NULL && q->m[0].srv->check == &q->m[0].check)
        q->m[0].srv->check = NULL; /* the client's server outlives the quorum */
    wl_qdrain_free(q->drain);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* ---- one call on every member ---- */

enum { K_SCRIPT, K_WAIT, K_IGNORE, K_RECORD };
#define LINGER_MIN_US 100
#define LINGER_MAX_US 1000
#define KQ 8

typedef struct mcall {
    wl_conn *conn;
    int kinds[KQ];
    int head, tail;
    bool reused;  /* conn came from the pool */
    bool got_any; /* a reply was read on it */
    int64_t rec_lease; /* K_RECORD: the lease it records */
} mcall;

static bool push_script(mcall *mc, const wl_qscript *s, bool use_body)
{
    bool body = use_body || s->script < 0 || !wl_scripts_have_sha();
    if (s->script < 0) {
        size_t argc = 3 + (size_t)(s->nkeys + s->nargs);
        const char *argv[40];
        size_t lens[40];
        if (argc > 40)
            return false;
        char nk[24];
        wl_fmt_i64(nk, s->nkeys);
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = s->body, lens[1] = strlen(s->body);
        argv[2] = nk, lens[2] = strlen(nk);
        for (size_t j = 3; j < argc; j++)
            argv[j] = s->argv[j - 3], lens[j] = s->lens[j - 3];
        return wl_conn_append(mc->conn, (int)argc, argv, lens) == 0;
    }
    return wl_append_script(mc->conn, s->script, body, s->nkeys, s->nargs, s->argv, s->lens) == 0;
}

static bool push_wait(mcall *mc, wl_server *srv)
{
    char n[16], ms[24];
    const char *argv[3];
    wl_wait_args(srv, srv->ep.min_replicas_timeout_ms, n, ms, argv);
    if (wl_conn_append(mc->conn, 3, argv, NULL) != 0)
        return false;
    mc->kinds[mc->tail++ % KQ] = K_WAIT;
    return true;
}

static void member_failed(wl_quorum *q, wl_qcall *call, mcall *mc, size_t i, const char *why)
{
    call->state[i] = WL_QM_FAILED;
    atomic_store(&q->m[i].unreachable, true);
    if (mc->conn != NULL) {
        wl_conn_fail(mc->conn, why);
        wl_server_put(q->m[i].srv, mc->conn);
        mc->conn = NULL;
    }
}

/* One reply of member i, in the order its commands went out. */
static void take(wl_quorum *q, wl_qcall *call, mcall *mc, size_t i, redisReply *r)
{
    wl_server *srv = q->m[i].srv;
    int kind = mc->kinds[mc->head++ % KQ];
    if (kind == K_RECORD) {
        wl_qrecord_reply(q, i, r, call->sent_us, mc->rec_lease);
        freeReplyObject(r);
    } else if (kind == K_SCRIPT && call->s.script >= 0 && wl_reply_is_noscript(r)) {
        /* the member had no script: it did not run; once more with its body
         * (a WAIT queued behind the EVALSHA answers for nothing) */
        freeReplyObject(r);
        for (int k = mc->head; k < mc->tail; k++)
            mc->kinds[k % KQ] = K_IGNORE;
        if (!push_script(mc, &call->s, true)) {
            member_failed(q, call, mc, i, "out of memory");
            return;
        }
        mc->kinds[mc->tail++ % KQ] = K_SCRIPT;
        if (call->wait_replicas && srv->ep.min_replicas > 0 && !push_wait(mc, srv))
            member_failed(q, call, mc, i, "out of memory");
        return;
    } else if (kind == K_SCRIPT) {
        call->reply[i] = r;
    } else if (kind == K_WAIT) {
        call->acked[i] = r->type == REDIS_REPLY_INTEGER && r->integer >= srv->ep.min_replicas;
        freeReplyObject(r);
    } else {
        freeReplyObject(r);
    }
    if (mc->head == mc->tail) {
        call->state[i] = call->reply[i] != NULL ? WL_QM_REPLIED : WL_QM_FAILED;
        atomic_store(&q->m[i].unreachable, call->reply[i] == NULL);
        wl_server_put(srv, mc->conn);
        mc->conn = NULL;
    }
}

/* The members still pending once the call is decided (or out of time):
 * the give-back behind, and their connections to the drain. */
static void hand_off(wl_quorum *q, wl_qcall *call, mcall *ms, int64_t cap_ms, bool timed_out)
{
    for (size_t i = 0; i < q->n; i++) {
        mcall *mc = &ms[i];
        if (call->state[i] != WL_QM_PENDING || mc->conn == NULL)
            continue;
        int left = mc->tail - mc->head, grant_at = -1;
        for (int k = mc->head; k < mc->tail; k++)
            if (mc->kinds[k % KQ] == K_SCRIPT)
                grant_at = mc->tail - k; /* counted down: the value `left` has when it is read */
        bool hold_back = call->after != NULL && call->keep_until_us > 0 && grant_at > 0;
        if (call->after != NULL && !hold_back) {
            mcall tmp = *mc;
            if (push_script(&tmp, call->after, true))
                left++, grant_at += grant_at > 0;
        }
        bool done;
        wl_conn_write_some(mc->conn, &done);
        /* A timed-out member (frozen, or a slow link) may still run what
         * was written to it: the give-back behind it runs there too. */
        wl_qdrain_add(q->drain, q->m[i].srv, mc->conn, left, call->after != NULL ? grant_at : -1, cap_ms,
                      hold_back ? call->after : NULL, call->keep_until_us);
        mc->conn = NULL;
        if (timed_out) {
            call->state[i] = WL_QM_FAILED;
            atomic_store(&q->m[i].unreachable, true);
        }
    }
}

/* Writes the call to member i: a pooled connection, or a fresh one (its
 * INFO first: the member's connection check). */
static void start_member(wl_quorum *q, wl_qcall *call, mcall *mc, size_t i, bool fresh)
{
    wl_server *srv = q->m[i].srv;
    mc->head = mc->tail = 0;
    mc->got_any = false;
    /* Connections are opened one member after the other: a member whose
     * connect just failed (a host down, SYNs dropped) would cost every call
     * its connect timeout before the members after it are written to. It
     * is skipped instead until one connect timeout has passed. */
    int64_t now = wl_now_us();
    if (now < atomic_load(&q->m[i].down_until_us)) {
        member_failed(q, call, mc, i, "down");
        return;
    }
    /* The open decided without it (quorum_open.c): its probe, still waiting
     * on it, opens the connection calls will use once it answered; until
     * then a call skips it rather than wait on it a second time. */
    if (atomic_load(&q->m[i].probing)) {
        member_failed(q, call, mc, i, "not answered its probe yet");
        return;
    }
    int rc = fresh ? wl_server_connect(srv, 0, &mc->conn) : wl_server_get(srv, &mc->conn, &mc->reused);
    if (fresh)
        mc->reused = false;
    if (rc != WATCHLOCK_OK) {
        if (rc == WATCHLOCK_ECONN)
            atomic_store(&q->m[i].down_until_us, wl_now_us() + srv->ep.connect_timeout_ms * 1000);
        member_failed(q, call, mc, i, "connect failed");
        return;
    }
    if (wl_qrecord_due(q, i, now)) {
        char buf[24];
        const char *argv[3];
        size_t lens[3];
        wl_qrecord_args(q, buf, argv, lens, &mc->rec_lease);
        wl_qscript rec = {.script = -1, .body = wl_qrecord_body, .nkeys = 1, .nargs = 2, .argv = argv, .lens = lens};
        if (push_script(mc, &rec, true))
            mc->kinds[mc->tail++ % KQ] = K_RECORD;
    }
    if (!push_script(mc, &call->s, false)) {
        member_failed(q, call, mc, i, "out of memory");
        return;
    }
    mc->kinds[mc->tail++ % KQ] = K_SCRIPT;
    if (call->wait_replicas && srv->ep.min_replicas > 0) {
        call->acked[i] = false;
        if (!push_wait(mc, srv)) {
            member_failed(q, call, mc, i, "out of memory");
            return;
        }
    }
    bool done;
    if (wl_conn_write_some(mc->conn, &done) != 0)
        member_failed(q, call, mc, i, "write failed");
}

/* A pooled connection that fails at once with EOF/reset, before any reply
 * (the member restarted, or closed it while idle): once more on a fresh
 * connection, as the single-server path does. Everything a call sends is
 * safe to send again (an acquire finds its own identity, releases and
 * raises are idempotent). False when that does not apply. */
static bool retry_fresh(wl_quorum *q, wl_qcall *call, mcall *mc, size_t i)
{
    if (mc->conn == NULL || !mc->reused || mc->got_any ||
        (wl_conn_err(mc->conn) != WL_CERR_EOF && wl_conn_err(mc->conn) != WL_CERR_RESET))
        return false;
    wl_server_put(q->m[i].srv, mc->conn); /* failed: freed */
    mc->conn = NULL;
    start_member(q, call, mc, i, true);
    return true;
}

size_t wl_quorum_call(wl_quorum *q, wl_qcall *call, int64_t cap_ms)
{
    mcall ms[WL_QMAX];
    memset(ms, 0, sizeof ms);
    if (cap_ms < 1)
        cap_ms = 1;
    call->sent_us = wl_now_us();
    call->keep_until_us = 0;
    for (size_t i = 0; i < q->n; i++) {
        call->state[i] = call->skip[i] ? WL_QM_SKIPPED : WL_QM_PENDING;
        call->reply[i] = NULL;
        call->acked[i] = true;
        if (!call->skip[i])
            start_member(q, call, &ms[i], i, false);
    }
    int64_t deadline = call->sent_us + cap_ms * 1000;
    struct pollfd pfd[WL_QMAX];
    size_t who[WL_QMAX], replied = 0;
    bool decided = false, timed_out = false;
    size_t settled = 0;     /* members no longer pending when decided() was last asked */
    int64_t linger_end = 0; /* once decided: until when the members still pending are read here */
    for (;;) {
        size_t np = 0;
        for (size_t i = 0; i < q->n; i++) {
            mcall *mc = &ms[i];
            if (call->state[i] != WL_QM_PENDING)
                continue;
            bool done;
            redisReply *r;
            int got = 0;
            if (wl_conn_write_some(mc->conn, &done) != 0) {
                if (!retry_fresh(q, call, mc, i))
                    member_failed(q, call, mc, i, "write failed");
                continue;
            }
            while (mc->conn != NULL && (got = wl_conn_next_reply(mc->conn, &r)) > 0) {
                mc->got_any = true;
                take(q, call, mc, i, r);
            }
            if (got < 0) {
                member_failed(q, call, mc, i, "protocol error");
                continue;
            }
            if (call->state[i] != WL_QM_PENDING)
                continue;
            pfd[np] = (struct pollfd){.fd = wl_conn_fd(mc->conn),
                                      .events = (short)(POLLIN | (wl_conn_wants_write(mc->conn) ? POLLOUT : 0))};
            who[np++] = i;
        }
        size_t now_settled = 0;
        for (size_t i = 0; i < q->n; i++)
            now_settled += call->state[i] != WL_QM_PENDING && call->state[i] != WL_QM_SKIPPED;
        if (!decided && now_settled != settled && call->decided != NULL) {
            settled = now_settled;
            decided = call->decided(call->arg, call);
            if (decided) {
                /* The members still pending are read here a little longer
                 * (as long as the majority took, 100 us to 1 ms): their
                 * replies are usually just behind, and a connection whose
                 * every reply was read goes straight back to the pool; the
                 * drain (a thread wake-up, and a give-back for a late grant)
                 * is left to members that are really late. */
                int64_t now = wl_now_us(), took = now - call->sent_us;
                linger_end = now + (took < LINGER_MIN_US ? LINGER_MIN_US : took > LINGER_MAX_US ? LINGER_MAX_US : took);
                if (linger_end > deadline)
                    linger_end = deadline;
            }
        }
        if (decided && (np == 0 || wl_now_us() >= linger_end))
            break;
        if (np == 0) {
            if (now_settled < q->n) /* a member failed and was retried: go round once more */
                for (size_t i = 0; i < q->n; i++)
                    np += call->state[i] == WL_QM_PENDING;
            if (np == 0)
                break;
            continue;
        }
        int64_t until = decided ? linger_end : deadline;
        int64_t left = until - wl_now_us();
        int got = left > 0 ? poll(pfd, np, (int)((left + 999) / 1000)) : 0;
        if (got <= 0 && wl_now_us() >= until) {
            /* undecided: the members still pending are unreachable, their
             * replies left to the drain; decided: they go to the drain */
            timed_out = !decided;
            break;
        }
        for (size_t p = 0; got > 0 && p < np; p++)
            if (pfd[p].revents != 0 && wl_conn_read_some(ms[who[p]].conn) != 0 &&
                !retry_fresh(q, call, &ms[who[p]], who[p]))
                member_failed(q, call, &ms[who[p]], who[p], "read failed");
    }
    for (size_t i = 0; i < q->n; i++)
        replied += call->state[i] == WL_QM_REPLIED;
    if (decided || timed_out)
        hand_off(q, call, ms, cap_ms, timed_out);
    return replied;
}

void wl_qcall_clear(wl_qcall *call)
{
    for (size_t i = 0; i < WL_QMAX; i++) {
        if (call->reply[i] != NULL)
            freeReplyObject(call->reply[i]);
        call->reply[i] = NULL;
    }
}

void wl_quorum_send(wl_quorum *q, const wl_qscript *s, const bool *skip)
{
    for (size_t i = 0; i < q->n; i++) {
        if ((skip != NULL && skip[i]) || atomic_load(&q->m[i].probing))
            continue; /* a member still being probed got no call (start_member) */
        mcall mc = {0};
        bool reused;
        if (wl_server_get(q->m[i].srv, &mc.conn, &reused) != WATCHLOCK_OK)
            continue;
        bool done;
        if (!push_script(&mc, s, true) || wl_conn_write_some(mc.conn, &done) != 0) {
            wl_conn_free(mc.conn);
            continue;
        }
        /* with its body (EVAL): a member that never ran it has no script */
        wl_qdrain_add(q->drain, q->m[i].srv, mc.conn, 1, -1, q->m[i].srv->ep.command_timeout_ms, NULL, 0);
    }
}
