/*
 * capi_bench.c - the floor for a managed flock pair (issue 33.8): N x
 * (watchlock_lock_acquire(wait 0) + watchlock_lock_release) of one name on
 * one client through the C API; prints ns per pair. Run by bench/preload/run
 * interleaved with flock_bench on a managed path against the same server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watchlock.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: capi_bench URL NAME N\n");
        return 64;
    }
    long n = atol(argv[3]);
    watchlock_client *c;
    watchlock_lock *l;
    if (watchlock_client_open(&c, argv[1]) != 0 ||
        watchlock_rwlock_new(&l, c, argv[2], strlen(argv[2]), 1) != 0) {
        fprintf(stderr, "capi_bench: %s\n", watchlock_last_error());
        return 1;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (watchlock_lock_acquire(l, 0) != 0 || watchlock_lock_release(l) != 0) {
            fprintf(stderr, "capi_bench: %s\n", watchlock_last_error());
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
    watchlock_lock_free(l);
    watchlock_client_close(c);
    return 0;
}
