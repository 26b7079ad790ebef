/*
 * layout — a SKU's layout in Redis and how it reaches every segment.
 *
 * A PUT, a DELETE and a restock each write their *intent* to the SKU's meta hash in one atomic
 * step (the new version and layout, or a pending restock); the segments (other Redis slots, so
 * no script can touch them all) are then brought to it by the settle (layout_read_settled_async,
 * layout_heal_async). Every step of a settle is idempotent and guarded by the segment's
 * version, so any number of settles of
 * any number of PUTs, concurrent or cut off half-way, converge on the newest layout; a settle
 * is run by the writer itself and by whoever next meets a layout still pending (an order, a
 * status read, the next admin call), so nothing waits for an admin to repair it.
 */
#ifndef INVENTORY_LAYOUT_H
#define INVENTORY_LAYOUT_H

#include <stdint.h>

#include "rules.h"
#include "store.h"

/* Pending restocks one settle applies at most (the rest: the next one). */
#define LAYOUT_MAX_RESTOCKS 32

struct layout_restock {
    long long rid, version, units;
};

/* The longest failure message a layout read keeps (struct layout's why). */
#define LAYOUT_WHY_MAX 256

struct layout {
    int64_t version; /* 0 when the SKU never existed */
    int segments;    /* 0: deleted (or never existed) */
    long long stock; /* the PUT's stock; -1 when meta predates this field */
    int pending;     /* the layout is not yet on every segment */
    int hwm;         /* segments [0, hwm) may have keys */
    int nrestocks;   /* restocks not yet applied everywhere (first LAYOUT_MAX_RESTOCKS) */
    struct layout_restock restocks[LAYOUT_MAX_RESTOCKS];
    struct sku_rules rules; /* the sale rules (rules.h); all 0 when none */
    int64_t read_ms; /* clock_mono_ms() when the read that filled this was sent: its rules are
                        no newer than that (skucache ages them from it) */
    /* whether holds may exist in this layout, from meta's hold flag, not from the rules
     * (docs/design.md "The sweeper"): 0 none, 1 may (placed by this binary: on one Redis the
     * hold index names them), 2 may, some perhaps placed by a binary older than the flag */
    int holds;
    int calls;                /* Redis calls the read (and settle) made, for the callers' budgets */
    char why[LAYOUT_WHY_MAX]; /* rc -1: what failed (lockcore's message, or the bad reply) */
};

/* Units of segment k when units are spread over n segments (the first units % n get one more).*/
long long layout_share(long long units, int n, int k);

/* Fills out from a reply of lua/layout_read.lua (or the layout element of lua/status_read.lua's):
 * 1 the SKU exists, 0 it does not, -1 a bad reply. */
struct redisReply;
int layout_parse_reply(const struct redisReply *r, struct layout *out);

/* 1 when l has work for a settle (a roll-out or restocks pending). */
int layout_unsettled(const struct layout *l);

/* The result of a layout read: rc 1 the SKU exists (segments > 0), 0 it does not (l still
 * filled: a deleted SKU may be pending), -1 Redis error. l is borrowed for the call. */
typedef void (*layout_fn)(void *arg, int rc, struct layout *l);

/* Reads sku's layout on lc (a worker loop's client). cb is called exactly once, on the loop,
 * never from inside this call (store.h's rule and its exceptions: LC_ESTATE at the loop's end,
 * out of memory); without a request context (the caller brackets its own). */
void layout_read_async(struct store *st, lc_async_client *lc, const char *sku, layout_fn cb,
                       void *arg);

/* Reads sku's layout and, when something is pending, brings every segment to it and applies
 * the pending restocks (at most 4 rounds), then reads it again: same results as
 * layout_read_async, -1 also when a settle step failed (l then as last read). */
void layout_read_settled_async(struct store *st, lc_async_client *lc, const char *sku, layout_fn cb,
                               void *arg);

/* As layout_read_settled_async, but brings every segment to the layout even when the meta says
 * it is rolled out: for a segment found behind a settled layout (its reset lost in a failover
 * of its master). The reset of each segment is guarded by its version (a segment at the layout's
 * version or a newer one is left alone), so this is safe to run at any time and to repeat: it
 * costs one script per segment. */
void layout_heal_async(struct store *st, lc_async_client *lc, const char *sku, layout_fn cb,
                       void *arg);

/* A segment of sku refused an order's rules of version ours as stale, its rules version seen,
 * although they were just read from the meta: the meta lost the PATCH that pushed seen (a
 * failover of the SKU's master), the segment kept it. Gives the meta's rules as they stand a
 * new version above seen (patch_rules.lua with no field), so the next read of them commits
 * there again. One script, not waited for; logged. */
void layout_note_rules_ahead(struct store *st, lc_async_client *lc, const char *sku, int k,
                             int64_t seen, int64_t ours);

/* A segment of sku was found at version seen, ahead of the meta's (the meta write of a later PUT
 * was lost in a failover of the SKU's master, the segment's reset was not): raises the SKU's
 * version counter to seen, so that the next PUT or DELETE gets a version above it and its
 * roll-out brings the segment back (nothing else may: its orders were answered 201, and a
 * reset to the older layout would put their units up for sale again). One script, not waited
 * for; logged. */
void layout_note_ahead(struct store *st, lc_async_client *lc, const char *sku, int k, int64_t seen,
                       int64_t version);

/* For the request ar, on lc (its loop's client): layout_read_settled_async (heal 0) or
 * layout_heal_async (heal 1), cb run in ar's log context (store.h), and, when conns is not NULL
 * (the caller's, alive until cb), the connections its reads and writes went on noted there, for
 * the WAITs that vouch for them (an admin write's). */
struct areq;
void layout_settle_for_async(struct store *st, lc_async_client *lc, const struct areq *ar,
                             const char *sku, int heal, struct store_conns *conns, layout_fn cb,
                             void *arg);

#endif
