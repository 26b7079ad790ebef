/*
 * layout — a SKU's layout in Redis and how it reaches every segment.
 *
 * A PUT, a DELETE and a restock each write their *intent* to the SKU's meta hash in one atomic
 * step (the new version and layout, or a pending restock); the segments (other Redis slots, so
 * no script can touch them all) are then brought to it by layout_settle. Every step of
 * layout_settle is idempotent and guarded by the segment's version, so any number of settles of
 * any number of PUTs, concurrent or cut off half-way, converge on the newest layout; a settle
 * is run by the writer itself and by whoever next meets a layout still pending (an order, a
 * status read, the next admin call), so nothing waits for an admin to repair it.
 */
#ifndef INVENTORY_LAYOUT_H
#define INVENTORY_LAYOUT_H

#include <stdint.h>

#include "store.h"

/* Pending restocks one settle applies at most (the rest: the next one). */
#define LAYOUT_MAX_RESTOCKS 32

struct layout_restock {
    long long rid, version, units;
};

struct layout {
    int64_t version;     /* 0 when the SKU never existed */
    int segments;        /* 0: deleted (or never existed) */
    long long stock;     /* the PUT's stock; -1 when meta predates this field */
    int pending;         /* the layout is not yet on every segment */
    int hwm;             /* segments [0, hwm) may have keys */
    int nrestocks;       /* restocks not yet applied everywhere (first LAYOUT_MAX_RESTOCKS) */
    struct layout_restock restocks[LAYOUT_MAX_RESTOCKS];
};

/* Units of segment k when units are spread over n segments (the first units % n get one more).*/
long long layout_share(long long units, int n, int k);

/* Reads sku's layout. 1 the SKU exists (segments > 0), 0 it does not (out still filled: a
 * deleted SKU may be pending), -1 Redis error. */
int layout_read(struct store *st, const char *sku, struct layout *out);

/* 1 when l has work for layout_settle (a roll-out or restocks pending). */
int layout_unsettled(const struct layout *l);

/* Brings every segment of sku to its current layout and applies the pending restocks, then
 * reads the layout again into *l. 0, or -1 on a Redis error (l then as last read). */
int layout_settle(struct store *st, const char *sku, struct layout *l);

/* layout_read, then layout_settle when something is pending. Same results as layout_read. */
int layout_read_settled(struct store *st, const char *sku, struct layout *l);

#endif
