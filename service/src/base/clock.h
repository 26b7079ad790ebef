/*
 * clock — the service's clocks, in one place: CLOCK_MONOTONIC milliseconds for deadlines, ages
 * and intervals (it never jumps), CLOCK_REALTIME milliseconds for what names a moment (log
 * timestamps). No other file of service/src reads a clock.
 */
#ifndef INVENTORY_CLOCK_H
#define INVENTORY_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (arbitrary origin: only differences mean anything). */
static inline int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Microseconds on CLOCK_MONOTONIC (request durations). */
static inline int64_t clock_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Milliseconds since the Unix epoch on CLOCK_REALTIME (may jump: never for intervals). */
static inline int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif /* INVENTORY_CLOCK_H */
