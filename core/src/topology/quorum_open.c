/*
 * quorum_open.c - a quorum's members probed at open, all at once (one
 * thread each): the open decides as soon as a majority answered (or so
 * many failed that no majority can); the members still unanswered then are
 * marked unreachable (after a short linger for the healthy stragglers,
 * see below), and their probes go on in the background (a member
 * that answers later is marked reachable; calls skip it until its probe
 * ends, topology/quorum.c: no second wait on a frozen member, no second
 * handshake racing the probe's). A frozen minority costs the open nothing.
 *
 * The probes outlive the open: wl_quorum_stop (client close) calls
 * q->stop_probes, which shuts down the socket a probe waits on (so a
 * frozen member's probe ends at once, not at its command timeout) and
 * joins every probe thread.
 *
 * Threads: each probe touches its own member only (its pool, under the
 * member's mutex; the restart rule's state under q->mu, a leaf); ps->mu (a
 * leaf, taken under no other library mutex) guards the probes' results and
 * sockets.
 */
#include "topology/quorum.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define LINGER_MIN_US 20000
#define LINGER_MAX_US 250000

typedef struct probe {
    struct probes *ps;
    size_t i;
    int rc;      /* ps->mu */
    bool done;   /* ps->mu */
    int fd;      /* ps->mu: the socket the probe waits on, -1: none */
    char why[300];
    pthread_t th;
    bool started;
} probe;

typedef struct probes {
    wl_quorum *q;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stopping; /* mu */
    probe p[WL_QMAX];
} probes;

/* PING (a fresh member teaches the process the scripts' SHA1s, as any
 * client's open does), then INFO (the restart rule), SCRIPT LOAD and the
 * restart window's record (wl_quorum_probe). */
static int probe_member(probe *p, wl_quorum *q)
{
    wl_server *srv = q->m[p->i].srv;
    wl_conn *conn;
    bool reused;
    int rc = wl_server_get(srv, &conn, &reused);
    if (rc != WATCHLOCK_OK)
        return rc;
    pthread_mutex_lock(&p->ps->mu);
    bool stopping = p->ps->stopping;
    if (!stopping)
        p->fd = wl_conn_fd(conn);
    pthread_mutex_unlock(&p->ps->mu);
    if (stopping) {
        wl_server_put(srv, conn);
        return wl_fail(WATCHLOCK_ECLOSED, "client closed");
    }
    const char *ping[1] = {"PING"};
    redisReply *r = wl_conn_command(conn, 1, ping, NULL);
    rc = r == NULL ? wl_conn_error(srv, conn, "PING failed") : wl_reply_error(srv, r, "PING failed");
    if (r != NULL)
        freeReplyObject(r);
    if (rc == WATCHLOCK_OK) {
        wl_scripts_learn(conn);
        rc = wl_quorum_probe(q, p->i, conn);
    }
    pthread_mutex_lock(&p->ps->mu);
    p->fd = -1;
    pthread_mutex_unlock(&p->ps->mu);
    wl_server_put(srv, conn);
    return rc;
}

static void *probe_main(void *arg)
{
    probe *p = arg;
    wl_quorum *q = p->ps->q;
    int rc = probe_member(p, q);
    if (rc != WATCHLOCK_OK) {
        /* "... (host:port)": the member's label is named by the caller */
        const char *label = q->m[p->i].srv->ep.label;
        snprintf(p->why, sizeof p->why, "%s", watchlock_last_error());
        size_t w = strlen(p->why), l = strlen(label);
        if (w > l + 3 && p->why[w - 1] == ')' && memcmp(p->why + w - 1 - l, label, l) == 0 &&
            memcmp(p->why + w - l - 3, " (", 2) == 0)
            p->why[w - l - 3] = '\0';
    }
    pthread_mutex_lock(&p->ps->mu);
    p->rc = rc;
    p->done = true;
    atomic_store(&q->m[p->i].unreachable, rc != WATCHLOCK_OK);
    atomic_store(&q->m[p->i].probing, false);
    pthread_cond_broadcast(&p->ps->cond);
    pthread_mutex_unlock(&p->ps->mu);
    return NULL;
}

/* q->stop_probes: ends the probes still waiting on a member and joins them. */
static void probes_stop(wl_quorum *q)
{
    probes *ps = q->probes;
    if (ps == NULL)
        return;
    pthread_mutex_lock(&ps->mu);
    ps->stopping = true;
    for (size_t i = 0; i < q->n; i++)
        if (!ps->p[i].done && ps->p[i].fd >= 0)
            shutdown(ps->p[i].fd, SHUT_RDWR); /* its wait ends now; the probe closes the socket */
    pthread_mutex_unlock(&ps->mu);
    for (size_t i = 0; i < q->n; i++)
        if (ps->p[i].started)
            pthread_join(ps->p[i].th, NULL);
    pthread_cond_destroy(&ps->cond);
    pthread_mutex_destroy(&ps->mu);
    free(ps);
    q->probes = NULL;
}

/* Probes every member at once and decides at a majority (see the top). A
 * member that answered with an error (a wrong password, a TLS or protocol
 * failure) before the decision fails the open: that is its configuration,
 * not an outage. Two members that turn out to be one server: EINVAL. */
int wl_quorum_probe_all(wl_quorum *q)
{
    probes *ps = calloc(1, sizeof *ps);
    if (ps == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    ps->q = q;
    int64_t t_start = wl_now_us();
    pthread_mutex_init(&ps->mu, NULL);
    wl_cond_init(&ps->cond);
    q->probes = ps;
    q->stop_probes = probes_stop;
    for (size_t i = 0; i < q->n; i++)
        atomic_store(&q->m[i].probing, true);
    for (size_t i = 0; i < q->n; i++) {
        ps->p[i] = (probe){.ps = ps, .i = i, .fd = -1};
        ps->p[i].started = pthread_create(&ps->p[i].th, NULL, probe_main, &ps->p[i]) == 0;
    }
    for (size_t i = 0; i < q->n; i++)
        if (!ps->p[i].started)
            probe_main(&ps->p[i]); /* no thread: here, one after the other */
    size_t answered, failed;
    int bad = -1; /* a member that answered with an error */
    pthread_mutex_lock(&ps->mu);
    for (;;) {
        answered = failed = 0;
        for (size_t i = 0; i < q->n; i++) {
            if (!ps->p[i].done)
                continue;
            if (ps->p[i].rc == WATCHLOCK_OK)
                answered++;
            else if (ps->p[i].rc == WATCHLOCK_ECONN)
                failed++;
            else if (bad < 0)
                bad = (int)i;
        }
        if (bad >= 0 || answered >= q->majority || failed > q->n - q->majority)
            break;
        pthread_cond_wait(&ps->cond, &ps->mu);
    }
    /* Decided. The members still pending are usually just behind (their
     * handshake took a little longer): waited for a little longer, three
     * times as long as the majority took (20 to 250 ms), so that the first
     * call finds every healthy member answered; a frozen one costs that
     * much, not a command timeout. */
    int64_t took = wl_now_us() - t_start, linger = 3 * took;
    linger = linger < LINGER_MIN_US ? LINGER_MIN_US : linger > LINGER_MAX_US ? LINGER_MAX_US : linger;
    for (int64_t until = wl_now_us() + linger; bad < 0 && answered >= q->majority && wl_now_us() < until;) {
        size_t pending = 0;
        for (size_t i = 0; i < q->n; i++)
            pending += !ps->p[i].done;
        if (pending == 0)
            break;
        wl_cond_wait_until(&ps->cond, &ps->mu, until);
        for (size_t i = 0; i < q->n; i++)
            if (ps->p[i].done && ps->p[i].rc != WATCHLOCK_OK && ps->p[i].rc != WATCHLOCK_ECONN && bad < 0)
                bad = (int)i;
    }
    bool done[WL_QMAX]; /* which probes had ended at the decision (one still pending may end any time) */
    for (size_t i = 0; i < q->n; i++) {
        done[i] = ps->p[i].done;
        if (!done[i])
            atomic_store(&q->m[i].unreachable, true); /* until its probe answers */
    }
    pthread_mutex_unlock(&ps->mu);
    /* the results read below are final: probes that had ended write nothing
     * more (those still pending are read through done[], never directly) */
    if (bad >= 0)
        return wl_fail(ps->p[bad].rc, "quorum member %d (%s): %s", bad + 1, q->m[bad].srv->ep.label, ps->p[bad].why);
    if (answered < q->majority) {
        char down[1024] = "";
        size_t len = 0;
        for (size_t i = 0; i < q->n; i++)
            if (done[i] && ps->p[i].rc != WATCHLOCK_OK && len < sizeof down)
                len += (size_t)snprintf(down + len, sizeof down - len, "%smember %zu (%s): %s", len > 0 ? "; " : "",
                                        i + 1, q->m[i].srv->ep.label, ps->p[i].why);
        return wl_fail(WATCHLOCK_ECONN,
                       "%zu of %zu quorum members answered, fewer than the majority of %zu; unreachable: %s", answered,
                       q->n, q->majority, down);
    }
    return wl_quorum_distinct(q);
}
