/*
 * internal.h - private declarations shared by the core's source files.
 * Never installed. See docs/design.md for the threading model.
 *
 * Lock order (never take an earlier one while holding a later one):
 *   1. watchlock_lock.io_mu   serializes one handle's acquire/release/extend round trips
 *   2. watchlock_client.mu    lock states, the watchdog heap, lost events, stats
 *   3. wl_server.mu           the idle connection pool
 *   wl_subscriber.mu is a leaf: nothing else is taken while holding it, and
 *   it is never taken while holding client.mu.
 * No network I/O is done while holding client.mu or a pool/subscriber mutex,
 * except the subscriber thread's non-blocking reads/writes of small commands
 * on its own socket.
 */
#ifndef WATCHLOCK_INTERNAL_H
#define WATCHLOCK_INTERNAL_H

#include "watchlock.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define WL_UNUSED(x) ((void)(x))
#define WL_FORMAT(a, b) __attribute__((format(printf, a, b)))

/* ---- errors (errors.c) ---- */
/* Records a detail message for this thread and returns `status`. */
int wl_fail(int status, const char *fmt, ...) WL_FORMAT(2, 3);

/* ---- time, randomness, fork (util.c) ---- */
int64_t wl_now_us(void); /* CLOCK_MONOTONIC in microseconds */
void wl_timespec_at(struct timespec *ts, int64_t at_us);
int wl_cond_init(pthread_cond_t *cond); /* a condvar on CLOCK_MONOTONIC */
/* Waits until signalled or at_us (monotonic); at_us < 0 waits without limit. */
void wl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t at_us);
int wl_random_bytes(void *buf, size_t len);
/* Incremented in every child after fork(); handles remember their value. */
unsigned wl_fork_generation(void);
/* Makes a printable label of bytes for messages: 'name' (truncated, escaped). */
void wl_quote_name(char *out, size_t out_size, const void *name, size_t len);
/* Drift margin subtracted from every local deadline: 1% of the lease + 2 ms. */
int64_t wl_drift_us(int64_t lease_ms);

/* ---- URL (url.c) ---- */
typedef struct wl_endpoint {
    char *host;      /* NULL for unix sockets */
    int port;
    char *unix_path; /* NULL for TCP */
    char *user;      /* NULL: no ACL user */
    char *password;  /* NULL: no AUTH */
    int db;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    int keepalive;
    char label[300]; /* "host:port" or the socket path, for messages */
} wl_endpoint;

int wl_endpoint_parse(wl_endpoint *ep, const char *url);
void wl_endpoint_clear(wl_endpoint *ep);

/* ---- keys (keys.c) ---- */
typedef struct wl_keys {
    char *lock;  /* watchlock:{<escaped name>} */
    size_t lock_len;
    char *fence; /* watchlock:{<escaped name>}:fence */
    size_t fence_len;
    char *channel; /* watchlock:{<escaped name>}:released */
    size_t channel_len;
} wl_keys;

int wl_keys_make(wl_keys *keys, const void *name, size_t name_len);
void wl_keys_clear(wl_keys *keys);

/* ---- scripts (scripts.c) ---- */
enum {
    WL_SCRIPT_ACQUIRE,
    WL_SCRIPT_RELEASE,
    WL_SCRIPT_RENEW,
    WL_SCRIPT_RENEW_MANY,
    WL_SCRIPT_FORCE_RELEASE,
    WL_SCRIPT_INSPECT,
    WL_SCRIPT_COUNT
};
typedef struct wl_script {
    const char *body;
    char sha[41]; /* hex SHA1 of body, filled by wl_scripts_init() */
} wl_script;
extern wl_script wl_scripts[WL_SCRIPT_COUNT];
void wl_scripts_init(void); /* idempotent, thread-safe */

/* ---- connections (conn.c) ---- */
typedef struct wl_server {
    wl_endpoint ep;
    pthread_mutex_t mu; /* guards idle[] and closed */
    redisContext **idle;
    int n_idle;
    int cap_idle;
    bool closed;
} wl_server;

int wl_server_init(wl_server *srv, const char *url);
void wl_server_close(wl_server *srv); /* frees idle connections; later puts free theirs */
void wl_server_destroy(wl_server *srv);
/* Opens a fresh, authenticated connection. timeout_cap_ms > 0 lowers the
 * connect and command timeouts (used by the watchdog near a deadline). */
int wl_server_connect(wl_server *srv, int64_t timeout_cap_ms, redisContext **out);
/* Takes an idle connection or opens one. *reused tells which. */
int wl_server_get(wl_server *srv, redisContext **out, bool *reused);
/* Gives a connection back; a connection with an error is freed instead. */
void wl_server_put(wl_server *srv, redisContext *ctx);
/* Status for a failed hiredis call on ctx (sets the detail message). */
int wl_conn_error(const wl_server *srv, const redisContext *ctx, const char *what);
/* Status for a reply: OK for non-error replies, EAUTH/ESERVER for errors. */
int wl_reply_error(const wl_server *srv, const redisReply *reply, const char *what);
bool wl_reply_is_noscript(const redisReply *reply);

/* Runs one script on a pooled connection: EVALSHA, then EVAL on NOSCRIPT;
 * retries once on a fresh connection when a reused one turns out dead.
 * argv holds the script's keys followed by its arguments. On OK *out is the
 * (non-error) reply, freed by the caller with freeReplyObject. */
int wl_run_script(wl_server *srv, int script, int nkeys, int nargs, const char **argv,
                  const size_t *argvlen, redisReply **out, const char *what);
/* Appends EVALSHA (or EVAL when use_body) of a script to ctx's output buffer. */
int wl_append_script(redisContext *ctx, int script, bool use_body, int nkeys, int nargs,
                     const char **argv, const size_t *argvlen);

/* ---- subscriber (subscriber.c) ---- */
typedef struct wl_subscriber wl_subscriber;
typedef struct wl_sub_entry wl_sub_entry;

wl_subscriber *wl_subscriber_new(wl_server *srv);
void wl_subscriber_stop(wl_subscriber *sub); /* joins the thread, wakes all waiters */
void wl_subscriber_free(wl_subscriber *sub);
/* Registers interest in a channel (starts the thread on first use). */
int wl_sub_join(wl_subscriber *sub, const char *channel, size_t len, wl_sub_entry **out);
void wl_sub_leave(wl_subscriber *sub, wl_sub_entry *entry);
/* Waits until the channel's subscription is confirmed, the subscriber is
 * down, or at_us. Returns the channel's wake-up generation and whether
 * wake-ups can be relied on (*live). */
uint64_t wl_sub_ready(wl_subscriber *sub, wl_sub_entry *entry, int64_t at_us, bool *live);
/* Waits until the generation moves past `gen`, the subscriber stops, or at_us. */
void wl_sub_wait(wl_subscriber *sub, wl_sub_entry *entry, uint64_t gen, int64_t at_us);

/* ---- client and lock (client.c, lock.c, watchdog.c) ---- */
typedef struct wl_lost_event {
    uint64_t lock_id;
    int reason;
    struct wl_lost_event *next;
} wl_lost_event;

struct watchlock_client {
    atomic_int refs;  /* the user's reference + one per lock handle */
    unsigned fork_gen;
    wl_server server; /* one server today; Redlock/Sentinel will hold several */
    atomic_bool closed;

    pthread_mutex_t mu; /* guards everything below */
    watchlock_lock *locks; /* every live handle (doubly linked) */
    /* watchdog */
    pthread_t wd_thread;
    bool wd_started;
    bool wd_stop;
    pthread_cond_t wd_cond;
    int64_t wd_sleep_until; /* when the sleeping thread looks next; 0 while awake */
    watchlock_lock **heap; /* held locks, min-heap on wake_us */
    size_t heap_len, heap_cap;
    redisContext *wd_conn; /* used by the watchdog thread only, outside mu */
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
};

#define WL_NOT_IN_HEAP ((size_t)-1)

struct watchlock_lock {
    watchlock_client *client; /* counted reference */
    atomic_int refs;          /* the user's + the watchdog's while in flight */
    uint64_t id;
    unsigned fork_gen;
    char *name; /* NUL-terminated copy */
    size_t name_len;
    char quoted[96]; /* the name, printable, for messages */
    wl_keys keys;
    char token[33]; /* 128 random bits, hex */
    pthread_mutex_t io_mu;

    /* guarded by client->mu */
    watchlock_lock *prev, *next;
    int64_t lease_ms, interval_ms, max_renewals, max_hold_ms;
    bool auto_renew;
    watchlock_lost_fn on_lost;
    void *on_lost_data;
    int state;
    int lost_reason;
    int64_t hold_count;
    uint64_t hold_gen; /* bumped at every acquire and final release */
    int64_t fence;
    int64_t renewals;
    int64_t acquired_us;  /* when the acquiring script was sent */
    int64_t deadline_us;  /* local deadline of the current lease */
    int64_t renew_at_us;  /* next renewal due */
    int64_t wake_us;      /* heap key */
    int stop_reason;      /* MAX_RENEWALS / MAX_HOLD once renewal stopped */
    bool renew_failing;   /* the last renewal failed on the network */
    size_t heap_idx;
};

/* Checks shared by every entry point: NULL, forked, closed. */
int wl_check_client(const watchlock_client *c);
int wl_check_lock(const watchlock_lock *l);
int wl_check_name(const void *name, size_t len);
/* KEYS and ARGV of the release script for this lock (1 key, 2 args). */
void wl_release_args(const watchlock_lock *l, const char *argv[3], size_t lens[3]);
int64_t wl_reply_i64(const redisReply *r); /* integer or decimal string reply */
void wl_client_unref(watchlock_client *c);
void wl_lock_unref(watchlock_lock *l);

/* Watchdog (watchdog.c). Called with client->mu held. */
int wl_watchdog_ensure_started(watchlock_client *c);
void wl_watchdog_schedule(watchlock_client *c, watchlock_lock *l); /* (re)insert with fresh wake_us */
void wl_watchdog_unschedule(watchlock_client *c, watchlock_lock *l);
void wl_watchdog_stop(watchlock_client *c); /* called without mu: joins */
void wl_lock_mark_lost(watchlock_client *c, watchlock_lock *l, int reason);
/* Why a held lock whose local deadline passed is lost. */
int wl_lock_expiry_reason(const watchlock_lock *l);

#endif
