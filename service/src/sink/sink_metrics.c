/*
 * sink_metrics — inventory-sink's metrics and its /metrics + /healthz server (libmicrohttpd,
 * one internal thread; the handler only reads atomics).
 */
#include "sink_metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "metrics.h"

static atomic_ullong m_written, m_dups, m_batches, m_claimed, m_trimmed;
static atomic_ullong m_errors[SINK_ERR_KINDS];
static atomic_llong m_oldest_ms, m_in_hand_ms;
static atomic_llong m_pending, m_streams;
static atomic_int m_redis_up, m_db_up;
static atomic_ullong m_unlogged, m_backfilled;
static atomic_llong m_unlogged_at_ms; /* monotonic ms of the last unlogged change found, 0 none */
static const char *const error_labels[SINK_ERR_KINDS] = {"redis", "db", "malformed"};

void sink_metrics_written(long long entries, long long duplicates)
{
    atomic_fetch_add_explicit(&m_written, (unsigned long long)entries, memory_order_relaxed);
    atomic_fetch_add_explicit(&m_dups, (unsigned long long)duplicates, memory_order_relaxed);
    atomic_fetch_add_explicit(&m_batches, 1, memory_order_relaxed);
}

void sink_metrics_claimed(long long n)
{
    atomic_fetch_add_explicit(&m_claimed, (unsigned long long)n, memory_order_relaxed);
}

void sink_metrics_trimmed(long long n)
{
    atomic_fetch_add_explicit(&m_trimmed, (unsigned long long)n, memory_order_relaxed);
}

void sink_metrics_error(enum sink_error_kind kind)
{
    atomic_fetch_add_explicit(&m_errors[kind], 1, memory_order_relaxed);
}

void sink_metrics_gauges(long long oldest_ms, long long pending)
{
    atomic_store_explicit(&m_oldest_ms, oldest_ms, memory_order_relaxed);
    atomic_store_explicit(&m_pending, pending, memory_order_relaxed);
}

void sink_metrics_in_hand(long long oldest_ms)
{
    atomic_store_explicit(&m_in_hand_ms, oldest_ms, memory_order_relaxed);
}

/* Seconds since the older of the two entry times (0 when neither is set, or in the future:
 * the sink's clock behind Redis's). */
static double lag_now(void)
{
    long long a = atomic_load_explicit(&m_oldest_ms, memory_order_relaxed);
    long long b = atomic_load_explicit(&m_in_hand_ms, memory_order_relaxed);
    long long oldest = a > 0 && (b <= 0 || a < b) ? a : b;
    if (oldest <= 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long age = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - oldest;
    return age > 0 ? (double)age / 1000.0 : 0;
}

void sink_metrics_streams(long long streams)
{
    atomic_store_explicit(&m_streams, streams, memory_order_relaxed);
}

void sink_metrics_health(int redis_up, int db_up)
{
    atomic_store_explicit(&m_redis_up, redis_up, memory_order_relaxed);
    atomic_store_explicit(&m_db_up, db_up, memory_order_relaxed);
}

static long long unlogged_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sink_metrics_unlogged(long long changes, long long backfilled)
{
    atomic_fetch_add_explicit(&m_unlogged, (unsigned long long)changes, memory_order_relaxed);
    atomic_fetch_add_explicit(&m_backfilled, (unsigned long long)backfilled, memory_order_relaxed);
    if (changes > 0) {
        long long now = unlogged_clock_ms();
        atomic_store_explicit(&m_unlogged_at_ms, now > 0 ? now : 1, memory_order_relaxed);
    }
}

/* 1 while unlogged changes were found within SINK_UNLOGGED_HOLD_MS. */
static int unlogged_now(void)
{
    long long at = atomic_load_explicit(&m_unlogged_at_ms, memory_order_relaxed);
    return at > 0 && unlogged_clock_ms() - at < SINK_UNLOGGED_HOLD_MS;
}

static unsigned long long get(atomic_ullong *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

char *sink_metrics_render(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    metrics_text_counter(f, "inventory_sink_events_written_total",
                         "Order-log entries committed to the database.", get(&m_written));
    metrics_text_counter(f, "inventory_sink_events_duplicate_total",
                         "Committed entries whose event row was already there (replays).",
                         get(&m_dups));
    metrics_text_counter(f, "inventory_sink_batches_total", "Transactions committed.",
                         get(&m_batches));
    metrics_text_counter(f, "inventory_sink_claimed_total",
                         "Entries claimed from other consumers (XAUTOCLAIM).", get(&m_claimed));
    metrics_text_counter(f, "inventory_sink_trimmed_total",
                         "Entries trimmed from the streams (XTRIM MINID).", get(&m_trimmed));
    fputs("# HELP inventory_sink_errors_total Failures by kind.\n"
          "# TYPE inventory_sink_errors_total counter\n",
          f);
    for (int i = 0; i < SINK_ERR_KINDS; i++)
        fprintf(f, "inventory_sink_errors_total{kind=\"%s\"} %llu\n", error_labels[i],
                get(&m_errors[i]));
    metrics_text_gauge(f, "inventory_sink_lag_seconds",
                       "Age of the oldest order-log entry not yet acknowledged.", lag_now());
    metrics_text_gauge(f, "inventory_sink_pending",
                       "Entries delivered to the group and not acknowledged.",
                       (double)atomic_load_explicit(&m_pending, memory_order_relaxed));
    metrics_text_gauge(f, "inventory_sink_streams", "Segment streams followed.",
                       (double)atomic_load_explicit(&m_streams, memory_order_relaxed));
    metrics_text_counter(f, "inventory_sink_unlogged_total",
                         "Order changes found in Redis that no order-log entry carried "
                         "(instances without --order-log).",
                         get(&m_unlogged));
    metrics_text_counter(f, "inventory_sink_backfilled_total",
                         "Orders rows written or moved forward from Redis's order records.",
                         get(&m_backfilled));
    metrics_text_gauge(f, "inventory_sink_order_log_missing",
                       "1 while unlogged order changes were found in the last 10 minutes.",
                       unlogged_now());
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static struct MHD_Daemon *daemon_;

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, char *body,
                              const char *type)
{
    if (body == NULL)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result q = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return q;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    (void)cls;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)req_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer(conn, 405, strdup("{\"error\":\"method not allowed\"}\n"),
                      "application/json");
    if (strcmp(url, "/metrics") == 0) {
        char *m = sink_metrics_render();
        return m ? answer(conn, 200, m, "text/plain; version=0.0.4; charset=utf-8") : MHD_NO;
    }
    if (strcmp(url, "/healthz") == 0) {
        int redis = atomic_load_explicit(&m_redis_up, memory_order_relaxed);
        int db = atomic_load_explicit(&m_db_up, memory_order_relaxed);
        int missing = unlogged_now();
        int ok = redis && db && !missing;
        char body[160];
        snprintf(body, sizeof body,
                 "{\"status\":\"%s\",\"redis\":\"%s\",\"db\":\"%s\",\"order_log\":\"%s\"}\n",
                 ok ? "ok" : "degraded", redis ? "up" : "down", db ? "up" : "down",
                 missing ? "missing" : "ok");
        return answer(conn, ok ? 200 : 503, strdup(body), "application/json");
    }
    return answer(conn, 404, strdup("{\"error\":\"not found\"}\n"), "application/json");
}

int sink_http_start(int port, char *err, size_t errlen)
{
    daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL,
                               on_request, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                               MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_END);
    if (daemon_ == NULL) {
        snprintf(err, errlen, "cannot listen on port %d", port);
        return -1;
    }
    return 0;
}

void sink_http_stop(void)
{
    if (daemon_ != NULL)
        MHD_stop_daemon(daemon_);
    daemon_ = NULL;
}
