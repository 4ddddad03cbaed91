/*
 * worker.c - the C worker of the fault-injection suite (tests/faults).
 *
 * Loops until told to stop (SIGTERM/SIGINT) or its --duration-ms runs out:
 *
 *   acquire -> record "acquired" (CLOCK_MONOTONIC, fencing token)
 *   1..iters-max times (a long hold, --long-pct of them: long-iters/2 ..
 *   long-iters times): check -> GET counter -> check -> SET counter+1
 *                       -> check -> [window] -> fenced write -> idle
 *   record "release_call" -> release -> record "released"
 *
 * The counter and the fenced writes live on a separate redis-server, the
 * "resource" (never the lock's server). Every event is one JSON line,
 * appended with one write() to the history file (O_APPEND) and echoed on
 * stdout for the runner. A check reads watchlock_lock_state(); a holder that
 * found its hold not HELD writes nothing more in that hold. The on-lost
 * callback records when the holder was told, and why.
 *
 * Each hold uses a fresh lock handle, so a callback names its hold exactly.
 *
 * --mode multi holds two locks (--name and --name2, leases --lease-ms and
 * --lease2-ms) at once; the first one's callback sleeps --slow-cb-ms (a slow
 * on-lost callback must not delay the report of the other lock's loss), and
 * the remaining validity of both is recorded every 50 ms ("deadline").
 *
 * --window-ms: after the last check and before the fenced write, announce
 * "window" and sleep (a process pause between check and write: the fencing
 * token, not the lock, must stop that write if the hold was lost).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "watchlock.h"

static volatile sig_atomic_t stop_flag;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static int hist_fd = -1;
static char wid[64] = "c";

static struct {
    const char *url, *name, *name2, *history, *scripts, *mode;
    int resource_port;
    int64_t lease_ms, lease2_ms, renew_ms, duration_ms, wait_ms, idle_min_ms, idle_max_ms, window_ms,
        gap_max_ms, slow_cb_ms, hold_ms;
    int iters_max, long_pct, long_iters;
    unsigned seed;
} opt = {.name = "faults", .mode = "single", .lease_ms = 1000, .lease2_ms = 1500, .duration_ms = 600000,
         .wait_ms = 5000, .idle_min_ms = 50, .idle_max_ms = 300, .gap_max_ms = 30, .iters_max = 3,
         .slow_cb_ms = 3000, .hold_ms = 2000, .long_pct = 30,
         .long_iters = 16};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_flag)
        ;
}

static int64_t rand_between(unsigned *seed, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int64_t)(rand_r(seed) % (unsigned)(hi - lo + 1));
}

/* Appends one event: {"ev":EV,"w":ID,"t":T <fields>}. fields is either ""
 * or starts with ','. One write() per destination keeps lines whole. */
static void emit_at(int64_t t, const char *ev, const char *fmt, ...)
{
    char fields[768] = "";
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(fields, sizeof fields, fmt, ap);
        va_end(ap);
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "{\"ev\":\"%s\",\"w\":\"%s\",\"t\":%" PRId64 "%s}\n", ev, wid, t,
                     fields);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = (int)sizeof line - 1;
    pthread_mutex_lock(&out_mu);
    if (hist_fd >= 0 && write(hist_fd, line, (size_t)n) < 0) {
        /* nothing to do: the runner sees the stdout copy */
    }
    if (write(STDOUT_FILENO, line, (size_t)n) < 0) {
    }
    pthread_mutex_unlock(&out_mu);
}

#define emit(ev, ...) emit_at(now_ns(), ev, __VA_ARGS__)

/* Quotes s for JSON (no control characters expected beyond \n and \t). */
static void json_str(char *out, size_t cap, const char *s)
{
    size_t j = 0;
    if (cap < 3)
        return;
    out[j++] = '"';
    for (; s != NULL && *s != '\0' && j + 3 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            out[j++] = '\\';
            out[j++] = (char)ch;
        } else if (ch < 0x20) {
            out[j++] = ' ';
        } else {
            out[j++] = (char)ch;
        }
    }
    out[j++] = '"';
    out[j] = '\0';
}

/* ---- one hold: its handle, its number, what its callback saw ---- */

typedef struct hold {
    watchlock_lock *lock;
    long id;
    const char *lock_name;
    int64_t fence;
    bool slow_cb;
    atomic_int told; /* a told event was recorded for this hold */
} hold;

static void on_lost(watchlock_lock *lock, int reason, void *userdata)
{
    hold *h = userdata;
    int64_t t = now_ns();
    (void)lock;
    char name[256];
    json_str(name, sizeof name, h->lock_name);
    atomic_store(&h->told, 1);
    emit_at(t, "told", ",\"hold\":%ld,\"lock\":%s,\"how\":\"callback\",\"reason\":\"%s\",\"fence\":%" PRId64, h->id,
            name, watchlock_lost_reason_str(reason), h->fence);
    if (h->slow_cb) {
        emit("slow_callback_begin", ",\"hold\":%ld,\"lock\":%s,\"ms\":%" PRId64, h->id, name, opt.slow_cb_ms);
        struct timespec ts = {(time_t)(opt.slow_cb_ms / 1000), (long)(opt.slow_cb_ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        emit("slow_callback_end", ",\"hold\":%ld,\"lock\":%s", h->id, name);
    }
}

/* true while the hold is HELD; the first time it is not, records how the
 * holder learned it. */
static bool check(hold *h)
{
    int st = watchlock_lock_state(h->lock);
    if (st == WATCHLOCK_HELD)
        return true;
    char name[256];
    json_str(name, sizeof name, h->lock_name);
    emit("told", ",\"hold\":%ld,\"lock\":%s,\"how\":\"check\",\"reason\":\"%s\",\"state\":%d,\"fence\":%" PRId64,
         h->id, name, watchlock_lost_reason_str(watchlock_lock_lost_reason(h->lock)), st, h->fence);
    return false;
}

/* ---- the resource ---- */

static redisContext *res;
static char get_sha[64], set_sha[64], fence_sha[64]; /* common.SCRIPTS, loaded by the runner */

static redisContext *res_connect(void)
{
    struct timeval tv = {5, 0};
    for (int i = 0; i < 50 && !stop_flag; i++) {
        redisContext *c = redisConnectWithTimeout("127.0.0.1", opt.resource_port, tv);
        if (c != NULL && c->err == 0) {
            redisSetTimeout(c, tv);
            return c;
        }
        if (c != NULL)
            redisFree(c);
        sleep_ms(100);
    }
    return NULL;
}

static redisReply *res_cmd(const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (res == NULL && (res = res_connect()) == NULL)
            return NULL;
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(res, fmt, ap);
        va_end(ap);
        if (r != NULL)
            return r;
        redisFree(res);
        res = NULL;
        /* A failed command may or may not have run: never retry a write. */
        return NULL;
    }
    return NULL;
}

/* One iteration of work under h: GET, SET+1, fenced write. false: stop the hold. */
static bool work_once(hold *h, unsigned *seed, int left)
{
    char name[256];
    json_str(name, sizeof name, h->lock_name);
    const char *n = h->lock_name;

    if (!check(h))
        return false;
    int64_t t0 = now_ns();
    redisReply *r = res_cmd("EVALSHA %s 2 ctr:%s seq:%s", get_sha, n, n);
    int64_t t1 = now_ns();
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        emit("op_error", ",\"hold\":%ld,\"lock\":%s,\"op\":\"get\",\"t0\":%" PRId64, h->id, name, t0);
        if (r != NULL)
            freeReplyObject(r);
        return false;
    }
    long long v = r->element[0]->type == REDIS_REPLY_STRING ? atoll(r->element[0]->str) : 0;
    long long seq = r->element[1]->integer;
    freeReplyObject(r);
    emit_at(t1, "op", ",\"hold\":%ld,\"lock\":%s,\"op\":\"get\",\"t0\":%" PRId64 ",\"t1\":%" PRId64
                      ",\"read\":%lld,\"seq\":%lld",
            h->id, name, t0, t1, v, seq);

    if (!check(h))
        return false;
    t0 = now_ns();
    emit_at(t0, "op_begin", ",\"hold\":%ld,\"lock\":%s,\"op\":\"set\",\"t0\":%" PRId64 ",\"wrote\":%lld", h->id,
            name, t0, v + 1);
    r = res_cmd("EVALSHA %s 2 ctr:%s seq:%s %lld", set_sha, n, n, v + 1);
    t1 = now_ns();
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        emit("op_error", ",\"hold\":%ld,\"lock\":%s,\"op\":\"set\",\"t0\":%" PRId64, h->id, name, t0);
        if (r != NULL)
            freeReplyObject(r);
        return false;
    }
    seq = r->integer;
    freeReplyObject(r);
    emit_at(t1, "op_end", ",\"hold\":%ld,\"lock\":%s,\"op\":\"set\",\"t0\":%" PRId64 ",\"t1\":%" PRId64
                          ",\"wrote\":%lld,\"read\":%lld,\"seq\":%lld",
            h->id, name, t0, t1, v + 1, v, seq);

    if (!check(h))
        return false;
    if (opt.window_ms > 0) {
        emit("window", ",\"hold\":%ld,\"lock\":%s,\"ms\":%" PRId64, h->id, name, opt.window_ms);
        sleep_ms(opt.window_ms); /* no check after this on purpose: a pause after the check */
    }
    t0 = now_ns();
    char tag[96];
    snprintf(tag, sizeof tag, "%s:%ld", wid, h->id);
    emit_at(t0, "op_begin", ",\"hold\":%ld,\"lock\":%s,\"op\":\"fence\",\"t0\":%" PRId64 ",\"token\":%" PRId64,
            h->id, name, t0, h->fence);
    r = res_cmd("EVALSHA %s 4 fence:%s:max fence:%s:log fence:%s:data seq:%s %" PRId64 " %s", fence_sha, n, n, n, n,
                h->fence, tag);
    t1 = now_ns();
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        char msg[300];
        json_str(msg, sizeof msg, r != NULL && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
        emit("op_error", ",\"hold\":%ld,\"lock\":%s,\"op\":\"fence\",\"t0\":%" PRId64 ",\"error\":%s", h->id,
             name, t0, msg);
        if (r != NULL)
            freeReplyObject(r);
        return false;
    }
    long long acc = r->element[0]->integer;
    seq = r->element[1]->integer;
    freeReplyObject(r);
    emit_at(t1, "op_end", ",\"hold\":%ld,\"lock\":%s,\"op\":\"fence\",\"t0\":%" PRId64 ",\"t1\":%" PRId64
                          ",\"token\":%" PRId64 ",\"accepted\":%s,\"window\":%s,\"seq\":%lld",
            h->id, name, t0, t1, h->fence, acc == 1 ? "true" : "false", opt.window_ms > 0 ? "true" : "false", seq);

    int64_t idle = rand_between(seed, opt.idle_min_ms, opt.idle_max_ms);
    emit("idle", ",\"hold\":%ld,\"lock\":%s,\"ms\":%" PRId64 ",\"left\":%d", h->id, name, idle, left);
    sleep_ms(idle);
    return true;
}

static watchlock_client *client;
static long next_hold;

static hold *new_hold(const char *name, int64_t lease_ms, bool slow_cb)
{
    hold *h = calloc(1, sizeof *h);
    if (h == NULL)
        return NULL;
    h->lock_name = name;
    h->slow_cb = slow_cb;
    if (watchlock_lock_new(&h->lock, client, name, strlen(name)) != WATCHLOCK_OK ||
        watchlock_lock_set_lease(h->lock, lease_ms) != WATCHLOCK_OK ||
        (opt.renew_ms > 0 && watchlock_lock_set_renew_interval(h->lock, opt.renew_ms) != WATCHLOCK_OK) ||
        watchlock_lock_set_on_lost(h->lock, on_lost, h) != WATCHLOCK_OK) {
        fprintf(stderr, "worker %s: cannot make a lock: %s\n", wid, watchlock_last_error());
        watchlock_lock_free(h->lock);
        free(h);
        return NULL;
    }
    return h;
}

/* Acquires h (a fresh hold number on success). */
static bool acquire_hold(hold *h)
{
    char name[256];
    json_str(name, sizeof name, h->lock_name);
    int64_t t_call = now_ns();
    int rc = watchlock_lock_acquire(h->lock, opt.wait_ms);
    int64_t t = now_ns();
    if (rc != WATCHLOCK_OK && stop_flag) { /* the run's end came before a connection: nothing held */
        emit("exit", NULL);
        close(hist_fd);
        return 0;
    }
    if (rc != WATCHLOCK_OK) {
        char msg[300];
        json_str(msg, sizeof msg, watchlock_last_error());
        emit_at(t, "acquire_failed", ",\"lock\":%s,\"t_call\":%" PRId64 ",\"status\":\"%s\",\"detail\":%s", name,
                t_call, watchlock_strerror(rc), msg);
        return false;
    }
    int64_t fence = watchlock_lock_fencing_token(h->lock);
    if (fence < 0) {
        /* A quorum could not confirm the token's raise (issue 21.6): no work
         * without a token that surely increases; give the hold back. */
        watchlock_lock_release(h->lock);
        emit_at(t, "acquire_failed", ",\"lock\":%s,\"t_call\":%" PRId64 ",\"status\":\"%s\",\"detail\":\"fence\"",
                name, t_call, watchlock_strerror((int)-fence));
        return false;
    }
    h->id = ++next_hold;
    h->fence = fence;
    emit_at(t, "acquired", ",\"hold\":%ld,\"lock\":%s,\"t_call\":%" PRId64 ",\"fence\":%" PRId64
                           ",\"remaining_ms\":%" PRId64 ",\"pid\":%d",
            h->id, name, t_call, h->fence, watchlock_lock_remaining_ms(h->lock), (int)getpid());
    return true;
}

static void release_hold(hold *h)
{
    char name[256];
    json_str(name, sizeof name, h->lock_name);
    int held = watchlock_lock_state(h->lock) == WATCHLOCK_HELD;
    emit("release_call", ",\"hold\":%ld,\"lock\":%s,\"held\":%s", h->id, name, held ? "true" : "false");
    int rc = watchlock_lock_release(h->lock);
    int64_t t = now_ns();
    const char *result = rc == WATCHLOCK_OK ? "ok" : rc == WATCHLOCK_ENOTOWNER ? "lost" : "error";
    char msg[300];
    json_str(msg, sizeof msg, rc == WATCHLOCK_OK ? "" : watchlock_last_error());
    emit_at(t, "released", ",\"hold\":%ld,\"lock\":%s,\"result\":\"%s\",\"status\":\"%s\",\"detail\":%s", h->id,
            name, result, watchlock_strerror(rc), msg);
    if (rc == WATCHLOCK_ENOTOWNER && !atomic_load(&h->told))
        emit_at(t, "told", ",\"hold\":%ld,\"lock\":%s,\"how\":\"release\",\"reason\":\"%s\",\"fence\":%" PRId64,
                h->id, name, watchlock_lost_reason_str(watchlock_lock_lost_reason(h->lock)), h->fence);
}

static void free_hold(hold *h)
{
    if (h == NULL)
        return;
    watchlock_lock_free(h->lock); /* waits for a running callback of this handle */
    free(h);
}

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void run_single(int64_t end, unsigned *seed)
{
    while (!stop_flag && now_ns() < end) {
        hold *h = new_hold(opt.name, opt.lease_ms, false);
        if (h == NULL) {
            sleep_ms(100);
            continue;
        }
        if (!acquire_hold(h)) {
            free_hold(h);
            sleep_ms(rand_between(seed, 10, 60));
            continue;
        }
        /* short holds, and long ones (several leases: the watchdog's job) */
        int iters = rand_between(seed, 1, 100) <= opt.long_pct ? (int)rand_between(seed, opt.long_iters / 2, opt.long_iters)
                                                              : (int)rand_between(seed, 1, opt.iters_max);
        for (int k = 0; k < iters && !stop_flag; k++)
            if (!work_once(h, seed, iters - 1 - k))
                break;
        release_hold(h);
        free_hold(h);
        sleep_ms(rand_between(seed, 0, opt.gap_max_ms));
    }
}

/* Two locks at once; the first one's callback is slow. */
static void run_multi(int64_t end, unsigned *seed)
{
    while (!stop_flag && now_ns() < end) {
        hold *a = new_hold(opt.name, opt.lease_ms, true);
        hold *b = new_hold(opt.name2, opt.lease2_ms, false);
        if (a == NULL || b == NULL) {
            free_hold(a);
            free_hold(b);
            sleep_ms(100);
            continue;
        }
        if (!acquire_hold(a)) {
            free_hold(a);
            free_hold(b);
            sleep_ms(rand_between(seed, 10, 60));
            continue;
        }
        if (!acquire_hold(b)) {
            release_hold(a);
            free_hold(a);
            free_hold(b);
            sleep_ms(rand_between(seed, 10, 60));
            continue;
        }
        int64_t hold_end = now_ns() + opt.hold_ms * 1000000;
        bool a_ok = true, b_ok = true;
        int64_t next_work = 0;
        while (!stop_flag && (a_ok || b_ok) && now_ns() < hold_end) {
            int64_t t = now_ns();
            emit_at(t, "deadline", ",\"holds\":[[%ld,%" PRId64 ",%d],[%ld,%" PRId64 ",%d]]", a->id,
                    t + watchlock_lock_remaining_ms(a->lock) * 1000000, watchlock_lock_state(a->lock), b->id,
                    t + watchlock_lock_remaining_ms(b->lock) * 1000000, watchlock_lock_state(b->lock));
            if (t >= next_work) {
                /* the idle of work_once is the pacing here: keep it short */
                int64_t save_min = opt.idle_min_ms, save_max = opt.idle_max_ms;
                opt.idle_min_ms = opt.idle_max_ms = 0;
                if (a_ok)
                    a_ok = work_once(a, seed, 1);
                if (b_ok)
                    b_ok = work_once(b, seed, 1);
                opt.idle_min_ms = save_min;
                opt.idle_max_ms = save_max;
                next_work = now_ns() + rand_between(seed, save_min, save_max) * 1000000;
            }
            sleep_ms(50);
            if (a_ok && watchlock_lock_state(a->lock) != WATCHLOCK_HELD)
                a_ok = check(a);
            if (b_ok && watchlock_lock_state(b->lock) != WATCHLOCK_HELD)
                b_ok = check(b);
        }
        release_hold(b);
        release_hold(a);
        free_hold(b);
        free_hold(a);
        sleep_ms(rand_between(seed, 0, opt.gap_max_ms));
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: worker --url URL --resource-port P --scripts GET,SET,FENCE --id ID --history FILE\n"
                    "              [--name N] [--lease-ms MS] [--renew-ms MS] [--duration-ms MS] [--wait-ms MS]\n"
                    "              [--iters-max N] [--idle-min-ms MS] [--idle-max-ms MS] [--gap-max-ms MS]\n"
                    "              [--window-ms MS] [--seed N] [--mode single|multi] [--name2 N]\n"
                    "              [--lease2-ms MS] [--slow-cb-ms MS] [--hold-ms MS] [--long-pct P] [--long-iters N]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    enum {
        O_URL = 1, O_RPORT, O_SHA, O_ID, O_HIST, O_NAME, O_LEASE, O_RENEW, O_DUR, O_WAIT, O_ITERS, O_IDLEMIN,
        O_IDLEMAX, O_GAP, O_WINDOW, O_SEED, O_MODE, O_NAME2, O_LEASE2, O_SLOWCB, O_HOLD, O_LONGPCT, O_LONGITERS
    };
    static const struct option longopts[] = {
        {"url", 1, 0, O_URL}, {"resource-port", 1, 0, O_RPORT}, {"scripts", 1, 0, O_SHA},
        {"id", 1, 0, O_ID}, {"history", 1, 0, O_HIST}, {"name", 1, 0, O_NAME}, {"lease-ms", 1, 0, O_LEASE},
        {"renew-ms", 1, 0, O_RENEW}, {"duration-ms", 1, 0, O_DUR}, {"wait-ms", 1, 0, O_WAIT},
        {"iters-max", 1, 0, O_ITERS}, {"idle-min-ms", 1, 0, O_IDLEMIN}, {"idle-max-ms", 1, 0, O_IDLEMAX},
        {"gap-max-ms", 1, 0, O_GAP}, {"window-ms", 1, 0, O_WINDOW}, {"seed", 1, 0, O_SEED},
        {"mode", 1, 0, O_MODE}, {"name2", 1, 0, O_NAME2}, {"lease2-ms", 1, 0, O_LEASE2},
        {"slow-cb-ms", 1, 0, O_SLOWCB}, {"hold-ms", 1, 0, O_HOLD}, {"long-pct", 1, 0, O_LONGPCT},
        {"long-iters", 1, 0, O_LONGITERS}, {0, 0, 0, 0}};
    opt.seed = (unsigned)getpid();
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_URL: opt.url = optarg; break;
        case O_RPORT: opt.resource_port = atoi(optarg); break;
        case O_SHA: opt.scripts = optarg; break;
        case O_ID: snprintf(wid, sizeof wid, "%s", optarg); break;
        case O_HIST: opt.history = optarg; break;
        case O_NAME: opt.name = optarg; break;
        case O_LEASE: opt.lease_ms = atoll(optarg); break;
        case O_RENEW: opt.renew_ms = atoll(optarg); break;
        case O_DUR: opt.duration_ms = atoll(optarg); break;
        case O_WAIT: opt.wait_ms = atoll(optarg); break;
        case O_ITERS: opt.iters_max = atoi(optarg); break;
        case O_IDLEMIN: opt.idle_min_ms = atoll(optarg); break;
        case O_IDLEMAX: opt.idle_max_ms = atoll(optarg); break;
        case O_GAP: opt.gap_max_ms = atoll(optarg); break;
        case O_WINDOW: opt.window_ms = atoll(optarg); break;
        case O_SEED: opt.seed = (unsigned)strtoul(optarg, NULL, 10); break;
        case O_MODE: opt.mode = optarg; break;
        case O_NAME2: opt.name2 = optarg; break;
        case O_LEASE2: opt.lease2_ms = atoll(optarg); break;
        case O_SLOWCB: opt.slow_cb_ms = atoll(optarg); break;
        case O_HOLD: opt.hold_ms = atoll(optarg); break;
        case O_LONGPCT: opt.long_pct = atoi(optarg); break;
        case O_LONGITERS: opt.long_iters = atoi(optarg); break;
        default: usage();
        }
    }
    bool multi = strcmp(opt.mode, "multi") == 0;
    if (opt.url == NULL || opt.resource_port <= 0 || opt.scripts == NULL || opt.history == NULL ||
        (multi && opt.name2 == NULL) || opt.iters_max < 1 ||
        sscanf(opt.scripts, "%63[^,],%63[^,],%63s", get_sha, set_sha, fence_sha) != 3)
        usage();

    /* Die with the runner (and exit now if it is already gone). */
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    hist_fd = open(opt.history, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (hist_fd < 0) {
        perror(opt.history);
        return 70;
    }
    int64_t rt = realtime_ns(), mono = now_ns();
    emit_at(mono, "start", ",\"lang\":\"c\",\"pid\":%d,\"rt_off\":%" PRId64 ",\"lease_ms\":%" PRId64
                           ",\"mode\":\"%s\"",
            (int)getpid(), rt - mono, opt.lease_ms, opt.mode);

    /* --url "U1 U2 U3 ...": a Redlock quorum of those members (issue 21). */
    static char url_buf[4096];
    const char *urls[16];
    size_t n_urls = 0;
    snprintf(url_buf, sizeof url_buf, "%s", opt.url);
    char *save = NULL;
    for (char *t = strtok_r(url_buf, " ", &save); t && n_urls < 16; t = strtok_r(NULL, " ", &save))
        urls[n_urls++] = t;
    int rc = WATCHLOCK_ECONN;
    for (int i = 0; i < 50 && !stop_flag; i++) {
        rc = n_urls > 1 ? watchlock_client_open_quorum(&client, urls, n_urls) : watchlock_client_open(&client, opt.url);
        if (rc == WATCHLOCK_OK)
            break;
        sleep_ms(100);
    }
    if (rc != WATCHLOCK_OK && stop_flag) { /* the run's end came before a connection: nothing held */
        emit("exit", NULL);
        close(hist_fd);
        return 0;
    }
    if (rc != WATCHLOCK_OK) {
        char msg[300];
        json_str(msg, sizeof msg, watchlock_last_error());
        emit("exit", ",\"error\":%s", msg);
        return 69;
    }
    res = res_connect();
    int64_t end = now_ns() + opt.duration_ms * 1000000;
    unsigned seed = opt.seed;
    if (multi)
        run_multi(end, &seed);
    else
        run_single(end, &seed);
    watchlock_client_close(client);
    if (res != NULL)
        redisFree(res);
    emit("exit", NULL);
    close(hist_fd);
    return 0;
}
