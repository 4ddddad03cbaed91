/* testing.c - the runner behind testing.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "testing.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Sanitizer defaults for every test binary. die_after_fork=0: the fork
 * tests open clients (and so start threads) in children of multi-threaded
 * processes, which ThreadSanitizer refuses by default. */
__attribute__((used, visibility("default"))) const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0:second_deadlock_stack=1";
}
__attribute__((used, visibility("default"))) const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
    return "print_stacktrace=1";
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TIMEOUT_SCALE 3
#else
#define TIMEOUT_SCALE 1
#endif

static rh_server *shared_server;
static const char *current_test = "";

rh_server *test_server(void)
{
    if (shared_server == NULL)
        testing_fail(__FILE__, __LINE__, "this binary was not started with TESTING_SHARED_SERVER");
    return shared_server;
}

const char *test_url(const char *suffix)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s%s", rh_url(test_server()), suffix ? suffix : "");
    return buf;
}

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

watchlock_client *open_client(const char *url)
{
    watchlock_client *c = NULL;
    int rc = watchlock_client_open(&c, url);
    if (rc != WATCHLOCK_OK || c == NULL)
        testing_fail(__FILE__, __LINE__, "watchlock_client_open(%s): %s: %s", url, watchlock_strerror(rc),
                     watchlock_last_error());
    return c;
}

watchlock_lock *new_lock(watchlock_client *c, const char *name)
{
    watchlock_lock *l = NULL;
    int rc = watchlock_lock_new(&l, c, name, strlen(name));
    if (rc != WATCHLOCK_OK || l == NULL)
        testing_fail(__FILE__, __LINE__, "watchlock_lock_new(%s): %s: %s", name, watchlock_strerror(rc),
                     watchlock_last_error());
    return l;
}

/* CRC16-CCITT (XMODEM), the hash of Redis Cluster key slots. */
static unsigned crc16(const unsigned char *p, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)p[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

unsigned key_slot(const char *key, size_t len)
{
    const unsigned char *k = (const unsigned char *)key;
    size_t open = 0;
    while (open < len && k[open] != '{')
        open++;
    if (open < len) {
        size_t close = open + 1;
        while (close < len && k[close] != '}')
            close++;
        if (close < len && close > open + 1)
            return crc16(k + open + 1, close - open - 1) & 16383;
    }
    return crc16(k, len) & 16383;
}

void testing_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("    %s:%d: %s [%s] (last_error: \"%s\")\n", file, line, msg, current_test, watchlock_last_error());
    fflush(stdout);
    _exit(1);
}

void testing_note(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("    note: %s\n", msg);
    fflush(stdout);
}

static int selected(const char *name, int argc, char **argv)
{
    int any_filter = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        any_filter = 1;
        if (strstr(name, argv[i]) != NULL)
            return 1;
    }
    return !any_filter;
}

static int prepare_shared_server(void)
{
    if (!rh_running(shared_server) && rh_restart(shared_server) != 0)
        return -1;
    if (!rh_ok(shared_server, "FLUSHALL") || !rh_ok(shared_server, "CONFIG RESETSTAT"))
        return -1;
    return 0;
}

int testing_main(int argc, char **argv, const test_case *tests, int flags)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            for (const test_case *t = tests; t->name != NULL; t++)
                printf("%s\n", t->name);
            return 0;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--list] [NAME-SUBSTRING...]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (flags & TESTING_SHARED_SERVER) {
        rh_options opts = {.unixsocket = 1};
        shared_server = rh_start(&opts);
        if (shared_server == NULL) {
            printf("could not start redis-server\n");
            return 1;
        }
    }
    int passed = 0, failed = 0;
    for (const test_case *t = tests; t->name != NULL; t++) {
        if (!selected(t->name, argc, argv))
            continue;
        if (shared_server != NULL && prepare_shared_server() != 0) {
            printf("FAIL %s: the shared redis-server is not usable\n", t->name);
            failed++;
            continue;
        }
        int timeout = (t->timeout_s > 0 ? t->timeout_s : TESTING_DEFAULT_TIMEOUT_S) * TIMEOUT_SCALE;
        fflush(stdout);
        fflush(stderr);
        int64_t start = now_ms();
        pid_t pid = fork();
        if (pid < 0) {
            printf("FAIL %s: fork: %s\n", t->name, strerror(errno));
            failed++;
            continue;
        }
        if (pid == 0) {
            setpgid(0, 0);
            current_test = t->name;
            alarm((unsigned)timeout);
            t->fn();
            fflush(NULL);
            exit(0);
        }
        setpgid(pid, pid);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        /* Whatever the test left running in its group (helper processes). */
        kill(-pid, SIGKILL);
        int64_t took = now_ms() - start;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            printf("ok   %s (%lld ms)\n", t->name, (long long)took);
            passed++;
        } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
            printf("FAIL %s: timed out after %d s\n", t->name, timeout);
            failed++;
        } else if (WIFSIGNALED(st)) {
            printf("FAIL %s: killed by signal %d (%s)\n", t->name, WTERMSIG(st), strsignal(WTERMSIG(st)));
            failed++;
        } else {
            printf("FAIL %s: exit status %d (%lld ms)\n", t->name, WEXITSTATUS(st), (long long)took);
            failed++;
        }
    }
    rh_free(shared_server);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
