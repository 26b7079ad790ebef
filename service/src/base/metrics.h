/*
 * metrics — process-global counters, gauges and one histogram, rendered for GET /metrics in the
 * Prometheus text format 0.0.4.
 *
 * Every update is one or two relaxed C11 atomic operations: no lock, no allocation, callable
 * from any thread on the hot path. A render is not an atomic snapshot (a counter may move while
 * others are read), but each histogram's _count always equals its +Inf bucket.
 *
 * Series (all prefixed inventory_ except the process one):
 *   inventory_orders_total{result="<a METRICS_ORDER_RESULTS row's label>"}   counter
 *   inventory_orders_sold_out_fast_total        409s answered from the in-process cache
 *   inventory_orders_sale_window_fast_total     sale_not_started / sale_ended answered from the
 *                                               estimate of Redis's clock (rclock.h), no Redis
 *   inventory_holds_total{event="confirmed|expired|cancelled"}   holds that ended so
 *   inventory_hold_extensions_total             holds extended (extend.lua moved the expiry)
 *   inventory_multi_segment_orders_total       orders served from several segments (SPEC §13)
 *   inventory_multi_segment_parts_total        their parts
 *   inventory_order_log_full_total              commits refused: the segment's order log was full
 *   inventory_lock_acquire_seconds              histogram, le 0.0005 .. 2.5, +Inf
 *   inventory_failovers_total                   order moved on to another segment
 *   inventory_lock_waits_total                  order had to wait for a busy segment
 *   inventory_locks_lost_total                  commit refused: lock lost / stale fence
 *   inventory_redis_errors_total
 *   inventory_requests_in_flight                gauge
 *   inventory_requests_total{code="1xx".."5xx"} counter
 *   inventory_critical_sections_in_flight       gauge
 *   inventory_critical_sections_peak            gauge (highest in-flight value seen)
 *   inventory_order_redis_calls_total           counter: Redis calls made by orders
 *   inventory_order_redis_calls_max             gauge: most Redis calls one order made
 *   inventory_order_redis_call_budget           gauge: --order-redis-call-budget
 *   inventory_http_request_duration_seconds{route="/api/v1/orders"|...|"other"}
 *                                               histogram, same buckets
 *   inventory_build_info{version="x.y.z"}       gauge, always 1
 *   process_resident_memory_bytes               gauge, from /proc/self/statm
 *   process_start_time_seconds                  gauge, from /proc/self/stat and /proc/stat
 *   process_open_fds, process_max_fds           gauges, /proc/self/fd and RLIMIT_NOFILE
 *   process_cpu_seconds_total                   counter, getrusage
 */
#ifndef INVENTORY_METRICS_H
#define INVENTORY_METRICS_H

#include <stdint.h>
#include <stdio.h>

/* The results of inventory_orders_total, one row each: R(id, label) gives
 * METRICS_ORDER_<id> and its series' result="<label>" (docs/api.md's metrics table names every
 * label; an order outcome names its row in service/src/order/outcome_table.h). */
/* clang-format off */
#define METRICS_ORDER_RESULTS(R)                                                                   \
    R(CREATED, "created")                                                                          \
    R(REPLAYED, "replayed")               /* an Idempotency-Key replay */                          \
    R(SOLD_OUT, "sold_out")               /* fast-path 409s included */                            \
    R(INSUFFICIENT, "insufficient_stock")                                                          \
    R(LOCK_TIMEOUT, "lock_timeout")                                                                \
    R(UNAVAILABLE, "unavailable")                                                                  \
    R(INVALID, "invalid")                                                                          \
    R(UNKNOWN_SKU, "unknown_sku")                                                                  \
    R(RESERVED, "reserved")               /* a hold placed (SPEC §11) */                           \
    R(LIMIT, "limit_exceeded")            /* the user's limit */                                   \
    R(NOT_STARTED, "sale_not_started")                                                             \
    R(ENDED, "sale_ended")                                                                         \
    R(USER_REQUIRED, "user_required")     /* a limit or a waiting room, no verified user */ \
    R(TICKET_REQUIRED, "ticket_required") /* a waiting room's SKU, no ticket (SPEC §16) */     \
    R(TICKET_INVALID, "ticket_invalid")                                                            \
    R(TICKET_EXPIRED, "ticket_expired")                                                            \
    R(TICKET_USED, "ticket_used")                                                                  \
    R(TICKET_WRONG_USER, "ticket_wrong_user")                                                      \
    R(TICKET_WRONG_SKU, "ticket_wrong_sku")
/* clang-format on */

enum metrics_order_result {
#define METRICS_ORDER_ENUM(id, label) METRICS_ORDER_##id,
    METRICS_ORDER_RESULTS(METRICS_ORDER_ENUM)
#undef METRICS_ORDER_ENUM
        METRICS_ORDER_RESULT_COUNT /* not a result */
};

/* The label of r (result="<label>"); "?" for a value outside the enum. */
const char *metrics_order_label(enum metrics_order_result r);

/* The request-duration histogram's series: route index r in 0..METRICS_ROUTES_MAX - 1, whose
 * label route="..." is what metrics_render's route_label names it (the HTTP layer's
 * router_label: each path's pattern, e.g. "/api/v1/skus/{sku}", and "other" for 404s); an index
 * it does not name has no series. */
#define METRICS_ROUTES_MAX 32

/* Records one HTTP request of route index r that took s seconds (negative or NaN counts as 0);
 * out-of-range indices are ignored. */
void metrics_http_duration(int r, double s);

/* Counts one finished order request by outcome. Out-of-range values are ignored. */
void metrics_order(enum metrics_order_result r);

/* Counts one 409 answered from the in-process sold-out cache (without Redis). Call it in
 * addition to metrics_order(METRICS_ORDER_SOLD_OUT). */
void metrics_sold_out_fast(void);

/* A status read answered from a snapshot age_ms old: 200/404 (not_modified 0) or 304 (1). */
void metrics_status_answer(int not_modified, int64_t age_ms);

/* Counts an order a segment refused because its order log was full (--order-log-cap). */
void metrics_order_log_full(void);

/* An order served from several segments (order_multi.h), of parts parts. */
void metrics_multi_order(int parts);

/* Counts a sale-window refusal answered without Redis. */
void metrics_sale_window_fast(void);

/* Counts n holds expired by this instance (its sweeper, or a confirm or cancel that found the
 * hold due), one confirmed, one cancelled. */
void metrics_holds_expired(long long n);
void metrics_hold_confirmed(void);
void metrics_hold_cancelled(void);

/* Counts one hold extended by this instance (POST /api/v1/orders/{id}/extend answered 200 after
 * extend.lua moved its expiry). */
void metrics_hold_extended(void);

/* Counts n follows this instance applied (a multi-segment order's part took its primary's
 * change: part_follow.lua answered "done"), and one intent of a multi-segment order healed by
 * this instance's sweeper: forward (1: the order was whole) or back (0: its parts undone). */
void metrics_part_follows(long long n);
void metrics_multi_healed(int forward);

/* Records one lock acquisition that took s seconds (negative or NaN counts as 0). */
void metrics_lock_acquire_seconds(double s);

/* Counts one fail-over of an order to another segment. */
void metrics_failover(void);

/* Counts one wait of an order for a busy segment lock. */
void metrics_lock_wait(void);

/* Counts one commit refused because the lock was lost (expired lease / stale fencing token). */
void metrics_lock_lost(void);

/* The per-user request rate (--user-rps, userrate.h): a request refused 429 rate_limited; a
 * user's count sent to Redis (one script); one that failed. */
void metrics_user_rate_refused(void);
void metrics_user_rate_flushed(long long n);
void metrics_user_rate_flush_error(void);

/* Counts one Redis error (connection or command). */
void metrics_redis_error(void);

/* Marks entry to / exit from a critical section (segment lock held); enter also raises the
 * peak. Calls must pair. */
void metrics_cs_enter(void);
void metrics_cs_leave(void);

/* Records one finished order that made calls Redis calls (adds them to the total, raises the
 * most any one order made). */
void metrics_order_redis_calls(long calls);

/* Sets the per-order Redis call budget shown by /metrics (config order_redis_call_budget). */
void metrics_set_order_redis_call_budget(long budget);

/* The highest number of critical sections in flight at once since start (or metrics_reset). */
long metrics_cs_peak(void);

/* Marks the start / end of one HTTP request; end also counts it by the class of http_status
 * (1xx..5xx; anything outside 100..599 counts as 5xx). Calls must pair. */
void metrics_request_begin(void);
void metrics_request_end(int http_status);

/* Renders every series as a Prometheus text format 0.0.4 document (HELP and TYPE lines, one
 * sample a line, ending with a newline). Returns a NEW malloc'd NUL-terminated string the
 * caller frees with free(), or NULL when out of memory. route_label(r) names route index r
 * (the HTTP layer's router_label; NULL: an index with no route), so this layer need not know
 * the routes. */
typedef const char *(*metrics_label_fn)(int route);
char *metrics_render(metrics_label_fn route_label);

/* One sample of an unlabelled counter / gauge with its HELP and TYPE lines, in the text format
 * metrics_render writes: for other renderers of the same format (inventory-sink's /metrics). */
void metrics_text_counter(FILE *f, const char *name, const char *help, unsigned long long v);
void metrics_text_gauge(FILE *f, const char *name, const char *help, double v);

/* Sets every counter, gauge and bucket back to 0 (tests). Not atomic as a whole: call it while
 * nothing else updates metrics. */
void metrics_reset(void);

#endif
