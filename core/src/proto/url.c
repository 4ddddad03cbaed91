/*
 * url.c - parses URLs into an endpoint.
 *
 *   redis://[[user]:password@]host[:port][/db][?option=value&...]
 *   rediss://...                  the same over TLS
 *   unix:///path/to/redis.sock[?db=N&user=U&password=P&...]
 *   redis-sentinel://[[user]:password@]h1[:26379][,h2[:26379]...]/MASTER[/db][?...]
 *   rediss-sentinel://...         the same over TLS (sentinels and master)
 *   redis-cluster://[[user]:password@]h1[:6379][,h2[:6379]...][?...]
 *   rediss-cluster://...          the same over TLS
 * Options: connect_timeout, command_timeout, safety_margin (durations),
 * keepalive (0/1), db/user/password (any scheme); TLS: cacert, cacertdir,
 * cert, key, sni, insecure (names as redis-cli's flags); Sentinel:
 * sentinel_user, sentinel_password; min_replicas (N) and
 * min_replicas_timeout (duration); a quorum member: restart_window
 * (duration). Unknown options are errors, so a typo
 * never silently falls back to a default.
 */
#include "proto/proto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_URL "redis://127.0.0.1:6379"

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Percent-decodes [s, s+len) into a new string; NULL on a bad escape,
 * on an embedded NUL, or out of memory (*nomem tells which). */
static char *decode(const char *s, size_t len, bool *nomem)
{
    char *out = malloc(len + 1);
    *nomem = out == NULL;
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            if (i + 2 >= len) {
                free(out);
                return NULL;
            }
            int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
            if (a < 0 || b < 0 || (a == 0 && b == 0)) {
                free(out);
                return NULL;
            }
            out[o++] = (char)(a * 16 + b);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

static int parse_int(const char *s, size_t len, long min, long max, long *out)
{
    if (len == 0 || len > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int set_string(char **field, const char *s, size_t len, const char *what)
{
    bool nomem;
    char *v = decode(s, len, &nomem);
    if (v == NULL)
        return nomem ? wl_fail(WATCHLOCK_ENOMEM, "out of memory")
                     : wl_fail(WATCHLOCK_EINVAL, "malformed URL: bad percent-escape in %s", what);
    free(*field);
    *field = v;
    return WATCHLOCK_OK;
}

static int parse_option(wl_endpoint *ep, const char *opt, size_t len)
{
    const char *eq = memchr(opt, '=', len);
    if (eq == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: option '%.*s' has no value", (int)len, opt);
    size_t klen = (size_t)(eq - opt), vlen = len - klen - 1;
    const char *val = eq + 1;
    char vbuf[64];
#define KEY_IS(k) (klen == sizeof(k) - 1 && memcmp(opt, k, klen) == 0)
    if (KEY_IS("user"))
        return set_string(&ep->user, val, vlen, "user");
    if (KEY_IS("password"))
        return set_string(&ep->password, val, vlen, "password");
    if (KEY_IS("cacert") || KEY_IS("cacertdir") || KEY_IS("cert") || KEY_IS("key") || KEY_IS("sni") ||
        KEY_IS("insecure")) {
        if (!ep->tls.on)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: %.*s is a TLS option: use rediss:// (or rediss-sentinel://)",
                           (int)klen, opt);
        if (KEY_IS("insecure")) {
            if (vlen == 1 && (val[0] == '0' || val[0] == '1')) {
                ep->tls.insecure = val[0] == '1';
                return WATCHLOCK_OK;
            }
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: insecure must be 0 or 1");
        }
        char **field = KEY_IS("cacert") ? &ep->tls.cacert : KEY_IS("cacertdir") ? &ep->tls.cacertdir
                       : KEY_IS("cert") ? &ep->tls.cert : KEY_IS("key") ? &ep->tls.key : &ep->tls.sni;
        if (vlen == 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: %.*s needs a value", (int)klen, opt);
        return set_string(field, val, vlen, "a TLS option");
    }
    if (KEY_IS("sentinel_user") || KEY_IS("sentinel_password")) {
        if (ep->kind != WL_KIND_SENTINEL)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: %.*s is for redis-sentinel:// URLs", (int)klen, opt);
        return set_string(KEY_IS("sentinel_user") ? &ep->sentinel_user : &ep->sentinel_password, val, vlen,
                          "a sentinel credential");
    }
    if (KEY_IS("min_replicas")) {
        long n;
        if (parse_int(val, vlen, 0, 1000, &n) != 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: min_replicas must be a number of 0 .. 1000, got '%.*s'",
                           (int)vlen, val);
        ep->min_replicas = (int)n;
        return WATCHLOCK_OK;
    }
    if (KEY_IS("db")) {
        if (ep->kind == WL_KIND_CLUSTER)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: a Redis Cluster has only database 0");
        long db;
        if (parse_int(val, vlen, 0, 1000000, &db) != 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: db must be a number, got '%.*s'", (int)vlen, val);
        ep->db = (int)db;
        return WATCHLOCK_OK;
    }
    if (KEY_IS("keepalive")) {
        if (vlen == 1 && (val[0] == '0' || val[0] == '1')) {
            ep->keepalive = val[0] == '1';
            return WATCHLOCK_OK;
        }
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: keepalive must be 0 or 1");
    }
    if (KEY_IS("connect_timeout") || KEY_IS("command_timeout") || KEY_IS("min_replicas_timeout")) {
        int64_t ms;
        if (vlen >= sizeof vbuf)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: %.*s value too long", (int)klen, opt);
        memcpy(vbuf, val, vlen);
        vbuf[vlen] = '\0';
        if (watchlock_parse_duration(&ms, vbuf) != WATCHLOCK_OK || ms <= 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: %.*s must be a positive duration (e.g. 500ms, 2s), got '%s'",
                           (int)klen, opt, vbuf);
        if (KEY_IS("connect_timeout"))
            ep->connect_timeout_ms = ms;
        else if (KEY_IS("min_replicas_timeout"))
            ep->min_replicas_timeout_ms = ms;
        else
            ep->command_timeout_ms = ms;
        return WATCHLOCK_OK;
    }
    if (KEY_IS("safety_margin")) {
        int64_t ms;
        if (vlen >= sizeof vbuf)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: safety_margin value too long");
        memcpy(vbuf, val, vlen);
        vbuf[vlen] = '\0';
        if (watchlock_parse_duration(&ms, vbuf) != WATCHLOCK_OK || ms > WL_MAX_SAFETY_MARGIN_MS)
            return wl_fail(WATCHLOCK_EINVAL,
                           "malformed URL: safety_margin must be a duration of 0 .. 60s (e.g. 10ms), got '%s'", vbuf);
        ep->safety_margin_ms = ms;
        return WATCHLOCK_OK;
    }
    if (KEY_IS("restart_window")) {
        int64_t ms;
        if (vlen >= sizeof vbuf)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: restart_window value too long");
        memcpy(vbuf, val, vlen);
        vbuf[vlen] = '\0';
        if (watchlock_parse_duration(&ms, vbuf) != WATCHLOCK_OK || ms < 0 || ms > WL_MAX_RESTART_WINDOW_MS)
            return wl_fail(WATCHLOCK_EINVAL,
                           "malformed URL: restart_window must be a duration of 0 .. 7d (e.g. 30s), got '%s'", vbuf);
        ep->restart_window_ms = ms;
        return WATCHLOCK_OK;
    }
#undef KEY_IS
    return wl_fail(WATCHLOCK_EINVAL, "malformed URL: unknown option '%.*s'", (int)klen, opt);
}

static int parse_query(wl_endpoint *ep, const char *q)
{
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len > 0) {
            int rc = parse_option(ep, q, len);
            if (rc != WATCHLOCK_OK)
                return rc;
        }
        q += len + (amp ? 1 : 0);
    }
    return WATCHLOCK_OK;
}

static int parse_tcp(wl_endpoint *ep, const char *s, const char *end)
{
    /* userinfo */
    const char *at = NULL;
    for (const char *p = s; p < end; p++)
        if (*p == '@')
            at = p; /* the last '@': passwords may contain '@' only escaped, but be lenient */
    if (at != NULL) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        int rc;
        if (colon != NULL) {
            if (colon > s && (rc = set_string(&ep->user, s, (size_t)(colon - s), "user")) != WATCHLOCK_OK)
                return rc;
            if ((rc = set_string(&ep->password, colon + 1, (size_t)(at - colon - 1), "password")) != WATCHLOCK_OK)
                return rc;
        } else if (at > s && (rc = set_string(&ep->user, s, (size_t)(at - s), "user")) != WATCHLOCK_OK) {
            return rc;
        }
        s = at + 1;
    }
    /* host[:port][/db] */
    const char *slash = memchr(s, '/', (size_t)(end - s));
    const char *hostport_end = slash ? slash : end;
    const char *host = s, *host_end, *port = NULL;
    if (*s == '[') {
        const char *rb = memchr(s, ']', (size_t)(hostport_end - s));
        if (rb == NULL)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: unterminated '[' in host");
        host = s + 1;
        host_end = rb;
        if (rb + 1 < hostport_end) {
            if (rb[1] != ':')
                return wl_fail(WATCHLOCK_EINVAL, "malformed URL: junk after ']'");
            port = rb + 2;
        }
    } else {
        const char *colon = memchr(s, ':', (size_t)(hostport_end - s));
        host_end = colon ? colon : hostport_end;
        if (colon)
            port = colon + 1;
    }
    if (host_end == host)
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: no host");
    for (const char *p = host; p < host_end; p++)
        if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_' || *p == ':' || *p == '%'))
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: bad character in host '%.*s'", (int)(host_end - host),
                           host);
    ep->host = strndup(host, (size_t)(host_end - host));
    if (ep->host == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    ep->port = 6379;
    if (port != NULL) {
        long v;
        if (parse_int(port, (size_t)(hostport_end - port), 1, 65535, &v) != 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: port must be 1..65535, got '%.*s'",
                           (int)(hostport_end - port), port);
        ep->port = (int)v;
    }
    if (slash != NULL && slash + 1 < end) {
        long db;
        if (parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1000000, &db) != 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: database must be a number, got '%.*s'",
                           (int)(end - slash - 1), slash + 1);
        ep->db = (int)db;
    }
    snprintf(ep->label, sizeof ep->label, "%s:%d", ep->host, ep->port);
    return WATCHLOCK_OK;
}

/* [userinfo@]h1[:p1][,h2[:p2]...] in [s, end): credentials into ep,
 * addresses into ep->seeds (default_port when a host has none). `what`
 * names an address in messages ("sentinel", "seed node"). */
static int parse_host_list(wl_endpoint *ep, const char *s, const char *end, int default_port, const char *what)
{
    const char *hosts = s;
    const char *at = NULL;
    for (const char *p = s; p < end; p++)
        if (*p == '@')
            at = p;
    if (at != NULL && memchr(s, ',', (size_t)(at - s)) != NULL)
        return wl_fail(WATCHLOCK_EINVAL,
                       "malformed URL: credentials go before the first %s (percent-escape ',' and '@' in a password)",
                       what);
    if (at != NULL) {
        wl_endpoint tmp;
        memset(&tmp, 0, sizeof tmp);
        char buf[600];
        int n = snprintf(buf, sizeof buf, "%.*sx", (int)(at - s + 1), s);
        if (n < 0 || (size_t)n >= sizeof buf)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: user information too long");
        int rc = parse_tcp(&tmp, buf, buf + n);
        ep->user = tmp.user;
        ep->password = tmp.password;
        tmp.user = tmp.password = NULL;
        wl_endpoint_clear(&tmp);
        if (rc != WATCHLOCK_OK)
            return rc;
        hosts = at + 1;
    }
    for (const char *h = hosts; h < end;) {
        const char *comma = memchr(h, ',', (size_t)(end - h));
        const char *hend = comma ? comma : end;
        wl_endpoint tmp;
        memset(&tmp, 0, sizeof tmp);
        int rc = h == hend ? wl_fail(WATCHLOCK_EINVAL, "malformed URL: empty %s address", what)
                           : parse_tcp(&tmp, h, hend);
        const char *rb = h[0] == '[' ? memchr(h, ']', (size_t)(hend - h)) : NULL;
        const char *after = rb ? rb + 1 : h;
        bool has_port = memchr(after, ':', (size_t)(hend - after)) != NULL;
        if (rc == WATCHLOCK_OK && (tmp.user || tmp.password))
            rc = wl_fail(WATCHLOCK_EINVAL, "malformed URL: credentials go before the first %s", what);
        if (rc == WATCHLOCK_OK && tmp.db != 0)
            rc = wl_fail(WATCHLOCK_EINVAL, "malformed URL: a %s address has no /db", what);
        wl_hostport *grown = NULL;
        if (rc == WATCHLOCK_OK && (grown = realloc(ep->seeds, (ep->n_seeds + 1) * sizeof *ep->seeds)) == NULL)
            rc = wl_fail(WATCHLOCK_ENOMEM, "out of memory");
        if (grown != NULL)
            ep->seeds = grown;
        if (rc != WATCHLOCK_OK) {
            wl_endpoint_clear(&tmp);
            return rc;
        }
        ep->seeds[ep->n_seeds].host = tmp.host;
        ep->seeds[ep->n_seeds].port = has_port ? tmp.port : default_port;
        ep->n_seeds++;
        tmp.host = NULL;
        wl_endpoint_clear(&tmp);
        if (comma != NULL && comma + 1 == end)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: empty %s address", what);
        h = comma ? comma + 1 : end;
    }
    if (ep->n_seeds == 0)
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: no %s address", what);
    return WATCHLOCK_OK;
}

/* Sentinel: [userinfo@]h1[:p1][,h2[:p2]...]/MASTER[/db] */
static int parse_sentinel(wl_endpoint *ep, const char *s, const char *end)
{
    const char *slash = memchr(s, '/', (size_t)(end - s));
    if (slash == NULL || slash + 1 >= end)
        return wl_fail(WATCHLOCK_EINVAL,
                       "malformed URL: a Sentinel URL names the master: redis-sentinel://host:26379[,host:port...]/MASTER");
    int rc = parse_host_list(ep, s, slash, 26379, "sentinel");
    if (rc != WATCHLOCK_OK)
        return rc;
    const char *name = slash + 1;
    const char *name_end = memchr(name, '/', (size_t)(end - name));
    if (name_end == NULL)
        name_end = end;
    rc = set_string(&ep->master_name, name, (size_t)(name_end - name), "master name");
    if (rc != WATCHLOCK_OK)
        return rc;
    if (ep->master_name[0] == '\0')
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: empty master name");
    if (name_end < end && name_end + 1 < end) {
        long db;
        if (parse_int(name_end + 1, (size_t)(end - name_end - 1), 0, 1000000, &db) != 0)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: database must be a number, got '%.*s'",
                           (int)(end - name_end - 1), name_end + 1);
        ep->db = (int)db;
    }
    snprintf(ep->label, sizeof ep->label, "sentinel master '%s'", ep->master_name);
    return WATCHLOCK_OK;
}

/* Cluster: [userinfo@]h1[:p1][,h2[:p2]...][/] (no database: a cluster has only db 0) */
static int parse_cluster(wl_endpoint *ep, const char *s, const char *end)
{
    const char *slash = memchr(s, '/', (size_t)(end - s));
    if (slash != NULL && slash + 1 < end)
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: a Redis Cluster has only database 0 (no /db in the URL)");
    int rc = parse_host_list(ep, s, slash ? slash : end, 6379, "seed node");
    if (rc != WATCHLOCK_OK)
        return rc;
    snprintf(ep->label, sizeof ep->label, "cluster %s:%d%s", ep->seeds[0].host, ep->seeds[0].port,
             ep->n_seeds > 1 ? ",..." : "");
    return WATCHLOCK_OK;
}

int wl_endpoint_parse(wl_endpoint *ep, const char *url)
{
    memset(ep, 0, sizeof *ep);
    ep->connect_timeout_ms = 2000;
    ep->command_timeout_ms = 2000;
    ep->keepalive = 1;
    ep->safety_margin_ms = WL_DEFAULT_SAFETY_MARGIN_MS;
    ep->min_replicas_timeout_ms = WL_DEFAULT_MIN_REPLICAS_TIMEOUT_MS;
    if (url == NULL || *url == '\0')
        url = DEFAULT_URL;
    if (strlen(url) > 4096)
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: longer than 4096 bytes");
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return wl_fail(WATCHLOCK_EINVAL, "malformed URL: contains a space or control character");

    const char *q = strchr(url, '?');
    const char *end = q ? q : url + strlen(url);
    int rc;
    if (strncmp(url, "redis://", 8) == 0) {
        rc = parse_tcp(ep, url + 8, end);
    } else if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        if (*path != '/')
            rc = wl_fail(WATCHLOCK_EINVAL, "malformed URL: unix:// needs an absolute path (unix:///path/to.sock)");
        else if ((rc = set_string(&ep->unix_path, path, (size_t)(end - path), "path")) == WATCHLOCK_OK)
            snprintf(ep->label, sizeof ep->label, "%s", ep->unix_path);
    } else if (strncmp(url, "rediss://", 9) == 0) {
        ep->tls.on = true;
        rc = parse_tcp(ep, url + 9, end);
    } else if (strncmp(url, "redis-sentinel://", 17) == 0 || strncmp(url, "rediss-sentinel://", 18) == 0) {
        ep->kind = WL_KIND_SENTINEL;
        ep->tls.on = url[5] == 's';
        rc = parse_sentinel(ep, url + (ep->tls.on ? 18 : 17), end);
    } else if (strncmp(url, "redis-cluster://", 16) == 0 || strncmp(url, "rediss-cluster://", 17) == 0) {
        ep->kind = WL_KIND_CLUSTER;
        ep->tls.on = url[5] == 's';
        rc = parse_cluster(ep, url + (ep->tls.on ? 17 : 16), end);
    } else {
        rc = wl_fail(WATCHLOCK_EINVAL,
                     "malformed URL '%.200s': expected redis://host[:port][/db], rediss://..., unix:///path, "
                     "redis-sentinel://host[:port][,host[:port]...]/MASTER or redis-cluster://host:port[,host:port...]",
                     url);
    }
    if (rc == WATCHLOCK_OK && q != NULL)
        rc = parse_query(ep, q + 1);
    if (rc != WATCHLOCK_OK)
        wl_endpoint_clear(ep);
    return rc;
}

void wl_endpoint_clear(wl_endpoint *ep)
{
    for (size_t i = 0; i < ep->n_seeds; i++)
        free(ep->seeds[i].host);
    free(ep->seeds);
    free(ep->master_name);
    free(ep->sentinel_user);
    free(ep->sentinel_password);
    wl_tls_opts_clear(&ep->tls);
    free(ep->host);
    free(ep->unix_path);
    free(ep->user);
    free(ep->password);
    memset(ep, 0, sizeof *ep);
}

void wl_tls_opts_clear(wl_tls_opts *o)
{
    free(o->cacert);
    free(o->cacertdir);
    free(o->cert);
    free(o->key);
    free(o->sni);
    memset(o, 0, sizeof *o);
}
