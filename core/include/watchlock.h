/*
 * watchlock.h - Redis distributed lock with a watchdog. The only public header.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *
 *  - Functions that can fail return an int status: WATCHLOCK_OK (0) or one of
 *    the WATCHLOCK_E* codes. watchlock_strerror() names a code;
 *    watchlock_last_error() gives the calling thread's detail message for its
 *    last failed call.
 *  - Outputs come first (`watchlock_client **out`), inputs after. Inputs are
 *    copied; the library never keeps a caller's pointer.
 *  - Durations are int64_t milliseconds.
 *  - Lock names are binary-safe byte strings (pointer + length); they may
 *    contain NUL bytes, braces or anything else. Empty names are refused.
 *  - Free/close functions accept NULL.
 *  - Nothing prints, aborts or exits. No signal handlers are installed.
 *  - Thread-safety: clients and locks may be used from any number of threads
 *    at once; exceptions are stated per function.
 *  - Fork: after fork() the child must not use handles inherited from the
 *    parent: every call on them returns WATCHLOCK_EFORKED and touches neither
 *    the network nor the parent's locks (free/close leak the child's copy
 *    instead of releasing). The child may open clients of its own.
 */
#ifndef WATCHLOCK_H
#define WATCHLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------ */

#define WATCHLOCK_VERSION_MAJOR 0
#define WATCHLOCK_VERSION_MINOR 1
#define WATCHLOCK_VERSION_PATCH 0
#define WATCHLOCK_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define WATCHLOCK_VERSION_NUMBER                                               \
    (WATCHLOCK_VERSION_MAJOR * 10000 + WATCHLOCK_VERSION_MINOR * 100 +         \
     WATCHLOCK_VERSION_PATCH)

#if defined(_WIN32)
#define WATCHLOCK_API
#elif defined(WATCHLOCK_BUILDING) && defined(__GNUC__)
#define WATCHLOCK_API __attribute__((visibility("default")))
#else
#define WATCHLOCK_API
#endif

/* Runtime version of the loaded library, as WATCHLOCK_VERSION_NUMBER. */
WATCHLOCK_API int watchlock_version(void);
/* Runtime version string ("0.1.0"). Static storage. */
WATCHLOCK_API const char *watchlock_version_string(void);

/* ---- status codes (never renumbered; retired codes are not reused) ------ */

enum {
    WATCHLOCK_OK = 0,
    WATCHLOCK_EINVAL = 1,     /* bad argument: NULL, empty name, bad duration, malformed URL */
    WATCHLOCK_ENOMEM = 2,     /* out of memory */
    WATCHLOCK_ETIMEDOUT = 3,  /* lock not acquired within the wait (held by another owner) */
    WATCHLOCK_ENOTOWNER = 4,  /* this handle does not own the lock (never acquired, released, or lost) */
    WATCHLOCK_ECONN = 5,      /* server unreachable, connection refused/dropped, command timed out */
    WATCHLOCK_EAUTH = 6,      /* authentication failed or required (wrong password, unknown user) */
    WATCHLOCK_ESERVER = 7,    /* the server answered with an error (e.g. the key holds a non-string value) */
    WATCHLOCK_ECLOSED = 8,    /* the client was closed */
    WATCHLOCK_EFORKED = 9,    /* handle inherited across fork(); only the parent may use it */
    WATCHLOCK_EINTERNAL = 10, /* a bug or an unexpected system failure */
    WATCHLOCK_EPERM = 11,     /* the server's ACL denies a command, key or channel (NOPERM) */
    WATCHLOCK_EREPLICAS = 12, /* fewer than min_replicas replicas acknowledged an acquire/extend in time */
    WATCHLOCK_EWRONGTYPE = 13,/* the name is in use as another lock kind (plain / fair / semaphore /
                                 rwlock), or a semaphore's permit count does not match */
    WATCHLOCK_EUNAVAIL = 14   /* a value is not available: a quorum's fencing token whose raise no
                                 majority of the granting members confirmed within the hold's validity */
};

/* Static, never NULL ("unknown status" for codes this version does not know). */
WATCHLOCK_API const char *watchlock_strerror(int status);

/* Detail message for the calling thread's last failed call, e.g.
 * "cannot connect to 127.0.0.1:6390: Connection refused". Never NULL ("" when none). Borrowed:
 * valid until the next watchlock call on this thread. Not cleared by
 * successful calls. */
WATCHLOCK_API const char *watchlock_last_error(void);

/* ---- lock states and loss reasons ---------------------------------------- */

enum {
    WATCHLOCK_UNLOCKED = 0, /* not held by this handle */
    WATCHLOCK_HELD = 1,     /* held; the watchdog renews it if auto-renew is on */
    WATCHLOCK_LOST = 2      /* was held, then lost; stays LOST until released or re-acquired */
};

enum {
    WATCHLOCK_LOST_NONE = 0,
    WATCHLOCK_LOST_TAKEN = 1,        /* renewal found another owner or no key (deleted, expired, taken) */
    WATCHLOCK_LOST_EXPIRED = 2,      /* the lease ran out locally without renewal (auto-renew off,
                                        or the process was stopped past its lease) */
    WATCHLOCK_LOST_MAX_RENEWALS = 3, /* renewal stopped at max_renewals and the lease ran out */
    WATCHLOCK_LOST_MAX_HOLD = 4,     /* renewal stopped at max_hold and the lease ran out */
    WATCHLOCK_LOST_CONNECTION = 5    /* renewals failed on the network until the local deadline */
};

/* Static text for a loss reason ("taken", "expired", "max renewals reached",
 * "max hold reached", "connection lost"). Never NULL. */
WATCHLOCK_API const char *watchlock_lost_reason_str(int reason);

/* ---- opaque handles ------------------------------------------------------ */

typedef struct watchlock_client watchlock_client;
typedef struct watchlock_lock watchlock_lock;

/* ---- client -------------------------------------------------------------- */

/*
 * Opens a client and connects once to check the server and credentials.
 *
 * url: NULL or "" means "redis://127.0.0.1:6379". Forms:
 *   redis://[[user]:password@]host[:port][/db][?option=value&...]
 *   unix:///path/to/redis.sock[?db=N&user=U&password=P&...]
 * Options (durations are numbers with an optional unit ms, s, m, h; a bare
 * number is seconds): connect_timeout (default 2s), command_timeout (2s),
 * keepalive (TCP keepalive on/off: 1/0, default 1), safety_margin (default
 * 10ms, 0 .. 60s): every hold's local deadline is the send time of its last
 * confirmed renewal + lease - (1% of the lease + safety_margin), at most
 * half the lease; the lock is declared LOST then, so that its owner learns
 * of a loss before Redis can let anyone else in. Raise it on hosts where a
 * thread can be held off the CPU for longer than that.
 * Percent-escapes (%40 ...) are decoded in user, password and path.
 *
 * On success *out owns one reference to the client; give it back with
 * watchlock_client_close(). On failure *out is NULL.
 * Errors: EINVAL (malformed URL), ECONN, EAUTH, ESERVER, ENOMEM.
 * Thread-safety: the returned client may be used by many threads at once.
 */
WATCHLOCK_API int watchlock_client_open(watchlock_client **out, const char *url);

/*
 * Closes the client and drops the caller's reference. Held locks are
 * released best effort (one pipelined round trip; a fair lock's, a
 * semaphore's or a read-write lock's through its queue, which grants the
 * next waiter at once), those of abandoned
 * handles (watchlock_lock_abandon) included; their handles become
 * UNLOCKED and every later call on them returns ECLOSED. Threads blocked in
 * acquire on this client return ECLOSED. No on-lost callback starts after
 * close has begun, and close waits for callbacks already running to return
 * (except the caller's own: close may be called from an on-lost callback).
 * The watchdog, loss timer and subscriber threads are joined before this
 * returns. The memory is freed when the last lock handle of the client is
 * freed too, so locks and client may be freed in any order. NULL is
 * accepted. The caller's reference is gone when close returns: a thread
 * still calling watchlock_client_next_lost_event() must keep the client
 * alive with a lock handle of its own (as the Python binding does).
 */
WATCHLOCK_API void watchlock_client_close(watchlock_client *client);

/*
 * Admin: reads the state of lock `name` as the server sees it, without
 * taking it. *held is 1 when some owner holds it; *remaining_ms its lease
 * left (-1 when held with no expiry, 0 when free); *fence the name's
 * fencing counter: the last fencing token issued for the name, or a
 * higher number an acquire attempt that found the name held spent since
 * (tokens only grow; 0 when none is remembered). Outputs may be NULL.
 */
WATCHLOCK_API int watchlock_client_inspect(watchlock_client *client, const void *name,
                                           size_t name_len, int *held, int64_t *remaining_ms,
                                           int64_t *fence);

/*
 * Admin: deletes lock `name` whatever its owner, and wakes its waiters.
 * *released (may be NULL) is 1 when a key was deleted, 0 when it was free.
 * The former owner learns of the loss at its next renewal (LOST_TAKEN).
 */
WATCHLOCK_API int watchlock_client_force_release(watchlock_client *client, const void *name,
                                                 size_t name_len, int *released);

/*
 * Loss events for bindings that cannot run code on the watchdog thread
 * (Python, Lua). After watchlock_client_enable_lost_events(client, 1), every
 * loss the watchdog detects on this client's locks is also queued (in
 * addition to the lock's callback). watchlock_client_next_lost_event() waits
 * up to timeout_ms (< 0 forever, 0 poll) for the next one and gives the
 * lock's id (watchlock_lock_id()) and the reason. Returns OK, ETIMEDOUT when
 * none came in time, ECLOSED once the client is closed (waiters are woken).
 * Thread-safe; blocking (bindings must release their interpreter lock).
 */
WATCHLOCK_API int watchlock_client_enable_lost_events(watchlock_client *client, int on);
WATCHLOCK_API int watchlock_client_next_lost_event(watchlock_client *client, int64_t timeout_ms,
                                                   uint64_t *lock_id, int *reason);

/*
 * Counters for monitoring and benchmarks. Never blocks. -1 for an unknown
 * `which`.
 *   WATCHLOCK_STAT_HELD_LOCKS       locks of this client now held (abandoned
 *                                   ones included, until their lease ends)
 *   WATCHLOCK_STAT_RENEW_ROUNDS     watchdog rounds that sent renewals
 *   WATCHLOCK_STAT_RENEW_ROUNDTRIPS network round trips those rounds took
 *                                   (one per round unless scripts had to be reloaded)
 *   WATCHLOCK_STAT_RENEWALS         successful renewals
 *   WATCHLOCK_STAT_WATCHDOG_CPU_US  CPU time used by the watchdog thread (us)
 *   WATCHLOCK_STAT_SUBSCRIBE_DENIED wake-up subscriptions the server refused
 *                                   (the ACL user may not SUBSCRIBE to the lock's
 *                                   channel): waiters then wait for the holder's
 *                                   lease to end instead of its release
 * For monitoring (counted since the client was opened, lock-free):
 *   WATCHLOCK_STAT_ACQUIRES         holds started by watchlock_lock_acquire()
 *                                   (a reentrant acquire starts none)
 *   WATCHLOCK_STAT_CONTENDED_ACQUIRES of those, the ones that found the lock
 *                                   held by another owner first and waited
 *   WATCHLOCK_STAT_ACQUIRE_TIMEOUTS acquires that returned without the lock
 *                                   (ETIMEDOUT); on a handle that waits in slices
 *                                   (watchlock_lock_set_wait_slices) the calls up
 *                                   to watchlock_lock_forget_wait() are one acquire:
 *                                   it counts once, when given up without the lock
 *   WATCHLOCK_STAT_RELEASE_RETRIES  releases sent again because an earlier
 *                                   try's outcome was unknown (connection failed)
 *   WATCHLOCK_STAT_LOST_TAKEN .. WATCHLOCK_STAT_LOST_CONNECTION
 *                                   holds lost, by reason (WATCHLOCK_LOST_*:
 *                                   WATCHLOCK_STAT_LOST_TAKEN - 1 + reason),
 *                                   callbacks or not, release's ENOTOWNER included
 *   WATCHLOCK_STAT_WAIT_US_SUM, _HOLD_US_SUM, _RENEW_RTT_US_SUM
 *                                   the sums of the histograms below (us)
 */
enum {
    WATCHLOCK_STAT_HELD_LOCKS = 0,
    WATCHLOCK_STAT_RENEW_ROUNDS = 1,
    WATCHLOCK_STAT_RENEW_ROUNDTRIPS = 2,
    WATCHLOCK_STAT_RENEWALS = 3,
    WATCHLOCK_STAT_WATCHDOG_CPU_US = 4,
    WATCHLOCK_STAT_SUBSCRIBE_DENIED = 5,
    WATCHLOCK_STAT_ACQUIRES = 6,
    WATCHLOCK_STAT_CONTENDED_ACQUIRES = 7,
    WATCHLOCK_STAT_ACQUIRE_TIMEOUTS = 8,
    WATCHLOCK_STAT_RELEASE_RETRIES = 9,
    WATCHLOCK_STAT_LOST_TAKEN = 10,
    WATCHLOCK_STAT_LOST_EXPIRED = 11,
    WATCHLOCK_STAT_LOST_MAX_RENEWALS = 12,
    WATCHLOCK_STAT_LOST_MAX_HOLD = 13,
    WATCHLOCK_STAT_LOST_CONNECTION = 14,
    WATCHLOCK_STAT_WAIT_US_SUM = 15,
    WATCHLOCK_STAT_HOLD_US_SUM = 16,
    WATCHLOCK_STAT_RENEW_RTT_US_SUM = 17,
    /* quorum clients (watchlock_client_open_quorum; 0 for others):
     *   _QUORUM_RESTARTS      members seen restarted (a new run_id, or an
     *                         uptime below the longest lease in use)
     *   _QUORUM_KEPT_OUT      members now kept out of majorities by the
     *                         restart rule (one lease after they came back)
     *   _QUORUM_UNREACHED     member writes of releases (and give-backs)
     *                         that got no answer: a release that returned OK
     *                         may have left a key on these until its lease ends
     *   _QUORUM_LATE_GRANTS   grants that came after an acquire was decided:
     *                         kept when the acquire succeeded and they came
     *                         within its validity, given back otherwise
     *   _QUORUM_FENCE_UNAVAILABLE fencing tokens reported unavailable
     *   _QUORUM_SPLIT_VOTES   failed attempts that had grants, fewer than a
     *                         majority (a contention split, whatever kept the
     *                         rest: other contenders, keys on their way out) */
    WATCHLOCK_STAT_QUORUM_RESTARTS = 18,
    WATCHLOCK_STAT_QUORUM_KEPT_OUT = 19,
    WATCHLOCK_STAT_QUORUM_UNREACHED = 20,
    WATCHLOCK_STAT_QUORUM_LATE_GRANTS = 21,
    WATCHLOCK_STAT_QUORUM_FENCE_UNAVAILABLE = 22,
    WATCHLOCK_STAT_QUORUM_SPLIT_VOTES = 23
};
WATCHLOCK_API int64_t watchlock_client_stat(watchlock_client *client, int which);

/*
 * Histograms, fixed log-scale buckets: bucket i (0 .. WATCHLOCK_HIST_BUCKETS-1)
 * counts the values <= *upper_us = 64 us * 4^i and above the previous
 * bucket's bound (not cumulative); the last one, *upper_us = INT64_MAX,
 * everything above 1073 s. Their total count is the sum of the buckets, and
 * their sum WATCHLOCK_STAT_*_US_SUM.
 *   WATCHLOCK_HIST_WAIT       an acquire call until its hold started (every
 *                             hold counted in WATCHLOCK_STAT_ACQUIRES; a wait
 *                             resumed from an earlier call counts from its start)
 *   WATCHLOCK_HIST_HOLD       a hold's start until its release confirmed it
 *                             (lost holds are counted by reason, not here)
 *   WATCHLOCK_HIST_RENEW_RTT  a watchdog round's network time (its renewals'
 *                             round trip; one per WATCHLOCK_STAT_RENEW_ROUNDS)
 * EINVAL for an unknown histogram or bucket. Never blocks.
 */
#define WATCHLOCK_HIST_BUCKETS 14
enum { WATCHLOCK_HIST_WAIT = 0, WATCHLOCK_HIST_HOLD = 1, WATCHLOCK_HIST_RENEW_RTT = 2 };
WATCHLOCK_API int watchlock_client_histogram(watchlock_client *client, int which, int bucket, int64_t *upper_us,
                                             int64_t *count);

/* ---- lock ---------------------------------------------------------------- */

/*
 * Creates a lock handle for `name` (name_len bytes, 1..WATCHLOCK_MAX_NAME).
 * The handle is the owner: it gets a random 128-bit token (getrandom). It is
 * reentrant: acquiring a handle that is already held only increments its hold
 * count (no round trip), from whatever thread. Two handles with the same name
 * exclude each other, even in one thread: use one handle per thread (or task)
 * that needs mutual exclusion.
 * Defaults: lease 30 s, auto-renew on, renew interval lease/3, no caps.
 * The handle holds a reference to the client. No network I/O.
 * Errors: EINVAL, ENOMEM, ECLOSED, EFORKED.
 */
#define WATCHLOCK_MAX_NAME (64 * 1024)
WATCHLOCK_API int watchlock_lock_new(watchlock_lock **out, watchlock_client *client,
                                     const void *name, size_t name_len);

/*
 * Frees the handle. If it is held, it is released first (best effort);
 * watchlock_lock_abandon() below frees it without releasing.
 * Its on-lost callback never starts after free has begun, and free waits
 * for a callback of this handle that is already running to return (unless
 * free is called from inside that callback, which is allowed): once free
 * returns, the callback's userdata may be freed. Not to be called
 * concurrently with other calls on the same handle. NULL is accepted.
 */
WATCHLOCK_API void watchlock_lock_free(watchlock_lock *lock);

/*
 * Gives up the handle without releasing its lock: what a garbage-collected
 * binding calls for a handle its program dropped (a dropped handle is not
 * an unlock). No network I/O, never blocks on the network.
 *
 * A held lock stays held and is left to end at its lease: the watchdog
 * stops renewing it (a renewal already on the wire may still land once),
 * the key keeps this hold's owner until Redis expires it, and nobody waits
 * less than that lease. The client keeps the hold until then: it still
 * counts in WATCHLOCK_STAT_HELD_LOCKS, watchlock_client_close() releases
 * it as it releases every held lock, and the handle's memory is freed at
 * its local deadline (or at close). Returns 1 for such a hold (held and
 * not released by its owner: what a binding reports as a dropped lock).
 *
 * A handle that holds nothing (never acquired, released, LOST, a release
 * that awaits confirmation, a closed client) is freed at once, also
 * without I/O; returns 0. A LOST hold is not released either (its key, if
 * still there, ends within the safety margin).
 *
 * Either way the handle must not be used again, its on-lost callback never
 * starts after abandon has begun (abandon waits for one already running,
 * unless called from inside it) and no lost event is queued for it. Not to
 * be called concurrently with other calls on the same handle. NULL and a
 * handle inherited across fork() return 0 and touch nothing.
 */
WATCHLOCK_API int watchlock_lock_abandon(watchlock_lock *lock);

/* Options. Take effect at the next acquire (lease: also at the next renewal).
 * Thread-safe. EINVAL on out-of-range values. */
#define WATCHLOCK_MAX_LEASE_MS (INT64_C(30) * 24 * 3600 * 1000) /* 30 days */
/* lease_ms: 1..WATCHLOCK_MAX_LEASE_MS, default 30000. */
WATCHLOCK_API int watchlock_lock_set_lease(watchlock_lock *lock, int64_t lease_ms);
/* on: 1 = the watchdog renews while held (default), 0 = the lease just runs. */
WATCHLOCK_API int watchlock_lock_set_auto_renew(watchlock_lock *lock, int on);
/* interval_ms: 0 = lease/3 (default); else 1..lease-1 (checked against the
 * lease set at the time: set the lease first, EINVAL otherwise). If a later,
 * shorter lease makes the interval >= the lease, the next acquire fails
 * with EINVAL (nothing falls back to lease/3 silently). Replaces a
 * fraction set before. */
WATCHLOCK_API int watchlock_lock_set_renew_interval(watchlock_lock *lock, int64_t interval_ms);
/* Renew every num/den of the lease (0 < num < den <= 1000000), e.g. 1/3,
 * 9/10; the interval follows later lease changes. Replaces an absolute
 * interval set before. EINVAL out of range. */
WATCHLOCK_API int watchlock_lock_set_renew_fraction(watchlock_lock *lock, int num, int den);
/* max: 0 = unlimited (default); else renewals stop after that many and the
 * lock runs out (LOST_MAX_RENEWALS). */
WATCHLOCK_API int watchlock_lock_set_max_renewals(watchlock_lock *lock, int64_t max);
/* max_hold_ms: 0 = unlimited (default); else the lease is never renewed past
 * acquire + max_hold_ms, and the lock then runs out (LOST_MAX_HOLD). */
WATCHLOCK_API int watchlock_lock_set_max_hold(watchlock_lock *lock, int64_t max_hold_ms);

/*
 * on_lost(lock, reason, userdata) runs when the library finds the lock lost
 * (reasons above): at its local deadline (declared by the client's loss
 * timer, which never waits on the network or on callbacks), or when a
 * renewal finds the key taken. Callbacks run on the client's callback
 * threads, never on the watchdog or the loss timer, with no library mutex
 * held, so a slow callback delays neither renewals nor the declaration of
 * any loss. Up to WATCHLOCK_CALLBACK_THREADS callbacks of one client run at
 * once, each on a thread of its own (started when needed, gone when there
 * is nothing left to call), so a slow callback delays no other while fewer
 * than that many are running; beyond it, the losses wait in a queue and
 * their callbacks run in the order the losses were found, as threads come
 * free (so a callback must not wait for another lock's callback to run).
 * It may call any function, on any lock, including
 * watchlock_lock_free() on this lock and watchlock_client_close(); a
 * callback not yet started when its lock is freed or its client closed is
 * not called. Losses a caller learns from a return value (release or extend
 * answering ENOTOWNER) are not reported again here. fn NULL removes it.
 */
#define WATCHLOCK_CALLBACK_THREADS 16 /* on-lost callbacks running at once, per client */
typedef void (*watchlock_lost_fn)(watchlock_lock *lock, int reason, void *userdata);
WATCHLOCK_API int watchlock_lock_set_on_lost(watchlock_lock *lock, watchlock_lost_fn fn,
                                             void *userdata);

/*
 * Acquires the lock. wait_ms: 0 = try once, < 0 = wait forever, > 0 = wait
 * up to that many milliseconds (any value: long waits saturate). Waiting is
 * woken by the holder's release (pub/sub) and never sleeps longer than the
 * holder's remaining lease, also when no wake-up can arrive (see
 * WATCHLOCK_STAT_SUBSCRIBE_DENIED). A wait that times out while the holder's
 * lease still runs is kept on the handle: the next acquire with a wait
 * resumes it without sending another acquire to the server unless a release
 * came or that lease ended (so a caller waiting in short slices does not
 * poll). Every hold has its own identity (a fresh random token), so nothing
 * sent for an earlier hold can act on this one.
 * On a held handle: increments the hold count, no round trip.
 * On a LOST handle (or a held one past its local deadline, which reads as
 * LOST): starts a fresh hold (the hold count restarts at 1).
 * Errors: ETIMEDOUT (not acquired in time), ECONN, EAUTH, ESERVER (e.g. the
 * key holds a non-string value), ECLOSED, EFORKED, EINVAL.
 * Blocking. Thread-safe.
 */
WATCHLOCK_API int watchlock_lock_acquire(watchlock_lock *lock, int64_t wait_ms);

/*
 * Drops the wait a timed-out acquire kept on the handle (see above): its
 * subscription to the release channel is given up (UNSUBSCRIBE once nobody
 * else on this client waits for the name) and the next acquire starts with a
 * fresh attempt. For callers that wait in slices and stop waiting for good
 * (a cancelled asyncio task). No I/O, never blocks. OK also when no wait was
 * kept; ECLOSED, EFORKED, EINVAL as the other calls. Thread-safe: an
 * acquire running at the same time keeps its own wait until it returns.
 */
WATCHLOCK_API int watchlock_lock_forget_wait(watchlock_lock *lock);

/*
 * Releases one hold. When the count reaches 0 the key is deleted (only if it
 * still holds this hold) and waiters are woken. If the outcome of that is
 * unknown (the connection failed), it is tried once more on a fresh
 * connection while the lease lasts; a retry that finds no key, or the key
 * of another owner (a waiter got in after the first try ran), counts as
 * released: the first try's outcome is unknown, and the hold was this
 * handle's until then (no LOST, no on-lost callback).
 * Errors: ENOTOWNER (not held by this handle: never acquired, already
 * released, or LOST - in which case the handle becomes UNLOCKED once its
 * hold count reaches 0), ECONN (not confirmed: the handle keeps the hold,
 * no longer renewed and still reading HELD, until a later release()
 * confirms it or its lease runs out, when it becomes UNLOCKED; an acquire()
 * on it first retries the release), ECLOSED, EFORKED. May be called from
 * any thread.
 */
WATCHLOCK_API int watchlock_lock_release(watchlock_lock *lock);

/*
 * Sets the lease of a held lock to lease_ms from now (never adds to what is
 * left); lease_ms 0 uses the handle's lease, > 0 also becomes the handle's
 * lease for later renewals. A renewal in flight meanwhile can never undo
 * it (writes with different leases carry different lease epochs), and the
 * local deadline never counts on more than the server may hold. ENOTOWNER
 * when not held or found lost (the handle then becomes LOST; also when the
 * reply came after the local deadline: LOST stays LOST). ECONN: not
 * confirmed; the hold keeps the shorter of the old and the new deadline and
 * the watchdog carries on. With the URL's min_replicas, the extension
 * counts only once that many replicas acknowledged it (WAIT); EREPLICAS
 * when fewer did in min_replicas_timeout: handled as ECONN (the master has
 * it, the handle does not count on it).
 */
WATCHLOCK_API int watchlock_lock_extend(watchlock_lock *lock, int64_t lease_ms);

/* WATCHLOCK_UNLOCKED, _HELD or _LOST. Never blocks (no I/O). A held lock
 * past its local deadline reads as LOST at once, even before the loss timer
 * has run: the read records the loss (the on-lost callback and the lost
 * event fire once, as for any loss), so a renewal reply that comes later
 * cannot make it HELD again. Once LOST, nothing but release() or a new
 * acquire() changes that. A NULL or forked handle reads as UNLOCKED. */
WATCHLOCK_API int watchlock_lock_state(const watchlock_lock *lock);
/* Reason of the last loss (WATCHLOCK_LOST_*), NONE when not LOST. */
WATCHLOCK_API int watchlock_lock_lost_reason(const watchlock_lock *lock);
/* Milliseconds of validity left by the local deadline (conservative: the
 * server's TTL is at least this much), 0 when not HELD. No I/O. */
WATCHLOCK_API int64_t watchlock_lock_remaining_ms(const watchlock_lock *lock);
/* Fencing token of the current (or last) hold, 0 before the first acquire.
 * Never 0 after one; strictly increasing per name across all holders, also
 * after the server's counter key expired: a counter starts at the server's
 * clock in microseconds and each hold adds 1, so a token is at most the
 * server's clock when it was issued, and a counter seeded again later
 * starts above every earlier token (as long as the server's clock does not
 * step back). */
/* On a quorum client the token is the highest counter among the members
 * that granted the hold, raised (never lowered) on those members before it
 * is handed out: the first call of a hold sends the raise to every member
 * at once (one round trip; later calls answer from memory) and returns the
 * token once a majority of members that still hold this hold confirmed it
 * (docs/design.md, "Quorum"); if that does not happen within the hold's
 * validity it returns -WATCHLOCK_EUNAVAIL (negative: no token may be used)
 * and so do later calls for this hold. Blocking on a quorum's first call;
 * never blocks otherwise. */
WATCHLOCK_API int64_t watchlock_lock_fencing_token(const watchlock_lock *lock);
/* Current hold count (0 when not held). */
WATCHLOCK_API int64_t watchlock_lock_hold_count(const watchlock_lock *lock);
/* Number of successful watchdog renewals in the current hold. */
WATCHLOCK_API int64_t watchlock_lock_renewals(const watchlock_lock *lock);
/* The handle's name; *len (may be NULL) gets its length. Borrowed: valid
 * while the handle lives. The bytes are followed by a NUL for convenience. */
WATCHLOCK_API const char *watchlock_lock_name(const watchlock_lock *lock, size_t *len);
/* Id unique among this process's lock handles (for lost events). */
WATCHLOCK_API uint64_t watchlock_lock_id(const watchlock_lock *lock);
/* The lease in ms the next acquire or renewal sets: the default (30000)
 * until watchlock_lock_set_lease() or watchlock_lock_extend() with a lease
 * changes it; 0 for a NULL or forked handle. For bindings, so that the
 * default lives here only. */
WATCHLOCK_API int64_t watchlock_lock_lease(const watchlock_lock *lock);
/* Why the current hold, or the last one once released, was lost
 * (WATCHLOCK_LOST_*); NONE when it was not. Unlike
 * watchlock_lock_lost_reason() it is kept after release, until the next
 * successful acquire starts a new hold: a caller that learns of a loss only
 * from release() (ENOTOWNER) can still ask why. No I/O. */
WATCHLOCK_API int watchlock_lock_last_lost_reason(const watchlock_lock *lock);

/* ---- multi-lock: several names, all or nothing (issue 23) ------------------ */

/*
 * A handle that holds every one of `n` names (names[i], name_lens[i] bytes
 * each; copied) or none: one lease, one hold per name, each renewed by the
 * watchdog in its batched rounds. Every watchlock_lock_* call works on it:
 * set_lease and the other options apply to every name; acquire takes all
 * names or none; release gives back all; extend sets the lease of all;
 * state is HELD only while every name is held; fencing_token is the first
 * name's token, watchlock_lock_fencing_token_at() each name's.
 * Acquire: when the names share one server (standalone, Sentinel) or one
 * Cluster slot, one script (or, once their counters are seeded, one
 * MULTI/EXEC transaction that gives back what it took if a name is held)
 * takes all of them at once; otherwise names are
 * taken in one global order (sorted by their lock keys' bytes), runs of
 * names of one slot by one script each, waiting (woken by the blocking
 * name's release, bounded by its lease) while holding the earlier ones, so
 * two multi-locks over overlapping names never deadlock. A wait that runs
 * out, a closed client or any error gives back whatever this acquire took
 * (nothing stays taken). A name whose key is of another type (in use as
 * another lock kind) fails the acquire with ESERVER and a message that
 * says so.
 * Loss: the loss of any one name is the loss of the whole hold, reported
 * once (one on-lost callback, one lost event, with the handle's id);
 * watchlock_lock_lost_name() tells which name. The other names are no
 * longer renewed; release() (or free) deletes those still held.
 * A held multi-lock over n names counts n + 1 in WATCHLOCK_STAT_HELD_LOCKS
 * (a hold per name, and the group).
 * Not supported (EINVAL at acquire): min_replicas URLs; owner labels are
 * accepted but no owner record is written.
 * Errors: EINVAL (n == 0, a name listed twice, a bad name), ENOMEM,
 * ECLOSED, EFORKED. No network I/O.
 */
WATCHLOCK_API int watchlock_multi_lock_new(watchlock_lock **out, watchlock_client *client,
                                           const void *const *names, const size_t *name_lens,
                                           size_t n);
/* Names of the handle: n of a multi-lock, 1 of any other lock. */
WATCHLOCK_API size_t watchlock_lock_name_count(const watchlock_lock *lock);
/* Name i (in the order given to watchlock_multi_lock_new; 0 for another
 * lock), *len its length; NULL past the last. Borrowed, valid while the
 * handle lives. */
WATCHLOCK_API const char *watchlock_lock_name_at(const watchlock_lock *lock, size_t i, size_t *len);
/* Fencing token of name i in the current (or last) hold (order as above;
 * i == 0 of another lock is watchlock_lock_fencing_token()), 0 before the
 * first acquire or past the last name. Each name's token comes from that
 * name's counter: strictly increasing per name across all holders, plain
 * and multi alike. */
WATCHLOCK_API int64_t watchlock_lock_fencing_token_at(const watchlock_lock *lock, size_t i);
/* The name whose loss lost the current or last hold (*len its length),
 * NULL when that hold was not lost. For another lock: its name once lost. */
WATCHLOCK_API const char *watchlock_lock_lost_name(const watchlock_lock *lock, size_t *len);

/* ---- helpers --------------------------------------------------------------- */

/*
 * Parses a duration such as "500ms", "30s", "1.5s", "5m", "1h" or "10" (bare
 * number = seconds) into milliseconds. Rejects negatives, garbage, trailing
 * text and values above WATCHLOCK_MAX_LEASE_MS (EINVAL).
 */
WATCHLOCK_API int watchlock_parse_duration(int64_t *out_ms, const char *text);

/*
 * Parses a renew interval as the bindings and the CLI take it: a fraction
 * of the lease ("1/3", "9/10": *renew_num / *renew_den, *out_ms = 0), a
 * percentage of it ("25%" = 1/4, "12.5%" = 1/8; above 0, below 100), or a
 * duration as watchlock_parse_duration reads it (*out_ms; *renew_num =
 * *renew_den = 0). Give a fraction to watchlock_lock_set_renew_fraction()
 * and a duration to watchlock_lock_set_renew_interval(). EINVAL on
 * anything else (a fraction not below 1, "0/3", "100%", garbage).
 */
WATCHLOCK_API int watchlock_parse_renew_interval(const char *text, int64_t *out_ms, int *renew_num,
                                                 int *renew_den);

/* ---- server check ------------------------------------------------------------ */

/*
 * A lock is only as safe as the server that keeps it. watchlock_client_check()
 * asks the client's server for the settings and permissions that break the
 * promises above, and returns them as a report of findings: one code and one
 * line of text each. The library prints nothing; `watchlock check` does.
 *
 * Finding codes (never renumbered; retired codes are not reused):
 */
enum {
    /* maxmemory-policy is not noeviction: under memory pressure the server
     * may evict lock keys (all of which have a TTL, so volatile-* policies
     * evict them too), and a second owner gets in. */
    WATCHLOCK_CHECK_EVICTION = 1,
    /* neither AOF (appendonly no) nor RDB snapshots (save ""): a restart
     * forgets every lock while their holders go on. */
    WATCHLOCK_CHECK_NO_PERSISTENCE = 2,
    /* appendonly yes but appendfsync is not always: a crash of the server's
     * host may lose the lock writes of the last second or so. */
    WATCHLOCK_CHECK_FSYNC = 3,
    /* the connection's ACL user may not run a command the locks need:
     * EVALSHA, EVAL (after the server's script cache is flushed), or one
     * that the lock scripts call (GET, SET, DEL, PEXPIRE, PTTL, EXISTS,
     * TIME): acquire and release fail with EPERM. */
    WATCHLOCK_CHECK_ACL_COMMANDS = 4,
    /* the ACL user may not read and write keys watchlock:*: acquire and
     * release fail with EPERM. */
    WATCHLOCK_CHECK_ACL_KEYS = 5,
    /* the ACL user may not SUBSCRIBE to or PUBLISH on channels watchlock:*:
     * waiters are not woken by a release and wait out the holder's lease
     * instead (see WATCHLOCK_STAT_SUBSCRIBE_DENIED). */
    WATCHLOCK_CHECK_ACL_CHANNELS = 6,
    /* the server has connected replicas but min-replicas-to-write is 0: a
     * failover to a replica that missed the latest lock writes lets a second
     * owner in. */
    WATCHLOCK_CHECK_REPLICAS = 7,
    /* RDB snapshots but no AOF: a restart forgets the locks taken since the
     * last snapshot. */
    WATCHLOCK_CHECK_SNAPSHOT_ONLY = 8,
    /* the server is itself a replica: lock writes fail (READONLY) or stay
     * local to it. */
    WATCHLOCK_CHECK_REPLICA_ROLE = 9,
    /* CONFIG GET or INFO is denied by the ACL (or renamed away, as on many
     * managed services): the settings that need it were not checked. */
    WATCHLOCK_CHECK_UNCHECKED = 10,
    /* quorum: a member restarted (new run_id, or uptime below the longest
     * lease in use) and does not count toward a majority until one lease
     * after it came back (the restart rule, docs/design.md "Quorum"). */
    WATCHLOCK_CHECK_RESTARTED = 11,
    /* quorum: a member could not be reached: it counts against every
     * majority until it is back. */
    WATCHLOCK_CHECK_MEMBER_UNREACHABLE = 12
};

typedef struct watchlock_report watchlock_report;

/*
 * Checks the client's server: CONFIG GET maxmemory-policy, appendonly,
 * appendfsync, save and min-replicas-to-write; INFO replication; the ACL
 * user's permissions for every command, key and channel the locks use.
 * Permissions are asked with ACL WHOAMI + ACL DRYRUN (Redis 7). When the
 * server has no ACL DRYRUN or the user may not run it, they are probed
 * instead with commands that change nothing: EVALSHA of a script that does
 * not exist, EVAL of a script that calls each command on a random key that
 * does not exist (SET ... XX), PUBLISH on a random channel nobody listens
 * to, and SUBSCRIBE on a connection of its own that is closed at once.
 * A denied CONFIG GET or INFO is a finding (UNCHECKED), not a failure.
 *
 * On success *out is a report, empty when nothing was found; free it with
 * watchlock_report_free(). On failure *out is NULL.
 * Errors: EINVAL (NULL argument), ECONN (server unreachable or a command
 * timed out), EAUTH (a new connection could not authenticate), ESERVER (the
 * server answered with an unexpected error, e.g. LOADING), ECLOSED,
 * EFORKED, ENOMEM.
 * Blocking (a dozen round trips). Thread-safe.
 */
WATCHLOCK_API int watchlock_client_check(watchlock_report **out, watchlock_client *client);

/* Number of findings (0 for NULL). The report is immutable: it may be read
 * from any number of threads at once. */
WATCHLOCK_API size_t watchlock_report_count(const watchlock_report *report);
/* Code of finding i (WATCHLOCK_CHECK_*); 0 for NULL or i out of range. */
WATCHLOCK_API int watchlock_report_code(const watchlock_report *report, size_t i);
/* One line for people about finding i: what is set, what it breaks, what to
 * change. Borrowed: valid until watchlock_report_free(). Never NULL ("" for
 * NULL or i out of range). */
WATCHLOCK_API const char *watchlock_report_message(const watchlock_report *report, size_t i);
/* Frees the report. NULL is accepted. */
WATCHLOCK_API void watchlock_report_free(watchlock_report *report);

/* Static name of a finding code, for machines: "eviction", "no_persistence",
 * "fsync", "acl_commands", "acl_keys", "acl_channels", "replicas",
 * "snapshot_only", "replica_role", "unchecked", "restarted", "member_unreachable";
 * "unknown" for other codes.
 * Never NULL. */
WATCHLOCK_API const char *watchlock_check_name(int code);

/* ---- owner info and listing ------------------------------------------------- */

/*
 * Who holds a lock. A handle with an owner label records, at each acquire,
 * the label with this host's name (gethostname) and this process's pid
 * (getpid at the time of the acquire) in a key of its own,
 * watchlock:{NAME}:owner (docs/design.md, "Redis data model"), so that
 * others can see who holds the lock (watchlock_client_inspect_owner(),
 * watchlock_client_list(), `watchlock status`). The record names the hold
 * it belongs to: a later hold of the name (by a handle without a label,
 * say) never shows an earlier hold's owner. It expires with the fencing
 * counter (max(2 x lease, 1 day) after the acquire); renewals do not
 * refresh it, so a hold longer than that shows no owner. The record is
 * best effort: where the server's ACL denies HSET the acquire still
 * succeeds, without a record. A reentrant acquire (no round trip) writes
 * nothing.
 *
 * label: any text of at most WATCHLOCK_MAX_LABEL bytes (a command line, a
 * job id; "" records host and pid only); copied. NULL (the default) records
 * nothing: the acquire then writes no more than without this feature.
 * Takes effect at the next acquire. Thread-safe.
 * Errors: EINVAL (NULL lock, label too long), ENOMEM, ECLOSED, EFORKED.
 */
#define WATCHLOCK_MAX_LABEL 1024
WATCHLOCK_API int watchlock_lock_set_owner_label(watchlock_lock *lock, const char *label);

/*
 * Key layouts. WATCHLOCK_KEYS_WATCHLOCK (the default): the lock of name N is
 * the key watchlock:{N} (escaped, docs/design.md) holding "<token>.<epoch>".
 * WATCHLOCK_KEYS_NAME: redis-py's layout, for a fleet that mixes redis-py's
 * Lock and watchlock on one name (Python's watchlock.redis_compat): the lock
 * is the key N itself holding the hold's token and nothing else, so a
 * redis-py Lock and this handle exclude each other, neither can release or
 * extend the other's hold, and DEL N frees it. The fence counter, the
 * release channel and the owner record stay under watchlock:{N}: the same
 * Cluster slot as N when N has no '{', '}' or '%' (escaped there); another
 * name's lock key and fence are in different slots, which a single server
 * or Sentinel does not mind, but the acquire script writes both, so under
 * Cluster such a name's acquire is refused (CROSSSLOT). What this layout gives up: an extend's epoch (a
 * late extend or renewal of this hold may still set its lease after a later
 * one), the owner record, and `watchlock list` (its keys are not
 * watchlock:{...}); a waiter is woken by watchlock holders' releases, and by
 * a redis-py holder's only when its key expires (redis-py publishes
 * nothing): it looks again at least every second.
 * Only on a plain lock (not a queued kind, multi-lock or quorum client)
 * while it holds nothing; a name starting with "watchlock:" is refused.
 * Errors: EINVAL, ENOMEM, ECLOSED, EFORKED.
 */
#define WATCHLOCK_KEYS_WATCHLOCK 0
#define WATCHLOCK_KEYS_NAME 1
WATCHLOCK_API int watchlock_lock_set_key_layout(watchlock_lock *lock, int layout);
/*
 * The name layout only: the value the next hold stores under the name (as
 * redis-py's acquire(token=...)): 1 .. 32 bytes, no '.' (copied). Used by
 * the next acquire's attempts until one begins a hold; later holds get
 * fresh random tokens (32 hex digits) unless set again. Not while HELD (a
 * LOST handle's next acquire starts a fresh hold: allowed). Errors: EINVAL
 * (not the name layout, held, empty, too long, a '.'), ECLOSED, EFORKED.
 */
WATCHLOCK_API int watchlock_lock_set_token(watchlock_lock *lock, const char *token);
/*
 * The name layout only, on 1: the key is written without expiry, as
 * redis-py's Lock without a timeout writes it (a crashed holder keeps it
 * until someone deletes the key: DEL name, watchlock_client_force_release
 * does not know this layout). Sets auto-renew off and the lease to
 * WATCHLOCK_MAX_LEASE_MS, which is then only the hold's local deadline: after
 * 30 days the handle reports the hold LOST (expired) and stops counting on
 * it, though the key stays. extend() gives the key that lease. While the
 * handle holds nothing. Errors: EINVAL, ECLOSED, EFORKED.
 */
WATCHLOCK_API int watchlock_lock_set_no_expiry(watchlock_lock *lock, int on);

/* An owner record: host, pid and label of a holder. Immutable: may be read
 * from any number of threads at once. */
typedef struct watchlock_owner watchlock_owner;

/*
 * Admin: watchlock_client_inspect() and the owner of the current hold, in
 * one round trip. *out is the owner record of the hold that now holds
 * `name`, or NULL when the lock is free or its holder recorded no owner
 * (no label set, or the record expired); free it with
 * watchlock_owner_free(). *held is 1 when some owner holds the lock;
 * *remaining_ms its lease left (-1 when held with no expiry, 0 when free);
 * *fence the name's fencing counter, as watchlock_client_inspect. held,
 * remaining_ms and fence may be NULL.
 * Errors: EINVAL, ECONN, EAUTH, EPERM, ESERVER, ECLOSED, EFORKED, ENOMEM
 * (*out is NULL). Blocking (one round trip). Thread-safe.
 */
WATCHLOCK_API int watchlock_client_inspect_owner(watchlock_owner **out, int *held,
                                                 int64_t *remaining_ms, int64_t *fence,
                                                 watchlock_client *client, const void *name,
                                                 size_t name_len);

/* The holder's host name as it recorded it; *len (may be NULL) gets its
 * length. Borrowed: valid while the owner record lives; followed by a NUL.
 * "" for NULL. */
WATCHLOCK_API const char *watchlock_owner_host(const watchlock_owner *owner, size_t *len);
/* The holder's process id at the time of its acquire (0 for NULL). */
WATCHLOCK_API int64_t watchlock_owner_pid(const watchlock_owner *owner);
/* The holder's label (watchlock_lock_set_owner_label); *len (may be NULL)
 * gets its length. Borrowed, as watchlock_owner_host(). "" for NULL. */
WATCHLOCK_API const char *watchlock_owner_label(const watchlock_owner *owner, size_t *len);
/* Frees an owner record from watchlock_client_inspect_owner(). Not for the
 * records a lock list lends. NULL is accepted. */
WATCHLOCK_API void watchlock_owner_free(watchlock_owner *owner);

/* The locks held on a server, from watchlock_client_list(). Immutable: may
 * be read from any number of threads at once. */
typedef struct watchlock_lock_list watchlock_lock_list;

/*
 * Admin: the locks now held whose names match `pattern`, with their
 * remaining lease, last fencing token and owner (when recorded), sorted by
 * name (bytewise). The pattern is a glob on names, as Redis's MATCH: `*`
 * any bytes, `?` one byte, `[abc]`, `[^a-z]`, and `\` makes the next byte
 * literal; every other byte (NUL included) stands for itself. NULL or an
 * empty pattern matches every name. Found with SCAN (never KEYS), one
 * pipelined round trip per SCAN page: the list is not a snapshot (a lock
 * taken or released meanwhile may or may not be in it) and a big database
 * takes many round trips. Keys that are not lock keys of this library
 * (another suffix, a value of another type) are skipped.
 * On success *out is the list (maybe empty); free it with
 * watchlock_lock_list_free(). On failure *out is NULL.
 * Errors: EINVAL (NULL out or client, pattern longer than
 * WATCHLOCK_MAX_NAME), ECONN, EAUTH, EPERM, ESERVER, ECLOSED, EFORKED,
 * ENOMEM. Blocking. Thread-safe.
 */
WATCHLOCK_API int watchlock_client_list(watchlock_lock_list **out, watchlock_client *client,
                                        const void *pattern, size_t pattern_len);

/* Number of locks in the list (0 for NULL). */
WATCHLOCK_API size_t watchlock_lock_list_count(const watchlock_lock_list *list);
/* Name of lock i (binary-safe); *len (may be NULL) gets its length.
 * Borrowed: valid until watchlock_lock_list_free(); followed by a NUL.
 * NULL for NULL or i out of range. */
WATCHLOCK_API const char *watchlock_lock_list_name(const watchlock_lock_list *list, size_t i,
                                                   size_t *len);
/* Lease left of lock i in ms when it was listed (-1: no expiry; 0 for NULL
 * or i out of range). */
WATCHLOCK_API int64_t watchlock_lock_list_remaining_ms(const watchlock_lock_list *list,
                                                       size_t i);
/* Lock i's fencing counter, as watchlock_client_inspect (0: none remembered). */
WATCHLOCK_API int64_t watchlock_lock_list_fence(const watchlock_lock_list *list, size_t i);
/* Owner record of lock i's current hold, NULL when none is recorded.
 * Borrowed: valid until watchlock_lock_list_free(); never pass it to
 * watchlock_owner_free(). */
WATCHLOCK_API const watchlock_owner *watchlock_lock_list_owner(const watchlock_lock_list *list,
                                                               size_t i);
/* Lock i's kind: WATCHLOCK_KIND_PLAIN, or for a name in use as a queued
 * kind WATCHLOCK_KIND_FAIR, _SEMAPHORE or _RWLOCK (its holders, permits and
 * queue: watchlock_client_name_info(); its remaining_ms is the longest
 * holder's lease left). WATCHLOCK_KIND_NONE (-1) for NULL or i out of range. */
WATCHLOCK_API int watchlock_lock_list_kind(const watchlock_lock_list *list, size_t i);
/* Frees the list and the owner records it lends. NULL is accepted. */
WATCHLOCK_API void watchlock_lock_list_free(watchlock_lock_list *list);

/* ---- queued lock kinds: fair lock, semaphore, read-write lock ------------
 *
 * One engine (docs/design.md, "Waiter queue and the lock family"): per name,
 * in Redis under the name's hash tag, the holders, a FIFO queue of waiters
 * (each with its own short liveness lease, renewed while it waits) and the
 * permit count. A release, or a holder's expiry noticed by the next
 * waiter's liveness renewal, grants the name inside the script to the
 * oldest waiter(s) it can satisfy (direct hand-off: the waiter's identity
 * and a fresh fencing token are written for it) and wakes only those, on a
 * channel of their own. Nobody barges past a non-empty queue. Server time
 * only. Every kind returns a watchlock_lock handle: every watchlock_lock_*
 * call (set_lease, set_on_lost, set_max_hold, acquire, release, extend,
 * state, fencing_token, remaining_ms, free, abandon ...) works on it, with
 * the plain lock's conventions (reentrant per handle, watchdog renewal,
 * loss reporting).
 *
 * Kinds on one name: a name in use (held or waited for) as one kind is
 * refused to every other kind with WATCHLOCK_EWRONGTYPE and a last_error
 * that names the kind in use; a semaphore whose permit count differs from
 * the name's is refused the same way. A plain lock's acquire on a name in
 * use as a queued kind fails with WATCHLOCK_EWRONGTYPE (it never barges
 * past the queue). Queued kinds on a quorum (Redlock) client: EINVAL.
 */
enum {
    WATCHLOCK_KIND_NONE = -1, /* watchlock_name_info_kind: the name is not in use */
    WATCHLOCK_KIND_PLAIN = 0,
    WATCHLOCK_KIND_FAIR = 1,
    WATCHLOCK_KIND_SEMAPHORE = 2,
    WATCHLOCK_KIND_READ = 3,  /* a read-write lock's read side */
    WATCHLOCK_KIND_WRITE = 4, /* a read-write lock's write side */
    WATCHLOCK_KIND_MULTI = 5,
    WATCHLOCK_KIND_RWLOCK = 6 /* watchlock_name_info_kind: a name in use as a read-write lock */
};

/* A fair lock: FIFO, direct hand-off. Errors: as watchlock_lock_new(). */
WATCHLOCK_API int watchlock_fair_lock_new(watchlock_lock **out, watchlock_client *client,
                                          const void *name, size_t name_len);
/*
 * A semaphore of `permits` permits (1 .. 2^31); 0: use the count the name
 * already has (acquire then fails with EWRONGTYPE when the name has none).
 * The count is set by the first user of a name not in use; a handle whose
 * count differs from the name's gets EWRONGTYPE at acquire.
 */
WATCHLOCK_API int watchlock_semaphore_new(watchlock_lock **out, watchlock_client *client,
                                          const void *name, size_t name_len, int64_t permits);
/*
 * Takes k >= 1 permits (at most the count) as one hold, waiting as
 * watchlock_lock_acquire() (which takes 1). FIFO with head-blocking: a
 * waiter at the head that wants more permits than are free blocks the
 * waiters behind it, so large requests are never starved. Reentrant per
 * handle with the same k (another k while held: EINVAL).
 */
WATCHLOCK_API int watchlock_semaphore_acquire(watchlock_lock *sem, int64_t k, int64_t wait_ms);
/*
 * Admin: sets the permit count of semaphore `name` (1 .. 2^31). A name in
 * use gets it at once (holders keep their permits; a larger count wakes the
 * waiters it can satisfy; a waiter at the head asking for more than the
 * new count is taken out of the queue and its acquire fails with EINVAL
 * (permits 0 handles; a handle made for another count: EWRONGTYPE), and
 * the waiters behind it are served); a name not in use keeps it for a day (each use
 * refreshes that), so later handles with permits 0 use it.
 * Errors: EINVAL, EWRONGTYPE (in use as another kind), ECONN ...
 */
WATCHLOCK_API int watchlock_client_set_permits(watchlock_client *client, const void *name,
                                               size_t name_len, int64_t permits);
/*
 * A queued kind's acquire that times out leaves the queue at once (a grant
 * made meanwhile is given back). A caller that waits in slices (several
 * acquire calls for one wait, as the Python binding does to stay
 * interruptible) sets this on the handle (on 1): a timed-out acquire then
 * keeps the handle's place in the queue for up to one liveness lease
 * (0.3-2 s), the next acquire with a wait resumes it (one that asks for
 * another k leaves it and queues again with that k), and
 * watchlock_lock_forget_wait() (or an acquire with wait 0) gives it up at
 * once (one round trip). Every kind, the plain lock included: the acquire
 * calls up to watchlock_lock_forget_wait() (or the handle's free) are one
 * wait for WATCHLOCK_STAT_ACQUIRE_TIMEOUTS, counted once if it ends without
 * the lock (a call that gets it counts no timeout). Errors: EINVAL, ECLOSED,
 * EFORKED.
 */
WATCHLOCK_API int watchlock_lock_set_wait_slices(watchlock_lock *lock, int on);
/* The handle's kind (WATCHLOCK_KIND_*); READ for a write side whose current
 * hold was downgraded (watchlock_rwlock_downgrade), while that hold lasts;
 * -1 for NULL. */
WATCHLOCK_API int watchlock_lock_kind(const watchlock_lock *lock);
/* The permits a semaphore handle holds or last asked for (1 for other kinds). */
WATCHLOCK_API int64_t watchlock_lock_permits(const watchlock_lock *lock);

/*
 * A read-write lock's side: write 0 the read side (many readers share the
 * name), 1 the write side (exclusive). Phase-fair FIFO: a waiting writer
 * blocks readers that arrive after it; the readers queued before the next
 * writer enter together. Writers' fencing tokens strictly increase; a
 * reader's fencing token is the last writer's (the name's counter when the
 * read share began, always below the next writer's). What a store can
 * check: writes carry the writer's token and are refused below the highest
 * token seen; a reader with token r that finds data last written with a
 * token above r knows a writer came in after its share began (its share was
 * lost), so its read is not consistent (docs/design.md, "Waiter queue and
 * the lock family"). The write side of a name used by a plain `watchlock run` is
 * the CLI's choice (it takes the write side when name_info says RWLOCK).
 */
WATCHLOCK_API int watchlock_rwlock_new(watchlock_lock **out, watchlock_client *client,
                                       const void *name, size_t name_len, int write);
/*
 * Write -> read without a gap: the held write side becomes a read share of
 * the same hold (same fencing token, kind READ while that hold lasts: the
 * handle's next acquire takes the write side again), and readers queued at
 * the head enter at once. No upgrade: two readers upgrading at
 * once would each wait for the other to leave (deadlock).
 * Errors: EINVAL (not a held write side), ENOTOWNER (lost), ECONN ...
 */
WATCHLOCK_API int watchlock_rwlock_downgrade(watchlock_lock *write_side);

/* What the server knows of a name, whatever its kind (one round trip). */
typedef struct watchlock_name_info watchlock_name_info;
/* Errors: EINVAL, ECONN, EAUTH, EPERM, ESERVER, ECLOSED, EFORKED, ENOMEM. */
WATCHLOCK_API int watchlock_client_name_info(watchlock_name_info **out, watchlock_client *client,
                                             const void *name, size_t name_len);
/* WATCHLOCK_KIND_NONE, _PLAIN, _FAIR, _SEMAPHORE or _RWLOCK. */
WATCHLOCK_API int watchlock_name_info_kind(const watchlock_name_info *info);
/* Permits of the name (semaphore N; 1 for a fair or plain lock; 0 rwlock / none). */
WATCHLOCK_API int64_t watchlock_name_info_permits(const watchlock_name_info *info);
/* Permits now in use (semaphore), holders (fair, plain: 0 or 1), readers (rwlock). */
WATCHLOCK_API int64_t watchlock_name_info_in_use(const watchlock_name_info *info);
/* Holds now (each permit acquisition, reader share or writer is one). */
WATCHLOCK_API int64_t watchlock_name_info_holders(const watchlock_name_info *info);
/* 1 when a writer holds a read-write lock. */
WATCHLOCK_API int watchlock_name_info_writer(const watchlock_name_info *info);
/* Waiters in the queue, and how long the oldest of them has waited (ms). */
WATCHLOCK_API int64_t watchlock_name_info_queue_length(const watchlock_name_info *info);
WATCHLOCK_API int64_t watchlock_name_info_oldest_wait_ms(const watchlock_name_info *info);
/* The name's fencing counter, as watchlock_client_inspect(). */
WATCHLOCK_API int64_t watchlock_name_info_fence(const watchlock_name_info *info);
/* Longest lease left among the holders (ms; -1 no expiry; 0 none). */
WATCHLOCK_API int64_t watchlock_name_info_remaining_ms(const watchlock_name_info *info);
/*
 * The holders of a queued kind, each with its owner record: a fair lock's
 * holder, each permit acquisition of a semaphore, each reader or the
 * writer of a read-write lock. A hold whose handle has an owner label
 * (watchlock_lock_set_owner_label) records host, pid and label when it is
 * granted, directly or by hand-off to a queued waiter, in the name's queue
 * data (docs/design.md, "Waiter queue and the lock family"); the record goes
 * with the hold. At most WATCHLOCK_INFO_MAX_HOLDERS holders are listed (those
 * whose leases end first); watchlock_name_info_holders() is the full count.
 * A plain lock lists none here (its owner: watchlock_client_inspect_owner).
 */
#define WATCHLOCK_INFO_MAX_HOLDERS 100
/* Number of holders listed (0 .. WATCHLOCK_INFO_MAX_HOLDERS; 0 for NULL). */
WATCHLOCK_API size_t watchlock_name_info_holder_count(const watchlock_name_info *info);
/* Holder i's owner record, NULL when it recorded none (no label) or i is
 * out of range. Borrowed: valid until watchlock_name_info_free(); never pass
 * it to watchlock_owner_free(). */
WATCHLOCK_API const watchlock_owner *watchlock_name_info_holder_owner(const watchlock_name_info *info, size_t i);
/* Permits holder i holds (semaphore k; 1 for a fair holder, a reader or the
 * writer); 0 for i out of range. */
WATCHLOCK_API int64_t watchlock_name_info_holder_permits(const watchlock_name_info *info, size_t i);
/* 1 when holder i is a read-write lock's writer. */
WATCHLOCK_API int watchlock_name_info_holder_writer(const watchlock_name_info *info, size_t i);
/* Holder i's lease left (ms; -1 no expiry; 0 out of range). */
WATCHLOCK_API int64_t watchlock_name_info_holder_remaining_ms(const watchlock_name_info *info, size_t i);
/* NULL is accepted. */
WATCHLOCK_API void watchlock_name_info_free(watchlock_name_info *info);
/* ---- quorum (Redlock) ------------------------------------------------------ */

/*
 * Opens a quorum client: one lock over n independent masters (Redlock),
 * held when a majority (n/2 + 1) grants it. Each URL is any single-master
 * form watchlock_client_open() takes (redis://, rediss://, unix://,
 * redis-sentinel://, each with its own password, TLS and options);
 * redis-cluster:// members are refused (EINVAL). n == 1 opens a plain
 * client (watchlock_client_open(urls[0])); n == 2 is refused (EINVAL: two
 * members tolerate no failure, use 1 or >= 3); n >= 3 (odd recommended; at
 * most WATCHLOCK_QUORUM_MAX). Every member is connected at once, in
 * parallel (as watchlock_client_open does: PING; then its run_id and
 * uptime), so members that are down or frozen cost one connect/command
 * timeout together. The open succeeds when a majority of members answered;
 * the others are reported WATCHLOCK_MEMBER_UNREACHABLE by
 * watchlock_client_member_state() and watchlock_client_check() and are
 * tried again by every call. Fewer than a majority: ECONN naming each
 * member that did not answer and why. A member that answered with an error
 * (authentication, TLS) fails the open with that error, naming it.
 *
 * Every watchlock_lock_* call works on a quorum client's plain locks:
 *  - acquire writes to every member before reading any reply and returns
 *    as soon as a majority granted (validity = lease - time since this
 *    attempt was sent - drift, on the monotonic clock) or a majority cannot
 *    grant; the grants of a failed attempt are given back (token-checked);
 *    after a success, grants that come later but within the validity are
 *    kept (the hold's, renewed and released with it; later ones are given
 *    back), so a hold may live on more than a majority. It waits, when asked to, woken by a release on any
 *    member, bounded by the lease the holders reported, with jitter.
 *    ETIMEDOUT ("busy") when a majority is held by others (or others hold
 *    some and no member was unreachable: a contention split); ECONN when
 *    members that could not be reached kept it from a majority.
 *    watchlock_lock_member_status() gives each member's verdict.
 *  - release and extend go to every member at once: release is OK when a
 *    majority of members is known free of the hold's key (answered deleted,
 *    absent or another owner's key), ECONN when no majority can be any more
 *    (WATCHLOCK_STAT_QUORUM_UNREACHED counts members that never answered);
 *    extend counts only when a majority extended.
 *  - the watchdog renews on every member in one round; the local deadline
 *    is the send time of the last round a majority confirmed + lease -
 *    drift, and the lock is LOST there (as any loss) when renewals stay
 *    below a majority. With min_replicas in a member's URL, that member's
 *    WAIT decides whether its writes count.
 *  - restart rule: a member whose run_id changed, or whose uptime is below
 *    the longest lease this client used, counts toward no majority until
 *    one such lease after it came back.
 *  - watchlock_lock_fencing_token() raises the token on the members that
 *    granted the hold (see there).
 *  - inspect: held when a majority holds the name; remaining_ms the time
 *    that majority still holds it; fence the highest counter.
 *    watchlock_client_check() checks every member (messages name it) and
 *    adds RESTARTED / MEMBER_UNREACHABLE findings. force_release goes to
 *    every member. list: the names a majority of members hold (remaining_ms
 *    how long that majority still holds them, fence the highest, no owner);
 *    per-member views through watchlock_client_member_open() /
 *    watchlock_client_member_inspect(). inspect_owner: the verdict, no owner
 *    (a quorum's holds record none in this version).
 * Queued kinds (fair lock, semaphore, rwlock) and multi-locks are refused on
 * a quorum client (EINVAL with a message) in this version.
 * Errors: EINVAL (NULL, n == 0 or 2, too many, a cluster member, a
 * malformed URL: the message names the member), ECONN, EAUTH, ESERVER,
 * ENOMEM.
 */
#define WATCHLOCK_QUORUM_MAX 63
WATCHLOCK_API int watchlock_client_open_quorum(watchlock_client **out, const char *const *urls, size_t n);

/* Number of members: 1 for a plain client, 0 for NULL. Never blocks. */
WATCHLOCK_API size_t watchlock_client_member_count(watchlock_client *client);

/* Member i's address as "host:port" (or the socket path, or the Sentinel
 * master's name), for messages. Borrowed: valid while the client lives.
 * NULL for NULL or i out of range. For a plain client, member 0 is it. */
WATCHLOCK_API const char *watchlock_client_member_label(watchlock_client *client, size_t i);

/* Member i's standing now, as the client knows it without I/O:
 * WATCHLOCK_MEMBER_RESTARTED while the restart rule keeps it out,
 * WATCHLOCK_MEMBER_UNREACHABLE when the last exchange with it failed,
 * WATCHLOCK_MEMBER_GRANTED (= counts) otherwise; UNKNOWN out of range. */
WATCHLOCK_API int watchlock_client_member_state(watchlock_client *client, size_t i);

/* Opens a plain client on member i's URL (all its options), for per-member
 * views (list, inspect_owner, check of one member). Close it with
 * watchlock_client_close(). Errors as watchlock_client_open, EINVAL for i
 * out of range. */
WATCHLOCK_API int watchlock_client_member_open(watchlock_client **out, watchlock_client *client, size_t i);

/* Admin: watchlock_client_inspect() on member i alone (one round trip). */
WATCHLOCK_API int watchlock_client_member_inspect(watchlock_client *client, size_t i, const void *name,
                                                  size_t name_len, int *held, int64_t *remaining_ms,
                                                  int64_t *fence);

/* Per-member verdicts of a lock's last acquire attempt (kept until the next
 * one): */
enum {
    WATCHLOCK_MEMBER_UNKNOWN = 0,     /* no attempt yet, or no answer was needed (decided without it) */
    WATCHLOCK_MEMBER_GRANTED = 1,     /* the member granted (and counted) */
    WATCHLOCK_MEMBER_HELD = 2,        /* held by another owner there */
    WATCHLOCK_MEMBER_UNREACHABLE = 3, /* no answer in time, connection failed, or an error reply */
    WATCHLOCK_MEMBER_RESTARTED = 4    /* kept out by the restart rule (its grant was given back) */
};
/* Member i's verdict in the lock's last acquire attempt (UNKNOWN for NULL,
 * i out of range, or a plain client's lock: i == 0 then reads GRANTED or
 * HELD after an attempt). No I/O. */
WATCHLOCK_API int watchlock_lock_member_status(const watchlock_lock *lock, size_t i);

/* ---- the API's own rules: outputs first, one code->text scheme ---------- */
/*
 * Every call that fills out-parameters takes them first, its inputs after
 * (as watchlock_client_open and watchlock_client_inspect_owner). These six
 * variants put the outputs first; the older names (watchlock_client_inspect,
 * _member_inspect, _force_release, _next_lost_event, _histogram,
 * watchlock_parse_renew_interval) keep their order and stay as documented
 * aliases until the next major version. Behaviour, errors and blocking are
 * exactly those of the older call named in each comment.
 */
/* = watchlock_client_inspect(client, name, name_len, held, remaining_ms, fence). */
WATCHLOCK_API int watchlock_client_inspect_v2(int *held, int64_t *remaining_ms, int64_t *fence,
                                              watchlock_client *client, const void *name, size_t name_len);
/* = watchlock_client_member_inspect(client, i, name, name_len, held, remaining_ms, fence). */
WATCHLOCK_API int watchlock_client_member_inspect_v2(int *held, int64_t *remaining_ms, int64_t *fence,
                                                     watchlock_client *client, size_t i, const void *name,
                                                     size_t name_len);
/* = watchlock_client_force_release(client, name, name_len, released). */
WATCHLOCK_API int watchlock_client_force_release_v2(int *released, watchlock_client *client, const void *name,
                                                    size_t name_len);
/* = watchlock_client_next_lost_event(client, timeout_ms, lock_id, reason). */
WATCHLOCK_API int watchlock_client_next_lost_event_v2(uint64_t *lock_id, int *reason, watchlock_client *client,
                                                      int64_t timeout_ms);
/* = watchlock_client_histogram(client, which, bucket, upper_us, count). */
WATCHLOCK_API int watchlock_client_histogram_v2(int64_t *upper_us, int64_t *count, watchlock_client *client,
                                                int which, int bucket);
/* = watchlock_parse_renew_interval(text, out_ms, renew_num, renew_den). */
WATCHLOCK_API int watchlock_parse_renew_interval_v2(int64_t *out_ms, int *renew_num, int *renew_den,
                                                    const char *text);

/*
 * The fencing token of the lock's current (or last) hold, as a status:
 * *token gets it (0 when the handle never held). On a quorum client the
 * first call of a hold does network work (the raise, see
 * watchlock_lock_fencing_token): WATCHLOCK_EUNAVAIL when no majority
 * confirmed it within the hold's validity (*token is 0: no token may be
 * used). Also EINVAL (NULL), EFORKED. Blocking on a quorum's first call of
 * a hold; never blocks otherwise. watchlock_lock_fencing_token() is the
 * older form (the error in-band, as a negative number).
 */
WATCHLOCK_API int watchlock_lock_fetch_fencing_token(int64_t *token, watchlock_lock *lock);

/*
 * Code -> text, one scheme: watchlock_<what>_str(code), static, never NULL.
 * watchlock_status_str = watchlock_strerror (kept as an alias);
 * watchlock_lost_reason_str (above); watchlock_check_str =
 * watchlock_check_name (kept as an alias); watchlock_kind_str names a
 * WATCHLOCK_KIND_* ("lock", "fair lock", "semaphore", "read-write lock",
 * "read-write lock (read side)", "read-write lock (write side)",
 * "multi-lock", "none"; "unknown kind" for other codes).
 */
WATCHLOCK_API const char *watchlock_status_str(int status);
WATCHLOCK_API const char *watchlock_check_str(int code);
WATCHLOCK_API const char *watchlock_kind_str(int kind);

#ifdef __cplusplus
}
#endif

#endif /* WATCHLOCK_H */
