/*
 * client_metrics.c - a storage node's or standalone service's Prometheus
 * families (store/node_http.h serves them): its segments (configured size,
 * and their use as the master accounts it), whether the master answers, and
 * what its transfer engine moved and served (te_metrics).
 *
 * Segment use. Objects are placed in a node's segments by the master and
 * written by their clients straight into the node's memory, so only the
 * master knows how much of it holds objects. A scrape asks it: one
 * LIST_SEGMENTS call with our client id (the master lists only our
 * segments; one that does not know the filter lists every segment, and we
 * keep ours). The call is bounded (SEG_USE_TIMEOUT_US) and skipped while
 * the pings say the master is away: then the use families are left out of
 * the scrape (mooncake_store_master_up says why) rather than guessed. It is
 * made at most once per SEG_USE_MAX_AGE_US: the scrapes in between get its
 * answer (or its failure), so a storm of scrapes costs the master one call
 * a second, and a master that did not answer is not waited for again at
 * once.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "store/proto.h"
#include "transport/te.h"
#include "util/prom.h"
#include "util/time.h"

/* A scrape waits this long at most for the master's account. */
#define SEG_USE_TIMEOUT_US 2000000ull
/* and asks for it again only once the last answer is this old */
#define SEG_USE_MAX_AGE_US 1000000ull

/* One entry of SEGMENTS: added to u when it is ours and mounted. */
static void seg_use_entry(mc_mp_reader_t *r, mc_uuid_t me, store_seg_use_t *u)
{
    mc_uuid_t owner = {0, 0};
    uint64_t size = 0, used = 0, allocs = 0;
    const char *state = NULL;
    uint32_t slen = 0;
    uint32_t m = mc_mp_read_map(r);
    for (uint32_t i = 0; i < m && r->err == MC_OK; i++) {
        switch (mc_mp_read_uint(r)) {
        case MC_F_CLIENT_ID:
            owner = mc_proto_read_uuid(r);
            break;
        case MC_F_SIZE:
            size = mc_mp_read_uint(r);
            break;
        case MC_F_USED:
            used = mc_mp_read_uint(r);
            break;
        case MC_F_ALLOCS:
            allocs = mc_mp_read_uint(r);
            break;
        case MC_F_STATE:
            state = mc_mp_read_str(r, &slen);
            break;
        default:
            mc_mp_skip(r);
            break;
        }
    }
    if (r->err != MC_OK || !mc_uuid_eq(owner, me) || state == NULL || slen != 7 ||
        memcmp(state, "MOUNTED", 7) != 0)
        return; /* another client's, or draining after an unmount */
    u->count++;
    u->bytes += size;
    u->used += used;
    u->replicas += allocs;
}

/* Ask the master for our segments' use: MC_OK with *u, or why not. From a
 * thread that is not one of the client's reactors (the HTTP thread). */
static mc_status_t seg_use_get(mc_store_t *s, store_seg_use_t *u)
{
    memset(u, 0, sizeof(*u));
    if (s->svc != NULL || s->mcli == NULL)
        return MC_ERR_NOT_SUPPORTED;
    if (atomic_load_explicit(&s->master_down, memory_order_relaxed))
        return MC_ERR_RPC_TIMEOUT;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_list_segments(&w, s->client_id);
    uint64_t t =
        s->cfg.rpc_timeout_us < SEG_USE_TIMEOUT_US ? s->cfg.rpc_timeout_us : SEG_USE_TIMEOUT_US;
    mc_status_t st =
        w.err != MC_OK ? w.err : store_call_sync_timeout(s, MC_RPC_LIST_SEGMENTS, &body, &resp, t);
    if (st == MC_OK) {
        mc_mp_reader_t r;
        mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
        uint32_t nf = mc_mp_read_map(&r);
        for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
            if (mc_mp_read_uint(&r) != MC_F_SEGMENTS) {
                mc_mp_skip(&r);
                continue;
            }
            uint32_t ns = mc_mp_read_array(&r);
            for (uint32_t e = 0; e < ns && r.err == MC_OK; e++)
                seg_use_entry(&r, s->client_id, u);
        }
        st = r.err;
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

/* The master's account of our segments, at most SEG_USE_MAX_AGE_US old. */
static mc_status_t seg_use_recent(mc_store_t *s, store_seg_use_t *u)
{
    if (u->at_us == 0 || mc_now_us() - u->at_us >= SEG_USE_MAX_AGE_US) {
        u->st = seg_use_get(s, u);
        u->at_us = mc_now_us();
    }
    return u->st;
}

void store_node_metrics(mc_store_t *s, store_seg_use_t *seg_use, mc_buf_t *b)
{
    mc_prom_gauge(b, "mooncake_store_segment_capacity_bytes",
                  "Bytes of memory this process contributes to the pool (global_segment_size; "
                  "mooncake_store_segment_mounted_bytes counts every segment it mounted).",
                  s->cfg.global_segment_size);
    if (seg_use_recent(s, seg_use) == MC_OK) {
        const store_seg_use_t *u = seg_use;
        mc_prom_gauge(b, "mooncake_store_segments_mounted",
                      "Segments of this process mounted at the master (asked at most once a "
                      "second).",
                      u->count);
        mc_prom_gauge(b, "mooncake_store_segment_mounted_bytes",
                      "Bytes of this process's segments mounted at the master (asked at most "
                      "once a second; absent while the master does not answer).",
                      u->bytes);
        mc_prom_gauge(b, "mooncake_store_segment_used_bytes",
                      "Bytes of the objects the master placed in this process's segments (asked "
                      "at most once a second; absent while the master does not answer).",
                      u->used);
        mc_prom_gauge(b, "mooncake_store_segment_replicas",
                      "Object replicas the master placed in this process's segments (asked at "
                      "most once a second).",
                      u->replicas);
    }
    mc_prom_gauge(b, "mooncake_store_local_buffer_bytes",
                  "Bytes of this process's registered staging buffer.", s->cfg.local_buffer_size);
    mc_prom_gauge(b, "mooncake_store_master_up",
                  "1 while the master answers this process's pings, 0 after one failed.",
                  !atomic_load_explicit(&s->master_down, memory_order_relaxed));
    if (s->offload != NULL) { /* node-local offload (client_offload.c) */
        store_offload_stats_t os;
        store_offload_stats(s, &os);
        mc_prom_counter(b, "mooncake_store_offload_written_total",
                        "Objects this node wrote to its offload directory.", os.written);
        mc_prom_counter(b, "mooncake_store_offload_write_failures_total",
                        "Offload writes that failed (disk full, quota).", os.write_failed);
        mc_prom_counter(b, "mooncake_store_offload_written_direct_total",
                        "Offload files written with O_DIRECT, straight from the segment (the "
                        "others through the page cache).",
                        os.written_direct);
        mc_prom_counter(b, "mooncake_store_offload_written_bytes_total",
                        "Bytes of objects written to the offload directory.", os.bytes_written);
        mc_prom_counter(b, "mooncake_store_offload_loads_total",
                        "Disk-only objects read back into the segment for readers.", os.loaded);
        mc_prom_counter(b, "mooncake_store_offload_loads_direct_total",
                        "Of those, read with O_DIRECT (the others through the page cache).",
                        os.loaded_direct);
        mc_prom_counter(b, "mooncake_store_offload_load_failures_total",
                        "Loads that failed (a corrupt, cut or missing file: never served).",
                        os.load_failed);
        mc_prom_counter(b, "mooncake_store_offload_own_reads_total",
                        "Gets of objects only on this node's disk, by this process or a "
                        "co-located client of its service, read straight into the get's memory "
                        "(no load into the segment).",
                        os.own_read);
        mc_prom_counter(b, "mooncake_store_offload_own_reads_direct_total",
                        "Of those, read with O_DIRECT (the get's memory aligned).",
                        os.own_read_direct);
        mc_prom_counter(b, "mooncake_store_offload_own_read_failures_total",
                        "Own reads that failed (the get asked for a load then).",
                        os.own_read_failed);
        mc_prom_counter(b, "mooncake_store_offload_poll_pauses_total",
                        "Polls for offload work the master answered at once and empty (a "
                        "master that does not hold them): the node paused 2 ms before the next.",
                        os.poll_pauses);
        mc_prom_counter(b, "mooncake_store_offload_read_bytes_total",
                        "Bytes of objects read from the offload directory (loads and own reads).",
                        os.bytes_read);
        mc_prom_counter(b, "mooncake_store_offload_deleted_total",
                        "Offload files deleted because their objects were removed.", os.deleted);
        mc_prom_counter(b, "mooncake_store_offload_reported_total",
                        "Files of the offload directory the master took at this node's starts "
                        "(objects again).",
                        os.reported);
        mc_prom_counter(b, "mooncake_store_offload_report_refused_total",
                        "Files found at start that the master refused (their keys were put "
                        "again or removed meanwhile): deleted.",
                        os.report_refused);
        mc_prom_counter(b, "mooncake_store_offload_report_calls_total",
                        "Calls to the master the start reports took (a batch of files each).",
                        os.report_calls);
        mc_prom_counter(b, "mooncake_store_offload_quota_dropped_total",
                        "Offload files deleted for the quota (least recently used first).",
                        os.quota_dropped);
        store_offload_metrics(s, b);
    }
    store_get_load_metrics(s, b);
    if (s->te != NULL)
        te_metrics(s->te, "mooncake_store", b);
}

void store_get_load_metrics(mc_store_t *s, mc_buf_t *b)
{
    static const char name[] = "mooncake_store_get_load_stage_seconds";
    mc_prom_hist_stages(
        b, name,
        "Time of this process's gets of objects only on a node's disk, by stage on the "
        "reader: submit (to the call that got the load), call (its round trip less the "
        "master's hold), held (the master held it: the node's load is inside), prepare "
        "(to the transfer), transfer (the copy out of the node's segment), finish (to "
        "the callback).",
        store_gls_names, s->get_load_stage, STORE_GLS_N);
    mc_prom_counter(b, "mooncake_store_get_load_partial_bytes_total",
                    "Bytes this process's gets copied out of a node's segment while the node was "
                    "still reading the object from its disk (progressive loads; returned only "
                    "once the load's checksum matched).",
                    atomic_load(&s->get_load_partial_bytes));
}
