/* status.c - names and messages of mc_status_t codes (see mooncake/status.h). */
#include <stddef.h>
#include <string.h>

#include "mooncake/status.h"

typedef struct {
    int value;
    const char *name; /* full enumerator name, e.g. "MC_ERR_OBJECT_NOT_FOUND" */
    const char *msg;
} status_row_t;

static const status_row_t status_rows[] = {
#define MC_STATUS_ROW(name, value, msg) {value, #name, msg},
    MC_STATUS_TABLE(MC_STATUS_ROW)
#undef MC_STATUS_ROW
};

static const status_row_t *status_find(mc_status_t st)
{
    /* ~90 rows, called on error paths and in logs only: a scan is fine. */
    for (size_t i = 0; i < sizeof(status_rows) / sizeof(status_rows[0]); i++) {
        if (status_rows[i].value == (int)st)
            return &status_rows[i];
    }
    return NULL;
}

const char *mc_status_str(mc_status_t st)
{
    const status_row_t *row = status_find(st);
    if (row == NULL)
        return "UNKNOWN_STATUS";
    /* Strip the C prefix so names read as upstream's: "OBJECT_NOT_FOUND". */
    if (strncmp(row->name, "MC_ERR_", 7) == 0)
        return row->name + 7;
    return row->name + 3;
}

const char *mc_status_msg(mc_status_t st)
{
    const status_row_t *row = status_find(st);
    return row != NULL ? row->msg : "unknown status code";
}
