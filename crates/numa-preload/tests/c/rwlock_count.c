/* Read locks are a count, as glibc's: a read lock taken twice by one thread
 * and released once by another still holds the rwlock (a writer's trywrlock
 * is EBUSY), and the second release by that other thread succeeds and frees
 * it. Also: two readers' locks released by a third thread, and the same
 * under each rwlock kind. Every step runs in its own thread, joined before
 * the next, so the order is the program's. The output is the same under
 * glibc. */
#include "check.h"

static pthread_rwlock_t l;

static void *do_unlock(void *arg) { (void)arg; return (void *)(long)pthread_rwlock_unlock(&l); }
static void *do_rdlock(void *arg) { (void)arg; return (void *)(long)pthread_rwlock_rdlock(&l); }
static void *do_trywr(void *arg) {
    (void)arg;
    int r = pthread_rwlock_trywrlock(&l);
    if (r == 0) CHECK_RC(pthread_rwlock_unlock(&l), 0);
    return (void *)(long)r;
}

static int in_thread(void *(*f)(void *)) {
    pthread_t t;
    void *ret;
    CHECK_RC(pthread_create(&t, NULL, f, NULL), 0);
    CHECK_RC(pthread_join(t, &ret), 0);
    return (int)(long)ret;
}

static void run(int kind, const char *name) {
    pthread_rwlockattr_t a;
    CHECK_RC(pthread_rwlockattr_init(&a), 0);
    CHECK_RC(pthread_rwlockattr_setkind_np(&a, kind), 0);
    CHECK_RC(pthread_rwlock_init(&l, &a), 0);
    /* One thread reads twice, another releases both. */
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    int u1 = in_thread(do_unlock);
    int w1 = in_thread(do_trywr);
    int u2 = in_thread(do_unlock);
    int w2 = in_thread(do_trywr);
    printf("%s: read twice, released by another thread: unlock=%d trywrlock=%s unlock=%d "
           "trywrlock=%s\n", name, u1, strerror(w1), u2, strerror(w2));
    /* Two threads read, a third releases both. */
    int r1 = in_thread(do_rdlock), r2 = in_thread(do_rdlock);
    int u3 = in_thread(do_unlock);
    int w3 = in_thread(do_trywr);
    int u4 = in_thread(do_unlock);
    int w4 = in_thread(do_trywr);
    printf("%s: two readers released by a third: rdlock=%d,%d unlock=%d trywrlock=%s "
           "unlock=%d trywrlock=%s\n", name, r1, r2, u3, strerror(w3), u4, strerror(w4));
    /* Mixed: the owner releases one, another thread the other. */
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    int u5 = pthread_rwlock_unlock(&l);
    int w5 = in_thread(do_trywr);
    int u6 = in_thread(do_unlock);
    int w6 = in_thread(do_trywr);
    printf("%s: one release each: unlock=%d trywrlock=%s unlock=%d trywrlock=%s\n", name, u5,
           strerror(w5), u6, strerror(w6));
    CHECK_RC(pthread_rwlock_destroy(&l), 0);
}

int main(void) {
    run(PTHREAD_RWLOCK_PREFER_READER_NP, "prefer-reader");
    run(PTHREAD_RWLOCK_PREFER_WRITER_NP, "prefer-writer");
    run(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, "prefer-writer-nonrecursive");
    printf("rwlock_count: ok\n");
    return 0;
}
