/*
 * test_queue_safety.c - issue 29 items 9, 10 and 11 (the queued kinds on
 * the handle's and the client's side) against a real redis-server, with
 * real processes:
 *   9  a write handle downgraded once takes the write side again at its
 *      next acquire (the side belongs to the hold, not the handle);
 *  10  a semaphore waiter that keeps its place between wait slices is
 *      granted the k it asks for now, never its first slice's;
 *  11  closing a client, and releasing a hold declared LOST, release a
 *      queued hold through the queue's script: the next waiter is granted
 *      inside that release, not when the old lease runs out;
 * and the kind named by a plain lock's error on a name in use as a
 * semaphore.
 */
#include "queue_helpers.h"

static watchlock_lock *rw(watchlock_client *c, const char *name, int write, int64_t lease)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_rwlock_new(&l, c, name, strlen(name), write));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

static watchlock_lock *sem(watchlock_client *c, const char *name, int64_t n, int64_t lease)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_semaphore_new(&l, c, name, strlen(name), n));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

static watchlock_lock *fair(watchlock_client *c, const char *name, int64_t lease)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_fair_lock_new(&l, c, name, strlen(name)));
    CHECK_OK(watchlock_lock_set_lease(l, lease));
    return l;
}

/* 9: write, downgrade, release, then write again: the second hold is a
 * writer (the name says so, a reader is kept out, the token rises), three
 * times over; kind() tells the hold's side while held. */
static void test_write_after_downgrade(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *w = rw(c, "qs-down", 1, 5000), *r = rw(c, "qs-down", 0, 5000);
    int64_t last = 0;
    for (int round = 0; round < 3; round++) {
        CHECK_OK(watchlock_lock_acquire(w, 0));
        CHECK_STATUS(watchlock_lock_acquire(r, 0), WATCHLOCK_ETIMEDOUT); /* no reader beside a writer */
        CHECK_EQ(q_info(c, "qs-down", Q_WRITER), 1);
        int64_t f = watchlock_lock_fencing_token(w);
        CHECK_INT(f, >, last); /* a writer's token rises */
        last = f;
        CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_WRITE);
        CHECK_OK(watchlock_rwlock_downgrade(w));
        CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_READ);
        CHECK_EQ(q_info(c, "qs-down", Q_WRITER), 0);
        CHECK_STATUS(watchlock_rwlock_downgrade(w), WATCHLOCK_EINVAL); /* a read share now */
        CHECK_OK(watchlock_lock_acquire(r, 0));                        /* readers share */
        CHECK_OK(watchlock_lock_release(r));
        CHECK_OK(watchlock_lock_acquire(w, 0)); /* reentrant: the hold it has, the read share */
        CHECK_EQ(watchlock_lock_hold_count(w), 2);
        CHECK_OK(watchlock_lock_release(w));
        CHECK_OK(watchlock_lock_release(w));
        CHECK_EQ(q_info(c, "qs-down", Q_HOLDERS), 0);
    }
    CHECK_EQ(watchlock_lock_kind(w), WATCHLOCK_KIND_WRITE); /* not held: the handle's side */
    watchlock_lock_free(w);
    watchlock_lock_free(r);
    watchlock_client_close(c);
}

/* 10: a semaphore of 3. W waits in slices (kept place) for 1 permit while
 * another handle holds all 3; they are released (W's kept place is granted
 * 1 inside that release); W's next slice asks for 3. It must hold 3 as the
 * server counts them, so X gets none of its 2: never five permits out. The
 * other way round (a kept place of 3, then a slice for 1) counts 1. */
static void test_kept_place_carries_k(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = sem(c, "qs-k", 3, 5000), *w = sem(c, "qs-k", 3, 5000), *x = sem(c, "qs-k", 3, 5000);
    CHECK_OK(watchlock_lock_set_wait_slices(w, 1));
    CHECK_OK(watchlock_semaphore_acquire(a, 3, 0));
    CHECK_STATUS(watchlock_semaphore_acquire(w, 1, 100), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(q_info(c, "qs-k", Q_LEN), 1); /* its place is kept */
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_semaphore_acquire(w, 3, 1000));
    CHECK_EQ(watchlock_lock_permits(w), 3);
    CHECK_EQ(q_info(c, "qs-k", Q_IN_USE), 3); /* the server counts what W believes it holds */
    CHECK_STATUS(watchlock_semaphore_acquire(x, 2, 0), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(w));
    CHECK_EQ(q_info(c, "qs-k", Q_IN_USE), 0);

    /* a smaller k: a kept place of 3, then a slice for 1 */
    CHECK_OK(watchlock_semaphore_acquire(a, 1, 0));
    CHECK_STATUS(watchlock_semaphore_acquire(w, 3, 100), WATCHLOCK_ETIMEDOUT);
    CHECK_EQ(q_info(c, "qs-k", Q_LEN), 1);
    CHECK_OK(watchlock_semaphore_acquire(w, 1, 1000)); /* 2 are free: no need to wait for a */
    CHECK_EQ(watchlock_lock_permits(w), 1);
    CHECK_EQ(q_info(c, "qs-k", Q_IN_USE), 2);
    CHECK_OK(watchlock_semaphore_acquire(x, 1, 0)); /* the third permit is free */
    CHECK_OK(watchlock_lock_release(x));
    CHECK_OK(watchlock_lock_release(w));
    CHECK_OK(watchlock_lock_release(a));
    CHECK_EQ(q_info(c, "qs-k", Q_IN_USE), 0);
    watchlock_lock_free(a);
    watchlock_lock_free(w);
    watchlock_lock_free(x);
    watchlock_client_close(c);
}

/* A child that waits (up to a minute) for name as a fair lock (k 0) or for
 * k permits of a semaphore of n, tells it got it, and releases. */
static void waiter_body(const q_args *a)
{
    watchlock_client *cc = open_client(test_url(""));
    watchlock_lock *w = a->k == 0 ? fair(cc, a->name, a->lease) : sem(cc, a->name, a->n, a->lease);
    CHECK_OK(a->k == 0 ? watchlock_lock_acquire(w, 60000) : watchlock_semaphore_acquire(w, a->k, 60000));
    CHECK(rh_int(test_server(), "RPUSH %s-got %d", a->name, a->tag) > 0);
    CHECK_OK(watchlock_lock_release(w));
    watchlock_lock_free(w);
    watchlock_client_close(cc);
}

/* 11: a client holding a fair lock and all permits of a semaphore (30 s
 * leases) is closed while a process waits for each: close releases both
 * through the queue's script, so each waiter is granted inside that
 * release (the queue is empty when close returns), not when the 30 s
 * lease runs out. */
static void test_close_hands_off(void)
{
    q_child fw = q_fork(waiter_body, (q_args){.name = "qs-close-f", .lease = 5000, .k = 0, .tag = 1});
    q_child sw = q_fork(waiter_body, (q_args){.name = "qs-close-s", .lease = 5000, .n = 2, .k = 1, .tag = 2});
    watchlock_client *view = open_client(test_url(""));
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *f = fair(c, "qs-close-f", 30000), *s = sem(c, "qs-close-s", 2, 30000);
    CHECK_OK(watchlock_lock_acquire(f, 0));
    CHECK_OK(watchlock_semaphore_acquire(s, 2, 0));
    q_go(&fw);
    q_go(&sw);
    WAIT_FOR(q_info(view, "qs-close-f", Q_LEN) == 1, 20000);
    WAIT_FOR(q_info(view, "qs-close-s", Q_LEN) == 1, 20000);
    watchlock_client_close(c);
    /* granted inside close's releases */
    CHECK_EQ(q_info(view, "qs-close-f", Q_LEN), 0);
    CHECK_EQ(q_info(view, "qs-close-s", Q_LEN), 0);
    q_wait_child(fw.pid, "fair waiter");
    q_wait_child(sw.pid, "semaphore waiter");
    CHECK_EQ(rh_int(test_server(), "LLEN qs-close-f-got"), 1);
    CHECK_EQ(rh_int(test_server(), "LLEN qs-close-s-got"), 1);
    CHECK_STATUS(watchlock_lock_state(f), WATCHLOCK_UNLOCKED);
    watchlock_lock_free(f);
    watchlock_lock_free(s);
    watchlock_client_close(view);
}

/* 11: a fair hold declared LOST by its local deadline (not renewed; a
 * safety margin of half the lease, so its key outlives the deadline by
 * ~3 s) is released by the user: that release goes through the queue's
 * script, and the waiting process is granted inside it, not when the
 * hold's key and its holders entry run out. */
static void test_lost_hold_hands_off(void)
{
    q_child ch = q_fork(waiter_body, (q_args){.name = "qs-lost", .lease = 5000, .k = 0, .tag = 1});
    watchlock_client *view = open_client(test_url(""));
    watchlock_client *c = open_client(test_url("?safety_margin=2900ms"));
    watchlock_lock *f = fair(c, "qs-lost", 6000);
    CHECK_OK(watchlock_lock_set_auto_renew(f, 0));
    CHECK_OK(watchlock_lock_acquire(f, 0));
    q_go(&ch);
    WAIT_FOR(q_info(view, "qs-lost", Q_LEN) == 1, 20000);
    WAIT_FOR(watchlock_lock_state(f) == WATCHLOCK_LOST, 20000);
    CHECK_STATUS(watchlock_lock_release(f), WATCHLOCK_ENOTOWNER); /* it was lost: said so */
    CHECK_EQ(q_info(view, "qs-lost", Q_LEN), 0);                    /* and the waiter granted in it */
    q_wait_child(ch.pid, "waiter");
    CHECK_EQ(rh_int(test_server(), "LLEN qs-lost-got"), 1);
    watchlock_lock_free(f);
    watchlock_client_close(c);
    watchlock_client_close(view);
}

/* A plain lock on a name in use as a semaphore: EWRONGTYPE naming the
 * semaphore (watchlock run's fallback to a write side keeps this error). */
static void test_plain_on_semaphore_names_it(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *s = sem(c, "qs-kind", 2, 5000), *plain = new_lock(c, "qs-kind"), *w = rw(c, "qs-kind", 1, 5000);
    CHECK_OK(watchlock_lock_acquire(s, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(plain, 0), WATCHLOCK_EWRONGTYPE);
    CHECK(strstr(watchlock_last_error(), "in use as a semaphore") != NULL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(w, 0), WATCHLOCK_EWRONGTYPE);
    CHECK(strstr(watchlock_last_error(), "in use as a semaphore") != NULL);
    CHECK(strstr(watchlock_last_error(), "the write side of a read-write lock") != NULL);
    CHECK_OK(watchlock_lock_release(s));
    watchlock_lock_free(s);
    watchlock_lock_free(plain);
    watchlock_lock_free(w);
    watchlock_client_close(c);
}

static const test_case tests[] = {
    {"write_after_downgrade", test_write_after_downgrade, 0},
    {"kept_place_carries_k", test_kept_place_carries_k, 0},
    {"close_hands_off", test_close_hands_off, 0},
    {"lost_hold_hands_off", test_lost_hold_hands_off, 0},
    {"plain_on_semaphore_names_it", test_plain_on_semaphore_names_it, 0},
    {NULL, NULL, 0}};

int main(int argc, char **argv)
{
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
