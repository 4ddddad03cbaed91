/*
 * header_test.c - compiled by ctest as C99 and as C++ with -Wall -Wextra
 * -Werror -pedantic: watchlock.h must stand alone (no other include first),
 * survive a second inclusion, and declare everything with the types the
 * documentation promises.
 */
#include "watchlock.h"
#include "watchlock.h"

int header_test_use(void);

int header_test_use(void)
{
    watchlock_client *client = 0;
    watchlock_lock *lock = 0;
    int64_t ms = 0;
    uint64_t id = 0;
    int reason = 0, held = 0;
    size_t len = 0;
    watchlock_lost_fn fn = 0;
    int ok = watchlock_version() == WATCHLOCK_VERSION_NUMBER;
    ok += watchlock_version_string() != 0;
    ok += watchlock_strerror(WATCHLOCK_EINTERNAL) != 0;
    ok += watchlock_last_error() != 0;
    ok += watchlock_lost_reason_str(WATCHLOCK_LOST_CONNECTION) != 0;
    ok += watchlock_client_open(&client, "redis://127.0.0.1:1");
    ok += watchlock_client_inspect(client, "x", 1, &held, &ms, &ms);
    ok += watchlock_client_force_release(client, "x", 1, &held);
    ok += watchlock_client_enable_lost_events(client, 1);
    ok += watchlock_client_next_lost_event(client, 0, &id, &reason);
    ok += (int)watchlock_client_stat(client, WATCHLOCK_STAT_WATCHDOG_CPU_US);
    ok += watchlock_lock_new(&lock, client, "x", 1);
    ok += watchlock_lock_set_lease(lock, WATCHLOCK_MAX_LEASE_MS);
    ok += watchlock_lock_set_auto_renew(lock, 1);
    ok += watchlock_lock_set_renew_interval(lock, 0);
    ok += watchlock_lock_set_max_renewals(lock, 0);
    ok += watchlock_lock_set_max_hold(lock, 0);
    ok += watchlock_lock_set_on_lost(lock, fn, 0);
    ok += watchlock_lock_acquire(lock, -1);
    ok += watchlock_lock_extend(lock, 0);
    ok += watchlock_lock_release(lock);
    ok += watchlock_lock_state(lock) == WATCHLOCK_HELD;
    ok += watchlock_lock_lost_reason(lock) == WATCHLOCK_LOST_NONE;
    ok += (int)watchlock_lock_remaining_ms(lock);
    ok += (int)watchlock_lock_fencing_token(lock);
    ok += (int)watchlock_lock_hold_count(lock);
    ok += (int)watchlock_lock_renewals(lock);
    ok += watchlock_lock_name(lock, &len) != 0;
    ok += (int)watchlock_lock_id(lock);
    ok += watchlock_parse_duration(&ms, "1s");
    ok += WATCHLOCK_MAX_NAME > 0;
    {
        watchlock_report *report = 0;
        ok += watchlock_client_check(&report, client);
        ok += (int)watchlock_report_count(report);
        ok += watchlock_report_code(report, 0) == WATCHLOCK_CHECK_EVICTION;
        ok += watchlock_report_message(report, 0) != 0;
        ok += watchlock_check_name(WATCHLOCK_CHECK_UNCHECKED) != 0;
        watchlock_report_free(report);
    }
    watchlock_lock_free(lock);
    watchlock_client_close(client);
    return ok;
}
