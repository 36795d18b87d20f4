/* A mutex copied with memcpy after it was contended. POSIX leaves the use of
 * a copy undefined; glibc's mutex is its words, so a copy of an unlocked one
 * is a working, independent mutex, and destroying both is harmless. A lock
 * that keeps pointers to heap memory in the mutex must not free that memory
 * twice (once per copy) nor let the copy use memory it does not own. */
#include "check.h"

#define ROUNDS 200
#define THREADS 3

struct pair {
    pthread_mutex_t a;
    pthread_mutex_t b;
    long count;
};

static void *hammer(void *arg) {
    pthread_mutex_t *m = arg;
    for (int i = 0; i < 2000; i++) {
        CHECK_RC(pthread_mutex_lock(m), 0);
        CHECK_RC(pthread_mutex_unlock(m), 0);
    }
    return NULL;
}

/* A few threads on m until they contended (they cannot be forced to, but 3
 * threads x 2000 acquisitions almost always do), then m is unlocked again. */
static void contend(pthread_mutex_t *m) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK_RC(pthread_create(&t[i], NULL, hammer, m), 0);
    /* Hold it meanwhile now and then, so the others block. */
    for (int i = 0; i < 20; i++) {
        CHECK_RC(pthread_mutex_lock(m), 0);
        sched_yield();
        CHECK_RC(pthread_mutex_unlock(m), 0);
    }
    for (int i = 0; i < THREADS; i++)
        CHECK_RC(pthread_join(t[i], NULL), 0);
}

int main(void) {
    for (int r = 0; r < ROUNDS; r++) {
        struct pair *p = calloc(1, sizeof *p);
        CHECK(p != NULL);
        CHECK_RC(pthread_mutex_init(&p->a, NULL), 0);
        contend(&p->a);
        /* The copy: undefined in POSIX, a working mutex in glibc. */
        memcpy(&p->b, &p->a, sizeof p->a);
        contend(&p->b);
        contend(&p->a);
        CHECK_RC(pthread_mutex_destroy(&p->a), 0);
        CHECK_RC(pthread_mutex_destroy(&p->b), 0);
        free(p);
        /* Churn the allocator so a double free or a stale pointer shows. */
        void *junk[8];
        for (int i = 0; i < 8; i++) {
            junk[i] = malloc(384);
            CHECK(junk[i] != NULL);
            memset(junk[i], 0xff, 384);
        }
        for (int i = 0; i < 8; i++)
            free(junk[i]);
    }
    printf("mutex_copy: ok\n");
    return 0;
}
