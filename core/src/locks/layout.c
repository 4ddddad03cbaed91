/*
 * layout.c - the name layout of a plain lock (issue 31.1, watchlock.h
 * watchlock_lock_set_key_layout): redis-py's keys, the lock key the name
 * itself holding the hold's bare token (hold.c wl_ident), the other keys
 * watchlock's (proto/keys.c wl_keys_make_named); the caller's token and the
 * key without expiry that go with it. Setters in handle.c's frame (wl_set_begin / wl_set_end).
 */
#include "locks/locks.h"

#include <string.h>

/* The name layout (redis-py's keys, watchlock.h): the lock key becomes the
 * name itself and the hold's value its bare token. Only on a plain lock of
 * a one-server, Sentinel or Cluster client that holds nothing; a name that
 * starts with "watchlock:" is refused, so the lock key of this layout is
 * never a key of watchlock's own layout (keys.c wl_keys_make_named). */
int watchlock_lock_set_key_layout(watchlock_lock *l, int layout)
{
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    watchlock_client *c = l->hold.client;
    const char *why = NULL;
    if (layout != WATCHLOCK_KEYS_WATCHLOCK && layout != WATCHLOCK_KEYS_NAME)
        why = "layout must be WATCHLOCK_KEYS_WATCHLOCK or WATCHLOCK_KEYS_NAME";
    else if (!l->kind->name_layout) /* the handle's kind (locks.h): the plain lock off a quorum */
        why = "the name layout is for the plain lock of a one-server, Sentinel or Cluster client";
    else if (l->hold.state != WATCHLOCK_UNLOCKED || l->hold.hold_count != 0)
        why = "the layout changes only while the handle holds nothing";
    else if (layout == WATCHLOCK_KEYS_NAME && l->name_len >= 10 && memcmp(l->name, "watchlock:", 10) == 0)
        why = "a name of the name layout must not start with 'watchlock:' (watchlock's own keys)";
    if (why != NULL) {
        pthread_mutex_unlock(&c->mu);
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: %s", l->hold.quoted, why);
    }
    wl_keys keys;
    rc = layout == WATCHLOCK_KEYS_NAME ? wl_keys_make_named(&keys, l->name, l->name_len)
                                       : wl_keys_make(&keys, l->name, l->name_len);
    if (rc != WATCHLOCK_OK) {
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    wl_keys_clear(&l->hold.keys);
    l->hold.keys = keys;
    l->hold.plain_value = layout == WATCHLOCK_KEYS_NAME;
    l->no_expiry = l->no_expiry && l->hold.plain_value;
    l->token_used = true; /* the next acquire makes a fresh token (or takes the one set) */
    l->key_hash = UINT64_C(14695981039346656037); /* FNV-1a, as at creation */
    for (size_t i = 0; i < l->hold.keys.lock_len; i++)
        l->key_hash = (l->key_hash ^ (unsigned char)l->hold.keys.lock[i]) * UINT64_C(1099511628211);
    l->key_hash |= 1;
    return wl_set_end(l);
}

int watchlock_lock_set_no_expiry(watchlock_lock *l, int on)
{
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *why = NULL;
    if (!l->hold.plain_value)
        why = "a key without expiry is only for the name layout (watchlock_lock_set_key_layout)";
    else if (l->hold.state != WATCHLOCK_UNLOCKED || l->hold.hold_count != 0)
        why = "it changes only while the handle holds nothing";
    if (why != NULL) {
        pthread_mutex_unlock(&l->hold.client->mu);
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: %s", l->hold.quoted, why);
    }
    l->no_expiry = on != 0;
    if (l->no_expiry) { /* nothing to renew; the local deadline as far as a lease goes */
        l->hold.auto_renew = false;
        l->hold.lease_ms = WATCHLOCK_MAX_LEASE_MS;
    }
    return wl_set_end(l);
}

int watchlock_lock_set_token(watchlock_lock *l, const char *token)
{
    size_t len = token != NULL ? strnlen(token, 33) : 0;
    int rc = wl_set_begin(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *why = NULL;
    if (!l->hold.plain_value)
        why = "a token can be set only in the name layout (watchlock_lock_set_key_layout)";
    else if (l->hold.state == WATCHLOCK_HELD) /* (LOST: the next acquire starts a fresh hold) */
        why = "the token is set before the acquire, while the handle holds nothing";
    else if (len == 0 || len > 32)
        why = len == 0 ? "the token is empty" : "the token is longer than 32 bytes";
    else if (memchr(token, '.', len) != NULL)
        why = "the token must not contain '.'";
    if (why != NULL) {
        pthread_mutex_unlock(&l->hold.client->mu);
        return wl_fail(WATCHLOCK_EINVAL, "lock %s: %s", l->hold.quoted, why);
    }
    memcpy(l->hold.token, token, len);
    l->hold.token[len] = '\0';
    l->token_used = false; /* the next acquire's attempts use it */
    l->token_lease_ms = l->hold.lease_ms;
    return wl_set_end(l);
}
