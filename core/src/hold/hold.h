/*
 * hold/hold.h - the hold layer: one hold's life whatever its kind: identity
 * and epochs, the local deadline, the loss timer and lost reports (loss.c),
 * the watchdog's rounds (watchdog.c, renew_round.c), all on a wl_hold
 * (below) that a lock kind's handle embeds; the kind answers through its
 * wl_hold_ops. Calls into topology/ and the layers below.
 */
#ifndef WATCHLOCK_HOLD_H
#define WATCHLOCK_HOLD_H

#include "topology/topology.h"
#include "hold/stats.h"

typedef struct wl_hold wl_hold; /* one hold, whatever its kind (below) */

typedef struct wl_lost_event {
    uint64_t lock_id;
    int reason;
    struct wl_lost_event *next;
} wl_lost_event;

#define WL_SEEDED_SLOTS 4096 /* client->seeded: 32 KiB per client */

struct watchlock_client {
    atomic_int refs;  /* the user's reference + one per lock handle + one per callback thread */
    /* drops one reference (client.c wl_client_unref, installed at open): the
     * hold layer's callback threads end with it without calling up */
    void (*unref)(watchlock_client *c);
    unsigned fork_gen;
    wl_server server; /* the client's topology: one server, a Sentinel-discovered master or a cluster (wl_topology_ops) */
    /* a quorum client (Redlock, topology/quorum.h): its members, server
     * above being member 0; NULL for every other client. Set at open. */
    struct wl_quorum *quorum;
    /* the client's placement (wl_placement below), never NULL: set at open */
    const struct wl_placement *placement;
    atomic_bool closed;
    /* Names this client has acquired, so their fence counters are seeded
     * (lock.c acquire_fast): a direct-mapped set of lock keys' hashes
     * (the plain lock's key_hash), relaxed atomics. Only a name found here
     * takes the fast acquire: a name's first acquire (most acquires, when
     * names are used once) goes to the script in one round trip instead of
     * a fast attempt that would find the counter new, and a user whose ACL
     * denies scripts is refused at its first acquire rather than left
     * holding a key it could neither renew nor release. A stale or
     * colliding entry only costs one fast attempt that falls back. */
    atomic_uint_fast64_t seeded[WL_SEEDED_SLOTS];
    /* The server refused the fast acquire's MULTI (an ACL without
     * @transaction): acquires go to the script from then on (lock.c). */
    atomic_bool no_fast;
    /* The fast acquires' fence script met NOSCRIPT (a restarted or new
     * server): the next one goes as EVAL with its body, which loads it. */
    atomic_bool fence_body;

    pthread_mutex_t mu; /* guards everything below */
    wl_hold *holds; /* every live handle's hold (doubly linked) */
    /* watchdog: renewals */
    pthread_t wd_thread;
    bool wd_started;
    bool wd_stop;
    pthread_cond_t wd_cond;
    int64_t wd_sleep_until; /* when the sleeping thread looks next; 0 while awake */
    wl_heap renew_heap;     /* holds being renewed (wl_hold *), on wake_us */
    /* loss timer: declares holds lost at their local deadline (loss.c) */
    pthread_t tm_thread;
    bool tm_started;
    pthread_cond_t tm_cond;
    int64_t tm_sleep_until;
    wl_heap deadline_heap; /* holds (wl_hold *), on deadline_us */
    /* on-lost callbacks: a FIFO of pending ones, run by at most
     * WATCHLOCK_CALLBACK_THREADS detached threads (loss.c) */
    struct wl_callback_job *cb_head, *cb_tail;
    int cb_queued;  /* jobs in the queue */
    int cb_threads; /* callback threads alive */
    int cb_running; /* callbacks started and not yet returned */
    int cb_idle;    /* the spare thread waiting on cb_job_cond (0 or 1) */
    pthread_cond_t cb_cond;
    pthread_cond_t cb_job_cond; /* a job for the spare, or no callback running */
    /* lost events */
    bool events_on;
    wl_lost_event *ev_head, *ev_tail;
    pthread_cond_t ev_cond;
    /* subscriber, created with the client, thread started on first wait */
    wl_subscriber *sub;
    /* stats */
    int64_t held;
    int64_t renew_rounds, renew_roundtrips, renewals;
    atomic_llong wd_cpu_us;
    wl_stats stats; /* monitoring counters and histograms, lock-free (stats.c) */
};

/* What the hold layer (the watchdog, the loss timer) and the client's
 * close ask of the lock kind that made a hold, without knowing the kind:
 * installed by locks/ when the handle is made. */
struct wl_live_args; /* below */
typedef struct wl_hold_ops {
    /* drops one reference to the kind's handle (may free it, and then the client) */
    void (*unref)(wl_hold *h);
    /* with client->mu held: the hold of an abandoned handle is over (its
     * local deadline passed, a renewal found it taken, or the client is
     * closing): out of both heaps and the client's list, and the client's
     * reference to it dropped (which may free the handle, never the client) */
    void (*abandoned_end)(watchlock_client *c, wl_hold *h);
    /* the kind's release, for a handle freed while it holds (no mutex held) */
    int (*release)(wl_hold *h);
    /* the user's handle that the on-lost callback is given */
    void *(*owner)(wl_hold *h);
    /* Optional (NULL for a hold of its own), for holds kept as a group
     * (locks/multi.c: one hold per name of a multi-lock). With client->mu
     * held: `lost` runs when wl_lose has just marked h LOST (not for a hold
     * being released or abandoned); it returns whether the hold layer tells
     * of this loss itself (stats, lost event, on-lost callback): a group's
     * member returns false and has its group told instead, once.
     * `deadline_moved` runs whenever wl_set_deadline set h's deadline. */
    bool (*lost)(watchlock_client *c, wl_hold *h, int reason, bool fire);
    void (*deadline_moved)(watchlock_client *c, wl_hold *h);
    /* Optional, a queued kind's waiter (locks/waiter.c), for the batched
     * liveness renewal of waiters (live_round.c). `live_args` (client->mu
     * held) gives the 6 keys of the waiter's name and its id, hold key
     * prefix and channel prefix (pointers into the handle, valid while it
     * lives). `live_done` (no library mutex held) is told each answer:
     * 2 granted, 1 still queued, 0 not queued; it wakes the waiting thread
     * for 2 and 0. */
    void (*live_args)(wl_hold *h, struct wl_live_args *a);
    void (*live_done)(wl_hold *h, int result);
    /* Optional (NULL: the plain release script on the hold's key), a
     * queued kind's (locks/queue.c): the best-effort release of a hold
     * that ends without the kind's release (the client's close, a release
     * after a loss), through the kind's own script so that the structure
     * it keeps (a queue) learns of it. No library mutex held; the caller
     * keeps a reference. */
    void (*release_best_effort)(wl_hold *h);
} wl_hold_ops;

#define WL_LIVE_NKEYS 6
typedef struct wl_live_args {
    const char *key[WL_LIVE_NKEYS];
    size_t key_len[WL_LIVE_NKEYS];
    const char *id, *hold_prefix, *chan_prefix;
    size_t id_len, hold_prefix_len, chan_prefix_len;
} wl_live_args;

/* One hold, whatever its kind: what the watchdog, the loss timer and the
 * client's close read and write. A lock kind's handle embeds one (the plain
 * lock's watchlock_lock, locks/locks.h, as its first member) and installs
 * its ops; the hold layer never sees the handle's own fields. */
struct wl_hold {
    const wl_hold_ops *ops;   /* the lock kind's (set at creation, never changed) */
    watchlock_client *client; /* counted reference */
    atomic_int refs;          /* the user's + the watchdog's while in flight + one per pending callback */
    uint64_t id;              /* the handle's id, as lost events report it */
    char quoted[96];          /* the name, printable, for messages */
    wl_keys keys;             /* the lock key and channel: renew and release arguments */

    /* guarded by client->mu */
    wl_hold *prev, *next; /* client->holds */
    int64_t lease_ms, interval_ms, max_renewals, max_hold_ms;
    int renew_num, renew_den; /* renew every num/den of the lease (den 0: interval_ms) — renew_option.c */
    bool auto_renew;
    watchlock_lost_fn on_lost;
    void *on_lost_data;
    int state;
    int lost_reason;
    int64_t hold_count;
    uint64_t hold_gen; /* bumped at every acquire and final release */
    /* Hold identity (see docs/design.md): the key holds "<token>.<epoch>".
     * token is fresh for every hold (made when the previous one ended, and
     * kept across failed attempts so that a retried acquire finds its own
     * key); the epoch changes whenever a write sets a different lease. */
    char token[33];
    bool plain_value; /* the name layout (redis-py's): the key holds the token itself, no epoch */
    int64_t epoch;    /* the server holds this epoch or a later one of ours */
    int64_t epoch_to; /* the epoch our newest write installs (== epoch when none pending) */
    int64_t epoch_ms; /* the lease that goes with epoch_to */
    int64_t fence;
    int64_t renewals;
    int64_t acquired_us;  /* when the acquiring script was sent */
    int64_t deadline_us;  /* local deadline of the current lease */
    int64_t renew_at_us;  /* next renewal due */
    int64_t wake_us;      /* renew_heap key */
    int stop_reason;      /* MAX_RENEWALS / MAX_HOLD once renewal stopped */
    bool renew_failing;   /* the last renewal failed on the network */
    bool renew_inflight;  /* the watchdog has a renewal of this hold on the wire */
    bool releasing;       /* release() could not confirm: not renewed, kept until confirmed or expired */
    bool freed;           /* the handle's free has begun: no callback may start */
    bool abandoned;       /* the handle was abandoned, its hold left to its lease: the client owns the
                             handle until the hold ends (ops->abandoned_end) */
    int64_t confirmed_us; /* when the newest confirmed write of the hold was sent */
    int cb_running;       /* this hold's callbacks now running */
    size_t heap_idx;      /* index in client->renew_heap */
    size_t dl_idx;        /* index in client->deadline_heap */
    /* A queued kind's waiter (wl_watchdog_wait_begin): while `waiting`, h
     * sits in renew_heap as a waiter, not a hold: each round renews its
     * liveness lease (live_ms) in the batched liveness call, every third of
     * it. wait_gen tells a round's answer for an earlier wait. */
    bool waiting;
    uint64_t wait_gen;
    int64_t live_ms;
};

/* KEYS and ARGV of the release script for this lock's hold (1 key,
 * WL_RELEASE_NARGS args), made with client->mu held (it reads the token). argv points into
 * the struct: do not copy it. */
#define WL_IDENT_SIZE 56
#define WL_RELEASE_NARGS 3 /* the hold's prefix, the channel, the publish command */
typedef struct wl_release_args {
    char prefix[WL_IDENT_SIZE];
    const char *argv[1 + WL_RELEASE_NARGS];
    size_t lens[1 + WL_RELEASE_NARGS];
} wl_release_args;
void wl_release_args_make(const wl_hold *h, wl_release_args *a);
/* The release script for a hold, best effort (a hold lost or given back:
 * the script deletes the key only while it still holds this hold); the
 * reply is not looked at. Without client->mu. */
void wl_release_best_effort(wl_server *srv, const wl_release_args *a);
/* The release script (EVAL) for n holds, pipelined on a fresh connection of
 * the node that serves a[0]'s key (all n share it: the client's one node
 * when n > 1), timeouts capped at cap_ms (0: the URL's). OK, or the first
 * error; with n == 1 and out, *out is the (non-error) reply, freed by the
 * caller. Without client->mu. */
int wl_release_fresh(wl_server *srv, const wl_release_args *a, size_t n, int64_t cap_ms, redisReply **out,
                     const char *what);
/* Watchdog (watchdog.c). Called with client->mu held. */
/* The renewal interval of a hold in us (a fraction of the lease, an
 * absolute interval, or lease/3); client->mu held. */
int64_t wl_renew_interval_us(const wl_hold *h);
/* EINVAL when an absolute interval is not below the lease (a later,
 * shorter lease made it too long); client->mu held. */
int wl_renew_check(const wl_hold *h);
int wl_watchdog_ensure_started(watchlock_client *c);
void wl_watchdog_schedule(watchlock_client *c, wl_hold *h); /* (re)insert with fresh wake_us */
/* The hold's next renewal is due by due_us at the latest: a hold that began
 * on a server lease shorter than its own (a queued grant's, locks/waiter.c). */
void wl_watchdog_renew_by(watchlock_client *c, wl_hold *h, int64_t due_us);
/* A granted hold begins (client->mu held; watchdog.c): state, epochs,
 * fence, deadline, renewal scheduled, watchdog and loss timer started. */
int wl_hold_begin(watchlock_client *c, wl_hold *h, int64_t fence, int64_t sent, int64_t lease_ms, int64_t deadline_us);
void wl_watchdog_unschedule(watchlock_client *c, wl_hold *h);
void wl_watchdog_stop(watchlock_client *c); /* called without mu: joins */
/* A queued waiter (not held) is renewed by the watchdog from now on: its
 * liveness lease of live_ms, every third of it; _end takes it out (before
 * its hold begins, and when it stops waiting). client->mu held. */
int wl_watchdog_wait_begin(watchlock_client *c, wl_hold *h, int64_t live_ms);
void wl_watchdog_wait_end(watchlock_client *c, wl_hold *h);
/* Why a held lock whose local deadline passed is lost. */
int wl_lock_expiry_reason(const wl_hold *h);

/* Hold writes (hold.c): renewals and extend send (token, epoch, epoch_to,
 * ms). wl_write_prepare picks the epoch for a write setting lease `ms` and
 * lowers the local deadline to what that write may leave on the server;
 * wl_write_applied takes its reply. With client->mu held. */
typedef struct wl_write {
    uint64_t gen;     /* hold the write is for */
    int64_t from, to; /* epochs the script accepts / installs */
    int64_t ms;       /* lease it sets */
    int64_t sent;     /* when it was sent (wl_now_us: CLOCK_BOOTTIME us) */
} wl_write;
void wl_write_prepare(watchlock_client *c, wl_hold *h, int64_t ms, int64_t sent, wl_write *w);
/* Returns true when the hold is still HELD afterwards. Lost holds are
 * reported through wl_lose (fire = callbacks and events). now: a time read
 * after the reply arrived (a round reads it once for all its replies),
 * judged against the hold's deadline. */
bool wl_write_applied(watchlock_client *c, wl_hold *h, const wl_write *w, int result, bool fire,
                      int64_t now);
/* The margin taken off a lease for the local deadline, in us. */
int64_t wl_margin_us(const watchlock_client *c, int64_t lease_ms);
/* Sets deadline_us and keeps the deadline heap in order. */
void wl_set_deadline(watchlock_client *c, wl_hold *h, int64_t deadline_us);
/* The hold identity "<token>.<epoch>" into buf (WL_IDENT_SIZE bytes); epoch < 0
 * gives the prefix "<token>." that names the hold whatever its epoch.
 * Returns the length. With client->mu held. */
size_t wl_ident(const wl_hold *h, int64_t epoch, char *buf);

/* One hold's renewal in a round (watchdog.c prepares it with mu held;
 * renew_round.c sends it without). */
typedef struct round_entry {
    wl_hold *hold;
    wl_write w;
    bool final_hold;            /* the last renewal allowed by max_hold */
    char ident[WL_IDENT_SIZE]; /* "<token>.<to>": the hold at the epoch this write installs */
    char from_s[24], ms_s[24];
    unsigned char ident_len, from_len, ms_len;
    int result; /* WL_WRITE_* */
    /* renew_round.c's own */
    bool need_eval;   /* the node had no script: EVAL in the second pass */
    bool redirected;  /* MOVED/ASK: sent again on its own */
    int slot;         /* the key's cluster slot (0 otherwise) */
    wl_server *node;  /* where it goes */
} round_entry;
/* Sends the renewals es[0..n) (results into es[i].result), every node at
 * once, ending network waits by cap_ms; may reorder es. Returns round trips. */
int wl_renew_round(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms);
void wl_renew_round_close(watchlock_client *c); /* the watchdog's connections */
/* The same with es[i].node set by the caller (a quorum's members, grouped
 * by node->cluster_index): nothing routed or redirected. decided (may be
 * NULL), asked as replies come in: true ends the round's first pass, the
 * nodes still pending dropped (their entries FAILED). */
int wl_renew_round_nodes(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms,
                         bool (*decided)(void *arg, const round_entry *es, size_t n), void *arg);

/* One waiter's liveness renewal in a round (live_round.c). */
typedef struct wl_live_entry {
    wl_hold *hold;
    uint64_t gen; /* hold->wait_gen when taken */
    wl_live_args a;
    char ident[WL_IDENT_SIZE];
    char live_s[24], lease_s[24];
    size_t ident_len;
    int slot;
    int result; /* 2 granted, 1 queued, 0 not queued, -1 failed */
} wl_live_entry;
/* Sends the liveness renewals es[0..n): one script call per batch of
 * waiters of one slot (one batch per round for a client's waiters outside
 * Cluster), sent until budget_ms has passed (the rest FAILED). May reorder
 * es. Returns the calls made. Without client->mu. */
int wl_live_round(watchlock_client *c, wl_live_entry *es, size_t n, int64_t budget_ms);

/* Quorum (quorum_round.c): the majority verdict (WL_WRITE_*) of one write's
 * answers res[0..n) from the members, judged with the restart rule at `at`. */
struct wl_quorum;
int wl_quorum_verdict(struct wl_quorum *q, const int *res, int64_t at);
/* wl_renew_round for a quorum client: every due hold on every member, then
 * each hold's verdict in es[i].result. */
int wl_quorum_renew_round(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms);
/* The release script on every member at once: OK when a majority answered
 * (ECONN otherwise); *result 1 released, 0 no key, -1 another owner holds a
 * majority. Members that did not answer are counted in the stats. */
int wl_quorum_release(watchlock_client *c, const wl_release_args *a, int64_t cap_ms, int *result);
/* The release script written to every member, answers left to the drain. */
void wl_quorum_release_best_effort(watchlock_client *c, const wl_release_args *a);
/* The admin calls on a quorum (quorum_admin.c, the quorum's placement
 * entries, hold.h wl_placement): every member's answer, a majority verdict. */
int wl_quorum_inspect(watchlock_client *c, const wl_keys *keys, int *held, int64_t *remaining_ms, int64_t *fence);
int wl_quorum_force_release(watchlock_client *c, const wl_keys *keys, int *released);

/* A client's placement (issue 30.2): how its holds' writes reach servers
 * and how the answers become one verdict. One per client, never NULL, set
 * at open: wl_single_placement (placement.c: one server, Sentinel's master
 * or Cluster's slot, as the topology's ops route a key) or the quorum's
 * (quorum_round.c: every member, a majority verdict under the restart
 * rule). Nothing outside a placement's own files tests which one a client
 * has (`->quorum`): the layers above call these entries.
 * - renew_round: wl_renew_round's job for the watchdog's due holds;
 * - close_conns: the watchdog's connections beyond c->server's (its nodes
 *   are renew_round.c's), at the watchdog's end;
 * - close_release: at close, the held holds' releases (best effort,
 *   args[0..n)), then the placement's background work stopped;
 * - close: after c->server is closed; free: at the client's free;
 * - stat: the placement's counters (WATCHLOCK_STAT_QUORUM_*; 0 for none);
 * - inspect, force_release: the admin calls on a name's keys (client and
 *   name checked by the caller), on the placement's servers, as its verdict
 *   (topology.h wl_inspect_at / wl_force_release_at on each);
 * - refuse: whether the placement serves a lock kind (WATCHLOCK_KIND_*):
 *   OK, or EINVAL with the reason; every handle's constructor asks it
 *   (locks/handle.c wl_handle_new), so a new kind cannot skip it. */
typedef struct wl_placement {
    int (*renew_round)(watchlock_client *c, round_entry *es, size_t n, int64_t cap_ms);
    void (*close_conns)(watchlock_client *c);
    void (*close_release)(watchlock_client *c, const wl_release_args *args, size_t n);
    void (*close)(watchlock_client *c);
    void (*free)(watchlock_client *c);
    int64_t (*stat)(watchlock_client *c, int which);
    int (*inspect)(watchlock_client *c, const wl_keys *keys, int *held, int64_t *remaining_ms, int64_t *fence);
    int (*force_release)(watchlock_client *c, const wl_keys *keys, int *released);
    int (*refuse)(watchlock_client *c, int kind);
} wl_placement;
extern const wl_placement wl_single_placement; /* placement.c */
extern const wl_placement wl_quorum_placement; /* quorum_round.c: installed by the quorum's open */

/* Tests only (tests/c/test_wd_hooks.c links the static library to set it;
 * NULL otherwise, and not exported by the shared library): called on a
 * library thread with no library mutex held, at the named point, to stage
 * the thread interleavings that CPU starvation makes. */
enum {
    WL_HOOK_ROUND_DONE, /* watchdog: a round's I/O ended, its replies are not applied yet */
    WL_HOOK_TIMER_DUE   /* loss timer: a deadline is due, the loss not declared yet */
};
extern void (*wl_test_hook)(watchlock_client *c, int point);

/* Loss (loss.c). With client->mu held. */
int wl_timer_ensure_started(watchlock_client *c);
void wl_timer_stop(watchlock_client *c); /* without mu: joins */
/* Marks the hold LOST (sticky). fire: queue the lost event and start the
 * on-lost callback (off every timing path). A hold that was being released
 * ends UNLOCKED instead, silently. */
void wl_lose(watchlock_client *c, wl_hold *h, int reason, bool fire);
/* client->mu held: makes sure a callback thread is waiting for the next
 * loss (loss.c); best effort. */
void wl_callbacks_arm(watchlock_client *c);
/* Takes a hold out of both heaps (release, loss, free, close). */
void wl_unschedule_all(watchlock_client *c, wl_hold *h);
/* Waits until no callback of `h` (or, h NULL, of the client) runs, except
 * one the calling thread is running itself. */
void wl_wait_callbacks(watchlock_client *c, wl_hold *h);

#endif
