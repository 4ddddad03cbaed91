/*
 * test_cluster.c - redis-cluster:// from C against a real cluster: 3
 * masters with one replica each, started once per binary by
 * tests/harness/cluster.py --serve (before the tests fork, so they share
 * it; each test uses names of its own) and torn down when this process
 * closes the script's stdin or dies.
 *
 * Tested here: acquire, inspect, list and release on names spread over
 * every master; the watchdog keeping 1 s leases alive on all masters for
 * three leases, with the stats counting the renewals (and one round trip
 * per round however many nodes: the nodes' pipelines go out in parallel);
 * a waiter on another client woken through the sharded channel. Failovers,
 * migrations, dead seeds and TLS are tested from Python
 * (tests/python/test_cluster.py), on the same core.
 */
#include "testing.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_MASTERS 3

static struct {
    pid_t pid;
    int to_child; /* the script's stdin: closing it tears the cluster down */
    char url[2048];
    rh_server *masters[N_MASTERS];
} cluster = {.pid = -1, .to_child = -1};

static const char *cluster_url(void)
{
    return cluster.url;
}

/* "key=value" out of the script's line of "key=value" words. */
static int word(const char *line, const char *key, char *out, size_t outlen)
{
    size_t klen = strlen(key);
    for (const char *p = line; p != NULL && *p; p = strchr(p, ' ')) {
        while (*p == ' ')
            p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t n = strcspn(p + klen + 1, " \n");
            if (n >= outlen)
                return -1;
            memcpy(out, p + klen + 1, n);
            out[n] = '\0';
            return 0;
        }
    }
    return -1;
}

static void cluster_stop(void)
{
    if (cluster.to_child >= 0)
        close(cluster.to_child);
    cluster.to_child = -1;
    if (cluster.pid > 0) {
        int64_t end = now_ms() + 30000;
        int st;
        while (waitpid(cluster.pid, &st, WNOHANG) == 0) {
            if (now_ms() > end) {
                kill(cluster.pid, SIGTERM);
                waitpid(cluster.pid, &st, 0);
                break;
            }
            sleep_ms(10);
        }
    }
    cluster.pid = -1;
    for (int i = 0; i < N_MASTERS; i++) {
        rh_free(cluster.masters[i]);
        cluster.masters[i] = NULL;
    }
}

/* Runs tests/harness/cluster.py --serve and reads its one line
 * "url=... masters=P1,P2,P3 replicas=...". 0 on success. */
static int cluster_start(void)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]), close(in[1]);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the script tears the cluster down on SIGTERM */
        if (getppid() != parent)
            _exit(127);
        dup2(in[0], 0);
        dup2(out[1], 1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        const char *argv[] = {"python3", WATCHLOCK_SOURCE_DIR "/tests/harness/cluster.py", "--serve", NULL};
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    cluster.pid = pid;
    cluster.to_child = in[1];
    FILE *f = fdopen(out[0], "r");
    char line[4096] = "", ports[200];
    if (f == NULL || fgets(line, sizeof line, f) == NULL) {
        fprintf(stderr, "test_cluster: tests/harness/cluster.py --serve did not start a cluster\n");
        if (f != NULL)
            fclose(f);
        else
            close(out[0]);
        cluster_stop();
        return -1;
    }
    fclose(f);
    if (word(line, "url", cluster.url, sizeof cluster.url) != 0 || word(line, "masters", ports, sizeof ports) != 0) {
        fprintf(stderr, "test_cluster: cluster.py said '%s'\n", line);
        cluster_stop();
        return -1;
    }
    char *p = ports;
    for (int i = 0; i < N_MASTERS; i++) {
        cluster.masters[i] = rh_attach(atoi(p));
        p = strchr(p, ',');
        if (cluster.masters[i] == NULL || (p == NULL && i + 1 < N_MASTERS)) {
            fprintf(stderr, "test_cluster: cluster.py said '%s'\n", line);
            cluster_stop();
            return -1;
        }
        if (p != NULL)
            p++;
    }
    return 0;
}

/* The master serving key: the one that answers EXISTS (the others answer
 * MOVED, an error reply, which rh_int gives as LLONG_MIN). -1 if none. */
static int owner_of(const char *key)
{
    int owner = -1;
    for (int i = 0; i < N_MASTERS; i++) {
        if (rh_int(cluster.masters[i], "EXISTS %s", key) != LLONG_MIN) {
            CHECK_MSG(owner < 0, "%s is served by two masters", key);
            owner = i;
        }
    }
    return owner;
}

#define PER_MASTER 2
#define N_NAMES (N_MASTERS * PER_MASTER)

typedef struct spread {
    char names[N_NAMES][80];
    char keys[N_NAMES][100];
    int owner[N_NAMES];
} spread;

/* PER_MASTER names for every master, by trying names until each has its share. */
static void spread_names(spread *s, const char *tag)
{
    int have[N_MASTERS] = {0}, n = 0;
    for (int i = 0; n < N_NAMES; i++) {
        CHECK_MSG(i < 1000, "no names found for every master (have %d %d %d)", have[0], have[1], have[2]);
        char name[80], key[100];
        snprintf(name, sizeof name, "c-cluster:%s:%d:%d", tag, (int)getpid(), i);
        snprintf(key, sizeof key, "watchlock:{%s}", name);
        int o = owner_of(key);
        CHECK_MSG(o >= 0, "no master serves %s", key);
        if (have[o] == PER_MASTER)
            continue;
        have[o]++;
        memcpy(s->names[n], name, sizeof name);
        memcpy(s->keys[n], key, sizeof key);
        s->owner[n++] = o;
    }
}

/* GET key on its master into out ("" when missing). */
static void get_value(int master, const char *key, char *out, size_t outlen)
{
    redisReply *r = rh_command(cluster.masters[master], "GET %s", key);
    CHECK_MSG(r != NULL, "GET %s: no answer from master %d", key, master);
    CHECK_MSG(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL, "GET %s on master %d: reply type %d (%s)",
              key, master, r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
    snprintf(out, outlen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

static void test_acquire_release_over_masters(void)
{
    spread s;
    spread_names(&s, "basic");
    watchlock_client *c = open_client(cluster_url());
    watchlock_client *other = open_client(cluster_url());
    watchlock_lock *locks[N_NAMES];
    for (int i = 0; i < N_NAMES; i++) {
        locks[i] = new_lock(c, s.names[i]);
        CHECK_OK(watchlock_lock_set_lease(locks[i], 10000));
        CHECK_OK(watchlock_lock_acquire(locks[i], 0));
    }
    for (int i = 0; i < N_NAMES; i++) {
        /* on its master, and only there */
        CHECK_EQ(rh_int(cluster.masters[s.owner[i]], "EXISTS %s", s.keys[i]), 1);
        long long ttl = rh_int(cluster.masters[s.owner[i]], "PTTL %s", s.keys[i]);
        CHECK_MSG(ttl > 0 && ttl <= 10000, "PTTL %s = %lld", s.keys[i], ttl);
        /* seen held through the other client, with this hold's fencing token */
        int held = 0;
        int64_t remaining = 0, fence = 0;
        CHECK_OK(watchlock_client_inspect(other, s.names[i], strlen(s.names[i]), &held, &remaining, &fence));
        CHECK_EQ(held, 1);
        CHECK_INT(remaining, >, 0);
        CHECK_EQ(fence, watchlock_lock_fencing_token(locks[i]));
        watchlock_lock *l2 = new_lock(other, s.names[i]);
        CHECK_STATUS(watchlock_lock_acquire(l2, 0), WATCHLOCK_ETIMEDOUT);
        watchlock_lock_free(l2);
    }
    /* list: SCAN on every master finds all of them */
    char pattern[80];
    snprintf(pattern, sizeof pattern, "c-cluster:basic:%d:*", (int)getpid());
    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, other, pattern, strlen(pattern)));
    CHECK_EQ(watchlock_lock_list_count(list), N_NAMES);
    for (int i = 0; i < N_NAMES; i++) {
        int found = 0;
        for (size_t k = 0; k < watchlock_lock_list_count(list); k++)
            found |= strcmp(watchlock_lock_list_name(list, k, NULL), s.names[i]) == 0;
        CHECK_MSG(found, "list did not show %s (master %d)", s.names[i], s.owner[i]);
    }
    watchlock_lock_list_free(list);

    for (int i = 0; i < N_NAMES; i++) {
        CHECK_OK(watchlock_lock_release(locks[i]));
        CHECK_EQ(rh_int(cluster.masters[s.owner[i]], "EXISTS %s", s.keys[i]), 0);
        watchlock_lock_free(locks[i]);
    }
    watchlock_client_close(other);
    watchlock_client_close(c);
}

static void test_renewals_on_all_masters(void)
{
    spread s;
    spread_names(&s, "renew");
    watchlock_client *c = open_client(cluster_url());
    watchlock_lock *locks[N_NAMES];
    char tokens[N_NAMES][128];
    for (int i = 0; i < N_NAMES; i++) {
        locks[i] = new_lock(c, s.names[i]);
        CHECK_OK(watchlock_lock_set_lease(locks[i], 1000));
        CHECK_OK(watchlock_lock_acquire(locks[i], 0));
        get_value(s.owner[i], s.keys[i], tokens[i], sizeof tokens[i]);
        CHECK_MSG(tokens[i][0] != '\0', "%s is not on master %d", s.keys[i], s.owner[i]);
    }
    int64_t renewals0 = watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS);
    int64_t rounds0 = watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS);
    int64_t trips0 = watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDTRIPS);
    sleep_ms(3000); /* three leases must pass */
    for (int i = 0; i < N_NAMES; i++) {
        CHECK_MSG(watchlock_lock_state(locks[i]) == WATCHLOCK_HELD, "%s: state %d, lost reason %s", s.names[i],
                  watchlock_lock_state(locks[i]), watchlock_lost_reason_str(watchlock_lock_lost_reason(locks[i])));
        char now[128];
        get_value(s.owner[i], s.keys[i], now, sizeof now);
        CHECK_STR(now, tokens[i]);
        long long ttl = rh_int(cluster.masters[s.owner[i]], "PTTL %s", s.keys[i]);
        CHECK_MSG(ttl > 0 && ttl <= 1000, "PTTL %s = %lld", s.keys[i], ttl);
        CHECK_INT(watchlock_lock_renewals(locks[i]), >=, 3);
    }
    int64_t renewals = watchlock_client_stat(c, WATCHLOCK_STAT_RENEWALS) - renewals0;
    int64_t rounds = watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDS) - rounds0;
    int64_t trips = watchlock_client_stat(c, WATCHLOCK_STAT_RENEW_ROUNDTRIPS) - trips0;
    testing_note("3 s, %d locks on %d masters: %lld renewals in %lld rounds, %lld round trips", N_NAMES, N_MASTERS,
                 (long long)renewals, (long long)rounds, (long long)trips);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), N_NAMES);
    CHECK_INT(renewals, >=, 3 * N_NAMES);
    CHECK_INT(rounds, >=, 3);
    /* the nodes' pipelines go out together: a round is one round trip (two
     * when a node had to be sent the script body), not one per node */
    CHECK_INT(trips, >=, rounds);
    CHECK_INT(trips, <, 2 * rounds);
    for (int i = 0; i < N_NAMES; i++) {
        CHECK_OK(watchlock_lock_release(locks[i]));
        CHECK_EQ(rh_int(cluster.masters[s.owner[i]], "EXISTS %s", s.keys[i]), 0);
        watchlock_lock_free(locks[i]);
    }
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_HELD_LOCKS), 0);
    watchlock_client_close(c);
}

typedef struct waiter {
    watchlock_lock *lock;
    int rc;
    int64_t done_ms;
} waiter;

static void *wait_for_lock(void *arg)
{
    waiter *w = arg;
    w->rc = watchlock_lock_acquire(w->lock, 20000);
    w->done_ms = now_ms();
    return NULL;
}

static long long shard_subscribers(int master, const char *channel)
{
    redisReply *r = rh_command(cluster.masters[master], "PUBSUB SHARDNUMSUB %s", channel);
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

static void test_waiter_woken_by_release(void)
{
    spread s;
    spread_names(&s, "wake");
    /* a name on the last master the spread found, so not always the first one */
    const char *name = s.names[N_NAMES - 1];
    int master = s.owner[N_NAMES - 1];
    char channel[120];
    snprintf(channel, sizeof channel, "%s:released", s.keys[N_NAMES - 1]);

    watchlock_client *a = open_client(cluster_url()), *b = open_client(cluster_url());
    watchlock_lock *holder = new_lock(a, name);
    CHECK_OK(watchlock_lock_set_lease(holder, 30000));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    waiter w = {.lock = new_lock(b, name), .rc = -1};
    CHECK_OK(watchlock_lock_set_lease(w.lock, 30000));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_for_lock, &w) == 0);
    WAIT_FOR(shard_subscribers(master, channel) >= 1, 10000);
    CHECK_MSG(shard_subscribers(master, channel) >= 1, "nobody subscribed to %s on master %d", channel, master);
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_release(holder));
    pthread_join(th, NULL);
    /* the wait (20 s) ends before the holder's lease (30 s) would have: getting it means being woken */
    CHECK_OK(w.rc);
    testing_note("hand-off %lld ms after the release", (long long)(w.done_ms - t0));
    CHECK_INT(w.done_ms - t0, <, 30000);
    CHECK_EQ(watchlock_lock_state(w.lock), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(w.lock));
    watchlock_lock_free(w.lock);
    watchlock_lock_free(holder);
    watchlock_client_close(b);
    watchlock_client_close(a);
}

/* "CLUSTER MYID" of master i into out. */
static void node_id(int i, char *out, size_t outlen)
{
    redisReply *r = rh_command(cluster.masters[i], "CLUSTER MYID");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
    snprintf(out, outlen, "%s", r->str);
    freeReplyObject(r);
}

/* PTTL of key on an importing node (ASKING first, on the same connection). */
static long long pttl_asking(int master, const char *key)
{
    redisContext *ctx = rh_connect(cluster.masters[master]);
    CHECK(ctx != NULL);
    redisReply *r = redisCommand(ctx, "ASKING");
    if (r)
        freeReplyObject(r);
    r = redisCommand(ctx, "PTTL %s", key);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return v;
}

/* Issue 19 item 9: min_replicas=1 and a slot migrating for longer than the
 * lease. The hold's keys are MIGRATEd to the importing node while the slot
 * stays MIGRATING/IMPORTING for three leases: every renewal gets ASK. The
 * hold must stay HELD throughout, renewed at the ASK target (ASKING + the
 * script, and WAIT on that connection: the target's replica acknowledges).
 * Before: redirected renewals were never retried under min_replicas and
 * the hold was lost one lease after the MIGRATE. */
static void test_min_replicas_renewals_follow_ask(void)
{
    int src = 0, dst = 1, other = 2;
    char name[80], key[100];
    for (int i = 0;; i++) {
        CHECK_MSG(i < 1000, "no name served by master %d", src);
        snprintf(name, sizeof name, "c-cluster:ask:%d:%d", (int)getpid(), i);
        snprintf(key, sizeof key, "watchlock:{%s}", name);
        if (owner_of(key) == src)
            break;
    }
    char url[2200];
    snprintf(url, sizeof url, "%s%smin_replicas=1&min_replicas_timeout=500ms", cluster_url(),
             strchr(cluster_url(), '?') ? "&" : "?");
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, name);
    CHECK_OK(watchlock_lock_set_lease(l, 1500));
    CHECK_OK(watchlock_lock_acquire(l, 0));

    int slot = (int)key_slot(key, strlen(key));
    char src_id[64], dst_id[64];
    node_id(src, src_id, sizeof src_id);
    node_id(dst, dst_id, sizeof dst_id);
    CHECK(rh_ok(cluster.masters[dst], "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id));
    CHECK(rh_ok(cluster.masters[src], "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id));
    redisReply *keys = rh_command(cluster.masters[src], "CLUSTER GETKEYSINSLOT %d 100", slot);
    CHECK(keys != NULL && keys->type == REDIS_REPLY_ARRAY && keys->elements > 0);
    char port[16];
    snprintf(port, sizeof port, "%d", rh_port(cluster.masters[dst]));
    const char *argv[40];
    int argc = 0;
    const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
    for (size_t k = 0; k < sizeof head / sizeof *head; k++)
        argv[argc++] = head[k];
    for (size_t k = 0; k < keys->elements && argc < 40; k++)
        argv[argc++] = keys->element[k]->str;
    redisReply *m = rh_command_argv(cluster.masters[src], argc, argv, NULL);
    CHECK_MSG(m != NULL && m->type == REDIS_REPLY_STATUS, "MIGRATE: %s", m && m->str ? m->str : "no reply");
    freeReplyObject(m);
    freeReplyObject(keys);
    int64_t t0 = now_ms();
    int64_t renewals0 = watchlock_lock_renewals(l);
    /* three leases with every renewal redirected by ASK */
    while (now_ms() - t0 < 4500) {
        CHECK_MSG(watchlock_lock_state(l) == WATCHLOCK_HELD, "state %d (%s) %lld ms into the migration",
                  watchlock_lock_state(l), watchlock_lost_reason_str(watchlock_lock_lost_reason(l)),
                  (long long)(now_ms() - t0));
        sleep_ms(20);
    }
    long long ttl = pttl_asking(dst, key);
    int64_t renewed = watchlock_lock_renewals(l) - renewals0;
    testing_note("slot %d migrating for 4.5 s: %lld renewals, PTTL on the importing node %lld", slot,
                 (long long)renewed, ttl);
    CHECK_INT(renewed, >=, 4);
    CHECK_MSG(ttl > 0 && ttl <= 1500, "PTTL on the importing node: %lld", ttl);
    /* end the migration: the slot is the destination's */
    CHECK(rh_ok(cluster.masters[dst], "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    CHECK(rh_ok(cluster.masters[src], "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    CHECK(rh_ok(cluster.masters[other], "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static const test_case tests[] = {
    {"acquire_release_over_masters", test_acquire_release_over_masters, 0},
    {"renewals_on_all_masters", test_renewals_on_all_masters, 0},
    {"waiter_woken_by_release", test_waiter_woken_by_release, 0},
    {"min_replicas_renewals_follow_ask", test_min_replicas_renewals_follow_ask, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--list") == 0 || argv[i][0] == '-')
            return testing_main(argc, argv, tests, TESTING_NO_SERVER);
    if (cluster_start() != 0) {
        printf("could not start a cluster (tests/harness/cluster.py --serve)\n");
        return 1;
    }
    int rc = testing_main(argc, argv, tests, TESTING_NO_SERVER);
    cluster_stop();
    return rc;
}
