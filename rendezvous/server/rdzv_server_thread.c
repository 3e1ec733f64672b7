/* SPDX-License-Identifier: Apache-2.0
 * rdzv_server_thread: the store on a thread of its own (rdzv_server.h). The thread runs the loop
 * until rdzv_server_thread_stop wakes it (uv_async_send, the one libuv call that is safe from
 * another thread) to close the server; the loop then runs out of handles and the thread ends. */
#include "rdzv_server.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rdzv_server_thread {
    uv_loop_t loop;
    uv_async_t stop;
    rdzv_server_t *srv;
    pthread_t thread;
};

static void on_stop(uv_async_t *a) {
    rdzv_server_thread_t *t = a->data;
    rdzv_server_close(t->srv, NULL, NULL);
    uv_close((uv_handle_t *)a, NULL);
}

static void *serve(void *arg) {
    rdzv_server_thread_t *t = arg;
    /* Returns once the server and the stop handle are closed; close_loop handles the rest. */
    (void)uv_run(&t->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* Lets what is still open on loop close, then closes the loop. uv_run returns non-zero while
 * handles are active and uv_loop_close UV_EBUSY while some are not yet closed: both mean run
 * again (a few times at most; the loop is then abandoned rather than waited on forever). */
static void close_loop(uv_loop_t *loop) {
    int busy = 1;
    for (int i = 0; i < 3 && busy; i++)
        busy = uv_run(loop, UV_RUN_DEFAULT) != 0 || uv_loop_close(loop) != 0;
}

int rdzv_server_thread_start(const rdzv_server_opts_t *opts, rdzv_server_thread_t **out,
                             ddp_err_t *err) {
    *out = NULL;
    rdzv_server_thread_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return ddp_err_set(err, -ENOMEM, "store thread: out of memory");
    int rc = uv_loop_init(&t->loop);
    if (rc < 0) {
        free(t);
        return ddp_err_set(err, rc, "store thread: unable to create a loop: %s", uv_strerror(rc));
    }
    rc = rdzv_server_start(&t->loop, opts, &t->srv, err);
    if (rc == 0 && (rc = uv_async_init(&t->loop, &t->stop, on_stop)) < 0) {
        ddp_err_set(err, rc, "store thread: %s", uv_strerror(rc));
        rdzv_server_close(t->srv, NULL, NULL);
    }
    t->stop.data = t;
    if (rc == 0 && (rc = pthread_create(&t->thread, NULL, serve, t)) != 0) {
        rc = ddp_err_set(err, -rc, "store thread: unable to start a thread: %s", strerror(rc));
        rdzv_server_close(t->srv, NULL, NULL);
        uv_close((uv_handle_t *)&t->stop, NULL);
    }
    if (rc != 0) {
        close_loop(&t->loop);
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

uint16_t rdzv_server_thread_port(const rdzv_server_thread_t *t) {
    return rdzv_server_port(t->srv);
}

void rdzv_server_thread_stop(rdzv_server_thread_t *t) {
    if (t == NULL)
        return;
    /* uv_async_send fails only on a handle that is not an open async; the thread would then
     * never stop, so it is left running rather than joined forever. */
    if (uv_async_send(&t->stop) < 0)
        return;
    pthread_join(t->thread, NULL);
    close_loop(&t->loop);
    free(t);
}
