/*
 * check.c - `watchlock check`: the Redis server settings and ACL
 * permissions that break lock safety (watchlock_client_check), one line
 * per finding. Exit 0 when there is nothing to warn about, 1 with warnings,
 * so that a deploy script or a monitoring probe can act on it.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

void cli_help_check(void)
{
    fputs("Usage: watchlock check [--url URL] [--json]\n"
          "\n"
          "Report the Redis server settings and ACL permissions that break lock safety:\n"
          "  eviction        maxmemory-policy is not noeviction: lock keys can be evicted\n"
          "  no_persistence  no AOF and no RDB: a restart forgets every lock\n"
          "  snapshot_only   RDB only: a restart forgets the locks since the last snapshot\n"
          "  fsync           AOF without appendfsync always: a crash may lose the last second\n"
          "  replicas        replicas but min-replicas-to-write 0: a failover can lose locks\n"
          "  replica_role    the server is a replica: locks cannot be taken there\n"
          "  acl_commands    the user may not run EVALSHA, EVAL or a command the scripts call\n"
          "  acl_keys        the user may not read and write the keys watchlock:*\n"
          "  acl_channels    the user may not SUBSCRIBE/PUBLISH watchlock:*: waiters are not\n"
          "                  woken by releases and wait out the holder's lease instead\n"
          "  unchecked       CONFIG GET or INFO is denied: those settings were not checked\n"
          "Nothing is changed on the server. One line per finding on stdout, as\n"
          "'CODE: message'.\n"
          "\n"
          "Options:\n"
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379);\n"
          "                  repeat it for a Redlock quorum of independent masters\n"
          "  -j, --json      one JSON object on stdout:\n"
          "                  {\"url\": ..., \"ok\": true|false,\n"
          "                   \"findings\": [{\"code\": \"eviction\", \"message\": ...}, ...]}\n"
          "  -h, --help      show this help\n"
          "\n"
          "Exit codes: 0 nothing to warn about; 1 warnings; 64 usage error; 69 Redis\n"
          "unreachable or authentication failed; 76 the server answered with an error.\n"
          "\n"
          "Example:\n"
          "  $ watchlock check --url redis://127.0.0.1:6379\n"
          "  eviction: maxmemory-policy is allkeys-lru, not noeviction: under memory pressure ...\n",
          stdout);
}

int cli_cmd_check(int argc, char **argv)
{
    struct cli_admin_opts o;
    int done = cli_admin_options("check", argc, argv, CLI_OPT_JSON, cli_help_check, &o);
    if (done >= 0)
        return done;
    int json = o.json;
    if (optind < argc)
        return cli_usage_error("check", "unexpected argument '%s'", argv[optind]);
    if (o.urls.n > 1)
        return cli_quorum_check(&o.urls, json);

    const char *url = o.urls.n ? o.urls.v[0] : NULL;
    watchlock_client *client = NULL;
    int rc = cli_open_client(&client, url);
    if (rc != 0)
        return rc;
    watchlock_report *report = NULL;
    int st = watchlock_client_check(&report, client);
    if (st != WATCHLOCK_OK) {
        rc = cli_fail(st, "check");
        watchlock_client_close(client);
        return rc;
    }
    watchlock_client_close(client);

    size_t n = watchlock_report_count(report);
    const char *shown = cli_redact_url(url);
    if (json) {
        fputs("{\"url\": ", stdout);
        cli_json_string(stdout, shown);
        printf(", \"ok\": %s, \"findings\": [", n == 0 ? "true" : "false");
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ", {\"code\": " : "{\"code\": ", stdout);
            cli_json_string(stdout, watchlock_check_name(watchlock_report_code(report, i)));
            fputs(", \"message\": ", stdout);
            cli_json_string(stdout, watchlock_report_message(report, i));
            fputc('}', stdout);
        }
        fputs("]}\n", stdout);
    } else if (n == 0) {
        printf("%s: no settings found that break lock safety\n", shown);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s: %s\n", watchlock_check_name(watchlock_report_code(report, i)),
                   watchlock_report_message(report, i));
    }
    watchlock_report_free(report);
    if (fflush(stdout) != 0) {
        cli_error("check: cannot write to stdout");
        return CLI_EXIT_SOFTWARE;
    }
    return n == 0 ? CLI_EXIT_OK : CLI_EXIT_WARNINGS;
}
