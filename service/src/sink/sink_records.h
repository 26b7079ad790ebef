/*
 * sink_records — a SKU in Redis as both of inventory-sink's commands read it (the loop,
 * sink_run.c: discovery and the backfill of unlogged changes; reconcile, sink_reconcile.c): a
 * SKU name's check, a segment's log stream key, a segment's order records as the orders
 * table's rows, and the parts of such a row as text.
 */
#ifndef INVENTORY_SINK_RECORDS_H
#define INVENTORY_SINK_RECORDS_H

#include <stddef.h>

#include "sink_db.h"
#include "sink_redis.h"

/* Appends the order records of segment k of sku (HGETALL of its orders hash; part records
 * skipped) to (*o)[*len..], growing *o (*cap entries): order, sku, segment, user, quantity,
 * status, created, items (every part, a cart's in every SKU: its order_items rows) and parts,
 * as "k:q,..." text, or with json_parts as the orders table's JSON (a record that is not what
 * the scripts write is then left out). sold (NULL: not counted) gets the units of the
 * segment's live records (reserved, created, confirmed) added, part records' too: what the
 * segment has sold, as order_items counts it. 0, or -1 with err. */
int sink_segment_records(sink_redis *r, const char *sku, int k, int json_parts,
                         struct sink_db_order **o, size_t *len, size_t *cap, long long *sold,
                         char *err, size_t errlen);

/* The stream key of segment k of sku, "inv:2:{<sku>/<k>}:log", into buf (cap bytes). */
void sink_log_key(char *buf, size_t cap, const char *sku, int k);

/* 1 when s is a SKU name (SPEC §5: [A-Za-z0-9_.:-]{1,64}). */
int sink_sku_ok(const char *s);

/* x->parts := the text "k:q,k:q,..." of its parts (as sink_segment_records writes them
 * without json_parts): of the JSON text it holds, or "<segment>:<quantity>" when NULL ("(bad)"
 * when the JSON is not a parts list). 0, or -1 out of memory. */
int sink_parts_normalise(struct sink_db_order *x);

#endif
