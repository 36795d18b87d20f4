/* POSIX's reference-count pattern (glibc bug 13690): the thread that drops the
 * last reference unlocks, destroys and frees the object, while the other
 * threads' unlocks of the same mutex may still be running. glibc's unlock
 * touches nothing but the futex word after its releasing exchange, so this is
 * safe there; ours must not touch the mutex after the step that releases it
 * either. The freed memory is reused at once and filled with 0xff, so an unlock
 * that still follows pointers in it crashes. */
#include "check.h"

#define THREADS 4
#define OBJS 300

struct obj {
    pthread_mutex_t m;
    int refs;
    char pad[64];
};

static struct obj *objs[OBJS];
static void *reused[OBJS];
static pthread_barrier_t start;

static void *worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (int i = 0; i < OBJS; i++) {
        struct obj *o = objs[i];
        /* Use the object a while (so the threads contend on its mutex), then
         * drop the reference. */
        for (int k = 0; k < 50; k++) {
            CHECK_RC(pthread_mutex_lock(&o->m), 0);
            o->pad[k % sizeof o->pad]++;
            CHECK_RC(pthread_mutex_unlock(&o->m), 0);
        }
        CHECK_RC(pthread_mutex_lock(&o->m), 0);
        int last = --o->refs == 0;
        CHECK_RC(pthread_mutex_unlock(&o->m), 0);
        if (last) {
            CHECK_RC(pthread_mutex_destroy(&o->m), 0);
            free(o);
            /* Reuse the memory at once, with garbage where the lock was. */
            void *p = malloc(sizeof(struct obj));
            CHECK(p != NULL);
            memset(p, 0xff, sizeof(struct obj));
            reused[i] = p;
        }
    }
    return NULL;
}

int main(void) {
    for (int i = 0; i < OBJS; i++) {
        objs[i] = calloc(1, sizeof(struct obj));
        CHECK(objs[i] != NULL);
        CHECK_RC(pthread_mutex_init(&objs[i]->m, NULL), 0);
        objs[i]->refs = THREADS;
    }
    CHECK_RC(pthread_barrier_init(&start, NULL, THREADS), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK_RC(pthread_create(&t[i], NULL, worker, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK_RC(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < OBJS; i++) {
        CHECK(reused[i] != NULL);
        free(reused[i]);
    }
    printf("free_after_unlock: ok\n");
    return 0;
}
