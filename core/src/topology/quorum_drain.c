/*
 * quorum_drain.c - the quorum's drain (topology/quorum.h): a thread that
 * reads the replies a decided quorum call no longer waits for (late grants,
 * the give-backs pipelined behind them, fire-and-forget releases), counts
 * late grants, and once every reply of a connection was read (a late grant's
 * give-back, pipelined behind it, included) returns it to its member's pool
 * when it passed the restart rule's INFO check (a pooled one, or a fresh one
 * whose INFO was read by the call); a connection with a reply still missing
 * when its time is up, or that failed, is freed: a late reply is never
 * matched to a later request. Started on first use; wl_qdrain_stop joins
 * it. Its mutex is a leaf; the pool's (srv->mu) is taken without it.
 */
#include "topology/quorum.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A give-back held back (a successful acquire's, wl_qcall.keep_until_us):
 * sent on the connection behind the grant when the grant comes after
 * keep_until, or when the drain gives up on the connection first. */
typedef struct wl_qgive {
    int script, nkeys, nargs;
    int64_t keep_until;
    const char *argv[16];
    size_t lens[16];
    char data[];
} wl_qgive;

typedef struct drain_item {
    wl_server *srv;
    wl_conn *conn;
    int left;      /* replies still to read */
    int grant_at;  /* the reply (counted down from left) that is an acquire's: a late grant; -1 none */
    int64_t until;
    wl_qgive *give; /* NULL: none held back */
} drain_item;

static wl_qgive *give_copy(const wl_qscript *s, int64_t keep_until)
{
    int n = s->nkeys + s->nargs;
    if (s->script < 0 || n > 16)
        return NULL;
    size_t bytes = 0;
    for (int k = 0; k < n; k++)
        bytes += s->lens[k] + 1;
    wl_qgive *g = malloc(sizeof *g + bytes);
    if (g == NULL)
        return NULL;
    *g = (wl_qgive){.script = s->script, .nkeys = s->nkeys, .nargs = s->nargs, .keep_until = keep_until};
    char *p = g->data;
    for (int k = 0; k < n; k++) {
        memcpy(p, s->argv[k], s->lens[k]);
        p[s->lens[k]] = '\0';
        g->argv[k] = p;
        g->lens[k] = s->lens[k];
        p += s->lens[k] + 1;
    }
    return g;
}

/* Sends the held-back give-back on the item's connection (behind the
 * acquire: the member runs it after the grant); one more reply to read. */
static void give_back(drain_item *it)
{
    wl_qgive *g = it->give;
    it->give = NULL;
    bool done;
    if (wl_append_script(it->conn, g->script, true, g->nkeys, g->nargs, g->argv, g->lens) == 0) {
        it->left++;
        wl_conn_write_some(it->conn, &done);
    }
    free(g);
}

struct wl_qdrain {
    wl_quorum *q;
    pthread_mutex_t mu;
    drain_item *in;
    size_t n_in, cap_in;
    int efd;
    bool started, stop;
    pthread_t th;
};

static void item_end(wl_quorum *q, drain_item *it, bool abandon)
{
    if (it->give != NULL) /* the grant did not come in time: given back behind it, best effort */
        give_back(it);
    if (it->left > 0) { /* replies that never came: WATCHLOCK_STAT_QUORUM_UNREACHED */
        atomic_fetch_add(&q->unreached, 1);
        wl_conn_free(it->conn); /* broken for good: a reply is still due on it */
    } else if (!abandon && wl_conn_err(it->conn) == WL_CERR_NONE) {
        wl_server_put(it->srv, it->conn); /* every reply read: nothing late can follow */
    } else {
        wl_conn_free(it->conn);
    }
    it->conn = NULL;
}

static void item_read(wl_quorum *q, drain_item *it)
{
    redisReply *r;
    while (it->left > 0) {
        int got = wl_conn_next_reply(it->conn, &r);
        if (got < 0) {
            item_end(q, it, true);
            return;
        }
        if (got == 0)
            return;
        bool acquired;
        int64_t v;
        bool grant = it->left == it->grant_at && wl_reply_acquire(r, &acquired, &v) && acquired;
        if (it->left == it->grant_at)
            it->grant_at = -1;
        if (grant)
            atomic_fetch_add(&q->late_grants, 1);
        freeReplyObject(r);
        it->left--;
        if (it->give != NULL && it->grant_at < 0) {
            if (grant && wl_now_us() >= it->give->keep_until)
                give_back(it); /* past the hold's validity: not counted on, given back */
            else {
                free(it->give); /* in time (kept: the hold's), or no grant */
                it->give = NULL;
            }
        }
    }
    item_end(q, it, false);
}

static void *drain_main(void *arg)
{
    wl_qdrain *d = arg;
    wl_thread_start("watchlock-qdrain");
    drain_item *items = NULL;
    size_t n = 0, cap = 0;
    struct pollfd *pfd = NULL;
    size_t *who = NULL;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        bool stop = d->stop;
        if (n + d->n_in > cap) {
            size_t nc = (n + d->n_in) * 2;
            drain_item *g = realloc(items, nc * sizeof *g);
            struct pollfd *p = realloc(pfd, (nc + 1) * sizeof *p);
            size_t *w = realloc(who, (nc + 1) * sizeof *w);
            if (g != NULL)
                items = g;
            if (p != NULL)
                pfd = p;
            if (w != NULL)
                who = w;
            if (g != NULL && p != NULL && w != NULL)
                cap = nc;
        }
        size_t take = d->n_in < cap - n ? d->n_in : cap - n;
        memcpy(items + n, d->in + (d->n_in - take), take * sizeof *items);
        d->n_in -= take;
        n += take;
        pthread_mutex_unlock(&d->mu);
        int64_t now = wl_now_us(), next = -1;
        size_t np = 0;
        if (pfd != NULL)
            pfd[np++] = (struct pollfd){.fd = d->efd, .events = POLLIN};
        for (size_t i = 0; i < n; i++) {
            drain_item *it = &items[i];
            bool done;
            if (it->conn != NULL && (stop || now >= it->until || wl_conn_write_some(it->conn, &done) != 0))
                item_end(d->q, it, true);
            if (it->conn != NULL)
                item_read(d->q, it);
            if (it->conn == NULL) {
                items[i--] = items[--n];
                continue;
            }
            if (next < 0 || it->until < next)
                next = it->until;
            pfd[np] = (struct pollfd){.fd = wl_conn_fd(it->conn),
                                      .events = (short)(POLLIN | (wl_conn_wants_write(it->conn) ? POLLOUT : 0))};
            who[np++] = i;
        }
        if (stop && n == 0)
            break;
        int ms = next < 0 ? -1 : (int)((next - now + 999) / 1000);
        int got = poll(pfd, np, ms);
        for (size_t p = 0; got > 0 && p < np; p++) {
            if (pfd[p].revents == 0)
                continue;
            if (p == 0) {
                uint64_t v;
                ssize_t r = read(d->efd, &v, sizeof v);
                WL_UNUSED(r);
                continue;
            }
            drain_item *it = &items[who[p]];
            if (wl_conn_read_some(it->conn) != 0)
                item_end(d->q, it, true);
        }
    }
    free(items);
    free(pfd);
    free(who);
    return NULL;
}

/* Hands conn (left replies to come) to the drain; frees it when the drain
 * cannot take it. */
void wl_qdrain_add(wl_qdrain *d, wl_server *srv, wl_conn *conn, int left, int grant_at, int64_t cap_ms,
                   const wl_qscript *give, int64_t keep_until_us)
{
    wl_qgive *held = give != NULL && grant_at > 0 ? give_copy(give, keep_until_us) : NULL;
    if (give != NULL && grant_at > 0 && held == NULL) { /* cannot hold it back: behind at once, as on failure */
        bool done;
        if (wl_append_script(conn, give->script, true, give->nkeys, give->nargs, give->argv, give->lens) == 0) {
            left++, grant_at++;
            wl_conn_write_some(conn, &done);
        }
    }
    pthread_mutex_lock(&d->mu);
    bool ok = !d->stop;
    if (ok && !d->started) {
        d->started = pthread_create(&d->th, NULL, drain_main, d) == 0;
        ok = d->started;
    }
    if (ok && d->n_in == d->cap_in) {
        size_t nc = d->cap_in ? d->cap_in * 2 : 16;
        drain_item *g = realloc(d->in, nc * sizeof *g);
        ok = g != NULL;
        if (ok) {
            d->in = g;
            d->cap_in = nc;
        }
    }
    if (ok)
        d->in[d->n_in++] = (drain_item){srv, conn, left, grant_at, wl_now_us() + cap_ms * 1000, held};
    pthread_mutex_unlock(&d->mu);
    if (!ok) {
        if (held != NULL) {
            drain_item tmp = {.conn = conn, .left = left, .give = held};
            give_back(&tmp);
        }
        wl_conn_free(conn);
        return;
    }
    uint64_t one = 1;
    ssize_t r = write(d->efd, &one, sizeof one);
    WL_UNUSED(r);
}

int wl_qdrain_new(wl_quorum *q, wl_qdrain **out)
{
    wl_qdrain *d = calloc(1, sizeof *d);
    *out = d;
    if (d == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    d->q = q;
    d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&d->mu, NULL);
    return d->efd < 0 ? wl_fail(WATCHLOCK_EINTERNAL, "eventfd failed") : WATCHLOCK_OK;
}

void wl_qdrain_stop(wl_qdrain *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    bool started = d->started;
    d->stop = true;
    pthread_mutex_unlock(&d->mu);
    if (d->efd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(d->efd, &one, sizeof one);
        WL_UNUSED(r);
    }
    if (started) {
        pthread_join(d->th, NULL);
        pthread_mutex_lock(&d->mu);
        d->started = false;
        pthread_mutex_unlock(&d->mu);
    }
    for (size_t i = 0; i < d->n_in; i++) {
        if (d->in[i].give != NULL)
            give_back(&d->in[i]);
        wl_conn_free(d->in[i].conn);
    }
    d->n_in = 0;
}

void wl_qdrain_free(wl_qdrain *d)
{
    if (d == NULL)
        return;
    if (d->efd >= 0)
        close(d->efd);
    free(d->in);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
