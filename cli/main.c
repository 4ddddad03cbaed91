/*
 * main.c - `watchlock`: run a command under a Redis lock, like flock(1)
 * for a fleet of machines. Dispatches to the subcommands and holds the
 * help texts (the man page, watchlock.1, says the same at more length).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

void cli_help_main(void)
{
    fputs("Usage: watchlock run [OPTIONS] NAME [OPTIONS] [--] COMMAND [ARGS...]\n"
          "       watchlock run [OPTIONS] NAME [OPTIONS] -c 'SHELL COMMAND'\n"
          "       watchlock status [--url URL] [--json] NAME\n"
          "       watchlock list [--url URL] [--json] [PATTERN]\n"
          "       watchlock release --force [--url URL] NAME\n"
          "       watchlock check [--url URL] [--json]\n"
          "       watchlock help [run|status|list|release|check]\n"
          "       watchlock --version\n"
          "\n"
          "Run COMMAND while holding the Redis lock NAME, like flock(1) for a fleet of\n"
          "machines. The lock is renewed in the background while COMMAND runs and released\n"
          "when it exits; a crashed or frozen host loses it within one lease (--ttl).\n"
          "\n"
          "Commands:\n"
          "  run      run COMMAND while holding NAME; exit with COMMAND's status\n"
          "  status   show whether NAME is held (exit 0) or free (exit 1), by whom, its\n"
          "           remaining lease and fencing token\n"
          "  list     show the held locks (matching a glob PATTERN), with their owners\n"
          "  release  admin: free NAME whoever holds it (needs --force)\n"
          "  check    report Redis settings that break lock safety (eviction,\n"
          "           persistence, replicas, ACL); exit 1 when there are any\n"
          "  help     show help for a command\n"
          "\n"
          "The Redis server comes from --url, else $WATCHLOCK_URL, else\n"
          "redis://127.0.0.1:6379. URL forms: redis://[[user]:password@]host[:port][/db],\n"
          "rediss://...?cacert=FILE[&cert=FILE&key=FILE&sni=NAME&insecure=1] (TLS),\n"
          "redis-sentinel://[user:pass@]h1:26379[,h2:26379...]/MASTER[/db]\n"
          "(rediss-sentinel:// for TLS), redis-cluster://h1:p1[,h2:p2...] (rediss-cluster://)\n"
          "and unix:///path/to/redis.sock[?db=N&password=P];\n"
          "any of them takes ?min_replicas=N (see docs/cli.md).\n"
          "\n"
          "Exit codes: COMMAND's own status (128+N if killed by signal N); 64 usage\n"
          "error; 69 Redis unreachable or authentication failed; 70 internal error;\n"
          "75 lock not obtained within --wait; 76 Redis answered with an error (e.g.\n"
          "WRONGTYPE: the lock's key holds another type); 77 denied by the Redis ACL;\n"
          "79 lock lost while COMMAND ran; 126 COMMAND not executable; 127 COMMAND not\n"
          "found; 1 from status: the lock is free; 1 from check: the server has settings\n"
          "that break lock safety.\n"
          "\n"
          "Examples:\n"
          "  # crontab on every host: the backup runs on one host at a time\n"
          "  0 3 * * * watchlock run --wait 0 --quiet nightly-backup -- /usr/local/bin/backup\n"
          "  watchlock status nightly-backup\n"
          "  watchlock list 'nightly-*'\n"
          "  # once per server: settings that would break the locks\n"
          "  watchlock check\n"
          "\n"
          "See 'watchlock help run' and watchlock(1).\n",
          stdout);
}

void cli_help_run(void)
{
    fputs("Usage: watchlock run [OPTIONS] NAME [OPTIONS] [--] COMMAND [ARGS...]\n"
          "       watchlock run [OPTIONS] NAME [OPTIONS] -c 'SHELL COMMAND'\n"
          "\n"
          "Acquire the Redis lock NAME, run COMMAND (executed directly, no shell) while the\n"
          "lock is held and renewed, release it when COMMAND exits, and exit with COMMAND's\n"
          "status. Options may come before and after NAME; COMMAND starts after '--', or\n"
          "at the first argument after NAME that is not an option. The lock records who\n"
          "holds it (this host, watchlock's pid and a label: the program's name, never its\n"
          "arguments), shown by 'watchlock status' and 'watchlock list' to every client of\n"
          "the server.\n"
          "\n"
          "Options:\n"
          "  -u, --url URL           Redis server (default: $WATCHLOCK_URL, else\n"
          "                          redis://127.0.0.1:6379)\n"
          "  -t, --ttl DURATION      lease: how long the lock outlives a crashed or frozen\n"
          "                          watchlock (default 30s); renewed every TTL/3\n"
          "      --renew-interval DURATION\n"
          "                          renew this often instead of every TTL/3; must be\n"
          "                          shorter than the TTL (0: TTL/3)\n"
          "      --no-renew          do not renew: the lock runs out one TTL after it was\n"
          "                          acquired, and COMMAND is stopped if still running\n"
          "      --max-renewals N    stop renewing after N renewals; the lock then runs out\n"
          "                          and COMMAND is stopped as if it were lost (default and\n"
          "                          0: unlimited)\n"
          "  -w, --wait DURATION     give up (exit 75, or -E's code) if the lock is not\n"
          "                          obtained within DURATION; 0 tries once (default: wait\n"
          "                          forever). A bare number is seconds, as flock -w SECS\n"
          "  -n, --nonblock          same as --wait 0 (like flock -n)\n"
          "  -E, --conflict-exit-code CODE\n"
          "                          exit with CODE (0-255) instead of 75 when the lock\n"
          "                          was not obtained (like flock -E)\n"
          "  -c, --command 'SHELL COMMAND'\n"
          "                          run SHELL COMMAND with /bin/sh -c instead of COMMAND\n"
          "                          (like flock -c)\n"
          "  -x, --exclusive         accepted for flock(1) habits: every lock is exclusive\n"
          "  -s, --shared            refused (exit 64): shared (read-write) locks do not\n"
          "                          exist yet\n"
          "      --max-hold DURATION stop renewing DURATION after acquiring; the lock then\n"
          "                          runs out and COMMAND is stopped as if it were lost\n"
          "                          (default and 0: unlimited)\n"
          "  -k, --kill-after DURATION\n"
          "                          when the lock is lost, send SIGKILL this long after\n"
          "                          SIGTERM if COMMAND is still running (default 10s;\n"
          "                          0 sends SIGKILL at once)\n"
          "      --label TEXT        the owner label to record instead of the program's\n"
          "                          name (COMMAND's first word; for -c, the shell\n"
          "                          string's first word). Readable by every client of\n"
          "                          the server, its replicas and persistence: no secrets\n"
          "  -q, --quiet             no informational messages (errors are still printed)\n"
          "  -v, --verbose           print acquire, renew and release events to stderr\n"
          "  -h, --help              show this help\n"
          "\n"
          "Durations: 500ms, 30s, 1.5s, 5m, 1h; a bare number means seconds. The lock's\n"
          "options (--ttl, --renew-interval, --no-renew, --max-renewals, --max-hold) mean\n"
          "what they mean in the C, Python and Lua APIs; the library checks their values\n"
          "when the lock is made, after connecting.\n"
          "\n"
          "COMMAND sees WATCHLOCK_NAME and WATCHLOCK_FENCING_TOKEN in its environment; pass\n"
          "the token to storage that can reject writes from a stale holder.\n"
          "\n"
          "COMMAND runs in a process group of its own, with everything it starts (the\n"
          "stages of a -c pipeline, background jobs): SIGHUP, SIGINT, SIGQUIT, SIGTERM,\n"
          "SIGUSR1 and SIGUSR2 sent to watchlock are forwarded to that group; processes\n"
          "COMMAND leaves in it when it exits get SIGTERM (SIGKILL after --kill-after),\n"
          "and the lock is released once the group is empty. If watchlock dies, even by\n"
          "SIGKILL, a guardian process kills the whole group at once. On a terminal,\n"
          "COMMAND's group gets the terminal while it runs (Ctrl-C reaches it directly;\n"
          "Ctrl-Z stops it and watchlock, fg/bg continue both).\n"
          "\n"
          "If the lock is lost while COMMAND runs (watchlock was frozen past its lease,\n"
          "Redis was unreachable for a whole lease, an admin ran 'release --force', or\n"
          "--no-renew, --max-renewals or --max-hold let it run out), COMMAND's group gets\n"
          "SIGTERM, then SIGKILL after --kill-after, one line goes to stderr, and\n"
          "watchlock exits 79.\n"
          "\n"
          "Exit codes: COMMAND's status (128+N if killed by signal N); 64 usage error;\n"
          "69 Redis unreachable or authentication failed; 75 (or -E CODE) not obtained\n"
          "within --wait; 76 Redis answered with an error (e.g. WRONGTYPE); 77 denied by\n"
          "the Redis ACL; 79 lock lost while COMMAND ran; 126 COMMAND not executable;\n"
          "127 not found.\n"
          "\n"
          "Examples:\n"
          "  # only one host runs the migration; the others wait for it to finish\n"
          "  watchlock run db-migrate -- ./manage.py migrate\n"
          "  # cron: skip this run if another host is still busy (exit 75, no message)\n"
          "  */5 * * * * watchlock run -n -q sync-job -- /opt/sync/run.sh\n"
          "  # flock(1) style: wait up to 10 s, exit 1 on conflict, a shell pipeline\n"
          "  watchlock run -w 10 -E 1 report -c 'build-report | gzip > /srv/report.gz'\n"
          "  # wait up to 2 minutes, keep the lock alive for a long job\n"
          "  watchlock run --wait 2m --ttl 1m deploy -- ansible-playbook site.yml\n",
          stdout);
}

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
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379)\n"
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
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379)\n"
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
          "  -u, --url URL   Redis server (default: $WATCHLOCK_URL, else redis://127.0.0.1:6379)\n"
          "  -q, --quiet     print nothing on success\n"
          "  -h, --help      show this help\n"
          "\n"
          "Example:\n"
          "  watchlock release --force nightly-backup\n",
          stdout);
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        cli_help_main();
        return CLI_EXIT_OK;
    }
    if (argc > 2)
        return cli_usage_error("help", "too many arguments");
    const char *topic = argv[1];
    if (strcmp(topic, "run") == 0)
        cli_help_run();
    else if (strcmp(topic, "status") == 0)
        cli_help_status();
    else if (strcmp(topic, "list") == 0)
        cli_help_list();
    else if (strcmp(topic, "release") == 0)
        cli_help_release();
    else if (strcmp(topic, "check") == 0)
        cli_help_check();
    else if (strcmp(topic, "help") == 0)
        cli_help_main();
    else
        return cli_usage_error(NULL, "unknown command '%s'", topic);
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(NULL, "missing command: run, status, list, release, check or help");

    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        if (argc > 2)
            return cli_usage_error(NULL, "--version takes no arguments");
        printf("watchlock %s (libwatchlock %s)\n", WATCHLOCK_VERSION_STRING,
               watchlock_version_string());
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return cmd_help(argc - 1, argv + 1);
    if (strcmp(cmd, "help") == 0)
        return cmd_help(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cli_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0)
        return cli_cmd_status(argc - 1, argv + 1);
    if (strcmp(cmd, "list") == 0)
        return cli_cmd_list(argc - 1, argv + 1);
    if (strcmp(cmd, "release") == 0)
        return cli_cmd_release(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0)
        return cli_cmd_check(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return cli_usage_error(NULL, "unknown option '%s'; options go after the command name",
                               cmd);
    return cli_usage_error(NULL, "unknown command '%s'", cmd);
}
