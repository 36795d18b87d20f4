/* Condition variables: producer/consumer with signal (no lost wake-ups),
 * broadcast to many waiters, timed waits on CLOCK_REALTIME and on a condvar
 * whose attribute says CLOCK_MONOTONIC, pthread_cond_clockwait, waits with a
 * recursive mutex held twice and with an errorcheck mutex not held (EPERM),
 * a process-shared condvar, init/destroy cycles. */
#include "check.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nonempty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t nonfull = PTHREAD_COND_INITIALIZER;
#define CAP 4
#define ITEMS 20000
#define PRODUCERS 4
static int queue[CAP], head, tail, len;
static long consumed_sum;

static void *producer(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < ITEMS; i++) {
        CHECK_RC(pthread_mutex_lock(&m), 0);
        while (len == CAP) CHECK_RC(pthread_cond_wait(&nonfull, &m), 0);
        queue[tail] = (int)id;
        tail = (tail + 1) % CAP;
        len++;
        CHECK_RC(pthread_cond_signal(&nonempty), 0);
        CHECK_RC(pthread_mutex_unlock(&m), 0);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < ITEMS; i++) {
        CHECK_RC(pthread_mutex_lock(&m), 0);
        while (len == 0) CHECK_RC(pthread_cond_wait(&nonempty, &m), 0);
        consumed_sum += queue[head] + 1;
        head = (head + 1) % CAP;
        len--;
        CHECK_RC(pthread_cond_signal(&nonfull), 0);
        CHECK_RC(pthread_mutex_unlock(&m), 0);
    }
    return NULL;
}

static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static int started, released, woken;
static void *broadcast_waiter(void *arg) {
    (void)arg;
    CHECK_RC(pthread_mutex_lock(&m), 0);
    started++;
    while (!released) CHECK_RC(pthread_cond_wait(&go, &m), 0);
    woken++;
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    return NULL;
}

/* Broadcast, then destroy and free at once (the pattern POSIX allows). */
static pthread_cond_t *heap_cv;
static int heap_go, heap_waiting;
static void *heap_waiter(void *arg) {
    pthread_cond_t *c = arg;
    CHECK_RC(pthread_mutex_lock(&m), 0);
    heap_waiting++;
    while (!heap_go) CHECK_RC(pthread_cond_wait(c, &m), 0);
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    return NULL;
}

static void broadcast_then_free(void) {
    for (int round = 0; round < 200; round++) {
        pthread_t t[4];
        heap_cv = malloc(sizeof *heap_cv);
        CHECK_RC(pthread_cond_init(heap_cv, NULL), 0);
        heap_go = 0;
        heap_waiting = 0;
        for (int i = 0; i < 4; i++) CHECK_RC(pthread_create(&t[i], NULL, heap_waiter, heap_cv), 0);
        for (;;) {
            CHECK_RC(pthread_mutex_lock(&m), 0);
            if (heap_waiting == 4) break;
            CHECK_RC(pthread_mutex_unlock(&m), 0);
            sched_yield();
        }
        heap_go = 1;
        CHECK_RC(pthread_cond_broadcast(heap_cv), 0);
        CHECK_RC(pthread_mutex_unlock(&m), 0);
        CHECK_RC(pthread_cond_destroy(heap_cv), 0);
        memset(heap_cv, 0xa5, sizeof *heap_cv);
        free(heap_cv);
        for (int i = 0; i < 4; i++) CHECK_RC(pthread_join(t[i], NULL), 0);
    }
}

int main(void) {
    broadcast_then_free();
    pthread_t p[PRODUCERS], c[PRODUCERS];
    for (long i = 0; i < PRODUCERS; i++) {
        CHECK_RC(pthread_create(&p[i], NULL, producer, (void *)i), 0);
        CHECK_RC(pthread_create(&c[i], NULL, consumer, NULL), 0);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        CHECK_RC(pthread_join(p[i], NULL), 0);
        CHECK_RC(pthread_join(c[i], NULL), 0);
    }
    long want = 0;
    for (long i = 0; i < PRODUCERS; i++) want += (i + 1) * ITEMS;
    CHECK(consumed_sum == want && len == 0);

    /* Broadcast wakes every waiter. */
    enum { W = 16 };
    pthread_t w[W];
    for (int i = 0; i < W; i++) CHECK_RC(pthread_create(&w[i], NULL, broadcast_waiter, NULL), 0);
    for (;;) {
        CHECK_RC(pthread_mutex_lock(&m), 0);
        int s = started;
        CHECK_RC(pthread_mutex_unlock(&m), 0);
        if (s == W) break;
        usleep(1000);
    }
    usleep(20000);
    CHECK_RC(pthread_mutex_lock(&m), 0);
    released = 1;
    CHECK_RC(pthread_cond_broadcast(&go), 0);
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    for (int i = 0; i < W; i++) CHECK_RC(pthread_join(w[i], NULL), 0);
    CHECK(woken == W);

    /* Timed waits: realtime default clock, monotonic attribute, clockwait. */
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    struct timespec t;
    CHECK_RC(pthread_mutex_lock(&m), 0);
    double t0 = now_s();
    t = in_ms(CLOCK_REALTIME, 50);
    CHECK_RC(pthread_cond_timedwait(&cv, &m, &t), ETIMEDOUT);
    CHECK(now_s() - t0 >= 0.045);
    CHECK_RC(pthread_mutex_trylock(&m), EBUSY); /* re-taken after the timeout */
    t.tv_nsec = -1;
    CHECK_RC(pthread_cond_timedwait(&cv, &m, &t), EINVAL);
    t = in_ms(CLOCK_MONOTONIC, 30);
    CHECK_RC(pthread_cond_clockwait(&cv, &m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    CHECK_RC(pthread_cond_clockwait(&cv, &m, CLOCK_THREAD_CPUTIME_ID, &t), EINVAL);
    pthread_condattr_t ca;
    pthread_cond_t mono;
    CHECK_RC(pthread_condattr_init(&ca), 0);
    CHECK_RC(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC), 0);
    CHECK_RC(pthread_cond_init(&mono, &ca), 0);
    t0 = now_s();
    t = in_ms(CLOCK_MONOTONIC, 40);
    CHECK_RC(pthread_cond_timedwait(&mono, &m, &t), ETIMEDOUT);
    double waited = now_s() - t0;
    CHECK(waited >= 0.035 && waited < 5.0);
    /* A monotonic deadline read as realtime would be decades in the past. */
    CHECK_RC(pthread_cond_destroy(&mono), 0);
    CHECK_RC(pthread_mutex_unlock(&m), 0);

    /* Recursive mutex held twice: the wait releases it fully and restores it. */
    pthread_mutex_t rm = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    CHECK_RC(pthread_mutex_lock(&rm), 0);
    CHECK_RC(pthread_mutex_lock(&rm), 0);
    t = in_ms(CLOCK_REALTIME, 10);
    CHECK_RC(pthread_cond_timedwait(&cv, &rm, &t), ETIMEDOUT);
    CHECK_RC(pthread_mutex_unlock(&rm), 0);
    CHECK_RC(pthread_mutex_unlock(&rm), 0);
    CHECK_RC(pthread_mutex_unlock(&rm), EPERM);

    /* Errorcheck mutex not held: EPERM. */
    pthread_mutex_t em = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    CHECK_RC(pthread_cond_wait(&cv, &em), EPERM);

    /* Process-shared condvar with a process-shared mutex. */
    pthread_mutexattr_t ma;
    pthread_mutex_t pm;
    pthread_cond_t pc;
    CHECK_RC(pthread_mutexattr_init(&ma), 0);
    CHECK_RC(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    CHECK_RC(pthread_mutex_init(&pm, &ma), 0);
    CHECK_RC(pthread_condattr_init(&ca), 0);
    CHECK_RC(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    CHECK_RC(pthread_cond_init(&pc, &ca), 0);
    CHECK_RC(pthread_mutex_lock(&pm), 0);
    t = in_ms(CLOCK_REALTIME, 10);
    CHECK_RC(pthread_cond_timedwait(&pc, &pm, &t), ETIMEDOUT);
    CHECK_RC(pthread_mutex_unlock(&pm), 0);

    for (int i = 0; i < 10000; i++) {
        pthread_cond_t x;
        CHECK_RC(pthread_cond_init(&x, i & 1 ? &ca : NULL), 0);
        CHECK_RC(pthread_cond_signal(&x), 0);
        CHECK_RC(pthread_cond_broadcast(&x), 0);
        CHECK_RC(pthread_cond_destroy(&x), 0);
    }
    puts("cond: ok");
    return 0;
}
