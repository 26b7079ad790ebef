/*
 * sink_metrics — inventory-sink's counters and gauges (relaxed atomics, updated by the sink's
 * one thread, read by the HTTP thread) and its tiny HTTP server: GET /metrics (Prometheus text
 * format 0.0.4) and GET /healthz.
 *
 * Series:
 *   inventory_sink_events_written_total     log entries committed to the database by this process
 *                                            (a replayed one counts again)
 *   inventory_sink_events_duplicate_total   of those, entries whose order_events row was already
 *                                            there (a replay after a crash or a claim)
 *   inventory_sink_batches_total            transactions committed
 *   inventory_sink_claimed_total            entries taken over from other consumers (XAUTOCLAIM)
 *   inventory_sink_trimmed_total            entries trimmed from the streams (XTRIM MINID)
 *   inventory_sink_errors_total{kind="redis|db|malformed"}
 *   inventory_sink_lag_seconds              age of the oldest entry the group has not acknowledged
 *                                            (pending or not yet delivered), 0 when none; that
 *                                            entry is found every --maintain-ms, its age is taken
 *                                            when /metrics is read (so it keeps growing while the
 *                                            sink waits on the database)
 *   inventory_sink_pending                  entries delivered to the group and not acknowledged
 *   inventory_sink_streams                  segment streams followed
 *   inventory_sink_unlogged_total           order changes found in Redis without a log entry
 *                                            (segments' cnt `u`: instances without --order-log)
 *   inventory_sink_backfilled_total         orders rows written or moved forward from Redis's
 *                                            order records (the backfill of those changes)
 *   inventory_sink_order_log_missing        1 while such changes were found in the last
 *                                            SINK_UNLOGGED_HOLD_MS; /healthz then answers 503
 *                                            with "order_log":"missing"
 */
#ifndef INVENTORY_SINK_METRICS_H
#define INVENTORY_SINK_METRICS_H

#include <stddef.h>

enum sink_error_kind { SINK_ERR_REDIS, SINK_ERR_DB, SINK_ERR_MALFORMED, SINK_ERR_KINDS };

void sink_metrics_written(long long entries, long long duplicates);
void sink_metrics_claimed(long long n);
void sink_metrics_trimmed(long long n);
void sink_metrics_error(enum sink_error_kind kind);
/* The lag's sources, as entry times (ms since the epoch, from the entry id; 0: none): the
 * oldest entry the group has not acknowledged as the last maintenance found it, and the oldest
 * entry this sink holds read and not yet committed and acknowledged. The gauge is the age of
 * the older of the two when /metrics is read, so it grows while the sink is stuck on a batch
 * (the database down or slow) instead of keeping the value it had before. */
void sink_metrics_gauges(long long oldest_ms, long long pending);
void sink_metrics_in_hand(long long oldest_ms);
void sink_metrics_streams(long long streams);
#define SINK_UNLOGGED_HOLD_MS 600000

/* Counts order changes found without a log entry and the rows backfilled for them;
 * changes > 0 also marks the order log missing (/healthz 503) for SINK_UNLOGGED_HOLD_MS. */
void sink_metrics_unlogged(long long changes, long long backfilled);
/* What /healthz answers: 200 when both are up, else 503 naming the one down. */
void sink_metrics_health(int redis_up, int db_up);

/* The whole /metrics document, new (free()), or NULL when out of memory. */
char *sink_metrics_render(void);

/* Starts the HTTP server on port (its own thread). 0, or -1 with err. */
int sink_http_start(int port, char *err, size_t errlen);
/* Stops it; safe when it never started. */
void sink_http_stop(void);

#endif
