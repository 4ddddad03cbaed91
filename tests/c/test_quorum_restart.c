/*
 * test_quorum_restart.c - the quorum's member connections, its restart
 * rule and its open (issue 29, items 1, 2, 5, 8), against real
 * redis-servers on free loopback ports:
 *
 * - admin_*_keeps_restart_rule: inspect, member_inspect and force_release
 *   reach a restarted member; the next acquire must still see the restart
 *   (every connection to a member passes the INFO check).
 * - window_covers_other_clients_lease: a client with a short lease keeps a
 *   restarted member out for another client's longer lease.
 * - restart_window_option: restart_window= keeps a restarted member out
 *   that long, whatever the lease.
 * - duplicate_members_refused: one server given twice (TCP and its unix
 *   socket) is refused at open, naming both.
 * - open_decides_at_majority: two of five frozen, an open, acquire,
 *   release and close cost nothing near the command timeout.
 *
 * Fresh servers have an uptime below the lease, so the restart rule keeps
 * them out for one lease after a client first sees them: tests wait that
 * out through an acquire with a wait, never a fixed sleep.
 */
#include "quorum_helpers.h"
#include "testing.h"

#include <stdlib.h>

/* a holds `name` (lease `lease`, no renewals: its lease just runs) on
 * members 0, 1, 2 only: 3 and 4 are frozen while it acquires, and their
 * late grants taken away after. */
static watchlock_lock *hold_on_012(five *f, watchlock_client *a, const char *name, int64_t lease)
{
    CHECK_EQ(rh_pause(f->s[3]), 0);
    CHECK_EQ(rh_pause(f->s[4]), 0);
    watchlock_lock *la = lock_lease(a, name, lease);
    CHECK_OK(watchlock_lock_set_auto_renew(la, 0));
    CHECK_OK(watchlock_lock_acquire(la, 10 * lease)); /* may wait out a's own restart window */
    CHECK_EQ(rh_resume(f->s[3]), 0);
    CHECK_EQ(rh_resume(f->s[4]), 0);
    /* the frozen members ran a's script once thawed: wait for it, then take
     * those keys away, so that only the restart rule keeps b out below */
    char key[128];
    snprintf(key, sizeof key, "EXISTS watchlock:{%s}", name);
    WAIT_FOR(rh_int(f->s[3], key) == 1 && rh_int(f->s[4], key) == 1, 5 * LEASE);
    snprintf(key, sizeof key, "DEL watchlock:{%s}", name);
    rh_int(f->s[3], key);
    rh_int(f->s[4], key);
    return la;
}

/* ---- item 1: the admin paths pass the restart check too ---- */

enum { VIA_INSPECT, VIA_MEMBER_INSPECT, VIA_FORCE_RELEASE };

static void admin_path_keeps_restart_rule(int via)
{
    five f;
    five_start_opts(&f, OPTS);
    watchlock_client *b = settled(&f), *a = settled(&f);
    watchlock_lock *la = hold_on_012(&f, a, "adm", 3 * LEASE), *lb = lock_lease(b, "adm", LEASE);
    /* 1 and 2 restart empty: a's keys there are gone; b's pooled
     * connections to them are dead */
    CHECK_EQ(rh_restart(f.s[1]), 0);
    CHECK_EQ(rh_restart(f.s[2]), 0);
    CHECK_EQ(rh_int(f.s[0], "EXISTS watchlock:{adm}"), 1);
    /* an admin call reaches the restarted members first */
    int held = 0, released = 0;
    int64_t rem = 0, fence = 0;
    for (int round = 0; round < 2; round++) {
        if (via == VIA_INSPECT)
            (void)watchlock_client_inspect(b, "adm", 3, &held, &rem, &fence);
        else if (via == VIA_MEMBER_INSPECT)
            for (size_t i = 0; i < N; i++)
                (void)watchlock_client_member_inspect(b, i, "adm", 3, &held, &rem, &fence);
        else
            (void)watchlock_client_force_release(b, "other", 5, &released);
    }
    CHECK_EQ(watchlock_lock_state(la), WATCHLOCK_HELD);
    /* members 1..4 would grant b: only the restart rule keeps b out */
    int rc = watchlock_lock_acquire(lb, 0);
    if (rc != WATCHLOCK_OK && count_status(lb, WATCHLOCK_MEMBER_RESTARTED) < 2)
        rc = watchlock_lock_acquire(lb, 0); /* a try met a connection the restart dropped */
    testing_note("a: %lld ms left when b tried", (long long)watchlock_lock_remaining_ms(la));
    CHECK_MSG(rc != WATCHLOCK_OK, "b acquired through restarted members after an admin call while a holds");
    CHECK_EQ(count_status(lb, WATCHLOCK_MEMBER_RESTARTED), 2);
    CHECK_EQ(watchlock_client_member_state(b, 1), WATCHLOCK_MEMBER_RESTARTED);
    CHECK_EQ(watchlock_client_member_state(b, 2), WATCHLOCK_MEMBER_RESTARTED);
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

static void admin_inspect_keeps_restart_rule(void) { admin_path_keeps_restart_rule(VIA_INSPECT); }
static void admin_member_inspect_keeps_restart_rule(void) { admin_path_keeps_restart_rule(VIA_MEMBER_INSPECT); }
static void admin_force_release_keeps_restart_rule(void) { admin_path_keeps_restart_rule(VIA_FORCE_RELEASE); }

/* ---- item 2: the window covers every client's lease ---- */

static void window_covers_other_clients_lease(void)
{
    five f;
    five_start_opts(&f, OPTS);
    watchlock_client *b = settled(&f); /* b (lease 1 s) knows nothing of a's lease */
    watchlock_client *a = open_q(f.urls, N);
    const int64_t long_lease = 5 * LEASE;
    watchlock_lock *la = hold_on_012(&f, a, "win", long_lease), *lb = lock_lease(b, "win", LEASE);
    CHECK_EQ(rh_restart(f.s[1]), 0);
    CHECK_EQ(rh_restart(f.s[2]), 0);
    /* b tries again and again while a's hold is valid (its own wait would
     * sleep until a's key expires): the restarted members must not count */
    int64_t t0 = now_ms();
    int tries = 0, got = 0;
    while (!got && watchlock_lock_remaining_ms(la) > 0 && watchlock_lock_state(la) == WATCHLOCK_HELD) {
        tries++;
        got = watchlock_lock_acquire(lb, 0) == WATCHLOCK_OK;
        if (!got)
            sleep_ms(50); /* pacing the tries, not a synchronisation */
    }
    int64_t a_left = watchlock_lock_remaining_ms(la);
    testing_note("%d tries in %lld ms; b %s; a's hold then had %lld ms left", tries, (long long)(now_ms() - t0),
                 got ? "got in" : "kept out", (long long)a_left);
    CHECK_MSG(!got || a_left <= 0,
              "b (lease %d ms) acquired through members restarted empty while a's %lld ms hold was valid "
              "(%lld ms left)",
              LEASE, (long long)long_lease, (long long)a_left);
    /* once a's hold is over, b gets in */
    if (!got)
        CHECK_OK(watchlock_lock_acquire(lb, 4 * long_lease));
    CHECK_OK(watchlock_lock_release(lb));
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_client_close(a);
    watchlock_client_close(b);
    five_free(&f);
}

/* ---- item 2: restart_window= ---- */

static void restart_window_option(void)
{
    five f;
    five_start_opts(&f, OPTS "&restart_window=4s");
    watchlock_client *c = open_q(f.urls, N);
    watchlock_lock *l = lock_lease(c, "opt", LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 20 * LEASE)); /* fresh servers: kept out for the 4 s window */
    CHECK_OK(watchlock_lock_release(l));
    WAIT_FOR(watchlock_client_stat(c, WATCHLOCK_STAT_QUORUM_KEPT_OUT) == 0, 20 * LEASE);
    /* with 3 and 4 frozen, an acquire needs member 1 */
    CHECK_EQ(rh_pause(f.s[3]), 0);
    CHECK_EQ(rh_pause(f.s[4]), 0);
    int64_t back = now_ms(); /* member 1 comes back after this */
    CHECK_EQ(rh_restart(f.s[1]), 0);
    CHECK_OK(watchlock_lock_acquire(l, 20 * LEASE));
    int64_t out = now_ms() - back;
    testing_note("member 1 counted %lld ms after its restart (lease %d ms, restart_window 4 s)", (long long)out, LEASE);
    CHECK_INT(out, >=, 4000);
    CHECK_EQ(count_status(l, WATCHLOCK_MEMBER_GRANTED), 3);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_resume(f.s[3]), 0);
    CHECK_EQ(rh_resume(f.s[4]), 0);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    five_free(&f);
}

/* ---- item 5: one server given twice ---- */

static void duplicate_members_refused(void)
{
    rh_options o = {.unixsocket = 1};
    rh_server *s = rh_start(&o), *t = rh_start(NULL), *u = rh_start(NULL);
    CHECK(s != NULL && t != NULL && u != NULL);
    char sock[600];
    snprintf(sock, sizeof sock, "unix://%s", rh_unixsocket(s));
    const char *urls[3] = {rh_url(s), rh_url(t), sock};
    watchlock_client *c = NULL;
    CHECK_FAILS_WITH_MSG(watchlock_client_open_quorum(&c, urls, 3), WATCHLOCK_EINVAL);
    const char *msg = watchlock_last_error();
    testing_note("%s", msg);
    char tcp[64];
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", rh_port(s));
    CHECK_MSG(strstr(msg, tcp) != NULL && strstr(msg, rh_unixsocket(s)) != NULL, "message names both: %s", msg);
    CHECK(strstr(msg, "members 1 ") != NULL && strstr(msg, " 3 (") != NULL);
    CHECK(c == NULL);
    /* three distinct servers open */
    const char *ok[3] = {rh_url(s), rh_url(t), rh_url(u)};
    CHECK_OK(watchlock_client_open_quorum(&c, ok, 3));
    watchlock_client_close(c);
    rh_free(s);
    rh_free(t);
    rh_free(u);
}

/* ---- item 8: the open decides at a majority ---- */

static void open_decides_at_majority(void)
{
    /* a long command timeout: the time a frozen member's probe would cost */
    const int64_t cmd_ms = 6000;
    five f;
    five_start_opts(&f, "connect_timeout=1s&command_timeout=6s&safety_margin=250ms");
    watchlock_client *s = settled(&f);
    watchlock_client_close(s);
    /* old enough that a new client's restart rule (uptime in whole seconds,
     * taken one second short) does not keep them out */
    for (int i = 0; i < N; i++)
        WAIT_FOR(rh_info(f.s[i], "server", "uptime_in_seconds") >= 3, 10000);
    CHECK_EQ(rh_pause(f.s[0]), 0);
    CHECK_EQ(rh_pause(f.s[1]), 0);
    int64_t t0 = now_ms();
    watchlock_client *c = open_q(f.urls, N);
    int64_t opened = now_ms() - t0;
    CHECK_EQ(watchlock_client_member_state(c, 0), WATCHLOCK_MEMBER_UNREACHABLE);
    CHECK_EQ(watchlock_client_member_state(c, 1), WATCHLOCK_MEMBER_UNREACHABLE);
    watchlock_lock *l = lock_lease(c, "maj", LEASE);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    int64_t acquired = now_ms() - t0;
    CHECK_EQ(count_status(l, WATCHLOCK_MEMBER_GRANTED), 3);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
    int64_t closed = now_ms() - t0;
    testing_note("two of five frozen: opened in %lld ms, acquired at %lld ms, closed at %lld ms (command timeout "
                 "%lld ms)",
                 (long long)opened, (long long)acquired, (long long)closed, (long long)cmd_ms);
    /* before: the open waited for every probe, one command timeout */
    CHECK_INT(closed, <, cmd_ms / 2);
    /* they thaw: a new client sees them as before */
    CHECK_EQ(rh_resume(f.s[0]), 0);
    CHECK_EQ(rh_resume(f.s[1]), 0);
    c = open_q(f.urls, N); /* may decide before they answer: their probes go on */
    for (size_t i = 0; i < N; i++) {
        WAIT_FOR(watchlock_client_member_state(c, i) != WATCHLOCK_MEMBER_UNREACHABLE, cmd_ms);
        CHECK(watchlock_client_member_state(c, i) != WATCHLOCK_MEMBER_UNREACHABLE);
    }
    watchlock_client_close(c);
    five_free(&f);
}

static const test_case tests[] = {
    {"admin_inspect_keeps_restart_rule", admin_inspect_keeps_restart_rule, 0},
    {"admin_member_inspect_keeps_restart_rule", admin_member_inspect_keeps_restart_rule, 0},
    {"admin_force_release_keeps_restart_rule", admin_force_release_keeps_restart_rule, 0},
    {"window_covers_other_clients_lease", window_covers_other_clients_lease, 0},
    {"restart_window_option", restart_window_option, 0},
    {"duplicate_members_refused", duplicate_members_refused, 0},
    {"open_decides_at_majority", open_decides_at_majority, 0},
    {NULL, NULL, 0},
};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
