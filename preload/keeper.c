/*
 * keeper.c - watchlock-keeper: holds one distributed lock for one kernel
 * lock taken through the preload shim (shim.c), for exactly as long as that
 * kernel lock exists on this host. One keeper per hold; it uses the public
 * C API only (watchlock.h).
 *
 * Started by the shim (posix_spawn) with:
 *   fd 3  the locked file (the locker's descriptor); fd 4  the status pipe
 *   argv  PATH NAME FAMILY EXCLUSIVE WAIT LOCKER_PID PGID DEV INO KIND
 * It detaches first (fork, the parent exits, setsid): the locker may exit
 * while the kernel lock lives on (`exec 9>f; flock 9`: flock(1) exits, the
 * shell keeps fd 9), and no PR_SET_PDEATHSIG: outliving the locker is the
 * point. It closes every other descriptor, and fd 3 too once it has opened
 * its own description of the file (/proc/self/fd/3 reopened): a copy of the
 * locker's description would keep a flock(2) or OFD lock alive after the
 * program's last close.
 *
 * The lock is the path's read-write lock: KIND "read" a read share, "write"
 * the write side (shim.c lock_kind_for).
 * Then: acquire (try once; LOCK_NB: BUSY at once unless a stale keeper of
 * this kernel lock was told to go, see "hand-over"; blocking: wait in 50 ms
 * slices, which the library resumes without a round trip, woken by the
 * release's pub/sub message, checking between slices that the locker still
 * waits: a closed pipe cancels), answer "OK <fence>" / "BUSY" /
 * "ERR UNREACHABLE|CONFIG|OTHER <message>" on fd 4, then hold:
 *   - every 20 ms, look for the kernel lock in /proc/locks (family, device,
 *     inode, and the locker's pid for flock and POSIX locks); gone -> release
 *     and exit. That is the release detection (<= 20 ms + one round trip).
 *   - SIGUSR1 ("hand-over", see hand_over()): a keeper of the same file
 *     and family on this kernel whose locker was just granted a kernel lock
 *     that conflicts with ours (exclusive: with every lock; shared: with
 *     exclusive ones) found this keeper in /proc: the kernel excludes both
 *     locks, so ours is gone -> release at once. This is what makes local
 *     contention deadlock-free when /proc/locks cannot tell one holder from
 *     the next (same pid re-locking, a conversion on the same fd, OFD locks
 *     that show no pid).
 *   - SIGTERM/SIGINT/SIGHUP: release and exit.
 *   - the library's on-lost callback (a library thread): signal the locker's
 *     process group (WATCHLOCK_PRELOAD_SIGNAL, default SIGTERM), log, and
 *     the main loop exits.
 * Threads: main (all of the above) and the library's; the only shared state
 * is the `lost` flag (atomic).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"
#include "watchlock.h"

#define PROC_PID_INIT_INO 4026531836ULL /* the kernel's initial pid namespace */

static struct {
    const char *path, *name, *kind;
    int family, exclusive, wait;
    long locker_pid, pgid;
    uint64_t dev, ino;
    int status_fd, probe_fd;
    int signal;
    uint64_t pidns;
    char kernel_id[256];
} k;

static int lost;

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
        syslog(LOG_USER | LOG_WARNING, "watchlock-keeper[%d]: %s", (int)getpid(), msg);
        return;
    }
    FILE *f = strcmp(dest, "stderr") == 0 ? stderr : fopen(dest, "ae");
    if (f == NULL)
        return;
    fprintf(f, "watchlock-keeper[%d]: %s\n", (int)getpid(), msg);
    if (f != stderr)
        fclose(f);
    else
        fflush(f);
}

static void answer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void answer(const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (k.status_fd >= 0) {
        ssize_t w = write(k.status_fd, line, (size_t)n);
        (void)w;
        close(k.status_fd);
        k.status_fd = -1;
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The locker gave up waiting (signal, death): the pipe's read end is gone. */
static int locker_gone(void)
{
    if (k.status_fd < 0)
        return 0;
    struct pollfd p = {.fd = k.status_fd, .events = 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

/* Is the kernel lock still held on this host? /proc/locks first; when it
 * shows nothing and we live in a pid namespace other than the initial one
 * (where /proc/locks hides flock locks whose taker has exited), a
 * non-blocking test on our own description of the file decides. */
static int kernel_lock_held(void)
{
    FILE *f = fopen("/proc/locks", "re");
    if (f == NULL)
        return 1; /* cannot tell: keep holding (the lease still bounds a crash) */
    char line[512];
    int found = 0;
    long pid = k.family == WLP_FAMILY_OFD ? -1 : k.locker_pid;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = wlp_proc_locks_line_matches(line, k.family, major(k.dev), minor(k.dev), k.ino, pid);
    fclose(f);
    if (found || k.pidns == PROC_PID_INIT_INO || k.probe_fd < 0)
        return found;
    if (k.family == WLP_FAMILY_FLOCK) {
        if (flock(k.probe_fd, LOCK_EX | LOCK_NB) == 0) {
            flock(k.probe_fd, LOCK_UN);
            return 0;
        }
        return errno == EWOULDBLOCK;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(k.probe_fd, F_OFD_GETLK, &fl) != 0)
        return 1;
    return fl.l_type != F_UNLCK;
}

/* Signals the locker's process group and logs, once per hold: from the
 * on-lost callback (a library thread) or from the main loop, whichever sees
 * the loss first (a state read that finds the lock past its deadline records
 * the loss, and a callback not yet started when watchlock_lock_free() runs
 * is never called: so the main loop must not count on the callback). */
static int reported;

static void report_loss(int reason)
{
    if (__atomic_exchange_n(&reported, 1, __ATOMIC_SEQ_CST))
        return;
    if (k.signal > 0 && k.pgid > 0)
        kill((pid_t)-k.pgid, k.signal);
    log_line("lost the lock of %s (%s) while its kernel lock was held: %s sent to process "
             "group %ld",
             k.path, watchlock_lost_reason_str(reason),
             k.signal > 0 ? strsignal(k.signal) : "no signal", k.pgid);
    __atomic_store_n(&lost, 1, __ATOMIC_SEQ_CST);
}

static void on_lost(watchlock_lock *lock, int reason, void *ud)
{
    (void)lock;
    (void)ud;
    report_loss(reason);
}

static const char *err_class(int rc)
{
    switch (rc) {
    case WATCHLOCK_ECONN:
    case WATCHLOCK_EAUTH:
    case WATCHLOCK_ECLOSED: return "UNREACHABLE";
    case WATCHLOCK_EINVAL: return "CONFIG";
    default: return "OTHER";
    }
}

static void read_ids(void)
{
    char boot[64] = "unknown";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f != NULL) {
        if (fgets(boot, sizeof boot, f) != NULL)
            boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    struct stat st;
    k.pidns = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
    wlp_kernel_id(k.kernel_id, sizeof k.kernel_id, boot, k.pidns, k.dev, k.ino,
                  k.family == WLP_FAMILY_FLOCK ? WLP_FAMILY_FLOCK : WLP_FAMILY_POSIX);
}

/*
 * Hand-over. Our locker was just granted its kernel lock, so on this kernel
 * no other lock of the same family on this file that conflicts with ours
 * exists any more: an exclusive grant excludes every other lock, a shared
 * one every exclusive lock. A keeper that still guards such a lock is
 * stale (its locker unlocked and relocked within one poll, converted the
 * lock on the same fd, or holds an OFD lock that /proc/locks shows without
 * a pid): tell it to let go (SIGUSR1). The keepers of this kernel are the
 * processes named watchlock-keeper in /proc with our device, inode and
 * family class in their argv (main's argv layout); another host's (or a
 * test's mount namespace with a private tmpfs: another device) never
 * matches. The read-write lock records no owner per share, so /proc and
 * not the server's owner record is where they are found. Fills told[] with
 * the pids told (at most max); returns their number.
 */
/* Another keeper of this kernel, from its /proc/PID/cmdline (main's argv). */
struct peer {
    pid_t pid;
    int family, exclusive;
    long locker_pid;
    unsigned long long start; /* /proc/PID/stat starttime: older is smaller */
};

static int read_peer(struct peer *out, long pid)
{
    char path[64], buf[WLP_PATH_MAX + 1024];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0)
        return -1;
    buf[len] = '\0';
    const char *argv[12];
    int argc = 0;
    for (char *p = buf; p < buf + len && argc < 12; p += strlen(p) + 1)
        argv[argc++] = p;
    if (argc != 11)
        return -1;
    const char *base = strrchr(argv[0], '/');
    base = base != NULL ? base + 1 : argv[0];
    if (strcmp(base, "watchlock-keeper") != 0 || strtoull(argv[8], NULL, 10) != k.dev ||
        strtoull(argv[9], NULL, 10) != k.ino)
        return -1;
    out->pid = (pid_t)pid;
    out->family = atoi(argv[3]);
    out->exclusive = atoi(argv[4]);
    out->locker_pid = atol(argv[6]);
    out->start = 0;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (f != NULL) {
        /* "pid (comm) state ppid ..." : starttime is field 22; comm may hold spaces */
        char line[1024];
        if (fgets(line, sizeof line, f) != NULL) {
            char *q = strrchr(line, ')');
            int field = 2;
            char *save = NULL;
            for (char *t = q != NULL ? strtok_r(q + 1, " ", &save) : NULL; t != NULL;
                 t = strtok_r(NULL, " ", &save))
                if (++field == 22) {
                    out->start = strtoull(t, NULL, 10);
                    break;
                }
        }
        fclose(f);
    }
    return 0;
}

/* Granted read locks of `family` on our file in /proc/locks, by `pid` (< 0: anyone). */
static int kernel_read_locks(int family, long pid)
{
    FILE *f = fopen("/proc/locks", "re");
    if (f == NULL)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (strstr(line, " READ ") != NULL &&
            wlp_proc_locks_line_matches(line, family, major(k.dev), minor(k.dev), k.ino, pid))
            n++;
    fclose(f);
    return n;
}

static int by_start(const void *a, const void *b)
{
    const struct peer *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int tell(pid_t *told, int n, int max, const struct peer *p)
{
    if (n >= max || kill(p->pid, SIGUSR1) != 0)
        return n;
    log_line("%s: hand-over: told the stale keeper %d (%s) to release", k.path, (int)p->pid,
             p->exclusive ? "write side" : "read share");
    told[n] = p->pid;
    return n + 1;
}

static int hand_over(pid_t *told, int max)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    int n = 0, my_class = k.family == WLP_FAMILY_FLOCK ? 0 : 1;
    struct peer readers[64];
    int nreaders = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        struct peer p;
        if (*end != '\0' || pid <= 1 || pid == (long)getpid() || read_peer(&p, pid) != 0 ||
            (p.family == WLP_FAMILY_FLOCK ? 0 : 1) != my_class)
            continue;
        if (k.exclusive || p.exclusive) {
            n = tell(told, n, max, &p);
        } else if (p.family == k.family &&
                   (k.family == WLP_FAMILY_OFD || p.locker_pid == k.locker_pid) && nreaders < 64) {
            readers[nreaders++] = p;
        }
    }
    closedir(d);
    /* Shared and shared coexist, so a shared grant cannot tell a stale
     * reader keeper from a live one, except by counting: the read locks of
     * our locker (of every OFD description, which show no pid) in
     * /proc/locks, ours included, against the keepers that guard them, us
     * included. More keepers than locks: the oldest are stale (the locker
     * unlocked and locked again within one poll, so its old keeper still
     * sees "a lock of this pid"; left alone it would hold its share for as
     * long as the process keeps relocking, and a writer elsewhere would wait
     * for it while our share waits behind that writer). */
    if (!k.exclusive && nreaders > 0) {
        int locks = kernel_read_locks(k.family, k.family == WLP_FAMILY_OFD ? -1 : k.locker_pid);
        if (locks > 0 && nreaders + 1 > locks) {
            qsort(readers, (size_t)nreaders, sizeof readers[0], by_start);
            for (int i = 0; i < nreaders + 1 - locks && i < nreaders; i++)
                n = tell(told, n, max, &readers[i]);
        }
    }
    return n;
}

static int any_alive(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (kill(pids[i], 0) == 0 || errno != ESRCH)
            return 1;
    return 0;
}

/* The lock handle for this hold. The kind is chosen by the shim
 * (shim.c lock_kind_for): "read" a read share of the path's read-write
 * lock, "write" its write side; "exclusive" (an older shim) the plain lock. */
static int open_lock(watchlock_lock **out, watchlock_client *c)
{
    if (strcmp(k.kind, "read") == 0 || strcmp(k.kind, "write") == 0) {
        int rc = watchlock_rwlock_new(out, c, k.name, strlen(k.name), strcmp(k.kind, "write") == 0);
        /* blocking waits are 50 ms slices (acquire): keep the place in the queue between them */
        return rc != 0 ? rc : watchlock_lock_set_wait_slices(*out, 1);
    }
    return watchlock_lock_new(out, c, k.name, strlen(k.name));
}

static int acquire(watchlock_lock *lock)
{
    pid_t told[64];
    int ntold = 0;
    /* A shared request looks for stale reader keepers first: the first try
     * succeeds beside them, so it would never find them otherwise. */
    if (!k.exclusive)
        ntold = hand_over(told, 64);
    int rc = watchlock_lock_acquire(lock, 0);
    if (rc != WATCHLOCK_ETIMEDOUT)
        return rc;
    if (k.exclusive)
        ntold = hand_over(told, 64);
    if (!k.wait) {
        /* LOCK_NB: a stale keeper releases within one round trip; wait for
         * the keepers told to exit (bounded by a lease), then try once more.
         * Anyone else (another host, a queued writer) still makes it BUSY. */
        if (ntold == 0)
            return rc;
        int64_t deadline = now_ms() + watchlock_lock_lease(lock);
        while (any_alive(told, ntold) && now_ms() < deadline) {
            if (locker_gone())
                return WATCHLOCK_ECLOSED;
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        return watchlock_lock_acquire(lock, 0);
    }
    /* Blocking: wait in slices, for as long as it takes or the locker waits. */
    for (;;) {
        if (locker_gone()) {
            watchlock_lock_forget_wait(lock);
            return WATCHLOCK_ECLOSED;
        }
        rc = watchlock_lock_acquire(lock, 50);
        if (rc != WATCHLOCK_ETIMEDOUT)
            return rc;
    }
}

static void detach(void)
{
    pid_t p = fork();
    if (p < 0) {
        answer("ERR OTHER fork: %s", strerror(errno));
        _exit(1);
    }
    if (p > 0)
        _exit(0);
    setsid();
}

static void close_other_fds(int keep_stderr)
{
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (!keep_stderr)
            dup2(null, 2);
        if (null > 4)
            close(null);
    }
    /* All of them, however high: an inherited copy of another lock's
     * descriptor would keep that lock alive after its program closes it. */
    if (close_range(5, ~0U, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = 5; fd < (max > 0 ? max : 65536); fd++)
            close((int)fd);
    }
}

int main(int argc, char **argv)
{
    if (argc != 11) {
        fprintf(stderr, "watchlock-keeper: started by libwatchlock_preload.so only\n");
        return 64;
    }
    k.status_fd = 4;
    k.path = argv[1];
    k.name = argv[2];
    k.family = atoi(argv[3]);
    k.exclusive = atoi(argv[4]);
    k.wait = atoi(argv[5]);
    k.locker_pid = atol(argv[6]);
    k.pgid = atol(argv[7]);
    k.dev = strtoull(argv[8], NULL, 10);
    k.ino = strtoull(argv[9], NULL, 10);
    k.kind = argv[10];
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    /* First: before the library starts its threads, and before a hand-over's
     * SIGUSR1 (default action: terminate) can reach a keeper just started. */
    sigprocmask(SIG_BLOCK, &set, NULL);
    const char *logdest = getenv(WLP_ENV_LOG);
    close_other_fds(logdest != NULL && strcmp(logdest, "stderr") == 0);
    detach();
    signal(SIGPIPE, SIG_IGN);
    k.probe_fd = open("/proc/self/fd/3", O_RDONLY | O_CLOEXEC | O_NOCTTY);
    close(3);
    read_ids();

    k.signal = wlp_signal_parse(getenv(WLP_ENV_SIGNAL));
    if (k.signal < 0) {
        answer("ERR CONFIG WATCHLOCK_PRELOAD_SIGNAL: unknown signal '%s'", getenv(WLP_ENV_SIGNAL));
        return 1;
    }
    int64_t lease = 30000;
    const char *lease_text = getenv(WLP_ENV_LEASE);
    if (lease_text != NULL && lease_text[0] != '\0' &&
        watchlock_parse_duration(&lease, lease_text) != 0) {
        answer("ERR CONFIG WATCHLOCK_PRELOAD_LEASE: %s", watchlock_last_error());
        return 1;
    }
    const char *url = getenv(WLP_ENV_URL);
    if (url != NULL && url[0] == '\0')
        url = NULL;
    watchlock_client *c = NULL;
    watchlock_lock *lock = NULL;
    int rc = watchlock_client_open(&c, url);
    if (rc != 0) {
        answer("ERR %s WATCHLOCK_URL: %s", err_class(rc), watchlock_last_error());
        return 1;
    }
    char label[WLP_PATH_MAX + 400];
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(label, sizeof label, "preload %s on %s (%s, locker pid %ld) kl=%s", k.path, host,
             k.family == WLP_FAMILY_FLOCK ? "flock" : k.family == WLP_FAMILY_OFD ? "ofd" : "posix",
             k.locker_pid, k.kernel_id);
    if ((rc = open_lock(&lock, c)) != 0 || (rc = watchlock_lock_set_lease(lock, lease)) != 0 ||
        (rc = watchlock_lock_set_owner_label(lock, label)) != 0 ||
        (rc = watchlock_lock_set_on_lost(lock, on_lost, NULL)) != 0) {
        answer("ERR %s %s", err_class(rc), watchlock_last_error());
        watchlock_lock_free(lock);
        watchlock_client_close(c);
        return 1;
    }
    rc = acquire(lock);
    if (rc == WATCHLOCK_ETIMEDOUT) {
        answer("BUSY");
    } else if (rc == WATCHLOCK_ECLOSED && k.status_fd >= 0 && locker_gone()) {
        /* the locker stopped waiting: nothing to answer */
    } else if (rc != 0) {
        answer("ERR %s %s: %s", err_class(rc), watchlock_strerror(rc), watchlock_last_error());
    } else {
        answer("OK %" PRId64, watchlock_lock_fencing_token(lock));
        /* An answer nobody read (the locker was interrupted meanwhile) is
         * caught by the first kernel-lock check: the shim dropped it. */
        struct timespec tick = {0, 20 * 1000 * 1000};
        for (;;) {
            int sig = sigtimedwait(&set, NULL, &tick);
            if (sig == SIGUSR1 || sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
                break;
            if (__atomic_load_n(&lost, __ATOMIC_SEQ_CST))
                break;
            if (watchlock_lock_state(lock) != WATCHLOCK_HELD) {
                report_loss(watchlock_lock_lost_reason(lock));
                break;
            }
            if (!kernel_lock_held())
                break;
        }
    }
    watchlock_lock_free(lock); /* releases a held lock */
    watchlock_client_close(c);
    return 0;
}
