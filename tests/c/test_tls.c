/*
 * test_tls.c - rediss:// against real redis-servers listening with TLS
 * (certificates from tests/harness/tls.py, see redis_harness.h): acquire,
 * release and renewals over verified TLS, a waiter woken through the TLS
 * subscriber, insecure=1, a wrong CA, hostname mismatch and sni=, mutual
 * TLS, a plain server on a rediss:// URL, a handshake that never ends, bad
 * option values. The library only ever sees the TLS port; the harness
 * checks keys through the server's second, plain port.
 */
#include "testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const rh_options tls_opts = {.tls = 1};

static rh_server *start_tls(const char *cert, int auth_clients)
{
    rh_options o = {.tls = 1, .tls_cert = cert, .tls_auth_clients = auth_clients};
    rh_server *srv = rh_start(&o);
    CHECK_MSG(srv != NULL, "could not start a TLS redis-server");
    return srv;
}

/* rediss://127.0.0.1:<tls port of srv><query> */
static const char *tls_url(const rh_server *srv, const char *host, const char *query)
{
    static char url[2048];
    snprintf(url, sizeof url, "rediss://%s:%d%s", host, rh_tls_port(srv), query);
    return url;
}

/* Opens url, takes and releases one lock, closes. */
static void roundtrip(const char *url, const char *name)
{
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, name);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK(watchlock_lock_fencing_token(l) > 0);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* watchlock_client_open(url) must fail with `status`; returns the message
 * (static copy) and the time it took in *ms. */
static const char *open_fails(const char *url, int status, int64_t *ms)
{
    static char msg[1024];
    watchlock_client *c = NULL;
    int64_t t0 = now_ms();
    int rc = watchlock_client_open(&c, url);
    if (ms != NULL)
        *ms = now_ms() - t0;
    CHECK_MSG(rc == status, "open(%s) returned %d (%s), expected %d; last error: %s", url, rc,
              watchlock_strerror(rc), status, watchlock_last_error());
    CHECK(c == NULL);
    snprintf(msg, sizeof msg, "%s", watchlock_last_error());
    CHECK_MSG(msg[0] != '\0', "open(%s): empty last_error", url);
    return msg;
}

static int untrusted(const char *msg)
{
    return strstr(msg, "certificate") != NULL &&
           (strstr(msg, "not trusted") != NULL || strstr(msg, "verify failed") != NULL);
}

static void test_acquire_release_verified(void)
{
    rh_server *srv = rh_start(&tls_opts);
    CHECK(srv != NULL);
    CHECK(strncmp(rh_url(srv), "rediss://", 9) == 0);
    watchlock_client *c = open_client(rh_url(srv));
    watchlock_lock *l = new_lock(c, "tls-basic");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EXISTS %s", "watchlock:{tls-basic}"), 1);
    int held = 0;
    CHECK_OK(watchlock_client_inspect(c, "tls-basic", 9, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    watchlock_lock *other = new_lock(c, "tls-basic");
    CHECK_STATUS(watchlock_lock_acquire(other, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(srv, "EXISTS %s", "watchlock:{tls-basic}"), 0);
    watchlock_lock_free(other);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    /* localhost is in the certificate too */
    char q[700];
    snprintf(q, sizeof q, "?cacert=%s", rh_tls_file("ca.crt"));
    roundtrip(tls_url(srv, "localhost", q), "tls-localhost");
    rh_free(srv);
}

static void test_renewals_over_tls(void)
{
    rh_server *srv = rh_start(&tls_opts);
    CHECK(srv != NULL);
    watchlock_client *c = open_client(rh_url(srv));
    watchlock_lock *l = new_lock(c, "tls-renew");
    CHECK_OK(watchlock_lock_set_lease(l, 600));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    WAIT_FOR(watchlock_lock_renewals(l) >= 4 || watchlock_lock_state(l) != WATCHLOCK_HELD, 10000);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK(watchlock_lock_renewals(l) >= 4);
    CHECK(rh_int(srv, "PTTL %s", "watchlock:{tls-renew}") > 0);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    rh_free(srv);
}

typedef struct waiter_arg {
    watchlock_lock *lock;
    int rc;
    int64_t done_ms;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    w->rc = watchlock_lock_acquire(w->lock, 20000);
    w->done_ms = now_ms();
    return NULL;
}

/* Holder and waiter on two clients of one TLS server (and mutual TLS when
 * auth_clients): the release wakes the waiter through its subscriber
 * connection, long before the 30 s lease could end. */
static void waiter_woken(int auth_clients)
{
    rh_server *srv = start_tls(NULL, auth_clients);
    watchlock_client *a = open_client(rh_url(srv));
    watchlock_client *b = open_client(rh_url(srv));
    watchlock_lock *holder = new_lock(a, "tls-wake");
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter_arg w = {.lock = new_lock(b, "tls-wake"), .rc = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
    long long subs = 0;
    int64_t end = now_ms() + 15000;
    while (now_ms() < end) {
        redisReply *r = rh_command(srv, "PUBSUB NUMSUB %s", "watchlock:{tls-wake}:released");
        subs = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
        if (r)
            freeReplyObject(r);
        if (subs >= 1)
            break;
        sleep_ms(10);
    }
    CHECK_MSG(subs >= 1, "the waiter never subscribed to the release channel");
    int64_t t_release = now_ms();
    CHECK_OK(watchlock_lock_release(holder));
    pthread_join(th, NULL);
    CHECK_OK(w.rc);
    testing_note("woken %lld ms after the release", (long long)(w.done_ms - t_release));
    CHECK(w.done_ms - t_release < 3000);
    CHECK_OK(watchlock_lock_release(w.lock));
    watchlock_lock_free(w.lock);
    watchlock_lock_free(holder);
    watchlock_client_close(b);
    watchlock_client_close(a);
    rh_free(srv);
}

static void test_waiter_woken_over_tls(void)
{
    waiter_woken(0);
}

static void test_mutual_tls(void)
{
    waiter_woken(1);
    rh_server *srv = start_tls(NULL, 1);
    CHECK(strstr(rh_url(srv), "cert=") != NULL);
    roundtrip(rh_url(srv), "mtls");
    char q[1400];
    snprintf(q, sizeof q, "?cacert=%s&connect_timeout=5s", rh_tls_file("ca.crt"));
    int64_t ms;
    const char *msg = open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_ECONN, &ms);
    testing_note("without a client certificate: %s (%lld ms)", msg, (long long)ms);
    CHECK(ms < 4500);
    rh_free(srv);
}

static void test_insecure_and_unknown_ca(void)
{
    rh_server *srv = start_tls("unknown", 0);
    char q[1400];
    snprintf(q, sizeof q, "?cacert=%s", rh_tls_file("ca.crt"));
    const char *msg = open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_ECONN, NULL);
    CHECK_MSG(untrusted(msg), "message: %s", msg);
    msg = open_fails(tls_url(srv, "127.0.0.1", ""), WATCHLOCK_ECONN, NULL); /* system store */
    CHECK_MSG(strstr(msg, "certificate") != NULL, "message: %s", msg);
    roundtrip(tls_url(srv, "127.0.0.1", "?insecure=1"), "insecure");
    snprintf(q, sizeof q, "?cacert=%s", rh_tls_file("wrong-ca.crt"));
    roundtrip(tls_url(srv, "127.0.0.1", q), "its-own-ca");
    rh_free(srv);
}

static void test_wrong_ca(void)
{
    rh_server *srv = rh_start(&tls_opts);
    CHECK(srv != NULL);
    char q[1400];
    snprintf(q, sizeof q, "?cacert=%s", rh_tls_file("wrong-ca.crt"));
    const char *msg = open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_ECONN, NULL);
    CHECK_MSG(untrusted(msg), "message: %s", msg);
    char port[16];
    snprintf(port, sizeof port, "%d", rh_tls_port(srv));
    CHECK_MSG(strstr(msg, port) != NULL, "message does not name the endpoint: %s", msg);
    rh_free(srv);
}

static void test_hostname_mismatch_and_sni(void)
{
    rh_server *other = start_tls("other-name", 0);
    char q[1400];
    snprintf(q, sizeof q, "?cacert=%s", rh_tls_file("ca.crt"));
    const char *msg = open_fails(tls_url(other, "127.0.0.1", q), WATCHLOCK_ECONN, NULL);
    CHECK_MSG(strstr(msg, "hostname mismatch") != NULL, "message: %s", msg);
    msg = open_fails(tls_url(other, "localhost", q), WATCHLOCK_ECONN, NULL);
    CHECK_MSG(strstr(msg, "hostname mismatch") != NULL, "message: %s", msg);
    snprintf(q, sizeof q, "?cacert=%s&sni=other.example", rh_tls_file("ca.crt"));
    roundtrip(tls_url(other, "127.0.0.1", q), "sni-other"); /* sni= is the name checked */
    rh_free(other);

    rh_server *srv = rh_start(&tls_opts);
    CHECK(srv != NULL);
    msg = open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_ECONN, NULL);
    CHECK_MSG(strstr(msg, "hostname mismatch") != NULL, "message: %s", msg);
    snprintf(q, sizeof q, "?cacert=%s&sni=localhost", rh_tls_file("ca.crt"));
    roundtrip(tls_url(srv, "127.0.0.1", q), "sni-localhost");
    rh_free(srv);
}

/* A plain redis-server reads a TLS ClientHello as the start of an inline
 * command and waits for the rest: it never answers (Redis 7.0), so the
 * client cannot tell it from a slow server before connect_timeout. What it
 * can do is say, at that deadline, that this may be a plain port. (A server
 * that answers with RESP fails at once: "not a TLS server".) */
static void test_plain_server_on_rediss_url(void)
{
    rh_server *plain = rh_start(NULL);
    CHECK(plain != NULL);
    char url[1400];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s&connect_timeout=1s", rh_port(plain),
             rh_tls_file("ca.crt"));
    int64_t ms;
    const char *msg = open_fails(url, WATCHLOCK_ECONN, &ms);
    testing_note("%s (%lld ms)", msg, (long long)ms);
    CHECK_MSG(strstr(msg, "not a TLS server") != NULL || strstr(msg, "plain") != NULL, "message: %s", msg);
    CHECK_MSG(ms < 2500, "took %lld ms with connect_timeout=1s", (long long)ms);
    rh_free(plain);
}

static void test_handshake_timeout(void)
{
    /* The kernel completes the TCP handshake for the backlog; nobody ever
     * reads or writes. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(listen(fd, 8) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    char url[1400];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s&connect_timeout=700ms", ntohs(sa.sin_port),
             rh_tls_file("ca.crt"));
    int64_t ms;
    const char *msg = open_fails(url, WATCHLOCK_ECONN, &ms);
    testing_note("%s (%lld ms)", msg, (long long)ms);
    CHECK_MSG(strstr(msg, "handshake timed out") != NULL, "message: %s", msg);
    CHECK_MSG(ms >= 600 && ms < 2500, "took %lld ms with connect_timeout=700ms", (long long)ms);
    close(fd);
}

static void test_bad_tls_options(void)
{
    rh_server *srv = rh_start(&tls_opts);
    CHECK(srv != NULL);
    const char *missing = rh_tls_file("no-such-file.pem");
    char q[2000];
    snprintf(q, sizeof q, "?cacert=%s", missing);
    open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_EINVAL, NULL);
    snprintf(q, sizeof q, "?cacertdir=%s", missing);
    open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_EINVAL, NULL);
    snprintf(q, sizeof q, "?cacert=%s&cert=%s&key=%s", rh_tls_file("ca.crt"), missing, rh_tls_file("client.key"));
    open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_EINVAL, NULL);
    snprintf(q, sizeof q, "?cacert=%s&cert=%s&key=%s", rh_tls_file("ca.crt"), rh_tls_file("client.crt"), missing);
    open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_EINVAL, NULL);
    snprintf(q, sizeof q, "?cacert=%s&insecure=2", rh_tls_file("ca.crt"));
    open_fails(tls_url(srv, "127.0.0.1", q), WATCHLOCK_EINVAL, NULL);
    char url[2000];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?cacert=%s", rh_port(srv), rh_tls_file("ca.crt"));
    open_fails(url, WATCHLOCK_EINVAL, NULL); /* TLS options need rediss:// */
    rh_free(srv);
}

static const test_case tests[] = {
    {"acquire_release_verified", test_acquire_release_verified, 0},
    {"renewals_over_tls", test_renewals_over_tls, 0},
    {"waiter_woken_over_tls", test_waiter_woken_over_tls, 0},
    {"mutual_tls", test_mutual_tls, 0},
    {"insecure_and_unknown_ca", test_insecure_and_unknown_ca, 0},
    {"wrong_ca", test_wrong_ca, 0},
    {"hostname_mismatch_and_sni", test_hostname_mismatch_and_sni, 0},
    {"plain_server_on_rediss_url", test_plain_server_on_rediss_url, 0},
    {"handshake_timeout", test_handshake_timeout, 0},
    {"bad_tls_options", test_bad_tls_options, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    /* once, before the tests fork: they share one set of certificates */
    if (rh_tls_dir() == NULL)
        return 1;
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
