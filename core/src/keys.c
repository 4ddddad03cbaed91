/*
 * keys.c - the injective mapping from lock names to Redis keys.
 *
 * A name's bytes are escaped so that they never contain '}' (which would end
 * the hash tag early) nor a bare '%': '%' -> "%25", '{' -> "%7B",
 * '}' -> "%7D"; every other byte, NUL included, is kept. The escaped name
 * is the whole hash tag, so all of a name's keys share one Cluster slot, and
 * since the tag has no '}', the suffix after it (":fence", ":released") is
 * unambiguous: no name's lock key can equal another name's fence key.
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

int wl_keys_make(wl_keys *keys, const void *name, size_t name_len)
{
    memset(keys, 0, sizeof *keys);
    const unsigned char *p = name;
    char *esc = malloc(name_len * 3 + 1);
    if (esc == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < name_len; i++) {
        switch (p[i]) {
        case '%': memcpy(esc + n, "%25", 3); n += 3; break;
        case '{': memcpy(esc + n, "%7B", 3); n += 3; break;
        case '}': memcpy(esc + n, "%7D", 3); n += 3; break;
        default: esc[n++] = (char)p[i];
        }
    }
    keys->lock = make_key(esc, n, "", &keys->lock_len);
    keys->fence = make_key(esc, n, ":fence", &keys->fence_len);
    keys->channel = make_key(esc, n, ":released", &keys->channel_len);
    free(esc);
    if (keys->lock == NULL || keys->fence == NULL || keys->channel == NULL) {
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
    memset(keys, 0, sizeof *keys);
}
