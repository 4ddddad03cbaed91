/*
 * test_wd_hooks.c - thread interleavings of the watchdog and the loss
 * timer that only CPU starvation makes, staged deterministically through
 * the library's test hook (wl_test_hook, core/src/hold/hold.h). Linked with
 * the static library, which has the hook (the shared one does not export
 * it).
 */
#include "hold/hold.h"
#include "testing.h"

#include <stdatomic.h>

typedef struct gate {
    atomic_int armed;   /* the next call at this point blocks */
    atomic_int blocked; /* a thread is waiting in the hook */
    atomic_int open;    /* let it go */
} gate;

static gate round_gate, timer_gate;

static void gate_pass(gate *g)
{
    int one = 1;
    if (!atomic_compare_exchange_strong(&g->armed, &one, 0))
        return; /* only the first call after arming blocks */
    atomic_store(&g->blocked, 1);
    int64_t until = now_ms() + 20000;
    while (!atomic_load(&g->open) && now_ms() < until)
        sleep_ms(1);
    atomic_store(&g->blocked, 0);
}

static void hook(watchlock_client *c, int point)
{
    (void)c;
    if (point == WL_HOOK_ROUND_DONE)
        gate_pass(&round_gate);
    else if (point == WL_HOOK_TIMER_DUE && atomic_load(&timer_gate.armed))
        /* the timer stays starved (every due deadline waits) until opened */
        while (!atomic_load(&timer_gate.open))
            sleep_ms(1);
}

static atomic_int lost_count, lost_reason;
static void on_lost(watchlock_lock *l, int reason, void *data)
{
    (void)l, (void)data;
    atomic_store(&lost_reason, reason);
    atomic_fetch_add(&lost_count, 1);
}

/* Issue 19 item 3: LOST never flips back to HELD. The watchdog's round
 * got its reply well within the lease, then the thread was descheduled
 * before it applied it (round gate); the loss timer is starved too (timer
 * gate). Past the deadline state() says LOST; then the watchdog applies
 * the renewal. Before: state() reported LOST without recording it, the
 * watchdog judged the reply against a time read before it took the mutex,
 * accepted it, and state() said HELD again with no callback ever fired.
 * Now the first reader past the deadline records the loss (the on-lost
 * callback fires once) and the late renewal is ignored. */
static void test_lost_stays_lost(void)
{
    wl_test_hook = hook;
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "lost-stays-lost");
    CHECK_OK(watchlock_lock_set_lease(l, 1500));
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, NULL));
    atomic_store(&timer_gate.armed, 1);
    atomic_store(&round_gate.armed, 1);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int64_t t0 = now_ms();
    /* the first renewal (due after about 500 ms) got its reply */
    WAIT_FOR(atomic_load(&round_gate.blocked), 10000);
    CHECK(atomic_load(&round_gate.blocked));
    testing_note("renewal reply in after %lld ms", (long long)(now_ms() - t0));
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    /* past the local deadline: LOST, though the timer has not run */
    WAIT_FOR(watchlock_lock_state(l) == WATCHLOCK_LOST, 10000);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    testing_note("LOST read after %lld ms", (long long)(now_ms() - t0));
    /* the watchdog applies its reply */
    int64_t rounds = watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS);
    atomic_store(&round_gate.open, 1);
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS) > rounds, 10000);
    CHECK_INT(watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS), >, rounds);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    atomic_store(&timer_gate.open, 1);
    WAIT_FOR(atomic_load(&lost_count) > 0, 5000);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    CHECK_EQ(watchlock_lock_lost_reason(l), atomic_load(&lost_reason));
    watchlock_lock_free(l); /* waits for the callback */
    watchlock_client_close(c);
    CHECK_EQ(atomic_load(&lost_count), 1);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"lost_stays_lost", test_lost_stays_lost, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
