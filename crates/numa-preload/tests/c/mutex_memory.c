/* Memory of mutexes that are never destroyed. glibc's pthread_mutex_destroy
 * does nothing, and many programs never call it: they free (or re-initialize)
 * a mutex that other threads contended on, and the next one takes its place.
 * Under glibc the process's resident memory then stays flat (the freed
 * blocks are reused); a lock that keeps heap memory for a contended mutex
 * until its destroy leaks it here.
 *
 * Phase 1: 10,000 mutexes, each malloc'd, initialized, held by the main
 * thread while two workers block on it, then freed without destroy.
 * Phase 2: one mutex re-initialized 10,000 times with pthread_mutex_init
 * (never destroyed), contended the same way after each init.
 * Each phase's resident growth (from /proc/self/statm) must stay under
 * LIMIT_KB: 1 MB plus twice the 64-128 kB glibc's own locks grow by. */
#include "check.h"

#include <stdatomic.h>

#define MUTEXES 10000
#define WORKERS 2
#define LIMIT_KB (1024 + 2 * 128)

struct obj {
    pthread_mutex_t m;
    char payload[24];
};

static pthread_mutex_t *_Atomic cur;
static atomic_int gen;       /* bumped by main for each round */
static atomic_int arrived;   /* workers about to block in this round */
static atomic_int finished;  /* workers done with this round */
static atomic_int stop;

static long resident_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    long size, res;
    CHECK(fscanf(f, "%ld %ld", &size, &res) == 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void *worker(void *arg) {
    (void)arg;
    int seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load(&gen)) == seen) {
            if (atomic_load(&stop))
                return NULL;
            sched_yield();
        }
        seen = g;
        pthread_mutex_t *m = atomic_load(&cur);
        atomic_fetch_add(&arrived, 1);
        /* The main thread holds m: this blocks (the contended path). */
        CHECK_RC(pthread_mutex_lock(m), 0);
        CHECK_RC(pthread_mutex_unlock(m), 0);
        atomic_fetch_add(&finished, 1);
    }
}

/* Holds m while both workers block on it, then lets them through. */
static void contend(pthread_mutex_t *m) {
    CHECK_RC(pthread_mutex_lock(m), 0);
    atomic_store(&arrived, 0);
    atomic_store(&finished, 0);
    atomic_store(&cur, m);
    atomic_fetch_add(&gen, 1);
    while (atomic_load(&arrived) < WORKERS)
        sched_yield();
    /* Give the workers time to reach their wait (tens of microseconds). */
    struct timespec t = {0, 50 * 1000};
    nanosleep(&t, NULL);
    CHECK_RC(pthread_mutex_unlock(m), 0);
    while (atomic_load(&finished) < WORKERS)
        sched_yield();
}

static long phase_free(void) {
    /* Warm up: thread stacks, the allocator's arenas, the locks' pools. */
    for (int i = 0; i < 100; i++) {
        struct obj *o = malloc(sizeof *o);
        CHECK(o != NULL);
        CHECK_RC(pthread_mutex_init(&o->m, NULL), 0);
        contend(&o->m);
        free(o);
    }
    long before = resident_kb();
    for (int i = 0; i < MUTEXES; i++) {
        struct obj *o = malloc(sizeof *o);
        CHECK(o != NULL);
        CHECK_RC(pthread_mutex_init(&o->m, NULL), 0);
        contend(&o->m);
        memset(o->payload, i, sizeof o->payload);
        free(o); /* no pthread_mutex_destroy */
    }
    return resident_kb() - before;
}

static long phase_reinit(void) {
    static pthread_mutex_t m;
    for (int i = 0; i < 100; i++) {
        CHECK_RC(pthread_mutex_init(&m, NULL), 0);
        contend(&m);
    }
    long before = resident_kb();
    for (int i = 0; i < MUTEXES; i++) {
        /* Re-initialized while live (contended earlier, never destroyed). */
        CHECK_RC(pthread_mutex_init(&m, NULL), 0);
        contend(&m);
    }
    return resident_kb() - before;
}

int main(void) {
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        CHECK_RC(pthread_create(&t[i], NULL, worker, NULL), 0);
    long freed = phase_free();
    long reinit = phase_reinit();
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++)
        CHECK_RC(pthread_join(t[i], NULL), 0);
    const char *lock = getenv("NUMA_LOCK");
    printf("mutex_memory: NUMA_LOCK=%s resident growth: %ld kB after %d "
           "contended mutexes freed without destroy, %ld kB after %d "
           "re-inits of a live mutex (limit %d kB)\n",
           lock ? lock : "(unset)", freed, MUTEXES, reinit, MUTEXES, LIMIT_KB);
    CHECK(freed <= LIMIT_KB);
    CHECK(reinit <= LIMIT_KB);
    printf("mutex_memory: ok\n");
    return 0;
}
