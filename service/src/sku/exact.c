/*
 * The exact status read (exact.h): a chain of callbacks on the request's loop over layout.c's
 * asynchronous settle and one pipelined batch of lua/seg_status.lua, one Redis step in flight
 * at a time. Each read is a struct exact_read, owned by itself from exact_read_async to its
 * answer.
 */
#include "exact.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "areq.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"
#include "store.h"
#include "store_scripts.h"
#include "validate.h"

struct exact_read {
    struct areq *ar;
    struct app *app;
    char sku[VALIDATE_SKU_MAX + 1];
    int attempt;               /* reads of the segments */
    struct layout l;           /* the layout the read is for */
    int healed;                /* the read rolled the layout out again (a segment behind) */
    int64_t stale_from;        /* the layout's version when a segment ahead made it read again */
    char out_of_step[200];     /* why the read answers 503 when Redis did not fail */
    char why[LAYOUT_WHY_MAX];  /* the read's Redis failure */
    struct store_conns *conns; /* the caller's, or own */
    struct store_conns own;
    exact_read_fn done;
    void *arg;
};

int exact_status_json(const char *sku, const struct layout *l, const struct store_item *items,
                      int n, json_t **out, int *off)
{
    *out = NULL;
    if (n != l->segments)
        return -1;
    for (int k = 0; k < n; k++)
        if (items[k].type != REDIS_REPLY_ARRAY || items[k].n != 6)
            return -1;
    for (int k = 0; k < n; k++) {
        *off = k;
        if (items[k].e[1] < l->version)
            return 0;
        if (items[k].e[1] > l->version)
            return 2;
    }
    long long total = 0, remaining = 0, sold = 0, orders = 0, reserved = 0;
    json_t *segs = json_array();
    for (int k = 0; k < n; k++) {
        const long long *e = items[k].e;
        total += e[2];
        remaining += e[0];
        sold += e[3];
        orders += e[4];
        reserved += e[5];
        json_array_append_new(segs, json_pack("{s:i, s:I, s:I, s:I}", "index", k, "remaining",
                                              (json_int_t)e[0], "sold", (json_int_t)e[3],
                                              "reserved", (json_int_t)e[5]));
    }
    *out =
        json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:o}", "sku", sku, "version",
                  (json_int_t)l->version, "stock_total", (json_int_t)total, "remaining",
                  (json_int_t)remaining, "sold", (json_int_t)sold, "reserved", (json_int_t)reserved,
                  "orders", (json_int_t)orders, "sold_out", remaining == 0, "segments", segs);
    if (*out && rules_to_json(&l->rules, *out) != 0) {
        json_decref(*out);
        *out = NULL;
    }
    return *out ? 1 : -1;
}

/* Answers the read's caller and frees it: rc 1 with status, 0 unknown SKU, -1 failed (the
 * why: out of step, or the Redis failure). */
static void exact_end(struct exact_read *e, int rc, json_t *status)
{
    const char *why = e->out_of_step[0] ? e->out_of_step : e->why;
    e->done(e->arg, rc, status, rc < 0 ? why : NULL, rc < 0 && e->out_of_step[0]);
    free(e);
}

/* Keeps the message of a failure (lockcore's errstr, a layout's why). */
static void exact_why(struct exact_read *e, const char *why)
{
    snprintf(e->why, sizeof(e->why), "%s", why ? why : "");
}

static void read_layout(struct exact_read *e);
static void on_layout(void *arg, int found, struct layout *l);

/*
 * A segment at another version than the layout read (the healing rules, docs/design.md): a
 * PUT raced the read (the layout is read again), or a write was lost in a failover. Behind:
 * the layout is rolled out again once (layout_heal_async, guarded by each segment's version),
 * then read. Ahead of a layout read twice: the meta write of a later PUT was lost; nothing
 * here may repair that (the segment's orders were answered 201), so the answer is 503 naming
 * the segment, and the version counter is raised so that the next PUT repairs it. At most 5
 * reads: a status read never spins.
 */
static void on_segments(void *arg, const char *failed, const struct store_item *items, int n)
{
    struct exact_read *e = arg;
    if (failed) {
        exact_why(e, failed);
        exact_end(e, -1, NULL);
        return;
    }
    json_t *st;
    int k = 0;
    int rc = exact_status_json(e->sku, &e->l, items, n, &st, &k);
    if (rc == 1 || rc < 0) {
        exact_end(e, rc, st);
        return;
    }
    long long sver = items[k].e[1];
    if (++e->attempt >= 5 || (rc == 0 && e->healed) || (rc == 2 && e->stale_from == e->l.version)) {
        if (rc == 2)
            layout_note_ahead(e->app->store, e->ar->lc, e->sku, k, sver, e->l.version);
        snprintf(e->out_of_step, sizeof(e->out_of_step),
                 "segment %d is at version %lld, the SKU's layout at %" PRId64 " (%s)", k, sver,
                 e->l.version,
                 rc == 2 ? "a layout write was lost in a failover: PUT the SKU again to repair it"
                         : "it could not be brought to the layout: retry later");
        log_msg(CONFIG_LOG_WARN, "sku_status_out_of_step", "sku %s: %s", e->sku, e->out_of_step);
        exact_end(e, -1, NULL);
        return;
    }
    if (rc == 0) {
        e->healed = 1;
        layout_settle_for_async(e->app->store, e->ar->lc, e->ar, e->sku, 1, NULL, on_layout, e);
        return;
    }
    e->stale_from = e->l.version;
    read_layout(e);
}

static void on_layout(void *arg, int found, struct layout *l)
{
    struct exact_read *e = arg;
    if (found < 0)
        exact_why(e, l->why);
    if (found <= 0) {
        exact_end(e, found, NULL);
        return;
    }
    e->l = *l;
    int nseg = l->segments;
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char **kflat = malloc(sizeof(*kflat) * 3 * (size_t)nseg);
    if (!keys || !kflat) {
        free(keys);
        free(kflat);
        exact_why(e, "out of memory");
        exact_end(e, -1, NULL);
        return;
    }
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(e->sku, k, &keys[k]);
        kflat[3 * k] = keys[k].stock;
        kflat[3 * k + 1] = keys[k].sver;
        kflat[3 * k + 2] = keys[k].cnt;
    }
    /* The keys are copied by lockcore when the calls start. */
    store_batch_async(e->app->store, e->ar->lc, e->ar, SCRIPT_SEG_STATUS, nseg, 3, kflat, 0, NULL,
                      e->conns, on_segments, e);
    free(kflat);
    free(keys);
}

/* The layout settled (a pending PUT, DELETE or restock completed first), then its segments. */
static void read_layout(struct exact_read *e)
{
    layout_settle_for_async(e->app->store, e->ar->lc, e->ar, e->sku, 0, e->conns, on_layout, e);
}

void exact_read_async(struct areq *ar, const char *sku, struct store_conns *conns,
                      exact_read_fn done, void *arg)
{
    struct exact_read *e = calloc(1, sizeof(*e));
    if (!e) {
        done(arg, -1, NULL, "out of memory", 0);
        return;
    }
    e->ar = ar;
    e->app = ar->app;
    snprintf(e->sku, sizeof(e->sku), "%s", sku);
    e->conns = conns ? conns : &e->own;
    e->done = done;
    e->arg = arg;
    read_layout(e);
}

void exact_read_error(struct response *res, const char *why, int out_of_step)
{
    if (out_of_step) {
        response_error(res, ERROR_UNAVAILABLE, why);
        return;
    }
    log_msg(CONFIG_LOG_WARN, "redis_error", "%s", why && *why ? why : "unexpected reply");
    metrics_redis_error();
    response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
}
