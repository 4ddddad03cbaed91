/*
 * json.h - the CLI's JSON output (RFC 8259), and UTF-8 checks shared with
 * its text output. Private to the CLI; no dependency on the library, so
 * tests/c/test_cli_json.c tests it alone.
 *
 * Strings are byte strings (lock names may hold any bytes, NUL included).
 * The output is always valid UTF-8 JSON, as RFC 8259 section 8.1 requires:
 *   - '"' and '\' are escaped; control characters U+0000..U+001F as \b \f
 *     \n \r \t or \u00XX; DEL (0x7f) as \u007f (harmless, and keeps a
 *     terminal that shows the output sane);
 *   - valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 *     above U+10FFFF) is copied as it is;
 *   - each maximal invalid subsequence (Unicode's "maximal subpart"
 *     practice, as Python's errors="replace" does) becomes one U+FFFD.
 * Replacing is lossy, so callers that print a name which may need to be
 * given back (watchlock status/list) add its bytes in hex when
 * cli_utf8_valid() says it is not valid UTF-8. Escaping bytes as \u00XX
 * instead would not be lossless either (it reads as Latin-1), and lone
 * surrogates (Python's surrogateescape) are refused by strict parsers.
 *
 * The writer keeps the commas and colons: callers say what comes next.
 *
 *     cli_json j;
 *     cli_json_init(&j, stdout);
 *     cli_json_begin_object(&j);
 *     cli_json_key(&j, "name");
 *     cli_json_string_n(&j, name, len);
 *     cli_json_key(&j, "held");
 *     cli_json_bool(&j, 1);
 *     cli_json_end_object(&j);   // {"name": "...", "held": true}
 */
#ifndef WATCHLOCK_CLI_JSON_H
#define WATCHLOCK_CLI_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_JSON_MAX_DEPTH 16

typedef struct cli_json {
    FILE *f;
    int depth;
    int count[CLI_JSON_MAX_DEPTH]; /* values written at each level */
    int after_key;                 /* a key was written: its value comes next */
} cli_json;

void cli_json_init(cli_json *j, FILE *f);
void cli_json_begin_object(cli_json *j);
void cli_json_end_object(cli_json *j);
void cli_json_begin_array(cli_json *j);
void cli_json_end_array(cli_json *j);
/* The key of the next member of the current object (a C string). */
void cli_json_key(cli_json *j, const char *key);
void cli_json_string_n(cli_json *j, const void *s, size_t len);
void cli_json_cstring(cli_json *j, const char *s);
void cli_json_int(cli_json *j, int64_t v);
void cli_json_bool(cli_json *j, int v);
void cli_json_null(cli_json *j);
/* The bytes in lowercase hex, as a JSON string ("00ff"). */
void cli_json_hex(cli_json *j, const void *s, size_t len);

/* Writes len bytes as one JSON string literal, quotes included (the
 * escaper the writer uses). Returns the number of invalid UTF-8
 * subsequences that were replaced with U+FFFD. */
size_t cli_json_write_string(FILE *f, const void *s, size_t len);
/* A C string as a JSON string literal (for writers that build JSON by hand). */
void cli_json_string(FILE *f, const char *s);

/* Length of the valid UTF-8 sequence at s[0..len), 0 when s[0] does not
 * start one; then *bad (may be NULL) is the length of the maximal invalid
 * subpart there (at least 1). len must be at least 1. */
size_t cli_utf8_seq(const unsigned char *s, size_t len, size_t *bad);
/* 1 when all len bytes are valid UTF-8. */
int cli_utf8_valid(const void *s, size_t len);

#endif /* WATCHLOCK_CLI_JSON_H */
