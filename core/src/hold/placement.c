/*
 * hold/placement.c - the one-server placement (hold.h wl_placement): a
 * client on one server, a Sentinel-discovered master or a Cluster, whose
 * topology routes each key to its node (topology/); the quorum's is
 * quorum_round.c's.
 */
#include "hold/hold.h"

static void single_close_conns(watchlock_client *c)
{
    (void)c; /* every node is c->server's (renew_round.c closes them) */
}

/* Pipelined on one server; one by one, routed by key, under Cluster. */
static void single_close_release(watchlock_client *c, const wl_release_args *args, size_t n)
{
    bool sharded = wl_server_sharded(&c->server);
    for (size_t i = 0; sharded && i < n; i++)
        wl_release_best_effort(&c->server, &args[i]);
    if (!sharded && n > 0)
        wl_release_fresh(&c->server, args, n, 0, NULL, "release");
}

static void single_nothing(watchlock_client *c)
{
    (void)c;
}

static int64_t single_stat(watchlock_client *c, int which)
{
    (void)c;
    (void)which;
    return 0;
}

/* The one server's answer is the verdict (Cluster: the slot's node, as
 * wl_run_script routes the name's lock key). */
static int single_inspect(watchlock_client *c, const wl_keys *keys, int *held, int64_t *remaining_ms, int64_t *fence)
{
    return wl_inspect_at(&c->server, keys, held, remaining_ms, fence);
}

static int single_force_release(watchlock_client *c, const wl_keys *keys, int *released)
{
    return wl_force_release_at(&c->server, keys, released);
}

static int single_refuse(watchlock_client *c, int kind)
{
    (void)c;
    (void)kind;
    return WATCHLOCK_OK; /* one server serves every kind */
}

const wl_placement wl_single_placement = {.renew_round = wl_renew_round,
                                          .close_conns = single_close_conns,
                                          .close_release = single_close_release,
                                          .close = single_nothing,
                                          .free = single_nothing,
                                          .stat = single_stat,
                                          .inspect = single_inspect,
                                          .force_release = single_force_release,
                                          .refuse = single_refuse};
