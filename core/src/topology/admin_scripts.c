/*
 * topology/admin_scripts.c - the admin scripts on one server: inspect and
 * force-release of one name's keys, each script's reply read in one place.
 * A placement (hold.h wl_placement) runs them on its servers and makes
 * their answers one verdict: placement.c on the client's server (Cluster:
 * the node of the name's slot), hold/quorum_admin.c on every member.
 * Runs on the caller's thread; no library mutex held.
 */
#include "topology/topology.h"

#include <string.h>

/* KEYS: lock, fence. -> {exists, pttl, fence} (scripts.c's inspect). */
int wl_inspect_at(wl_server *s, const wl_keys *keys, int *held, int64_t *remaining_ms, int64_t *fence)
{
    const char *argv[2] = {keys->lock, keys->fence};
    size_t lens[2] = {keys->lock_len, keys->fence_len};
    redisReply *r;
    int rc = wl_run_script(s, WL_SCRIPT_INSPECT, 2, 0, argv, lens, &r, "inspect failed");
    if (rc != WATCHLOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        freeReplyObject(r);
        return wl_fail(WATCHLOCK_ESERVER, "inspect: unexpected reply from server");
    }
    int exists = wl_reply_i64(r->element[0]) > 0;
    int64_t pttl = wl_reply_i64(r->element[1]);
    if (held)
        *held = exists;
    if (remaining_ms)
        *remaining_ms = !exists ? 0 : pttl < 0 ? -1 : pttl;
    if (fence)
        *fence = wl_reply_i64(r->element[2]);
    freeReplyObject(r);
    return WATCHLOCK_OK;
}

/* KEYS: lock; ARGV: channel, publish command -> 1 deleted, 0 no key. */
int wl_force_release_at(wl_server *s, const wl_keys *keys, int *released)
{
    const char *publish = wl_publish_command(s);
    const char *argv[3] = {keys->lock, keys->channel, publish};
    size_t lens[3] = {keys->lock_len, keys->channel_len, strlen(publish)};
    redisReply *r;
    int rc = wl_run_script(s, WL_SCRIPT_FORCE_RELEASE, 1, 2, argv, lens, &r, "force release failed");
    if (rc != WATCHLOCK_OK)
        return rc;
    if (released)
        *released = wl_reply_i64(r) > 0;
    freeReplyObject(r);
    return WATCHLOCK_OK;
}
