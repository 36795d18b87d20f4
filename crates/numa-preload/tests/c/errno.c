/* glibc's pthread functions never change errno, and a timed wait whose deadline
 * has a negative tv_sec has already timed out:
 * - a contended pthread_mutex_lock (the waiter parks on a futex, whose wait can
 *   fail with EAGAIN) keeps the caller's errno;
 * - a pthread_cond_timedwait that times out (the futex fails with ETIMEDOUT)
 *   returns ETIMEDOUT and keeps errno;
 * - pthread_cond_timedwait with tv_sec = -1 returns ETIMEDOUT, with the mutex
 *   still held (the kernel rejects such a timeout with EINVAL). */
#include "check.h"
#include <stdatomic.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_int ready;

#define SENTINEL ENOENT

static void *contender(void *arg) {
    (void)arg;
    atomic_store(&ready, 1);
    errno = SENTINEL;
    CHECK_RC(pthread_mutex_lock(&m), 0);
    int e = errno;
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    return (void *)(long)e;
}

int main(void) {
    /* A contended lock, many times: the futex wait fails only in some
     * interleavings. The holder keeps the lock until the contender has asked
     * for it and a little longer, so it waits (the harness checks from the
     * lock's own counters that locks were contended). */
    for (int round = 0; round < 100; round++) {
        pthread_t t;
        atomic_store(&ready, 0);
        CHECK_RC(pthread_mutex_lock(&m), 0);
        CHECK_RC(pthread_create(&t, NULL, contender, NULL), 0);
        while (!atomic_load(&ready))
            sched_yield();
        for (int i = 0; i < round % 4; i++)
            sched_yield();
        usleep(round % 3 == 0 ? 0 : 200);
        CHECK_RC(pthread_mutex_unlock(&m), 0);
        void *e;
        CHECK_RC(pthread_join(t, &e), 0);
        if ((long)e != SENTINEL) {
            fprintf(stderr, "errno after a contended lock: %ld (%s), want %d\n",
                    (long)e, strerror((int)(long)e), SENTINEL);
            return 1;
        }
    }

    /* A timed-out wait keeps errno. */
    CHECK_RC(pthread_mutex_lock(&m), 0);
    struct timespec soon = in_ms(CLOCK_REALTIME, 1);
    errno = SENTINEL;
    CHECK_RC(pthread_cond_timedwait(&cv, &m, &soon), ETIMEDOUT);
    CHECK(errno == SENTINEL);

    /* A deadline before the epoch has passed: ETIMEDOUT, at once, every time,
     * with the mutex still held. */
    struct timespec before_epoch = {.tv_sec = -1, .tv_nsec = 0};
    for (int i = 0; i < 3; i++) {
        errno = SENTINEL;
        CHECK_RC(pthread_cond_timedwait(&cv, &m, &before_epoch), ETIMEDOUT);
        CHECK(errno == SENTINEL);
    }
    CHECK_RC(pthread_mutex_trylock(&m), EBUSY);
    CHECK_RC(pthread_mutex_unlock(&m), 0);

    printf("errno: ok\n");
    return 0;
}
