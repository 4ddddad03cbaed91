/*
 * api.c - the public API's own rules, kept everywhere (issue 30.4):
 *
 *  - outputs first: every call that fills out-parameters takes them before
 *    its inputs (as watchlock_client_open(&c, url) and
 *    watchlock_client_inspect_owner() always did). The six calls that took
 *    them last have a `_v2` variant here in the right order (SQLite's
 *    convention for a corrected signature); the old names stay, documented
 *    as aliases, until the next major version;
 *  - code -> text: one scheme, `watchlock_<what>_str(code)`: status, loss
 *    reason, check code, kind. watchlock_strerror() and
 *    watchlock_check_name() stay as aliases;
 *  - a call that may do network work says so in its name and returns a
 *    status: watchlock_lock_fetch_fencing_token() (a quorum raises the
 *    token on its members first), the token in an out-parameter.
 *
 * Each variant forwards to the one implementation: no rule lives twice.
 */
#include "locks/locks.h"

int watchlock_client_inspect_v2(int *held, int64_t *remaining_ms, int64_t *fence, watchlock_client *client,
                                const void *name, size_t name_len)
{
    return watchlock_client_inspect(client, name, name_len, held, remaining_ms, fence);
}

int watchlock_client_member_inspect_v2(int *held, int64_t *remaining_ms, int64_t *fence,
                                       watchlock_client *client, size_t i, const void *name, size_t name_len)
{
    return watchlock_client_member_inspect(client, i, name, name_len, held, remaining_ms, fence);
}

int watchlock_client_force_release_v2(int *released, watchlock_client *client, const void *name, size_t name_len)
{
    return watchlock_client_force_release(client, name, name_len, released);
}

int watchlock_client_next_lost_event_v2(uint64_t *lock_id, int *reason, watchlock_client *client,
                                        int64_t timeout_ms)
{
    return watchlock_client_next_lost_event(client, timeout_ms, lock_id, reason);
}

int watchlock_client_histogram_v2(int64_t *upper_us, int64_t *count, watchlock_client *client, int which,
                                  int bucket)
{
    return watchlock_client_histogram(client, which, bucket, upper_us, count);
}

int watchlock_parse_renew_interval_v2(int64_t *out_ms, int *renew_num, int *renew_den, const char *text)
{
    return watchlock_parse_renew_interval(text, out_ms, renew_num, renew_den);
}

int watchlock_lock_fetch_fencing_token(int64_t *token, watchlock_lock *lock)
{
    if (token == NULL || lock == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "NULL argument");
    *token = 0;
    if (lock->fork_gen != wl_fork_generation())
        return wl_fail(WATCHLOCK_EFORKED, "lock handle was made by the parent process before fork()");
    int64_t v = watchlock_lock_fencing_token(lock);
    if (v < 0)
        return wl_fail((int)-v, "no fencing token: %s (a quorum's raise was not confirmed by a majority "
                                "of the members holding this hold within its validity)",
                       watchlock_strerror((int)-v));
    *token = v;
    return WATCHLOCK_OK;
}

const char *watchlock_status_str(int status)
{
    return watchlock_strerror(status);
}

const char *watchlock_check_str(int code)
{
    return watchlock_check_name(code);
}

const char *watchlock_kind_str(int kind)
{
    switch (kind) {
    case WATCHLOCK_KIND_NONE: return "none";
    case WATCHLOCK_KIND_PLAIN: return "lock";
    case WATCHLOCK_KIND_FAIR: return "fair lock";
    case WATCHLOCK_KIND_SEMAPHORE: return "semaphore";
    case WATCHLOCK_KIND_READ: return "read-write lock (read side)";
    case WATCHLOCK_KIND_WRITE: return "read-write lock (write side)";
    case WATCHLOCK_KIND_MULTI: return "multi-lock";
    case WATCHLOCK_KIND_RWLOCK: return "read-write lock";
    default: return "unknown kind";
    }
}
