/* test_api_names.c - the public API's own rules (issue 30.4): the
 * outputs-first variants give what the older forms give, one code->text
 * scheme, and a fencing token call that returns a status. */
#include "testing.h"

static void test_outputs_first_variants(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "api:v2");
    CHECK_OK(watchlock_lock_acquire(l, 0));

    int held_a = -1, held_b = -1;
    int64_t rem_a = -2, rem_b = -2, fence_a = -3, fence_b = -3;
    CHECK_OK(watchlock_client_inspect(c, "api:v2", 6, &held_a, &rem_a, &fence_a));
    CHECK_OK(watchlock_client_inspect_v2(&held_b, &rem_b, &fence_b, c, "api:v2", 6));
    CHECK(held_a == 1 && held_b == 1);
    CHECK(fence_a == fence_b && fence_a > 0);
    CHECK(rem_b > 0 && rem_b <= watchlock_lock_lease(l));

    int64_t token = -1;
    CHECK_OK(watchlock_lock_fetch_fencing_token(&token, l));
    CHECK(token == watchlock_lock_fencing_token(l));
    CHECK(token == fence_a);
    CHECK(watchlock_lock_fetch_fencing_token(NULL, l) == WATCHLOCK_EINVAL);
    CHECK(watchlock_lock_fetch_fencing_token(&token, NULL) == WATCHLOCK_EINVAL);

    int released = -1;
    CHECK_OK(watchlock_client_force_release_v2(&released, c, "api:v2", 6));
    CHECK(released == 1);
    CHECK_OK(watchlock_client_force_release_v2(&released, c, "api:v2", 6));
    CHECK(released == 0);

    int64_t ms = 0;
    int num = 0, den = 0;
    CHECK_OK(watchlock_parse_renew_interval_v2(&ms, &num, &den, "25%"));
    CHECK(num == 1 && den == 4);
    CHECK(watchlock_parse_renew_interval_v2(&ms, &num, &den, "100%") == WATCHLOCK_EINVAL);

    int64_t upper = 0, count = -1;
    int rc_a = watchlock_client_histogram(c, 0, 0, &upper, &count);
    int64_t upper2 = 0, count2 = -1;
    int rc_b = watchlock_client_histogram_v2(&upper2, &count2, c, 0, 0);
    CHECK(rc_a == rc_b);
    CHECK(upper == upper2);

    uint64_t id = 0;
    int reason = 0;
    CHECK(watchlock_client_next_lost_event_v2(&id, &reason, c, 0) == WATCHLOCK_ETIMEDOUT);

    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_one_code_to_text_scheme(void)
{
    CHECK(strcmp(watchlock_status_str(WATCHLOCK_ENOTOWNER), watchlock_strerror(WATCHLOCK_ENOTOWNER)) == 0);
    CHECK(strcmp(watchlock_check_str(WATCHLOCK_CHECK_EVICTION), "eviction") == 0);
    CHECK(strcmp(watchlock_check_str(WATCHLOCK_CHECK_FSYNC), watchlock_check_name(WATCHLOCK_CHECK_FSYNC)) == 0);
    CHECK(strcmp(watchlock_kind_str(WATCHLOCK_KIND_SEMAPHORE), "semaphore") == 0);
    CHECK(strcmp(watchlock_kind_str(WATCHLOCK_KIND_FAIR), "fair lock") == 0);
    CHECK(strcmp(watchlock_kind_str(12345), "unknown kind") == 0);
    CHECK(watchlock_status_str(-77) != NULL && watchlock_lost_reason_str(-77) != NULL);
}

static const test_case tests[] = {
    {"outputs_first_variants", test_outputs_first_variants, 0},
    {"one_code_to_text_scheme", test_one_code_to_text_scheme, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
