/*
 * net.h - the one wrapper around BSD sockets (docs/ARCHITECTURE.md §1): every socket call
 * of the project goes through here and errno becomes an mc_status_t plus a
 * logged cause.
 */
#ifndef MC_RPC_NET_H
#define MC_RPC_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "mooncake/status.h"

typedef struct mc_sockaddr {
    struct sockaddr_storage ss;
    socklen_t len;
} mc_sockaddr_t;

/* Resolve host:port (IP literal or name; blocking for names, so never on a
 * reactor thread). MC_ERR_DNS when it cannot be resolved. */
mc_status_t mc_net_resolve(const char *host, uint16_t port, mc_sockaddr_t *out);

/* Non-blocking, close-on-exec listening socket with SO_REUSEADDR (never
 * SO_REUSEPORT: a port in use is an error). *fd on success. MC_ERR_SOCKET
 * with the cause logged ("Address already in use"). */
mc_status_t mc_net_listen(const mc_sockaddr_t *addr, int backlog, int *fd);

/* Bound port of a socket. */
uint16_t mc_net_local_port(int fd);

/* Start a non-blocking connect. MC_OK (connected), MC_INPROGRESS (wait for
 * writability, then mc_net_connect_result), or MC_ERR_SOCKET. */
mc_status_t mc_net_connect(const mc_sockaddr_t *addr, int *fd);

/* After writability: MC_OK or MC_ERR_SOCKET; *err gets the errno. */
mc_status_t mc_net_connect_result(int fd, int *err);

/* TCP_NODELAY and non-blocking/cloexec on an accepted socket. */
void mc_net_tune(int fd);

/* 1 when a is a loopback address (127.0.0.0/8, ::1): only this host reaches it. */
int mc_net_is_loopback(const mc_sockaddr_t *a);

/* "ip:port" */
void mc_net_addr_str(const mc_sockaddr_t *a, char *out, size_t len);

#endif /* MC_RPC_NET_H */
