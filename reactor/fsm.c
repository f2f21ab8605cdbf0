/* fsm.c - checked state changes. See fsm.h. */
#include "reactor/fsm.h"

#include <stdatomic.h>

mc_status_t mc_fsm_check(const mc_fsm_desc_t *d, const void *obj, unsigned from, unsigned to)
{
    if (!mc_fsm_allowed(d, from, to)) {
        mc_log_write(d->comp, MC_LOG_ERR, "%s %p: illegal transition %s(%u) -> %s(%u) refused",
                     d->machine, obj, mc_fsm_state_name(d, from), from, mc_fsm_state_name(d, to),
                     to);
        return MC_ERR_STATE;
    }
    if (MC_LOG_DEBUG <= atomic_load_explicit(&mc_log_levels[d->comp], memory_order_relaxed))
        mc_log_write(d->comp, MC_LOG_DEBUG, "%s %p: %s -> %s", d->machine, obj,
                     mc_fsm_state_name(d, from), mc_fsm_state_name(d, to));
    return MC_OK;
}
