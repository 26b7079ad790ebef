/*
 * The blocking lock (lock.c, and multilock.c on top of it), the top of the blocking face: what
 * its tests read of a handle beyond the public API. The handle itself (struct lc_lock) is
 * private to lock.c. Not public API.
 */
#ifndef LOCKCORE_LOCK_INTERNAL_H
#define LOCKCORE_LOCK_INTERNAL_H

#include "lockcore/lockcore.h"

/* How the last wait inside the handle's last acquire ended: no wait at all, woken by the unlock
 * message, or the fallback poll's timer. Tests tell a wake-up by pub/sub from a lucky poll with
 * it, instead of by how fast the waiter came (which a loaded machine makes slow). */
enum lc_wake { LC_WAKE_NONE = 0, LC_WAKE_UNLOCK, LC_WAKE_POLL };
int lc_lock_last_wake(lc_lock *lock);

#endif
