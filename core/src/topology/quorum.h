/*
 * topology/quorum.h - the quorum topology (Redlock): N independent
 * single-master servers ("members"), each a wl_server of its own
 * (standalone, TLS, unix or Sentinel), and a majority verdict per write.
 * quorum_rule.c owns which members may count toward a majority now (the
 * restart rule, its window's records, one run_id per member); quorum.c
 * the members, one parallel call (a script written to every member before
 * any reply is read, decided as soon as the caller's predicate says so);
 * quorum_drain.c the background drain that reads the replies a decided
 * call no longer waits for; quorum_open.c the probes at open. Calls into
 * topology.h and below.
 */
#ifndef WATCHLOCK_QUORUM_H
#define WATCHLOCK_QUORUM_H

#include "topology/topology.h"

#define WL_QMAX WATCHLOCK_QUORUM_MAX

typedef struct wl_qdrain wl_qdrain; /* quorum.c's */
typedef struct wl_qscript wl_qscript;

typedef struct wl_qmember {
    wl_server *srv;     /* member 0: the client's own server; the others owned here */
    char *url;          /* as given (wl_quorum_member_open) */
    wl_subscriber *sub; /* wake-ups: the client's for member 0, made here for the others */
    /* restart rule: counts toward a majority from this time on (wl_now_us) */
    atomic_llong countable_us;
    atomic_bool unreachable; /* the last exchange with it failed (check, member_state) */
    atomic_llong down_until_us; /* a connect failed: calls skip it until then (one connect timeout) */
    char run_id[41];         /* quorum mu */
    /* the restart window's records (quorum.c, "Restart window") */
    atomic_llong detected_us; /* its last (re)start, as apply_info takes it (0: never seen) */
    atomic_llong rec_read_us; /* the send time of its last record reply read (0: none) */
    atomic_llong recorded_ms; /* the longest lease of ours it recorded since it was seen (re)started */
    atomic_llong recorded_us; /* when that was sent */
    atomic_int dup_of;        /* another member (index + 1) with its run_id; 0: none */
    atomic_bool probing;      /* its probe from the open still runs (quorum_open.c): calls skip it */
    struct wl_quorum *q;     /* the member's quorum (its connection check's argument) */
    wl_conn_check check;     /* srv->check: INFO server on every connection (the restart rule) */
} wl_qmember;

typedef struct wl_quorum {
    size_t n, majority;
    wl_qmember m[WL_QMAX];
    atomic_llong max_lease_ms;  /* the longest lease this client used */
    atomic_llong seen_lease_ms; /* the longest lease any client recorded on the members */
    int64_t window_opt_ms;      /* restart_window= (the largest of the members' URLs); 0: none */
    atomic_int dups;            /* members whose run_id another member has (dup_of) */
    /* stats (WATCHLOCK_STAT_QUORUM_*) */
    atomic_llong restarts, unreached, late_grants, fence_unavailable, splits;
    pthread_mutex_t mu; /* run_ids; a leaf (taken under no other library mutex but client->mu) */
    wl_qdrain *drain;
    /* the open's probes that may still run (quorum_open.c installs both) */
    struct probes *probes;
    void (*stop_probes)(struct wl_quorum *q);
} wl_quorum;

/* ---- the drain (quorum_drain.c) ---- */
int wl_qdrain_new(struct wl_quorum *q, wl_qdrain **out);
/* Hands conn (`left` replies to come; reply number grant_at, counted down,
 * is an acquire's whose grant counts as late; -1 none) to the drain for at
 * most cap_ms; frees it when the drain cannot take it. give (copied; NULL
 * none): a give-back sent behind the grant when it comes at or after
 * keep_until_us, or when the drain gives up on the connection first. Once
 * every reply was read (a give-back's included), conn goes back to srv's
 * pool (its INFO check, if still unread, is read before any other reply:
 * wl_conn_expect); when a reply is still missing, it is freed. */
void wl_qdrain_add(wl_qdrain *d, wl_server *srv, wl_conn *conn, int left, int grant_at, int64_t cap_ms,
                   const wl_qscript *give, int64_t keep_until_us);
void wl_qdrain_stop(wl_qdrain *d); /* joins; frees what is left */
void wl_qdrain_free(wl_qdrain *d); /* NULL-safe */

/* ---- the restart rule and the members' identity (quorum_rule.c) ---- */
/* Makes INFO server the connection check of member i's server (every
 * connection to it passes the restart rule). */
void wl_quorum_check_install(wl_quorum *q, size_t i);
/* The restart window's record (quorum_rule.c, "the restart window's
 * records"), pipelined by calls: its script body (EVAL, 1 key, 2 args);
 * whether member i's call carries it now; its arguments (our longest
 * lease, digits in buf); the member's reply to it. */
extern const char wl_qrecord_body[];
bool wl_qrecord_due(wl_quorum *q, size_t i, int64_t now);
void wl_qrecord_args(wl_quorum *q, char buf[24], const char *argv[3], size_t lens[3], int64_t *lease);
void wl_qrecord_reply(wl_quorum *q, size_t i, const redisReply *r, int64_t sent_us, int64_t lease);

/* Whether member i counts toward a majority at time now (restart rule). */
bool wl_quorum_counts(wl_quorum *q, size_t i, int64_t now);
/* How long (us) until member i counts, at the earliest: 0 when it does. */
int64_t wl_quorum_counts_in_us(wl_quorum *q, size_t i, int64_t now);
/* The restart window (ms): the longest of this client's leases, every
 * client's recorded on the members, and restart_window=. */
int64_t wl_quorum_window_ms(wl_quorum *q);
/* EINVAL naming both URLs when two members are one server (one run_id);
 * else OK. */
int wl_quorum_distinct(wl_quorum *q);
size_t wl_quorum_kept_out(wl_quorum *q); /* members the restart rule keeps out now */
/* Records a lease in use (the restart rule's window is the longest). */
void wl_quorum_note_lease(wl_quorum *q, int64_t lease_ms);
/* Asks member i INFO server on conn now (one round trip): applies the rule; reads the
 * restart window's record. */
int wl_quorum_probe(wl_quorum *q, size_t i, wl_conn *conn);

/* ---- the members (quorum.c) ---- */
/* Members 1..n-1 from urls[1..n) (member 0 is `first`, the client's server,
 * already open), not contacted yet: wl_quorum_probe_all does that. EINVAL
 * for cluster URLs. On failure nothing is kept. */
int wl_quorum_new(wl_quorum **out, wl_server *first, wl_subscriber *first_sub, const char *const *urls, size_t n);
void wl_quorum_stop(wl_quorum *q);    /* joins the drain and the subscribers (close) */
void wl_quorum_close(wl_quorum *q);   /* members' idle connections (close) */
void wl_quorum_free(wl_quorum *q);    /* NULL-safe; member 0 is the client's */
/* Probes every member at once (quorum_open.c): PING, INFO, SCRIPT LOAD,
 * the restart window's record. Decides as soon as a majority answered: OK
 * (the rest marked unreachable, probed on in the background until they
 * answer or wl_quorum_stop); ECONN naming the members that did not answer,
 * once a majority cannot; a member's other error as is; EINVAL for two
 * members with one run_id. */
int wl_quorum_probe_all(wl_quorum *q);

/* ---- one call on every member at once ---- */
enum { WL_QM_PENDING = 0, WL_QM_REPLIED = 1, WL_QM_FAILED = 2, WL_QM_SKIPPED = 3 };
typedef struct wl_qscript {
    int script;       /* WL_SCRIPT_* (EVALSHA, EVAL on NOSCRIPT), or -1: `body` with EVAL */
    const char *body;
    int nkeys, nargs;
    const char *const *argv;
    const size_t *lens;
} wl_qscript;
typedef struct wl_qcall wl_qcall;
struct wl_qcall {
    /* in */
    wl_qscript s;
    bool wait_replicas;   /* WAIT after the script on members whose URL has min_replicas */
    const wl_qscript *after; /* pipelined behind the script on members still pending when decided (give-back) */
    bool skip[WL_QMAX];   /* members not to send to */
    /* after each reply: true when the caller needs no more (the rest go to the drain) */
    bool (*decided)(void *arg, wl_qcall *call);
    void *arg;
    /* set by decided() when the call succeeded: the members still pending
     * get `after` only if their reply comes at or after this time (or never
     * comes), sent by the drain behind it; 0: `after` pipelined at once */
    int64_t keep_until_us;
    /* out, per member */
    int state[WL_QMAX];
    redisReply *reply[WL_QMAX]; /* the script's reply when REPLIED (freed by wl_qcall_clear) */
    bool acked[WL_QMAX];        /* WAIT reached min_replicas (true when no WAIT was asked) */
    int64_t sent_us;            /* just before the first write */
};
/* Sends s to every member not skipped, reads replies from all at once until decided(), every
 * member answered, or cap_ms. Members still pending then are FAILED (or,
 * once decided, left PENDING with `after` queued behind, or held back
 * per keep_until_us, their replies read by the drain). Returns the number of members that replied. */
size_t wl_quorum_call(wl_quorum *q, wl_qcall *call, int64_t cap_ms);
void wl_qcall_clear(wl_qcall *call); /* frees the replies */
/* Writes s to every member not skipped and leaves the replies to the
 * drain: fire and forget (give-backs). */
void wl_quorum_send(wl_quorum *q, const wl_qscript *s, const bool *skip);

#endif
