/*
 * test_check.c - watchlock_client_check() against real redis-servers, one
 * started with each setting that breaks lock safety: eviction, no
 * persistence, RDB only, AOF without fsync always, replicas without
 * min-replicas-to-write, a replica, and ACL users without EVALSHA/TIME,
 * keys or channels (asked with ACL DRYRUN when the user may, probed when it
 * may not). A server set up right (AOF + fsync always + noeviction) gives an
 * empty report: the check can pass. Every test names the exact set of codes
 * it expects, so a finding that goes missing or appears wrongly fails it.
 */
#include "testing.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- helpers ---- */

/* Runs the check on url and returns the report (fails the test on error). */
static watchlock_report *check_url(const char *url)
{
    watchlock_client *c = open_client(url);
    watchlock_report *r = (watchlock_report *)1;
    CHECK_OK(watchlock_client_check(&r, c));
    CHECK(r != NULL);
    watchlock_client_close(c);
    for (size_t i = 0; i < watchlock_report_count(r); i++)
        testing_note("%s: %s", watchlock_check_name(watchlock_report_code(r, i)), watchlock_report_message(r, i));
    return r;
}

/* "eviction,fsync": the report's codes by name, in order. */
static const char *codes(const watchlock_report *r)
{
    static char buf[512];
    buf[0] = '\0';
    for (size_t i = 0; i < watchlock_report_count(r); i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, sizeof buf - used, "%s%s", i ? "," : "", watchlock_check_name(watchlock_report_code(r, i)));
    }
    return buf;
}

/* Index of the first finding with `code`, or -1. */
static long find(const watchlock_report *r, int code)
{
    for (size_t i = 0; i < watchlock_report_count(r); i++)
        if (watchlock_report_code(r, i) == code)
            return (long)i;
    return -1;
}

/* The report holds exactly the codes given (a 0-terminated list, any order,
 * UNCHECKED may appear twice: once for CONFIG, once for INFO). */
static void expect_codes(const watchlock_report *r, ...)
{
    int want[16], n = 0;
    va_list ap;
    va_start(ap, r);
    for (int code; (code = va_arg(ap, int)) != 0 && n < 16;)
        want[n++] = code;
    va_end(ap);
    for (int i = 0; i < n; i++)
        CHECK_MSG(find(r, want[i]) >= 0, "no %s finding; got [%s]", watchlock_check_name(want[i]), codes(r));
    for (size_t i = 0; i < watchlock_report_count(r); i++) {
        int code = watchlock_report_code(r, i), wanted = 0;
        for (int j = 0; j < n; j++)
            wanted |= want[j] == code;
        CHECK_MSG(wanted, "unexpected %s finding: %s; got [%s]", watchlock_check_name(code),
                  watchlock_report_message(r, i), codes(r));
        CHECK_MSG(watchlock_report_message(r, i)[0] != '\0', "finding %zu has no message", i);
        CHECK_MSG(strchr(watchlock_report_message(r, i), '\n') == NULL, "finding %zu is not one line", i);
    }
}

static void expect_message_has(const watchlock_report *r, int code, const char *text)
{
    long i = find(r, code);
    CHECK_MSG(i >= 0, "no %s finding; got [%s]", watchlock_check_name(code), codes(r));
    CHECK_MSG(strstr(watchlock_report_message(r, (size_t)i), text) != NULL, "%s message lacks '%s': %s",
              watchlock_check_name(code), text, watchlock_report_message(r, (size_t)i));
}

static void expect_message_lacks(const watchlock_report *r, int code, const char *text)
{
    long i = find(r, code);
    CHECK_MSG(i >= 0, "no %s finding; got [%s]", watchlock_check_name(code), codes(r));
    CHECK_MSG(strstr(watchlock_report_message(r, (size_t)i), text) == NULL, "%s message names '%s': %s",
              watchlock_check_name(code), text, watchlock_report_message(r, (size_t)i));
}

/* A server that writes AOF files keeps them in a directory of the test's
 * own (the harness removes only the files it knows of). */
typedef struct aof_server {
    rh_server *srv;
    char dir[128];
} aof_server;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void aof_start(aof_server *a, const char *const *extra)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(a->dir, sizeof a->dir, "%s/watchlock-check-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(a->dir) != NULL);
    const char *args[24];
    int n = 0;
    for (; extra[n] != NULL && n < 20; n++)
        args[n] = extra[n];
    args[n++] = "--dir"; /* after the harness's own --dir: the last one wins */
    args[n++] = a->dir;
    args[n] = NULL;
    rh_options opts = {.extra = args};
    a->srv = rh_start(&opts);
    CHECK(a->srv != NULL);
}

static void aof_free(aof_server *a)
{
    rh_free(a->srv);
    nftw(a->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *url_as(const rh_server *srv, const char *user)
{
    static char url[256];
    snprintf(url, sizeof url, "redis://%s:pw@127.0.0.1:%d", user, rh_port(srv));
    return url;
}

/* ---- settings ---- */

static void test_clean_server_passes(void)
{
    static const char *const extra[] = {"--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy",
                                        "noeviction", NULL};
    aof_server a;
    aof_start(&a, extra);
    watchlock_report *r = check_url(rh_url(a.srv));
    CHECK_MSG(watchlock_report_count(r) == 0, "findings on a safe server: [%s]", codes(r));
    watchlock_report_free(r);
    aof_free(&a);
}

static void test_eviction(void)
{
    static const char *const extra[] = {"--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy",
                                        "allkeys-lru", NULL};
    aof_server a;
    aof_start(&a, extra);
    watchlock_report *r = check_url(rh_url(a.srv));
    expect_codes(r, WATCHLOCK_CHECK_EVICTION, 0);
    expect_message_has(r, WATCHLOCK_CHECK_EVICTION, "allkeys-lru");
    watchlock_report_free(r);
    /* Lock keys all have a TTL: volatile-* policies evict them too. */
    CHECK(rh_ok(a.srv, "CONFIG SET maxmemory-policy volatile-ttl"));
    r = check_url(rh_url(a.srv));
    expect_codes(r, WATCHLOCK_CHECK_EVICTION, 0);
    expect_message_has(r, WATCHLOCK_CHECK_EVICTION, "volatile-ttl");
    watchlock_report_free(r);
    CHECK(rh_ok(a.srv, "CONFIG SET maxmemory-policy noeviction"));
    r = check_url(rh_url(a.srv));
    expect_codes(r, 0);
    watchlock_report_free(r);
    aof_free(&a);
}

static void test_no_persistence(void)
{
    /* The harness's default: --save "" --appendonly no. */
    watchlock_report *r = check_url(test_url(""));
    expect_codes(r, WATCHLOCK_CHECK_NO_PERSISTENCE, 0);
    watchlock_report_free(r);
}

static void test_snapshot_only(void)
{
    rh_server *srv = rh_start(NULL);
    CHECK(srv != NULL);
    CHECK(rh_ok(srv, "CONFIG SET save %s", "3600 1"));
    watchlock_report *r = check_url(rh_url(srv));
    expect_codes(r, WATCHLOCK_CHECK_SNAPSHOT_ONLY, 0);
    expect_message_has(r, WATCHLOCK_CHECK_SNAPSHOT_ONLY, "3600 1");
    watchlock_report_free(r);
    rh_free(srv);
}

static void test_fsync_everysec(void)
{
    static const char *const extra[] = {"--appendonly", "yes", "--appendfsync", "everysec", NULL};
    aof_server a;
    aof_start(&a, extra);
    watchlock_report *r = check_url(rh_url(a.srv));
    expect_codes(r, WATCHLOCK_CHECK_FSYNC, 0);
    expect_message_has(r, WATCHLOCK_CHECK_FSYNC, "everysec");
    watchlock_report_free(r);
    CHECK(rh_ok(a.srv, "CONFIG SET appendfsync no"));
    r = check_url(rh_url(a.srv));
    expect_codes(r, WATCHLOCK_CHECK_FSYNC, 0);
    watchlock_report_free(r);
    CHECK(rh_ok(a.srv, "CONFIG SET appendfsync always"));
    r = check_url(rh_url(a.srv));
    expect_codes(r, 0);
    watchlock_report_free(r);
    aof_free(&a);
}

static void test_replicas(void)
{
    static const char *const extra[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    aof_server master;
    aof_start(&master, extra);
    char port[16];
    snprintf(port, sizeof port, "%d", rh_port(master.srv));
    const char *const replica_extra[] = {"--replicaof", "127.0.0.1", port, "--appendonly", "yes",
                                         "--appendfsync", "always", NULL};
    aof_server replica;
    aof_start(&replica, replica_extra);
    WAIT_FOR(rh_info(master.srv, "replication", "connected_slaves") == 1, 20000);
    CHECK_EQ(rh_info(master.srv, "replication", "connected_slaves"), 1);

    watchlock_report *r = check_url(rh_url(master.srv));
    expect_codes(r, WATCHLOCK_CHECK_REPLICAS, 0);
    expect_message_has(r, WATCHLOCK_CHECK_REPLICAS, "1 replica connected");
    watchlock_report_free(r);

    /* The replica itself: locks cannot be taken there. */
    r = check_url(rh_url(replica.srv));
    expect_codes(r, WATCHLOCK_CHECK_REPLICA_ROLE, 0);
    expect_message_has(r, WATCHLOCK_CHECK_REPLICA_ROLE, port);
    watchlock_report_free(r);

    CHECK(rh_ok(master.srv, "CONFIG SET min-replicas-to-write 1"));
    r = check_url(rh_url(master.srv));
    expect_codes(r, 0);
    watchlock_report_free(r);
    aof_free(&replica);
    aof_free(&master);
}

/* ---- ACL ---- */

/* A user with every command but EVALSHA may run ACL DRYRUN. */
static void test_acl_no_evalsha_dryrun(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER noevalsha reset on >pw ~* &* +@all -evalsha"));
    watchlock_report *r = check_url(url_as(srv, "noevalsha"));
    expect_codes(r, WATCHLOCK_CHECK_NO_PERSISTENCE, WATCHLOCK_CHECK_ACL_COMMANDS, 0);
    expect_message_has(r, WATCHLOCK_CHECK_ACL_COMMANDS, "'noevalsha' may not run EVALSHA:");
    watchlock_report_free(r);
    CHECK(rh_int(srv, "ACL DELUSER noevalsha") == 1);
}

/* A least-privilege user without ACL, CONFIG or INFO rights: probed. The
 * lock scripts call TIME, which +@read +@write +@scripting do not grant. */
static void test_acl_no_evalsha_probed(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER narrow reset on >pw ~watchlock:* &watchlock:* +@read +@write +@scripting "
                     "+@pubsub +ping -evalsha"));
    watchlock_report *r = check_url(url_as(srv, "narrow"));
    expect_codes(r, WATCHLOCK_CHECK_UNCHECKED, WATCHLOCK_CHECK_ACL_COMMANDS, 0);
    expect_message_has(r, WATCHLOCK_CHECK_ACL_COMMANDS, "may not run EVALSHA, TIME:");
    watchlock_report_free(r);

    /* With TIME and EVALSHA granted, nothing but the unreadable settings. */
    CHECK(rh_ok(srv, "ACL SETUSER narrow +evalsha +time"));
    r = check_url(url_as(srv, "narrow"));
    expect_codes(r, WATCHLOCK_CHECK_UNCHECKED, 0);
    expect_message_has(r, WATCHLOCK_CHECK_UNCHECKED, "CONFIG GET");
    watchlock_report_free(r);
    CHECK(rh_int(srv, "ACL DELUSER narrow") == 1);
}

static void test_acl_resetchannels(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER nochan reset on >pw ~* resetchannels +@all"));
    watchlock_report *r = check_url(url_as(srv, "nochan"));
    expect_codes(r, WATCHLOCK_CHECK_NO_PERSISTENCE, WATCHLOCK_CHECK_ACL_CHANNELS, 0);
    expect_message_has(r, WATCHLOCK_CHECK_ACL_CHANNELS, "SUBSCRIBE");
    expect_message_has(r, WATCHLOCK_CHECK_ACL_CHANNELS, "PUBLISH");
    watchlock_report_free(r);

    /* The same without DRYRUN rights: probed. */
    CHECK(rh_ok(srv, "ACL SETUSER nochan2 reset on >pw ~watchlock:* resetchannels +@read +@write +@scripting "
                     "+@pubsub +ping +time"));
    r = check_url(url_as(srv, "nochan2"));
    expect_codes(r, WATCHLOCK_CHECK_UNCHECKED, WATCHLOCK_CHECK_ACL_CHANNELS, 0);
    expect_message_has(r, WATCHLOCK_CHECK_ACL_CHANNELS, "SUBSCRIBE");
    expect_message_has(r, WATCHLOCK_CHECK_ACL_CHANNELS, "PUBLISH");
    watchlock_report_free(r);
    CHECK(rh_int(srv, "ACL DELUSER nochan nochan2") == 2);
}

static void test_acl_keys(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER otherkeys reset on >pw ~app:* &* +@all"));
    watchlock_report *r = check_url(url_as(srv, "otherkeys"));
    expect_codes(r, WATCHLOCK_CHECK_NO_PERSISTENCE, WATCHLOCK_CHECK_ACL_KEYS, 0);
    watchlock_report_free(r);

    /* Read-only keys, probed: EVAL needs write access to its keys. */
    CHECK(rh_ok(srv, "ACL SETUSER readkeys reset on >pw %%R~watchlock:* &* +@read +@write +@scripting +@pubsub "
                     "+ping +time"));
    r = check_url(url_as(srv, "readkeys"));
    expect_codes(r, WATCHLOCK_CHECK_UNCHECKED, WATCHLOCK_CHECK_ACL_KEYS, 0);
    expect_message_lacks(r, WATCHLOCK_CHECK_ACL_KEYS, "watchlock-check");
    watchlock_report_free(r);
    CHECK(rh_int(srv, "ACL DELUSER otherkeys readkeys") == 2);
}

/* The probes leave nothing behind: no key, and the database stays empty. */
static void test_probes_change_nothing(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER prober reset on >pw ~watchlock:* &watchlock:* +@read +@write +@scripting "
                     "+@pubsub +ping +time"));
    CHECK(rh_ok(srv, "SET watchlock:{app} owner"));
    watchlock_report *r = check_url(url_as(srv, "prober"));
    expect_codes(r, WATCHLOCK_CHECK_UNCHECKED, 0);
    watchlock_report_free(r);
    CHECK_EQ(rh_int(srv, "DBSIZE"), 1);
    CHECK_EQ(rh_int(srv, "PTTL watchlock:{app}"), -1);
    CHECK(rh_int(srv, "ACL DELUSER prober") == 1);
}

/* ---- failures and the API's edges ---- */

static void test_unreachable(void)
{
    rh_server *srv = rh_start(NULL);
    CHECK(srv != NULL);
    watchlock_client *c = open_client(rh_url(srv));
    rh_stop(srv);
    watchlock_report *r = (watchlock_report *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_check(&r, c), WATCHLOCK_ECONN);
    CHECK(r == NULL);
    watchlock_client_close(c);
    rh_free(srv);
}

/* A pooled connection the server dropped is replaced, not reported. */
static void test_stale_pooled_connection(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    CHECK(rh_int(srv, "CLIENT KILL TYPE normal") >= 1);
    watchlock_report *r = NULL;
    CHECK_OK(watchlock_client_check(&r, c));
    expect_codes(r, WATCHLOCK_CHECK_NO_PERSISTENCE, 0);
    watchlock_report_free(r);
    watchlock_client_close(c);
}

static void test_api_edges(void)
{
    watchlock_client *c = open_client(test_url(""));
    CHECK_FAILS_WITH_MSG(watchlock_client_check(NULL, c), WATCHLOCK_EINVAL);
    watchlock_report *r = (watchlock_report *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_check(&r, NULL), WATCHLOCK_EINVAL);
    CHECK(r == NULL);
    CHECK_EQ(watchlock_report_count(NULL), 0);
    CHECK_EQ(watchlock_report_code(NULL, 0), 0);
    CHECK_STR(watchlock_report_message(NULL, 0), "");
    watchlock_report_free(NULL);
    CHECK_OK(watchlock_client_check(&r, c));
    size_t n = watchlock_report_count(r);
    CHECK_EQ(n, 1);
    CHECK_EQ(watchlock_report_code(r, n), 0);
    CHECK_STR(watchlock_report_message(r, n), "");
    watchlock_report_free(r);
    watchlock_client_close(c);

    static const char *const names[] = {"", "eviction", "no_persistence", "fsync", "acl_commands", "acl_keys",
                                        "acl_channels", "replicas", "snapshot_only", "replica_role", "unchecked"};
    for (int code = WATCHLOCK_CHECK_EVICTION; code <= WATCHLOCK_CHECK_UNCHECKED; code++)
        CHECK_STR(watchlock_check_name(code), names[code]);
    CHECK_STR(watchlock_check_name(0), "unknown");
    CHECK_STR(watchlock_check_name(99), "unknown");
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"clean_server_passes", test_clean_server_passes, 0},
        {"eviction", test_eviction, 0},
        {"no_persistence", test_no_persistence, 0},
        {"snapshot_only", test_snapshot_only, 0},
        {"fsync_everysec", test_fsync_everysec, 0},
        {"replicas", test_replicas, 0},
        {"acl_no_evalsha_dryrun", test_acl_no_evalsha_dryrun, 0},
        {"acl_no_evalsha_probed", test_acl_no_evalsha_probed, 0},
        {"acl_resetchannels", test_acl_resetchannels, 0},
        {"acl_keys", test_acl_keys, 0},
        {"probes_change_nothing", test_probes_change_nothing, 0},
        {"unreachable", test_unreachable, 0},
        {"stale_pooled_connection", test_stale_pooled_connection, 0},
        {"api_edges", test_api_edges, 0},
        {NULL, NULL, 0}};
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
