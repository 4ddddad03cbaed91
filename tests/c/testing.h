/*
 * testing.h - a tiny test framework for watchlock's C tests.
 *
 * Each test binary lists its tests in a table and hands it to testing_main():
 *
 *     static void test_something(void) { CHECK(1 + 1 == 2); }
 *     static const test_case tests[] = {
 *         {"something", test_something, 0},   // 0 = default timeout
 *         {NULL, NULL, 0}};
 *     int main(int argc, char **argv) { return testing_main(argc, argv, tests, TESTING_SHARED_SERVER); }
 *
 * Every test runs in a forked child process in its own process group, with
 * alarm() as a timeout (as libuv's runner does), so a crash or a hang fails
 * that test only; the runner then kills whatever the test left behind in its
 * group. A binary takes optional arguments: substrings of test names to run
 * (default all), or --list. It prints one line per test and
 * "N passed, N failed", and exits 1 when any test failed.
 *
 * TESTING_SHARED_SERVER makes the runner start one redis-server (see
 * redis_harness.h) before the tests; test_server() returns it, and the runner
 * empties it (FLUSHALL, CONFIG RESETSTAT) before each test and restarts it if
 * a test killed it. Tests that stop, restart or reconfigure a server start a
 * private one with rh_start().
 *
 * CHECK failures print file:line, the expression and the calling thread's
 * watchlock_last_error(), then end the test process with _exit(1). They may
 * be used from any thread of the test.
 */
#ifndef WATCHLOCK_TESTING_H
#define WATCHLOCK_TESTING_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "redis_harness.h"
#include "watchlock.h"

typedef struct test_case {
    const char *name;
    void (*fn)(void);
    int timeout_s; /* 0: TESTING_DEFAULT_TIMEOUT_S (scaled under sanitizers) */
} test_case;

#define TESTING_DEFAULT_TIMEOUT_S 60

enum { TESTING_NO_SERVER = 0, TESTING_SHARED_SERVER = 1 };

int testing_main(int argc, char **argv, const test_case *tests, int flags);

/* The shared server (TESTING_SHARED_SERVER only). */
rh_server *test_server(void);
/* Its URL plus `suffix` (e.g. "/3" or "?command_timeout=1s"), in a static buffer. */
const char *test_url(const char *suffix);

/* CLOCK_MONOTONIC and CLOCK_REALTIME in milliseconds. */
int64_t now_ms(void);
int64_t wall_ms(void);
void sleep_ms(int64_t ms);

/* Opens a client on url or fails the test. */
watchlock_client *open_client(const char *url);
/* Creates a lock handle for a C string name or fails the test. */
watchlock_lock *new_lock(watchlock_client *c, const char *name);

/* Redis Cluster hash slot of a key (CRC16 + hash tag rule). */
unsigned key_slot(const char *key, size_t len);

/* Waits (polling every 5 ms) until cond is true or timeout_ms passes. */
#define WAIT_FOR(cond, timeout_ms)                                                                 \
    do {                                                                                           \
        int64_t wait_for_end_ = now_ms() + (timeout_ms);                                           \
        while (!(cond) && now_ms() < wait_for_end_)                                                \
            sleep_ms(5);                                                                           \
    } while (0)

void testing_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* Printed with the test's result (e.g. measured timings). */
void testing_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            testing_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                                  \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            testing_fail(__FILE__, __LINE__, __VA_ARGS__);                                         \
    } while (0)

#define CHECK_INT(a, op, b)                                                                        \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        if (!(check_a_ op check_b_))                                                               \
            testing_fail(__FILE__, __LINE__, "CHECK(%s %s %s): %lld vs %lld", #a, #op, #b,         \
                         check_a_, check_b_);                                                      \
    } while (0)

#define CHECK_EQ(a, b) CHECK_INT(a, ==, b)

/* Checks a watchlock status against the expected code. */
#define CHECK_STATUS(call, expected)                                                               \
    do {                                                                                           \
        int check_rc_ = (call), check_want_ = (expected);                                          \
        if (check_rc_ != check_want_)                                                              \
            testing_fail(__FILE__, __LINE__, "%s returned %d (%s), expected %d (%s); last error: %s", \
                         #call, check_rc_, watchlock_strerror(check_rc_), check_want_,             \
                         watchlock_strerror(check_want_), watchlock_last_error());                 \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, WATCHLOCK_OK)

/* A failed call must leave a non-empty detail message. */
#define CHECK_FAILS_WITH_MSG(call, expected)                                                       \
    do {                                                                                           \
        CHECK_STATUS(call, expected);                                                              \
        CHECK_MSG(watchlock_last_error()[0] != '\0', "%s: empty last_error", #call);               \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *check_sa_ = (a), *check_sb_ = (b);                                             \
        if (check_sa_ == NULL || check_sb_ == NULL || strcmp(check_sa_, check_sb_) != 0)           \
            testing_fail(__FILE__, __LINE__, "CHECK_STR(%s, %s): \"%s\" vs \"%s\"", #a, #b,        \
                         check_sa_ ? check_sa_ : "(null)", check_sb_ ? check_sb_ : "(null)");      \
    } while (0)

#endif
