/*
 * nb_timer.c - a test program for the preload shim (tests/preload,
 * test_keeper.py): LOCK_NB lock/unlock pairs on PATH under a 1 ms interval
 * timer whose handler has no SA_RESTART, as a C program with a tick does.
 * The kernel never returns EINTR for LOCK_NB (it does not wait); prints
 * "ok N eintr N enolck N other N". Compiled by the tests with the system's cc.
 *
 *   nb_timer PATH ROUNDS [flock|setlk]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;

static void on_tick(int sig)
{
    (void)sig;
    ticks++;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 64;
    int rounds = atoi(argv[2]);
    int posix = argc > 3 && strcmp(argv[3], "setlk") == 0;
    int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
    if (fd < 0)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick; /* no SA_RESTART */
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    int ok = 0, eintr = 0, enolck = 0, other = 0;
    for (int i = 0; i < rounds; i++) {
        struct flock wr = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
        int rc = posix ? fcntl(fd, F_SETLK, &wr) : flock(fd, LOCK_EX | LOCK_NB);
        if (rc == 0) {
            ok++;
            if (posix)
                fcntl(fd, F_SETLK, &un);
            else
                flock(fd, LOCK_UN);
        } else if (errno == EINTR) {
            eintr++;
        } else if (errno == ENOLCK) {
            enolck++;
        } else {
            other++;
        }
    }
    printf("ok %d eintr %d enolck %d other %d ticks %d\n", ok, eintr, enolck, other, (int)ticks);
    return 0;
}
