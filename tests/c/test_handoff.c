/*
 * test_handoff.c - issue 32 item 2: a queued kind's hand-off carries the
 * grant in the waiter's wake-up message, so the granted waiter holds
 * without calling the acquire script again; against a real redis-server.
 *   scripts_per_turn_*   a turn (the waiter's enqueue, the holder's
 *                        release, the waiter holding) costs the server 2
 *                        script calls (INFO commandstats), not 3;
 *   contended_turn_commands_*
 *                        a turn with the queue never empty costs the
 *                        server at most 52 commands inside its 2 scripts
 *                        (72 before the contended paths were trimmed),
 *                        and leaves no structure key with a TTL under
 *                        the lease;
 *   forged_grant_*       grant messages the waiter must not hold on (its
 *                        validity gone, another identity, unparsable, older
 *                        than its latest queued call): it asks the server;
 *   late_wakeup_*        a wake-up delivered later than the grant's lease
 *                        (the delay proxy holds the waiter's replies and
 *                        messages) never makes the waiter believe it holds:
 *                        the next waiter gets the name when the grant
 *                        lapses, and the two never hold at once.
 */
#include "proxy_harness.h"
#include "queue_helpers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <strings.h>

enum { FAIR, SEM, WRITE };

static watchlock_lock *make(watchlock_client *c, int kind, const char *name, int64_t lease)
{
    watchlock_lock *l = NULL;
    if (kind == FAIR)
        CHECK_OK(watchlock_fair_lock_new(&l, c, name, strlen(name)));
    else if (kind == SEM)
        CHECK_OK(watchlock_semaphore_new(&l, c, name, strlen(name), 1));
    else
        CHECK_OK(watchlock_rwlock_new(&l, c, name, strlen(name), 1));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

static long long scripts(void)
{
    return rh_info(test_server(), "commandstats", "cmdstat_evalsha") +
           rh_info(test_server(), "commandstats", "cmdstat_eval");
}

/* ZCARDs queue_len sent (INFO commandstats counts them with the scripts'). */
static long long zcards_sent;

/* The length of the name's queue, read without a script (name_info is one). */
static long long queue_len(void)
{
    redisReply *r = rh_command(test_server(), "KEYS *:q:q");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    long long n = 0;
    if (r->elements == 1) {
        n = rh_int(test_server(), "ZCARD %b", r->element[0]->str, r->element[0]->len);
        zcards_sent++;
    }
    freeReplyObject(r);
    return n;
}

/* A queued waiter's acquire calls (EVALSHA or EVAL with 6 keys and 13
 * arguments: 22 words; a liveness round for one waiter has 17) in the
 * server's slowlog, which logs every command here (forged_grant_*). */
static long long acquire_calls(void)
{
    redisReply *r = rh_command(test_server(), "SLOWLOG GET 1000");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    long long n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 || e->element[3]->type != REDIS_REPLY_ARRAY)
            continue;
        const redisReply *args = e->element[3];
        if (args->elements == 22 && args->element[0]->type == REDIS_REPLY_STRING &&
            (strcasecmp(args->element[0]->str, "evalsha") == 0 || strcasecmp(args->element[0]->str, "eval") == 0))
            n++;
    }
    freeReplyObject(r);
    return n;
}

/* The only queued waiter's channel and waiting identity "<token>.1", as
 * the server has them (PUBSUB CHANNELS, the queue's data hash). */
static void waiter_of(char *chan, size_t chan_size, char *ident, size_t ident_size)
{
    redisReply *r = rh_command(test_server(), "PUBSUB CHANNELS *:q:c:*");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    snprintf(chan, chan_size, "%s", r->element[0]->str);
    freeReplyObject(r);
    const char *id = strstr(chan, ":q:c:") + 5;
    r = rh_command(test_server(), "KEYS *:q:d");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    redisReply *w = rh_command(test_server(), "HGET %s w:%s", r->element[0]->str, id);
    freeReplyObject(r);
    CHECK(w != NULL && w->type == REDIS_REPLY_STRING);
    snprintf(ident, ident_size, "%.*s", (int)strcspn(w->str, " "), w->str);
    freeReplyObject(w);
}

static long long server_us(void)
{
    redisReply *r = rh_command(test_server(), "TIME");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    long long us = atoll(r->element[0]->str) * 1000000 + atoll(r->element[1]->str);
    freeReplyObject(r);
    return us;
}

typedef struct acquirer {
    watchlock_lock *l;
    int64_t wait_ms;
    int rc;
    atomic_bool done;
    pthread_t t;
} acquirer;

static void *acquire_main(void *arg)
{
    acquirer *a = arg;
    a->rc = watchlock_lock_acquire(a->l, a->wait_ms);
    atomic_store(&a->done, true);
    return NULL;
}

static void start(acquirer *a, watchlock_lock *l, int64_t wait_ms)
{
    a->l = l;
    a->wait_ms = wait_ms;
    a->rc = -1;
    atomic_init(&a->done, false);
    CHECK(pthread_create(&a->t, NULL, acquire_main, a) == 0);
}

/* Trials of one turn each: the holder holds, the waiter queues, the holder
 * releases, the waiter holds. The fewest script calls a turn took over the
 * trials (a liveness round of the waiter's watchdog may fall into one):
 * 2 (enqueue, release) when the wake-up's grant is taken, 3 when the
 * waiter calls the acquire script again after it (before issue 32.2). */
static void scripts_per_turn(int kind)
{
    watchlock_client *ca = open_client(test_url("")), *cb = open_client(test_url(""));
    watchlock_lock *a = make(ca, kind, "ho-turn", 10000), *b = make(cb, kind, "ho-turn", 10000);
    long long fewest = 99;
    for (int trial = 0; trial < 6; trial++) {
        CHECK_OK(watchlock_lock_acquire(a, 0));
        int64_t fa = watchlock_lock_fencing_token(a);
        long long s0 = scripts();
        acquirer w;
        start(&w, b, 30000);
        WAIT_FOR(queue_len() == 1, 20000);
        CHECK_EQ(queue_len(), 1);
        CHECK_OK(watchlock_lock_release(a));
        CHECK(pthread_join(w.t, NULL) == 0);
        long long n = scripts() - s0;
        CHECK_OK(w.rc);
        CHECK_EQ(watchlock_lock_state(b), WATCHLOCK_HELD);
        CHECK_INT(watchlock_lock_fencing_token(b), >, fa);
        CHECK_OK(watchlock_lock_release(b)); /* owner-checked by the server: the hold was real */
        if (n < fewest)
            fewest = n;
        printf("  trial %d: %lld script calls\n", trial, n);
    }
    CHECK_EQ(fewest, 2);
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(ca);
    watchlock_client_close(cb);
}

static void test_scripts_per_turn_fair(void)
{
    scripts_per_turn(FAIR);
}

static void test_scripts_per_turn_semaphore(void)
{
    scripts_per_turn(SEM);
}

static void test_scripts_per_turn_write(void)
{
    scripts_per_turn(WRITE);
}

/* Issue 32 item 2's profile: a contended turn's cost on the server. The
 * queue never empties (a holder and two waiters on three clients; the
 * holder releases, the head is granted, the releaser queues again at the
 * tail), as in bench's greedy hand-off. The commands inside the turn's two
 * scripts (the release that grants, the enqueue), counted with INFO
 * commandstats over turns in which no liveness round fell (exactly 2
 * script calls), the fewest: at most CONTENDED_TURN_COMMANDS. Before the
 * contended paths were trimmed a turn took 72: the release script
 * read the next head again after its grant (nothing can be granted while
 * every permit is in use), read the name's state twice and the hold key
 * twice, refreshed every structure key's TTL on every call (PEXPIRE after
 * each PTTL: the TTL had always shrunk since the last call) and re-read
 * the enqueued waiter's key and rank after the grant look-up. */
enum { CONTENDED_TURN_COMMANDS = 52 };

static void contended_turn_commands(int kind)
{
    watchlock_client *c[3];
    watchlock_lock *l[3];
    for (int i = 0; i < 3; i++) {
        c[i] = open_client(test_url(""));
        l[i] = make(c[i], kind, "ho-contended", 10000);
    }
    acquirer w[3];
    CHECK_OK(watchlock_lock_acquire(l[0], 0));
    start(&w[1], l[1], 60000);
    WAIT_FOR(queue_len() == 1, 20000);
    start(&w[2], l[2], 60000);
    WAIT_FOR(queue_len() == 2, 20000);
    CHECK_EQ(queue_len(), 2);
    long long fewest = 999, turns = 0;
    int holder = 0;
    for (int trial = 0; trial < 12; trial++) {
        int next = (holder + 1) % 3;
        long long s0 = scripts(), n0 = q_commands(), z0 = zcards_sent;
        CHECK_OK(watchlock_lock_release(l[holder])); /* grants the head: next */
        CHECK(pthread_join(w[next].t, NULL) == 0);
        CHECK_OK(w[next].rc);
        start(&w[holder], l[holder], 60000); /* the releaser queues again, at the tail */
        WAIT_FOR(queue_len() == 2, 20000);
        CHECK_EQ(queue_len(), 2);
        long long calls = scripts() - s0, n = q_commands() - n0 - (zcards_sent - z0);
        printf("  turn %d: %lld script calls, %lld commands inside them\n", trial, calls, n);
        if (calls == 2) {
            turns++;
            if (n < fewest)
                fewest = n;
        }
        CHECK_EQ(watchlock_lock_state(l[next]), WATCHLOCK_HELD);
        holder = next;
    }
    testing_note("contended turn: %lld commands (the fewest of %lld turns of 2 script calls)", fewest, turns);
    CHECK_INT(turns, >, 0);
    CHECK_INT(fewest, <=, CONTENDED_TURN_COMMANDS);
    /* fewer re-expires, same floor: every structure key the turns left has
     * a TTL of at least twice the 10 s lease after each call (so more than
     * one lease now, whatever the machine's speed), none is left without */
    static const char *const structure[] = {"", ":q:h", ":q:q", ":q:l", ":q:d"};
    for (size_t i = 0; i < sizeof structure / sizeof structure[0]; i++) {
        long long ttl = rh_int(test_server(), "PTTL watchlock:{ho-contended}%s", structure[i]);
        testing_note("watchlock:{ho-contended}%s: PTTL %lld ms", structure[i], ttl);
        CHECK(ttl == -2 || ttl > 10000);
    }
    CHECK_OK(watchlock_lock_release(l[holder]));
    for (int i = 0; i < 3; i++) {
        if (i != holder) {
            CHECK(pthread_join(w[i].t, NULL) == 0);
            CHECK_OK(w[i].rc);
            CHECK_OK(watchlock_lock_release(l[i]));
        }
    }
    CHECK_EQ(queue_len(), 0);
    for (int i = 0; i < 3; i++) {
        watchlock_lock_free(l[i]);
        watchlock_client_close(c[i]);
    }
}

static void test_contended_turn_commands_fair(void)
{
    contended_turn_commands(FAIR);
}

static void test_contended_turn_commands_semaphore(void)
{
    contended_turn_commands(SEM);
}

static void test_contended_turn_commands_write(void)
{
    contended_turn_commands(WRITE);
}

/* H holds; W (400 ms lease: its grant's TTL is 400 ms) queues through the
 * proxy, then X behind it. From H's release on, W's grant message comes
 * 1.5 s late, its requests (the watchdog's too) 3 s late. The grant lapses
 * unclaimed, X is granted, and W, woken by the late message, must not hold
 * on it: never W and X at once, and W's acquire does not succeed while X
 * holds (X keeps the name until W's acquire has returned). */
static void late_wakeup(int kind)
{
    ph_proxy *px = ph_start(rh_port(test_server()));
    CHECK(px != NULL);
    char wurl[160];
    snprintf(wurl, sizeof wurl, "%s?command_timeout=10s", ph_url(px));
    watchlock_client *ch = open_client(test_url("")), *cx = open_client(test_url("")), *cw = open_client(wurl);
    watchlock_lock *h = make(ch, kind, "ho-late", 5000), *x = make(cx, kind, "ho-late", 5000),
                   *w = make(cw, kind, "ho-late", 400);
    CHECK_OK(watchlock_lock_acquire(h, 0));
    acquirer aw, ax;
    start(&aw, w, 6000);
    WAIT_FOR(queue_len() == 1, 20000);
    CHECK_EQ(queue_len(), 1);
    start(&ax, x, 30000);
    WAIT_FOR(queue_len() == 2, 20000);
    CHECK_EQ(queue_len(), 2);
    /* The grant message comes 1.5 s late; the watchdog's liveness rounds
     * and any acquire call later still (their requests are held 3 s on the
     * way up): the late message is the first W hears of the grant. */
    CHECK_OK(ph_cmd(px, "delay up 3000 down 1500"));
    CHECK_OK(watchlock_lock_release(h));
    bool x_held = false;
    while (!atomic_load(&aw.done)) {
        int sw = watchlock_lock_state(w), sx = watchlock_lock_state(x);
        CHECK_MSG(!(sw == WATCHLOCK_HELD && sx == WATCHLOCK_HELD), "W and X hold at once");
        if (sx == WATCHLOCK_HELD)
            x_held = true;
        CHECK_MSG(sw != WATCHLOCK_HELD || !x_held, "W holds after X was granted (X still holds)");
        sleep_ms(1);
    }
    CHECK(pthread_join(aw.t, NULL) == 0);
    CHECK_INT(aw.rc, !=, WATCHLOCK_OK); /* X held all along from its grant on */
    CHECK(watchlock_lock_state(w) != WATCHLOCK_HELD);
    CHECK(pthread_join(ax.t, NULL) == 0);
    CHECK_OK(ax.rc);
    CHECK_EQ(watchlock_lock_state(x), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(x));
    CHECK_OK(ph_cmd(px, "clear"));
    watchlock_lock_free(h);
    watchlock_lock_free(x);
    watchlock_lock_free(w);
    watchlock_client_close(ch);
    watchlock_client_close(cx);
    watchlock_client_close(cw);
    ph_free(px);
}

static void test_late_wakeup_fair(void)
{
    late_wakeup(FAIR);
}

static void test_late_wakeup_semaphore(void)
{
    late_wakeup(SEM);
}

/* Grant messages the waiter must not hold on, published on its channel
 * while it waits (H holds all along): one whose validity is gone when it
 * arrives (TTL 2 ms: a message late by more than its grant's lease looks
 * the same), one for another identity, one unparsable, one made before
 * the waiter's latest call (an earlier grant's). Each wakes the
 * waiter, which asks the server (one acquire call, seen in the slowlog)
 * and waits on; then H's release grants it for real. */
static void forged_grant(int kind)
{
    watchlock_client *ch = open_client(test_url("")), *cw = open_client(test_url(""));
    watchlock_lock *h = make(ch, kind, "ho-forge", 5000), *w = make(cw, kind, "ho-forge", 5000);
    CHECK_OK(watchlock_lock_acquire(h, 0));
    CHECK(rh_ok(test_server(), "CONFIG SET slowlog-log-slower-than 0"));
    CHECK(rh_ok(test_server(), "CONFIG SET slowlog-max-len 1000"));
    acquirer aw;
    start(&aw, w, 60000);
    WAIT_FOR(queue_len() == 1, 20000);
    CHECK_EQ(queue_len(), 1);
    char chan[256], ident[64];
    waiter_of(chan, sizeof chan, ident, sizeof ident);
    for (int i = 0; i < 4; i++) {
        char msg[200];
        if (i == 0)
            snprintf(msg, sizeof msg, "g1 %s 1 2 %lld", ident, server_us());
        else if (i == 1)
            snprintf(msg, sizeof msg, "g1 0123456789abcdef0123456789abcdef.1 1 5000 %lld", server_us());
        else if (i == 2)
            snprintf(msg, sizeof msg, "g1 %s 1 5000", ident);
        else /* made before the waiter's latest call, which found it queued: not its grant */
            snprintf(msg, sizeof msg, "g1 %s 1 5000 %lld", ident, server_us() - 60000000);
        CHECK(rh_ok(test_server(), "SLOWLOG RESET"));
        CHECK_EQ(rh_int(test_server(), "PUBLISH %s %s", chan, msg), 1);
        WAIT_FOR(acquire_calls() > 0 || atomic_load(&aw.done), 20000);
        CHECK_MSG(!atomic_load(&aw.done), "message %d (%s): the waiter returned %d", i, msg, aw.rc);
        CHECK_MSG(acquire_calls() > 0, "message %d: the waiter did not ask the server", i);
        CHECK(watchlock_lock_state(w) != WATCHLOCK_HELD);
        CHECK_EQ(queue_len(), 1); /* still waiting */
    }
    CHECK(rh_ok(test_server(), "CONFIG SET slowlog-log-slower-than 10000"));
    int64_t fh = watchlock_lock_fencing_token(h);
    CHECK_OK(watchlock_lock_release(h));
    CHECK(pthread_join(aw.t, NULL) == 0);
    CHECK_OK(aw.rc);
    CHECK_INT(watchlock_lock_fencing_token(w), >, fh);
    CHECK_OK(watchlock_lock_release(w));
    watchlock_lock_free(h);
    watchlock_lock_free(w);
    watchlock_client_close(ch);
    watchlock_client_close(cw);
}

static void test_forged_grant_fair(void)
{
    forged_grant(FAIR);
}

static void test_forged_grant_semaphore(void)
{
    forged_grant(SEM);
}

static const test_case tests[] = {
    {"scripts_per_turn_fair", test_scripts_per_turn_fair, 0},
    {"scripts_per_turn_semaphore", test_scripts_per_turn_semaphore, 0},
    {"scripts_per_turn_write", test_scripts_per_turn_write, 0},
    {"contended_turn_commands_fair", test_contended_turn_commands_fair, 0},
    {"contended_turn_commands_semaphore", test_contended_turn_commands_semaphore, 0},
    {"contended_turn_commands_write", test_contended_turn_commands_write, 0},
    {"forged_grant_fair", test_forged_grant_fair, 0},
    {"forged_grant_semaphore", test_forged_grant_semaphore, 0},
    {"late_wakeup_fair", test_late_wakeup_fair, 0},
    {"late_wakeup_semaphore", test_late_wakeup_semaphore, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
