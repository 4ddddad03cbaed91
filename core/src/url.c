/*
 * url.c - parses redis:// and unix:// URLs into an endpoint.
 *
 *   redis://[[user]:password@]host[:port][/db][?option=value&...]
 *   unix:///path/to/redis.sock[?db=N&user=U&password=P&...]
 * Options: connect_timeout, command_timeout (durations), keepalive (0/1),
 * and db/user/password (any scheme). Unknown options are errors, so a typo
 * never silently falls back to a default.
 */
#include "internal.h"

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
    if (KEY_IS("db")) {
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
    if (KEY_IS("connect_timeout") || KEY_IS("command_timeout")) {
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

int wl_endpoint_parse(wl_endpoint *ep, const char *url)
{
    memset(ep, 0, sizeof *ep);
    ep->connect_timeout_ms = 2000;
    ep->command_timeout_ms = 2000;
    ep->keepalive = 1;
    ep->safety_margin_ms = WL_DEFAULT_SAFETY_MARGIN_MS;
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
        rc = wl_fail(WATCHLOCK_EINVAL, "rediss:// (TLS) is not supported: this build's hiredis has no TLS");
    } else {
        rc = wl_fail(WATCHLOCK_EINVAL, "malformed URL '%.200s': expected redis://host[:port][/db] or unix:///path",
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
    free(ep->host);
    free(ep->unix_path);
    free(ep->user);
    free(ep->password);
    memset(ep, 0, sizeof *ep);
}
