/*
 * order_multi — an order served from several segments, all or nothing (SPEC §13; the protocol
 * and its failure cases: docs/design.md "Orders larger than one segment"). order_fsm.c starts
 * one when its walk found stock but no segment with enough; this file does the I/O of it in two
 * phases, each ending in the callback:
 *
 *   multi_lock     the segments' locks (a try pass over the planned ones, more tries when they
 *                  fall short, then a pass in index order with waiting), the plan of the parts
 *                  from the stock read under the locks, and the intent on the SKU's slot
 *                  (multi_begin.lua). Ends MULTI_READY (every part's lock held, the intent
 *                  written: the critical section may begin) or with a final result;
 *   multi_commit   the parts other than the first (pipelined), then the first one, the primary,
 *                  each a fenced commit under its own lock with the intent's deadline; the WAITs
 *                  of --redis-replica-acks; the intent deleted. A part refused before the
 *                  primary was written undoes the parts made (part_undo.lua). Ends with a final
 *                  result.
 *
 * Ownership: the caller owns the multi (multi_free) and keeps the request's strings alive
 * until it is freed; at most one phase runs at a time and its callback comes exactly once, on
 * the loop (lockcore's contract: LC_ESTATE when the loop's client is freed).
 */
#ifndef INVENTORY_ORDER_MULTI_H
#define INVENTORY_ORDER_MULTI_H

#include <stdint.h>

#include <jansson.h>

#include <lockcore/lockcore_async.h>

#include "order.h"
#include "order_walk.h"
#include "rules.h"
#include "seglock.h"

struct app;
struct areq;
struct multi;

/* What the order hands over (borrowed: alive until multi_free). */
struct multi_req {
    struct app *app;
    lc_async_client *lc;
    const struct areq *ar; /* the request (its id on the store's log lines) */
    struct seglock_env env;
    lc_lock_opts lo;
    const char *sku;
    int64_t version;
    int nseg;
    const long long *seen; /* [nseg]: each segment's stock as the walk read it (<= 0: none);
                              not read when probe is set */
    int64_t qty;
    const char *token;        /* the order id's random part */
    const char *user;         /* "" none */
    const char *idem;         /* "" none */
    const char *claim_expiry; /* Redis ms of the key claim / per-user reservation, "0" none */
    const char *grp;          /* the primary's "grp" (order_limit.h group_record_member), or NULL */
    struct sku_rules rules;
    int64_t deadline_ms; /* clock_mono_ms() by which the order must be answered */
    int budget;          /* Redis calls it may still make */
    /* An item of a cart (order_cart.c; docs/design.md "Carts (SPEC §17)"); cart 0: an order
     * of one SKU, as above. An item writes no intent (the cart's is one, in the home SKU's
     * slot) and its parts are the cart's: part_of cart_id (the cart's buffer, filled once the
     * home item is planned), its own SKU. The home item's lowest part is the cart's primary,
     * whose record the cart gives (multi_cart_primary). lim_user: written with lim 1 on the
     * first part of an item whose SKU has a limit (not the home item's: the primary carries
     * the user), so its SKU's give-back follows that part. */
    int cart, cart_home;
    const char *cart_id;
    const char *lim_user;
    /* A cart's item whose segments were not read (probe 1; seen is not used): the try pass
     * starts with one segment, picked at random among those this instance neither found empty
     * nor holds (as a one-segment order's walk starts); its acquire reads its stock, and when
     * it holds the item, that is the plan (one lock, one commit: no read of the others). Else
     * every other segment's stock is read (one GET each, pipelined, the probe's lock kept), and
     * the attempt goes on as one planned from those reads: OUT_INSUFFICIENT when they total
     * less than qty, else the tries and the pass with waiting as above. */
    int probe;
};

enum multi_phase_end {
    MULTI_READY, /* multi_lock: locks held, intent written: run the critical section, then
                    multi_commit */
    MULTI_DONE,  /* a final result: multi_result() */
    MULTI_PARTS  /* a cart's item (rq.cart): multi_commit wrote its parts (all but the cart's
                    primary) and WAITed them: multi_cart_primary or multi_cart_undo next */
};

/* The result once MULTI_DONE. out: OUT_CREATED (record and order_id set), OUT_INSUFFICIENT,
 * OUT_SOLD_OUT, OUT_LOCK_TIMEOUT, OUT_UNAVAILABLE, OUT_OVER_BUDGET, OUT_OUTCOME_UNKNOWN,
 * OUT_NOT_STARTED / OUT_ENDED (sale_at), or a settled outcome of a part's commit; again: the
 * layout changed or a lock was lost before anything was sold: the caller may walk again. */
struct multi_result {
    enum order_outcome out;
    int again;
    int reload; /* ... after re-reading the layout */
    char order_id[ORDER_ID_MAX + 1];
    char *record; /* OUT_CREATED: the primary's JSON (the caller takes it: set to NULL) */
    int64_t sale_at;
    int acked; /* the WAITs of --redis-replica-acks were made */
    int calls; /* Redis calls made */
    int parts;
    int left; /* parts may still exist (an undo failed or its WAIT fell short, or the primary's
                 outcome is unknown): an intent must stay for the healer */
    char why[256];
};

typedef void (*multi_fn)(void *arg, enum multi_phase_end end);

/* A new multi-segment attempt (no I/O). NULL when out of memory. */
struct multi *multi_new(const struct multi_req *rq, multi_fn cb, void *arg);
void multi_free(struct multi *m);

/* Phase one (see above). */
void multi_lock(struct multi *m);

/* Phase two; abort: the loop is ending or the critical section was cut short: release the
 * locks, delete the intent, MULTI_DONE with OUT_UNAVAILABLE. */
void multi_commit(struct multi *m, int abort);

struct multi_result *multi_result(struct multi *m);

/* ---- a cart's item (rq.cart) ----
 * multi_lock ends MULTI_READY with the locks held and the parts planned, no intent; then
 * multi_commit (MULTI_PARTS or MULTI_DONE when a part was refused, its own parts undone), then
 * the home item's multi_cart_primary or every item's multi_cart_undo (MULTI_DONE). */

/* The planned parts (after MULTI_READY): a new JSON array [{"segment","quantity"},...] in
 * index order, and the text "k:q:<sku>,..." appended to buf (cap bytes; -1 when it does not
 * fit). first: the lowest segment. */
json_t *multi_cart_parts(const struct multi *m, int *first);
int multi_cart_intent_parts(const struct multi *m, char *buf, size_t cap);

/* The deadline of every commit (Redis ms: the earliest of the cart's intent and every claim and
 * reservation), before multi_commit. */
void multi_cart_deadline(struct multi *m, const char *deadline);

/* The home item: commit the cart's primary with record rec (copied) and items, its order log
 * entry's items text ("<sku>:<k>:<q>,...", orderlog_items_add; copied), its WAIT; MULTI_DONE. */
void multi_cart_primary(struct multi *m, const char *rec, const char *items);

/* Undo the parts made (another item failed); MULTI_DONE with out. */
void multi_cart_undo(struct multi *m, enum order_outcome out);

/* Writes into seen[k] (the caller's [nseg]) the stock each candidate segment k showed under its
 * lock in this attempt (0: empty), leaving the others: fresher than the walk's reads the
 * attempt was planned from. After OUT_INSUFFICIENT every candidate was read: other orders took
 * some of what the walk saw. A probe (rq.probe) that read the other segments writes every
 * segment. Returns 1 when seen now holds every segment's stock as read (always without
 * rq.probe; with it, once the other segments were read), 0 when only the probe's was. */
int multi_seen(const struct multi *m, long long *seen);

/* With --redis-replica-acks N > 0, what a replay (an Idempotency-Key's order found finished)
 * needs before its 200: the order's record, fetched on the connection ref (NULL: not known),
 * and each of its other parts (order's "parts", read on its segment's master) on N replicas of
 * their masters. cb(arg, 1) when they are; cb(arg, 0) when a WAIT fell short or failed, or a
 * part is missing (503 "outcome":"unknown"). cb comes once, on the loop, never inside the call;
 * order is read during the call only. */
typedef void (*multi_vouch_fn)(void *arg, int ok);
void multi_replay_vouch(struct app *app, lc_async_client *lc, const struct areq *ar,
                        const char *sku, const json_t *order, const lc_async_conn_ref *ref,
                        multi_vouch_fn cb, void *arg);

#endif
