/*
 * quorum_open.c - a quorum's members probed at open, all at once (one
 * thread each, joined before the open returns): the open succeeds when a
 * majority answered; the others are marked unreachable and retried on use
 * (topology/quorum.c's calls open fresh connections to them, INFO first).
 * Threads: each probe touches its own member only (its pool, under the
 * member's mutex; the restart rule's state under q->mu, a leaf).
 */
#include "topology/quorum.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct probe {
    wl_quorum *q;
    size_t i;
    int rc;
    char why[300];
    pthread_t th;
    bool started;
} probe;

/* PING (a fresh member teaches the process the scripts' SHA1s, as any
 * client's open does), then INFO (the restart rule) and SCRIPT LOAD. Each
 * member on a thread of its own: a frozen member (it accepts the
 * connection, the kernel's backlog, and never answers) costs one command
 * timeout, whatever the number of them. */
static void *probe_main(void *arg)
{
    probe *p = arg;
    wl_quorum *q = p->q;
    wl_conn *conn;
    bool reused;
    p->rc = wl_node_ping(q->m[p->i].srv);
    if (p->rc == WATCHLOCK_OK && (p->rc = wl_server_get(q->m[p->i].srv, &conn, &reused)) == WATCHLOCK_OK) {
        p->rc = wl_quorum_probe(q, p->i, conn);
        wl_server_put(q->m[p->i].srv, conn);
    }
    if (p->rc != WATCHLOCK_OK) {
        /* "... (host:port)": the member's label is named by the caller */
        const char *label = q->m[p->i].srv->ep.label;
        snprintf(p->why, sizeof p->why, "%s", watchlock_last_error());
        size_t w = strlen(p->why), l = strlen(label);
        if (w > l + 3 && p->why[w - 1] == ')' && memcmp(p->why + w - 1 - l, label, l) == 0 &&
            memcmp(p->why + w - l - 3, " (", 2) == 0)
            p->why[w - l - 3] = '\0';
    }
    return NULL;
}

/* Probes every member at once. Members that cannot be reached (ECONN) are
 * marked unreachable and retried on use; OK when a majority answered. A
 * member that answered with an error (a wrong password, a TLS or protocol
 * failure) fails the open: that is its configuration, not an outage. */
int wl_quorum_probe_all(wl_quorum *q)
{
    probe ps[WL_QMAX];
    for (size_t i = 0; i < q->n; i++) {
        ps[i] = (probe){.q = q, .i = i};
        ps[i].started = pthread_create(&ps[i].th, NULL, probe_main, &ps[i]) == 0;
    }
    for (size_t i = 0; i < q->n; i++) {
        if (ps[i].started)
            pthread_join(ps[i].th, NULL);
        else
            probe_main(&ps[i]); /* no thread: here, one after the other */
    }
    size_t answered = 0;
    char down[1024] = "";
    size_t len = 0;
    for (size_t i = 0; i < q->n; i++) {
        if (ps[i].rc != WATCHLOCK_OK && ps[i].rc != WATCHLOCK_ECONN)
            return wl_fail(ps[i].rc, "quorum member %zu (%s): %s", i + 1, q->m[i].srv->ep.label, ps[i].why);
        atomic_store(&q->m[i].unreachable, ps[i].rc != WATCHLOCK_OK);
        if (ps[i].rc == WATCHLOCK_OK) {
            answered++;
            continue;
        }
        if (len < sizeof down)
            len += (size_t)snprintf(down + len, sizeof down - len, "%smember %zu (%s): %s", len > 0 ? "; " : "",
                                    i + 1, q->m[i].srv->ep.label, ps[i].why);
    }
    if (answered < q->majority)
        return wl_fail(WATCHLOCK_ECONN,
                       "%zu of %zu quorum members answered, fewer than the majority of %zu; unreachable: %s", answered,
                       q->n, q->majority, down);
    return WATCHLOCK_OK;
}
