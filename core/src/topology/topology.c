/*
 * topology.c - the client's server with its topology: made from the URL,
 * closed and destroyed. A standalone URL is one node; a Sentinel URL is a
 * node whose address the sentinels give (the discover hook); a Cluster URL
 * is a server that pools nothing itself and connects through the slot map
 * (the connect hook, and route.c for keys). The node layer sees only the
 * hooks (node.h wl_node_hooks); the layers above only the table
 * (wl_topology_ops, through route.c's wrappers): one table per kind.
 */
#include "topology/topology.h"

/* Cluster: a connection with no key to route by goes to any master. */
static int connect_any_master(wl_server *srv, int64_t timeout_cap_ms, wl_conn **out)
{
    uint64_t pin = wl_server_pin(srv);
    wl_server *node = wl_server_any(srv); /* NULL: it said why (refused, TLS, no slots) */
    int rc = node ? wl_server_connect(node, timeout_cap_ms, out) : WATCHLOCK_ECONN;
    wl_server_unpin(srv, pin);
    return rc;
}

static const wl_node_hooks cluster_hooks = {.connect = connect_any_master};
static const wl_node_hooks sentinel_hooks = {.discover = wl_sentinel_discover};

/* ---- single: standalone and Sentinel (the server is its one node) ---- */

static wl_server *single_route(wl_server *srv, const void *key, size_t len)
{
    WL_UNUSED(key);
    WL_UNUSED(len);
    return srv;
}

static wl_server *single_route_slot(wl_server *srv, int slot)
{
    WL_UNUSED(slot);
    return srv;
}

static wl_server *single_any(wl_server *srv)
{
    return srv;
}

static wl_server *single_node_at(wl_server *srv, const char *host, int port)
{
    WL_UNUSED(host);
    WL_UNUSED(port);
    return srv;
}

static int single_masters(wl_server *srv, wl_server **out, size_t max, size_t *n)
{
    *n = 0;
    if (max > 0)
        out[(*n)++] = srv;
    return WATCHLOCK_OK;
}

static wl_server *single_node(wl_server *srv, size_t i)
{
    WL_UNUSED(srv);
    WL_UNUSED(i);
    return NULL;
}

static uint64_t single_pin(wl_server *srv)
{
    WL_UNUSED(srv);
    return 0;
}

static void single_unpin(wl_server *srv, uint64_t pin)
{
    WL_UNUSED(srv);
    WL_UNUSED(pin);
}

static void single_moved(wl_server *srv, int slot, const char *host, int port)
{
    WL_UNUSED(srv);
    WL_UNUSED(slot);
    WL_UNUSED(host);
    WL_UNUSED(port);
}

static int single_refresh(wl_server *srv, bool force)
{
    WL_UNUSED(srv);
    WL_UNUSED(force);
    return WATCHLOCK_OK;
}

static wl_subscriber *single_subscriber(wl_server *srv, const char *channel, size_t len, bool closed,
                                        wl_subscriber *own)
{
    WL_UNUSED(srv);
    WL_UNUSED(channel);
    WL_UNUSED(len);
    WL_UNUSED(closed);
    return own;
}

static int64_t single_retired_denied(wl_server *srv)
{
    WL_UNUSED(srv);
    return 0;
}

static const wl_topology_ops single_ops = {
    .sharded = false,
    .publish = "PUBLISH",
    .route = single_route,
    .route_slot = single_route_slot,
    .any = single_any,
    .node_at = single_node_at,
    .masters = single_masters,
    .node = single_node,
    .pin = single_pin,
    .unpin = single_unpin,
    .moved = single_moved,
    .refresh = single_refresh,
    .subscriber = single_subscriber,
    .retired_denied = single_retired_denied,
};

/* ---- cluster: the slot map (cluster.c) ---- */

static wl_server *cluster_route(wl_server *srv, const void *key, size_t len)
{
    return wl_cluster_route(srv->cluster, wl_key_slot(key, len));
}

static wl_server *cluster_route_slot(wl_server *srv, int slot)
{
    return wl_cluster_route(srv->cluster, slot);
}

static wl_server *cluster_any(wl_server *srv)
{
    wl_server *node;
    if (wl_cluster_masters(srv->cluster, &node, 1) == 1)
        return node;
    int rc = wl_cluster_refresh(srv->cluster, true);
    if (rc == WATCHLOCK_OK && wl_cluster_masters(srv->cluster, &node, 1) == 1)
        return node;
    if (rc == WATCHLOCK_OK)
        wl_fail(WATCHLOCK_ECONN, "no cluster node serves any slot (%s)", srv->ep.label);
    return NULL;
}

static wl_server *cluster_node_at(wl_server *srv, const char *host, int port)
{
    return wl_cluster_node_at(srv->cluster, host, port);
}

static int cluster_masters(wl_server *srv, wl_server **out, size_t max, size_t *n)
{
    int rc = wl_cluster_refresh(srv->cluster, true);
    *n = rc == WATCHLOCK_OK ? wl_cluster_masters(srv->cluster, out, max) : 0;
    return rc;
}

static wl_server *cluster_node(wl_server *srv, size_t i)
{
    return wl_cluster_node(srv->cluster, i);
}

static uint64_t cluster_pin(wl_server *srv)
{
    return wl_cluster_pin(srv->cluster);
}

static void cluster_unpin(wl_server *srv, uint64_t pin)
{
    wl_cluster_unpin(srv->cluster, pin);
}

static void cluster_moved(wl_server *srv, int slot, const char *host, int port)
{
    wl_cluster_moved(srv->cluster, slot, host, port);
}

static int cluster_refresh(wl_server *srv, bool force)
{
    return wl_cluster_refresh(srv->cluster, force);
}

/* With a pin held: the subscriber of the node serving the channel. */
static wl_subscriber *cluster_subscriber(wl_server *srv, const char *channel, size_t len, bool closed,
                                         wl_subscriber *own)
{
    WL_UNUSED(own);
    wl_server *node = cluster_route(srv, channel, len);
    if (node == NULL)
        return NULL;
    pthread_mutex_lock(&node->mu);
    /* A node that left the map gets no new subscriber (its own, if any,
     * still takes joins: they come back moved). */
    if (node->sub == NULL && !closed && !node->retired && (node->sub = wl_subscriber_new(node)) != NULL)
        wl_subscriber_set_sharded(node->sub);
    wl_subscriber *sub = node->sub;
    bool retired = node->retired;
    pthread_mutex_unlock(&node->mu);
    if (sub == NULL)
        wl_fail(closed ? WATCHLOCK_ECLOSED : retired ? WATCHLOCK_ECONN : WATCHLOCK_ENOMEM, "no subscriber for %s%s",
                node->label, retired ? " (it left the cluster)" : "");
    return sub;
}

static int64_t cluster_retired_denied(wl_server *srv)
{
    return wl_cluster_retired_denied(srv->cluster);
}

static const wl_topology_ops cluster_ops = {
    .sharded = true,
    .publish = "SPUBLISH",
    .route = cluster_route,
    .route_slot = cluster_route_slot,
    .any = cluster_any,
    .node_at = cluster_node_at,
    .masters = cluster_masters,
    .node = cluster_node,
    .pin = cluster_pin,
    .unpin = cluster_unpin,
    .moved = cluster_moved,
    .refresh = cluster_refresh,
    .subscriber = cluster_subscriber,
    .retired_denied = cluster_retired_denied,
};

/* ---- the client's server ---- */

int wl_server_init(wl_server *srv, const char *url)
{
    int rc = wl_node_init(srv, url);
    if (rc != WATCHLOCK_OK)
        return rc;
    srv->topo = &single_ops;
    if (srv->ep.kind == WL_KIND_SENTINEL)
        srv->hooks = &sentinel_hooks;
    if (srv->ep.kind == WL_KIND_CLUSTER) {
        if ((rc = wl_cluster_new(srv, &srv->cluster)) != WATCHLOCK_OK) {
            wl_node_destroy(srv);
            return rc;
        }
        srv->hooks = &cluster_hooks;
        srv->topo = &cluster_ops;
    }
    return WATCHLOCK_OK;
}

void wl_server_close(wl_server *srv)
{
    wl_node_close(srv);
    wl_cluster_close(srv->cluster);
}

void wl_server_destroy(wl_server *srv)
{
    wl_server_close(srv);
    wl_cluster_free(srv->cluster);
    srv->cluster = NULL;
    wl_subscriber_free(srv->sub);
    srv->sub = NULL;
    wl_node_destroy(srv);
}
