/* A library opened with dlopen(.., RTLD_DEEPBIND) shares locks with the
 * program: a mutex (each side locks, the other sees it held; the library
 * waits for the program's unlock), a condvar handshake (the library waits,
 * the program signals, and back), an rwlock (a read by the library holds off
 * the program's writer), and a function pointer the library took. Two builds
 * of the library, lazily bound and with -z now -z relro (read-only GOT). The
 * libraries sit beside this program: preload-deepbind_lib{,_now}.so. The
 * output is the same under glibc. */
#include "check.h"
#include <dlfcn.h>
#include <libgen.h>
#include <stdatomic.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static int (*lib_lock)(pthread_mutex_t *), (*lib_trylock)(pthread_mutex_t *),
    (*lib_unlock)(pthread_mutex_t *), (*lib_wait)(pthread_cond_t *, pthread_mutex_t *),
    (*lib_signal)(pthread_cond_t *), (*lib_rdlock)(pthread_rwlock_t *),
    (*lib_trywrlock)(pthread_rwlock_t *), (*lib_rwunlock)(pthread_rwlock_t *);
static int (*(*lib_lock_ptr)(void))(pthread_mutex_t *);
static int turn; /* under m: whose move in the handshake */
static atomic_int lib_waiting, lib_has_lock;

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    CHECK(p != NULL);
    return p;
}

/* The library's side: lock (waits for main's unlock), then the handshake. */
static void *lib_thread(void *arg) {
    (void)arg;
    atomic_store(&lib_waiting, 1);
    CHECK_RC(lib_lock(&m), 0);
    atomic_store(&lib_has_lock, 1);
    for (int i = 0; i < 100; i++) {
        while (turn != 1) CHECK_RC(lib_wait(&c, &m), 0);
        turn = 0;
        CHECK_RC(lib_signal(&c), 0);
    }
    CHECK_RC(lib_unlock(&m), 0);
    return NULL;
}

static void run(const char *dir, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    void *h = dlopen(path, RTLD_NOW | RTLD_DEEPBIND);
    if (!h) {
        printf("dlopen %s: %s\n", file, dlerror());
        exit(1);
    }
    lib_lock = sym(h, "lib_lock");
    lib_trylock = sym(h, "lib_trylock");
    lib_unlock = sym(h, "lib_unlock");
    lib_wait = sym(h, "lib_wait");
    lib_signal = sym(h, "lib_signal");
    lib_rdlock = sym(h, "lib_rdlock");
    lib_trywrlock = sym(h, "lib_trywrlock");
    lib_rwunlock = sym(h, "lib_rwunlock");
    lib_lock_ptr = sym(h, "lib_lock_ptr");

    /* Each side sees the other's lock. */
    CHECK_RC(lib_lock(&m), 0);
    int main_try = pthread_mutex_trylock(&m);
    CHECK_RC(lib_unlock(&m), 0);
    CHECK_RC(pthread_mutex_lock(&m), 0);
    int lib_try = lib_trylock(&m);
    printf("%s: mutex held by the library: trylock=%s; held by the program: library's "
           "trylock=%s\n", file, strerror(main_try), strerror(lib_try));
    /* The library waits for our unlock; then a condvar handshake. */
    pthread_t t;
    atomic_store(&lib_waiting, 0);
    atomic_store(&lib_has_lock, 0);
    turn = 0;
    CHECK_RC(pthread_create(&t, NULL, lib_thread, NULL), 0);
    while (!atomic_load(&lib_waiting)) sched_yield();
    int early = atomic_load(&lib_has_lock);
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    CHECK_RC(pthread_mutex_lock(&m), 0);
    for (int i = 0; i < 100; i++) {
        turn = 1;
        CHECK_RC(pthread_cond_signal(&c), 0);
        while (turn != 0) CHECK_RC(pthread_cond_wait(&c, &m), 0);
    }
    CHECK_RC(pthread_mutex_unlock(&m), 0);
    CHECK_RC(pthread_join(t, NULL), 0);
    printf("%s: the library got the mutex only after our unlock: %d; 100 condvar round "
           "trips\n", file, !early);
    /* A read by the library holds off our writer; its taken address works. */
    CHECK_RC(lib_rdlock(&rw), 0);
    int w1 = pthread_rwlock_trywrlock(&rw);
    CHECK_RC(lib_rwunlock(&rw), 0);
    CHECK_RC(pthread_rwlock_rdlock(&rw), 0);
    int w2 = lib_trywrlock(&rw);
    CHECK_RC(pthread_rwlock_unlock(&rw), 0);
    CHECK_RC(lib_lock_ptr()(&m), 0);
    int t3 = pthread_mutex_trylock(&m);
    CHECK_RC(lib_unlock(&m), 0);
    printf("%s: rwlock read by the library: trywrlock=%s; read by the program: library's "
           "trywrlock=%s; through a pointer: trylock=%s\n", file, strerror(w1), strerror(w2),
           strerror(t3));
}

int main(void) {
    alarm(60);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    exe[n] = 0;
    char *dir = dirname(exe);
    run(dir, "preload-deepbind_lib.so");
    run(dir, "preload-deepbind_lib_now.so");
    printf("deepbind: ok\n");
    return 0;
}
