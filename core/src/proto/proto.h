/*
 * proto/proto.h - pure functions of bytes: URLs, name -> keys, the scripts
 * as data, what replies mean, cluster redirects. No I/O, no threads: the
 * fuzz targets (tests/fuzz) live here. Calls into base/ only.
 */
#ifndef WATCHLOCK_PROTO_H
#define WATCHLOCK_PROTO_H

#include "base/base.h"

#include <hiredis/hiredis.h>

/* ---- URL (url.c) ---- */
/* TLS settings of a URL (url.c), turned into an SSL_CTX by wl_tls_new. */
typedef struct wl_tls_opts {
    bool on;
    bool insecure;   /* insecure=1: no verification of the server */
    char *cacert;    /* CA bundle file; NULL: cacertdir or the system store */
    char *cacertdir; /* directory of hashed CA certificates */
    char *cert;      /* client certificate (mutual TLS) */
    char *key;       /* its private key */
    char *sni;       /* server name to send and verify; NULL: the URL's host */
} wl_tls_opts;
void wl_tls_opts_clear(wl_tls_opts *opts);

enum { WL_KIND_STANDALONE, WL_KIND_SENTINEL, WL_KIND_CLUSTER };
typedef struct wl_hostport {
    char *host;
    int port;
} wl_hostport;

typedef struct wl_endpoint {
    int kind;        /* WL_KIND_*: which topology finds the node */
    char *host;      /* standalone TCP; NULL for unix sockets and Sentinel */
    int port;
    char *unix_path; /* NULL for TCP */
    char *user;      /* NULL: no ACL user */
    char *password;  /* NULL: no AUTH */
    int db;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    int keepalive;
    int64_t safety_margin_ms; /* fixed part of the margin taken off every local deadline */
    int64_t restart_window_ms; /* a quorum member: restart_window= (0: none; topology/quorum.c) */
    wl_tls_opts tls;          /* rediss:// and rediss-sentinel:// */
    /* Sentinel: the sentinels, the master's name, the sentinels' credentials;
     * Cluster: the seed nodes */
    wl_hostport *seeds;
    size_t n_seeds;
    char *master_name;
    char *sentinel_user;
    char *sentinel_password;
    /* min_replicas: WAIT for this many replicas after an acquire */
    int min_replicas;
    int64_t min_replicas_timeout_ms;
    char label[300]; /* "host:port", the socket path or "sentinel NAME", for messages */
} wl_endpoint;

#define WL_DEFAULT_SAFETY_MARGIN_MS 10
#define WL_MAX_SAFETY_MARGIN_MS 60000
#define WL_MAX_RESTART_WINDOW_MS (7LL * 24 * 3600 * 1000) /* restart_window= (topology/quorum.c) */
#define WL_DEFAULT_MIN_REPLICAS_TIMEOUT_MS 1000
int wl_endpoint_parse(wl_endpoint *ep, const char *url);
void wl_endpoint_clear(wl_endpoint *ep);
/* ---- keys (keys.c) ---- */
typedef struct wl_keys {
    char *lock;  /* watchlock:{<escaped name>} */
    size_t lock_len;
    char *fence; /* watchlock:{<escaped name>}:fence */
    size_t fence_len;
    char *channel; /* watchlock:{<escaped name>}:released */
    size_t channel_len;
    char *owner; /* watchlock:{<escaped name>}:owner (admin.c) */
    size_t owner_len;
    char *name; /* watchlock:{%H<hex>}:name, the name itself; NULL unless the name is digested */
    size_t name_len;
} wl_keys;

/* Names longer than this get the tag "%H" + hex SHA-256 (keys.c). */
#define WL_DIGEST_NAME_MIN 256
#define WL_DIGEST_TAG_LEN 66
/* Whether `key` is the lock key of a digested (long) name. */
bool wl_lock_key_is_digest(const char *key, size_t key_len);

int wl_keys_make(wl_keys *keys, const void *name, size_t name_len);
/* The name layout (redis-py's, watchlock_lock_set_key_layout): the lock key
 * is the name itself, the other keys those of wl_keys_make. */
int wl_keys_make_named(wl_keys *keys, const void *name, size_t name_len);
void wl_keys_clear(wl_keys *keys);
/* The name whose lock key is `key`, into out (at most key_len bytes); -1
 * when `key` is not a lock key this mapping makes (another suffix, a
 * stray '}', an escape it never writes). */
int wl_name_from_lock_key(const char *key, size_t key_len, char *out, size_t *out_len);
/* Appends the escaped form of one name byte to out (1 or 3 bytes); returns its length. */
size_t wl_escape_byte(unsigned char ch, char *out);
/* Cluster: the hash slot of a key (CRC16 of its hash tag, or of the key). */
#define WL_CLUSTER_SLOTS 16384
int wl_key_slot(const void *key, size_t len);
/* A queued kind's keys (keys.c wl_qkeys_make; qscripts.c says what each
 * holds): made from a name's wl_keys and a handle's id (16 hex digits). */
#define WL_QKEY_COUNT 6 /* state, fence, holders, queue, live, data: KEYS of every queue script */
typedef struct wl_qkeys {
    const char *k[WL_QKEY_COUNT]; /* k[0] the state (the plain lock key), k[1] the fence */
    size_t len[WL_QKEY_COUNT];
    char *hold_prefix, *chan_prefix; /* watchlock:{N}:q:h: and watchlock:{N}:q:c: */
    size_t hold_prefix_len, chan_prefix_len;
    char *hold, *chan; /* this handle's hold key and wake-up channel */
    size_t hold_len, chan_len;
    char *block_; /* the one allocation */
} wl_qkeys;
int wl_qkeys_make(wl_qkeys *q, const wl_keys *keys, const char id[16]);
void wl_qkeys_clear(wl_qkeys *q);
extern const char wl_q_acquire_lua[], wl_q_release_lua[], wl_q_set_permits_lua[], wl_q_info_lua[],
    wl_q_live_lua[];
/* The read-write lock on a quorum (qrw_scripts.c): one member's try. */
extern const char wl_qrw_acquire_lua[];
/* The queued kinds' fence counter TTL (qscripts.c's FTTL argument). */
#define WL_Q_FENCE_TTL_MS (INT64_C(24) * 3600 * 1000)
/* ---- scripts (scripts.c) ---- */
enum {
    WL_SCRIPT_ACQUIRE,
    WL_SCRIPT_RELEASE,
    WL_SCRIPT_RENEW, /* n holds at once: the watchdog's batches and extend (n = 1) */
    WL_SCRIPT_FORCE_RELEASE,
    WL_SCRIPT_INSPECT,
    WL_SCRIPT_INSPECT_OWNER, /* admin.c: inspect_owner and list */
    WL_SCRIPT_MULTI_ACQUIRE, /* locks/multi.c: several names of one slot, all or nothing */
    WL_SCRIPT_MULTI_RELEASE, /* locks/multi.c: several names of one slot */
    WL_SCRIPT_Q_ACQUIRE,     /* the waiter queue (qscripts.c, locks/queue.c) */
    WL_SCRIPT_Q_RELEASE,
    WL_SCRIPT_Q_SET_PERMITS,
    WL_SCRIPT_Q_INFO,
    WL_SCRIPT_Q_LIVE,        /* queued waiters' liveness, batched (hold/live_round.c) */
    WL_SCRIPT_FENCE,         /* the fast acquires' tokens (locks/lock.c, locks/multi_io.c): WL_FENCE_LUA per key */
    WL_SCRIPT_QRW_ACQUIRE,   /* the read-write lock on a quorum, one member's try (qrw_scripts.c, locks/quorum_rw.c) */
    WL_SCRIPT_COUNT
};
typedef struct wl_script {
    const char *body;
    char sha[41]; /* hex SHA1 of body as the server names it (wl_scripts_learn) */
} wl_script;
extern wl_script wl_scripts[WL_SCRIPT_COUNT];
/* The SHA1s come from the server, not from code of ours: the first client
 * to open sends SCRIPT LOAD for every script (node.c wl_scripts_learn,
 * thread-safe, once) and records them here. Until then (or if SCRIPT LOAD
 * is denied) every script is sent with EVAL. */
bool wl_scripts_have_sha(void);
void wl_scripts_set_shas(const char shas[][41]);
/* A fence counter at or above this (2001-09-09 in microseconds) has been
 * seeded with the server's clock; below it, it was made by INCR (or by
 * hand) and is seeded before its value is used as a token. */
#define WL_FENCE_SEEDED INT64_C(1000000000000000)
/* The one rule of fencing tokens (issue 29.3), a Lua function every script
 * that hands out or raises a token includes: wl_fence(key, incr, ttl[, now])
 * (now: the server's TIME in us when the script has read it already) sets
 * the counter to n = max(counter + 1, server TIME in us) (incr false, for
 * a reader share: max(counter, TIME)) and returns n, or the error table of
 * the command that failed (INCR of a counter of another type or not a
 * number, TIME denied): nothing is then left without a TTL. A counter
 * below WL_FENCE_SEEDED (new, expired, made by a contended attempt) gets
 * its TTL `ttl` ms when it is first set; a seeded one keeps its TTL
 * (KEEPTTL: set once, never refreshed). Clock-monotone: a counter that
 * went back (a server restored from an old RDB snapshot, a failover to a
 * replica that missed writes) cannot hand out a token below one issued
 * before, as long as every earlier token was at most the clock of its
 * server then and the clocks have moved forward since (docs/design.md,
 * "Fencing"). */
#define WL_FENCE_LUA                                                                                       \
    "local function wl_fence(k, incr, ttl, now)\n"                                                        \
    "  local n = redis.pcall(incr and 'INCR' or 'GET', k)\n"                                             \
    "  if not incr and type(n) ~= 'table' then\n"                                                        \
    "    n = tonumber(n or '0') or {err = 'ERR the fence counter is not a number'}\n"                    \
    "  end\n"                                                                                             \
    "  if type(n) ~= 'number' then return n end\n"                                                        \
    "  if not now then\n"                                                                                 \
    "    local t = redis.pcall('TIME')\n"                                                                 \
    "    if type(t) ~= 'table' or not t[2] then\n"                                                        \
    "      if incr and n < 1000000000000000 then redis.call('DEL', k) end\n"                              \
    "      return t\n"                                                                                    \
    "    end\n"                                                                                           \
    "    now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                               \
    "  end\n"                                                                                             \
    "  if n < now then\n"                                                                                 \
    "    if n < 1000000000000000 then redis.call('SET', k, string.format('%.0f', now), 'PX', ttl)\n"      \
    "    else redis.call('SET', k, string.format('%.0f', now), 'KEEPTTL') end\n"                          \
    "    n = now\n"                                                                                       \
    "  end\n"                                                                                             \
    "  return n\n"                                                                                        \
    "end\n"
/* ---- globs on names (glob.c) ---- */
/* Whether name s matches the Redis-style glob p (case-sensitive). *give_up
 * (start false) ends hopeless retries: the match is then false. */
bool wl_glob_match(const unsigned char *p, size_t plen, const unsigned char *s, size_t slen, bool *give_up);
/* The SCAN MATCH pattern of the lock keys that may hold a name matching p
 * (malloc'd, *out_len bytes); NULL out of memory. */
char *wl_key_glob(const unsigned char *p, size_t plen, size_t *out_len);

/* ---- replies (replies.c) ----
 * What replies mean: pure functions that never read past a reply's end,
 * whatever its shape (tests/fuzz/fuzz_reply.c feeds them). */
enum { WL_WRITE_OK = 1, WL_WRITE_NOT_OWNER = 0, WL_WRITE_STALE = 2, WL_WRITE_FAILED = -1 };
int64_t wl_reply_i64(const redisReply *r); /* integer or decimal string reply */
bool wl_reply_is_noscript(const redisReply *reply);
bool wl_reply_is_readonly(const redisReply *reply); /* READONLY / MASTERDOWN: not the master now */
/* wl_reply_acquire: {1, fence} acquired or {0, pttl} held by another owner;
 * false for any other shape. wl_reply_renew: entry i of the renew script's
 * reply for n holds, as WL_WRITE_*; FAILED for any other shape or value. */
bool wl_reply_acquire(const redisReply *r, bool *acquired, int64_t *value);
int wl_reply_renew(const redisReply *r, size_t n, size_t i);
enum { WL_REDIRECT_NONE, WL_REDIRECT_MOVED, WL_REDIRECT_ASK, WL_REDIRECT_TRYAGAIN, WL_REDIRECT_CLUSTERDOWN };
typedef struct wl_redirect {
    int kind;
    int slot;
    char host[256]; /* "" = the node that answered */
    int port;       /* 0: the endpoint was "?" (no address): ask the slot map */
} wl_redirect;
/* Whether an error reply is a cluster redirect or a retry-later. */
bool wl_parse_redirect(const redisReply *r, wl_redirect *rd);
#endif
