/* SPDX-License-Identifier: Apache-2.0
 * A listener on 127.0.0.1 whose accept queue (backlog 0) is full: the kernel drops every SYN sent
 * to it, as a link that is down would, so a connect there gets no answer. For the tests of the
 * clients' bound on one unanswered connect (DDP_CONNECT_TRY_FIRST_MS). Included by a cmocka test
 * file (after <cmocka.h>). */
#ifndef SYN_BLACKHOLE_H
#define SYN_BLACKHOLE_H

#include <stdint.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* Returns its port; *lfd is the listener, *filler the one queued connection (close both). */
static uint16_t syn_blackhole(int *lfd, int *filler) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    *lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*lfd >= 0);
    assert_int_equal(bind(*lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(*lfd, 0), 0);
    assert_int_equal(getsockname(*lfd, (struct sockaddr *)&a, &len), 0);
    *filler = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(*filler, (struct sockaddr *)&a, sizeof a), 0);
    return ntohs(a.sin_port);
}

#endif
