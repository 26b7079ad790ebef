/*
 * The order path (SPEC §6). For the segmented strategy:
 *   1. validate; replay or claim the Idempotency-Key;
 *   2. answer 409 at once when this instance knows the SKU's current version is sold out
 *      (re-checked against Redis at most sold_out_recheck_ms later);
 *   3. walk the segments from a random start, skipping known-empty ones, try-locking the others;
 *      the acquire script returns the segment's stock and version in the same round trip;
 *   4. with enough stock: the critical section (--hold-ms), then the fenced commit script, which
 *      checks the lock is still ours, decrements, writes the order and counters and releases the
 *      lock in one step: 2 round trips in all when uncontended;
 *   5. when every segment with stock was busy: wait for one of them (woken by its unlock) up to
 *      --lock-wait-ms, then 503 lock_timeout; all empty: 409 sold_out; stock left but no
 *      segment with enough: 409 insufficient_stock (orders never span segments).
 * A lost lock (stale fencing token) changes nothing and the walk goes on elsewhere. A segment
 * whose version differs from the cached one means a PUT happened: the layout is re-read and the
 * walk starts again under the new version.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "handlers.h"
#include "ids.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "skucache.h"
#include "stock.h"
#include "store.h"
#include "validate.h"

/* What trying one segment came to. */
enum seg_result {
    SEG_DONE,     /* order committed */
    SEG_BUSY,     /* locked by someone else */
    SEG_NOTREADY, /* a PUT is resetting it to the new version right now */
    SEG_EMPTY,    /* no stock */
    SEG_SHORT,    /* some stock, less than asked */
    SEG_STALE,    /* the segment belongs to another version: re-read the layout */
    SEG_LOST,     /* our lock was lost before the commit: nothing changed */
    SEG_ERROR,    /* Redis failed (or the segment is damaged) before anything changed */
    SEG_EXPIRED,  /* the Idempotency-Key claim expired before the commit: nothing changed */
    SEG_UNKNOWN   /* Redis failed during the commit: the outcome is unknown */
};

struct order_ctx {
    struct app *app;
    lc_client *lc;
    const struct validate_order *in;
    const char *idem;             /* "" when none */
    struct sku_view view;
    int64_t deadline_ms;
    char claim_expiry[24];        /* the key claim's expiry in Redis ms; "0" without a key */
    int settled;                  /* this request already settled the SKU's layout once */
    char order_id[ORDER_ID_MAX + 1];
    char *record;                 /* the order's JSON text: stored in Redis, and the 201 body */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A random number from a per-thread generator (segment choice, claim tokens; order ids come
 * from ids.c). */
static uint64_t rnd64(void)
{
    static _Thread_local uint64_t s;
    if (s == 0) {
        if (getrandom(&s, sizeof(s), 0) != sizeof(s))
            s = (uint64_t)wall_ms() ^ (uint64_t)(uintptr_t)&s;
        s |= 1;
    }
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s * 0x2545F4914F6CDD1DULL;
}

int order_id_parse(const char *id, size_t len, int *segment, char *sku)
{
    if (len < IDS_ORDER_HEX + 1 + 1 + 1 + 1 || len > ORDER_ID_MAX)
        return -1;
    for (int i = 0; i < IDS_ORDER_HEX; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return -1;
    if (id[IDS_ORDER_HEX] != '-')
        return -1;
    size_t i = IDS_ORDER_HEX + 1;
    int k = 0, digits = 0;
    while (i < len && id[i] >= '0' && id[i] <= '9' && digits < 5) {
        k = k * 10 + (id[i++] - '0');
        digits++;
    }
    if (digits == 0 || digits > 4 || (digits > 1 && id[IDS_ORDER_HEX + 1] == '0') || i >= len ||
        id[i] != '-' || k >= SKUCACHE_MAX_SEGMENTS)
        return -1;
    i++;
    if (!validate_sku(id + i, len - i))
        return -1;
    memcpy(sku, id + i, len - i);
    sku[len - i] = '\0';
    *segment = k;
    return 0;
}

/* Takes what the cache knows now (empty and held segments, sold out) into ctx->view when the
 * cache still holds ctx->view's version; otherwise keeps ctx->view as it is. 1 taken, 0 not. */
static int view_refresh(struct order_ctx *ctx)
{
    struct sku_view v;
    skucache_get(ctx->app->cache, ctx->in->sku, &v);
    if (v.version != ctx->view.version || v.segments != ctx->view.segments)
        return 0;
    ctx->view = v;
    return 1;
}

/* Reads the SKU's layout into ctx->view and the cache, completing a PUT, DELETE or restock
 * that was left half-way (layout.h). 1 found, 0 unknown SKU, -1 error. */
static int load_layout(struct order_ctx *ctx)
{
    struct layout l;
    int found = layout_read_settled(ctx->app->store, ctx->in->sku, &l);
    if (found == 0)
        skucache_forget(ctx->app->cache, ctx->in->sku);
    if (found <= 0)
        return found;
    if (l.segments > SKUCACHE_MAX_SEGMENTS)
        return -1;
    skucache_set_layout(ctx->app->cache, ctx->in->sku, l.version, l.segments);
    /* The layout as read, not as re-read from the cache: another thread may drop or replace
     * the cache entry at any moment (a restock, cancel or DELETE on this instance). */
    memset(&ctx->view, 0, sizeof(ctx->view));
    ctx->view.version = l.version;
    ctx->view.segments = l.segments;
    view_refresh(ctx);
    return 1;
}

/* The sold-out re-check: reads every segment's stock and version in one pipelined round trip
 * (and, when all are empty, the layout: a restock left half-way is completed first).
 * 1 still sold out, 0 stock somewhere (the cache now knows which segments are empty), -1 error,
 * 2 the layout changed (ctx->view reloaded), -2 the SKU no longer exists. */
static int recheck_sold_out(struct order_ctx *ctx)
{
    int nseg = ctx->view.segments;
    int n = 2 * nseg;
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char **flat = malloc(sizeof(*flat) * 2 * (size_t)n);
    const char ***cmds = malloc(sizeof(*cmds) * (size_t)n);
    int *argcs = malloc(sizeof(*argcs) * (size_t)n);
    redisReply **rep = calloc((size_t)n, sizeof(*rep));
    int rc = -1;
    if (!keys || !flat || !cmds || !argcs || !rep)
        goto out;
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(ctx->in->sku, k, &keys[k]);
        flat[4 * k] = "GET";
        flat[4 * k + 1] = keys[k].stock;
        flat[4 * k + 2] = "GET";
        flat[4 * k + 3] = keys[k].sver;
        cmds[2 * k] = flat + 4 * k;
        cmds[2 * k + 1] = flat + 4 * k + 2;
        argcs[2 * k] = argcs[2 * k + 1] = 2;
    }
    if (lc_client_pipeline(ctx->lc, n, argcs, (const char **const *)cmds, NULL, rep) != LC_OK)
        goto out;
    uint64_t empty[SKUCACHE_MAX_SEGMENTS / 64] = {0};
    int nempty = 0, stale = 0;
    for (int k = 0; k < nseg; k++) {
        if (store_reply_int(rep[2 * k + 1], 0) != ctx->view.version)
            stale = 1;
        if (store_reply_int(rep[2 * k], 0) <= 0) {
            empty[k / 64] |= 1ULL << (k % 64);
            nempty++;
        }
    }
    if (stale) {
        int found = load_layout(ctx);
        rc = found > 0 ? 2 : found == 0 ? -2 : -1;
        goto out;
    }
    skucache_set_empty(ctx->app->cache, ctx->in->sku, ctx->view.version, empty);
    if (!view_refresh(ctx)) {
        /* The cache entry went meanwhile: walk with what was just read. */
        memcpy(ctx->view.empty, empty, sizeof(empty));
        ctx->view.sold_out = nempty == nseg;
        ctx->view.recheck_due = 0;
    }
    rc = nempty == nseg;
    if (rc == 1) {
        /* Before saying sold out again: a restock (or PUT) cut off half-way would never reach
         * the segments if nobody met it. Complete it here, then walk the segments afresh. */
        struct layout l;
        int found = layout_read(ctx->app->store, ctx->in->sku, &l);
        if (found < 0) {
            rc = -1;
        } else if (layout_unsettled(&l)) {
            skucache_forget(ctx->app->cache, ctx->in->sku);
            found = load_layout(ctx);
            rc = found > 0 ? 2 : found == 0 ? -2 : -1;
        }
    }
out:
    if (rep)
        store_free_replies(rep, n);
    free(rep);
    free(argcs);
    free(cmds);
    free(flat);
    free(keys);
    return rc;
}

/* Makes the order id and record for segment k; returns the record's JSON text (borrowed: kept in
 * ctx->record, sent as the 201 body as it is, so the order is serialised once). */
static const char *make_record(struct order_ctx *ctx, int k)
{
    char token[IDS_ORDER_HEX + 1];
    if (ids_order_token(token, sizeof(token)) != 0) {
        /* No randomness: no id at all rather than a guessable (or a previous attempt's) one. */
        ctx->order_id[0] = '\0';
        free(ctx->record);
        ctx->record = NULL;
        return NULL;
    }
    snprintf(ctx->order_id, sizeof(ctx->order_id), "%s-%d-%s", token, k, ctx->in->sku);
    int64_t now = wall_ms();
    time_t secs = (time_t)(now / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char created[64];
    snprintf(created, sizeof(created), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(now % 1000));
    json_t *o = json_pack("{s:s, s:s, s:I, s:i, s:o, s:s, s:s}", "order_id", ctx->order_id, "sku",
                          ctx->in->sku, "quantity", (json_int_t)ctx->in->quantity, "segment", k,
                          "user_id",
                          ctx->in->has_user_id ? json_string(ctx->in->user_id) : json_null(),
                          "created_at", created, "status", "created");
    free(ctx->record);
    ctx->record = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return ctx->record;
}

/* Interprets a commit script result {code, value}. */
static enum seg_result commit_result(struct order_ctx *ctx, int k, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return SEG_UNKNOWN;
    long long code = r->element[0]->integer, value = r->element[1]->integer;
    if (code == 1) {
        if (value == 0)
            skucache_mark_empty(ctx->app->cache, ctx->in->sku, ctx->view.version, k);
        return SEG_DONE;
    }
    if (code == -1) {
        if (value <= 0)
            skucache_mark_empty(ctx->app->cache, ctx->in->sku, ctx->view.version, k);
        return value <= 0 ? SEG_EMPTY : SEG_SHORT;
    }
    if (code == -4)
        return SEG_EXPIRED;
    if (code == -5) {
        log_msg(CONFIG_LOG_ERROR, "segment_damaged",
                "sku %s segment %d: stock or counters missing or not numbers; nothing written",
                ctx->in->sku, k);
        return SEG_ERROR;
    }
    return value > ctx->view.version || value == 0 ? SEG_STALE : SEG_NOTREADY;
}

/* The critical section's simulated business work, counted in the in-flight gauge. */
static void critical_section_begin(struct order_ctx *ctx)
{
    metrics_cs_enter();
    if (ctx->app->cfg.hold_ms > 0)
        sleep_ms(ctx->app->cfg.hold_ms);
}

/* The options of every order lock: the configured lease, renewed by the watchdog unless
 * lock_renewal is 0. */
static void lock_opts(const struct order_ctx *ctx, lc_lock_opts *lo)
{
    lc_lock_opts_init(lo);
    lo->lease_ms = ctx->app->cfg.lock_lease_ms;
    lo->watchdog = ctx->app->cfg.lock_renewal;
}

/* Segmented strategy: lock segment k (waiting up to wait_ms), check it and commit. */
static enum seg_result try_segment(struct order_ctx *ctx, int k, int wait_ms)
{
    struct seg_keys sk;
    store_seg_keys(ctx->in->sku, k, &sk);
    lc_lock_opts lo;
    lock_opts(ctx, &lo);
    lc_lock *lock;
    if (lc_lock_new(ctx->lc, sk.lock, &lo, &lock) != LC_OK)
        return SEG_ERROR;
    const char *reads[2] = {sk.stock, sk.sver};
    lc_acquire_opts ao = {.wait_ms = wait_ms, .nread = 2, .read_keys = reads};
    redisReply *vals = NULL;
    int64_t t0 = mono_ms();
    lc_status st = lc_lock_acquire_ex(lock, &ao, NULL, &vals);
    enum seg_result res;
    if (st == LC_EBUSY || st == LC_ETIMEOUT) {
        res = SEG_BUSY;
        goto out;
    }
    if (st != LC_OK) {
        metrics_redis_error();
        res = SEG_ERROR;
        goto out;
    }
    metrics_lock_acquire_seconds((double)(mono_ms() - t0) / 1000.0);
    skucache_set_held(ctx->app->cache, ctx->in->sku, k, 1);
    long long stock = store_reply_int(vals->element[0], 0);
    long long sver = store_reply_int(vals->element[1], 0);
    freeReplyObject(vals);
    if (sver != ctx->view.version) {
        lc_lock_release(lock);
        skucache_set_held(ctx->app->cache, ctx->in->sku, k, 0);
        /* An older version here means a PUT is resetting the segments: come back to it. */
        res = sver > 0 && sver < ctx->view.version ? SEG_NOTREADY : SEG_STALE;
        goto out;
    }
    if (stock < ctx->in->quantity) {
        lc_lock_release(lock);
        skucache_set_held(ctx->app->cache, ctx->in->sku, k, 0);
        if (stock <= 0)
            skucache_mark_empty(ctx->app->cache, ctx->in->sku, ctx->view.version, k);
        res = stock <= 0 ? SEG_EMPTY : SEG_SHORT;
        goto out;
    }
    critical_section_begin(ctx);
    const char *record = make_record(ctx, k);
    if (!record) {
        /* No id or record (no randomness, no memory): nothing may be committed. */
        metrics_cs_leave();
        lc_lock_release(lock);
        skucache_set_held(ctx->app->cache, ctx->in->sku, k, 0);
        res = SEG_ERROR;
        goto out;
    }
    char ver[24], qty[24];
    snprintf(ver, sizeof(ver), "%" PRId64, ctx->view.version);
    snprintf(qty, sizeof(qty), "%" PRId64, ctx->in->quantity);
    const char *keys[5] = {sk.stock, sk.sver, sk.cnt, sk.orders, sk.idem};
    const char *args[6] = {ver, qty, ctx->order_id, record, ctx->idem, ctx->claim_expiry};
    redisReply *r = NULL;
    /* The critical section ends when the commit leaves: Redis releases the lock in the commit
     * itself, so the next holder may enter before its reply is back here. Counting the leave
     * after the reply would show two holders of one segment at once. */
    metrics_cs_leave();
    st = lc_lock_eval(lock, store_script(ctx->app->store, SCRIPT_COMMIT), LC_EVAL_RELEASE, 5,
                      keys, NULL, 6, args, NULL, &r);
    if (st == LC_ELOST) {
        metrics_lock_lost();
        res = SEG_LOST;
    } else if (st != LC_OK) {
        metrics_redis_error();
        res = st == LC_EIO ? SEG_UNKNOWN : SEG_ERROR;
    } else {
        res = commit_result(ctx, k, r);
    }
    if (r)
        freeReplyObject(r);
    skucache_set_held(ctx->app->cache, ctx->in->sku, k, 0);
out:
    lc_lock_free(lock);
    return res;
}

/* Atomic strategy: one lock-free script on segment k. */
static enum seg_result try_segment_atomic(struct order_ctx *ctx, int k)
{
    struct seg_keys sk;
    store_seg_keys(ctx->in->sku, k, &sk);
    critical_section_begin(ctx);
    const char *record = make_record(ctx, k);
    if (!record) {
        metrics_cs_leave();
        return SEG_ERROR;
    }
    char ver[24], qty[24];
    snprintf(ver, sizeof(ver), "%" PRId64, ctx->view.version);
    snprintf(qty, sizeof(qty), "%" PRId64, ctx->in->quantity);
    const char *keys[5] = {sk.stock, sk.sver, sk.cnt, sk.orders, sk.idem};
    const char *args[6] = {ver, qty, ctx->order_id, record, ctx->idem, ctx->claim_expiry};
    redisReply *r = NULL;
    int rc = store_run_many(ctx->app->store, SCRIPT_COMMIT_ATOMIC, 1, 5, keys, 6, args, &r);
    metrics_cs_leave();
    enum seg_result res;
    if (rc != 0 || !r || r->type == REDIS_REPLY_ERROR) {
        metrics_redis_error();
        res = rc != 0 ? SEG_UNKNOWN : SEG_ERROR;
    } else {
        res = commit_result(ctx, k, r);
    }
    store_free_replies(&r, 1);
    return res;
}

/* Single-lock strategy (the baseline): one lock per SKU, taken with waiting, then the segments
 * are tried under it. Returns the first decisive result. */
static enum seg_result order_single_lock(struct order_ctx *ctx, int *any_short)
{
    char name[STORE_KEY_MAX];
    store_sku_key(name, ctx->in->sku, "slock");
    lc_lock_opts lo;
    lock_opts(ctx, &lo);
    lc_lock *lock;
    if (lc_lock_new(ctx->lc, name, &lo, &lock) != LC_OK)
        return SEG_ERROR;
    int64_t wait = ctx->deadline_ms - mono_ms();
    int64_t t0 = mono_ms();
    lc_status st = lc_lock_acquire(lock, wait > 0 ? (int)wait : 0, NULL);
    if (st != LC_OK) {
        lc_lock_free(lock);
        if (st == LC_ETIMEOUT || st == LC_EBUSY)
            return SEG_BUSY;
        metrics_redis_error();
        return SEG_ERROR;
    }
    metrics_lock_acquire_seconds((double)(mono_ms() - t0) / 1000.0);
    critical_section_begin(ctx);
    enum seg_result res = SEG_EMPTY;
    int nseg = ctx->view.segments;
    int start = (int)(rnd64() % (uint64_t)nseg);
    char ver[24], qty[24];
    snprintf(ver, sizeof(ver), "%" PRId64, ctx->view.version);
    snprintf(qty, sizeof(qty), "%" PRId64, ctx->in->quantity);
    for (int i = 0; i < nseg; i++) {
        int k = (start + i) % nseg;
        if (skucache_is_empty(&ctx->view, k))
            continue;
        struct seg_keys sk;
        store_seg_keys(ctx->in->sku, k, &sk);
        const char *record = make_record(ctx, k);
        if (!record) {
            res = SEG_ERROR;
            break;
        }
        const char *keys[5] = {sk.stock, sk.sver, sk.cnt, sk.orders, sk.idem};
        const char *args[6] = {ver, qty, ctx->order_id, record, ctx->idem, ctx->claim_expiry};
        redisReply *r = NULL;
        st = lc_lock_eval(lock, store_script(ctx->app->store, SCRIPT_COMMIT), 0, 5, keys, NULL, 6,
                          args, NULL, &r);
        if (st == LC_ELOST) {
            metrics_lock_lost();
            res = SEG_LOST;
        } else if (st != LC_OK) {
            metrics_redis_error();
            res = st == LC_EIO ? SEG_UNKNOWN : SEG_ERROR;
        } else {
            res = commit_result(ctx, k, r);
        }
        if (r)
            freeReplyObject(r);
        if (res == SEG_SHORT)
            *any_short = 1;
        if (res != SEG_EMPTY && res != SEG_SHORT)
            break;
        metrics_failover();
    }
    metrics_cs_leave();
    if (res != SEG_DONE && *any_short)
        res = SEG_SHORT;
    lc_lock_release(lock);
    lc_lock_free(lock);
    return res;
}

/* Outcome of the whole order attempt. */
enum order_outcome {
    OUT_CREATED,
    OUT_SOLD_OUT,
    OUT_SOLD_OUT_FAST,
    OUT_INSUFFICIENT,
    OUT_LOCK_TIMEOUT,
    OUT_UNAVAILABLE,      /* Redis failed before anything changed */
    OUT_OUTCOME_UNKNOWN,  /* Redis failed during the commit: the order may have been placed */
    OUT_UNKNOWN_SKU
};

/* True when a segment's result decides the whole order: committed, the outcome unknown, or
 * the Idempotency-Key claim expired (another request may own the key now: stop). */
static int settles(enum seg_result r)
{
    return r == SEG_DONE || r == SEG_UNKNOWN || r == SEG_EXPIRED;
}

/* The order's outcome for a result that settles it (or for a Redis error that ends it). */
static enum order_outcome settled_outcome(enum seg_result r)
{
    return r == SEG_DONE      ? OUT_CREATED
           : r == SEG_UNKNOWN ? OUT_OUTCOME_UNKNOWN
                              : OUT_UNAVAILABLE;
}

/* What one walk over the segments found, besides a settling result. */
struct walk {
    uint64_t done[SKUCACHE_MAX_SEGMENTS / 64]; /* empty, short or failed: out for this request */
    int busy[SKUCACHE_MAX_SEGMENTS];           /* held by others: candidates for the wait */
    int nbusy;
    int retry;      /* a segment to come back to: not ready (a PUT rolling out) or lock lost */
    int notready;   /* of which: not ready */
    int any_short;  /* some segment had stock, less than asked */
    int any_error;  /* some segment failed with a Redis error: never answer sold out then */
};

/* Files the result r of segment k into w: empty, short and failed segments are left out for the
 * rest of the request; a lost lock or a segment not ready is come back to (never sold out). */
static void walk_note(struct walk *w, int k, enum seg_result r)
{
    switch (r) {
    case SEG_BUSY: w->busy[w->nbusy++] = k; return;
    case SEG_NOTREADY: w->retry = w->notready = 1; return;
    case SEG_LOST: w->retry = 1; break;
    case SEG_SHORT: w->any_short = 1; w->done[k / 64] |= 1ULL << (k % 64); break;
    case SEG_EMPTY: w->done[k / 64] |= 1ULL << (k % 64); break;
    case SEG_ERROR: w->any_error = 1; w->done[k / 64] |= 1ULL << (k % 64); break;
    default: return;
    }
    metrics_failover();
}

/* The answer when no segment can be tried any more. */
static enum order_outcome walk_end(const struct walk *w, int timed_out)
{
    if (w->any_error)
        return OUT_UNAVAILABLE;
    if (timed_out || w->nbusy > 0 || w->retry)
        return OUT_LOCK_TIMEOUT;
    return w->any_short ? OUT_INSUFFICIENT : OUT_SOLD_OUT;
}

/* A segment at an older version than the cached layout means a PUT is rolling out: complete it
 * (once per request; a PUT cut off half-way is then finished here) or give it a moment. */
static void wait_for_rollout(struct order_ctx *ctx)
{
    if (!ctx->settled) {
        ctx->settled = 1;
        struct layout l;
        if (layout_read_settled(ctx->app->store, ctx->in->sku, &l) >= 0)
            return;
    }
    sleep_ms(2);
}

/* Runs the configured strategy until the order is decided. Every loop is bounded by the
 * request's deadline (--lock-wait-ms), checked before every lock attempt; "unavailable" is only
 * ever the answer to a Redis failure. Segments found empty, short or failing stay excluded for
 * the rest of this request, so a walk after a wait only revisits segments that were busy, not
 * ready or lost. */
static enum order_outcome place_order(struct order_ctx *ctx)
{
    const struct config *cfg = &ctx->app->cfg;
    struct walk w;
    int need_layout = 1, first = 1;
    for (;;) {
        if (!first && mono_ms() >= ctx->deadline_ms)
            return walk_end(&w, 1);
        if (need_layout) {
            need_layout = 0;
            memset(&w, 0, sizeof(w));
            skucache_get(ctx->app->cache, ctx->in->sku, &ctx->view);
            if (!ctx->view.version) {
                int found = load_layout(ctx);
                if (found < 0)
                    return OUT_UNAVAILABLE;
                if (found == 0)
                    return OUT_UNKNOWN_SKU;
            }
            if (ctx->view.sold_out && !ctx->view.recheck_due)
                return OUT_SOLD_OUT_FAST;
            if (ctx->view.sold_out) {
                int rc = recheck_sold_out(ctx);
                if (rc == -2)
                    return OUT_UNKNOWN_SKU;
                if (rc < 0)
                    return OUT_UNAVAILABLE;
                if (rc == 1)
                    return OUT_SOLD_OUT;
            }
        } else {
            /* Fresh knowledge of empty and held segments for the next walk. */
            int64_t version = ctx->view.version;
            skucache_get(ctx->app->cache, ctx->in->sku, &ctx->view);
            if (ctx->view.version != version) {
                need_layout = 1;
                continue;
            }
        }

        int nseg = ctx->view.segments;
        if (nseg <= 0 || nseg > SKUCACHE_MAX_SEGMENTS)
            return OUT_UNAVAILABLE; /* never: a layout read always has segments */
        enum seg_result r;
        if (cfg->strategy == STRATEGY_SINGLE_LOCK) {
            int any_short = 0;
            r = order_single_lock(ctx, &any_short);
            if (settles(r) || r == SEG_ERROR)
                return settled_outcome(r);
            switch (r) {
            case SEG_BUSY: return OUT_LOCK_TIMEOUT;
            case SEG_EMPTY: return OUT_SOLD_OUT;
            case SEG_SHORT: return OUT_INSUFFICIENT;
            case SEG_NOTREADY: wait_for_rollout(ctx); continue;
            case SEG_LOST: continue;
            default: /* stale: read the layout again */
                skucache_forget(ctx->app->cache, ctx->in->sku);
                need_layout = 1;
                continue;
            }
        }

        w.nbusy = 0;
        w.retry = w.notready = 0;
        int start = (int)(rnd64() % (uint64_t)nseg), tried = 0;
        for (int i = 0; i < nseg && !need_layout; i++) {
            int k = (start + i) % nseg;
            if (skucache_is_empty(&ctx->view, k) || ((w.done[k / 64] >> (k % 64)) & 1))
                continue;
            if (cfg->strategy == STRATEGY_SEGMENTED && skucache_is_held(&ctx->view, k)) {
                w.busy[w.nbusy++] = k; /* this instance holds it: no round trip to learn that */
                continue;
            }
            /* A request paused or slowed past its deadline takes no new lock. */
            if ((tried++ > 0 || !first) && mono_ms() >= ctx->deadline_ms)
                return walk_end(&w, 1);
            r = cfg->strategy == STRATEGY_ATOMIC ? try_segment_atomic(ctx, k)
                                                 : try_segment(ctx, k, 0);
            if (settles(r))
                return settled_outcome(r);
            if (r == SEG_STALE)
                need_layout = 1;
            else
                walk_note(&w, k, r);
        }
        first = 0;
        if (need_layout) {
            skucache_forget(ctx->app->cache, ctx->in->sku);
            continue;
        }
        if (w.nbusy == 0 && !w.retry)
            return walk_end(&w, 0);
        int64_t left = ctx->deadline_ms - mono_ms();
        if (left <= 0)
            return walk_end(&w, 1);
        if (w.nbusy == 0) {
            if (w.notready)
                wait_for_rollout(ctx);
            continue;
        }
        /* Every segment that might serve was busy: wait for one, woken by its unlock. */
        metrics_lock_wait();
        int k = w.busy[rnd64() % (uint64_t)w.nbusy];
        r = try_segment(ctx, k, (int)left);
        if (settles(r))
            return settled_outcome(r);
        if (r == SEG_BUSY)
            return walk_end(&w, 1);
        if (r == SEG_STALE) {
            skucache_forget(ctx->app->cache, ctx->in->sku);
            need_layout = 1;
        } else {
            int nbusy = w.nbusy;
            walk_note(&w, k, r);
            w.nbusy = nbusy;
        }
    }
}

/* ---- Idempotency-Key ---- */

/* Fetches order id of sku/segment; 1 found (*out new reference), 0 not found, -1 error. */
static int fetch_order(struct app *app, const char *id, size_t idlen, json_t **out)
{
    int k;
    char sku[VALIDATE_SKU_MAX + 1];
    *out = NULL;
    if (order_id_parse(id, idlen, &k, sku) != 0)
        return 0;
    lc_client *c = store_client(app->store);
    if (!c)
        return -1;
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    const char *argv[3] = {"HGET", sk.orders, id};
    size_t lens[3] = {4, strlen(sk.orders), idlen};
    redisReply *r = NULL;
    if (lc_client_command(c, 3, argv, lens, &r) != LC_OK) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    int found = 0;
    if (r->type == REDIS_REPLY_STRING) {
        *out = json_loadb(r->str, r->len, 0, NULL);
        found = *out ? 1 : -1;
    }
    freeReplyObject(r);
    return found;
}

/* Looks for an order made under idem key in any segment (recovery after a crash between the
 * commit and the claim update). 1 with id filled, 0 none, -1 error. */
static int find_idem_order(struct order_ctx *ctx, char *id, size_t idlen)
{
    int nseg = ctx->view.segments;
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char **flat = malloc(sizeof(*flat) * 3 * (size_t)nseg);
    const char ***cmds = malloc(sizeof(*cmds) * (size_t)nseg);
    int *argcs = malloc(sizeof(*argcs) * (size_t)nseg);
    redisReply **rep = calloc((size_t)nseg, sizeof(*rep));
    int rc = -1;
    if (!keys || !flat || !cmds || !argcs || !rep)
        goto out;
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(ctx->in->sku, k, &keys[k]);
        flat[3 * k] = "HGET";
        flat[3 * k + 1] = keys[k].idem;
        flat[3 * k + 2] = ctx->idem;
        cmds[k] = flat + 3 * k;
        argcs[k] = 3;
    }
    if (lc_client_pipeline(ctx->lc, nseg, argcs, (const char **const *)cmds, NULL, rep) != LC_OK)
        goto out;
    rc = 0;
    for (int k = 0; k < nseg && rc == 0; k++)
        if (rep[k] && rep[k]->type == REDIS_REPLY_STRING) {
            snprintf(id, idlen, "%s", rep[k]->str);
            rc = 1;
        }
out:
    if (rep)
        store_free_replies(rep, nseg);
    free(rep);
    free(argcs);
    free(cmds);
    free(flat);
    free(keys);
    return rc;
}

/* Runs a claim script with up to 4 args; returns the reply (caller frees) or NULL on error. */
static redisReply *idem_script(struct app *app, enum store_script id, const char *claim,
                               int nargs, const char *const *args)
{
    const char *keys[1] = {claim};
    redisReply *r = NULL;
    if (store_run_many(app->store, id, 1, 1, keys, nargs, args, &r) != 0 || !r ||
        r->type == REDIS_REPLY_ERROR) {
        store_free_replies(&r, 1);
        return NULL;
    }
    return r;
}

/* How far past a claim's expiry (Redis ms) another request may take the key over: room for
 * the clocks of two Redis nodes (the claim's and the commit's, on a cluster) to differ. */
#define IDEM_TAKEOVER_MARGIN_MS 1000

/* Outcome of the Idempotency-Key step. */
enum idem_step { IDEM_PROCEED, IDEM_REPLAYED, IDEM_FAILED };

/* Takes a claim result {code, value[, expiry]} that made this request the owner: copies the
 * value and expiry. Returns IDEM_PROCEED, or IDEM_FAILED when the reply is malformed. */
static enum idem_step idem_own(struct order_ctx *ctx, const redisReply *r, char *claim_value,
                               size_t cvlen)
{
    if (r->elements < 3 || r->element[1]->type != REDIS_REPLY_STRING)
        return IDEM_FAILED;
    snprintf(claim_value, cvlen, "%s", r->element[1]->str);
    snprintf(ctx->claim_expiry, sizeof(ctx->claim_expiry), "%lld",
             store_reply_int(r->element[2], 0));
    return IDEM_PROCEED;
}

/*
 * Claims the key or replays its order. IDEM_PROCEED: this request owns the claim (its value in
 * claim_value, its expiry on Redis's clock in ctx->claim_expiry: the commit refuses to run
 * after it); IDEM_REPLAYED: res holds the earlier order with 200; IDEM_FAILED: res holds the
 * error. A claim still pending is waited for up to the longest an order can take; once Redis's
 * clock says it is past its expiry (+ a margin), its request can no longer commit: its order,
 * if it committed in time, is looked for in the segments (written atomically with the order)
 * and the claim is taken over. No instance's clock decides anything.
 */
static enum idem_step idem_begin(struct order_ctx *ctx, const char *claim, char *claim_value,
                                 size_t cvlen, struct response *res)
{
    const struct config *cfg = &ctx->app->cfg;
    char bound[24], ttl[24], margin[24], token[40];
    snprintf(bound, sizeof(bound), "%d",
             cfg->lock_wait_ms + cfg->hold_ms + cfg->lock_lease_ms + 2 * cfg->redis_timeout_ms);
    snprintf(ttl, sizeof(ttl), "%d", 24 * 3600 * 1000);
    snprintf(margin, sizeof(margin), "%d", IDEM_TAKEOVER_MARGIN_MS);
    snprintf(token, sizeof(token), "%016" PRIx64 "%016" PRIx64, rnd64(), rnd64());
    int64_t give_up = mono_ms() + cfg->lock_wait_ms + cfg->hold_ms + 1000;
    for (;;) {
        const char *cargs[4] = {bound, ttl, token, margin};
        redisReply *r = idem_script(ctx->app, SCRIPT_IDEM_CLAIM, claim, 4, cargs);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
            if (r)
                freeReplyObject(r);
            goto unavailable;
        }
        long long code = r->element[0]->integer;
        if (code == 1) {
            enum idem_step step = idem_own(ctx, r, claim_value, cvlen);
            freeReplyObject(r);
            if (step != IDEM_PROCEED)
                goto unavailable;
            return IDEM_PROCEED;
        }
        char seen[256];
        snprintf(seen, sizeof(seen), "%s",
                 r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "");
        freeReplyObject(r);
        if (code == 0 && strncmp(seen, "pending:", 8) != 0) {
            json_t *order;
            int found = fetch_order(ctx->app, seen, strlen(seen), &order);
            if (found < 0)
                goto unavailable;
            if (found > 0) {
                snprintf(res->location, sizeof(res->location), "/api/v1/orders/%s", seen);
                response_json(res, 200, order);
                return IDEM_REPLAYED;
            }
            /* Its order was removed by a re-PUT or DELETE of the SKU: the key is free again
             * for an order under the current version. */
        } else if (code == 2) {
            /* The claimer can no longer commit. Its order, if it got that far, is in a
             * segment's idem hash. */
            char id[ORDER_ID_MAX + 1];
            int found = find_idem_order(ctx, id, sizeof(id));
            if (found < 0)
                goto unavailable;
            if (found) {
                const char *targs[4] = {seen, id, bound, token};
                r = idem_script(ctx->app, SCRIPT_IDEM_TAKEOVER, claim, 4, targs);
                if (!r)
                    goto unavailable;
                freeReplyObject(r);
                continue; /* replay the now-final claim */
            }
        } else {
            if (mono_ms() > give_up) {
                response_error(res, ERROR_UNAVAILABLE,
                               "an order with this Idempotency-Key is still in progress");
                return IDEM_FAILED;
            }
            sleep_ms(20);
            continue;
        }
        const char *targs[4] = {seen, "", bound, token};
        r = idem_script(ctx->app, SCRIPT_IDEM_TAKEOVER, claim, 4, targs);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
            if (r)
                freeReplyObject(r);
            goto unavailable;
        }
        if (r->element[0]->integer == 2) {
            enum idem_step step = idem_own(ctx, r, claim_value, cvlen);
            freeReplyObject(r);
            if (step != IDEM_PROCEED)
                goto unavailable;
            return IDEM_PROCEED;
        }
        freeReplyObject(r); /* someone else changed it meanwhile: look again */
    }
unavailable:
    log_msg(CONFIG_LOG_WARN, "order_unavailable", "sku %s: Idempotency-Key claim: %s",
            ctx->in->sku, lc_errmsg());
    metrics_redis_error();
    response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
    return IDEM_FAILED;
}

/* Settles the claim after the order: the order id on success, deleted on a definite failure,
 * left pending when the outcome is unknown (a replay then recovers it) or when the claim
 * expired (another request may own it). */
static void idem_end(struct order_ctx *ctx, const char *claim, const char *claim_value,
                     enum order_outcome out)
{
    const char *final;
    if (out == OUT_CREATED)
        final = ctx->order_id;
    else if (out == OUT_UNAVAILABLE || out == OUT_OUTCOME_UNKNOWN)
        return;
    else
        final = "";
    const char *args[2] = {claim_value, final};
    redisReply *r = idem_script(ctx->app, SCRIPT_IDEM_SWAP, claim, 2, args);
    if (r)
        freeReplyObject(r);
}

/* ---- handlers ---- */

void order_create(struct app *app, const struct request *req, struct response *res)
{
    struct validate_order in;
    struct validate_error verr;
    if (validate_order_body(req->body, req->body ? req->body_len : 0, app->cfg.max_quantity, &in,
                            &verr) != 0) {
        metrics_order(METRICS_ORDER_INVALID);
        response_error(res, verr.code, verr.message);
        return;
    }
    const char *idem = req->idempotency_key ? req->idempotency_key : "";
    if (req->idempotency_key && !validate_printable(idem, strlen(idem))) {
        metrics_order(METRICS_ORDER_INVALID);
        response_error(res, ERROR_INVALID_REQUEST,
                       "Idempotency-Key: must be 1..128 printable ASCII characters");
        return;
    }
    struct order_ctx ctx = {.app = app, .in = &in, .idem = idem, .claim_expiry = "0"};
    ctx.deadline_ms = mono_ms() + app->cfg.lock_wait_ms;

    /* The sold-out fast path needs no Redis at all. */
    skucache_get(app->cache, in.sku, &ctx.view);
    if (ctx.view.sold_out && !ctx.view.recheck_due && !*idem) {
        metrics_sold_out_fast();
        metrics_order(METRICS_ORDER_SOLD_OUT);
        response_error(res, ERROR_SOLD_OUT, "sold out");
        return;
    }
    ctx.lc = store_client(app->store);
    if (!ctx.lc) {
        metrics_order(METRICS_ORDER_UNAVAILABLE);
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
        return;
    }

    char claim[STORE_KEY_MAX + VALIDATE_PRINTABLE_MAX + 8], claim_value[64] = "";
    if (*idem) {
        if (!ctx.view.version) {
            int found = load_layout(&ctx);
            if (found <= 0) {
                metrics_order(found ? METRICS_ORDER_UNAVAILABLE : METRICS_ORDER_UNKNOWN_SKU);
                response_error(res, found ? ERROR_UNAVAILABLE : ERROR_UNKNOWN_SKU,
                               found ? "the stock store is unavailable" : "no such sku");
                return;
            }
        }
        char base[STORE_KEY_MAX];
        store_sku_key(base, in.sku, "idem:");
        snprintf(claim, sizeof(claim), "%s%s", base, idem);
        enum idem_step step = idem_begin(&ctx, claim, claim_value, sizeof(claim_value), res);
        if (step == IDEM_REPLAYED)
            metrics_order(METRICS_ORDER_REPLAYED);
        if (step != IDEM_PROCEED)
            return;
    }

    enum order_outcome out = place_order(&ctx);
    if (*idem)
        idem_end(&ctx, claim, claim_value, out);
    switch (out) {
    case OUT_CREATED:
        metrics_order(METRICS_ORDER_CREATED);
        snprintf(res->location, sizeof(res->location), "/api/v1/orders/%s", ctx.order_id);
        res->status = 201;
        res->text = ctx.record;
        res->content_type = "application/json";
        ctx.record = NULL;
        break;
    case OUT_SOLD_OUT_FAST:
        metrics_sold_out_fast();
        __attribute__((fallthrough));
    case OUT_SOLD_OUT:
        metrics_order(METRICS_ORDER_SOLD_OUT);
        response_error(res, ERROR_SOLD_OUT, "sold out");
        break;
    case OUT_INSUFFICIENT:
        metrics_order(METRICS_ORDER_INSUFFICIENT);
        response_error(res, ERROR_INSUFFICIENT_STOCK,
                       "no segment holds the quantity asked for; try a smaller quantity");
        break;
    case OUT_LOCK_TIMEOUT:
        metrics_order(METRICS_ORDER_LOCK_TIMEOUT);
        response_error(res, ERROR_LOCK_TIMEOUT, "every segment with stock stayed busy");
        break;
    case OUT_UNKNOWN_SKU:
        metrics_order(METRICS_ORDER_UNKNOWN_SKU);
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        break;
    case OUT_UNAVAILABLE:
        log_msg(CONFIG_LOG_WARN, "order_unavailable", "sku %s: %s", in.sku, lc_errmsg());
        metrics_order(METRICS_ORDER_UNAVAILABLE);
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
        break;
    case OUT_OUTCOME_UNKNOWN:
        /* Still 503 unavailable (SPEC §5), marked so a client knows a plain retry could buy
         * twice: the same Idempotency-Key replays the order if it was placed. */
        log_msg(CONFIG_LOG_WARN, "order_outcome_unknown", "sku %s: %s", in.sku, lc_errmsg());
        metrics_order(METRICS_ORDER_UNAVAILABLE);
        response_error(res, ERROR_UNAVAILABLE,
                       "the stock store failed during the commit: the order may have been "
                       "placed; retry with the same Idempotency-Key to find out");
        if (res->body)
            json_object_set_new(res->body, "outcome", json_string("unknown"));
        break;
    }
    free(ctx.record);
}

void order_get(struct app *app, const struct request *req, struct response *res)
{
    json_t *order;
    int found = req->param ? fetch_order(app, req->param, req->param_len, &order) : 0;
    if (found < 0) {
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
    } else if (found == 0) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else {
        response_json(res, 200, order);
    }
}

void order_cancel(struct app *app, const struct request *req, struct response *res)
{
    int k;
    char sku[VALIDATE_SKU_MAX + 1];
    if (!req->param || order_id_parse(req->param, req->param_len, &k, sku) != 0) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
        return;
    }
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    char id[ORDER_ID_MAX + 1];
    memcpy(id, req->param, req->param_len);
    id[req->param_len] = '\0';
    const char *keys[3] = {sk.stock, sk.cnt, sk.orders};
    const char *args[1] = {id};
    redisReply *r = NULL;
    if (store_run_many(app->store, SCRIPT_CANCEL, 1, 3, keys, 1, args, &r) != 0 || !r ||
        r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        store_free_replies(&r, 1);
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
        return;
    }
    long long code = r->element[0]->integer;
    json_t *order = code != 0 && r->elements > 1
                        ? json_loadb(r->element[1]->str, r->element[1]->len, 0, NULL)
                        : NULL;
    store_free_replies(&r, 1);
    if (code == 0) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else if (code < 0) {
        json_decref(order);
        response_error(res, ERROR_ALREADY_CANCELLED, "the order was already cancelled");
    } else {
        skucache_forget(app->cache, sku); /* its units are back: not sold out any more */
        response_json(res, 200, order ? order : json_object());
    }
}
