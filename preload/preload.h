/*
 * preload.h - private to the preload shim (libwatchlock_preload.so) and its
 * keeper (watchlock-keeper): the configuration read from the environment,
 * the pure functions both of them need (path matching, lock names, the
 * kernel-lock identity) and the keeper <-> shim protocol. Nothing here is
 * API; docs/preload.md is the user's contract.
 *
 * Pure functions of their arguments: no I/O, no allocation except where a
 * caller's buffer says so, so that the shim's hot path can use them and a
 * test can call them without LD_PRELOAD (tests/preload/test_preload_logic.c).
 */
#ifndef WATCHLOCK_PRELOAD_H
#define WATCHLOCK_PRELOAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Environment variables (docs/preload.md, "Configuration"). */
#define WLP_ENV_PATHS "WATCHLOCK_PATHS"             /* globs, ':'-separated */
#define WLP_ENV_URL "WATCHLOCK_URL"                 /* the Redis URL */
#define WLP_ENV_LEASE "WATCHLOCK_PRELOAD_LEASE"     /* lease, e.g. "30s" */
#define WLP_ENV_SIGNAL "WATCHLOCK_PRELOAD_SIGNAL"   /* on loss: TERM (default), a name/number, none */
#define WLP_ENV_LOG "WATCHLOCK_PRELOAD_LOG"         /* syslog (default), stderr, or a file path */
#define WLP_ENV_FAIL_OPEN "WATCHLOCK_PRELOAD_FAIL_OPEN" /* 1: Redis unreachable -> local lock only */
#define WLP_ENV_PREFIX "WATCHLOCK_PRELOAD_NAME_PREFIX"  /* prepended to every lock name */
#define WLP_ENV_MAP "WATCHLOCK_PRELOAD_NAME_MAP"    /* FROM=TO: a path prefix rewritten in names */
#define WLP_ENV_KEEPER "WATCHLOCK_PRELOAD_KEEPER"   /* the keeper executable (tests, odd installs) */

#define WLP_MAX_GLOBS 32
#define WLP_PATH_MAX 4096

/* Lock families: flock(2) locks and POSIX (fcntl/lockf, OFD) locks are
 * independent in Linux (neither conflicts with the other). */
enum { WLP_FAMILY_FLOCK = 0, WLP_FAMILY_POSIX = 1, WLP_FAMILY_OFD = 2 };

/* The parsed configuration (the shim parses it once, lazily; the keeper at
 * start). `bad` != NULL: the configuration is unusable, `bad` says why;
 * every matching lock call fails with ENOLCK (every lock call, when the
 * globs themselves are what is bad). */
struct wlp_config {
    char globs_buf[WLP_PATH_MAX];
    const char *globs[WLP_MAX_GLOBS];
    int nglobs;
    const char *bad;
};

/* Parses WATCHLOCK_PATHS's value (NULL or "" = no paths: the shim passes
 * everything through). Every glob must be absolute. Fills *cfg. */
void wlp_config_parse_paths(struct wlp_config *cfg, const char *paths);

/* 1 when `path` matches one of the globs (fnmatch(3), FNM_PATHNAME: '*'
 * does not cross '/', as in the shell). */
int wlp_config_match(const struct wlp_config *cfg, const char *path);

/* Turns the text readlink(/proc/self/fd/N) gave (len bytes, not
 * NUL-terminated) into a path: strips " (deleted)", refuses pseudo files
 * ("pipe:[..]", "socket:[..]", "anon_inode:..."). Writes a NUL-terminated
 * copy to out (size >= len + 1). Returns 0, or -1 when it is no path. */
int wlp_fd_path(char *out, size_t size, const char *link, size_t len);

/* The lock name of a path: prefix + path, with a leading FROM of `map`
 * ("FROM=TO") replaced by TO. Returns the length, or -1 when it does not
 * fit in size (or map is malformed: no '='). */
int wlp_lock_name(char *out, size_t size, const char *path, const char *prefix,
                  const char *map);

/* Lock classes: the two independent families of the kernel. flock(2) locks
 * (per open file description) and POSIX locks (fcntl/lockf per process, OFD
 * per description: they conflict with each other) never wait on each other,
 * so each class of a path is its own distributed name (wlp_class_name). */
enum { WLP_CLASS_FLOCK = 0, WLP_CLASS_POSIX = 1 };

/* One granted lock of /proc/locks or of a /proc/PID/fdinfo/N "lock:" line. */
struct wlp_lockline {
    int cls;       /* WLP_CLASS_* (OFD locks are of the POSIX class) */
    int ofd;       /* an OFD lock (no pid) */
    int exclusive; /* WRITE */
    long pid;      /* the owner (flock: the first taker; 0 or -1 when not shown) */
    unsigned dev_major, dev_minor;
    uint64_t ino;
    int whole;     /* 0 to EOF */
};

/* Parses one line ("12: FLOCK  ADVISORY  WRITE 4711 00:2d:123456 0 EOF",
 * optionally after a "lock:" tag). 0 for a granted lock, -1 for a waiter
 * ("->") or anything else. */
int wlp_lockline_parse(const char *line, struct wlp_lockline *out);

/* The strongest lock of class `cls` on inode (maj:min:ino) among the
 * "lock:" lines of a /proc/PID/fdinfo/N text: 2 exclusive, 1 shared, 0 none.
 * The locks listed there are the ones the kernel counts as this
 * descriptor's (flock, OFD) or this process's through it (POSIX). */
int wlp_fdinfo_mode(const char *text, int cls, unsigned dev_major, unsigned dev_minor,
                    uint64_t ino, long *pid);

/* The distributed name of a class of a path's lock: the flock class is the
 * lock name itself, the POSIX class "posix:" + the lock name (a path starts
 * with '/', so the two never meet). Returns the length or -1. */
int wlp_class_name(char *out, size_t size, const char *name, int cls);

/* The keeper's abstract Unix socket name (without the leading NUL): one per
 * user, mount namespace, pid namespace and Redis URL ("host" = what one
 * mount namespace of one kernel sees; docs/preload.md, "The keeper").
 * Returns the length or -1. */
int wlp_keeper_socket_name(char *out, size_t size, unsigned uid, uint64_t mntns, uint64_t pidns,
                           const char *url);

/* The shim -> keeper request (one SOCK_SEQPACKET message): a text header,
 * NUL, the path, NUL, the lock name (the rest, binary-safe). */
struct wlp_request {
    char op; /* 'L' lock request, 'C' cancel request `id`, 'U' a managed fd was unlocked or closed,
              * 'P' a process forked from the connection's owner (`pid`) shares its descriptions */
    uint64_t id;
    int cls, exclusive, wait, relock;
    uint64_t dev, ino;
    long pid, pgid;
    int fd;
    char lease[32], signal[32];
    const char *path, *name;
    size_t name_len;
};
#define WLP_MSG_MAX (2 * WLP_PATH_MAX + 1024)
/* Returns the message length, or -1 when it does not fit. */
int wlp_request_format(char *out, size_t size, const struct wlp_request *r);
/* Parses a message of len bytes (buf is modified: path and name point into
 * it, name NUL-terminated at buf[len], so size > len). 0 or -1. */
int wlp_request_parse(char *buf, size_t len, struct wlp_request *r);

/* Signal number for WATCHLOCK_PRELOAD_SIGNAL's value: NULL/"" -> SIGTERM,
 * "none"/"0" -> 0, "TERM"/"SIGTERM"/"15" -> 15 ... ; -1 when unknown. */
int wlp_signal_parse(const char *text);

#endif /* WATCHLOCK_PRELOAD_H */
