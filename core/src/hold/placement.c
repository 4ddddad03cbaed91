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

const wl_placement wl_single_placement = {.renew_round = wl_renew_round,
                                          .close_conns = single_close_conns,
                                          .close_release = single_close_release,
                                          .close = single_nothing,
                                          .free = single_nothing,
                                          .stat = single_stat};
