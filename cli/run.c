/*
 * run.c - `watchlock run`: hold a lock while a child command runs.
 *
 * Shape of the process:
 *
 *   main thread    parses options, blocks the signals it handles, opens the
 *                  client (whose threads inherit that mask, so every such
 *                  signal stays pending for the signalfd instead of being
 *                  delivered to a library thread), acquires the lock, spawns
 *                  COMMAND and then waits in poll() on
 *                    - a signalfd: SIGCHLD (COMMAND exited) and the signals to
 *                      forward (HUP INT QUIT TERM USR1 USR2);
 *                    - a pipe the on-lost callback writes one byte to;
 *                    - a timeout (SIGKILL deadline, --verbose renew reports).
 *   library threads renew the lock and, if it is lost, call on_lost(), which
 *                  only writes to the pipe: no locks, no allocation, no stdio
 *                  on those threads.
 *   the guardian   a child process forked before COMMAND that SIGKILLs
 *                  COMMAND's process group if watchlock dies (see
 *                  guardian_main()).
 *   COMMAND        the leader of a process group of its own, shared by what
 *                  it starts: signals, a loss and leftovers are dealt with
 *                  per group, and the lock is released once the group is
 *                  empty (supervise()).
 *
 * COMMAND is started with fork() + execve() from the main thread, because it
 * must die with watchlock ("COMMAND never outlives the CLI"): if watchlock
 * is killed, even by SIGKILL, a COMMAND left running would work without the
 * lock while the next `watchlock run` acquires it one lease later. The child
 * asks for PR_SET_PDEATHSIG(SIGKILL) before exec, then checks getppid()
 * against the pid recorded before the fork, so that a watchlock that died
 * in between is not missed. posix_spawn() cannot make that prctl() call.
 * The death signal fires when the *thread* that forked exits, so only the
 * main thread, which lives until watchlock exits, may fork. It is not
 * inherited by COMMAND's own children (hence the process group and the
 * guardian), and the kernel clears it when COMMAND is a
 * set-user-ID/set-group-ID or file-capability program.
 *
 * Between fork() and exec the child makes only async-signal-safe calls (the
 * process has other threads, which may hold malloc's lock at that moment);
 * the PATH search is prepared in the parent. The child restores the signal
 * mask watchlock started with and the default disposition of the signals
 * watchlock changed or handles, marks close-on-exec every descriptor that
 * was not open at startup (the library's sockets), and reports exec's errno
 * on a close-on-exec pipe (EOF means exec succeeded), so that "not found"
 * (127) and "not executable" (126) are told apart as with posix_spawnp().
 *
 * Waiting for the lock is one blocking acquire on a helper thread, so that
 * SIGINT/SIGTERM/SIGHUP still interrupt a long wait although they are
 * blocked: the main thread watches the signalfd meanwhile, and on a signal
 * closes the client (the library then ends the blocked acquire with ECLOSED,
 * or releases the lock if it was taken at that very moment) and ends
 * watchlock by that same signal, as the signal would end flock(1).
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

#include "cli.h"

extern char **environ;

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

static const int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
#define N_FORWARDED ((int)(sizeof forwarded_signals / sizeof forwarded_signals[0]))

/* The owner label recorded with the lock (the program's name, or --label),
 * cut to this many bytes (ending in "...") so that `watchlock list` stays
 * readable. */
#define LABEL_MAX 256

/* A lock option as given on the command line: `text` is NULL when it was
 * not given, and the library's default stays (the defaults and the rules
 * about values live in the library's setters, not here). */
struct lock_opt {
    const char *text;
    int64_t value; /* ms for durations, a count for --max-renewals */
};

#define MAX_ALSO 255

struct run_opts {
    struct cli_urls urls; /* --url, repeated: several = a Redlock quorum (issue 21) */
    struct lock_opt ttl, renew_interval, max_renewals, max_hold;
    int renew_num, renew_den; /* --renew-interval as a fraction of the TTL (den 0: a duration) */
    const char *stats_json;   /* --stats-json FILE (stats.c) */
    int no_renew;    /* --no-renew: auto-renew off */
    int kind;        /* WATCHLOCK_KIND_PLAIN, _FAIR (--fair), _SEMAPHORE (--permits), _READ (-s) */
    int64_t permits; /* --permits N */
    int64_t take;    /* --take K (0: not given) */
    int64_t wait_ms; /* < 0 forever */
    int64_t kill_after_ms;
    int conflict_exit; /* -E: exit code when the lock was not obtained */
    const char *name;
    const char *also[MAX_ALSO]; /* --also NAME2 ...: a multi-lock over name and these */
    size_t n_also;
    char **command;
    const char *shell_command; /* -c */
    char *shell_argv[4];       /* /bin/sh -c SHELL_COMMAND */
    const char *what;          /* COMMAND for messages: argv[0] or the -c string */
    const char *label_opt;     /* --label TEXT, or NULL */
    char label[LABEL_MAX + 1]; /* the owner label: --label, else the program's name */
};

struct run_state {
    sigset_t handled;       /* blocked in every thread, read from sfd */
    sigset_t saved_mask;    /* the mask we started with; COMMAND gets it back */
    int forward[N_FORWARDED]; /* 1 when that signal is forwarded (not ignored at start) */
    int sigpipe_was_default;
    int sfd;
    int lost_pipe[2];
    int *startup_fds; /* descriptors open at startup: COMMAND inherits these */
    size_t n_startup_fds;
    pid_t guard_pid;  /* the guardian (see start_guardian()); 0: none or reaped */
    int guard_fd;     /* write end of the guardian's pipe, held by watchlock alone; -1: none */
    int job_control;  /* watchlock's group was the foreground group of its controlling
                         terminal: COMMAND's group gets the terminal while it runs */
    int tty;          /* that terminal (/dev/tty, close-on-exec), or -1 */
};

/* After the SIGKILL to COMMAND's group, how long to wait for its last
 * processes to be gone (a process in an uninterruptible sleep takes the
 * signal late) before releasing anyway, with a message. */
#define GROUP_GONE_MS 5000

/* ---- time ------------------------------------------------------------------ */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- on-lost callback (runs on a library thread) -------------------------- */

static void on_lost(watchlock_lock *lock, int reason, void *userdata)
{
    (void)lock;
    int fd = *(int *)userdata;
    unsigned char byte = (unsigned char)reason;
    /* A full pipe already carries a notification; nothing else to do. */
    ssize_t n = write(fd, &byte, 1);
    (void)n;
}

/* ---- descriptors ---------------------------------------------------------- */

/* Remembers which descriptors the caller gave us, so that the ones the
 * library opens later (hiredis does not set close-on-exec) can be kept from
 * COMMAND (see cloexec_new_fds_in_child()) while descriptors passed on
 * purpose (`3>file`) are inherited. */
static void snapshot_fds(struct run_state *st)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    size_t cap = 16;
    st->startup_fds = malloc(cap * sizeof *st->startup_fds);
    struct dirent *e;
    int self = dirfd(d);
    while (st->startup_fds && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int fd = atoi(e->d_name);
        if (fd == self)
            continue;
        if (st->n_startup_fds == cap) {
            int *grown = realloc(st->startup_fds, 2 * cap * sizeof *grown);
            if (!grown)
                break;
            st->startup_fds = grown;
            cap *= 2;
        }
        st->startup_fds[st->n_startup_fds++] = fd;
    }
    closedir(d);
}

/* ---- signals -------------------------------------------------------------- */

static int setup_signals(struct run_state *st)
{
    sigemptyset(&st->handled);
    sigaddset(&st->handled, SIGCHLD);
    for (int i = 0; i < N_FORWARDED; i++) {
        struct sigaction old;
        sigaction(forwarded_signals[i], NULL, &old);
        /* Respect nohup & co: a signal ignored at startup stays ignored
         * (COMMAND inherits that) and is not forwarded. */
        st->forward[i] = old.sa_handler != SIG_IGN;
        if (st->forward[i])
            sigaddset(&st->handled, forwarded_signals[i]);
    }

    /* waitpid() must see COMMAND: SIGCHLD may have been inherited as SIG_IGN,
     * which would make the kernel reap it for us. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, NULL);

    /* A write to a dropped Redis connection must fail with EPIPE, not kill us. */
    struct sigaction old_pipe;
    sigaction(SIGPIPE, NULL, &old_pipe);
    st->sigpipe_was_default = old_pipe.sa_handler == SIG_DFL;
    signal(SIGPIPE, SIG_IGN);

    /* SIGTTOU too (not read, never generated while blocked): once COMMAND's
     * group has the terminal, watchlock is in a background group, and a
     * message it writes to a terminal with `stty tostop` must not stop it. */
    sigset_t blocked = st->handled;
    sigaddset(&blocked, SIGTTOU);
    if (pthread_sigmask(SIG_BLOCK, &blocked, &st->saved_mask) != 0)
        return -1;
    st->sfd = signalfd(-1, &st->handled, SFD_NONBLOCK | SFD_CLOEXEC);
    if (st->sfd < 0)
        return -1;
    if (pipe2(st->lost_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        return -1;
    return 0;
}

static int is_forwarded(const struct run_state *st, int sig)
{
    for (int i = 0; i < N_FORWARDED; i++) {
        if (forwarded_signals[i] == sig)
            return st->forward[i];
    }
    return 0;
}

/* Ends the process by `sig` (so that a calling shell sees "killed by
 * signal"), after the caller has released everything. */
static void die_by_signal(int sig)
{
    signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    raise(sig);
    pthread_sigmask(SIG_UNBLOCK, &only, NULL);
    /* Not reached unless the signal does not terminate. */
    exit(128 + sig);
}

/* ---- COMMAND -------------------------------------------------------------- */

static int ours(const char *var)
{
    return strncmp(var, "WATCHLOCK_NAME=", 15) == 0 || strncmp(var, "WATCHLOCK_FENCING_TOKEN=", 24) == 0 ||
           strncmp(var, "WATCHLOCK_FENCING_TOKENS=", 25) == 0 || strncmp(var, "WATCHLOCK_FENCE=", 16) == 0;
}

/* Frees what child_environment made: the inherited WATCHLOCK_* variables
 * were left out, so every one found is ours. */
static void free_child_environment(char **env)
{
    if (!env)
        return;
    for (size_t i = 0; env[i]; i++)
        if (ours(env[i]))
            free(env[i]);
    free(env);
}

/* WATCHLOCK_NAME, WATCHLOCK_FENCING_TOKEN (and its alias WATCHLOCK_FENCE,
 * the name `watchlock exec`'s shim also sets) and, for a multi-lock (tokens
 * not NULL), WATCHLOCK_FENCING_TOKENS replace inherited ones. */
static char **child_environment(const char *name, int64_t fence, const char *tokens)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 5, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ours(environ[i]))
            continue;
        env[k++] = environ[i];
    }
    size_t name_len = strlen(name);
    char *name_var = malloc(name_len + 16);
    char *fence_var = malloc(48), *alias_var = malloc(40);
    if (!name_var || !fence_var || !alias_var) {
        free(name_var);
        free(fence_var);
        free(alias_var);
        free(env);
        return NULL;
    }
    snprintf(name_var, name_len + 16, "WATCHLOCK_NAME=%s", name);
    snprintf(fence_var, 48, "WATCHLOCK_FENCING_TOKEN=%lld", (long long)fence);
    snprintf(alias_var, 40, "WATCHLOCK_FENCE=%lld", (long long)fence);
    env[k++] = name_var;
    env[k++] = fence_var;
    env[k++] = alias_var;
    if (tokens != NULL) {
        size_t len = strlen(tokens) + 26;
        if ((env[k] = malloc(len)) == NULL) {
            env[k] = NULL;
            free_child_environment(env);
            return NULL;
        }
        snprintf(env[k++], len, "WATCHLOCK_FENCING_TOKENS=%s", tokens);
    }
    env[k] = NULL;
    return env;
}


/* Everything the child needs between fork() and exec, prepared beforehand:
 * the CLI is multi-threaded (the library's watchdog and subscriber threads),
 * so the child may only make async-signal-safe calls (another thread may have
 * held malloc's or stdio's lock at the moment of the fork). */
struct spawn_plan {
    char **paths;          /* what to execve, in PATH order (NULL-terminated) */
    char **argv;
    char **envp;
    sigset_t mask;         /* the mask COMMAND starts with */
    sigset_t defaults;     /* signals whose disposition COMMAND gets as SIG_DFL */
    pid_t parent;          /* watchlock's pid, taken before fork() */
    int err_fd;            /* write end of the close-on-exec error pipe */
    int go_fd;             /* read end of the "go" pipe: exec only after a byte */
    int go_wfd;            /* its write end (the child closes its copy) */
    const int *keep_fds;   /* descriptors open at startup; NULL: inherit all */
    size_t n_keep_fds;
};

/* The candidates execvp()/posix_spawnp() would try for `file`, in order:
 * `file` itself if it contains a slash, else each $PATH entry (an empty
 * entry is the current directory; no $PATH means "/bin:/usr/bin", as
 * glibc's). NULL without memory. */
static char **exec_candidates(const char *file)
{
    if (strchr(file, '/')) {
        char **one = calloc(2, sizeof *one);
        if (one && !(one[0] = strdup(file))) {
            free(one);
            return NULL;
        }
        return one;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    size_t n = 1;
    for (const char *c = path; *c; c++)
        n += *c == ':';
    char **out = calloc(n + 1, sizeof *out);
    if (!out)
        return NULL;
    size_t flen = strlen(file), k = 0;
    for (const char *dir = path;; ) {
        size_t dlen = strcspn(dir, ":");
        char *cand = malloc(dlen + 1 + flen + 1);
        if (!cand)
            goto oom;
        if (dlen == 0) {
            memcpy(cand, file, flen + 1);
        } else {
            memcpy(cand, dir, dlen);
            cand[dlen] = '/';
            memcpy(cand + dlen + 1, file, flen + 1);
        }
        out[k++] = cand;
        if (dir[dlen] == '\0')
            break;
        dir += dlen + 1;
    }
    return out;
oom:
    for (size_t i = 0; i < k; i++)
        free(out[i]);
    free(out);
    return NULL;
}

static void free_candidates(char **paths)
{
    if (!paths)
        return;
    for (size_t i = 0; paths[i]; i++)
        free(paths[i]);
    free(paths);
}

/* What the kernel's getdents64 returns (glibc before 2.30 has no wrapper). */
struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Calls fn(fd, arg) for every open descriptor above 2 but the one that
 * lists them. Async-signal-safe (open, getdents64, close): for the child
 * and the guardian between fork and exec/exit. */
static void each_fd_above_2(void (*fn)(int fd, void *arg), void *arg)
{
    int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    _Alignas(struct linux_dirent64) char buf[2048];
    long n;
    while ((n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            const struct linux_dirent64 *e = (const struct linux_dirent64 *)(buf + off);
            off += e->d_reclen;
            int fd = 0;
            const char *c = e->d_name;
            if (*c < '0' || *c > '9')
                continue;
            for (; *c >= '0' && *c <= '9'; c++)
                fd = fd * 10 + (*c - '0');
            if (fd > 2 && fd != dfd)
                fn(fd, arg);
        }
    }
    close(dfd);
}

static void cloexec_unless_kept(int fd, void *arg)
{
    const struct spawn_plan *p = arg;
    for (size_t i = 0; i < p->n_keep_fds; i++)
        if (p->keep_fds[i] == fd)
            return;
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC))
        fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

/* In the child: marks close-on-exec every descriptor above 2 that was not
 * open when watchlock started (the library's sockets: hiredis does not set
 * close-on-exec), so that COMMAND inherits only what it was given. Done here
 * rather than in the parent so that a connection a library thread opens
 * just before the fork is covered too. Async-signal-safe: open, getdents64,
 * fcntl, close. */
static void cloexec_new_fds_in_child(const struct spawn_plan *p)
{
    if (!p->keep_fds)
        return; /* no snapshot of the startup descriptors: inherit as before */
    each_fd_above_2(cloexec_unless_kept, (void *)p);
}

/* The child's side of spawn_command(): only async-signal-safe calls. */
static _Noreturn void exec_child(const struct spawn_plan *p)
{
    int err;
    /* Die with watchlock: if it is killed (even by SIGKILL), the kernel
     * kills COMMAND, which would otherwise run on without the lock. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        err = errno;
        goto fail;
    }
    /* watchlock may have died between fork() and prctl(): then no death
     * signal will come, and nobody holds the lock for us. */
    if (getppid() != p->parent)
        _exit(CLI_EXIT_SOFTWARE);

    /* COMMAND leads a process group of its own, which watchlock and the
     * guardian signal as a whole: its pipelines and children are in it.
     * The parent makes the same call (whichever runs first), and lets us go
     * on only once the guardian knows the group and the terminal (if any)
     * is handed over: nothing of COMMAND runs before the guardian could
     * kill it. EOF instead of the byte: watchlock gave up or died. */
    close(p->go_wfd);
    setpgid(0, 0);
    unsigned char go = 0;
    ssize_t got;
    do {
        got = read(p->go_fd, &go, 1);
    } while (got < 0 && errno == EINTR);
    if (got != 1)
        _exit(CLI_EXIT_SOFTWARE);

    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigismember(&p->defaults, sig) == 1)
            sigaction(sig, &dfl, NULL);
    }
    cloexec_new_fds_in_child(p);
    sigprocmask(SIG_SETMASK, &p->mask, NULL);

    /* execvp()'s search (which POSIX does not list as async-signal-safe)
     * over the candidates made before the fork: go on after "not here"
     * errors, remember EACCES, stop at anything else. Like posix_spawnp(),
     * ENOEXEC is an error, not a reason to try /bin/sh. */
    int got_eacces = 0;
    err = ENOENT;
    for (size_t i = 0; p->paths[i]; i++) {
        execve(p->paths[i], p->argv, p->envp);
        err = errno;
        switch (err) {
        case EACCES:
            got_eacces = 1;
            continue;
        case ENOENT:
        case ENOTDIR:
        case ESTALE:
        case ENODEV:
        case ETIMEDOUT:
            continue;
        default:
            goto fail;
        }
    }
    if (got_eacces)
        err = EACCES;
fail:;
    ssize_t n = write(p->err_fd, &err, sizeof err);
    (void)n;
    _exit(CLI_EXIT_NOT_FOUND);
}

/* ---- the guardian ------------------------------------------------------------ */

static void close_unless(int fd, void *keep)
{
    if (fd != *(const int *)keep)
        close(fd);
}

/* The kernel's PR_SET_PDEATHSIG reaches COMMAND itself when watchlock dies,
 * not the processes COMMAND started (the stages of `-c 'a | b'`, a script's
 * children), which would go on working without the lock. The guardian is a
 * small process forked before COMMAND, in a process group of its own (so
 * that a SIGKILL of watchlock's group does not take it too), ignoring the
 * signals that end a process politely. It reads a pipe whose write end
 * watchlock alone holds (close-on-exec, and the guardian closed its copy):
 * first COMMAND's process group id, then either 'D' ("done": watchlock
 * ended normally, the group is gone) or EOF. EOF means watchlock died,
 * however (SIGKILL, the OOM killer, a crash): the guardian then sends
 * SIGKILL to COMMAND's whole group and exits. A group id stays reserved
 * while any process is in the group, so the id cannot name someone else's
 * group while COMMAND's processes live. Processes that leave the group on
 * purpose (setsid(1), a shell with job control) are not followed.
 *
 * Forked from a multi-threaded process, it makes only async-signal-safe
 * calls, and it does not exec: it closes every descriptor but its pipe
 * (the library's sockets among them) and points 0, 1, 2 at /dev/null, so
 * that it holds no terminal, pipe or connection open. */
static _Noreturn void guardian_main(int rfd, int wfd)
{
    close(wfd);
    setpgid(0, 0);
    prctl(PR_SET_NAME, "watchlock-guard");
    static const int ignored[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                                  SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        sigaction(ignored[i], &ign, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        for (int fd = 0; fd <= 2; fd++) {
            if (fd != rfd)
                dup2(null, fd);
        }
        if (null > 2)
            close(null);
    }
    each_fd_above_2(close_unless, &rfd);

    pid_t pgid = 0;
    size_t have = 0;
    while (have < sizeof pgid) {
        ssize_t r = read(rfd, (char *)&pgid + have, sizeof pgid - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            _exit(0); /* watchlock ended before COMMAND's group existed */
        have += (size_t)r;
    }
    unsigned char what = 0;
    ssize_t r;
    do {
        r = read(rfd, &what, 1);
    } while (r < 0 && errno == EINTR);
    if (r == 1 && what == 'D')
        _exit(0);
    if (pgid > 1)
        kill(-pgid, SIGKILL);
    _exit(0);
}

/* Forks the guardian (once). Returns 0 or an errno value. */
static int start_guardian(struct run_state *st)
{
    if (st->guard_fd >= 0)
        return 0;
    int g[2];
    if (pipe2(g, O_CLOEXEC) != 0)
        return errno;
    pid_t pid = fork();
    if (pid == 0)
        guardian_main(g[0], g[1]);
    int e = errno;
    close(g[0]);
    if (pid < 0) {
        close(g[1]);
        return e;
    }
    st->guard_pid = pid;
    st->guard_fd = g[1];
    return 0;
}

/* Tells the guardian which group to kill if watchlock dies. */
static int guardian_watch(const struct run_state *st, pid_t pgid)
{
    ssize_t n;
    do {
        n = write(st->guard_fd, &pgid, sizeof pgid);
    } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof pgid ? 0 : (n < 0 ? errno : EIO);
}

/* Ends the guardian: `stand_down` (COMMAND's group is gone) sends 'D' so
 * that it exits without killing; otherwise closing the pipe makes it SIGKILL
 * the group, as if watchlock had died. */
static void stop_guardian(struct run_state *st, int stand_down)
{
    if (st->guard_fd < 0)
        return;
    if (stand_down) {
        unsigned char d = 'D';
        ssize_t n = write(st->guard_fd, &d, 1);
        (void)n;
    }
    close(st->guard_fd);
    st->guard_fd = -1;
    if (st->guard_pid > 0) {
        while (waitpid(st->guard_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        st->guard_pid = 0;
    }
}

/* ---- the terminal ------------------------------------------------------------- */

/* Interactive use: when watchlock's group is the foreground group of its
 * controlling terminal (stdin need not be that terminal), COMMAND's group
 * gets the terminal while it runs, as a shell gives it to a foreground job:
 * COMMAND may read it and set its modes, and Ctrl-C/Ctrl-Z reach it. */
static void detect_job_control(struct run_state *st)
{
    st->tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (st->tty < 0)
        return; /* no controlling terminal: cron, a daemon, setsid */
    if (tcgetpgrp(st->tty) == getpgrp()) {
        st->job_control = 1;
    } else {
        close(st->tty);
        st->tty = -1;
    }
}

/* Makes `pgid` the foreground group of the terminal. Called from the main
 * thread, which has SIGTTOU blocked (and blocks it here again): a process
 * of a background group may change the foreground group (to take the
 * terminal back) only when it blocks or ignores SIGTTOU, else the kernel
 * stops it. */
static void set_foreground(const struct run_state *st, pid_t pgid)
{
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    while (tcsetpgrp(st->tty, pgid) != 0 && errno == EINTR)
        ;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* After COMMAND (or its group) is done: the terminal back to watchlock's
 * group, if COMMAND's group still has it (not if the shell took it: `bg`). */
static void take_terminal_back(const struct run_state *st, pid_t pgid)
{
    if (st->job_control && tcgetpgrp(st->tty) == pgid)
        set_foreground(st, getpgrp());
}

/* COMMAND was stopped (Ctrl-Z on the terminal, SIGTTIN): for the shell, the
 * job is watchlock's process group, so that group stops too, watchlock and
 * whatever shares it (the script that ran watchlock, the other commands of
 * a pipeline), with SIGTSTP as Ctrl-Z would have stopped them all before
 * COMMAND had a group of its own; the terminal is taken back first. When
 * the shell continues the job (fg: foreground again, or bg), COMMAND's
 * group is continued, and gets the terminal if watchlock has it. While
 * stopped, watchlock does not renew: a stop longer than the lease loses the
 * lock, as a SIGSTOP does. A group the kernel will not stop (an orphaned
 * group: no shell to continue it) goes on, and COMMAND is continued at
 * once. */
static void on_command_stopped(const struct run_state *st, pid_t pgid)
{
    if (!st->job_control)
        return;
    take_terminal_back(st, pgid);
    struct sigaction tstp;
    if (sigaction(SIGTSTP, NULL, &tstp) == 0 && tstp.sa_handler == SIG_DFL)
        kill(0, SIGTSTP);
    if (tcgetpgrp(st->tty) == getpgrp())
        set_foreground(st, pgid);
    kill(-pgid, SIGCONT);
}

/* Starts COMMAND from the calling thread, which must be the main thread:
 * PR_SET_PDEATHSIG fires when the *thread* that forked exits, and only the
 * main thread lives until watchlock exits. Returns 0 and sets *pid, or an
 * errno value (exec's, reported by the child on a close-on-exec pipe that
 * reads EOF once exec succeeded). */
static int spawn_command(struct run_state *st, char **command, char **env, pid_t *pid)
{
    if (command[0][0] == '\0')
        return ENOENT;
    /* Orphans of COMMAND's tree are reparented to watchlock rather than to
     * init: it reaps them, so that its group counts as gone once they have
     * exited (an init that never reaps, as in some containers, would leave
     * zombies in the group). Best effort (Linux 3.4). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int gerr = start_guardian(st);
    if (gerr != 0)
        return gerr;
    struct spawn_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.argv = command;
    plan.envp = env;
    plan.mask = st->saved_mask;
    plan.keep_fds = st->startup_fds;
    plan.n_keep_fds = st->n_startup_fds;
    sigemptyset(&plan.defaults);
    sigaddset(&plan.defaults, SIGCHLD);
    if (st->sigpipe_was_default)
        sigaddset(&plan.defaults, SIGPIPE);
    for (int i = 0; i < N_FORWARDED; i++) {
        if (st->forward[i])
            sigaddset(&plan.defaults, forwarded_signals[i]);
    }
    plan.paths = exec_candidates(command[0]);
    if (!plan.paths)
        return ENOMEM;

    int errpipe[2], gopipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        int e = errno;
        free_candidates(plan.paths);
        return e;
    }
    if (pipe2(gopipe, O_CLOEXEC) != 0) {
        int e = errno;
        close(errpipe[0]);
        close(errpipe[1]);
        free_candidates(plan.paths);
        return e;
    }
    plan.err_fd = errpipe[1];
    plan.go_fd = gopipe[0];
    plan.go_wfd = gopipe[1];
    plan.parent = getpid();

    pid_t child = fork();
    if (child == 0)
        exec_child(&plan);
    int e = errno;
    close(errpipe[1]);
    close(gopipe[0]);
    free_candidates(plan.paths);
    if (child < 0) {
        close(gopipe[1]);
        close(errpipe[0]);
        return e;
    }

    /* Its own group (the child makes the same call), known to the guardian
     * before COMMAND may run; the terminal is handed over before too, so
     * that COMMAND never reads it from the background. */
    setpgid(child, child);
    int werr = guardian_watch(st, child);
    if (werr != 0) {
        /* no guardian: do not run COMMAND */
        close(gopipe[1]);
        close(errpipe[0]);
        kill(child, SIGKILL);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
            ;
        return werr;
    }
    if (st->job_control)
        set_foreground(st, child);
    unsigned char go = 1;
    ssize_t wn;
    do {
        wn = write(gopipe[1], &go, 1);
    } while (wn < 0 && errno == EINTR);
    close(gopipe[1]);

    int child_err = 0;
    ssize_t n;
    do {
        n = read(errpipe[0], &child_err, sizeof child_err);
    } while (n < 0 && errno == EINTR);
    close(errpipe[0]);
    if (n == (ssize_t)sizeof child_err) {
        /* exec failed; the child has exited or is about to */
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
            ;
        take_terminal_back(st, child);
        return child_err ? child_err : ENOEXEC;
    }
    /* EOF: exec succeeded and closed the pipe. */
    *pid = child;
    return 0;
}

static int exit_code_of(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return CLI_EXIT_SOFTWARE;
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
static int parse_run_options(int argc, char **argv, struct run_opts *o)
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

/* ---- acquiring -------------------------------------------------------------- */

struct acquirer {
    watchlock_lock *lock;
    int64_t take; /* a semaphore's permits to take; 0: not a semaphore */
    int64_t wait_ms;
    int status;
    int done_pipe[2];
};

static void *acquire_thread(void *arg)
{
    struct acquirer *a = arg;
    a->status = a->take > 0 ? watchlock_semaphore_acquire(a->lock, a->take, a->wait_ms)
                            : watchlock_lock_acquire(a->lock, a->wait_ms);
    unsigned char byte = 1;
    ssize_t n = write(a->done_pipe[1], &byte, 1);
    (void)n;
    return NULL;
}

/* Returns a watchlock status; *signo is set when a handled signal arrived
 * while waiting. In that case the client has been closed (which ends the
 * blocked acquire with ECLOSED, or releases the lock if it had just been
 * taken) and *client is NULL. */
static int acquire_lock(const struct run_state *st, watchlock_client **client,
                        watchlock_lock *lock, const struct run_opts *o, int *signo)
{
    *signo = 0;
    int64_t take = o->kind == WATCHLOCK_KIND_SEMAPHORE ? (o->take > 0 ? o->take : 1) : 0;
    int rc = take > 0 ? watchlock_semaphore_acquire(lock, take, 0) : watchlock_lock_acquire(lock, 0);
    if (rc != WATCHLOCK_ETIMEDOUT || o->wait_ms == 0)
        return rc;

    char waitbuf[32];
    cli_format_duration(waitbuf, sizeof waitbuf, o->wait_ms);
    cli_verbose("'%s' is held by another owner; waiting (%s)", o->name, waitbuf);

    /* The wait itself is one blocking call (woken by the holder's release),
     * made on a helper thread so that this one can watch for signals. The
     * helper inherits the blocked mask. */
    struct acquirer a = {.lock = lock, .take = take, .wait_ms = o->wait_ms, .status = WATCHLOCK_EINTERNAL};
    if (pipe2(a.done_pipe, O_CLOEXEC) != 0)
        return WATCHLOCK_EINTERNAL;
    pthread_t tid;
    if (pthread_create(&tid, NULL, acquire_thread, &a) != 0) {
        close(a.done_pipe[0]);
        close(a.done_pipe[1]);
        return WATCHLOCK_EINTERNAL;
    }
    for (;;) {
        struct pollfd fds[2] = {{.fd = st->sfd, .events = POLLIN},
                                {.fd = a.done_pipe[0], .events = POLLIN}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        if (fds[1].revents)
            break;
        struct signalfd_siginfo si;
        while (!*signo && read(st->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if ((int)si.ssi_signo != SIGCHLD)
                *signo = (int)si.ssi_signo;
        }
        if (*signo) {
            watchlock_client_close(*client);
            *client = NULL;
            break;
        }
    }
    pthread_join(tid, NULL);
    close(a.done_pipe[0]);
    close(a.done_pipe[1]);
    return a.status;
}

/* ---- supervising COMMAND ----------------------------------------------------- */

struct supervision {
    int wstatus;
    int lost;        /* the lock was reported lost */
    int lost_reason; /* WATCHLOCK_LOST_* */
    int reported;    /* the loss line was printed */
};

/* Where stopping COMMAND's group stands: SIGTERM sent (the SIGKILL is due
 * at kill_deadline), SIGKILL sent (we wait until give_up for the group to
 * be gone). Deadlines are -1 when not set. */
struct stopping {
    int started;
    int64_t kill_deadline;
    int64_t give_up;
};

/* SIGTERM to the whole group (SIGKILL at once with --kill-after 0). */
static void stop_group(const struct run_opts *o, pid_t pgid, struct stopping *s)
{
    s->started = 1;
    if (o->kill_after_ms == 0) {
        kill(-pgid, SIGKILL);
        s->kill_deadline = -1;
        s->give_up = now_ms() + GROUP_GONE_MS;
    } else {
        kill(-pgid, SIGTERM);
        s->kill_deadline = now_ms() + o->kill_after_ms;
    }
}

/* The name a loss message gives: NAME, or for --also the name whose loss
 * it was ("'a' (with 'b', 'c')" when the library cannot say). Static. */
static const char *lost_name_of(const struct run_opts *o, watchlock_lock *lock)
{
    static char buf[1024];
    size_t len = 0;
    const char *lost = o->n_also > 0 ? watchlock_lock_lost_name(lock, &len) : NULL;
    if (lost == NULL)
        return o->name;
    snprintf(buf, sizeof buf, "%.*s", (int)len, lost);
    return buf;
}

static void report_lost_and_terminate(const struct run_opts *o, watchlock_lock *lock, pid_t pgid, int reason,
                                      struct stopping *s)
{
    const char *why = watchlock_lost_reason_str(reason);
    const char *name = lost_name_of(o, lock);
    if (o->kill_after_ms == 0) {
        cli_error("lost lock '%s' (%s) while '%s' was running; killed it and its process group "
                  "(SIGKILL)", name, why, o->what);
    } else {
        char grace[32];
        cli_format_duration(grace, sizeof grace, o->kill_after_ms);
        cli_error("lost lock '%s' (%s) while '%s' was running; sent SIGTERM to its process group "
                  "(SIGKILL in %s)", name, why, o->what, grace);
    }
    stop_group(o, pgid, s);
}

/* 1 when no process is left in the group `pgid`. */
static int group_gone(pid_t pgid)
{
    return kill(-pgid, 0) != 0 && errno == ESRCH;
}

/* Waits until COMMAND has exited *and* its process group is empty: the lock
 * protects the whole tree, so it is released only once nothing of it runs.
 * What COMMAND left running in its group when it exited (background jobs of
 * a script) gets SIGTERM, then SIGKILL after --kill-after, as on a loss.
 * Signals to forward go to the whole group. */
static int supervise(struct run_state *st, watchlock_lock *lock, const struct run_opts *o,
                     pid_t pid, struct supervision *out)
{
    const pid_t pgid = pid;
    struct stopping stopping = {0, -1, -1};
    int cmd_done = 0;
    int64_t renewals_seen = 0;
    int64_t report_every = watchlock_lock_lease(lock) / 6;
    if (report_every < 50)
        report_every = 50;
    if (report_every > 1000)
        report_every = 1000;

    out->lost = 0;
    out->lost_reason = WATCHLOCK_LOST_NONE;
    out->reported = 0;

    for (;;) {
        /* Reap first: the child may have exited before we started polling.
         * As a subreaper we also get orphans of COMMAND's tree: reap them. */
        int wstatus;
        pid_t r;
        while ((r = waitpid(-1, &wstatus, WNOHANG | WUNTRACED)) > 0) {
            if (r == pid && WIFSTOPPED(wstatus)) {
                on_command_stopped(st, pgid);
            } else if (r == pid) {
                out->wstatus = wstatus;
                cmd_done = 1;
            } else if (r == st->guard_pid && !WIFSTOPPED(wstatus)) {
                st->guard_pid = 0;
                cli_error("the guardian process ended unexpectedly: if watchlock is killed now, "
                          "processes started by '%s' may outlive it", o->what);
            }
        }
        if (r < 0 && errno != ECHILD && errno != EINTR) {
            cli_error("waiting for '%s' failed: %s", o->what, strerror(errno));
            return CLI_EXIT_OSERR;
        }

        int64_t now = now_ms();
        if (cmd_done) {
            if (group_gone(pgid))
                break;
            if (!stopping.started) {
                cli_verbose("'%s' exited and left processes in its group; sent them %s", o->what,
                            o->kill_after_ms == 0 ? "SIGKILL" : "SIGTERM");
                stop_group(o, pgid, &stopping);
                continue;
            }
            if (stopping.give_up >= 0 && now >= stopping.give_up) {
                cli_error("processes of '%s' (process group %ld) are still there %d ms after "
                          "SIGKILL; releasing the lock", o->what, (long)pgid, GROUP_GONE_MS);
                break;
            }
        }

        int timeout = -1;
        if (stopping.kill_deadline >= 0) {
            int64_t left = stopping.kill_deadline - now;
            if (left <= 0) {
                if (cmd_done)
                    cli_info("processes '%s' left did not exit within the grace period; sent "
                             "SIGKILL to its process group", o->what);
                else
                    cli_info("'%s' did not exit within the grace period; sent SIGKILL to its "
                             "process group", o->what);
                kill(-pgid, SIGKILL);
                stopping.kill_deadline = -1;
                stopping.give_up = now + GROUP_GONE_MS;
                continue;
            }
            /* poll() takes an int; --kill-after may be up to 30 days. */
            timeout = left > 3600 * 1000 ? 3600 * 1000 : (int)left;
        }
        /* Processes of the group that are not our children end without a
         * SIGCHLD to us: look again every 20 ms while only they are left. */
        if (cmd_done && (timeout < 0 || timeout > 20))
            timeout = 20;
        if (cli_verbosity >= 2 && (timeout < 0 || timeout > report_every))
            timeout = (int)report_every;

        struct pollfd fds[2] = {{.fd = st->sfd, .events = POLLIN},
                                {.fd = st->lost_pipe[0], .events = POLLIN}};
        int n = poll(fds, 2, timeout);
        if (n < 0 && errno != EINTR) {
            cli_error("poll failed: %s", strerror(errno));
            return CLI_EXIT_OSERR;
        }

        if (cli_verbosity >= 2) {
            int64_t renewals = watchlock_lock_renewals(lock);
            if (renewals > renewals_seen && watchlock_lock_state(lock) == WATCHLOCK_HELD) {
                char left[32];
                cli_format_duration(left, sizeof left, watchlock_lock_remaining_ms(lock));
                cli_verbose("renewed '%s' (renewal %lld, %s of lease left)", o->name,
                            (long long)renewals, left);
                renewals_seen = renewals;
            }
        }

        if (n > 0 && (fds[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            while (read(st->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD || !is_forwarded(st, sig))
                    continue;
                /* COMMAND's group is never watchlock's: the terminal's own
                 * signals (Ctrl-C, Ctrl-\) reach only the foreground group,
                 * COMMAND's when watchlock handed it the terminal (then
                 * watchlock does not get them), else watchlock's (then
                 * COMMAND gets them only from here). So each one is sent
                 * once. */
                cli_verbose("forwarding signal %d (%s) to '%s' (process group %ld)", sig,
                            strsignal(sig), o->what, (long)pgid);
                kill(-pgid, sig);
            }
        }
        if (n > 0 && (fds[1].revents & POLLIN)) {
            unsigned char reason;
            while (read(st->lost_pipe[0], &reason, 1) == 1) {
                if (!out->lost) {
                    out->lost = 1;
                    out->lost_reason = reason;
                    if (!cmd_done) {
                        out->reported = 1;
                        report_lost_and_terminate(o, lock, pgid, reason, &stopping);
                    } else if (!stopping.started) {
                        stop_group(o, pgid, &stopping);
                    }
                }
            }
        }
    }

    /* A loss reported after COMMAND exited but before we look still counts. */
    unsigned char reason;
    while (read(st->lost_pipe[0], &reason, 1) == 1) {
        if (!out->lost) {
            out->lost = 1;
            out->lost_reason = reason;
        }
    }
    return 0;
}

/* ---- the lock's options ------------------------------------------------------- */

static const char *detail_of(int status)
{
    const char *detail = watchlock_last_error();
    return *detail ? detail : watchlock_strerror(status);
}

/* 0, or the exit code after one line naming the option: a value the
 * library's setter refused (EINVAL) is a usage error in its words. */
static int option_status(int status, const char *opt, const char *text)
{
    if (status == WATCHLOCK_OK)
        return 0;
    if (status == WATCHLOCK_EINVAL)
        return cli_usage_error("run", "%s%s%s: %s", opt, text ? " " : "", text ? text : "",
                               detail_of(status));
    return cli_fail(status, "run");
}

/* Hands each option given to the library's setter, as the Python and Lua
 * bindings do (docs/design.md, "The same option everywhere"): the lease
 * first, since a renew interval is checked against the lease set at the
 * time. Options not given keep the library's defaults. */
static int apply_lock_options(watchlock_lock *lock, const struct run_opts *o, int *lost_fd)
{
    int rc = 0;
    if (rc == 0 && o->ttl.text)
        rc = option_status(watchlock_lock_set_lease(lock, o->ttl.value), "--ttl", o->ttl.text);
    if (rc == 0 && o->renew_interval.text)
        rc = option_status(o->renew_den ? watchlock_lock_set_renew_fraction(lock, o->renew_num, o->renew_den)
                                        : watchlock_lock_set_renew_interval(lock, o->renew_interval.value),
                           "--renew-interval", o->renew_interval.text);
    if (rc == 0 && o->max_renewals.text)
        rc = option_status(watchlock_lock_set_max_renewals(lock, o->max_renewals.value),
                           "--max-renewals", o->max_renewals.text);
    if (rc == 0 && o->max_hold.text)
        rc = option_status(watchlock_lock_set_max_hold(lock, o->max_hold.value), "--max-hold",
                           o->max_hold.text);
    if (rc == 0 && o->no_renew)
        rc = option_status(watchlock_lock_set_auto_renew(lock, 0), "--no-renew", NULL);
    if (rc == 0) /* who holds it: this host, our pid, the program's name or --label */
        rc = option_status(watchlock_lock_set_owner_label(lock, o->label), "the owner label", NULL);
    if (rc == 0)
        rc = option_status(watchlock_lock_set_on_lost(lock, on_lost, lost_fd), "the loss report", NULL);
    return rc;
}

/* ---- the subcommand ----------------------------------------------------------- */

static int run_locked(const struct run_opts *o, struct run_state *st);

int cli_cmd_run(int argc, char **argv)
{
    struct run_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_run_options(argc, argv, &o);
    if (rc < 0)
        return CLI_EXIT_OK; /* --help */
    if (rc > 0)
        return rc;

    struct run_state st;
    memset(&st, 0, sizeof st);
    st.sfd = -1;
    st.lost_pipe[0] = st.lost_pipe[1] = -1;
    st.guard_fd = -1;
    st.tty = -1;
    snapshot_fds(&st);
    detect_job_control(&st);
    if (setup_signals(&st) != 0) {
        cli_error("cannot set up signal handling: %s", strerror(errno));
        rc = CLI_EXIT_OSERR;
    } else {
        rc = run_locked(&o, &st);
    }
    free(st.startup_fds);
    if (st.tty >= 0)
        close(st.tty);
    return rc;
}

/* The handle of `kind` for o->name (WATCHLOCK_KIND_WRITE: the write side of
 * a read-write lock). */
static int new_lock(watchlock_lock **out, watchlock_client *client, const struct run_opts *o, int kind)
{
    size_t n = strlen(o->name);
    switch (kind) {
    case WATCHLOCK_KIND_FAIR:
        return watchlock_fair_lock_new(out, client, o->name, n);
    case WATCHLOCK_KIND_SEMAPHORE:
        return watchlock_semaphore_new(out, client, o->name, n, o->permits);
    case WATCHLOCK_KIND_READ:
        return watchlock_rwlock_new(out, client, o->name, n, 0);
    case WATCHLOCK_KIND_WRITE:
        return watchlock_rwlock_new(out, client, o->name, n, 1);
    default:
        return watchlock_lock_new(out, client, o->name, n);
    }
}

/* Opens the client, takes the lock, runs COMMAND under it, releases it.
 * Returns the exit code. */
static int run_locked(const struct run_opts *o, struct run_state *st)
{
    int rc;

    /* From here on, the client's threads inherit the blocked mask. */
    struct cli_urls urls = o->urls;
    if ((rc = cli_urls_resolve(&urls, "run")) != 0)
        return rc;
    watchlock_client *client = NULL;
    if ((rc = cli_open_client_urls(&client, &urls)) != 0)
        return rc;

    watchlock_lock *lock = NULL;
    int st_code;
    if (o->n_also == 0) {
        st_code = new_lock(&lock, client, o, o->kind);
    } else { /* --also: one multi-lock over NAME and the others */
        const void *names[MAX_ALSO + 1];
        size_t lens[MAX_ALSO + 1];
        names[0] = o->name, lens[0] = strlen(o->name);
        for (size_t i = 0; i < o->n_also; i++)
            names[i + 1] = o->also[i], lens[i + 1] = strlen(o->also[i]);
        st_code = watchlock_multi_lock_new(&lock, client, names, lens, o->n_also + 1);
    }
    if (st_code != WATCHLOCK_OK) {
        rc = st_code == WATCHLOCK_EINVAL ? cli_usage_error("run", "invalid lock name: %s", detail_of(st_code))
                                         : cli_fail(st_code, "run");
        watchlock_client_close(client);
        return rc;
    }
    if ((rc = apply_lock_options(lock, o, &st->lost_pipe[1])) != 0) {
        watchlock_lock_free(lock);
        watchlock_client_close(client);
        return rc;
    }

    int signo = 0;
    /* The plain lock's own error on a name in use as another kind: it names
     * that kind, and a failed try of the write side must not replace it */
    char first_error[512] = "";
    st_code = acquire_lock(st, &client, lock, o, &signo);
    if (st_code == WATCHLOCK_EWRONGTYPE && o->kind == WATCHLOCK_KIND_PLAIN && o->n_also == 0 && !signo) {
        /* A plain run of a name in use as a read-write lock takes its write
         * side, so that plain runs and -s runs of one name mix safely. Any
         * other kind on the name keeps the first error. */
        watchlock_lock *writer = NULL;
        snprintf(first_error, sizeof first_error, "%s", watchlock_last_error());
        if (new_lock(&writer, client, o, WATCHLOCK_KIND_WRITE) == WATCHLOCK_OK) {
            if ((rc = apply_lock_options(writer, o, &st->lost_pipe[1])) != 0) {
                watchlock_lock_free(writer);
                watchlock_lock_free(lock);
                watchlock_client_close(client);
                return rc;
            }
            int wst = acquire_lock(st, &client, writer, o, &signo);
            if (wst != WATCHLOCK_EWRONGTYPE || signo) {
                cli_verbose("'%s' is a read-write lock: took its write side", o->name);
                watchlock_lock_free(lock);
                lock = writer;
                st_code = wst;
                first_error[0] = '\0';
            } else {
                watchlock_lock_free(writer); /* not an rwlock: its error names the kind in use */
            }
        }
    }
    if (signo) {
        cli_verbose("interrupted by signal %d (%s) while waiting for '%s'", signo,
                    strsignal(signo), o->name);
        watchlock_lock_free(lock);
        watchlock_client_close(client);
        die_by_signal(signo);
    }
    if (st_code == WATCHLOCK_ETIMEDOUT) {
        if (o->wait_ms == 0) {
            cli_info("lock '%s' is held by another owner; not running '%s'", o->name, o->what);
        } else {
            char waitbuf[32];
            cli_format_duration(waitbuf, sizeof waitbuf, o->wait_ms);
            cli_info("lock '%s' still held by another owner after %s; not running '%s'", o->name,
                     waitbuf, o->what);
        }
        cli_quorum_report_acquire(client, lock, o->name, 0);
        watchlock_lock_free(lock);
        cli_stats_report(client, o->stats_json); /* stats.c: --verbose, --stats-json */
        watchlock_client_close(client);
        return o->conflict_exit;
    }
    if (st_code != WATCHLOCK_OK) {
        char what[256];
        snprintf(what, sizeof what, "cannot acquire lock '%s'", o->name);
        int code = first_error[0] ? cli_fail_detail(st_code, what, first_error) : cli_fail(st_code, what);
        cli_quorum_report_acquire(client, lock, o->name, 1);
        watchlock_lock_free(lock);
        watchlock_client_close(client);
        return code;
    }

    int64_t fence = watchlock_lock_fencing_token(lock);
    if (fence < 0) {
        /* A quorum could not confirm the token's raise within the hold's
         * validity: a token that might not increase is never handed to
         * COMMAND, so COMMAND does not run (issue 21.6). */
        cli_error("lock '%s': fencing token unavailable (%s); not running '%s'", o->name,
                  watchlock_strerror((int)-fence), o->what);
        watchlock_lock_release(lock);
        watchlock_lock_free(lock);
        watchlock_client_close(client);
        return CLI_EXIT_UNAVAILABLE;
    }
    {
        char ttlbuf[32];
        cli_format_duration(ttlbuf, sizeof ttlbuf, watchlock_lock_lease(lock));
        cli_verbose("acquired '%s' (fencing token %lld, lease %s)", o->name, (long long)fence,
                    ttlbuf);
    }

    char *tokens = NULL; /* --also: every name's token, in order */
    if (o->n_also > 0 && (tokens = malloc((o->n_also + 1) * 21 + 1)) != NULL) {
        size_t off = 0;
        for (size_t i = 0; i <= o->n_also; i++)
            off += (size_t)sprintf(tokens + off, "%s%lld", i ? " " : "",
                                   (long long)watchlock_lock_fencing_token_at(lock, i));
    }
    char **env = o->n_also > 0 && tokens == NULL ? NULL : child_environment(o->name, fence, tokens);
    free(tokens);
    pid_t pid = -1;
    int spawn_err = env ? spawn_command(st, o->command, env, &pid) : ENOMEM;
    free_child_environment(env);

    int exit_code;
    struct supervision sup = {0};
    if (spawn_err != 0) {
        cli_error("%s: %s", o->what, strerror(spawn_err));
        exit_code = (spawn_err == ENOENT || spawn_err == ENOTDIR) ? CLI_EXIT_NOT_FOUND
                    : (spawn_err == EAGAIN || spawn_err == ENOMEM) ? CLI_EXIT_OSERR
                                                                   : CLI_EXIT_CANNOT_EXEC;
    } else {
        cli_verbose("started '%s' (pid %ld, process group %ld)", o->what, (long)pid, (long)pid);
        rc = supervise(st, lock, o, pid, &sup);
        take_terminal_back(st, pid);
        if (rc != 0) {
            /* Cannot watch COMMAND any more: do not leave it running unlocked. */
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            stop_guardian(st, 0); /* it SIGKILLs the group once more */
            exit_code = rc;
        } else {
            exit_code = exit_code_of(sup.wstatus);
            if (WIFSIGNALED(sup.wstatus))
                cli_verbose("'%s' was killed by signal %d (%s)", o->what,
                            WTERMSIG(sup.wstatus), strsignal(WTERMSIG(sup.wstatus)));
            else
                cli_verbose("'%s' exited with status %d", o->what, exit_code);
        }
    }

    /* COMMAND's group is gone (or never was): the guardian has nothing to do. */
    stop_guardian(st, 1);

    /* Read the state before release() resets it. */
    if (!sup.lost && watchlock_lock_state(lock) == WATCHLOCK_LOST) {
        sup.lost = 1;
        sup.lost_reason = watchlock_lock_lost_reason(lock);
    }
    int rel = watchlock_lock_release(lock);
    if (rel == WATCHLOCK_OK) {
        cli_verbose("released '%s'", o->name);
    } else if (rel == WATCHLOCK_ENOTOWNER) {
        if (!sup.lost) {
            sup.lost = 1;
            sup.lost_reason = watchlock_lock_lost_reason(lock);
            if (sup.lost_reason == WATCHLOCK_LOST_NONE)
                sup.lost_reason = WATCHLOCK_LOST_TAKEN;
        }
    } else {
        cli_error("could not release lock '%s' (%s%s%s); it expires by itself within its lease",
                  o->name, watchlock_strerror(rel), *watchlock_last_error() ? ": " : "",
                  watchlock_last_error());
    }

    if (sup.lost && !sup.reported && spawn_err == 0)
        cli_error("lock '%s' was lost (%s) before '%s' finished", lost_name_of(o, lock),
                  watchlock_lost_reason_str(sup.lost_reason), o->what);

    watchlock_lock_free(lock);
    cli_stats_report(client, o->stats_json); /* stats.c: --verbose, --stats-json */
    watchlock_client_close(client);

    if (sup.lost && spawn_err == 0)
        return CLI_EXIT_LOCK_LOST;
    return exit_code;
}
