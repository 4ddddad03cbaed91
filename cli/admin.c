/*
 * admin.c - `watchlock status`, `watchlock list` and `watchlock release
 * --force`: look at or break locks without owning them.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* " by pid P on HOST (LABEL)" for people. */
static void print_owner(FILE *f, const watchlock_owner *o)
{
    size_t host_len = 0, label_len = 0;
    const char *host = watchlock_owner_host(o, &host_len);
    const char *label = watchlock_owner_label(o, &label_len);
    fprintf(f, "pid %lld on ", (long long)watchlock_owner_pid(o));
    cli_print_text(f, host, host_len);
    if (label_len > 0) {
        fputs(": ", f);
        cli_print_text(f, label, label_len);
    }
}

/* The members every lock object of status and list has. */
static void json_lock_members(cli_json *j, const char *name, size_t name_len, int held, int64_t remaining,
                              int64_t fence, const watchlock_owner *o)
{
    cli_json_key(j, "name");
    cli_json_string_n(j, name, name_len);
    if (!cli_utf8_valid(name, name_len)) { /* "name" had U+FFFD put in: the exact bytes */
        cli_json_key(j, "name_hex");
        cli_json_hex(j, name, name_len);
    }
    cli_json_key(j, "held");
    cli_json_bool(j, held);
    cli_json_key(j, "remaining_ms");
    cli_json_int(j, held ? remaining : 0);
    cli_json_key(j, "fencing_token");
    cli_json_int(j, fence);
    cli_json_key(j, "owner");
    if (o == NULL) {
        cli_json_null(j);
        return;
    }
    size_t host_len = 0, label_len = 0;
    const char *host = watchlock_owner_host(o, &host_len);
    const char *label = watchlock_owner_label(o, &label_len);
    cli_json_begin_object(j);
    cli_json_key(j, "host");
    cli_json_string_n(j, host, host_len);
    cli_json_key(j, "pid");
    cli_json_int(j, watchlock_owner_pid(o));
    cli_json_key(j, "label");
    cli_json_string_n(j, label, label_len);
    cli_json_end_object(j);
}

static int flush_stdout(const char *sub)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("%s: cannot write to stdout", sub);
        return CLI_EXIT_SOFTWARE;
    }
    return CLI_EXIT_OK;
}

int cli_cmd_status(int argc, char **argv)
{
    struct cli_admin_opts opts;
    int done = cli_admin_options("status", argc, argv, CLI_OPT_JSON, cli_help_status, &opts);
    if (done >= 0)
        return done;
    const char *url = opts.url;
    int json = opts.json;
    if (optind >= argc)
        return cli_usage_error("status", "missing lock NAME");
    if (optind + 1 < argc)
        return cli_usage_error("status", "too many arguments: expected one NAME");
    const char *name = argv[optind];
    if (!*name)
        return cli_usage_error("status", "the lock NAME must not be empty");

    watchlock_client *client = NULL;
    int rc = cli_open_client(&client, cli_pick_url(url));
    if (rc != 0)
        return rc;

    int held = 0;
    int64_t remaining = 0, fence = 0;
    watchlock_owner *owner = NULL;
    int st = watchlock_client_inspect_owner(&owner, &held, &remaining, &fence, client, name, strlen(name));
    if (st != WATCHLOCK_OK) {
        char what[256];
        snprintf(what, sizeof what, "status of '%.200s'", name);
        rc = cli_fail(st, what);
        watchlock_client_close(client);
        return rc;
    }
    watchlock_client_close(client);

    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_object(&j);
        json_lock_members(&j, name, strlen(name), held, remaining, fence, owner);
        cli_json_end_object(&j);
        fputc('\n', stdout);
    } else if (held) {
        if (remaining < 0) {
            printf("%s: held, no expiry (set outside watchlock?), fencing token %lld", name, (long long)fence);
        } else {
            char left[32];
            cli_format_duration(left, sizeof left, remaining);
            printf("%s: held, %s of lease left, fencing token %lld", name, left, (long long)fence);
        }
        if (owner != NULL) { /* last: a label may hold commas */
            fputs(", by ", stdout);
            print_owner(stdout, owner);
        }
        fputc('\n', stdout);
    } else if (fence > 0) {
        printf("%s: free (last fencing token %lld)\n", name, (long long)fence);
    } else {
        printf("%s: free\n", name);
    }
    watchlock_owner_free(owner);
    rc = flush_stdout("status");
    if (rc != CLI_EXIT_OK)
        return rc;
    return held ? CLI_EXIT_OK : CLI_EXIT_FREE;
}

int cli_cmd_list(int argc, char **argv)
{
    struct cli_admin_opts opts;
    int done = cli_admin_options("list", argc, argv, CLI_OPT_JSON | CLI_OPT_QUIET, cli_help_list, &opts);
    if (done >= 0)
        return done;
    const char *url = opts.url;
    int json = opts.json;
    if (optind + 1 < argc)
        return cli_usage_error("list", "too many arguments: expected at most one PATTERN (quote it: '%s*')",
                               argv[optind]);
    const char *pattern = optind < argc ? argv[optind] : "*";

    watchlock_client *client = NULL;
    int rc = cli_open_client(&client, cli_pick_url(url));
    if (rc != 0)
        return rc;
    watchlock_lock_list *list = NULL;
    int st = watchlock_client_list(&list, client, pattern, strlen(pattern));
    if (st != WATCHLOCK_OK) {
        rc = cli_fail(st, "list");
        watchlock_client_close(client);
        return rc;
    }
    watchlock_client_close(client);

    size_t n = watchlock_lock_list_count(list);
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_array(&j);
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            const char *name = watchlock_lock_list_name(list, i, &len);
            cli_json_begin_object(&j);
            json_lock_members(&j, name, len, 1, watchlock_lock_list_remaining_ms(list, i),
                              watchlock_lock_list_fence(list, i), watchlock_lock_list_owner(list, i));
            cli_json_end_object(&j);
        }
        cli_json_end_array(&j);
        fputc('\n', stdout);
    } else if (n == 0) {
        if (strcmp(pattern, "*") == 0)
            cli_info("no locks are held");
        else
            cli_info("no held locks match '%s'", pattern);
    } else {
        /* NAME  LEFT  FENCING TOKEN  OWNER, one lock per line. */
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            const char *name = watchlock_lock_list_name(list, i, &len);
            int64_t rem = watchlock_lock_list_remaining_ms(list, i);
            char left[48] = "no expiry";
            if (rem >= 0) {
                cli_format_duration(left, sizeof left, rem);
                strcat(left, " left");
            }
            cli_print_text(stdout, name, len);
            printf("  %s  fencing token %lld", left, (long long)watchlock_lock_list_fence(list, i));
            const watchlock_owner *o = watchlock_lock_list_owner(list, i);
            if (o != NULL) {
                fputs("  ", stdout);
                print_owner(stdout, o);
            }
            fputc('\n', stdout);
        }
    }
    watchlock_lock_list_free(list);
    return flush_stdout("list");
}

int cli_cmd_release(int argc, char **argv)
{
    struct cli_admin_opts opts;
    int done = cli_admin_options("release", argc, argv, CLI_OPT_FORCE | CLI_OPT_QUIET, cli_help_release, &opts);
    if (done >= 0)
        return done;
    const char *url = opts.url;
    int force = opts.force;
    if (optind >= argc)
        return cli_usage_error("release", "missing lock NAME");
    if (optind + 1 < argc)
        return cli_usage_error("release", "too many arguments: expected one NAME");
    const char *name = argv[optind];
    if (!*name)
        return cli_usage_error("release", "the lock NAME must not be empty");
    if (!force)
        return cli_usage_error("release",
                               "refusing to release '%s' without --force: it may belong to a "
                               "running process (a 'watchlock run' holder releases by itself)",
                               name);

    watchlock_client *client = NULL;
    int rc = cli_open_client(&client, cli_pick_url(url));
    if (rc != 0)
        return rc;
    int released = 0;
    int st = watchlock_client_force_release(client, name, strlen(name), &released);
    if (st != WATCHLOCK_OK) {
        char what[256];
        snprintf(what, sizeof what, "cannot release '%.200s'", name);
        rc = cli_fail(st, what);
        watchlock_client_close(client);
        return rc;
    }
    watchlock_client_close(client);
    if (released)
        cli_info("released '%s'; its waiters were woken", name);
    else
        cli_info("'%s' was not held; nothing to release", name);
    return CLI_EXIT_OK;
}
