/*
 * The Idempotency-Key claim as its own state machine (order_claim.c; docs/design.md "The order
 * path as a state machine"): the order machine (order_fsm.c) hands a request with a key over to
 * it before the order (claim_begin: claim the key, or replay the order it names) and after it
 * (claim_settle: the claim made final, deleted or left pending), and gets the result back
 * through the table it gives at the hand-over (struct claim_back), never by name: this machine
 * uses only the order's record and I/O (order_io.h). Its decisions on a reply are order_idem.c's
 * (pure).
 */
#ifndef INVENTORY_ORDER_CLAIM_H
#define INVENTORY_ORDER_CLAIM_H

#include <hiredis/hiredis.h>

#include "order_io.h"

/* How far past a claim's expiry (Redis ms) another request may take the key over: room for
 * the clocks of two Redis nodes (the claim's and the commit's, on a cluster) to differ. A
 * per-user reservation's deadline has the same margin. */
#define IDEM_TAKEOVER_MARGIN_MS 1000

/* The name a ticket's order has in its segment's idem hash (the commit writes it, an expired
 * claim's search reads it): this prefix, then "<n>:<exp_ms>". Its first byte is a control
 * character, which no client Idempotency-Key (1..128 printable ASCII characters) can hold, so
 * a ticket's order is never found under a client's key nor one client's order under a ticket. */
#define ORDER_TICKET_FIELD_PREFIX "\x1fticket:"

/* What the claim hands the order back with: the order machine's functions, given at the
 * hand-over (claim_begin, claim_settle) and kept with the claim's state. */
struct claim_back {
    /* The claim is decided: OUT_CREATED the key is this request's (the order goes on), any
     * other outcome is the answer (OUT_REPLAYED, OUT_IDEM_FAILED with the response filled,
     * OUT_OVER_BUDGET). */
    void (*claimed)(struct order *o, enum order_outcome out);
    /* The claim is settled after the order (claim_settle): the answer. */
    void (*settled)(struct order *o);
};

/* Takes the order (state OS_CLAIM, layout known): claims its key (o->idem) or replays the order
 * the key names; back->claimed when decided. With o->tk_mode the claim is the ticket's
 * (docs/design.md "The ticket and the order"): inv:2:{S}:tclaim:<n>:<exp>, made only before the
 * ticket's expiry (OUT_TICKET_EXPIRED), carrying the client's key o->key: a request with the
 * same key waits for it or replays its order, any other is answered OUT_TICKET_USED at once. */
void claim_begin(struct order *o, const struct claim_back *back);

/* The order's event while the claim holds it (OS_CLAIM, OS_CLAIM_SETTLE). */
void claim_step(struct order *o, const struct oev *e);

/* 1 when the claim must be settled after the order's outcome o->out (this request claimed the
 * key, the outcome is definite or the order's id, the loop is not ending); 0: answer at once. */
int claim_to_settle(const struct order *o);

/* Takes the order (state OS_CLAIM_SETTLE, claim_to_settle said 1): settles the claim;
 * back->settled when done. */
void claim_settle(struct order *o, const struct claim_back *back);

/* 1 when the claim's state is waiting on a write whose connection a WAIT must then use. */
int claim_carries_write(const struct idem_claim *ic);

/* Keeps id as the order an idem find batch found (the batch's first string reply). */
void claim_note_found(struct idem_claim *ic, const char *id);

#endif
