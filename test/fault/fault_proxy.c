/*
 * fault_proxy - a user-space TCP proxy that injects network faults, on the
 * project's reactor (one libevent loop, bufferevents on its base).
 *
 *   fault_proxy [--control PORT] [--seed N] --route [LPORT=]HOST:PORT ...
 *
 * Each route listens on 127.0.0.1:LPORT (0 or absent: a free port) and
 * forwards every connection to HOST:PORT. Once listening it prints
 *
 *   ready CONTROL_PORT LPORT1 LPORT2 ...
 *
 * on stdout and serves until SIGTERM/SIGINT. Faults are set at run time
 * through the control port (127.0.0.1, one command per line, each answered
 * by one line "ok ..." or "err WHY"); ROUTE is a route's listen port or
 * `all`, DIR is `up` (client -> server), `down` (server -> client) or `both`:
 *
 *   delay ROUTE DIR MS      every byte of DIR waits MS milliseconds
 *   rate ROUTE DIR BPS      DIR carries at most BPS bytes/s per connection (0: no cap)
 *   hold ROUTE DIR          one-way partition: DIR stops (nothing read, nothing
 *                           delivered, no error: the sender's buffers fill up)
 *   blackhole ROUTE         both directions held and new connections accepted
 *                           but never connected onwards (a host that vanished)
 *   drop ROUTE PERCENT      new connections closed at once with this probability
 *   reset ROUTE             every open connection reset now (RST on both sides)
 *   heal ROUTE              every fault of ROUTE cleared; held bytes flow on
 *   stats ROUTE             ok conns=N open=N up=BYTES down=BYTES dropped=N reset=N
 *
 * Held bytes are held, never discarded, as TCP would retransmit them after a
 * partition heals: the proxy never changes the byte stream, it only delays
 * it, slows it, stops it or ends the connection. Memory is bounded: a
 * direction with more than 4 MiB waiting stops reading its source.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "reactor/reactor.h"
#include "rpc/net.h"
#include "rpc/rpc.h"
#include "util/list.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_ROUTES 32
#define HIGH_WATER (4u << 20) /* bytes waiting in one direction before its source pauses */
#define LOW_WATER (1u << 20)

enum { UP = 0, DOWN = 1 };

typedef struct dirfault {
    uint64_t delay_us;
    uint64_t rate; /* bytes/s, 0 = no cap */
    int hold;
    struct ev_token_bucket_cfg *cfg; /* for rate; kept until exit (bufferevents refer to it) */
} dirfault_t;

typedef struct route {
    unsigned lport;
    char target[300];
    mc_sockaddr_t up;
    struct evconnlistener *lis;
    dirfault_t f[2];
    unsigned drop_pct;
    int blackhole;
    mc_list_t conns;
    uint64_t nconns, dropped, resets, bytes[2];
} route_t;

typedef struct chunk {
    mc_list_t node;
    uint64_t due_us;
    struct evbuffer *data;
} chunk_t;

struct conn;

typedef struct half {
    struct conn *c;
    int d;       /* UP or DOWN */
    mc_list_t q; /* chunk_t waiting for their delay */
    size_t qbytes;
    mc_timer_t timer; /* the head chunk's due time */
    int eof;          /* the source ended: close once delivered */
} half_t;

typedef struct conn {
    mc_list_t node; /* in route->conns */
    route_t *rt;
    struct bufferevent *bev[2]; /* [UP] reads the client (source of UP), [DOWN] the server */
    int connected;              /* the server side is connected */
    half_t h[2];
} conn_t;

/* A rate configuration bufferevents may still refer to: freed at exit. */
typedef struct cfg_keep {
    mc_list_t node;
    struct ev_token_bucket_cfg *cfg;
} cfg_keep_t;

typedef struct proxy {
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    struct event_base *base;
    route_t routes[MAX_ROUTES];
    unsigned nroutes;
    struct evconnlistener *ctl;
    unsigned ctl_port;
    mc_list_t cfgs;
    uint64_t rnd;
} proxy_t;

static proxy_t P;

static uint64_t rnd(void)
{
    P.rnd ^= P.rnd << 13;
    P.rnd ^= P.rnd >> 7;
    P.rnd ^= P.rnd << 17;
    return P.rnd;
}

/* The bufferevent a direction reads from and the one it writes to. */
static struct bufferevent *src_of(conn_t *c, int d)
{
    return c->bev[d];
}

static struct bufferevent *dst_of(conn_t *c, int d)
{
    return c->bev[1 - d];
}

/* ---------------------------------------------------------------- conns */

static void conn_free(conn_t *c, int rst)
{
    mc_list_del(&c->node);
    for (int d = 0; d < 2; d++) {
        half_t *h = &c->h[d];
        mc_timer_fini(&h->timer);
        while (!mc_list_empty(&h->q)) {
            chunk_t *k = MC_LIST_ENTRY(h->q.next, chunk_t, node);
            mc_list_del(&k->node);
            evbuffer_free(k->data);
            mc_free(k);
        }
        if (c->bev[d] != NULL) {
            if (rst) {
                /* SO_LINGER 0: close sends RST instead of FIN */
                struct linger lg = {1, 0};
                evutil_socket_t fd = bufferevent_getfd(c->bev[d]);
                if (fd >= 0)
                    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            }
            bufferevent_free(c->bev[d]);
        }
    }
    mc_free(c);
}

/* Reading of direction d's source: on unless held or too much is waiting. */
static void update_reading(conn_t *c, int d)
{
    struct bufferevent *src = src_of(c, d), *dst = dst_of(c, d);
    if (src == NULL)
        return;
    int on = !c->rt->f[d].hold && c->connected && !c->h[d].eof &&
             (dst == NULL ||
              evbuffer_get_length(bufferevent_get_output(dst)) + c->h[d].qbytes < HIGH_WATER);
    if (on)
        bufferevent_enable(src, EV_READ);
    else
        bufferevent_disable(src, EV_READ);
}

/* Close c when a side ended and everything it sent was delivered. */
static int maybe_finish(conn_t *c)
{
    for (int d = 0; d < 2; d++) {
        half_t *h = &c->h[d];
        if (!h->eof)
            continue;
        struct bufferevent *dst = dst_of(c, d);
        if (mc_list_empty(&h->q) && evbuffer_get_length(bufferevent_get_input(src_of(c, d))) == 0 &&
            (dst == NULL || evbuffer_get_length(bufferevent_get_output(dst)) == 0)) {
            conn_free(c, 0);
            return 1;
        }
    }
    return 0;
}

/* Deliver what direction d may deliver now: the source's input (straight,
 * or into the delay queue), then the chunks that are due. */
static void pump(conn_t *c, int d)
{
    half_t *h = &c->h[d];
    dirfault_t *f = &c->rt->f[d];
    struct bufferevent *src = src_of(c, d), *dst = dst_of(c, d);
    if (f->hold || !c->connected || dst == NULL)
        return;
    struct evbuffer *in = bufferevent_get_input(src);
    size_t n = evbuffer_get_length(in);
    if (n > 0) {
        c->rt->bytes[d] += n;
        if (f->delay_us == 0 && mc_list_empty(&h->q)) {
            evbuffer_add_buffer(bufferevent_get_output(dst), in);
        } else {
            chunk_t *k = MC_NEW(chunk_t);
            struct evbuffer *b = k != NULL ? evbuffer_new() : NULL;
            if (b == NULL) {
                mc_free(k);
                conn_free(c, 1); /* out of memory: end the connection, never alter it */
                return;
            }
            evbuffer_add_buffer(b, in);
            k->data = b;
            k->due_us = mc_now_us() + f->delay_us;
            mc_list_push_tail(&h->q, &k->node);
            h->qbytes += n;
        }
    }
    uint64_t now = mc_now_us();
    while (!mc_list_empty(&h->q)) {
        chunk_t *k = MC_LIST_ENTRY(h->q.next, chunk_t, node);
        if (k->due_us > now) {
            if (!mc_timer_armed(&h->timer))
                mc_timer_start(&h->timer, k->due_us - now, 0);
            break;
        }
        mc_list_del(&k->node);
        h->qbytes -= evbuffer_get_length(k->data);
        evbuffer_add_buffer(bufferevent_get_output(dst), k->data);
        evbuffer_free(k->data);
        mc_free(k);
    }
    update_reading(c, d);
    maybe_finish(c);
}

static void on_delay_timer(mc_timer_t *t, void *arg)
{
    half_t *h = arg;
    (void)t;
    pump(h->c, h->d);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    conn_t *c = arg;
    pump(c, bev == c->bev[UP] ? UP : DOWN);
}

/* dst's output drained below the low water mark: its source may read again. */
static void on_write(struct bufferevent *bev, void *arg)
{
    conn_t *c = arg;
    int d = bev == c->bev[UP] ? DOWN : UP; /* the direction bev is the destination of */
    if (maybe_finish(c))
        return;
    update_reading(c, d);
}

static void apply_rate(conn_t *c, int d)
{
    struct bufferevent *dst = dst_of(c, d);
    if (dst == NULL)
        return;
    bufferevent_set_rate_limit(dst, c->rt->f[d].rate ? c->rt->f[d].cfg : NULL);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    conn_t *c = arg;
    int d = bev == c->bev[UP] ? UP : DOWN; /* bev is the source of d */
    if (what & BEV_EVENT_CONNECTED) {
        c->connected = 1;
        for (int k = 0; k < 2; k++) {
            apply_rate(c, k);
            update_reading(c, k);
            pump(c, k); /* bytes the client sent before the connection */
        }
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        if ((what & BEV_EVENT_ERROR) || !c->connected) {
            conn_free(c, (what & BEV_EVENT_ERROR) != 0); /* a reset travels on as a reset */
            return;
        }
        c->h[d].eof = 1;
        bufferevent_disable(bev, EV_READ);
        pump(c, d);
    }
}

static void connect_onwards(conn_t *c)
{
    struct bufferevent *s =
        bufferevent_socket_new(P.base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (s == NULL) {
        conn_free(c, 1);
        return;
    }
    c->bev[DOWN] = s;
    bufferevent_setcb(s, on_read, on_write, on_event, c);
    bufferevent_setwatermark(s, EV_WRITE, LOW_WATER, 0);
    bufferevent_disable(s, EV_READ);
    if (bufferevent_socket_connect(s, (struct sockaddr *)&c->rt->up.ss, (int)c->rt->up.len) != 0)
        conn_free(c, 1);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg)
{
    route_t *rt = arg;
    (void)l;
    (void)sa;
    (void)len;
    rt->nconns++;
    if (rt->drop_pct > 0 && rnd() % 100 < rt->drop_pct) {
        rt->dropped++;
        evutil_closesocket(fd);
        return;
    }
    conn_t *c = MC_NEW(conn_t);
    if (c == NULL) {
        evutil_closesocket(fd);
        return;
    }
    c->rt = rt;
    mc_list_push_tail(&rt->conns, &c->node);
    for (int d = 0; d < 2; d++) {
        c->h[d].c = c;
        c->h[d].d = d;
        mc_list_init(&c->h[d].q);
        mc_timer_init(&c->h[d].timer, P.r, on_delay_timer, &c->h[d]);
    }
    c->bev[UP] =
        bufferevent_socket_new(P.base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (c->bev[UP] == NULL) {
        evutil_closesocket(fd);
        conn_free(c, 0);
        return;
    }
    bufferevent_setcb(c->bev[UP], on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->bev[UP], EV_WRITE, LOW_WATER, 0);
    bufferevent_disable(c->bev[UP], EV_READ); /* until the server side is connected */
    bufferevent_enable(c->bev[UP], EV_WRITE);
    if (!rt->blackhole)
        connect_onwards(c);
}

/* -------------------------------------------------------------- control */

static int parse_dirs(const char *s, int *d0, int *d1)
{
    if (strcmp(s, "up") == 0)
        *d0 = *d1 = UP;
    else if (strcmp(s, "down") == 0)
        *d0 = *d1 = DOWN;
    else if (strcmp(s, "both") == 0)
        *d0 = UP, *d1 = DOWN;
    else
        return -1;
    return 0;
}

static void heal(route_t *rt)
{
    int was_blackhole = rt->blackhole;
    for (int d = 0; d < 2; d++) {
        rt->f[d].delay_us = 0;
        rt->f[d].rate = 0;
        rt->f[d].hold = 0;
    }
    rt->drop_pct = 0;
    rt->blackhole = 0;
    mc_list_t *pos, *next;
    for (pos = rt->conns.next; pos != &rt->conns; pos = next) {
        next = pos->next;
        conn_t *c = MC_LIST_ENTRY(pos, conn_t, node);
        if (was_blackhole && c->bev[DOWN] == NULL) {
            connect_onwards(c); /* may free c */
            continue;
        }
        for (int d = 0; d < 2; d++)
            apply_rate(c, d);
        /* held bytes: what the source buffered flows now (pump may free c) */
        pump(c, UP);
    }
    for (pos = rt->conns.next; pos != &rt->conns; pos = next) {
        next = pos->next;
        pump(MC_LIST_ENTRY(pos, conn_t, node), DOWN);
    }
}

static void set_hold(route_t *rt, int d)
{
    rt->f[d].hold = 1;
    mc_list_t *pos;
    for (pos = rt->conns.next; pos != &rt->conns; pos = pos->next)
        update_reading(MC_LIST_ENTRY(pos, conn_t, node), d);
}

static int set_rate(route_t *rt, int d, uint64_t bps, const char **why)
{
    if (bps > 0) {
        /* 10 ms ticks, so a cap is smooth at the scale of RPC timeouts */
        struct timeval tick = {0, 10000};
        uint64_t per_tick = bps / 100 > 0 ? bps / 100 : 1;
        if (per_tick > EV_RATE_LIMIT_MAX) {
            *why = "rate too large";
            return -1;
        }
        struct ev_token_bucket_cfg *cfg = ev_token_bucket_cfg_new(
            EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, (size_t)per_tick, (size_t)per_tick, &tick);
        if (cfg == NULL) {
            *why = "out of memory";
            return -1;
        }
        /* the old configuration may still be referenced: kept until exit */
        rt->f[d].cfg = cfg;
        cfg_keep_t *keep = MC_NEW(cfg_keep_t);
        if (keep == NULL) {
            ev_token_bucket_cfg_free(cfg);
            *why = "out of memory";
            return -1;
        }
        keep->cfg = cfg;
        mc_list_push_tail(&P.cfgs, &keep->node);
    }
    rt->f[d].rate = bps;
    mc_list_t *pos;
    for (pos = rt->conns.next; pos != &rt->conns; pos = pos->next)
        apply_rate(MC_LIST_ENTRY(pos, conn_t, node), d);
    return 0;
}

static void reset_all(route_t *rt)
{
    while (!mc_list_empty(&rt->conns)) {
        conn_free(MC_LIST_ENTRY(rt->conns.next, conn_t, node), 1);
        rt->resets++;
    }
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max || *s == '-')
        return -1;
    *out = v;
    return 0;
}

/* Run one command on the routes it names; the reply line into out. */
static void command(char *line, char *out, size_t n)
{
    char *argv[6];
    int argc = 0;
    for (char *t = strtok(line, " \t\r"); t != NULL && argc < 6; t = strtok(NULL, " \t\r"))
        argv[argc++] = t;
    if (argc == 0) {
        snprintf(out, n, "err empty command");
        return;
    }
    const char *cmd = argv[0];
    static const struct {
        const char *name;
        int args; /* after ROUTE */
        const char *usage;
    } cmds[] = {
        {"delay", 2, "delay ROUTE up|down|both MS"},
        {"rate", 2, "rate ROUTE up|down|both BPS"},
        {"hold", 1, "hold ROUTE up|down|both"},
        {"blackhole", 0, "blackhole ROUTE"},
        {"drop", 1, "drop ROUTE PERCENT"},
        {"reset", 0, "reset ROUTE"},
        {"heal", 0, "heal ROUTE"},
        {"stats", 0, "stats ROUTE"},
    };
    int k = -1;
    for (int i = 0; i < (int)(sizeof(cmds) / sizeof(cmds[0])); i++)
        if (strcmp(cmd, cmds[i].name) == 0)
            k = i;
    if (k < 0) {
        snprintf(out, n,
                 "err unknown command '%.40s' (delay, rate, hold, blackhole, drop, reset, heal, "
                 "stats)",
                 cmd);
        return;
    }
    if (argc != 2 + cmds[k].args) {
        snprintf(out, n, "err usage: %s", cmds[k].usage);
        return;
    }
    route_t *sel[MAX_ROUTES];
    unsigned nsel = 0;
    uint64_t port;
    if (strcmp(argv[1], "all") == 0) {
        for (unsigned i = 0; i < P.nroutes; i++)
            sel[nsel++] = &P.routes[i];
    } else if (parse_u64(argv[1], 65535, &port) == 0) {
        for (unsigned i = 0; i < P.nroutes; i++)
            if (P.routes[i].lport == port)
                sel[nsel++] = &P.routes[i];
    }
    if (nsel == 0) {
        snprintf(out, n, "err no route '%.20s' (a listen port or all)", argv[1]);
        return;
    }
    int d0 = UP, d1 = DOWN;
    uint64_t v = 0;
    if (cmds[k].args >= 1 && strcmp(cmd, "drop") != 0 && parse_dirs(argv[2], &d0, &d1) != 0) {
        snprintf(out, n, "err direction '%.20s' is not up, down or both", argv[2]);
        return;
    }
    if (strcmp(cmd, "delay") == 0 && parse_u64(argv[3], 3600000, &v) != 0) {
        snprintf(out, n, "err delay '%.20s' is not a number of milliseconds (0..3600000)", argv[3]);
        return;
    }
    if (strcmp(cmd, "rate") == 0 && parse_u64(argv[3], (uint64_t)1 << 40, &v) != 0) {
        snprintf(out, n, "err rate '%.20s' is not a number of bytes per second", argv[3]);
        return;
    }
    if (strcmp(cmd, "drop") == 0 && parse_u64(argv[2], 100, &v) != 0) {
        snprintf(out, n, "err percent '%.20s' is not a number in 0..100", argv[2]);
        return;
    }
    size_t at = (size_t)snprintf(out, n, "ok");
    for (unsigned i = 0; i < nsel; i++) {
        route_t *rt = sel[i];
        const char *why = NULL;
        if (strcmp(cmd, "delay") == 0) {
            rt->f[d0].delay_us = rt->f[d1].delay_us = v * 1000;
        } else if (strcmp(cmd, "rate") == 0) {
            if (set_rate(rt, d0, v, &why) != 0 || (d1 != d0 && set_rate(rt, d1, v, &why) != 0)) {
                snprintf(out, n, "err %s", why);
                return;
            }
        } else if (strcmp(cmd, "hold") == 0) {
            set_hold(rt, d0);
            set_hold(rt, d1);
        } else if (strcmp(cmd, "blackhole") == 0) {
            rt->blackhole = 1;
            set_hold(rt, UP);
            set_hold(rt, DOWN);
        } else if (strcmp(cmd, "drop") == 0) {
            rt->drop_pct = (unsigned)v;
        } else if (strcmp(cmd, "reset") == 0) {
            reset_all(rt);
        } else if (strcmp(cmd, "heal") == 0) {
            heal(rt);
        } else if (strcmp(cmd, "stats") == 0) {
            size_t open = 0;
            for (mc_list_t *p = rt->conns.next; p != &rt->conns; p = p->next)
                open++;
            if (at < n)
                at += (size_t)snprintf(
                    out + at, n - at,
                    " port=%u conns=%llu open=%zu up=%llu down=%llu "
                    "dropped=%llu reset=%llu",
                    rt->lport, (unsigned long long)rt->nconns, open,
                    (unsigned long long)rt->bytes[UP], (unsigned long long)rt->bytes[DOWN],
                    (unsigned long long)rt->dropped, (unsigned long long)rt->resets);
        }
    }
}

static void on_ctl_read(struct bufferevent *bev, void *arg)
{
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char *line;
    size_t len;
    while ((line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF)) != NULL) {
        char out[1024];
        if (len > 200)
            snprintf(out, sizeof(out), "err command longer than 200 bytes");
        else
            command(line, out, sizeof(out));
        free(line); /* libevent's allocation */
        evbuffer_add_printf(bufferevent_get_output(bev), "%s\n", out);
    }
    if (evbuffer_get_length(in) > 4096) {
        evbuffer_add_printf(bufferevent_get_output(bev), "err line too long\n");
        evbuffer_drain(in, evbuffer_get_length(in));
    }
}

static void on_ctl_event(struct bufferevent *bev, short what, void *arg)
{
    (void)arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        bufferevent_free(bev);
}

static void on_ctl_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                          int len, void *arg)
{
    (void)l;
    (void)sa;
    (void)len;
    (void)arg;
    struct bufferevent *b = bufferevent_socket_new(P.base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (b == NULL) {
        evutil_closesocket(fd);
        return;
    }
    bufferevent_setcb(b, on_ctl_read, NULL, on_ctl_event, NULL);
    bufferevent_enable(b, EV_READ | EV_WRITE);
}

/* ---------------------------------------------------------------- setup */

static struct evconnlistener *listen_on(unsigned *port, evconnlistener_cb cb, void *arg)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)*port);
    struct evconnlistener *l =
        evconnlistener_new_bind(P.base, cb, arg, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                (struct sockaddr *)&a, sizeof(a));
    if (l == NULL)
        return NULL;
    socklen_t sl = sizeof(a);
    getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&a, &sl);
    *port = ntohs(a.sin_port);
    return l;
}

typedef struct setup_ctx {
    int rc;
    char err[256];
} setup_ctx_t;

static void setup_on_reactor(void *arg)
{
    setup_ctx_t *sc = arg;
    for (unsigned i = 0; i < P.nroutes; i++) {
        route_t *rt = &P.routes[i];
        rt->lis = listen_on(&rt->lport, on_accept, rt);
        if (rt->lis == NULL) {
            snprintf(sc->err, sizeof(sc->err), "cannot listen on 127.0.0.1:%u: %s", rt->lport,
                     strerror(errno));
            sc->rc = -1;
            return;
        }
    }
    P.ctl = listen_on(&P.ctl_port, on_ctl_accept, NULL);
    if (P.ctl == NULL) {
        snprintf(sc->err, sizeof(sc->err), "cannot listen on control port %u: %s", P.ctl_port,
                 strerror(errno));
        sc->rc = -1;
    }
}

static void teardown_on_reactor(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < P.nroutes; i++) {
        route_t *rt = &P.routes[i];
        while (!mc_list_empty(&rt->conns))
            conn_free(MC_LIST_ENTRY(rt->conns.next, conn_t, node), 0);
        if (rt->lis != NULL)
            evconnlistener_free(rt->lis);
    }
    if (P.ctl != NULL)
        evconnlistener_free(P.ctl);
    while (!mc_list_empty(&P.cfgs)) {
        cfg_keep_t *k = MC_LIST_ENTRY(P.cfgs.next, cfg_keep_t, node);
        mc_list_del(&k->node);
        ev_token_bucket_cfg_free(k->cfg);
        mc_free(k);
    }
}

/* "[LPORT=]HOST:PORT" */
static int parse_route(const char *s, route_t *rt)
{
    const char *eq = strchr(s, '=');
    const char *t = s;
    uint64_t v = 0;
    if (eq != NULL) {
        char lp[16];
        size_t n = (size_t)(eq - s);
        if (n == 0 || n >= sizeof(lp))
            return -1;
        memcpy(lp, s, n);
        lp[n] = '\0';
        if (parse_u64(lp, 65535, &v) != 0)
            return -1;
        t = eq + 1;
    }
    rt->lport = (unsigned)v;
    const char *colon = strrchr(t, ':');
    uint64_t port;
    if (colon == NULL || colon == t || parse_u64(colon + 1, 65535, &port) != 0 || port == 0)
        return -1;
    char host[256];
    size_t hl = (size_t)(colon - t);
    if (hl >= sizeof(host))
        return -1;
    memcpy(host, t, hl);
    host[hl] = '\0';
    snprintf(rt->target, sizeof(rt->target), "%s", t);
    if (mc_net_resolve(host, (uint16_t)port, &rt->up) != MC_OK)
        return -1;
    mc_list_init(&rt->conns);
    return 0;
}

static const char usage[] =
    "usage: fault_proxy [--control PORT] [--seed N] --route [LPORT=]HOST:PORT ...\n"
    "A TCP proxy that injects faults (commands on the control port: delay, rate, hold,\n"
    "blackhole, drop, reset, heal, stats; see test/fault/README.md).\n";

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"control", required_argument, NULL, 'c'},
                                         {"route", required_argument, NULL, 'r'},
                                         {"seed", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    mc_list_init(&P.cfgs);
    P.rnd = 0x9e3779b97f4a7c15ull;
    int o;
    uint64_t v;
    while ((o = getopt_long(argc, argv, "c:r:s:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            if (parse_u64(optarg, 65535, &v) != 0) {
                fprintf(stderr, "fault_proxy: --control '%s' is not a port\n", optarg);
                return 2;
            }
            P.ctl_port = (unsigned)v;
            break;
        case 'r':
            if (P.nroutes == MAX_ROUTES) {
                fprintf(stderr, "fault_proxy: more than %d routes\n", MAX_ROUTES);
                return 2;
            }
            if (parse_route(optarg, &P.routes[P.nroutes]) != 0) {
                fprintf(stderr,
                        "fault_proxy: --route '%s': expected [LPORT=]HOST:PORT with a host "
                        "that resolves\n",
                        optarg);
                return 2;
            }
            P.nroutes++;
            break;
        case 's':
            if (parse_u64(optarg, UINT64_MAX, &v) != 0 || v == 0) {
                fprintf(stderr, "fault_proxy: --seed '%s' is not a positive number\n", optarg);
                return 2;
            }
            P.rnd = v;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (P.nroutes == 0 || optind != argc) {
        fputs(usage, stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* blocked here, so the reactor thread inherits the mask; sigwait below */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "proxy";
    if (mc_reactor_group_create(&go, &P.g) != MC_OK) {
        fprintf(stderr, "fault_proxy: cannot start the reactor\n");
        return 1;
    }
    P.r = mc_reactor_group_get(P.g, 0);
    P.base = mc_reactor_base(P.r);
    setup_ctx_t sc = {0, ""};
    mc_rpc_run_on(P.r, setup_on_reactor, &sc);
    if (sc.rc != 0) {
        fprintf(stderr, "fault_proxy: %s\n", sc.err);
        mc_rpc_run_on(P.r, teardown_on_reactor, NULL);
        mc_reactor_group_destroy(P.g);
        return 1;
    }
    printf("ready %u", P.ctl_port);
    for (unsigned i = 0; i < P.nroutes; i++)
        printf(" %u", P.routes[i].lport);
    printf("\n");
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    mc_rpc_run_on(P.r, teardown_on_reactor, NULL);
    mc_reactor_group_destroy(P.g);
    return 0;
}
