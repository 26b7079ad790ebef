/*
 * layout — see layout.h. The scripts are in service/src/store/lua/ (put_meta.lua, delete_meta.lua,
 * layout_read.lua, layout_done.lua, seg_reset.lua, seg_drop.lua, restock_*.lua).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "layout.h"
#include "log.h"
#include "store_scripts.h"

/* Restock results are kept this long (the Idempotency-Key claims' lifetime). */
#define LAYOUT_RESULT_TTL "86400000"

long long layout_share(long long units, int n, int k)
{
    return units / n + (k < units % n ? 1 : 0);
}

/* The integer in a reply, or dflt ("" and missing give dflt). */
static long long str_int(const redisReply *r, long long dflt)
{
    return store_reply_int(r, dflt);
}

int layout_parse_reply(const redisReply *r, struct layout *out)
{
    memset(out, 0, sizeof(*out));
    out->stock = -1;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 8 + RULES_N)
        return -1;
    out->version = str_int(r->element[0], 0);
    out->segments = (int)str_int(r->element[1], 0);
    out->stock = str_int(r->element[2], -1);
    out->pending =
        r->element[3]->type == REDIS_REPLY_STRING && strcmp(r->element[3]->str, "p") == 0;
    out->hwm = (int)str_int(r->element[4], out->segments);
    const redisReply *rs = r->element[5];
    for (size_t i = 0; rs->type == REDIS_REPLY_ARRAY && i + 1 < rs->elements &&
                       out->nrestocks < LAYOUT_MAX_RESTOCKS;
         i += 2) {
        struct layout_restock *x = &out->restocks[out->nrestocks];
        x->rid = str_int(rs->element[i], 0);
        const redisReply *v = rs->element[i + 1];
        if (v->type != REDIS_REPLY_STRING ||
            sscanf(v->str, "%lld:%lld", &x->version, &x->units) != 2)
            continue;
        out->nrestocks++;
    }
    out->rules.version = str_int(r->element[6], 0);
    for (int i = 0; i < RULES_N; i++) {
        const redisReply *e = r->element[7 + i];
        if (rules_rows[i].kind == RULES_KIND_STR)
            rules_set_meta_text(&out->rules, i, e->type == REDIS_REPLY_STRING ? e->str : "",
                                e->type == REDIS_REPLY_STRING ? e->len : 0);
        else
            rules_set(&out->rules, i, str_int(e, 0));
    }
    /* the hold flag (put_meta.lua, patch_rules.lua), the last element: missing in a layout
     * written before it, or "0" beside a TTL (an older binary's PUT, which writes the rules
     * alone, over a layout of this one), then judged from the TTL as the sweeper did; anything
     * but "0" and "1" counts as "may" */
    const redisReply *hf = r->element[7 + RULES_N];
    if (hf->type != REDIS_REPLY_STRING || hf->len == 0 || strcmp(hf->str, "0") == 0)
        out->holds = out->rules.ttl_s > 0 ? 2 : 0;
    else
        out->holds = strcmp(hf->str, "1") == 0 ? 1 : 2;
    if (out->segments < 0 || out->segments > STORE_SEGMENTS_MAX || out->hwm < 0 ||
        out->hwm > STORE_SEGMENTS_MAX)
        return -1;
    return out->version > 0 && out->segments > 0;
}

int layout_unsettled(const struct layout *l)
{
    return l->pending || l->nrestocks > 0;
}

/*
 * The settle, on a worker loop: a chain of callbacks over one struct settle, which owns
 * itself from layout_*_async to its last callback (the caller's cb is called once, then it is
 * freed). Steps, each a pipelined batch or one script:
 *   read -> [roll-out: SEG_RESET on [0, segments), SEG_DROP on [segments, hwm), LAYOUT_DONE]
 *        -> [each pending restock of this version: RESTOCK_APPLY on every segment, and
 *            RESTOCK_END once every segment has it] -> read -> ... (at most 4 rounds: a
 *            concurrent PUT may put a newer layout in place meanwhile; every restock listed
 *            belongs to the current version, a PUT drops the others).
 * Every step is idempotent and guarded by the segment's version (lua/seg_reset.lua), so any
 * number of settles, concurrent or cut off half-way, converge on the newest layout.
 */
struct settle {
    struct store *st;
    lc_async_client *lc;
    const struct areq *ar; /* the request it is for (store.h: its callbacks' log context) */
    char sku[STORE_KEY_MAX];
    struct layout l;
    int settle;      /* settle what is pending (layout_read_settled_async), not just read */
    int heal;        /* roll the layout out even when it says it is (layout_heal_async), once */
    int calls;       /* Redis calls made so far (struct layout's calls) */
    int64_t read_ms; /* when the last meta read was sent (struct layout's read_ms) */
    int refused;     /* a segment refused a restock (a damaged number): no further round */
    int round;
    int ri; /* the restock being applied */
    layout_fn cb;
    void *arg;
    struct store_conns *conns;  /* where its commands ran (the caller's; may be NULL) */
    struct store_conns applied; /* where a restock's shares were applied: WAITed here before its
                                   end (--redis-replica-acks), so no caller's WAIT needs them */
    /* the keys and args of the batch in flight */
    struct seg_keys *sk;
    const char **kflat, **aflat;
    char (*args)[3][24];
};

static void settle_round(struct settle *s);
static void settle_restocks(struct settle *s);

static void settle_end(struct settle *s, int rc)
{
    s->l.calls = s->calls;
    s->cb(s->arg, rc, &s->l);
    free(s->sk);
    free(s->kflat);
    free(s->aflat);
    free(s->args);
    free(s);
}

/* Ends the read or settle with -1; why: the failure's message (lockcore's errstr), or NULL for
 * a reply of the wrong shape. */
static void settle_fail(struct settle *s, const char *why)
{
    snprintf(s->l.why, sizeof(s->l.why), "layout: %.200s",
             why ? why : "unexpected reply from Redis");
    settle_end(s, -1);
}

static void on_read(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct settle *s = arg;
    store_conns_note(s->conns, s->lc);
    int found = st == LC_OK ? layout_parse_reply(r, &s->l) : -1;
    s->l.read_ms = s->read_ms;
    int heal = s->heal && found >= 0 && s->l.version > 0;
    if (found < 0) {
        settle_fail(s, st == LC_OK ? NULL : errstr);
        return;
    }
    if (!s->settle || (!layout_unsettled(&s->l) && !heal) || s->round >= 4 || s->refused) {
        settle_end(s, s->l.version > 0 && s->l.segments > 0);
        return;
    }
    if (heal) {
        s->heal = 0;
        s->l.pending = 1; /* roll it out again: every step is guarded by the segment's version */
    }
    settle_round(s);
}

static void settle_read(struct settle *s)
{
    char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX];
    store_sku_key(meta, s->sku, "meta");
    store_sku_key(rst, s->sku, "rst");
    const char *keys[2] = {meta, rst}, *fields[RULES_N];
    for (int i = 0; i < RULES_N; i++)
        fields[i] = rules_script_field(i);
    s->calls++;
    s->read_ms = clock_mono_ms();
    store_script_async(s->st, s->lc, s->ar, SCRIPT_LAYOUT_READ, 2, keys, RULES_N, fields, on_read,
                       s);
}

/* Starts script c on segments [from, to) with args[i] (i = k - from; the args are set by the
 * caller in s->args), keys picked from (stock, sver, cnt, orders, idem, rst, due, give,
 * follow); the connections it runs on noted in cs (may be NULL). */
static void run_on_segments(struct settle *s, int from, int to, enum store_script id, int nkeys,
                            const int *pick, int nargs, struct store_conns *cs, store_batch_fn cb)
{
    int n = to - from;
    free(s->sk);
    free(s->kflat);
    free(s->aflat);
    s->sk = malloc(sizeof(*s->sk) * (size_t)n);
    s->kflat = calloc((size_t)n * (size_t)nkeys, sizeof(*s->kflat));
    s->aflat = calloc((size_t)n * (size_t)nargs + 1, sizeof(*s->aflat));
    if (!s->sk || !s->kflat || !s->aflat) {
        cb(s, "out of memory", NULL, 0);
        return;
    }
    for (int i = 0; i < n; i++) {
        store_seg_keys(s->sku, from + i, &s->sk[i]);
        const char *all[10] = {s->sk[i].stock,  s->sk[i].sver, s->sk[i].cnt, s->sk[i].orders,
                               s->sk[i].idem,   s->sk[i].rst,  s->sk[i].due, s->sk[i].give,
                               s->sk[i].follow, s->sk[i].log};
        for (int j = 0; j < nkeys; j++)
            s->kflat[i * nkeys + j] = all[pick[j]];
        for (int j = 0; j < nargs; j++)
            s->aflat[i * nargs + j] = s->args[i][j];
    }
    s->calls += n;
    store_batch_async(s->st, s->lc, s->ar, id, n, nkeys, s->kflat, nargs, s->aflat, cs, cb, s);
}

/* Every reply an integer: the segment steps answer nothing else. */
static int all_integers(const char *failed, const struct store_item *items, int n)
{
    if (failed)
        return 0;
    for (int i = 0; i < n; i++)
        if (items[i].type != REDIS_REPLY_INTEGER)
            return 0;
    return 1;
}

/* args[i] = {version, units of segment from + i in the spread} for [from, to). 0 or -1. */
static int spread_args(struct settle *s, int from, int to, long long units, int nseg)
{
    int n = to - from;
    free(s->args);
    s->args = calloc((size_t)n + 1, sizeof(*s->args));
    if (!s->args)
        return -1;
    for (int i = 0; i < n; i++) {
        snprintf(s->args[i][0], 24, "%" PRId64, s->l.version);
        snprintf(s->args[i][1], 24, "%lld", nseg > 0 ? layout_share(units, nseg, from + i) : 0);
    }
    return 0;
}

static const int all9[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
static const int all10[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; /* SEG_DROP: and the order log */

static void on_layout_done(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct settle *s = arg;
    store_conns_note(s->conns, s->lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER) {
        settle_fail(s, st == LC_OK ? NULL : errstr);
        return;
    }
    s->ri = 0;
    settle_restocks(s);
}

static void on_dropped(void *arg, const char *failed, const struct store_item *items, int n)
{
    struct settle *s = arg;
    if (!all_integers(failed, items, n)) {
        settle_fail(s, failed);
        return;
    }
    /* SEG_DROP answers 2 for a dropped segment whose order log is still there: the log stays
     * until inventory-sink has drained it, and meta's lhwm (LAYOUT_DONE) keeps it findable
     * after hwm comes down (docs/design.md "The order log", "Streams found and dropped"). */
    int logs = 0;
    for (int i = 0; i < n; i++)
        if (items[i].v == 2)
            logs = s->l.segments + i + 1;
    char meta[STORE_KEY_MAX], ver[24], segs[24], lg[24];
    store_sku_key(meta, s->sku, "meta");
    snprintf(ver, sizeof(ver), "%" PRId64, s->l.version);
    snprintf(segs, sizeof(segs), "%d", s->l.segments);
    snprintf(lg, sizeof(lg), "%d", logs);
    const char *keys[1] = {meta};
    const char *a[3] = {ver, segs, lg};
    s->calls++;
    store_script_async(s->st, s->lc, s->ar, SCRIPT_LAYOUT_DONE, 1, keys, 3, a, on_layout_done, s);
}

static void on_reset(void *arg, const char *failed, const struct store_item *items, int n)
{
    struct settle *s = arg;
    if (!all_integers(failed, items, n)) {
        settle_fail(s, failed);
        return;
    }
    /* Drops [segments, hwm): the segments of an older, larger layout. */
    if (s->l.hwm <= s->l.segments) {
        on_dropped(s, NULL, NULL, 0);
        return;
    }
    if (spread_args(s, s->l.segments, s->l.hwm, 0, 0) != 0) {
        settle_fail(s, "out of memory");
        return;
    }
    run_on_segments(s, s->l.segments, s->l.hwm, SCRIPT_SEG_DROP, 10, all10, 1, s->conns,
                    on_dropped);
}

/* Resets segments [0, segments) to the layout, drops [segments, hwm), marks it rolled out. */
static void roll_out(struct settle *s)
{
    if (s->l.segments <= 0) {
        on_reset(s, NULL, NULL, 0);
        return;
    }
    if (spread_args(s, 0, s->l.segments, s->l.stock, s->l.segments) != 0) {
        settle_fail(s, "out of memory");
        return;
    }
    run_on_segments(s, 0, s->l.segments, SCRIPT_SEG_RESET, 9, all9, 2, s->conns, on_reset);
}

static void on_restock_end(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct settle *s = arg;
    store_conns_note(s->conns, s->lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER) {
        settle_fail(s, st == LC_OK ? NULL : errstr);
        return;
    }
    s->ri++;
    settle_restocks(s);
}

static void on_applied_acked(void *arg, long long got);
static void settle_restock_done(struct settle *s);

static void on_applied(void *arg, const char *failed, const struct store_item *items, int n)
{
    struct settle *s = arg;
    int all = 1, refused = -1, lost = failed && !items;
    for (int k = 0; k < n && !lost; k++) {
        if (items[k].type == REDIS_REPLY_ERROR)
            refused = k;
        else if (items[k].type != REDIS_REPLY_INTEGER)
            lost = 1; /* no answer: its fate is unknown */
        else if (items[k].v < 0)
            all = 0;
    }
    if (lost) {
        settle_fail(s, failed);
        return;
    }
    if (refused >= 0) {
        /* A segment refused its share (a damaged number: its script wrote nothing). The others
         * have theirs, each applied once (the segment's rst set), and the restock stays pending
         * for a reader after the repair: the layout is still one to sell from, so the read ends
         * well, with the restock listed as pending; a restock's own answer asks Redis where it
         * stands (503 "outcome":"unknown" while it is pending). */
        log_msg(CONFIG_LOG_WARN, "restock_refused",
                "sku %s segment %d refused restock %lld (a damaged number?): it stays pending",
                s->sku, refused, s->l.restocks[s->ri].rid);
        s->refused = 1;
        s->ri++;
        settle_restocks(s);
        return;
    }
    if (!all) {
        /* A newer layout superseded it on some segment: nothing more to do with it. */
        s->ri++;
        settle_restocks(s);
        return;
    }
    if (store_replica_acks(s->st) > 0) {
        /* RESTOCK_END vouches for every share, for good: a failover that lost one after it
         * would lose the units (no settle applies a restock recorded done). So the shares
         * are on the replicas first; one the WAIT cannot vouch for stays pending, and the
         * next settle applies it on whichever master holds the segment then (each segment
         * takes a restock once: its rst set). */
        s->calls++;
        store_replicated_async(s->st, s->lc, s->ar, &s->applied, on_applied_acked, s);
        return;
    }
    settle_restock_done(s);
}

static void on_applied_acked(void *arg, long long got)
{
    struct settle *s = arg;
    if (got < store_replica_acks(s->st)) {
        log_msg(CONFIG_LOG_WARN, "restock_unreplicated",
                "sku %s: restock %lld applied, but not on --redis-replica-acks replicas of "
                "every segment's master in time: it stays pending",
                s->sku, s->l.restocks[s->ri].rid);
        s->refused = 1;
        s->ri++;
        settle_restocks(s);
        return;
    }
    settle_restock_done(s);
}

/* Records restock s->ri done (RESTOCK_END), every segment having its share. */
static void settle_restock_done(struct settle *s)
{
    const struct layout_restock *x = &s->l.restocks[s->ri];
    char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX], rres[STORE_KEY_MAX], suffix[40], rid[24], ver[24];
    store_sku_key(meta, s->sku, "meta");
    store_sku_key(rst, s->sku, "rst");
    snprintf(suffix, sizeof(suffix), "rres:%lld", x->rid);
    store_sku_key(rres, s->sku, suffix);
    snprintf(rid, sizeof(rid), "%lld", x->rid);
    snprintf(ver, sizeof(ver), "%lld", x->version);
    const char *keys[3] = {meta, rst, rres};
    const char *a[3] = {rid, ver, LAYOUT_RESULT_TTL};
    s->calls++;
    store_script_async(s->st, s->lc, s->ar, SCRIPT_RESTOCK_END, 3, keys, 3, a, on_restock_end, s);
}

/* Applies the pending restocks of this version from s->ri on (each to every segment once, then
 * recorded done), then reads the layout again for the next round. */
static void settle_restocks(struct settle *s)
{
    static const int pick[4] = {0, 1, 2, 5};
    for (; s->ri < s->l.nrestocks; s->ri++) {
        const struct layout_restock *x = &s->l.restocks[s->ri];
        if (x->version != s->l.version || s->l.segments <= 0)
            continue;
        int n = s->l.segments;
        free(s->args);
        s->args = calloc((size_t)n, sizeof(*s->args));
        if (!s->args) {
            settle_fail(s, "out of memory");
            return;
        }
        for (int k = 0; k < n; k++) {
            snprintf(s->args[k][0], 24, "%lld", x->version);
            snprintf(s->args[k][1], 24, "%lld", layout_share(x->units, n, k));
            snprintf(s->args[k][2], 24, "%lld", x->rid);
        }
        memset(&s->applied, 0, sizeof(s->applied));
        run_on_segments(s, 0, n, SCRIPT_RESTOCK_APPLY, 4, pick, 3, &s->applied, on_applied);
        return;
    }
    s->round++;
    settle_read(s);
}

static void settle_round(struct settle *s)
{
    if (s->l.pending) {
        roll_out(s);
        return;
    }
    s->ri = 0;
    settle_restocks(s);
}

static void settle_start(struct store *st, lc_async_client *lc, const struct areq *ar,
                         const char *sku, int settle, int heal, struct store_conns *conns,
                         layout_fn cb, void *arg)
{
    struct settle *s = calloc(1, sizeof(*s));
    if (!s) {
        struct layout l;
        memset(&l, 0, sizeof(l));
        snprintf(l.why, sizeof(l.why), "layout: out of memory");
        cb(arg, -1, &l);
        return;
    }
    s->st = st;
    s->lc = lc;
    s->ar = ar;
    snprintf(s->sku, sizeof(s->sku), "%s", sku);
    s->settle = settle;
    s->heal = heal;
    s->cb = cb;
    s->arg = arg;
    s->conns = conns;
    settle_read(s);
}

void layout_read_async(struct store *st, lc_async_client *lc, const char *sku, layout_fn cb,
                       void *arg)
{
    settle_start(st, lc, NULL, sku, 0, 0, NULL, cb, arg);
}

void layout_read_settled_async(struct store *st, lc_async_client *lc, const char *sku, layout_fn cb,
                               void *arg)
{
    settle_start(st, lc, NULL, sku, 1, 0, NULL, cb, arg);
}

void layout_heal_async(struct store *st, lc_async_client *lc, const char *sku, layout_fn cb,
                       void *arg)
{
    settle_start(st, lc, NULL, sku, 1, 1, NULL, cb, arg);
}

static void on_version_raised(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    (void)arg;
    if (st != LC_OK)
        log_msg(CONFIG_LOG_WARN, "sku_version_raise_failed",
                "raising a version counter: %s (the next reader tries again)", errstr);
}

void layout_note_ahead(struct store *st, lc_async_client *lc, const char *sku, int k, int64_t seen,
                       int64_t version)
{
    log_msg(CONFIG_LOG_WARN, "segment_ahead",
            "sku %s segment %d: at version %" PRId64 ", ahead of the layout's %" PRId64
            " (a layout write was lost): its units are not sold until the next PUT of the SKU",
            sku, k, seen, version);
    char ver[STORE_KEY_MAX], v[24];
    store_sku_key(ver, sku, "ver");
    snprintf(v, sizeof(v), "%" PRId64, seen);
    const char *keys[1] = {ver};
    const char *args[1] = {v};
    store_script_async(st, lc, NULL, SCRIPT_VER_RAISE, 1, keys, 1, args, on_version_raised, NULL);
}

static void on_rules_raised(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    (void)arg;
    if (st != LC_OK)
        log_msg(CONFIG_LOG_WARN, "sku_rules_raise_failed",
                "giving the sale rules a new version: %s (the next reader tries again)", errstr);
}

void layout_note_rules_ahead(struct store *st, lc_async_client *lc, const char *sku, int k,
                             int64_t seen, int64_t ours)
{
    log_msg(CONFIG_LOG_WARN, "segment_rules_ahead",
            "sku %s segment %d: at rules version %" PRId64 ", ahead of the meta's %" PRId64
            " (a PATCH's meta write was lost): the rules get a new version",
            sku, k, seen, ours);
    char meta[STORE_KEY_MAX], past[24];
    store_sku_key(meta, sku, "meta");
    snprintf(past, sizeof(past), "%" PRId64, seen);
    const char *keys[1] = {meta};
    const char *args[1] = {past}; /* no rule named: the rules as they stand, a new version */
    store_script_async(st, lc, NULL, SCRIPT_PATCH_RULES, 1, keys, 1, args, on_rules_raised, NULL);
}

void layout_settle_for_async(struct store *st, lc_async_client *lc, const struct areq *ar,
                             const char *sku, int heal, struct store_conns *conns, layout_fn cb,
                             void *arg)
{
    settle_start(st, lc, ar, sku, 1, heal, conns, cb, arg);
}
