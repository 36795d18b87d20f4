/* The rwlock form of POSIX's "the last user frees the object": readers take a
 * read lock on each object once, count themselves in, and unlock; the owner,
 * once every reader is in, takes the write lock (which waits for the readers
 * to leave), unlocks, destroys and frees the object, and reuses the memory at
 * once, filled with 0xff. A reader's unlock that still touches the rwlock
 * after its releasing step (the decrement the writer waits for) then reads
 * garbage: with 0xff a writer seems to wait and pointers in the lock are
 * wild, so it crashes or hangs.
 * To make that window wide, a pest thread sends the readers signals whose
 * handler, when it interrupts a reader whose object is not freed yet, waits
 * (boundedly) until the owner has freed it: a handler that lands after the
 * reader's releasing step lets the owner free the lock under the unlock.
 * With the library built with feature `test-hooks` (the corpus test's build),
 * a hook called right after the releasing step of a read unlock (one that
 * found no writer asleep) does the same wait there, every time. */
#include "check.h"
#include <signal.h>
#include <stdatomic.h>

#define READERS 4
#define OBJS 5000

struct obj {
    pthread_rwlock_t l;
    atomic_int entered;
    atomic_int closing; /* the owner is about to take the write lock */
    char pad[64];
};

static struct obj *_Atomic objs[OBJS];
static pthread_barrier_t start;
static atomic_int freed_upto; /* objects below this index are freed */
static atomic_int done;
static _Thread_local volatile int current = -1; /* the reader's object */

static void on_signal(int sig) {
    (void)sig;
    int i = current;
    if (i < 0) return;
    for (int k = 0; k < 20000 && atomic_load(&freed_upto) <= i; k++) {
        for (volatile int n = 0; n < 10; n++) {
        }
    }
}

static atomic_long hooked; /* read unlocks stopped by the hook */

void numa_preload_test_after_release(const void *obj) {
    int i = current;
    if (i < 0) return;
    struct obj *o = atomic_load(&objs[i]); /* the pointer, not the object */
    if (obj != (const void *)&o->l) return;
    atomic_fetch_add(&hooked, 1);
    for (int k = 0; k < 200000 && atomic_load(&freed_upto) <= i; k++) sched_yield();
}

static void *pest(void *arg) {
    pthread_t *t = arg;
    while (!atomic_load(&done)) {
        for (int i = 0; i < READERS; i++) pthread_kill(t[i], SIGUSR1);
        sched_yield();
    }
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (int i = 0; i < OBJS; i++) {
        struct obj *o;
        while (!(o = atomic_load(&objs[i]))) sched_yield();
        current = i;
        CHECK_RC(pthread_rwlock_rdlock(&o->l), 0);
        atomic_fetch_add(&o->entered, 1);
        /* Stay until the owner comes, and a little more, so that the writer
         * often waits for us (our unlock then sees it waiting). */
        while (!atomic_load(&o->closing)) sched_yield();
        for (volatile int k = 0; k < (i % 7) * 200; k++) {
        }
        CHECK_RC(pthread_rwlock_unlock(&o->l), 0);
        /* Not a byte of `o` after the unlock. */
    }
    current = -1;
    return NULL;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    CHECK_RC(pthread_barrier_init(&start, NULL, READERS + 1), 0);
    pthread_t t[READERS], p;
    for (int i = 0; i < READERS; i++) CHECK_RC(pthread_create(&t[i], NULL, reader, NULL), 0);
    CHECK_RC(pthread_create(&p, NULL, pest, t), 0);
    pthread_barrier_wait(&start);
    void *keep[8] = {0};
    for (int i = 0; i < OBJS; i++) {
        struct obj *o = calloc(1, sizeof *o);
        CHECK(o != NULL);
        CHECK_RC(pthread_rwlock_init(&o->l, NULL), 0);
        atomic_store(&objs[i], o);
        while (atomic_load(&o->entered) < READERS) sched_yield();
        /* Every reader is in: wait for them to leave, then free. */
        atomic_store(&o->closing, 1);
        CHECK_RC(pthread_rwlock_wrlock(&o->l), 0);
        CHECK_RC(pthread_rwlock_unlock(&o->l), 0);
        CHECK_RC(pthread_rwlock_destroy(&o->l), 0);
        free(o);
        atomic_store(&freed_upto, i + 1);
        void *p = malloc(sizeof(struct obj));
        CHECK(p != NULL);
        memset(p, 0xff, sizeof(struct obj));
        free(keep[i % 8]);
        keep[i % 8] = p;
    }
    for (int i = 0; i < READERS; i++) CHECK_RC(pthread_join(t[i], NULL), 0);
    atomic_store(&done, 1);
    CHECK_RC(pthread_join(p, NULL), 0);
    for (int i = 0; i < 8; i++) free(keep[i]);
    const char *mode = getenv("NUMA_LOCK");
    if (mode && strcmp(mode, "pthread") != 0) {
        /* Our rwlock served, and the hook stopped read unlocks in the window
         * (a library without the hooks tests only what the signals reach). */
        CHECK(atomic_load(&hooked) > 0);
    }
    printf("rwlock_free_after_unlock: ok (%ld read unlocks stopped after their release)\n",
           atomic_load(&hooked));
    return 0;
}
