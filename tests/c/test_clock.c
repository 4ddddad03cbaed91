/*
 * test_clock.c - deadlines are judged on CLOCK_BOOTTIME (issue 19 item 10):
 * a host suspended (laptop lid, paused VM) longer than a lease comes back
 * with its keys expired on the server, so its holds must read LOST at once
 * and the loss must be reported promptly. CLOCK_MONOTONIC stops while the
 * host is suspended and would still read HELD.
 *
 * A suspend is simulated through the library's internal test hook
 * wl_test_suspend_us (core/src/base/base.h), which adds to CLOCK_BOOTTIME
 * only, exactly what a real suspend does: CLOCK_MONOTONIC does not see it.
 * The hook is hidden (not exported by libwatchlock.so, see
 * check_exports.cmake), so this binary links the static library, and its
 * own copy of the test harness, so that only one copy of the library is in
 * the process.
 */
#include "testing.h"

#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_int lost_calls;
static atomic_int lost_reason;

static void on_lost(watchlock_lock *l, int reason, void *data)
{
    (void)l, (void)data;
    atomic_store(&lost_reason, reason);
    atomic_fetch_add(&lost_calls, 1);
}

/* A hold with a 30 s lease, then a "suspend" of 40 s: state() reads LOST
 * at once, the loss timer (which sleeps on the monotonic clock) reports it
 * within about a second, not when its monotonic sleep would end. */
static void test_suspend_longer_than_the_lease_loses_the_hold(void)
{
    atomic_store(&wl_test_suspend_us, 0);
    atomic_store(&lost_calls, 0);
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "suspended");
    CHECK_OK(watchlock_lock_set_lease(l, 30000));
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, NULL));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_INT(watchlock_lock_remaining_ms(l), >, 20000);
    /* The server forgets the key during the suspend, as it would: its own
     * clock ran on. */
    CHECK_EQ(rh_int(test_server(), "PEXPIRE watchlock:{suspended} 1"), 1);
    WAIT_FOR(rh_int(test_server(), "EXISTS watchlock:{suspended}") == 0, 5000);
    int64_t t0 = now_ms();
    atomic_store(&wl_test_suspend_us, INT64_C(40) * 1000000);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK_EQ(watchlock_lock_remaining_ms(l), 0);
    WAIT_FOR(atomic_load(&lost_calls) > 0, 10000);
    int64_t took = now_ms() - t0;
    testing_note("on_lost %d time(s), %lld ms after the resume, reason %s", atomic_load(&lost_calls),
                 (long long)took, watchlock_lost_reason_str(atomic_load(&lost_reason)));
    CHECK_EQ(atomic_load(&lost_calls), 1);
    CHECK_INT(took, <, 5000); /* the loss timer re-checks its deadline at least once a second */
    CHECK(atomic_load(&lost_reason) != WATCHLOCK_LOST_NONE);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK_STATUS(watchlock_lock_extend(l, 0), WATCHLOCK_ENOTOWNER);
    CHECK_STATUS(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    /* The handle acquires again, on the suspended clock. */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_INT(watchlock_lock_remaining_ms(l), >, 20000);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    atomic_store(&wl_test_suspend_us, 0);
}

typedef struct waiting {
    watchlock_lock *lock;
    int rc;
    atomic_llong ended_ms;
} waiting;

static void *wait_main(void *arg)
{
    waiting *w = arg;
    w->rc = watchlock_lock_acquire(w->lock, 20000);
    atomic_store(&w->ended_ms, now_ms());
    return NULL;
}

/* Waits end on the boot-time clock too: a suspend longer than what is left
 * of a bounded wait ends it (here: an acquire waiting 20 s for a holder
 * with a 60 s lease returns within about a second of a 30 s "suspend"
 * during the wait, not 20 s later). */
static void test_suspend_ends_a_bounded_wait(void)
{
    atomic_store(&wl_test_suspend_us, 0);
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *c2 = open_client(test_url(""));
    watchlock_lock *holder = new_lock(c, "suspended-wait");
    waiting w = {.lock = new_lock(c2, "suspended-wait"), .rc = -1};
    CHECK_OK(watchlock_lock_set_lease(holder, 60000));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, wait_main, &w), 0);
    /* The waiter subscribes before its attempt, and sets its end before
     * that: once subscribed, it waits for 20 s of (boot-time) clock. */
    redisReply *r = NULL;
    int64_t until = now_ms() + 10000;
    for (;;) {
        r = rh_command(test_server(), "PUBSUB NUMSUB watchlock:{suspended-wait}:released");
        long long n = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
        freeReplyObject(r);
        if (n > 0 || now_ms() >= until)
            break;
        sleep_ms(5);
    }
    CHECK_INT(now_ms(), <, until);
    int64_t t0 = now_ms();
    atomic_store(&wl_test_suspend_us, INT64_C(30) * 1000000);
    CHECK_EQ(pthread_join(th, NULL), 0);
    int64_t took = atomic_load(&w.ended_ms) - t0;
    testing_note("the 20 s wait ended %lld ms after a 30 s suspend", (long long)took);
    CHECK_EQ(w.rc, WATCHLOCK_ETIMEDOUT);
    CHECK_INT(took, <, 5000);
    (void)watchlock_lock_release(holder);
    watchlock_lock_free(holder);
    watchlock_lock_free(w.lock);
    watchlock_client_close(c);
    watchlock_client_close(c2);
    atomic_store(&wl_test_suspend_us, 0);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"suspend_longer_than_the_lease_loses_the_hold", test_suspend_longer_than_the_lease_loses_the_hold, 0},
        {"suspend_ends_a_bounded_wait", test_suspend_ends_a_bounded_wait, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
