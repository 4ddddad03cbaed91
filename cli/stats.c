/*
 * stats.c - the client stats of a `watchlock run` (issue 25 item 5):
 * printed to stderr at exit with --verbose, saved as JSON with
 * --stats-json FILE, and shown again by `watchlock stats [--json] FILE`.
 *
 * A `watchlock stats` has no client of its own to report on (each run opens
 * and closes one), so it reads the file a run saved. The file is this
 * program's own JSON: one object, written by cli_stats_save() and read
 * back by a scanner that knows its keys (not a general JSON parser).
 */
#include "cli.h"
#include "json.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <watchlock.h>

static const struct {
    const char *key;
    int id;
} counters[] = {
    {"acquires", WATCHLOCK_STAT_ACQUIRES},
    {"contended_acquires", WATCHLOCK_STAT_CONTENDED_ACQUIRES},
    {"acquire_timeouts", WATCHLOCK_STAT_ACQUIRE_TIMEOUTS},
    {"renewals", WATCHLOCK_STAT_RENEWALS},
    {"renew_rounds", WATCHLOCK_STAT_RENEW_ROUNDS},
    {"release_retries", WATCHLOCK_STAT_RELEASE_RETRIES},
};
#define NCOUNTERS (sizeof counters / sizeof counters[0])
static const char *const lost_keys[] = {"taken", "expired", "max_renewals", "max_hold", "connection"};
#define NLOST 5
static const struct {
    const char *key;
    int id, sum_id;
} hists[] = {
    {"wait_time", WATCHLOCK_HIST_WAIT, WATCHLOCK_STAT_WAIT_US_SUM},
    {"hold_time", WATCHLOCK_HIST_HOLD, WATCHLOCK_STAT_HOLD_US_SUM},
    {"renew_rtt", WATCHLOCK_HIST_RENEW_RTT, WATCHLOCK_STAT_RENEW_RTT_US_SUM},
};
#define NHISTS 3

typedef struct {
    int64_t counter[NCOUNTERS];
    int64_t lost[NLOST];
    struct {
        int64_t count, sum_us, bucket[WATCHLOCK_HIST_BUCKETS];
    } hist[NHISTS];
} stats;

static int64_t bound_us(int i)
{
    return i == WATCHLOCK_HIST_BUCKETS - 1 ? -1 : INT64_C(64) << (2 * i);
}

static void collect(watchlock_client *c, stats *s)
{
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < NCOUNTERS; i++)
        s->counter[i] = watchlock_client_stat(c, counters[i].id);
    for (int i = 0; i < NLOST; i++)
        s->lost[i] = watchlock_client_stat(c, WATCHLOCK_STAT_LOST_TAKEN + i);
    for (int h = 0; h < NHISTS; h++) {
        for (int b = 0; b < WATCHLOCK_HIST_BUCKETS; b++) {
            int64_t upper, n = 0;
            if (watchlock_client_histogram(c, hists[h].id, b, &upper, &n) == WATCHLOCK_OK) {
                s->hist[h].bucket[b] = n;
                s->hist[h].count += n;
            }
        }
        s->hist[h].sum_us = watchlock_client_stat(c, hists[h].sum_id);
    }
}

static void write_json(const stats *s, FILE *f)
{
    cli_json j;
    cli_json_init(&j, f);
    cli_json_begin_object(&j);
    cli_json_key(&j, "format");
    cli_json_cstring(&j, "watchlock-stats-1");
    for (size_t i = 0; i < NCOUNTERS; i++) {
        cli_json_key(&j, counters[i].key);
        cli_json_int(&j, s->counter[i]);
    }
    cli_json_key(&j, "lost");
    cli_json_begin_object(&j);
    for (int i = 0; i < NLOST; i++) {
        cli_json_key(&j, lost_keys[i]);
        cli_json_int(&j, s->lost[i]);
    }
    cli_json_end_object(&j);
    cli_json_key(&j, "bucket_bounds_us"); /* null: +Inf */
    cli_json_begin_array(&j);
    for (int b = 0; b < WATCHLOCK_HIST_BUCKETS; b++) {
        if (bound_us(b) < 0)
            cli_json_null(&j);
        else
            cli_json_int(&j, bound_us(b));
    }
    cli_json_end_array(&j);
    for (int h = 0; h < NHISTS; h++) {
        cli_json_key(&j, hists[h].key);
        cli_json_begin_object(&j);
        cli_json_key(&j, "count");
        cli_json_int(&j, s->hist[h].count);
        cli_json_key(&j, "sum_us");
        cli_json_int(&j, s->hist[h].sum_us);
        cli_json_key(&j, "buckets");
        cli_json_begin_array(&j);
        for (int b = 0; b < WATCHLOCK_HIST_BUCKETS; b++)
            cli_json_int(&j, s->hist[h].bucket[b]);
        cli_json_end_array(&j);
        cli_json_end_object(&j);
    }
    cli_json_end_object(&j);
    fputc('\n', f);
}

static void format_us(char *buf, size_t size, int64_t us)
{
    if (us < 10000)
        snprintf(buf, size, "%" PRId64 " us", us);
    else if (us < 10000000)
        snprintf(buf, size, "%.1f ms", us / 1e3);
    else
        snprintf(buf, size, "%.1f s", us / 1e6);
}

/* `pre` starts every line ("watchlock: " on stderr, as every line there). */
static void write_text(const stats *s, FILE *f, const char *pre)
{
    for (size_t i = 0; i < NCOUNTERS; i++)
        fprintf(f, "%s%-19s %" PRId64 "\n", pre, counters[i].key, s->counter[i]);
    fprintf(f, "%s%-19s", pre, "lost");
    for (int i = 0; i < NLOST; i++)
        fprintf(f, "%s %s %" PRId64, i ? "," : "", lost_keys[i], s->lost[i]);
    fputc('\n', f);
    for (int h = 0; h < NHISTS; h++) {
        char mean[32];
        format_us(mean, sizeof mean, s->hist[h].count ? s->hist[h].sum_us / s->hist[h].count : 0);
        fprintf(f, "%s%-19s count %" PRId64 ", mean %s", pre, hists[h].key, s->hist[h].count, mean);
        for (int b = 0; b < WATCHLOCK_HIST_BUCKETS; b++) {
            if (s->hist[h].bucket[b] == 0)
                continue;
            char le[32];
            if (bound_us(b) < 0)
                snprintf(le, sizeof le, "more");
            else
                format_us(le, sizeof le, bound_us(b));
            fprintf(f, ", <= %s: %" PRId64, le, s->hist[h].bucket[b]);
        }
        fputc('\n', f);
    }
}

void cli_stats_report(watchlock_client *c, const char *json_path)
{
    stats s;
    collect(c, &s);
    if (cli_verbosity >= 2) {
        fprintf(stderr, "watchlock: stats of this run:\n");
        write_text(&s, stderr, "watchlock: ");
    }
    if (json_path != NULL) {
        FILE *f = fopen(json_path, "w");
        if (f == NULL) {
            cli_error("--stats-json %s: %s", json_path, strerror(errno));
            return;
        }
        write_json(&s, f);
        if (fclose(f) != 0)
            cli_error("--stats-json %s: %s", json_path, strerror(errno));
    }
}

/* ---- reading a saved file back ---- */

/* After `"key":` (searched from `from`, before `end`), blanks skipped; NULL if absent. */
static const char *after_key(const char *from, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(from, pat);
    if (p == NULL)
        return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\n')
        p++;
    return p;
}

static int read_int(const char **p, int64_t *out)
{
    while (**p == ' ' || **p == ',' || **p == '\n' || **p == '[')
        (*p)++;
    char *end;
    errno = 0;
    long long v = strtoll(*p, &end, 10);
    if (end == *p || errno != 0 || v < 0)
        return -1;
    *out = v;
    *p = end;
    return 0;
}

static int parse(const char *text, stats *s)
{
    memset(s, 0, sizeof *s);
    const char *p = after_key(text, "format");
    if (p == NULL || strncmp(p, "\"watchlock-stats-1\"", 19) != 0)
        return -1;
    for (size_t i = 0; i < NCOUNTERS; i++)
        if ((p = after_key(text, counters[i].key)) == NULL || read_int(&p, &s->counter[i]) != 0)
            return -1;
    const char *lost = after_key(text, "lost");
    for (int i = 0; i < NLOST; i++)
        if (lost == NULL || (p = after_key(lost, lost_keys[i])) == NULL || read_int(&p, &s->lost[i]) != 0)
            return -1;
    for (int h = 0; h < NHISTS; h++) {
        const char *o = after_key(text, hists[h].key);
        if (o == NULL || (p = after_key(o, "count")) == NULL || read_int(&p, &s->hist[h].count) != 0 ||
            (p = after_key(o, "sum_us")) == NULL || read_int(&p, &s->hist[h].sum_us) != 0 ||
            (p = after_key(o, "buckets")) == NULL)
            return -1;
        for (int b = 0; b < WATCHLOCK_HIST_BUCKETS; b++)
            if (read_int(&p, &s->hist[h].bucket[b]) != 0)
                return -1;
    }
    return 0;
}

void cli_help_stats(void)
{
    printf("usage: watchlock stats [--json] FILE\n"
           "\n"
           "Show the client stats a 'watchlock run --stats-json FILE' saved at its exit:\n"
           "acquires, contended acquires, acquire timeouts, renewals, renewal rounds,\n"
           "release retries, losses by reason, and the wait time, hold time and renewal\n"
           "round-trip histograms (log-scale buckets: 64 us * 4^i). A run's client lives\n"
           "only as long as the run, so there is no live client to ask; 'run --verbose'\n"
           "prints the same stats to stderr at exit.\n"
           "\n"
           "Options:\n"
           "      --json   print the saved JSON (one object) instead of text\n"
           "  -h, --help   show this help\n");
}

int cli_cmd_stats(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else if (c == 'h') {
            cli_help_stats();
            return CLI_EXIT_OK;
        } else
            return cli_option_error("stats", c, argv);
    }
    if (argc - optind != 1)
        return cli_usage_error("stats", "expected one FILE (written by 'watchlock run --stats-json FILE')");
    const char *path = argv[optind];
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        cli_error("stats: %s: %s", path, strerror(errno));
        return 66; /* EX_NOINPUT */
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    stats s;
    if (parse(buf, &s) != 0) {
        cli_error("stats: %s: not a stats file written by 'watchlock run --stats-json'", path);
        return 65; /* EX_DATAERR */
    }
    if (json)
        write_json(&s, stdout);
    else
        write_text(&s, stdout, "");
    return CLI_EXIT_OK;
}
