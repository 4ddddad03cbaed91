/*
 * cli.h - shared pieces of the watchlock command-line tool (private).
 *
 * Exit codes follow sysexits(3) where one fits, and the shell conventions
 * for a command that cannot be run (126, 127) or was killed (128 + N).
 */
#ifndef WATCHLOCK_CLI_H
#define WATCHLOCK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "json.h"
#include "watchlock.h"

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_WARNINGS = 1,     /* check: the server has settings that break lock safety */
    CLI_EXIT_FREE = 1,         /* status: the lock is free */
    CLI_EXIT_USAGE = 64,       /* EX_USAGE: bad flag, bad duration, missing NAME ... */
    CLI_EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: Redis unreachable, auth failed, client closed */
    CLI_EXIT_SOFTWARE = 70,    /* EX_SOFTWARE: internal error (a bug) or out of memory */
    CLI_EXIT_OSERR = 71,       /* EX_OSERR: fork, pipe or signal setup failed */
    CLI_EXIT_TEMPFAIL = 75,    /* EX_TEMPFAIL: lock not obtained within --wait */
    CLI_EXIT_PROTOCOL = 76,    /* EX_PROTOCOL: Redis answered with an error, or NAME is another
                                  lock kind (--fair, --permits N, -s) or --permits count (WRONGTYPE: the
                                  lock's key holds another type) */
    CLI_EXIT_NOPERM = 77,      /* EX_NOPERM: the server's ACL denies a command the lock needs */
    CLI_EXIT_LOCK_LOST = 79,   /* the lock was lost while COMMAND ran */
    CLI_EXIT_CANNOT_EXEC = 126,
    CLI_EXIT_NOT_FOUND = 127
};

/* 0 = --quiet, 1 = default, 2 = --verbose. */
extern int cli_verbosity;

/* "watchlock: <message>" on stderr, always (errors). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Informational line, silenced by --quiet. */
void cli_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Event line, printed only with --verbose. */
void cli_verbose(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "watchlock: <sub>: <message> (see 'watchlock <sub> --help')" and
 * returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Usage error for getopt_long's '?' or ':' result (opterr must be 0 and the
 * optstring must start with ":" after any "+"). Returns CLI_EXIT_USAGE. */
int cli_option_error(const char *sub, int c, char **argv);

/* Parses the duration `text` given to option `opt` of subcommand `sub`
 * with watchlock_parse_duration(). Returns 0, or prints a usage error with
 * the library's message ("run: --ttl 5x: bad duration '5x': unit must be
 * ms, s, m or h") and returns CLI_EXIT_USAGE. */
int cli_parse_duration(const char *sub, const char *opt, const char *text, int64_t *out_ms);

/* The server URL(s): each --url adds one (several open a Redlock quorum of
 * independent masters, issue 21); with none, $WATCHLOCK_URL, whose URLs are
 * separated by spaces; with none there either, the library's default
 * (redis://127.0.0.1:6379). */
#define CLI_MAX_URLS 64
struct cli_urls {
    size_t n;
    const char *v[CLI_MAX_URLS]; /* borrowed from argv or a static copy of $WATCHLOCK_URL */
};
/* Adds a --url value; a usage error (64) past CLI_MAX_URLS, else 0. */
int cli_urls_add(struct cli_urls *u, const char *sub, const char *url);
/* Fills an empty list from $WATCHLOCK_URL (split on spaces). 0, or 64 (too many). */
int cli_urls_resolve(struct cli_urls *u, const char *sub);
/* The URLs for messages, passwords hidden, separated by spaces. Static buffer. */
const char *cli_urls_shown(const struct cli_urls *u);

/* The URL to use: the --url value, else $WATCHLOCK_URL, else NULL (the
 * library's default, redis://127.0.0.1:6379). */
const char *cli_pick_url(const char *flag_url);

/* The options of the admin subcommands (status, list, release, check):
 * --url/-u always, and those of CLI_OPT_* in `flags`; --help/-h prints
 * help() and returns 0. Returns -1 when parsing went through (operands
 * start at optind), else the exit code to return (0 after --help, 64 on a
 * usage error). */
enum { CLI_OPT_JSON = 1, CLI_OPT_QUIET = 2, CLI_OPT_FORCE = 4 };
struct cli_admin_opts {
    struct cli_urls urls; /* resolved: --url values, else $WATCHLOCK_URL's */
    int json;
    int force;
};
int cli_admin_options(const char *sub, int argc, char **argv, unsigned flags, void (*help)(void),
                      struct cli_admin_opts *out);

/* Opens a client, printing one line and returning an exit code on failure. */
int cli_open_client(watchlock_client **out, const char *url);
/* The same for a list of URLs: none = the default, one = a plain client,
 * several = a quorum (watchlock_client_open_quorum; two are refused there). */
int cli_open_client_urls(watchlock_client **out, const struct cli_urls *u);

/* quorum.c: the per-member views of `status`, `list` and `check` when
 * several URLs are given: each member is opened as a plain client of its
 * own (in parallel), so an unreachable member shows as such; a verdict
 * follows the majority (issue 21). They return the subcommand's exit code. */
int cli_quorum_status(const struct cli_urls *u, const char *name, int json);
int cli_quorum_list(const struct cli_urls *u, const char *pattern, int json);
int cli_quorum_check(const struct cli_urls *u, int json);
/* "member 1 granted, member 2 held by another owner, member 3 unreachable"
 * after a failed acquire on a quorum client, on one line: an error line
 * when is_error, else informational (silenced by --quiet, as the "busy"
 * line it follows). Nothing on a plain client. */
void cli_quorum_report_acquire(watchlock_client *client, const watchlock_lock *lock, const char *name,
                               int is_error);

/* Maps a failed library status to an exit code and prints one line:
 * "watchlock: <what>: <strerror>: <detail>". */
int cli_fail(int status, const char *what);
/* cli_fail with a detail saved earlier (the library's last error was replaced since). */
int cli_fail_detail(int status, const char *what, const char *detail);

/* Exit code for a library status (without printing): EINVAL 64; ECONN,
 * EAUTH, ECLOSED 69; ETIMEDOUT 75; ESERVER 76; EPERM 77; anything else 70. */
int cli_exit_code_for(int status);

/* Formats a duration for people: "450ms", "27.4s", "5m03s", "2h00m05s". */
void cli_format_duration(char *buf, size_t size, int64_t ms);

/* `url` with any password replaced by "***" (for messages). Static buffer. */
const char *cli_redact_url(const char *url);

/* Writes len bytes for a terminal: printable ASCII and valid UTF-8 as
 * they are; control characters, DEL, backslash and bytes that are not
 * UTF-8 as \xNN (and \\), so that a name or label read from the server
 * cannot move the cursor or fake another line. */
void cli_print_text(FILE *f, const void *s, size_t len);

/* An owner record (watchlock_client_inspect_owner, a list entry), written
 * once for status, list and their per-member quorum views. For people:
 * "pid P on HOST" and ": LABEL" when one was recorded. For JSON: the value
 * {"host": ..., "pid": N, "label": ...}, or null when o is NULL. */
void cli_print_owner(FILE *f, const watchlock_owner *o);
void cli_json_owner(cli_json *j, const watchlock_owner *o);

/* The subcommands, each with its help text, in the file that implements it
 * (run.c, whose help is in run_args.c; admin.c: status, list, release;
 * check.c). main.c dispatches to
 * them from its table; they never call into main.c. */
int cli_cmd_run(int argc, char **argv);
void cli_help_run(void);
int cli_cmd_status(int argc, char **argv);
void cli_help_status(void);
int cli_cmd_list(int argc, char **argv);
void cli_help_list(void);
int cli_cmd_release(int argc, char **argv);
void cli_help_release(void);
int cli_cmd_check(int argc, char **argv);
void cli_help_check(void);
int cli_cmd_exec(int argc, char **argv);
void cli_help_exec(void);
int cli_cmd_stats(int argc, char **argv);
void cli_help_stats(void);
/* stats.c: a run's client stats, on stderr with --verbose and as JSON in
 * json_path (NULL: none). */
struct watchlock_client;
void cli_stats_report(struct watchlock_client *c, const char *json_path);

#endif /* WATCHLOCK_CLI_H */
