/*
 * The order path's pure decisions (order_fsm.c does the I/O): what a segment's lock acquire,
 * commit reply or version came to, how the results of one walk over the segments add up, what
 * ends a round, and the answer when nothing more can be tried. No Redis, no clock, no log, no
 * metric: each function takes what was read and returns what to do, so the unit tests
 * (tests/test_order_walk.c) drive every branch without a server.
 */
#ifndef INVENTORY_ORDER_WALK_H
#define INVENTORY_ORDER_WALK_H

#include <stdint.h>

#include <hiredis/hiredis.h>
#include <lockcore/lockcore.h>

#include "outcome_table.h"
#include "skucache.h"

/* What trying one segment came to. */
enum seg_result {
    SEG_DONE,        /* order committed */
    SEG_BUSY,        /* locked by someone else */
    SEG_NOTREADY,    /* a PUT is resetting it to the new version right now */
    SEG_EMPTY,       /* no stock */
    SEG_SHORT,       /* some stock, less than asked */
    SEG_STALE,       /* the segment belongs to another version: re-read the layout */
    SEG_LOST,        /* our lock was lost before the commit: nothing changed */
    SEG_ERROR,       /* Redis failed (or the segment is damaged) before anything changed */
    SEG_EXPIRED,     /* the request's Idempotency-Key claim or per-user reservation expired before
                        the commit: nothing changed */
    SEG_NOT_STARTED, /* the sale has not started (Redis's clock): nothing changed */
    SEG_ENDED,       /* the sale has ended: nothing changed */
    SEG_LIMIT,       /* the user's limit, checked in the commit, would be passed: nothing changed */
    SEG_UNKNOWN      /* Redis failed during the commit: the outcome is unknown */
};

/* Outcome of the whole order attempt: one per row of outcome_table.h, which says what each
 * answers and what leads to it (order_outcome.h looks them up). */
enum order_outcome {
#define ORDER_OUTCOME_ENUM(id, error, message, metric, fate, idem, settles, ends, replies, extra)  \
    OUT_##id,
    ORDER_OUTCOME_TABLE(ORDER_OUTCOME_ENUM)
#undef ORDER_OUTCOME_ENUM
        OUT_N /* not an outcome */
};

/* What one walk over the segments found, besides a settling result. */
struct walk {
    uint64_t done[SKUCACHE_MAX_SEGMENTS / 64]; /* empty, short or failed: out for this request */
    uint64_t busy[SKUCACHE_MAX_SEGMENTS / 64]; /* held by others: candidates for the wait */
    int nbusy;
    int retry;     /* a segment to come back to: not ready (a PUT rolling out) or lock lost */
    int notready;  /* of which: not ready */
    int any_short; /* some segment had stock, less than asked */
    int any_error; /* some segment failed with a Redis error: never answer sold out then */
};

/* What a segment's reply (its acquire's reads, or its commit) says. When differs is set, the
 * segment is at version sver, not the order's: order_walk_version decides; else r is the
 * result (SEG_DONE after an acquire: enough stock, go on to the critical section). empty: the
 * segment is known empty now (mark it in the cache). damaged: the commit found a counter that
 * is not an integer (r is SEG_ERROR). */
struct seg_verdict {
    enum seg_result r;
    int differs;
    long long sver;
    int empty;
    int damaged;
    int rules;    /* SEG_STALE for the sale rules: the segment took a newer rules version (at)
                     than the order's (STORE_COMMIT_RULES): re-read them */
    long long at; /* SEG_NOT_STARTED: the sale's start; SEG_ENDED: its end (Redis ms);
                     SEG_ERROR: > 0 when the order log is full (its entries); SEG_LIMIT: the
                     user's limit; rules: the segment's rules version */
};

/* What a segment at another version than the order's means (the healing rules,
 * docs/design.md). */
enum version_verdict {
    VV_NOTREADY, /* behind, not healed yet: heal the layout and come back (SEG_NOTREADY) */
    VV_LEFT_OUT, /* behind after the heal: left out (SEG_ERROR, logged) */
    VV_STALE,    /* ahead of the order's layout: re-read it (SEG_STALE) */
    VV_AHEAD     /* ahead of the meta itself (just re-read): raise the counter, left out */
};

/* What ends a walk's round (order_walk_round_end). */
enum round_end {
    RE_RELOAD,  /* a segment of another version was seen: forget the layout, begin again */
    RE_ANSWER,  /* nothing left to try or wait for: order_walk_end(w, 0) */
    RE_TIMEOUT, /* the deadline passed: order_walk_end(w, 1) */
    RE_AGAIN,   /* a lost lock to come back to: begin a new round */
    RE_SETTLE,  /* a segment not ready: settle the layout (once per request) */
    RE_PAUSE,   /* a segment not ready after the settle: look again in 2 ms */
    RE_WAIT     /* every segment that might serve is busy: wait for one */
};

/* What the single-lock strategy does when its attempt under the SKU's lock ends. */
enum single_end {
    SE_ANSWER, /* *out is the answer */
    SE_SETTLE, /* a segment not ready: settle the layout (the first time) */
    SE_PAUSE,  /* ... or look again in 2 ms */
    SE_AGAIN,  /* the lock was lost: begin a new round */
    SE_RELOAD  /* a segment of another version: forget the layout, begin again */
};

/* Notes segment k busy (once). */
void order_walk_busy(struct walk *w, int k);

/* The n-th busy segment (0-based, n < w->nbusy). */
int order_walk_busy_nth(const struct walk *w, int n);

/* Files the result r of segment k into w: empty, short and failed segments are left out for
 * the rest of the request; a lost lock or a segment not ready is come back to (never sold
 * out); busy is a candidate for the wait. Returns 1 when r counts as a failover to another
 * segment (metrics_failover), else 0. */
int order_walk_note(struct walk *w, int k, enum seg_result r);

/* The answer when no segment can be tried any more (timed_out: the deadline passed). */
enum order_outcome order_walk_end(const struct walk *w, int timed_out);

/* 1 when a segment's result decides the whole order (a row of outcome_table.h settles with it):
 * committed, the outcome unknown, the Idempotency-Key claim or per-user reservation expired
 * (another request may own the key now: stop), or the sale is not on (every segment judges it
 * on the same rules). */
int order_walk_settles(enum seg_result r);

/* The answer of a result that settles the order (its outcome_table.h row); any other result
 * (SEG_ERROR ...): OUT_UNAVAILABLE. */
enum order_outcome order_walk_settled_outcome(enum seg_result r);

/* What ends a round: need_layout (a segment was stale), left = ms to the deadline, settled =
 * this request settled the layout already. */
enum round_end order_walk_round_end(const struct walk *w, int need_layout, int64_t left,
                                    int settled);

/* The verdict on an acquire that read the segment's stock and sver, for an order of qty units
 * under layout version. */
void order_walk_acquire_verdict(long long stock, long long sver, int64_t version, int64_t qty,
                                struct seg_verdict *v);

/* The verdict on a commit script's reply {code, value} (store_scripts.h, STORE_COMMIT_*);
 * a malformed reply is SEG_UNKNOWN (the commit may have run). */
void order_walk_commit_verdict(const redisReply *r, struct seg_verdict *v);

/* The result of a commit that did not answer LC_OK: fenced (under a segment's lock) a lost
 * lock is SEG_LOST; a lost reply (LC_EIO) SEG_UNKNOWN; anything else was never run. */
enum seg_result order_walk_commit_failed(lc_status st, int fenced);

/* A segment at sver while the order has version: see enum version_verdict. healed: this
 * request already rolled the layout out again; stale_from: the version at which a segment
 * ahead of the layout made it re-read the layout before (0: never). */
enum version_verdict order_walk_version(long long sver, int64_t version, int healed,
                                        int64_t stale_from);

/* The single-lock attempt ended with r (any_short: some segment had stock, less than asked);
 * *out is the answer for SE_ANSWER. */
enum single_end order_walk_single_end(enum seg_result r, int any_short, int settled,
                                      enum order_outcome *out);

/* Multi-segment orders (SPEC §13, docs/design.md "Orders larger than one segment"): how much
 * to take from each of n segments whose stock is known (stock[i], < 0 or 0: none), for an order
 * of qty units. Takes the fewest segments (the largest first), then empties the smaller of
 * them and takes the rest from the largest, so near-empty remainders fold into the order.
 * Fills take[i] (0: not used) and returns the number of parts, or 0 when the segments hold
 * fewer than qty units together. */
int order_walk_plan(int n, const long long *stock, int64_t qty, long long *take);

#endif
