/*
 * master_snapshot.c - the master's whole state as journal records
 * (mc_master_snapshot, master.h): what a standby writes to Redis so that the
 * journal stream can be trimmed, and what a new standby loads before it
 * follows the rest of the stream.
 */
#include <string.h>

#include "store/master_int.h"

/* Segment read lock held. */
static void object_records(mc_master_t *m, obj_t *o, mc_master_journal_fn_t fn, void *arg,
                           int parked)
{
    mc_master_jrec_t dr = {
        .type = MC_JREC_DISK, .key = obj_key(o), .key_len = o->key_len, .size = o->size};
    mc_master_jrec_t lr = {
        .type = MC_JREC_LDISK, .key = obj_key(o), .key_len = o->key_len, .size = o->size};
    if (!parked && obj_ldisk(o)) {
        seg_t *s = m->slots[(o->ldisk & LDISK_SLOT_MASK) - 1u];
        lr.segment_id = s != NULL ? s->id : (mc_uuid_t){0, 0};
    }
    int ldisk = !parked && obj_ldisk(o) && !mc_uuid_is_zero(lr.segment_id);
    if (o->nrep == 0) {
        /* only on disk: DISK (LDISK) alone makes it (complete, readable
         * from its file); otherwise it holds no space and (parked) is
         * invisible */
        if (!parked && o->disk)
            fn(arg, &dr);
        if (ldisk)
            fn(arg, &lr);
        return;
    }
    mc_master_jrec_t r = {.type = MC_JREC_PUT_START,
                          .client = parked ? (mc_uuid_t){1, 1} : o->owner,
                          .key = obj_key(o),
                          .key_len = o->key_len,
                          .size = o->size,
                          .pin_ttl_ms = o->pin_ttl_ms,
                          .put_id = !parked && o->state == OBJ_PROCESSING ? o->lease_us : 0,
                          .nrep = o->nrep};
    for (uint32_t i = 0; i < o->nrep; i++) {
        seg_t *s = m->slots[o->rep[i].slot];
        r.rep[i].segment_id = s != NULL ? s->id : (mc_uuid_t){0, 0};
        r.rep[i].offset = o->rep[i].offset;
    }
    fn(arg, &r);
    if (parked) {
        /* a parked object is out of the table: it is recreated and dropped
         * at once, which parks its space the way a discard does */
        mc_master_jrec_t d = {
            .type = MC_JREC_DROP, .key = obj_key(o), .key_len = o->key_len, .park = 1};
        fn(arg, &d);
    } else if (o->state == OBJ_COMPLETE) {
        mc_master_jrec_t e = {
            .type = MC_JREC_PUT_END, .client = o->owner, .key = obj_key(o), .key_len = o->key_len};
        fn(arg, &e);
    }
    if (!parked && o->disk)
        fn(arg, &dr);
    if (ldisk)
        fn(arg, &lr);
}

void mc_master_snapshot(mc_master_t *m, mc_master_journal_fn_t fn, void *arg)
{
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *s = m->slots[i];
        if (s == NULL || s->state != SEG_MOUNTED)
            continue;
        mc_master_jrec_t r = {.type = MC_JREC_MOUNT,
                              .client = s->owner,
                              .seg = {.id = s->id,
                                      .name = s->name,
                                      .te_endpoint = s->endpoint,
                                      .base = s->base,
                                      .size = s->size}};
        fn(arg, &r);
        pthread_mutex_lock(&m->offload_lock);
        uint64_t disk_hash = s->disk_hash;
        pthread_mutex_unlock(&m->offload_lock);
        if (disk_hash != 0) {
            mc_master_jrec_t dr = {
                .type = MC_JREC_SEG_DISK, .segment_id = s->id, .disk_hash = disk_hash};
            fn(arg, &dr);
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);

    for (unsigned k = 0; k < MC_MASTER_NUM_SHARDS; k++) {
        shard_t *sh = &m->shards[k];
        shard_lock(sh);
        pthread_rwlock_rdlock(&m->seg_lock);
        /* parked ones first: one may share its key with a live object */
        for (obj_t *o = sh->parked; o != NULL; o = o->next_parked)
            object_records(m, o, fn, arg, 1);
        OTAB_WALK(&sh->tab, i, n)
        {
            obj_t *o = sh->tab.slots[i].obj;
            if (o != NULL)
                object_records(m, o, fn, arg, 0);
        }
        pthread_rwlock_unlock(&m->seg_lock);
        shard_unlock(sh);
    }
    meta_snapshot(m, fn, arg);
    offload_snapshot(m, fn, arg);
}
