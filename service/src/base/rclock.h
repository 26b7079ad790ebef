/*
 * rclock — this instance's estimate of Redis's clock (TIME), for the sale window's fast path
 * (SPEC §11: the window is judged on Redis's clock, the same for every instance).
 *
 * The sweeper (sweep.c) asks Redis for TIME about once a second and notes the answer with the
 * monotonic times the question left and the answer came: the estimate is Redis's time plus the
 * monotonic time since the midpoint, and its error is at most half that round trip plus the
 * drift since (counted as 1 ms per second of age, far above any real clock's). An answer given
 * from the estimate is given only when it holds whatever the error: a request within err of the
 * sale's start goes to Redis, which decides.
 */
#ifndef INVENTORY_RCLOCK_H
#define INVENTORY_RCLOCK_H

#include <stdint.h>

/* An estimate older than this is not used (the sweeper stopped, or Redis is unreachable). */
#define RCLOCK_MAX_AGE_MS 5000

/* Notes a TIME answer redis_ms, asked at mono sent_ms and answered at mono got_ms. Any thread. */
void rclock_note(int64_t redis_ms, int64_t sent_ms, int64_t got_ms);

/* Redis's time now (ms since the epoch) into *now and the most the estimate may be off into
 * *err: 0, or -1 when there is no estimate young enough. Any thread. */
int rclock_now(int64_t *now, int64_t *err);

#endif
