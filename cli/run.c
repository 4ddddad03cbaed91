/*
 * run.c - `watchlock run`: hold a lock while a child command runs. This file
 * acquires, supervises COMMAND and releases; its other jobs have files of
 * their own (run.h: arguments, the child and its process group, exit codes).
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

#include "run.h"

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
                run_on_command_stopped(st, pgid);
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
                if (sig == SIGCHLD || !run_is_forwarded(st, sig))
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

/* Hands each option given to the library's setter, as the Python and Lua
 * bindings do (docs/design.md, "The same option everywhere"): the lease
 * first, since a renew interval is checked against the lease set at the
 * time. Options not given keep the library's defaults. */
static int apply_lock_options(watchlock_lock *lock, const struct run_opts *o, int *lost_fd)
{
    int rc = 0;
    if (rc == 0 && o->ttl.text)
        rc = run_option_status(watchlock_lock_set_lease(lock, o->ttl.value), "--ttl", o->ttl.text);
    if (rc == 0 && o->renew_interval.text)
        rc = run_option_status(o->renew_den ? watchlock_lock_set_renew_fraction(lock, o->renew_num, o->renew_den)
                                        : watchlock_lock_set_renew_interval(lock, o->renew_interval.value),
                           "--renew-interval", o->renew_interval.text);
    if (rc == 0 && o->max_renewals.text)
        rc = run_option_status(watchlock_lock_set_max_renewals(lock, o->max_renewals.value),
                           "--max-renewals", o->max_renewals.text);
    if (rc == 0 && o->max_hold.text)
        rc = run_option_status(watchlock_lock_set_max_hold(lock, o->max_hold.value), "--max-hold",
                           o->max_hold.text);
    if (rc == 0 && o->no_renew)
        rc = run_option_status(watchlock_lock_set_auto_renew(lock, 0), "--no-renew", NULL);
    if (rc == 0) /* who holds it: this host, our pid, the program's name or --label */
        rc = run_option_status(watchlock_lock_set_owner_label(lock, o->label), "the owner label", NULL);
    if (rc == 0)
        rc = run_option_status(watchlock_lock_set_on_lost(lock, on_lost, lost_fd), "the loss report", NULL);
    return rc;
}

/* ---- the subcommand ----------------------------------------------------------- */

static int run_locked(const struct run_opts *o, struct run_state *st);

int cli_cmd_run(int argc, char **argv)
{
    struct run_opts o;
    memset(&o, 0, sizeof o);
    int rc = run_parse_options(argc, argv, &o);
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
    run_snapshot_fds(&st);
    run_detect_job_control(&st);
    if (run_setup_signals(&st) != 0) {
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
        rc = st_code == WATCHLOCK_EINVAL ? cli_usage_error("run", "invalid lock name: %s", run_detail_of(st_code))
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
        run_die_by_signal(signo);
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
    char **env = o->n_also > 0 && tokens == NULL ? NULL : run_child_environment(o->name, fence, tokens);
    free(tokens);
    pid_t pid = -1;
    int spawn_err = env ? run_spawn_command(st, lock, o->command, env, &pid) : ENOMEM;
    run_free_child_environment(env);

    int exit_code;
    struct supervision sup = {0};
    if (spawn_err == RUN_SPAWN_LOST) {
        /* Held up past the lease between the grant and COMMAND's start. */
        sup.lost = sup.reported = 1;
        sup.lost_reason = watchlock_lock_lost_reason(lock);
        cli_error("lock '%s' was lost (%s) before '%s' started; not running it", lost_name_of(o, lock),
                  watchlock_lost_reason_str(sup.lost_reason), o->what);
        exit_code = CLI_EXIT_LOCK_LOST;
    } else if (spawn_err != 0) {
        cli_error("%s: %s", o->what, strerror(spawn_err));
        exit_code = (spawn_err == ENOENT || spawn_err == ENOTDIR) ? CLI_EXIT_NOT_FOUND
                    : (spawn_err == EAGAIN || spawn_err == ENOMEM) ? CLI_EXIT_OSERR
                                                                   : CLI_EXIT_CANNOT_EXEC;
    } else {
        cli_verbose("started '%s' (pid %ld, process group %ld)", o->what, (long)pid, (long)pid);
        rc = supervise(st, lock, o, pid, &sup);
        run_take_terminal_back(st, pid);
        if (rc != 0) {
            /* Cannot watch COMMAND any more: do not leave it running unlocked. */
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            run_stop_guardian(st, 0); /* it SIGKILLs the group once more */
            exit_code = rc;
        } else {
            exit_code = run_exit_code_of(sup.wstatus);
            if (WIFSIGNALED(sup.wstatus))
                cli_verbose("'%s' was killed by signal %d (%s)", o->what,
                            WTERMSIG(sup.wstatus), strsignal(WTERMSIG(sup.wstatus)));
            else
                cli_verbose("'%s' exited with status %d", o->what, exit_code);
        }
    }

    /* COMMAND's group is gone (or never was): the guardian has nothing to do. */
    run_stop_guardian(st, 1);

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
