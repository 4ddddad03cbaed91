/*
 * locks/locks.h - the lock kinds (the plain lock: lock.c) and what they
 * share: the handle and its options, the wait loop. Calls into client/ and
 * the layers below.
 */
#ifndef WATCHLOCK_LOCKS_H
#define WATCHLOCK_LOCKS_H

#include "client/client.h"

#include <stddef.h>

/* A lock kind's table (issue 30.1): one per handle, never NULL, chosen by
 * the handle's constructor: the plain lock (lock.c; on a quorum client
 * quorum_lock.c's), the queued kinds (kinds.c: fair, semaphore, read-write;
 * the side and k are data of the hold), the multi-lock (multi.c). Every
 * public verb of a handle (watchlock_lock_acquire, _release, _extend,
 * _free, _abandon) checks the handle and calls its kind's entry; nothing
 * outside a kind's own files asks which kind a handle is.
 * - acquire, release, extend: the verbs, after the handle is checked;
 * - free, abandon: after the fork check (the handle layer's wl_handle_free
 *   and wl_handle_abandon for a kind whose handle is one hold);
 * - destroy: the kind's own data at the last reference (NULL: none);
 * - send_release: the release of one hold for wl_release_hold (release.c):
 *   OK with *result 1 released, 0 no key, -1 another owner's; *resent when
 *   it was sent again on a fresh connection (its first outcome unknown);
 *   NULL for a kind with its own release;
 * - release_lost: the release of a hold that ended LOST at the user's
 *   release (best effort: wakes the waiters now, never touches another
 *   owner's key); `reason` the loss's;
 * - name_layout: the handle may take the name layout (layout.c). */
typedef struct wl_lock_ops {
    int (*acquire)(watchlock_lock *l, int64_t wait_ms);
    int (*release)(watchlock_lock *l);
    int (*extend)(watchlock_lock *l, int64_t lease_ms);
    void (*free)(watchlock_lock *l);
    int (*abandon)(watchlock_lock *l);
    void (*destroy)(watchlock_lock *l);
    int (*send_release)(watchlock_lock *l, const wl_release_args *a, int64_t deadline_us, const char *what,
                        int64_t *result, bool *resent);
    void (*release_lost)(watchlock_lock *l, const wl_release_args *a, int reason);
    /* the read-write lock's write side becomes a read share (NULL: a kind
     * without one; watchlock_rwlock_downgrade checks the handle first) */
    int (*downgrade)(watchlock_lock *l);
    bool name_layout;
} wl_lock_ops;
/* A queued kind's part of a handle (queue.c; NULL for the plain lock). */
typedef struct wl_queued {
    atomic_int kind; /* the handle's: WATCHLOCK_KIND_FAIR / SEMAPHORE / READ / WRITE, never changes */
    int64_t cap;     /* the count this handle asks of the name (0: the name's) */
    int64_t share;   /* what a new hold asks for by default: 1, a writer's RW capacity; never changes */
    int64_t k;       /* permits asked for / held by the current hold; client->mu */
    /* The side is the hold's (issue 29.9): hold_gen of the hold a downgrade
     * made a read share (0: none); client->mu. wl_q_side reads it. */
    uint64_t read_gen;
    int64_t kept_k; /* the k a kept place (queued below) asked for; client->mu */
    char id[17];     /* the handle's id in the name's queue and holders (16 hex digits) */
    wl_qkeys keys;
    char *lock_key;  /* what hold.keys.lock pointed at before it became the hold key (restored at free) */
    atomic_bool keep_place; /* watchlock_lock_set_wait_slices: a timed-out acquire keeps its place */
    atomic_bool queued;     /* a kept place: the handle may still be in the name's queue */
    size_t lock_key_len;
    /* The waiting thread's channel entry, for the watchdog to wake it when
     * a batched liveness renewal finds it granted (waiter.c wl_q_live_done).
     * wake_mu guards both pointers; order: wake_mu -> subscriber.mu, never
     * with another library mutex held. */
    pthread_mutex_t wake_mu;
    wl_subscriber *wsub;
    wl_sub_entry *wentry;
    atomic_uint live_reports; /* answers the watchdog has had for this waiter */
    /* io_mu: the send time (monotonic) and the server's time (TIME, µs) of
     * the latest acquire call that queued the waiter: a grant message made
     * after it may be taken without another call (waiter.c take_grant);
     * last_server_us INT64_MAX: none */
    int64_t last_sent_us, last_server_us;
} wl_queued;

/* The plain lock's handle: its hold (what the hold layer and the client's
 * close work on, hold/hold.h) first, then what only locks/ reads. */
struct watchlock_lock {
    wl_hold hold; /* first: the hold layer gets &l->hold, wl_lock_of() gets the handle back */
    unsigned fork_gen;
    char *name; /* NUL-terminated copy */
    size_t name_len;
    pthread_mutex_t io_mu;
    atomic_llong wait_t0_us;  /* stats.c: when a wait kept for the next acquire call began */
    atomic_bool wait_slices;     /* watchlock_lock_set_wait_slices: acquire calls up to forget_wait are one wait */
    atomic_bool timeout_pending; /* wait_slices: a slice timed out; counted when the wait is given up (wait.c) */
    bool token_used;      /* token belongs to a hold that began: the next attempt makes a new one */
    bool no_expiry;       /* the name layout's key without expiry (watchlock_lock_set_no_expiry); client->mu */
    int64_t token_lease_ms; /* lease of the attempts made with token */
    bool last_busy;       /* io_mu: the last attempt found the name held: the next goes to the script */
    uint64_t key_hash;    /* of keys.lock, never 0: its slot in client->seeded */
    /* a wait that timed out, resumed by the next acquire (see acquire) */
    wl_sub_entry *wait_entry;
    wl_subscriber *wait_sub; /* the subscriber wait_entry belongs to */
    uint64_t wait_gen;
    int64_t wait_until_us;
    /* owner record (watchlock_lock_set_owner_label), guarded by client->mu:
     * NULL = none is written at acquire */
    char *owner_label;
    int64_t name_stored_us; /* a digested name: when an acquire last stored it (0 never); client->mu */
    const wl_lock_ops *kind; /* the handle's kind (never NULL), set by its constructor */
    void *kind_data;         /* the kind's own (multi.c: its members) */
    wl_queued *q;           /* a queued kind's (queue.c), NULL for the plain lock; set at creation */
    struct wl_qlock *quorum; /* a quorum client's per-member state (quorum_lock.c), made at the first acquire */
};

/* The handle whose hold is h (the plain lock's ops get their wl_hold *). */
static inline watchlock_lock *wl_lock_of(wl_hold *h)
{
    return (watchlock_lock *)((char *)h - offsetof(watchlock_lock, hold));
}

int wl_check_lock(const watchlock_lock *l);
/* An acquire call's outcome into the client's stats (wait.c): with wait
 * slices on, a timed-out call leaves its timeout pending for the next call
 * of the same wait; wl_wait_give_up (forget_wait, close, abandon) drops the
 * kept wait and counts a pending timeout. */
void wl_acquire_record(watchlock_lock *l, int rc, bool waited, int64_t t0_us);
void wl_wait_give_up(watchlock_lock *l);
/* The fencing token the hold recorded (handle.c; 0 for NULL or forked). */
int64_t wl_lock_fence(const watchlock_lock *l);
/* Quorum clients (quorum_lock.c): the plain lock's acquire and extend
 * (the kinds a quorum does not serve are refused by its placement:
 * hold.h wl_placement refuse, asked by wl_handle_new). */
/* A quorum waiter's wake-ups (quorum_wait.c): wl_qwait_signal is the
 * subscribers' notify function; wl_qwait_until sleeps until the count
 * exceeds `seen` (when wakeable) or at_us, true when woken. */
typedef struct wl_qwait {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    uint64_t count;
} wl_qwait;
void wl_qwait_signal(void *arg);
uint64_t wl_qwait_count(wl_qwait *w);
bool wl_qwait_until(wl_qwait *w, uint64_t seen, int64_t at_us, bool wakeable);
int64_t wl_jitter_us(int64_t max_us); /* random in [0, max_us) */
/* The random slice before a woken waiter's one attempt: one attempt per
 * release, the waiters' attempts spread over max(4 ms, 8 round trips),
 * doubled after each of `collisions` attempts in a row that failed with
 * grants, at most a quarter of the lease. */
int64_t wl_qwait_spread_us(int collisions, int64_t rtt_us, int64_t lease_ms);
int wl_quorum_acquire(watchlock_lock *l, int64_t wait_ms);
/* A one-hold kind's acquire on a quorum (the plain lock's attempt, wait
 * and verdict; quorum_lock.c) with the kind's own script: `script` fills
 * *s with one attempt's script, keys and arguments (at most
 * WL_QACQUIRE_MAX, in argv/lens) for the attempt's identity and lease, and
 * the owner record {host, pid, label, "host\npid\nlabel"} of a labelled
 * handle (NULL: none). Its
 * reply on each member is the plain acquire's shape ({1, fence} granted,
 * {0, pttl} held); a hold's give-back is the release script on
 * hold.keys.lock. */
struct wl_qscript;
#define WL_QACQUIRE_MAX 16
typedef void (*wl_qacquire_fn)(watchlock_lock *l, const char *ident, size_t ident_len, const char *lease_s,
                               const char *fence_ttl_s, const char *const *owner, const char **argv, size_t *lens,
                               struct wl_qscript *s);
int wl_quorum_acquire_with(watchlock_lock *l, int64_t wait_ms, wl_qacquire_fn script);
/* The quorum's entries of a one-hold kind's table (quorum_lock.c): extend
 * (the lease checked), the release on every member (a majority confirms),
 * the best-effort release of a hold that ended LOST. */
int wl_quorum_extend_checked(watchlock_lock *l, int64_t lease_ms);
int wl_quorum_send_release(watchlock_lock *l, const wl_release_args *a, int64_t deadline_us, const char *what,
                           int64_t *result, bool *resent);
void wl_quorum_release_lost(watchlock_lock *l, const wl_release_args *a, int reason);
/* The read-write lock's capacity: a reader takes 1, a writer all of it
 * (kinds.c, quorum_rw.c); more readers than this never share a name. */
#define WL_RW_CAP INT64_C(1099511627776)
/* The read-write lock on a quorum client (quorum_rw.c): *taken false on
 * any other client (nothing done); else the handle, or the error. */
int wl_quorum_rwlock_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len, bool write,
                         bool *taken);
int wl_quorum_extend(watchlock_lock *l, int64_t lease_ms);
/* A new handle of the kind `kind` whose hold ops are `ops` (handle.c):
 * checks the client and the name, asks the client's placement whether it
 * serves kind_code (WATCHLOCK_KIND_*; hold.h wl_placement refuse), makes
 * the keys and a token, links it to the client. */
int wl_handle_new(watchlock_lock **out, watchlock_client *c, const void *name, size_t name_len,
                  const wl_hold_ops *ops, const wl_lock_ops *kind, int kind_code);
/* The handle layer's free and abandon of a handle that is one hold
 * (handle.c; the plain, quorum and queued kinds' free/abandon). */
void wl_handle_free(watchlock_lock *l);
int wl_handle_abandon(watchlock_lock *l);
/* Every kind's free begins so (handle.c): no on-lost callback starts from
 * now on and a running one is waited for; a hold left (held or lost) gets
 * the count 1, so one release ends it: true then. */
bool wl_handle_free_begin(watchlock_lock *l);
/* With client->mu: held, not being released, and within the local
 * deadline. A hold past its deadline is lost even before the loss timer
 * marks it (handle.c visible_state). */
static inline bool wl_held_now(const watchlock_lock *l)
{
    return l->hold.state == WATCHLOCK_HELD && !l->hold.releasing && wl_now_us() < l->hold.deadline_us;
}
/* The lease argument of extend: 0 (the current) or 1 ms .. 30 days. */
int wl_extend_lease_check(const watchlock_lock *l, int64_t lease_ms);
/* The extend prologue of a one-hold kind (handle.c: lock.c, quorum_lock.c):
 * takes l->io_mu, then client->mu; a hold held now gets lease_ms (when
 * > 0): OK, both held. Otherwise ENOTOWNER (a hold past its deadline
 * marked lost first), both released. */
int wl_extend_begin(watchlock_lock *l, int64_t lease_ms);
/* The plain lock's table (lock.c), and a one-hold kind's on the client's
 * placement: a quorum client's plain lock is quorum_lock.c's table, any
 * other client's `single` (quorum_lock.c). */
extern const wl_lock_ops wl_plain_lock_ops;
const wl_lock_ops *wl_quorum_kind(const watchlock_client *c, const wl_lock_ops *single);
/* The plain lock's extend (lock.c; the queued kinds' too). */
int wl_plain_extend(watchlock_lock *l, int64_t lease_ms);
void wl_lock_unref(watchlock_lock *l);
/* With client->mu held: the hold of an abandoned handle is over (its local
 * deadline passed, a renewal found it taken, or the client is closing):
 * takes it out of both heaps and the client's list, and drops the
 * reference the client kept for it (which may free the handle, never the
 * client: callers hold the user's reference or run before close joins them). */
void wl_abandoned_end(watchlock_client *c, watchlock_lock *l);

/* The release of a handle that is one hold (release.c; the plain, quorum
 * and queued kinds' release entry): the count, the LOST path (the kind's
 * release_lost) and the kind's send_release; a release that could not be
 * confirmed is finished by the next call on the handle. The plain lock's
 * send_release (one server: once more on a fresh connection while the
 * lease lasts) and release_lost. */
int wl_release_one(watchlock_lock *l);
int wl_send_release_single(watchlock_lock *l, const wl_release_args *a, int64_t deadline_us, const char *what,
                           int64_t *result, bool *resent);
void wl_release_lost_single(watchlock_lock *l, const wl_release_args *a, int reason);
/* io_mu held. */
int wl_lock_finish_pending_release(watchlock_lock *l);
/* The acquire prologue of a one-hold kind (release.c): reentrant count
 * (*done), the renew interval's check, a pending release finished. */
int wl_acquire_begin(watchlock_lock *l, bool *done);
/* The acquire prologue of every kind (release.c; issue 30.5). wl_attempt_enter
 * takes l->io_mu, then client->mu (the lock order); a hold held now is
 * entered again (its count + 1): true, both mutexes released. Otherwise
 * false, both held, and a hold past its deadline is marked lost (the
 * multi-lock's acquire prologue: multi_io.c wl_multi_begin).
 * wl_attempt_begin is that for a one-hold kind's attempt (lock.c,
 * waiter.c, quorum_lock.c): *reentered and OK as above; otherwise, with `old` non-NULL a hold lost by its local
 * deadline (not taken, its token used) gets its release arguments in *old
 * (*drop_old: the caller deletes its key, checked, once the mutexes are
 * down); the hold gets a new token when its token was used, or its lease
 * changed (unless the token is the caller's own, plain_value), or always
 * with `fresh`. OK: both mutexes held, the attempt goes on; an error:
 * both released. */
bool wl_attempt_enter(watchlock_lock *l);
int wl_attempt_begin(watchlock_lock *l, bool fresh, wl_release_args *old, bool *drop_old, bool *reentered);
/* The hold ops of a handle that is one hold (release.c): unref, abandoned
 * end, release and owner find the handle that embeds the hold; the table
 * of the kinds with no more (plain, read-write on a quorum). */
void wl_one_hold_unref(wl_hold *h);
void wl_one_hold_abandoned_end(watchlock_client *c, wl_hold *h);
int wl_one_hold_release(wl_hold *h);
void *wl_one_hold_owner(wl_hold *h);
extern const wl_hold_ops wl_one_hold_ops;

/* The waiter queue (queue.c). wl_queued_init makes a new handle a queued
 * kind's: its hold key (watchlock:{N}:q:h:<id>) becomes hold.keys.lock, so
 * the watchdog's renewals, extend and the hold layer's best-effort release
 * act on it unchanged. wl_q_script runs the queue's release script (op
 * "release", "leave" or "downgrade", qscripts.c) for this handle's hold;
 * *result its integer reply. */
int wl_queued_init(watchlock_lock *l, int kind, int64_t cap, int64_t k);
void wl_queued_free(watchlock_lock *l);
int wl_q_script(watchlock_lock *l, const char *op, int64_t *result, bool *resent);
/* The side of the handle's current hold (client->mu held): READ for a
 * write hold that was downgraded, else the handle's kind (also when it
 * holds nothing: a new hold always starts as the handle's kind). */
int wl_q_side(const watchlock_lock *l);
/* The hold layer's best-effort release of a queued hold that ends without
 * its own release (wl_hold_ops.release_best_effort: close, a release after
 * a loss): the queue's release script, so the queue hands it on now. */
void wl_q_release_best_effort(wl_hold *h);
/* The queue's argument list shared by its scripts: its 6 keys into argv. */
void wl_q_keys_argv(const watchlock_lock *l, const char **argv, size_t *lens);
/* TTL the structure keeps after a call of this handle (ms). */
int64_t wl_q_keep_ms(const watchlock_lock *l);
int64_t wl_q_liveness_ms(int64_t lease_ms);
/* The queued kinds' acquire (waiter.c): k permits (0: the handle's k),
 * waiting as watchlock_lock_acquire. */
int wl_q_acquire(watchlock_lock *l, int64_t k, int64_t wait_ms);
/* The queued kinds' liveness ops (waiter.c, wl_hold_ops live_args/live_done). */
void wl_q_live_args(wl_hold *h, wl_live_args *a);
void wl_q_live_done(wl_hold *h, int result);

/* Waiting (wait.c): the wait a timed-out acquire keeps on the handle. */
void wl_wait_save(watchlock_lock *l, wl_subscriber *sub, wl_sub_entry *entry, uint64_t gen, int64_t until_us);
wl_sub_entry *wl_wait_take(watchlock_lock *l, wl_subscriber **sub, uint64_t *gen, int64_t *until_us);
void wl_wait_forget(watchlock_lock *l); /* leaves the kept wait, if any */
/* Joins the lock's release channel on the subscriber that carries it. */
int wl_wait_join(watchlock_lock *l, wl_subscriber **sub, wl_sub_entry **entry);
/* When the holder's lease ends, by the PTTL an attempt saw. */
int64_t wl_wait_holder_end(int64_t pttl_ms);

/* handle.c: the option setters' frame — the handle checked, then
 * client->mu held until wl_set_end (which returns OK). */
int wl_set_begin(watchlock_lock *l);
int wl_set_end(watchlock_lock *l);

#endif
