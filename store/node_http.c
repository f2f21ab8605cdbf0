/* node_http.c - see node_http.h. */
#include "store/node_http.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/util.h>

#include "store/client_int.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/prom.h"

struct mc_node_http {
    mc_store_t *s;
    struct event_base *base;
    struct evhttp *http;
    struct event *stop_ev;
    int stop_fd[2]; /* a write to [1] stops the loop (from any thread) */
    pthread_t thread;
    int started;
    store_seg_use_t seg_use; /* the thread's: the master's last account */
};

static void send_buf(struct evhttp_request *req, const mc_buf_t *b, const char *ctype)
{
    struct evbuffer *out = evbuffer_new();
    if (out == NULL || evbuffer_add(out, mc_buf_head(b), mc_buf_used(b)) != 0) {
        evhttp_send_error(req, 500, "out of memory");
    } else {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
        evhttp_send_reply(req, 200, "OK", out);
    }
    if (out != NULL)
        evbuffer_free(out);
}

static int only_get(struct evhttp_request *req)
{
    if (evhttp_request_get_command(req) == EVHTTP_REQ_GET)
        return 1;
    evhttp_send_error(req, 405, "only GET");
    return 0;
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
    mc_node_http_t *h = arg;
    if (!only_get(req))
        return;
    mc_buf_t b = MC_BUF_INIT;
    store_node_metrics(h->s, &h->seg_use, &b);
    mc_prom_process(&b);
    mc_prom_build_info(&b);
    send_buf(req, &b, "text/plain; version=0.0.4");
    mc_buf_fini(&b);
}

static void on_health(struct evhttp_request *req, void *arg)
{
    (void)arg;
    if (!only_get(req))
        return;
    mc_buf_t b = MC_BUF_INIT;
    mc_buf_append(&b, "OK\n", 3);
    send_buf(req, &b, "text/plain");
    mc_buf_fini(&b);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    mc_node_http_t *h = arg;
    (void)fd;
    (void)what;
    event_base_loopbreak(h->base);
}

static void *run(void *arg)
{
    mc_node_http_t *h = arg;
    event_base_dispatch(h->base);
    return NULL;
}

mc_status_t mc_node_http_start(mc_store_t *s, const char *bind, uint16_t port, uint16_t *bound,
                               mc_node_http_t **out, char *err, size_t errlen)
{
    *out = NULL;
    mc_node_http_t *h = mc_calloc(1, sizeof(*h));
    if (h == NULL)
        return MC_ERR_NOMEM;
    h->s = s;
    h->stop_fd[0] = h->stop_fd[1] = -1;
    mc_status_t st = MC_ERR_NOMEM;
    h->base = event_base_new();
    h->http = h->base != NULL ? evhttp_new(h->base) : NULL;
    if (h->http == NULL)
        goto fail;
    evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_POST | EVHTTP_REQ_DELETE);
    evhttp_set_cb(h->http, "/metrics", on_metrics, h);
    evhttp_set_cb(h->http, "/health", on_health, h);
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(h->http, bind, port);
    if (bs == NULL) {
        snprintf(err, errlen, "store.http_port: cannot listen on %s:%u: %s", bind, (unsigned)port,
                 strerror(errno));
        st = MC_ERR_SOCKET;
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    uint16_t p = port;
    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0)
        p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    if (bound != NULL)
        *bound = p;
    if (pipe(h->stop_fd) != 0) {
        h->stop_fd[0] = h->stop_fd[1] = -1;
        snprintf(err, errlen, "store.http_port: pipe: %s", strerror(errno));
        st = MC_ERR_SOCKET;
        goto fail;
    }
    h->stop_ev = event_new(h->base, h->stop_fd[0], EV_READ, on_stop, h);
    if (h->stop_ev == NULL || event_add(h->stop_ev, NULL) != 0)
        goto fail;
    if (pthread_create(&h->thread, NULL, run, h) != 0) {
        snprintf(err, errlen, "store.http_port: cannot start its thread");
        goto fail;
    }
    h->started = 1;
    *out = h;
    return MC_OK;
fail:
    if (st == MC_ERR_NOMEM && err != NULL && errlen > 0 && err[0] == '\0')
        snprintf(err, errlen, "store.http_port: out of memory");
    mc_node_http_stop(h);
    return st;
}

void mc_node_http_stop(mc_node_http_t *h)
{
    if (h == NULL)
        return;
    if (h->started) {
        char c = 1;
        while (write(h->stop_fd[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(h->thread, NULL);
    }
    if (h->stop_ev != NULL)
        event_free(h->stop_ev);
    if (h->http != NULL)
        evhttp_free(h->http);
    if (h->base != NULL)
        event_base_free(h->base);
    for (int i = 0; i < 2; i++)
        if (h->stop_fd[i] >= 0)
            close(h->stop_fd[i]);
    mc_free(h);
}

void mc_node_get_load_stages(mc_store_t *s, mc_buf_t *b)
{
    store_get_load_metrics(s, b);
}
