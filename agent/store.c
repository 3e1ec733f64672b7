/* SPDX-License-Identifier: Apache-2.0
 * The node's stores: the job store (ddprun's protocol, for the worker library and, in a
 * multi-node job hosted here, for the rendezvous: agent/rdzv.c decides to host it, and where
 * its workers find it, through agent__job_store_host and agent__job_store_at) and the workers'
 * store (PyTorch's TCPStore on MASTER_ADDR, TORCHELASTIC_USE_AGENT_STORE). A one-node job gets
 * both here, on the agent's loop, with a fresh token only its workers receive. */
#include "agent_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp_contract.h"
#include "ddp_log.h"
#include "rdzv_client.h"
#include "rdzv_server.h"

/* Picks a free TCP port on addr for MASTER_PORT (the workers' own store). Returns it, or -errno.
 * Like torchrun, the port is free when chosen; a race with another program is possible but the
 * kernel hands out recently-closed ephemeral ports last. */
int agent__pick_free_port(const char *addr) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
        rc = -errno;
    close(fd);
    return rc < 0 ? rc : ntohs(sin.sin_port);
}

/* The job token, fresh for a one-node job: only our workers receive it (hex in
 * a->stores.token_hex). Returns 0 or a negative code (logged). */
static int local_token_make(agent_t *a, ddp_buf_t *token, ddp_err_t *err) {
    ddp_buf_t hex = DDP_BUF_INIT;
    int rc = rdzv_token_generate(token, 32, err);
    if (rc == 0)
        rc = rdzv_token_to_hex(token->data, token->len, &hex);
    if (rc < 0)
        DDP_ERROR("unable to generate the job token: %s",
                  err->text[0] ? err->text : ddp_strerror(rc));
    else
        snprintf(a->stores.token_hex, sizeof a->stores.token_hex, "%s", (char *)hex.data);
    ddp_buf_free(&hex);
    return rc;
}

void agent__store_nofile_log(const struct rdzv_server *store) {
    int level = DDP_LOG_INFO;
    const char *note = rdzv_server_nofile_note(store, &level);
    /* The default limit fitted to the open-file limit is routine for a job's own store: said
     * at -vv, not on every -v run. An explicit limit clipped stays a warning. */
    if (note != NULL)
        ddp_log(level == DDP_LOG_INFO ? DDP_LOG_DEBUG : level, "job store: %s", note);
}

int agent__worker_store_start(agent_t *a, const char *host, int port, size_t workers,
                              const char *flag) {
    /* No token (PyTorch's client cannot present one): on this host the kernel's word on who owns
     * each peer's socket is what keeps other users out. */
    rdzv_server_opts_t so = {.host = host,
                             .port = (uint16_t)port,
                             .no_auth = 1,
                             .worker_store = 1,
                             .workers = workers,
                             .owner_only = 1};
    ddp_err_t err;
    ddp_err_clear(&err);
    int rc = rdzv_server_start(a->cfg.loop, &so, &a->stores.wstore, &err);
    if (rc < 0) {
        DDP_ERROR("unable to serve the workers' store (%s): %s; choose another address or port, "
                  "or --worker_store=own",
                  flag, err.text[0] ? err.text : ddp_strerror(rc));
        return rc;
    }
    rdzv_server_set_log(a->stores.wstore, DDP_LOG_WARN, rdzv_server_log_to_ddp, NULL);
    DDP_INFO("serving the workers' store (" DDP_ENV_USE_AGENT_STORE "=" DDP_USE_AGENT_STORE_YES
             ") on %s",
             rdzv_server_addr(a->stores.wstore));
    return 0;
}

int agent__local_store_start(agent_t *a, ddp_err_t *err) {
    const agent_job_t *job = a->cfg.job;
    ddp_buf_t token = DDP_BUF_INIT;
    int rc = local_token_make(a, &token, err);
    if (rc < 0) {
        ddp_buf_free(&token);
        return rc;
    }
    rdzv_server_opts_t so = {
        .host = "127.0.0.1", .port = 0, .token = token.data, .token_len = token.len};
    rc = rdzv_server_start(a->cfg.loop, &so, &a->stores.store, err);
    ddp_buf_free(&token); /* the server keeps its own copy */
    if (rc < 0) {
        DDP_ERROR("unable to start the job store: %s", err->text[0] ? err->text : ddp_strerror(rc));
        return rc;
    }
    agent__store_nofile_log(a->stores.store);
    a->stores.port = rdzv_server_port(a->stores.store);
    snprintf(a->stores.addr, sizeof a->stores.addr, "127.0.0.1");
    /* One node's place in the job: its command line's, and the workers meet at its own store. */
    agent_assignment_t as;
    agent__assignment_get(a, &as);
    snprintf(as.master_addr, sizeof as.master_addr, "%s", job->master_addr);
    as.master_port = job->master_port;
    if (!job->worker_store_own) {
        rc = agent__worker_store_start(a, as.master_addr, as.master_port < 0 ? 0 : as.master_port,
                                       (size_t)job->nproc, "--master_addr/--master_port");
        if (rc < 0)
            return rc;
        as.master_port = rdzv_server_port(a->stores.wstore);
    } else if (as.master_port < 0) {
        as.master_port = agent__pick_free_port(as.master_addr);
        if (as.master_port < 0) {
            DDP_ERROR("unable to pick a free " DDP_ENV_MASTER_PORT " on %s: %s", as.master_addr,
                      strerror(-as.master_port));
            return as.master_port;
        }
    }
    return agent__assignment_apply(a, &as);
}

int agent__job_store_host(agent_t *a, const rdzv_server_opts_t *so, ddp_err_t *err) {
    return rdzv_server_start(a->cfg.loop, so, &a->stores.store, err);
}

void agent__job_store_at(agent_t *a, const char *addr, int port, const ddp_buf_t *token) {
    a->stores.token_hex[0] = '\0';
    if (token->len > 0) {
        ddp_buf_t hex = DDP_BUF_INIT;
        if (rdzv_token_to_hex(token->data, token->len, &hex) == 0)
            snprintf(a->stores.token_hex, sizeof a->stores.token_hex, "%s", (char *)hex.data);
        ddp_buf_free(&hex);
    }
    snprintf(a->stores.addr, sizeof a->stores.addr, "%s", addr);
    a->stores.port = (uint16_t)port;
}

void agent__job_store_drop(agent_t *a) {
    if (a->stores.store != NULL) {
        rdzv_server_close(a->stores.store, NULL, NULL);
        a->stores.store = NULL;
    }
}

void agent__stores_close(agent_t *a) {
    agent__job_store_drop(a);
    if (a->stores.wstore != NULL) {
        rdzv_server_close(a->stores.wstore, NULL, NULL);
        a->stores.wstore = NULL;
    }
}
