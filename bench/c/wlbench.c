/*
 * wlbench - the C side of the watchlock benchmarks (driven by bench/bench.py).
 *
 *   wlbench ping     HOST PORT N MAX_S          hiredis PING loop (the C floor)
 *   wlbench cycle    URL N MAX_S                uncontended acquire + release
 *   wlbench handoff  URL SHM ID HOLD_US POLITE  one of the contending processes
 *   wlbench watchdog URL HOST PORT LOCKS LEASE_MS HOLD_S
 *                                               one client holding many locks
 *   wlbench ratio    HOST PORT URL BLOCKS NAME_LEN
 *                                               cycle / two PINGs, interleaved
 *   wlbench threads  URL THREADS MAX_S          cycles/s of THREADS threads, one client
 *   wlbench acqscale URL LOCKS LEASE_MS SAMPLE  cycle cost as the locks held grow
 *
 * (bench/NOTES-core.md lists the command line behind each target.)
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

static int cmd_cycle(const char *url, long n, double max_s)
{
    watchlock_client *client = NULL;
    watchlock_lock *lock = NULL;
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    char name[64];
    snprintf(name, sizeof name, "bench:cycle:c:%d", (int)getpid());
    rc = watchlock_lock_new(&lock, client, name, strlen(name));
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_lock_new", rc);
    watchlock_lock_set_lease(lock, 10000);
    for (int i = 0; i < 100; i++) { /* warm-up: loads the scripts, fills the pool */
        if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire (warm-up)", rc);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release (warm-up)", rc);
    }
    int64_t t0 = now_ns(), limit = t0 + (int64_t)(max_s * 1e9);
    long done = 0;
    while (done < n) {
        if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release", rc);
        done++;
        if ((done & 63) == 0 && now_ns() > limit)
            break;
    }
    int64_t t1 = now_ns();
    printf("{\"ops\": %ld, \"seconds\": %.6f}\n", done, (double)(t1 - t0) / 1e9);
    watchlock_lock_free(lock);
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
    SHM_READY = 8,      /* SHM_READY + id: 1 once worker id is connected */
    SHM_SLOTS = 64
};

static int cmd_handoff(const char *url, const char *shm_path, int id, long hold_us, int polite)
{
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
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    if ((rc = watchlock_lock_new(&lock, client, "bench:handoff", 13)) != WATCHLOCK_OK)
        return fail("watchlock_lock_new", rc);
    watchlock_lock_set_lease(lock, 10000);

    size_t cap = 1 << 16, n_lat = 0;
    int64_t *lat = malloc(cap * sizeof *lat);
    long turns = 0, same = 0;
    if (lat == NULL)
        return 1;

    atomic_store(&shm[SHM_READY + id], 1);
    while (atomic_load(&shm[SHM_START_NS]) == 0)
        sleep_ns(200000);
    int64_t stop = atomic_load(&shm[SHM_STOP_NS]);

    while (now_ns() < stop) {
        if ((rc = watchlock_lock_acquire(lock, 30000)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
        int64_t t_acq = now_ns();
        if (atomic_exchange(&shm[SHM_IN_CS], 1) != 0)
            atomic_fetch_add(&shm[SHM_VIOLATIONS], 1);
        int64_t rel = atomic_load(&shm[SHM_RELEASE_NS]);
        int64_t prev = atomic_load(&shm[SHM_LAST_HOLDER]);
        if (rel != 0 && t_acq < stop) {
            if (prev != id + 1) {
                if (n_lat == cap) {
                    cap *= 2;
                    int64_t *grown = realloc(lat, cap * sizeof *lat);
                    if (grown == NULL)
                        return 1;
                    lat = grown;
                }
                lat[n_lat++] = t_acq - rel;
            } else {
                same++;
            }
        }
        turns++;
        int64_t my_turn = atomic_fetch_add(&shm[SHM_TURNS], 1) + 1;
        atomic_store(&shm[SHM_LAST_HOLDER], id + 1);
        sleep_ns(hold_us * 1000);
        atomic_store(&shm[SHM_IN_CS], 0);
        atomic_store(&shm[SHM_RELEASE_NS], now_ns());
        if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            return fail("watchlock_lock_release", rc);
        /* Polite: let another process take a turn before contending again. */
        while (polite && atomic_load(&shm[SHM_TURNS]) == my_turn && now_ns() < stop)
            sleep_ns(50000);
    }
    printf("{\"turns\": %ld, \"same_holder\": %ld, \"handoff_ns\": [", turns, same);
    for (size_t i = 0; i < n_lat; i++)
        printf("%s%" PRId64, i ? "," : "", lat[i]);
    printf("]}\n");
    free(lat);
    watchlock_lock_free(lock);
    watchlock_client_close(client);
    return 0;
}

/* ---- watchdog: one client holds many locks -------------------------------- */

static atomic_long lost_callbacks;

static void on_lost(watchlock_lock *lock, int reason, void *userdata)
{
    (void)lock;
    (void)reason;
    (void)userdata;
    atomic_fetch_add(&lost_callbacks, 1);
}

static int cmd_watchdog(const char *url, const char *host, int port, long n, int64_t lease_ms,
                        double hold_s)
{
    redisContext *admin = redisConnect(host, port);
    if (admin == NULL || admin->err) {
        fprintf(stderr, "wlbench: connect %s:%d failed\n", host, port);
        return 1;
    }
    watchlock_client *client = NULL;
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    watchlock_lock **locks = calloc((size_t)n, sizeof *locks);
    if (locks == NULL)
        return 1;
    long rss0 = rss_bytes();
    int64_t t_acq0 = now_ns();
    for (long i = 0; i < n; i++) {
        char name[64];
        int len = snprintf(name, sizeof name, "bench:watchdog:%ld", i);
        if ((rc = watchlock_lock_new(&locks[i], client, name, (size_t)len)) != WATCHLOCK_OK)
            return fail("watchlock_lock_new", rc);
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
    long long cmds0 = server_script_calls(admin);
    int64_t t0 = now_ns();
    long rss_max = rss_held;
    /* The smallest remaining local lease seen, as a fraction of the lease,
     * over 500 locks sampled every 100 ms (the local deadline is the lease
     * minus the safety margin, so it reads a little below the server's). */
    double min_left = 1.0;
    unsigned seed = 12345;
    while (now_ns() - t0 < (int64_t)(hold_s * 1e9)) {
        sleep_ns(100000000);
        long r = rss_bytes();
        if (r > rss_max)
            rss_max = r;
        for (int k = 0; k < 500; k++) {
            seed = seed * 1103515245u + 12345u;
            long i = (long)((seed >> 8) % (unsigned long)n);
            double left = (double)watchlock_lock_remaining_ms(locks[i]) / (double)lease_ms;
            if (left < min_left)
                min_left = left;
        }
    }
    int64_t t1 = now_ns();
    long long cmds = server_script_calls(admin) - cmds0;
    int64_t rounds = watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDS) - rounds0;
    int64_t rtts = watchlock_client_stat(client, WATCHLOCK_STAT_RENEW_ROUNDTRIPS) - rtt0;
    int64_t renewals = watchlock_client_stat(client, WATCHLOCK_STAT_RENEWALS) - ren0;
    int64_t cpu = watchlock_client_stat(client, WATCHLOCK_STAT_WATCHDOG_CPU_US) - cpu0;
    int64_t pcpu = process_cpu_us() - pcpu0;
    int64_t held_stat = watchlock_client_stat(client, WATCHLOCK_STAT_HELD_LOCKS);

    /* Lost = not HELD locally, or not held on the server by then. */
    long lost_local = 0, lost_server = 0;
    for (long i = 0; i < n; i++) {
        if (watchlock_lock_state(locks[i]) != WATCHLOCK_HELD)
            lost_local++;
        size_t len;
        const char *name = watchlock_lock_name(locks[i], &len);
        int held = 0;
        int64_t remaining = 0;
        if ((rc = watchlock_client_inspect(client, name, len, &held, &remaining, NULL)) !=
            WATCHLOCK_OK)
            return fail("watchlock_client_inspect", rc);
        if (!held || remaining <= 0)
            lost_server++;
    }
    long release_fail = 0;
    for (long i = 0; i < n; i++) {
        if (watchlock_lock_release(locks[i]) != WATCHLOCK_OK)
            release_fail++;
        watchlock_lock_free(locks[i]);
    }
    printf("{\"locks\": %ld, \"lease_ms\": %" PRId64 ", \"hold_s\": %.3f, "
           "\"acquire_s\": %.3f, \"rss_before\": %ld, \"rss_held\": %ld, \"rss_max\": %ld, "
           "\"renew_rounds\": %" PRId64 ", \"renew_roundtrips\": %" PRId64
           ", \"renewals\": %" PRId64 ", \"watchdog_cpu_us\": %" PRId64
           ", \"process_cpu_us\": %" PRId64 ", \"held_stat\": %" PRId64
           ", \"lost_local\": %ld, \"lost_server\": %ld, \"lost_callbacks\": %ld, "
           "\"release_failures\": %ld, \"server_script_calls\": %lld, "
           "\"renewals_per_interval\": %.3f, \"min_remaining_fraction\": %.3f, \"rss_per_lock\": %.0f}\n",
           n, lease_ms, (double)(t1 - t0) / 1e9, (double)(t_acq1 - t_acq0) / 1e9, rss0,
           rss_held, rss_max, rounds, rtts, renewals, cpu, pcpu, held_stat, lost_local,
           lost_server, atomic_load(&lost_callbacks), release_fail, cmds,
           /* renewals per lock per default interval (lease/3): 1.0 = on time */
           (double)renewals / ((double)n * ((double)(t1 - t0) / 1e6) / (double)(lease_ms / 3)), min_left,
           (double)(rss_held - rss0) / (double)n);
    redisFree(admin);
    free(locks);
    watchlock_client_close(client);
    return 0;
}

/* ---- ratio: cycle vs. two PINGs, interleaved in blocks ------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Alternates blocks of 200 PING pairs and 200 cycles on one name of
 * NAME_LEN bytes, so that a machine shared with other work slows both
 * alike; prints the ratio of the sums and the median of the block ratios. */
static int cmd_ratio(const char *host, int port, const char *url, long blocks, long name_len)
{
    enum { PER_BLOCK = 200 };
    redisContext *rc_ping = redisConnect(host, port);
    if (rc_ping == NULL || rc_ping->err) {
        fprintf(stderr, "wlbench: connect %s:%d failed\n", host, port);
        return 1;
    }
    watchlock_client *client = NULL;
    watchlock_lock *lock = NULL;
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    if (name_len < 16)
        name_len = 16;
    char *name = malloc((size_t)name_len);
    if (name == NULL)
        return 1;
    memset(name, 'n', (size_t)name_len);
    int pre = snprintf(name, (size_t)name_len, "bench:ratio:%d:", (int)getpid());
    name[pre] = 'n';
    if ((rc = watchlock_lock_new(&lock, client, name, (size_t)name_len)) != WATCHLOCK_OK)
        return fail("watchlock_lock_new", rc);
    watchlock_lock_set_lease(lock, 10000);
    double *ratios = calloc((size_t)blocks, sizeof *ratios);
    if (ratios == NULL)
        return 1;
    int64_t ping_ns = 0, cycle_ns = 0;
    for (long b = -5; b < blocks; b++) { /* 5 warm-up blocks */
        int64_t t0 = now_ns();
        for (int i = 0; i < 2 * PER_BLOCK; i++) {
            redisReply *r = redisCommand(rc_ping, "PING");
            if (r == NULL) {
                fprintf(stderr, "wlbench: PING failed\n");
                return 1;
            }
            freeReplyObject(r);
        }
        int64_t t1 = now_ns();
        for (int i = 0; i < PER_BLOCK; i++) {
            if ((rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK)
                return fail("watchlock_lock_acquire", rc);
            if ((rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
                return fail("watchlock_lock_release", rc);
        }
        int64_t t2 = now_ns();
        if (b < 0)
            continue;
        ping_ns += t1 - t0;
        cycle_ns += t2 - t1;
        ratios[b] = (double)(t2 - t1) / (double)(t1 - t0);
    }
    qsort(ratios, (size_t)blocks, sizeof *ratios, cmp_double);
    long n = blocks * PER_BLOCK;
    printf("{\"name_len\": %ld, \"cycles\": %ld, \"two_pings_us\": %.2f, \"cycle_us\": %.2f, "
           "\"ratio\": %.3f, \"ratio_median_block\": %.3f}\n",
           name_len, n, (double)ping_ns / n / 1e3, (double)cycle_ns / n / 1e3,
           (double)cycle_ns / (double)ping_ns, ratios[blocks / 2]);
    free(ratios);
    free(name);
    watchlock_lock_free(lock);
    watchlock_client_close(client);
    redisFree(rc_ping);
    return 0;
}

/* ---- threads: many threads cycling on one client ------------------------- */

typedef struct thread_job {
    watchlock_client *client;
    int id;
    int64_t stop_ns;
    _Atomic int64_t *start_ns;
    long done;
    int rc;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    char name[64];
    int len = snprintf(name, sizeof name, "bench:threads:%d:%d", (int)getpid(), j->id);
    watchlock_lock *lock = NULL;
    if ((j->rc = watchlock_lock_new(&lock, j->client, name, (size_t)len)) != WATCHLOCK_OK)
        return NULL;
    watchlock_lock_set_lease(lock, 10000);
    while (atomic_load(j->start_ns) == 0)
        sleep_ns(100000);
    while (now_ns() < j->stop_ns) {
        if ((j->rc = watchlock_lock_acquire(lock, 0)) != WATCHLOCK_OK ||
            (j->rc = watchlock_lock_release(lock)) != WATCHLOCK_OK)
            break;
        j->done++;
    }
    watchlock_lock_free(lock);
    return NULL;
}

/* THREADS threads, each with its own name, share one client for MAX_S s
 * (after a 0.5 s warm-up with one thread); prints cycles per second. */
static int cmd_threads(const char *url, int threads, double max_s)
{
    watchlock_client *client = NULL;
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    thread_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    _Atomic int64_t start = 0;
    if (jobs == NULL || tids == NULL)
        return 1;
    {
        thread_job warm = {.client = client, .id = -1, .start_ns = &start};
        atomic_store(&start, 1);
        warm.stop_ns = now_ns() + 500000000;
        thread_main(&warm);
        atomic_store(&start, 0);
    }
    for (int i = 0; i < threads; i++) {
        jobs[i] = (thread_job){.client = client, .id = i, .start_ns = &start};
        if (pthread_create(&tids[i], NULL, thread_main, &jobs[i]) != 0)
            return 1;
    }
    sleep_ns(100000000);
    int64_t t0 = now_ns();
    for (int i = 0; i < threads; i++)
        jobs[i].stop_ns = t0 + (int64_t)(max_s * 1e9);
    atomic_store(&start, t0);
    long done = 0;
    int bad = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        done += jobs[i].done;
        if (jobs[i].rc != WATCHLOCK_OK)
            bad = jobs[i].rc;
    }
    int64_t t1 = now_ns();
    if (bad != 0)
        return fail("thread cycle", bad);
    printf("{\"threads\": %d, \"cycles\": %ld, \"seconds\": %.3f, \"cycles_per_s\": %.1f}\n", threads, done,
           (double)(t1 - t0) / 1e9, (double)done / ((double)(t1 - t0) / 1e9));
    free(jobs);
    free(tids);
    watchlock_client_close(client);
    return 0;
}

/* ---- acqscale: does acquiring cost more as more locks are held? ---------- */

/* Acquires LOCKS locks (LEASE_MS each, renewed by the watchdog); whenever
 * the number held reaches 10^k (from 10,000), times SAMPLE acquire+release
 * cycles of one extra handle and the next SAMPLE acquires of new locks.
 * Prints one row per checkpoint. */
static int cmd_acqscale(const char *url, long n, int64_t lease_ms, long sample)
{
    watchlock_client *client = NULL;
    int rc = watchlock_client_open(&client, url);
    if (rc != WATCHLOCK_OK)
        return fail("watchlock_client_open", rc);
    watchlock_lock **locks = calloc((size_t)n, sizeof *locks);
    watchlock_lock *probe = NULL;
    if (locks == NULL)
        return 1;
    if ((rc = watchlock_lock_new(&probe, client, "bench:acqscale:probe", 20)) != WATCHLOCK_OK)
        return fail("watchlock_lock_new", rc);
    long rss0 = rss_bytes();
    long next_cp = 10000;
    printf("{\"locks\": %ld, \"lease_ms\": %" PRId64 ", \"checkpoints\": [", n, lease_ms);
    int64_t t_fill = now_ns();
    for (long i = 0; i < n; i++) {
        if (i == next_cp || i == n - sample) {
            int64_t t0 = now_ns();
            for (long k = 0; k < sample; k++) {
                if ((rc = watchlock_lock_acquire(probe, 0)) != WATCHLOCK_OK ||
                    (rc = watchlock_lock_release(probe)) != WATCHLOCK_OK)
                    return fail("probe cycle", rc);
            }
            int64_t t1 = now_ns();
            long upto = i + sample < n ? i + sample : n, lost = 0;
            for (long k = i; k < upto; k++) {
                char name[64];
                int len = snprintf(name, sizeof name, "bench:acqscale:%ld", k);
                if ((rc = watchlock_lock_new(&locks[k], client, name, (size_t)len)) != WATCHLOCK_OK)
                    return fail("watchlock_lock_new", rc);
                watchlock_lock_set_lease(locks[k], lease_ms);
                if ((rc = watchlock_lock_acquire(locks[k], 0)) != WATCHLOCK_OK)
                    return fail("watchlock_lock_acquire", rc);
            }
            int64_t t2 = now_ns();
            for (long k = 0; k < i; k += 97)
                lost += watchlock_lock_state(locks[k]) != WATCHLOCK_HELD;
            printf("%s{\"held\": %ld, \"cycle_us\": %.2f, \"acquire_us\": %.2f, \"rss_per_lock\": %.0f, "
                   "\"lost_in_sample\": %ld}",
                   next_cp == 10000 && i == 10000 ? "" : ", ", i, (double)(t1 - t0) / sample / 1e3,
                   (double)(t2 - t1) / (double)(upto - i) / 1e3, i ? (double)(rss_bytes() - rss0) / (double)i : 0.0,
                   lost);
            fflush(stdout);
            i = upto - 1;
            while (next_cp <= i)
                next_cp *= 10;
            continue;
        }
        char name[64];
        int len = snprintf(name, sizeof name, "bench:acqscale:%ld", i);
        if ((rc = watchlock_lock_new(&locks[i], client, name, (size_t)len)) != WATCHLOCK_OK)
            return fail("watchlock_lock_new", rc);
        watchlock_lock_set_lease(locks[i], lease_ms);
        if ((rc = watchlock_lock_acquire(locks[i], 0)) != WATCHLOCK_OK)
            return fail("watchlock_lock_acquire", rc);
    }
    long lost = 0;
    for (long i = 0; i < n; i++)
        lost += watchlock_lock_state(locks[i]) != WATCHLOCK_HELD;
    printf("], \"fill_s\": %.1f, \"lost\": %ld}\n", (double)(now_ns() - t_fill) / 1e9, lost);
    for (long i = 0; i < n; i++)
        watchlock_lock_free(locks[i]);
    watchlock_lock_free(probe);
    free(locks);
    watchlock_client_close(client);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: wlbench ping HOST PORT N MAX_S\n"
                    "       wlbench cycle URL N MAX_S\n"
                    "       wlbench handoff URL SHM ID HOLD_US POLITE\n"
                    "       wlbench watchdog URL HOST PORT LOCKS LEASE_MS HOLD_S\n"
                    "       wlbench ratio HOST PORT URL BLOCKS NAME_LEN\n"
                    "       wlbench threads URL THREADS MAX_S\n"
                    "       wlbench acqscale URL LOCKS LEASE_MS SAMPLE\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    if (argc == 6 && strcmp(argv[1], "ping") == 0)
        return cmd_ping(argv[2], atoi(argv[3]), atol(argv[4]), atof(argv[5]));
    if (argc == 5 && strcmp(argv[1], "cycle") == 0)
        return cmd_cycle(argv[2], atol(argv[3]), atof(argv[4]));
    if (argc == 7 && strcmp(argv[1], "handoff") == 0)
        return cmd_handoff(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoi(argv[6]));
    if (argc == 8 && strcmp(argv[1], "watchdog") == 0)
        return cmd_watchdog(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoll(argv[6]),
                            atof(argv[7]));
    if (argc == 7 && strcmp(argv[1], "ratio") == 0)
        return cmd_ratio(argv[2], atoi(argv[3]), argv[4], atol(argv[5]), atol(argv[6]));
    if (argc == 5 && strcmp(argv[1], "threads") == 0)
        return cmd_threads(argv[2], atoi(argv[3]), atof(argv[4]));
    if (argc == 6 && strcmp(argv[1], "acqscale") == 0)
        return cmd_acqscale(argv[2], atol(argv[3]), atoll(argv[4]), atol(argv[5]));
    usage();
    return 2;
}
