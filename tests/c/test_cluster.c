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
 * a waiter on another client woken through the sharded channel. Private
 * clusters built node by node from the C harness (rh_start): nodes replaced
 * one by one are closed by the client (threads, connections) while its
 * locks keep working (issue 19.7); nodes with cluster-preferred-endpoint-type
 * unknown-endpoint, whose redirects name no host (issue 19.8). Failovers,
 * migrations, dead seeds and TLS are tested from Python
 * (tests/python/test_cluster.py), on the same core.
 */
#include "testing.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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

static long long shard_subscribers_on(rh_server *srv, const char *channel)
{
    redisReply *r = rh_command(srv, "PUBSUB SHARDNUMSUB %s", channel);
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

static long long shard_subscribers(int master, const char *channel)
{
    return shard_subscribers_on(cluster.masters[master], channel);
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

/* The fast acquire (MULTI, SET, SET fence, INCR, EXEC: issue 19 item 4)
 * on every master: a name's second acquire on a client is one transaction
 * on the master of its slot, and its token is above the first. */
static void test_fast_acquire_on_every_master(void)
{
    spread s;
    spread_names(&s, "fast");
    watchlock_client *c = open_client(cluster_url());
    for (int i = 0; i < N_NAMES; i++) {
        watchlock_lock *l = new_lock(c, s.names[i]);
        CHECK_OK(watchlock_lock_acquire(l, 0)); /* the script: the name's first acquire here */
        int64_t first = watchlock_lock_fencing_token(l);
        CHECK_OK(watchlock_lock_release(l));
        long long multis = rh_info(cluster.masters[s.owner[i]], "commandstats", "cmdstat_multi");
        CHECK_OK(watchlock_lock_acquire(l, 0));
        CHECK_EQ(rh_info(cluster.masters[s.owner[i]], "commandstats", "cmdstat_multi"), multis + 1);
        CHECK_INT(watchlock_lock_fencing_token(l), >, first);
        CHECK_EQ(rh_int(cluster.masters[s.owner[i]], "EXISTS %s", s.keys[i]), 1);
        CHECK_OK(watchlock_lock_release(l));
        watchlock_lock_free(l);
    }
    watchlock_client_close(c);
}

/* ---- clusters built node by node (nodes joining and leaving, endpoint types) ----
 *
 * redis-servers from the C harness (rh_start) in cluster mode, each with an
 * explicit bus port (the default, port + 10000, does not exist for the
 * upper ephemeral ports): node A serves every slot but a few, a second node
 * serves those few ("the moving slots"), which then move from node to node
 * with their keys (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) as
 * redis-cli's resharding does. Every wait is on a condition. */

typedef struct mnode {
    rh_server *srv;
    char id[48];
    int port, bus;
} mnode;

static int free_tcp_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void mnode_start(mnode *n, const char *endpoint_type)
{
    memset(n, 0, sizeof *n);
    for (int attempt = 0; attempt < 10 && n->srv == NULL; attempt++) {
        n->bus = free_tcp_port();
        char bus[16];
        snprintf(bus, sizeof bus, "%d", n->bus);
        const char *extra[] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                               "--cluster-node-timeout", "5000", "--cluster-port", bus,
                               /* a master that gave away its last slot stays a master */
                               "--cluster-allow-replica-migration", "no", "--cluster-preferred-endpoint-type",
                               endpoint_type, NULL};
        rh_options o = {.extra = extra};
        n->srv = rh_start(&o);
    }
    CHECK_MSG(n->srv != NULL, "no cluster node started");
    n->port = rh_port(n->srv);
    redisReply *r = rh_command(n->srv, "CLUSTER MYID");
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_STRING && r->len < sizeof n->id, "CLUSTER MYID failed");
    memcpy(n->id, r->str, r->len + 1);
    freeReplyObject(r);
}

static void mnode_free(mnode *n)
{
    rh_free(n->srv);
    n->srv = NULL;
}

static void check_ok(mnode *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check_ok(mnode *n, const char *fmt, ...)
{
    char cmd[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    /* split on spaces: the arguments here never contain any */
    const char *argv[40];
    char *save = NULL, *copy = strdup(cmd);
    int argc = 0;
    for (char *t = strtok_r(copy, " ", &save); t != NULL && argc < 40; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    redisReply *r = rh_command_argv(n->srv, argc, argv, NULL);
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_STATUS, "%s on %d: %s", cmd, n->port,
              r == NULL ? "no answer" : r->type == REDIS_REPLY_ERROR ? r->str : "not OK");
    freeReplyObject(r);
    free(copy);
}

/* Which port serves key's slot as node n sees it: its own (it answers),
 * the port of a MOVED, or -1 (ASK, down, no answer). */
static int seen_owner(mnode *n, const char *key)
{
    const char *argv[2] = {"EXISTS", key};
    redisReply *r = rh_command_argv(n->srv, 2, argv, NULL);
    int port = -1;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        port = n->port;
    else if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0 && strrchr(r->str, ':'))
        port = atoi(strrchr(r->str, ':') + 1);
    if (r != NULL)
        freeReplyObject(r);
    return port;
}

static bool all_see_owner(mnode **nodes, int n, const char *key, int port)
{
    for (int i = 0; i < n; i++)
        if (seen_owner(nodes[i], key) != port)
            return false;
    return true;
}

/* Whether n knows node `id` (met, handshake over). */
static bool knows(mnode *n, const char *id)
{
    redisReply *r = rh_command(n->srv, "CLUSTER NODES");
    bool ok = false;
    if (r != NULL && (r->type == REDIS_REPLY_STRING)) {
        const char *line = strstr(r->str, id);
        if (line != NULL) {
            const char *eol = strchr(line, '\n');
            size_t len = eol ? (size_t)(eol - line) : strlen(line);
            char buf[600];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), line);
            ok = strstr(buf, "handshake") == NULL && strstr(buf, "noaddr") == NULL && strstr(buf, "fail") == NULL;
        }
    }
    if (r != NULL)
        freeReplyObject(r);
    return ok;
}

static bool cluster_ok(mnode *n)
{
    redisReply *r = rh_command(n->srv, "CLUSTER INFO");
    bool ok = r != NULL && (r->type == REDIS_REPLY_STRING) &&
              strstr(r->str, "cluster_state:ok") != NULL;
    if (r != NULL)
        freeReplyObject(r);
    return ok;
}

/* A and B with configEpochs 1 and 2: B serves `slots`, A all the others. */
static void mini_create(mnode *a, mnode *b, const int *slots, int n_slots)
{
    check_ok(a, "CLUSTER SET-CONFIG-EPOCH 1");
    check_ok(b, "CLUSTER SET-CONFIG-EPOCH 2");
    bool moving[16384] = {false};
    for (int i = 0; i < n_slots; i++)
        moving[slots[i]] = true;
    for (int s = 0; s < 16384;) {
        if (moving[s]) {
            check_ok(b, "CLUSTER ADDSLOTS %d", s);
            s++;
            continue;
        }
        int e = s;
        while (e + 1 < 16384 && !moving[e + 1])
            e++;
        check_ok(a, "CLUSTER ADDSLOTSRANGE %d %d", s, e);
        s = e + 1;
    }
    check_ok(a, "CLUSTER MEET 127.0.0.1 %d %d", b->port, b->bus);
    WAIT_FOR(knows(a, b->id) && knows(b, a->id) && cluster_ok(a) && cluster_ok(b), 30000);
    CHECK_MSG(knows(a, b->id) && knows(b, a->id) && cluster_ok(a) && cluster_ok(b),
              "nodes %d and %d did not form a cluster", a->port, b->port);
}

/* Adds node n (met through a) and waits until every node of `all` knows it and it knows them. */
static void mini_join(mnode *a, mnode *n, mnode **all, int n_all)
{
    check_ok(a, "CLUSTER MEET 127.0.0.1 %d %d", n->port, n->bus);
    bool ok = false;
    for (int64_t end = now_ms() + 30000; !ok && now_ms() < end; sleep_ms(20)) {
        ok = true;
        for (int i = 0; i < n_all && ok; i++)
            ok = all[i] == n || (knows(all[i], n->id) && knows(n, all[i]->id));
        ok = ok && cluster_ok(n);
    }
    CHECK_MSG(ok, "node %d did not join", n->port);
}

/* Moves one slot and its keys from src to dst; `others` are told the new owner too. */
static void mini_move_slot(mnode *src, mnode *dst, mnode **others, int n_others, int slot)
{
    check_ok(dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, src->id);
    check_ok(src, "CLUSTER SETSLOT %d MIGRATING %s", slot, dst->id);
    for (;;) {
        redisReply *r = rh_command(src->srv, "CLUSTER GETKEYSINSLOT %d 100", slot);
        CHECK_MSG(r != NULL && r->type == REDIS_REPLY_ARRAY, "GETKEYSINSLOT on %d", src->port);
        size_t n = r->elements;
        for (size_t i = 0; i < n; i++) {
            char port[16];
            snprintf(port, sizeof port, "%d", dst->port);
            const char *argv[6] = {"MIGRATE", "127.0.0.1", port, r->element[i]->str, "0", "5000"};
            redisReply *m = rh_command_argv(src->srv, 6, argv, NULL);
            CHECK_MSG(m != NULL && m->type == REDIS_REPLY_STATUS, "MIGRATE %s: %s", r->element[i]->str,
                      m == NULL ? "no answer" : m->type == REDIS_REPLY_ERROR ? m->str : "?");
            freeReplyObject(m);
        }
        freeReplyObject(r);
        if (n == 0)
            break;
    }
    check_ok(dst, "CLUSTER SETSLOT %d NODE %s", slot, dst->id);
    /* a source that just gave away its last slot may already be a replica (redis #9223) */
    char id_arg[80], slot_arg[16];
    snprintf(id_arg, sizeof id_arg, "%s", dst->id);
    snprintf(slot_arg, sizeof slot_arg, "%d", slot);
    const char *setslot[] = {"CLUSTER", "SETSLOT", slot_arg, "NODE", id_arg};
    redisReply *r = rh_command_argv(src->srv, 5, setslot, NULL);
    CHECK_MSG(r != NULL && (r->type == REDIS_REPLY_STATUS ||
                            (r->type == REDIS_REPLY_ERROR && strstr(r->str, "only with masters") != NULL)),
              "CLUSTER SETSLOT %d NODE on the source %d: %s", slot, src->port,
              r == NULL ? "no answer" : r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    for (int i = 0; i < n_others; i++)
        check_ok(others[i], "CLUSTER SETSLOT %d NODE %s", slot, dst->id);
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

/* "<prefix>N" with its lock key in `slot`, into out. */
static void name_in_slot(char *out, size_t len, const char *prefix, int slot)
{
    for (int i = 0; i < 1000000; i++) {
        char key[200];
        snprintf(out, len, "%s%d", prefix, i);
        snprintf(key, sizeof key, "watchlock:{%s}", out);
        if ((int)key_slot(key, strlen(key)) == slot)
            return;
    }
    CHECK_MSG(0, "no name for slot %d", slot);
}

typedef struct churn_waiter {
    watchlock_lock *lock;
    int rc;
} churn_waiter;

static void *churn_wait(void *arg)
{
    churn_waiter *w = arg;
    w->rc = watchlock_lock_acquire(w->lock, 60000);
    return NULL;
}

#define CHURN_STEPS 5

/* Issue 19.7: a node that leaves the slot map (its slots moved to a new
 * node, as with pods replaced one by one) is closed once nothing routes to
 * it: its subscriber thread stopped and joined, its connections closed.
 * Before, every node the client had ever seen kept a subscriber thread
 * that reconnected forever and its pooled connections, so the client's
 * threads grew by one per replaced node. Locks keep working throughout: a
 * hold renewed across every move, acquire/release on names in the moving
 * slots, a waiter on the moving node woken by a release. */
static void test_nodes_leaving_the_map_are_closed(void)
{
    char held_name[64], wait_name[64], use_name[64], key[120];
    snprintf(held_name, sizeof held_name, "churn-held-%d", (int)getpid());
    snprintf(key, sizeof key, "watchlock:{%s}", held_name);
    int slots[3];
    slots[0] = (int)key_slot(key, strlen(key));
    slots[1] = (slots[0] + 4000) % 16384;
    slots[2] = (slots[0] + 9000) % 16384;
    name_in_slot(wait_name, sizeof wait_name, "churn-wait-", slots[1]);
    name_in_slot(use_name, sizeof use_name, "churn-use-", slots[2]);
    char wait_key[120], use_key[120];
    snprintf(wait_key, sizeof wait_key, "watchlock:{%s}", wait_name);
    snprintf(use_key, sizeof use_key, "watchlock:{%s}", use_name);

    static mnode a, b[CHURN_STEPS + 1];
    mnode_start(&a, "ip");
    mnode_start(&b[0], "ip");
    mini_create(&a, &b[0], slots, 3);
    char url[100];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", a.port);
    watchlock_client *c = open_client(url), *w = open_client(url);
    watchlock_lock *held = new_lock(c, held_name), *blocker = new_lock(c, wait_name), *use = new_lock(c, use_name);
    CHECK_OK(watchlock_lock_set_lease(held, 10000));
    CHECK_OK(watchlock_lock_set_lease(blocker, 120000));
    CHECK_OK(watchlock_lock_acquire(held, 0));
    churn_waiter cw = {.lock = new_lock(w, wait_name), .rc = -1};
    CHECK_OK(watchlock_lock_set_lease(cw.lock, 60000));

    char channel[160];
    snprintf(channel, sizeof channel, "%s:released", wait_key);
    int threads0 = -1;
    /* Step 0 warms up (every thread the clients keep is started): a waiter
     * on b[0] woken by a release. Then each step starts a waiter on the
     * node that serves the slots, moves them (and their keys) to a new
     * node while it waits, and releases: the waiter must follow the slot
     * to the new node and be woken there. */
    for (int step = 0; step <= CHURN_STEPS; step++) {
        mnode *owner = &b[step > 0 ? step - 1 : 0], *next = &b[step];
        CHECK_OK(watchlock_lock_acquire(blocker, 0));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, churn_wait, &cw) == 0);
        WAIT_FOR(shard_subscribers_on(owner->srv, channel) >= 1, 20000);
        CHECK_MSG(shard_subscribers_on(owner->srv, channel) >= 1, "step %d: the waiter did not subscribe on %d", step,
                  owner->port);
        if (step > 0) {
            /* A new node takes the slots over. */
            mnode_start(next, "ip");
            mnode *live[3] = {&a, owner, next};
            mini_join(&a, next, live, 3);
            mnode *others[1] = {&a};
            for (int i = 0; i < 3; i++)
                mini_move_slot(owner, next, others, 1, slots[i]);
            WAIT_FOR(all_see_owner(live, 3, key, next->port) && all_see_owner(live, 3, wait_key, next->port) &&
                         all_see_owner(live, 3, use_key, next->port),
                     30000);
            CHECK_MSG(all_see_owner(live, 3, key, next->port) && all_see_owner(live, 3, wait_key, next->port) &&
                          all_see_owner(live, 3, use_key, next->port),
                      "step %d: the slots did not move to %d", step, next->port);
            /* The first old node stays up (its connections must close);
             * the others go away, as a replaced pod does. */
            if (step > 1) {
                mnode_free(owner);
                check_ok(&a, "CLUSTER FORGET %s", owner->id);
                check_ok(next, "CLUSTER FORGET %s", owner->id);
            }
            /* the waiter followed the slot */
            WAIT_FOR(shard_subscribers_on(next->srv, channel) >= 1, 20000);
            CHECK_MSG(shard_subscribers_on(next->srv, channel) >= 1, "step %d: the waiter did not move to %d", step,
                      next->port);
        }
        int64_t t0 = now_ms();
        CHECK_OK(watchlock_lock_release(blocker));
        pthread_join(th, NULL);
        CHECK_OK(cw.rc); /* 60 s wait, 120 s lease: getting it means being woken */
        CHECK_INT(now_ms() - t0, <, 20000);
        CHECK_OK(watchlock_lock_release(cw.lock));
        CHECK_OK(watchlock_lock_acquire(use, 0));
        CHECK_OK(watchlock_lock_release(use));
        CHECK_MSG(watchlock_lock_state(held) == WATCHLOCK_HELD, "step %d: the renewed hold is %s", step,
                  watchlock_lost_reason_str(watchlock_lock_lost_reason(held)));
        if (step == 0)
            threads0 = count_threads();
    }
    /* Nothing routes to the old nodes any more: their threads end and
     * their connections close (the client reaps them as it works). */
    int threads = count_threads();
    long long conns = rh_info(b[0].srv, "clients", "connected_clients");
    for (int64_t end = now_ms() + 20000; (threads > threads0 || conns > 1) && now_ms() < end; sleep_ms(50)) {
        CHECK_OK(watchlock_lock_acquire(use, 0));
        CHECK_OK(watchlock_lock_release(use));
        int64_t held_tmp = 0;
        int h = 0;
        CHECK_OK(watchlock_client_inspect(w, wait_name, strlen(wait_name), &h, &held_tmp, NULL));
        threads = count_threads();
        conns = rh_info(b[0].srv, "clients", "connected_clients");
    }
    testing_note("%d nodes replaced: %d threads before, %d after; %lld connections on the first old node (the probe's "
                 "included)",
                 CHURN_STEPS, threads0, threads, conns);
    CHECK_INT(threads, <=, threads0);
    CHECK_INT(conns, <=, 1);
    CHECK_MSG(watchlock_lock_state(held) == WATCHLOCK_HELD, "the renewed hold is %s",
              watchlock_lost_reason_str(watchlock_lock_lost_reason(held)));
    CHECK_OK(watchlock_lock_release(held));
    CHECK_EQ(rh_int(b[CHURN_STEPS].srv, "EXISTS %s", key), 0);
    watchlock_lock_free(cw.lock);
    watchlock_lock_free(held);
    watchlock_lock_free(blocker);
    watchlock_lock_free(use);
    watchlock_client_close(w);
    watchlock_client_close(c);
    mnode_free(&a);
    for (int i = 0; i <= CHURN_STEPS; i++)
        mnode_free(&b[i]);
}

/* Issue 19.8: with cluster-preferred-endpoint-type unknown-endpoint Redis
 * names no host: CLUSTER SLOTS gives NULL, MOVED and ASK give ":port",
 * meaning "the node you asked, at this port". The parser refused ":port",
 * so a moved slot failed every call with the MOVED error itself. */
static void test_unknown_endpoint_redirects(void)
{
    char name[64], key[120], fresh[64], fresh_key[120];
    snprintf(name, sizeof name, "unknown-endpoint-%d", (int)getpid());
    snprintf(key, sizeof key, "watchlock:{%s}", name);
    int slot = (int)key_slot(key, strlen(key));
    name_in_slot(fresh, sizeof fresh, "unknown-endpoint-ask-", slot);
    snprintf(fresh_key, sizeof fresh_key, "watchlock:{%s}", fresh);

    static mnode a, b, n;
    mnode_start(&a, "unknown-endpoint");
    mnode_start(&b, "unknown-endpoint");
    mini_create(&a, &b, &slot, 1);
    mnode_start(&n, "unknown-endpoint");
    mnode *live[3] = {&a, &b, &n};
    mini_join(&a, &n, live, 3);
    redisReply *r = rh_command(b.srv, "CLUSTER SLOTS");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0);
    CHECK_MSG(r->element[0]->element[2]->element[0]->type == REDIS_REPLY_NIL, "CLUSTER SLOTS names an endpoint");
    freeReplyObject(r);

    char url[100];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", a.port);
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, name), *f = new_lock(c, fresh);
    CHECK_OK(watchlock_lock_set_lease(l, 30000));
    CHECK_OK(watchlock_lock_acquire(l, 0)); /* on b, where the map says */
    CHECK_EQ(rh_int(b.srv, "EXISTS %s", key), 1);

    /* Mid-migration: b answers "ASK <slot> :<n's port>" for a key it no
     * longer has (moved to n); the release follows it with ASKING. */
    CHECK_OK(watchlock_lock_set_lease(f, 30000));
    CHECK_OK(watchlock_lock_acquire(f, 0));
    CHECK_EQ(rh_int(b.srv, "EXISTS %s", fresh_key), 1);
    check_ok(&n, "CLUSTER SETSLOT %d IMPORTING %s", slot, b.id);
    check_ok(&b, "CLUSTER SETSLOT %d MIGRATING %s", slot, n.id);
    char fence_key[140], port_s[16];
    snprintf(fence_key, sizeof fence_key, "%s:fence", fresh_key);
    snprintf(port_s, sizeof port_s, "%d", n.port);
    const char *mig[] = {"MIGRATE", "127.0.0.1", port_s, "", "0", "5000", "KEYS", fresh_key, fence_key};
    r = rh_command_argv(b.srv, 9, mig, NULL);
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_STATUS, "MIGRATE: %s", r && r->str ? r->str : "no answer");
    freeReplyObject(r);
    r = rh_command(b.srv, "EXISTS %s", fresh_key);
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_ERROR, "no ASK from the migrating node");
    char want[64];
    snprintf(want, sizeof want, "ASK %d :%d", slot, n.port);
    CHECK_STR(r->str, want);
    freeReplyObject(r);
    CHECK_OK(watchlock_lock_release(f)); /* followed to n with ASKING */
    r = rh_command(n.srv, "EXISTS %s", fresh_key);
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_ERROR, "n answers for a slot it imports (%d)", r ? r->type : -1);
    freeReplyObject(r);
    const char *asking[][2] = {{"ASKING", NULL}, {"EXISTS", fresh_key}};
    redisContext *ctx = rh_connect(n.srv);
    CHECK(ctx != NULL);
    redisAppendCommandArgv(ctx, 1, asking[0], NULL);
    redisAppendCommandArgv(ctx, 2, asking[1], NULL);
    void *rr = NULL;
    CHECK(redisGetReply(ctx, &rr) == REDIS_OK);
    freeReplyObject(rr);
    CHECK(redisGetReply(ctx, &rr) == REDIS_OK);
    r = rr;
    CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 0, "the released key is still on n");
    freeReplyObject(r);
    redisFree(ctx);

    /* Moved: the client's map still says b, which answers "MOVED <slot> :<port>". */
    mnode *others[1] = {&a};
    mini_move_slot(&b, &n, others, 1, slot);
    WAIT_FOR(all_see_owner(live, 3, key, n.port), 30000);
    CHECK(all_see_owner(live, 3, key, n.port));
    r = rh_command(b.srv, "EXISTS %s", key);
    snprintf(want, sizeof want, "MOVED %d :%d", slot, n.port);
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_ERROR && strcmp(r->str, want) == 0, "b said '%s', not '%s'",
              r && r->str ? r->str : "", want);
    freeReplyObject(r);
    CHECK_OK(watchlock_lock_extend(l, 30000));
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(n.srv, "EXISTS %s", key), 0);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(n.srv, "EXISTS %s", key), 1);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_lock_free(f);
    watchlock_client_close(c);
    mnode_free(&a);
    mnode_free(&b);
    mnode_free(&n);
}


/* Issue 19.8: preferred endpoint "hostname" on nodes that have none: Redis
 * writes "?" for the endpoint (CLUSTER SLOTS, MOVED). "?" is no host name:
 * the map's metadata gives the node's ip, and "MOVED <slot> ?:<port>" makes
 * the client ask the map again instead of connecting to a host called "?". */
static void test_question_mark_endpoint(void)
{
    char name[64], key[120];
    snprintf(name, sizeof name, "qmark-endpoint-%d", (int)getpid());
    snprintf(key, sizeof key, "watchlock:{%s}", name);
    int slot = (int)key_slot(key, strlen(key));
    static mnode a, b, n;
    mnode_start(&a, "hostname");
    mnode_start(&b, "hostname");
    mini_create(&a, &b, &slot, 1);
    mnode_start(&n, "hostname");
    mnode *live[3] = {&a, &b, &n};
    mini_join(&a, &n, live, 3);
    redisReply *r = rh_command(b.srv, "CLUSTER SLOTS");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0);
    const redisReply *ep = r->element[0]->element[2]->element[0];
    CHECK_MSG(ep->type == REDIS_REPLY_STRING && strcmp(ep->str, "?") == 0, "CLUSTER SLOTS endpoint is not '?'");
    freeReplyObject(r);

    char url[100];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", a.port);
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, name);
    CHECK_OK(watchlock_lock_set_lease(l, 30000));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(b.srv, "EXISTS %s", key), 1);
    mnode *others[1] = {&a};
    mini_move_slot(&b, &n, others, 1, slot);
    WAIT_FOR(all_see_owner(live, 3, key, n.port), 30000);
    CHECK(all_see_owner(live, 3, key, n.port));
    r = rh_command(b.srv, "EXISTS %s", key);
    char want[64];
    snprintf(want, sizeof want, "MOVED %d ?:%d", slot, n.port);
    CHECK_MSG(r != NULL && r->type == REDIS_REPLY_ERROR && strcmp(r->str, want) == 0, "b said '%s', not '%s'",
              r && r->str ? r->str : "", want);
    freeReplyObject(r);
    CHECK_OK(watchlock_lock_extend(l, 30000)); /* b: "MOVED ?:port", the map: n */
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(n.srv, "EXISTS %s", key), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    mnode_free(&a);
    mnode_free(&b);
    mnode_free(&n);
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

/* Issue 22: the fair lock's queue and wake-ups live on the name's slot. For
 * names on every master: a waiter's queue keys are on the master that
 * serves the name, its own wake-up channel is subscribed there (sharded),
 * and a release hands the lock over through it (well before the waiter's
 * next liveness call, 667 ms later, would have found it). */
static void test_fair_queue_on_the_names_slot(void)
{
    spread s;
    spread_names(&s, "fairq");
    watchlock_client *a = open_client(cluster_url()), *b = open_client(cluster_url());
    int64_t took[N_NAMES];
    for (int i = 0; i < N_NAMES; i++) {
        rh_server *m = cluster.masters[s.owner[i]];
        watchlock_lock *holder = NULL;
        CHECK_OK(watchlock_fair_lock_new(&holder, a, s.names[i], strlen(s.names[i])));
        CHECK_OK(watchlock_lock_acquire(holder, 0));
        waiter w = {.rc = -1};
        CHECK_OK(watchlock_fair_lock_new(&w.lock, b, s.names[i], strlen(s.names[i])));
        CHECK_OK(watchlock_lock_set_lease(w.lock, 30000));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, wait_for_lock, &w) == 0);
        char pattern[160];
        snprintf(pattern, sizeof pattern, "%s:q:c:*", s.keys[i]);
        long long subs = 0;
        for (int64_t end = now_ms() + 10000; now_ms() < end; sleep_ms(5)) {
            redisReply *r = rh_command(m, "PUBSUB SHARDCHANNELS %s", pattern);
            subs = r != NULL && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
            if (r != NULL)
                freeReplyObject(r);
            if (subs >= 1 && rh_int(m, "EXISTS %s:q:q", s.keys[i]) == 1)
                break;
        }
        CHECK_MSG(subs >= 1, "no wake-up channel %s on master %d", pattern, s.owner[i]);
        CHECK_EQ(rh_int(m, "ZCARD %s:q:q", s.keys[i]), 1);
        int64_t t0 = now_ms();
        CHECK_OK(watchlock_lock_release(holder));
        pthread_join(th, NULL);
        CHECK_OK(w.rc);
        took[i] = w.done_ms - t0;
        CHECK_EQ(watchlock_lock_state(w.lock), WATCHLOCK_HELD);
        CHECK_OK(watchlock_lock_release(w.lock));
        watchlock_lock_free(w.lock);
        watchlock_lock_free(holder);
    }
    int64_t sorted[N_NAMES];
    memcpy(sorted, took, sizeof sorted);
    for (int i = 1; i < N_NAMES; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int64_t t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    testing_note("fair hand-off over %d names on %d masters: median %lld ms, max %lld ms", N_NAMES, N_MASTERS,
                 (long long)sorted[N_NAMES / 2], (long long)sorted[N_NAMES - 1]);
    CHECK_INT(sorted[N_NAMES / 2], <, 400); /* woken, not found by the next liveness call */
    watchlock_client_close(b);
    watchlock_client_close(a);
}

/* Issue 22: a fair lock's queue across a slot migration. A holder and a
 * waiter blocked in acquire on a name whose slot moves (all its keys in one
 * MIGRATE, then SETSLOT NODE everywhere): the holder stays HELD (its
 * renewals follow MOVED), the waiter's liveness calls and sharded wake-up
 * channel follow the slot, and the release on the new node hands over. */
static void test_fair_queue_across_slot_migration(void)
{
    int src = 2, dst = 0, other = 1;
    char name[80], key[100];
    for (int i = 0;; i++) {
        CHECK_MSG(i < 1000, "no name served by master %d", src);
        snprintf(name, sizeof name, "c-cluster:fairmove:%d:%d", (int)getpid(), i);
        snprintf(key, sizeof key, "watchlock:{%s}", name);
        if (owner_of(key) == src)
            break;
    }
    watchlock_client *a = open_client(cluster_url()), *b = open_client(cluster_url());
    watchlock_lock *holder = NULL;
    waiter w = {.rc = -1};
    CHECK_OK(watchlock_fair_lock_new(&holder, a, name, strlen(name)));
    CHECK_OK(watchlock_lock_set_lease(holder, 1500));
    CHECK_OK(watchlock_lock_acquire(holder, 0));
    CHECK_OK(watchlock_fair_lock_new(&w.lock, b, name, strlen(name)));
    CHECK_OK(watchlock_lock_set_lease(w.lock, 30000));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_for_lock, &w) == 0);
    WAIT_FOR(rh_int(cluster.masters[src], "ZCARD %s:q:q", key) == 1, 10000);
    CHECK_EQ(rh_int(cluster.masters[src], "ZCARD %s:q:q", key), 1);

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
    CHECK(rh_ok(cluster.masters[dst], "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    CHECK(rh_ok(cluster.masters[src], "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    CHECK(rh_ok(cluster.masters[other], "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    sleep_ms(2000); /* more than a lease: the holder is renewed, the waiter renews its liveness, on dst */
    CHECK_EQ(watchlock_lock_state(holder), WATCHLOCK_HELD);
    CHECK_EQ(w.rc, -1); /* still waiting */
    CHECK_EQ(rh_int(cluster.masters[dst], "ZCARD %s:q:q", key), 1);
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_release(holder));
    pthread_join(th, NULL);
    CHECK_OK(w.rc);
    testing_note("after the slot moved, the waiter got the lock %lld ms after the release",
                 (long long)(w.done_ms - t0));
    CHECK_INT(w.done_ms - t0, <, 3000);
    CHECK_EQ(watchlock_lock_state(w.lock), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(w.lock));
    watchlock_lock_free(w.lock);
    watchlock_lock_free(holder);
    watchlock_client_close(b);
    watchlock_client_close(a);
}

static const test_case tests[] = {
    {"fair_queue_across_slot_migration", test_fair_queue_across_slot_migration, 0},
    {"fair_queue_on_the_names_slot", test_fair_queue_on_the_names_slot, 0},
    {"acquire_release_over_masters", test_acquire_release_over_masters, 0},
    {"renewals_on_all_masters", test_renewals_on_all_masters, 0},
    {"waiter_woken_by_release", test_waiter_woken_by_release, 0},
    {"fast_acquire_on_every_master", test_fast_acquire_on_every_master, 0},
    {"nodes_leaving_the_map_are_closed", test_nodes_leaving_the_map_are_closed, 180},
    {"unknown_endpoint_redirects", test_unknown_endpoint_redirects, 60},
    {"question_mark_endpoint", test_question_mark_endpoint, 60},
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
