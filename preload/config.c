/*
 * config.c - the preload shim's pure functions (preload.h): globs, lock
 * names, /proc/locks and fdinfo lines, the keeper's socket name and its
 * protocol. Shared by the shim (which runs inside any program, so nothing
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

int wlp_lockline_parse(const char *line, struct wlp_lockline *out)
{
    char cls[16], mode[16], rw[16], devs[64], start[32], end[32];
    long lpid;
    if (strncmp(line, "lock:", 5) == 0)
        line += 5;
    const char *p = strchr(line, ':');
    if (p == NULL)
        return -1;
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "->", 2) == 0)
        return -1;
    if (sscanf(p, "%15s %15s %15s %ld %63s %31s %31s", cls, mode, rw, &lpid, devs, start, end) != 7)
        return -1;
    if (strcmp(cls, "FLOCK") == 0) {
        out->cls = WLP_CLASS_FLOCK;
        out->ofd = 0;
    } else if (strcmp(cls, "POSIX") == 0 || strcmp(cls, "OFDLCK") == 0) {
        out->cls = WLP_CLASS_POSIX;
        out->ofd = cls[0] == 'O';
    } else {
        return -1; /* LEASE, DELEG ... */
    }
    if (strcmp(rw, "WRITE") == 0)
        out->exclusive = 1;
    else if (strcmp(rw, "READ") == 0)
        out->exclusive = 0;
    else
        return -1;
    if (sscanf(devs, "%x:%x:%" SCNu64, &out->dev_major, &out->dev_minor, &out->ino) != 3)
        return -1;
    out->pid = lpid;
    out->whole = strcmp(start, "0") == 0 && strcmp(end, "EOF") == 0;
    return 0;
}

int wlp_fdinfo_mode(const char *text, int cls, unsigned dev_major, unsigned dev_minor, uint64_t ino,
                    long *pid)
{
    int best = 0;
    if (pid != NULL)
        *pid = -1;
    for (const char *p = text; p != NULL && *p != '\0';) {
        struct wlp_lockline l;
        if (strncmp(p, "lock:", 5) == 0 && wlp_lockline_parse(p, &l) == 0 && l.cls == cls &&
            l.dev_major == dev_major && l.dev_minor == dev_minor && l.ino == ino) {
            int m = l.exclusive ? 2 : 1;
            if (m > best) {
                best = m;
                if (pid != NULL)
                    *pid = l.ofd ? -1 : l.pid;
            }
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return best;
}

int wlp_class_name(char *out, size_t size, const char *name, int cls)
{
    int n = snprintf(out, size, "%s%s", cls == WLP_CLASS_POSIX ? "posix:" : "", name);
    return n < 0 || (size_t)n >= size ? -1 : n;
}

int wlp_keeper_socket_name(char *out, size_t size, unsigned uid, uint64_t mntns, uint64_t pidns,
                           const char *url)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a 64 */
    for (const unsigned char *p = (const unsigned char *)(url != NULL ? url : ""); *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    int n = snprintf(out, size, "watchlock-keeper/%u/%" PRIu64 "/%" PRIu64 "/%016" PRIx64, uid,
                     mntns, pidns, h);
    return n < 0 || (size_t)n >= size ? -1 : n;
}

int wlp_request_format(char *out, size_t size, const struct wlp_request *r)
{
    int n = snprintf(out, size, "%c %" PRIu64 " %d %d %d %d %" PRIu64 " %" PRIu64 " %ld %ld %d %s %s",
                     r->op, r->id, r->cls, r->exclusive, r->wait, r->relock, r->dev, r->ino, r->pid, r->pgid,
                     r->fd, r->lease[0] ? r->lease : "-", r->signal[0] ? r->signal : "-");
    if (n < 0 || (size_t)n >= size)
        return -1;
    size_t len = (size_t)n + 1;
    const char *path = r->path != NULL ? r->path : "";
    size_t pl = strlen(path);
    if (len + pl + 1 + r->name_len > size)
        return -1;
    memcpy(out + len, path, pl + 1);
    len += pl + 1;
    if (r->name_len > 0)
        memcpy(out + len, r->name, r->name_len);
    return (int)(len + r->name_len);
}

int wlp_request_parse(char *buf, size_t len, struct wlp_request *r)
{
    memset(r, 0, sizeof *r);
    char *hdr_end = memchr(buf, '\0', len);
    if (hdr_end == NULL)
        return -1;
    char op;
    unsigned long long id, dev, ino;
    if (sscanf(buf, "%c %llu %d %d %d %d %llu %llu %ld %ld %d %31s %31s", &op, &id, &r->cls,
               &r->exclusive, &r->wait, &r->relock, &dev, &ino, &r->pid, &r->pgid, &r->fd, r->lease,
               r->signal) != 13)
        return -1;
    if (op != 'L' && op != 'C' && op != 'U' && op != 'P')
        return -1;
    r->op = op;
    r->id = id;
    r->dev = dev;
    r->ino = ino;
    if (strcmp(r->lease, "-") == 0)
        r->lease[0] = '\0';
    if (strcmp(r->signal, "-") == 0)
        r->signal[0] = '\0';
    char *path = hdr_end + 1;
    char *path_end = path < buf + len ? memchr(path, '\0', (size_t)(buf + len - path)) : NULL;
    if (path_end == NULL)
        return -1;
    r->path = path;
    r->name = path_end + 1;
    r->name_len = (size_t)(buf + len - (path_end + 1));
    buf[len] = '\0';
    return 0;
}
