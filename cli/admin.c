/*
 * admin.c - `watchlock status`, `watchlock list` and `watchlock release
 * --force`: look at or break locks without owning them.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

void cli_help_status(void)
{
    fputs("Usage: watchlock status [--url URL] [--json] NAME\n"
          "\n"
          "Show whether the lock NAME is held and by whom (host, pid and program name or\n"
          "--label of a 'watchlock run', or the label a library client set), how much of\n"
          "its lease is left, and the last fencing token issued for it. Does not take the\n"
          "lock.\n"
          "\n"
          "Options:\n"
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379);\n"
          "                  repeat it for a Redlock quorum of independent masters\n"
          "  -j, --json      one JSON object on stdout:\n"
          "                  {\"name\": ..., \"held\": true|false, \"remaining_ms\": N,\n"
          "                   \"fencing_token\": N, \"owner\": {\"host\": ..., \"pid\": N,\n"
          "                   \"label\": ...} or null}  (remaining_ms is -1 if held with\n"
          "                  no expiry; \"name_hex\" is added when NAME is not UTF-8)\n"
          "  -h, --help      show this help\n"
          "\n"
          "Exit codes: 0 held; 1 free; 64 usage error; 69 Redis unreachable or\n"
          "authentication failed; 76 the server answered with an error; 77 denied by\n"
          "the Redis ACL.\n"
          "\n"
          "Examples:\n"
          "  $ watchlock status nightly-backup\n"
          "  nightly-backup: held, 27.4s of lease left, fencing token 1718000000123456, by\n"
          "  pid 4242 on web1: /usr/local/bin/backup\n"
          "  $ watchlock status --json nightly-backup | jq .owner.host\n"
          "  $ if watchlock status nightly-backup >/dev/null; then echo busy; fi\n",
          stdout);
}

void cli_help_list(void)
{
    fputs("Usage: watchlock list [--url URL] [--json] [PATTERN]\n"
          "\n"
          "Show the locks that are held now, sorted by name: remaining lease, fencing\n"
          "token and owner (host, pid and label) where one was recorded. PATTERN is a glob\n"
          "on lock names, as Redis's SCAN MATCH: * any text, ? one byte, [abc] [^a-z]\n"
          "classes, \\ makes the next character literal; default *. Quote it for the\n"
          "shell. The server is searched with SCAN, page by page (never KEYS), so a lock\n"
          "taken or released meanwhile may or may not be listed.\n"
          "\n"
          "Options:\n"
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379);\n"
          "                  repeat it for a Redlock quorum of independent masters\n"
          "  -j, --json      one JSON array on stdout, one object per lock as in\n"
          "                  'watchlock status --json'\n"
          "  -q, --quiet     no message when nothing is held\n"
          "  -h, --help      show this help\n"
          "\n"
          "Names, hosts and labels are printed with control characters, backslashes and\n"
          "bytes that are not UTF-8 escaped (\\xNN, \\\\).\n"
          "\n"
          "Exit codes: 0 (also when nothing is held); 64 usage error; 69 Redis\n"
          "unreachable or authentication failed; 76 the server answered with an error;\n"
          "77 denied by the Redis ACL.\n"
          "\n"
          "Examples:\n"
          "  $ watchlock list 'nightly-*'\n"
          "  nightly-backup  27.4s left  fencing token 1718000000123456  pid 4242 on web1: backup\n"
          "  $ watchlock list --json | jq -r '.[] | \"\\(.name) \\(.owner.host)\"'\n",
          stdout);
}

void cli_help_release(void)
{
    fputs("Usage: watchlock release --force [--url URL] [--quiet] NAME\n"
          "\n"
          "Admin: delete the lock NAME whoever holds it, and wake the processes waiting\n"
          "for it. The former holder's 'watchlock run' notices at its next renewal, stops\n"
          "its command and exits 79. Refused without --force. Exits 0 whether or not the\n"
          "lock was held.\n"
          "\n"
          "Options:\n"
          "  -f, --force     required: confirms that the holder may be cut off\n"
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379);\n"
          "                  repeat it for a Redlock quorum of independent masters\n"
          "  -q, --quiet     print nothing on success\n"
          "  -h, --help      show this help\n"
          "\n"
          "Example:\n"
          "  watchlock release --force nightly-backup\n",
          stdout);
}

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
    int json = opts.json;
    if (optind >= argc)
        return cli_usage_error("status", "missing lock NAME");
    if (optind + 1 < argc)
        return cli_usage_error("status", "too many arguments: expected one NAME");
    const char *name = argv[optind];
    if (!*name)
        return cli_usage_error("status", "the lock NAME must not be empty");
    if (opts.urls.n > 1)
        return cli_quorum_status(&opts.urls, name, json);

    watchlock_client *client = NULL;
    int rc = cli_open_client_urls(&client, &opts.urls);
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
    int json = opts.json;
    if (optind + 1 < argc)
        return cli_usage_error("list", "too many arguments: expected at most one PATTERN (quote it: '%s*')",
                               argv[optind]);
    const char *pattern = optind < argc ? argv[optind] : "*";
    if (opts.urls.n > 1)
        return cli_quorum_list(&opts.urls, pattern, json);

    watchlock_client *client = NULL;
    int rc = cli_open_client_urls(&client, &opts.urls);
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
    int rc = cli_open_client_urls(&client, &opts.urls);
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
