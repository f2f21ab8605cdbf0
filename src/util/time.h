/*
 * time.h - clocks. Durations and deadlines inside mooncake-c are monotonic
 * microseconds (uint64_t) unless a name says otherwise.
 */
#ifndef MC_UTIL_TIME_H
#define MC_UTIL_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mc_now_us(void)
{
    return mc_now_ns() / 1000u;
}

static inline uint64_t mc_now_ms(void)
{
    return mc_now_ns() / 1000000u;
}

/* Wall-clock microseconds since the epoch; for display and for values that
 * must mean something to another host, never for deadlines. */
static inline uint64_t mc_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Clock clk's time us microseconds from now: a pthread_cond_timedwait
 * deadline (CLOCK_REALTIME for a default condition variable, the clock set
 * with pthread_condattr_setclock otherwise). */
static inline struct timespec mc_timespec_in(clockid_t clk, uint64_t us)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (us % 1000000u) * 1000u;
    ts.tv_sec += (time_t)(us / 1000000u + ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    return ts;
}

static inline struct timeval mc_us_to_timeval(uint64_t us)
{
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000u), .tv_usec = (long)(us % 1000000u)};
    return tv;
}

#endif /* MC_UTIL_TIME_H */
