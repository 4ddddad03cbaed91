/*
 * shim.c - libwatchlock_preload.so: makes flock(2), fcntl(2) whole-file
 * locks and lockf(3) on configured paths fleet-wide: exclusive requests
 * exclude every other host, shared ones only exclusive ones (docs/preload.md has the user's contract and the design argument).
 *
 * What runs here, inside any program: the interposed calls. A call that is
 * not a lock request, or any call when WATCHLOCK_PATHS is unset, goes to
 * libc (dlsym(RTLD_NEXT)) after one branch: no allocation, no system call.
 * A lock request with WATCHLOCK_PATHS set costs one readlink() of
 * /proc/self/fd/N to learn the path; a path that matches no glob then goes
 * to libc. For a matching path:
 *   1. the kernel lock is taken first, by libc (local semantics unchanged);
 *   2. a keeper (watchlock-keeper, one per hold) is spawned with the fd as
 *      its fd 3 and a pipe as its fd 4. It detaches (double fork, setsid:
 *      it must outlive this process: the exec-and-exit idiom), takes the
 *      distributed lock with the public C API, answers on the pipe and then
 *      holds it for as long as the kernel lock exists (keeper.c);
 *   3. this call waits for the answer in read(): a signal interrupts it as
 *      it interrupts a kernel lock wait (EINTR, unless SA_RESTART), closing
 *      the pipe cancels the keeper's wait, and the kernel lock is dropped.
 * Busy elsewhere with LOCK_NB / F_SETLK: the kernel lock is dropped and the
 * call fails with EWOULDBLOCK / EAGAIN. Redis unreachable: ENOLCK unless
 * WATCHLOCK_PRELOAD_FAIL_OPEN=1. Bad configuration: ENOLCK, logged once.
 * Unlocks (LOCK_UN, F_UNLCK, F_ULOCK) always go straight to libc: the
 * keeper sees the kernel lock go (it watches /proc/locks), whoever drops it.
 *
 * The shim links libc only: no watchlock threads or sockets in the host
 * program; the keeper is the process that uses libwatchlock.
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
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

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
__attribute__((constructor)) static void shim_init(void)
{
    const char *p = getenv(WLP_ENV_PATHS);
    paths_set = p != NULL && p[0] != '\0';
    if (!paths_set)
        return;
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

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *dest = getenv(WLP_ENV_LOG);
    if (dest == NULL || dest[0] == '\0' || strcmp(dest, "syslog") == 0) {
        syslog(LOG_USER | LOG_WARNING, "watchlock-preload[%d]: %s", (int)getpid(), msg);
        return;
    }
    char line[1200];
    int n = snprintf(line, sizeof line, "watchlock-preload[%d]: %s\n", (int)getpid(), msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = sizeof line - 1;
    int fd = strcmp(dest, "stderr") == 0 ? 2 : open(dest, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    if (fd != 2)
        close(fd);
}

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
    const char *path;
};

/*
 * The lock kind for a request: the one place that chooses. Every managed
 * path is a read-write lock (watchlock_rwlock_new): shared requests
 * (LOCK_SH, F_RDLCK) take a read share, exclusive ones (LOCK_EX, F_WRLCK,
 * lockf) the write side (keeper.c, open_lock). One kind for every request
 * on a path, so shim users never meet a kind conflict (EWRONGTYPE) among
 * themselves.
 */
static const char *lock_kind_for(const struct request *r)
{
    return r->exclusive ? "write" : "read";
}

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

/* Spawns the keeper; returns its intermediate pid (it double-forks), or -1. */
static pid_t spawn_keeper(const struct request *r, int status_w, const char *name,
                          const struct stat *st)
{
    char keeper[WLP_PATH_MAX];
    if (find_keeper(keeper, sizeof keeper) != 0) {
        log_bad_config("the keeper (watchlock-keeper) was not found next to the shim or at "
                       "WATCHLOCK_PRELOAD_KEEPER");
        return -1;
    }
    char a_family[8], a_excl[8], a_wait[8], a_pid[24], a_pgid[24], a_dev[24], a_ino[24];
    snprintf(a_family, sizeof a_family, "%d", r->family);
    snprintf(a_excl, sizeof a_excl, "%d", r->exclusive);
    snprintf(a_wait, sizeof a_wait, "%d", r->wait);
    snprintf(a_pid, sizeof a_pid, "%ld", (long)getpid());
    snprintf(a_pgid, sizeof a_pgid, "%ld", (long)getpgrp());
    snprintf(a_dev, sizeof a_dev, "%llu", (unsigned long long)st->st_dev);
    snprintf(a_ino, sizeof a_ino, "%llu", (unsigned long long)st->st_ino);
    char *argv[] = {keeper,  (char *)r->path, (char *)name, a_family, a_excl, a_wait,
                    a_pid,   a_pgid,          a_dev,        a_ino,
                    (char *)lock_kind_for(r), NULL};

    /* The environment without LD_PRELOAD: the keeper is not a locker. */
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **envp = malloc((n + 1) * sizeof *envp);
    if (envp == NULL)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            envp[k++] = environ[i];
    envp[k] = NULL;

    /* fd 3 = the locked file, fd 4 = the status pipe (the caller made it
     * >= 10, so the first dup2 cannot clobber it). The locked fd is never
     * copied here: closing a copy in this process would drop every POSIX
     * lock the process holds on the file. */
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
            posix_spawn_file_actions_adddup2(&fa, r->fd, 3);
            posix_spawn_file_actions_adddup2(&fa, status_w, 4);
            if (posix_spawn(&pid, keeper, &fa, &attr, argv, envp) != 0)
                pid = -1;
            posix_spawnattr_destroy(&attr);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    free(envp);
    return pid;
}

static void set_fence_env(const char *path, const char *token)
{
    char var[WLP_PATH_MAX + 32];
    setenv("WATCHLOCK_FENCING_TOKEN", token, 1); /* the name `watchlock run` uses */
    setenv("WATCHLOCK_FENCE", token, 1);         /* its alias (the shim's first name) */
    if (wlp_fence_var(var, sizeof var, path) > 0)
        setenv(var, token, 1);
}

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
    if (wlp_lock_name(name, sizeof name, r->path, getenv(WLP_ENV_PREFIX), getenv(WLP_ENV_MAP)) < 0) {
        log_bad_config("WATCHLOCK_PRELOAD_NAME_MAP must be FROM=TO (or the name is too long)");
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    struct stat st;
    int pipefd[2];
    if (fstat(r->fd, &st) != 0 || status_pipe(pipefd) != 0) {
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    pid_t pid = spawn_keeper(r, pipefd[1], name, &st);
    close(pipefd[1]);
    if (pid < 0) {
        close(pipefd[0]);
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    } /* the intermediate exits at once (ECHILD if SIGCHLD is ignored) */

    char reply[512];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(pipefd[0], reply + got, sizeof reply - 1 - got);
        if (n < 0 && errno == EINTR) {
            /* A signal, as in a kernel lock wait: give up (closing the pipe
             * cancels the keeper's wait) and fail with EINTR. */
            close(pipefd[0]);
            drop_kernel_lock(r);
            errno = EINTR;
            return -1;
        }
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(reply, '\n', got) != NULL || got == sizeof reply - 1)
            break;
    }
    close(pipefd[0]);
    reply[got] = '\0';
    char *nl = strchr(reply, '\n');
    if (nl != NULL)
        *nl = '\0';

    if (strncmp(reply, "OK ", 3) == 0) {
        set_fence_env(r->path, reply + 3);
        return 0;
    }
    if (strcmp(reply, "BUSY") == 0) {
        drop_kernel_lock(r);
        errno = r->family == WLP_FAMILY_FLOCK ? EWOULDBLOCK : EAGAIN;
        return -1;
    }
    if (strncmp(reply, "ERR CONFIG ", 11) == 0) {
        log_bad_config(reply + 11);
        drop_kernel_lock(r);
        errno = ENOLCK;
        return -1;
    }
    if (strncmp(reply, "ERR UNREACHABLE ", 16) == 0 && fail_open) {
        log_line("%s: Redis unreachable (%s): fail-open, the local lock only", r->path, reply + 16);
        return 0;
    }
    log_line("%s: distributed lock failed, ENOLCK: %s", r->path,
             got == 0 ? "the keeper exited without an answer" : reply);
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
static const char *matching_path(int fd, char *buf, size_t size)
{
    if (!paths_set)
        return NULL;
    pthread_once(&cfg_once, parse_config);
    struct stat st;
    int have_st = cfg.bad == NULL && fstat(fd, &st) == 0;
    if (have_st && known_miss(&st))
        return NULL;
    char proc[64], link[WLP_PATH_MAX];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, link, sizeof link);
    if (n <= 0 || (size_t)n >= sizeof link || wlp_fd_path(buf, size, link, (size_t)n) != 0)
        return NULL;
    if (cfg.bad != NULL || wlp_config_match(&cfg, buf))
        return buf;
    if (have_st)
        remember_miss(&st);
    return NULL;
}

/* ---- the interposed calls ---- */

static int lock_call_done(const struct request *r, int kernel_rc)
{
    if (kernel_rc != 0)
        return kernel_rc;
    int saved = errno;
    if (take_distributed(r) != 0)
        return -1;
    errno = saved;
    return 0;
}

WLP_EXPORT int flock(int fd, int op)
{
    flock_fn real = REAL(real_flock_p, "flock");
    char path[WLP_PATH_MAX];
    const char *p;
    if (!(op & (LOCK_SH | LOCK_EX)) || (p = matching_path(fd, path, sizeof path)) == NULL)
        return real(fd, op);
    struct request r = {.fd = fd, .family = WLP_FAMILY_FLOCK, .exclusive = (op & LOCK_EX) != 0,
                        .wait = !(op & LOCK_NB), .path = p};
    return lock_call_done(&r, real(fd, op));
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

static int fcntl_common(fcntl_fn real, int fd, int cmd, void *arg)
{
    int family, wait;
    char path[WLP_PATH_MAX];
    const char *p;
    if (!paths_set || !whole_file_lock(cmd, arg, &family, &wait) ||
        (p = matching_path(fd, path, sizeof path)) == NULL)
        return real(fd, cmd, arg);
    const struct flock *fl = arg;
    struct request r = {.fd = fd, .family = family, .exclusive = fl->l_type == F_WRLCK,
                        .wait = wait, .path = p};
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
    if (!paths_set || (cmd != F_LOCK && cmd != F_TLOCK) || len != 0 ||
        lseek(fd, 0, SEEK_CUR) > 0 || (p = matching_path(fd, path, sizeof path)) == NULL)
        return real(fd, cmd, len);
    struct request r = {.fd = fd, .family = WLP_FAMILY_POSIX, .exclusive = 1,
                        .wait = cmd == F_LOCK, .path = p};
    return lock_call_done(&r, real(fd, cmd, len));
}

WLP_EXPORT int lockf64(int fd, int cmd, off_t len)
{
    return lockf(fd, cmd, len);
}
