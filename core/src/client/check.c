/*
 * check.c - watchlock_client_check(): the server settings and ACL permissions
 * that break the promises of docs/design.md, as a report of findings.
 *
 * Why each setting matters (the lock is a key with a TTL on one server):
 *  - eviction: a policy other than noeviction may delete a lock key before
 *    its lease ends (every lock key has a TTL, so volatile-* policies pick
 *    them too); the holder still thinks it owns the lock, a waiter takes it.
 *  - persistence: a server that restarts without the lock keys (no AOF and
 *    no RDB; or RDB only, which loses what came after the last snapshot)
 *    lets anyone in while the old holders run on. AOF with appendfsync
 *    everysec loses up to a second of writes when the host crashes.
 *  - replicas: with replicas and min-replicas-to-write 0, a master that
 *    accepts a lock write and fails over before replicating it hands the
 *    lock to a second owner. A client pointed at a replica cannot lock.
 *  - ACL: a user that may not run the scripts (or a command they call), or
 *    touch the keys, gets EPERM on every lock; one that may not use the
 *    channels still locks safely, but waiters wait out leases instead of
 *    being woken by releases.
 *
 * How: every question goes over one pooled connection (wl_server_get); a
 * failed command makes the connection unusable and wl_server_put drops it.
 * Permissions are asked with ACL WHOAMI + ACL DRYRUN (Redis >= 7), which
 * answers for commands, keys and channels without running anything. When
 * the server has no DRYRUN, or the user may not run ACL commands (the
 * common case for a least-privilege lock user), permissions are probed with
 * commands that change nothing: EVALSHA of a SHA no script has, EVAL of a
 * script that calls each command the lock scripts use on two random keys
 * that do not exist (SET with XX never creates one; 128 random bits make a
 * collision with a real key impossible in practice), PUBLISH on a random
 * channel, and SUBSCRIBE on a connection of its own, closed right after.
 * CONFIG GET and INFO that are denied (or renamed away, as managed services
 * do) are findings (UNCHECKED): the check says what it could not see.
 */
#include "client/client.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The state of one check: the connection, the report, and the keys of a
 * random probe name. */
typedef struct checker {
    wl_server *srv;
    wl_conn *ctx;
    bool sharded; /* Cluster: SPUBLISH/SSUBSCRIBE */
    watchlock_report *report;
    wl_keys keys;
    char user[128]; /* ACL user name for messages */
} checker;

/* A SHA1 no script has: EVALSHA of it answers NOSCRIPT when allowed. */
static const char no_sha[] = "0000000000000000000000000000000000000000";

/* Commands the lock scripts call (scripts.c) and those sent around them. */
static const char *const script_commands = "GET, SET, DEL, PEXPIRE, PTTL, EXISTS, TIME";

static bool reply_has(const redisReply *r, const char *text)
{
    return r->str != NULL && strcasestr(r->str, text) != NULL;
}

/* An error reply that says the ACL denies the command, key or channel. */
static bool is_denied(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && r->str != NULL && strncmp(r->str, "NOPERM", 6) == 0;
}

/* An error reply that says the server does not know the command: an older
 * server, or one renamed away (rename-command, managed services). */
static bool is_unknown(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && (reply_has(r, "unknown command") || reply_has(r, "unknown subcommand"));
}

/* One command on the check's connection. On OK *out is the reply (which
 * may be an error reply), freed by the caller. */
static int ask(checker *k, redisReply **out, int argc, const char **argv, const char *what)
{
    redisReply *reply = wl_conn_command(k->ctx, argc, argv, NULL);
    *out = reply;
    if (reply == NULL)
        return wl_conn_error(k->srv, k->ctx, what);
    return WATCHLOCK_OK;
}

/* ---- settings: CONFIG GET and INFO ---- */

enum { CFG_FOUND, CFG_ABSENT, CFG_DENIED };

/* CONFIG GET name into val. *state: FOUND, ABSENT (an older server without
 * the parameter) or DENIED (why in `why`). */
static int config_get(checker *k, const char *name, char *val, size_t size, int *state, char *why, size_t why_size)
{
    const char *argv[3] = {"CONFIG", "GET", name};
    redisReply *r;
    int rc = ask(k, &r, 3, argv, "check: CONFIG GET failed");
    if (rc != WATCHLOCK_OK)
        return rc;
    *state = CFG_ABSENT;
    val[0] = '\0';
    if (is_denied(r) || is_unknown(r)) {
        *state = CFG_DENIED;
        snprintf(why, why_size, "%.200s", r->str);
    } else if (r->type == REDIS_REPLY_ERROR) {
        rc = wl_reply_error(k->srv, r, "check: CONFIG GET failed");
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[1]->type == REDIS_REPLY_STRING) {
        *state = CFG_FOUND;
        snprintf(val, size, "%s", r->element[1]->str);
    }
    freeReplyObject(r);
    return rc;
}

/* Copies the value of "field:value" from INFO text; "" when absent. */
static void info_field(const char *info, const char *field, char *out, size_t size)
{
    size_t flen = strlen(field);
    out[0] = '\0';
    for (const char *line = info; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            const char *v = line + flen + 1;
            size_t n = strcspn(v, "\r\n");
            snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), v);
            return;
        }
    }
}

static int check_settings(checker *k)
{
    watchlock_report *rep = k->report;
    char policy[64], aof[16], fsync[32], save[128], minrep[32], why[256];
    int st_policy, st_aof = CFG_ABSENT, st_fsync = CFG_ABSENT, st_save = CFG_ABSENT, st_minrep = CFG_ABSENT;
    int rc = config_get(k, "maxmemory-policy", policy, sizeof policy, &st_policy, why, sizeof why);
    if (rc != WATCHLOCK_OK)
        return rc;
    bool config_ok = st_policy != CFG_DENIED;
    if (config_ok) {
        if ((rc = config_get(k, "appendonly", aof, sizeof aof, &st_aof, why, sizeof why)) != WATCHLOCK_OK ||
            (rc = config_get(k, "appendfsync", fsync, sizeof fsync, &st_fsync, why, sizeof why)) != WATCHLOCK_OK ||
            (rc = config_get(k, "save", save, sizeof save, &st_save, why, sizeof why)) != WATCHLOCK_OK ||
            (rc = config_get(k, "min-replicas-to-write", minrep, sizeof minrep, &st_minrep, why, sizeof why)) !=
                WATCHLOCK_OK)
            return rc;
        config_ok = st_aof != CFG_DENIED && st_fsync != CFG_DENIED && st_save != CFG_DENIED &&
                    st_minrep != CFG_DENIED;
    }
    if (!config_ok) {
        rc = wl_report_add(rep, WATCHLOCK_CHECK_UNCHECKED,
                         "cannot read the server's configuration (CONFIG GET: %s): eviction, persistence and "
                         "replica settings were not checked",
                         why);
        if (rc != WATCHLOCK_OK)
            return rc;
    } else {
        if (st_policy == CFG_FOUND && strcmp(policy, "noeviction") != 0 &&
            (rc = wl_report_add(rep, WATCHLOCK_CHECK_EVICTION,
                              "maxmemory-policy is %s, not noeviction: under memory pressure the server may evict "
                              "lock keys and let a second owner in (set maxmemory-policy noeviction)",
                              policy)) != WATCHLOCK_OK)
            return rc;
        bool has_aof = st_aof == CFG_FOUND && strcmp(aof, "yes") == 0;
        bool has_rdb = st_save == CFG_FOUND && save[0] != '\0';
        if (!has_aof && !has_rdb)
            rc = wl_report_add(rep, WATCHLOCK_CHECK_NO_PERSISTENCE,
                             "no persistence (appendonly no, save \"\"): a restart forgets every lock while its "
                             "holders go on (set appendonly yes and appendfsync always, or restart the server only "
                             "after the longest lease)");
        else if (!has_aof)
            rc = wl_report_add(rep, WATCHLOCK_CHECK_SNAPSHOT_ONLY,
                             "RDB snapshots only (save \"%s\", appendonly no): a restart forgets the locks taken "
                             "since the last snapshot (set appendonly yes and appendfsync always, or restart the "
                             "server only after the longest lease)",
                             save);
        else if (st_fsync == CFG_FOUND && strcmp(fsync, "always") != 0)
            rc = wl_report_add(rep, WATCHLOCK_CHECK_FSYNC,
                             "appendonly yes but appendfsync %s: a crash of the server's host may lose the last "
                             "second of lock writes (set appendfsync always)",
                             fsync);
        if (rc != WATCHLOCK_OK)
            return rc;
    }

    const char *argv[2] = {"INFO", "replication"};
    redisReply *r;
    if ((rc = ask(k, &r, 2, argv, "check: INFO failed")) != WATCHLOCK_OK)
        return rc;
    if (is_denied(r) || is_unknown(r)) {
        rc = wl_report_add(rep, WATCHLOCK_CHECK_UNCHECKED,
                         "cannot read INFO replication (%.200s): replicas were not checked", r->str);
    } else if (r->type == REDIS_REPLY_ERROR) {
        rc = wl_reply_error(k->srv, r, "check: INFO failed");
    } else if (r->type == REDIS_REPLY_STRING) {
        char role[32], slaves[32], host[128], port[16];
        info_field(r->str, "role", role, sizeof role);
        info_field(r->str, "connected_slaves", slaves, sizeof slaves);
        long n_replicas = strtol(slaves, NULL, 10);
        if (strcmp(role, "slave") == 0 || strcmp(role, "replica") == 0) {
            info_field(r->str, "master_host", host, sizeof host);
            info_field(r->str, "master_port", port, sizeof port);
            rc = wl_report_add(rep, WATCHLOCK_CHECK_REPLICA_ROLE,
                             "the server is a replica of %s:%s: lock writes fail (READONLY) or stay on this "
                             "replica (point watchlock at the master)",
                             host, port);
        } else if (n_replicas > 0 && config_ok && st_minrep == CFG_FOUND && strtol(minrep, NULL, 10) == 0) {
            rc = wl_report_add(rep, WATCHLOCK_CHECK_REPLICAS,
                             "%ld replica%s connected but min-replicas-to-write is 0: a failover to a replica that "
                             "missed the latest lock writes lets a second owner in (set min-replicas-to-write, "
                             "and promote a replica only after the longest lease)",
                             n_replicas, n_replicas == 1 ? "" : "s");
        }
    }
    freeReplyObject(r);
    return rc;
}

/* ---- permissions ---- */

/* What the ACL denies, gathered before the findings are written. */
typedef struct denials {
    char commands[160]; /* "EVALSHA, TIME" */
    char channels[64];  /* "SUBSCRIBE, PUBLISH" */
    bool keys;          /* a key of ours is denied */
} denials;

static void append_name(char *list, size_t size, const char *name)
{
    char upper[32];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof upper; i++)
        upper[i] = (char)toupper((unsigned char)name[i]);
    upper[i] = '\0';
    /* Skip names already listed. */
    size_t len = strlen(upper);
    for (const char *p = strstr(list, upper); p; p = strstr(p + 1, upper))
        if ((p == list || p[-1] == ' ') && (p[len] == '\0' || p[len] == ','))
            return;
    size_t used = strlen(list);
    snprintf(list + used, size - used, "%s%s", used ? ", " : "", upper);
}

static bool is_channel_command(const char *cmd)
{
    const char *c = (cmd[0] == 'S' || cmd[0] == 's') && strcasecmp(cmd, "SUBSCRIBE") != 0 ? cmd + 1 : cmd;
    return strcasecmp(c, "SUBSCRIBE") == 0 || strcasecmp(c, "UNSUBSCRIBE") == 0 || strcasecmp(c, "PUBLISH") == 0;
}

/* Files a denial of `cmd` by what the server's text names: a key, a
 * channel, or the command itself. */
static void note_denial(denials *d, const char *cmd, const char *text)
{
    if (is_channel_command(cmd) || strcasestr(text, "channel") != NULL)
        append_name(d->channels, sizeof d->channels, cmd);
    else if (strcasestr(text, "key") != NULL)
        d->keys = true;
    else
        append_name(d->commands, sizeof d->commands, cmd);
}

static int write_denials(checker *k, const denials *d)
{
    int rc = WATCHLOCK_OK;
    if (d->commands[0])
        rc = wl_report_add(k->report, WATCHLOCK_CHECK_ACL_COMMANDS,
                         "the ACL user '%s' may not run %s: locks fail with NOPERM (they need EVALSHA and EVAL, "
                         "and the scripts call %s)",
                         k->user, d->commands, script_commands);
    if (rc == WATCHLOCK_OK && d->keys)
        rc = wl_report_add(k->report, WATCHLOCK_CHECK_ACL_KEYS,
                         "the ACL user '%s' may not read and write the keys watchlock:*: locks fail with NOPERM "
                         "(grant ~watchlock:*)",
                         k->user);
    if (rc == WATCHLOCK_OK && d->channels[0])
        rc = wl_report_add(k->report, WATCHLOCK_CHECK_ACL_CHANNELS,
                         "the ACL user '%s' may not %s on the channels watchlock:*: a release does not wake "
                         "waiters, who wait out the holder's lease instead (grant &watchlock:* and +subscribe "
                         "+publish)",
                         k->user, d->channels);
    return rc;
}

/* ACL DRYRUN for every command, key and channel the locks use. *usable is
 * false when the server or the user cannot dry-run (nothing is then known). */
static int dryrun_all(checker *k, denials *d, bool *usable)
{
    const char *L = k->keys.lock, *F = k->keys.fence, *C = k->keys.channel;
    const char *SUB = k->sharded ? "SSUBSCRIBE" : "SUBSCRIBE", *UNSUB = k->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
    const char *PUB = k->sharded ? "SPUBLISH" : "PUBLISH";
    const char *sha = no_sha;
    enum { MAX_ARGC = 6 };
    const struct {
        int argc;
        const char *argv[MAX_ARGC];
    } asks[] = {
        {1, {"PING"}},
        {5, {"EVALSHA", sha, "2", L, F}},
        {5, {"EVAL", "return 1", "2", L, F}},
        {2, {"GET", L}},
        {2, {"GET", F}},
        {3, {"SET", L, "1"}},
        {3, {"SET", F, "1"}},
        {2, {"DEL", L}},
        {3, {"PEXPIRE", L, "1"}},
        {2, {"PTTL", L}},
        {2, {"EXISTS", L}},
        {1, {"TIME"}},
        {2, {SUB, C}},
        {2, {UNSUB, C}},
        {3, {PUB, C, ""}},
    };
    *usable = true;
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        const char *argv[3 + MAX_ARGC] = {"ACL", "DRYRUN", k->user};
        for (int j = 0; j < asks[i].argc; j++)
            argv[3 + j] = asks[i].argv[j];
        redisReply *r;
        int rc = ask(k, &r, 3 + asks[i].argc, argv, "check: ACL DRYRUN failed");
        if (rc != WATCHLOCK_OK)
            return rc;
        bool string = r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING;
        if (!string) {
            /* The first one tells whether DRYRUN can be used at all. */
            if (i == 0) {
                *usable = false;
                freeReplyObject(r);
                return WATCHLOCK_OK;
            }
            rc = r->type == REDIS_REPLY_ERROR ? wl_reply_error(k->srv, r, "check: ACL DRYRUN failed")
                                              : wl_fail(WATCHLOCK_ESERVER, "check: unexpected reply to ACL DRYRUN");
            freeReplyObject(r);
            return rc;
        }
        if (strcmp(r->str, "OK") != 0)
            note_denial(d, asks[i].argv[0], r->str);
        freeReplyObject(r);
    }
    return WATCHLOCK_OK;
}

/* Calls each command the lock scripts use on KEYS[1] (lock) and KEYS[2]
 * (fence) of a random name that has no keys, and returns {command, error}
 * pairs for the calls that failed. SET ... XX never creates a key; DEL and
 * PEXPIRE of a missing key do nothing. The body never changes, so the
 * server caches one script for every check. */
static const char probe_lua[] =
    "local out = {}\n"
    "local function try(...)\n"
    "  local r = redis.pcall(...)\n"
    "  if type(r) == 'table' and r.err then\n"
    "    out[#out + 1] = select(1, ...)\n"
    "    out[#out + 1] = r.err\n"
    "  end\n"
    "end\n"
    "try('GET', KEYS[1])\n"
    "try('GET', KEYS[2])\n"
    "try('SET', KEYS[1], '1', 'XX', 'PX', '1')\n"
    "try('SET', KEYS[2], '1', 'XX', 'PX', '1')\n"
    "try('DEL', KEYS[1])\n"
    "try('PEXPIRE', KEYS[1], '1')\n"
    "try('PTTL', KEYS[1])\n"
    "try('EXISTS', KEYS[1])\n"
    "try('TIME')\n"
    "return out\n";

/* An error raised inside a script by the ACL (Redis 6 and 7 word it
 * differently from NOPERM replies). */
static bool is_script_denial(const char *text)
{
    return strstr(text, "NOPERM") != NULL || strcasestr(text, "user executing the script") != NULL ||
           strcasestr(text, "permission") != NULL;
}

/* A probe command's reply: a denial or unknown command is noted, another
 * error fails the check. *ran: the command ran (no error). */
static int probe_reply(checker *k, denials *d, const char *cmd, redisReply *r, bool *ran)
{
    *ran = r->type != REDIS_REPLY_ERROR;
    if (is_denied(r) || is_unknown(r)) {
        note_denial(d, cmd, r->str);
        return WATCHLOCK_OK;
    }
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) != 0)
        return wl_reply_error(k->srv, r, "check: probe failed");
    return WATCHLOCK_OK;
}

static int probe_all(checker *k, denials *d)
{
    redisReply *r;
    bool ran;
    /* EVALSHA: NOSCRIPT means the command may run. */
    const char *evalsha[3] = {"EVALSHA", no_sha, "0"};
    int rc = ask(k, &r, 3, evalsha, "check: EVALSHA probe failed");
    if (rc != WATCHLOCK_OK)
        return rc;
    rc = probe_reply(k, d, "EVALSHA", r, &ran);
    freeReplyObject(r);
    if (rc != WATCHLOCK_OK)
        return rc;

    /* EVAL with the probe's keys: the keys are checked before it runs. */
    const char *eval[5] = {"EVAL", probe_lua, "2", k->keys.lock, k->keys.fence};
    if ((rc = ask(k, &r, 5, eval, "check: EVAL probe failed")) != WATCHLOCK_OK)
        return rc;
    rc = probe_reply(k, d, "EVAL", r, &ran);
    if (rc == WATCHLOCK_OK && ran && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *cmd = r->element[i], *err = r->element[i + 1];
            if (cmd->type == REDIS_REPLY_STRING && err->type == REDIS_REPLY_STRING && is_script_denial(err->str))
                note_denial(d, cmd->str, err->str);
        }
    }
    freeReplyObject(r);
    if (rc != WATCHLOCK_OK)
        return rc;

    /* PUBLISH to a channel nobody listens to. */
    const char *pub = k->sharded ? "SPUBLISH" : "PUBLISH";
    const char *publish[3] = {pub, k->keys.channel, ""};
    if ((rc = ask(k, &r, 3, publish, "check: PUBLISH probe failed")) != WATCHLOCK_OK)
        return rc;
    rc = probe_reply(k, d, pub, r, &ran);
    freeReplyObject(r);
    if (rc != WATCHLOCK_OK)
        return rc;

    /* SUBSCRIBE turns a connection into a subscriber: use one of our own. */
    wl_conn *sctx;
    if ((rc = wl_server_connect(k->srv, 0, &sctx)) != WATCHLOCK_OK)
        return rc;
    const char *sub = k->sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
    const char *subscribe[2] = {sub, k->keys.channel};
    r = wl_conn_command(sctx, 2, subscribe, NULL);
    if (r == NULL) {
        rc = wl_conn_error(k->srv, sctx, "check: SUBSCRIBE probe failed");
    } else {
        rc = probe_reply(k, d, sub, r, &ran);
        freeReplyObject(r);
    }
    wl_conn_free(sctx);
    return rc;
}

static int check_permissions(checker *k)
{
    /* Who are we? An error (no ACL before Redis 6, or denied) leaves the
     * name from the URL and sends us to the probes. */
    snprintf(k->user, sizeof k->user, "%s", k->srv->ep.user ? k->srv->ep.user : "default");
    const char *whoami[2] = {"ACL", "WHOAMI"};
    redisReply *r;
    int rc = ask(k, &r, 2, whoami, "check: ACL WHOAMI failed");
    if (rc != WATCHLOCK_OK)
        return rc;
    bool known = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
    if (known)
        snprintf(k->user, sizeof k->user, "%s", r->str);
    freeReplyObject(r);

    denials d;
    memset(&d, 0, sizeof d);
    bool usable = false;
    if (known && (rc = dryrun_all(k, &d, &usable)) != WATCHLOCK_OK)
        return rc;
    if (!usable) {
        memset(&d, 0, sizeof d);
        if ((rc = probe_all(k, &d)) != WATCHLOCK_OK)
            return rc;
    }
    return write_denials(k, &d);
}

/* ---- the API ---- */

static int check_once(checker *k, bool *reused)
{
    int rc = wl_server_get(k->srv, &k->ctx, reused);
    if (rc != WATCHLOCK_OK)
        return rc;
    rc = check_settings(k);
    if (rc == WATCHLOCK_OK)
        rc = check_permissions(k);
    return rc;
}

/* One server's check (the public call is quorum_client.c's: per member on a quorum). */
int wl_client_check_one(watchlock_report **out, watchlock_client *client)
{
    if (out == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "check: out is NULL");
    *out = NULL;
    int rc = wl_check_client(client);
    if (rc != WATCHLOCK_OK)
        return rc;
    checker k;
    memset(&k, 0, sizeof k);
    k.sharded = wl_server_sharded(&client->server);
    k.report = wl_report_new();
    if (k.report == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "check: out of memory");
    char probe[64] = "watchlock-check:";
    if (wl_random_token(probe + strlen(probe)) != 0) {
        watchlock_report_free(k.report);
        return wl_fail(WATCHLOCK_EINTERNAL, "check: getrandom failed");
    }
    if ((rc = wl_keys_make(&k.keys, probe, strlen(probe))) != WATCHLOCK_OK) {
        watchlock_report_free(k.report);
        return rc;
    }
    /* Under Cluster: the master that serves the probe name's slot (valid while pinned). */
    uint64_t pin = wl_server_pin(&client->server);
    k.srv = wl_server_route(&client->server, k.keys.lock, k.keys.lock_len);
    if (k.srv == NULL) {
        wl_server_unpin(&client->server, pin);
        wl_keys_clear(&k.keys);
        watchlock_report_free(k.report);
        return wl_fail(WATCHLOCK_ECONN, "check: %s", watchlock_last_error());
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        bool reused = false;
        k.ctx = NULL;
        rc = check_once(&k, &reused);
        /* A pooled connection the server dropped while idle fails at once
         * with EOF or reset; every question is harmless to ask again. */
        bool stale = rc == WATCHLOCK_ECONN && reused && k.ctx != NULL &&
                     (wl_conn_err(k.ctx) == WL_CERR_EOF || wl_conn_err(k.ctx) == WL_CERR_RESET);
        wl_server_put(k.srv, k.ctx);
        if (!stale)
            break;
        wl_report_clear(k.report);
    }
    wl_server_unpin(&client->server, pin);
    wl_keys_clear(&k.keys);
    if (rc != WATCHLOCK_OK) {
        watchlock_report_free(k.report);
        return rc;
    }
    *out = k.report;
    return WATCHLOCK_OK;
}
