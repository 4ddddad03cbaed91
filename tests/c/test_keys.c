/*
 * test_keys.c - the name -> key mapping itself (core/src/proto/keys.c), without
 * a server: SHA-256 against the FIPS 180-4 examples, short names mapped as
 * before (escaped, readable, invertible), long names mapped to a bounded
 * digest tag that no short name can produce, and two long names that
 * differ only in their last byte mapped to different keys. Also the
 * deadline/renewal heap (core/src/base/heap.c): random inserts, key changes
 * and removals against a model. The cluster redirect parser
 * (wl_parse_redirect, core/src/proto/replies.c) on the error replies Redis sends
 * (MOVED/ASK with an IP, a hostname, IPv6, an empty endpoint, "?") and on
 * malformed ones. Links the static library for the internal functions.
 */
#include "testing.h"

#include "proto/proto.h"

#include <stdlib.h>

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha(const void *data, size_t len, const char *want)
{
    unsigned char d[32];
    char got[65];
    wl_sha256(data, len, d);
    hex(d, 32, got);
    CHECK_MSG(strcmp(got, want) == 0, "sha256 of %zu bytes: %s, want %s", len, got, want);
}

static void test_sha256_vectors(void)
{
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu";
    check_sha(four, strlen(four), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    size_t n = 1000000;
    char *a = malloc(n);
    CHECK(a != NULL);
    memset(a, 'a', n);
    check_sha(a, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* Every padding boundary: 55, 56, 63, 64, 65 bytes (one or two blocks). */
    check_sha(a, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    check_sha(a, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    check_sha(a, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    free(a);
}

static void test_short_names_unchanged(void)
{
    wl_keys k;
    CHECK_OK(wl_keys_make(&k, "orders:42", 9));
    CHECK(strcmp(k.lock, "watchlock:{orders:42}") == 0);
    CHECK(strcmp(k.fence, "watchlock:{orders:42}:fence") == 0);
    CHECK(strcmp(k.channel, "watchlock:{orders:42}:released") == 0);
    CHECK(strcmp(k.owner, "watchlock:{orders:42}:owner") == 0);
    CHECK(k.name == NULL);
    CHECK_EQ(k.lock_len, strlen(k.lock));
    wl_keys_clear(&k);
    /* Up to the threshold a name is escaped, not digested, and reads back. */
    char name[WL_DIGEST_NAME_MIN];
    for (size_t i = 0; i < sizeof name; i++)
        name[i] = "a{}%\0"[i % 5];
    CHECK_OK(wl_keys_make(&k, name, sizeof name));
    CHECK(k.name == NULL);
    char back[4 * WL_DIGEST_NAME_MIN];
    size_t back_len = 0;
    CHECK_EQ(wl_name_from_lock_key(k.lock, k.lock_len, back, &back_len), 0);
    CHECK_EQ(back_len, sizeof name);
    CHECK(memcmp(back, name, sizeof name) == 0);
    CHECK(!wl_lock_key_is_digest(k.lock, k.lock_len));
    wl_keys_clear(&k);
}

static void test_long_names_digested(void)
{
    size_t sizes[] = {WL_DIGEST_NAME_MIN + 1, 10 * 1024, WATCHLOCK_MAX_NAME};
    char *name = malloc(WATCHLOCK_MAX_NAME);
    CHECK(name != NULL);
    for (size_t i = 0; i < WATCHLOCK_MAX_NAME; i++)
        name[i] = "ab{}\0%:"[i % 7];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t len = sizes[s];
        wl_keys k;
        CHECK_OK(wl_keys_make(&k, name, len));
        /* watchlock:{%H<64 hex>}: bounded whatever the name's length. */
        CHECK_EQ(k.lock_len, strlen("watchlock:{}") + WL_DIGEST_TAG_LEN);
        unsigned char d[32];
        char want[128] = "watchlock:{%H";
        wl_sha256(name, len, d);
        hex(d, 32, want + strlen(want));
        strcat(want, "}");
        CHECK_MSG(strcmp(k.lock, want) == 0, "%s != %s", k.lock, want);
        CHECK(wl_lock_key_is_digest(k.lock, k.lock_len));
        /* All keys share the tag (one Cluster slot); the name key exists. */
        CHECK(strncmp(k.fence, k.lock, k.lock_len) == 0 && strcmp(k.fence + k.lock_len, ":fence") == 0);
        CHECK(strncmp(k.owner, k.lock, k.lock_len) == 0 && strcmp(k.owner + k.lock_len, ":owner") == 0);
        CHECK(strncmp(k.channel, k.lock, k.lock_len) == 0 && strcmp(k.channel + k.lock_len, ":released") == 0);
        CHECK(k.name != NULL && strncmp(k.name, k.lock, k.lock_len) == 0 && strcmp(k.name + k.lock_len, ":name") == 0);
        /* The digest is not read backwards as a name. */
        char back[256];
        size_t back_len;
        CHECK_EQ(wl_name_from_lock_key(k.lock, k.lock_len, back, &back_len), -1);
        /* A name that differs only in its last byte gets other keys. */
        wl_keys k2;
        name[len - 1] ^= 1;
        CHECK_OK(wl_keys_make(&k2, name, len));
        name[len - 1] ^= 1;
        CHECK(strcmp(k.lock, k2.lock) != 0);
        CHECK(strcmp(k.fence, k2.fence) != 0);
        wl_keys_clear(&k2);
        /* A short name spelled like the digest tag is escaped ("%25H..."),
         * so it never meets a long name's keys. */
        const char *tag = k.lock + strlen("watchlock:{");
        CHECK_OK(wl_keys_make(&k2, tag, WL_DIGEST_TAG_LEN));
        CHECK(k2.name == NULL);
        CHECK(strcmp(k.lock, k2.lock) != 0);
        CHECK(strncmp(k2.lock, "watchlock:{%25H", 15) == 0);
        CHECK(!wl_lock_key_is_digest(k2.lock, k2.lock_len));
        wl_keys_clear(&k2);
        wl_keys_clear(&k);
    }
    free(name);
}

/* An item of the generic heap: its key and its position live in it, at
 * offsets the heap is told (as in a hold: deadline_us, dl_idx). */
typedef struct heap_item {
    char other[24];
    int64_t deadline_us;
    size_t dl_idx;
} heap_item;

/* The heap's invariant (every parent <= its children, every handle's
 * stored position right) and its minimum, after every operation. */
static void check_heap(const wl_heap *h, heap_item *ls, const bool *in, size_t n)
{
    size_t count = 0;
    int64_t min = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(wl_heap_contains(h, &ls[i]), in[i]);
        if (in[i]) {
            count++;
            CHECK_EQ(h->items[ls[i].dl_idx].item == &ls[i], 1);
            if (ls[i].deadline_us < min)
                min = ls[i].deadline_us;
        }
    }
    CHECK_EQ(h->len, count);
    for (size_t i = 1; i < h->len; i++)
        CHECK_MSG(h->items[(i - 1) / 4].key <= h->items[i].key, "item %zu below its parent", i);
    if (count > 0)
        CHECK_EQ(((heap_item *)wl_heap_top(h))->deadline_us, min);
    else
        CHECK(wl_heap_top(h) == NULL);
}

static void test_heap_order(void)
{
    enum { N = 300 };
    static heap_item ls[N];
    bool in[N] = {0};
    wl_heap h;
    wl_heap_init(&h, offsetof(heap_item, deadline_us), offsetof(heap_item, dl_idx));
    for (size_t i = 0; i < N; i++)
        ls[i].dl_idx = WL_NOT_IN_HEAP;
    srand(7);
    for (int step = 0; step < 20000; step++) {
        size_t i = (size_t)rand() % N;
        int op = rand() % 3;
        if (op < 2) { /* insert, or move its key up or down */
            ls[i].deadline_us = rand() % 1000;
            CHECK_EQ(wl_heap_update(&h, &ls[i]), 0);
            in[i] = true;
        } else {
            wl_heap_remove(&h, &ls[i]);
            in[i] = false;
        }
        if (step % 97 == 0 || step > 19900)
            check_heap(&h, ls, in, N);
    }
    /* Draining it gives the keys in order. */
    int64_t last = INT64_MIN;
    while (wl_heap_top(&h) != NULL) {
        heap_item *top = wl_heap_top(&h);
        CHECK_INT(top->deadline_us, >=, last);
        last = top->deadline_us;
        wl_heap_remove(&h, top);
        in[top - ls] = false;
    }
    check_heap(&h, ls, in, N);
    wl_heap_free(&h);
}

/* ---- the cluster redirect parser ---- */

static bool parse_error(const char *text, wl_redirect *rd)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%s", text);
    redisReply r;
    memset(&r, 0, sizeof r);
    r.type = REDIS_REPLY_ERROR;
    r.str = buf;
    r.len = strlen(buf);
    return wl_parse_redirect(&r, rd);
}

static void expect_redirect(const char *text, int kind, int slot, const char *host, int port)
{
    wl_redirect rd;
    CHECK_MSG(parse_error(text, &rd), "'%s' was not taken for a redirect", text);
    CHECK_MSG(rd.kind == kind && rd.slot == slot && rd.port == port && strcmp(rd.host, host) == 0,
              "'%s': kind %d slot %d host '%s' port %d, want kind %d slot %d host '%s' port %d", text, rd.kind,
              rd.slot, rd.host, rd.port, kind, slot, host, port);
}

static void expect_refused(const char *text)
{
    wl_redirect rd;
    bool ok = parse_error(text, &rd);
    CHECK_MSG(!ok, "'%s' was taken for a redirect: kind %d slot %d host '%s' port %d", text, rd.kind, rd.slot,
              rd.host, rd.port);
}

static void test_redirect_parser(void)
{
    expect_redirect("MOVED 3999 127.0.0.1:6381", WL_REDIRECT_MOVED, 3999, "127.0.0.1", 6381);
    expect_redirect("ASK 12 10.0.0.2:7000", WL_REDIRECT_ASK, 12, "10.0.0.2", 7000);
    expect_redirect("MOVED 0 h:1", WL_REDIRECT_MOVED, 0, "h", 1);
    expect_redirect("MOVED 16383 h:65535", WL_REDIRECT_MOVED, 16383, "h", 65535);
    expect_redirect("MOVED 7 redis-0.redis.ns.svc.cluster.local:6379", WL_REDIRECT_MOVED, 7,
                    "redis-0.redis.ns.svc.cluster.local", 6379);
    /* cluster-preferred-endpoint-type unknown-endpoint: an empty endpoint
     * means the node that sent the redirect (the caller fills it in) */
    expect_redirect("MOVED 3999 :6381", WL_REDIRECT_MOVED, 3999, "", 6381);
    expect_redirect("ASK 3999 :6381", WL_REDIRECT_ASK, 3999, "", 6381);
    /* "?": preferred endpoint "hostname" on a node that has none. Never a
     * host name: port 0 says "unknown, ask the slot map" */
    expect_redirect("MOVED 3999 ?:6381", WL_REDIRECT_MOVED, 3999, "", 0);
    expect_redirect("ASK 5 ?:6381", WL_REDIRECT_ASK, 5, "", 0);
    /* IPv6: Redis writes the address without brackets; the port follows the last ':' */
    expect_redirect("MOVED 3999 2001:db8::1:6381", WL_REDIRECT_MOVED, 3999, "2001:db8::1", 6381);
    expect_redirect("MOVED 3999 ::1:6381", WL_REDIRECT_MOVED, 3999, "::1", 6381);
    expect_redirect("MOVED 3999 [2001:db8::1]:6381", WL_REDIRECT_MOVED, 3999, "2001:db8::1", 6381);
    expect_redirect("MOVED 3999 fe80::1%eth0:6381", WL_REDIRECT_MOVED, 3999, "fe80::1%eth0", 6381);
    /* retry-later errors */
    expect_redirect("TRYAGAIN Multiple keys request during rehashing of slot", WL_REDIRECT_TRYAGAIN, 0, "", 0);
    expect_redirect("CLUSTERDOWN The cluster is down", WL_REDIRECT_CLUSTERDOWN, 0, "", 0);
    expect_redirect("CLUSTERDOWN Hash slot not served", WL_REDIRECT_CLUSTERDOWN, 0, "", 0);

    /* bad ports */
    expect_refused("MOVED 3999 127.0.0.1:0");
    expect_refused("MOVED 3999 127.0.0.1:65536");
    expect_refused("MOVED 3999 127.0.0.1:-1");
    expect_refused("MOVED 3999 127.0.0.1:+6381");
    expect_refused("MOVED 3999 127.0.0.1:6381x");
    expect_refused("MOVED 3999 127.0.0.1:6381 ");
    expect_refused("MOVED 3999 127.0.0.1:6381 extra");
    expect_refused("MOVED 3999 127.0.0.1: 6381");
    expect_refused("MOVED 3999 127.0.0.1:");
    expect_refused("MOVED 3999 127.0.0.1:99999999999999999999");
    expect_refused("MOVED 3999 127.0.0.1:4294973677"); /* 6381 + 2^32 */
    expect_refused("MOVED 3999 127.0.0.1");
    expect_refused("MOVED 3999 :");
    expect_refused("MOVED 3999 ?:0");
    expect_refused("MOVED 3999 ?:");
    /* bad slots */
    expect_refused("MOVED 16384 h:1");
    expect_refused("MOVED -1 h:1");
    expect_refused("MOVED +1 h:1");
    expect_refused("MOVED 99999999999999999999 h:1");
    expect_refused("MOVED 4294967297 h:1"); /* 1 + 2^32 */
    expect_refused("MOVED 12x h:1");
    expect_refused("MOVED  12 h:1");
    expect_refused("MOVED h:1");
    expect_refused("MOVED 3999");
    expect_refused("MOVED 3999 ");
    expect_refused("MOVED");
    expect_refused("MOVED ");
    /* bad hosts: spaces, unbalanced brackets, too long */
    expect_refused("MOVED 3999 a b:6381");
    expect_refused("MOVED 3999  :6381");
    expect_refused("MOVED 3999 [::1:6381");
    expect_refused("MOVED 3999 ::1]:6381");
    expect_refused("MOVED 3999 []:6381");
    expect_refused("MOVED 3999 ??:6381x");
    char longhost[400];
    memset(longhost, 'h', sizeof longhost);
    snprintf(longhost + 300, sizeof longhost - 300, ":6381");
    char text[500];
    snprintf(text, sizeof text, "MOVED 1 %s", longhost);
    expect_refused(text);
    /* a 255-byte host still fits */
    memset(longhost, 'h', 255);
    snprintf(longhost + 255, sizeof longhost - 255, ":6381");
    snprintf(text, sizeof text, "MOVED 1 %s", longhost);
    wl_redirect rd;
    CHECK(parse_error(text, &rd));
    CHECK_EQ(strlen(rd.host), 255);
    /* not redirects */
    expect_refused("MOVEDX 1 h:1");
    expect_refused("ERR MOVED 1 h:1");
    expect_refused("moved 1 h:1");
    expect_refused("");
    redisReply str;
    memset(&str, 0, sizeof str);
    str.type = REDIS_REPLY_STRING;
    str.str = (char *)"MOVED 1 h:1";
    str.len = strlen(str.str);
    CHECK(!wl_parse_redirect(&str, &rd));
    CHECK(!wl_parse_redirect(NULL, &rd));
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"sha256_vectors", test_sha256_vectors, 0},
        {"short_names_unchanged", test_short_names_unchanged, 0},
        {"long_names_digested", test_long_names_digested, 0},
        {"heap_order", test_heap_order, 0},
        {"redirect_parser", test_redirect_parser, 0},
        {NULL, NULL, 0},
    };
    return testing_main(argc, argv, tests, TESTING_NO_SERVER);
}
