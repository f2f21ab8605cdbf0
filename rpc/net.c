/* net.c - see net.h. */
#include "rpc/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

mc_status_t mc_net_resolve(const char *host, uint16_t port, mc_sockaddr_t *out)
{
    struct sockaddr_in *in4 = (struct sockaddr_in *)&out->ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&out->ss;

    memset(out, 0, sizeof(*out));
    if (host == NULL || *host == '\0')
        host = "0.0.0.0";
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        out->len = sizeof(*in4);
        return MC_OK;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        out->len = sizeof(*in6);
        return MC_OK;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        MC_ERROR(RPC, "cannot resolve host '%s': %s", host, gai_strerror(rc));
        return MC_ERR_DNS;
    }
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    if (res->ai_family == AF_INET)
        in4->sin_port = htons(port);
    else
        in6->sin6_port = htons(port);
    freeaddrinfo(res);
    return MC_OK;
}

int mc_net_is_loopback(const mc_sockaddr_t *a)
{
    if (a->ss.ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr) >> 24) == 127;
    if (a->ss.ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
    return 0;
}

void mc_net_addr_str(const mc_sockaddr_t *a, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (a->ss.ss_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)&a->ss;
        inet_ntop(AF_INET, &in4->sin_addr, ip, sizeof(ip));
        port = ntohs(in4->sin_port);
        snprintf(out, len, "%s:%u", ip, port);
    } else if (a->ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a->ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        port = ntohs(in6->sin6_port);
        snprintf(out, len, "[%s]:%u", ip, port);
    } else {
        snprintf(out, len, "?");
    }
}

mc_status_t mc_net_listen(const mc_sockaddr_t *addr, int backlog, int *fd)
{
    char name[64];
    int one = 1;
    mc_net_addr_str(addr, name, sizeof(name));
    int s = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
        MC_ERROR(RPC, "socket() for %s failed: %s", name, strerror(errno));
        return MC_ERR_SOCKET;
    }
    /* SO_REUSEADDR only: a restart may bind while old connections linger in
     * TIME_WAIT, but a second listener on the port fails (SO_REUSEPORT would
     * let another process of the same user share it: rpc/server.c) */
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        MC_ERROR(RPC, "setsockopt(SO_REUSEADDR) on %s failed: %s", name, strerror(errno));
        goto err_close;
    }
    if (bind(s, (const struct sockaddr *)&addr->ss, addr->len) != 0) {
        MC_ERROR(RPC, "cannot listen on %s: %s%s", name, strerror(errno),
                 errno == EADDRINUSE ? " (another process has this port)" : "");
        goto err_close;
    }
    if (listen(s, backlog) != 0) {
        MC_ERROR(RPC, "listen on %s failed: %s", name, strerror(errno));
        goto err_close;
    }
    *fd = s;
    return MC_OK;

err_close:
    close(s);
    return MC_ERR_SOCKET;
}

uint16_t mc_net_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

void mc_net_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

mc_status_t mc_net_connect(const mc_sockaddr_t *addr, int *fd)
{
    int s = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
        MC_ERROR(RPC, "socket() failed: %s", strerror(errno));
        return MC_ERR_SOCKET;
    }
    mc_net_tune(s);
    if (connect(s, (const struct sockaddr *)&addr->ss, addr->len) == 0) {
        *fd = s;
        return MC_OK;
    }
    if (errno == EINPROGRESS) {
        *fd = s;
        return MC_INPROGRESS;
    }
    char name[64];
    mc_net_addr_str(addr, name, sizeof(name));
    MC_DEBUG(RPC, "connect to %s failed: %s", name, strerror(errno));
    close(s);
    return MC_ERR_SOCKET;
}

mc_status_t mc_net_connect_result(int fd, int *err)
{
    int e = 0;
    socklen_t len = sizeof(e);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
        e = errno;
    *err = e;
    return e == 0 ? MC_OK : MC_ERR_SOCKET;
}
