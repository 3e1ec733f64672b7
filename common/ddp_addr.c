/* SPDX-License-Identifier: Apache-2.0
 * ddp_addr: resolving a host, telling this machine's addresses, and the source address of a
 * route (ddp_addr.h). */
#include "ddp_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int ddp_addr_resolve(const char *host, char *out, size_t cap, ddp_err_t *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return ddp_err_set(err, -EADDRNOTAVAIL, "unable to resolve '%.64s': %s", host,
                           gai_strerror(rc));
    void *sa = res->ai_family == AF_INET6
                   ? (void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                   : (void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
    inet_ntop(res->ai_family, sa, out, (socklen_t)cap);
    freeaddrinfo(res);
    return 0;
}

int ddp_addr_is_local(const char *addr) {
    if (strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0)
        return 1;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL)
            continue;
        char buf[INET6_ADDRSTRLEN] = "";
        if (i->ifa_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, sizeof buf);
        else if (i->ifa_addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, buf, sizeof buf);
        found = strcmp(buf, addr) == 0;
    }
    freeifaddrs(ifs);
    return found;
}

void ddp_addr_route_source(const char *addr, int port, char *out, size_t cap) {
    snprintf(out, cap, "%s", addr);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    int fam = strchr(addr, ':') ? AF_INET6 : AF_INET;
    if (fam == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &s4->sin_addr);
        len = sizeof *s4;
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &s6->sin6_addr);
        len = sizeof *s6;
    }
    int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (connect(fd, (struct sockaddr *)&ss, len) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (fam == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)cap);
        else
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)cap);
    }
    close(fd);
}
