/*
 * flock_bench.c - the preload shim's cost on a path it does not manage:
 * N x (flock(LOCK_EX) + flock(LOCK_UN)) on one file; prints ns per pair.
 * Run by bench/preload/run with and without LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: flock_bench PATH N\n");
        return 64;
    }
    long n = atol(argv[2]);
    int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
    if (fd < 0)
        return 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (flock(fd, LOCK_EX) != 0 || flock(fd, LOCK_UN) != 0)
            return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n;
    printf("%.1f\n", ns);
    return 0;
}
