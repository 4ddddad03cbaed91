/*
 * run_child.c - COMMAND and its process group for `watchlock run` (run.h):
 * which descriptors and signals it inherits, its environment
 * (WATCHLOCK_NAME, WATCHLOCK_FENCING_TOKEN...), fork + exec from the main
 * thread, the guardian that kills the group if watchlock dies, and the
 * terminal the group gets under job control. run.c's opening comment says
 * why each is done this way.
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

extern char **environ;

static const int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
_Static_assert(sizeof forwarded_signals / sizeof forwarded_signals[0] == N_FORWARDED,
               "N_FORWARDED in run.h counts forwarded_signals");

/* ---- descriptors ---------------------------------------------------------- */

/* Remembers which descriptors the caller gave us, so that the ones the
 * library opens later (hiredis does not set close-on-exec) can be kept from
 * COMMAND (see cloexec_new_fds_in_child()) while descriptors passed on
 * purpose (`3>file`) are inherited. */
void run_snapshot_fds(struct run_state *st)
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

int run_setup_signals(struct run_state *st)
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

int run_is_forwarded(const struct run_state *st, int sig)
{
    for (int i = 0; i < N_FORWARDED; i++) {
        if (forwarded_signals[i] == sig)
            return st->forward[i];
    }
    return 0;
}

/* ---- COMMAND -------------------------------------------------------------- */

static int ours(const char *var)
{
    return strncmp(var, "WATCHLOCK_NAME=", 15) == 0 || strncmp(var, "WATCHLOCK_FENCING_TOKEN=", 24) == 0 ||
           strncmp(var, "WATCHLOCK_FENCING_TOKENS=", 25) == 0 || strncmp(var, "WATCHLOCK_FENCE=", 16) == 0;
}

/* Frees what run_child_environment made: the inherited WATCHLOCK_* variables
 * were left out, so every one found is ours. */
void run_free_child_environment(char **env)
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
char **run_child_environment(const char *name, int64_t fence, const char *tokens)
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
            run_free_child_environment(env);
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

/* The child's side of run_spawn_command(): only async-signal-safe calls. */
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
void run_stop_guardian(struct run_state *st, int stand_down)
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
void run_detect_job_control(struct run_state *st)
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
void run_take_terminal_back(const struct run_state *st, pid_t pgid)
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
void run_on_command_stopped(const struct run_state *st, pid_t pgid)
{
    if (!st->job_control)
        return;
    run_take_terminal_back(st, pgid);
    struct sigaction tstp;
    if (sigaction(SIGTSTP, NULL, &tstp) == 0 && tstp.sa_handler == SIG_DFL)
        kill(0, SIGTSTP);
    if (tcgetpgrp(st->tty) == getpgrp())
        set_foreground(st, pgid);
    kill(-pgid, SIGCONT);
}

/* Starts COMMAND from the calling thread, which must be the main thread:
 * PR_SET_PDEATHSIG fires when the *thread* that forked exits, and only the
 * main thread lives until watchlock exits. Returns 0 and sets *pid;
 * RUN_SPAWN_LOST when the lock was no longer held at the moment COMMAND
 * would have been let go (the child exits without exec); or an errno value
 * (exec's, reported by the child on a close-on-exec pipe that reads EOF
 * once exec succeeded). */
int run_spawn_command(struct run_state *st, watchlock_lock *lock, char **command, char **env, pid_t *pid)
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
    /* The last moment not to run COMMAND: since the grant, watchlock may
     * have been held up past the lease (a stalled stderr, a stopped or
     * starved process) and the next holder may be at work. state() reads
     * the clock against the hold's deadline, not the loss timer's verdict.
     * EOF instead of the byte: the child exits without exec. */
    if (watchlock_lock_state(lock) != WATCHLOCK_HELD) {
        close(gopipe[1]);
        close(errpipe[0]);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
            ;
        run_take_terminal_back(st, child);
        return RUN_SPAWN_LOST;
    }
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
        run_take_terminal_back(st, child);
        return child_err ? child_err : ENOEXEC;
    }
    /* EOF: exec succeeded and closed the pipe. */
    *pid = child;
    return 0;
}
