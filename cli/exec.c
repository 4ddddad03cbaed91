/*
 * exec.c - `watchlock exec`: run a command tree with the preload shim
 * (libwatchlock_preload.so, docs/preload.md), so that its flock(2), fcntl
 * and lockf locks on the configured paths exclude across hosts. Sets
 * LD_PRELOAD and the shim's variables, then execs: the command replaces
 * this process (no lock is held here; the shim's keepers hold them).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

void cli_help_exec(void)
{
    fputs("Usage: watchlock exec [OPTIONS] [--] COMMAND [ARGS...]\n"
          "\n"
          "Run COMMAND with the preload shim libwatchlock_preload.so: every flock(2),\n"
          "fcntl(2) whole-file lock and lockf(3) that COMMAND or its children take on a\n"
          "file matching --paths also takes the Redis lock named after the file's path,\n"
          "so that `flock -n /var/lock/job.lock job` excludes across the fleet (a path\n"
          "is a read-write lock: LOCK_SH and F_RDLCK take a read share, shared holders\n"
          "on several hosts overlap, an exclusive one excludes them all; POSIX locks,\n"
          "the kernel's other family, are the name posix:PATH). The distributed lock\n"
          "lives exactly as long as the kernel lock, held by one keeper process per host\n"
          "(see docs/preload.md). Static binaries, setuid programs and programs that make raw\n"
          "system calls (Go) are not covered.\n"
          "\n"
          "Options:\n"
          "  -p, --paths GLOBS   the lock files, ':'-separated absolute globs (fnmatch,\n"
          "                      '*' does not cross '/'); default $WATCHLOCK_PATHS\n"
          "  -u, --url URL       Redis server (default: $WATCHLOCK_URL, else\n"
          "                      redis://127.0.0.1:6379)\n"
          "  -t, --ttl DURATION  lease of each distributed lock (default 30s)\n"
          "      --signal SIG    sent to the locker's process group when a lock is lost\n"
          "                      (default TERM; a name, a number or 'none')\n"
          "      --log DEST      where the shim logs: syslog (default), stderr or a file\n"
          "      --fail-open     Redis unreachable: keep the local lock only (logged)\n"
          "                      instead of failing the call with ENOLCK\n"
          "      --name-prefix P prepended to every lock name (default: the path)\n"
          "      --name-map FROM=TO  a leading FROM of the path is TO in the name\n"
          "  -h, --help          show this help\n"
          "\n"
          "Exit codes: COMMAND's own (exec replaces this process); 64 usage error;\n"
          "70 the shim was not found; 126 COMMAND not executable; 127 not found.\n"
          "\n"
          "Examples:\n"
          "  # crontab on every host: the job runs on one host at a time\n"
          "  0 3 * * * watchlock exec -p '/var/lock/*.lock' -- flock -n /var/lock/backup.lock backup\n"
          "  watchlock exec --paths /srv/app/app.lock -- python3 legacy_job.py\n"
          "  watchlock status /var/lock/backup.lock\n",
          stdout);
}

/* The shim: $WATCHLOCK_PRELOAD_LIB, else next to this program's build tree
 * (../preload/), else the installed one (bin -> lib). */
static int find_shim(char *out, size_t size)
{
    const char *env = getenv("WATCHLOCK_PRELOAD_LIB");
    if (env != NULL && env[0] != '\0')
        return realpath(env, out) != NULL && size >= PATH_MAX ? 0 : -1;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return -1;
    *slash = '\0';
    static const char *const rel[] = {"../preload", WATCHLOCK_BIN_TO_LIB};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX * 2];
        snprintf(cand, sizeof cand, "%s/%s/libwatchlock_preload.so", self, rel[i]);
        if (access(cand, R_OK) == 0 && realpath(cand, out) != NULL && size >= PATH_MAX)
            return 0;
    }
    return -1;
}

int cli_cmd_exec(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"paths", required_argument, NULL, 'p'}, {"url", required_argument, NULL, 'u'},
        {"ttl", required_argument, NULL, 't'},   {"signal", required_argument, NULL, 'S'},
        {"log", required_argument, NULL, 'L'},   {"fail-open", no_argument, NULL, 'F'},
        {"name-prefix", required_argument, NULL, 'P'},
        {"name-map", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
    const char *paths = NULL, *url = NULL, *ttl = NULL, *sig = NULL, *log = NULL;
    const char *prefix = NULL, *map = NULL;
    int fail_open = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:p:u:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p': paths = optarg; break;
        case 'u': url = optarg; break;
        case 't': ttl = optarg; break;
        case 'S': sig = optarg; break;
        case 'L': log = optarg; break;
        case 'F': fail_open = 1; break;
        case 'P': prefix = optarg; break;
        case 'M': map = optarg; break;
        case 'h': cli_help_exec(); return CLI_EXIT_OK;
        default: return cli_option_error("exec", c, argv);
        }
    }
    if (optind >= argc)
        return cli_usage_error("exec", "missing COMMAND");
    if (paths == NULL)
        paths = getenv("WATCHLOCK_PATHS");
    if (paths == NULL || paths[0] == '\0')
        return cli_usage_error("exec", "no lock files: give --paths GLOBS (or $WATCHLOCK_PATHS)");
    for (const char *p = paths; *p != '\0';) {
        if (*p != '/' && *p != ':')
            return cli_usage_error("exec", "--paths: '%s': every glob must be absolute", paths);
        const char *colon = strchr(p, ':');
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    int64_t ms;
    if (ttl != NULL && cli_parse_duration("exec", "--ttl", ttl, &ms) != 0)
        return CLI_EXIT_USAGE;
    if (map != NULL && (strchr(map, '=') == NULL || map[0] == '='))
        return cli_usage_error("exec", "--name-map: '%s': give FROM=TO", map);

    char shim[PATH_MAX];
    if (find_shim(shim, sizeof shim) != 0) {
        cli_error("exec: libwatchlock_preload.so not found (set WATCHLOCK_PRELOAD_LIB)");
        return CLI_EXIT_SOFTWARE;
    }
    const char *old = getenv("LD_PRELOAD");
    char preload[PATH_MAX * 2];
    if (old != NULL && old[0] != '\0')
        snprintf(preload, sizeof preload, "%s:%s", shim, old);
    else
        snprintf(preload, sizeof preload, "%s", shim);
    setenv("LD_PRELOAD", preload, 1);
    setenv("WATCHLOCK_PATHS", paths, 1);
    const char *u = cli_pick_url(url);
    if (u != NULL)
        setenv("WATCHLOCK_URL", u, 1);
    if (ttl != NULL)
        setenv("WATCHLOCK_PRELOAD_LEASE", ttl, 1);
    if (sig != NULL)
        setenv("WATCHLOCK_PRELOAD_SIGNAL", sig, 1);
    if (log != NULL)
        setenv("WATCHLOCK_PRELOAD_LOG", log, 1);
    if (fail_open)
        setenv("WATCHLOCK_PRELOAD_FAIL_OPEN", "1", 1);
    if (prefix != NULL)
        setenv("WATCHLOCK_PRELOAD_NAME_PREFIX", prefix, 1);
    if (map != NULL)
        setenv("WATCHLOCK_PRELOAD_NAME_MAP", map, 1);
    execvp(argv[optind], argv + optind);
    int e = errno;
    cli_error("exec: %s: %s", argv[optind], strerror(e));
    return e == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
}
