/*
 * clock — the service's clock for deadlines, ages and intervals, in one place: CLOCK_MONOTONIC
 * milliseconds (it never jumps).
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

#endif /* INVENTORY_CLOCK_H */
