/*
 * test_stats.c - issue 25 item 5: the client's monitoring counters and
 * histograms (watchlock_client_stat's new ids, watchlock_client_histogram),
 * each checked for an exact count after known operations on a real server
 * (and through the fault proxy for release retries and connection losses).
 */
#include "proxy_harness.h"
#include "testing.h"

#include <stdio.h>
#include <string.h>

static int64_t stat(watchlock_client *c, int which)
{
    return watchlock_client_stat(c, which);
}

/* Total count of a histogram, and the count of the bucket holding `us`. */
static int64_t hist_total(watchlock_client *c, int which)
{
    int64_t total = 0;
    for (int i = 0; i < WATCHLOCK_HIST_BUCKETS; i++) {
        int64_t upper, n;
        CHECK_OK(watchlock_client_histogram(c, which, i, &upper, &n));
        total += n;
    }
    return total;
}

static int bucket_of(watchlock_client *c, int which, int64_t us)
{
    for (int i = 0; i < WATCHLOCK_HIST_BUCKETS; i++) {
        int64_t upper, n;
        CHECK_OK(watchlock_client_histogram(c, which, i, &upper, &n));
        if (us <= upper)
            return i;
    }
    return -1;
}

static int64_t bucket_count(watchlock_client *c, int which, int i)
{
    int64_t upper, n;
    CHECK_OK(watchlock_client_histogram(c, which, i, &upper, &n));
    return n;
}

static void test_bucket_bounds_and_arguments(void)
{
    watchlock_client *c = open_client(test_url(""));
    int64_t upper, n;
    int64_t want = 64;
    for (int i = 0; i < WATCHLOCK_HIST_BUCKETS - 1; i++, want *= 4) {
        CHECK_OK(watchlock_client_histogram(c, WATCHLOCK_HIST_WAIT, i, &upper, &n));
        CHECK_EQ(upper, want);
        CHECK_EQ(n, 0);
    }
    CHECK_OK(watchlock_client_histogram(c, WATCHLOCK_HIST_RENEW_RTT, WATCHLOCK_HIST_BUCKETS - 1, &upper, &n));
    CHECK_EQ(upper, INT64_MAX);
    CHECK_FAILS_WITH_MSG(watchlock_client_histogram(c, WATCHLOCK_HIST_WAIT, WATCHLOCK_HIST_BUCKETS, &upper, &n),
                         WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_histogram(c, WATCHLOCK_HIST_WAIT, -1, &upper, &n), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_histogram(c, 3, 0, &upper, &n), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_histogram(c, WATCHLOCK_HIST_WAIT, 0, NULL, &n), WATCHLOCK_EINVAL);
    CHECK_EQ(stat(c, 1000), -1); /* unknown ids (18..23 are the quorum's, 0 on a plain client) */
    for (int s = WATCHLOCK_STAT_ACQUIRES; s <= WATCHLOCK_STAT_QUORUM_SPLIT_VOTES; s++)
        CHECK_EQ(stat(c, s), 0);
    watchlock_client_close(c);
}

/* Acquires, contended acquires, timeouts, wait and hold times, an expiry
 * loss: exact counts after known operations. */
static void test_acquires_waits_holds(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "stats-acq");
    watchlock_lock *b = new_lock(c, "stats-acq");
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_acquire(a, 0)); /* reentrant: no new hold */
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRES), 1);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_CONTENDED_ACQUIRES), 0);
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_WAIT), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 50), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 2);
    /* the next call resumes the kept wait, but without wait slices every
     * call is an acquire of its own that returned without the lock */
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 50), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 3);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRES), 1);
    CHECK_OK(watchlock_lock_release(a));
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_release(a)); /* the last hold: its time is recorded */
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_HOLD), 1);
    CHECK_INT(stat(c, WATCHLOCK_STAT_HOLD_US_SUM), >, 0);

    /* A holder whose 600 ms lease runs out unrenewed; b waits for it: a
     * contended acquire whose wait (~600 ms) lands in the 262 ms .. 1.05 s
     * bucket, and one loss by expiry. */
    CHECK_OK(watchlock_lock_set_lease(a, 600));
    CHECK_OK(watchlock_lock_set_auto_renew(a, 0));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    /* Drop the wait b kept above: if the release's message were still on
     * its way, the next call would resume that wait and count its time from
     * its start, before t0 (as designed; seen under TSan). */
    CHECK_OK(watchlock_lock_forget_wait(b));
    int64_t sum0 = stat(c, WATCHLOCK_STAT_WAIT_US_SUM);
    t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(b, 10000));
    int64_t waited_ms = now_ms() - t0;
    testing_note("b waited %lld ms for a's 600 ms lease", (long long)waited_ms);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRES), 3);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_CONTENDED_ACQUIRES), 1);
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_WAIT), 3);
    int64_t wait_us = stat(c, WATCHLOCK_STAT_WAIT_US_SUM) - sum0;
    CHECK_INT(wait_us, <=, waited_ms * 1000 + 1000);
    CHECK_INT(wait_us, >=, 262144);
    CHECK_EQ(bucket_count(c, WATCHLOCK_HIST_WAIT, bucket_of(c, WATCHLOCK_HIST_WAIT, wait_us)), 1);
    WAIT_FOR(watchlock_lock_state(a) == WATCHLOCK_LOST, 5000);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_EXPIRED), 1);
    CHECK_OK(watchlock_lock_release(b));
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_HOLD), 2);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_TAKEN), 0);
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(c);
}

/* issue 31 item 5: a handle that waits in slices (as the Python binding
 * does) makes one acquire of all its calls up to forget_wait: a wait of
 * many timed-out slices that then gets the lock is no timeout (each wait
 * counted one before); one given up counts one, at forget_wait or free. */
static void test_sliced_wait_counts_what_happened(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "stats-slices");
    watchlock_lock *b = new_lock(c, "stats-slices");
    CHECK_OK(watchlock_lock_set_wait_slices(b, 1));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    for (int i = 0; i < 6; i++)
        CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 30), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_acquire(b, 10000)); /* the wait's last slice gets it */
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 0);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRES), 2);
    CHECK_OK(watchlock_lock_release(b));

    CHECK_OK(watchlock_lock_acquire(a, 0));
    for (int i = 0; i < 6; i++)
        CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 30), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 0); /* not given up yet */
    CHECK_OK(watchlock_lock_forget_wait(b));
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 1);
    CHECK_OK(watchlock_lock_forget_wait(b)); /* nothing pending: no count */
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(b, 0), WATCHLOCK_ETIMEDOUT);
    watchlock_lock_free(b); /* a wait given up by the free counts too */
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRE_TIMEOUTS), 2);
    CHECK_OK(watchlock_lock_release(a));
    watchlock_lock_free(a);
    watchlock_client_close(c);
}

/* Losses by reason: taken (found by a renewal, and by release), max
 * renewals, max hold; renewal round trips: one histogram entry per round. */
static void test_losses_and_renewals(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *t = new_lock(c, "stats-taken");
    CHECK_OK(watchlock_lock_set_lease(t, 900));
    CHECK_OK(watchlock_lock_acquire(t, 0));
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{stats-taken}"), 1);
    WAIT_FOR(watchlock_lock_state(t) == WATCHLOCK_LOST, 5000);
    CHECK_EQ(watchlock_lock_lost_reason(t), WATCHLOCK_LOST_TAKEN);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_TAKEN), 1);

    watchlock_lock *r = new_lock(c, "stats-taken-release");
    CHECK_OK(watchlock_lock_acquire(r, 0));
    CHECK_EQ(rh_int(test_server(), "DEL watchlock:{stats-taken-release}"), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(r), WATCHLOCK_ENOTOWNER);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_TAKEN), 2);

    watchlock_lock *m = new_lock(c, "stats-max-renewals");
    CHECK_OK(watchlock_lock_set_lease(m, 600));
    CHECK_OK(watchlock_lock_set_max_renewals(m, 2));
    watchlock_lock *h = new_lock(c, "stats-max-hold");
    CHECK_OK(watchlock_lock_set_lease(h, 600));
    CHECK_OK(watchlock_lock_set_max_hold(h, 700));
    CHECK_OK(watchlock_lock_acquire(m, 0));
    CHECK_OK(watchlock_lock_acquire(h, 0));
    WAIT_FOR(watchlock_lock_state(m) == WATCHLOCK_LOST && watchlock_lock_state(h) == WATCHLOCK_LOST, 10000);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_MAX_RENEWALS), 1);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_MAX_HOLD), 1);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_EXPIRED), 0);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_CONNECTION), 0);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_TAKEN), 2);
    /* Nothing is renewed any more: one RTT entry per round. */
    CHECK_EQ(stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    int64_t rounds = stat(c, WATCHLOCK_STAT_RENEW_ROUNDS);
    CHECK_INT(rounds, >=, 3);
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_RENEW_RTT), rounds);
    CHECK_INT(stat(c, WATCHLOCK_STAT_RENEW_RTT_US_SUM), >, 0);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_ACQUIRES), 4);
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_HOLD), 0); /* none was released */
    watchlock_lock_free(t);
    watchlock_lock_free(r);
    watchlock_lock_free(m);
    watchlock_lock_free(h);
    watchlock_client_close(c);
}

/* Through the fault proxy: a release whose reply is lost is retried (one
 * release retry, and the hold's time recorded), and renewals that cannot
 * reach the server until the deadline lose the lock by connection. */
static void test_release_retry_and_connection_loss(void)
{
    ph_proxy *px = ph_start(rh_port(test_server()));
    CHECK(px != NULL);
    char url[256];
    snprintf(url, sizeof url, "%s?command_timeout=200ms&connect_timeout=200ms", ph_url(px));
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "stats-retry");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(ph_cmd(px, "drop-reply-once"), 0);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(stat(c, WATCHLOCK_STAT_RELEASE_RETRIES), 1);
    CHECK_EQ(hist_total(c, WATCHLOCK_HIST_HOLD), 1);
    CHECK_EQ(ph_cmd(px, "clear"), 0);

    CHECK_OK(watchlock_lock_set_lease(l, 1000));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(ph_cmd(px, "blackhole"), 0);
    WAIT_FOR(watchlock_lock_state(l) == WATCHLOCK_LOST, 10000);
    CHECK_EQ(watchlock_lock_lost_reason(l), WATCHLOCK_LOST_CONNECTION);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_CONNECTION), 1);
    CHECK_EQ(stat(c, WATCHLOCK_STAT_LOST_TAKEN) + stat(c, WATCHLOCK_STAT_LOST_EXPIRED), 0);
    CHECK_EQ(ph_cmd(px, "clear"), 0);
    CHECK_EQ(ph_cmd(px, "reset"), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    ph_free(px);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"bucket_bounds_and_arguments", test_bucket_bounds_and_arguments, 0},
        {"acquires_waits_holds", test_acquires_waits_holds, 0},
        {"sliced_wait_counts_what_happened", test_sliced_wait_counts_what_happened, 0},
        {"losses_and_renewals", test_losses_and_renewals, 0},
        {"release_retry_and_connection_loss", test_release_retry_and_connection_loss, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
