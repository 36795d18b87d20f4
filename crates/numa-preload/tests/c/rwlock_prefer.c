/* glibc's rwlock kinds: the default (prefer readers) and
 * PTHREAD_RWLOCK_PREFER_WRITER_NP let a new reader in while a writer waits,
 * so a thread may read-lock recursively and two readers that wait for each
 * other do not deadlock; PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP stops
 * new readers behind a waiting writer. Each case: main read-locks, a writer
 * blocks in wrlock (main waits for it to say so and, boundedly, for the
 * kernel to say it sleeps), then main and another thread ask for reads:
 * recursive tryrdlock and rdlock by main, a read-read hand-shake with a second
 * reader (it reads, then main unlocks: with a waiting writer this deadlocks
 * unless the second reader gets in), and a timed read. The output is the same
 * under glibc. */
#include "check.h"
#include <stdatomic.h>
#include <sys/syscall.h>

static pthread_rwlock_t l;
static atomic_int writer_tid, writer_in, writer_done;

static void *writer(void *arg) {
    (void)arg;
    atomic_store(&writer_tid, (int)syscall(SYS_gettid));
    CHECK_RC(pthread_rwlock_wrlock(&l), 0);
    atomic_store(&writer_in, 1);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    atomic_store(&writer_done, 1);
    return NULL;
}

static void *try_reader(void *arg) {
    (void)arg;
    int r = pthread_rwlock_tryrdlock(&l);
    if (r == 0) CHECK_RC(pthread_rwlock_unlock(&l), 0);
    return (void *)(long)r;
}

static void *timed_reader(void *arg) {
    (void)arg;
    struct timespec t = in_ms(CLOCK_REALTIME, 100);
    int r = pthread_rwlock_timedrdlock(&l, &t);
    if (r == 0) CHECK_RC(pthread_rwlock_unlock(&l), 0);
    return (void *)(long)r;
}

static atomic_int second_in;
/* Reads, tells main, and keeps the read until main has released its own. */
static void *second_reader(void *arg) {
    (void)arg;
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    atomic_store(&second_in, 1);
    while (atomic_load(&second_in) != 2) sched_yield();
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    return NULL;
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
    atomic_store(&writer_tid, 0);
    atomic_store(&writer_in, 0);
    atomic_store(&writer_done, 0);
    atomic_store(&second_in, 0);
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    pthread_t w;
    CHECK_RC(pthread_create(&w, NULL, writer, NULL), 0);
    while (!atomic_load(&writer_tid)) sched_yield();
    wait_sleeping(atomic_load(&writer_tid), 2.0);
    int nonrec = kind == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
    int tr = pthread_rwlock_tryrdlock(&l);
    if (tr == 0) CHECK_RC(pthread_rwlock_unlock(&l), 0);
    int other = in_thread(try_reader);
    int timed = in_thread(timed_reader);
    printf("%s: with a writer waiting: recursive tryrdlock=%s, another thread's "
           "tryrdlock=%s, timedrdlock=%s\n", name, strerror(tr), strerror(other),
           strerror(timed));
    if (!nonrec) {
        /* A recursive blocking read, and a reader main waits for. */
        CHECK_RC(pthread_rwlock_rdlock(&l), 0);
        CHECK_RC(pthread_rwlock_unlock(&l), 0);
        pthread_t s;
        CHECK_RC(pthread_create(&s, NULL, second_reader, NULL), 0);
        while (atomic_load(&second_in) != 1) sched_yield();
        printf("%s: recursive rdlock and a second reader passed the waiting writer "
               "(writer in: %d)\n", name, atomic_load(&writer_in));
        CHECK_RC(pthread_rwlock_unlock(&l), 0);
        atomic_store(&second_in, 2);
        CHECK_RC(pthread_join(s, NULL), 0);
    } else {
        CHECK_RC(pthread_rwlock_unlock(&l), 0);
    }
    CHECK_RC(pthread_join(w, NULL), 0);
    printf("%s: the writer got in after the readers left: %d\n", name,
           atomic_load(&writer_done));
    CHECK_RC(pthread_rwlock_destroy(&l), 0);
}

int main(void) {
    alarm(60);
    run(PTHREAD_RWLOCK_PREFER_READER_NP, "prefer-reader");
    run(PTHREAD_RWLOCK_PREFER_WRITER_NP, "prefer-writer");
    run(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, "prefer-writer-nonrecursive");
    printf("rwlock_prefer: ok\n");
    return 0;
}
