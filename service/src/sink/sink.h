/*
 * sink — inventory-sink's two commands: the sink itself (sink_run: the order log of every
 * segment into the database, SPEC §12) and reconcile (sink_reconcile: the database against
 * Redis for one SKU).
 */
#ifndef INVENTORY_SINK_H
#define INVENTORY_SINK_H

#include <signal.h>

#include "sink_config.h"
#include "sink_db.h"
#include "sink_redis.h"

/* Set by SIGTERM / SIGINT: the sink finishes the batch in flight and returns. */
extern volatile sig_atomic_t sink_stop;

/* Runs the sink until sink_stop. Returns the process's exit code: 0 after a stop, 2 when it
 * could not start (bad Redis URL, metrics port taken). */
int sink_run(const struct sink_config *cfg);

/* Compares the orders of cfg->sku in Redis and in the database, printing every difference on
 * stdout, one a line. Returns 0 when equal, 1 when they differ, 2 when either could not be
 * read. */
int sink_reconcile(const struct sink_config *cfg);

/* Appends the order records of segment k of sku (HGETALL of its orders hash; part records
 * skipped) to (*o)[*len..], growing *o (*cap entries): order, sku, segment, user, quantity,
 * status, created and parts, as "k:q,..." text, or with json_parts as the orders table's JSON
 * (a record that is not what the scripts write is then left out). 0, or -1 with err. */
int sink_segment_records(sink_redis *r, const char *sku, int k, int json_parts,
                         struct sink_db_order **o, size_t *len, size_t *cap, char *err,
                         size_t errlen);

/* The stream key of segment k of sku, "inv:2:{<sku>/<k>}:log", into buf (cap bytes). */
void sink_log_key(char *buf, size_t cap, const char *sku, int k);

/* 1 when s is a SKU name (SPEC §5: [A-Za-z0-9_.:-]{1,64}). */
int sink_sku_ok(const char *s);

#endif
