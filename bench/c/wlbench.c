/*
 * wlbench - the C side of the watchlock benchmarks (driven by bench/bench.py).
 *
 *   wlbench ping     HOST PORT N MAX_S          hiredis PING loop (the C floor)
 *   wlbench cycle    URL N MAX_S [NAME_LEN]     uncontended acquire + release (a name of
 *                                               NAME_LEN bytes, default 25-30)
 *   wlbench cycle    URL N MAX_S --names A,B,.. the same, one handle per name, taken in
 *                                               turn (names whose Cluster slots are on
 *                                               different masters)
 *   wlbench multi    URL N MAX_S NAMES [--names A,B,..]
 *                                               the plain lock's cycle and a multi-lock's over
 *                                               NAMES names, interleaved: the ratio; --names:
 *                                               those names (Cluster: one per master)
 *   wlbench threads  URL THREADS N MAX_S        THREADS threads share one client, each
 *                                               cycling its own lock; total cycles/s
 *   wlbench handoff  URL SHM ID HOLD_US POLITE  one of the contending processes
 *   wlbench relay    URL SHM ID HOLD_US POLITE  the same with a minimal fair lock in raw
 *                                               hiredis (no watchlock): the hand-off floor of
 *                                               this machine; WLBENCH_RELAY_THREADS 1 or 2
 *   wlbench watchdog URL HOST PORT LOCKS LEASE_MS HOLD_S [--probe N] [--sample-ms MS]
 *                                               one client holding many locks: renewals,
 *                                               the smallest remaining lease seen, RSS;
 *                                               --probe: then N timed acquire + release
 *                                               cycles of one more lock while they are held
 *                                               HOST PORT: the server for INFO and SCAN;
 *                                               under Cluster HOST = h1:p1,h2:p2,... (every
 *                                               master) and PORT = 0
 *   wlbench rwmix    URL SHM ID HOLD_US WRITE   one reader (WRITE 0) or the writer (1) of
 *                                               the read-write mixed workload
 *
 * URL may be several URLs separated by spaces: a Redlock quorum
 * (watchlock_client_open_quorum). WLBENCH_KIND (environment) picks the
 * kind of the handles of cycle, handoff and watchdog: plain (default), fair,
 * sem (a semaphore of WLBENCH_PERMITS permits, default 1), read, write. A
 * kind this checkout's library does not have yet (issues 21-23, merged from
 * other branches) makes wlbench exit 3 with the reason on stderr.
 *
 * Every mode prints one JSON object on stdout and exits 0, or prints the
 * failing call on stderr and exits 1. The shared-memory layout used by
 * `handoff` is described in bench/handoff_shm.md and is the same for the C,
 * Python and Java workers, so all of them are timed the same way: the holder
 * writes CLOCK_MONOTONIC just before it releases, the next holder reads it
 * right after its acquire returns.
 */
#define _GNU_SOURCE
#include "watchlock.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static int64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int fail(const char *what, int status)
{
    fprintf(stderr, "wlbench: %s: %s (%s)\n", what, watchlock_strerror(status),
            watchlock_last_error());
    return 1;
}

static long rss_bytes(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static int64_t process_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
           (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
}

/* Script calls (EVAL + EVALSHA) the server has run so far, from INFO
 * commandstats; -1 on failure. Counts the renewal commands the watchdog sent
 * during the hold (every renewal is one script call). */
static long long server_script_calls(redisContext *c)
{
    static const char *const keys[] = {"cmdstat_eval:calls=", "cmdstat_evalsha:calls="};
    redisReply *r = redisCommand(c, "INFO commandstats");
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        n = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const char *p = strstr(r->str, keys[i]);
            if (p != NULL)
                n += atoll(p + strlen(keys[i]));
        }
    }
    freeReplyObject(r);
    return n;
}

/* The servers wlbench watchdog asks for INFO and SCAN: one (HOST PORT), or
 * under Cluster every master (HOST = "h1:p1,h2:p2,...", PORT = 0). */
struct admin {
    char addr[96];
    redisContext *c;
    long long script_calls; /* during the hold */
    long lock_keys;         /* this run's lock keys found on it at the end of the hold */
};

static int admin_connect(struct admin *a, const char *host, size_t host_len, int port)
{
    if (host_len == 0 || host_len >= 64 || port <= 0) {
        fprintf(stderr, "wlbench: bad server address '%.*s:%d'\n", (int)host_len, host, port);
        return 1;
    }
    char h[64];
    memcpy(h, host, host_len);
    h[host_len] = '\0';
    snprintf(a->addr, sizeof a->addr, "%s:%d", h, port);
    a->c = redisConnect(h, port);
    if (a->c == NULL || a->c->err) {
        fprintf(stderr, "wlbench: connect %s failed\n", a->addr);
        return 1;
    }
    return 0;
}

static int admin_open(struct admin *out, size_t cap, size_t *n, const char *host, int port)
{
    *n = 0;
    if (port != 0)
        return admin_connect(&out[(*n)++], host, strlen(host), port);
    for (const char *p = host; *p != '\0';) {
        size_t len = strcspn(p, ",");
        const char *colon = NULL;
        for (const char *q = p; q < p + len; q++)
            if (*q == ':')
                colon = q;
        if (colon == NULL || *n == cap) {
            fprintf(stderr, "wlbench: servers: expected at most %zu HOST:PORT\n", cap);
            return 1;
        }
        if (admin_connect(&out[(*n)++], p, (size_t)(colon - p), atoi(colon + 1)) != 0)
            return 1;
        p += len + (p[len] == ',');
    }
    return *n == 0;
}

/* Counts the lock keys of `bench:watchdog:I` (I < n) on one server with
 * SCAN (the pattern matches only lock keys: ':fence' and ':owner' keys do
 * not end in '}'). SCAN may return a key twice, so keys are counted once
 * each through `seen` (one byte per lock, shared by all servers). Returns
 * the number of distinct keys found, -1 on error. */
static long count_lock_keys(redisContext *c, long n, unsigned char *seen)
{
    static const char prefix[] = "watchlock:{bench:watchdog:";
    char cursor[32] = "0";
    long found = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s*} COUNT 1000", cursor, prefix);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *k = r->element[1]->element[i];
            char *end = NULL;
            if (k->type != REDIS_REPLY_STRING || k->len <= sizeof prefix)
                continue;
            long idx = strtol(k->str + sizeof prefix - 1, &end, 10);
            if (end == NULL || *end != '}' || idx < 0 || idx >= n || seen[idx])
                continue; /* the probe, another run's name, or a duplicate */
            seen[idx] = 1;
            found++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return found;
}

static int cmp_double(const void *a, const void *b);

/* ---- clients and handles of every kind ----------------------------------- */

/* Returned by open_client / new_lock besides watchlock statuses (which are
 * >= 0); fail_open turns them into the exit statuses 3 and 2. */
#define WLBENCH_UNSUPPORTED (-3) /* not in this checkout's library */
#define WLBENCH_USAGE (-2)

static int unsupported(const char *what)
{
    fprintf(stderr, "wlbench: %s is not in this checkout's library yet\n", what);
    return WLBENCH_UNSUPPORTED;
}

/* A library whose header declares a kind but whose engine has not landed
 * answers EINVAL "... not implemented ...": the same as not having it. */
static int not_implemented(int rc, const char *what)
{
    if (rc == WATCHLOCK_EINVAL && watchlock_last_error() != NULL &&
        strstr(watchlock_last_error(), "not implemented") != NULL)
        return unsupported(what);
    return rc;
}

/* One URL: a plain client; several separated by spaces: a quorum. Returns
 * a watchlock status, or WLBENCH_UNSUPPORTED (reported) without quorums. */
static int open_client(watchlock_client **out, const char *urls)
{
    if (strchr(urls, ' ') == NULL)
        return watchlock_client_open(out, urls);
#ifdef WLBENCH_HAVE_QUORUM
    char *copy = strdup(urls);
    const char *list[16];
    size_t n = 0;
    if (copy == NULL)
        return WATCHLOCK_ENOMEM;
    for (char *save = NULL, *tok = strtok_r(copy, " ", &save); tok != NULL && n < 16;
         tok = strtok_r(NULL, " ", &save))
        list[n++] = tok;
    int rc = watchlock_client_open_quorum(out, list, n);
    free(copy);
    return not_implemented(rc, "watchlock_client_open_quorum");
#else
    (void)out;
    return unsupported("watchlock_client_open_quorum");
#endif
}

static int new_lock_kind(watchlock_lock **out, watchlock_client *client, const char *name, size_t len);

/* A handle of the kind WLBENCH_KIND names (see the top of this file). */
static int new_lock(watchlock_lock **out, watchlock_client *client, const char *name, size_t len)
{
    const char *kind = getenv("WLBENCH_KIND");
    return not_implemented(new_lock_kind(out, client, name, len), kind ? kind : "plain");
}

static int new_lock_kind(watchlock_lock **out, watchlock_client *client, const char *name, size_t len)
{
    const char *kind = getenv("WLBENCH_KIND");
    if (kind == NULL || *kind == '\0' || strcmp(kind, "plain") == 0)
        return watchlock_lock_new(out, client, name, len);
    if (strcmp(kind, "fair") == 0) {
#ifdef WLBENCH_HAVE_FAIR
        return watchlock_fair_lock_new(out, client, name, len);
#else
        return unsupported("watchlock_fair_lock_new");
#endif
    }
    if (strcmp(kind, "sem") == 0) {
#ifdef WLBENCH_HAVE_SEMAPHORE
        const char *permits = getenv("WLBENCH_PERMITS");
        return watchlock_semaphore_new(out, client, name, len, permits ? atoll(permits) : 1);
#else
        return unsupported("watchlock_semaphore_new");
#endif
    }
    if (strcmp(kind, "read") == 0 || strcmp(kind, "write") == 0) {
#ifdef WLBENCH_HAVE_RWLOCK
        return watchlock_rwlock_new(out, client, name, len, kind[0] == 'w');
#else
        return unsupported("watchlock_rwlock_new");
#endif
    }
    fprintf(stderr, "wlbench: WLBENCH_KIND=%s: expected plain, fair, sem, read or write\n", kind);
    return WLBENCH_USAGE;
}

/* fail() for open_client / new_lock: keeps WLBENCH_UNSUPPORTED and usage. */
static int fail_open(const char *what, int rc)
{
    if (rc < 0)
        return -rc;
    return fail(what, rc);
}

/* ---- ping: the floor for C, one hiredis round trip per PING ------------- */

static int cmd_ping(const char *host, int port, long n, double max_s)
{
    redisContext *c = redisConnect(host, port);
    if (c == NULL || c->err) {
        fprintf(stderr, "wlbench: connect %s:%d: %s\n", host, port, c ? c->errstr : "oom");
        return 1;
    }
    for (int i = 0; i < 100; i++) /* warm-up */
        freeReplyObject(redisCommand(c, "PING"));
    int64_t t0 = now_ns(), limit = t0 + (int64_t)(max_s * 1e9);
    long done = 0;
    while (done < n) {
        redisReply *r = redisCommand(c, "PING");
        if (r == NULL || r->type != REDIS_REPLY_STATUS) {
            fprintf(stderr, "wlbench: PING failed: %s\n", c->errstr);
            return 1;
        }
        freeReplyObject(r);
        done++;
        if ((done & 63) == 0 && now_ns() > limit)
            break;
    }
    int64_t t1 = now_ns();
    printf("{\"ops\": %ld, \"seconds\": %.6f}\n", done, (double)(t1 - t0) / 1e9);
    redisFree(c);
    return 0;
}

/* ---- cycle: uncontended acquire + release on one handle ----------------- */

/* A name of exactly `len` bytes (>= 10) unique to this process: "b" and the
 * pid in 9 digits, then 'x's. 0: the classic "bench:cycle:c:PID". */
static char *bench_name(size_t len)
{
    char head[64];
    int n = len == 0 ? snprintf(head, sizeof head, "bench:cycle:c:%d", (int)getpid())
                     : snprintf(head, sizeof head, "b%09d", (int)getpid() % 1000000000);
    if (len < (size_t)n)
        len = (size_t)n;
    char *name = malloc(len + 1);
    if (name == NULL)
        return NULL;
    memset(name, 'x', len);
    memcpy(name, head, (size_t)n);
    name[len] = '\0';
    return name;
}

/* Uncontended acquire + release of `nnames` handles taken in turn (one
 * handle: the classic cycle). Under Cluster, names on different masters
 * send every cycle to a different node than the one before. */
static int cycle_handles(watchlock_lock **locks, size_t nnames, long n, double max_s)
{
    int rc;
    for (int i = 0; i < 100; i++) { /* warm-up: loads the scripts, fills the pool(s) */
        watchlock_lock *lock = locks[(size_t)i % nnames];
        if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire (warm-up)", rc);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release (warm-up)", rc);
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    int64_t cpu0 = process_cpu_us();
    int64_t t0 = now_ns(), limit = t0 + (int64_t)(max_s * 1e9);
    long done = 0;
    size_t next = 0;
    while (done < n) {
        watchlock_lock *lock = locks[next];
        next = next + 1 == nnames ? 0 : next + 1;
        if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release", rc);
        done++;
        if ((done & 63) == 0 && now_ns() > limit)
            break;
    }
    int64_t t1 = now_ns();
    int64_t cpu = process_cpu_us() - cpu0;
    getrusage(RUSAGE_SELF, &ru1);
    /* The client's own CPU time and context switches: with client and
     * server on one core, what a cycle costs besides the servers' CPU. */
    printf("{\"ops\": %ld, \"seconds\": %.6f, \"names\": %zu, \"cpu_us\": %" PRId64
           ", \"voluntary_switches\": %ld, \"involuntary_switches\": %ld}\n",
           done, (double)(t1 - t0) / 1e9, nnames, cpu, ru1.ru_nvcsw - ru0.ru_nvcsw,
           ru1.ru_nivcsw - ru0.ru_nivcsw);
    return 0;
}

/* names: NULL for one name of name_len bytes (bench_name), else a
 * comma-separated list. */
static int cmd_cycle(const char *url, long n, double max_s, size_t name_len, const char *names)
{
    watchlock_client *client = NULL;
    watchlock_lock *locks[64];
    size_t nnames = 0;
    int rc = open_client(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail_open("watchlock_client_open", rc);
    if (names == NULL) {
        char *name = bench_name(name_len);
        if (name == NULL)
            return 1;
        rc = new_lock(&locks[nnames++], client, name, strlen(name));
        free(name);
        if (rc != WATCHLOCK_OK)
            return fail_open("watchlock_lock_new", rc);
    } else {
        for (const char *p = names; *p != '\0';) {
            size_t len = strcspn(p, ",");
            if (len == 0 || nnames == sizeof locks / sizeof locks[0]) {
                fprintf(stderr, "wlbench: --names: an empty name or more than 64 names\n");
                return 2;
            }
            if ((rc = new_lock(&locks[nnames++], client, p, len)) != WATCHLOCK_OK)
                return fail_open("watchlock_lock_new", rc);
            p += len + (p[len] == ',');
        }
        if (nnames == 0)
            return 2;
    }
    for (size_t i = 0; i < nnames; i++)
        watchlock_lock_set_lease(locks[i], 10000);
    rc = cycle_handles(locks, nnames, n, max_s);
    for (size_t i = 0; i < nnames; i++)
        watchlock_lock_free(locks[i]);
    watchlock_client_close(client);
    return rc;
}

/* ---- multi: a multi-lock cycle over K names of one slot vs a plain cycle ---- */

/* Cycles (acquire + release) of `lock` until n or `until_ns`; ns per cycle
 * into *ns, cycles done into *done. */
static int time_cycles(watchlock_lock *lock, long n, int64_t until_ns, long *done, int64_t *ns)
{
    int rc;
    int64_t t0 = now_ns();
    long k = 0;
    while (k < n) {
        if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release", rc);
        k++;
        if ((k & 63) == 0 && now_ns() > until_ns)
            break;
    }
    *done += k;
    *ns += now_ns() - t0;
    return 0;
}

/* Issue 23: a multi-lock cycle over k names (all on the one server: one
 * script takes them, one releases them; under Cluster they would share a
 * slot by a common hash tag in the names) against a plain cycle on one
 * name, on one client, in alternating slices so that both see the same
 * machine. Prints both rates and their ratio (multi / plain time per cycle). */
static int cmd_multi(const char *url, long n, double max_s, int k, const char *given)
{
    if (k < 1 || k > 64) {
        fprintf(stderr, "wlbench: multi: 1 to 64 names\n");
        return 2;
    }
    watchlock_client *client = NULL;
    watchlock_lock *plain = NULL, *multi = NULL;
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    char plain_name[64], names_buf[64][64];
    const void *names[64];
    size_t lens[64];
    snprintf(plain_name, sizeof plain_name, "bench:multi:plain:%d", (int)getpid());
    /* given: "A,B,..." (k of them; under Cluster, names whose slots are on
     * different masters: the multi-lock over several slots), else names of
     * this process (one server: one slot, the names' shared hash tag) */
    for (int i = 0; i < k; i++) {
        if (given != NULL) {
            size_t len = strcspn(given, ",");
            if (len == 0 || len >= sizeof names_buf[i]) {
                fprintf(stderr, "wlbench: multi --names: %d names of 1 to 63 bytes\n", k);
                return 2;
            }
            memcpy(names_buf[i], given, len);
            names_buf[i][len] = '\0';
            lens[i] = len;
            given += len + (given[len] == ',');
        } else {
            lens[i] = (size_t)snprintf(names_buf[i], sizeof names_buf[i], "bench:multi:%d:%d", (int)getpid(), i);
        }
        names[i] = names_buf[i];
    }
    if ((rc = watchlock_lock_new(&plain, client, plain_name, strlen(plain_name))) != WATCHLOCK_OK)
        return fail("watchlock_lock_new", rc);
    if ((rc = watchlock_multi_lock_new(&multi, client, names, lens, (size_t)k)) != WATCHLOCK_OK)
        return fail("watchlock_multi_lock_new", rc);
    watchlock_lock_set_lease(plain, 10000);
    watchlock_lock_set_lease(multi, 10000);
    long pd = 0, md = 0;
    int64_t pns = 0, mns = 0;
    /* warm-up: scripts loaded, pools filled, the plain name's counter seeded (fast path) */
    if ((rc = time_cycles(plain, 200, INT64_MAX, &pd, &pns)) != 0 || (rc = time_cycles(multi, 200, INT64_MAX, &md, &mns)))
        return rc;
    pd = md = 0;
    pns = mns = 0;
    const int slices = 8;
    for (int i = 0; i < 2 * slices; i++) {
        int64_t until = now_ns() + (int64_t)(max_s / (2 * slices) * 1e9);
        rc = i % 2 == 0 ? time_cycles(plain, n / slices, until, &pd, &pns) : time_cycles(multi, n / slices, until, &md, &mns);
        if (rc != 0)
            return rc;
    }
    double p_us = pd ? (double)pns / (double)pd / 1e3 : 0, m_us = md ? (double)mns / (double)md / 1e3 : 0;
    printf("{\"names\": %d, \"plain_ops\": %ld, \"plain_us_per_cycle\": %.2f, \"multi_ops\": %ld, "
           "\"multi_us_per_cycle\": %.2f, \"ratio\": %.3f}\n",
           k, pd, p_us, md, m_us, p_us > 0 ? m_us / p_us : 0.0);
    watchlock_lock_free(multi);
    watchlock_lock_free(plain);
    watchlock_client_close(client);
    return 0;
}

/* ---- threads: many threads share one client ------------------------------ */

struct thread_arg {
    watchlock_client *client;
    int id;
    long n;
    long done;
    int rc;
    const char *failed;
};

static atomic_int threads_go, threads_stop, threads_finished;

static void *cycle_thread(void *p)
{
    struct thread_arg *a = p;
    watchlock_lock *lock = NULL;
    char name[64];
    int len = snprintf(name, sizeof name, "bench:threads:%d:%d", (int)getpid(), a->id);
    if ((a->rc = watchlock_lock_new(&lock, a->client, name, (size_t)len)) != WATCHLOCK_OK) {
        a->failed = "watchlock_lock_new";
        return NULL;
    }
    watchlock_lock_set_lease(lock, 10000);
    while (!atomic_load(&threads_go))
        sleep_ns(100000);
    while (a->done < a->n && !atomic_load(&threads_stop)) {
        if ((a->rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK) {
            a->failed = "watchlock_lock_acquire";
            break;
        }
        if ((a->rc = watchlock_lock_release(lock)) != WATCHLOCK_OK) {
            a->failed = "watchlock_lock_release";
            break;
        }
        a->done++;
    }
    watchlock_lock_free(lock);
    atomic_fetch_add(&threads_finished, 1);
    return NULL;
}

static int cmd_threads(const char *url, int nthreads, long n, double max_s)
{
    watchlock_client *client = NULL;
    int rc = open_client(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail_open("watchlock_client_open", rc);
    if (nthreads < 1 || nthreads > 1024)
        return 2;
    struct thread_arg *args = calloc((size_t)nthreads, sizeof *args);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (args == NULL || tids == NULL)
        return 1;
    for (int i = 0; i < nthreads; i++) {
        args[i] = (struct thread_arg){client, i, n, 0, 0, NULL};
        if (pthread_create(&tids[i], NULL, cycle_thread, &args[i]) != 0)
            return 1;
    }
    /* Warm-up: one short round lets every thread connect (the pool grows). */
    sleep_ns(200000000);
    int64_t t0 = now_ns();
    int64_t cpu0 = process_cpu_us();
    atomic_store(&threads_go, 1);
    while (now_ns() - t0 < (int64_t)(max_s * 1e9) && atomic_load(&threads_finished) < nthreads)
        sleep_ns(5000000);
    atomic_store(&threads_stop, 1);
    long total = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        if (args[i].failed != NULL)
            return fail(args[i].failed, args[i].rc);
        total += args[i].done;
    }
    int64_t t1 = now_ns();
    int64_t cpu = process_cpu_us() - cpu0;
    printf("{\"ops\": %ld, \"seconds\": %.6f, \"threads\": %d, \"cpu_us\": %" PRId64 "}\n", total,
           (double)(t1 - t0) / 1e9, nthreads, cpu);
    free(args);
    free(tids);
    watchlock_client_close(client);
    return 0;
}

/* ---- handoff: one of the contending processes ---------------------------- */

/* Slots of the shared file (int64, see bench/handoff_shm.md). */
enum {
    SHM_RELEASE_NS = 0, /* monotonic ns written just before a release; 0 = none yet */
    SHM_TURNS = 1,      /* turns taken so far (written by the holder only) */
    SHM_LAST_HOLDER = 2,/* worker id + 1 of the last holder */
    SHM_STOP_NS = 3,    /* monotonic ns at which workers stop contending */
    SHM_IN_CS = 4,      /* 1 while someone holds the lock (mutual-exclusion check) */
    SHM_VIOLATIONS = 5, /* acquires that found SHM_IN_CS set */
    SHM_START_NS = 6,   /* monotonic ns at which workers start; 0 = not yet */
    SHM_OUT_OF_ORDER = 7, /* grants while an earlier arrival was still waiting */
    SHM_READY = 8,      /* SHM_READY + id: 1 once worker id is connected (id <= 8) */
    SHM_RELEASE_RT_US = 20, /* CLOCK_REALTIME us written just before a release (the C worker's split) */
    SHM_RW_READERS = 32,/* rwmix: readers inside */
    SHM_RW_WRITER = 33, /* rwmix: 1 while the writer is inside */
    SHM_ARRIVAL = 40,   /* SHM_ARRIVAL + id: monotonic ns when worker id called acquire; 0 = not waiting */
    SHM_SLOTS = 64
};

/* The shared slots of a hand-off group (bench/handoff_shm.md), mapped. */
static _Atomic int64_t *shm_map(const char *shm_path)
{
    int fd = open(shm_path, O_RDWR);
    if (fd < 0) {
        perror("wlbench: open shm");
        return NULL;
    }
    _Atomic int64_t *shm = mmap(NULL, SHM_SLOTS * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shm == MAP_FAILED) {
        perror("wlbench: mmap");
        return NULL;
    }
    return shm;
}

/* One contender's record of a hand-off run: each hand-off's latency (the
 * release call's start to acquire() returning in another process) and,
 * where the grant's server time is known, its split at the grant. */
typedef struct handoff_log {
    _Atomic int64_t *shm;
    int id;
    size_t cap, n;
    int64_t *lat, *to_grant, *after_grant;
    long turns, same;
    int64_t arrived;
} handoff_log;

/* Ready, then waits for the group's start: the stop time, or 0 (out of memory). */
static int64_t hl_init(handoff_log *hl, _Atomic int64_t *shm, int id)
{
    memset(hl, 0, sizeof *hl);
    hl->shm = shm;
    hl->id = id;
    hl->cap = 1 << 16;
    hl->lat = malloc(hl->cap * sizeof(int64_t));
    hl->to_grant = malloc(hl->cap * sizeof(int64_t));
    hl->after_grant = malloc(hl->cap * sizeof(int64_t));
    if (hl->lat == NULL || hl->to_grant == NULL || hl->after_grant == NULL)
        return 0;
    atomic_store(&shm[SHM_READY + id], 1);
    while (atomic_load(&shm[SHM_START_NS]) == 0)
        sleep_ns(200000);
    return atomic_load(&shm[SHM_STOP_NS]);
}

/* Another turn before stop? Then about to call acquire: the arrival that
 * orders the grants. */
static bool hl_next(handoff_log *hl, int64_t stop)
{
    hl->arrived = now_ns();
    if (hl->arrived >= stop)
        return false;
    atomic_store(&hl->shm[SHM_ARRIVAL + hl->id], hl->arrived);
    return true;
}

/* acquire() returned at t_acq (CLOCK_REALTIME t_acq_rt; fence_us: the
 * grant's server time, 0 unknown). Checks order and exclusion, records the
 * hand-off; the caller holds, then calls hl_release. 1: out of memory. */
static int hl_acquired(handoff_log *hl, int64_t t_acq, int64_t t_acq_rt, int64_t fence_us, int64_t stop)
{
    _Atomic int64_t *shm = hl->shm;
    atomic_store(&shm[SHM_ARRIVAL + hl->id], 0);
    /* Granted while an earlier arrival still waits: not in arrival order. */
    for (int i = 0; i < 8; i++) {
        int64_t other = atomic_load(&shm[SHM_ARRIVAL + i]);
        if (i != hl->id && other != 0 && other < hl->arrived) {
            atomic_fetch_add(&shm[SHM_OUT_OF_ORDER], 1);
            break;
        }
    }
    if (atomic_exchange(&shm[SHM_IN_CS], 1) != 0)
        atomic_fetch_add(&shm[SHM_VIOLATIONS], 1);
    int64_t rel = atomic_load(&shm[SHM_RELEASE_NS]);
    int64_t prev = atomic_load(&shm[SHM_LAST_HOLDER]);
    if (rel != 0 && t_acq < stop) {
        if (prev != hl->id + 1) {
            if (hl->n == hl->cap) {
                hl->cap *= 2;
                int64_t *g1 = realloc(hl->lat, hl->cap * sizeof(int64_t));
                if (g1 != NULL)
                    hl->lat = g1;
                int64_t *g2 = realloc(hl->to_grant, hl->cap * sizeof(int64_t));
                if (g2 != NULL)
                    hl->to_grant = g2;
                int64_t *g3 = realloc(hl->after_grant, hl->cap * sizeof(int64_t));
                if (g3 != NULL)
                    hl->after_grant = g3;
                if (g1 == NULL || g2 == NULL || g3 == NULL)
                    return 1;
            }
            hl->to_grant[hl->n] = fence_us - atomic_load(&shm[SHM_RELEASE_RT_US]);
            hl->after_grant[hl->n] = t_acq_rt - fence_us;
            hl->lat[hl->n++] = t_acq - rel;
        } else {
            hl->same++;
        }
    }
    hl->turns++;
    return 0;
}

/* Holds hold_us, then marks the release about to be called; returns the
 * turn's number (polite contenders wait for it to move). */
static int64_t hl_hold_and_release(handoff_log *hl, long hold_us)
{
    _Atomic int64_t *shm = hl->shm;
    int64_t my_turn = atomic_fetch_add(&shm[SHM_TURNS], 1) + 1;
    atomic_store(&shm[SHM_LAST_HOLDER], hl->id + 1);
    sleep_ns(hold_us * 1000);
    atomic_store(&shm[SHM_IN_CS], 0);
    atomic_store(&shm[SHM_RELEASE_RT_US], realtime_us());
    atomic_store(&shm[SHM_RELEASE_NS], now_ns());
    return my_turn;
}

/* The run's JSON (with the split at the grant when split) and frees it. */
static void hl_print(handoff_log *hl, bool split)
{
    printf("{\"turns\": %ld, \"same_holder\": %ld, \"handoff_ns\": [", hl->turns, hl->same);
    for (size_t i = 0; i < hl->n; i++)
        printf("%s%" PRId64, i ? "," : "", hl->lat[i]);
    if (split) {
        printf("], \"to_grant_us\": [");
        for (size_t i = 0; i < hl->n; i++)
            printf("%s%" PRId64, i ? "," : "", hl->to_grant[i]);
        printf("], \"after_grant_us\": [");
        for (size_t i = 0; i < hl->n; i++)
            printf("%s%" PRId64, i ? "," : "", hl->after_grant[i]);
    }
    printf("]}\n");
    free(hl->lat);
    free(hl->to_grant);
    free(hl->after_grant);
}

static int cmd_handoff(const char *url, const char *shm_path, int id, long hold_us, int polite)
{
    _Atomic int64_t *shm = shm_map(shm_path);
    if (shm == NULL)
        return 1;
    watchlock_client *client = NULL;
    watchlock_lock *lock = NULL;
    int rc = open_client(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail_open("watchlock_client_open", rc);
    if ((rc = new_lock(&lock, client, "bench:handoff", 13)) != WATCHLOCK_OK)
        return fail_open("watchlock_lock_new", rc);
    watchlock_lock_set_lease(lock, 10000);

    /* Each hand-off split at the grant: its fencing token is the server's
     * clock (us) when the script that granted it ran, the clock the
     * releaser and the acquirer read (one host). to_grant: the release
     * call's start to the grant (the request's way there and the script
     * up to the grant); after_grant: the grant to acquire() returning (the
     * reply or message on its way back, the waiter's threads waking). */
    handoff_log hl;
    int64_t stop = hl_init(&hl, shm, id);
    if (stop == 0)
        return 1;
    while (hl_next(&hl, stop)) {
        if ((rc = watchlock_lock_acquire(lock, 30000)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
        int64_t t_acq = now_ns(), t_acq_rt = realtime_us();
        if (hl_acquired(&hl, t_acq, t_acq_rt, watchlock_lock_fencing_token(lock), stop) != 0)
            return 1;
        int64_t my_turn = hl_hold_and_release(&hl, hold_us);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release", rc);
        /* Polite: let another process take a turn before contending again. */
        while (polite && atomic_load(&shm[SHM_TURNS]) == my_turn && now_ns() < stop)
            sleep_ns(50000);
    }
    hl_print(&hl, true);
    watchlock_lock_free(lock);
    watchlock_client_close(client);
    return 0;
}

/* ---- relay: the hand-off floor of this machine (no watchlock) ---------- */

/* A minimal fair lock in two scripts, raw hiredis, timed like `handoff`:
 * what any queued lock's hand-off costs on this machine with the same
 * contenders, hold and greed, so the kinds' hand-off can be read against
 * it and not only against one idle PING. The acquire takes the name or
 * queues the contender; the release pops the head, makes it the owner and
 * publishes to its own channel (the grant in the wake-up, as qscripts.c
 * does, with none of the queue's bookkeeping: no liveness, purge, fence,
 * TTLs or kinds). WLBENCH_RELAY_THREADS: 1, the contender's one thread
 * reads its subscription itself (the floor of any design); 2, a reader
 * thread reads it and wakes the waiting thread through a condition
 * variable (the structure of watchlock's waiter: its client's subscriber
 * thread, then the waiting thread). */
static const char relay_acquire_lua[] = "if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end\n"
                                        "redis.call('RPUSH', KEYS[2], ARGV[1])\n"
                                        "return 0\n";
static const char relay_release_lua[] = "local h = redis.call('LPOP', KEYS[2])\n"
                                        "if h then\n"
                                        "  redis.call('SET', KEYS[1], h)\n"
                                        "  redis.call('PUBLISH', 'bench:relay:c:' .. h, 'go')\n"
                                        "else redis.call('DEL', KEYS[1]) end\n"
                                        "return 1\n";

typedef struct relay_sub {
    redisContext *c;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    uint64_t gen; /* messages read */
    bool dead;
} relay_sub;

static void *relay_reader(void *arg)
{
    relay_sub *rs = arg;
    for (;;) {
        void *r = NULL;
        int ok = redisGetReply(rs->c, &r);
        pthread_mutex_lock(&rs->mu);
        if (ok != REDIS_OK)
            rs->dead = true;
        else
            rs->gen++;
        pthread_cond_signal(&rs->cond);
        pthread_mutex_unlock(&rs->mu);
        if (r != NULL)
            freeReplyObject(r);
        if (ok != REDIS_OK)
            return NULL;
    }
}

/* host:port of a redis:// URL (the bench's servers: plain TCP). */
static int relay_addr(const char *url, char *host, size_t host_size, int *port)
{
    const char *p = strncmp(url, "redis://", 8) == 0 ? url + 8 : url;
    const char *at = strchr(p, '@');
    if (at != NULL)
        p = at + 1;
    const char *colon = strrchr(p, ':');
    if (colon == NULL || (size_t)(colon - p) >= host_size)
        return 1;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 ? 0 : 1;
}

static redisReply *relay_eval(redisContext *c, const char *sha, const char *me)
{
    return redisCommand(c, "EVALSHA %s 2 bench:relay:owner bench:relay:queue %s", sha, me);
}

static int cmd_relay(const char *url, const char *shm_path, int id, long hold_us, int polite)
{
    const char *th = getenv("WLBENCH_RELAY_THREADS");
    int threads = th != NULL && atoi(th) == 2 ? 2 : 1;
    char host[256];
    int port;
    if (relay_addr(url, host, sizeof host, &port) != 0) {
        fprintf(stderr, "wlbench relay: not host:port: %s\n", url);
        return 1;
    }
    _Atomic int64_t *shm = shm_map(shm_path);
    if (shm == NULL)
        return 1;
    redisContext *c = redisConnect(host, port);
    relay_sub rs = {.c = redisConnect(host, port)};
    if (c == NULL || c->err || rs.c == NULL || rs.c->err) {
        fprintf(stderr, "wlbench relay: connect %s:%d failed\n", host, port);
        return 1;
    }
    char me[32], sha[2][41];
    snprintf(me, sizeof me, "%d-%d", id, (int)getpid());
    const char *bodies[2] = {relay_acquire_lua, relay_release_lua};
    for (int i = 0; i < 2; i++) {
        redisReply *r = redisCommand(c, "SCRIPT LOAD %s", bodies[i]);
        if (r == NULL || r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "wlbench relay: SCRIPT LOAD failed\n");
            return 1;
        }
        snprintf(sha[i], sizeof sha[i], "%s", r->str);
        freeReplyObject(r);
    }
    redisReply *r = redisCommand(rs.c, "SUBSCRIBE bench:relay:c:%s", me);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "wlbench relay: SUBSCRIBE failed\n");
        return 1;
    }
    freeReplyObject(r);
    pthread_t reader;
    pthread_mutex_init(&rs.mu, NULL);
    pthread_cond_init(&rs.cond, NULL);
    if (threads == 2 && pthread_create(&reader, NULL, relay_reader, &rs) != 0)
        return 1;

    handoff_log hl;
    int64_t stop = hl_init(&hl, shm, id);
    if (stop == 0)
        return 1;
    while (hl_next(&hl, stop)) {
        pthread_mutex_lock(&rs.mu);
        uint64_t gen = rs.gen;
        pthread_mutex_unlock(&rs.mu);
        if ((r = relay_eval(c, sha[0], me)) == NULL || r->type != REDIS_REPLY_INTEGER) {
            fprintf(stderr, "wlbench relay: acquire failed\n");
            return 1;
        }
        bool queued = r->integer == 0;
        freeReplyObject(r);
        if (queued && threads == 1) {
            void *m = NULL;
            if (redisGetReply(rs.c, &m) != REDIS_OK) {
                fprintf(stderr, "wlbench relay: subscription lost\n");
                return 1;
            }
            freeReplyObject(m);
        } else if (queued) {
            pthread_mutex_lock(&rs.mu);
            while (rs.gen == gen && !rs.dead)
                pthread_cond_wait(&rs.cond, &rs.mu);
            bool dead = rs.dead;
            pthread_mutex_unlock(&rs.mu);
            if (dead) {
                fprintf(stderr, "wlbench relay: subscription lost\n");
                return 1;
            }
        }
        if (hl_acquired(&hl, now_ns(), realtime_us(), 0, stop) != 0)
            return 1;
        int64_t my_turn = hl_hold_and_release(&hl, hold_us);
        if ((r = relay_eval(c, sha[1], me)) == NULL || r->type != REDIS_REPLY_INTEGER) {
            fprintf(stderr, "wlbench relay: release failed\n");
            return 1;
        }
        freeReplyObject(r);
        while (polite && atomic_load(&shm[SHM_TURNS]) == my_turn && now_ns() < stop)
            sleep_ns(50000);
    }
    hl_print(&hl, false);
    fflush(stdout);
    /* the reader thread blocks in its read: the process ends without
     * joining it (nothing of it is shared any more) */
    _exit(0);
}

/* ---- rwmix: readers and a writer on one read-write lock ------------------ */

/* One process of the mixed workload: a reader (write 0) or the writer takes
 * its side of the read-write lock "bench:rwmix", holds it hold_us, releases
 * and contends again at once, until the shared stop time. Exclusion is
 * checked through the shared slots: readers count themselves in
 * SHM_RW_READERS, the writer sets SHM_RW_WRITER; any overlap of the writer
 * with anyone is a violation. Prints turns and each acquire's wait. */
static int cmd_rwmix(const char *url, const char *shm_path, int id, long hold_us, int write)
{
#ifndef WLBENCH_HAVE_RWLOCK
    (void)url, (void)shm_path, (void)id, (void)hold_us, (void)write;
    return -unsupported("watchlock_rwlock_new");
#else
    int fd = open(shm_path, O_RDWR);
    if (fd < 0) {
        perror("wlbench: open shm");
        return 1;
    }
    _Atomic int64_t *shm =
        mmap(NULL, SHM_SLOTS * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) {
        perror("wlbench: mmap");
        return 1;
    }
    close(fd);
    watchlock_client *client = NULL;
    watchlock_lock *lock = NULL;
    int rc = open_client(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail_open("watchlock_client_open", rc);
    if ((rc = not_implemented(watchlock_rwlock_new(&lock, client, "bench:rwmix", 11, write),
                              "watchlock_rwlock_new")) != WATCHLOCK_OK)
        return fail_open("watchlock_rwlock_new", rc);
    watchlock_lock_set_lease(lock, 10000);
    size_t cap = 1 << 16, n_wait = 0;
    int64_t *waits = malloc(cap * sizeof *waits);
    long turns = 0, timeouts = 0;
    if (waits == NULL)
        return 1;
    atomic_store(&shm[SHM_READY + id], 1);
    while (atomic_load(&shm[SHM_START_NS]) == 0)
        sleep_ns(200000);
    int64_t stop = atomic_load(&shm[SHM_STOP_NS]);
    while (now_ns() < stop) {
        int64_t t0 = now_ns();
        rc = watchlock_lock_acquire(lock, (stop - t0) / 1000000 + 1000);
        if (rc == WATCHLOCK_ETIMEDOUT) {
            timeouts++;
            continue;
        }
        if (rc != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
        /* Every wait counts, also one that ends after the stop time: a
         * starved writer's only wait is the one that lasted the run. */
        if (n_wait == cap) {
            cap *= 2;
            int64_t *grown = realloc(waits, cap * sizeof *waits);
            if (grown == NULL)
                return 1;
            waits = grown;
        }
        waits[n_wait++] = now_ns() - t0;
        if (write) {
            if (atomic_fetch_add(&shm[SHM_RW_WRITER], 1) != 0 || atomic_load(&shm[SHM_RW_READERS]) != 0)
                atomic_fetch_add(&shm[SHM_VIOLATIONS], 1);
        } else {
            atomic_fetch_add(&shm[SHM_RW_READERS], 1);
            if (atomic_load(&shm[SHM_RW_WRITER]) != 0)
                atomic_fetch_add(&shm[SHM_VIOLATIONS], 1);
        }
        turns++;
        sleep_ns(hold_us * 1000);
        atomic_fetch_sub(&shm[write ? SHM_RW_WRITER : SHM_RW_READERS], 1);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release", rc);
    }
    printf("{\"turns\": %ld, \"timeouts\": %ld, \"write\": %d, \"wait_ns\": [", turns, timeouts, write);
    for (size_t i = 0; i < n_wait; i++)
        printf("%s%" PRId64, i ? "," : "", waits[i]);
    printf("]}\n");
    free(waits);
    watchlock_lock_free(lock);
    watchlock_client_close(client);
    return 0;
#endif
}

/* ---- queuecost: what queued waiters cost the releaser -------------------- */

#ifdef WLBENCH_HAVE_FAIR
/* Server-side usec and calls of EVALSHA + EVAL so far (INFO commandstats). */
static int script_usec(redisContext *c, long long *usec, long long *calls)
{
    static const char *const names[] = {"cmdstat_evalsha:", "cmdstat_eval:"};
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return 1;
    }
    *usec = *calls = 0;
    for (size_t i = 0; i < 2; i++) {
        const char *p = strstr(r->str, names[i]);
        if (p == NULL)
            continue;
        const char *u = strstr(p, "usec="), *n = strstr(p, "calls=");
        if (n != NULL)
            *calls += atoll(n + 6);
        if (u != NULL)
            *usec += atoll(u + 5);
    }
    freeReplyObject(r);
    return 0;
}
#endif

/*
 * What a release costs the releaser with `waiters` waiters queued behind it
 * (issue 22: 10,000 should cost no more than 10). Blocking 10,000 real
 * acquires would need 10,000 threads, so the waiters are written into the
 * queue's keys directly, as the acquire script would enqueue them
 * (core/src/proto/qscripts.c: the queue ZSET by arrival number, the
 * liveness ZSET, the "w:<id>" entry), with a liveness of an hour so that no
 * purge removes them. Each cycle: FLUSHDB, the fair lock "bench:queuecost"
 * acquired (an empty queue: granted at once), the waiters queued behind it,
 * then its release timed on the client and on the server (INFO
 * commandstats usec of the scripts around the one call): the release hands
 * the lock to the oldest waiter in the script. The queue must be one
 * shorter afterwards, or the waiters were not the engine's (its data model
 * changed): an error, not a figure.
 */
static int cmd_queuecost(const char *url, const char *host, int port, long waiters, long cycles)
{
#ifndef WLBENCH_HAVE_FAIR
    (void)url, (void)host, (void)port, (void)waiters, (void)cycles;
    return -unsupported("watchlock_fair_lock_new");
#else
    static const char fake_lua[] =
        "local t = redis.call('TIME')\n"
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
        "local n = tonumber(ARGV[1])\n"
        "local seq = redis.call('HINCRBY', KEYS[1], 'seq', n) - n\n"
        "for i = 1, n do\n"
        "  local id = string.format('ffffffff%08x', i)\n"
        "  redis.call('ZADD', KEYS[2], seq + i, id)\n"
        "  redis.call('ZADD', KEYS[3], now + 3600000, id)\n"
        "  redis.call('HSET', KEYS[4], id, 1, 'w:' .. id, 'fake' .. id .. '.1 30000 0 3600000 ' .. now)\n"
        "end\n"
        "return redis.call('ZCARD', KEYS[2])\n";
    static const char name[] = "bench:queuecost";
    const char *keys[] = {"watchlock:{bench:queuecost}", "watchlock:{bench:queuecost}:q:q",
                          "watchlock:{bench:queuecost}:q:l", "watchlock:{bench:queuecost}:q:d"};
    redisContext *admin = redisConnect(host, port);
    if (admin == NULL || admin->err) {
        fprintf(stderr, "wlbench: connect %s:%d failed\n", host, port);
        return 1;
    }
    watchlock_client *client = NULL;
    watchlock_lock *lock = NULL;
    int rc = open_client(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail_open("watchlock_client_open", rc);
    if ((rc = not_implemented(watchlock_fair_lock_new(&lock, client, name, sizeof name - 1),
                              "watchlock_fair_lock_new")) != WATCHLOCK_OK)
        return fail_open("watchlock_fair_lock_new", rc);
    watchlock_lock_set_lease(lock, 30000);
    long warm = 5, total = cycles + warm;
    const char *settle = getenv("WLBENCH_SETTLE_MS");
    int64_t settle_ms = settle ? atoll(settle) : 0;
    double *cl = calloc((size_t)total, sizeof *cl), *sv = calloc((size_t)total, sizeof *sv);
    if (cl == NULL || sv == NULL)
        return 1;
    for (long i = 0; i < total; i++) {
        freeReplyObject(redisCommand(admin, "FLUSHDB"));
        if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire (queuecost)", rc);
        redisReply *r = redisCommand(admin, "EVAL %s 4 %s %s %s %s %ld", fake_lua, keys[0], keys[1], keys[2],
                                     keys[3], waiters);
        if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != waiters) {
            fprintf(stderr, "wlbench: queuing %ld waiters failed: %s\n", waiters,
                    r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
            return 1;
        }
        freeReplyObject(r);
        if (settle_ms > 0) /* let the server's cron finish rehashing what the EVAL just grew */
            sleep_ns(settle_ms * 1000000);
        long long u0, c0, u1, c1;
        if (script_usec(admin, &u0, &c0) != 0)
            return 1;
        int64_t t0 = now_ns();
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release (queuecost)", rc);
        int64_t t1 = now_ns();
        if (script_usec(admin, &u1, &c1) != 0)
            return 1;
        r = redisCommand(admin, "ZCARD %s", keys[1]);
        long long left = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
        if (left != waiters - 1) {
            fprintf(stderr, "wlbench: after the release %lld of %ld waiters are queued, not %ld: the queue's "
                            "data model is not the one this mode writes (core/src/proto/qscripts.c)\n",
                    left, waiters, waiters - 1);
            return 1;
        }
        cl[i] = (double)(t1 - t0) / 1e3;
        sv[i] = c1 > c0 ? (double)(u1 - u0) / (double)(c1 - c0) : 0;
    }
    qsort(cl + warm, (size_t)cycles, sizeof *cl, cmp_double);
    qsort(sv + warm, (size_t)cycles, sizeof *sv, cmp_double);
    printf("{\"waiters\": %ld, \"cycles\": %ld, \"release_us\": %.2f, \"release_us_p90\": %.2f, "
           "\"server_us_per_release\": %.2f}\n",
           waiters, cycles, cl[warm + cycles / 2], cl[warm + cycles * 9 / 10], sv[warm + cycles / 2]);
    free(cl);
    free(sv);
    watchlock_lock_free(lock);
    watchlock_client_close(client);
    redisFree(admin);
    return 0;
#endif
}

/* ---- watchdog: one client holds many locks -------------------------------- */

static atomic_long lost_callbacks;
static atomic_long lost_by_reason[8]; /* WATCHLOCK_LOST_* (the trace's breakdown) */

static void on_lost(watchlock_lock *lock, int reason, void *userdata)
{
    (void)lock;
    (void)userdata;
    atomic_fetch_add(&lost_callbacks, 1);
    atomic_fetch_add(&lost_by_reason[reason >= 0 && reason < 8 ? reason : 0], 1);
}

/* The smallest remaining lease (local deadline, watchlock_lock_remaining_ms)
 * over all held locks right now; -1 when none is held. */
static int64_t min_remaining(watchlock_lock **locks, long n)
{
    int64_t min = -1;
    for (long i = 0; i < n; i++) {
        if (watchlock_lock_state(locks[i]) != WATCHLOCK_HELD)
            continue;
        int64_t r = watchlock_lock_remaining_ms(locks[i]);
        if (min < 0 || r < min)
            min = r;
    }
    return min;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmd_watchdog(const char *url, const char *host, int port, long n, int64_t lease_ms,
                        double hold_s, long probe, int64_t sample_ms)
{
    struct admin admins[16];
    size_t nadmins = 0;
    memset(admins, 0, sizeof admins);
    if (admin_open(admins, sizeof admins / sizeof admins[0], &nadmins, host, port) != 0)
        return 1;
    watchlock_client *client = NULL;
    int rc = open_client(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail_open("watchlock_client_open", rc);
    long rss0 = rss_bytes();
    watchlock_lock **locks = calloc((size_t)n, sizeof *locks);
    if (locks == NULL)
        return 1;
    int64_t t_acq0 = now_ns();
    for (long i = 0; i < n; i++) {
        char name[64];
        int len = snprintf(name, sizeof name, "bench:watchdog:%ld", i);
        if ((rc = new_lock(&locks[i], client, name, (size_t)len)) != WATCHLOCK_OK)
            return fail_open("watchlock_lock_new", rc);
        watchlock_lock_set_lease(locks[i], lease_ms);
        watchlock_lock_set_on_lost(locks[i], on_lost, NULL);
        if ((rc = watchlock_lock_acquire(locks[i], 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
    }
    int64_t t_acq1 = now_ns();
    long rss_held = rss_bytes();
    int64_t rounds0 = watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDS);
    int64_t rtt0 = watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDTRIPS);
    int64_t ren0 = watchlock_client_stat(client, WATCHLOCK_STAT_RENEWALS);
    int64_t cpu0 = watchlock_client_stat(client, WATCHLOCK_STAT_WATCHDOG_CPU_US);
    int64_t pcpu0 = process_cpu_us();
    for (size_t i = 0; i < nadmins; i++)
        admins[i].script_calls = -server_script_calls(admins[i].c);
    int64_t t0 = now_ns();
    long rss_max = rss_held;
    /* Every sample_ms: RSS, and the smallest remaining lease of all held
     * locks (one pass over the handles, no I/O). */
    int64_t min_rem = -1, samples = 0, scan_ns = 0;
    /* WLBENCH_TRACE=1: one line per sample on stderr (how a run degrades). */
    bool trace = getenv("WLBENCH_TRACE") != NULL;
    while (now_ns() - t0 < (int64_t)(hold_s * 1e9)) {
        sleep_ns(sample_ms * 1000000);
        long r = rss_bytes();
        if (r > rss_max)
            rss_max = r;
        int64_t s0 = now_ns();
        int64_t m = min_remaining(locks, n);
        scan_ns += now_ns() - s0;
        samples++;
        if (m >= 0 && (min_rem < 0 || m < min_rem))
            min_rem = m;
        if (trace)
            fprintf(stderr,
                    "trace t=%.2fs held=%" PRId64 " renewals=%" PRId64 " rounds=%" PRId64
                    " min_remaining_ms=%" PRId64 " lost_callbacks=%ld (expired %ld, connection %ld, taken %ld)"
                    " wd_cpu_ms=%" PRId64 "\n",
                    (double)(now_ns() - t0) / 1e9, watchlock_client_stat(client, WATCHLOCK_STAT_HELD_LOCKS),
                    watchlock_client_stat(client, WATCHLOCK_STAT_RENEWALS) - ren0,
                    watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDS) - rounds0, m,
                    atomic_load(&lost_callbacks), atomic_load(&lost_by_reason[WATCHLOCK_LOST_EXPIRED]),
                    atomic_load(&lost_by_reason[WATCHLOCK_LOST_CONNECTION]),
                    atomic_load(&lost_by_reason[WATCHLOCK_LOST_TAKEN]),
                    (watchlock_client_stat(client, WATCHLOCK_STAT_WATCHDOG_CPU_US) - cpu0) / 1000);
    }
    int64_t t1 = now_ns();
    long long cmds = 0;
    for (size_t i = 0; i < nadmins; i++) {
        admins[i].script_calls += server_script_calls(admins[i].c);
        cmds += admins[i].script_calls;
    }
    int64_t rounds = watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDS) - rounds0;
    int64_t rtts = watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDTRIPS) - rtt0;
    int64_t renewals = watchlock_client_stat(client, WATCHLOCK_STAT_RENEWALS) - ren0;
    int64_t cpu = watchlock_client_stat(client, WATCHLOCK_STAT_WATCHDOG_CPU_US) - cpu0;
    int64_t pcpu = process_cpu_us() - pcpu0;
    int64_t held_stat = watchlock_client_stat(client, WATCHLOCK_STAT_HELD_LOCKS);

    /* Where the lock keys are at the end of the hold: each server's share, and
     * keys missing on all of them (a lock lost on the server). */
    long keys_found = 0;
    unsigned char *seen = calloc((size_t)n + 1, 1);
    if (seen == NULL)
        return 1;
    for (size_t i = 0; i < nadmins; i++) {
        admins[i].lock_keys = count_lock_keys(admins[i].c, n, seen);
        if (admins[i].lock_keys < 0) {
            fprintf(stderr, "wlbench: SCAN on %s failed\n", admins[i].addr);
            return 1;
        }
        keys_found += admins[i].lock_keys;
    }
    free(seen);

    /* Probe: acquire + release of one more lock while all are held, timed
     * per call; the median of batches of 50 resists a noisy neighbour. */
    double acq_us = 0, rel_us = 0;
    if (probe > 0) {
        watchlock_lock *pl = NULL;
        if ((rc = watchlock_lock_new(&pl, client, "bench:watchdog:probe", 20)) != WATCHLOCK_OK)
            return fail("watchlock_lock_new (probe)", rc);
        watchlock_lock_set_lease(pl, lease_ms);
        long batches = (probe + 49) / 50;
        double *acq = calloc((size_t)batches, sizeof *acq), *rel = calloc((size_t)batches, sizeof *rel);
        if (acq == NULL || rel == NULL)
            return 1;
        for (int i = 0; i < 20; i++) { /* warm-up */
            if ((rc = watchlock_lock_acquire(pl, 0)) != WATCHLOCK_OK)
                return fail("watchlock_lock_acquire (probe)", rc);
            if ((rc = watchlock_lock_release(pl)) != WATCHLOCK_OK)
                return fail("watchlock_lock_release (probe)", rc);
        }
        for (long b = 0; b < batches; b++) {
            int64_t a_ns = 0, r_ns = 0;
            for (int i = 0; i < 50; i++) {
                int64_t x0 = now_ns();
                if ((rc = watchlock_lock_acquire(pl, 0)) != WATCHLOCK_OK)
                    return fail("watchlock_lock_acquire (probe)", rc);
                int64_t x1 = now_ns();
                if ((rc = watchlock_lock_release(pl)) != WATCHLOCK_OK)
                    return fail("watchlock_lock_release (probe)", rc);
                a_ns += x1 - x0;
                r_ns += now_ns() - x1;
            }
            acq[b] = (double)a_ns / 50 / 1e3;
            rel[b] = (double)r_ns / 50 / 1e3;
        }
        qsort(acq, (size_t)batches, sizeof *acq, cmp_double);
        qsort(rel, (size_t)batches, sizeof *rel, cmp_double);
        acq_us = acq[batches / 2];
        rel_us = rel[batches / 2];
        free(acq);
        free(rel);
        watchlock_lock_free(pl);
    }

    /* Lost = not HELD locally, a lost callback, or a release the server
     * refused (release is token-checked: the key was not ours any more). */
    long lost_local = 0, lost_server = 0, release_fail = 0;
    for (long i = 0; i < n; i++)
        if (watchlock_lock_state(locks[i]) != WATCHLOCK_HELD)
            lost_local++;
    int64_t t_rel0 = now_ns();
    for (long i = 0; i < n; i++) {
        int st = watchlock_lock_release(locks[i]);
        if (st == WATCHLOCK_ENOTOWNER)
            lost_server++;
        else if (st != WATCHLOCK_OK)
            release_fail++;
        watchlock_lock_free(locks[i]);
    }
    int64_t t_rel1 = now_ns();
    printf("{\"locks\": %ld, \"lease_ms\": %" PRId64 ", \"hold_s\": %.3f, "
           "\"acquire_s\": %.3f, \"release_s\": %.3f, \"rss_before\": %ld, \"rss_held\": %ld, "
           "\"rss_max\": %ld, \"renew_rounds\": %" PRId64 ", \"renew_roundtrips\": %" PRId64
           ", \"renewals\": %" PRId64 ", \"watchdog_cpu_us\": %" PRId64
           ", \"process_cpu_us\": %" PRId64 ", \"held_stat\": %" PRId64
           ", \"lost_local\": %ld, \"lost_server\": %ld, \"lost_callbacks\": %ld, "
           "\"release_failures\": %ld, \"server_script_calls\": %lld, "
           "\"min_remaining_ms\": %" PRId64 ", \"samples\": %" PRId64 ", \"sample_ms\": %" PRId64
           ", \"scan_ms_total\": %.1f, \"probe_cycles\": %ld, \"probe_acquire_us\": %.2f, "
           "\"probe_release_us\": %.2f, \"lock_keys\": %ld, \"servers\": [",
           n, lease_ms, (double)(t1 - t0) / 1e9, (double)(t_acq1 - t_acq0) / 1e9,
           (double)(t_rel1 - t_rel0) / 1e9, rss0, rss_held, rss_max, rounds, rtts, renewals, cpu,
           pcpu, held_stat, lost_local, lost_server, atomic_load(&lost_callbacks), release_fail,
           cmds, min_rem, samples, sample_ms, (double)scan_ns / 1e6, probe, acq_us, rel_us,
           keys_found);
    for (size_t i = 0; i < nadmins; i++) {
        printf("%s{\"addr\": \"%s\", \"script_calls\": %lld, \"lock_keys\": %ld}", i ? ", " : "",
               admins[i].addr, admins[i].script_calls, admins[i].lock_keys);
        redisFree(admins[i].c);
    }
    printf("]}\n");
    free(locks);
    watchlock_client_close(client);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: wlbench ping HOST PORT N MAX_S\n"
                    "       wlbench cycle URL N MAX_S [NAME_LEN | --names A,B,...]\n"
                    "       wlbench threads URL THREADS N MAX_S\n"
                    "       wlbench multi URL N MAX_S NAMES [--names A,B,...]\n"
                    "       wlbench handoff URL SHM ID HOLD_US POLITE\n"
                    "       wlbench relay URL SHM ID HOLD_US POLITE   (WLBENCH_RELAY_THREADS=1|2)\n"
                    "       wlbench rwmix URL SHM ID HOLD_US WRITE\n"
                    "       wlbench queuecost URL HOST PORT WAITERS CYCLES\n"
                    "       wlbench watchdog URL HOST PORT LOCKS LEASE_MS HOLD_S [--probe N] "
                    "[--sample-ms MS]\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    if (argc == 6 && strcmp(argv[1], "ping") == 0)
        return cmd_ping(argv[2], atoi(argv[3]), atol(argv[4]), atof(argv[5]));
    if (argc == 7 && strcmp(argv[1], "cycle") == 0 && strcmp(argv[5], "--names") == 0)
        return cmd_cycle(argv[2], atol(argv[3]), atof(argv[4]), 0, argv[6]);
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "cycle") == 0)
        return cmd_cycle(argv[2], atol(argv[3]), atof(argv[4]),
                         argc == 6 ? (size_t)atol(argv[5]) : 0, NULL);
    if (argc == 6 && strcmp(argv[1], "multi") == 0)
        return cmd_multi(argv[2], atol(argv[3]), atof(argv[4]), atoi(argv[5]), NULL);
    if (argc == 8 && strcmp(argv[1], "multi") == 0 && strcmp(argv[6], "--names") == 0)
        return cmd_multi(argv[2], atol(argv[3]), atof(argv[4]), atoi(argv[5]), argv[7]);
    if (argc == 6 && strcmp(argv[1], "threads") == 0)
        return cmd_threads(argv[2], atoi(argv[3]), atol(argv[4]), atof(argv[5]));
    if (argc == 7 && strcmp(argv[1], "handoff") == 0)
        return cmd_handoff(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoi(argv[6]));
    if (argc == 7 && strcmp(argv[1], "relay") == 0)
        return cmd_relay(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoi(argv[6]));
    if (argc == 7 && strcmp(argv[1], "queuecost") == 0)
        return cmd_queuecost(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atol(argv[6]));
    if (argc == 7 && strcmp(argv[1], "rwmix") == 0)
        return cmd_rwmix(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoi(argv[6]));
    if (argc >= 8 && argc % 2 == 0 && strcmp(argv[1], "watchdog") == 0) {
        long probe = 0;
        int64_t sample_ms = 250;
        for (int i = 8; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--probe") == 0)
                probe = atol(argv[i + 1]);
            else if (strcmp(argv[i], "--sample-ms") == 0 && atoll(argv[i + 1]) > 0)
                sample_ms = atoll(argv[i + 1]);
            else {
                usage();
                return 2;
            }
        }
        return cmd_watchdog(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoll(argv[6]),
                            atof(argv[7]), probe, sample_ms);
    }
    usage();
    return 2;
}
