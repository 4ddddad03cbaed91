/*
 * report.c - the findings of watchlock_client_check (check.c): a list of
 * (code, one-line message), and its accessors.
 */
#include "client/client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct finding {
    int code;
    char *message;
} finding;

struct watchlock_report {
    size_t n, cap;
    finding *items;
};

watchlock_report *wl_report_new(void)
{
    return calloc(1, sizeof(watchlock_report));
}

int wl_report_add(watchlock_report *r, int code, const char *fmt, ...)
{
    void *items = r->items;
    int grown = wl_grow(&items, &r->cap, r->n, sizeof *r->items, 4);
    r->items = items;
    if (grown != 0)
        return wl_fail(WATCHLOCK_ENOMEM, "check: out of memory");
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = len < 0 ? NULL : malloc((size_t)len + 1);
    if (msg == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "check: out of memory");
    va_start(ap, fmt);
    vsnprintf(msg, (size_t)len + 1, fmt, ap);
    va_end(ap);
    /* One line: text from the server (error messages) could hold anything. */
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    r->items[r->n].code = code;
    r->items[r->n].message = msg;
    r->n++;
    return WATCHLOCK_OK;
}

void wl_report_clear(watchlock_report *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->items[i].message);
    r->n = 0;
}

size_t watchlock_report_count(const watchlock_report *report)
{
    return report ? report->n : 0;
}

int watchlock_report_code(const watchlock_report *report, size_t i)
{
    return report && i < report->n ? report->items[i].code : 0;
}

const char *watchlock_report_message(const watchlock_report *report, size_t i)
{
    return report && i < report->n ? report->items[i].message : "";
}

void watchlock_report_free(watchlock_report *report)
{
    if (report == NULL)
        return;
    wl_report_clear(report);
    free(report->items);
    free(report);
}

const char *watchlock_check_name(int code)
{
    switch (code) {
    case WATCHLOCK_CHECK_EVICTION: return "eviction";
    case WATCHLOCK_CHECK_NO_PERSISTENCE: return "no_persistence";
    case WATCHLOCK_CHECK_FSYNC: return "fsync";
    case WATCHLOCK_CHECK_ACL_COMMANDS: return "acl_commands";
    case WATCHLOCK_CHECK_ACL_KEYS: return "acl_keys";
    case WATCHLOCK_CHECK_ACL_CHANNELS: return "acl_channels";
    case WATCHLOCK_CHECK_REPLICAS: return "replicas";
    case WATCHLOCK_CHECK_SNAPSHOT_ONLY: return "snapshot_only";
    case WATCHLOCK_CHECK_REPLICA_ROLE: return "replica_role";
    case WATCHLOCK_CHECK_UNCHECKED: return "unchecked";
    case WATCHLOCK_CHECK_RESTARTED: return "restarted";
    case WATCHLOCK_CHECK_MEMBER_UNREACHABLE: return "member_unreachable";
    default: return "unknown";
    }
}
