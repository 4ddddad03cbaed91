/*
 * test_quorum_admin.c - the admin calls and the kind refusal go through the
 * client's placement (hold.h wl_placement; issue 30 leftovers 1 and 2): on
 * a quorum client a bad name is refused as on a plain client (EINVAL before
 * any member is asked; it was ECONN "0 of 5 members answered" while each
 * member re-checked the name), inspect and force-release give the
 * majority's verdict, and the fair lock and the semaphore are refused by the
 * quorum placement with the message they always had, while a plain client
 * on the same servers serves them.
 */
#include "quorum_helpers.h"
#include "testing.h"

#include <string.h>

static void admin_and_refusal_through_placement(void)
{
    five f;
    five_start_opts(&f, OPTS);
    watchlock_client *q = settled(&f);
    int held = -1, released = -1;
    int64_t rem = -5, fence = -5;
    /* the name is checked once, before the placement's members are asked */
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect(q, "x", 0, &held, NULL, NULL), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "empty") != NULL);
    CHECK_FAILS_WITH_MSG(watchlock_client_force_release(q, NULL, 1, &released), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "NULL") != NULL);
    /* the majority's verdict: held on every member, then deleted on all */
    watchlock_lock *l = lock_lease(q, "adm", LEASE); /* renewed by the watchdog while held */
    CHECK_OK(watchlock_lock_acquire(l, 8 * LEASE));
    CHECK_OK(watchlock_client_inspect(q, "adm", 3, &held, &rem, &fence));
    CHECK_EQ(held, 1);
    CHECK(rem > 0 && rem <= LEASE);
    CHECK(fence > 0);
    CHECK_OK(watchlock_client_force_release(q, "adm", 3, &released));
    CHECK_EQ(released, 1);
    CHECK_OK(watchlock_client_inspect(q, "adm", 3, &held, &rem, NULL));
    CHECK_EQ(held, 0);
    CHECK_EQ(rem, 0);
    CHECK_OK(watchlock_client_force_release(q, "adm", 3, &released));
    CHECK_EQ(released, 0);
    watchlock_lock_free(l);
    /* refused by the quorum's placement, with its one message */
    watchlock_lock *k = NULL;
    CHECK_FAILS_WITH_MSG(watchlock_fair_lock_new(&k, q, "x", 1), WATCHLOCK_EINVAL);
    CHECK_STR(watchlock_last_error(), "fair locks are not available on a quorum client (5 members) in this version: "
                                      "use a plain lock, or a client on one server");
    CHECK_FAILS_WITH_MSG(watchlock_semaphore_new(&k, q, "x", 1, 2), WATCHLOCK_EINVAL);
    CHECK_STR(watchlock_last_error(), "semaphore locks are not available on a quorum client (5 members) in this "
                                      "version: use a plain lock, or a client on one server");
    CHECK(k == NULL);
    /* served by the one-server placement */
    watchlock_client *one = NULL;
    CHECK_OK(watchlock_client_open(&one, f.urls[0]));
    CHECK_OK(watchlock_fair_lock_new(&k, one, "x", 1));
    watchlock_lock_free(k);
    CHECK_OK(watchlock_semaphore_new(&k, one, "x", 1, 2));
    watchlock_lock_free(k);
    watchlock_client_close(one);
    watchlock_client_close(q);
    five_free(&f);
}

static const test_case tests[] = {
    {"admin_and_refusal_through_placement", admin_and_refusal_through_placement, 0},
    {NULL, NULL, 0},
};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
