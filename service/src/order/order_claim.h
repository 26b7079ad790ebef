/*
 * The Idempotency-Key claim as its own state machine (order_claim.c; docs/design.md "The order
 * path as a state machine"): the order machine (order_fsm.c) hands a request with a key over to
 * it before the order (claim_begin: claim the key, or replay the order it names) and after it
 * (claim_settle: the claim made final, deleted or left pending), and gets the result back
 * (order_claimed, order_claim_settled). Its decisions on a reply are order_idem.c's (pure).
 */
#ifndef INVENTORY_ORDER_CLAIM_H
#define INVENTORY_ORDER_CLAIM_H

#include <hiredis/hiredis.h>

#include "order_fsm.h"

/* How far past a claim's expiry (Redis ms) another request may take the key over: room for
 * the clocks of two Redis nodes (the claim's and the commit's, on a cluster) to differ. A
 * per-user reservation's deadline has the same margin. */
#define IDEM_TAKEOVER_MARGIN_MS 1000

/* Takes the order (state OS_CLAIM, layout known): claims its key (o->idem) or replays the order
 * the key names; order_claimed when decided. */
void claim_begin(struct order *o);

/* The order's event while the claim holds it (OS_CLAIM, OS_CLAIM_SETTLE). */
void claim_step(struct order *o, const struct oev *e);

/* 1 when the claim must be settled after the order's outcome o->out (this request claimed the
 * key, the outcome is definite or the order's id, the loop is not ending); 0: answer at once. */
int claim_to_settle(const struct order *o);

/* Takes the order (state OS_CLAIM_SETTLE): settles the claim; order_claim_settled when done. */
void claim_settle(struct order *o);

/* 1 when the claim's state is waiting on a write whose connection a WAIT must then use. */
int claim_carries_write(const struct idem_claim *ic);

/* Keeps id as the order an idem find batch found (the batch's first string reply). */
void claim_note_found(struct idem_claim *ic, const char *id);

#endif
