/* The library deepbind.c opens with RTLD_DEEPBIND: its lock calls bind to
 * glibc's (its own dependency) before any preloaded library's. Built with
 * -shared -fPIC (and -Wl,-z,now,-z,relro in one of the two builds). */
#include <pthread.h>

int lib_lock(pthread_mutex_t *m) { return pthread_mutex_lock(m); }
int lib_trylock(pthread_mutex_t *m) { return pthread_mutex_trylock(m); }
int lib_unlock(pthread_mutex_t *m) { return pthread_mutex_unlock(m); }
int lib_wait(pthread_cond_t *c, pthread_mutex_t *m) { return pthread_cond_wait(c, m); }
int lib_signal(pthread_cond_t *c) { return pthread_cond_signal(c); }
int lib_rdlock(pthread_rwlock_t *l) { return pthread_rwlock_rdlock(l); }
int lib_trywrlock(pthread_rwlock_t *l) { return pthread_rwlock_trywrlock(l); }
int lib_rwunlock(pthread_rwlock_t *l) { return pthread_rwlock_unlock(l); }
/* A taken address (an R_X86_64_GLOB_DAT relocation). */
int (*lib_lock_ptr(void))(pthread_mutex_t *) { return pthread_mutex_lock; }
