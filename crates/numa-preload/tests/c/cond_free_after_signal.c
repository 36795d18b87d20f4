/* A waiter frees the condvar as soon as the signal has woken it: the wake's
 * releasing step (what makes the waiter's wait return) must be its last
 * access to the condvar's memory, as an unlock's is to a mutex's.
 * Each round, the waiter maps a page for a mutex, a condvar and a state word
 * and waits; the signaler takes the mutex (so the waiter is inside its wait),
 * sets the state, unlocks and signals. With the library built with feature
 * `test-hooks`, two hooks make the window deterministic: the waiter, before
 * it sleeps, waits until the signal's releasing step is done (so its futex
 * wait returns at once), and the signaler, right after that step, stands
 * still until the waiter has destroyed the condvar and unmapped the page. A
 * wake that reads the condvar after that step then faults. Under glibc's
 * condvar (NUMA_LOCK=pthread) no hook runs: a plain run of the pattern. */
#include "check.h"
#include <stdatomic.h>
#include <sys/mman.h>

#define ROUNDS 100
#define BOUND 200000 /* yields a hook waits at most */

struct obj {
    pthread_mutex_t m;
    pthread_cond_t c;
    int state; /* 1: the waiter waits, 2: signalled */
};

static struct obj *_Atomic published; /* this round's object */
static atomic_int published_round = -1;
static atomic_int bumped = -1;      /* last round whose wake passed its releasing step */
static atomic_int freed = -1;       /* last round whose page is unmapped */
static atomic_int signal_done = -1; /* last round whose signal call returned */
static atomic_long after_release_calls, before_sleep_calls;
static _Thread_local int my_round = -1;

void numa_preload_test_after_release(const void *obj) {
    int r = my_round;
    if (r < 0 || obj != (const void *)&atomic_load(&published)->c) return;
    atomic_fetch_add(&after_release_calls, 1);
    atomic_store(&bumped, r);
    for (long k = 0; k < BOUND && atomic_load(&freed) < r; k++) sched_yield();
}

void numa_preload_test_before_sleep(const void *obj) {
    (void)obj;
    int r = my_round;
    if (r < 0) return;
    atomic_fetch_add(&before_sleep_calls, 1);
    for (long k = 0; k < BOUND && atomic_load(&bumped) < r; k++) sched_yield();
}

static void *waiter(void *arg) {
    (void)arg;
    long page = sysconf(_SC_PAGESIZE);
    for (int r = 0; r < ROUNDS; r++) {
        /* A fresh page only once the last signal call returned: the old
         * page's address must stay unmapped while that call runs. */
        while (atomic_load(&signal_done) < r - 1) sched_yield();
        struct obj *o = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(o != MAP_FAILED);
        CHECK_RC(pthread_mutex_init(&o->m, NULL), 0);
        CHECK_RC(pthread_cond_init(&o->c, NULL), 0);
        CHECK_RC(pthread_mutex_lock(&o->m), 0);
        o->state = 1;
        atomic_store(&published, o);
        atomic_store(&published_round, r);
        my_round = r;
        while (o->state != 2) CHECK_RC(pthread_cond_wait(&o->c, &o->m), 0);
        my_round = -1;
        CHECK_RC(pthread_mutex_unlock(&o->m), 0);
        CHECK_RC(pthread_cond_destroy(&o->c), 0);
        CHECK_RC(pthread_mutex_destroy(&o->m), 0);
        CHECK(munmap(o, page) == 0);
        atomic_store(&freed, r);
    }
    return NULL;
}

static void *signaler(void *arg) {
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        while (atomic_load(&published_round) < r) sched_yield();
        struct obj *o = atomic_load(&published);
        /* The waiter holds the mutex until its wait releases it. */
        CHECK_RC(pthread_mutex_lock(&o->m), 0);
        CHECK(o->state == 1);
        o->state = 2;
        CHECK_RC(pthread_mutex_unlock(&o->m), 0);
        my_round = r;
        CHECK_RC(pthread_cond_signal(&o->c), 0);
        my_round = -1;
        atomic_store(&signal_done, r);
    }
    return NULL;
}

int main(void) {
    pthread_t w, s;
    CHECK_RC(pthread_create(&w, NULL, waiter, NULL), 0);
    CHECK_RC(pthread_create(&s, NULL, signaler, NULL), 0);
    CHECK_RC(pthread_join(w, NULL), 0);
    CHECK_RC(pthread_join(s, NULL), 0);
    const char *mode = getenv("NUMA_LOCK");
    if (mode && strcmp(mode, "pthread") != 0) {
        /* Our condvar served the rounds, and the hooks stopped each one in
         * the window (a library without the hooks tests nothing here). */
        CHECK(atomic_load(&after_release_calls) == ROUNDS);
        CHECK(atomic_load(&before_sleep_calls) >= ROUNDS);
    }
    printf("cond_free_after_signal: ok (%d rounds, %ld hooked wakes)\n", ROUNDS,
           atomic_load(&after_release_calls));
    return 0;
}
