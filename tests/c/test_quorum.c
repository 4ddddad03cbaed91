/*
 * test_quorum.c - the quorum client (Redlock, issue 21) against five real
 * redis-servers on free loopback ports: open and refusals, acquire/release
 * over five, two members frozen (SIGSTOP) and three, loss told before a
 * majority's keys expire, a member restarted empty kept out for one lease,
 * fencing tokens across holders, restarts and a delayed member, mixed TLS,
 * plain and Sentinel members, check on a quorum.
 *
 * Fresh servers have an uptime below the lease, so the restart rule keeps
 * them out for one lease after a client first sees them: tests wait that
 * out through an acquire with a wait (woken at the window's end), never a
 * fixed sleep.
 */
#include "proxy_harness.h"
#include "quorum_helpers.h"
#include "testing.h"

#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <stdlib.h>

/* ---- open ---- */

static void open_refusals(void)
{
    rh_server *s = rh_start(NULL);
    CHECK(s != NULL);
    const char *one[1] = {rh_url(s)};
    watchlock_client *c = NULL;
    const char *two[2] = {rh_url(s), rh_url(s)};
    CHECK_FAILS_WITH_MSG(watchlock_client_open_quorum(&c, two, 2), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "2 members") != NULL);
    CHECK(c == NULL);
    CHECK_FAILS_WITH_MSG(watchlock_client_open_quorum(&c, one, 0), WATCHLOCK_EINVAL);
    const char *cl[3] = {rh_url(s), "redis-cluster://127.0.0.1:1,127.0.0.1:2", rh_url(s)};
    CHECK_FAILS_WITH_MSG(watchlock_client_open_quorum(&c, cl, 3), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "member 2") != NULL && strstr(watchlock_last_error(), "cluster") != NULL);
    /* one of three down: opens (a majority answered), the member reported
     * (two servers: one server given twice is refused, test_quorum_restart.c) */
    rh_server *s2 = rh_start(NULL);
    CHECK(s2 != NULL);
    const char *down[3] = {rh_url(s), rh_url(s2), "redis://127.0.0.1:1?connect_timeout=300ms"};
    CHECK_OK(watchlock_client_open_quorum(&c, down, 3));
    CHECK_EQ(watchlock_client_member_state(c, 2), WATCHLOCK_MEMBER_UNREACHABLE);
    /* reachable; "restarted" until the window's records were read from a
     * majority (issue 29.2), which the open need not wait for (29.8) */
    int st0 = watchlock_client_member_state(c, 0);
    CHECK_MSG(st0 == WATCHLOCK_MEMBER_GRANTED || st0 == WATCHLOCK_MEMBER_RESTARTED, "member 0's state %d", st0);
    watchlock_client_close(c);
    c = NULL;
    /* two of three: ECONN naming both */
    const char *down2[3] = {rh_url(s), "redis://127.0.0.1:1?connect_timeout=300ms",
                            "redis://127.0.0.1:1?connect_timeout=300ms"};
    CHECK_FAILS_WITH_MSG(watchlock_client_open_quorum(&c, down2, 3), WATCHLOCK_ECONN);
    CHECK(strstr(watchlock_last_error(), "member 2") != NULL && strstr(watchlock_last_error(), "member 3") != NULL);
    CHECK(strstr(watchlock_last_error(), "member 1 ") == NULL);
    CHECK(c == NULL);
    /* one URL: the plain client */
    CHECK_OK(watchlock_client_open_quorum(&c, one, 1));
    CHECK_EQ(watchlock_client_member_count(c), 1);
    CHECK_EQ(watchlock_client_stat(c, WATCHLOCK_STAT_QUORUM_RESTARTS), 0);
    watchlock_lock *l = new_lock(c, "plain");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_member_status(l, 0), WATCHLOCK_MEMBER_GRANTED);
    CHECK(watchlock_lock_fencing_token(l) > 0);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    rh_free(s2);
    rh_free(s);
}

/* ---- acquire / release over five ---- */

static void acquire_release_five(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = open_q(f.urls, N), *b = open_q(f.urls, N);
    watchlock_lock *la = lock_lease(a, "five", LEASE), *lb = lock_lease(b, "five", LEASE);
    /* fresh servers: kept out for one lease (restart rule), then granted */
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(la, 4 * LEASE));
    testing_note("first acquire over fresh servers took %lld ms (restart window %d ms)", (long long)(now_ms() - t0),
                 LEASE);
    CHECK_INT(count_status(la, WATCHLOCK_MEMBER_GRANTED), >=, 3);
    int on = 0;
    for (int i = 0; i < N; i++)
        on += key_exists(f.s[i], "five") == 1;
    CHECK_INT(on, >=, 3);
    int64_t t1 = watchlock_lock_fencing_token(la);
    CHECK(t1 > 0);
    CHECK_EQ(watchlock_lock_fencing_token(la), t1); /* asked once per hold */
    /* held: b is told "busy", member by member */
    int rc0 = watchlock_lock_acquire(lb, 0);
    CHECK(rc0 == WATCHLOCK_ETIMEDOUT || rc0 == WATCHLOCK_ECONN);
    /* b's first attempt may meet the restart window itself: ask again once settled */
    WAIT_FOR(watchlock_client_stat(b, WATCHLOCK_STAT_QUORUM_KEPT_OUT) == 0, 3 * LEASE);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(lb, 0), WATCHLOCK_ETIMEDOUT);
    CHECK(strstr(watchlock_last_error(), "held by another owner") != NULL);
    CHECK_INT(count_status(lb, WATCHLOCK_MEMBER_HELD), >=, 3);
    /* list and inspect: the quorum's verdict, and per member */
    watchlock_lock_list *ls = NULL;
    CHECK_OK(watchlock_client_list(&ls, b, "fiv*", 4));
    CHECK_EQ(watchlock_lock_list_count(ls), 1);
    CHECK_STR(watchlock_lock_list_name(ls, 0, NULL), "five");
    CHECK_INT(watchlock_lock_list_remaining_ms(ls, 0), >, 0);
    CHECK_INT(watchlock_lock_list_fence(ls, 0), >=, t1);
    watchlock_lock_list_free(ls);
    int held = 0, members_held = 0;
    int64_t rem = 0, fence = 0;
    CHECK_OK(watchlock_client_inspect(b, "five", 4, &held, &rem, &fence));
    CHECK_EQ(held, 1);
    CHECK_INT(fence, >=, t1);
    for (size_t i = 0; i < N; i++) {
        CHECK_OK(watchlock_client_member_inspect(b, i, "five", 4, &held, &rem, &fence));
        members_held += held;
    }
    CHECK_INT(members_held, >=, 3);
    /* a waiter is woken by the release, not by the lease's end */
    CHECK_OK(watchlock_lock_release(la));
    CHECK_OK(watchlock_client_list(&ls, b, NULL, 0));
    CHECK_EQ(watchlock_lock_list_count(ls), 0);
    watchlock_lock_list_free(ls);
    WAIT_FOR(key_exists(f.s[0], "five") + key_exists(f.s[1], "five") + key_exists(f.s[2], "five") +
                     key_exists(f.s[3], "five") + key_exists(f.s[4], "five") ==
                 0,
             2000);
    for (int i = 0; i < N; i++)
        CHECK_EQ(key_exists(f.s[i], "five"), 0);
    CHECK_OK(watchlock_lock_acquire(lb, 0));
    int64_t t2 = watchlock_lock_fencing_token(lb);
    CHECK_INT(t2, >, t1);
    /* extend to the lease in use (a longer one would widen the restart
     * window past these fresh servers' uptime) */
    CHECK_OK(watchlock_lock_extend(lb, 0));
    CHECK_INT(watchlock_lock_remaining_ms(lb), >, LEASE / 2);
    /* a's wait ends with b's release, woken through any member */
    int64_t w0 = now_ms();
    CHECK_OK(watchlock_lock_release(lb));
    CHECK_OK(watchlock_lock_acquire(la, 5000));
    testing_note("waiter got in %lld ms after the release", (long long)(now_ms() - w0));
    CHECK_INT(watchlock_lock_fencing_token(la), >, t2);
    CHECK_OK(watchlock_lock_release(la));
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- two frozen: still acquires, renews, releases ---- */

static void two_stopped(void)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled(&f);
    CHECK_EQ(rh_pause(f.s[3]), 0);
    CHECK_EQ(rh_pause(f.s[4]), 0);
    watchlock_lock *l = lock_lease(c, "two", LEASE);
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(l, 0));
    testing_note("acquire with 2 of 5 frozen: %lld ms", (long long)(now_ms() - t0));
    CHECK_EQ(count_status(l, WATCHLOCK_MEMBER_GRANTED), 3);
    CHECK(watchlock_lock_fencing_token(l) > 0);
    /* renewed by the watchdog on the three for several leases */
    WAIT_FOR(watchlock_lock_renewals(l) >= 6, 4 * LEASE);
    CHECK_INT(watchlock_lock_renewals(l), >=, 6);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    for (int i = 0; i < 3; i++)
        CHECK_INT(key_pttl(f.s[i], "two"), >, LEASE / 3);
    CHECK_OK(watchlock_lock_release(l));
    for (int i = 0; i < 3; i++)
        CHECK_EQ(key_exists(f.s[i], "two"), 0);
    /* check names the frozen members */
    watchlock_report *rep = NULL;
    CHECK_OK(watchlock_client_check(&rep, c));
    int down = 0;
    for (size_t i = 0; i < watchlock_report_count(rep); i++)
        if (watchlock_report_code(rep, i) == WATCHLOCK_CHECK_MEMBER_UNREACHABLE) {
            down++;
            CHECK(strstr(watchlock_report_message(rep, i), "member 4") != NULL ||
                  strstr(watchlock_report_message(rep, i), "member 5") != NULL);
        }
    CHECK_EQ(down, 2);
    CHECK_STR(watchlock_check_name(WATCHLOCK_CHECK_MEMBER_UNREACHABLE), "member_unreachable");
    watchlock_report_free(rep);
    CHECK_EQ(rh_resume(f.s[3]), 0);
    CHECK_EQ(rh_resume(f.s[4]), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- three frozen: unreachable, nothing left behind ---- */

static void three_stopped(void)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled(&f);
    for (int i = 2; i < N; i++)
        CHECK_EQ(rh_pause(f.s[i]), 0);
    watchlock_lock *l = lock_lease(c, "three", LEASE);
    int64_t t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 3000), WATCHLOCK_ECONN);
    int64_t took = now_ms() - t0;
    testing_note("acquire with 3 of 5 frozen failed in %lld ms: %s", (long long)took, watchlock_last_error());
    CHECK_INT(took, <, 3000);
    CHECK(strstr(watchlock_last_error(), "unreachable") != NULL);
    CHECK_EQ(count_status(l, WATCHLOCK_MEMBER_UNREACHABLE), 3);
    /* the live ones' grants were given back */
    WAIT_FOR(key_exists(f.s[0], "three") + key_exists(f.s[1], "three") == 0, 2000);
    CHECK_EQ(key_exists(f.s[0], "three"), 0);
    CHECK_EQ(key_exists(f.s[1], "three"), 0);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_UNLOCKED);
    for (int i = 2; i < N; i++)
        CHECK_EQ(rh_resume(f.s[i]), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- loss told before a majority's keys expire ---- */

static int64_t lost_at;
static int lost_reason;
static void on_lost(watchlock_lock *l, int reason, void *arg)
{
    (void)l, (void)arg;
    lost_reason = reason;
    __atomic_store_n(&lost_at, now_ms(), __ATOMIC_SEQ_CST);
}

static void loss_before_majority_expires(void)
{
    five f;
    five_start(&f);
    watchlock_client *c = settled(&f);
    watchlock_lock *l = lock_lease(c, "loss", LEASE);
    CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, NULL));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    WAIT_FOR(watchlock_lock_renewals(l) >= 1, 2 * LEASE);
    /* The hold is on the members that granted by the time the attempt
     * was decided (later grants are given back). Freeze all but two of
     * them: renewals reach two, below the majority. Another owner can get
     * a majority only after a frozen key expires. Right after a renewal
     * round was applied (every member answered it, and the next is a
     * third of the lease away) each key's end is read, then frozen: a
     * frozen key ends then at the latest (renewals written to it later are
     * only read when it thaws). */
    int holders[N], nh = 0, frozen[N], nf = 0;
    int64_t expiry[N];
    for (int i = 0; i < N; i++)
        if (key_exists(f.s[i], "loss") == 1)
            holders[nh++] = i;
    CHECK_INT(nh, >=, 3); /* 3, or more when late grants came in the same read */
    for (int i = 0; i < nh - 2; i++) /* two holders stay: below the majority */
        frozen[nf++] = holders[i];
    int64_t r0 = watchlock_lock_renewals(l);
    WAIT_FOR(watchlock_lock_renewals(l) > r0, 2 * LEASE);
    for (int i = 0; i < nf; i++) {
        int64_t t = now_ms();
        long long p = key_pttl(f.s[frozen[i]], "loss");
        CHECK_INT(p, >, 0);
        expiry[i] = t + p;
    }
    for (int i = 0; i < nf; i++)
        CHECK_EQ(rh_pause(f.s[frozen[i]]), 0);
    WAIT_FOR(__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) != 0, 3 * LEASE);
    int64_t at = __atomic_load_n(&lost_at, __ATOMIC_SEQ_CST);
    CHECK(at != 0);
    for (int i = 0; i < nf; i++)
        CHECK_EQ(rh_resume(f.s[frozen[i]]), 0);
    int64_t first = expiry[0];
    for (int i = 1; i < nf; i++)
        first = expiry[i] < first ? expiry[i] : first;
    CHECK_EQ(lost_reason, WATCHLOCK_LOST_CONNECTION);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_LOST);
    testing_note("told LOST %lld ms before the first frozen member's key expired", (long long)(first - at));
    CHECK_INT(at, <, first);
    CHECK_EQ(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- opening with members frozen ---- */

/* A quorum opens when a majority of members answer (a CLI run or a cron
 * job opens a fresh client each time): the frozen ones (member 1, the
 * client's own server, among them) are reported unreachable and retried
 * on use. Members are probed in parallel: two frozen members cost one
 * command timeout, not two. Fewer than a majority: ECONN naming them. */
static void open_with_two_frozen(void)
{
    five f;
    five_start(&f);
    {
        watchlock_client *c = settled(&f);
        watchlock_client_close(c);
    }
    CHECK_EQ(rh_pause(f.s[0]), 0);
    CHECK_EQ(rh_pause(f.s[1]), 0);
    watchlock_client *c = NULL;
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_client_open_quorum(&c, f.urls, N));
    int64_t took = now_ms() - t0;
    testing_note("open with members 1 and 2 frozen: %lld ms (command timeout 1000 ms)", (long long)took);
    CHECK_INT(took, <, 1800); /* one timeout, not two */
    CHECK_EQ(watchlock_client_member_state(c, 0), WATCHLOCK_MEMBER_UNREACHABLE);
    CHECK_EQ(watchlock_client_member_state(c, 1), WATCHLOCK_MEMBER_UNREACHABLE);
    for (size_t i = 2; i < N; i++) /* restarted: the settled client's lease recorded there (the window) */
        CHECK(watchlock_client_member_state(c, i) == WATCHLOCK_MEMBER_GRANTED ||
              watchlock_client_member_state(c, i) == WATCHLOCK_MEMBER_RESTARTED);
    watchlock_lock *l = lock_lease(c, "opened", LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 4 * LEASE)); /* may wait out the restart rule for the three */
    CHECK_EQ(count_status(l, WATCHLOCK_MEMBER_GRANTED), 3);
    WAIT_FOR(watchlock_lock_renewals(l) >= 3, 3 * LEASE);
    CHECK_INT(watchlock_lock_renewals(l), >=, 3);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_release(l));
    for (int i = 2; i < N; i++)
        CHECK_EQ(key_exists(f.s[i], "opened"), 0);
    watchlock_report *rep = NULL;
    CHECK_OK(watchlock_client_check(&rep, c));
    int down = 0;
    for (size_t i = 0; i < watchlock_report_count(rep); i++)
        down += watchlock_report_code(rep, i) == WATCHLOCK_CHECK_MEMBER_UNREACHABLE;
    CHECK_EQ(down, 2);
    watchlock_report_free(rep);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    /* three frozen: fewer than a majority, ECONN naming each, no doubled prefix */
    CHECK_EQ(rh_pause(f.s[2]), 0);
    c = NULL;
    t0 = now_ms();
    CHECK_FAILS_WITH_MSG(watchlock_client_open_quorum(&c, f.urls, N), WATCHLOCK_ECONN);
    took = now_ms() - t0;
    testing_note("open with 3 of 5 frozen failed in %lld ms: %s", (long long)took, watchlock_last_error());
    CHECK(c == NULL);
    CHECK_INT(took, <, 1800);
    const char *msg = watchlock_last_error();
    CHECK(strstr(msg, "member 1 ") != NULL && strstr(msg, "member 2 ") != NULL && strstr(msg, "member 3 ") != NULL);
    CHECK(strstr(msg, "member 4 ") == NULL);
    CHECK(strstr(msg, "quorum member 1: quorum member") == NULL);
    CHECK(strstr(msg, "timed out") != NULL);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(rh_resume(f.s[i]), 0);
    five_free(&f);
}

/* ---- a holder keeps its lock while members 1 and 2 are frozen ---- */

/* Members 1 and 2 frozen (member 1 is the client's own server) while
 * another client contends: the key stays on the three running members,
 * renewed there, and the holder must not be told LOST. */
/* The members from `from` on whose key carries the holder's token: the
 * token ("<token>.<rest>") that a majority of members carry (EXISTS alone
 * would count a contender's grant on its way back). */
static int ours_on(five *f, const char *name, int from)
{
    char val[N][128];
    for (int i = 0; i < N; i++) {
        val[i][0] = '\0';
        redisReply *r = rh_command(f->s[i], "GET watchlock:{%s}", name);
        if (r != NULL && r->type == REDIS_REPLY_STRING) {
            const char *dot = memchr(r->str, '.', r->len);
            size_t n = dot != NULL ? (size_t)(dot - r->str) : r->len;
            snprintf(val[i], sizeof val[i], "%.*s", (int)(n < 127 ? n : 127), r->str);
        }
        if (r != NULL)
            freeReplyObject(r);
    }
    for (int i = 0; i < N; i++) {
        int same = 0;
        for (int j = 0; j < N; j++)
            same += val[i][0] != '\0' && strcmp(val[i], val[j]) == 0;
        if (same >= N / 2 + 1) {
            int on = 0;
            for (int j = from; j < N; j++)
                on += strcmp(val[i], val[j]) == 0;
            return on;
        }
    }
    return 0;
}

typedef struct contender {
    watchlock_client *c;
    volatile int stop;
    pthread_t th;
} contender;

static void *contend(void *arg)
{
    contender *x = arg;
    watchlock_lock *l = lock_lease(x->c, "frozen01", LEASE);
    while (!__atomic_load_n(&x->stop, __ATOMIC_SEQ_CST))
        if (watchlock_lock_acquire(l, 500) == WATCHLOCK_OK)
            watchlock_lock_release(l);
    watchlock_lock_free(l);
    return NULL;
}

static void kept_with_members_0_1_frozen(void)
{
    five f;
    for (int i = 0; i < N; i++) {
        f.s[i] = rh_start(NULL);
        CHECK(f.s[i] != NULL);
        snprintf(f.url[i], sizeof f.url[i], "%s?connect_timeout=400ms&command_timeout=400ms", rh_url(f.s[i]));
        f.urls[i] = f.url[i];
    }
    watchlock_client *c = settled(&f);
    contender x = {.c = settled(&f)};
    CHECK_EQ(pthread_create(&x.th, NULL, contend, &x), 0);
    for (int trial = 0; trial < 2; trial++) {
        lost_at = 0;
        watchlock_lock *l = lock_lease(c, "frozen01", LEASE);
        CHECK_OK(watchlock_lock_set_on_lost(l, on_lost, NULL));
        /* a hold on the three that keep running (members 3 to 5) */
        int on = 0;
        for (int attempt = 0; attempt < 20 && on < 3; attempt++) {
            int rc;
            while ((rc = watchlock_lock_acquire(l, 5000)) == WATCHLOCK_ETIMEDOUT)
                ;
            CHECK_OK(rc);
            int64_t r0 = watchlock_lock_renewals(l);
            WAIT_FOR(watchlock_lock_renewals(l) > r0, 2 * LEASE);
            on = ours_on(&f, "frozen01", 2);
            if (on < 3)
                CHECK_OK(watchlock_lock_release(l));
        }
        CHECK_EQ(on, 3);
        CHECK_EQ(rh_pause(f.s[0]), 0);
        CHECK_EQ(rh_pause(f.s[1]), 0);
        int64_t t0 = now_ms();
        WAIT_FOR(__atomic_load_n(&lost_at, __ATOMIC_SEQ_CST) != 0, 2 * LEASE);
        int64_t at = __atomic_load_n(&lost_at, __ATOMIC_SEQ_CST);
        testing_note("trial %d: %s after members 1 and 2 froze", trial,
                     at != 0 ? "LOST" : "still held 2 leases");
        if (at != 0)
            testing_note("lost %lld ms after the freeze", (long long)(at - t0));
        CHECK_EQ(at, 0);
        CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
        CHECK_EQ(rh_resume(f.s[0]), 0);
        CHECK_EQ(rh_resume(f.s[1]), 0);
        watchlock_lock_release(l);
        watchlock_lock_free(l);
    }
    __atomic_store_n(&x.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(x.th, NULL);
    watchlock_client_close(x.c);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- late grants of a successful acquire are kept ---- */

/* Member 5 answers 300 ms late (a delay proxy): the acquire is decided by
 * the other four. Its grant arrives within the validity: it is kept (our
 * hold's identity there, renewed by the watchdog), so the hold lives on
 * all five and survives the loss of any two. Before, it was given back. */
static void late_grant_kept(void)
{
    five f;
    five_start(&f);
    ph_proxy *px = ph_start(rh_port(f.s[4]));
    CHECK(px != NULL);
    char purl[512];
    snprintf(purl, sizeof purl, "%s?%s", ph_url(px), OPTS);
    f.urls[4] = purl;
    watchlock_client *c = settled(&f);
    CHECK_EQ(ph_cmd(px, "delay both 150"), 0);
    watchlock_lock *l = lock_lease(c, "late", LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(watchlock_lock_member_status(l, 4), WATCHLOCK_MEMBER_UNKNOWN); /* decided without it */
    WAIT_FOR(watchlock_lock_renewals(l) >= 3, 3 * LEASE); /* past one lease */
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_EQ(ours_on(&f, "late", 0), 5);
    CHECK_INT(watchlock_client_stat(c, WATCHLOCK_STAT_QUORUM_LATE_GRANTS), >=, 1);
    CHECK_OK(watchlock_lock_release(l));
    WAIT_FOR(key_exists(f.s[4], "late") == 0, 2 * LEASE);
    for (int i = 0; i < N; i++)
        CHECK_EQ(key_exists(f.s[i], "late"), 0);
    CHECK_EQ(ph_cmd(px, "delay both 0"), 0);
    /* a grant that comes after the validity is given back (the drain sends
     * the release behind it): member 4 frozen through the acquire and past
     * the validity, renewals going on; once it thaws it holds nothing */
    CHECK_EQ(rh_pause(f.s[3]), 0);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int64_t r0 = watchlock_lock_renewals(l);
    WAIT_FOR(watchlock_lock_renewals(l) >= r0 + 3, 3 * LEASE); /* past the validity */
    CHECK_EQ(rh_resume(f.s[3]), 0);
    r0 = watchlock_lock_renewals(l);
    WAIT_FOR(watchlock_lock_renewals(l) >= r0 + 3, 3 * LEASE); /* renewals reach it again */
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_EQ(key_exists(f.s[3], "late"), 0);
    CHECK_EQ(ours_on(&f, "late", 0), 4);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    ph_free(px);
    five_free(&f);
}

/* ---- a member restarted empty is not counted for one lease ---- */

static void restarted_member_kept_out(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled(&f), *b = settled(&f);
    /* a holds on members 0, 1, 2 only */
    CHECK_EQ(rh_pause(f.s[3]), 0);
    CHECK_EQ(rh_pause(f.s[4]), 0);
    watchlock_lock *la = lock_lease(a, "rst", LEASE), *lb = lock_lease(b, "rst", LEASE);
    CHECK_OK(watchlock_lock_set_auto_renew(la, 0)); /* its lease just runs: its key stays on member 0 */
    int64_t a_sent = now_ms();
    CHECK_OK(watchlock_lock_acquire(la, 0));
    int64_t ta = watchlock_lock_fencing_token(la);
    CHECK(ta > 0);
    CHECK_EQ(rh_resume(f.s[3]), 0);
    CHECK_EQ(rh_resume(f.s[4]), 0);
    /* their grants, late but within the validity, are a's (kept): taken
     * away here, so that only the restart rule can keep b out below */
    WAIT_FOR(watchlock_client_stat(a, WATCHLOCK_STAT_QUORUM_LATE_GRANTS) >= 2, LEASE / 2);
    rh_int(f.s[3], "DEL watchlock:{rst}");
    rh_int(f.s[4], "DEL watchlock:{rst}");
    /* 1 and 2 restart empty: a's keys there are gone */
    CHECK_EQ(rh_restart(f.s[1]), 0);
    CHECK_EQ(rh_restart(f.s[2]), 0);
    CHECK_EQ(key_exists(f.s[0], "rst"), 1);
    /* members 1..4 would grant b: only the restart rule keeps b out */
    int rc = watchlock_lock_acquire(lb, 0);
    if (rc != WATCHLOCK_OK && count_status(lb, WATCHLOCK_MEMBER_RESTARTED) < 2)
        rc = watchlock_lock_acquire(lb, 0); /* the first try met the connections the restart dropped */
    CHECK_MSG(rc != WATCHLOCK_OK, "b acquired while a's key is on member 0 and 1, 2 restarted empty");
    CHECK_EQ(count_status(lb, WATCHLOCK_MEMBER_RESTARTED), 2);
    CHECK_EQ(watchlock_lock_member_status(lb, 0), WATCHLOCK_MEMBER_HELD);
    CHECK_INT(watchlock_client_stat(b, WATCHLOCK_STAT_QUORUM_RESTARTS), >=, 2);
    CHECK_EQ(watchlock_client_stat(b, WATCHLOCK_STAT_QUORUM_KEPT_OUT), 2);
    CHECK_EQ(watchlock_client_member_state(b, 1), WATCHLOCK_MEMBER_RESTARTED);
    watchlock_report *rep = NULL;
    CHECK_OK(watchlock_client_check(&rep, b));
    int restarted = 0;
    for (size_t i = 0; i < watchlock_report_count(rep); i++)
        restarted += watchlock_report_code(rep, i) == WATCHLOCK_CHECK_RESTARTED;
    CHECK_EQ(restarted, 2);
    watchlock_report_free(rep);
    /* b gets in once a's key on member 0 has run out (0, 3, 4 are a
     * majority) or 1 and 2 count again: either way no sooner than a lease
     * after a's acquire was sent (not a lease after the restarts: a
     * clean-clone run measured 998 ms from there, a's key having ended
     * first), and with a higher token */
    CHECK_OK(watchlock_lock_acquire(lb, 4 * LEASE));
    CHECK_INT(now_ms() - a_sent, >=, LEASE);
    int64_t tb = watchlock_lock_fencing_token(lb);
    CHECK_INT(tb, >, ta);
    CHECK_OK(watchlock_lock_release(lb));
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- fencing across holders, restarts and a delayed member ---- */

static void fencing_monotonic(void)
{
    five f;
    five_start(&f);
    /* member 4 behind a delay proxy */
    ph_proxy *px = ph_start(rh_port(f.s[4]));
    CHECK(px != NULL);
    char purl[512];
    snprintf(purl, sizeof purl, "%s?%s", ph_url(px), OPTS);
    f.urls[4] = purl;
    watchlock_client *a = settled(&f), *b = settled(&f);
    CHECK_EQ(ph_cmd(px, "delay both 150"), 0);
    watchlock_lock *ls[2] = {lock_lease(a, "fence", LEASE), lock_lease(b, "fence", LEASE)};
    int64_t last = 0;
    for (int round = 0; round < 8; round++) {
        watchlock_lock *l = ls[round % 2];
        CHECK_OK(watchlock_lock_acquire(l, 3 * LEASE));
        int64_t t = watchlock_lock_fencing_token(l);
        CHECK_INT(t, >, last);
        last = t;
        if (round == 3) {
            /* two members restart empty while held: their counters are gone */
            CHECK_EQ(rh_restart(f.s[0]), 0);
            CHECK_EQ(rh_restart(f.s[1]), 0);
        }
        int rc = watchlock_lock_release(l);
        CHECK(rc == WATCHLOCK_OK || rc == WATCHLOCK_ENOTOWNER);
    }
    /* the raise cannot be confirmed by a majority: unavailable, not a token */
    watchlock_lock *l = ls[0];
    CHECK_OK(watchlock_lock_acquire(l, 3 * LEASE));
    CHECK_EQ(rh_pause(f.s[0]), 0);
    CHECK_EQ(rh_pause(f.s[1]), 0);
    CHECK_EQ(ph_cmd(px, "pause"), 0);
    int64_t t0 = now_ms();
    CHECK_EQ(watchlock_lock_fencing_token(l), -WATCHLOCK_EUNAVAIL);
    CHECK_INT(now_ms() - t0, <=, LEASE);
    CHECK_EQ(watchlock_lock_fencing_token(l), -WATCHLOCK_EUNAVAIL);
    CHECK_INT(watchlock_client_stat(a, WATCHLOCK_STAT_QUORUM_FENCE_UNAVAILABLE), >=, 1);
    CHECK_EQ(rh_resume(f.s[0]), 0);
    CHECK_EQ(rh_resume(f.s[1]), 0);
    CHECK_EQ(ph_cmd(px, "resume"), 0);
    watchlock_lock_release(l);
    watchlock_lock_free(ls[0]);
    watchlock_lock_free(ls[1]);
    watchlock_client_close(a);
    watchlock_client_close(b);
    ph_free(px);
    five_free(&f);
}

/* The raise is what keeps tokens increasing when members' counters
 * differ: a's token is member 0's high counter; b's majority shares
 * members 1 and 2 with a's, but not member 0. Without the raise on every
 * member that granted a, b's token (from 1..4's counters) would be lower. */
static void fencing_raise_needed(void)
{
    five f;
    five_start(&f);
    watchlock_client *a = settled(&f), *b = settled(&f);
    CHECK(rh_ok(f.s[0], "SET watchlock:{raise}:fence 5000000000000000"));
    CHECK_EQ(rh_pause(f.s[3]), 0);
    CHECK_EQ(rh_pause(f.s[4]), 0);
    watchlock_lock *la = lock_lease(a, "raise", LEASE), *lb = lock_lease(b, "raise", LEASE);
    CHECK_OK(watchlock_lock_acquire(la, 0));
    int64_t ta = watchlock_lock_fencing_token(la);
    CHECK_EQ(ta, INT64_C(5000000000000001));
    CHECK_OK(watchlock_lock_release(la));
    CHECK_EQ(rh_resume(f.s[3]), 0);
    CHECK_EQ(rh_resume(f.s[4]), 0);
    CHECK_EQ(rh_pause(f.s[0]), 0);
    CHECK_OK(watchlock_lock_acquire(lb, 2 * LEASE));
    int s0 = watchlock_lock_member_status(lb, 0); /* frozen: decided without it, or timed out */
    CHECK(s0 == WATCHLOCK_MEMBER_UNKNOWN || s0 == WATCHLOCK_MEMBER_UNREACHABLE);
    int64_t tb = watchlock_lock_fencing_token(lb);
    testing_note("a's token %lld, b's %lld", (long long)ta, (long long)tb);
    CHECK_INT(tb, >, ta);
    CHECK_OK(watchlock_lock_release(lb));
    CHECK_EQ(rh_resume(f.s[0]), 0);
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- min_replicas: each member's WAIT decides for that member ---- */

static void min_replicas_per_member(void)
{
    five f;
    five_start(&f);
    /* members 0..2 ask for a replica they do not have: their grants never count */
    char url[3][600];
    for (int i = 0; i < 3; i++) {
        snprintf(url[i], sizeof url[i], "%s&min_replicas=1&min_replicas_timeout=100ms", f.url[i]);
        f.urls[i] = url[i];
    }
    watchlock_client *c = open_q(f.urls, N);
    watchlock_lock *l = lock_lease(c, "wait", LEASE);
    int rc = watchlock_lock_acquire(l, 3 * LEASE);
    CHECK_MSG(rc == WATCHLOCK_ECONN, "acquire returned %d (%s)", rc, watchlock_last_error());
    CHECK_EQ(count_status(l, WATCHLOCK_MEMBER_UNREACHABLE), 3);
    WAIT_FOR(key_exists(f.s[0], "wait") + key_exists(f.s[1], "wait") + key_exists(f.s[2], "wait") +
                     key_exists(f.s[3], "wait") + key_exists(f.s[4], "wait") ==
                 0,
             2000);
    for (int i = 0; i < N; i++)
        CHECK_EQ(key_exists(f.s[i], "wait"), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    /* the same members without the option: granted */
    for (int i = 0; i < 3; i++)
        f.urls[i] = f.url[i];
    c = settled(&f);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- TLS, plain and Sentinel members in one quorum ---- */

static void mixed_members(void)
{
    rh_options tls = {.tls = 1};
    rh_server *t1 = rh_start(&tls), *t2 = rh_start(&tls), *p1 = rh_start(NULL), *p2 = rh_start(NULL);
    CHECK(t1 && t2 && p1 && p2);
    rh_sentinel_group *g = rh_sentinel_start(0);
    CHECK(g != NULL);
    const char *urls[5] = {rh_url(t1), rh_url(p1), rh_sentinel_url(g), rh_url(t2), rh_url(p2)};
    watchlock_client *c = open_q(urls, 5);
    CHECK(strstr(watchlock_client_member_label(c, 0), "127.0.0.1") != NULL);
    watchlock_lock *l = lock_lease(c, "mixed", LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 4 * LEASE));
    CHECK_INT(count_status(l, WATCHLOCK_MEMBER_GRANTED), >=, 3);
    CHECK(watchlock_lock_fencing_token(l) > 0);
    WAIT_FOR(watchlock_lock_renewals(l) >= 2, 3 * LEASE);
    CHECK_INT(watchlock_lock_renewals(l), >=, 2);
    int held;
    int64_t rem, fence;
    CHECK_OK(watchlock_client_inspect(c, "mixed", 5, &held, &rem, &fence));
    CHECK_EQ(held, 1);
    CHECK_INT(rem, >, 0);
    CHECK_INT(fence, >=, watchlock_lock_fencing_token(l));
    rh_server *all[5] = {t1, p1, rh_sentinel_master(g), t2, p2};
    int on = 0;
    for (int i = 0; i < 5; i++)
        on += rh_int(all[i], "EXISTS watchlock:{mixed}") == 1;
    CHECK_INT(on, >=, 3);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_OK(watchlock_client_inspect(c, "mixed", 5, &held, &rem, &fence));
    CHECK_EQ(held, 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    rh_sentinel_free(g);
    rh_free(t1);
    rh_free(t2);
    rh_free(p1);
    rh_free(p2);
}

/* ---- cost: pooled connections, script calls per hand-off ---- */

static long long scripts_run(rh_server *s)
{
    return rh_info(s, "commandstats", "cmdstat_evalsha") + rh_info(s, "commandstats", "cmdstat_eval");
}

/* Uncontended cycles keep their connections: a call decided at a majority
 * leaves the members still pending to be read in the background, and their
 * connections go back to the pool once every reply on them was read (they
 * used to be closed, so the next call opened fresh ones, INFO first). */
static void cycles_keep_connections(void)
{
    five f;
    five_start(&f);
    watchlock_client *c = open_q(f.urls, N);
    watchlock_lock *l = lock_lease(c, "pool", LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 4 * LEASE)); /* waits out the restart window */
    CHECK_OK(watchlock_lock_release(l));
    long long conns0[N];
    for (int i = 0; i < N; i++)
        conns0[i] = rh_info(f.s[i], "stats", "total_connections_received");
    int cycles = 300;
    for (int k = 0; k < cycles; k++) {
        CHECK_OK(watchlock_lock_acquire(l, 2 * LEASE));
        CHECK_OK(watchlock_lock_release(l));
    }
    long long worst = 0;
    for (int i = 0; i < N; i++) {
        long long d = rh_info(f.s[i], "stats", "total_connections_received") - conns0[i];
        if (d > worst)
            worst = d;
    }
    testing_note("%d cycles over %d members: at most %lld new connections on one member", cycles, N, worst);
    /* A few for each slow moment (a reply still missing at the 400 ms command
     * timeout: its connection is broken and replaced). Their number follows the
     * machine's load (13 beside a CPU hog, against a former fixed 10), not the
     * cycles: bound by a tenth of the cycles. Connections closed after every
     * call (the defect, docs/reliability.md) made 451 on one member in 300. */
    CHECK_INT(worst, <=, cycles / 10);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

/* A waiter kept out only by the restart rule (fresh servers: every member
 * grants, none counts yet) is not woken by its own give-backs: it waits for
 * the window's end, with a few attempts, not one every few milliseconds. */
static void restart_window_not_polled(void)
{
    five f;
    five_start(&f);
    long long runs0 = 0;
    for (int i = 0; i < N; i++)
        runs0 += scripts_run(f.s[i]);
    watchlock_client *c = open_q(f.urls, N);
    watchlock_lock *l = lock_lease(c, "window", LEASE);
    int64_t t0 = now_ms();
    CHECK_OK(watchlock_lock_acquire(l, 4 * LEASE));
    int64_t took = now_ms() - t0;
    long long runs = -runs0;
    for (int i = 0; i < N; i++)
        runs += scripts_run(f.s[i]);
    testing_note("acquire through the restart window took %lld ms: %lld scripts on %d members", (long long)took,
                 runs, N);
    /* attempts (and their give-backs): a handful per member, not one per wake-up of its own */
    CHECK_INT(runs / N, <=, 12);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

#define CONTENDERS 4
#define HANDOFF_ROUNDS 12

typedef struct handoff_contender {
    five *f;
    pthread_barrier_t *ready;
    int acquired, failed;
} handoff_contender;

static void *handoff_contend(void *arg)
{
    handoff_contender *ct = arg;
    watchlock_client *c = NULL;
    int rc = watchlock_client_open_quorum(&c, ct->f->urls, N);
    watchlock_lock *l = NULL;
    if (rc == WATCHLOCK_OK) {
        l = new_lock(c, "handoff");
        watchlock_lock_set_lease(l, LEASE);
        /* the restart rule's window (fresh servers) is waited out first,
         * through an acquire with a wait, and not counted */
        rc = watchlock_lock_acquire(l, 20 * LEASE);
        if (rc == WATCHLOCK_OK)
            rc = watchlock_lock_release(l);
    }
    pthread_barrier_wait(ct->ready);
    pthread_barrier_wait(ct->ready); /* main read the counters */
    for (int k = 0; rc == WATCHLOCK_OK && k < HANDOFF_ROUNDS; k++) {
        if (watchlock_lock_acquire(l, 20 * LEASE) != WATCHLOCK_OK) {
            ct->failed++;
            continue;
        }
        ct->acquired++;
        struct timespec hold = {0, 10 * 1000 * 1000}; /* the work done under the lock */
        nanosleep(&hold, NULL);
        if (watchlock_lock_release(l) != WATCHLOCK_OK)
            ct->failed++;
    }
    if (rc != WATCHLOCK_OK)
        ct->failed++;
    watchlock_lock_free(l);
    watchlock_client_close(c);
    return NULL;
}

/* Hand-off under contention: a waiter is woken by a release (on any member,
 * once per release, not once per member that publishes it) and makes one
 * attempt, so the members run a few scripts per acquire (the winner's
 * attempt and release, the other waiters' one failed attempt each), not
 * dozens. */
static void handoff_script_calls(void)
{
    five f;
    five_start(&f);
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, CONTENDERS + 1);
    handoff_contender ct[CONTENDERS];
    pthread_t th[CONTENDERS];
    for (int i = 0; i < CONTENDERS; i++) {
        ct[i] = (handoff_contender){&f, &ready, 0, 0};
        CHECK(pthread_create(&th[i], NULL, handoff_contend, &ct[i]) == 0);
    }
    pthread_barrier_wait(&ready);
    long long runs0 = 0;
    for (int i = 0; i < N; i++)
        runs0 += scripts_run(f.s[i]);
    pthread_barrier_wait(&ready);
    int acquired = 0, failed = 0;
    for (int i = 0; i < CONTENDERS; i++) {
        pthread_join(th[i], NULL);
        acquired += ct[i].acquired;
        failed += ct[i].failed;
    }
    long long runs = -runs0;
    for (int i = 0; i < N; i++)
        runs += scripts_run(f.s[i]);
    CHECK_EQ(failed, 0);
    CHECK_EQ(acquired, CONTENDERS * HANDOFF_ROUNDS);
    double per = (double)runs / (double)acquired / N;
    testing_note("%d contenders, %d acquires: %lld scripts run on %d members, %.2f per acquire per member "
                 "(attempts, give-backs and the release)",
                 CONTENDERS, acquired, runs, N, per);
    CHECK(per <= 8.0); /* ~4 typical (1 attempt per waiter per release + the release); 51 before */
    pthread_barrier_destroy(&ready);
    five_free(&f);
}

static const test_case tests[] = {
    {"open_refusals", open_refusals, 0},
    {"acquire_release_five", acquire_release_five, 0},
    {"two_stopped", two_stopped, 0},
    {"three_stopped", three_stopped, 0},
    {"loss_before_majority_expires", loss_before_majority_expires, 0},
    {"open_with_two_frozen", open_with_two_frozen, 0},
    {"kept_with_members_0_1_frozen", kept_with_members_0_1_frozen, 0},
    {"late_grant_kept", late_grant_kept, 0},
    {"restarted_member_kept_out", restarted_member_kept_out, 0},
    {"fencing_monotonic", fencing_monotonic, 0},
    {"fencing_raise_needed", fencing_raise_needed, 0},
    {"min_replicas_per_member", min_replicas_per_member, 0},
    {"mixed_members", mixed_members, 0},
    {"cycles_keep_connections", cycles_keep_connections, 0},
    {"handoff_script_calls", handoff_script_calls, 0},
    {"restart_window_not_polled", restart_window_not_polled, 0},
    {NULL, NULL, 0},
};

int main(int argc, char **argv)
{
    if (rh_tls_dir() == NULL)
        return 1;
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
