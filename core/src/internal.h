/*
 * internal.h - private declarations shared by the core's source files.
 * Never installed. See docs/design.md for the threading model.
 *
 * Lock order (never take an earlier one while holding a later one):
 *   1. watchlock_lock.io_mu   serializes one handle's acquire/release/extend round trips
 *   2. watchlock_client.mu    lock states, both heaps, lost events, callbacks, stats
 *   3. wl_server.mu           the idle connection pool and the node's address
 *   wl_sentinel.mu (sentinel.c) is a leaf like wl_subscriber.mu.
 *   wl_subscriber.mu is a leaf: nothing else is taken while holding it, and
 *   it is never taken while holding client.mu.
 * No network I/O is done while holding client.mu or a pool/subscriber mutex,
 * except the subscriber thread's non-blocking reads/writes of small commands
 * on its own socket. No user callback runs while any library mutex is held.
 */
#ifndef WATCHLOCK_INTERNAL_H
#define WATCHLOCK_INTERNAL_H

#include "watchlock.h"
#include "transport.h"
#include "stats.h"

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
/* CLOCK_BOOTTIME in microseconds (it runs on while the host is suspended,
 * as the server's clock does): every deadline and timestamp of the
 * library. */
int64_t wl_now_us(void);
/* Test hook (tests/c/test_clock.c, which links the static library; hidden
 * like every internal symbol, so libwatchlock.so does not export it):
 * microseconds added to CLOCK_BOOTTIME only, as a suspend of the host
 * would. Always 0 outside that test. */
extern atomic_llong wl_test_suspend_us;
void wl_timespec_at(struct timespec *ts, int64_t at_us);
int wl_cond_init(pthread_cond_t *cond); /* a condvar on CLOCK_MONOTONIC */
/* Waits until signalled or at_us (wl_now_us time), or at most a second
 * (the condvar sleeps on CLOCK_MONOTONIC, which a suspend stops): callers
 * loop and re-check; at_us < 0 waits without limit. */
void wl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t at_us);
int wl_random_bytes(void *buf, size_t len);
/* Incremented in every child after fork(); handles remember their value. */
unsigned wl_fork_generation(void);
/* Makes a printable label of bytes for messages: 'name' (truncated, escaped). */
void wl_quote_name(char *out, size_t out_size, const void *name, size_t len);
/* First call of every library thread: blocks all signals (they belong to
 * the application's threads) and names the thread. */
void wl_thread_start(const char *name);
/* Makes room for one more item in a growing array (doubling from `first`).
 * 0, or -1 out of memory (the array is unchanged). */
int wl_grow(void **items, size_t *cap, size_t len, size_t size, size_t first);
/* Now + ms, saturating (never overflows); ms < 0 gives -1 ("no limit"). */
int64_t wl_deadline_after_ms(int64_t ms);
/* Hex text of 16 random bytes into out[33]; -1 when getrandom fails. */
int wl_random_token(char out[33]);
/* The decimal digits of v into buf (at least 21 bytes), NUL-terminated;
 * returns their number. For the hot paths' arguments (snprintf was a
 * visible share of a lock cycle's client time). */
size_t wl_fmt_i64(char *buf, int64_t v);
/* "<verb> <quoted name>" into buf (size bytes, truncated): the `what` of
 * a call's error messages. */
void wl_what(char *buf, size_t size, const char *verb, const char *quoted);

/* ---- URL (url.c) ---- */
enum { WL_KIND_STANDALONE, WL_KIND_SENTINEL, WL_KIND_CLUSTER };
typedef struct wl_hostport {
    char *host;
    int port;
} wl_hostport;

typedef struct wl_endpoint {
    int kind;        /* WL_KIND_*: which topology finds the node */
    char *host;      /* standalone TCP; NULL for unix sockets and Sentinel */
    int port;
    char *unix_path; /* NULL for TCP */
    char *user;      /* NULL: no ACL user */
    char *password;  /* NULL: no AUTH */
    int db;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    int keepalive;
    int64_t safety_margin_ms; /* fixed part of the margin taken off every local deadline */
    wl_tls_opts tls;          /* rediss:// and rediss-sentinel:// */
    /* Sentinel: the sentinels, the master's name, the sentinels' credentials;
     * Cluster: the seed nodes */
    wl_hostport *seeds;
    size_t n_seeds;
    char *master_name;
    char *sentinel_user;
    char *sentinel_password;
    /* min_replicas: WAIT for this many replicas after an acquire */
    int min_replicas;
    int64_t min_replicas_timeout_ms;
    char label[300]; /* "host:port", the socket path or "sentinel NAME", for messages */
} wl_endpoint;

#define WL_DEFAULT_SAFETY_MARGIN_MS 10
#define WL_MAX_SAFETY_MARGIN_MS 60000
#define WL_DEFAULT_MIN_REPLICAS_TIMEOUT_MS 1000
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
    char *owner; /* watchlock:{<escaped name>}:owner (admin.c) */
    size_t owner_len;
    char *name; /* watchlock:{%H<hex>}:name, the name itself; NULL unless the name is digested */
    size_t name_len;
} wl_keys;

/* Names longer than this get the tag "%H" + hex SHA-256 (keys.c). */
#define WL_DIGEST_NAME_MIN 256
#define WL_DIGEST_TAG_LEN 66
void wl_sha256(const void *data, size_t len, unsigned char out[32]); /* sha256.c */
/* Whether `key` is the lock key of a digested (long) name. */
bool wl_lock_key_is_digest(const char *key, size_t key_len);

int wl_keys_make(wl_keys *keys, const void *name, size_t name_len);
void wl_keys_clear(wl_keys *keys);
/* The name whose lock key is `key`, into out (at most key_len bytes); -1
 * when `key` is not a lock key this mapping makes (another suffix, a
 * stray '}', an escape it never writes). */
int wl_name_from_lock_key(const char *key, size_t key_len, char *out, size_t *out_len);
/* Appends the escaped form of one name byte to out (1 or 3 bytes); returns its length. */
size_t wl_escape_byte(unsigned char ch, char *out);

/* ---- scripts (scripts.c) ---- */
enum {
    WL_SCRIPT_ACQUIRE,
    WL_SCRIPT_RELEASE,
    WL_SCRIPT_RENEW, /* n holds at once: the watchdog's batches and extend (n = 1) */
    WL_SCRIPT_FORCE_RELEASE,
    WL_SCRIPT_INSPECT,
    WL_SCRIPT_INSPECT_OWNER, /* admin.c: inspect_owner and list */
    WL_SCRIPT_COUNT
};
typedef struct wl_script {
    const char *body;
    char sha[41]; /* hex SHA1 of body as the server names it (wl_scripts_learn) */
} wl_script;
extern wl_script wl_scripts[WL_SCRIPT_COUNT];
/* The SHA1s come from the server, not from code of ours: the first client
 * to open sends SCRIPT LOAD for every script (thread-safe, once). Until
 * then (or if SCRIPT LOAD is denied) every script is sent with EVAL. */
bool wl_scripts_have_sha(void);
void wl_scripts_learn(wl_conn *conn);

/* ---- the node (node.c) and its topology (node.c, sentinel.c) ---- */
typedef struct wl_sentinel wl_sentinel;
typedef struct wl_cluster wl_cluster;
typedef struct wl_subscriber wl_subscriber;
typedef struct wl_server {
    wl_endpoint ep;
    wl_tls *tls;        /* NULL for plain URLs; shared by every connection */
    pthread_mutex_t mu; /* guards the pool, closed and the address */
    wl_conn **idle;
    int n_idle;
    int cap_idle;
    bool closed;
    /* where the node is: the URL's host, or the master the sentinels name */
    bool addr_known;
    char host[256];
    int port;
    char label[300];
    uint64_t addr_gen; /* bumped whenever the address changes or is in doubt */
    wl_sentinel *sentinel; /* Sentinel URLs: the +switch-master watcher */
    wl_cluster *cluster;   /* Cluster URLs: the nodes and the slot map (cluster.c) */
    bool borrowed;         /* a cluster node: ep strings and tls belong to its parent */
    int cluster_index;     /* a cluster node: a number no other node of the client has */
    /* a cluster node that left the slot map (cluster.c): retired is set
     * under mu (no connection is pooled any more, no subscriber made);
     * the rest under the cluster's mutex */
    bool retired;
    uint64_t retired_epoch;
    struct wl_server *retired_next;
    /* watchdog thread only: its connection to this node and the node's
     * share of a round (watchdog.c) */
    wl_conn *wd_conn;
    wl_subscriber *sub;      /* a cluster node: its wake-ups (SSUBSCRIBE), made on first use */
    struct wl_server *parent; /* a cluster node: the client's server */
} wl_server;

int wl_server_init(wl_server *srv, const char *url);
/* A cluster node at host:port with the parent's credentials, options and TLS. */
int wl_server_init_node(wl_server *node, const wl_server *parent, const char *host, int port);
/* The node that serves `key` (the server itself unless it is a cluster);
 * NULL (ECONN set) when no node serves the key's slot. */
wl_server *wl_server_route(wl_server *srv, const void *key, size_t len);
/* "SPUBLISH" under Cluster (sharded pub/sub: the node of the channel's
 * slot), else "PUBLISH". */
const char *wl_publish_command(const wl_server *srv);
/* Some node to talk to (the server itself, or a cluster master). */
wl_server *wl_server_any(wl_server *srv);
void wl_server_close(wl_server *srv); /* frees idle connections; later puts free theirs */
/* Pins the cluster's nodes (cluster.c): a node pointer this thread gets
 * from the topology (wl_server_route, wl_server_any, wl_cluster_*) stays
 * valid until the matching unpin. No-ops (0) for other URLs. Nest freely. */
uint64_t wl_server_pin(wl_server *srv);
void wl_server_unpin(wl_server *srv, uint64_t pin);
/* A cluster node left the slot map: its idle connections are closed, none
 * is pooled any more, and its subscriber is told to stop (its waiters
 * move). The cluster frees it later (cluster.c). */
void wl_server_retire(wl_server *node);
void wl_server_destroy(wl_server *srv);
/* Opens a fresh, authenticated connection to the node. timeout_cap_ms > 0
 * lowers the connect and command timeouts (the watchdog near a deadline). */
int wl_server_connect(wl_server *srv, int64_t timeout_cap_ms, wl_conn **out);
/* Takes an idle connection or opens one. *reused tells which. */
int wl_server_get(wl_server *srv, wl_conn **out, bool *reused);
/* Gives a connection back; a failed one is freed (and, under Sentinel,
 * makes the next connection ask the sentinels again). */
void wl_server_put(wl_server *srv, wl_conn *conn);
/* The node's address changed (Sentinel): later connections go there, idle
 * ones to the old address are dropped. */
void wl_server_set_address(wl_server *srv, const char *host, int port);
/* Whether conn goes to the node's current address (not one a failover left behind). */
bool wl_server_current(wl_server *srv, const wl_conn *conn);
/* A connection opened for address generation `gen` failed: ask again. */
void wl_server_suspect(wl_server *srv, uint64_t gen);
/* "host:port" of the node as known now, for messages. */
void wl_server_label(wl_server *srv, char *out, size_t len);
/* Status for a failed call on conn (sets the detail message). */
int wl_conn_error(const wl_server *srv, const wl_conn *conn, const char *what);
/* Status for a reply: OK for non-error replies, EAUTH/EPERM/ECONN (READONLY)/ESERVER for errors. */
int wl_reply_error(const wl_server *srv, const redisReply *reply, const char *what);
bool wl_reply_is_noscript(const redisReply *reply);
bool wl_reply_is_readonly(const redisReply *reply); /* READONLY / MASTERDOWN: not the master now */

/* Runs one script on a pooled connection: EVALSHA, then EVAL on NOSCRIPT;
 * retries once on a fresh connection when a reused one turns out dead or
 * the server turned out to be a replica (READONLY: the script did not run).
 * argv holds the script's keys followed by its arguments. On OK *out is the
 * (non-error) reply, freed by the caller with freeReplyObject. */
int wl_run_script(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                  const size_t *argvlen, redisReply **out, const char *what);
/* The same, handing the connection to the caller on OK (*keep; give it
 * back with wl_server_put): for commands that only mean something on the
 * connection that wrote (WAIT). keep NULL = wl_run_script. */
int wl_run_script_keep(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                       const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep);
/* One plain command of a pipeline (lens may be NULL: C strings). */
typedef struct wl_cmd {
    int argc;
    const char *const *argv;
    const size_t *lens;
} wl_cmd;
/* Sends ncmds plain commands in one round trip on one connection of the
 * node serving cmds[0]'s first key, or cmds[1]'s when cmds[0] has none
 * (MULTI) (every key must share its slot) and
 * reads every reply into replies[] (freed by the caller, error replies and
 * cluster redirects included: not followed). OK, or
 * ECONN/ENOMEM/ECLOSED with no replies. keep: as wl_run_script_keep
 * (the connection belongs to the routed node). */
int wl_run_pipeline(wl_server *srv, int ncmds, const wl_cmd *cmds, redisReply **replies, const char *what,
                    wl_conn **keep);
/* Whether this thread's last wl_run_script sent its script a second time
 * (after a pooled connection failed at once). The first try may still have
 * run on the server (a reply lost on its way back looks the same), which
 * matters to scripts that are not idempotent: release. */
bool wl_script_was_resent(void);
/* Appends EVALSHA (or EVAL when use_body) of a script to the connection's output. */
int wl_append_script(wl_conn *conn, int script, bool use_body, int nkeys, int nargs, const char *const *argv,
                     const size_t *argvlen);

/* Cluster topology (cluster.c). */
#define WL_CLUSTER_SLOTS 16384
int wl_key_slot(const void *key, size_t len);
int wl_cluster_new(wl_server *parent, wl_cluster **out);
void wl_cluster_close(wl_cluster *cl); /* closes every node's pool */
void wl_cluster_free(wl_cluster *cl);
/* Reads the slot map (CLUSTER SLOTS) from a known node or a seed; at most
 * every 100 ms unless forced. */
int wl_cluster_refresh(wl_cluster *cl, bool force);
/* Node pointers below are valid while the caller holds a pin. */
uint64_t wl_cluster_pin(wl_cluster *cl);
/* Ends a pin; frees the retired nodes no pin can reach any more. */
void wl_cluster_unpin(wl_cluster *cl, uint64_t pin);
wl_server *wl_cluster_route(wl_cluster *cl, int slot); /* NULL: no node (ECONN set) */
wl_server *wl_cluster_node_at(wl_cluster *cl, const char *host, int port);
wl_server *wl_cluster_node(wl_cluster *cl, size_t i); /* NULL past the last */
/* MOVED: the slot is at host:port now (and the map is asked for again);
 * port 0 (the endpoint "?"): only the map is asked for again. */
void wl_cluster_moved(wl_cluster *cl, int slot, const char *host, int port);
/* The nodes that serve slots now (masters), up to max. */
size_t wl_cluster_masters(wl_cluster *cl, wl_server **out, size_t max);
/* SUBSCRIBE refusals counted by the subscribers of nodes since freed (stats). */
int64_t wl_cluster_retired_denied(wl_cluster *cl);
enum { WL_REDIRECT_NONE, WL_REDIRECT_MOVED, WL_REDIRECT_ASK, WL_REDIRECT_TRYAGAIN, WL_REDIRECT_CLUSTERDOWN };
typedef struct wl_redirect {
    int kind;
    int slot;
    char host[256]; /* "" = the node that answered */
    int port;       /* 0: the endpoint was "?" (no address): ask the slot map */
} wl_redirect;
/* Whether an error reply is a cluster redirect or a retry-later. */
bool wl_parse_redirect(const redisReply *r, wl_redirect *rd);
/* Cluster: the last MOVED a subscriber's SSUBSCRIBE got, taken once (the
 * waiter applies it to the slot map: no I/O on the subscriber thread). */
bool wl_sub_take_redirect(wl_subscriber *sub, wl_redirect *out);

/* Sentinel topology (sentinel.c). */
/* Asks the sentinels, in turn, where the master is. */
int wl_sentinel_discover(wl_server *srv, int64_t connect_ms, char *host, size_t host_len, int *port);
/* Starts the thread that follows +switch-master; on_switch(arg) runs on it
 * after the address changed (no library mutex held). */
int wl_sentinel_start(wl_server *srv, void (*on_switch)(void *), void *arg);
void wl_sentinel_stop(wl_server *srv); /* joins; NULL-safe */

/* ---- subscriber (subscriber.c) ---- */
typedef struct wl_sub_entry wl_sub_entry;

wl_subscriber *wl_subscriber_new(wl_server *srv);
void wl_subscriber_stop(wl_subscriber *sub); /* joins the thread, wakes all waiters */
/* Cluster: sharded pub/sub (SSUBSCRIBE) on this node's subscriber. Set
 * before the first join. */
void wl_subscriber_set_sharded(wl_subscriber *sub);
/* Cluster: the entry's channel is served by another node now: leave it and
 * join the channel again where wl_client_sub points. */
bool wl_sub_moved(wl_subscriber *sub, wl_sub_entry *entry);
/* The subscriber that carries wake-ups for `channel`: the client's, or
 * under Cluster the one of the node that serves the channel's slot (made on
 * first use). NULL (ECONN set) when no node serves it. */
wl_subscriber *wl_client_sub(watchlock_client *c, const char *channel, size_t len);
/* wl_client_sub + wl_sub_join as one step (the subscriber cannot be freed
 * in between). `what` prefixes the error message. */
int wl_client_join(watchlock_client *c, const char *channel, size_t len, const char *what, wl_subscriber **sub,
                   wl_sub_entry **entry);
/* Drops the connection and resubscribes on a fresh one (the node moved);
 * waiters are woken and retry. */
void wl_subscriber_reconnect(wl_subscriber *sub);
void wl_subscriber_free(wl_subscriber *sub);
/* Cluster: the node left the slot map. The thread is told to stop (not
 * joined), every entry is marked moved and its waiters woken; joins
 * succeed with a moved entry. NULL-safe. */
void wl_subscriber_retire(wl_subscriber *sub);
/* A retired subscriber's node is being freed: false while its thread has
 * not returned yet (try later); else the thread is joined and the
 * subscriber freed, or, while waiters still hold entries, left to the last
 * of them (wl_sub_leave frees it). NULL-safe (true). */
bool wl_subscriber_release(wl_subscriber *sub);
/* Registers interest in a channel (starts the thread on first use). */
int wl_sub_join(wl_subscriber *sub, const char *channel, size_t len, wl_sub_entry **out);
void wl_sub_leave(wl_subscriber *sub, wl_sub_entry *entry);
/* Waits until the channel's subscription is confirmed, the subscriber is
 * down, or at_us. Returns the channel's wake-up generation and whether
 * wake-ups can be relied on (*live). */
uint64_t wl_sub_ready(wl_subscriber *sub, wl_sub_entry *entry, int64_t at_us, bool *live);
/* Waits until the generation moves past `gen`, the subscriber stops, or
 * at_us. True when woken (not timed out). */
bool wl_sub_wait(wl_subscriber *sub, wl_sub_entry *entry, uint64_t gen, int64_t at_us);
uint64_t wl_sub_generation(wl_subscriber *sub, wl_sub_entry *entry);
int64_t wl_sub_denied(wl_subscriber *sub); /* refused SUBSCRIBEs so far */

/* ---- renew interval (renew_option.c) ---- */
/* The renewal interval of a hold in us (fraction, absolute, or lease/3); client->mu held. */
int64_t wl_renew_interval_us(const watchlock_lock *l);
/* EINVAL when an absolute interval is not below the lease; client->mu held. */
int wl_renew_check(const watchlock_lock *l);

/* ---- client and lock (client.c, lock.c, watchdog.c) ---- */
typedef struct wl_lost_event {
    uint64_t lock_id;
    int reason;
    struct wl_lost_event *next;
} wl_lost_event;

/* Min-heap of lock handles on an int64_t field (heap.c); callers hold client->mu.
 * Each slot keeps a copy of its lock's key, so sifting compares keys in the
 * array instead of reading a lock struct per level (a cache miss each with
 * a million locks held). */
typedef struct wl_heap_item {
    int64_t key;
    watchlock_lock *lock;
} wl_heap_item;
typedef struct wl_heap {
    wl_heap_item *items;
    size_t len, cap;
    size_t key_off, idx_off; /* offsetof the key and of the handle's index in this heap */
} wl_heap;
void wl_heap_init(wl_heap *h, size_t key_off, size_t idx_off);
void wl_heap_free(wl_heap *h);
int wl_heap_update(wl_heap *h, watchlock_lock *l); /* insert or re-sift; -1 out of memory */
void wl_heap_remove(wl_heap *h, watchlock_lock *l);
bool wl_heap_contains(const wl_heap *h, const watchlock_lock *l);
watchlock_lock *wl_heap_top(const wl_heap *h);

#define WL_SEEDED_SLOTS 4096 /* client->seeded: 32 KiB per client */

struct watchlock_client {
    atomic_int refs;  /* the user's reference + one per lock handle + one per callback thread */
    unsigned fork_gen;
    wl_server server; /* one server today; Redlock/Sentinel will hold several */
    atomic_bool closed;
    /* Names this client has acquired, so their fence counters are seeded
     * (lock.c acquire_fast): a direct-mapped set of lock keys' hashes
     * (watchlock_lock.key_hash), relaxed atomics. Only a name found here
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

    pthread_mutex_t mu; /* guards everything below */
    watchlock_lock *locks; /* every live handle (doubly linked) */
    /* watchdog: renewals */
    pthread_t wd_thread;
    bool wd_started;
    bool wd_stop;
    pthread_cond_t wd_cond;
    int64_t wd_sleep_until; /* when the sleeping thread looks next; 0 while awake */
    wl_heap renew_heap;     /* held locks being renewed, on wake_us */
    /* loss timer: declares holds lost at their local deadline (loss.c) */
    pthread_t tm_thread;
    bool tm_started;
    pthread_cond_t tm_cond;
    int64_t tm_sleep_until;
    wl_heap deadline_heap; /* held locks, on deadline_us */
    /* on-lost callbacks: a FIFO of pending ones, run by at most
     * WATCHLOCK_CALLBACK_THREADS detached threads (loss.c) */
    struct wl_callback_job *cb_head, *cb_tail;
    int cb_queued;  /* jobs in the queue */
    int cb_threads; /* callback threads alive */
    int cb_running; /* callbacks started and not yet returned */
    pthread_cond_t cb_cond;
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

#define WL_NOT_IN_HEAP ((size_t)-1)

struct watchlock_lock {
    watchlock_client *client; /* counted reference */
    atomic_int refs;          /* the user's + the watchdog's while in flight + one per pending callback */
    uint64_t id;
    unsigned fork_gen;
    char *name; /* NUL-terminated copy */
    size_t name_len;
    char quoted[96]; /* the name, printable, for messages */
    wl_keys keys;
    pthread_mutex_t io_mu;

    /* guarded by client->mu */
    watchlock_lock *prev, *next;
    int64_t lease_ms, interval_ms, max_renewals, max_hold_ms;
    int renew_num, renew_den; /* renew every num/den of the lease (den 0: interval_ms) — renew_option.c */
    atomic_llong wait_t0_us;  /* stats.c: when a wait kept for the next acquire call began */
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
    bool freed;           /* watchlock_lock_free() has begun: no callback may start */
    bool abandoned;       /* watchlock_lock_abandon() left the hold to its lease: the client owns the
                             handle until the hold ends (wl_abandoned_end) */
    bool token_used;      /* token belongs to a hold that began: the next attempt makes a new one */
    int64_t token_lease_ms; /* lease of the attempts made with token */
    bool last_busy;       /* io_mu: the last attempt found the name held: the next goes to the script */
    uint64_t key_hash;    /* of keys.lock, never 0: its slot in client->seeded */
    int64_t confirmed_us; /* when the newest confirmed write of the hold was sent */
    int cb_running;       /* this lock's callbacks now running */
    size_t heap_idx;      /* index in client->renew_heap */
    size_t dl_idx;        /* index in client->deadline_heap */
    /* a wait that timed out, resumed by the next acquire (see acquire) */
    wl_sub_entry *wait_entry;
    wl_subscriber *wait_sub; /* the subscriber wait_entry belongs to */
    uint64_t wait_gen;
    int64_t wait_until_us;
    /* owner record (watchlock_lock_set_owner_label), guarded by client->mu:
     * NULL = none is written at acquire */
    char *owner_label;
    int64_t name_stored_us; /* a digested name: when an acquire last stored it (0 never); client->mu */
};

/* Checks shared by every entry point: NULL, forked, closed. */
int wl_check_client(const watchlock_client *c);
int wl_check_lock(const watchlock_lock *l);
int wl_check_name(const void *name, size_t len);
/* Checks client and name, then makes the name's keys (admin calls). */
int wl_admin_keys(watchlock_client *c, const void *name, size_t name_len, wl_keys *keys);
/* KEYS and ARGV of the release script for this lock's hold (1 key,
 * WL_RELEASE_NARGS args), made with client->mu held (it reads the token). argv points into
 * the struct: do not copy it. */
#define WL_IDENT_SIZE 56
/* A fence counter at or above this (2001-09-09 in microseconds) has been
 * seeded with the server's clock; below it, it was made by INCR or by the
 * fast acquire's "SET fence 0 NX" and is seeded before its value is used
 * as a token (scripts.c, lock.c acquire_fast). */
#define WL_FENCE_SEEDED INT64_C(1000000000000000)
#define WL_RELEASE_NARGS 3 /* the hold's prefix, the channel, the publish command */
typedef struct wl_release_args {
    char prefix[WL_IDENT_SIZE];
    const char *argv[1 + WL_RELEASE_NARGS];
    size_t lens[1 + WL_RELEASE_NARGS];
} wl_release_args;
void wl_release_args_make(const watchlock_lock *l, wl_release_args *a);
int64_t wl_reply_i64(const redisReply *r); /* integer or decimal string reply */
void wl_client_unref(watchlock_client *c);
void wl_lock_unref(watchlock_lock *l);
/* With client->mu held: the hold of an abandoned handle is over (its local
 * deadline passed, a renewal found it taken, or the client is closing):
 * takes it out of both heaps and the client's list, and drops the
 * reference the client kept for it (which may free the handle, never the
 * client: callers hold the user's reference or run before close joins them). */
void wl_abandoned_end(watchlock_client *c, watchlock_lock *l);

/* Watchdog (watchdog.c). Called with client->mu held. */
int wl_watchdog_ensure_started(watchlock_client *c);
void wl_watchdog_schedule(watchlock_client *c, watchlock_lock *l); /* (re)insert with fresh wake_us */
void wl_watchdog_unschedule(watchlock_client *c, watchlock_lock *l);
void wl_watchdog_stop(watchlock_client *c); /* called without mu: joins */
/* Why a held lock whose local deadline passed is lost. */
int wl_lock_expiry_reason(const watchlock_lock *l);

/* Hold writes (lock.c): renewals and extend send (token, epoch, epoch_to,
 * ms). wl_write_prepare picks the epoch for a write setting lease `ms` and
 * lowers the local deadline to what that write may leave on the server;
 * wl_write_applied takes its reply. With client->mu held. */
typedef struct wl_write {
    uint64_t gen;     /* hold the write is for */
    int64_t from, to; /* epochs the script accepts / installs */
    int64_t ms;       /* lease it sets */
    int64_t sent;     /* when it was sent (wl_now_us: CLOCK_BOOTTIME us) */
} wl_write;
enum { WL_WRITE_OK = 1, WL_WRITE_NOT_OWNER = 0, WL_WRITE_STALE = 2, WL_WRITE_FAILED = -1 };
/* What script replies mean (replies.c): pure functions that never read past
 * a reply's end, whatever its shape (tests/fuzz/fuzz_reply.c feeds them).
 * wl_reply_acquire: {1, fence} acquired or {0, pttl} held by another owner;
 * false for any other shape. wl_reply_renew: entry i of the renew script's
 * reply for n holds, as WL_WRITE_*; FAILED for any other shape or value. */
bool wl_reply_acquire(const redisReply *r, bool *acquired, int64_t *value);
int wl_reply_renew(const redisReply *r, size_t n, size_t i);
void wl_write_prepare(watchlock_client *c, watchlock_lock *l, int64_t ms, int64_t sent, wl_write *w);
/* Returns true when the hold is still HELD afterwards. Lost holds are
 * reported through wl_lose (fire = callbacks and events). now: a time read
 * after the reply arrived (a round reads it once for all its replies),
 * judged against the hold's deadline. */
bool wl_write_applied(watchlock_client *c, watchlock_lock *l, const wl_write *w, int result, bool fire,
                      int64_t now);
/* The margin taken off a lease for the local deadline, in us. */
int64_t wl_margin_us(const watchlock_client *c, int64_t lease_ms);
/* Sets deadline_us and keeps the deadline heap in order. */
void wl_set_deadline(watchlock_client *c, watchlock_lock *l, int64_t deadline_us);
/* The hold identity "<token>.<epoch>" into buf (WL_IDENT_SIZE bytes); epoch < 0
 * gives the prefix "<token>." that names the hold whatever its epoch.
 * Returns the length. With client->mu held. */
size_t wl_ident(const watchlock_lock *l, int64_t epoch, char *buf);

/* One hold's renewal in a round (watchdog.c prepares it with mu held;
 * renew_round.c sends it without). */
typedef struct round_entry {
    watchlock_lock *lock;
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
void wl_lose(watchlock_client *c, watchlock_lock *l, int reason, bool fire);
/* Takes a hold out of both heaps (release, loss, free, close). */
void wl_unschedule_all(watchlock_client *c, watchlock_lock *l);
/* Waits until no callback of `l` (or, l NULL, of the client) runs, except
 * one the calling thread is running itself. */
void wl_wait_callbacks(watchlock_client *c, watchlock_lock *l);

#endif
