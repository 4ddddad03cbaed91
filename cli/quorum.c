/*
 * quorum.c - `watchlock status`, `list` and `check` when several --url are
 * given (a Redlock quorum of independent masters, issue 21): one line per
 * member, then the verdict the majority gives.
 *
 * Each member is opened as a plain client of its own, all members in
 * parallel (one thread each, joined before anything is printed), so that a
 * member that is down or stopped shows as "unreachable" and costs one
 * connect or command timeout of wall time, not one per member. The threads
 * share nothing but their own slot of the members array.
 *
 * Verdicts (majority m = n/2 + 1):
 *   status: "held" when at least m members hold the key; "free" when more
 *     than n - m answer free (no majority can hold it); else "unknown" (too
 *     many unreachable to tell): exit 0, 1, 69.
 *   list: the names held on at least m members; 69 when fewer than m members
 *     answered.
 *   check: every member's findings; "unreachable" for a member that did not
 *     answer; exit 0 when all are clean, 1 with any finding or unreachable
 *     member, 69 when fewer than m answered.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum member_op { OP_STATUS, OP_LIST, OP_CHECK };

struct member {
    const char *url;
    enum member_op op;
    const char *arg; /* name or pattern */
    int status;      /* of open or of the call */
    char error[512]; /* the library's message when status != OK */
    /* OP_STATUS */
    int held;
    int64_t remaining, fence;
    watchlock_owner *owner;
    /* OP_LIST */
    watchlock_lock_list *list;
    /* OP_CHECK */
    watchlock_report *report;
};

static void keep_error(struct member *m, int st)
{
    const char *d = watchlock_last_error();
    m->status = st;
    snprintf(m->error, sizeof m->error, "%s%s%s", watchlock_strerror(st), d && *d ? ": " : "", d ? d : "");
}

static void *member_thread(void *arg)
{
    struct member *m = arg;
    watchlock_client *c = NULL;
    int st = watchlock_client_open(&c, m->url);
    if (st != WATCHLOCK_OK) {
        keep_error(m, st);
        return NULL;
    }
    switch (m->op) {
    case OP_STATUS:
        st = watchlock_client_inspect_owner(&m->owner, &m->held, &m->remaining, &m->fence, c, m->arg,
                                            strlen(m->arg));
        break;
    case OP_LIST:
        st = watchlock_client_list(&m->list, c, m->arg, strlen(m->arg));
        break;
    case OP_CHECK:
        st = watchlock_client_check(&m->report, c);
        break;
    }
    if (st != WATCHLOCK_OK)
        keep_error(m, st);
    watchlock_client_close(c);
    return NULL;
}

/* Runs op on every member in parallel; returns the array (NULL: out of memory). */
static struct member *ask_members(const struct cli_urls *u, enum member_op op, const char *arg)
{
    struct member *ms = calloc(u->n, sizeof *ms);
    pthread_t *th = calloc(u->n, sizeof *th);
    char *started = calloc(u->n, 1);
    if (!ms || !th || !started) {
        free(ms);
        free(th);
        free(started);
        cli_error("out of memory");
        return NULL;
    }
    for (size_t i = 0; i < u->n; i++) {
        ms[i].url = u->v[i];
        ms[i].op = op;
        ms[i].arg = arg;
        started[i] = pthread_create(&th[i], NULL, member_thread, &ms[i]) == 0;
        if (!started[i])
            member_thread(&ms[i]); /* no thread: ask it here */
    }
    for (size_t i = 0; i < u->n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
    }
    free(th);
    free(started);
    return ms;
}

static void free_members(struct member *ms, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        watchlock_owner_free(ms[i].owner);
        watchlock_lock_list_free(ms[i].list);
        watchlock_report_free(ms[i].report);
    }
    free(ms);
}

static size_t majority(size_t n)
{
    return n / 2 + 1;
}

/* A usage error from a member (a malformed URL) is the user's: exit 64. */
static int usage_error_in(const struct member *ms, size_t n, const char *sub)
{
    for (size_t i = 0; i < n; i++) {
        if (ms[i].status == WATCHLOCK_EINVAL) {
            cli_error("%s: member %zu (%s): %s", sub, i + 1, cli_redact_url(ms[i].url), ms[i].error);
            return CLI_EXIT_USAGE;
        }
    }
    return 0;
}

static void jstr(cli_json *j, const char *s)
{
    cli_json_string_n(j, s, strlen(s));
}

static void json_member_head(cli_json *j, const struct member *m, size_t i)
{
    cli_json_begin_object(j);
    cli_json_key(j, "member");
    cli_json_int(j, (int64_t)i + 1);
    cli_json_key(j, "url");
    jstr(j, cli_redact_url(m->url));
    cli_json_key(j, "reachable");
    cli_json_bool(j, m->status == WATCHLOCK_OK);
    if (m->status != WATCHLOCK_OK) {
        cli_json_key(j, "error");
        jstr(j, m->error);
    }
}

static int flush_out(const char *sub)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("%s: cannot write to stdout", sub);
        return CLI_EXIT_SOFTWARE;
    }
    return CLI_EXIT_OK;
}

int cli_quorum_status(const struct cli_urls *u, const char *name, int json)
{
    size_t n = u->n, m = majority(n);
    struct member *ms = ask_members(u, OP_STATUS, name);
    if (!ms)
        return CLI_EXIT_SOFTWARE;
    int rc = usage_error_in(ms, n, "status");
    if (rc != 0) {
        free_members(ms, n);
        return rc;
    }
    size_t held = 0, free_ = 0;
    int64_t fence = 0, remaining = -2; /* -2: none yet; the least remaining among the holders */
    const watchlock_owner *owner = NULL;
    for (size_t i = 0; i < n; i++) {
        if (ms[i].status != WATCHLOCK_OK)
            continue;
        if (ms[i].fence > fence)
            fence = ms[i].fence;
        if (!ms[i].held) {
            free_++;
            continue;
        }
        held++;
        if (remaining == -2 || (ms[i].remaining >= 0 && (remaining < 0 || ms[i].remaining < remaining)))
            remaining = ms[i].remaining;
        if (owner == NULL)
            owner = ms[i].owner;
    }
    const char *verdict = held >= m ? "held" : free_ > n - m ? "free" : "unknown";

    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_object(&j);
        cli_json_key(&j, "name");
        jstr(&j, name);
        cli_json_key(&j, "held");
        cli_json_bool(&j, held >= m);
        cli_json_key(&j, "verdict");
        jstr(&j, verdict);
        cli_json_key(&j, "remaining_ms");
        cli_json_int(&j, held >= m ? remaining : 0);
        cli_json_key(&j, "fencing_token");
        cli_json_int(&j, fence);
        cli_json_key(&j, "owner");
        cli_json_owner(&j, held >= m ? owner : NULL);
        cli_json_key(&j, "majority");
        cli_json_int(&j, (int64_t)m);
        cli_json_key(&j, "held_on");
        cli_json_int(&j, (int64_t)held);
        cli_json_key(&j, "members");
        cli_json_begin_array(&j);
        for (size_t i = 0; i < n; i++) {
            json_member_head(&j, &ms[i], i);
            if (ms[i].status == WATCHLOCK_OK) {
                cli_json_key(&j, "held");
                cli_json_bool(&j, ms[i].held);
                cli_json_key(&j, "remaining_ms");
                cli_json_int(&j, ms[i].held ? ms[i].remaining : 0);
                cli_json_key(&j, "fencing_token");
                cli_json_int(&j, ms[i].fence);
                cli_json_key(&j, "owner");
                cli_json_owner(&j, ms[i].owner);
            }
            cli_json_end_object(&j);
        }
        cli_json_end_array(&j);
        cli_json_end_object(&j);
        fputc('\n', stdout);
    } else {
        printf("%s: %s on %zu of %zu members (majority %zu)", name, verdict, held, n, m);
        if (held >= m) {
            if (remaining >= 0) {
                char left[32];
                cli_format_duration(left, sizeof left, remaining);
                printf(", %s of lease left", left);
            }
            printf(", fencing token %lld", (long long)fence);
            if (owner != NULL) {
                fputs(", by ", stdout);
                cli_print_owner(stdout, owner);
            }
        } else if (fence > 0) {
            printf(" (last fencing token %lld)", (long long)fence);
        }
        fputc('\n', stdout);
        for (size_t i = 0; i < n; i++) {
            printf("  member %zu %s: ", i + 1, cli_redact_url(ms[i].url));
            if (ms[i].status != WATCHLOCK_OK) {
                printf("unreachable: %s\n", ms[i].error);
            } else if (ms[i].held) {
                char left[32] = "no expiry";
                if (ms[i].remaining >= 0)
                    cli_format_duration(left, sizeof left, ms[i].remaining);
                printf("held, %s left, fencing token %lld\n", left, (long long)ms[i].fence);
            } else {
                printf("free, fencing token %lld\n", (long long)ms[i].fence);
            }
        }
    }
    free_members(ms, n);
    rc = flush_out("status");
    if (rc != CLI_EXIT_OK)
        return rc;
    return held >= m ? CLI_EXIT_OK : free_ > n - m ? CLI_EXIT_FREE : CLI_EXIT_UNAVAILABLE;
}

/* The index of `name` in member k's list, or -1. Lists are sorted by name,
 * but a linear search is enough for what an admin lists. */
static long find_in(const watchlock_lock_list *l, const char *name, size_t len)
{
    size_t cnt = watchlock_lock_list_count(l);
    for (size_t i = 0; i < cnt; i++) {
        size_t l2 = 0;
        const char *n2 = watchlock_lock_list_name(l, i, &l2);
        if (l2 == len && memcmp(n2, name, len) == 0)
            return (long)i;
    }
    return -1;
}

int cli_quorum_list(const struct cli_urls *u, const char *pattern, int json)
{
    size_t n = u->n, m = majority(n), answered = 0;
    struct member *ms = ask_members(u, OP_LIST, pattern);
    if (!ms)
        return CLI_EXIT_SOFTWARE;
    int rc = usage_error_in(ms, n, "list");
    if (rc != 0) {
        free_members(ms, n);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (ms[i].status == WATCHLOCK_OK)
            answered++;
        else
            cli_error("list: member %zu (%s) unreachable: %s", i + 1, cli_redact_url(ms[i].url), ms[i].error);
    }
    if (answered < m) {
        cli_error("list: only %zu of %zu members answered (majority %zu): cannot tell which locks are held",
                  answered, n, m);
        free_members(ms, n);
        return CLI_EXIT_UNAVAILABLE;
    }
    cli_json j;
    if (json) {
        cli_json_init(&j, stdout);
        cli_json_begin_array(&j);
    }
    size_t shown = 0;
    /* Every name held on a majority is in the list of some member: walk each
     * list, keep a name at its first occurrence only. */
    for (size_t k = 0; k < n; k++) {
        if (ms[k].list == NULL)
            continue;
        size_t cnt = watchlock_lock_list_count(ms[k].list);
        for (size_t i = 0; i < cnt; i++) {
            size_t len = 0;
            const char *name = watchlock_lock_list_name(ms[k].list, i, &len);
            int seen = 0;
            for (size_t p = 0; p < k && !seen; p++)
                seen = ms[p].list != NULL && find_in(ms[p].list, name, len) >= 0;
            if (seen)
                continue;
            size_t held_on = 0;
            int64_t fence = 0, remaining = -2;
            const watchlock_owner *owner = NULL;
            long at[CLI_MAX_URLS];
            for (size_t q = 0; q < n; q++) {
                at[q] = ms[q].list != NULL ? find_in(ms[q].list, name, len) : -1;
                if (at[q] < 0)
                    continue;
                held_on++;
                int64_t f = watchlock_lock_list_fence(ms[q].list, (size_t)at[q]);
                int64_t r = watchlock_lock_list_remaining_ms(ms[q].list, (size_t)at[q]);
                if (f > fence)
                    fence = f;
                if (remaining == -2 || (r >= 0 && (remaining < 0 || r < remaining)))
                    remaining = r;
                if (owner == NULL)
                    owner = watchlock_lock_list_owner(ms[q].list, (size_t)at[q]);
            }
            if (held_on < m)
                continue;
            shown++;
            if (json) {
                cli_json_begin_object(&j);
                cli_json_key(&j, "name");
                cli_json_string_n(&j, name, len);
                if (!cli_utf8_valid(name, len)) {
                    cli_json_key(&j, "name_hex");
                    cli_json_hex(&j, name, len);
                }
                cli_json_key(&j, "held");
                cli_json_bool(&j, 1);
                cli_json_key(&j, "remaining_ms");
                cli_json_int(&j, remaining);
                cli_json_key(&j, "fencing_token");
                cli_json_int(&j, fence);
                cli_json_key(&j, "owner");
                cli_json_owner(&j, owner);
                cli_json_key(&j, "held_on");
                cli_json_int(&j, (int64_t)held_on);
                cli_json_key(&j, "members");
                cli_json_begin_array(&j);
                for (size_t q = 0; q < n; q++) {
                    if (ms[q].status != WATCHLOCK_OK)
                        jstr(&j, "unreachable");
                    else
                        jstr(&j, at[q] >= 0 ? "held" : "free");
                }
                cli_json_end_array(&j);
                cli_json_end_object(&j);
            } else {
                char left[48] = "no expiry";
                if (remaining >= 0) {
                    cli_format_duration(left, sizeof left, remaining);
                    strcat(left, " left");
                }
                cli_print_text(stdout, name, len);
                printf("  %s  fencing token %lld  on %zu/%zu members", left, (long long)fence, held_on, n);
                if (owner != NULL) {
                    fputs("  ", stdout);
                    cli_print_owner(stdout, owner);
                }
                fputc('\n', stdout);
            }
        }
    }
    if (json) {
        cli_json_end_array(&j);
        fputc('\n', stdout);
    } else if (shown == 0) {
        if (strcmp(pattern, "*") == 0)
            cli_info("no locks are held on a majority of the %zu members", n);
        else
            cli_info("no locks matching '%s' are held on a majority of the %zu members", pattern, n);
    }
    free_members(ms, n);
    return flush_out("list");
}

int cli_quorum_check(const struct cli_urls *u, int json)
{
    size_t n = u->n, m = majority(n), answered = 0, findings = 0;
    struct member *ms = ask_members(u, OP_CHECK, NULL);
    if (!ms)
        return CLI_EXIT_SOFTWARE;
    int rc = usage_error_in(ms, n, "check");
    if (rc != 0) {
        free_members(ms, n);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (ms[i].status == WATCHLOCK_OK) {
            answered++;
            findings += watchlock_report_count(ms[i].report);
        }
    }
    int ok = answered == n && findings == 0;
    const char *verdict = answered < m ? "unavailable" : ok ? "ok" : "warnings";
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_object(&j);
        cli_json_key(&j, "url");
        jstr(&j, cli_urls_shown(u));
        cli_json_key(&j, "ok");
        cli_json_bool(&j, ok);
        cli_json_key(&j, "verdict");
        jstr(&j, verdict);
        cli_json_key(&j, "majority");
        cli_json_int(&j, (int64_t)m);
        cli_json_key(&j, "reachable");
        cli_json_int(&j, (int64_t)answered);
        cli_json_key(&j, "findings"); /* every member's, each with its member number */
        cli_json_begin_array(&j);
        for (size_t i = 0; i < n; i++) {
            for (size_t k = 0; ms[i].report && k < watchlock_report_count(ms[i].report); k++) {
                cli_json_begin_object(&j);
                cli_json_key(&j, "member");
                cli_json_int(&j, (int64_t)i + 1);
                cli_json_key(&j, "code");
                jstr(&j, watchlock_check_name(watchlock_report_code(ms[i].report, k)));
                cli_json_key(&j, "message");
                jstr(&j, watchlock_report_message(ms[i].report, k));
                cli_json_end_object(&j);
            }
        }
        cli_json_end_array(&j);
        cli_json_key(&j, "members");
        cli_json_begin_array(&j);
        for (size_t i = 0; i < n; i++) {
            json_member_head(&j, &ms[i], i);
            if (ms[i].status == WATCHLOCK_OK) {
                cli_json_key(&j, "ok");
                cli_json_bool(&j, watchlock_report_count(ms[i].report) == 0);
            }
            cli_json_end_object(&j);
        }
        cli_json_end_array(&j);
        cli_json_end_object(&j);
        fputc('\n', stdout);
    } else {
        for (size_t i = 0; i < n; i++) {
            const char *shown = cli_redact_url(ms[i].url);
            if (ms[i].status != WATCHLOCK_OK) {
                printf("member %zu %s: unreachable: %s\n", i + 1, shown, ms[i].error);
                continue;
            }
            size_t cnt = watchlock_report_count(ms[i].report);
            if (cnt == 0)
                printf("member %zu %s: no settings found that break lock safety\n", i + 1, shown);
            for (size_t k = 0; k < cnt; k++)
                printf("member %zu %s: %s: %s\n", i + 1, shown,
                       watchlock_check_name(watchlock_report_code(ms[i].report, k)),
                       watchlock_report_message(ms[i].report, k));
        }
        printf("quorum: %zu of %zu members reachable (majority %zu): %s\n", answered, n, m, verdict);
    }
    free_members(ms, n);
    rc = flush_out("check");
    if (rc != CLI_EXIT_OK)
        return rc;
    return answered < m ? CLI_EXIT_UNAVAILABLE : ok ? CLI_EXIT_OK : CLI_EXIT_WARNINGS;
}

void cli_quorum_report_acquire(watchlock_client *client, const watchlock_lock *lock, const char *name,
                               int is_error)
{
    static const char *const words[] = {"unknown", "granted", "held by another owner", "unreachable",
                                        "restarted (not counted for one lease)"};
    size_t n = watchlock_client_member_count(client);
    if (n <= 1)
        return;
    char line[1536];
    size_t len = 0;
    line[0] = '\0';
    for (size_t i = 0; i < n && len + 1 < sizeof line; i++) {
        int v = watchlock_lock_member_status(lock, i);
        const char *w = v >= 0 && v < (int)(sizeof words / sizeof words[0]) ? words[v] : "unknown";
        int k = snprintf(line + len, sizeof line - len, "%smember %zu %s", i ? ", " : "", i + 1, w);
        if (k < 0)
            break;
        len += (size_t)k;
    }
    if (is_error)
        cli_error("'%s' on %zu members: %s", name, n, line);
    else
        cli_info("'%s' on %zu members: %s", name, n, line);
}
