/*
 * quorum_rule.c - which quorum members may count toward a majority now:
 * the restart rule, the restart window's records, and the members'
 * identity (one run_id, one member).
 *
 * Restart rule (docs/design.md, "Quorum"). A member that restarted without
 * its data has forgotten the keys it held; if it counted at once, a second
 * owner could assemble a majority from it and the members the first owner
 * does not hold. So a member counts toward no majority until the restart
 * window (wl_quorum_window_ms: the longest lease any client uses there)
 * after it came back. "Came back" is learnt from INFO server: its uptime
 * (now - uptime + 1 s: uptime_in_seconds may exceed the truth by a second,
 * and the start must never be taken earlier than it was), or, when its
 * run_id changed while its uptime is long (a Sentinel failover to a
 * replica), the moment the change was seen.
 *
 * INFO goes first on every connection to a member, whichever path opens
 * it (a call, the watchdog, inspect, force-release, a release on a fresh
 * connection): it is the member's connection check (node.h's
 * wl_conn_check, installed here), queued by wl_server_connect, the one
 * place that opens connections, and its reply is applied by the transport
 * before any other reply on that connection can be read (wl_conn_expect).
 * A restart drops every connection, so no connection opened after it
 * escapes the check, and no reply of a restarted member is seen before its
 * restart is.
 *
 * Threads: any thread that reads a member's replies applies its INFO (a
 * call's, the drain, the watchdog, a subscriber); the run_ids are under
 * q->mu (a leaf), the rest atomics.
 */
#include "topology/quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the restart window's records ----
 *
 * The window must cover the longest lease ANY client uses on these
 * members, not only this client's: a client with a 1 s lease would count a
 * restarted member 1 s after its restart while another's 20 s hold there
 * is still valid. So every client records its longest lease on each member
 * (RECORD_KEY, the largest value kept, for a day after its last writer)
 * before its first call there can be granted (the record is pipelined
 * ahead of the call's script on the same connection), and keeps a member
 * seen (re)started out for the largest record it has read, its own longest
 * lease, or restart_window=, whichever is longest (wl_quorum_window_ms),
 * and only once the records were read from a majority of members after the
 * restart was seen (records_read): the holder's majority kept its record,
 * except on the members that restarted themselves. Lock keys all begin
 * with "watchlock:{", so RECORD_KEY is no lock name's key. */
#define RECORD_KEY "watchlock:quorum:max-lease"
#define RECORD_TTL_S "86400"
#define RECORD_REFRESH_US (3600LL * 1000000) /* rewritten hourly while the client calls */
#define RECORD_RETRY_US 5000
/* KEYS[1] = RECORD_KEY; ARGV = lease_ms (0: read only), ttl_s. Returns the
 * value before (0: none). */
const char wl_qrecord_body[] =
    "local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"
    "local a = tonumber(ARGV[1])\n"
    "if a > v then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])\n"
    "elseif a > 0 and a == v then redis.call('EXPIRE', KEYS[1], ARGV[2]) end\n"
    "return v\n";

static void raise_to(atomic_llong *x, long long v)
{
    long long cur = atomic_load(x);
    while (v > cur && !atomic_compare_exchange_weak(x, &cur, v)) {
    }
}

/* ---- members and the restart rule ---- */

static void info_field(const char *info, size_t len, const char *field, char *out, size_t size)
{
    out[0] = '\0';
    size_t fl = strlen(field);
    for (const char *p = info, *end = info + len; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        if ((size_t)(eol - p) > fl && memcmp(p, field, fl) == 0 && p[fl] == ':') {
            size_t n = (size_t)(eol - p) - fl - 1;
            while (n > 0 && (p[fl + 1 + n - 1] == '\r' || p[fl + 1 + n - 1] == ' '))
                n--;
            if (n >= size)
                n = size - 1;
            memcpy(out, p + fl + 1, n);
            out[n] = '\0';
            return;
        }
        p = eol + 1;
    }
}

/* Two members with one run_id are one server (an alias, localhost and
 * 127.0.0.1): it would grant a majority alone. The later one is marked
 * (dup_of) and counts toward nothing; wl_quorum_distinct refuses. q->mu. */
static void find_dups(wl_quorum *q)
{
    int dups = 0;
    for (size_t a = 0; a < q->n; a++) {
        int of = 0;
        for (size_t b = 0; b < a && of == 0 && q->m[a].run_id[0] != '\0'; b++)
            if (strcmp(q->m[a].run_id, q->m[b].run_id) == 0)
                of = (int)b + 1;
        atomic_store(&q->m[a].dup_of, of);
        dups += of != 0;
    }
    atomic_store(&q->dups, dups);
}

int wl_quorum_distinct(wl_quorum *q)
{
    if (atomic_load(&q->dups) == 0)
        return WATCHLOCK_OK;
    char a_label[300] = "", b_label[300] = "", rid[41] = "";
    int a = 0, b = 0;
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < q->n && a == 0; i++) {
        int of = atomic_load(&q->m[i].dup_of);
        if (of != 0) {
            a = of, b = (int)i + 1;
            /* the labels (host:port as given, or the socket path): URLs may hold passwords */
            snprintf(a_label, sizeof a_label, "%s", q->m[of - 1].srv->ep.label);
            snprintf(b_label, sizeof b_label, "%s", q->m[i].srv->ep.label);
            snprintf(rid, sizeof rid, "%s", q->m[i].run_id);
        }
    }
    pthread_mutex_unlock(&q->mu);
    if (a == 0)
        return WATCHLOCK_OK;
    return wl_fail(WATCHLOCK_EINVAL,
                   "quorum members %d (%s) and %d (%s) are one server (run_id %s): it would count twice toward a "
                   "majority; give each server once",
                   a, a_label, b, b_label, rid);
}

/* The member's answer to INFO server: when did it come back? */
static void apply_info(wl_quorum *q, size_t i, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->str == NULL)
        return;
    char rid[41], up_s[32];
    info_field(r->str, r->len, "run_id", rid, sizeof rid);
    info_field(r->str, r->len, "uptime_in_seconds", up_s, sizeof up_s);
    if (rid[0] == '\0' || up_s[0] == '\0')
        return;
    wl_qmember *m = &q->m[i];
    int64_t now = wl_now_us(), up = strtoll(up_s, NULL, 10) * 1000000;
    int64_t lease = wl_quorum_window_ms(q) * 1000;
    pthread_mutex_lock(&q->mu);
    bool first = m->run_id[0] == '\0', changed = !first && strcmp(m->run_id, rid) != 0;
    snprintf(m->run_id, sizeof m->run_id, "%s", rid);
    if (first || changed)
        find_dups(q);
    pthread_mutex_unlock(&q->mu);
    /* uptime_in_seconds is the difference of two whole-second wall-clock
     * readings: it may exceed the real uptime by up to a second. The latest
     * possible start is now - (up - 1 s): never before the real one. */
    int64_t back = now - (up > 1000000 ? up - 1000000 : 0);
    if (changed && up >= lease)
        back = now; /* a new run_id with a long uptime (a promoted replica): from when it was seen */
    if (changed)
        atomic_fetch_add(&q->restarts, 1);
    if (first || changed) {
        /* its records (and ours on it) may be gone: read them again */
        atomic_store(&m->recorded_ms, 0);
        raise_to(&m->detected_us, back); /* records read after its (latest possible) start: after the restart */
        long long cur = atomic_load(&m->countable_us);
        while (back > cur && !atomic_compare_exchange_weak(&m->countable_us, &cur, back)) {
        }
    }
}

int64_t wl_quorum_window_ms(wl_quorum *q)
{
    int64_t w = atomic_load(&q->max_lease_ms), seen = atomic_load(&q->seen_lease_ms);
    if (seen > w)
        w = seen;
    return q->window_opt_ms > w ? q->window_opt_ms : w;
}

/* Whether the window's records were read from a majority of members since
 * member i (re)started (detected_us: its latest possible start, or when a
 * new run_id was seen): until then the window may be too short. */
static bool records_read(wl_quorum *q, size_t i)
{
    int64_t seen = atomic_load(&q->m[i].detected_us);
    size_t k = 0;
    for (size_t j = 0; seen != 0 && j < q->n; j++)
        k += atomic_load(&q->m[j].rec_read_us) > seen;
    return seen == 0 || k >= q->majority;
}

int64_t wl_quorum_counts_in_us(wl_quorum *q, size_t i, int64_t now)
{
    int64_t window = wl_quorum_window_ms(q) * 1000;
    if (atomic_load(&q->m[i].dup_of) != 0)
        return window > 0 ? window : 1000000; /* one server given twice: never (wl_quorum_distinct refuses) */
    int64_t left = atomic_load(&q->m[i].countable_us) + window - now;
    if (left > 0)
        return left;
    return records_read(q, i) ? 0 : RECORD_RETRY_US; /* the next call reads them */
}

bool wl_quorum_counts(wl_quorum *q, size_t i, int64_t now)
{
    return wl_quorum_counts_in_us(q, i, now) == 0;
}

size_t wl_quorum_kept_out(wl_quorum *q)
{
    size_t k = 0;
    int64_t now = wl_now_us();
    for (size_t i = 0; i < q->n; i++)
        k += !wl_quorum_counts(q, i, now);
    return k;
}

void wl_quorum_note_lease(wl_quorum *q, int64_t lease_ms)
{
    raise_to(&q->max_lease_ms, lease_ms);
}

/* The script's arguments for member i: our longest lease (digits in buf). */
void wl_qrecord_args(wl_quorum *q, char buf[24], const char *argv[3], size_t lens[3], int64_t *lease)
{
    *lease = atomic_load(&q->max_lease_ms);
    wl_fmt_i64(buf, *lease);
    argv[0] = RECORD_KEY, lens[0] = strlen(RECORD_KEY);
    argv[1] = buf, lens[1] = strlen(buf);
    argv[2] = RECORD_TTL_S, lens[2] = strlen(RECORD_TTL_S);
}

/* Member i's reply to the record script sent at sent_us with our lease. */
void wl_qrecord_reply(wl_quorum *q, size_t i, const redisReply *r, int64_t sent_us, int64_t lease)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER)
        return; /* not recorded: sent again with the next call */
    wl_qmember *m = &q->m[i];
    raise_to(&q->seen_lease_ms, r->integer);
    raise_to(&m->recorded_ms, lease);
    atomic_store(&m->recorded_us, sent_us);
    raise_to(&m->rec_read_us, sent_us);
}

/* Whether a call to member i carries the record script: our lease is not
 * recorded there (since its restart), is due for a rewrite, or some member
 * seen (re)started waits for the records to be read. */
bool wl_qrecord_due(wl_quorum *q, size_t i, int64_t now)
{
    wl_qmember *m = &q->m[i];
    int64_t lease = atomic_load(&q->max_lease_ms);
    if (lease > atomic_load(&m->recorded_ms) || (lease > 0 && now - atomic_load(&m->recorded_us) > RECORD_REFRESH_US))
        return true;
    for (size_t j = 0; j < q->n; j++)
        if (!records_read(q, j))
            return true;
    return false;
}

int wl_quorum_probe(wl_quorum *q, size_t i, wl_conn *conn)
{
    const char *argv[2] = {"INFO", "server"};
    redisReply *r = wl_conn_command(conn, 2, argv, NULL);
    if (r == NULL)
        return wl_conn_error(q->m[i].srv, conn, "INFO failed");
    int rc = wl_reply_error(q->m[i].srv, r, "INFO failed");
    if (rc == WATCHLOCK_OK)
        apply_info(q, i, r);
    freeReplyObject(r);
    /* Every member gets the scripts now (the process learnt their SHA1s
     * from one server only): a renewal round that met NOSCRIPT on the
     * members that answer would have to wait for the frozen ones before
     * its second pass. Best effort: EVAL still follows a NOSCRIPT. */
    for (int k = 0; rc == WATCHLOCK_OK && k < WL_SCRIPT_COUNT; k++) {
        const char *load[3] = {"SCRIPT", "LOAD", wl_scripts[k].body};
        redisReply *lr = wl_conn_command(conn, 3, load, NULL);
        if (lr == NULL)
            return wl_conn_error(q->m[i].srv, conn, "SCRIPT LOAD failed");
        freeReplyObject(lr);
    }
    if (rc == WATCHLOCK_OK) {
        char buf[24], nk[24];
        const char *rargv[3], *eargv[6];
        size_t rlens[3], elens[6];
        int64_t lease, sent = wl_now_us();
        wl_qrecord_args(q, buf, rargv, rlens, &lease);
        wl_fmt_i64(nk, 1);
        eargv[0] = "EVAL", elens[0] = 4;
        eargv[1] = wl_qrecord_body, elens[1] = strlen(wl_qrecord_body);
        eargv[2] = nk, elens[2] = strlen(nk);
        for (int k = 0; k < 3; k++)
            eargv[3 + k] = rargv[k], elens[3 + k] = rlens[k];
        redisReply *rr = wl_conn_command(conn, 6, eargv, elens);
        if (rr == NULL)
            return wl_conn_error(q->m[i].srv, conn, "restart window record failed");
        wl_qrecord_reply(q, i, rr, sent, lease);
        freeReplyObject(rr);
    }
    return rc;
}

static const char *const info_argv[2] = {"INFO", "server"};

/* Every connection to member m passes this (node.c queues it first). */
static void on_check(void *arg, int index, const redisReply *r)
{
    wl_qmember *m = arg;
    if (index == 0)
        apply_info(m->q, (size_t)(m - m->q->m), r);
}

void wl_quorum_check_install(wl_quorum *q, size_t i)
{
    wl_qmember *m = &q->m[i];
    m->q = q;
    m->check = (wl_conn_check){.ncmd = 1, .argc = {2}, .argv = {info_argv}, .fn = on_check, .arg = m};
    m->srv->check = &m->check;
}

