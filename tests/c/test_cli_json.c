/*
 * test_cli_json.c - unit test of the CLI's JSON writer (cli/json.c): RFC
 * 8259 escaping, control characters, UTF-8 copied as it is, invalid UTF-8
 * replaced by U+FFFD per maximal subpart, commas and nesting, hex. No
 * server, no framework: one main that prints each failure and exits 1.
 * The output is also checked by a real parser in tests/cli/test_cli.py.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);                     \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* The JSON string literal cli_json_write_string() makes of len bytes. */
static char *quoted(const char *s, size_t len, size_t *replaced)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    size_t r = cli_json_write_string(f, s, len);
    fclose(f);
    if (replaced)
        *replaced = r;
    return buf;
}

static void expect_quoted(int line, const char *in, size_t len, const char *want, size_t want_replaced)
{
    size_t replaced = 0;
    char *got = quoted(in, len, &replaced);
    if (strcmp(got, want) != 0 || replaced != want_replaced) {
        fprintf(stderr, "line %d: got %s (%zu replaced), want %s (%zu replaced)\n", line, got, replaced, want,
                want_replaced);
        failures++;
    }
    free(got);
}

#define Q(in, want, nrep) expect_quoted(__LINE__, in, sizeof(in) - 1, want, nrep)

static void test_escaping(void)
{
    Q("", "\"\"", 0);
    Q("plain name:1", "\"plain name:1\"", 0);
    Q("quote\"back\\slash/", "\"quote\\\"back\\\\slash/\"", 0);
    Q("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"", 0);
    Q("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"", 0);
    Q("nul\0byte", "\"nul\\u0000byte\"", 0);
    Q("\x1b[31mred", "\"\\u001b[31mred\"", 0);
}

static void test_utf8(void)
{
    /* valid: 2, 3 and 4 bytes, the edges of each range */
    Q("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92\"", 0);
    Q("\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf",
      "\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"", 0);
    Q("\xed\x9f\xbf", "\"\xed\x9f\xbf\"", 0); /* U+D7FF, just below the surrogates */
    /* invalid: one U+FFFD per maximal subpart */
#define R "\xef\xbf\xbd"
    Q("\xff", "\"" R "\"", 1);
    Q("a\xfe\xff" "b", "\"a" R R "b\"", 2);
    Q("\x80", "\"" R "\"", 1);                     /* lone continuation byte */
    Q("\xc0\xaf", "\"" R R "\"", 2);               /* overlong '/': C0 never starts */
    Q("\xc1\xbf", "\"" R R "\"", 2);
    Q("\xe0\x80\xaf", "\"" R R R "\"", 3);         /* overlong 3-byte form */
    Q("\xed\xa0\x80", "\"" R R R "\"", 3);         /* surrogate U+D800 */
    Q("\xf4\x90\x80\x80", "\"" R R R R "\"", 4);   /* above U+10FFFF */
    Q("\xf5\x80", "\"" R R "\"", 2);
    Q("\xe2\x82", "\"" R "\"", 1);                 /* truncated at the end: one subpart */
    Q("\xe2\x82x", "\"" R "x\"", 1);               /* truncated before an ASCII byte */
    Q("\xf0\x9f\x94", "\"" R "\"", 1);
    Q("\xf0\x9f\x94\xc3\xa9", "\"" R "\xc3\xa9\"", 1);
    Q("\xc3", "\"" R "\"", 1);
    Q("ok\xc3\xa9\xc3", "\"ok\xc3\xa9" R "\"", 1);
#undef R
    EXPECT(cli_utf8_valid("", 0));
    EXPECT(cli_utf8_valid("caf\xc3\xa9", 5));
    EXPECT(cli_utf8_valid("nul\0", 4));
    EXPECT(!cli_utf8_valid("\xff", 1));
    EXPECT(!cli_utf8_valid("\xed\xa0\x80", 3));
    EXPECT(!cli_utf8_valid("\xe2\x82", 2));
    size_t bad = 0;
    EXPECT(cli_utf8_seq((const unsigned char *)"\xe2\x82\xac", 3, &bad) == 3);
    EXPECT(cli_utf8_seq((const unsigned char *)"\xe2\x82\x41", 3, &bad) == 0 && bad == 2);
}

static char *written(void (*fn)(cli_json *))
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    cli_json j;
    cli_json_init(&j, f);
    fn(&j);
    fclose(f);
    return buf;
}

static void write_nested(cli_json *j)
{
    cli_json_begin_array(j);
    cli_json_begin_object(j);
    cli_json_key(j, "name");
    cli_json_string_n(j, "a\0b", 3);
    cli_json_key(j, "held");
    cli_json_bool(j, 1);
    cli_json_key(j, "n");
    cli_json_int(j, -9223372036854775807LL - 1);
    cli_json_key(j, "owner");
    cli_json_begin_object(j);
    cli_json_key(j, "pid");
    cli_json_int(j, 42);
    cli_json_key(j, "label");
    cli_json_cstring(j, "x\"y");
    cli_json_end_object(j);
    cli_json_key(j, "none");
    cli_json_null(j);
    cli_json_key(j, "hex");
    cli_json_hex(j, "\x00\xff\x10", 3);
    cli_json_end_object(j);
    cli_json_begin_object(j);
    cli_json_end_object(j);
    cli_json_begin_array(j);
    cli_json_end_array(j);
    cli_json_bool(j, 0);
    cli_json_end_array(j);
}

static void write_empty(cli_json *j)
{
    cli_json_begin_array(j);
    cli_json_end_array(j);
}

static void test_writer(void)
{
    char *got = written(write_nested);
    const char *want = "[{\"name\": \"a\\u0000b\", \"held\": true, \"n\": -9223372036854775808, "
                       "\"owner\": {\"pid\": 42, \"label\": \"x\\\"y\"}, \"none\": null, \"hex\": \"00ff10\"}, "
                       "{}, [], false]";
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "writer: got  %s\n        want %s\n", got, want);
        failures++;
    }
    free(got);
    got = written(write_empty);
    EXPECT(strcmp(got, "[]") == 0);
    free(got);
}

int main(void)
{
    test_escaping();
    test_utf8();
    test_writer();
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("cli json: all passed\n");
    return 0;
}
