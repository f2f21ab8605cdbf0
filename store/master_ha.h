/*
 * master_ha.h - high availability of mooncake-master with Redis as the
 * coordinator: leader election by lease, a journal of every metadata
 * mutation in a Redis stream, standbys that follow it, fencing.
 *
 * Keys (CLUSTER = ha.cluster_id):
 *   mc/CLUSTER/ha/lease    the lease: "ADDR VIEW NONCE" (ADDR = the leader's
 *                          RPC address, VIEW = its view version, NONCE = random
 *                          per process), PX lease_ttl. Clients read ADDR here.
 *   mc/CLUSTER/ha/view     the view-version counter (INCR at each election):
 *                          the fencing token, also the view version clients see.
 *   mc/CLUSTER/ha/journal  the stream; each entry has one field "r" holding a
 *                          sequence of journal records (the codec below).
 *
 * Election: a master that sees no lease runs one script that INCRs the view
 * and SETs the lease NX PX with that view, atomically. It then reads the
 * stream to its end (no deposed leader can append any more: see fencing),
 * installs the journal hook and serves. The leader renews every ttl/3 with a
 * compare-and-extend script; if it has not renewed by the time its lease may
 * have ended (last successful renewal sent + ttl, measured before sending),
 * it stops serving at once and rebuilds its state from the journal as a
 * standby. A clean shutdown deletes the lease if it is still ours
 * (compare-and-delete), so a standby takes over without waiting for the TTL.
 *
 * Fencing: every append is a script that first compares the lease value with
 * ours and refuses ("FENCED") otherwise, so once a new leader holds the
 * lease, no record of the old one can enter the stream, whatever its clocks.
 * It also skips a batch whose last record number is not above
 * mc/CLUSTER/ha/head (the last stored), so an unanswered append is retried
 * safely while the lease lasts.
 *
 * Snapshots: a standby writes its whole state as journal records to
 * mc/CLUSTER/ha/snap (+ snap_id "ENTRY SEQ") and trims the stream up to that
 * entry (mc/CLUSTER/ha/trimmed) in one script, when the journal since the
 * last snapshot is >= ha.snapshot_records and >= twice the state; a follower
 * that finds entries after its position trimmed loads the snapshot. A
 * snapshot larger than ha.snapshot_chunk is a list of chunks of whole
 * records instead of one string (one string holds at most 512 MB), built in
 * mc/CLUSTER/ha/snap:NONCE (expiring, should the standby die meanwhile) and
 * renamed in place by that script; a follower reads it a chunk at a time,
 * checking each time that snap_id is the one it started on.
 *
 * Durability (ha.sync): strict - a mutating RPC is answered only after the
 * records it produced are in Redis (group commit: one script call carries
 * every record pending at that moment); async - answered at once, records
 * flushed within flush_interval (a crash loses at most that window); off -
 * no HA at all.
 *
 * Threads: one HA thread per master, with one blocking hiredis connection
 * (every command has a timeout: min(ttl/3, 1 s), XREAD BLOCK its block time
 * + 1 s); nothing of it runs on a reactor. A thread rather than hiredis'
 * async API on a reactor because everything it does is one sequence per
 * role (read, apply, check the lease, elect, catch up, append, renew) whose
 * steps must not interleave - an append must not overtake a renewal's
 * outcome, a replay must not run during a catch-up - and because applying a
 * large batch or writing a snapshot must not stall RPC handling. The journal
 * hook runs on RPC reactors and appends to a buffer under a mutex;
 * strict-mode waiters are completed on their reactor by a message.
 */
#ifndef MC_STORE_MASTER_HA_H
#define MC_STORE_MASTER_HA_H

#include <stdint.h>

#include "mooncake/status.h"
#include "rpc/msgpack.h"
#include "store/master.h"
#include "store/proto.h"

/* ---- journal record codec (pure) ----
 * A record is a msgpack array [type, fields...]:
 *   MOUNT        [1, client, segment]            segment as mc_proto_write_segment
 *   UNMOUNT      [2, client, segment_id]
 *   PUT_START    [3, client, key, size, pin_ttl_ms, put_id, [[segment_id, offset]...]]
 *   PUT_END      [4, client, key]
 *   DROP         [5, key, park]
 *   CLIENT_EXPIRE[6, client]
 *   META_PUT     [7, client, key, value]
 *   META_DEL     [8, key]
 *   RELEASE      [9, key, segment_id, offset]    a parked object's space freed
 *   DISK         [10, key, size]                 the object has its tier file
 *   SPILL        [11, key]                       memory replicas freed, file kept
 * uuids are [hi, lo]; keys and values bin. */

void mc_jrec_encode(mc_mp_writer_t *w, const mc_master_jrec_t *r);

/* Room for the strings a decoded MOUNT points at. */
typedef struct mc_jrec_scratch {
    mc_proto_segment_t seg;
} mc_jrec_scratch_t;

/* Decode the next record. r's pointers point into the input or into sc.
 * MC_OK; MC_ERR_DESERIALIZE_FAIL with *why naming what was wrong (the reader
 * is then unusable: the rest of the entry cannot be trusted). */
mc_status_t mc_jrec_decode(mc_mp_reader_t *rd, mc_master_jrec_t *r, mc_jrec_scratch_t *sc,
                           const char **why);

/* ---- the HA service ---- */

typedef enum mc_ha_sync {
    MC_HA_SYNC_OFF = 0,
    MC_HA_SYNC_ASYNC,
    MC_HA_SYNC_STRICT,
} mc_ha_sync_t;

typedef enum mc_ha_role {
    MC_HA_ROLE_NONE = 0, /* HA off: a single master */
    MC_HA_ROLE_STANDBY,  /* following the journal; refuses store RPCs */
    MC_HA_ROLE_LEADER,   /* holds the lease, journals, serves */
    MC_HA_ROLE_FAILED,   /* cannot follow the journal (bad record): refuses, never leads */
} mc_ha_role_t;

const char *mc_ha_role_name(mc_ha_role_t r);

#endif /* MC_STORE_MASTER_HA_H */
