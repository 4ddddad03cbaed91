/*
 * live_round.c - the liveness renewal of a client's queued waiters, in the
 * watchdog's rounds (issue 22.1): the waiters that are due are sent in one
 * script call per batch (proto/qscripts.c wl_q_live_lua) instead of one
 * acquire call per waiter, so N waiters of a client cost one round trip per
 * round, not N. The waiters of one call share a slot under Cluster (the
 * script names the keys of each waiter's name); outside Cluster one call
 * carries up to LIVE_CHUNK of them, whatever their names. The call is made
 * on a pooled connection (wl_run_script_keep: routing, MOVED/ASK and
 * NOSCRIPT as for any script), after the round's renewals, so holds are
 * never kept waiting behind waiters. A call whose hand-off ran out of its
 * budget (many dead waiters at a name's head, issue 29.14) says so, and
 * its chunk is sent again at once (at most LIVE_MORE times, within the
 * round's budget): each call's work stays bounded, and the hand-off does
 * not wait a round per batch of dead waiters.
 */
#include "hold/hold.h"

#include <stdlib.h>
#include <string.h>

#define LIVE_CHUNK 256 /* waiters per script call (6 keys and 6 arguments each) */
#define LIVE_MORE 64   /* calls again for one chunk whose hand-off ran out of budget */

static int by_slot(const void *a, const void *b)
{
    const wl_live_entry *x = a, *y = b;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* One script call for es[0 .. n): true when a name's hand-off ran out of
 * its budget (the script's last answer). */
static bool send_chunk(watchlock_client *c, wl_live_entry *es, size_t n, const char *pub, size_t pub_len,
                       const char *fttl, size_t fttl_len)
{
    size_t nkeys = WL_LIVE_NKEYS * n, nargs = 2 + 6 * n;
    const char **argv = malloc((nkeys + nargs) * sizeof *argv);
    size_t *lens = malloc((nkeys + nargs) * sizeof *lens);
    if (argv == NULL || lens == NULL) {
        free(argv);
        free(lens);
        return false; /* FAILED: retried at the next round */
    }
    const char **a = argv + nkeys;
    size_t *al = lens + nkeys;
    a[0] = pub;
    al[0] = pub_len;
    a[1] = fttl;
    al[1] = fttl_len;
    for (size_t i = 0; i < n; i++) {
        const wl_live_entry *e = &es[i];
        for (int k = 0; k < WL_LIVE_NKEYS; k++) {
            argv[WL_LIVE_NKEYS * i + (size_t)k] = e->a.key[k];
            lens[WL_LIVE_NKEYS * i + (size_t)k] = e->a.key_len[k];
        }
        const char **x = a + 2 + 6 * i;
        size_t *xl = al + 2 + 6 * i;
        x[0] = e->a.id;
        xl[0] = e->a.id_len;
        x[1] = e->ident;
        xl[1] = e->ident_len;
        x[2] = e->live_s;
        xl[2] = strlen(e->live_s);
        x[3] = e->lease_s;
        xl[3] = strlen(e->lease_s);
        x[4] = e->a.hold_prefix;
        xl[4] = e->a.hold_prefix_len;
        x[5] = e->a.chan_prefix;
        xl[5] = e->a.chan_prefix_len;
    }
    redisReply *r = NULL;
    bool more = false;
    if (wl_run_script_keep(&c->server, WL_SCRIPT_Q_LIVE, (int)nkeys, (int)nargs, argv, lens, &r,
                           "waiters' liveness", NULL, NULL) == WATCHLOCK_OK) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == n + 1) {
            for (size_t i = 0; i < n; i++)
                if (r->element[i]->type == REDIS_REPLY_INTEGER)
                    es[i].result = (int)r->element[i]->integer;
            more = r->element[n]->type == REDIS_REPLY_INTEGER && r->element[n]->integer == 1;
        }
        freeReplyObject(r);
    }
    free(argv);
    free(lens);
    return more;
}

int wl_live_round(watchlock_client *c, wl_live_entry *es, size_t n, int64_t budget_ms)
{
    bool sharded = wl_server_sharded(&c->server);
    for (size_t i = 0; i < n; i++) {
        es[i].result = -1;
        es[i].slot = sharded ? wl_key_slot(es[i].a.key[0], es[i].a.key_len[0]) : 0;
    }
    if (sharded)
        qsort(es, n, sizeof *es, by_slot);
    const char *pub = wl_publish_command(&c->server);
    char fttl[24];
    size_t fttl_len = wl_fmt_i64(fttl, WL_Q_FENCE_TTL_MS);
    int64_t end = wl_now_us() + budget_ms * 1000;
    int calls = 0;
    for (size_t i = 0; i < n && wl_now_us() < end;) {
        size_t j = i + 1;
        while (j < n && j - i < LIVE_CHUNK && es[j].slot == es[i].slot)
            j++;
        bool more = send_chunk(c, es + i, j - i, pub, strlen(pub), fttl, fttl_len);
        calls++;
        for (int k = 0; more && k < LIVE_MORE && wl_now_us() < end; k++, calls++)
            more = send_chunk(c, es + i, j - i, pub, strlen(pub), fttl, fttl_len);
        i = j;
    }
    return calls;
}
