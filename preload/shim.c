/*
 * shim.c - libwatchlock_preload.so: makes flock(2), fcntl(2) whole-file
 * locks and lockf(3) on configured paths fleet-wide: exclusive requests
 * exclude every other host, shared ones only exclusive ones (docs/preload.md has the user's contract and the design argument).
 *
 * What runs here, inside any program: the interposed calls. A call that is
 * not a lock request, or any call when WATCHLOCK_PATHS is unset, goes to
 * libc (dlsym(RTLD_NEXT)) after one branch: no allocation, no system call.
 * A lock request with WATCHLOCK_PATHS set costs one readlink() of
 * /proc/self/fd/N the first time a descriptor is seen (then a per-fd cache,
 * see matching_path); a path that matches no glob then goes to libc. For a
 * matching path:
 *   1. the shim notes whether the descriptor already holds this very lock
 *      (/proc/self/fdinfo/N: the kernel's no-op re-lock, the same hold);
 *   2. the kernel lock is taken first, by libc (local semantics unchanged);
 *   3. one request goes to the host's keeper (watchlock-keeper, keeper.c:
 *      one per user, mount and pid namespace and Redis URL, started here on
 *      demand and found at its abstract Unix socket), over this thread's
 *      connection; the keeper holds the distributed lock for as long as the
 *      host's kernel locks of that file and family need it;
 *   4. this call waits for the answer in recv(): LOCK_NB never returns
 *      EINTR (the read is retried); a blocking call interrupted by a signal
 *      cancels its request, then drops the kernel lock, and fails with EINTR.
 * Busy elsewhere with LOCK_NB / F_SETLK: the kernel lock is dropped and the
 * call fails with EWOULDBLOCK / EAGAIN. Redis unreachable: ENOLCK unless
 * WATCHLOCK_PRELOAD_FAIL_OPEN=1. Bad configuration: ENOLCK, logged once.
 * Unlocks (LOCK_UN, F_UNLCK, F_ULOCK) and close always go straight to libc;
 * on a descriptor locked through the shim they then send the keeper a hint
 * to scan the kernel's locks at once (it also finds them by its own tick).
 *
 * The shim links libc only: no watchlock threads in the host program; the
 * keeper is the process that uses libwatchlock.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "preload.h"

#define WLP_EXPORT __attribute__((visibility("default")))

extern char **environ;

/* libc's functions, resolved on first use (benign race: every thread
 * stores the same pointer; atomics keep ThreadSanitizer quiet). */
typedef int (*flock_fn)(int, int);
typedef int (*fcntl_fn)(int, int, ...);
typedef int (*lockf_fn)(int, int, off_t);
static flock_fn real_flock_p;
static fcntl_fn real_fcntl_p, real_fcntl64_p;
static lockf_fn real_lockf_p;

static void *next_symbol(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (p == NULL) {
        p = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, p, __ATOMIC_RELAXED);
    }
    return p;
}
#define REAL(var, name) ((__typeof__(var))next_symbol((void **)&(var), name))

/* ---- configuration (parsed once, at the first lock request) ---- */

static struct wlp_config cfg;
static int fail_open;
static char shim_dir[WLP_PATH_MAX];
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static int paths_set; /* WATCHLOCK_PATHS non-empty: read once at load, see shim_init */

static void parse_config(void)
{
    wlp_config_parse_paths(&cfg, getenv(WLP_ENV_PATHS));
    const char *fo = getenv(WLP_ENV_FAIL_OPEN);
    fail_open = fo != NULL && (strcmp(fo, "1") == 0 || strcmp(fo, "yes") == 0 ||
                               strcmp(fo, "true") == 0);
}

/* The shim's own directory, to find the keeper next to it (build tree) or
 * at its installed place relative to it. At load time, so that a relative
 * LD_PRELOAD still resolves against the directory it was given in. */
static void forked_child(void);

__attribute__((constructor)) static void shim_init(void)
{
    const char *p = getenv(WLP_ENV_PATHS);
    paths_set = p != NULL && p[0] != '\0';
    if (!paths_set)
        return;
    pthread_atfork(NULL, NULL, forked_child);
    Dl_info info;
    if (dladdr((void *)shim_init, &info) == 0 || info.dli_fname == NULL)
        return;
    char full[PATH_MAX];
    if (realpath(info.dli_fname, full) == NULL)
        return;
    char *slash = strrchr(full, '/');
    if (slash != NULL && (size_t)(slash - full) < sizeof shim_dir) {
        memcpy(shim_dir, full, (size_t)(slash - full));
        shim_dir[slash - full] = '\0';
    }
}

/* ---- logging: syslog, a file, or stderr when asked (never by default) ---- */

#define log_line(...) wlp_log_line("watchlock-preload", __VA_ARGS__)

static int bad_config_logged;

static void log_bad_config(const char *why)
{
    if (!__atomic_exchange_n(&bad_config_logged, 1, __ATOMIC_RELAXED))
        log_line("bad configuration, every matching lock call fails with ENOLCK: %s", why);
}

/* ---- the distributed half of one lock request ---- */

struct request {
    int fd;
    int family;    /* WLP_FAMILY_* */
    int exclusive; /* LOCK_EX / F_WRLCK / lockf: 1; LOCK_SH / F_RDLCK: 0 (see lock_kind_for) */
    int wait;      /* blocking call */
    int relock;    /* the descriptor held this very lock already: the kernel's no-op re-lock */
    const char *path;
};

static void drop_kernel_lock(const struct request *r)
{
    int saved = errno;
    if (r->family == WLP_FAMILY_FLOCK) {
        REAL(real_flock_p, "flock")(r->fd, LOCK_UN);
    } else {
        struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        REAL(real_fcntl_p, "fcntl")(r->fd, r->family == WLP_FAMILY_OFD ? F_OFD_SETLK : F_SETLK, &fl);
    }
    errno = saved;
}

static int find_keeper(char *out, size_t size)
{
    const char *env = getenv(WLP_ENV_KEEPER);
    int n;
    if (env != NULL && env[0] != '\0') {
        n = snprintf(out, size, "%s", env);
        return n > 0 && (size_t)n < size ? access(out, X_OK) : -1;
    }
    if (shim_dir[0] == '\0')
        return -1;
    static const char *const rel[] = {".", WLP_KEEPER_REL};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        n = snprintf(out, size, "%.*s/%s/watchlock-keeper", (int)(size / 2), shim_dir, rel[i]);
        if (n > 0 && (size_t)n < size && access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* ---- the keeper: one per host, found at its abstract socket ---- */

/* A close-on-exec pipe with both ends at 10 or above (see spawn_keeper). */
static int status_pipe(int fds[2])
{
    int raw[2];
    if (pipe2(raw, O_CLOEXEC) != 0)
        return -1;
    fcntl_fn f = REAL(real_fcntl_p, "fcntl");
    for (int i = 0; i < 2; i++) {
        fds[i] = f(raw[i], F_DUPFD_CLOEXEC, 10);
        close(raw[i]);
    }
    if (fds[0] >= 0 && fds[1] >= 0)
        return 0;
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    return -1;
}

/* Starts a keeper for `sockname` and waits until it listens (or lost the
 * election to another one, which then listens). 0 or -1. */
static int spawn_keeper(const char *sockname)
{
    char keeper[WLP_PATH_MAX];
    if (find_keeper(keeper, sizeof keeper) != 0) {
        log_bad_config("the keeper (watchlock-keeper) was not found next to the shim or at "
                       "WATCHLOCK_PRELOAD_KEEPER");
        return -1;
    }
    int ready[2];
    if (status_pipe(ready) != 0)
        return -1;
    char *argv[] = {keeper, (char *)sockname, NULL};
    /* The environment without LD_PRELOAD: the keeper is not a locker. */
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **envp = malloc((n + 1) * sizeof *envp);
    if (envp == NULL) {
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            envp[k++] = environ[i];
    envp[k] = NULL;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    if (posix_spawn_file_actions_init(&fa) == 0) {
        if (posix_spawnattr_init(&attr) == 0) {
            sigset_t none, all;
            sigemptyset(&none);
            sigfillset(&all);
            posix_spawnattr_setsigmask(&attr, &none);
            posix_spawnattr_setsigdefault(&attr, &all);
            posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
            posix_spawn_file_actions_adddup2(&fa, ready[1], 3);
            if (posix_spawn(&pid, keeper, &fa, &attr, argv, envp) != 0)
                pid = -1;
            posix_spawnattr_destroy(&attr);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    free(envp);
    close(ready[1]);
    if (pid > 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        } /* the intermediate exits at once (ECHILD if SIGCHLD is ignored) */
        char ch;
        while (read(ready[0], &ch, 1) < 0 && errno == EINTR) {
        } /* EOF: the keeper listens, or exited */
    }
    close(ready[0]);
    return pid > 0 ? 0 : -1;
}

static uint64_t ns_ino(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* A connection to this host's keeper, starting one when there is none. */
static int connect_keeper(void)
{
    char name[200];
    const char *url = getenv(WLP_ENV_URL);
    int nl = wlp_keeper_socket_name(name, sizeof name, (unsigned)getuid(),
                                    ns_ino("/proc/self/ns/mnt"), ns_ino("/proc/self/ns/pid"),
                                    url != NULL ? url : "");
    if (nl < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, name, (size_t)nl);
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)nl);
    for (int attempt = 0; attempt < 20; attempt++) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        int rc;
        while ((rc = connect(fd, (struct sockaddr *)&sa, sl)) != 0 && errno == EINTR) {
        }
        if (rc == 0) {
            /* out of the way of programs that dup2 onto low numbers */
            int high = REAL(real_fcntl_p, "fcntl")(fd, F_DUPFD_CLOEXEC, 100);
            if (high >= 0) {
                close(fd);
                fd = high;
            }
            return fd;
        }
        int e = errno;
        close(fd);
        if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN)
            return -1;
        if (e == EAGAIN || attempt >= 2) { /* a keeper starting up, or one that just closed */
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (e != EAGAIN && spawn_keeper(name) != 0)
            return -1;
    }
    return -1;
}

/* One connection per thread (a blocking request waits on it), reopened in
 * a forked child, and checked before each use: a program may have closed
 * the descriptor and reused its number. */
static __thread int conn_fd = -1;
static __thread pid_t conn_pid;
static __thread unsigned long long conn_ino;
static pthread_key_t conn_key;
static pthread_once_t conn_key_once = PTHREAD_ONCE_INIT;

static int conn_is_ours(int fd, unsigned long long ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino;
}

static void conn_destructor(void *v)
{
    (void)v;
    if (conn_pid == getpid() && conn_is_ours(conn_fd, conn_ino))
        close(conn_fd);
    conn_fd = -1;
}

static void make_conn_key(void)
{
    pthread_key_create(&conn_key, conn_destructor);
}

static void conn_drop(void)
{
    if (conn_fd >= 0 && conn_pid == getpid() && conn_is_ours(conn_fd, conn_ino))
        close(conn_fd);
    conn_fd = -1;
}

static int conn_get(void)
{
    if (conn_fd >= 0 && (conn_pid != getpid() || !conn_is_ours(conn_fd, conn_ino))) {
        if (conn_pid != getpid() && conn_is_ours(conn_fd, conn_ino))
            close(conn_fd); /* the parent's, inherited by fork: the parent keeps its own */
        conn_fd = -1;
    }
    if (conn_fd >= 0)
        return conn_fd;
    pthread_once(&conn_key_once, make_conn_key);
    int fd = connect_keeper();
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    conn_fd = fd;
    conn_pid = getpid();
    conn_ino = (unsigned long long)st.st_ino;
    pthread_setspecific(conn_key, (void *)1);
    return fd;
}

/* In a child of fork(2) (pthread_atfork), when the forking thread talks to
 * the keeper: "P pid" on the inherited connection, so that the keeper
 * watches this process's exit too (it shares the parent's descriptions and
 * so their flock locks; the keeper scans the kernel's locks when it goes).
 * One send, no answer; the child opens its own connection when it locks. */
static void forked_child(void)
{
    if (conn_fd < 0 || !conn_is_ours(conn_fd, conn_ino))
        return;
    int saved = errno;
    /* wlp_request_format's text for {.op = 'P', .pid = PID}, written by
     * hand: only async-signal-safe calls in a child of a threaded fork */
    char digits[24], m[64] = "P 0 0 0 0 0 0 0 ";
    int nd = 0;
    for (unsigned long v = (unsigned long)getpid(); nd == 0 || v != 0; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    size_t n = strlen(m);
    while (nd > 0)
        m[n++] = digits[--nd];
    memcpy(m + n, " 0 0 - -\0", 10); /* the header, its NUL, an empty path and its NUL */
    n += 10;
    (void)send(conn_fd, m, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    errno = saved;
}

static void set_fence_env(const char *token)
{
    /* One name, the lock taken last: the environment never grows per lock
     * (issue 33.6). WATCHLOCK_FENCING_TOKEN is the name `watchlock run`
     * uses; WATCHLOCK_FENCE, the shim's first name, is kept as its alias. */
    setenv("WATCHLOCK_FENCING_TOKEN", token, 1);
    setenv("WATCHLOCK_FENCE", token, 1);
}

static uint64_t next_request_id;

/* After the kernel lock was granted: the distributed one. 0, or -1 with
 * errno (the kernel lock dropped again). */
static int take_distributed(const struct request *r)
{
    if (cfg.bad != NULL) {
        log_bad_config(cfg.bad);
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    char name[WLP_PATH_MAX + 512];
    int name_len = wlp_lock_name(name, sizeof name, r->path, getenv(WLP_ENV_PREFIX), getenv(WLP_ENV_MAP));
    if (name_len < 0) {
        log_bad_config("WATCHLOCK_PRELOAD_NAME_MAP must be FROM=TO (or the name is too long)");
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    struct stat st;
    if (fstat(r->fd, &st) != 0) {
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    struct wlp_request q = {.op = 'L',
                            .id = __atomic_add_fetch(&next_request_id, 1, __ATOMIC_RELAXED),
                            .cls = r->family == WLP_FAMILY_FLOCK ? WLP_CLASS_FLOCK : WLP_CLASS_POSIX,
                            .exclusive = r->exclusive,
                            .wait = r->wait,
                            .relock = r->relock,
                            .dev = (uint64_t)st.st_dev,
                            .ino = (uint64_t)st.st_ino,
                            .pid = (long)getpid(),
                            .pgid = (long)getpgrp(),
                            .fd = r->fd,
                            .path = r->path,
                            .name = name,
                            .name_len = (size_t)name_len};
    const char *lease = getenv(WLP_ENV_LEASE), *sig = getenv(WLP_ENV_SIGNAL);
    snprintf(q.lease, sizeof q.lease, "%s", lease != NULL ? lease : "");
    snprintf(q.signal, sizeof q.signal, "%s", sig != NULL ? sig : "");
    if (strchr(q.lease, ' ') != NULL || (lease != NULL && strlen(lease) >= sizeof q.lease))
        snprintf(q.lease, sizeof q.lease, "bad");
    if (strchr(q.signal, ' ') != NULL || (sig != NULL && strlen(sig) >= sizeof q.signal))
        snprintf(q.signal, sizeof q.signal, "bad");
    char msg[WLP_MSG_MAX];
    int len = wlp_request_format(msg, sizeof msg, &q);
    char reply[600];
    ssize_t got = -1;
    for (int attempt = 0; attempt < 3 && got <= 0; attempt++) {
        int fd = conn_get();
        if (fd < 0 || len < 0)
            break;
        if (send(fd, msg, (size_t)len, MSG_NOSIGNAL) != len) {
            conn_drop(); /* the keeper exited (idle) or died: start over */
            continue;
        }
        for (;;) {
            got = recv(fd, reply, sizeof reply - 1, 0);
            if (got < 0 && errno == EINTR) {
                if (!r->wait)
                    continue; /* LOCK_NB never returns EINTR (issue 33.4) */
                /* A signal, as in a kernel lock wait: cancel (before the
                 * kernel lock goes, so the cancel precedes any later grant's
                 * request), drop the kernel lock and fail with EINTR. */
                struct wlp_request c = {.op = 'C', .id = q.id};
                char cm[128];
                int cl = wlp_request_format(cm, sizeof cm, &c);
                if (cl > 0 && send(fd, cm, (size_t)cl, MSG_NOSIGNAL) < 0)
                    conn_drop();
                drop_kernel_lock(r);
                errno = EINTR;
                return -1;
            }
            if (got <= 0) {
                conn_drop();
                got = -1;
                break;
            }
            reply[got] = '\0';
            char word[16];
            unsigned long long id;
            if (sscanf(reply, "%15s %llu", word, &id) == 2 && id == q.id)
                break; /* else: the answer to a request given up before */
        }
    }
    if (got <= 0) {
        log_line("%s: distributed lock failed, ENOLCK: no answer from the keeper", r->path);
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    char *rest = strchr(reply, ' ');
    rest = rest != NULL ? strchr(rest + 1, ' ') : NULL;
    rest = rest != NULL ? rest + 1 : reply + strlen(reply);
    if (strncmp(reply, "OK ", 3) == 0) {
        set_fence_env(rest);
        return 0;
    }
    if (strncmp(reply, "BUSY ", 5) == 0) {
        drop_kernel_lock(r);
        errno = r->family == WLP_FAMILY_FLOCK ? EWOULDBLOCK : EAGAIN;
        return -1;
    }
    if (strncmp(rest, "CONFIG ", 7) == 0) {
        log_bad_config(rest + 7);
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    if (strncmp(rest, "UNREACHABLE ", 12) == 0 && fail_open) {
        log_line("%s: Redis unreachable (%s): fail-open, the local lock only", r->path, rest + 12);
        return 0;
    }
    log_line("%s: distributed lock failed, ENOLCK: %s", r->path, reply);
    drop_kernel_lock(r);
    errno = ENOLCK;
    return -1;
}

/*
 * Files known not to match, so that a program locking an unmanaged file
 * over and over pays one fstat() per lock request instead of a readlink()
 * of /proc/self/fd/N (bench/preload/run: ~0.3 us instead of ~3.7 us). An
 * entry names the file by device, inode and ctime, and lives 1 s: rename(2)
 * and link(2) change the file's ctime, so a file moved or linked to a
 * configured path is looked up again at once; one whose *directory* is
 * renamed into a configured path is seen within 1 s (docs/preload.md).
 * Only negative answers are kept: a matching path is resolved every time
 * (its name is needed, and a round trip to Redis follows anyway).
 */
#define MISS_SLOTS 64
#define MISS_TTL_NS 1000000000LL
/* Lock-free (a seqlock per slot: odd while written), so that a fork() in
 * another thread can never leave a child with a lock held; every field is
 * accessed atomically (relaxed) between acquire/release fences. A writer
 * that finds the slot busy skips it: this is a cache. */
struct miss {
    unsigned seq;
    unsigned long long dev, ino, ctime_sec, ctime_nsec;
    long long until_ns;
};
static struct miss misses[MISS_SLOTS];

static long long coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct miss *miss_slot(const struct stat *st)
{
    uint64_t h = ((uint64_t)st->st_ino * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)st->st_dev;
    return &misses[(h >> 58) % MISS_SLOTS];
}

#define LD(f) __atomic_load_n(&m->f, __ATOMIC_RELAXED)
#define ST(f, v) __atomic_store_n(&m->f, (v), __ATOMIC_RELAXED)

static int known_miss(const struct stat *st)
{
    struct miss *m = miss_slot(st);
    unsigned s1 = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE);
    if (s1 & 1u)
        return 0;
    int hit = LD(until_ns) > coarse_now_ns() && LD(dev) == (unsigned long long)st->st_dev &&
              LD(ino) == (unsigned long long)st->st_ino &&
              LD(ctime_sec) == (unsigned long long)st->st_ctim.tv_sec &&
              LD(ctime_nsec) == (unsigned long long)st->st_ctim.tv_nsec;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return hit && __atomic_load_n(&m->seq, __ATOMIC_RELAXED) == s1;
}

static void remember_miss(const struct stat *st)
{
    struct miss *m = miss_slot(st);
    unsigned s = __atomic_load_n(&m->seq, __ATOMIC_RELAXED);
    if ((s & 1u) || !__atomic_compare_exchange_n(&m->seq, &s, s + 1, 0, __ATOMIC_ACQUIRE,
                                                 __ATOMIC_RELAXED))
        return;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ST(dev, (unsigned long long)st->st_dev);
    ST(ino, (unsigned long long)st->st_ino);
    ST(ctime_sec, (unsigned long long)st->st_ctim.tv_sec);
    ST(ctime_nsec, (unsigned long long)st->st_ctim.tv_nsec);
    ST(until_ns, coarse_now_ns() + MISS_TTL_NS);
    __atomic_store_n(&m->seq, s + 2, __ATOMIC_RELEASE);
}

#undef LD
#undef ST

/* The fd's path when it matches the configuration, else NULL (pass through).
 * With a bad glob list every lock request is treated as matching. */
/*
 * Per descriptor, in front of the per-file cache above: "this fd's file
 * matched no glob", valid for 1 s and until the descriptor is closed or
 * replaced (close, dup2/dup3, fclose, close_range: cleared; open, openat,
 * creat, fopen, dup, F_DUPFD: cleared for the new fd) or the process
 * renames or links anything (rename*, link*: every entry void). A hit costs
 * a coarse clock read (vDSO) and a load: no system call, so an unmanaged
 * flock pair stays within ~1.2x of a plain one (issue 33.8). A file renamed
 * into a configured path by another process while this one holds it open
 * is seen within the 1 s.
 */
#define FD_SLOTS 4096
static uint64_t fd_miss[FD_SLOTS]; /* (generation << 32) | (coarse ms + 1000), atomic */
static unsigned fd_gen = 1;        /* atomic */

static uint32_t coarse_ms(void)
{
    return (uint32_t)(coarse_now_ns() / 1000000);
}

static void fd_forget(int fd)
{
    if (fd >= 0 && fd < FD_SLOTS)
        __atomic_store_n(&fd_miss[fd], 0, __ATOMIC_RELAXED);
}

static int fd_known_miss(int fd)
{
    if (fd < 0 || fd >= FD_SLOTS)
        return 0;
    uint64_t v = __atomic_load_n(&fd_miss[fd], __ATOMIC_RELAXED);
    return v != 0 && (uint32_t)(v >> 32) == __atomic_load_n(&fd_gen, __ATOMIC_RELAXED) &&
           (int32_t)((uint32_t)v - coarse_ms()) > 0;
}

static void fd_remember_miss(int fd)
{
    if (fd >= 0 && fd < FD_SLOTS)
        __atomic_store_n(&fd_miss[fd],
                         ((uint64_t)__atomic_load_n(&fd_gen, __ATOMIC_RELAXED) << 32) |
                             (uint32_t)(coarse_ms() + 1000),
                         __ATOMIC_RELAXED);
}

static const char *matching_path(int fd, char *buf, size_t size)
{
    if (!paths_set || fd_known_miss(fd))
        return NULL;
    pthread_once(&cfg_once, parse_config);
    struct stat st;
    int have_st = cfg.bad == NULL && fstat(fd, &st) == 0;
    if (have_st && known_miss(&st)) {
        fd_remember_miss(fd);
        return NULL;
    }
    char proc[64], link[WLP_PATH_MAX];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, link, sizeof link);
    if (n <= 0 || (size_t)n >= sizeof link || wlp_fd_path(buf, size, link, (size_t)n) != 0)
        return NULL;
    if (cfg.bad != NULL || wlp_config_match(&cfg, buf))
        return buf;
    if (have_st) {
        remember_miss(&st);
        fd_remember_miss(fd);
    }
    return NULL;
}

/* ---- the interposed calls ---- */

/* Before the kernel call: does this descriptor (flock, OFD) or this process
 * through it (POSIX) hold the lock of this mode already? Then the call is a
 * re-lock, which the kernel treats as a no-op: the same hold (issue 33.1).
 * Anything else is a new kernel lock and so a new distributed hold with a
 * fresh fencing token. */
static void note_relock(struct request *r)
{
    struct stat st;
    char p[64], buf[4096];
    if (fstat(r->fd, &st) != 0)
        return;
    snprintf(p, sizeof p, "/proc/self/fdinfo/%d", r->fd);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    int m = wlp_fdinfo_mode(buf, r->family == WLP_FAMILY_FLOCK ? WLP_CLASS_FLOCK : WLP_CLASS_POSIX,
                            major(st.st_dev), minor(st.st_dev), (uint64_t)st.st_ino, NULL);
    r->relock = m == (r->exclusive ? 2 : 1);
}

/* Descriptors with a managed lock taken in this process (fd < 65536), so
 * that their unlock or close can tell the keeper at once ("U", no answer):
 * it then scans the kernel's locks immediately instead of at its next
 * backstop tick. Only a hint: a lock dropped any other way (another
 * process's close, exit of a child that inherited it) is found by the tick. */
#define MANAGED_FDS 65536
static unsigned char managed_fds[MANAGED_FDS / 8];

static void mark_managed(int fd)
{
    if (fd >= 0 && fd < MANAGED_FDS)
        __atomic_fetch_or(&managed_fds[fd / 8], (unsigned char)(1u << (fd % 8)), __ATOMIC_RELAXED);
}

static int is_managed(int fd)
{
    return fd >= 0 && fd < MANAGED_FDS &&
           (__atomic_load_n(&managed_fds[fd / 8], __ATOMIC_RELAXED) & (1u << (fd % 8))) != 0;
}

static void hint_released(int fd, int forget)
{
    if (forget)
        __atomic_fetch_and(&managed_fds[fd / 8], (unsigned char)~(1u << (fd % 8)), __ATOMIC_RELAXED);
    if (conn_fd < 0 || conn_pid != getpid() || !conn_is_ours(conn_fd, conn_ino))
        return; /* this thread never asked: the keeper's tick finds it */
    int saved = errno;
    struct wlp_request u = {.op = 'U'};
    char m[128];
    int n = wlp_request_format(m, sizeof m, &u);
    if (n > 0)
        (void)send(conn_fd, m, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    errno = saved;
}

static int lock_call_done(struct request *r, int kernel_rc)
{
    if (kernel_rc != 0)
        return kernel_rc;
    int saved = errno;
    if (take_distributed(r) != 0)
        return -1;
    mark_managed(r->fd);
    errno = saved;
    return 0;
}

static __attribute__((noinline)) int flock_lookup(flock_fn real, int fd, int op)
{
    char path[WLP_PATH_MAX];
    const char *p;
    if ((p = matching_path(fd, path, sizeof path)) == NULL)
        return real(fd, op);
    struct request r = {.fd = fd, .family = WLP_FAMILY_FLOCK, .exclusive = (op & LOCK_EX) != 0,
                        .wait = !(op & LOCK_NB), .path = p};
    note_relock(&r);
    return lock_call_done(&r, real(fd, op));
}

/* The fast path first, with a small frame: an unlock, or a descriptor known
 * not to match (no system call, no 4 KiB path buffer: flock_lookup). */
WLP_EXPORT int flock(int fd, int op)
{
    flock_fn real = REAL(real_flock_p, "flock");
    if (!(op & (LOCK_SH | LOCK_EX))) {
        int rc = real(fd, op);
        if (rc == 0 && (op & LOCK_UN) && paths_set && is_managed(fd))
            hint_released(fd, 0);
        return rc;
    }
    if (!paths_set || fd_known_miss(fd))
        return real(fd, op);
    return flock_lookup(real, fd, op);
}

/* A whole-file lock request among fcntl's commands; 0 for anything else. */
static int whole_file_lock(int cmd, const struct flock *fl, int *family, int *wait)
{
    switch (cmd) {
    case F_SETLK: *family = WLP_FAMILY_POSIX; *wait = 0; break;
    case F_SETLKW: *family = WLP_FAMILY_POSIX; *wait = 1; break;
    case F_OFD_SETLK: *family = WLP_FAMILY_OFD; *wait = 0; break;
    case F_OFD_SETLKW: *family = WLP_FAMILY_OFD; *wait = 1; break;
    default: return 0;
    }
    return fl != NULL && fl->l_type != F_UNLCK && fl->l_whence == SEEK_SET && fl->l_start == 0 &&
           fl->l_len == 0;
}

static int made(int fd);

static int fcntl_common(fcntl_fn real, int fd, int cmd, void *arg)
{
    int family, wait;
    char path[WLP_PATH_MAX];
    const char *p;
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        return made(real(fd, cmd, arg));
    if (!paths_set)
        return real(fd, cmd, arg);
    if (!whole_file_lock(cmd, arg, &family, &wait)) {
        int rc = real(fd, cmd, arg);
        if (rc == 0 && is_managed(fd) &&
            (cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW) &&
            arg != NULL && ((const struct flock *)arg)->l_type == F_UNLCK)
            hint_released(fd, 0);
        return rc;
    }
    if ((p = matching_path(fd, path, sizeof path)) == NULL)
        return real(fd, cmd, arg);
    const struct flock *fl = arg;
    struct request r = {.fd = fd, .family = family, .exclusive = fl->l_type == F_WRLCK,
                        .wait = wait, .path = p};
    note_relock(&r);
    return lock_call_done(&r, real(fd, cmd, arg));
}

WLP_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(REAL(real_fcntl_p, "fcntl"), fd, cmd, arg);
}

WLP_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    fcntl_fn real = REAL(real_fcntl64_p, "fcntl64");
    if (real == NULL)
        real = REAL(real_fcntl_p, "fcntl");
    return fcntl_common(real, fd, cmd, arg);
}

/* lockf(3) is a POSIX write lock from the current offset for len bytes
 * (0: to the end): a whole-file lock when both are 0. glibc implements it
 * with its internal fcntl, which no interposition sees, hence this one. */
WLP_EXPORT int lockf(int fd, int cmd, off_t len)
{
    lockf_fn real = REAL(real_lockf_p, "lockf");
    char path[WLP_PATH_MAX];
    const char *p;
    if (paths_set && cmd == F_ULOCK && is_managed(fd)) {
        int rc = real(fd, cmd, len);
        if (rc == 0)
            hint_released(fd, 0);
        return rc;
    }
    if (!paths_set || (cmd != F_LOCK && cmd != F_TLOCK) || len != 0 ||
        lseek(fd, 0, SEEK_CUR) > 0 || (p = matching_path(fd, path, sizeof path)) == NULL)
        return real(fd, cmd, len);
    struct request r = {.fd = fd, .family = WLP_FAMILY_POSIX, .exclusive = 1,
                        .wait = cmd == F_LOCK, .path = p};
    note_relock(&r);
    return lock_call_done(&r, real(fd, cmd, len));
}

WLP_EXPORT int lockf64(int fd, int cmd, off_t len)
{
    return lockf(fd, cmd, len);
}

/* close(2) of a descriptor with a managed lock: the lock may have gone with
 * it (the description's last close, or any close for POSIX locks). */
typedef int (*close_fn)(int);
static close_fn real_close_p;

WLP_EXPORT int close(int fd)
{
    fd_forget(fd);
    int rc = REAL(real_close_p, "close")(fd);
    if (paths_set && is_managed(fd))
        hint_released(fd, 1);
    return rc;
}

/* ---- descriptors made, replaced or renamed: the per-fd cache follows ---- */

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*creat_fn)(const char *, mode_t);
typedef FILE *(*fopen_fn)(const char *, const char *);
typedef FILE *(*freopen_fn)(const char *, const char *, FILE *);
typedef int (*fclose_fn)(FILE *);
typedef int (*dup_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned);
typedef int (*linkat_fn)(int, const char *, int, const char *, int);
typedef int (*close_range_fn)(unsigned, unsigned, int);
static open_fn real_open_p, real_open64_p;
static openat_fn real_openat_p, real_openat64_p;
static creat_fn real_creat_p, real_creat64_p;
static fopen_fn real_fopen_p, real_fopen64_p;
static freopen_fn real_freopen_p;
static fclose_fn real_fclose_p;
static dup_fn real_dup_p;
static dup2_fn real_dup2_p;
static dup3_fn real_dup3_p;
static rename_fn real_rename_p, real_link_p;
static renameat_fn real_renameat_p;
static renameat2_fn real_renameat2_p;
static linkat_fn real_linkat_p;
static close_range_fn real_close_range_p;

static int made(int fd)
{
    fd_forget(fd);
    return fd;
}

static FILE *made_file(FILE *f)
{
    if (f != NULL)
        fd_forget(fileno(f));
    return f;
}

static int renamed(int rc)
{
    __atomic_add_fetch(&fd_gen, 1, __ATOMIC_RELAXED);
    return rc;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

WLP_EXPORT int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return made(REAL(real_open_p, "open")(path, flags, mode));
}

WLP_EXPORT int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return made(REAL(real_open64_p, "open64")(path, flags, mode));
}

WLP_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return made(REAL(real_openat_p, "openat")(dirfd, path, flags, mode));
}

WLP_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return made(REAL(real_openat64_p, "openat64")(dirfd, path, flags, mode));
}

WLP_EXPORT int creat(const char *path, mode_t mode)
{
    return made(REAL(real_creat_p, "creat")(path, mode));
}

WLP_EXPORT int creat64(const char *path, mode_t mode)
{
    return made(REAL(real_creat64_p, "creat64")(path, mode));
}

WLP_EXPORT FILE *fopen(const char *path, const char *mode)
{
    return made_file(REAL(real_fopen_p, "fopen")(path, mode));
}

WLP_EXPORT FILE *fopen64(const char *path, const char *mode)
{
    return made_file(REAL(real_fopen64_p, "fopen64")(path, mode));
}

WLP_EXPORT FILE *freopen(const char *path, const char *mode, FILE *f)
{
    if (f != NULL)
        fd_forget(fileno(f));
    return made_file(REAL(real_freopen_p, "freopen")(path, mode, f));
}

WLP_EXPORT int fclose(FILE *f)
{
    int fd = f != NULL ? fileno(f) : -1;
    fd_forget(fd);
    int rc = REAL(real_fclose_p, "fclose")(f);
    if (paths_set && is_managed(fd))
        hint_released(fd, 1);
    return rc;
}

WLP_EXPORT int dup(int fd)
{
    return made(REAL(real_dup_p, "dup")(fd));
}

WLP_EXPORT int dup2(int fd, int fd2)
{
    fd_forget(fd2);
    return made(REAL(real_dup2_p, "dup2")(fd, fd2));
}

WLP_EXPORT int dup3(int fd, int fd2, int flags)
{
    fd_forget(fd2);
    return made(REAL(real_dup3_p, "dup3")(fd, fd2, flags));
}

WLP_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    for (unsigned fd = first; fd <= last && fd < FD_SLOTS; fd++)
        fd_forget((int)fd);
    close_range_fn real = REAL(real_close_range_p, "close_range");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return real(first, last, flags);
}

WLP_EXPORT int rename(const char *a, const char *b)
{
    return renamed(REAL(real_rename_p, "rename")(a, b));
}

WLP_EXPORT int renameat(int da, const char *a, int db, const char *b)
{
    return renamed(REAL(real_renameat_p, "renameat")(da, a, db, b));
}

WLP_EXPORT int renameat2(int da, const char *a, int db, const char *b, unsigned flags)
{
    renameat2_fn real = REAL(real_renameat2_p, "renameat2");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return renamed(real(da, a, db, b, flags));
}

WLP_EXPORT int link(const char *a, const char *b)
{
    return renamed(REAL(real_link_p, "link")(a, b));
}

WLP_EXPORT int linkat(int da, const char *a, int db, const char *b, int flags)
{
    return renamed(REAL(real_linkat_p, "linkat")(da, a, db, b, flags));
}
