/*
 * node/node.h - the node layer: one Redis server, its pool of connections,
 * AUTH/SELECT/ROLE, one script call (EVALSHA + NOSCRIPT), and its
 * subscriber (wake-ups by pub/sub). Calls into transport/, proto/, base/.
 */
#ifndef WATCHLOCK_NODE_H
#define WATCHLOCK_NODE_H

#include "transport/transport.h"

/* ---- the node (node.c) ---- */
typedef struct wl_sentinel wl_sentinel;
typedef struct wl_cluster wl_cluster;
typedef struct wl_subscriber wl_subscriber;
typedef struct wl_server wl_server;

/* What a node asks of the topology that made it, without knowing which
 * one: installed by topology/ (topology.c), NULL for a plain node. */
typedef struct wl_node_hooks {
    /* a connection somewhere the topology picks (cluster: any master);
     * such a server pools no connections */
    int (*connect)(wl_server *srv, int64_t timeout_cap_ms, wl_conn **out);
    /* where the node is now, when its address is not known (sentinel) */
    int (*discover)(wl_server *srv, int64_t connect_ms, char *host, size_t host_len, int *port);
} wl_node_hooks;

/* A check every connection to the node passes, whichever path opens it
 * (installed by the topology: the quorum's restart rule). wl_server_connect
 * queues the commands first on every connection it opens, and their
 * replies go to fn (wl_conn_expect) before any other reply on it is read. */
#define WL_CHECK_MAX 2
typedef struct wl_conn_check {
    int ncmd;
    int argc[WL_CHECK_MAX];
    const char *const *argv[WL_CHECK_MAX];
    void (*fn)(void *arg, int index, const redisReply *r);
    void *arg;
} wl_conn_check;

struct wl_server {
    const wl_node_hooks *hooks; /* the topology's (see above); NULL for a node of its own */
    const struct wl_topology_ops *topo; /* the client's server: its topology's table (topology.h); NULL for a node */
    wl_endpoint ep;
    const wl_conn_check *check; /* NULL: none (see wl_conn_check) */
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
};

/* The node of a URL (endpoint, TLS, mutex, the standalone address): the
 * topology layer's wl_server_init adds the rest. */
int wl_node_init(wl_server *srv, const char *url);
/* A cluster node at host:port with the parent's credentials, options and TLS. */
int wl_server_init_node(wl_server *node, const wl_server *parent, const char *host, int port);
void wl_node_close(wl_server *srv); /* frees idle connections; later puts free theirs */
/* A cluster node left the slot map: its idle connections are closed and
 * none is pooled any more. Returns its subscriber, for the caller to retire. */
wl_subscriber *wl_node_retire(wl_server *node);
/* Frees the node's own parts (pool, watchdog connection, mutex, and the URL
 * and TLS unless borrowed); its subscriber and cluster are the topology's. */
void wl_node_destroy(wl_server *srv);
/* Opens a fresh, authenticated connection to the node (the one place that
 * does: the node's check, if any, is queued first). timeout_cap_ms > 0
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

/* Appends EVALSHA (or EVAL when use_body) of a script to the connection's output. */
int wl_append_script(wl_conn *conn, int script, bool use_body, int nkeys, int nargs, const char *const *argv,
                     const size_t *argvlen);
/* One script call on conn: EVALSHA, then EVAL when the server lost its
 * cache. *readonly: the server refused it as a replica (it did not run).
 * rd: a cluster redirect or retry-later (it did not run either). asking:
 * send ASKING first (the slot is being imported by this node). */
int wl_node_script_once(wl_server *srv, wl_conn *conn, int script, int nkeys, int nargs, const char *const *argv,
                        const size_t *argvlen, redisReply **out, const char *what, bool *readonly, wl_redirect *rd,
                        bool asking);
/* SCRIPT LOAD of every script on conn, once per process (scripts.c keeps the SHA1s). */
void wl_scripts_learn(wl_conn *conn);
/* PING on a pooled connection; on OK, SCRIPT LOAD once per process (client open). */
int wl_node_ping(wl_server *srv);
/* min_replicas: WAIT on the connection that wrote (WAIT counts the
 * replicas that have this connection's writes), for ep.min_replicas
 * within ep.min_replicas_timeout_ms. OK with *acked (0 for a reply that is
 * no integer), or the connection's or the reply's error. */
int wl_node_wait_replicas(wl_server *srv, wl_conn *conn, const char *what, long long *acked);
/* WAIT's arguments (ep.min_replicas within timeout_ms) into argv, with
 * their digits in n and ms: for a WAIT pipelined by the caller. */
void wl_wait_args(const wl_server *srv, int64_t timeout_ms, char n[16], char ms[24], const char *argv[3]);
/* The first three arguments of a script call: EVALSHA sha (or EVAL body
 * when use_body or no SHA1 is known), numkeys (its digits in nk). */
void wl_script_head(int script, bool use_body, int64_t nkeys, char nk[24], const char **argv, size_t *lens);

/* ---- subscriber (subscriber.c) ---- */
typedef struct wl_sub_entry wl_sub_entry;
typedef struct wl_sub_notify wl_sub_notify;

wl_subscriber *wl_subscriber_new(wl_server *srv);
void wl_subscriber_stop(wl_subscriber *sub); /* joins the thread, wakes all waiters */
/* Cluster: sharded pub/sub (SSUBSCRIBE) on this node's subscriber. Set
 * before the first join. */
void wl_subscriber_set_sharded(wl_subscriber *sub);
/* Cluster: the entry's channel is served by another node now: leave it and
 * join the channel again where wl_client_sub points. */
bool wl_sub_moved(wl_subscriber *sub, wl_sub_entry *entry);
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
/* Wakes the entry's waiters as a message would (the generation moves on):
 * the watchdog telling a queued waiter of its grant (locks/waiter.c). */
void wl_sub_poke(wl_subscriber *sub, wl_sub_entry *entry);
/* The payload of the latest message on the entry's channel, NUL-terminated
 * in buf; its length (0: none yet, or one of WL_SUB_MSG_MAX bytes or more,
 * not kept). A queued waiter's wake-up carries its grant (locks/waiter.c). */
#define WL_SUB_MSG_MAX 128
size_t wl_sub_last_message(wl_subscriber *sub, wl_sub_entry *entry, char buf[WL_SUB_MSG_MAX]);
int64_t wl_sub_denied(wl_subscriber *sub); /* refused SUBSCRIBEs so far */
/* n->fn(n->arg) runs (with the subscriber's mutex held: it may only
 * signal) whenever the entry's waiters are woken, until removed: for a
 * waiter on several subscribers at once (a quorum). The node is the
 * caller's; remove it before leaving the entry. */
struct wl_sub_notify {
    void (*fn)(void *arg);
    void *arg;
    struct wl_sub_notify *next;
};
void wl_sub_notify_add(wl_subscriber *sub, wl_sub_entry *entry, wl_sub_notify *n);
void wl_sub_notify_remove(wl_subscriber *sub, wl_sub_entry *entry, wl_sub_notify *n);
/* Cluster: the last MOVED a subscriber's SSUBSCRIBE got, taken once (the
 * waiter applies it to the slot map: no I/O on the subscriber thread). */
bool wl_sub_take_redirect(wl_subscriber *sub, wl_redirect *out);

#endif
