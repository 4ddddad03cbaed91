/*
 * test_admin.c - owner records and listing against a real redis-server:
 * an owner label records host, pid and label (and nothing is written
 * without one), a record an earlier hold left behind is never shown, label
 * limits, watchlock_client_list() with globs on names (braces, percent
 * signs, NUL bytes, escapes, classes), its skipping of fence/owner keys and
 * of keys that are not locks, many SCAN pages, SCRIPT FLUSH, an empty
 * database.
 */
#include "testing.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static watchlock_lock *new_lock_n(watchlock_client *c, const char *name, size_t len)
{
    watchlock_lock *l = NULL;
    CHECK_OK(watchlock_lock_new(&l, c, name, len));
    return l;
}

static void check_owner(const watchlock_owner *o, const char *label)
{
    char host[256] = "";
    CHECK(gethostname(host, sizeof host) == 0);
    CHECK(o != NULL);
    size_t len = 0;
    CHECK_STR(watchlock_owner_host(o, &len), host);
    CHECK_EQ(len, strlen(host));
    CHECK_EQ(watchlock_owner_pid(o), getpid());
    CHECK_STR(watchlock_owner_label(o, &len), label);
    CHECK_EQ(len, strlen(label));
}

static void test_owner_recorded(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_client *admin = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "owned");
    const char *label = "backup --full 'db 1'\n\xc3\xa9t\xc3\xa9";
    CHECK_OK(watchlock_lock_set_owner_label(l, label));
    CHECK_OK(watchlock_lock_acquire(l, 0));

    watchlock_owner *o = NULL;
    int held = -1;
    int64_t rem = -5, fence = -5;
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, &rem, &fence, admin, "owned", 5));
    check_owner(o, label);
    CHECK_EQ(held, 1);
    CHECK_INT(rem, >, 25000);
    CHECK_INT(rem, <=, 30000);
    CHECK_EQ(fence, watchlock_lock_fencing_token(l));
    watchlock_owner_free(o);

    /* The record is a hash with a TTL like the fence counter's: max(2 x lease, 1 day). */
    redisReply *r = rh_command(srv, "TYPE watchlock:{owned}:owner");
    CHECK(r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "hash") == 0);
    freeReplyObject(r);
    long long pttl = rh_int(srv, "PTTL watchlock:{owned}:owner");
    CHECK_INT(pttl, >, 86400000LL - 60000);
    CHECK_INT(pttl, <=, 86400000LL);

    /* A 2-day lease: 4 days. */
    watchlock_lock *longl = new_lock(c, "owned-long");
    CHECK_OK(watchlock_lock_set_lease(longl, 2LL * 86400000));
    CHECK_OK(watchlock_lock_set_owner_label(longl, ""));
    CHECK_OK(watchlock_lock_acquire(longl, 0));
    CHECK_INT(rh_int(srv, "PTTL watchlock:{owned-long}:owner"), >, 4LL * 86400000 - 60000);
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, admin, "owned-long", 10));
    check_owner(o, ""); /* "" records host and pid */
    watchlock_owner_free(o);

    /* Reentrant acquire, renewals and release do not disturb it; a
     * re-acquire by the same handle writes a fresh record. */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_lock_release(l));
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, admin, "owned", 5));
    check_owner(o, label);
    watchlock_owner_free(o);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, &rem, &fence, admin, "owned", 5));
    CHECK(o == NULL);
    CHECK_EQ(held, 0);
    CHECK_EQ(rem, 0);
    CHECK_EQ(fence, watchlock_lock_fencing_token(l));
    CHECK_OK(watchlock_lock_set_owner_label(l, "second"));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, admin, "owned", 5));
    check_owner(o, "second");
    watchlock_owner_free(o);

    watchlock_lock_free(l);
    watchlock_lock_free(longl);
    watchlock_client_close(c);
    watchlock_client_close(admin);
}

static void test_owner_not_recorded_without_label(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "anon");
    CHECK_OK(watchlock_lock_acquire(l, 0));
    watchlock_owner *o = (watchlock_owner *)1;
    int held = -1;
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "anon", 4));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);
    /* Nothing beyond the lock and fence keys was written. */
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{anon}:owner"), 0);
    CHECK_EQ(rh_int(srv, "DBSIZE"), 2);
    /* NULL clears a label. */
    watchlock_lock *m = new_lock(c, "anon2");
    CHECK_OK(watchlock_lock_set_owner_label(m, "x"));
    CHECK_OK(watchlock_lock_set_owner_label(m, NULL));
    CHECK_OK(watchlock_lock_acquire(m, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{anon2}:owner"), 0);
    watchlock_lock_free(l);
    watchlock_lock_free(m);
    watchlock_client_close(c);
}

static void test_stale_owner_not_shown(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *a = new_lock(c, "stale");
    watchlock_lock *b = new_lock(c, "stale");
    CHECK_OK(watchlock_lock_set_owner_label(a, "first holder"));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_release(a));
    /* b holds now, without a label: a's record is still there, and not b's. */
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{stale}:owner"), 1);
    watchlock_owner *o = (watchlock_owner *)1;
    int held = -1;
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "stale", 5));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);
    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, c, "stale", 5));
    CHECK_EQ(watchlock_lock_list_count(list), 1);
    CHECK(watchlock_lock_list_owner(list, 0) == NULL);
    watchlock_lock_list_free(list);
    CHECK_OK(watchlock_lock_release(b));

    /* The same handle's next hold has a new token: its old record does
     * not count for a hold that set no label... */
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_lock_set_owner_label(a, NULL));
    CHECK_OK(watchlock_lock_release(a));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "stale", 5));
    CHECK(o == NULL);
    CHECK_OK(watchlock_lock_release(a));
    /* ... nor for a lock taken outside the library, or a key of another type. */
    CHECK(rh_ok(srv, "SET watchlock:{stale} foreign"));
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "stale", 5));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);
    CHECK_EQ(rh_int(srv, "DEL watchlock:{stale}"), 1);
    CHECK_EQ(rh_int(srv, "HSET watchlock:{stale} a b"), 1);
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "stale", 5));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);
    /* An owner key of another type does not break inspect. */
    CHECK_EQ(rh_int(srv, "DEL watchlock:{stale}"), 1);
    CHECK(rh_ok(srv, "SET watchlock:{stale}:owner junk"));
    CHECK_OK(watchlock_lock_set_owner_label(b, "b"));
    CHECK_OK(watchlock_lock_acquire(b, 0)); /* overwrites it */
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "stale", 5));
    check_owner(o, "b");
    watchlock_owner_free(o);
    CHECK_OK(watchlock_lock_release(b));
    CHECK(rh_ok(srv, "SET watchlock:{stale} x"));
    CHECK(rh_ok(srv, "SET watchlock:{stale}:owner junk"));
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "stale", 5));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);

    /* A hold taken over after a force-release: the new holder's record only. */
    CHECK_EQ(rh_int(srv, "DEL watchlock:{stale}"), 1);
    CHECK_OK(watchlock_lock_set_owner_label(a, "a again"));
    CHECK_OK(watchlock_lock_acquire(a, 0));
    int released = 0;
    CHECK_OK(watchlock_client_force_release(c, "stale", 5, &released));
    CHECK_EQ(released, 1);
    CHECK_OK(watchlock_lock_set_owner_label(b, NULL));
    CHECK_OK(watchlock_lock_acquire(b, 0));
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "stale", 5));
    CHECK(o == NULL);
    watchlock_lock_free(a);
    watchlock_lock_free(b);
    watchlock_client_close(c);
}

static void test_owner_label_limits(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *l = new_lock(c, "limits");
    char *big = malloc(WATCHLOCK_MAX_LABEL + 2);
    CHECK(big != NULL);
    memset(big, 'x', WATCHLOCK_MAX_LABEL + 1);
    big[WATCHLOCK_MAX_LABEL + 1] = '\0';
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_owner_label(l, big), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_lock_set_owner_label(NULL, "x"), WATCHLOCK_EINVAL);
    big[WATCHLOCK_MAX_LABEL] = '\0';
    CHECK_OK(watchlock_lock_set_owner_label(l, big));
    big[0] = 'y'; /* copied: the caller's buffer may change */
    CHECK_OK(watchlock_lock_acquire(l, 0));
    watchlock_owner *o = NULL;
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "limits", 6));
    size_t len = 0;
    const char *got = watchlock_owner_label(o, &len);
    CHECK_EQ(len, WATCHLOCK_MAX_LABEL);
    CHECK(got[0] == 'x' && got[len] == '\0');
    watchlock_owner_free(o);
    free(big);

    /* Accessors take NULL; inspect_owner checks its arguments. */
    CHECK_STR(watchlock_owner_host(NULL, &len), "");
    CHECK_EQ(len, 0);
    CHECK_STR(watchlock_owner_label(NULL, NULL), "");
    CHECK_EQ(watchlock_owner_pid(NULL), 0);
    watchlock_owner_free(NULL);
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect_owner(NULL, NULL, NULL, NULL, c, "x", 1), WATCHLOCK_EINVAL);
    o = (watchlock_owner *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "", 0), WATCHLOCK_EINVAL);
    CHECK(o == NULL);
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, NULL, "x", 1), WATCHLOCK_EINVAL);
    watchlock_lock_free(l);
    watchlock_client_close(c);
}

/* The owner record is best effort: an ACL user who may not HSET (or
 * HMGET) still acquires, releases, inspects and lists; only the record is
 * missing. The acquire must not fail after the lock's SET. */
static void test_owner_record_denied_by_acl(void)
{
    rh_server *srv = test_server();
    CHECK(rh_ok(srv, "ACL SETUSER nohash on >nohash-pw ~* &* +@all -hset -hmget"));
    char url[256];
    snprintf(url, sizeof url, "redis://nohash:nohash-pw@127.0.0.1:%d", rh_port(srv));
    watchlock_client *c = open_client(url);
    watchlock_lock *l = new_lock(c, "acl-owner");
    CHECK_OK(watchlock_lock_set_owner_label(l, "denied"));
    CHECK_OK(watchlock_lock_acquire(l, 0));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{acl-owner}:owner"), 0);
    watchlock_owner *o = (watchlock_owner *)1;
    int held = -1;
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "acl-owner", 9));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);
    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, c, "acl-*", 5));
    CHECK_EQ(watchlock_lock_list_count(list), 1);
    CHECK(watchlock_lock_list_owner(list, 0) == NULL);
    watchlock_lock_list_free(list);
    CHECK_OK(watchlock_lock_release(l));
    CHECK_EQ(rh_int(srv, "EXISTS watchlock:{acl-owner}"), 0);
    /* A record written by an allowed user is not readable to this one: none. */
    watchlock_client *full = open_client(test_url(""));
    watchlock_lock *f = new_lock(full, "acl-owner");
    CHECK_OK(watchlock_lock_set_owner_label(f, "allowed"));
    CHECK_OK(watchlock_lock_acquire(f, 0));
    CHECK_OK(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, full, "acl-owner", 9));
    check_owner(o, "allowed");
    watchlock_owner_free(o);
    CHECK_OK(watchlock_client_inspect_owner(&o, &held, NULL, NULL, c, "acl-owner", 9));
    CHECK(o == NULL);
    CHECK_EQ(held, 1);
    watchlock_lock_free(f);
    watchlock_lock_free(l);
    watchlock_client_close(full);
    watchlock_client_close(c);
    CHECK(rh_int(srv, "ACL DELUSER nohash") == 1);
}

/* ---- list ---- */

typedef struct named {
    const char *name;
    size_t len;
} named;

#define N(s) {s, sizeof(s) - 1}

static const named list_names[] = {
    N("job:1"), N("job:2"), N("job:10"), N("other"), N("br{ace}"), N("}"), N("{"), N("per%cent"), N("%7B"),
    N("nul\0byte"), N("q?mark"), N("star*"), N("back\\slash"), N("x}:fence"), N("caf\xc3\xa9"), N("\xff\xfe"),
};
#define N_LIST_NAMES (sizeof list_names / sizeof list_names[0])

static int name_index(const char *name, size_t len)
{
    for (size_t i = 0; i < N_LIST_NAMES; i++)
        if (list_names[i].len == len && memcmp(list_names[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

/* Lists `pattern` and checks that exactly the names in `want` (a string
 * of indexes into list_names, e.g. "013") come back, in bytewise order. */
static void expect_list(watchlock_client *c, const char *pattern, size_t plen, const char *want)
{
    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, c, pattern, plen));
    CHECK(list != NULL);
    size_t n = watchlock_lock_list_count(list);
    char got[64] = "";
    size_t k = 0;
    for (size_t i = 0; i < n && k + 2 < sizeof got; i++) {
        size_t len = 0;
        const char *name = watchlock_lock_list_name(list, i, &len);
        int idx = name_index(name, len);
        CHECK_MSG(idx >= 0, "pattern '%.*s': unexpected name '%.*s'", (int)plen, pattern, (int)len, name);
        got[k++] = (char)(idx < 10 ? '0' + idx : 'a' + idx - 10);
        if (i > 0) {
            size_t plen2 = 0;
            const char *prev = watchlock_lock_list_name(list, i - 1, &plen2);
            size_t m = plen2 < len ? plen2 : len;
            int d = memcmp(prev, name, m);
            CHECK_MSG(d < 0 || (d == 0 && plen2 < len), "not sorted at %zu", i);
        }
    }
    got[k] = '\0';
    /* compare as sets: sort both */
    char w[64];
    snprintf(w, sizeof w, "%s", want);
    for (char *s = got; *s; s++)
        for (char *t = s + 1; *t; t++)
            if (*t < *s) {
                char x = *s;
                *s = *t;
                *t = x;
            }
    for (char *s = w; *s; s++)
        for (char *t = s + 1; *t; t++)
            if (*t < *s) {
                char x = *s;
                *s = *t;
                *t = x;
            }
    CHECK_MSG(strcmp(got, w) == 0, "pattern '%.*s': got {%s}, want {%s}", (int)plen, pattern, got, w);
    watchlock_lock_list_free(list);
}

#define LIST(c, pat, want) expect_list(c, pat, sizeof(pat) - 1, want)

static void test_list_patterns(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock *locks[N_LIST_NAMES];
    for (size_t i = 0; i < N_LIST_NAMES; i++) {
        locks[i] = new_lock_n(c, list_names[i].name, list_names[i].len);
        if (i % 2 == 0)
            CHECK_OK(watchlock_lock_set_owner_label(locks[i], "even"));
        CHECK_OK(watchlock_lock_set_lease(locks[i], 60000 + (int64_t)i * 1000));
        CHECK_OK(watchlock_lock_acquire(locks[i], 0));
    }
    /* Keys that are not lock keys: a free lock's leftovers, a hash where a
     * lock would be, foreign keys with our prefix, an escape we never write. */
    watchlock_lock *gone = new_lock(c, "job:gone");
    CHECK_OK(watchlock_lock_set_owner_label(gone, "gone"));
    CHECK_OK(watchlock_lock_acquire(gone, 0));
    CHECK_OK(watchlock_lock_release(gone));
    CHECK_EQ(rh_int(srv, "HSET watchlock:{job:hash} a b"), 1);
    CHECK(rh_ok(srv, "SET watchlock:{bad%%zz} x"));
    CHECK(rh_ok(srv, "SET watchlock:{job:a}b} x"));
    CHECK(rh_ok(srv, "SET watchlock:{job:3}:other x"));
    CHECK(rh_ok(srv, "SET watchlock:job:4 x"));
    CHECK(rh_ok(srv, "SET unrelated x"));

    /* Every lock, with its lease, fence and owner. */
    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, c, NULL, 0));
    CHECK_EQ(watchlock_lock_list_count(list), N_LIST_NAMES);
    for (size_t i = 0; i < N_LIST_NAMES; i++) {
        size_t len = 0;
        const char *name = watchlock_lock_list_name(list, i, &len);
        CHECK(name[len] == '\0');
        int idx = name_index(name, len);
        CHECK(idx >= 0);
        int64_t rem = watchlock_lock_list_remaining_ms(list, i);
        CHECK_INT(rem, >, 50000 + idx * 1000);
        CHECK_INT(rem, <=, 60000 + idx * 1000);
        CHECK_EQ(watchlock_lock_list_fence(list, i), watchlock_lock_fencing_token(locks[idx]));
        const watchlock_owner *o = watchlock_lock_list_owner(list, i);
        if (idx % 2 == 0)
            check_owner(o, "even");
        else
            CHECK(o == NULL);
    }
    CHECK(watchlock_lock_list_name(list, N_LIST_NAMES, NULL) == NULL);
    CHECK(watchlock_lock_list_owner(list, N_LIST_NAMES) == NULL);
    CHECK_EQ(watchlock_lock_list_fence(list, N_LIST_NAMES), 0);
    CHECK_EQ(watchlock_lock_list_remaining_ms(list, N_LIST_NAMES), 0);
    watchlock_lock_list_free(list);
    CHECK_EQ(watchlock_lock_list_count(NULL), 0);
    watchlock_lock_list_free(NULL);

    /* Index: 0 job:1  1 job:2  2 job:10  3 other  4 br{ace}  5 }  6 {  7 per%cent
     * 8 %7B  9 nul\0byte  a q?mark  b star*  c back\slash  d x}:fence  e café  f \xff\xfe */
    LIST(c, "", "0123456789abcdef");
    LIST(c, "*", "0123456789abcdef");
    LIST(c, "job:*", "012");
    LIST(c, "job:?", "01");
    LIST(c, "job:??", "2");
    LIST(c, "job:[12]", "01");
    LIST(c, "job:[^1]", "1");
    LIST(c, "job:[0-9]*", "012");
    LIST(c, "job:1*", "02");
    LIST(c, "other", "3");
    LIST(c, "othe", "");
    LIST(c, "br{*", "4");
    LIST(c, "*}", "45");
    LIST(c, "}", "5");
    LIST(c, "{", "6");
    LIST(c, "?", "56");
    LIST(c, "[{}]", "56");
    LIST(c, "*%*", "78");
    LIST(c, "%7B", "8");
    LIST(c, "per?cent", "7");
    LIST(c, "nul\0*", "9");
    LIST(c, "nul?byte", "9");
    LIST(c, "*\0*", "9");
    LIST(c, "q\\?mark", "a");
    LIST(c, "q?mark", "a");
    LIST(c, "star\\*", "b");
    LIST(c, "star*", "b");
    LIST(c, "back\\\\slash", "c");
    LIST(c, "br\\{ace\\}", "4");
    LIST(c, "x}:*", "d");
    LIST(c, "*:fence", "d");
    LIST(c, "caf\xc3\xa9", "e");
    LIST(c, "caf??", "e");
    LIST(c, "\xff*", "f");
    LIST(c, "[\xfe-\xff]?", "f");
    LIST(c, "*o*", "0123");
    LIST(c, "[", "");
    LIST(c, "\\", "");
    LIST(c, "nomatch*", "");

    for (size_t i = 0; i < N_LIST_NAMES; i++)
        watchlock_lock_free(locks[i]);
    watchlock_lock_free(gone);
    LIST(c, "*", "");
    watchlock_client_close(c);
}

/* Long names (more than 256 bytes) have digested keys (keys.c): bounded,
 * not readable backwards. Their holds store the name in a ":name" key, so
 * list shows the full name, matched against patterns like any other;
 * inspect (status) and force-release find them by name. A name key that
 * is gone leaves the name unknown: listed under the digest tag when
 * listing everything, and not matched by a pattern. */
static void test_list_long_names(void)
{
    rh_server *srv = test_server();
    watchlock_client *c = open_client(test_url(""));
    enum { LEN = 10 * 1024 };
    char *a = malloc(LEN), *b = malloc(LEN);
    CHECK(a != NULL && b != NULL);
    for (size_t i = 0; i < LEN; i++)
        a[i] = b[i] = "long{}\0%"[i % 8];
    memcpy(a, "job:long-a:", 11);
    memcpy(b, "zzz:long-b:", 11);
    watchlock_lock *la = new_lock_n(c, a, LEN), *lb = new_lock_n(c, b, LEN), *ls = new_lock(c, "job:short");
    CHECK_OK(watchlock_lock_set_owner_label(lb, "labelled"));
    CHECK_OK(watchlock_lock_acquire(la, 0));
    CHECK_OK(watchlock_lock_acquire(lb, 0));
    CHECK_OK(watchlock_lock_acquire(ls, 0));
    /* Every key is short: the longest is the name key (the name is its value). */
    redisReply *r = rh_command(srv, "KEYS watchlock:*");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++)
        CHECK_MSG(r->element[i]->len <= 100, "key of %zu bytes", r->element[i]->len);
    freeReplyObject(r);

    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, c, NULL, 0));
    CHECK_EQ(watchlock_lock_list_count(list), 3);
    int seen = 0;
    for (size_t i = 0; i < 3; i++) {
        size_t len;
        const char *name = watchlock_lock_list_name(list, i, &len);
        if (len == LEN && memcmp(name, a, LEN) == 0) {
            seen |= 1;
            CHECK_EQ(watchlock_lock_list_fence(list, i), watchlock_lock_fencing_token(la));
            CHECK(watchlock_lock_list_owner(list, i) == NULL);
        } else if (len == LEN && memcmp(name, b, LEN) == 0) {
            seen |= 2;
            const watchlock_owner *o = watchlock_lock_list_owner(list, i);
            CHECK(o != NULL);
            size_t ll;
            CHECK(strcmp(watchlock_owner_label(o, &ll), "labelled") == 0);
        } else {
            CHECK(len == 9 && memcmp(name, "job:short", 9) == 0);
            seen |= 4;
        }
    }
    CHECK_EQ(seen, 7);
    watchlock_lock_list_free(list);
    /* A pattern matches the long names' real names. */
    CHECK_OK(watchlock_client_list(&list, c, "job:*", 5));
    CHECK_EQ(watchlock_lock_list_count(list), 2);
    watchlock_lock_list_free(list);
    CHECK_OK(watchlock_client_list(&list, c, "zzz:*", 5));
    CHECK_EQ(watchlock_lock_list_count(list), 1);
    size_t len;
    CHECK(memcmp(watchlock_lock_list_name(list, 0, &len), b, LEN) == 0 && len == LEN);
    watchlock_lock_list_free(list);
    /* inspect by name (what `watchlock status` uses). */
    int held = 0;
    CHECK_OK(watchlock_client_inspect(c, a, LEN, &held, NULL, NULL));
    CHECK_EQ(held, 1);
    /* The name key gone: reported under the digest tag, never as a name a
     * pattern could match. */
    r = rh_command(srv, "KEYS watchlock:{%%H*}:name");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    for (size_t i = 0; i < r->elements; i++)
        CHECK_EQ(rh_int(srv, "DEL %s", r->element[i]->str), 1);
    freeReplyObject(r);
    CHECK_OK(watchlock_client_list(&list, c, NULL, 0));
    CHECK_EQ(watchlock_lock_list_count(list), 3);
    int tags = 0;
    for (size_t i = 0; i < 3; i++) {
        const char *name = watchlock_lock_list_name(list, i, &len);
        if (len == 66 && memcmp(name, "%H", 2) == 0)
            tags++;
    }
    CHECK_EQ(tags, 2);
    watchlock_lock_list_free(list);
    CHECK_OK(watchlock_client_list(&list, c, "job:*", 5));
    CHECK_EQ(watchlock_lock_list_count(list), 1);
    watchlock_lock_list_free(list);
    /* force-release by name. */
    CHECK_OK(watchlock_client_force_release(c, a, LEN, NULL));
    CHECK_OK(watchlock_client_inspect(c, a, LEN, &held, NULL, NULL));
    CHECK_EQ(held, 0);
    watchlock_lock_free(la);
    watchlock_lock_free(lb);
    watchlock_lock_free(ls);
    free(a);
    free(b);
    watchlock_client_close(c);
}

static void test_list_empty_db_and_errors(void)
{
    watchlock_client *c = open_client(test_url(""));
    watchlock_lock_list *list = (watchlock_lock_list *)1;
    CHECK_OK(watchlock_client_list(&list, c, NULL, 0));
    CHECK(list != NULL);
    CHECK_EQ(watchlock_lock_list_count(list), 0);
    watchlock_lock_list_free(list);
    CHECK_OK(watchlock_client_list(&list, c, "x*", 2));
    CHECK_EQ(watchlock_lock_list_count(list), 0);
    watchlock_lock_list_free(list);

    CHECK_FAILS_WITH_MSG(watchlock_client_list(NULL, c, NULL, 0), WATCHLOCK_EINVAL);
    CHECK_FAILS_WITH_MSG(watchlock_client_list(&list, NULL, NULL, 0), WATCHLOCK_EINVAL);
    CHECK(list == NULL);
    char *big = calloc(1, WATCHLOCK_MAX_NAME + 1);
    CHECK(big != NULL);
    CHECK_FAILS_WITH_MSG(watchlock_client_list(&list, c, big, WATCHLOCK_MAX_NAME + 1), WATCHLOCK_EINVAL);
    free(big);
    /* A closed client (kept in memory by a lock handle). */
    watchlock_lock *keep = new_lock(c, "keep");
    watchlock_client_close(c);
    CHECK_FAILS_WITH_MSG(watchlock_client_list(&list, c, NULL, 0), WATCHLOCK_ECLOSED);
    CHECK(list == NULL);
    watchlock_owner *o = (watchlock_owner *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "x", 1), WATCHLOCK_ECLOSED);
    CHECK(o == NULL);
    watchlock_lock_free(keep);
}

/* Several SCAN pages (COUNT 1000), with the script cache flushed. */
static void test_list_many_pages(void)
{
    rh_server *srv = test_server();
    redisContext *ctx = rh_connect(srv);
    CHECK(ctx != NULL);
    enum { N_LOCKS = 2500 };
    for (int i = 0; i < N_LOCKS; i++) {
        redisAppendCommand(ctx, "SET watchlock:{many:%05d} 0123456789abcdef0123456789abcdef.1 PX 600000", i);
        redisAppendCommand(ctx, "SET watchlock:{many:%05d}:fence %d", i, i + 1);
        redisAppendCommand(ctx, "SET other:%05d x", i);
    }
    for (int i = 0; i < 3 * N_LOCKS; i++) {
        void *reply = NULL;
        CHECK(redisGetReply(ctx, &reply) == REDIS_OK);
        freeReplyObject(reply);
    }
    redisFree(ctx);
    CHECK(rh_ok(srv, "SCRIPT FLUSH"));
    watchlock_client *c = open_client(test_url(""));
    CHECK(rh_ok(srv, "SCRIPT FLUSH")); /* after open: the client's SHAs are now unknown to the server */
    watchlock_lock_list *list = NULL;
    CHECK_OK(watchlock_client_list(&list, c, "many:*", 6));
    CHECK_EQ(watchlock_lock_list_count(list), N_LOCKS);
    for (size_t i = 0; i < N_LOCKS; i++) {
        char want[32];
        snprintf(want, sizeof want, "many:%05zu", i);
        CHECK_STR(watchlock_lock_list_name(list, i, NULL), want);
        CHECK_EQ(watchlock_lock_list_fence(list, i), (int64_t)i + 1);
        CHECK(watchlock_lock_list_owner(list, i) == NULL);
    }
    watchlock_lock_list_free(list);
    CHECK_OK(watchlock_client_list(&list, c, "many:0001?", 10));
    CHECK_EQ(watchlock_lock_list_count(list), 10);
    watchlock_lock_list_free(list);
    watchlock_client_close(c);
}

/* A server that went away: ECONN, not a partial list. */
static void test_list_server_gone(void)
{
    rh_server *srv = rh_start(NULL);
    CHECK(srv != NULL);
    watchlock_client *c = open_client(rh_url(srv));
    rh_kill(srv);
    watchlock_lock_list *list = (watchlock_lock_list *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_list(&list, c, NULL, 0), WATCHLOCK_ECONN);
    CHECK(list == NULL);
    watchlock_owner *o = (watchlock_owner *)1;
    CHECK_FAILS_WITH_MSG(watchlock_client_inspect_owner(&o, NULL, NULL, NULL, c, "x", 1), WATCHLOCK_ECONN);
    CHECK(o == NULL);
    watchlock_client_close(c);
    rh_free(srv);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"owner_recorded", test_owner_recorded, 0},
        {"owner_not_recorded_without_label", test_owner_not_recorded_without_label, 0},
        {"stale_owner_not_shown", test_stale_owner_not_shown, 0},
        {"owner_label_limits", test_owner_label_limits, 0},
        {"owner_record_denied_by_acl", test_owner_record_denied_by_acl, 0},
        {"list_patterns", test_list_patterns, 0},
        {"list_long_names", test_list_long_names, 0},
        {"list_empty_db_and_errors", test_list_empty_db_and_errors, 0},
        {"list_many_pages", test_list_many_pages, 0},
        {"list_server_gone", test_list_server_gone, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_SHARED_SERVER);
}
