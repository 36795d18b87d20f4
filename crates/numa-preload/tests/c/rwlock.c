/* Reader-writer locks: readers inside together, writers exclusive, try forms
 * (EBUSY), EDEADLK for the write holder, timed forms (ETIMEDOUT, EINVAL),
 * recursive read locks while a writer waits, the writer-nonrecursive static
 * initializer, a process-shared rwlock, init/destroy cycles. */
#include "check.h"

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static int inside, max_inside, writers_inside;
static long data[4];
static pthread_mutex_t stat_m = PTHREAD_MUTEX_INITIALIZER;

static void *reader(void *arg) {
    (void)arg;
    for (int i = 0; i < 3000; i++) {
        CHECK_RC(pthread_rwlock_rdlock(&rw), 0);
        CHECK(writers_inside == 0);
        long d0 = data[0];
        for (int k = 1; k < 4; k++) CHECK(data[k] == d0);
        __atomic_add_fetch(&inside, 1, __ATOMIC_SEQ_CST);
        if (i % 500 == 0) usleep(2000); /* give other readers time to come in */
        int now = __atomic_load_n(&inside, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&stat_m);
        if (now > max_inside) max_inside = now;
        pthread_mutex_unlock(&stat_m);
        __atomic_sub_fetch(&inside, 1, __ATOMIC_SEQ_CST);
        CHECK_RC(pthread_rwlock_unlock(&rw), 0);
    }
    return NULL;
}

static void *writer(void *arg) {
    (void)arg;
    for (int i = 0; i < 3000; i++) {
        CHECK_RC(pthread_rwlock_wrlock(&rw), 0);
        CHECK(__atomic_add_fetch(&writers_inside, 1, __ATOMIC_SEQ_CST) == 1);
        CHECK(__atomic_load_n(&inside, __ATOMIC_SEQ_CST) == 0);
        for (int k = 0; k < 4; k++) data[k]++;
        __atomic_sub_fetch(&writers_inside, 1, __ATOMIC_SEQ_CST);
        CHECK_RC(pthread_rwlock_unlock(&rw), 0);
    }
    return NULL;
}

static int other_rc;
static void *try_read(void *arg) {
    other_rc = pthread_rwlock_tryrdlock((pthread_rwlock_t *)arg);
    if (other_rc == 0) pthread_rwlock_unlock((pthread_rwlock_t *)arg);
    return NULL;
}
static void *try_write(void *arg) {
    other_rc = pthread_rwlock_trywrlock((pthread_rwlock_t *)arg);
    if (other_rc == 0) pthread_rwlock_unlock((pthread_rwlock_t *)arg);
    return NULL;
}
static void *timed_write(void *arg) {
    struct timespec t = in_ms(CLOCK_REALTIME, 30);
    other_rc = pthread_rwlock_timedwrlock((pthread_rwlock_t *)arg, &t);
    return NULL;
}
static int run(void *(*f)(void *), void *a) {
    pthread_t t;
    CHECK_RC(pthread_create(&t, NULL, f, a), 0);
    CHECK_RC(pthread_join(t, NULL), 0);
    return other_rc;
}

static volatile int writer_done;
static void *blocking_writer(void *arg) {
    CHECK_RC(pthread_rwlock_wrlock((pthread_rwlock_t *)arg), 0);
    writer_done = 1;
    CHECK_RC(pthread_rwlock_unlock((pthread_rwlock_t *)arg), 0);
    return NULL;
}

int main(void) {
    pthread_t r[6], w[2];
    for (int i = 0; i < 6; i++) CHECK_RC(pthread_create(&r[i], NULL, reader, NULL), 0);
    for (int i = 0; i < 2; i++) CHECK_RC(pthread_create(&w[i], NULL, writer, NULL), 0);
    for (int i = 0; i < 6; i++) CHECK_RC(pthread_join(r[i], NULL), 0);
    for (int i = 0; i < 2; i++) CHECK_RC(pthread_join(w[i], NULL), 0);
    CHECK(data[0] == 6000);
    if (max_inside < 2) {
        fprintf(stderr, "readers never overlapped (max %d)\n", max_inside);
        return 1;
    }

    pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
    struct timespec t;
    /* Read held: other readers yes, writers no. */
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(run(try_read, &l), 0);
    CHECK_RC(run(try_write, &l), EBUSY);
    CHECK_RC(run(timed_write, &l), ETIMEDOUT);
    /* Recursive read while a writer waits must not deadlock. */
    pthread_t bw;
    writer_done = 0;
    CHECK_RC(pthread_create(&bw, NULL, blocking_writer, &l), 0);
    usleep(20000);
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(pthread_rwlock_tryrdlock(&l), 0);
    CHECK(!writer_done);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    CHECK_RC(pthread_join(bw, NULL), 0);
    CHECK(writer_done);

    /* Write held: EDEADLK for the holder, EBUSY for others. */
    CHECK_RC(pthread_rwlock_wrlock(&l), 0);
    CHECK_RC(pthread_rwlock_wrlock(&l), EDEADLK);
    CHECK_RC(pthread_rwlock_rdlock(&l), EDEADLK);
    CHECK_RC(run(try_read, &l), EBUSY);
    CHECK_RC(run(try_write, &l), EBUSY);
    {
        /* POSIX lets destroy of a locked rwlock fail with EBUSY (ours) or not
         * check at all (glibc, which then leaves the lock unchanged). */
        int rc = pthread_rwlock_destroy(&l);
        CHECK(rc == EBUSY || rc == 0);
    }
    CHECK_RC(pthread_rwlock_unlock(&l), 0);

    /* Timed forms on a free lock, bad times, clocks. */
    t = in_ms(CLOCK_REALTIME, 10);
    CHECK_RC(pthread_rwlock_timedrdlock(&l, &t), 0);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    t = in_ms(CLOCK_MONOTONIC, 10);
    CHECK_RC(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &t), 0);
    t.tv_nsec = 1000000000L;
    CHECK_RC(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &t), EINVAL); /* checked first, as glibc */
    t = in_ms(CLOCK_MONOTONIC, 10);
    CHECK_RC(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &t), EDEADLK);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    CHECK_RC(pthread_rwlock_wrlock(&l), 0);
    {
        /* from another thread: EINVAL for a bad timespec while the lock is busy */
        pthread_t x;
        static pthread_rwlock_t *lp;
        lp = &l;
        void *bad(void *a) {
            (void)a;
            struct timespec b = {0, -5};
            other_rc = pthread_rwlock_timedrdlock(lp, &b);
            return NULL;
        }
        CHECK_RC(pthread_create(&x, NULL, bad, NULL), 0);
        CHECK_RC(pthread_join(x, NULL), 0);
        CHECK_RC(other_rc, EINVAL);
    }
    CHECK_RC(pthread_rwlock_unlock(&l), 0);

    /* Writer-nonrecursive initializer. */
    pthread_rwlock_t wn = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    CHECK_RC(pthread_rwlock_rdlock(&wn), 0);
    CHECK_RC(pthread_rwlock_unlock(&wn), 0);
    CHECK_RC(pthread_rwlock_wrlock(&wn), 0);
    CHECK_RC(pthread_rwlock_unlock(&wn), 0);

    /* Process-shared (glibc's). */
    pthread_rwlockattr_t a;
    pthread_rwlock_t ps;
    CHECK_RC(pthread_rwlockattr_init(&a), 0);
    CHECK_RC(pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    CHECK_RC(pthread_rwlock_init(&ps, &a), 0);
    CHECK_RC(pthread_rwlock_wrlock(&ps), 0);
    CHECK_RC(run(try_read, &ps), EBUSY);
    CHECK_RC(pthread_rwlock_unlock(&ps), 0);
    CHECK_RC(pthread_rwlock_destroy(&ps), 0);

    for (int i = 0; i < 10000; i++) {
        pthread_rwlock_t x;
        CHECK_RC(pthread_rwlock_init(&x, NULL), 0);
        CHECK_RC(pthread_rwlock_rdlock(&x), 0);
        CHECK_RC(pthread_rwlock_unlock(&x), 0);
        CHECK_RC(pthread_rwlock_wrlock(&x), 0);
        CHECK_RC(pthread_rwlock_unlock(&x), 0);
        CHECK_RC(pthread_rwlock_destroy(&x), 0);
    }
    /* Many read locks held at once: all granted, or EAGAIN (POSIX) only past
     * the 32 distinct rwlocks our per-thread read table tracks; released in a
     * different order than taken. */
    {
        enum { N = 40 };
        static pthread_rwlock_t many[N];
        int rc[N], granted = 0;
        for (int i = 0; i < N; i++) {
            CHECK_RC(pthread_rwlock_init(&many[i], NULL), 0);
            rc[i] = pthread_rwlock_rdlock(&many[i]);
            CHECK(rc[i] == 0 || rc[i] == EAGAIN);
            granted += rc[i] == 0;
        }
        CHECK(granted >= 32);
        for (int i = 0; i < N; i += 2)
            if (rc[i] == 0) CHECK_RC(pthread_rwlock_unlock(&many[i]), 0);
        for (int i = 1; i < N; i += 2)
            if (rc[i] == 0) CHECK_RC(pthread_rwlock_unlock(&many[i]), 0);
        for (int i = 0; i < N; i++) {
            CHECK_RC(pthread_rwlock_trywrlock(&many[i]), 0); /* all released */
            CHECK_RC(pthread_rwlock_unlock(&many[i]), 0);
        }
    }

    puts("rwlock: ok");
    return 0;
}
