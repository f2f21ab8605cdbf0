/*
 * embed_example - a host program that owns its libevent loop and embeds the
 * store client into it (mc_store_config.host_base): no thread of the client's
 * exists, every client callback runs from the host's event_base_dispatch().
 *
 *   embed_example [--master HOST:PORT] [--count N] [--size BYTES] [--replicas N]
 *                 [--segment BYTES] [--tick-ms MS] [--metadata master|p2p|redis://H:P]
 *
 * What it does, all on the main thread:
 *  1. creates its event_base and a periodic timer of its own (the "host's
 *     work"; it keeps ticking through everything below);
 *  2. opens the store client attached to that base (before the loop runs:
 *     open and close are called from the thread that runs the base, never
 *     from inside one of the client's callbacks);
 *  3. from a first loop callback: N async puts of distinct keys; when they
 *     are done, N async gets into fresh buffers (verified), an async exist, a
 *     get of a missing key (expects OBJECT_NOT_FOUND) and async removes;
 *  4. stops its loop, closes the client, prints a summary and exits 0 when
 *     every check held (1 otherwise).
 *
 * The checks are those of the async contract (mooncake/store.h): each
 * callback runs exactly once, on the host's thread, never inside the
 * submitting call. --segment lets the example contribute memory itself (then
 * no storage node is needed); by default it is a pure client.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "mooncake/store.h"
#include "util/log.h"
#include "util/time.h"

#define MAX_OPS 1024

typedef struct host host_t;

/* One key's put, get and remove: the callbacks' argument. */
typedef struct item {
    host_t *h;
    unsigned idx;
    char key[64];
    uint8_t *in;  /* value put */
    uint8_t *out; /* value read back */
    int put_done, get_done, rm_done;
} item_t;

struct host {
    struct event_base *base;
    struct event *tick_ev;
    mc_store_t *s;
    pthread_t thread;
    unsigned count;
    size_t size;
    mc_replicate_config_t rc;
    item_t *items;

    /* the host's own work */
    uint64_t ticks, ticks_in_flight;
    unsigned inflight;
    int started;

    /* contract checks */
    int in_submit; /* set around every submit call */
    unsigned callbacks, wrong_thread, inside_submit, twice;

    /* outcomes */
    unsigned puts_ok, puts_failed, gets_ok, gets_bad, gets_failed, rms_ok, rms_failed;
    int exist_result, missing_ok, missing_done, exist_done;
    uint64_t t_put0, t_put1, t_get0, t_get1;
    int failed_submit;
};

static void check_cb(host_t *h)
{
    h->callbacks++;
    if (!pthread_equal(pthread_self(), h->thread))
        h->wrong_thread++;
    if (h->in_submit)
        h->inside_submit++;
    h->inflight--;
}

/* Submit wrapper: marks the submit so a callback run inside it is caught. */
#define SUBMIT(h, call)                                                                            \
    do {                                                                                           \
        (h)->in_submit = 1;                                                                        \
        (h)->inflight++;                                                                           \
        mc_status_t st_ = (call);                                                                  \
        (h)->in_submit = 0;                                                                        \
        if (st_ != MC_INPROGRESS) {                                                                \
            (h)->inflight--;                                                                       \
            (h)->failed_submit++;                                                                  \
            fprintf(stderr, "embed_example: %s: submit failed: %s\n", #call, mc_status_str(st_));  \
        }                                                                                          \
    } while (0)

/* The loop ends when no operation is in flight and the host's timer has
 * ticked a few times (so the output shows both kinds of work interleaved). */
#define MIN_TICKS 3

static void maybe_finish(host_t *h)
{
    if (h->inflight == 0 && h->ticks >= MIN_TICKS)
        event_base_loopexit(h->base, NULL);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    host_t *h = arg;
    (void)fd;
    (void)what;
    h->ticks++;
    if (h->inflight > 0)
        h->ticks_in_flight++;
    else if (h->started)
        maybe_finish(h);
}

static void on_remove(void *arg, mc_status_t st)
{
    item_t *it = arg;
    host_t *h = it->h;
    check_cb(h);
    if (it->rm_done++)
        h->twice++;
    if (st == MC_OK) {
        h->rms_ok++;
    } else {
        h->rms_failed++;
        fprintf(stderr, "embed_example: remove %s: %s\n", it->key, mc_status_str(st));
    }
    maybe_finish(h);
}

static void on_missing(void *arg, int64_t result)
{
    host_t *h = arg;
    check_cb(h);
    if (h->missing_done++)
        h->twice++;
    h->missing_ok = result == MC_ERR_OBJECT_NOT_FOUND;
    maybe_finish(h);
}

static void on_exist(void *arg, mc_status_t st)
{
    host_t *h = arg;
    check_cb(h);
    if (h->exist_done++)
        h->twice++;
    h->exist_result = st;
    maybe_finish(h);
}

static void on_get(void *arg, int64_t result)
{
    item_t *it = arg;
    host_t *h = it->h;
    check_cb(h);
    if (it->get_done++)
        h->twice++;
    if (result < 0) {
        h->gets_failed++;
        fprintf(stderr, "embed_example: get %s: %s\n", it->key, mc_status_str((mc_status_t)result));
    } else if ((size_t)result != h->size || memcmp(it->in, it->out, h->size) != 0) {
        h->gets_bad++;
    } else {
        h->gets_ok++;
    }
    /* the last get starts the clean-up round */
    if (h->gets_ok + h->gets_bad + h->gets_failed == h->count) {
        h->t_get1 = mc_now_us();
        /* force: our own gets just took read leases, which would make a
         * plain remove fail with OBJECT_HAS_LEASE until they end */
        for (unsigned i = 0; i < h->count; i++)
            SUBMIT(h, mc_store_remove_async(h->s, h->items[i].key, strlen(h->items[i].key), 1,
                                            on_remove, &h->items[i]));
    }
    maybe_finish(h);
}

static void on_put(void *arg, mc_status_t st)
{
    item_t *it = arg;
    host_t *h = it->h;
    check_cb(h);
    if (it->put_done++)
        h->twice++;
    if (st == MC_OK) {
        h->puts_ok++;
    } else {
        h->puts_failed++;
        fprintf(stderr, "embed_example: put %s: %s\n", it->key, mc_status_str(st));
    }
    if (h->puts_ok + h->puts_failed < h->count) {
        maybe_finish(h);
        return;
    }
    /* every put is done: read them all back, plus an exist and a miss */
    h->t_put1 = h->t_get0 = mc_now_us();
    for (unsigned i = 0; i < h->count; i++) {
        item_t *x = &h->items[i];
        SUBMIT(h, mc_store_get_async(h->s, x->key, strlen(x->key), x->out, h->size, on_get, x));
    }
    SUBMIT(h, mc_store_exist_async(h->s, h->items[0].key, strlen(h->items[0].key), on_exist, h));
    static uint8_t small[16];
    SUBMIT(h,
           mc_store_get_async(h->s, "embed-no-such-key", 17, small, sizeof(small), on_missing, h));
    maybe_finish(h);
}

/* First callback of the loop: start the puts. */
static void on_start(evutil_socket_t fd, short what, void *arg)
{
    host_t *h = arg;
    (void)fd;
    (void)what;
    h->t_put0 = mc_now_us();
    h->started = 1;
    for (unsigned i = 0; i < h->count; i++) {
        item_t *x = &h->items[i];
        SUBMIT(h,
               mc_store_put_async(h->s, x->key, strlen(x->key), x->in, h->size, &h->rc, on_put, x));
    }
    maybe_finish(h);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30;
    return v > 0 ? (uint64_t)(v * (double)mul) : 0;
}

int main(int argc, char **argv)
{
    static host_t h;
    const char *master = "127.0.0.1:50051", *metadata = "master";
    uint64_t segment = 0;
    unsigned tick_ms = 5;
    h.count = 8;
    h.size = 1 << 20;
    mc_replicate_config_init(&h.rc);
    static const struct option lo[] = {
        {"master", 1, 0, 'm'},   {"count", 1, 0, 'n'},   {"size", 1, 0, 's'},
        {"replicas", 1, 0, 'r'}, {"segment", 1, 0, 'g'}, {"tick-ms", 1, 0, 't'},
        {"metadata", 1, 0, 'M'}, {"help", 0, 0, 'h'},    {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (o) {
        case 'm':
            master = optarg;
            break;
        case 'n':
            h.count = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 's':
            h.size = (size_t)parse_size(optarg);
            break;
        case 'r':
            h.rc.replica_num = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'g':
            segment = parse_size(optarg);
            break;
        case 't':
            tick_ms = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'M':
            metadata = optarg;
            break;
        default:
            fprintf(stderr, "usage: embed_example [--master HOST:PORT] [--count N] [--size B] "
                            "[--replicas N] [--segment B] [--tick-ms MS] [--metadata "
                            "master|p2p|redis://H:P]\n");
            return o == 'h' ? 0 : 2;
        }
    }
    if (h.count == 0 || h.count > MAX_OPS || h.size == 0 || h.rc.replica_num == 0 || tick_ms == 0) {
        fprintf(stderr, "embed_example: --count 1..%d, --size, --replicas, --tick-ms > 0\n",
                MAX_OPS);
        return 2;
    }
    mc_log_set_all(MC_LOG_WARN);
    h.thread = pthread_self();

    /* 1. the host's loop and its own periodic work */
    h.base = event_base_new();
    if (h.base == NULL)
        return 1;
    h.tick_ev = event_new(h.base, -1, EV_PERSIST, on_tick, &h);
    struct timeval tv = {.tv_sec = tick_ms / 1000, .tv_usec = (tick_ms % 1000) * 1000};
    event_add(h.tick_ev, &tv);

    /* 2. the client, attached to that loop */
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.metadata = metadata;
    c.host_base = h.base;
    c.global_segment_size = segment;
    /* staging for every value in flight at once (the values are not registered) */
    c.local_buffer_size = (uint64_t)h.count * h.size + (1 << 20);
    mc_status_t st = mc_store_open(&c, &h.s);
    if (st != MC_OK) {
        fprintf(stderr, "embed_example: mc_store_open: %s (%s)\n", mc_status_str(st),
                mc_status_msg(st));
        return 1;
    }
    printf("embed_example: store client '%s' embedded in the host's event loop, master %s\n",
           mc_store_name(h.s), master);

    h.items = calloc(h.count, sizeof(*h.items));
    for (unsigned i = 0; i < h.count; i++) {
        item_t *x = &h.items[i];
        x->h = &h;
        x->idx = i;
        snprintf(x->key, sizeof(x->key), "embed-%d-%u", (int)getpid(), i);
        x->in = malloc(h.size);
        x->out = calloc(1, h.size);
        for (size_t k = 0; k < h.size; k++)
            x->in[k] = (uint8_t)(k * 131 + i * 7 + 1);
    }

    /* 3. run: the operations start from the loop's first callback */
    event_base_once(h.base, -1, EV_TIMEOUT, on_start, &h, NULL);
    /* a bound for a broken store: the loop ends after 60 s whatever happens */
    struct timeval limit = {.tv_sec = 60};
    event_base_loopexit(h.base, &limit);
    uint64_t t0 = mc_now_us();
    event_base_dispatch(h.base);
    uint64_t t1 = mc_now_us();
    int timed_out = h.inflight > 0;

    /* 4. close from the host's thread, outside any callback of the client */
    mc_store_close(h.s);
    event_free(h.tick_ev);
    event_base_free(h.base);

    double mb = (double)h.size * h.count / 1e6;
    printf("put %u x %zu bytes: %u ok, %u failed, %.1f ms (%.0f MB/s)\n", h.count, h.size,
           h.puts_ok, h.puts_failed, (double)(h.t_put1 - h.t_put0) / 1e3,
           mb / ((double)(h.t_put1 - h.t_put0 + 1) / 1e6));
    printf("get %u x %zu bytes: %u ok (data verified), %u wrong data, %u failed, %.1f ms\n",
           h.count, h.size, h.gets_ok, h.gets_bad, h.gets_failed,
           (double)(h.t_get1 - h.t_get0) / 1e3);
    printf("exist: %d, get of a missing key: %s, removes: %u ok, %u failed\n", h.exist_result,
           h.missing_ok ? "OBJECT_NOT_FOUND" : "unexpected", h.rms_ok, h.rms_failed);
    printf("host timer ticks: %" PRIu64 " in %.1f ms (%" PRIu64
           " while store operations were in flight)\n",
           h.ticks, (double)(t1 - t0) / 1e3, h.ticks_in_flight);
    printf("callbacks: %u, on another thread: %u, inside a submit: %u, twice: %u\n", h.callbacks,
           h.wrong_thread, h.inside_submit, h.twice);
    int ok = !timed_out && h.failed_submit == 0 && h.puts_ok == h.count && h.gets_ok == h.count &&
             h.exist_result == 1 && h.missing_ok && h.rms_ok == h.count && h.wrong_thread == 0 &&
             h.inside_submit == 0 && h.twice == 0 && h.callbacks == 3 * h.count + 2 && h.ticks > 0;
    printf("embed_example: %s\n", ok ? "ok" : timed_out ? "FAILED (timed out)" : "FAILED");
    for (unsigned i = 0; i < h.count; i++) {
        free(h.items[i].in);
        free(h.items[i].out);
    }
    free(h.items);
    return ok ? 0 : 1;
}
