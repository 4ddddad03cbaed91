/*
 * keys.c - the injective mapping from lock names to Redis keys.
 *
 * A name's bytes are escaped so that they never contain '}' (which would end
 * the hash tag early) nor a bare '%': '%' -> "%25", '{' -> "%7B",
 * '}' -> "%7D"; every other byte, NUL included, is kept. The escaped name
 * is the whole hash tag, so all of a name's keys share one Cluster slot, and
 * since the tag has no '}', the suffix after it (":fence", ":released",
 * ":owner", ":name") is unambiguous: no name's lock key can equal another
 * name's fence key. The same argument makes the mapping invertible on lock
 * keys (wl_name_from_lock_key, for listing): a key that starts with the
 * prefix, ends with the tag's '}' and has no other brace is some name's lock
 * key, and only one name's.
 *
 * Long names (more than WL_DIGEST_NAME_MIN bytes) get the tag "%H" + the
 * SHA-256 of the name in hex (66 bytes) instead, so a key's size is bounded
 * whatever the name's length: Redis hashes and compares every key it
 * touches, and a 10 KiB name made a cycle 3.3x slower. "%H" is an escape
 * the escaping above never writes (it writes only %25, %7B, %7D), so a
 * digested tag can equal no short name's tag; two long names share keys
 * only if their SHA-256 collide (collision resistance: injective in
 * practice). A digest cannot be read backwards, so a long name's hold also
 * stores the name itself in "watchlock:{%H<hex>}:name" (written by the
 * acquire script, TTL as the fence's) for `watchlock list`.
 */
#include "proto/proto.h"

#include <stdlib.h>
#include <string.h>

static const char prefix[] = "watchlock:{";
static const char *const suffixes[] = {"", ":fence", ":released", ":owner", ":name"};

size_t wl_escape_byte(unsigned char ch, char *out)
{
    switch (ch) {
    case '%': memcpy(out, "%25", 3); return 3;
    case '{': memcpy(out, "%7B", 3); return 3;
    case '}': memcpy(out, "%7D", 3); return 3;
    default: out[0] = (char)ch; return 1;
    }
}

/* The hash tag's content for a name into out (3 x name_len or
 * WL_DIGEST_TAG_LEN bytes at most); returns its length. */
static size_t make_tag(const unsigned char *p, size_t name_len, char *out)
{
    if (name_len > WL_DIGEST_NAME_MIN) {
        static const char hex[] = "0123456789abcdef";
        unsigned char d[32];
        wl_sha256(p, name_len, d);
        out[0] = '%';
        out[1] = 'H';
        for (int i = 0; i < 32; i++) {
            out[2 + 2 * i] = hex[d[i] >> 4];
            out[3 + 2 * i] = hex[d[i] & 15];
        }
        return WL_DIGEST_TAG_LEN;
    }
    size_t n = 0;
    for (size_t i = 0; i < name_len; i++)
        n += wl_escape_byte(p[i], out + n);
    return n;
}

/* All of a name's keys live in one allocation (keys->lock is its start):
 * one malloc per handle instead of four or five, which a million held
 * locks notice. */
int wl_keys_make(wl_keys *keys, const void *name, size_t name_len)
{
    memset(keys, 0, sizeof *keys);
    char tag_buf[3 * WL_DIGEST_NAME_MIN + 1];
    size_t tag_len = make_tag(name, name_len, tag_buf);
    bool digest = name_len > WL_DIGEST_NAME_MIN;
    size_t count = digest ? 5 : 4, pre = sizeof prefix - 1, total = 0;
    for (size_t i = 0; i < count; i++)
        total += pre + tag_len + 1 + strlen(suffixes[i]) + 1;
    char *block = malloc(total);
    if (block == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    char **slots[] = {&keys->lock, &keys->fence, &keys->channel, &keys->owner, &keys->name};
    size_t *lens[] = {&keys->lock_len, &keys->fence_len, &keys->channel_len, &keys->owner_len, &keys->name_len};
    char *p = block;
    for (size_t i = 0; i < count; i++) {
        size_t suf = strlen(suffixes[i]);
        memcpy(p, prefix, pre);
        memcpy(p + pre, tag_buf, tag_len);
        p[pre + tag_len] = '}';
        memcpy(p + pre + tag_len + 1, suffixes[i], suf);
        p[pre + tag_len + 1 + suf] = '\0';
        *slots[i] = p;
        *lens[i] = pre + tag_len + 1 + suf;
        p += *lens[i] + 1;
    }
    return WATCHLOCK_OK;
}

/* The name layout: one allocation as wl_keys_make's, the name (and a NUL)
 * first, so that wl_keys_clear frees it the same way. A name of this layout
 * never starts with "watchlock:" (handle.c refuses it), so its lock key is
 * no key of the watchlock layout; its other keys are its watchlock-layout
 * keys, in the same Cluster slot as the name when the name has no '{', '}'
 * or '%' (then the escaped name is the name, and the tag's slot the name's)
 * and in another one otherwise. */
int wl_keys_make_named(wl_keys *keys, const void *name, size_t name_len)
{
    wl_keys w;
    int rc = wl_keys_make(&w, name, name_len);
    if (rc != WATCHLOCK_OK)
        return rc;
    size_t rest = w.lock_len + 1 + w.fence_len + 1 + w.channel_len + 1 + w.owner_len + 1 +
                  (w.name != NULL ? w.name_len + 1 : 0);
    char *block = malloc(name_len + 1 + rest);
    if (block == NULL) {
        wl_keys_clear(&w);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    memcpy(block, name, name_len);
    block[name_len] = '\0';
    memcpy(block + name_len + 1, w.lock, rest); /* the other keys follow the watchlock lock key in w's block */
    char *base = block + name_len + 1;
    *keys = w;
    keys->lock = block;
    keys->lock_len = name_len;
    keys->fence = base + (w.fence - w.lock);
    keys->channel = base + (w.channel - w.lock);
    keys->owner = base + (w.owner - w.lock);
    keys->name = w.name != NULL ? base + (w.name - w.lock) : NULL;
    wl_keys_clear(&w);
    return WATCHLOCK_OK;
}

void wl_keys_clear(wl_keys *keys)
{
    free(keys->lock); /* the one allocation all keys live in */
    memset(keys, 0, sizeof *keys);
}

bool wl_lock_key_is_digest(const char *key, size_t key_len)
{
    size_t pre = sizeof prefix - 1;
    if (key_len != pre + WL_DIGEST_TAG_LEN + 1 || memcmp(key, prefix, pre) != 0 || key[key_len - 1] != '}' ||
        key[pre] != '%' || key[pre + 1] != 'H')
        return false;
    for (size_t i = pre + 2; i < key_len - 1; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
            return false;
    return true;
}

int wl_name_from_lock_key(const char *key, size_t key_len, char *out, size_t *out_len)
{
    size_t pre = sizeof prefix - 1;
    if (key_len < pre + 2 || memcmp(key, prefix, pre) != 0 || key[key_len - 1] != '}')
        return -1;
    size_t n = 0;
    for (size_t i = pre; i < key_len - 1; i++) {
        char ch = key[i];
        if (ch == '{' || ch == '}')
            return -1;
        if (ch == '%') {
            if (i + 2 >= key_len - 1)
                return -1;
            if (key[i + 1] == '2' && key[i + 2] == '5')
                ch = '%';
            else if (key[i + 1] == '7' && key[i + 2] == 'B')
                ch = '{';
            else if (key[i + 1] == '7' && key[i + 2] == 'D')
                ch = '}';
            else
                return -1; /* "%H<hex>" too: a digest, see wl_lock_key_is_digest */
            i += 2;
        }
        out[n++] = ch;
    }
    *out_len = n;
    return 0;
}

/* CRC16-CCITT (XMODEM), as the Redis Cluster specification defines it. */
static uint16_t crc16(const unsigned char *p, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int wl_key_slot(const void *key, size_t len)
{
    const unsigned char *k = key;
    const unsigned char *open = memchr(k, '{', len);
    if (open != NULL) {
        size_t start = (size_t)(open - k) + 1;
        const unsigned char *close = memchr(k + start, '}', len - start);
        if (close != NULL && close > k + start)
            return crc16(k + start, (size_t)(close - (k + start))) & (WL_CLUSTER_SLOTS - 1);
    }
    return crc16(k, len) & (WL_CLUSTER_SLOTS - 1);
}

/* A queued kind's keys: the name's lock key (the tag and its closing '}')
 * with the suffixes ":q:h", ":q:q", ":q:l", ":q:d", ":q:h:<id>" and
 * ":q:c:<id>" — all after the tag, so injective as the others (no plain
 * suffix starts with ":q:"), and in the name's slot. */
int wl_qkeys_make(wl_qkeys *q, const wl_keys *keys, const char id[16])
{
    memset(q, 0, sizeof *q);
    static const char *const sfx[] = {":q:h", ":q:q", ":q:l", ":q:d", ":q:h:", ":q:c:"};
    size_t base = keys->lock_len, total = 0;
    for (size_t i = 0; i < 6; i++) /* the four keys; the two prefixes, each followed by itself + id */
        total += i < 4 ? base + strlen(sfx[i]) + 1 : 2 * (base + strlen(sfx[i])) + 16 + 2;
    char *p = malloc(total);
    if (p == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    q->block_ = p;
    q->k[0] = keys->lock, q->len[0] = keys->lock_len;
    q->k[1] = keys->fence, q->len[1] = keys->fence_len;
    for (size_t i = 0; i < 6; i++) {
        size_t sl = strlen(sfx[i]);
        memcpy(p, keys->lock, base);
        memcpy(p + base, sfx[i], sl);
        size_t n = base + sl;
        p[n] = '\0';
        if (i < 4) {
            q->k[2 + i] = p, q->len[2 + i] = n;
            p += n + 1;
            continue;
        }
        char *pre = p;
        p += n + 1;
        memcpy(p, pre, n);
        memcpy(p + n, id, 16);
        p[n + 16] = '\0';
        if (i == 4)
            q->hold_prefix = pre, q->hold_prefix_len = n, q->hold = p, q->hold_len = n + 16;
        else
            q->chan_prefix = pre, q->chan_prefix_len = n, q->chan = p, q->chan_len = n + 16;
        p += n + 17;
    }
    return WATCHLOCK_OK;
}

void wl_qkeys_clear(wl_qkeys *q)
{
    free(q->block_);
    memset(q, 0, sizeof *q);
}
