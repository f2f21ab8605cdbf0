/* The connection reader (rpc/reader.h) over a socketpair: buffered frames,
 * payloads streamed into a scatter list and discarded, bytes arriving one at
 * a time, an owner that closes inside a callback, protocol errors and EOF. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rpc/msgpack.h"
#include "rpc/reader.h"

/* ---- an owner that records what it was given ------------------------- */

#define MAX_SEEN 16

typedef struct owner {
    mc_rpc_reader_t rd;
    mc_frame_limits_t lim;
    int closed;
    int close_after; /* close once this many frames were delivered (0: never) */
    int stream;      /* on_header: stream payloads */
    int refuse;      /* on_header: protocol error */
    int discard;     /* stream_begin: leave the destination empty */
    uint8_t piece[3][40];
    struct iovec iov[2];
    int nseen;
    struct {
        uint64_t req_id;
        int streamed;
        uint8_t body_first; /* the value of field 1 */
        size_t payload_len;
        uint8_t payload[128];
    } seen[MAX_SEEN];
} owner_t;

static int o_open(void *arg)
{
    return !((owner_t *)arg)->closed;
}

static int o_on_header(void *arg, const mc_frame_hdr_t *h, const char **why)
{
    owner_t *o = arg;
    (void)h;
    if (o->refuse) {
        *why = "refused by the owner";
        return -1;
    }
    return o->stream;
}

static void o_stream_begin(void *arg, const mc_frame_hdr_t *h, const uint8_t *body,
                           mc_rpc_rx_dst_t *d)
{
    owner_t *o = arg;
    (void)h;
    (void)body;
    memset(o->piece, 0, sizeof(o->piece));
    if (o->discard)
        return;
    /* three pieces: 10 bytes, then two of 40 */
    d->dst = o->piece[0];
    d->dst_len = 10;
    o->iov[0] = (struct iovec){o->piece[1], 40};
    o->iov[1] = (struct iovec){o->piece[2], 40};
    d->iov = o->iov;
    d->niov = 2;
}

static void o_on_frame(void *arg, const mc_frame_t *f, int streamed)
{
    owner_t *o = arg;
    assert_true(o->nseen < MAX_SEEN);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, f->body, f->hdr.body_len);
    uint32_t n = mc_mp_read_map(&r);
    assert_int_equal(n, 1);
    assert_int_equal(mc_mp_read_uint(&r), 1);
    o->seen[o->nseen].body_first = (uint8_t)mc_mp_read_uint(&r);
    o->seen[o->nseen].req_id = f->hdr.req_id;
    o->seen[o->nseen].streamed = streamed;
    o->seen[o->nseen].payload_len = f->hdr.payload_len;
    if (streamed) {
        assert_null(f->payload);
        if (!o->discard) {
            memcpy(o->seen[o->nseen].payload, o->piece[0], 10);
            memcpy(o->seen[o->nseen].payload + 10, o->piece[1], 40);
            memcpy(o->seen[o->nseen].payload + 50, o->piece[2], 40);
        }
    } else if (f->hdr.payload_len > 0) {
        memcpy(o->seen[o->nseen].payload, f->payload, f->hdr.payload_len);
    }
    o->nseen++;
    if (o->close_after > 0 && o->nseen == o->close_after) {
        o->closed = 1; /* as a connection closing itself in a handler */
        mc_rpc_reader_fini(&o->rd);
    }
}

static const mc_rpc_reader_ops_t ops = {
    .on_header = o_on_header,
    .stream_begin = o_stream_begin,
    .on_frame = o_on_frame,
    .open = o_open,
};

static int fds[2]; /* [0] the reader's, [1] the peer's */

static owner_t *owner_new(void)
{
    static owner_t o;
    memset(&o, 0, sizeof(o));
    mc_frame_limits_init(&o.lim);
    mc_rpc_reader_init(&o.rd, &ops, &o, &o.lim);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    return &o;
}

static void owner_free(owner_t *o)
{
    if (!o->closed)
        mc_rpc_reader_fini(&o->rd);
    close(fds[0]);
    close(fds[1]);
}

/* A frame with body {1: tag} and payload bytes p[i] = tag + i. */
static void frame(mc_buf_t *b, uint64_t req_id, uint8_t tag, uint32_t payload_len)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_uint(&w, tag);
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = MC_FRAME_REQUEST,
                        .method = 3,
                        .req_id = req_id,
                        .body_len = (uint32_t)mc_buf_used(&body),
                        .payload_len = payload_len};
    uint8_t hdr[MC_FRAME_HDR_LEN];
    mc_frame_encode_hdr(hdr, &h);
    assert_int_equal(mc_buf_append(b, hdr, sizeof(hdr)), MC_OK);
    assert_int_equal(mc_buf_append(b, mc_buf_head(&body), mc_buf_used(&body)), MC_OK);
    for (uint32_t i = 0; i < payload_len; i++) {
        uint8_t v = (uint8_t)(tag + i);
        assert_int_equal(mc_buf_append(b, &v, 1), MC_OK);
    }
    mc_buf_fini(&body);
}

static void check_payload(const owner_t *o, int i, uint8_t tag, size_t len)
{
    assert_int_equal(o->seen[i].payload_len, len);
    for (size_t k = 0; k < len; k++)
        assert_int_equal(o->seen[i].payload[k], (uint8_t)(tag + k));
}

static mc_status_t read_all(owner_t *o)
{
    const char *why = NULL;
    return mc_rpc_reader_read(&o->rd, fds[0], &why);
}

/* ---- tests ----------------------------------------------------------- */

static void buffered_frames_arriving_together_are_each_delivered_once(void **state)
{
    (void)state;
    owner_t *o = owner_new();
    mc_buf_t b = MC_BUF_INIT;
    frame(&b, 1, 10, 0);
    frame(&b, 2, 20, 90);
    frame(&b, 3, 30, 5);
    assert_int_equal(write(fds[1], mc_buf_head(&b), mc_buf_used(&b)), (ssize_t)mc_buf_used(&b));
    assert_int_equal(read_all(o), MC_OK);
    assert_int_equal(o->nseen, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(o->seen[i].req_id, (uint64_t)i + 1);
        assert_int_equal(o->seen[i].body_first, 10 * (i + 1));
        assert_false(o->seen[i].streamed);
    }
    check_payload(o, 1, 20, 90);
    check_payload(o, 2, 30, 5);
    mc_buf_fini(&b);
    owner_free(o);
}

static void a_streamed_payload_fills_the_scatter_list_whatever_the_split(void **state)
{
    (void)state;
    owner_t *o = owner_new();
    o->stream = 1;
    mc_buf_t b = MC_BUF_INIT;
    frame(&b, 7, 40, 90);
    frame(&b, 8, 50, 90);
    /* one byte at a time: every split point of header, body and payload */
    for (size_t i = 0; i < mc_buf_used(&b); i++) {
        assert_int_equal(write(fds[1], mc_buf_head(&b) + i, 1), 1);
        assert_int_equal(read_all(o), MC_OK);
        if (o->nseen == 1 && i + 1 < mc_buf_used(&b))
            check_payload(o, 0, 40, 90); /* the first is complete */
    }
    assert_int_equal(o->nseen, 2);
    for (int i = 0; i < 2; i++) {
        assert_true(o->seen[i].streamed);
        assert_int_equal(o->seen[i].req_id, 7u + (unsigned)i);
        check_payload(o, i, (uint8_t)(40 + 10 * i), 90);
    }
    assert_false(mc_rpc_reader_streaming(&o->rd));
    mc_buf_fini(&b);
    owner_free(o);
}

static void a_discarded_payload_leaves_the_next_frame_intact(void **state)
{
    (void)state;
    owner_t *o = owner_new();
    o->stream = 1;
    o->discard = 1;
    mc_buf_t b = MC_BUF_INIT;
    frame(&b, 1, 60, 90);
    mc_buf_t c = MC_BUF_INIT;
    frame(&c, 2, 70, 0);
    /* the first frame's header and body, then its payload with the next frame */
    size_t split = MC_FRAME_HDR_LEN + 4;
    assert_int_equal(write(fds[1], mc_buf_head(&b), split), (ssize_t)split);
    assert_int_equal(read_all(o), MC_OK);
    assert_true(mc_rpc_reader_streaming(&o->rd));
    assert_int_equal(write(fds[1], mc_buf_head(&b) + split, mc_buf_used(&b) - split),
                     (ssize_t)(mc_buf_used(&b) - split));
    assert_int_equal(write(fds[1], mc_buf_head(&c), mc_buf_used(&c)), (ssize_t)mc_buf_used(&c));
    assert_int_equal(read_all(o), MC_OK);
    assert_int_equal(o->nseen, 2);
    assert_true(o->seen[0].streamed);
    assert_int_equal(o->seen[1].req_id, 2);
    assert_int_equal(o->seen[1].body_first, 70);
    mc_buf_fini(&b);
    mc_buf_fini(&c);
    owner_free(o);
}

static void an_owner_closing_in_a_callback_stops_the_reader_at_once(void **state)
{
    (void)state;
    owner_t *o = owner_new();
    o->close_after = 1;
    mc_buf_t b = MC_BUF_INIT;
    frame(&b, 1, 1, 3);
    frame(&b, 2, 2, 3);
    assert_int_equal(write(fds[1], mc_buf_head(&b), mc_buf_used(&b)), (ssize_t)mc_buf_used(&b));
    assert_int_equal(read_all(o), MC_OK);
    assert_int_equal(o->nseen, 1); /* the second frame is never delivered */
    mc_buf_fini(&b);
    owner_free(o);
}

static void broken_frames_and_refused_headers_are_protocol_errors(void **state)
{
    (void)state;
    owner_t *o = owner_new();
    uint8_t junk[MC_FRAME_HDR_LEN];
    memset(junk, 'x', sizeof(junk));
    assert_int_equal(write(fds[1], junk, sizeof(junk)), (ssize_t)sizeof(junk));
    const char *why = NULL;
    assert_int_equal(mc_rpc_reader_read(&o->rd, fds[0], &why), MC_ERR_PROTOCOL);
    assert_non_null(why);
    owner_free(o);

    o = owner_new();
    o->refuse = 1;
    mc_buf_t b = MC_BUF_INIT;
    frame(&b, 1, 1, 0);
    assert_int_equal(write(fds[1], mc_buf_head(&b), mc_buf_used(&b)), (ssize_t)mc_buf_used(&b));
    why = NULL;
    assert_int_equal(mc_rpc_reader_read(&o->rd, fds[0], &why), MC_ERR_PROTOCOL);
    assert_string_equal(why, "refused by the owner");
    assert_int_equal(o->nseen, 0);
    mc_buf_fini(&b);
    owner_free(o);
}

static void the_peer_closing_is_reported_after_what_it_sent(void **state)
{
    (void)state;
    owner_t *o = owner_new();
    mc_buf_t b = MC_BUF_INIT;
    frame(&b, 5, 9, 0);
    assert_int_equal(write(fds[1], mc_buf_head(&b), mc_buf_used(&b)), (ssize_t)mc_buf_used(&b));
    close(fds[1]);
    fds[1] = open("/dev/null", O_RDONLY); /* owner_free closes it */
    assert_int_equal(read_all(o), MC_OK); /* a short read: drained for now */
    assert_int_equal(o->nseen, 1);
    assert_int_equal(read_all(o), MC_ERR_CONN_CLOSED);
    mc_buf_fini(&b);
    owner_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(buffered_frames_arriving_together_are_each_delivered_once),
        cmocka_unit_test(a_streamed_payload_fills_the_scatter_list_whatever_the_split),
        cmocka_unit_test(a_discarded_payload_leaves_the_next_frame_intact),
        cmocka_unit_test(an_owner_closing_in_a_callback_stops_the_reader_at_once),
        cmocka_unit_test(broken_frames_and_refused_headers_are_protocol_errors),
        cmocka_unit_test(the_peer_closing_is_reported_after_what_it_sent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
