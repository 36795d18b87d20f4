/* A thread with asynchronous cancellation blocked in a lock function is
 * cancelled there, as with glibc (whose futex wait the cancel signal
 * interrupts): the process goes on, the cleanup handler runs, the thread ends
 * with PTHREAD_CANCELED and the lock is left as the cancelled thread left it.
 * Cases: a normal mutex relocked by its holder (a self-deadlock: Open POSIX
 * pthread_mutex_init/1-2 and 3-2), a mutex held by main (lock, timedlock,
 * recursive), an rwlock write-held by main (rdlock, timedrdlock) and
 * read-held by main (wrlock, timedwrlock). Main waits until the thread says
 * it is about to block and, for up to 0.5 s, until the kernel says it sleeps
 * (numa-spin's timed waits poll and may never sleep), then
 * cancels and joins with a deadline. The output is the same under glibc. */
#include "check.h"
#include <stdatomic.h>
#include <sys/syscall.h>

enum op { SELF_RELOCK, LOCK, TIMEDLOCK, RECURSIVE, RDLOCK, TIMEDRDLOCK, WRLOCK, TIMEDWRLOCK };
static const char *names[] = {"self-relock", "lock", "timedlock", "recursive lock",
                              "rdlock", "timedrdlock", "wrlock", "timedwrlock"};

static pthread_mutex_t m;
static pthread_rwlock_t rw;
static atomic_int tid, about_to_block, cleanup_ran, returned;

static void cleanup(void *arg) {
    enum op op = (enum op)(long)arg;
    if (op == SELF_RELOCK) CHECK_RC(pthread_mutex_unlock(&m), 0);
    atomic_store(&cleanup_ran, 1);
}

static void *victim(void *arg) {
    enum op op = (enum op)(long)arg;
    struct timespec far = in_ms(CLOCK_REALTIME, 3600 * 1000);
    atomic_store(&tid, (int)syscall(SYS_gettid));
    if (op == SELF_RELOCK) CHECK_RC(pthread_mutex_lock(&m), 0);
    pthread_cleanup_push(cleanup, arg);
    CHECK_RC(pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL), 0);
    atomic_store(&about_to_block, 1);
    switch (op) {
    case SELF_RELOCK:
    case LOCK:
    case RECURSIVE: pthread_mutex_lock(&m); break;
    case TIMEDLOCK: pthread_mutex_timedlock(&m, &far); break;
    case RDLOCK: pthread_rwlock_rdlock(&rw); break;
    case TIMEDRDLOCK: pthread_rwlock_timedrdlock(&rw, &far); break;
    case WRLOCK: pthread_rwlock_wrlock(&rw); break;
    case TIMEDWRLOCK: pthread_rwlock_timedwrlock(&rw, &far); break;
    }
    atomic_store(&returned, 1);
    CHECK_RC(pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL), 0);
    pthread_cleanup_pop(0);
    return NULL;
}

static void run(enum op op) {
    pthread_mutexattr_t a;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_settype(&a, op == RECURSIVE ? PTHREAD_MUTEX_RECURSIVE
                                                           : PTHREAD_MUTEX_NORMAL), 0);
    CHECK_RC(pthread_mutex_init(&m, &a), 0);
    CHECK_RC(pthread_rwlock_init(&rw, NULL), 0);
    atomic_store(&tid, 0);
    atomic_store(&about_to_block, 0);
    atomic_store(&cleanup_ran, 0);
    atomic_store(&returned, 0);
    if (op == LOCK || op == TIMEDLOCK || op == RECURSIVE) CHECK_RC(pthread_mutex_lock(&m), 0);
    if (op == RDLOCK || op == TIMEDRDLOCK) CHECK_RC(pthread_rwlock_wrlock(&rw), 0);
    if (op == WRLOCK || op == TIMEDWRLOCK) CHECK_RC(pthread_rwlock_rdlock(&rw), 0);
    pthread_t t;
    CHECK_RC(pthread_create(&t, NULL, victim, (void *)(long)op), 0);
    while (!atomic_load(&about_to_block)) sched_yield();
    wait_sleeping(atomic_load(&tid), 0.5);
    CHECK_RC(pthread_cancel(t), 0);
    struct timespec dl = in_ms(CLOCK_REALTIME, 20000);
    void *ret = NULL;
    int rc = pthread_timedjoin_np(t, &ret, &dl);
    if (rc == ETIMEDOUT) {
        printf("%s: the cancelled thread did not end in 20 s\n", names[op]);
        exit(1);
    }
    CHECK_RC(rc, 0);
    printf("%s: cancelled=%d cleanup=%d returned=%d\n", names[op], ret == PTHREAD_CANCELED,
           atomic_load(&cleanup_ran), atomic_load(&returned));
    /* The mutex is as main left it: release it, and it works. (Not the
     * rwlock: glibc's reader counts itself in before it blocks, and a reader
     * cancelled there stays counted.) */
    if (op == LOCK || op == TIMEDLOCK || op == RECURSIVE) CHECK_RC(pthread_mutex_unlock(&m), 0);
    if (op >= RDLOCK) CHECK_RC(pthread_rwlock_unlock(&rw), 0);
    CHECK_RC(pthread_mutex_trylock(&m), 0);
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    CHECK_RC(pthread_mutex_destroy(&m), 0);
}

int main(void) {
    for (int op = SELF_RELOCK; op <= TIMEDWRLOCK; op++) run(op);
    /* The self-deadlock once more, now that the locks' slow paths ran. */
    run(SELF_RELOCK);
    printf("async_cancel_lock: ok\n");
    return 0;
}
