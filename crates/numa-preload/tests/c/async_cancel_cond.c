/* A thread with asynchronous cancellation blocked in pthread_cond_wait,
 * timedwait or clockwait is cancelled as glibc cancels it: its cleanup
 * handler runs with the mutex re-acquired (it reads the protected data and
 * unlocks an errorcheck mutex it owns), and pthread_cond_destroy then returns
 * (no waiter is left counted on the condvar). 1,100 such cancels in a row
 * (more than the 1,024 slots of numa-preload's table of sleeping waiters),
 * then a deferred cancel of a sleeping waiter, which a leaked slot per
 * cancel would leave unwoken. Main waits for the waiter to be inside the
 * wait (it holds the mutex while the waiter's flag says so) and for the
 * kernel to say it sleeps (bounded), then cancels and joins with a deadline.
 * The cancel must land in the sleep: glibc's own wait is not
 * async-cancel-safe elsewhere (a cancel acted on between its bookkeeping
 * steps leaves a waiter counted, and its destroy then waits forever, about
 * one run in thirty with a cancel as soon as the waiter is in the wait). The
 * output is the same under glibc. */
#include "check.h"
#include <stdatomic.h>
#include <sys/syscall.h>

enum how { WAIT, TIMEDWAIT, CLOCKWAIT };
static const char *names[] = {"wait", "timedwait", "clockwait"};

struct waiter {
    pthread_mutex_t m;
    pthread_cond_t c;
    enum how how;
    int async;
    int waiting; /* under m */
    int data;    /* under m */
    atomic_int tid;
    atomic_int cleanup_ok; /* 1: ran owning the mutex and saw the data; -1: not */
};

static void cleanup(void *arg) {
    struct waiter *w = arg;
    int ok = w->data == 42;
    if (pthread_mutex_unlock(&w->m) != 0) ok = 0;     /* we own it */
    if (pthread_mutex_unlock(&w->m) != EPERM) ok = 0; /* once */
    atomic_store(&w->cleanup_ok, ok ? 1 : -1);
}

static void *waiter(void *arg) {
    struct waiter *w = arg;
    atomic_store(&w->tid, (int)syscall(SYS_gettid));
    CHECK_RC(pthread_mutex_lock(&w->m), 0);
    pthread_cleanup_push(cleanup, w);
    if (w->async) CHECK_RC(pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL), 0);
    w->waiting = 1;
    for (;;) {
        struct timespec far = in_ms(CLOCK_REALTIME, 3600 * 1000);
        struct timespec farm = in_ms(CLOCK_MONOTONIC, 3600 * 1000);
        switch (w->how) {
        case WAIT: pthread_cond_wait(&w->c, &w->m); break;
        case TIMEDWAIT: pthread_cond_timedwait(&w->c, &w->m, &far); break;
        case CLOCKWAIT: pthread_cond_clockwait(&w->c, &w->m, CLOCK_MONOTONIC, &farm); break;
        }
    }
    pthread_cleanup_pop(0);
    return NULL;
}

/* One cancel; prints its outcome if `verbose`, and returns 1 if it was the
 * expected one (cancelled, cleanup with the mutex, destroy returned 0). */
static int run(enum how how, int async, int asleep, int verbose) {
    struct waiter *w = calloc(1, sizeof *w);
    CHECK(w != NULL);
    pthread_mutexattr_t a;
    CHECK_RC(pthread_mutexattr_init(&a), 0);
    CHECK_RC(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK), 0);
    CHECK_RC(pthread_mutex_init(&w->m, &a), 0);
    CHECK_RC(pthread_cond_init(&w->c, NULL), 0);
    w->how = how;
    w->async = async;
    pthread_t t;
    CHECK_RC(pthread_create(&t, NULL, waiter, w), 0);
    for (;;) {
        CHECK_RC(pthread_mutex_lock(&w->m), 0);
        if (w->waiting) break;
        CHECK_RC(pthread_mutex_unlock(&w->m), 0);
        sched_yield();
    }
    if (asleep) wait_sleeping(atomic_load(&w->tid), 2.0);
    w->data = 42;
    CHECK_RC(pthread_cancel(t), 0);
    CHECK_RC(pthread_mutex_unlock(&w->m), 0);
    struct timespec dl = in_ms(CLOCK_REALTIME, 20000);
    void *ret = NULL;
    int rc = pthread_timedjoin_np(t, &ret, &dl);
    if (rc == ETIMEDOUT) {
        printf("%s async=%d: the cancelled waiter did not end in 20 s\n", names[how], async);
        exit(1);
    }
    CHECK_RC(rc, 0);
    /* A waiter left counted on the condvar makes this wait forever (alarm). */
    int destroyed = pthread_cond_destroy(&w->c);
    int ok = ret == PTHREAD_CANCELED && atomic_load(&w->cleanup_ok) == 1 && destroyed == 0;
    if (verbose || !ok)
        printf("%s async=%d asleep=%d: cancelled=%d cleanup_with_mutex=%d destroy=%d\n",
               names[how], async, asleep, ret == PTHREAD_CANCELED,
               atomic_load(&w->cleanup_ok), destroyed);
    CHECK_RC(pthread_mutex_destroy(&w->m), 0);
    free(w);
    return ok;
}

int main(void) {
    alarm(120);
    for (int how = WAIT; how <= CLOCKWAIT; how++) run(how, 1, 1, 1);
    int ok = 0;
    for (int i = 0; i < 1100; i++) ok += run(i % 3, 1, 1, 0);
    printf("1100 asynchronous cancels: %d as expected\n", ok);
    run(WAIT, 0, 1, 1);
    printf("async_cancel_cond: ok\n");
    return 0;
}
