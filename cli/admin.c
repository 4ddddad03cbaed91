/*
 * admin.c - `watchlock status` and `watchlock release --force`: look at or
 * break a lock without owning it.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_cmd_status(int argc, char **argv)
{
    static const struct option longopts[] = {{"url", required_argument, NULL, 'u'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *url = NULL;
    int json = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":u:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'u':
            url = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            cli_help_status();
            return CLI_EXIT_OK;
        default:
            return cli_option_error("status", c, argv);
        }
    }
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
    int st = watchlock_client_inspect(client, name, strlen(name), &held, &remaining, &fence);
    if (st != WATCHLOCK_OK) {
        char what[256];
        snprintf(what, sizeof what, "status of '%.200s'", name);
        rc = cli_fail(st, what);
        watchlock_client_close(client);
        return rc;
    }
    watchlock_client_close(client);

    if (json) {
        fputs("{\"name\": ", stdout);
        cli_json_string(stdout, name);
        printf(", \"held\": %s, \"remaining_ms\": %lld, \"fencing_token\": %lld}\n",
               held ? "true" : "false", (long long)(held ? remaining : 0), (long long)fence);
    } else if (held) {
        if (remaining < 0) {
            printf("%s: held, no expiry (set outside watchlock?), fencing token %lld\n", name,
                   (long long)fence);
        } else {
            char left[32];
            cli_format_duration(left, sizeof left, remaining);
            printf("%s: held, %s of lease left, fencing token %lld\n", name, left,
                   (long long)fence);
        }
    } else if (fence > 0) {
        printf("%s: free (last fencing token %lld)\n", name, (long long)fence);
    } else {
        printf("%s: free\n", name);
    }
    if (fflush(stdout) != 0) {
        cli_error("status: cannot write to stdout");
        return CLI_EXIT_SOFTWARE;
    }
    return CLI_EXIT_OK;
}

int cli_cmd_release(int argc, char **argv)
{
    static const struct option longopts[] = {{"url", required_argument, NULL, 'u'},
                                             {"force", no_argument, NULL, 'f'},
                                             {"quiet", no_argument, NULL, 'q'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *url = NULL;
    int force = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":u:fqh", longopts, NULL)) != -1) {
        switch (c) {
        case 'u':
            url = optarg;
            break;
        case 'f':
            force = 1;
            break;
        case 'q':
            cli_verbosity = 0;
            break;
        case 'h':
            cli_help_release();
            return CLI_EXIT_OK;
        default:
            return cli_option_error("release", c, argv);
        }
    }
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
