/*
 * main.c - `watchlock`: run a command under a Redis lock, like flock(1)
 * for a fleet of machines. Dispatches to the subcommands from one table
 * and holds the overview help; each subcommand's help lives in its own
 * file (the man page, watchlock.1, says the same at more length).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int cmd_help(int argc, char **argv);
static void help_main(void);

/* The subcommands: each one's handler and help live in its own file
 * (run.c, admin.c, check.c); this table is all main.c knows of them.
 * summary: its lines under "Commands:" in `watchlock help`. */
static const struct command {
    const char *name;
    int (*handler)(int argc, char **argv);
    void (*help)(void);
    const char *summary;
} commands[] = {
    {"run", cli_cmd_run, cli_help_run, "run COMMAND while holding NAME; exit with COMMAND's status"},
    {"status", cli_cmd_status, cli_help_status,
     "show whether NAME is held (exit 0) or free (exit 1), by whom, its\n"
     "           remaining lease and fencing token"},
    {"list", cli_cmd_list, cli_help_list, "show the held locks (matching a glob PATTERN), with their owners"},
    {"release", cli_cmd_release, cli_help_release, "admin: free NAME whoever holds it (needs --force)"},
    {"check", cli_cmd_check, cli_help_check,
     "report Redis settings that break lock safety (eviction,\n"
     "           persistence, replicas, ACL); exit 1 when there are any"},
    {"exec", cli_cmd_exec, cli_help_exec,
     "run COMMAND with the preload shim: its flock/fcntl locks on --paths\n"
     "           exclude across hosts (docs/preload.md)"},
    {"stats", cli_cmd_stats, cli_help_stats, "show the client stats a 'run --stats-json FILE' saved"},
    {"help", cmd_help, help_main, "show help for a command"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void help_main(void)
{
    fputs("Usage: watchlock run [OPTIONS] NAME [OPTIONS] [--] COMMAND [ARGS...]\n"
          "       watchlock run [OPTIONS] NAME [OPTIONS] -c 'SHELL COMMAND'\n"
          "       watchlock status [--url URL] [--json] NAME\n"
          "       watchlock list [--url URL] [--json] [PATTERN]\n"
          "       watchlock release --force [--url URL] NAME\n"
          "       watchlock check [--url URL] [--json]\n"
          "       watchlock exec --paths GLOBS [--url URL] [--] COMMAND [ARGS...]\n"
          "       watchlock help [run|status|list|release|check|exec]\n"
          "       watchlock --version\n"
          "\n"
          "Run COMMAND while holding the Redis lock NAME, like flock(1) for a fleet of\n"
          "machines. The lock is renewed in the background while COMMAND runs and released\n"
          "when it exits; a crashed or frozen host loses it within one lease (--ttl).\n"
          "\n"
          "Commands:\n",
          stdout);
    for (size_t i = 0; i < NCOMMANDS; i++)
        printf("  %-8s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "The Redis server comes from --url, else $WATCHLOCK_URL, else\n"
          "redis://127.0.0.1:6379. URL forms: redis://[[user]:password@]host[:port][/db],\n"
          "rediss://...?cacert=FILE[&cert=FILE&key=FILE&sni=NAME&insecure=1] (TLS),\n"
          "redis-sentinel://[user:pass@]h1:26379[,h2:26379...]/MASTER[/db]\n"
          "(rediss-sentinel:// for TLS), redis-cluster://h1:p1[,h2:p2...] (rediss-cluster://)\n"
          "and unix:///path/to/redis.sock[?db=N&password=P];\n"
          "any of them takes ?min_replicas=N (see docs/cli.md). Several --url (or\n"
          "several URLs separated by spaces in $WATCHLOCK_URL) form a Redlock quorum of\n"
          "independent masters, each any of the forms above but redis-cluster://: a lock\n"
          "is held while a majority grants it (3 or more; 2 are refused).\n"
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

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        help_main();
        return CLI_EXIT_OK;
    }
    if (argc > 2)
        return cli_usage_error("help", "too many arguments");
    const struct command *c = find_command(argv[1]);
    if (c == NULL)
        return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
    c->help();
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
    const struct command *c = find_command(cmd);
    if (c != NULL)
        return c->handler(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return cli_usage_error(NULL, "unknown option '%s'; options go after the command name",
                               cmd);
    return cli_usage_error(NULL, "unknown command '%s'", cmd);
}
