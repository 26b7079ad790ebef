/*
 * The Idempotency-Key claim's decisions (order_claim.c sends the scripts and acts): what a
 * claim or takeover reply (store_scripts.h, STORE_CLAIM_* and STORE_TAKEOVER_*) tells the
 * order to do next, and what the claim becomes once the order is decided. Pure: no I/O, so
 * tests/test_order_idem.c drives every reply without Redis.
 */
#ifndef INVENTORY_ORDER_IDEM_H
#define INVENTORY_ORDER_IDEM_H

#include <hiredis/hiredis.h>
#include <lockcore/lockcore.h>

#include "order_walk.h"
#include "validate.h"

/* The next step after a claim or takeover reply. */
enum idem_step {
    IDEM_UNAVAILABLE,   /* failed or malformed: 503, nothing placed */
    IDEM_OWNED,         /* the key is this request's: element[1] the claim, element[2] its expiry */
    IDEM_REPLAY,        /* a finished order: fetch it from segment k of sku (replay) */
    IDEM_TAKEOVER,      /* the key names nothing that can still be placed: take it over */
    IDEM_FIND,          /* expired while pending: look for its order in segments [0, nseg) */
    IDEM_PENDING,       /* pending elsewhere and alive: look again shortly */
    IDEM_CLAIM,         /* the claim changed meanwhile (takeover): claim again */
    IDEM_TICKET_USED,   /* a ticket's claim holds (or is making) another request's order: 409 */
    IDEM_TICKET_EXPIRED /* a ticket's claim not made: past the ticket's expiry (Redis's clock) */
};

struct idem_verdict {
    enum idem_step step;
    int nseg;                       /* IDEM_FIND */
    int k;                          /* IDEM_REPLAY */
    char sku[VALIDATE_SKU_MAX + 1]; /* IDEM_REPLAY */
};

/* What the claim script's reply (st, r) says; nseg_max bounds the segments looked in. */
void order_idem_claim_verdict(lc_status st, const redisReply *r, int nseg_max,
                              struct idem_verdict *v);

/* What the takeover script's reply says: IDEM_OWNED, IDEM_CLAIM, IDEM_TICKET_EXPIRED or
 * IDEM_UNAVAILABLE. */
enum idem_step order_idem_takeover_verdict(lc_status st, const redisReply *r);

/* What the claim becomes after the order's outcome. */
enum idem_final {
    IDEM_FINAL_ORDER,  /* the order's id: replays answer with it */
    IDEM_FINAL_DELETE, /* deleted: a definite failure, the key is free again */
    IDEM_FINAL_LEAVE   /* left pending: the outcome is unknown (a replay recovers it) */
};
enum idem_final order_idem_final(enum order_outcome out);

#endif
