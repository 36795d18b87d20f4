/* pthread_cond_wait, timedwait and clockwait are cancellation points (POSIX):
 * a deferred cancel of a thread blocked in the wait ends the thread, and the
 * cleanup handlers run with the mutex re-acquired, so they may read the data
 * it protects. Each case: the waiter holds the mutex (errorcheck or recursive;
 * glibc's wait releases a recursive mutex one level only), pushes a cleanup handler and waits for a condition that never
 * comes; main takes the mutex (so the waiter is inside the wait), writes the
 * protected value, cancels, releases. The handler checks the value and that
 * it owns the mutex (an errorcheck unlock by a non-owner is EPERM), main
 * joins with a deadline (a wait that ignores the cancel never ends).
 * Cases: cancelled as soon as it is in the wait; cancelled once the kernel
 * says it sleeps (/proc: state S); cancelled while asleep with main keeping
 * the mutex until the woken waiter is back in the kernel (or a while), so
 * that its re-lock takes the lock's slow path, which must not act on the
 * cancel itself (the first contended acquisition of the process, where the
 * lock may still read /proc files, which are cancellation points); a cancel
 * already pending when the wait starts (acted on at once, mutex held). */
#include "check.h"
#include <stdatomic.h>
#include <sys/syscall.h>

enum how { WAIT, TIMEDWAIT, CLOCKWAIT };

struct waiter {
    pthread_mutex_t m;
    pthread_cond_t c;
    enum how how;
    int recursive;
    int pending; /* cancel requested before the wait (cancellation disabled) */
    int waiting; /* under m */
    int data;    /* under m */
    atomic_int tid;
    atomic_int cancel_sent;
    atomic_int cleanup_ok; /* 1: ran with the mutex and the data; -1: wrong */
};

static void cleanup(void *arg) {
    struct waiter *w = arg;
    int ok = w->data == 42;
    /* We own the mutex: an errorcheck/recursive unlock by a non-owner is EPERM. */
    if (pthread_mutex_unlock(&w->m) != 0) ok = 0;
    if (pthread_mutex_unlock(&w->m) != EPERM) ok = 0; /* and no more than that */
    atomic_store(&w->cleanup_ok, ok ? 1 : -1);
}

static void *waiter(void *arg) {
    struct waiter *w = arg;
    atomic_store(&w->tid, (int)syscall(SYS_gettid));
    if (w->pending) {
        CHECK_RC(pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL), 0);
        while (!atomic_load(&w->cancel_sent)) sched_yield();
        CHECK_RC(pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL), 0);
    }
    CHECK_RC(pthread_mutex_lock(&w->m), 0);
    pthread_cleanup_push(cleanup, w);
    w->waiting = 1;
    for (;;) {
        struct timespec far = in_ms(CLOCK_REALTIME, 3600 * 1000);
        struct timespec farm = in_ms(CLOCK_MONOTONIC, 3600 * 1000);
        switch (w->how) {
        case WAIT: CHECK_RC(pthread_cond_wait(&w->c, &w->m), 0); break;
        case TIMEDWAIT: CHECK_RC(pthread_cond_timedwait(&w->c, &w->m, &far), 0); break;
        case CLOCKWAIT:
            CHECK_RC(pthread_cond_clockwait(&w->c, &w->m, CLOCK_MONOTONIC, &farm), 0);
            break;
        }
    }
    pthread_cleanup_pop(0);
    return NULL;
}

/* Thread `tid`'s voluntary context switches (-1 if unknown). */
static long switches(int tid) {
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1) break;
    fclose(f);
    return n;
}

/* Whether thread `tid` of this process sleeps in the kernel (state S). */
static int sleeping(int tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'S';
}

static void run(enum how how, int recursive, int asleep, int pending, int hold) {
    struct waiter *w = calloc(1, sizeof *w);
    CHECK(w != NULL);
    pthread_mutexattr_t a;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_settype(&a, recursive ? PTHREAD_MUTEX_RECURSIVE
                                                     : PTHREAD_MUTEX_ERRORCHECK), 0);
    CHECK_RC(pthread_mutex_init(&w->m, &a), 0);
    CHECK_RC(pthread_cond_init(&w->c, NULL), 0);
    w->how = how;
    w->recursive = recursive;
    w->pending = pending;
    if (pending) w->data = 42; /* nobody else writes it */
    pthread_t t;
    CHECK_RC(pthread_create(&t, NULL, waiter, w), 0);
    if (pending) {
        while (!atomic_load(&w->tid)) sched_yield();
        CHECK_RC(pthread_cancel(t), 0);
        atomic_store(&w->cancel_sent, 1);
    } else {
        /* Once we hold the mutex with `waiting` set, the waiter is in the wait. */
        for (;;) {
            CHECK_RC(pthread_mutex_lock(&w->m), 0);
            if (w->waiting) break;
            CHECK_RC(pthread_mutex_unlock(&w->m), 0);
            sched_yield();
        }
        if (asleep) {
            int s;
            while ((s = sleeping(atomic_load(&w->tid))) == 0) sched_yield();
        }
        w->data = 42;
        int tid = atomic_load(&w->tid);
        long before = switches(tid);
        CHECK_RC(pthread_cancel(t), 0);
        if (hold && before >= 0) {
            /* The cancel woke it: it is now re-locking the mutex we hold. */
            while (switches(tid) == before) sched_yield();
            for (int i = 0; i < 1000 && sleeping(tid) != 1; i++) sched_yield();
        }
        CHECK_RC(pthread_mutex_unlock(&w->m), 0);
    }
    struct timespec dl = in_ms(CLOCK_REALTIME, 20000);
    void *ret = NULL;
    int rc = pthread_timedjoin_np(t, &ret, &dl);
    if (rc == ETIMEDOUT) {
        fprintf(stderr, "cancel: case how=%d recursive=%d asleep=%d pending=%d: the "
                "cancelled waiter did not end in 20 s\n", how, recursive, asleep, pending);
        exit(1);
    }
    CHECK_RC(rc, 0);
    CHECK(ret == PTHREAD_CANCELED);
    CHECK(atomic_load(&w->cleanup_ok) == 1);
    CHECK_RC(pthread_cond_destroy(&w->c), 0);
    CHECK_RC(pthread_mutex_destroy(&w->m), 0);
    free(w);
}

int main(void) {
    /* First, while the process has had no contended lock yet. */
    run(WAIT, 0, 1, 0, 1);
    for (int how = WAIT; how <= CLOCKWAIT; how++) {
        run(how, 0, 0, 0, 0);
        run(how, 0, 1, 0, 0);
        run(how, 1, 1, 0, 1);
        run(how, 0, 0, 1, 0);
    }
    printf("cancel: ok\n");
    return 0;
}
