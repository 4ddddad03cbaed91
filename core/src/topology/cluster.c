/*
 * cluster.c - the Redis Cluster topology: which node serves a key.
 *
 * Keys map to one of 16384 slots (CRC16 of the key, or of its hash tag: the
 * part between the first '{' and the next '}'); every key of one lock name
 * shares the tag {name}, so each script touches one slot. The slot map comes
 * from CLUSTER SLOTS, asked of a known node (the seeds of the URL first time);
 * it is asked again on MOVED, on connection errors, and at most every
 * REFRESH_EVERY_US otherwise. Each node is a wl_server (node.c) with its own
 * pool, its subscriber (wake-ups) and the watchdog's connection.
 *
 * Nodes leave (issue 19.7): a node that serves no slot in a new map (its
 * slots moved to new nodes, a replaced pod, a demoted master) is retired:
 * taken out of the node list, its idle connections closed, its subscriber
 * told to stop (its waiters are woken to join the channel where the map
 * points now). Its memory, its subscriber thread (joined) and the
 * watchdog's connection to it are freed once no thread can still hold a
 * pointer to it. Node pointers are handed out under a pin
 * (wl_cluster_pin/unpin, wl_server_pin in route.c): whoever gets a node
 * from route, node_at, masters, node or any uses it only while pinned.
 * Pins count in two epochs; a node retired in epoch E is freed when the
 * epoch reaches E + 2 (the epoch advances only when no pin of the previous
 * epoch remains, so every pin that could have seen the node has ended),
 * and its subscriber thread has returned (it may be finishing a connect).
 * The unpin that makes a node free frees it; the client's close frees the
 * rest. So threads, connections and memory follow the nodes that serve
 * slots now, not every node the client has ever seen.
 *
 * Only masters are used: replicas (READONLY) never see lock writes.
 *
 * Locking: wl_cluster.mu guards the node list, the slot map, the pins and
 * the retired list. Taken after client.mu and before a node's server.mu (or
 * a subscriber's mutex, a leaf); no I/O under it.
 */
#include "topology/topology.h"

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
    int next_id;                     /* the next node's cluster_index */
    /* retiring nodes (see the top) */
    uint64_t epoch;
    int64_t pins[2];      /* pins taken in even / odd epochs, not yet ended */
    wl_server *retired;   /* linked by retired_next */
    int64_t retired_denied; /* SUBSCRIBE refusals counted by freed subscribers */
};

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
        wl_node_close(cl->nodes[i]);
    pthread_mutex_unlock(&cl->mu);
}

static void node_free(wl_server *node)
{
    wl_node_close(node);
    wl_subscriber_free(node->sub); /* joined */
    node->sub = NULL;
    wl_node_destroy(node); /* its pool and the watchdog's connection */
    free(node);
}

void wl_cluster_free(wl_cluster *cl)
{
    if (cl == NULL)
        return;
    for (size_t i = 0; i < cl->n_nodes; i++)
        node_free(cl->nodes[i]);
    while (cl->retired != NULL) {
        wl_server *node = cl->retired;
        cl->retired = node->retired_next;
        node_free(node);
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
    node->cluster_index = cl->next_id++;
    cl->nodes[cl->n_nodes++] = node;
    return (int)(cl->n_nodes - 1);
}

uint64_t wl_cluster_pin(wl_cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    uint64_t pin = cl->epoch;
    cl->pins[pin & 1]++;
    pthread_mutex_unlock(&cl->mu);
    return pin;
}

/* With mu held: advances the epoch as far as the pins allow and unlinks
 * the retired nodes no pin can reach any more (returned as a list). */
static wl_server *take_unreachable_locked(wl_cluster *cl)
{
    /* Into epoch E + 1 only when no pin of E - 1 (same parity as E + 1) is left. */
    for (int i = 0; i < 2 && cl->retired != NULL && cl->pins[(cl->epoch + 1) & 1] == 0; i++)
        cl->epoch++;
    wl_server *out = NULL, **pp = &cl->retired;
    while (*pp != NULL) {
        wl_server *node = *pp;
        if (node->retired_epoch + 2 <= cl->epoch) {
            *pp = node->retired_next;
            node->retired_next = out;
            out = node;
        } else {
            pp = &node->retired_next;
        }
    }
    return out;
}

/* Frees the nodes of a list from take_unreachable_locked whose subscriber
 * thread has returned; the others go back on the retired list (the next
 * unpin tries again). Without mu. */
static void free_unreachable(wl_cluster *cl, wl_server *list)
{
    while (list != NULL) {
        wl_server *node = list;
        list = node->retired_next;
        int64_t denied = node->sub ? wl_sub_denied(node->sub) : 0;
        if (!wl_subscriber_release(node->sub)) { /* its thread is still finishing (a connect) */
            pthread_mutex_lock(&cl->mu);
            node->retired_next = cl->retired;
            cl->retired = node;
            pthread_mutex_unlock(&cl->mu);
            continue;
        }
        node->sub = NULL; /* freed, or left to its last waiter (orphan) */
        pthread_mutex_lock(&cl->mu);
        cl->retired_denied += denied;
        pthread_mutex_unlock(&cl->mu);
        node_free(node);
    }
}

void wl_cluster_unpin(wl_cluster *cl, uint64_t pin)
{
    pthread_mutex_lock(&cl->mu);
    cl->pins[pin & 1]--;
    wl_server *unreachable = cl->retired != NULL ? take_unreachable_locked(cl) : NULL;
    pthread_mutex_unlock(&cl->mu);
    free_unreachable(cl, unreachable);
}

int64_t wl_cluster_retired_denied(wl_cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    int64_t n = cl->retired_denied;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

wl_server *wl_cluster_node_at(wl_cluster *cl, const char *host, int port)
{
    pthread_mutex_lock(&cl->mu);
    int i = node_index_locked(cl, host, port);
    wl_server *node = i >= 0 ? cl->nodes[i] : NULL;
    pthread_mutex_unlock(&cl->mu);
    return node;
}

/* The "ip" of a CLUSTER SLOTS node entry's networking metadata (Redis 7:
 * element 3, a flat list of name, value), or NULL. */
static const char *metadata_ip(const redisReply *m)
{
    if (m->elements < 4 || m->element[3]->type != REDIS_REPLY_ARRAY)
        return NULL;
    const redisReply *meta = m->element[3];
    for (size_t i = 0; i + 1 < meta->elements; i += 2)
        if (meta->element[i]->type == REDIS_REPLY_STRING && strcmp(meta->element[i]->str, "ip") == 0 &&
            meta->element[i + 1]->type == REDIS_REPLY_STRING && meta->element[i + 1]->len > 0)
            return meta->element[i + 1]->str;
    return NULL;
}

/* Applies one CLUSTER SLOTS reply asked of `asked` (whose address stands
 * in for an unknown one) and retires the nodes that serve no slot in it.
 * False when the reply has no usable range. The caller holds a pin. */
static bool apply_slots(wl_cluster *cl, const redisReply *r, const wl_server *asked)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return false;
    int16_t map[WL_CLUSTER_SLOTS];
    memset(map, 0xff, sizeof map);
    bool any = false;
    wl_server *retiring = NULL;
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
        /* The preferred endpoint: NULL (unknown-endpoint) or "" (a node
         * that does not know its address) mean the node asked; "?" (told
         * to prefer a hostname it does not have) its IP from the metadata,
         * else the node asked too. */
        const char *host = asked->host;
        if (m->element[0]->type == REDIS_REPLY_STRING && m->element[0]->len > 0) {
            if (strcmp(m->element[0]->str, "?") != 0)
                host = m->element[0]->str;
            else if (metadata_ip(m) != NULL)
                host = metadata_ip(m);
        }
        long long port = m->element[1]->integer;
        if (port <= 0 || port > 65535 || strlen(host) >= sizeof asked->host)
            continue;
        int idx = node_index_locked(cl, host, (int)port);
        if (idx < 0)
            continue;
        for (long long s = from; s <= to; s++)
            map[s] = (int16_t)idx;
        any = true;
    }
    if (any) {
        /* Nodes that serve no slot leave the list; the others move down.
         * (Out of memory: they stay until the next map.) */
        size_t n = cl->n_nodes;
        int16_t *renum = malloc(n * sizeof *renum);
        bool *serves = calloc(n, sizeof *serves);
        if (renum != NULL && serves != NULL) {
            for (int s = 0; s < WL_CLUSTER_SLOTS; s++)
                if (map[s] >= 0)
                    serves[map[s]] = true;
            size_t kept = 0;
            for (size_t i = 0; i < n; i++) {
                wl_server *node = cl->nodes[i];
                if (serves[i]) {
                    renum[i] = (int16_t)kept;
                    cl->nodes[kept++] = node;
                } else {
                    node->retired_epoch = cl->epoch;
                    node->retired_next = retiring;
                    retiring = node;
                }
            }
            cl->n_nodes = kept;
            for (int s = 0; s < WL_CLUSTER_SLOTS; s++)
                if (map[s] >= 0)
                    map[s] = renum[map[s]];
        }
        free(renum);
        free(serves);
        if (retiring != NULL || memcmp(map, cl->slots, sizeof map) != 0) {
            memcpy(cl->slots, map, sizeof map);
            cl->map_gen++;
        }
        cl->refreshed_us = wl_now_us();
    }
    pthread_mutex_unlock(&cl->mu);
    /* Close what can be closed now (the caller's pin keeps them), then
     * hand them to the retired list. */
    while (retiring != NULL) {
        wl_server *node = retiring;
        retiring = node->retired_next;
        wl_subscriber_retire(wl_node_retire(node)); /* its waiters move */
        pthread_mutex_lock(&cl->mu);
        node->retired_next = cl->retired;
        cl->retired = node;
        pthread_mutex_unlock(&cl->mu);
    }
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

static int refresh_pinned(wl_cluster *cl, bool force);

int wl_cluster_refresh(wl_cluster *cl, bool force)
{
    uint64_t pin = wl_cluster_pin(cl); /* the nodes asked stay valid while asked */
    int rc = refresh_pinned(cl, force);
    wl_cluster_unpin(cl, pin);
    return rc;
}

static int refresh_pinned(wl_cluster *cl, bool force)
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
    if (port == 0) { /* MOVED to "?": no address given; the map knows it */
        wl_cluster_refresh(cl, true);
        return;
    }
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
