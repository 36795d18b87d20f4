/* Every mutex type and return code: normal, adaptive, recursive (attribute and
 * static initializer), errorcheck; trylock, timedlock, clocklock; destroy of a
 * locked mutex; robust, PI, PP and process-shared mutexes (forwarded to glibc);
 * mutual exclusion under contention for each type. */
#include "check.h"

#define THREADS 8
#define ITERS 20000

static pthread_mutex_t *shared_m;
static long counter;

static void *hammer(void *arg) {
    (void)arg;
    for (int i = 0; i < ITERS; i++) {
        CHECK_RC(pthread_mutex_lock(shared_m), 0);
        long c = counter;
        if ((i & 63) == 0) sched_yield();
        counter = c + 1;
        CHECK_RC(pthread_mutex_unlock(shared_m), 0);
    }
    return NULL;
}

static void exclusion(pthread_mutex_t *m, const char *what) {
    pthread_t t[THREADS];
    shared_m = m;
    counter = 0;
    for (int i = 0; i < THREADS; i++) CHECK_RC(pthread_create(&t[i], NULL, hammer, NULL), 0);
    for (int i = 0; i < THREADS; i++) CHECK_RC(pthread_join(t[i], NULL), 0);
    if (counter != (long)THREADS * ITERS) {
        fprintf(stderr, "%s: lost updates: %ld != %d\n", what, counter, THREADS * ITERS);
        exit(1);
    }
}

static pthread_mutex_t *other_m;
static int other_rc;
static void *try_other(void *arg) {
    (void)arg;
    other_rc = pthread_mutex_trylock(other_m);
    return NULL;
}
static void *unlock_other(void *arg) {
    (void)arg;
    other_rc = pthread_mutex_unlock(other_m);
    return NULL;
}
static int in_thread(void *(*f)(void *), pthread_mutex_t *m) {
    pthread_t t;
    other_m = m;
    CHECK_RC(pthread_create(&t, NULL, f, NULL), 0);
    CHECK_RC(pthread_join(t, NULL), 0);
    return other_rc;
}

static void init_kind(pthread_mutex_t *m, int kind) {
    pthread_mutexattr_t a;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_settype(&a, kind), 0);
    CHECK_RC(pthread_mutex_init(m, &a), 0);
    CHECK_RC(pthread_mutexattr_destroy(&a), 0);
}

static void *die_holding(void *arg) {
    CHECK_RC(pthread_mutex_lock((pthread_mutex_t *)arg), 0);
    return NULL; /* exits while holding the robust mutex */
}

int main(void) {
    /* Normal, static initializer. */
    static pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER;
    CHECK_RC(pthread_mutex_lock(&normal), 0);
    CHECK_RC(pthread_mutex_trylock(&normal), EBUSY);
    CHECK_RC(in_thread(try_other, &normal), EBUSY);
    CHECK_RC(pthread_mutex_destroy(&normal), EBUSY);
    CHECK_RC(pthread_mutex_unlock(&normal), 0);
    exclusion(&normal, "normal");

    /* Timed and clock locks. */
    struct timespec t;
    CHECK_RC(pthread_mutex_lock(&normal), 0);
    double t0 = now_s();
    t = in_ms(CLOCK_REALTIME, 50);
    CHECK_RC(pthread_mutex_timedlock(&normal, &t), ETIMEDOUT);
    CHECK(now_s() - t0 >= 0.045);
    t = in_ms(CLOCK_MONOTONIC, 20);
    CHECK_RC(pthread_mutex_clocklock(&normal, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    CHECK_RC(pthread_mutex_clocklock(&normal, CLOCK_PROCESS_CPUTIME_ID, &t), EINVAL);
    t.tv_nsec = 2000000000L;
    CHECK_RC(pthread_mutex_timedlock(&normal, &t), EINVAL);
    t = in_ms(CLOCK_REALTIME, -10);
    CHECK_RC(pthread_mutex_timedlock(&normal, &t), ETIMEDOUT);
    CHECK_RC(pthread_mutex_unlock(&normal), 0);
    t = in_ms(CLOCK_REALTIME, 10);
    CHECK_RC(pthread_mutex_timedlock(&normal, &t), 0);
    CHECK_RC(pthread_mutex_unlock(&normal), 0);
    t = in_ms(CLOCK_MONOTONIC, 10);
    CHECK_RC(pthread_mutex_clocklock(&normal, CLOCK_MONOTONIC, &t), 0);
    CHECK_RC(pthread_mutex_unlock(&normal), 0);

    /* Adaptive. */
    static pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    CHECK_RC(pthread_mutex_lock(&adaptive), 0);
    CHECK_RC(pthread_mutex_trylock(&adaptive), EBUSY);
    CHECK_RC(pthread_mutex_unlock(&adaptive), 0);
    exclusion(&adaptive, "adaptive");

    /* Recursive: static initializer and attribute. */
    static pthread_mutex_t rec_static = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    pthread_mutex_t rec_attr;
    init_kind(&rec_attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_t *recs[2] = {&rec_static, &rec_attr};
    for (int r = 0; r < 2; r++) {
        pthread_mutex_t *m = recs[r];
        CHECK_RC(pthread_mutex_lock(m), 0);
        CHECK_RC(pthread_mutex_lock(m), 0);
        CHECK_RC(pthread_mutex_trylock(m), 0);
        t = in_ms(CLOCK_REALTIME, 10);
        CHECK_RC(pthread_mutex_timedlock(m, &t), 0);
        CHECK_RC(in_thread(try_other, m), EBUSY);
        CHECK_RC(in_thread(unlock_other, m), EPERM);
        for (int i = 0; i < 3; i++) CHECK_RC(pthread_mutex_unlock(m), 0);
        CHECK_RC(in_thread(try_other, m), EBUSY); /* still held once */
        CHECK_RC(pthread_mutex_unlock(m), 0);
        CHECK_RC(pthread_mutex_unlock(m), EPERM); /* not held any more */
        exclusion(m, "recursive");
    }

    /* Errorcheck: static initializer and attribute. */
    static pthread_mutex_t ec_static = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    pthread_mutex_t ec_attr;
    init_kind(&ec_attr, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_t *ecs[2] = {&ec_static, &ec_attr};
    for (int r = 0; r < 2; r++) {
        pthread_mutex_t *m = ecs[r];
        CHECK_RC(pthread_mutex_unlock(m), EPERM);
        CHECK_RC(pthread_mutex_lock(m), 0);
        CHECK_RC(pthread_mutex_lock(m), EDEADLK);
        t = in_ms(CLOCK_REALTIME, 10);
        CHECK_RC(pthread_mutex_timedlock(m, &t), EDEADLK);
        CHECK_RC(pthread_mutex_trylock(m), EBUSY);
        CHECK_RC(in_thread(unlock_other, m), EPERM);
        CHECK_RC(pthread_mutex_unlock(m), 0);
        CHECK_RC(pthread_mutex_unlock(m), EPERM);
        exclusion(m, "errorcheck");
    }

    /* Init/destroy cycles (cst allocates nothing until contended; destroy frees). */
    for (int i = 0; i < 20000; i++) {
        pthread_mutex_t m;
        init_kind(&m, i % 4 == 1 ? PTHREAD_MUTEX_RECURSIVE : PTHREAD_MUTEX_NORMAL);
        CHECK_RC(pthread_mutex_lock(&m), 0);
        CHECK_RC(pthread_mutex_unlock(&m), 0);
        CHECK_RC(pthread_mutex_destroy(&m), 0);
    }
    pthread_mutex_t cyc;
    CHECK_RC(pthread_mutex_init(&cyc, NULL), 0);
    exclusion(&cyc, "init(NULL)");
    CHECK_RC(pthread_mutex_destroy(&cyc), 0);

    /* Robust: the owner dies, the next locker gets EOWNERDEAD (glibc's). */
    pthread_mutex_t robust;
    pthread_mutexattr_t a;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
    CHECK_RC(pthread_mutex_init(&robust, &a), 0);
    pthread_t th;
    CHECK_RC(pthread_create(&th, NULL, die_holding, &robust), 0);
    CHECK_RC(pthread_join(th, NULL), 0);
    CHECK_RC(pthread_mutex_lock(&robust), EOWNERDEAD);
    CHECK_RC(pthread_mutex_consistent(&robust), 0);
    CHECK_RC(pthread_mutex_unlock(&robust), 0);
    exclusion(&robust, "robust");
    CHECK_RC(pthread_mutex_destroy(&robust), 0);

    /* Priority inheritance. */
    pthread_mutex_t pi;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT), 0);
    CHECK_RC(pthread_mutex_init(&pi, &a), 0);
    CHECK_RC(pthread_mutex_lock(&pi), 0);
    CHECK_RC(in_thread(try_other, &pi), EBUSY);
    CHECK_RC(pthread_mutex_unlock(&pi), 0);
    exclusion(&pi, "prio-inherit");

    /* Priority protect: glibc checks the ceiling against the caller's priority. */
    pthread_mutex_t pp;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_PROTECT), 0);
    CHECK_RC(pthread_mutex_init(&pp, &a), 0);
    int ceiling = -1;
    CHECK_RC(pthread_mutex_getprioceiling(&pp, &ceiling), 0);
    CHECK(ceiling >= 0);

    /* Process-shared. */
    pthread_mutex_t ps;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    CHECK_RC(pthread_mutex_init(&ps, &a), 0);
    exclusion(&ps, "pshared");
    CHECK_RC(pthread_mutex_destroy(&ps), 0);

    /* glibc's EINVAL after destroy. */
    pthread_mutex_t gone;
    CHECK_RC(pthread_mutex_init(&gone, NULL), 0);
    CHECK_RC(pthread_mutex_destroy(&gone), 0);
    CHECK_RC(pthread_mutex_trylock(&gone), EINVAL);

    puts("mutex_types: ok");
    return 0;
}
