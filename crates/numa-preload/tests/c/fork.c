/* fork from a multi-threaded parent: while worker threads hammer mutexes,
 * condvars and an rwlock, the parent forks; each child starts threads of its
 * own and uses fresh locks and locks that no parent thread held at the fork. */
#include "check.h"
#include <sys/wait.h>

#define WORKERS 4
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t quiet = PTHREAD_MUTEX_INITIALIZER; /* never held at fork */
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile int stop;
static long hits;

static void *worker(void *arg) {
    (void)arg;
    while (!stop) {
        pthread_mutex_lock(&busy);
        hits++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&busy);
    }
    return NULL;
}

static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static long child_count;
static void *child_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        CHECK_RC(pthread_mutex_lock(&cm), 0);
        child_count++;
        CHECK_RC(pthread_mutex_unlock(&cm), 0);
        CHECK_RC(pthread_mutex_lock(&quiet), 0);
        CHECK_RC(pthread_mutex_unlock(&quiet), 0);
        if (i % 100 == 0) {
            CHECK_RC(pthread_rwlock_rdlock(&rw), 0);
            CHECK_RC(pthread_rwlock_unlock(&rw), 0);
        }
    }
    return NULL;
}

static int child(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK_RC(pthread_create(&t[i], NULL, child_worker, NULL), 0);
    for (int i = 0; i < 4; i++) CHECK_RC(pthread_join(t[i], NULL), 0);
    CHECK(child_count == 80000);
    pthread_cond_t c2 = PTHREAD_COND_INITIALIZER;
    CHECK_RC(pthread_mutex_lock(&cm), 0);
    struct timespec ts = in_ms(CLOCK_REALTIME, 5);
    CHECK_RC(pthread_cond_timedwait(&c2, &cm, &ts), ETIMEDOUT);
    CHECK_RC(pthread_mutex_unlock(&cm), 0);
    return 0;
}

int main(void) {
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++) CHECK_RC(pthread_create(&t[i], NULL, worker, NULL), 0);
    for (int round = 0; round < 8; round++) {
        usleep(5000);
        CHECK_RC(pthread_rwlock_wrlock(&rw), 0); /* held by us at fork: child must not inherit a holder */
        CHECK_RC(pthread_rwlock_unlock(&rw), 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child());
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child failed: status %d\n", status);
            return 1;
        }
    }
    stop = 1;
    for (int i = 0; i < WORKERS; i++) CHECK_RC(pthread_join(t[i], NULL), 0);
    CHECK(hits > 0);
    puts("fork: ok");
    return 0;
}
