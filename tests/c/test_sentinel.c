/*
 * test_sentinel.c - redis-sentinel:// from C against a real group (one
 * master, one replica, three sentinels; started by
 * tests/harness/sentinel.py --serve through redis_harness.h): acquire and
 * release through the sentinels, and min_replicas=1 with the replica up
 * (the replica has the key when acquire returns). Failovers, a sentinel
 * down and a paused replica are tested from Python
 * (tests/python/test_sentinel.py), on the same core.
 */
#include "testing.h"

#include <string.h>

static void test_acquire_through_sentinel(void)
{
    rh_sentinel_group *g = rh_sentinel_start(0);
    CHECK_MSG(g != NULL, "could not start a sentinel group");
    rh_server *master = rh_sentinel_master(g), *replica = rh_sentinel_replica(g);
    CHECK(master != NULL && replica != NULL);

    watchlock_client *c = open_client(rh_sentinel_url(g));
    watchlock_lock *l = new_lock(c, "sentinel-basic");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(master, "EXISTS %s", "watchlock:{sentinel-basic}"), 1);
    WAIT_FOR(rh_int(replica, "EXISTS %s", "watchlock:{sentinel-basic}") == 1, 10000);
    CHECK_EQ(rh_int(replica, "EXISTS %s", "watchlock:{sentinel-basic}"), 1);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(master, "EXISTS %s", "watchlock:{sentinel-basic}"), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);

    /* min_replicas=1: WAIT on the acquiring connection; the replica has the key at once */
    char url[2200];
    snprintf(url, sizeof url, "%s?min_replicas=1&min_replicas_timeout=2s", rh_sentinel_url(g));
    c = open_client(url);
    l = new_lock(c, "sentinel-acked");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(replica, "EXISTS %s", "watchlock:{sentinel-acked}"), 1);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);

    /* a master name the sentinels do not know */
    char bad[2200];
    const char *slash = strrchr(rh_sentinel_url(g), '/');
    snprintf(bad, sizeof bad, "%.*s/no-such-master", (int)(slash - rh_sentinel_url(g)), rh_sentinel_url(g));
    watchlock_client *none = NULL;
    int rc = watchlock_client_open(&none, bad);
    CHECK_MSG(rc == WATCHLOCK_ECONN || rc == WATCHLOCK_EINVAL, "open(%s) returned %d (%s)", bad, rc,
              watchlock_strerror(rc));
    CHECK_MSG(strstr(watchlock_last_error(), "no-such-master") != NULL, "message: %s", watchlock_last_error());
    rh_sentinel_free(g);
}

static void test_min_replicas_without_replicas(void)
{
    /* a plain server has no replica to acknowledge: the acquire fails and leaves no key */
    rh_server *srv = rh_start(NULL);
    CHECK(srv != NULL);
    char url[200];
    snprintf(url, sizeof url, "%s?min_replicas=1&min_replicas_timeout=200ms", rh_url(srv));
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "unacked");
    /* WATCHLOCK_EREPLICAS = 12 (by number until the header has it everywhere) */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), 12);
    CHECK_EQ(rh_int(srv, "EXISTS %s", "watchlock:{unacked}"), 0);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    rh_free(srv);
}

static const test_case tests[] = {
    {"acquire_through_sentinel", test_acquire_through_sentinel, 0},
    {"min_replicas_without_replicas", test_min_replicas_without_replicas, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
