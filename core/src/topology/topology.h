/*
 * topology/topology.h - the topology layer: which node serves a key.
 * Standalone (the server itself), Sentinel (the master the sentinels name,
 * sentinel.c), Cluster (the slot map, cluster.c); route.c runs scripts and
 * pipelines on the node of a key, following redirects. Calls into node/
 * and the layers below.
 */
#ifndef WATCHLOCK_TOPOLOGY_H
#define WATCHLOCK_TOPOLOGY_H

#include "node/node.h"

/* Sentinel topology (sentinel.c). */
/* Asks the sentinels, in turn, where the master is. */
int wl_sentinel_discover(wl_server *srv, int64_t connect_ms, char *host, size_t host_len, int *port);
/* Starts the thread that follows +switch-master; on_switch(arg) runs on it
 * after the address changed (no library mutex held). */
int wl_sentinel_start(wl_server *srv, void (*on_switch)(void *), void *arg);
void wl_sentinel_stop(wl_server *srv); /* joins; NULL-safe */
/* Cluster topology (cluster.c). */
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
int64_t wl_cluster_retired_denied(wl_cluster *cl);/* ---- the topology's table (topology.c) ----
 * What the layers above ask of a topology, whatever it is: the client's
 * server holds the table of its kind (srv->topo). "single" serves
 * standalone and Sentinel URLs (the server is its one node), "cluster" the
 * slot map; a quorum of independent masters (Redlock) would be one more
 * table. Node pointers it gives are valid while the caller holds a pin.
 * Callers use the wl_server_* wrappers (route.c), which also answer for a
 * server without a table (a node of its own: itself). */
typedef struct wl_topology_ops {
    bool sharded;          /* the node differs by key: rounds grouped by node, a subscriber per node */
    const char *publish;   /* the publish command of wake-ups (SPUBLISH: sharded pub/sub) */
    wl_server *(*route)(wl_server *srv, const void *key, size_t len);
    wl_server *(*route_slot)(wl_server *srv, int slot);
    wl_server *(*any)(wl_server *srv);
    wl_server *(*node_at)(wl_server *srv, const char *host, int port);
    /* the masters, from a fresh map, up to max: OK with *n, or an error */
    int (*masters)(wl_server *srv, wl_server **out, size_t max, size_t *n);
    wl_server *(*node)(wl_server *srv, size_t i); /* the nodes it made besides srv; NULL past the last */
    uint64_t (*pin)(wl_server *srv);
    void (*unpin)(wl_server *srv, uint64_t pin);
    void (*moved)(wl_server *srv, int slot, const char *host, int port); /* a MOVED was seen */
    int (*refresh)(wl_server *srv, bool force);
    /* the subscriber that carries wake-ups for channel: `own` (the
     * client's) or the serving node's, made on first use unless closed */
    wl_subscriber *(*subscriber)(wl_server *srv, const char *channel, size_t len, bool closed, wl_subscriber *own);
    int64_t (*retired_denied)(wl_server *srv); /* SUBSCRIBE refusals of subscribers since freed */
} wl_topology_ops;

/* ---- the client's server (topology.c) ---- */
/* The server of a URL with its topology: a node, and for Sentinel and
 * Cluster URLs the hooks that find the node (wl_node_hooks). */
int wl_server_init(wl_server *srv, const char *url);
void wl_server_close(wl_server *srv); /* frees idle connections (every node's); later puts free theirs */
void wl_server_destroy(wl_server *srv); /* the cluster, the node's subscriber, the node */

/* ---- routing (route.c) ---- */
/* The wrappers of the table (see wl_topology_ops). */
bool wl_server_sharded(const wl_server *srv);
wl_server *wl_server_route_slot(wl_server *srv, int slot);
wl_server *wl_server_node_at(wl_server *srv, const char *host, int port);
int wl_server_masters(wl_server *srv, wl_server **out, size_t max, size_t *n);
wl_server *wl_server_node(wl_server *srv, size_t i);
void wl_server_moved(wl_server *srv, int slot, const char *host, int port);
int wl_server_refresh(wl_server *srv, bool force);
wl_subscriber *wl_server_subscriber(wl_server *srv, const char *channel, size_t len, bool closed, wl_subscriber *own);
int64_t wl_server_retired_denied(wl_server *srv);
/* The node that serves `key` (the server itself unless it is a cluster);
 * NULL (ECONN set) when no node serves the key's slot. */
wl_server *wl_server_route(wl_server *srv, const void *key, size_t len);
/* "SPUBLISH" under Cluster (sharded pub/sub: the node of the channel's
 * slot), else "PUBLISH". */
const char *wl_publish_command(const wl_server *srv);
/* Some node to talk to (the server itself, or a cluster master). */
wl_server *wl_server_any(wl_server *srv);
/* Pins the cluster's nodes (cluster.c): a node pointer this thread gets
 * from the topology (wl_server_route, wl_server_any, wl_cluster_*) stays
 * valid until the matching unpin. No-ops (0) for other URLs. Nest freely. */
uint64_t wl_server_pin(wl_server *srv);
void wl_server_unpin(wl_server *srv, uint64_t pin);
/* The admin scripts on one server s (admin_scripts.c), a name's keys
 * made by the caller: inspect (held, remaining lease: -1 no expiry, 0
 * free; fence counter; any out may be NULL) and force-release (*released
 * 1 when a key was deleted). */
int wl_inspect_at(wl_server *s, const wl_keys *keys, int *held, int64_t *remaining_ms, int64_t *fence);
int wl_force_release_at(wl_server *s, const wl_keys *keys, int *released);
/* Runs one script on a pooled connection: EVALSHA, then EVAL on NOSCRIPT;
 * retries once on a fresh connection when a reused one turns out dead or
 * the server turned out to be a replica (READONLY: the script did not run).
 * argv holds the script's keys followed by its arguments. On OK *out is the
 * (non-error) reply, freed by the caller with freeReplyObject. */
int wl_run_script(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                  const size_t *argvlen, redisReply **out, const char *what);
/* The same, handing the connection to the caller on OK (*keep; give it
 * back with wl_server_put): for commands that only mean something on the
 * connection that wrote (WAIT). resent (may be NULL): whether the script
 * was sent a second time (after a pooled connection failed at once); the
 * first try may still have run on the server (a reply lost on its way back
 * looks the same), which matters to scripts that are not idempotent:
 * release. keep and resent NULL = wl_run_script. */
int wl_run_script_keep(wl_server *srv, int script, int nkeys, int nargs, const char *const *argv,
                       const size_t *argvlen, redisReply **out, const char *what, wl_conn **keep, bool *resent);
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
#endif
