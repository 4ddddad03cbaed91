/*
 * json.c - JSON output for the CLI (see json.h for the rules on escaping
 * and invalid UTF-8).
 *
 * Written here rather than taken from a library: the CLI prints three small
 * objects, and the one hard part, bytes that are not UTF-8 (lock names are
 * binary-safe), none of Debian's JSON libraries handles as we need -
 * jansson refuses such strings (json_stringn returns NULL), json-c and
 * cJSON copy them into the output unchanged (invalid JSON), and yajl's
 * generator copies them too or, with validation on, fails. Each would be a
 * run-time dependency of the CLI and still need this UTF-8 pass in front.
 */
#include "json.h"

#include <inttypes.h>

void cli_json_init(cli_json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->count[0] = 0;
    j->after_key = 0;
}

/* Before any value: the comma that separates it from the previous one. */
static void before_value(cli_json *j)
{
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->count[j->depth]++ > 0)
        fputs(", ", j->f);
}

static void open_level(cli_json *j, char c)
{
    before_value(j);
    fputc(c, j->f);
    if (j->depth + 1 < CLI_JSON_MAX_DEPTH)
        j->depth++;
    j->count[j->depth] = 0;
}

static void close_level(cli_json *j, char c)
{
    fputc(c, j->f);
    if (j->depth > 0)
        j->depth--;
}

void cli_json_begin_object(cli_json *j)
{
    open_level(j, '{');
}

void cli_json_end_object(cli_json *j)
{
    close_level(j, '}');
}

void cli_json_begin_array(cli_json *j)
{
    open_level(j, '[');
}

void cli_json_end_array(cli_json *j)
{
    close_level(j, ']');
}

void cli_json_key(cli_json *j, const char *key)
{
    before_value(j);
    cli_json_string(j->f, key);
    fputs(": ", j->f);
    j->after_key = 1;
}

void cli_json_string_n(cli_json *j, const void *s, size_t len)
{
    before_value(j);
    cli_json_write_string(j->f, s, len);
}

void cli_json_cstring(cli_json *j, const char *s)
{
    before_value(j);
    cli_json_string(j->f, s);
}

void cli_json_int(cli_json *j, int64_t v)
{
    before_value(j);
    fprintf(j->f, "%" PRId64, v);
}

void cli_json_bool(cli_json *j, int v)
{
    before_value(j);
    fputs(v ? "true" : "false", j->f);
}

void cli_json_null(cli_json *j)
{
    before_value(j);
    fputs("null", j->f);
}

void cli_json_hex(cli_json *j, const void *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = s;
    before_value(j);
    fputc('"', j->f);
    for (size_t i = 0; i < len; i++) {
        fputc(hex[p[i] >> 4], j->f);
        fputc(hex[p[i] & 15], j->f);
    }
    fputc('"', j->f);
}

/* ---- UTF-8 ---- */

size_t cli_utf8_seq(const unsigned char *s, size_t len, size_t *bad)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) {
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90; /* no overlong forms */
        else if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        if (bad)
            *bad = 1; /* 0x80..0xC1, 0xF5..0xFF never start a sequence */
        return 0;
    }
    size_t i = 1;
    for (; i < need && i < len; i++) {
        unsigned char min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
        if (s[i] < min || s[i] > max)
            break;
    }
    if (i == need)
        return need;
    if (bad)
        *bad = i; /* the lead byte and the continuation bytes that fit */
    return 0;
}

int cli_utf8_valid(const void *s, size_t len)
{
    const unsigned char *p = s;
    for (size_t i = 0; i < len;) {
        size_t n = cli_utf8_seq(p + i, len - i, NULL);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}

/* ---- strings ---- */

size_t cli_json_write_string(FILE *f, const void *s, size_t len)
{
    const unsigned char *p = s;
    size_t replaced = 0;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        if (c >= 0x80) {
            size_t bad = 1, n = cli_utf8_seq(p + i, len - i, &bad);
            if (n > 0) {
                fwrite(p + i, 1, n, f);
                i += n;
            } else {
                fputs("\xEF\xBF\xBD", f); /* U+FFFD */
                replaced++;
                i += bad;
            }
            continue;
        }
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20 || c == 0x7f)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
        i++;
    }
    fputc('"', f);
    return replaced;
}

void cli_json_string(FILE *f, const char *s)
{
    size_t len = 0;
    while (s[len])
        len++;
    cli_json_write_string(f, s, len);
}
