/*
 * quorum_multi_release.c - the multi-lock's release and extend's writes on
 * a quorum client (issue 30.3): its entries of the multi-lock's table of
 * round trips (multi.h wl_multi_io; the acquire and the table are
 * quorum_multi.c's). Both go to every member at once (topology/quorum.c's
 * one parallel call); a name is released once a majority of members
 * answered (free of our key), extended when a majority of the members that
 * count extended it (the quorum's verdict, wl_quorum_verdict).
 *
 * Without any library mutex held but client->mu around reading the holds.
 */
#include "locks/multi.h"
#include "topology/quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The release script for the selected names on every member at once: a
 * name is confirmed once a majority of members answered (free of our key:
 * released, no key, another's); then 1 when a member released it, -1 when
 * so many members hold another's key that no majority is ours. */
static bool release_decided(void *arg, wl_qcall *call)
{
    wl_quorum *q = arg;
    size_t ok = 0, unsure = 0;
    for (size_t k = 0; k < q->n; k++) {
        if (call->state[k] == WL_QM_PENDING)
            continue;
        const redisReply *r = call->state[k] == WL_QM_REPLIED ? call->reply[k] : NULL;
        if (r != NULL && r->type == REDIS_REPLY_ARRAY)
            ok++;
        else
            unsure++;
    }
    return ok >= q->majority || unsure > q->n - q->majority;
}

int wl_qmulti_release(watchlock_lock *l, const bool *sel, int *results)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    wl_quorum *q = c->quorum;
    const char *publish = wl_publish_command(&c->server);
    size_t n = m->n, k = 0;
    const char **argv = malloc((3 * n + 1) * sizeof *argv);
    size_t *lens = malloc((3 * n + 1) * sizeof *lens), *idx = malloc(n * sizeof *idx);
    char (*prefix)[WL_IDENT_SIZE] = malloc(n * sizeof *prefix);
    for (size_t i = 0; i < n; i++)
        results[i] = WL_MULTI_UNKNOWN;
    if (argv == NULL || lens == NULL || idx == NULL || prefix == NULL) {
        free(argv), free(lens), free(idx), free(prefix);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (sel[i])
            idx[k++] = i;
    int rc = WATCHLOCK_OK;
    if (k > 0) {
        wl_multi_release_argv(l, idx, k, publish, prefix, argv, lens); /* multi_io.c */
        wl_qcall call;
        memset(&call, 0, sizeof call);
        call.s = (wl_qscript){WL_SCRIPT_MULTI_RELEASE, NULL, (int)k, (int)(2 * k + 1), argv, lens};
        call.decided = release_decided;
        call.arg = q;
        wl_quorum_call(q, &call, c->server.ep.command_timeout_ms);
        size_t answered = 0, failed = 0;
        size_t *released = calloc(k, sizeof *released), *others = calloc(k, sizeof *others);
        for (size_t s = 0; s < q->n && released != NULL && others != NULL; s++) {
            failed += call.state[s] == WL_QM_FAILED;
            const redisReply *r = call.state[s] == WL_QM_REPLIED ? call.reply[s] : NULL;
            if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != k)
                continue;
            answered++;
            for (size_t j = 0; j < k; j++) {
                int64_t v = wl_reply_i64(r->element[j]);
                released[j] += v == 1;
                others[j] += v == -1;
            }
        }
        wl_qcall_clear(&call);
        atomic_fetch_add(&q->unreached, (long long)failed);
        if (released == NULL || others == NULL)
            rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        else if (answered < q->majority)
            rc = wl_fail(WATCHLOCK_ECONN,
                         "release %s: %zu of %zu members confirmed they no longer hold this hold's keys, fewer "
                         "than the majority of %zu",
                         l->hold.quoted, answered, q->n, q->majority);
        else
            for (size_t j = 0; j < k; j++)
                results[idx[j]] = others[j] > q->n - q->majority ? -1 : released[j] > 0 ? 1 : 0;
        free(released), free(others);
    }
    free(argv), free(lens), free(idx), free(prefix);
    return rc;
}

/* Extend's writes: the renew script over every name on every member at
 * once; each name's verdict is the quorum's (a majority that counts). */
int wl_qmulti_renew(watchlock_lock *l, const char *const *ident, const char *const *from, const char *const *ms,
                    int *results)
{
    watchlock_client *c = l->hold.client;
    wl_multi *m = multi_of(l);
    wl_quorum *q = c->quorum;
    size_t n = m->n;
    const char **argv = malloc(4 * n * sizeof *argv);
    size_t *lens = malloc(4 * n * sizeof *lens);
    int *res = malloc(n * WL_QMAX * sizeof *res);
    if (argv == NULL || lens == NULL || res == NULL) {
        free(argv), free(lens), free(res);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&c->mu);
    int64_t left_ms = (l->hold.deadline_us - wl_now_us()) / 1000, lease = l->hold.lease_ms;
    pthread_mutex_unlock(&c->mu);
    wl_quorum_note_lease(q, lease); /* the restart window covers the longest lease in use */
    for (size_t j = 0; j < n; j++) {
        argv[j] = m->m[j].hold.keys.lock, lens[j] = m->m[j].hold.keys.lock_len;
        argv[n + 3 * j] = ident[j], lens[n + 3 * j] = strlen(ident[j]);
        argv[n + 3 * j + 1] = from[j], lens[n + 3 * j + 1] = strlen(from[j]);
        argv[n + 3 * j + 2] = ms[j], lens[n + 3 * j + 2] = strlen(ms[j]);
    }
    wl_qcall call;
    memset(&call, 0, sizeof call);
    call.s = (wl_qscript){WL_SCRIPT_RENEW, NULL, (int)n, (int)(3 * n), argv, lens};
    call.wait_replicas = true;
    int64_t cap_ms = c->server.ep.command_timeout_ms < left_ms ? c->server.ep.command_timeout_ms : left_ms;
    wl_quorum_call(q, &call, cap_ms > 0 ? cap_ms : 1);
    for (size_t k = 0; k < q->n; k++)
        for (size_t j = 0; j < n; j++) {
            int v = call.state[k] == WL_QM_REPLIED ? wl_reply_renew(call.reply[k], n, j) : WL_WRITE_FAILED;
            res[j * WL_QMAX + k] = v == WL_WRITE_OK && !call.acked[k] ? WL_WRITE_FAILED : v;
        }
    bool failed = false, taken = false;
    for (size_t j = 0; j < n; j++) {
        results[j] = wl_quorum_verdict(q, res + j * WL_QMAX, call.sent_us);
        failed = failed || results[j] == WL_WRITE_FAILED;
        taken = taken || results[j] == WL_WRITE_NOT_OWNER;
    }
    wl_qcall_clear(&call);
    free(argv), free(lens), free(res);
    if (failed && !taken) /* not lost (multi.c then says so), not extended either */
        return wl_fail(WATCHLOCK_ECONN, "extend %s: fewer than a majority (%zu of %zu) of members confirmed it",
                       l->hold.quoted, q->majority, q->n);
    return WATCHLOCK_OK;
}
