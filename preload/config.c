/*
 * config.c - the preload shim's pure functions (preload.h): globs, lock
 * names, fence variable names, kernel-lock identities and /proc/locks
 * lines. Shared by the shim (which runs inside any program, so nothing
 * here allocates, prints or keeps state) and the keeper.
 */
#include <ctype.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "preload.h"

void wlp_config_parse_paths(struct wlp_config *cfg, const char *paths)
{
    memset(cfg, 0, sizeof *cfg);
    if (paths == NULL || paths[0] == '\0')
        return;
    size_t n = strlen(paths);
    if (n >= sizeof cfg->globs_buf) {
        cfg->bad = "WATCHLOCK_PATHS is too long";
        return;
    }
    memcpy(cfg->globs_buf, paths, n + 1);
    char *p = cfg->globs_buf;
    for (;;) {
        char *colon = strchr(p, ':');
        if (colon != NULL)
            *colon = '\0';
        if (*p != '\0') {
            if (*p != '/') {
                cfg->bad = "WATCHLOCK_PATHS: every glob must be an absolute path";
                cfg->nglobs = 0;
                return;
            }
            if (cfg->nglobs == WLP_MAX_GLOBS) {
                cfg->bad = "WATCHLOCK_PATHS: more than 32 globs";
                cfg->nglobs = 0;
                return;
            }
            cfg->globs[cfg->nglobs++] = p;
        }
        if (colon == NULL)
            break;
        p = colon + 1;
    }
}

int wlp_config_match(const struct wlp_config *cfg, const char *path)
{
    for (int i = 0; i < cfg->nglobs; i++)
        if (fnmatch(cfg->globs[i], path, FNM_PATHNAME) == 0)
            return 1;
    return 0;
}

int wlp_fd_path(char *out, size_t size, const char *link, size_t len)
{
    static const char deleted[] = " (deleted)";
    const size_t dl = sizeof deleted - 1;
    if (len == 0 || link[0] != '/')
        return -1; /* pipe:[..], socket:[..], anon_inode:[..] */
    if (len > dl && memcmp(link + len - dl, deleted, dl) == 0)
        len -= dl;
    if (len + 1 > size)
        return -1;
    memcpy(out, link, len);
    out[len] = '\0';
    return 0;
}

int wlp_lock_name(char *out, size_t size, const char *path, const char *prefix, const char *map)
{
    const char *to = "";
    size_t from_len = 0, to_len = 0;
    if (map != NULL && map[0] != '\0') {
        const char *eq = strchr(map, '=');
        if (eq == NULL || eq == map)
            return -1;
        from_len = (size_t)(eq - map);
        if (strncmp(path, map, from_len) == 0) {
            to = eq + 1;
            to_len = strlen(to);
        } else {
            from_len = 0;
        }
    }
    int n = snprintf(out, size, "%s%.*s%s", prefix != NULL ? prefix : "", (int)to_len, to,
                     path + from_len);
    if (n < 0 || (size_t)n >= size)
        return -1;
    return n;
}

int wlp_fence_var(char *out, size_t size, const char *path)
{
    static const char head[] = "WATCHLOCK_FENCE_";
    size_t n = strlen(head), pl = strlen(path);
    if (n + pl + 1 > size)
        return -1;
    memcpy(out, head, n);
    for (size_t i = 0; i < pl; i++) {
        unsigned char c = (unsigned char)path[i];
        out[n + i] = isalnum(c) && c < 128 ? (char)toupper(c) : '_';
    }
    out[n + pl] = '\0';
    return (int)(n + pl);
}

int wlp_kernel_id(char *out, size_t size, const char *boot_id, uint64_t pidns, uint64_t dev,
                  uint64_t ino, int family)
{
    int n = snprintf(out, size, "%s/%" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%s", boot_id, pidns, dev,
                     ino, family == WLP_FAMILY_FLOCK ? "flock" : "posix");
    return n < 0 || (size_t)n >= size ? -1 : n;
}

int wlp_proc_locks_line_matches(const char *line, int family, unsigned dev_major,
                                unsigned dev_minor, uint64_t ino, long pid)
{
    /* "12: FLOCK  ADVISORY  WRITE 4711 00:2d:123456 0 EOF"
     * "12: -> FLOCK  ADVISORY  WRITE 4712 00:2d:123456 0 EOF" (a waiter) */
    char cls[16], mode[16], rw[16], devs[64], start[32], end[32];
    long lpid;
    const char *p = strchr(line, ':');
    if (p == NULL)
        return 0;
    p++;
    while (*p == ' ')
        p++;
    if (strncmp(p, "->", 2) == 0)
        return 0;
    if (sscanf(p, "%15s %15s %15s %ld %63s %31s %31s", cls, mode, rw, &lpid, devs, start, end) != 7)
        return 0;
    const char *want = family == WLP_FAMILY_FLOCK ? "FLOCK"
                       : family == WLP_FAMILY_OFD ? "OFDLCK"
                                                  : "POSIX";
    if (strcmp(cls, want) != 0)
        return 0;
    unsigned maj, min;
    uint64_t i;
    if (sscanf(devs, "%x:%x:%" SCNu64, &maj, &min, &i) != 3)
        return 0;
    if (maj != dev_major || min != dev_minor || i != ino)
        return 0;
    if (family != WLP_FAMILY_FLOCK && (strcmp(start, "0") != 0 || strcmp(end, "EOF") != 0))
        return 0; /* a byte range: not the whole-file lock the keeper guards */
    if (pid >= 0 && family != WLP_FAMILY_OFD && lpid != pid)
        return 0;
    return 1;
}

int wlp_signal_parse(const char *text)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},   {"KILL", SIGKILL},
                 {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"QUIT", SIGQUIT}, {"ALRM", SIGALRM}};
    if (text == NULL || text[0] == '\0')
        return SIGTERM;
    if (strcasecmp(text, "none") == 0)
        return 0;
    if (isdigit((unsigned char)text[0])) {
        char *end;
        long v = strtol(text, &end, 10);
        return *end == '\0' && v >= 0 && v < 65 ? (int)v : -1;
    }
    if (strncasecmp(text, "SIG", 3) == 0)
        text += 3;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].name) == 0)
            return names[i].sig;
    return -1;
}
