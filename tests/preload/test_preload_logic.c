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

    CHECK(wlp_fence_var(buf, sizeof buf, "/var/lock/job.lock") > 0 &&
          !strcmp(buf, "WATCHLOCK_FENCE__VAR_LOCK_JOB_LOCK"));

    CHECK(wlp_kernel_id(buf, sizeof buf, "boot", 7, 64, 99, WLP_FAMILY_FLOCK) > 0 &&
          !strcmp(buf, "boot/7/64/99/flock"));

    const char *l1 = "1: FLOCK  ADVISORY  WRITE 4711 00:2d:123456 0 EOF\n";
    CHECK(wlp_proc_locks_line_matches(l1, WLP_FAMILY_FLOCK, 0, 0x2d, 123456, 4711));
    CHECK(!wlp_proc_locks_line_matches(l1, WLP_FAMILY_FLOCK, 0, 0x2d, 123456, 4712));
    CHECK(wlp_proc_locks_line_matches(l1, WLP_FAMILY_FLOCK, 0, 0x2d, 123456, -1));
    CHECK(!wlp_proc_locks_line_matches(l1, WLP_FAMILY_POSIX, 0, 0x2d, 123456, 4711));
    CHECK(!wlp_proc_locks_line_matches(l1, WLP_FAMILY_FLOCK, 0, 0x2d, 12345, 4711));
    CHECK(!wlp_proc_locks_line_matches("2: -> FLOCK  ADVISORY  WRITE 4711 00:2d:123456 0 EOF",
                                       WLP_FAMILY_FLOCK, 0, 0x2d, 123456, 4711));
    CHECK(wlp_proc_locks_line_matches("3: POSIX  ADVISORY  WRITE 9 fe:00:5 0 EOF", WLP_FAMILY_POSIX,
                                      0xfe, 0, 5, 9));
    CHECK(!wlp_proc_locks_line_matches("3: POSIX  ADVISORY  WRITE 9 fe:00:5 0 99", WLP_FAMILY_POSIX,
                                       0xfe, 0, 5, 9)); /* a byte range */
    CHECK(wlp_proc_locks_line_matches("4: OFDLCK ADVISORY  READ -1 fe:00:5 0 EOF", WLP_FAMILY_OFD,
                                      0xfe, 0, 5, 123));
    CHECK(!wlp_proc_locks_line_matches("garbage", WLP_FAMILY_OFD, 0xfe, 0, 5, -1));

    CHECK(wlp_signal_parse(NULL) == SIGTERM);
    CHECK(wlp_signal_parse("none") == 0);
    CHECK(wlp_signal_parse("SIGUSR1") == SIGUSR1);
    CHECK(wlp_signal_parse("hup") == SIGHUP);
    CHECK(wlp_signal_parse("9") == SIGKILL);
    CHECK(wlp_signal_parse("BOGUS") == -1);
    CHECK(wlp_signal_parse("99") == -1);

    if (failures == 0)
        printf("test_preload_logic: all checks passed\n");
    return failures != 0;
}
