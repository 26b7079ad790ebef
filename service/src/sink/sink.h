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

#endif
