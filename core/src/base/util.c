/* util.c - clocks, condition variables, randomness, fork generation, durations. */
#include "base/base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

atomic_llong wl_test_suspend_us;

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Every deadline is judged on CLOCK_BOOTTIME: it counts the time the host
 * was suspended (laptop lid, paused VM), which the server's clock and so
 * its key expiry count too. CLOCK_MONOTONIC stops meanwhile, and a resumed
 * client would read HELD a lock whose key expired (issue 19 item 10). */
int64_t wl_now_us(void)
{
    return clock_us(CLOCK_BOOTTIME) + atomic_load_explicit(&wl_test_suspend_us, memory_order_relaxed);
}

void wl_timespec_at(struct timespec *ts, int64_t at_us)
{
    ts->tv_sec = (time_t)(at_us / 1000000);
    ts->tv_nsec = (long)(at_us % 1000000) * 1000;
}

int wl_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return -1;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc == 0 ? 0 : -1;
}

/* pthread condition variables cannot wait on CLOCK_BOOTTIME, so a wait
 * until a boot-time instant sleeps on CLOCK_MONOTONIC for what is left, at
 * most WL_WAIT_SLICE_US at a time: every caller loops and re-checks its
 * condition against wl_now_us(), so after a suspend (which the monotonic
 * sleep does not count) a deadline that passed meanwhile is seen within a
 * slice of the resume, not when the monotonic sleep would have ended. */
#define WL_WAIT_SLICE_US 1000000

void wl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t at_us)
{
    if (at_us < 0) {
        pthread_cond_wait(cond, mu);
        return;
    }
    int64_t left = at_us - wl_now_us();
    if (left <= 0)
        return;
    if (left > WL_WAIT_SLICE_US)
        left = WL_WAIT_SLICE_US;
    struct timespec ts;
    wl_timespec_at(&ts, clock_us(CLOCK_MONOTONIC) + left);
    pthread_cond_timedwait(cond, mu, &ts);
}

int wl_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static atomic_uint fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
}

static void install_fork_handler(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

unsigned wl_fork_generation(void)
{
    pthread_once(&fork_once, install_fork_handler);
    return atomic_load(&fork_generation);
}

void wl_quote_name(char *out, size_t out_size, const void *name, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = name;
    size_t o = 0;
    if (out_size < 8)
        return;
    out[o++] = '\'';
    for (size_t i = 0; i < len; i++) {
        if (o + 6 >= out_size) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o++] = '\'';
    out[o] = '\0';
}

void wl_thread_start(const char *name)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_setname_np(pthread_self(), name);
}

int wl_grow(void **items, size_t *cap, size_t len, size_t size, size_t first)
{
    if (len < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : first;
    void *grown = realloc(*items, want * size);
    if (grown == NULL)
        return -1;
    *items = grown;
    *cap = want;
    return 0;
}

int64_t wl_deadline_after_ms(int64_t ms)
{
    if (ms < 0)
        return -1;
    int64_t now = wl_now_us();
    if (ms > (INT64_MAX - now) / 1000)
        return INT64_MAX;
    return now + ms * 1000;
}

size_t wl_fmt_i64(char *buf, int64_t v)
{
    char digits[24];
    size_t n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        buf[len++] = '-';
    while (n > 0)
        buf[len++] = digits[--n];
    buf[len] = '\0';
    return len;
}

void wl_what(char *buf, size_t size, const char *verb, const char *quoted)
{
    size_t a = strlen(verb), b = strlen(quoted);
    if (size == 0)
        return;
    if (a > size - 1)
        a = size - 1;
    memcpy(buf, verb, a);
    if (a < size - 1)
        buf[a++] = ' ';
    if (b > size - 1 - a)
        b = size - 1 - a;
    memcpy(buf + a, quoted, b);
    buf[a + b] = '\0';
}

/* Tokens are drawn from a per-thread buffer of getrandom() bytes: one
 * system call per 32 tokens instead of one per acquire. Every byte is
 * handed out once and wiped as it is taken, and a forked child drops the
 * buffer it inherited (the fork generation moved), so no two holds, in
 * this process or a child, ever share a token. */
static _Thread_local struct {
    unsigned char bytes[512];
    size_t left;
    unsigned gen;
} token_pool;

int wl_random_token(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];
    unsigned gen = wl_fork_generation();
    if (token_pool.gen != gen || token_pool.left < sizeof raw) {
        token_pool.left = 0;
        if (wl_random_bytes(token_pool.bytes, sizeof token_pool.bytes) != 0)
            return -1;
        token_pool.left = sizeof token_pool.bytes;
        token_pool.gen = gen;
    }
    unsigned char *take = token_pool.bytes + sizeof token_pool.bytes - token_pool.left;
    memcpy(raw, take, sizeof raw);
    memset(take, 0, sizeof raw);
    token_pool.left -= sizeof raw;
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
    return 0;
}

int watchlock_parse_duration(int64_t *out_ms, const char *text)
{
    if (out_ms == NULL || text == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "duration: NULL argument");
    *out_ms = 0;
    const char *p = text;
    /* Plain decimal only: digits with at most one '.', then the unit
     * (strtod alone would also take hex, exponents, "inf" and "nan"). */
    size_t digits = 0, dots = 0, i = 0;
    for (; isdigit((unsigned char)p[i]) || p[i] == '.'; i++) {
        if (p[i] == '.')
            dots++;
        else
            digits++;
    }
    if (p[0] == '-' && (isdigit((unsigned char)p[1]) || p[1] == '.'))
        return wl_fail(WATCHLOCK_EINVAL, "duration '%.64s' is negative: it must be 0 or more (500ms, 30s, 5m, 1h)",
                       text);
    if (digits == 0 || dots > 1)
        return wl_fail(WATCHLOCK_EINVAL, "bad duration '%.64s': expected a number such as 500ms, 30s, 5m, 1h",
                       text);
    errno = 0;
    char *end;
    double value = strtod(p, &end);
    if (end != p + i || errno != 0 || !isfinite(value) || value < 0)
        return wl_fail(WATCHLOCK_EINVAL, "bad duration '%.64s'", text);
    double scale;
    if (strcmp(end, "ms") == 0)
        scale = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        scale = 1000;
    else if (strcmp(end, "m") == 0)
        scale = 60000;
    else if (strcmp(end, "h") == 0)
        scale = 3600000;
    else
        return wl_fail(WATCHLOCK_EINVAL, "bad duration '%.64s': unit must be ms, s, m or h", text);
    double ms = value * scale;
    if (ms > (double)WATCHLOCK_MAX_LEASE_MS)
        return wl_fail(WATCHLOCK_EINVAL, "duration '%.64s' is too long (at most 30 days)", text);
    *out_ms = (int64_t)llround(ms);
    return WATCHLOCK_OK;
}
