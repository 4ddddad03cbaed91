/*
 * cluster.c - the Redis Cluster topology: which node serves a key.
 *
 * Keys map to one of 16384 slots (CRC16 of the key, or of its hash tag: the
 * part between the first '{' and the next '}'); every key of one lock name
 * shares the tag {name}, so each script touches one slot. The slot map comes
 * from CLUSTER SLOTS, asked of a known node (the seeds of the URL first time);
 * it is asked again on MOVED, on connection errors, and at most every
 * REFRESH_EVERY_US otherwise. Each node is a wl_server (node.c) with its own
 * pool; nodes are never removed while the client lives (an old address is
 * simply no longer pointed at), so a wl_server * stays valid.
 *
 * Only masters are used: replicas (READONLY) never see lock writes.
 *
 * Locking: wl_cluster.mu guards the node list and the slot map. Taken after
 * client.mu and before a node's server.mu; no I/O under it.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFRESH_MIN_GAP_US 100000    /* never ask more often than this */
#define REFRESH_EVERY_US 10000000    /* and ask anyway this often while in use */

struct wl_cluster {
    wl_server *parent; /* the client's server: URL, TLS context */
    pthread_mutex_t mu;
    wl_server **nodes;
    size_t n_nodes, cap_nodes;
    int16_t slots[WL_CLUSTER_SLOTS]; /* index into nodes, -1 unknown */
    int64_t asked_us;                /* last CLUSTER SLOTS attempt */
    int64_t refreshed_us;            /* last successful one */
    uint64_t map_gen;                /* bumped whenever the map changes */
};

/* CRC16-CCITT (XMODEM), as the Redis Cluster specification defines it. */
static uint16_t crc16(const unsigned char *p, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int wl_key_slot(const void *key, size_t len)
{
    const unsigned char *k = key;
    const unsigned char *open = memchr(k, '{', len);
    if (open != NULL) {
        size_t start = (size_t)(open - k) + 1;
        const unsigned char *close = memchr(k + start, '}', len - start);
        if (close != NULL && close > k + start)
            return crc16(k + start, (size_t)(close - (k + start))) & (WL_CLUSTER_SLOTS - 1);
    }
    return crc16(k, len) & (WL_CLUSTER_SLOTS - 1);
}

int wl_cluster_new(wl_server *parent, wl_cluster **out)
{
    *out = NULL;
    wl_cluster *cl = calloc(1, sizeof *cl);
    if (cl == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    cl->parent = parent;
    if (pthread_mutex_init(&cl->mu, NULL) != 0) {
        free(cl);
        return wl_fail(WATCHLOCK_EINTERNAL, "pthread_mutex_init failed");
    }
    memset(cl->slots, 0xff, sizeof cl->slots);
    *out = cl;
    return WATCHLOCK_OK;
}

void wl_cluster_close(wl_cluster *cl)
{
    if (cl == NULL)
        return;
    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; i < cl->n_nodes; i++)
        wl_server_close(cl->nodes[i]);
    pthread_mutex_unlock(&cl->mu);
}

void wl_cluster_free(wl_cluster *cl)
{
    if (cl == NULL)
        return;
    for (size_t i = 0; i < cl->n_nodes; i++) {
        wl_server_destroy(cl->nodes[i]);
        free(cl->nodes[i]);
    }
    free(cl->nodes);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

/* With mu held: the node at host:port, added when new; its index or -1. */
static int node_index_locked(wl_cluster *cl, const char *host, int port)
{
    for (size_t i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return (int)i;
    if (cl->n_nodes >= INT16_MAX)
        return -1;
    if (wl_grow((void **)&cl->nodes, &cl->cap_nodes, cl->n_nodes, sizeof *cl->nodes, 8) != 0)
        return -1;
    wl_server *node = calloc(1, sizeof *node);
    if (node == NULL)
        return -1;
    if (wl_server_init_node(node, cl->parent, host, port) != WATCHLOCK_OK) {
        free(node);
        return -1;
    }
    node->cluster_index = (int)cl->n_nodes;
    cl->nodes[cl->n_nodes++] = node;
    return (int)(cl->n_nodes - 1);
}

wl_server *wl_cluster_node_at(wl_cluster *cl, const char *host, int port)
{
    pthread_mutex_lock(&cl->mu);
    int i = node_index_locked(cl, host, port);
    wl_server *node = i >= 0 ? cl->nodes[i] : NULL;
    pthread_mutex_unlock(&cl->mu);
    return node;
}

/* Applies one CLUSTER SLOTS reply asked of `asked` (whose address stands
 * in for an empty one). False when the reply has no usable range. */
static bool apply_slots(wl_cluster *cl, const redisReply *r, const wl_server *asked)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return false;
    int16_t map[WL_CLUSTER_SLOTS];
    memset(map, 0xff, sizeof map);
    bool any = false;
    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2)
            continue;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        const redisReply *m = e->element[2];
        if (from < 0 || to >= WL_CLUSTER_SLOTS || from > to || m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        const char *host = m->element[0]->type == REDIS_REPLY_STRING && m->element[0]->len > 0 &&
                                   strcmp(m->element[0]->str, "?") != 0
                               ? m->element[0]->str
                               : asked->host;
        int port = (int)m->element[1]->integer;
        if (port <= 0 || port > 65535 || strlen(host) >= sizeof asked->host)
            continue;
        int idx = node_index_locked(cl, host, port);
        if (idx < 0)
            continue;
        for (long long s = from; s <= to; s++)
            map[s] = (int16_t)idx;
        any = true;
    }
    if (any) {
        if (memcmp(map, cl->slots, sizeof map) != 0) {
            memcpy(cl->slots, map, sizeof map);
            cl->map_gen++;
        }
        cl->refreshed_us = wl_now_us();
    }
    pthread_mutex_unlock(&cl->mu);
    return any;
}

/* CLUSTER SLOTS of one node: OK when it gave a map. */
static int ask_node(wl_cluster *cl, wl_server *node)
{
    wl_conn *conn;
    int rc = wl_server_connect(node, 0, &conn);
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    redisReply *r = wl_conn_command(conn, 2, argv, NULL);
    if (r == NULL)
        rc = wl_conn_error(node, conn, "CLUSTER SLOTS");
    else if ((rc = wl_reply_error(node, r, "CLUSTER SLOTS")) == WATCHLOCK_OK && !apply_slots(cl, r, node))
        rc = wl_fail(WATCHLOCK_ECONN, "%s:%d is not part of a cluster that serves any slot", node->host, node->port);
    if (r != NULL)
        freeReplyObject(r);
    wl_server_put(node, conn);
    return rc;
}

int wl_cluster_refresh(wl_cluster *cl, bool force)
{
    int64_t now = wl_now_us();
    pthread_mutex_lock(&cl->mu);
    if (!force && now - cl->asked_us < REFRESH_MIN_GAP_US) {
        bool known = cl->refreshed_us > 0;
        pthread_mutex_unlock(&cl->mu);
        return known ? WATCHLOCK_OK : wl_fail(WATCHLOCK_ECONN, "no cluster node answered (retrying)");
    }
    cl->asked_us = now;
    /* Ask the nodes that serve slots first, then the seeds. */
    size_t n = cl->n_nodes;
    wl_server **order = n ? malloc(n * sizeof *order) : NULL;
    size_t k = 0;
    for (size_t i = 0; order && i < n; i++)
        order[k++] = cl->nodes[i];
    pthread_mutex_unlock(&cl->mu);
    int rc = wl_fail(WATCHLOCK_ECONN, "no cluster node answered");
    char tried[600] = "";
    size_t used = 0;
    for (size_t i = 0; i < k && rc != WATCHLOCK_OK; i++) {
        rc = ask_node(cl, order[i]);
        if (rc != WATCHLOCK_OK && used < sizeof tried) {
            int w = snprintf(tried + used, sizeof tried - used, "%s%.160s", used ? "; " : "", watchlock_last_error());
            used += w > 0 ? (size_t)w : 0;
        }
    }
    free(order);
    const wl_endpoint *ep = &cl->parent->ep;
    for (size_t i = 0; i < ep->n_seeds && rc != WATCHLOCK_OK; i++) {
        wl_server *seed = wl_cluster_node_at(cl, ep->seeds[i].host, ep->seeds[i].port);
        if (seed == NULL)
            return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        rc = ask_node(cl, seed);
        if (rc != WATCHLOCK_OK && used < sizeof tried) {
            int w = snprintf(tried + used, sizeof tried - used, "%s%.160s", used ? "; " : "", watchlock_last_error());
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (rc == WATCHLOCK_ECONN)
        return wl_fail(rc, "cannot read the cluster's slot map from any node (%s)", tried);
    return rc;
}

wl_server *wl_cluster_route(wl_cluster *cl, int slot)
{
    for (int pass = 0; pass < 2; pass++) {
        pthread_mutex_lock(&cl->mu);
        int idx = cl->slots[slot];
        bool stale = wl_now_us() - cl->refreshed_us > REFRESH_EVERY_US;
        wl_server *node = idx >= 0 ? cl->nodes[idx] : NULL;
        pthread_mutex_unlock(&cl->mu);
        if (node != NULL && (!stale || pass > 0))
            return node;
        if (wl_cluster_refresh(cl, false) != WATCHLOCK_OK && node != NULL)
            return node; /* keep using what we knew */
    }
    pthread_mutex_lock(&cl->mu);
    int idx = cl->slots[slot];
    wl_server *node = idx >= 0 ? cl->nodes[idx] : NULL;
    pthread_mutex_unlock(&cl->mu);
    if (node == NULL)
        wl_fail(WATCHLOCK_ECONN, "no cluster node serves slot %d (cluster down or resharding?)", slot);
    return node;
}

void wl_cluster_moved(wl_cluster *cl, int slot, const char *host, int port)
{
    pthread_mutex_lock(&cl->mu);
    int idx = node_index_locked(cl, host, port);
    if (idx >= 0 && slot >= 0 && slot < WL_CLUSTER_SLOTS && cl->slots[slot] != idx) {
        cl->slots[slot] = (int16_t)idx;
        cl->map_gen++;
    }
    pthread_mutex_unlock(&cl->mu);
    /* One slot moved: others probably did too (a resharding or failover). */
    wl_cluster_refresh(cl, false);
}

size_t wl_cluster_masters(wl_cluster *cl, wl_server **out, size_t max)
{
    pthread_mutex_lock(&cl->mu);
    size_t n = 0;
    for (size_t i = 0; i < cl->n_nodes; i++) {
        bool serves = false;
        for (int s = 0; s < WL_CLUSTER_SLOTS && !serves; s++)
            serves = cl->slots[s] == (int16_t)i;
        if (serves && n < max)
            out[n++] = cl->nodes[i];
    }
    pthread_mutex_unlock(&cl->mu);
    return n;
}

wl_server *wl_cluster_node(wl_cluster *cl, size_t i)
{
    pthread_mutex_lock(&cl->mu);
    wl_server *node = i < cl->n_nodes ? cl->nodes[i] : NULL;
    pthread_mutex_unlock(&cl->mu);
    return node;
}

bool wl_parse_redirect(const redisReply *r, wl_redirect *rd)
{
    memset(rd, 0, sizeof *rd);
    if (r == NULL || r->type != REDIS_REPLY_ERROR || r->str == NULL)
        return false;
    const char *s = r->str;
    if (strncmp(s, "TRYAGAIN", 8) == 0) {
        rd->kind = WL_REDIRECT_TRYAGAIN;
        return true;
    }
    if (strncmp(s, "CLUSTERDOWN", 11) == 0) {
        rd->kind = WL_REDIRECT_CLUSTERDOWN;
        return true;
    }
    bool moved = strncmp(s, "MOVED ", 6) == 0, ask = strncmp(s, "ASK ", 4) == 0;
    if (!moved && !ask)
        return false;
    char host[256];
    int slot, port;
    const char *rest = s + (moved ? 6 : 4);
    const char *colon = strrchr(rest, ':');
    if (sscanf(rest, "%d", &slot) != 1 || colon == NULL || slot < 0 || slot >= WL_CLUSTER_SLOTS)
        return false;
    const char *sp = strchr(rest, ' ');
    if (sp == NULL || colon <= sp + 1 || (size_t)(colon - sp - 1) >= sizeof host)
        return false;
    memcpy(host, sp + 1, (size_t)(colon - sp - 1));
    host[colon - sp - 1] = '\0';
    port = atoi(colon + 1);
    if (port <= 0 || port > 65535)
        return false;
    /* "MOVED 3999 :6381" (empty host): the node that answered; the caller fills it in. */
    rd->kind = moved ? WL_REDIRECT_MOVED : WL_REDIRECT_ASK;
    rd->slot = slot;
    snprintf(rd->host, sizeof rd->host, "%s", host);
    rd->port = port;
    return true;
}
