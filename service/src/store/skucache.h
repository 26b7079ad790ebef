/*
 * What this instance knows of each SKU, so that most orders need no extra Redis round trip:
 * its layout (version, segment count), which segments were seen empty, and whether the SKU is
 * sold out. Emptiness and sold-out are remembered for at most recheck_ms (config
 * sold_out_recheck_ms, <= 1 s): after that they are checked against Redis again, which is how a
 * restock, a cancel or a re-PUT made on another instance ends them there.
 */
#ifndef INVENTORY_SKUCACHE_H
#define INVENTORY_SKUCACHE_H

#include <stdint.h>

#include "rules.h"

#define SKUCACHE_MAX_SEGMENTS 1024

struct skucache;

/* A copy of one SKU's entry. */
struct sku_view {
    int64_t version; /* 0: not known */
    int segments;
    int sold_out;           /* every segment was empty, less than recheck_ms ago */
    int recheck_due;        /* sold out, but the bound passed: check Redis before answering */
    struct sku_rules rules; /* the sale rules as last read with the layout (rules.h) */
    int rules_stale;        /* they were read recheck_ms ago or more: read them again */
    uint64_t empty[SKUCACHE_MAX_SEGMENTS / 64]; /* segments seen empty within recheck_ms */
    uint64_t held[SKUCACHE_MAX_SEGMENTS / 64];  /* segment locks this instance holds now */
};

struct skucache *skucache_new(int recheck_ms);
void skucache_free(struct skucache *c);

/* Copies the entry of sku into out; out->version = 0 when unknown. */
void skucache_get(struct skucache *c, const char *sku, struct sku_view *out);

/* Records the layout read from Redis, with its sale rules, read by a read sent at read_ms
 * (clock_mono_ms()): the rules count as stale recheck_ms after that, so a rule change answered
 * after the read reached Redis is at most recheck_ms behind in this cache (stock.c waits that
 * long before answering a change that may end a refusal made from the cache). A different
 * version than cached forgets emptiness and sold-out. */
void skucache_set_layout(struct skucache *c, const char *sku, int64_t version, int segments,
                         const struct sku_rules *rules, int64_t read_ms);

/* Records segment k of that version as empty; when every segment is, the SKU is sold out. */
void skucache_mark_empty(struct skucache *c, const char *sku, int64_t version, int k);

/* Records the result of a sold-out re-check: empty[] as read (bit set = empty). */
void skucache_set_empty(struct skucache *c, const char *sku, int64_t version,
                        const uint64_t *empty);

/* Records that this instance took (held = 1) or let go of (0) the lock of segment k, so its
 * other requests do not spend a round trip try-locking a segment it already holds. */
void skucache_set_held(struct skucache *c, const char *sku, int k, int held);

/* Forgets everything about sku (DELETE, restock, cancel on this instance). */
void skucache_forget(struct skucache *c, const char *sku);

/* Calls fn(sku, segments, empty, arg) for at most max SKUs of known layout (in no particular
 * order), empty being the segments seen empty within recheck_ms; returns how many were visited.
 * fn runs under the cache's lock: it must not call back into the cache. For /metrics. */
int skucache_foreach(struct skucache *c, int max,
                     void (*fn)(const char *sku, int segments, int empty, void *arg), void *arg);

/* Bit helpers for sku_view.empty. */
static inline int skucache_is_empty(const struct sku_view *v, int k)
{
    return (int)((v->empty[k / 64] >> (k % 64)) & 1);
}

static inline int skucache_is_held(const struct sku_view *v, int k)
{
    return (int)((v->held[k / 64] >> (k % 64)) & 1);
}

#endif
