/*
 * keeper.c - watchlock-keeper: one process per host (per user, mount
 * namespace, pid namespace and Redis URL) that holds every distributed lock
 * taken through the preload shim (shim.c) on one watchlock client, for
 * exactly as long as the kernel locks they stand for exist on this host.
 * It uses the public C API only (watchlock.h). docs/preload.md, "The
 * keeper", is the user's description; this comment is the argument.
 *
 * Started on demand by the shim (posix_spawn, `watchlock-keeper SOCKNAME`,
 * fd 3 a pipe closed when the socket listens). It detaches (fork, setsid),
 * binds the abstract Unix socket SOCKNAME (the election: bind is atomic, a
 * second keeper gets EADDRINUSE and exits), and then:
 *
 * Holds. One entry per (device, inode, class): the kernel's *aggregate*
 * state of that file on this host, for one lock family (flock, or POSIX +
 * OFD, which conflict with each other but never with flock). The kernel
 * allows at most one exclusive lock of a class on a file, or any number of
 * shared ones; so the host needs the distributed write side while an
 * exclusive kernel lock exists, a read share while shared ones exist, and
 * nothing else. This is what makes the lock identity the kernel's:
 *   - a re-lock or conversion through any process sharing the description
 *     is a request of the mode the entry already has (kept, no round trip)
 *     or of the other mode (the kernel just granted it, so the old mode's
 *     locks are gone: release it, take the new one);
 *   - flock and POSIX locks are two entries and two names (wlp_class_name),
 *     so they never wait on each other;
 *   - a POSIX lock partly unlocked keeps its entry while any range of it is
 *     left (the liveness scan counts every lock of the class on the file).
 * A request is checked against the kernel before it may change an entry's
 * mode: the requester's /proc/PID/fdinfo/FD must still show the lock it
 * asks for. A request that was abandoned (the locker was interrupted and
 * dropped its kernel lock) and arrives late therefore cannot end a later
 * holder's hold (issue 33.2).
 *
 * Liveness. The tick thread reads /proc/locks once every 20 ms for all
 * entries (one pass, a hash lookup per line) and releases every held entry
 * whose mode no longer has a granted lock of its class on its file (locks
 * of another user's live process are not counted: another user has another
 * keeper). A request touched an entry after the scan began: not released
 * in this tick (the scan may predate its kernel grant) - the epoch rule.
 * In a pid namespace other than the initial one /proc/locks hides flock
 * locks whose taker exited: there an absence is confirmed with a
 * non-blocking flock on the keeper's own description of the file.
 * No pid is ever waited for: liveness is the kernel's lock table. The
 * tick is woken at once by a shim's unlock hint, a connection's end, and
 * the death of a connected process or of a child it forked ('P'): their
 * pidfds turn readable only after the kernel has put all of the process's
 * files (its connection ends before its locked files are put, so the end
 * alone can come too early). A scan, not the pid, decides: a description
 * another process still holds keeps its lock.
 *
 * Loss: the library's on-lost callback (its watchdog thread) signals the
 * process groups that asked for the entry and logs; the entry is dropped by
 * the next tick. Keeper killed: its guardian (the keeper's parent, which
 * does nothing but wait for it) signals those process groups, logs, and
 * exits; the next managed call starts a new keeper.
 *
 * Lifetime: the keeper exits after WLP_IDLE_MS with no entry and no client
 * connection (it closes its socket first: a shim that connects later starts
 * a new one; one caught in between sees EOF and retries).
 *
 * Threads and locks: the accept thread (main), one thread per shim
 * connection, the tick thread, the library's. One mutex `mu` guards the
 * table and every entry; Redis I/O for an entry is done with `mu` held
 * (release, conversions) or by the entry's one driver thread without it
 * (acquire, in 50 ms slices). The on-lost callback takes no lock: it reads
 * the entry's atomics only. `tick_mu` guards the watched pidfds alone
 * (never taken with `mu` held, nor `mu` with it).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "preload.h"
#include "watchlock.h"

#define PROC_PID_INIT_INO 4026531836ULL /* the kernel's initial pid namespace */
#define TICK_MS 20
#define WLP_IDLE_MS 2000
#define NBUCKETS 4096
#define MAX_PGIDS 16
#define MAX_GROUPS 4096 /* process groups the guardian may have to tell */

enum { M_NONE = 0, M_SHARED = 1, M_EXCL = 2 };
enum { S_IDLE = 0, S_ACQUIRING = 1, S_HELD = 2 };

struct entry {
    struct entry *next;
    uint64_t dev, ino;
    int cls;
    char *name, *path;
    int mode, state, driver, abort, wanted;
    unsigned gen;
    uint64_t touched, seen; /* scan epochs */
    watchlock_lock *handle[3]; /* by mode: [M_SHARED] read share, [M_EXCL] write side */
    int lost;                 /* atomic: set by the on-lost callback */
    int pgids[MAX_PGIDS];     /* atomic: who to tell on loss */
    int signal;
    int64_t lease;
    int probe_fd;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct entry *table[NBUCKETS];
static size_t nentries, nconns;
static uint64_t epoch = 1;
/* The last /proc/locks text fully scanned, and whether the table changed
 * since (a request, a loss, an entry kept only by the epoch rule): an idle
 * tick whose read gives the same text and finds nothing changed skips the
 * parse (what keeps 1,000 idle holds at a few % of a core). */
static char *last_locks;
static size_t last_len;
static int dirty = 1; /* atomic */
static watchlock_client *client;
static uint64_t my_pidns;
static uid_t my_uid;
static int default_signal = SIGTERM;
static char host[256];
static int listen_fd = -1;
static int stopping; /* atomic: the idle rule decided to exit */
/* Shared with the guardian (MAP_SHARED): process groups with a hold. */
static int *groups;
static int groups_stale; /* mu: the list has groups of holds that ended */

#define log_line(...) wlp_log_line("watchlock-keeper", __VA_ARGS__)

/* ---- process groups to tell (the guardian reads them after a crash) ---- */

static int groups_used; /* atomic: slots below this may be set */

static void group_add(int pgid)
{
    if (groups == NULL || pgid <= 0)
        return;
    for (int i = 0; i < MAX_GROUPS; i++) {
        int v = __atomic_load_n(&groups[i], __ATOMIC_RELAXED);
        if (v == pgid)
            return;
        int zero = 0;
        if (v == 0 && __atomic_compare_exchange_n(&groups[i], &zero, pgid, 0, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED)) {
            if (i >= __atomic_load_n(&groups_used, __ATOMIC_RELAXED))
                __atomic_store_n(&groups_used, i + 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

/* Rebuilds the list from the entries (mu held): groups without a hold go. */
static void groups_rebuild(void)
{
    if (groups == NULL)
        return;
    int used = __atomic_load_n(&groups_used, __ATOMIC_RELAXED);
    for (int i = 0; i < used; i++)
        __atomic_store_n(&groups[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&groups_used, 0, __ATOMIC_RELAXED);
    for (size_t b = 0; b < NBUCKETS && nentries > 0; b++)
        for (struct entry *e = table[b]; e != NULL; e = e->next)
            if (e->state == S_HELD)
                for (int i = 0; i < MAX_PGIDS; i++)
                    group_add(__atomic_load_n(&e->pgids[i], __ATOMIC_RELAXED));
}

/* ---- entries ---- */

static size_t bucket_of(uint64_t dev, uint64_t ino, int cls)
{
    uint64_t h = (ino * 0x9E3779B97F4A7C15ULL) ^ (dev * 0xC2B2AE3D27D4EB4FULL) ^ (uint64_t)cls;
    return (size_t)(h >> 52) % NBUCKETS;
}

static struct entry *lookup(uint64_t dev, uint64_t ino, int cls)
{
    for (struct entry *e = table[bucket_of(dev, ino, cls)]; e != NULL; e = e->next)
        if (e->dev == dev && e->ino == ino && e->cls == cls)
            return e;
    return NULL;
}

static void add_pgid(struct entry *e, long pgid)
{
    if (pgid <= 0)
        return;
    for (int i = 0; i < MAX_PGIDS; i++) {
        int v = __atomic_load_n(&e->pgids[i], __ATOMIC_RELAXED);
        if (v == (int)pgid)
            return;
        if (v == 0) {
            __atomic_store_n(&e->pgids[i], (int)pgid, __ATOMIC_RELAXED);
            return;
        }
    }
    /* full: the oldest group makes room (it most likely unlocked long ago) */
    memmove(e->pgids, e->pgids + 1, sizeof e->pgids - sizeof e->pgids[0]);
    __atomic_store_n(&e->pgids[MAX_PGIDS - 1], (int)pgid, __ATOMIC_RELAXED);
}

static void on_lost(watchlock_lock *lock, int reason, void *ud)
{
    (void)lock;
    struct entry *e = ud;
    if (__atomic_exchange_n(&e->lost, 1, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&dirty, 1, __ATOMIC_SEQ_CST);
    char told[256] = "";
    size_t used = 0;
    for (int i = 0; i < MAX_PGIDS; i++) {
        int g = __atomic_load_n(&e->pgids[i], __ATOMIC_RELAXED);
        if (g > 0 && e->signal > 0 && kill(-g, e->signal) == 0 && used < sizeof told - 16)
            used += (size_t)snprintf(told + used, sizeof told - used, " %d", g);
    }
    log_line("lost the lock of %s (%s) while its kernel lock was held: %s sent to process "
             "group(s)%s",
             e->path, watchlock_lost_reason_str(reason),
             e->signal > 0 ? strsignal(e->signal) : "no signal", used ? told : " (none)");
}

/* Frees an entry's handles (mu held; a held handle is released). */
static void drop_handles(struct entry *e)
{
    for (int m = 1; m <= 2; m++) {
        watchlock_lock_free(e->handle[m]);
        e->handle[m] = NULL;
    }
}

static void remove_entry(struct entry *e)
{
    struct entry **pp = &table[bucket_of(e->dev, e->ino, e->cls)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    drop_handles(e);
    if (e->probe_fd >= 0)
        close(e->probe_fd);
    free(e->name);
    free(e->path);
    free(e);
    nentries--;
}

static int err_reply(char *out, size_t size, uint64_t id, int rc, const char *what)
{
    const char *cls = rc == WATCHLOCK_ECONN || rc == WATCHLOCK_EAUTH || rc == WATCHLOCK_ECLOSED
                          ? "UNREACHABLE"
                      : rc == WATCHLOCK_EINVAL ? "CONFIG"
                                               : "OTHER";
    return snprintf(out, size, "ERR %" PRIu64 " %s %s: %s", id, cls, what, watchlock_last_error());
}

/* The handle of an entry's mode (mu held). */
static int handle_for(struct entry *e, int mode, watchlock_lock **out)
{
    if (e->handle[mode] != NULL) {
        *out = e->handle[mode];
        return 0;
    }
    watchlock_lock *l = NULL;
    char label[WLP_PATH_MAX + 400];
    snprintf(label, sizeof label, "preload %s on %s (%s, keeper pid %d)", e->path, host,
             e->cls == WLP_CLASS_FLOCK ? "flock" : "posix", (int)getpid());
    int rc = watchlock_rwlock_new(&l, client, e->name, strlen(e->name), mode == M_EXCL);
    if (rc == 0)
        rc = watchlock_lock_set_wait_slices(l, 1);
    if (rc == 0)
        rc = watchlock_lock_set_lease(l, e->lease);
    if (rc == 0)
        rc = watchlock_lock_set_owner_label(l, label);
    if (rc == 0)
        rc = watchlock_lock_set_on_lost(l, on_lost, e);
    if (rc != 0) {
        watchlock_lock_free(l);
        return rc;
    }
    e->handle[mode] = *out = l;
    return 0;
}

/* Ends the entry's current hold (mu held, no driver). */
static void end_hold(struct entry *e)
{
    if (e->state == S_HELD && e->handle[e->mode] != NULL &&
        watchlock_lock_state(e->handle[e->mode]) == WATCHLOCK_HELD)
        watchlock_lock_release(e->handle[e->mode]);
    else if (e->state == S_ACQUIRING && e->handle[e->mode] != NULL)
        watchlock_lock_forget_wait(e->handle[e->mode]);
    e->state = S_IDLE;
    e->gen++;
    /* the hold's groups go with it: the next hold's requesters are told, not
     * this one's (the guardian's list follows at the next tick) */
    for (int i = 0; i < MAX_PGIDS; i++)
        __atomic_store_n(&e->pgids[i], 0, __ATOMIC_RELAXED);
    groups_stale = 1;
}

/* ---- the kernel's view ---- */

static char *read_all(const char *path, size_t *len);

/* The mode of the lock the requester's fd shows in /proc/PID/fdinfo/FD (0:
 * none, -1: unknown), and *kid, the identity of that kernel hold: for flock
 * the pid the kernel shows on it (its first taker: a re-lock through the
 * same description keeps it, another description's lock has its own), for
 * POSIX locks the owner process, -1 when unknown (OFD locks). */
static int requester_mode(const struct wlp_request *r, long *kid)
{
    *kid = r->cls == WLP_CLASS_POSIX ? r->pid : -1;
    char p[64], buf[8192];
    snprintf(p, sizeof p, "/proc/%ld/fdinfo/%d", r->pid, r->fd);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    long pid;
    int m = wlp_fdinfo_mode(buf, r->cls, major(r->dev), minor(r->dev), r->ino, &pid);
    if (r->cls == WLP_CLASS_FLOCK)
        *kid = pid > 0 ? pid : -1;
    else if (m != 0 && pid < 0)
        *kid = -1; /* an OFD lock: no owner shown */
    if (m != 0 || r->cls != WLP_CLASS_POSIX)
        return m;
    /* A POSIX lock taken through another descriptor of the file (merged
     * with this one) shows on that one: the process's locks in /proc/locks. */
    size_t len;
    char *locks = read_all("/proc/locks", &len);
    if (locks == NULL)
        return -1;
    for (char *line = locks; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        struct wlp_lockline l;
        if (wlp_lockline_parse(line, &l) == 0 && l.cls == WLP_CLASS_POSIX && !l.ofd &&
            l.pid == r->pid && l.ino == r->ino && l.dev_major == major(r->dev) &&
            l.dev_minor == minor(r->dev) && (l.exclusive ? 2 : 1) > m)
            m = l.exclusive ? 2 : 1;
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(locks);
    return m;
}

/* Does a /proc/locks line with this pid count for this keeper? Locks of a
 * live process of another user belong to that user's keeper. */
static int pid_is_ours(long pid, long *cache, int *ncache)
{
    if (pid <= 0)
        return 1;
    for (int i = 0; i < *ncache; i++)
        if (cache[i] == pid)
            return 1;
    char p[64];
    snprintf(p, sizeof p, "/proc/%ld", pid);
    struct stat st;
    if (stat(p, &st) != 0)
        return 1; /* exited (a flock outliving its taker): cannot tell, keep */
    if (st.st_uid != my_uid)
        return 0;
    if (*ncache < 16)
        cache[(*ncache)++] = pid;
    return 1;
}

static char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (cap - n < 4096) {
            char *b = realloc(buf, cap * 2);
            if (b == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (buf != NULL) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

/* In a non-initial pid namespace: is any lock (shared entry) / an exclusive
 * lock (exclusive entry) of the flock class on the file? Side effect when
 * not: this description holds the file for a few microseconds. */
static int probe_held(struct entry *e)
{
    if (e->probe_fd < 0)
        return 1;
    int op = e->mode == M_EXCL ? LOCK_SH : LOCK_EX;
    if (flock(e->probe_fd, op | LOCK_NB) == 0) {
        flock(e->probe_fd, LOCK_UN);
        return 0;
    }
    return errno == EWOULDBLOCK;
}

static void tick(void)
{
    pthread_mutex_lock(&mu);
    if (nentries == 0) {
        pthread_mutex_unlock(&mu);
        return;
    }
    uint64_t now = ++epoch;
    pthread_mutex_unlock(&mu);

    size_t len = 0;
    char *locks = read_all("/proc/locks", &len);
    if (locks == NULL)
        return; /* cannot tell: keep everything (a crash is still bounded by the lease) */
    if (!__atomic_exchange_n(&dirty, 0, __ATOMIC_SEQ_CST) && last_locks != NULL &&
        len == last_len && memcmp(locks, last_locks, len) == 0) {
        free(locks);
        return; /* the same kernel locks as at the last full scan, which kept every entry */
    }
    free(last_locks);
    last_locks = malloc(len + 1);
    if (last_locks != NULL) {
        memcpy(last_locks, locks, len + 1);
        last_len = len;
    }
    long cache[16];
    int ncache = 0;
    pthread_mutex_lock(&mu);
    for (char *line = locks; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        struct wlp_lockline l;
        if (wlp_lockline_parse(line, &l) == 0) {
            struct entry *e = lookup(makedev(l.dev_major, l.dev_minor), l.ino, l.cls);
            /* a shared entry lives while a shared lock does; an exclusive one while an exclusive one does */
            if (e != NULL && e->state == S_HELD && (e->mode == M_EXCL) == l.exclusive &&
                e->seen != now && pid_is_ours(l.ofd ? 0 : l.pid, cache, &ncache))
                e->seen = now;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(locks);
    int changed = 0;
    for (size_t b = 0; b < NBUCKETS; b++) {
        for (struct entry *e = table[b], *next; e != NULL; e = next) {
            next = e->next;
            if (e->driver || e->wanted > 0) {
                __atomic_store_n(&dirty, 1, __ATOMIC_SEQ_CST);
                continue;
            }
            int gone = __atomic_load_n(&e->lost, __ATOMIC_SEQ_CST) || e->state != S_HELD;
            if (!gone && e->seen != now && e->touched < now)
                gone = !(my_pidns != PROC_PID_INIT_INO && e->cls == WLP_CLASS_FLOCK &&
                         probe_held(e));
            if (gone) {
                remove_entry(e); /* releases a held lock */
                changed = 1;
            } else if (e->seen != now) {
                __atomic_store_n(&dirty, 1, __ATOMIC_SEQ_CST); /* kept by the epoch rule or the probe */
            }
        }
    }
    if (changed || groups_stale) {
        groups_rebuild();
        groups_stale = 0;
    }
    pthread_mutex_unlock(&mu);
}

/* The tick thread sleeps TICK_MS, longer with many entries (the scan's
 * cost grows with them: 20 ms per 250 entries), and is woken at once by a
 * shim's hint (an unlock or close of a managed fd), a connection's end, or
 * the death of a process that was connected (its pidfd: see watch_pid). It
 * sleeps in poll(2) on an eventfd (the pokes) and those pidfds. */
static pthread_mutex_t tick_mu = PTHREAD_MUTEX_INITIALIZER;
static int tick_efd = -1;

/* pidfds of the processes that connected, and of the children they forked
 * ('P'), until they exit (tick_mu). A process being killed puts its files
 * in reverse order of their numbers, the connection (a high one) before the
 * locked files, so the connection's end alone can come before its locks
 * have gone; the pidfd turns readable only when the process is gone, locks
 * and all. When the list is full the oldest goes (its death then waits for
 * the backstop tick, or its connection's end). */
#define WATCH_MAX 1024
static int watched[WATCH_MAX];
static int nwatched;

static int poked; /* atomic: a scan is asked for (else the wake-up only renews the poll list) */

static void poke_tick(void)
{
    __atomic_store_n(&poked, 1, __ATOMIC_SEQ_CST);
    uint64_t one = 1;
    ssize_t w = write(tick_efd, &one, sizeof one);
    (void)w; /* EAGAIN: the counter is already non-zero, a wake-up is pending */
}

static void watch_pid(int pidfd)
{
    pthread_mutex_lock(&tick_mu);
    if (nwatched == WATCH_MAX) {
        close(watched[0]);
        memmove(watched, watched + 1, (WATCH_MAX - 1) * sizeof watched[0]);
        nwatched--;
    }
    watched[nwatched++] = pidfd;
    pthread_mutex_unlock(&tick_mu);
    uint64_t one = 1; /* the tick thread polls the new list */
    ssize_t w = write(tick_efd, &one, sizeof one);
    (void)w;
}

/* 'P': a process forked by a connected one (the shim's atfork handler): it
 * shares the parent's descriptions, so its exit may end their locks. */
static void watch_forked(long pid)
{
    if (pid <= 0)
        return;
#ifdef SYS_pidfd_open
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd >= 0) {
        fcntl(pidfd, F_SETFD, FD_CLOEXEC);
        watch_pid(pidfd);
    }
#endif
}

static void tick_sleep(void)
{
    pthread_mutex_lock(&mu);
    size_t n = nentries;
    pthread_mutex_unlock(&mu);
    int64_t ms = TICK_MS * (n > 250 ? (int64_t)(n / 250) : 1);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t until = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + ms;
    static struct pollfd pfd[1 + WATCH_MAX];
    for (;;) {
        pthread_mutex_lock(&tick_mu);
        int np = 1 + nwatched;
        pfd[0] = (struct pollfd){.fd = tick_efd, .events = POLLIN};
        for (int i = 0; i < nwatched; i++)
            pfd[1 + i] = (struct pollfd){.fd = watched[i], .events = POLLIN};
        pthread_mutex_unlock(&tick_mu);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t left = until - ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        int rc = poll(pfd, (nfds_t)np, left > 0 ? (int)left : 0);
        if (rc <= 0) {
            if (rc < 0 && errno == EINTR)
                continue;
            return; /* the backstop tick */
        }
        int woke = 0;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(tick_efd, &v, sizeof v);
            (void)r;
            woke = __atomic_exchange_n(&poked, 0, __ATOMIC_SEQ_CST);
        }
        pthread_mutex_lock(&tick_mu);
        for (int i = 1; i < np; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            for (int j = 0; j < nwatched; j++) /* gone: its locks went with it */
                if (watched[j] == pfd[i].fd) {
                    close(watched[j]);
                    watched[j] = watched[--nwatched];
                    woke = 1;
                    break;
                }
        }
        pthread_mutex_unlock(&tick_mu);
        if (woke) {
            __atomic_store_n(&dirty, 1, __ATOMIC_SEQ_CST);
            return;
        }
    }
}

/* ---- one shim connection ---- */

struct conn {
    int fd;
    pid_t pid; /* SO_PEERCRED */
};

/* A cancel for `id` (or the connection's end) waiting on the socket? Consumes cancels. */
static int cancelled(struct conn *c, uint64_t id)
{
    for (;;) {
        char buf[WLP_MSG_MAX + 1];
        ssize_t n = recv(c->fd, buf, sizeof buf - 1, MSG_DONTWAIT | MSG_PEEK);
        if (n == 0)
            return 1; /* EOF: the locker is gone */
        if (n < 0)
            return errno != EAGAIN && errno != EINTR;
        struct wlp_request r;
        if (wlp_request_parse(buf, (size_t)n, &r) != 0 || r.op == 'L')
            return 0; /* a new request: this one was given up (the shim sends one at a time) */
        n = recv(c->fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        (void)n;
        if (r.op == 'P') /* a forked child's, on the socket it inherited */
            watch_forked(r.pid);
        else if (r.op == 'U')
            poke_tick();
        else if (r.id == id)
            return 1;
    }
}

static int lease_and_signal(const struct wlp_request *r, int64_t *lease, int *sig, char *err,
                            size_t errsize)
{
    *lease = 30000;
    if (r->lease[0] != '\0' && watchlock_parse_duration(lease, r->lease) != 0) {
        snprintf(err, errsize, "CONFIG WATCHLOCK_PRELOAD_LEASE: %s", watchlock_last_error());
        return -1;
    }
    *sig = r->signal[0] != '\0' ? wlp_signal_parse(r->signal) : default_signal;
    if (*sig < 0) {
        snprintf(err, errsize, "CONFIG WATCHLOCK_PRELOAD_SIGNAL: unknown signal '%s'", r->signal);
        return -1;
    }
    return 0;
}

/* Serves one lock request; writes the reply. */
static void serve(struct conn *c, struct wlp_request *r, char *reply, size_t rsize)
{
    int want = r->exclusive ? M_EXCL : M_SHARED;
    int64_t lease;
    int sig;
    char err[300];
    if (lease_and_signal(r, &lease, &sig, err, sizeof err) != 0) {
        snprintf(reply, rsize, "ERR %" PRIu64 " %s", r->id, err);
        return;
    }
    /* The client, opened by the first request (client_mu: two first requests at once) */
    static pthread_mutex_t client_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&client_mu);
    if (client == NULL) {
        const char *url = getenv(WLP_ENV_URL);
        watchlock_client *opened = NULL;
        int rc = watchlock_client_open(&opened, url != NULL && url[0] != '\0' ? url : NULL);
        if (rc != 0) {
            pthread_mutex_unlock(&client_mu);
            err_reply(reply, rsize, r->id, rc, "WATCHLOCK_URL");
            return;
        }
        client = opened;
    }
    pthread_mutex_unlock(&client_mu);
    char name[WLP_PATH_MAX + 600];
    if (wlp_class_name(name, sizeof name, r->name, r->cls) < 0) {
        snprintf(reply, rsize, "ERR %" PRIu64 " CONFIG the lock name is too long", r->id);
        return;
    }
    pthread_mutex_lock(&mu);
    struct entry *e = lookup(r->dev, r->ino, r->cls);
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL || (e->name = strdup(name)) == NULL || (e->path = strdup(r->path)) == NULL) {
            if (e != NULL)
                free(e->name);
            free(e);
            pthread_mutex_unlock(&mu);
            snprintf(reply, rsize, "ERR %" PRIu64 " OTHER out of memory", r->id);
            return;
        }
        e->dev = r->dev;
        e->ino = r->ino;
        e->cls = r->cls;
        e->probe_fd = -1;
        e->lease = lease;
        e->signal = sig;
        if (my_pidns != PROC_PID_INIT_INO && r->cls == WLP_CLASS_FLOCK) {
            char p[64];
            snprintf(p, sizeof p, "/proc/%ld/fd/%d", r->pid, r->fd);
            e->probe_fd = open(p, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        }
        size_t b = bucket_of(e->dev, e->ino, e->cls);
        e->next = table[b];
        table[b] = e;
        nentries++;
    }
    e->touched = epoch;
    __atomic_store_n(&dirty, 1, __ATOMIC_SEQ_CST);
    if (want == M_EXCL && !r->relock && e->mode == M_EXCL && e->state == S_HELD && !e->driver) {
        /* A new exclusive kernel lock (not the kernel's no-op re-lock of one
         * held): the previous one is gone (the kernel just granted ours), so
         * a new hold - a fresh fencing token, behind any remote waiter. But
         * only if the kernel still shows ours: an abandoned request that
         * arrives late must not end a later holder's hold (issue 33.2). */
        long kid;
        int km = requester_mode(r, &kid);
        if (km >= 0 && km != want) {
            snprintf(reply, rsize, "GONE %" PRIu64, r->id);
            goto out;
        }
        end_hold(e);
    }
    if (r->wait)
        e->wanted++;
    for (;;) {
        if (__atomic_load_n(&e->lost, __ATOMIC_SEQ_CST) && !e->driver) {
            /* lost: the next request starts over */
            drop_handles(e);
            e->state = S_IDLE;
            e->gen++;
            for (int i = 0; i < MAX_PGIDS; i++)
                __atomic_store_n(&e->pgids[i], 0, __ATOMIC_RELAXED);
            __atomic_store_n(&e->lost, 0, __ATOMIC_SEQ_CST);
        }
        if (e->mode == want && e->state == S_HELD) {
            snprintf(reply, rsize, "OK %" PRIu64 " %" PRId64, r->id,
                     watchlock_lock_fencing_token(e->handle[want]));
            add_pgid(e, r->pgid); /* told if this hold is lost */
            group_add((int)r->pgid);
            break;
        }
        if (e->mode != want && e->state != S_IDLE) {
            /* A conversion, or the other mode's locks are gone (the kernel
             * granted ours): end the old hold first. */
            long now_kid;
            int now_km = requester_mode(r, &now_kid);
            if (now_km >= 0 && now_km != want) {
                snprintf(reply, rsize, "GONE %" PRIu64, r->id); /* given up meanwhile */
                break;
            }
            if (e->driver) {
                e->abort = 1;
                pthread_cond_wait(&cv, &mu);
                continue;
            }
            end_hold(e);
        }
        e->mode = want;
        if (e->driver) {
            if (!r->wait) {
                snprintf(reply, rsize, "BUSY %" PRIu64, r->id);
                break;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&cv, &mu, &ts);
            pthread_mutex_unlock(&mu);
            int gave_up = cancelled(c, r->id);
            pthread_mutex_lock(&mu);
            if (gave_up) {
                snprintf(reply, rsize, "CANCELLED %" PRIu64, r->id);
                break;
            }
            continue;
        }
        watchlock_lock *h;
        int rc = handle_for(e, want, &h);
        if (rc != 0) {
            err_reply(reply, rsize, r->id, rc, "lock");
            break;
        }
        e->driver = 1;
        e->abort = 0;
        e->state = S_ACQUIRING;
        unsigned gen = e->gen;
        pthread_mutex_unlock(&mu);
        rc = watchlock_lock_acquire(h, r->wait ? 50 : 0);
        pthread_mutex_lock(&mu);
        e->driver = 0;
        pthread_cond_broadcast(&cv);
        if (e->abort || e->gen != gen) {
            if (rc == 0)
                watchlock_lock_release(h);
            else if (rc == WATCHLOCK_ETIMEDOUT)
                watchlock_lock_forget_wait(h);
            e->state = S_IDLE;
            e->abort = 0;
            continue;
        }
        if (rc == 0) {
            e->state = S_HELD;
            e->touched = epoch;
            continue;
        }
        if (rc == WATCHLOCK_ETIMEDOUT && r->wait) {
            pthread_mutex_unlock(&mu);
            int gave_up = cancelled(c, r->id);
            pthread_mutex_lock(&mu);
            if (!gave_up)
                continue;
            if (e->wanted <= 1 && !e->driver && e->state == S_ACQUIRING) {
                watchlock_lock_forget_wait(h);
                e->state = S_IDLE;
            }
            snprintf(reply, rsize, "CANCELLED %" PRIu64, r->id);
            break;
        }
        if (e->state == S_ACQUIRING)
            e->state = S_IDLE;
        if (rc == WATCHLOCK_ETIMEDOUT)
            snprintf(reply, rsize, "BUSY %" PRIu64, r->id);
        else
            err_reply(reply, rsize, r->id, rc, "acquire");
        break;
    }
    if (r->wait)
        e->wanted--;
out:
    if (e->state == S_IDLE && !e->driver && e->wanted == 0)
        remove_entry(e);
    __atomic_store_n(&dirty, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    char buf[WLP_MSG_MAX + 1], reply[1024];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        struct wlp_request r;
        if (wlp_request_parse(buf, (size_t)n, &r) != 0)
            break;
        if (r.op == 'U') {
            poke_tick(); /* a managed lock was unlocked or closed: scan now */
            continue;
        }
        if (r.op == 'C')
            continue; /* a cancel for a request already answered */
        if (r.op == 'P') {
            watch_forked(r.pid);
            continue;
        }
        serve(c, &r, reply, sizeof reply);
        if (strncmp(reply, "CANCELLED", 9) == 0)
            continue; /* nobody waits for it */
        if (send(c->fd, reply, strlen(reply), MSG_NOSIGNAL) < 0 && errno != EINTR)
            break;
    }
    close(c->fd);
    free(c);
    pthread_mutex_lock(&mu);
    nconns--;
    pthread_mutex_unlock(&mu);
    poke_tick(); /* the process exited (or exec'd): its locks may have gone with it */
    return NULL;
}

static void *tick_main(void *arg)
{
    (void)arg;
    int64_t idle_since = -1;
    for (;;) {
        tick_sleep();
        tick();
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        pthread_mutex_lock(&mu);
        int idle = nentries == 0 && nconns == 0;
        if (!idle) {
            idle_since = -1;
        } else if (idle_since < 0) {
            idle_since = ms;
        } else if (ms - idle_since >= WLP_IDLE_MS) {
            /* The accept loop closes the socket: a shim that connects later starts a new keeper. */
            __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        pthread_mutex_unlock(&mu);
    }
}

/* ---- start-up ---- */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/* A pidfd of the connected process: SO_PEERPIDFD (the process that
 * connected, whatever happened to its pid since), else pidfd_open(2) of the
 * SO_PEERCRED pid (Linux 5.3; the peer is blocked in connect() or just past
 * it, so the pid is still its own), else -1 (ENOSYS: the backstop tick
 * alone, as before). */
static int peer_pidfd(int fd, pid_t pid)
{
    int pidfd = -1;
    socklen_t len = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0)
        return pidfd;
#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd >= 0)
        fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    return pidfd;
#else
    (void)pid;
    return -1;
#endif
}

static void close_other_fds(int keep_stderr, int keep)
{
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (!keep_stderr)
            dup2(null, 2);
        if (null > 2 && null != keep)
            close(null);
    }
    for (int fd = 3; fd < 3 + 1; fd++)
        if (fd != keep)
            close(fd);
    if (close_range((unsigned)keep + 1, ~0U, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = keep + 1; fd < (max > 0 ? max : 65536); fd++)
            close((int)fd);
    }
}

/*
 * The guardian: the keeper's parent after the detach. It only waits for the
 * keeper; if the keeper dies by a signal (SIGKILL, a crash), the host's
 * locks are lost: it tells the process groups that held them (the shared
 * `groups` list) and logs. A keeper that exits normally holds nothing.
 */
static void guardian(pid_t keeper, int sig)
{
    int st;
    while (waitpid(keeper, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFSIGNALED(st))
        _exit(0);
    int told = 0;
    for (int i = 0; i < MAX_GROUPS; i++) {
        int g = __atomic_load_n(&groups[i], __ATOMIC_RELAXED);
        if (g > 0 && sig > 0 && kill(-g, sig) == 0)
            told++;
    }
    log_line("the keeper %d died (%s) holding the host's locks: they are lost; %s sent to %d "
             "process group(s); the next lock call starts a new keeper",
             (int)keeper, strsignal(WTERMSIG(st)), sig > 0 ? strsignal(sig) : "no signal", told);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "watchlock-keeper: started by libwatchlock_preload.so only\n");
        return 64;
    }
    const char *logdest = getenv(WLP_ENV_LOG);
    close_other_fds(logdest != NULL && strcmp(logdest, "stderr") == 0, 3);
    signal(SIGPIPE, SIG_IGN);
    default_signal = wlp_signal_parse(getenv(WLP_ENV_SIGNAL));
    if (default_signal < 0)
        default_signal = SIGTERM;
    groups = mmap(NULL, MAX_GROUPS * sizeof *groups, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (groups == MAP_FAILED)
        groups = NULL;
    /* detach: the intermediate exits at once (the shim reaps it) */
    pid_t p = fork();
    if (p != 0)
        _exit(p < 0);
    setsid();
    int gate[2]; /* the keeper -> guardian: started */
    if (pipe2(gate, O_CLOEXEC) != 0)
        _exit(1);
    p = fork();
    if (p < 0)
        _exit(1);
    if (p > 0) {
        close(3);
        close(gate[1]);
        char ch;
        if (read(gate[0], &ch, 1) != 1)
            _exit(0); /* the keeper lost the election or failed: nothing to guard */
        close(gate[0]);
        guardian(p, default_signal);
    }
    close(gate[0]);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct stat st;
    my_pidns = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
    my_uid = getuid();
    gethostname(host, sizeof host - 1);

    tick_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (tick_efd < 0)
        return 1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t nl = strlen(argv[1]);
    if (nl + 1 > sizeof sa.sun_path)
        return 1;
    memcpy(sa.sun_path + 1, argv[1], nl);
    listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (listen_fd < 0 ||
        bind(listen_fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl)) != 0 ||
        listen(listen_fd, 128) != 0)
        return 0; /* EADDRINUSE: another keeper won the election */
    ssize_t w = write(gate[1], "k", 1);
    (void)w;
    close(gate[1]);
    close(3); /* the shim's ready pipe: we listen */

    sigset_t set;
    sigfillset(&set);
    sigdelset(&set, SIGSEGV);
    sigdelset(&set, SIGBUS);
    sigdelset(&set, SIGFPE);
    sigdelset(&set, SIGILL);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* every thread: no signal handlers anywhere */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t t;
    if (pthread_create(&t, NULL, tick_main, NULL) != 0)
        return 1;
    while (!__atomic_load_n(&stopping, __ATOMIC_SEQ_CST)) {
        struct pollfd pfd = {.fd = listen_fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        struct ucred cred;
        socklen_t cl = sizeof cred;
        struct conn *c = malloc(sizeof *c);
        if (c == NULL || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
            cred.uid != my_uid) {
            free(c);
            close(fd); /* another user's process: it has its own keeper */
            continue;
        }
        c->fd = fd;
        c->pid = cred.pid;
        int pidfd = peer_pidfd(fd, cred.pid);
        if (pidfd >= 0)
            watch_pid(pidfd); /* its death wakes the tick */
        pthread_mutex_lock(&mu);
        nconns++;
        pthread_mutex_unlock(&mu);
        pthread_t ct;
        if (pthread_create(&ct, &attr, conn_main, c) != 0) {
            pthread_mutex_lock(&mu);
            nconns--;
            pthread_mutex_unlock(&mu);
            close(fd);
            free(c);
        }
    }
    /* idle: nothing held, nobody connected; closing the socket frees its name */
    close(listen_fd);
    pthread_join(t, NULL);
    _exit(0);
}
