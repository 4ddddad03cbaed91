/*
 * locker.c - a test program for the preload shim (tests/preload): takes one
 * lock on PATH with METHOD, prints "LOCKED <fence>" or "FAILED <errno name>"
 * and then obeys lines on stdin: "unlock", "close", "exit" (also at EOF).
 *
 *   locker METHOD PATH      METHOD: flock | flock-nb | flock-sh | flock-sh-nb | setlkw | setlk |
 *                                   rdlkw | rdlk | ofd-setlkw | ofd-setlk | ofd-rdlkw | ofd-rdlk |
 *                                   lockf | tlockf
 * "take METHOD" on stdin locks the same fd again with METHOD (a conversion:
 * LOCK_SH -> LOCK_EX, F_RDLCK -> F_WRLCK and back) and prints as above.
 * Compiled by the tests with the system's cc (no watchlock code in it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int take(const char *m, int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    struct flock rd = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (!strcmp(m, "flock-sh-nb")) return flock(fd, LOCK_SH | LOCK_NB);
    if (!strcmp(m, "rdlkw")) return fcntl(fd, F_SETLKW, &rd);
    if (!strcmp(m, "rdlk")) return fcntl(fd, F_SETLK, &rd);
    if (!strcmp(m, "ofd-rdlkw")) return fcntl(fd, F_OFD_SETLKW, &rd);
    if (!strcmp(m, "ofd-rdlk")) return fcntl(fd, F_OFD_SETLK, &rd);
    if (!strcmp(m, "flock")) return flock(fd, LOCK_EX);
    if (!strcmp(m, "flock-nb")) return flock(fd, LOCK_EX | LOCK_NB);
    if (!strcmp(m, "flock-sh")) return flock(fd, LOCK_SH);
    if (!strcmp(m, "setlkw")) return fcntl(fd, F_SETLKW, &fl);
    if (!strcmp(m, "setlk")) return fcntl(fd, F_SETLK, &fl);
    if (!strcmp(m, "ofd-setlkw")) return fcntl(fd, F_OFD_SETLKW, &fl);
    if (!strcmp(m, "ofd-setlk")) return fcntl(fd, F_OFD_SETLK, &fl);
    if (!strcmp(m, "lockf")) return lockf(fd, F_LOCK, 0);
    if (!strcmp(m, "tlockf")) return lockf(fd, F_TLOCK, 0);
    errno = EINVAL;
    return -1;
}

static int drop(const char *m, int fd)
{
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
    if (!strncmp(m, "flock", 5)) return flock(fd, LOCK_UN);
    if (!strncmp(m, "ofd", 3)) return fcntl(fd, F_OFD_SETLK, &fl);
    if (strstr(m, "lockf")) return lockf(fd, F_ULOCK, 0);
    return fcntl(fd, F_SETLK, &fl);
}

static int take_and_say(const char *m, int fd)
{
    unsetenv("WATCHLOCK_FENCE");
    if (take(m, fd) != 0) {
        int e = errno;
        printf("FAILED %s\n", e == EWOULDBLOCK ? "EWOULDBLOCK" : e == ENOLCK ? "ENOLCK"
                              : e == EINTR ? "EINTR" : e == EACCES ? "EACCES" : strerror(e));
        return -1;
    }
    const char *fence = getenv("WATCHLOCK_FENCE");
    printf("LOCKED %s\n", fence ? fence : "-");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: locker METHOD PATH\n");
        return 64;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = open(argv[2], O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        printf("FAILED open %s\n", strerror(errno));
        return 1;
    }
    if (take_and_say(argv[1], fd) != 0)
        return 1;
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "take ", 5)) {
            take_and_say(line + 5, fd);
        } else if (!strncmp(line, "unlock", 6)) {
            printf(drop(argv[1], fd) == 0 ? "UNLOCKED\n" : "UNLOCK-FAILED\n");
        } else if (!strncmp(line, "close", 5)) {
            close(fd);
            printf("CLOSED\n");
        } else if (!strncmp(line, "exit", 4)) {
            break;
        }
    }
    return 0;
}
