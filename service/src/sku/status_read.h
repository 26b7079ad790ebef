/*
 * status_read — a SKU's status read now (not a snapshot's), in one script where it can be: on
 * one Redis lua/status_read.lua reads the layout, the rules and every segment's counters in one
 * atomic call; on a Redis Cluster (the keys span slots), or when that read finds a layout to
 * settle or a segment at another version, the exact read (exact.h) answers instead. Shared by
 * the snapshots' refresh (statsnap.c) and the waiting room's admission step (gate.c).
 */
#ifndef INVENTORY_STATUS_READ_H
#define INVENTORY_STATUS_READ_H

#include "exact.h"

struct areq;

/* Reads sku's status for ar's loop and answers done(arg, rc, status, why, out_of_step) as
 * exact_read_async does (rc 1 with status, a new reference; 0 unknown SKU; -1 failed).
 * segments: the SKU's segment count when the caller knows it, else 0 (the orders' cache is
 * asked; unknown there too: a first call reads the layout alone to learn it). ar stays the
 * caller's. */
void status_read_async(struct areq *ar, const char *sku, int segments, exact_read_fn done,
                       void *arg);

#endif
