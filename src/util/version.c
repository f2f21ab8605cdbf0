/* version.c - mc_version() (mooncake/version.h). MC_VERSION_STRING comes
 * from the Makefile's VERSION (a flag of this file only). */
#include "mooncake/version.h"

#ifndef MC_VERSION_STRING
#error "MC_VERSION_STRING must be defined by the build (the Makefile's VERSION)"
#endif

const char *mc_version(void)
{
    return MC_VERSION_STRING;
}
