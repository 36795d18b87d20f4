/* Process-shared condvars in shared memory between a preloaded process and a
 * plain one: this program re-executes itself without LD_PRELOAD (environment
 * cleaned) and the two wake each other, in both directions:
 * 1. ping-pong on a process-shared mutex and condvar (ROUNDS turns each way);
 * 2. the preloaded process waits on a process-shared condvar with one of its
 *    own private mutexes (ours under numa-preload), the plain one signals it;
 * 3. the plain process waits on it with its own private mutex, the preloaded
 *    one signals it.
 * Every wait is bounded (10 s); a condvar that one side cannot see the other
 * use fails there. */
#include "check.h"
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define ROUNDS 200

struct shared {
    pthread_mutex_t m;
    pthread_cond_t c;
    int turn; /* under m: 0 the preloaded process plays, 1 the plain one */
    pthread_cond_t c2;
    atomic_int flag2, ack2; /* case 2 */
    atomic_int flag3, ack3; /* case 3 */
};

static struct timespec deadline(void) { return in_ms(CLOCK_REALTIME, 10000); }

static void ping_pong(struct shared *s, int me, const char *who) {
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_RC(pthread_mutex_lock(&s->m), 0);
        struct timespec dl = deadline();
        while (s->turn != me) {
            int rc = pthread_cond_timedwait(&s->c, &s->m, &dl);
            if (rc == ETIMEDOUT) {
                fprintf(stderr, "pshared_cond: %s never woken in round %d\n", who, i);
                exit(1);
            }
            CHECK_RC(rc, 0);
        }
        s->turn = !me;
        CHECK_RC(pthread_cond_signal(&s->c), 0);
        CHECK_RC(pthread_mutex_unlock(&s->m), 0);
    }
}

/* Waits on s->c2 with a private mutex until *flag is set, then acks. */
static void private_waiter(struct shared *s, atomic_int *flag, atomic_int *ack,
                           const char *who) {
    pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
    CHECK_RC(pthread_mutex_lock(&pm), 0);
    struct timespec dl = deadline();
    while (!atomic_load(flag)) {
        int rc = pthread_cond_timedwait(&s->c2, &pm, &dl);
        if (rc == ETIMEDOUT) {
            fprintf(stderr, "pshared_cond: %s waiting with a private mutex never woken\n", who);
            exit(1);
        }
        CHECK_RC(rc, 0);
    }
    CHECK_RC(pthread_mutex_unlock(&pm), 0);
    atomic_store(ack, 1);
}

/* Sets *flag and signals s->c2 until the other side acks (it may not be
 * asleep yet at the first signal; the flag is not under its mutex). */
static void signaller(struct shared *s, atomic_int *flag, atomic_int *ack) {
    atomic_store(flag, 1);
    double end = now_s() + 10;
    while (!atomic_load(ack)) {
        CHECK_RC(pthread_cond_signal(&s->c2), 0);
        sched_yield();
        CHECK(now_s() < end);
    }
}

static int child(int fd) {
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(s != MAP_FAILED);
    CHECK(getenv("LD_PRELOAD") == NULL);
    ping_pong(s, 1, "plain process");
    signaller(s, &s->flag2, &s->ack2);
    private_waiter(s, &s->flag3, &s->ack3, "plain process");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "child") == 0) return child(atoi(argv[2]));

    int fd = memfd_create("pshared_cond", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, sizeof(struct shared)) == 0);
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(s != MAP_FAILED);
    pthread_mutexattr_t ma;
    CHECK_RC(pthread_mutexattr_init(&ma), 0);
    CHECK_RC(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    CHECK_RC(pthread_mutex_init(&s->m, &ma), 0);
    pthread_condattr_t ca;
    CHECK_RC(pthread_condattr_init(&ca), 0);
    CHECK_RC(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    CHECK_RC(pthread_cond_init(&s->c, &ca), 0);
    CHECK_RC(pthread_cond_init(&s->c2, &ca), 0);

    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", fd);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *args[] = {"pshared_cond", "child", fdarg, NULL};
        char *env[] = {"PATH=/usr/bin:/bin", NULL};
        execve("/proc/self/exe", args, env);
        _exit(127);
    }
    ping_pong(s, 0, "preloaded process");
    private_waiter(s, &s->flag2, &s->ack2, "preloaded process");
    signaller(s, &s->flag3, &s->ack3);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* Our own lock ran in this process too: a private mutex, contended once. */
    pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
    CHECK_RC(pthread_mutex_lock(&pm), 0);
    CHECK_RC(pthread_mutex_unlock(&pm), 0);
    CHECK_RC(pthread_cond_destroy(&s->c), 0);
    CHECK_RC(pthread_cond_destroy(&s->c2), 0);
    CHECK_RC(pthread_mutex_destroy(&s->m), 0);
    printf("pshared_cond: ok\n");
    return 0;
}
