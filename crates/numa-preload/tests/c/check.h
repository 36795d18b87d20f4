/* Shared helpers of the numa-preload C test corpus. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

#define CHECK_RC(expr, want)                                                   \
    do {                                                                       \
        int rc_ = (expr);                                                      \
        if (rc_ != (want)) {                                                   \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s)\n",      \
                    __FILE__, __LINE__, #expr, rc_, strerror(rc_), (want),     \
                    strerror(want));                                           \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* An absolute time `ms` milliseconds from now on `clock`. */
static inline struct timespec in_ms(clockid_t clock, long ms) {
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    while (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (t.tv_nsec < 0) {
        t.tv_sec--;
        t.tv_nsec += 1000000000L;
    }
    return t;
}

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Whether thread `tid` of this process sleeps in the kernel (state S). */
static inline int thread_sleeping(int tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'S';
}

/* Waits until thread `tid` sleeps in the kernel, for at most `max_s` seconds
 * (a spinning lock may keep it running a while; the caller's verdict must not
 * depend on it). */
static inline void wait_sleeping(int tid, double max_s) {
    double end = now_s() + max_s;
    while (thread_sleeping(tid) == 0 && now_s() < end) sched_yield();
}
