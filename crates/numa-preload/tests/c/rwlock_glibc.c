/* Read locks as glibc counts them (programs rely on it, though POSIX leaves
 * some of it open):
 * 1. one thread holds read locks on 40 rwlocks at once: every rdlock
 *    succeeds and every one of them keeps writers out until released (a
 *    program does not check rdlock's result);
 * 2. a read lock released by another thread than the one that took it is
 *    released (a writer gets in), and the first thread can take it again;
 *    with two readers inside, such a release leaves the other one's read;
 * 3. destroy of a read-locked rwlock returns 0 (glibc does not check). */
#include "check.h"

#define N 40

static pthread_rwlock_t many[N];

static int try_write(pthread_rwlock_t *l) {
    int rc = pthread_rwlock_trywrlock(l);
    if (rc == 0) CHECK_RC(pthread_rwlock_unlock(l), 0);
    return rc;
}

struct req {
    pthread_rwlock_t *l;
    int op; /* 0 trywrlock+unlock, 1 unlock, 2 rdlock */
};

static void *run_op(void *arg) {
    struct req *r = arg;
    long rc = 0;
    switch (r->op) {
    case 0: rc = try_write(r->l); break;
    case 1: rc = pthread_rwlock_unlock(r->l); break;
    case 2: rc = pthread_rwlock_rdlock(r->l); break;
    }
    return (void *)rc;
}

/* `op` on `l` in another thread; its return code. */
static int other(pthread_rwlock_t *l, int op) {
    struct req r = {l, op};
    pthread_t t;
    void *ret;
    CHECK_RC(pthread_create(&t, NULL, run_op, &r), 0);
    CHECK_RC(pthread_join(t, &ret), 0);
    return (int)(long)ret;
}

int main(void) {
    /* 1. More read locks than a small per-thread table. */
    for (int i = 0; i < N; i++) {
        CHECK_RC(pthread_rwlock_init(&many[i], NULL), 0);
        CHECK_RC(pthread_rwlock_rdlock(&many[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        if (other(&many[i], 0) != EBUSY) {
            fprintf(stderr, "rwlock_glibc: a writer got into read lock %d of %d held\n", i + 1, N);
            exit(1);
        }
    }
    /* Recursive reads of the last ones, then release in another order. */
    for (int i = N - 4; i < N; i++) CHECK_RC(pthread_rwlock_rdlock(&many[i]), 0);
    for (int i = N - 4; i < N; i++) CHECK_RC(pthread_rwlock_unlock(&many[i]), 0);
    for (int i = 0; i < N; i += 2) CHECK_RC(pthread_rwlock_unlock(&many[i]), 0);
    for (int i = 1; i < N; i += 2) {
        CHECK_RC(other(&many[i], 0), EBUSY);
        CHECK_RC(pthread_rwlock_unlock(&many[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        CHECK_RC(other(&many[i], 0), 0); /* all released */
        CHECK_RC(pthread_rwlock_destroy(&many[i]), 0);
    }

    /* 2. Released by another thread. */
    pthread_rwlock_t l;
    CHECK_RC(pthread_rwlock_init(&l, NULL), 0);
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(other(&l, 1), 0);
    if (other(&l, 0) != 0) {
        fprintf(stderr, "rwlock_glibc: a read lock released by another thread stayed held\n");
        exit(1);
    }
    /* Taken again by the first thread: held until its own unlock. */
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(other(&l, 0), EBUSY);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    CHECK_RC(other(&l, 0), 0);
    /* Two readers (this thread and one that exits holding it), one foreign
     * release: one read is left, until this thread's unlock. */
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(other(&l, 2), 0);
    CHECK_RC(other(&l, 1), 0);
    CHECK_RC(other(&l, 0), EBUSY);
    CHECK_RC(pthread_rwlock_unlock(&l), 0);
    CHECK_RC(other(&l, 0), 0);

    /* 3. Destroy of a read-locked rwlock: 0, as glibc. */
    CHECK_RC(pthread_rwlock_rdlock(&l), 0);
    CHECK_RC(pthread_rwlock_destroy(&l), 0);

    printf("rwlock_glibc: ok\n");
    return 0;
}
