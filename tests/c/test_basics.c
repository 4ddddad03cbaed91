/*
 * test_basics.c - everything that needs no redis-server: versions, status
 * texts, durations, NULL arguments, malformed URLs, refused and unreachable
 * servers.
 */
#include "testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_version(void)
{
    CHECK_EQ(watchlock_version(), WATCHLOCK_VERSION_NUMBER);
    CHECK_STR(watchlock_version_string(), WATCHLOCK_VERSION_STRING);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", WATCHLOCK_VERSION_MAJOR, WATCHLOCK_VERSION_MINOR,
             WATCHLOCK_VERSION_PATCH);
    CHECK_STR(watchlock_version_string(), expect);
}

static void test_strerror(void)
{
    static const int codes[] = {WATCHLOCK_OK,       WATCHLOCK_EINVAL,   WATCHLOCK_ENOMEM,
                                WATCHLOCK_ETIMEDOUT, WATCHLOCK_ENOTOWNER, WATCHLOCK_ECONN,
                                WATCHLOCK_EAUTH,    WATCHLOCK_ESERVER,  WATCHLOCK_ECLOSED,
                                WATCHLOCK_EFORKED,  WATCHLOCK_EINTERNAL};
    const char *unknown = watchlock_strerror(9999);
    CHECK(unknown != NULL && unknown[0] != '\0');
    CHECK_STR(watchlock_strerror(-1), unknown);
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        const char *s = watchlock_strerror(codes[i]);
        CHECK_MSG(s != NULL && s[0] != '\0', "empty text for status %d", codes[i]);
        CHECK_MSG(strcmp(s, unknown) != 0, "status %d reads as unknown", codes[i]);
        for (size_t j = 0; j < i; j++)
            CHECK_MSG(strcmp(s, watchlock_strerror(codes[j])) != 0, "statuses %d and %d share a text",
                      codes[i], codes[j]);
    }
    /* The numbering is ABI: never renumbered. */
    CHECK_EQ(WATCHLOCK_EINVAL, 1);
    CHECK_EQ(WATCHLOCK_ETIMEDOUT, 3);
    CHECK_EQ(WATCHLOCK_EINTERNAL, 10);
    CHECK(watchlock_last_error() != NULL);
}

static void test_lost_reason_str(void)
{
    CHECK_STR(watchlock_lost_reason_str(WATCHLOCK_LOST_TAKEN), "taken");
    CHECK_STR(watchlock_lost_reason_str(WATCHLOCK_LOST_EXPIRED), "expired");
    CHECK_STR(watchlock_lost_reason_str(WATCHLOCK_LOST_MAX_RENEWALS), "max renewals reached");
    CHECK_STR(watchlock_lost_reason_str(WATCHLOCK_LOST_MAX_HOLD), "max hold reached");
    CHECK_STR(watchlock_lost_reason_str(WATCHLOCK_LOST_CONNECTION), "connection lost");
    CHECK(watchlock_lost_reason_str(WATCHLOCK_LOST_NONE) != NULL);
    CHECK(watchlock_lost_reason_str(12345) != NULL);
    CHECK(watchlock_lost_reason_str(-7) != NULL);
}

static void test_parse_duration(void)
{
    static const struct {
        const char *text;
        int64_t ms;
    } good[] = {
        {"500ms", 500},      {"30s", 30000},     {"1.5s", 1500},     {"5m", 300000},
        {"1h", 3600000},     {"10", 10000},      {"0", 0},           {"0ms", 0},
        {"0.25", 250},       {"2.5m", 150000},   {"1ms", 1},         {"720h", WATCHLOCK_MAX_LEASE_MS},
        {"2592000s", WATCHLOCK_MAX_LEASE_MS},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ms = -1;
        CHECK_MSG(watchlock_parse_duration(&ms, good[i].text) == WATCHLOCK_OK, "'%s' refused: %s",
                  good[i].text, watchlock_last_error());
        CHECK_MSG(ms == good[i].ms, "'%s' gave %lld, expected %lld", good[i].text, (long long)ms,
                  (long long)good[i].ms);
    }
    static const char *const bad[] = {
        "",      "-1",    "-5s",   "abc",   "10x",   "10 s", " 10",   "10s ", "1.5.5s",
        "s",     "ms",    "5sec",  "5S",    "1d",    "721h", "2592001s", "1e99", "nan",
        "inf",   "0x10",  "1e3",   "--1",   "+1",    "10ms5",
    };
    char accepted[512] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms = 0;
        int rc = watchlock_parse_duration(&ms, bad[i]);
        if (rc != WATCHLOCK_EINVAL) {
            size_t n = strlen(accepted);
            snprintf(accepted + n, sizeof accepted - n, " '%s'->%lld(status %d)", bad[i], (long long)ms, rc);
            continue;
        }
        CHECK_MSG(watchlock_last_error()[0] != '\0', "'%s': no message", bad[i]);
    }
    CHECK_MSG(accepted[0] == '\0', "malformed durations accepted:%s", accepted);
    int64_t ms;
    CHECK_STATUS(watchlock_parse_duration(&ms, NULL), WATCHLOCK_EINVAL);
    CHECK_STATUS(watchlock_parse_duration(NULL, "1s"), WATCHLOCK_EINVAL);
}

/* Calls that need no server must refuse NULL handles and arguments. */
static void test_null_arguments(void)
{
    watchlock_client *c = (watchlock_client *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_open(NULL, "redis://127.0.0.1:1"), WATCHLOCK_EINVAL);
    watchlock_lock *l = (watchlock_lock *)1;
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(&l, NULL, "x", 1), WATCHLOCK_EINVAL);
    CHECK(l == NULL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_new(NULL, NULL, "x", 1), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(NULL, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(NULL), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(NULL, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_lease(NULL, 1000), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_auto_renew(NULL, 1), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_renew_interval(NULL, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_max_renewals(NULL, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_max_hold(NULL, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_on_lost(NULL, NULL, NULL), WATCHLOCK_EINVAL);
    int held;
    int64_t rem, fence;
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect(NULL, "x", 1, &held, &rem, &fence), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_force_release(NULL, "x", 1, &held), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_enable_lost_events(NULL, 1), WATCHLOCK_EINVAL);
    uint64_t id;
    int reason;
    CHECK_FAILS_WITH_MSG(watchlock_client_next_lost_event(NULL, 0, &id, &reason), WATCHLOCK_EINVAL);
    CHECK_EQ(watchlock_lock_state(NULL), WATCHLOCK_UNLOCKED);
    CHECK_EQ(watchlock_lock_lost_reason(NULL), WATCHLOCK_LOST_NONE);
    CHECK_EQ(watchlock_lock_remaining_ms(NULL), 0);
    CHECK_EQ(watchlock_lock_fencing_token(NULL), 0);
    CHECK_EQ(watchlock_lock_hold_count(NULL), 0);
    CHECK_EQ(watchlock_lock_renewals(NULL), 0);
    size_t len = 99;
    (void)watchlock_lock_name(NULL, &len); /* must not crash */
    watchlock_lock_free(NULL);
    watchlock_client_close(NULL);
    (void)c;
}

static void check_bad_url(const char *url)
{
    watchlock_client *c = (watchlock_client *)1;
    int rc = watchlock_client_open(&c, url);
    CHECK_MSG(rc == WATCHLOCK_EINVAL, "URL '%.100s': status %d (%s), expected EINVAL; last error: %s", url, rc,
              watchlock_strerror(rc), watchlock_last_error());
    CHECK_MSG(c == NULL, "URL '%.100s': *out not NULL after failure", url);
    CHECK_MSG(watchlock_last_error()[0] != '\0', "URL '%.100s': no message", url);
}

static void test_malformed_urls(void)
{
    static const char *const bad[] = {
        "http://127.0.0.1:6379",
        "redis:/127.0.0.1:6379",
        "127.0.0.1:6379",
        "redis://",
        "redis://:6379",
        "redis://127.0.0.1:",
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:0",
        "redis://127.0.0.1:65536",
        "redis://127.0.0.1:-1",
        "redis://127.0.0.1:6379/abc",
        "redis://127.0.0.1:6379/-1",
        "redis://127.0.0.1:6379/1/2",
        "redis://127.0.0.1:6379?bogus=1",
        "redis://127.0.0.1:6379?connect_timeout",
        "redis://127.0.0.1:6379?connect_timeout=abc",
        "redis://127.0.0.1:6379?connect_timeout=0",
        "redis://127.0.0.1:6379?command_timeout=-1s",
        "redis://127.0.0.1:6379?keepalive=2",
        "redis://127.0.0.1:6379?db=x",
        "redis://127.0.0.1 :6379",
        "redis://127.0.0.1:6379\n",
        "redis://[::1",
        "redis://[::1]x",
        "redis://ho st:6379",
        "redis://:p%zz@127.0.0.1:6379",
        "redis://:p%0@127.0.0.1:6379",
        "redis://:p%00x@127.0.0.1:6379",
        "unix://",
        "unix://relative.sock",
        /* TLS, Sentinel and replica options */
        "redis://127.0.0.1:6379?cacert=/x.pem",
        "redis://127.0.0.1:6379?insecure=1",
        "rediss://127.0.0.1:6379?insecure=2",
        "rediss://127.0.0.1:6379?cacert=",
        "rediss://127.0.0.1:6379?cacert=/nonexistent/ca.pem",
        "rediss://127.0.0.1:6379?cert=/nonexistent/c.pem",
        "redis://127.0.0.1:6379?sentinel_password=x",
        "redis://127.0.0.1:6379?min_replicas=x",
        "redis://127.0.0.1:6379?min_replicas=-1",
        "redis://127.0.0.1:6379?min_replicas_timeout=0",
        "redis-sentinel://127.0.0.1:26379",
        "redis-sentinel://127.0.0.1:26379/",
        "redis-sentinel://127.0.0.1:26379,/mymaster",
        "rediss-sentinel:///mymaster",
        "redis-cluster://",
        "redis-cluster://127.0.0.1:7000/1",
        "redis-cluster://127.0.0.1:7000?db=1",
        "redis-cluster://127.0.0.1:7000,",
        "rediss-cluster://127.0.0.1:7000?sentinel_password=x",
        "redis-sentinel://127.0.0.1:26379/mymaster/x",
        "redis-sentinel://127.0.0.1:notaport/mymaster",
        "redis-sentinel://a:b@127.0.0.1:26379,c:d@127.0.0.2/mymaster",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check_bad_url(bad[i]);
    /* Over-long URL. */
    char *huge = malloc(10001);
    CHECK(huge != NULL);
    memcpy(huge, "redis://", 8);
    memset(huge + 8, 'a', 9992);
    huge[10000] = '\0';
    check_bad_url(huge);
    free(huge);
    /* TLS: a CA file that is not there is named in the message. */
    watchlock_client *c = NULL;
    CHECK_STATUS(watchlock_client_open(&c, "rediss://127.0.0.1:6379?cacert=/nonexistent/ca.pem"), WATCHLOCK_EINVAL);
    CHECK_MSG(strstr(watchlock_last_error(), "/nonexistent/ca.pem") != NULL, "cacert message: %s",
              watchlock_last_error());
}

static int unused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    int port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static void test_connection_refused(void)
{
    char url[64], port[16];
    int p = unused_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", p);
    snprintf(port, sizeof port, "%d", p);
    watchlock_client *c = (watchlock_client *)1;
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&c, url), WATCHLOCK_ECONN);
    CHECK(c == NULL);
    CHECK_MSG(strstr(watchlock_last_error(), port) != NULL, "message does not name the port: %s",
              watchlock_last_error());
    CHECK_INT(now_ms() - t0, <, 5000);
    /* A unix socket that does not exist. */
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&c, "unix:///nonexistent-dir/redis.sock"), WATCHLOCK_ECONN);
    CHECK(strstr(watchlock_last_error(), "/nonexistent-dir/redis.sock") != NULL);
}

/* 192.0.2.0/24 is TEST-NET-1: never routed. Either the kernel says
 * "unreachable" at once or the connect times out after connect_timeout. */
static void test_unreachable_host(void)
{
    watchlock_client *c = (watchlock_client *)1;
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_client_open(&c, "redis://192.0.2.1:6379?connect_timeout=300ms"),
                         WATCHLOCK_ECONN);
    int64_t took = now_ms() - t0;
    CHECK(c == NULL);
    CHECK_MSG(strstr(watchlock_last_error(), "192.0.2.1") != NULL, "message: %s", watchlock_last_error());
    testing_note("unreachable host failed after %lld ms: %s", (long long)took, watchlock_last_error());
    CHECK_INT(took, <, 3000);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"version", test_version, 0},
        {"strerror", test_strerror, 0},
        {"lost_reason_str", test_lost_reason_str, 0},
        {"parse_duration", test_parse_duration, 0},
        {"null_arguments", test_null_arguments, 0},
        {"malformed_urls", test_malformed_urls, 0},
        {"connection_refused", test_connection_refused, 0},
        {"unreachable_host", test_unreachable_host, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
