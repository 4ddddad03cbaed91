/*
 * test_proxy.c - the fault-injection proxy (proxy_harness.h) from C: the
 * control channel, a watchlock client through the proxy, added latency, and
 * a partition (pause) that turns an acquire into WATCHLOCK_ECONN after the
 * URL's command_timeout, healed by resume.
 */
#include "testing.h"

#include "proxy_harness.h"

#include <stdlib.h>

static ph_proxy *start_proxy(void)
{
    ph_proxy *px = ph_start(rh_port(test_server()));
    CHECK_MSG(px != NULL, "the proxy did not start");
    return px;
}

static void test_control(void)
{
    ph_proxy *px = start_proxy();
    char reply[256];
    CHECK(ph_port(px) > 0 && ph_control_port(px) > 0 && ph_port(px) != ph_control_port(px));
    CHECK(ph_pid(px) > 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ph_port(px));
    CHECK_STR(ph_url(px), url);
    CHECK_EQ(ph_cmd_reply(px, reply, sizeof reply, "ping"), 0);
    CHECK_STR(reply, "OK PONG");
    CHECK_EQ(ph_cmd_reply(px, reply, sizeof reply, "list"), 0);
    CHECK_STR(reply, "OK");
    CHECK_EQ(ph_cmd_reply(px, reply, sizeof reply, "frobnicate %d", 3), -1);
    CHECK_MSG(strncmp(reply, "ERR unknown command", 19) == 0, "reply: %s", reply);
    CHECK_EQ(ph_cmd_reply(px, reply, sizeof reply, "conn %d pause", 9), -1);
    CHECK_STR(reply, "ERR no connection 9");
    CHECK_EQ(ph_cmd(px, "delay up %d down %d", 5, 0), 0);
    CHECK_EQ(ph_cmd(px, "clear"), 0);
    CHECK_EQ(ph_stat(px, "accepted"), 0);
    CHECK_EQ(ph_stat(px, "conns"), 0);
    CHECK_EQ(ph_stat(px, "nonsense"), -1);
    ph_free(px);
}

static void test_lock_through_proxy(void)
{
    ph_proxy *px = start_proxy();
    watchlock_client *c = open_client(ph_url(px));
    watchlock_lock *l = new_lock(c, "proxy:through");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(test_server(), "EXISTS %s", "watchlock:{proxy:through}"), 1);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(test_server(), "EXISTS %s", "watchlock:{proxy:through}"), 0);
    CHECK_INT(ph_stat(px, "accepted"), >=, 1);
    CHECK_INT(ph_stat(px, "conns"), >=, 1);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    ph_free(px);
}

static void test_delay(void)
{
    ph_proxy *px = start_proxy();
    watchlock_client *c = open_client(ph_url(px));
    watchlock_lock *l = new_lock(c, "proxy:delay");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(ph_cmd(px, "delay up 100"), 0);
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int64_t took = now_ms() - t0;
    testing_note("acquire with 100 ms of added upstream latency took %lld ms", (long long)took);
    CHECK_INT(took, >=, 100);
    CHECK_INT(took, <, 1000);
    CHECK_EQ(ph_cmd(px, "delay up 0"), 0);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    ph_free(px);
}

/* A partition: the paused proxy keeps the connections open but forwards
 * nothing, so the acquire fails after command_timeout; resume heals it. */
static void test_pause_gives_econn(void)
{
    ph_proxy *px = start_proxy();
    char url[128];
    snprintf(url, sizeof url, "%s?command_timeout=200ms", ph_url(px));
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "proxy:pause");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));

    CHECK_EQ(ph_cmd(px, "pause"), 0);
    watchlock_lock *other = new_lock(c, "proxy:pause-other");
    CHECK_OK(watchlock_lock_set_lease(other, 1000)); /* a late-delivered acquire expires soon */
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(other, 0), WATCHLOCK_ECONN);
    int64_t took = now_ms() - t0;
    testing_note("acquire through a paused proxy failed after %lld ms: %s", (long long)took,
                 watchlock_last_error());
    CHECK_INT(took, >=, 150);
    CHECK_INT(took, <, 3000);
    CHECK_EQ(watchlock_lock_state(other), WATCHLOCK_UNLOCKED);

    CHECK_EQ(ph_cmd(px, "resume"), 0);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(test_server(), "EXISTS %s", "watchlock:{proxy:pause}"), 1);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(other);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    ph_free(px);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"control", test_control, 0},
        {"lock_through_proxy", test_lock_through_proxy, 0},
        {"delay", test_delay, 0},
        {"pause_gives_econn", test_pause_gives_econn, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
