/*
 * topology.c - the client's server with its topology: made from the URL,
 * closed and destroyed. A standalone URL is one node; a Sentinel URL is a
 * node whose address the sentinels give (the discover hook); a Cluster URL
 * is a server that pools nothing itself and connects through the slot map
 * (the connect hook, and route.c for keys). The node layer sees only the
 * hooks (node.h wl_node_hooks).
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

int wl_server_init(wl_server *srv, const char *url)
{
    int rc = wl_node_init(srv, url);
    if (rc != WATCHLOCK_OK)
        return rc;
    if (srv->ep.kind == WL_KIND_SENTINEL)
        srv->hooks = &sentinel_hooks;
    if (srv->ep.kind == WL_KIND_CLUSTER) {
        if ((rc = wl_cluster_new(srv, &srv->cluster)) != WATCHLOCK_OK) {
            wl_node_destroy(srv);
            return rc;
        }
        srv->hooks = &cluster_hooks;
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
