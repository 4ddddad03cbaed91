/*
 * run_args.c - the arguments of `watchlock run` (run.h): its help text, the
 * options (before and after NAME), NAME, COMMAND or -c, and the owner label
 * made from them. Values the library judges (durations' ranges, counts) are
 * handed to its setters by run.c, not checked here.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

#define DEFAULT_KILL_AFTER_MS 10000

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
          "                          redis://127.0.0.1:6379); repeat it for a Redlock\n"
          "                          quorum of independent masters: held while a\n"
          "                          majority grants it, exit 75 only when a majority\n"
          "                          is held by others, 69 when it cannot be reached\n"
          "  -t, --ttl DURATION      lease: how long the lock outlives a crashed or frozen\n"
          "                          watchlock (default 30s); renewed every TTL/3\n"
          "      --renew-interval DURATION|FRACTION\n"
          "                          renew this often instead of every TTL/3: a duration\n"
          "                          shorter than the TTL (0: TTL/3), or a fraction of\n"
          "                          the TTL such as 1/4 or 25%\n"
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
          "  -x, --exclusive         the exclusive lock (the default; on a name in use as a\n"
          "                          read-write lock, its write side)\n"
          "  -s, --shared            take the read side of NAME as a read-write lock: many\n"
          "                          -s runs at once, never with a plain run of NAME (which\n"
          "                          then takes the write side)\n"
          "      --fair              a fair lock: runs get NAME in the order they asked, by\n"
          "                          direct hand-off (all users of NAME must say --fair)\n"
          "      --permits N         a semaphore: at most N runs hold NAME at once (every\n"
          "                          user of NAME must give the same N)\n"
          "      --take K            with --permits: this run takes K of the N permits\n"
          "                          (default 1)\n"
          "      --also NAME2        hold NAME2 too (repeat for more names): COMMAND runs\n"
          "                          while every name is held (a multi-lock: all names\n"
          "                          or none, one lease; two runs over overlapping names\n"
          "                          never deadlock). The loss of any name is the loss of\n"
          "                          all: COMMAND is stopped and watchlock exits 79,\n"
          "                          naming the name lost (plain locks only)\n"
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
          "  -v, --verbose           print acquire, renew and release events to stderr,\n"
          "                          and the client's stats at exit\n"
          "      --stats-json FILE   save the client's stats (acquires, waits, holds,\n"
          "                          renewals, losses) as JSON in FILE at exit; see\n"
          "                          'watchlock stats'\n"
          "  -h, --help              show this help\n"
          "\n"
          "Durations: 500ms, 30s, 1.5s, 5m, 1h; a bare number means seconds. The lock's\n"
          "options (--ttl, --renew-interval, --no-renew, --max-renewals, --max-hold) mean\n"
          "what they mean in the C, Python and Lua APIs; the library checks their values\n"
          "when the lock is made, after connecting.\n"
          "\n"
          "COMMAND sees WATCHLOCK_NAME and WATCHLOCK_FENCING_TOKEN in its environment\n"
          "(WATCHLOCK_FENCE is an alias, as under exec); pass the token to storage that\n"
          "can reject writes from a stale holder. With --also,\n"
          "WATCHLOCK_NAME and WATCHLOCK_FENCING_TOKEN are NAME's, and\n"
          "WATCHLOCK_FENCING_TOKENS has every name's token, space-separated, in the order\n"
          "NAME, then each --also.\n"
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

/* ---- option parsing -------------------------------------------------------- */

/* The length of the first word of the shell string `sh` that names the
 * program, at *start: leading blanks and variable assignments
 * (NAME=value, with the value's quotes and escapes honoured) are skipped,
 * and the word ends at the first blank, operator character, quote,
 * expansion or escape, so that nothing after the program's name (an
 * argument, a redirection, the rest of a quoted word) is taken. 0 when the
 * string does not start with a plain word (a redirection, a subshell). */
static size_t shell_first_word(const char *sh, const char **start)
{
    static const char stop[] = " \t\n;&|<>()'\"`$\\";
    const char *p = sh;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        /* NAME=... : an assignment, not the program */
        const char *q = p;
        if ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_') {
            while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                   *q == '_')
                q++;
        }
        if (q == p || *q != '=')
            break;
        /* skip the value: up to an unquoted blank or operator */
        for (q++; *q && !strchr(" \t\n;&|<>()", *q); q++) {
            if (*q == '\\' && q[1]) {
                q++;
            } else if (*q == '\'') {
                const char *e = strchr(q + 1, '\'');
                q = e ? e : q + strlen(q) - 1;
            } else if (*q == '"') {
                for (q++; *q && *q != '"'; q++) {
                    if (*q == '\\' && q[1])
                        q++;
                }
                if (!*q)
                    q--;
            }
        }
        p = q;
    }
    *start = p;
    return strcspn(p, stop);
}

/* Copies at most LABEL_MAX bytes of `text` (n bytes) into the label; past
 * that, cut on a UTF-8 character boundary and ended with "...". */
static void set_label(struct run_opts *o, const char *text, size_t n)
{
    if (n > LABEL_MAX) {
        n = LABEL_MAX - 3;
        while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) /* not inside a character */
            n--;
        memcpy(o->label, text, n);
        memcpy(o->label + n, "...", 4);
        return;
    }
    memcpy(o->label, text, n);
    o->label[n] = '\0';
}

/* The owner label, which every client of the server can read (status,
 * list), as can its replicas and persistence files: --label TEXT, else
 * only the program's name -- COMMAND's first word, or the -c string's --
 * never its arguments, which may hold secrets (`--password=...`). */
static void make_label(struct run_opts *o)
{
    if (o->label_opt) {
        set_label(o, o->label_opt, strlen(o->label_opt));
    } else if (o->shell_command) {
        const char *w;
        size_t n = shell_first_word(o->shell_command, &w);
        if (n == 0)
            set_label(o, "sh", 2);
        else
            set_label(o, w, n);
    } else {
        set_label(o, o->command[0], strlen(o->command[0]));
    }
}

enum { OPT_MAX_HOLD = 1000, OPT_MAX_RENEWALS, OPT_RENEW_INTERVAL, OPT_NO_RENEW, OPT_LABEL, OPT_STATS_JSON,
       OPT_FAIR, OPT_PERMITS, OPT_TAKE, OPT_ALSO };

/* --fair, --permits and -s choose the lock's kind: one at most. */
static int set_kind(struct run_opts *o, int kind, const char *flag)
{
    static const char *const flags[] = {[WATCHLOCK_KIND_FAIR] = "--fair", [WATCHLOCK_KIND_SEMAPHORE] = "--permits",
                                         [WATCHLOCK_KIND_READ] = "-s/--shared"};
    if (o->kind != WATCHLOCK_KIND_PLAIN && o->kind != kind)
        return cli_usage_error("run", "%s and %s choose different lock kinds: give one of --fair, --permits "
                                      "and -s", flags[o->kind], flag);
    o->kind = kind;
    return 0;
}

/* --max-renewals N: a whole number in decimal. Its range (>= 0, 0 =
 * unlimited) is the library's rule, checked by its setter. */
static int parse_count(const char *opt, const char *text, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0)
        return cli_usage_error("run", "invalid number '%s' for %s: expected a whole number", text, opt);
    *out = (int64_t)v;
    return 0;
}

/* Reads a duration option's value; the library's parser judges its form. */
static int parse_lock_duration(const char *opt, const char *text, struct lock_opt *out)
{
    int rc = cli_parse_duration("run", opt, text, &out->value);
    if (rc == 0)
        out->text = text;
    return rc;
}

/* Options may come before and after NAME (as flock's `FILE -c CMD`):
 * getopt stops at each non-option; the first is NAME, the second starts
 * COMMAND, whose own options are never read. "--" ends the options (and
 * NAME may follow it). */
int run_parse_options(int argc, char **argv, struct run_opts *o)
{
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},
        {"ttl", required_argument, NULL, 't'},
        {"wait", required_argument, NULL, 'w'},
        {"nonblock", no_argument, NULL, 'n'},
        {"conflict-exit-code", required_argument, NULL, 'E'},
        {"command", required_argument, NULL, 'c'},
        {"exclusive", no_argument, NULL, 'x'},
        {"shared", no_argument, NULL, 's'},
        {"fair", no_argument, NULL, OPT_FAIR},
        {"permits", required_argument, NULL, OPT_PERMITS},
        {"take", required_argument, NULL, OPT_TAKE},
        {"max-hold", required_argument, NULL, OPT_MAX_HOLD},
        {"max-renewals", required_argument, NULL, OPT_MAX_RENEWALS},
        {"renew-interval", required_argument, NULL, OPT_RENEW_INTERVAL},
        {"no-renew", no_argument, NULL, OPT_NO_RENEW},
        {"kill-after", required_argument, NULL, 'k'},
        {"label", required_argument, NULL, OPT_LABEL},
        {"stats-json", required_argument, NULL, OPT_STATS_JSON},
        {"also", required_argument, NULL, OPT_ALSO},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};

    o->wait_ms = -1;
    o->kill_after_ms = DEFAULT_KILL_AFTER_MS;
    o->conflict_exit = CLI_EXIT_TEMPFAIL;

    opterr = 0;
    optind = 1;
    int c, rc;
    bool dashdash = false;
    for (;;) {
        int before = optind;
        c = getopt_long(argc, argv, "+:u:t:w:nE:c:xsk:qvh", longopts, NULL);
        if (c == -1) {
            if (optind == before + 1 && strcmp(argv[before], "--") == 0) {
                dashdash = true;
                break;
            }
            if (optind < argc && o->name == NULL) {
                o->name = argv[optind++]; /* options may follow NAME */
                continue;
            }
            break; /* COMMAND starts here */
        }
        switch (c) {
        case 'u':
            if ((rc = cli_urls_add(&o->urls, "run", optarg)) != 0)
                return rc;
            break;
        case 't':
            if ((rc = parse_lock_duration("--ttl", optarg, &o->ttl)) != 0)
                return rc;
            break;
        case 'w':
            if (strcmp(optarg, "forever") == 0 || strcmp(optarg, "inf") == 0) {
                o->wait_ms = -1;
                break;
            }
            if ((rc = cli_parse_duration("run", "--wait", optarg, &o->wait_ms)) != 0)
                return rc;
            break;
        case 'n':
            o->wait_ms = 0;
            break;
        case 'E': {
            char *end = NULL;
            long v = optarg[0] >= '0' && optarg[0] <= '9' ? strtol(optarg, &end, 10) : -1;
            if (end == NULL || *end != '\0' || v < 0 || v > 255)
                return cli_usage_error("run", "invalid exit code '%s' for -E/--conflict-exit-code: expected 0 to 255",
                                       optarg);
            o->conflict_exit = (int)v;
            break;
        }
        case 'c':
            o->shell_command = optarg;
            break;
        case 'x':
            break; /* flock's "exclusive": what every watchlock lock is */
        case 's':
            if ((rc = set_kind(o, WATCHLOCK_KIND_READ, "-s/--shared")) != 0)
                return rc;
            break;
        case OPT_FAIR:
            if ((rc = set_kind(o, WATCHLOCK_KIND_FAIR, "--fair")) != 0)
                return rc;
            break;
        case OPT_PERMITS:
            if ((rc = set_kind(o, WATCHLOCK_KIND_SEMAPHORE, "--permits")) != 0)
                return rc;
            if ((rc = parse_count("--permits", optarg, &o->permits)) != 0)
                return rc;
            if (o->permits < 1)
                return cli_usage_error("run", "--permits %s: a semaphore needs at least 1 permit", optarg);
            break;
        case OPT_TAKE:
            if ((rc = parse_count("--take", optarg, &o->take)) != 0)
                return rc;
            if (o->take < 1)
                return cli_usage_error("run", "--take %s: take at least 1 permit", optarg);
            break;
        case OPT_MAX_HOLD:
            if ((rc = parse_lock_duration("--max-hold", optarg, &o->max_hold)) != 0)
                return rc;
            break;
        case OPT_RENEW_INTERVAL:
            /* a duration, or a fraction of the TTL ("1/4", "25%"): the library's parser */
            if (watchlock_parse_renew_interval(optarg, &o->renew_interval.value, &o->renew_num, &o->renew_den) !=
                WATCHLOCK_OK)
                return cli_usage_error("run", "--renew-interval %s: %s", optarg, watchlock_last_error());
            o->renew_interval.text = optarg;
            break;
        case OPT_MAX_RENEWALS:
            if ((rc = parse_count("--max-renewals", optarg, &o->max_renewals.value)) != 0)
                return rc;
            o->max_renewals.text = optarg;
            break;
        case OPT_NO_RENEW:
            o->no_renew = 1;
            break;
        case OPT_LABEL:
            o->label_opt = optarg;
            break;
        case OPT_ALSO: /* a multi-lock: NAME and every --also */
            if (optarg[0] == '\0')
                return cli_usage_error("run", "--also: the lock NAME must not be empty");
            if (o->n_also == MAX_ALSO)
                return cli_usage_error("run", "--also: at most %d more names", MAX_ALSO);
            o->also[o->n_also++] = optarg;
            break;
        case OPT_STATS_JSON: /* stats.c: the client's stats saved at exit */
            o->stats_json = optarg;
            break;
        case 'k':
            if ((rc = cli_parse_duration("run", "--kill-after", optarg, &o->kill_after_ms)) != 0)
                return rc;
            break;
        case 'q':
            cli_verbosity = 0;
            break;
        case 'v':
            cli_verbosity = 2;
            break;
        case 'h':
            cli_help_run();
            return -1;
        default:
            return cli_option_error("run", c, argv);
        }
    }
    if (o->name == NULL && dashdash && optind < argc) {
        o->name = argv[optind++]; /* run [OPTIONS] -- NAME [--] COMMAND */
        if (optind < argc && strcmp(argv[optind], "--") == 0)
            optind++;
    }
    if (o->n_also > 0 && o->kind != WATCHLOCK_KIND_PLAIN)
        return cli_usage_error("run", "--also takes plain locks only: not with --fair, --permits or -s");
    if (o->take > 0 && o->kind != WATCHLOCK_KIND_SEMAPHORE)
        return cli_usage_error("run", "--take %lld: only with --permits N (a semaphore)", (long long)o->take);
    if (o->take > o->permits && o->kind == WATCHLOCK_KIND_SEMAPHORE)
        return cli_usage_error("run", "--take %lld is more than --permits %lld", (long long)o->take,
                               (long long)o->permits);
    if (o->name == NULL)
        return cli_usage_error("run", o->shell_command ? "missing lock NAME" : "missing lock NAME and COMMAND");
    if (o->name[0] == '\0')
        return cli_usage_error("run", "the lock NAME must not be empty");
    if (o->shell_command) {
        if (optind < argc)
            return cli_usage_error("run", "'%s': -c takes the whole command as one shell string; give no COMMAND "
                                          "after it", argv[optind]);
        o->shell_argv[0] = "/bin/sh";
        o->shell_argv[1] = "-c";
        o->shell_argv[2] = (char *)o->shell_command;
        o->shell_argv[3] = NULL;
        o->command = o->shell_argv;
    } else {
        if (optind >= argc)
            return cli_usage_error("run", "missing COMMAND after NAME '%s' (or -c 'SHELL COMMAND')", o->name);
        o->command = argv + optind;
    }
    make_label(o);
    o->what = o->shell_command ? o->shell_command : o->command[0];
    return 0;
}
