#define _GNU_SOURCE
#include <dlfcn.h>
/* nodeepbind: an LD_PRELOAD shim for testing the ASan build of trafikey. valkey-server loads
 * modules with RTLD_DEEPBIND, which the AddressSanitizer runtime refuses; this dlopen drops the
 * flag so trafikey-asan.so can be loaded into a server run with libasan preloaded. */
void *dlopen(const char *file, int flags) {
    static void *(*real)(const char *, int);
    if (!real) real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    return real(file, flags & ~RTLD_DEEPBIND);
}
