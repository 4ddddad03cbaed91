/* errors.c - status texts and the per-thread detail message. */
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

int wl_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *watchlock_last_error(void)
{
    return last_error;
}

const char *watchlock_strerror(int status)
{
    switch (status) {
    case WATCHLOCK_OK: return "ok";
    case WATCHLOCK_EINVAL: return "invalid argument";
    case WATCHLOCK_ENOMEM: return "out of memory";
    case WATCHLOCK_ETIMEDOUT: return "timeout: lock held by another owner";
    case WATCHLOCK_ENOTOWNER: return "not owner";
    case WATCHLOCK_ECONN: return "connection error";
    case WATCHLOCK_EAUTH: return "authentication failed";
    case WATCHLOCK_ESERVER: return "server error";
    case WATCHLOCK_ECLOSED: return "client closed";
    case WATCHLOCK_EFORKED: return "handle inherited across fork";
    case WATCHLOCK_EINTERNAL: return "internal error";
    case WATCHLOCK_EPERM: return "permission denied by ACL";
    case WATCHLOCK_EREPLICAS: return "not acknowledged by enough replicas";
    case WATCHLOCK_EWRONGTYPE: return "the name is in use as another lock kind";
    case WATCHLOCK_EUNAVAIL: return "not available (e.g. a quorum fencing token whose raise was not confirmed)";
    default: return "unknown status";
    }
}

const char *watchlock_lost_reason_str(int reason)
{
    switch (reason) {
    case WATCHLOCK_LOST_NONE: return "not lost";
    case WATCHLOCK_LOST_TAKEN: return "taken";
    case WATCHLOCK_LOST_EXPIRED: return "expired";
    case WATCHLOCK_LOST_MAX_RENEWALS: return "max renewals reached";
    case WATCHLOCK_LOST_MAX_HOLD: return "max hold reached";
    case WATCHLOCK_LOST_CONNECTION: return "connection lost";
    default: return "unknown reason";
    }
}

int watchlock_version(void)
{
    return WATCHLOCK_VERSION_NUMBER;
}

const char *watchlock_version_string(void)
{
    return WATCHLOCK_VERSION_STRING;
}
