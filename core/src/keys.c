/*
 * keys.c - the injective mapping from lock names to Redis keys.
 *
 * A name's bytes are escaped so that they never contain '}' (which would end
 * the hash tag early) nor a bare '%': '%' -> "%25", '{' -> "%7B",
 * '}' -> "%7D"; every other byte, NUL included, is kept. The escaped name
 * is the whole hash tag, so all of a name's keys share one Cluster slot, and
 * since the tag has no '}', the suffix after it (":fence", ":released",
 * ":owner") is unambiguous: no name's lock key can equal another name's
 * fence key. The same argument makes the mapping invertible on lock keys
 * (wl_name_from_lock_key, for listing): a key that starts with the prefix,
 * ends with the tag's '}' and has no other brace is some name's lock key,
 * and only one name's.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static const char prefix[] = "watchlock:{";

static char *make_key(const char *esc, size_t esc_len, const char *suffix, size_t *out_len)
{
    size_t pre = sizeof prefix - 1, suf = strlen(suffix);
    size_t len = pre + esc_len + 1 + suf;
    char *key = malloc(len + 1);
    if (key == NULL)
        return NULL;
    memcpy(key, prefix, pre);
    memcpy(key + pre, esc, esc_len);
    key[pre + esc_len] = '}';
    memcpy(key + pre + esc_len + 1, suffix, suf);
    key[len] = '\0';
    *out_len = len;
    return key;
}

size_t wl_escape_byte(unsigned char ch, char *out)
{
    switch (ch) {
    case '%': memcpy(out, "%25", 3); return 3;
    case '{': memcpy(out, "%7B", 3); return 3;
    case '}': memcpy(out, "%7D", 3); return 3;
    default: out[0] = (char)ch; return 1;
    }
}

int wl_keys_make(wl_keys *keys, const void *name, size_t name_len)
{
    memset(keys, 0, sizeof *keys);
    const unsigned char *p = name;
    char *esc = malloc(name_len * 3 + 1);
    if (esc == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < name_len; i++)
        n += wl_escape_byte(p[i], esc + n);
    keys->lock = make_key(esc, n, "", &keys->lock_len);
    keys->fence = make_key(esc, n, ":fence", &keys->fence_len);
    keys->channel = make_key(esc, n, ":released", &keys->channel_len);
    keys->owner = make_key(esc, n, ":owner", &keys->owner_len);
    free(esc);
    if (keys->lock == NULL || keys->fence == NULL || keys->channel == NULL || keys->owner == NULL) {
        wl_keys_clear(keys);
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    }
    return WATCHLOCK_OK;
}

void wl_keys_clear(wl_keys *keys)
{
    free(keys->lock);
    free(keys->fence);
    free(keys->channel);
    free(keys->owner);
    memset(keys, 0, sizeof *keys);
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
                return -1;
            i += 2;
        }
        out[n++] = ch;
    }
    *out_len = n;
    return 0;
}
