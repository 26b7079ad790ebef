/* The estimate of Redis's clock; see rclock.h. The offset and its error are written together
 * and read together under one mutex (written about once a second by the sweeper, read once per
 * order whose SKU has a sale window). */
#include <pthread.h>

#include "clock.h"
#include "rclock.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t offset_ms; /* Redis ms - mono ms at the midpoint */
static int64_t base_err_ms;
static int64_t noted_at; /* mono ms; 0: never */

void rclock_note(int64_t redis_ms, int64_t sent_ms, int64_t got_ms)
{
    if (got_ms < sent_ms)
        return;
    int64_t rtt = got_ms - sent_ms;
    pthread_mutex_lock(&mu);
    /* A faster answer gives a tighter estimate; a slow one replaces it only once it is old. */
    if (noted_at == 0 || rtt / 2 + 1 <= base_err_ms || got_ms - noted_at >= 1000) {
        offset_ms = redis_ms - (sent_ms + rtt / 2);
        base_err_ms = rtt / 2 + 1;
        noted_at = got_ms;
    }
    pthread_mutex_unlock(&mu);
}

int rclock_now(int64_t *now, int64_t *err)
{
    int64_t mono = clock_mono_ms();
    pthread_mutex_lock(&mu);
    int64_t at = noted_at, off = offset_ms, e = base_err_ms;
    pthread_mutex_unlock(&mu);
    if (at == 0 || mono - at > RCLOCK_MAX_AGE_MS)
        return -1;
    *now = mono + off;
    *err = e + (mono - at) / 1000 + 1;
    return 0;
}
