/*
 * probe — the operational endpoints: liveness (/healthz), readiness (/readyz: Redis answers
 * and the instance is not draining) and the Prometheus scrape (/metrics).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "gate.h"
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "router.h"
#include "skucache.h"
#include "statsnap.h"

/* Most SKUs /metrics reports per-SKU series for (label cardinality stays bounded). */
#define PROBE_MAX_SKU_SERIES 200

static void status_body(struct response *res, int status, const char *word, const char *reason)
{
    json_t *body = reason ? json_pack("{s:s, s:s}", "status", word, "reason", reason)
                          : json_pack("{s:s}", "status", word);
    if (!body) {
        response_error(res, ERROR_INTERNAL, NULL);
        return;
    }
    response_json(res, status, body);
}

void probe_healthz(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    status_body(res, 200, "ok", NULL);
}

/* The readiness answer from a PING's result (st: lockcore's status; reason when it failed). */
void probe_readyz_answer(lc_status st, const char *reason, struct response *res)
{
    if (st == LC_ESTATE) {
        status_body(res, 503, "unavailable", "shutting down");
        return;
    }
    if (st == LC_OK) {
        status_body(res, 200, "ready", NULL);
        return;
    }
    /* The details (Redis's own error text, addresses, auth failures) go to the log only: the
     * probe is open to anyone who can reach the port. */
    log_msg(CONFIG_LOG_WARN, "readyz_unavailable", "Redis did not answer the readiness ping: %s",
            reason && reason[0] ? reason : "(no reason given)");
    status_body(res, 503, "unavailable", "redis unavailable");
}

struct sku_series {
    FILE *segments, *empty;
};

static void sku_line(const char *sku, int segments, int empty, void *arg)
{
    struct sku_series *s = arg;
    fprintf(s->segments, "inventory_sku_segments{sku=\"%s\"} %d\n", sku, segments);
    fprintf(s->empty, "inventory_sku_segments_empty{sku=\"%s\"} %d\n", sku, empty);
}

/* The per-SKU series of this instance's SKU cache: the layout's segment count and the segments
 * seen empty within sold_out_recheck_ms, or all of them while it is cached sold out (so
 * "segments with stock" = the difference). A NEW
 * string, or NULL when out of memory. */
static char *sku_series(struct app *app)
{
    char *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    struct sku_series s = {open_memstream(&a, &alen), open_memstream(&b, &blen)};
    if (s.segments && s.empty) {
        fputs("# HELP inventory_sku_segments Segments of a SKU's layout, as this instance last "
              "read it.\n# TYPE inventory_sku_segments gauge\n",
              s.segments);
        fputs("# HELP inventory_sku_segments_empty Segments of a SKU this instance saw empty "
              "within sold_out_recheck_ms.\n# TYPE inventory_sku_segments_empty gauge\n",
              s.empty);
        if (app->cache)
            skucache_foreach(app->cache, PROBE_MAX_SKU_SERIES, sku_line, &s);
    }
    int bad = !s.segments || !s.empty;
    if (s.segments)
        bad |= fclose(s.segments) != 0;
    if (s.empty)
        bad |= fclose(s.empty) != 0;
    char *out = bad ? NULL : malloc(alen + blen + 1);
    if (out) {
        memcpy(out, a, alen);
        memcpy(out + alen, b, blen + 1);
    }
    free(a);
    free(b);
    return out;
}

/* The status snapshots' series (statsnap.h). Allocated, NULL out of memory. */
static char *status_series(struct app *app)
{
    struct statsnap_stats st = {0};
    if (app->snaps)
        statsnap_stats(app->snaps, &st);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return NULL;
    metrics_text_counter(f, "inventory_status_refreshes_total",
                         "Reads of a SKU's status from Redis for this instance's snapshot "
                         "(at most one per --status-refresh-ms per SKU).",
                         (unsigned long long)st.refreshes);
    metrics_text_counter(f, "inventory_status_refresh_failures_total",
                         "Of those, the reads that failed (answered 503).",
                         (unsigned long long)st.refresh_fails);
    metrics_text_counter(f, "inventory_status_changes_total",
                         "Of those, the reads that found a status other than the snapshot's.",
                         (unsigned long long)st.changes);
    metrics_text_counter(f, "inventory_status_uncached_total",
                         "Status reads answered by the exact read because the snapshot table "
                         "was full.",
                         (unsigned long long)st.uncached);
    metrics_text_gauge(f, "inventory_status_snapshots", "SKUs with a status snapshot.",
                       (double)st.entries);
    struct events_stats es;
    events_stats(&es);
    metrics_text_gauge(f, "inventory_status_subscribers",
                       "Open status event streams (GET /api/v1/skus/{sku}/events).",
                       (double)es.subscribers);
    metrics_text_counter(f, "inventory_status_events_sent_total",
                         "Status events written whole to subscribers.",
                         (unsigned long long)es.sent);
    metrics_text_counter(f, "inventory_status_subscribers_dropped_total",
                         "Subscribers closed because they fell behind (not reading).",
                         (unsigned long long)es.dropped);
    metrics_text_counter(f, "inventory_status_subscribers_refused_total",
                         "Event streams refused 503 by --max-subscribers (or at shutdown).",
                         (unsigned long long)es.refused);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* The waiting rooms' series (gate.h: this instance's joins, polls, admitter steps). Allocated,
 * NULL out of memory. */
static char *queue_series(struct app *app)
{
    struct gate_stats st;
    gate_stats(app->gate, &st);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return NULL;
    metrics_text_counter(f, "inventory_queue_joins_total",
                         "Waiting room joins answered with a place (new or the same one).",
                         (unsigned long long)st.joins);
    fprintf(f,
            "# HELP inventory_queue_polls_total Place polls answered, by where the place came "
            "from: memory (the gate snapshot and the place cache) or redis (one place read).\n"
            "# TYPE inventory_queue_polls_total counter\n"
            "inventory_queue_polls_total{from=\"memory\"} %lld\n"
            "inventory_queue_polls_total{from=\"redis\"} %lld\n",
            st.polls_memory, st.polls_redis);
    metrics_text_counter(f, "inventory_queue_admitted_total",
                         "Places admitted by this instance's admission steps.",
                         (unsigned long long)st.admitted);
    metrics_text_gauge(f, "inventory_queue_length",
                       "Places waiting in the waiting rooms this instance steps (as of their "
                       "last step).",
                       (double)st.length);
    metrics_text_gauge(f, "inventory_queue_live",
                       "Tickets neither used nor expired in the waiting rooms this instance "
                       "steps.",
                       (double)st.live);
    metrics_text_counter(f, "inventory_queue_ticks_total",
                         "Admission steps this instance made (status read + gate_admit.lua).",
                         (unsigned long long)st.ticks);
    metrics_text_counter(f, "inventory_queue_tick_failures_total",
                         "Of those, the steps that failed.", (unsigned long long)st.tick_failures);
    fprintf(f,
            "# HELP inventory_queue_wait_error_seconds For each admitted place this instance "
            "answered before, |the estimated wait first answered - the actual wait|.\n"
            "# TYPE inventory_queue_wait_error_seconds summary\n"
            "inventory_queue_wait_error_seconds_sum %.3f\n"
            "inventory_queue_wait_error_seconds_count %lld\n",
            st.wait_err_sum_s, st.wait_err_count);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

void probe_metrics(struct app *app, const struct request *req, struct response *res)
{
    (void)req;
    char *base = metrics_render(router_label);
    char *skus = base ? sku_series(app) : NULL;
    char *snaps = skus ? status_series(app) : NULL;
    char *queue = snaps ? queue_series(app) : NULL;
    char *text =
        queue ? malloc(strlen(base) + strlen(skus) + strlen(snaps) + strlen(queue) + 1) : NULL;
    if (text) {
        strcpy(text, base);
        strcat(text, skus);
        strcat(text, snaps);
        strcat(text, queue);
    }
    free(base);
    free(skus);
    free(snaps);
    free(queue);
    if (!text) {
        response_error(res, ERROR_INTERNAL, NULL);
        return;
    }
    free(res->text);
    res->text = text;
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
    res->status = 200;
}
