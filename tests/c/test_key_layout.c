/*
 * test_key_layout.c - issue 31 item 1: the name layout
 * (watchlock_lock_set_key_layout, WATCHLOCK_KEYS_NAME), redis-py's keys: the
 * lock is the key named like the lock, holding the hold's token and nothing
 * else. A holder that writes that key as redis-py does (SET name token NX
 * PX, compare-and-DEL) and this handle exclude each other; neither releases
 * nor extends the other's hold; DEL frees the lock; a caller's token is
 * stored as given; misuse is refused with a message.
 */
#include "testing.h"

#include <string.h>

static char *get_value(rh_server *srv, const char *key)
{
    redisReply *r = rh_command(srv, "GET %s", key);
    CHECK(r != NULL);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

/* The token under the name, the lease, exclusion both ways, DEL frees. */
static void test_name_is_the_key_and_the_token_its_value(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "layout:orders");
    CHECK_OK(watchlock_lock_set_key_layout(l, WATCHLOCK_KEYS_NAME));
    CHECK_OK(watchlock_lock_set_lease(l, 10000));
    CHECK_OK(watchlock_lock_set_auto_renew(l, 0));
    CHECK_OK(watchlock_lock_set_token(l, "mine"));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    char *v = get_value(srv, "layout:orders");
    CHECK_STR(v, "mine");
    free(v);
    CHECK_INT(rh_int(srv, "PTTL layout:orders"), >, 8000);
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{layout:orders}"), 0); /* not watchlock's layout */
    CHECK_INT(watchlock_lock_fencing_token(l), >, 0);            /* the fence stays watchlock's */
    CHECK_INT(rh_int(srv, "EXISTS watchlock:{layout:orders}:fence"), ==, 1);
    /* a redis-py holder cannot come in; after the release it can, and this handle cannot */
    CHECK_EQ(rh_int(srv, "SETNX layout:orders theirs"), 0);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(srv, "EXISTS layout:orders"), 0);
    CHECK_EQ(rh_int(srv, "SETNX layout:orders theirs"), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(l, 0), WATCHLOCK_ETIMEDOUT);
    /* DEL frees it (as for redis-py); a fresh token is 32 hex digits */
    CHECK_EQ(rh_int(srv, "DEL layout:orders"), 1);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    v = get_value(srv, "layout:orders");
    CHECK(v != NULL && strlen(v) == 32 && strspn(v, "0123456789abcdef") == 32);
    free(v);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* Neither releases nor extends the other's hold, also when one token is a
 * prefix of the other. */
static void test_foreign_holds_are_not_ours(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "layout:foreign");
    CHECK_OK(watchlock_lock_set_key_layout(l, WATCHLOCK_KEYS_NAME));
    CHECK_OK(watchlock_lock_set_auto_renew(l, 0));
    CHECK_OK(watchlock_lock_set_token(l, "abc"));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    /* its key deleted and taken by a redis-py holder whose token starts with ours */
    CHECK_EQ(rh_int(srv, "DEL layout:foreign"), 1);
    CHECK_EQ(rh_int(srv, "SETNX layout:foreign abc123"), 1);
    CHECK_FAILS_WITH_MSG(watchlock_lock_extend(l, 5000), WATCHLOCK_ENOTOWNER);
    char *v = get_value(srv, "layout:foreign");
    CHECK_STR(v, "abc123");
    free(v);
    CHECK_EQ(rh_int(srv, "PTTL layout:foreign"), -1); /* not extended */
    CHECK_FAILS_WITH_MSG(watchlock_lock_release(l), WATCHLOCK_ENOTOWNER);
    v = get_value(srv, "layout:foreign");
    CHECK_STR(v, "abc123");
    free(v);
    /* redis-py's compare-and-delete with its token leaves ours alone */
    CHECK_EQ(rh_int(srv, "DEL layout:foreign"), 1);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EVAL %s 1 layout:foreign abc123",
                    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"),
             0);
    CHECK_EQ(watchlock_lock_state(l), WATCHLOCK_HELD);
    CHECK_OK(watchlock_lock_extend(l, 20000)); /* ours: extended */
    CHECK_INT(rh_int(srv, "PTTL layout:foreign"), >, 15000);
    CHECK_OK(watchlock_lock_release(l));
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* redis-py's Lock without a timeout: the key never expires; a second
 * handle waits, looking again, and gets it after the release. */
static void test_no_expiry(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "layout:forever");
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_no_expiry(l, 1), WATCHLOCK_EINVAL); /* the name layout only */
    CHECK_OK(watchlock_lock_set_key_layout(l, WATCHLOCK_KEYS_NAME));
    CHECK_OK(watchlock_lock_set_no_expiry(l, 1));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "PTTL layout:forever"), -1);
    CHECK_EQ(watchlock_lock_renewals(l), 0);
    watchlock_lock *other = new_lock(c, "layout:forever");
    CHECK_OK(watchlock_lock_set_key_layout(other, WATCHLOCK_KEYS_NAME));
    CHECK_FAILS_WITH_MSG(watchlock_lock_acquire(other, 200), WATCHLOCK_ETIMEDOUT);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(srv, "EXISTS layout:forever"), 0);
    CHECK_OK(watchlock_lock_acquire(other, 10000));
    CHECK_INT(rh_int(srv, "PTTL layout:forever"), >, 0); /* other's default lease */
    CHECK_OK(watchlock_lock_release(other));
    watchlock_lock_free(other);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

static void test_misuse_is_refused(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "layout:misuse");
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_token(l, "t"), WATCHLOCK_EINVAL); /* not the name layout */
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_key_layout(l, 7), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_set_key_layout(l, WATCHLOCK_KEYS_NAME));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_token(l, ""), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_token(l, "a.b"), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "'.'") != NULL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_token(l, "0123456789abcdef0123456789abcdef0"), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_key_layout(l, WATCHLOCK_KEYS_WATCHLOCK), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_token(l, "late"), WATCHLOCK_EINVAL);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_OK(watchlock_lock_set_key_layout(l, WATCHLOCK_KEYS_WATCHLOCK)); /* and back */
    watchlock_lock_free(l);

    watchlock_lock *own = new_lock(c, "watchlock:{x}");
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_key_layout(own, WATCHLOCK_KEYS_NAME), WATCHLOCK_EINVAL);
    CHECK(strstr(watchlock_last_error(), "watchlock:") != NULL);
    watchlock_lock_free(own);
    watchlock_lock *fair = NULL;
    CHECK_OK(watchlock_fair_lock_new(&fair, c, "layout:fair", 11));
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_key_layout(fair, WATCHLOCK_KEYS_NAME), WATCHLOCK_EINVAL);
    watchlock_lock_free(fair);
    watchlock_client_close(c);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"name_is_the_key_and_the_token_its_value", test_name_is_the_key_and_the_token_its_value, 0},
        {"foreign_holds_are_not_ours", test_foreign_holds_are_not_ours, 0},
        {"no_expiry", test_no_expiry, 0},
        {"misuse_is_refused", test_misuse_is_refused, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
