/*
 * test_renew_fraction.c - issue 25 item 4: the renew interval as a fraction
 * of the lease (watchlock_lock_set_renew_fraction, the text parser the
 * bindings and the CLI use), and an absolute interval that a later lease
 * made too long refused at acquire instead of silently becoming lease/3.
 */
#include "proxy_harness.h"
#include "testing.h"

#include <string.h>

static void check_parse(const char *text, int64_t ms, int num, int den)
{
    int64_t out = -1;
    int n = -1, d = -1;
    CHECK_OK(watchlock_parse_renew_interval(text, &out, &n, &d));
    CHECK_EQ(out, ms);
    CHECK_EQ(n, num);
    CHECK_EQ(d, den);
}

static void test_parse(void)
{
    check_parse("1/3", 0, 1, 3);
    check_parse("9/10", 0, 9, 10);
    check_parse("25%", 0, 1, 4);
    check_parse("12.5%", 0, 1, 8);
    check_parse("90%", 0, 9, 10);
    check_parse("500ms", 500, 0, 0);
    check_parse("2s", 2000, 0, 0);
    check_parse("1.5", 1500, 0, 0);
    static const char *const bad[] = {"0/3", "3/3", "4/3", "1/0", "/3", "1/", "x/3", "1/3x", "-1/3", "1/-3",
                                      "0%", "100%", "150%", "%", "-5%", "5 %", "abc", "", "1/3/4", "1e2%"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t out;
        int n, d;
        CHECK_FAILS_WITH_MSG(watchlock_parse_renew_interval(bad[i], &out, &n, &d), WATCHLOCK_EINVAL);
    }
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "fraction-setter");
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_fraction(l, 0, 3), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_fraction(l, 3, 3), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_fraction(l, 1, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_fraction(l, -1, 3), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_fraction(l, 1, 2000000), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_renew_fraction(l, 1, 1000000));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* Time from acquire until the lock has `n` renewals (polled). */
static int64_t time_to_renewals(watchlock_lock *l, int64_t n, int64_t timeout_ms)
{
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(l, 0));
    WAIT_FOR(watchlock_lock_renewals(l) >= n, timeout_ms);
    int64_t took = now_ms() - t0;
    CHECK_INT(watchlock_lock_renewals(l), >=, n);
    CHECK_OK(watchlock_lock_release(l));
    return took;
}

/* 1/10 of a 6 s lease renews every 600 ms (lease/3 would be 2 s): three
 * renewals take at least 1.8 s and well under the 6 s of lease/3. The
 * fraction follows the lease: at 3 s it is 300 ms. */
static void test_fraction_sets_the_interval(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "fraction-interval");
    CHECK_OK(watchlock_lock_set_lease(l, 6000));
    CHECK_OK(watchlock_lock_set_renew_fraction(l, 1, 10));
    int64_t took = time_to_renewals(l, 3, 5500);
    testing_note("1/10 of 6 s: 3 renewals in %lld ms", (long long)took);
    CHECK_INT(took, >=, 1750);
    CHECK_INT(took, <, 5500);
    CHECK_OK(watchlock_lock_set_lease(l, 3000));
    took = time_to_renewals(l, 3, 2900);
    testing_note("1/10 of 3 s: 3 renewals in %lld ms", (long long)took);
    CHECK_INT(took, >=, 850);
    CHECK_INT(took, <, 2900);
    /* An absolute interval replaces the fraction (and vice versa). */
    CHECK_OK(watchlock_lock_set_renew_interval(l, 2000));
    took = time_to_renewals(l, 1, 2900);
    CHECK_INT(took, >=, 1950);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* An absolute interval not below the lease: refused by the setter against
 * the lease set at the time, and at acquire when a later lease made it so
 * (before issue 25 the acquire succeeded and renewed at lease/3). */
static void test_absolute_not_below_lease_is_refused(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "absolute-too-long");
    CHECK_OK(watchlock_lock_set_lease(l, 3000));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_interval(l, 3000), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_renew_interval(l, 2000));
    CHECK_OK(watchlock_lock_set_lease(l, 1500));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "renew interval 2000 ms is not below the lease of 1500 ms") != NULL);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    CHECK_EQ(rh_int(test_server(), "EXISTS watchlock:{absolute-too-long}"), 0); /* nothing sent */
    CHECK_OK(watchlock_lock_set_renew_fraction(l, 1, 3)); /* a fraction follows the lease */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"parse", test_parse, 0},
        {"fraction_sets_the_interval", test_fraction_sets_the_interval, 0},
        {"absolute_not_below_lease_is_refused", test_absolute_not_below_lease_is_refused, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
