/*
 * run.h - the parts of `watchlock run` (private to cli/run*.c), one file per
 * job:
 *   run_args.c   its arguments: options, NAME, COMMAND, the owner label, and
 *                the help text that documents them;
 *   run_child.c  the child and its process group: descriptors, signals,
 *                COMMAND's environment, fork + exec, the guardian and the
 *                terminal;
 *   run_exit.c   how watchlock run ends: exit codes of COMMAND's status, of
 *                a library status, and death by a signal;
 *   run.c        the subcommand: acquire, supervise COMMAND, release (its
 *                opening comment draws the whole process);
 *   stats.c      the stats output at exit (cli_stats_report, shared with
 *                `watchlock stats`).
 * run_args.c, run_child.c and run_exit.c call none of each other; run.c
 * calls them (tests/cli/test_cli_layering.py).
 */
#ifndef WATCHLOCK_CLI_RUN_H
#define WATCHLOCK_CLI_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"

/* The signals watchlock forwards to COMMAND's group (run_child.c:
 * forwarded_signals, HUP INT QUIT TERM USR1 USR2). */
#define N_FORWARDED 6

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

/* ---- run_args.c ---- */

/* Fills o from argv. 0: run; < 0: --help was shown; > 0: the exit code
 * after a usage message. */
int run_parse_options(int argc, char **argv, struct run_opts *o);

/* ---- run_child.c ---- */

void run_snapshot_fds(struct run_state *st);
int run_setup_signals(struct run_state *st);
int run_is_forwarded(const struct run_state *st, int sig);
void run_free_child_environment(char **env);
char **run_child_environment(const char *name, int64_t fence, const char *tokens);
/* Starts COMMAND (0, *pid set) unless the lock is no longer held when it
 * is about to run (RUN_SPAWN_LOST: nothing of COMMAND ran), or an errno. */
#define RUN_SPAWN_LOST (-1)
int run_spawn_command(struct run_state *st, watchlock_lock *lock, char **command, char **env, pid_t *pid);
void run_stop_guardian(struct run_state *st, int stand_down);
void run_detect_job_control(struct run_state *st);
void run_take_terminal_back(const struct run_state *st, pid_t pgid);
void run_on_command_stopped(const struct run_state *st, pid_t pgid);

/* ---- run_exit.c ---- */

int run_exit_code_of(int wstatus);
_Noreturn void run_die_by_signal(int sig);
const char *run_detail_of(int status);
int run_option_status(int status, const char *opt, const char *text);

#endif /* WATCHLOCK_CLI_RUN_H */
