/*
 * common.c - messages, option helpers and error mapping shared by the
 * watchlock subcommands.
 *
 * Every message is exactly one line on stderr that starts with
 * "watchlock: ", so that cron mail and log greps stay readable; text that
 * comes from elsewhere (the library's detail message) is flattened to one
 * line first.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_verbosity = 1;

static void vmessage(const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    for (char *p = line; *p; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
    /* One write keeps lines whole when several processes share stderr. */
    fprintf(stderr, "watchlock: %s\n", line);
    fflush(stderr);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap);
    va_end(ap);
}

void cli_info(const char *fmt, ...)
{
    if (cli_verbosity < 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap);
    va_end(ap);
}

void cli_verbose(const char *fmt, ...)
{
    if (cli_verbosity < 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *sub, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sub)
        cli_error("%s: %s (see 'watchlock %s --help')", sub, msg, sub);
    else
        cli_error("%s (see 'watchlock --help')", msg);
    return CLI_EXIT_USAGE;
}

int cli_parse_duration(const char *sub, const char *opt, const char *text, int64_t *out_ms)
{
    /* The form and the limits are the library's parser's, and so is the
     * message: the same words as in Python and Lua. */
    int status = watchlock_parse_duration(out_ms, text);
    if (status != WATCHLOCK_OK)
        return cli_usage_error(sub, "%s %s: %s", opt, text,
                               *watchlock_last_error() ? watchlock_last_error() : watchlock_strerror(status));
    return 0;
}

int cli_urls_add(struct cli_urls *u, const char *sub, const char *url)
{
    if (u->n >= CLI_MAX_URLS)
        return cli_usage_error(sub, "too many --url options (at most %d)", CLI_MAX_URLS);
    u->v[u->n++] = url;
    return 0;
}

int cli_urls_resolve(struct cli_urls *u, const char *sub)
{
    if (u->n > 0)
        return 0;
    const char *env = getenv("WATCHLOCK_URL");
    if (!env || !*env)
        return 0;
    /* One resolve per process (one subcommand runs): a static copy, no leak. */
    static char copy[8192];
    if (strlen(env) >= sizeof copy)
        return cli_usage_error(sub, "$WATCHLOCK_URL is too long (at most %zu bytes)", sizeof copy - 1);
    memcpy(copy, env, strlen(env) + 1);
    char *save = NULL;
    for (char *t = strtok_r(copy, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        if (u->n >= CLI_MAX_URLS)
            return cli_usage_error(sub, "too many URLs in $WATCHLOCK_URL (at most %d)", CLI_MAX_URLS);
        u->v[u->n++] = t;
    }
    return 0;
}

const char *cli_urls_shown(const struct cli_urls *u)
{
    static char buf[4096];
    if (u->n <= 1)
        return cli_redact_url(u->n ? u->v[0] : NULL);
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < u->n && len + 1 < sizeof buf; i++) {
        int k = snprintf(buf + len, sizeof buf - len, "%s%s", i ? " " : "", cli_redact_url(u->v[i]));
        if (k < 0)
            break;
        len += (size_t)k;
    }
    return buf;
}

const char *cli_pick_url(const char *flag_url)
{
    if (flag_url)
        return flag_url;
    const char *env = getenv("WATCHLOCK_URL");
    if (env && *env)
        return env;
    return NULL;
}

int cli_exit_code_for(int status)
{
    switch (status) {
    case WATCHLOCK_OK:
        return CLI_EXIT_OK;
    case WATCHLOCK_EINVAL:
        return CLI_EXIT_USAGE;
    case WATCHLOCK_ETIMEDOUT:
        return CLI_EXIT_TEMPFAIL;
    case WATCHLOCK_ECONN:
    case WATCHLOCK_EAUTH:
    case WATCHLOCK_ECLOSED:
    case WATCHLOCK_EREPLICAS:
        return CLI_EXIT_UNAVAILABLE; /* could not talk to Redis (as it should) at all, or too few replicas */
    case WATCHLOCK_ESERVER:
    case WATCHLOCK_EWRONGTYPE: /* the name is another lock kind, or another permit count */
        return CLI_EXIT_PROTOCOL;    /* it answered, with an error: e.g. WRONGTYPE */
    case WATCHLOCK_EPERM:
        return CLI_EXIT_NOPERM;      /* its ACL denies a command, key or channel we need */
    default:
        return CLI_EXIT_SOFTWARE;
    }
}

int cli_fail(int status, const char *what)
{
    return cli_fail_detail(status, what, watchlock_last_error());
}

int cli_fail_detail(int status, const char *what, const char *detail)
{
    if (detail && *detail)
        cli_error("%s: %s: %s", what, watchlock_strerror(status), detail);
    else
        cli_error("%s: %s", what, watchlock_strerror(status));
    return cli_exit_code_for(status);
}

const char *cli_redact_url(const char *url)
{
    static char buf[1024];
    if (!url)
        return "redis://127.0.0.1:6379";
    snprintf(buf, sizeof buf, "%s", url);

    /* userinfo: scheme://user:password@host -> scheme://user:***@host */
    char *authority = strstr(buf, "://");
    if (authority) {
        authority += 3;
        char *end = authority + strcspn(authority, "/?#");
        char *at = NULL;
        for (char *p = authority; p < end; p++) {
            if (*p == '@')
                at = p;
        }
        if (at) {
            char *colon = memchr(authority, ':', (size_t)(at - authority));
            char *start = colon ? colon + 1 : authority;
            if (at > start) {
                char rest[1024];
                snprintf(rest, sizeof rest, "%s", at);
                snprintf(start, sizeof buf - (size_t)(start - buf), "***%s", rest);
            }
        }
    }
    /* query: ...password=secret&... and sentinel_password=... -> ***.
     * A key is redacted when it ends in "password". */
    char *q = strchr(buf, '?');
    while (q) {
        char *p = strstr(q, "password=");
        if (!p)
            break;
        char *key = p;
        while (key > buf && key[-1] != '?' && key[-1] != '&')
            key--;
        if (key != p && strncmp(key, "sentinel_", (size_t)(p - key)) != 0) {
            q = p + 1;
            continue;
        }
        char *val = p + strlen("password=");
        char *end = val + strcspn(val, "&#");
        char rest[1024];
        snprintf(rest, sizeof rest, "%s", end);
        snprintf(val, sizeof buf - (size_t)(val - buf), "***%s", rest);
        q = val;
    }
    return buf;
}

void cli_print_text(FILE *f, const void *s, size_t len)
{
    const unsigned char *p = s;
    for (size_t i = 0; i < len;) {
        size_t bad = 1, n = p[i] >= 0x80 ? cli_utf8_seq(p + i, len - i, &bad) : 1;
        if (p[i] >= 0x80 && n > 0) {
            fwrite(p + i, 1, n, f);
            i += n;
        } else if (p[i] >= 0x80) {
            for (size_t k = 0; k < bad; k++)
                fprintf(f, "\\x%02x", p[i + k]);
            i += bad;
        } else if (p[i] == '\\') {
            fputs("\\\\", f);
            i++;
        } else if (p[i] < 0x20 || p[i] == 0x7f) {
            fprintf(f, "\\x%02x", p[i]);
            i++;
        } else {
            fputc(p[i], f);
            i++;
        }
    }
}

int cli_open_client(watchlock_client **out, const char *url)
{
    int st = watchlock_client_open(out, url);
    if (st == WATCHLOCK_OK)
        return 0;
    const char *detail = watchlock_last_error();
    const char *shown = cli_redact_url(url);
    switch (st) {
    case WATCHLOCK_EINVAL:
        cli_error("invalid Redis URL '%s': %s", shown, *detail ? detail : watchlock_strerror(st));
        return CLI_EXIT_USAGE;
    case WATCHLOCK_EAUTH:
        cli_error("authentication to Redis at %s failed: %s", shown,
                  *detail ? detail : watchlock_strerror(st));
        return CLI_EXIT_UNAVAILABLE;
    case WATCHLOCK_ECONN:
        cli_error("cannot connect to Redis at %s: %s", shown,
                  *detail ? detail : watchlock_strerror(st));
        return CLI_EXIT_UNAVAILABLE;
    case WATCHLOCK_EPERM:
        cli_error("permission denied by the ACL of Redis at %s: %s", shown,
                  *detail ? detail : watchlock_strerror(st));
        return CLI_EXIT_NOPERM;
    default:
        cli_error("cannot open Redis client for %s: %s%s%s", shown, watchlock_strerror(st),
                  *detail ? ": " : "", detail);
        return cli_exit_code_for(st);
    }
}

int cli_open_client_urls(watchlock_client **out, const struct cli_urls *u)
{
    if (u->n <= 1)
        return cli_open_client(out, u->n ? u->v[0] : NULL);
    int st = watchlock_client_open_quorum(out, u->v, u->n);
    if (st == WATCHLOCK_OK)
        return 0;
    const char *detail = watchlock_last_error();
    const char *shown = cli_urls_shown(u);
    if (st == WATCHLOCK_EINVAL) {
        cli_error("invalid quorum of %zu URLs (%s): %s", u->n, shown, *detail ? detail : watchlock_strerror(st));
        return CLI_EXIT_USAGE;
    }
    if (st == WATCHLOCK_ECONN)
        cli_error("cannot open a quorum of %zu Redis masters (%s): %s", u->n, shown,
                  *detail ? detail : watchlock_strerror(st));
    else
        cli_error("cannot open a quorum of %zu Redis masters (%s): %s%s%s", u->n, shown, watchlock_strerror(st),
                  *detail ? ": " : "", detail);
    return cli_exit_code_for(st);
}

void cli_format_duration(char *buf, size_t size, int64_t ms)
{
    if (ms < 0) {
        snprintf(buf, size, "forever");
    } else if (ms < 1000) {
        snprintf(buf, size, "%lldms", (long long)ms);
    } else if (ms < 60000) {
        if (ms % 1000 == 0)
            snprintf(buf, size, "%llds", (long long)(ms / 1000));
        else
            snprintf(buf, size, "%lld.%llds", (long long)(ms / 1000), (long long)(ms % 1000 / 100));
    } else if (ms < 3600000) {
        snprintf(buf, size, "%lldm%02llds", (long long)(ms / 60000), (long long)(ms % 60000 / 1000));
    } else {
        snprintf(buf, size, "%lldh%02lldm%02llds", (long long)(ms / 3600000),
                 (long long)(ms % 3600000 / 60000), (long long)(ms % 60000 / 1000));
    }
}

int cli_option_error(const char *sub, int c, char **argv)
{
    const char *arg = argv[optind - 1];
    char name[128];
    if (c == '?' && optopt > 0 && optopt < 256) {
        /* unknown short option (optopt is 0 for unknown long ones) */
        snprintf(name, sizeof name, "-%c", optopt);
    } else if (arg[0] == '-' && arg[1] == '-') {
        snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
    } else if (optopt > 0 && optopt < 256) {
        snprintf(name, sizeof name, "-%c", optopt);
    } else {
        snprintf(name, sizeof name, "%s", arg);
    }
    if (c == ':')
        return cli_usage_error(sub, "option '%s' needs a value", name);
    return cli_usage_error(sub, "unknown option '%s'", name);
}

int cli_admin_options(const char *sub, int argc, char **argv, unsigned flags, void (*help)(void),
                      struct cli_admin_opts *out)
{
    static const struct option all[] = {{"url", required_argument, NULL, 'u'}, {"json", no_argument, NULL, 'j'},
                                        {"quiet", no_argument, NULL, 'q'},     {"force", no_argument, NULL, 'f'},
                                        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0}};
    static const unsigned needs[] = {0, CLI_OPT_JSON, CLI_OPT_QUIET, CLI_OPT_FORCE, 0};
    struct option longopts[sizeof all / sizeof all[0]];
    char shortopts[16] = ":u:";
    size_t n = 0, k = strlen(shortopts);
    for (size_t i = 0; all[i].name != NULL; i++) {
        if (needs[i] != 0 && !(flags & needs[i]))
            continue;
        longopts[n++] = all[i];
        if (all[i].val != 'u')
            shortopts[k++] = (char)all[i].val;
    }
    longopts[n] = all[sizeof all / sizeof all[0] - 1];
    shortopts[k] = '\0';
    memset(out, 0, sizeof *out);
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        switch (c) {
        case 'u':
            if (cli_urls_add(&out->urls, sub, optarg) != 0)
                return CLI_EXIT_USAGE;
            break;
        case 'j': out->json = 1; break;
        case 'q': cli_verbosity = 0; break;
        case 'f': out->force = 1; break;
        case 'h': help(); return CLI_EXIT_OK;
        default: return cli_option_error(sub, c, argv);
        }
    }
    int rc = cli_urls_resolve(&out->urls, sub);
    return rc != 0 ? rc : -1;
}

void cli_print_owner(FILE *f, const watchlock_owner *o)
{
    size_t host_len = 0, label_len = 0;
    const char *host = watchlock_owner_host(o, &host_len);
    const char *label = watchlock_owner_label(o, &label_len);
    fprintf(f, "pid %lld on ", (long long)watchlock_owner_pid(o));
    cli_print_text(f, host, host_len);
    if (label_len > 0) {
        fputs(": ", f);
        cli_print_text(f, label, label_len);
    }
}

void cli_json_owner(cli_json *j, const watchlock_owner *o)
{
    if (o == NULL) {
        cli_json_null(j);
        return;
    }
    size_t host_len = 0, label_len = 0;
    const char *host = watchlock_owner_host(o, &host_len);
    const char *label = watchlock_owner_label(o, &label_len);
    cli_json_begin_object(j);
    cli_json_key(j, "host");
    cli_json_string_n(j, host, host_len);
    cli_json_key(j, "pid");
    cli_json_int(j, watchlock_owner_pid(o));
    cli_json_key(j, "label");
    cli_json_string_n(j, label, label_len);
    cli_json_end_object(j);
}
