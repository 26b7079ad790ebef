/*
 * The watchdog (watchdog.c): a service that renews the leases of a client's held locks on a
 * thread of its own. It uses the client (its endpoint, for a connection of its own) and the lock
 * logic (renewal calls and verdicts); the client keeps it only as an opaque service
 * (client_internal.h), started by the first lc_watchdog_add. The blocking lock (lock.c) is its
 * user: it registers a hold and keeps the registration in a lc_watch. Not public API.
 */
#ifndef LOCKCORE_WATCHDOG_INTERNAL_H
#define LOCKCORE_WATCHDOG_INTERNAL_H

#include <stdint.h>

#include "hold_internal.h"

typedef struct lc_wd_entry lc_wd_entry;

/* A hold's registration with its client's watchdog, kept by the hold's owner: zero (not
 * registered) until lc_watchdog_add, zero again once removed or dropped by the watchdog. Only
 * watchdog.c touches it, under the watchdog's mutex. */
typedef struct lc_watch {
    lc_wd_entry *entry;
} lc_watch;

/* Registers the fresh hold h (its lease, cap and since-when as they are now) with the client's
 * watchdog, starting the watchdog on first use. owner is handed to h's on_lost callback when a
 * renewal finds the hold lost (called on the watchdog thread). h and w must stay valid until
 * lc_watchdog_remove returns. LC_OK, or LC_ENOMEM (no memory or no thread). */
lc_status lc_watchdog_add(lc_client *client, lc_watch *w, lc_hold *h, lc_lock *owner);

/* Removes a registration (none: nothing happens); when it returns no renewal of that hold is in
 * flight or will be sent. */
void lc_watchdog_remove(lc_client *client, lc_watch *w);

/* Changes the lease the watchdog renews a registered hold with and makes its next renewal due a
 * third of that from now. Waits for a renewal of the hold in flight first, so every renewal sent
 * after it returns carries the new lease: call it before the command that sets the lease in
 * Redis, and no renewal with the old lease can land after that command. */
void lc_watchdog_set_lease(lc_client *client, lc_watch *w, int lease_ms);

/* Records that Redis confirmed the hold's lease at at_ms (an extend), for the watchdog's
 * judgement of how long its lease may still run when a renewal fails. */
void lc_watchdog_renewed(lc_client *client, lc_watch *w, int64_t at_ms);

#endif
