/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_curl: libcurl.so.4 opened on demand and its functions resolved into one table. */
#include "rdzv_etcd_curl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

static const char *curl_lib = "libcurl.so.4";
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static rdzv__etcd_curl_t table;
static int loaded;

void rdzv__etcd_curl_set_lib(const char *soname) {
    curl_lib = soname != NULL ? soname : "libcurl.so.4";
}

/* Each entry: the symbol and where its address goes in the table. */
#define SYM(f, name)                                                                               \
    { name, offsetof(rdzv__etcd_curl_t, f) }
static const struct {
    const char *name;
    size_t offset;
} syms[] = {
    SYM(easy_init, "curl_easy_init"),
    SYM(easy_setopt, "curl_easy_setopt"),
    SYM(easy_getinfo, "curl_easy_getinfo"),
    SYM(easy_cleanup, "curl_easy_cleanup"),
    SYM(easy_strerror, "curl_easy_strerror"),
    SYM(multi_init, "curl_multi_init"),
    SYM(multi_setopt, "curl_multi_setopt"),
    SYM(multi_add_handle, "curl_multi_add_handle"),
    SYM(multi_remove_handle, "curl_multi_remove_handle"),
    SYM(multi_socket_action, "curl_multi_socket_action"),
    SYM(multi_info_read, "curl_multi_info_read"),
    SYM(multi_assign, "curl_multi_assign"),
    SYM(multi_cleanup, "curl_multi_cleanup"),
    SYM(slist_append, "curl_slist_append"),
    SYM(slist_free_all, "curl_slist_free_all"),
};

typedef CURLcode (*global_init_fn)(long flags);

static int load_locked(ddp_err_t *err) {
    /* RTLD_LOCAL keeps libcurl's symbols (and its OpenSSL's) out of the global namespace, away
     * from the libcrypto linked into the program. The library stays loaded: curl_global_init is
     * done once per process and its state must outlive every client. */
    void *h = dlopen(curl_lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        return ddp_err_set(err, DDP_EUSAGE, "%s not loadable (Debian package libcurl4): %s",
                           curl_lib, why != NULL ? why : "unknown error");
    }
    rdzv__etcd_curl_t t;
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(h, syms[i].name);
        if (f == NULL)
            return ddp_err_set(err, DDP_EUSAGE, "%s has no %s", curl_lib, syms[i].name);
        memcpy((char *)&t + syms[i].offset, &f, sizeof f);
    }
    global_init_fn global_init = (global_init_fn)dlsym(h, "curl_global_init");
    if (global_init == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "%s has no curl_global_init", curl_lib);
    CURLcode rc = global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK)
        return ddp_err_set(err, DDP_EUSAGE, "curl_global_init failed: %s", t.easy_strerror(rc));
    table = t;
    loaded = 1;
    return 0;
}

const rdzv__etcd_curl_t *rdzv__etcd_curl_load(ddp_err_t *err) {
    pthread_mutex_lock(&load_lock);
    int r = loaded ? 0 : load_locked(err);
    pthread_mutex_unlock(&load_lock);
    return r == 0 ? &table : NULL;
}
