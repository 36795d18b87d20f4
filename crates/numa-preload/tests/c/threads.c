/* Thousands of short-lived threads, each taking contended mutexes, condvars
 * and an rwlock (queue-node slots must be recycled: no thread-count limit),
 * and locks taken in an ELF constructor before main, from threads started
 * there, and from detached threads exiting while others wait. */
#include "check.h"

#define ROUNDS 50
#define PER_ROUND 100 /* 5000 threads in all */

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long counter;

static void *short_lived(void *arg) {
    (void)arg;
    for (int i = 0; i < 50; i++) {
        CHECK_RC(pthread_mutex_lock(&m), 0);
        counter++;
        CHECK_RC(pthread_mutex_unlock(&m), 0);
    }
    CHECK_RC(pthread_mutex_lock(&rec), 0);
    CHECK_RC(pthread_mutex_lock(&rec), 0);
    CHECK_RC(pthread_mutex_unlock(&rec), 0);
    CHECK_RC(pthread_mutex_unlock(&rec), 0);
    CHECK_RC(pthread_rwlock_rdlock(&rw), 0);
    CHECK_RC(pthread_rwlock_unlock(&rw), 0);
    return NULL;
}

static long ctor_counter;
static void *ctor_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&m);
        ctor_counter++;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

__attribute__((constructor)) static void before_main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, ctor_worker, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
}

int main(void) {
    CHECK(ctor_counter == 30000);
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t t[PER_ROUND];
        for (int i = 0; i < PER_ROUND; i++) CHECK_RC(pthread_create(&t[i], NULL, short_lived, NULL), 0);
        /* a few detached ones too */
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t d;
        for (int i = 0; i < 4; i++) CHECK_RC(pthread_create(&d, &a, short_lived, NULL), 0);
        for (int i = 0; i < PER_ROUND; i++) CHECK_RC(pthread_join(t[i], NULL), 0);
    }
    /* wait for the detached threads */
    for (int spin = 0; spin < 2000; spin++) {
        pthread_mutex_lock(&m);
        long c = counter;
        pthread_mutex_unlock(&m);
        if (c == (long)ROUNDS * (PER_ROUND + 4) * 50) break;
        usleep(1000);
    }
    pthread_mutex_lock(&m);
    CHECK(counter == (long)ROUNDS * (PER_ROUND + 4) * 50);
    pthread_mutex_unlock(&m);
    puts("threads: ok");
    return 0;
}
