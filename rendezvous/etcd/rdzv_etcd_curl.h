/* SPDX-License-Identifier: Apache-2.0
 * rdzv_etcd_curl: the libcurl functions the etcd client calls, resolved at run time from
 * libcurl.so.4. ddprun and ddp-rendezvous link their libraries statically so that they run with
 * libc alone (the wheel); a static libcurl would bring its TLS, HTTP/2, IDN and compression
 * libraries along. Loading it on demand keeps every other program free of it. */
#ifndef RDZV_ETCD_CURL_H
#define RDZV_ETCD_CURL_H

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include "ddp_err.h"

typedef struct rdzv__etcd_curl {
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_socket_action)(CURLM *, curl_socket_t, int, int *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_assign)(CURLM *, curl_socket_t, void *);
    CURLMcode (*multi_cleanup)(CURLM *);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} rdzv__etcd_curl_t;

/* Loads libcurl (once per process, thread-safe) and returns its table; borrowed, valid for the
 * life of the process. NULL when it cannot: err says "libcurl.so.4 not loadable (Debian package
 * libcurl4): <dlerror>" or names the missing function (DDP_EUSAGE). */
const rdzv__etcd_curl_t *rdzv__etcd_curl_load(ddp_err_t *err);

/* Which library rdzv__etcd_curl_load opens (NULL: "libcurl.so.4"); a test points it at a name
 * that does not exist. Only before the first load. */
void rdzv__etcd_curl_set_lib(const char *soname);

#endif
