/*
 * admin.c - `watchlock status`, `watchlock list` and `watchlock release
 * --force`: look at or break locks without owning them.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_help_status(void)
{
    fputs("Usage: watchlock status [--url URL] [--json] NAME\n"
          "\n"
          "Show whether the lock NAME is held and by whom (host, pid and program name or\n"
          "--label of a 'watchlock run', or the label a library client set), how much of\n"
          "its lease is left, and the last fencing token issued for it. Does not take the\n"
          "lock. For a fair lock, a semaphore or a read-write lock (run --fair, --permits,\n"
          "-s) it also shows the kind, the permits in use or the readers and the writer,\n"
          "the queue (how many wait, and for how long the oldest has), and each hold\n"
          "(the first 100) with its owner, permits or side.\n"
          "\n"
          "Options:\n"
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379);\n"
          "                  repeat it for a Redlock quorum of independent masters\n"
          "  -j, --json      one JSON object on stdout:\n"
          "                  {\"name\": ..., \"held\": true|false, \"remaining_ms\": N,\n"
          "                   \"fencing_token\": N, \"owner\": {\"host\": ..., \"pid\": N,\n"
          "                   \"label\": ...} or null}  (remaining_ms is -1 if held with\n"
          "                  no expiry; \"name_hex\" is added when NAME is not UTF-8);\n"
          "                  for the queued kinds also \"kind\" (fair, semaphore,\n"
          "                  rwlock), \"holders\", \"permits\" and \"in_use\" (semaphore),\n"
          "                  \"readers\" and \"writer\" (rwlock), \"queue\": {\"length\": N,\n"
          "                  \"oldest_wait_ms\": N}, \"holds\": [{\"host\", \"pid\", \"label\"\n"
          "                  (null: none recorded), \"permits\", \"side\" (rwlock: read,\n"
          "                  write), \"remaining_ms\"}], \"holds_not_listed\": N\n"
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
          "  $ watchlock status --json nightly-backup | jq .owner.host\n"          "  $ watchlock status encoders\n"
          "  encoders: semaphore, 3 of 4 permits in use (2 holders); 1 waiting (oldest for\n"
          "  2.1s), 27.4s of lease left, fencing token 1718000000123460\n"
          "    2 permits by pid 4242 on web1: ffmpeg\n"
          "    1 permit by pid 977 on web2: ffmpeg\n"
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
    cli_json_owner(j, o);
}

/* ---- queued kinds: fair lock, semaphore, read-write lock ------------------- */

/* "fair", "semaphore", "rwlock" for a name in use as a queued kind; NULL for
 * a plain lock or a name not in use (shown as before). */
static const char *queued_kind(const watchlock_name_info *info)
{
    switch (info ? watchlock_name_info_kind(info) : WATCHLOCK_KIND_NONE) {
    case WATCHLOCK_KIND_FAIR:
        return "fair";
    case WATCHLOCK_KIND_SEMAPHORE:
        return "semaphore";
    case WATCHLOCK_KIND_RWLOCK:
        return "rwlock";
    default:
        return NULL;
    }
}

/* The JSON members of a queued kind, after the plain lock's: "kind", the
 * holders ("permits" and "in_use" for a semaphore, "readers" and "writer"
 * for a read-write lock) and "queue": {"length", "oldest_wait_ms"}. */
static void json_queued_members(cli_json *j, const watchlock_name_info *info)
{
    const char *kind = queued_kind(info);
    cli_json_key(j, "kind");
    cli_json_string_n(j, kind, strlen(kind));
    cli_json_key(j, "holders");
    cli_json_int(j, watchlock_name_info_holders(info));
    if (watchlock_name_info_kind(info) == WATCHLOCK_KIND_SEMAPHORE) {
        cli_json_key(j, "permits");
        cli_json_int(j, watchlock_name_info_permits(info));
        cli_json_key(j, "in_use");
        cli_json_int(j, watchlock_name_info_in_use(info));
    } else if (watchlock_name_info_kind(info) == WATCHLOCK_KIND_RWLOCK) {
        int writer = watchlock_name_info_writer(info);
        cli_json_key(j, "readers");
        cli_json_int(j, writer ? 0 : watchlock_name_info_in_use(info));
        cli_json_key(j, "writer");
        cli_json_bool(j, writer);
    }
    /* each hold listed (the first WATCHLOCK_INFO_MAX_HOLDERS) with its owner */
    cli_json_key(j, "holds");
    cli_json_begin_array(j);
    size_t n = watchlock_name_info_holder_count(info);
    for (size_t i = 0; i < n; i++) {
        const watchlock_owner *o = watchlock_name_info_holder_owner(info, i);
        size_t host_len = 0, label_len = 0;
        const char *host = watchlock_owner_host(o, &host_len), *label = watchlock_owner_label(o, &label_len);
        cli_json_begin_object(j);
        cli_json_key(j, "host");
        if (o)
            cli_json_string_n(j, host, host_len);
        else
            cli_json_null(j);
        cli_json_key(j, "pid");
        if (o)
            cli_json_int(j, watchlock_owner_pid(o));
        else
            cli_json_null(j);
        cli_json_key(j, "label");
        if (o)
            cli_json_string_n(j, label, label_len);
        else
            cli_json_null(j);
        cli_json_key(j, "permits");
        cli_json_int(j, watchlock_name_info_holder_permits(info, i));
        if (watchlock_name_info_kind(info) == WATCHLOCK_KIND_RWLOCK) {
            const char *side = watchlock_name_info_holder_writer(info, i) ? "write" : "read";
            cli_json_key(j, "side");
            cli_json_string_n(j, side, strlen(side));
        }
        cli_json_key(j, "remaining_ms");
        cli_json_int(j, watchlock_name_info_holder_remaining_ms(info, i));
        cli_json_end_object(j);
    }
    cli_json_end_array(j);
    int64_t more = watchlock_name_info_holders(info) - (int64_t)n;
    cli_json_key(j, "holds_not_listed");
    cli_json_int(j, more > 0 ? more : 0);
    cli_json_key(j, "queue");
    cli_json_begin_object(j);
    cli_json_key(j, "length");
    cli_json_int(j, watchlock_name_info_queue_length(info));
    cli_json_key(j, "oldest_wait_ms");
    cli_json_int(j, watchlock_name_info_oldest_wait_ms(info));
    cli_json_end_object(j);
}

/* "fair lock, 1 holder", "semaphore, 2 of 3 permits in use (2 holders)",
 * "rwlock, 3 readers" / "rwlock, a writer", then "; 4 waiting (oldest 2.1s)". */
static void print_queued(FILE *f, const watchlock_name_info *info)
{
    int kind = watchlock_name_info_kind(info);
    long long holders = (long long)watchlock_name_info_holders(info);
    if (kind == WATCHLOCK_KIND_SEMAPHORE)
        fprintf(f, "semaphore, %lld of %lld permits in use (%lld holder%s)",
                (long long)watchlock_name_info_in_use(info), (long long)watchlock_name_info_permits(info), holders,
                holders == 1 ? "" : "s");
    else if (kind == WATCHLOCK_KIND_RWLOCK && watchlock_name_info_writer(info))
        fputs("rwlock, held by a writer", f);
    else if (kind == WATCHLOCK_KIND_RWLOCK)
        fprintf(f, "rwlock, %lld reader%s", (long long)watchlock_name_info_in_use(info),
                watchlock_name_info_in_use(info) == 1 ? "" : "s");
    else
        fprintf(f, "fair lock, %s", holders > 0 ? "held" : "free");
    int64_t queued = watchlock_name_info_queue_length(info);
    if (queued > 0) {
        char oldest[32];
        cli_format_duration(oldest, sizeof oldest, watchlock_name_info_oldest_wait_ms(info));
        fprintf(f, "; %lld waiting (oldest for %s)", (long long)queued, oldest);
    } else {
        fputs("; nobody waiting", f);
    }
}

/* Hold i of a queued kind for people: "read by pid P on HOST: LABEL",
 * "written by ...", "2 permits by ...", "held by ..." (fair). */
static void print_hold(FILE *f, const watchlock_name_info *info, size_t i)
{
    int kind = watchlock_name_info_kind(info);
    if (kind == WATCHLOCK_KIND_RWLOCK)
        fputs(watchlock_name_info_holder_writer(info, i) ? "written" : "read", f);
    else if (kind == WATCHLOCK_KIND_SEMAPHORE)
        fprintf(f, "%lld permit%s", (long long)watchlock_name_info_holder_permits(info, i),
                watchlock_name_info_holder_permits(info, i) == 1 ? "" : "s");
    else
        fputs("held", f);
    const watchlock_owner *o = watchlock_name_info_holder_owner(info, i);
    if (o != NULL) {
        fputs(" by ", f);
        cli_print_owner(f, o);
    } else {
        fputs(" (no owner recorded)", f);
    }
}

/* "... and N more" when the holders outnumber those listed. */
static void print_more_holds(FILE *f, const watchlock_name_info *info, const char *sep)
{
    int64_t more = watchlock_name_info_holders(info) - (int64_t)watchlock_name_info_holder_count(info);
    if (more > 0)
        fprintf(f, "%s... and %lld more", sep, (long long)more);
}

/* The one holder's owner of a queued kind held once (a fair lock, a writer,
 * a single reader or permit holder): shown as a plain lock's "owner". */
static const watchlock_owner *sole_owner(const watchlock_name_info *info)
{
    if (watchlock_name_info_holders(info) != 1 || watchlock_name_info_holder_count(info) != 1)
        return NULL;
    return watchlock_name_info_holder_owner(info, 0);
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
    watchlock_name_info *info = NULL;
    int st = watchlock_client_inspect_owner(&owner, &held, &remaining, &fence, client, name, strlen(name));
    /* The kind, holders and queue of a queued kind; without them (an older
     * server-side layout, an error after inspect succeeded) NAME is shown as
     * a plain lock. */
    if (st == WATCHLOCK_OK && watchlock_client_name_info(&info, client, name, strlen(name)) != WATCHLOCK_OK)
        info = NULL;
    if (st != WATCHLOCK_OK) {
        char what[256];
        snprintf(what, sizeof what, "status of '%.200s'", name);
        rc = cli_fail(st, what);
        watchlock_owner_free(owner);
        watchlock_client_close(client);
        return rc;
    }
    watchlock_client_close(client);
    if (queued_kind(info)) { /* the holders of a queued kind, whatever the plain key says */
        held = watchlock_name_info_holders(info) > 0;
        remaining = watchlock_name_info_remaining_ms(info);
        fence = watchlock_name_info_fence(info);
    }

    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_object(&j);
        json_lock_members(&j, name, strlen(name), held, remaining, fence,
                          queued_kind(info) ? sole_owner(info) : owner);
        if (queued_kind(info))
            json_queued_members(&j, info);
        cli_json_end_object(&j);
        fputc('\n', stdout);
    } else if (queued_kind(info)) {
        printf("%s: ", name);
        print_queued(stdout, info);
        if (held && remaining >= 0) {
            char left[32];
            cli_format_duration(left, sizeof left, remaining);
            printf(", %s of lease left", left);
        }
        printf(", fencing token %lld\n", (long long)fence);
        for (size_t i = 0; i < watchlock_name_info_holder_count(info); i++) {
            fputs("  ", stdout);
            print_hold(stdout, info, i);
            fputc('\n', stdout);
        }
        print_more_holds(stdout, info, "  ");
        if (watchlock_name_info_holders(info) > (int64_t)watchlock_name_info_holder_count(info))
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
            cli_print_owner(stdout, owner);
        }
        fputc('\n', stdout);
    } else if (fence > 0) {
        printf("%s: free (last fencing token %lld)\n", name, (long long)fence);
    } else {
        printf("%s: free\n", name);
    }
    watchlock_owner_free(owner);
    watchlock_name_info_free(info);
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
    size_t n = watchlock_lock_list_count(list);
    /* The kind of each listed name (one round trip each: an admin command). */
    watchlock_name_info **infos = n ? calloc(n, sizeof *infos) : NULL;
    for (size_t i = 0; infos && i < n; i++) {
        size_t len = 0;
        const char *nm = watchlock_lock_list_name(list, i, &len);
        if (watchlock_client_name_info(&infos[i], client, nm, len) != WATCHLOCK_OK)
            infos[i] = NULL; /* shown as a plain lock */
    }
    watchlock_client_close(client);

    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_array(&j);
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            const char *name = watchlock_lock_list_name(list, i, &len);
            cli_json_begin_object(&j);
            const watchlock_owner *o = infos && queued_kind(infos[i]) ? sole_owner(infos[i])
                                                                      : watchlock_lock_list_owner(list, i);
            json_lock_members(&j, name, len, 1, watchlock_lock_list_remaining_ms(list, i),
                              watchlock_lock_list_fence(list, i), o);
            if (infos && queued_kind(infos[i]))
                json_queued_members(&j, infos[i]);
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
            if (infos && queued_kind(infos[i])) {
                fputs("  ", stdout);
                print_queued(stdout, infos[i]);
                for (size_t k = 0; k < watchlock_name_info_holder_count(infos[i]); k++) {
                    fputs(k ? "; " : "  ", stdout);
                    print_hold(stdout, infos[i], k);
                }
                print_more_holds(stdout, infos[i], "; ");
                o = NULL; /* a queued kind's holds say who */
            }
            if (o != NULL) {
                fputs("  ", stdout);
                cli_print_owner(stdout, o);
            }
            fputc('\n', stdout);
        }
    }
    for (size_t i = 0; infos && i < n; i++)
        watchlock_name_info_free(infos[i]);
    free(infos);
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
