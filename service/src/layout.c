/*
 * layout — see layout.h. The scripts are in store_scripts.h (PUT_META, DELETE_META,
 * LAYOUT_READ, LAYOUT_DONE, SEG_RESET, SEG_DROP, RESTOCK_*).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

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

int layout_read(struct store *st, const char *sku, struct layout *out)
{
    memset(out, 0, sizeof(*out));
    out->stock = -1;
    char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX];
    store_sku_key(meta, sku, "meta");
    store_sku_key(rst, sku, "rst");
    const char *keys[2] = {meta, rst};
    redisReply *r = NULL;
    if (store_run_many(st, SCRIPT_LAYOUT_READ, 1, 2, keys, 0, NULL, &r) != 0 || !r ||
        r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
        store_free_replies(&r, 1);
        return -1;
    }
    out->version = str_int(r->element[0], 0);
    out->segments = (int)str_int(r->element[1], 0);
    out->stock = str_int(r->element[2], -1);
    out->pending = r->element[3]->type == REDIS_REPLY_STRING && strcmp(r->element[3]->str, "p") == 0;
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
    freeReplyObject(r);
    if (out->segments < 0 || out->segments > 1024 || out->hwm < 0 || out->hwm > 1024)
        return -1;
    return out->version > 0 && out->segments > 0;
}

int layout_unsettled(const struct layout *l)
{
    return l->pending || l->nrestocks > 0;
}

/* One script run on each segment of a range: which keys of (stock, sver, cnt, orders, idem,
 * rst) it takes (pick), and how many args (from args[k][0..nargs)). */
struct seg_call {
    enum store_script id;
    int nkeys;
    const int *pick;
    int nargs;
};

/* Runs c on segments [from, to) of sku in one pipelined round trip, segment k with the args
 * args[k - from]. Replies into rep[0..to-from) (the caller frees them); 0, or -1 on a Redis
 * error or when a reply is not an integer. */
static int run_on_segments(struct store *st, const char *sku, int from, int to,
                           const struct seg_call *c, char (*args)[3][24], redisReply **rep)
{
    int n = to - from;
    struct seg_keys *sk = malloc(sizeof(*sk) * (size_t)n);
    const char **kflat = calloc((size_t)n * (size_t)c->nkeys, sizeof(*kflat));
    const char **aflat = calloc((size_t)n * (size_t)c->nargs + 1, sizeof(*aflat));
    int rc = -1;
    if (!sk || !kflat || !aflat)
        goto out;
    for (int i = 0; i < n; i++) {
        store_seg_keys(sku, from + i, &sk[i]);
        const char *all[6] = {sk[i].stock, sk[i].sver, sk[i].cnt,
                              sk[i].orders, sk[i].idem, sk[i].rst};
        for (int j = 0; j < c->nkeys; j++)
            kflat[i * c->nkeys + j] = all[c->pick[j]];
        for (int j = 0; j < c->nargs; j++)
            aflat[i * c->nargs + j] = args[i][j];
    }
    rc = store_run_many(st, c->id, n, c->nkeys, kflat, c->nargs, aflat, rep);
    for (int i = 0; rc == 0 && i < n; i++)
        if (!rep[i] || rep[i]->type != REDIS_REPLY_INTEGER)
            rc = -1;
out:
    free(aflat);
    free(kflat);
    free(sk);
    return rc;
}

/* Runs c on [from, to) with args[i] = {version, units of segment from + i in the spread}, and
 * frees the replies. 0 or -1. */
static int spread_on_segments(struct store *st, const char *sku, int from, int to,
                              const struct seg_call *c, int64_t version, long long units,
                              int nseg)
{
    if (to <= from)
        return 0;
    int n = to - from;
    char(*args)[3][24] = calloc((size_t)n, sizeof(*args));
    redisReply **rep = calloc((size_t)n, sizeof(*rep));
    int rc = -1;
    if (args && rep) {
        for (int i = 0; i < n; i++) {
            snprintf(args[i][0], 24, "%" PRId64, version);
            snprintf(args[i][1], 24, "%lld", nseg > 0 ? layout_share(units, nseg, from + i) : 0);
        }
        rc = run_on_segments(st, sku, from, to, c, args, rep);
        store_free_replies(rep, n);
    }
    free(rep);
    free(args);
    return rc;
}

/* Resets segments [0, segments) to the layout and drops [segments, hwm), then marks the layout
 * rolled out. 0 or -1. */
static int roll_out(struct store *st, const char *sku, const struct layout *l)
{
    static const int all6[6] = {0, 1, 2, 3, 4, 5};
    const struct seg_call reset = {SCRIPT_SEG_RESET, 6, all6, 2};
    const struct seg_call drop = {SCRIPT_SEG_DROP, 6, all6, 1};
    if (spread_on_segments(st, sku, 0, l->segments, &reset, l->version, l->stock, l->segments) ||
        spread_on_segments(st, sku, l->segments, l->hwm, &drop, l->version, 0, 0))
        return -1;
    char meta[STORE_KEY_MAX], ver[24], segs[24];
    store_sku_key(meta, sku, "meta");
    snprintf(ver, sizeof(ver), "%" PRId64, l->version);
    snprintf(segs, sizeof(segs), "%d", l->segments);
    const char *keys[1] = {meta};
    const char *a[2] = {ver, segs};
    redisReply *r = NULL;
    int rc = store_run_many(st, SCRIPT_LAYOUT_DONE, 1, 1, keys, 2, a, &r);
    if (rc == 0 && (!r || r->type != REDIS_REPLY_INTEGER))
        rc = -1;
    store_free_replies(&r, 1);
    return rc;
}

/* Applies restock x to every segment of the layout (once each), then records it done. 0 (also
 * when a newer layout superseded it), -1 on a Redis error. */
static int apply_restock(struct store *st, const char *sku, const struct layout *l,
                         const struct layout_restock *x)
{
    static const int pick[4] = {0, 1, 2, 5};
    int n = l->segments;
    char(*args)[3][24] = calloc((size_t)n, sizeof(*args));
    redisReply **rep = calloc((size_t)n, sizeof(*rep));
    int rc = -1, all = 1;
    if (!args || !rep)
        goto out;
    for (int k = 0; k < n; k++) {
        snprintf(args[k][0], 24, "%lld", x->version);
        snprintf(args[k][1], 24, "%lld", layout_share(x->units, n, k));
        snprintf(args[k][2], 24, "%lld", x->rid);
    }
    const struct seg_call apply = {SCRIPT_RESTOCK_APPLY, 4, pick, 3};
    if (run_on_segments(st, sku, 0, n, &apply, args, rep) != 0)
        goto out;
    for (int k = 0; k < n; k++)
        if (rep[k]->integer < 0)
            all = 0;
    rc = 0;
    if (all) {
        char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX], rres[STORE_KEY_MAX], suffix[40];
        store_sku_key(meta, sku, "meta");
        store_sku_key(rst, sku, "rst");
        snprintf(suffix, sizeof(suffix), "rres:%lld", x->rid);
        store_sku_key(rres, sku, suffix);
        const char *keys[3] = {meta, rst, rres};
        const char *a[3] = {args[0][2], args[0][0], LAYOUT_RESULT_TTL};
        redisReply *r = NULL;
        if (store_run_many(st, SCRIPT_RESTOCK_END, 1, 3, keys, 3, a, &r) != 0 || !r ||
            r->type != REDIS_REPLY_INTEGER)
            rc = -1;
        store_free_replies(&r, 1);
    }
out:
    if (rep)
        store_free_replies(rep, n);
    free(rep);
    free(args);
    return rc;
}

int layout_settle(struct store *st, const char *sku, struct layout *l)
{
    /* A few rounds: a concurrent PUT may put a newer layout in place while this one settles
     * (every restock listed belongs to the current version: a PUT drops the others). */
    for (int round = 0; round < 4 && layout_unsettled(l); round++) {
        if (l->pending && roll_out(st, sku, l) != 0)
            return -1;
        for (int i = 0; i < l->nrestocks; i++)
            if (l->restocks[i].version == l->version && l->segments > 0 &&
                apply_restock(st, sku, l, &l->restocks[i]) != 0)
                return -1;
        if (layout_read(st, sku, l) < 0)
            return -1;
    }
    return 0;
}

int layout_read_settled(struct store *st, const char *sku, struct layout *l)
{
    int found = layout_read(st, sku, l);
    if (found < 0 || !layout_unsettled(l))
        return found;
    if (layout_settle(st, sku, l) != 0)
        return -1;
    return l->version > 0 && l->segments > 0;
}
