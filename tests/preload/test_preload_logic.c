/*
 * test_preload_logic.c - the preload shim's pure functions (preload/config.c)
 * without LD_PRELOAD, so that they run under the sanitizer builds too (a
 * preloaded shim under ASan would need the sanitizer's runtime preloaded
 * first). The shim itself is tested with real processes in test_preload.py.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "preload.h"

static int failures;
#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            failures++;                                                               \
        }                                                                             \
    } while (0)

int main(void)
{
    struct wlp_config cfg;
    wlp_config_parse_paths(&cfg, NULL);
    CHECK(cfg.nglobs == 0 && cfg.bad == NULL);
    wlp_config_parse_paths(&cfg, "/var/lock/*.lock::/srv/app.lock");
    CHECK(cfg.nglobs == 2 && cfg.bad == NULL);
    CHECK(wlp_config_match(&cfg, "/var/lock/job.lock"));
    CHECK(!wlp_config_match(&cfg, "/var/lock/sub/job.lock")); /* '*' does not cross '/' */
    CHECK(wlp_config_match(&cfg, "/srv/app.lock"));
    CHECK(!wlp_config_match(&cfg, "/srv/app.lock2"));
    wlp_config_parse_paths(&cfg, "/ok/*:relative/*");
    CHECK(cfg.bad != NULL && cfg.nglobs == 0);

    char buf[256];
    CHECK(wlp_fd_path(buf, sizeof buf, "/a/b (deleted)", 14) == 0 && strcmp(buf, "/a/b") == 0);
    CHECK(wlp_fd_path(buf, sizeof buf, "pipe:[123]", 10) == -1);
    CHECK(wlp_fd_path(buf, 4, "/abcd", 5) == -1);

    CHECK(wlp_lock_name(buf, sizeof buf, "/var/lock/x", NULL, NULL) == 11 && !strcmp(buf, "/var/lock/x"));
    CHECK(wlp_lock_name(buf, sizeof buf, "/var/lock/x", "fleet:", "/var/lock/=/locks/") > 0 &&
          !strcmp(buf, "fleet:/locks/x"));
    CHECK(wlp_lock_name(buf, sizeof buf, "/other/x", NULL, "/var/lock/=/locks/") > 0 &&
          !strcmp(buf, "/other/x"));
    CHECK(wlp_lock_name(buf, sizeof buf, "/x", NULL, "no-equals") == -1);
    CHECK(wlp_lock_name(buf, 4, "/var/lock/x", NULL, NULL) == -1);

    CHECK(wlp_signal_parse(NULL) == SIGTERM);
    CHECK(wlp_signal_parse("none") == 0);
    CHECK(wlp_signal_parse("SIGUSR1") == SIGUSR1);
    CHECK(wlp_signal_parse("hup") == SIGHUP);
    CHECK(wlp_signal_parse("9") == SIGKILL);
    CHECK(wlp_signal_parse("BOGUS") == -1);
    CHECK(wlp_signal_parse("99") == -1);

    /* issue 33: /proc/locks and fdinfo lines, names, the keeper's socket and protocol */
    struct wlp_lockline ll;
    CHECK(wlp_lockline_parse("1: FLOCK  ADVISORY  WRITE 4711 00:2d:123456 0 EOF", &ll) == 0 &&
          ll.cls == WLP_CLASS_FLOCK && ll.exclusive && ll.pid == 4711 && ll.dev_minor == 0x2d &&
          ll.ino == 123456 && ll.whole);
    CHECK(wlp_lockline_parse("2: POSIX  ADVISORY  WRITE 9 fe:00:5 20 EOF", &ll) == 0 &&
          ll.cls == WLP_CLASS_POSIX && !ll.whole && !ll.ofd); /* what a partial unlock leaves */
    CHECK(wlp_lockline_parse("3: OFDLCK ADVISORY  READ -1 fe:00:5 0 EOF", &ll) == 0 &&
          ll.cls == WLP_CLASS_POSIX && ll.ofd && !ll.exclusive);
    CHECK(wlp_lockline_parse("4: -> FLOCK  ADVISORY  WRITE 1 00:2d:1 0 EOF", &ll) == -1);
    CHECK(wlp_lockline_parse("5: LEASE  ACTIVE    READ 1 00:2d:1 0 EOF", &ll) == -1);
    const char *fdinfo = "pos:\t0\nflags:\t0100002\nmnt_id:\t30\nino:\t123456\n"
                         "lock:\t1: FLOCK  ADVISORY  WRITE 4711 00:2d:123456 0 EOF\n";
    long lpid = 0;
    CHECK(wlp_fdinfo_mode(fdinfo, WLP_CLASS_FLOCK, 0, 0x2d, 123456, &lpid) == 2 && lpid == 4711);
    CHECK(wlp_fdinfo_mode(fdinfo, WLP_CLASS_POSIX, 0, 0x2d, 123456, NULL) == 0);
    CHECK(wlp_fdinfo_mode(fdinfo, WLP_CLASS_FLOCK, 0, 0x2d, 1, NULL) == 0);
    char nm[64];
    CHECK(wlp_class_name(nm, sizeof nm, "/var/lock/a", WLP_CLASS_FLOCK) == 11 && strcmp(nm, "/var/lock/a") == 0);
    CHECK(wlp_class_name(nm, sizeof nm, "/var/lock/a", WLP_CLASS_POSIX) > 0 &&
          strcmp(nm, "posix:/var/lock/a") == 0);
    char s1[200], s2[200];
    CHECK(wlp_keeper_socket_name(s1, sizeof s1, 0, 1, 2, "redis://a") > 0);
    CHECK(wlp_keeper_socket_name(s2, sizeof s2, 0, 1, 2, "redis://b") > 0 && strcmp(s1, s2) != 0);
    CHECK(wlp_keeper_socket_name(s2, sizeof s2, 0, 3, 2, "redis://a") > 0 && strcmp(s1, s2) != 0);
    struct wlp_request q = {.op = 'L', .id = 7, .cls = 1, .exclusive = 1, .wait = 0, .relock = 1,
                            .dev = 65024, .ino = 99, .pid = 42, .pgid = 41, .fd = 9,
                            .path = "/var/lock/a b", .name = "n\0x", .name_len = 3};
    snprintf(q.lease, sizeof q.lease, "3s");
    char msg[WLP_MSG_MAX + 1];
    int ml = wlp_request_format(msg, sizeof msg - 1, &q);
    struct wlp_request back;
    CHECK(ml > 0 && wlp_request_parse(msg, (size_t)ml, &back) == 0 && back.op == 'L' && back.id == 7 &&
          back.cls == 1 && back.exclusive == 1 && back.wait == 0 && back.relock == 1 &&
          back.dev == 65024 && back.ino == 99 && back.pid == 42 && back.pgid == 41 && back.fd == 9 &&
          strcmp(back.lease, "3s") == 0 && back.signal[0] == '\0' &&
          strcmp(back.path, "/var/lock/a b") == 0 && back.name_len == 3 &&
          memcmp(back.name, "n\0x", 3) == 0);
    CHECK(wlp_request_parse(msg, 5, &back) == -1);
    struct wlp_request u = {.op = 'U'};
    ml = wlp_request_format(msg, sizeof msg - 1, &u);
    CHECK(ml > 0 && wlp_request_parse(msg, (size_t)ml, &back) == 0 && back.op == 'U');
    struct wlp_request f = {.op = 'P', .pid = 4711}; /* a forked child names itself */
    ml = wlp_request_format(msg, sizeof msg - 1, &f);
    CHECK(ml > 0 && wlp_request_parse(msg, (size_t)ml, &back) == 0 && back.op == 'P' && back.pid == 4711);
    struct wlp_request bad = {.op = 'X'};
    ml = wlp_request_format(msg, sizeof msg - 1, &bad);
    CHECK(ml > 0 && wlp_request_parse(msg, (size_t)ml, &back) == -1);

    if (failures == 0)
        printf("test_preload_logic: all checks passed\n");
    return failures != 0;
}
