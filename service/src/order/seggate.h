/*
 * seggate — per worker loop, one gate per (SKU, segment): at most one order of the loop goes to
 * Redis for a segment at a time (to try its lock, to wait for it, or holding it); the loop's
 * other orders that want that segment queue here, first come first served, and are woken by
 * the local release instead of each sending a try bound to find the segment busy or waiting on
 * Redis's unlock channel.
 *
 * Loop-local: every call on the loop's thread, no locking. A gate exists while it has an owner
 * and is freed when its owner leaves with nobody queued. What the gate does not know: orders of
 * other loops and other instances (they meet in Redis, through the lock itself).
 */
#ifndef INVENTORY_SEGGATE_H
#define INVENTORY_SEGGATE_H

#include <stdbool.h>
#include <stdint.h>

struct seggate;

/* One queued order; embedded in the order. */
struct seggate_waiter {
    struct seggate_waiter *next, *prev;
    void *owner; /* the order */
};

struct seggate *seggate_new(void);
void seggate_free(struct seggate *g); /* no waiter may be queued */

/* True when an order of this loop owns segment k of sku's gate. */
bool seggate_busy(const struct seggate *g, const char *sku, int k);

/* Takes the gate of (sku, k), which must not be busy. 0, or -1 out of memory (then the caller
 * goes to Redis without a gate, as if there were none). */
int seggate_enter(struct seggate *g, const char *sku, int k);

/* Queues w behind the busy gate of (sku, k); seggate_leave of the owner hands the gate to w. */
void seggate_queue(struct seggate *g, const char *sku, int k, struct seggate_waiter *w);

/* Takes w out of the queue of (sku, k) (its deadline passed, or the loop is ending). */
void seggate_unqueue(struct seggate *g, const char *sku, int k, struct seggate_waiter *w);

/* The owner is done with (sku, k). Returns the first waiter, which owns the gate from now on
 * (the caller wakes it), or NULL (the gate is free). */
struct seggate_waiter *seggate_leave(struct seggate *g, const char *sku, int k);

/* Queued waiters of (sku, k): 0 when the gate is free. */
int seggate_queued(const struct seggate *g, const char *sku, int k);

/* Busy elsewhere: a try of this loop found (sku, k) held by another instance (the gates and the
 * instance-wide held hint only know this one). For ms from now_ms the loop's orders walk past
 * it instead of each sending a try bound to find it busy; found held again within max_ms of the
 * hint's end, it is walked past twice as long as before, up to max_ms. A hint, not a lock: a
 * small direct-mapped table, where a newer hint may push out an older one (which then just
 * costs a try). */
void seggate_hint_busy(struct seggate *g, const char *sku, int k, int64_t now_ms, int ms,
                       int max_ms);

/* True while a hint of seggate_hint_busy on (sku, k) runs at now_ms. */
bool seggate_hinted_busy(const struct seggate *g, const char *sku, int k, int64_t now_ms);

/* Ends the hint on (sku, k): this loop got its lock. */
void seggate_hint_clear(struct seggate *g, const char *sku, int k);

#endif
