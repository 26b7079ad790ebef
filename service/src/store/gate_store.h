/*
 * gate_store — the waiting room's state in Redis (SPEC §16, docs/design.md "The waiting room"):
 * the four calls the HTTP side (the queue routes and their admitter) and the order side make on
 * a SKU's gate, each one script (lua/gate_join.lua, gate_admit.lua, gate_place.lua,
 * gate_used.lua) on the SKU's slot {S}, sent by SHA on a worker loop's lockcore client like every
 * store call (store.h: the callback comes once, on the loop, never from inside the call). Every
 * step of the gate is one script, so an instance killed between two steps loses and duplicates
 * no place.
 *
 * The keys (service/store_keys.txt): inv:2:{S}:q (the gate's counters), :q:line (the places),
 * :q:adm (the admitted), :q:live (the tickets neither used nor expired). The scripts read the
 * SKU's rules from its meta (rules_table.h's meta fields q_rate, q_active, q_ttl, q_pct, q_fifo,
 * q_paused, sale_start), on Redis's clock, so every instance judges by the same rules and time.
 */
#ifndef INVENTORY_GATE_STORE_H
#define INVENTORY_GATE_STORE_H

#include <stdint.h>

#include <lockcore/lockcore_async.h>

#include "store.h"
#include "store_scripts.h" /* STORE_GATE_*: the codes below */

/* The seed's text: 32 lowercase hex digits (16 random bytes drawn by the instance whose script
 * ran the start step), "" before the start and in FIFO mode. */
#define GATE_SEED_MAX 33

/* A place's admission entry (inv:2:{S}:q:adm): "<n>:<exp_ms>" or "used:<order id>". */
#define GATE_ADM_MAX 96

/* A join's outcome (gate_join.lua's reply). */
struct gate_join {
    int code;         /* STORE_GATE_OK: a new place; STORE_GATE_AGAIN: the user's place already
                       * (the same one); STORE_GATE_NO_ROOM (the SKU's queue_rate is 0) or
                       * STORE_GATE_NO_SKU (no such SKU, or deleted): nothing written, the rest
                       * of the fields are 0 */
    long long rank;   /* the place's 0-based rank (ZRANK in the line): final, never changes;
                       * -1 while the place waits for the start's shuffle (queue_fifo 0 and
                       * Redis's now before sale_start): its rank is not known yet */
    long long seq;    /* joins so far (the gate's seq) */
    long long served; /* places admitted so far: rank < served is admitted */
    int shuffled;     /* 1 once the start has passed (shuffle done, or nothing to shuffle) */
};

/* The gate as one admission step left it (gate_admit.lua's reply): what every instance
 * publishes as its snapshot for the place polls. */
struct gate_state {
    int code;           /* STORE_GATE_OK: stepped; STORE_GATE_NO_ROOM or STORE_GATE_NO_SKU:
                         * nothing written, the fields below are 0 */
    long long served;   /* places admitted (every rank < served), cumulative */
    long long length;   /* places in the line (joins), cumulative: waiting = length - served */
    long long fin;      /* tickets ended (used or expired), cumulative: pass it as the next
                         * step's fin_seen */
    long long issued;   /* tickets issued, cumulative (= served) */
    long long live;     /* tickets neither used nor expired now (= issued - fin) */
    long long admitted; /* places admitted by this step */
    int sold_out;       /* remaining + reserved of this step's status read were 0 */
    int paused;         /* the SKU's queue_paused: nothing admitted */
    int shuffled;       /* 1 once the start has passed (admissions may happen) */
    char seed[GATE_SEED_MAX]; /* the start's seed ("" before it, or in FIFO mode): public */
    int64_t now_ms;           /* Redis's clock at the step */
};

/* A place read (gate_place.lua's reply). */
struct gate_place {
    int placed;             /* 0: the user has no place (the rest is empty) */
    long long rank;         /* as gate_join's rank: -1 while waiting for the start's shuffle */
    char adm[GATE_ADM_MAX]; /* "" not admitted yet; "<n>:<exp_ms>" admitted with ticket number
                             * n (= the rank) valid until exp_ms (Redis ms); "used:<order id>" */
};

/* gate_used.lua's outcome: STORE_GATE_USED_DONE (marked now), STORE_GATE_USED_ALREADY (marked
 * before: nothing written; order: the order it was marked with) or STORE_GATE_USED_NONE (the
 * user was never admitted: nothing written). */
struct gate_used {
    int code;
    char order[GATE_ADM_MAX]; /* STORE_GATE_USED_ALREADY: the order id it holds */
};

/* The callbacks: st LC_OK with the parsed reply (borrowed for the call), else the failure (as
 * store_script_async's: LC_EREDIS a Redis error, e.g. a damaged number, which wrote nothing;
 * LC_EIO the step may have run; or a reply of the wrong shape, reported as LC_EREDIS) with why
 * its message and the reply NULL. Every call is safe to repeat after a failure: a join returns
 * the same place, an admission step admits by the clock and the budget, gate_used is
 * idempotent. */
typedef void (*gate_join_fn)(void *arg, lc_status st, const char *why, const struct gate_join *j);
typedef void (*gate_state_fn)(void *arg, lc_status st, const char *why, const struct gate_state *g);
typedef void (*gate_place_fn)(void *arg, lc_status st, const char *why, const struct gate_place *p);
typedef void (*gate_used_fn)(void *arg, lc_status st, const char *why, const struct gate_used *u);

/* Joins user (non-empty: the caller's verified user id) to sku's line: runs the start step when
 * due (lua/include/gate_start.lua), then gives the user's place, a new one (seq + 1, at the end
 * of the line; before the start in shuffled mode, among the pre-start joins the start shuffles)
 * or the one it had. With --redis-replica-acks > 0 the answer waits for the WAIT that puts the
 * join on that many replicas (store_replicated_async): a place answered is one a failover keeps;
 * a WAIT that fell short answers LC_EIO ("not on the replicas"): the place may be lost, a repeat
 * of the join gives it (or a new one) back. ar may be NULL (no request context). */
void gate_store_join(struct store *store, lc_async_client *lc, const struct areq *ar,
                     const char *sku, const char *user, gate_join_fn cb, void *arg);

/* One admission step of sku's gate on Redis's clock (docs/design.md "The admission rule"):
 * the start step when due (one bounded step of the shuffle, STORE_GATE_SHUFFLE_STEP places at
 * most: admissions begin, and the seed is answered, once the shuffle is done: the admitter's
 * ticks finish it), expired live tickets dropped (fin counts them), then the places the
 * rate allows since the last step (at most one second's worth banked; none while paused or
 * before the start), within the budget floor(k * remaining / 100) - (live + fin - fin_seen), the
 * queue_max_active limit and the places waiting, admitted in rank order. remaining and reserved:
 * the SKU's units for sale and in holds from an exact status read the caller SENT after it
 * received the fin it passes as fin_seen (0 for the first step: conservative). */
void gate_store_admit(struct store *store, lc_async_client *lc, const struct areq *ar,
                      const char *sku, long long remaining, long long reserved, long long fin_seen,
                      gate_state_fn cb, void *arg);

/* The user's place in sku's line: its rank and admission entry (read only; the start step is
 * not run here: a place waiting for the start reads rank -1 until an admission step or a join
 * ran it). A rank >= 0 never changes: callers may cache it. */
void gate_store_place(struct store *store, lc_async_client *lc, const struct areq *ar,
                      const char *sku, const char *user, gate_place_fn cb, void *arg);

/* Marks user's ticket used by order (non-empty) in sku's gate: its admission entry becomes
 * "used:<order>", it leaves the live tickets, fin + 1 (once: a ticket expired first was counted
 * then). Idempotent: a second call changes nothing and answers STORE_GATE_USED_ALREADY. Its loss
 * only keeps the ticket counted live until its expiry (the budget is then conservative). */
void gate_store_used(struct store *store, lc_async_client *lc, const struct areq *ar,
                     const char *sku, const char *user, const char *order, gate_used_fn cb,
                     void *arg);

/* The gate's four keys of sku, each STORE_KEY_MAX. */
struct gate_keys {
    char q[STORE_KEY_MAX], line[STORE_KEY_MAX], adm[STORE_KEY_MAX], live[STORE_KEY_MAX];
};
void gate_store_keys(const char *sku, struct gate_keys *out);

#endif
