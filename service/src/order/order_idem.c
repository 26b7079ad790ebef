/*
 * The Idempotency-Key claim's decisions (order_idem.h).
 */
#include "order_idem.h"

#include <string.h>

#include "order.h"
#include "order_outcome.h"
#include "store.h"
#include "store_scripts.h"

/* A reply that made this request the owner: {code, value, expiry}. */
static int owned_ok(const redisReply *r)
{
    return r->elements >= 3 && r->element[1]->type == REDIS_REPLY_STRING;
}

void order_idem_claim_verdict(lc_status st, const redisReply *r, int nseg_max,
                              struct idem_verdict *v)
{
    memset(v, 0, sizeof(*v));
    v->step = IDEM_UNAVAILABLE;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return;
    long long code = r->element[0]->integer;
    if (code == STORE_CLAIM_OWNED) {
        if (owned_ok(r))
            v->step = IDEM_OWNED;
        return;
    }
    if (code == STORE_CLAIM_TICKET_USED) {
        v->step = IDEM_TICKET_USED;
        return;
    }
    if (code == STORE_CLAIM_TICKET_EXPIRED) {
        v->step = IDEM_TICKET_EXPIRED;
        return;
    }
    const char *seen = r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "";
    if (code == STORE_CLAIM_TAKEN && strncmp(seen, "pending:", 8) != 0) {
        /* A finished order: replay it (if it still exists). */
        v->step =
            order_id_parse(seen, strlen(seen), &v->k, v->sku) == 0 ? IDEM_REPLAY : IDEM_TAKEOVER;
        return;
    }
    if (code == STORE_CLAIM_EXPIRED) {
        /* The claimer can no longer commit. Its order, if it got that far, is in the idem hash
         * of one of the segments whose keys may exist as Redis has the layout. */
        long long segs = r->elements >= 4 ? store_reply_int(r->element[2], 0) : 0;
        long long hwm = r->elements >= 4 ? store_reply_int(r->element[3], 0) : 0;
        long long nseg = hwm > segs ? hwm : segs;
        if (r->elements < 4 || nseg < 0 || nseg > nseg_max)
            return;
        v->nseg = (int)nseg;
        v->step = nseg == 0 ? IDEM_TAKEOVER : IDEM_FIND; /* no segment: no order can be there */
        return;
    }
    v->step = IDEM_PENDING;
}

enum idem_step order_idem_takeover_verdict(lc_status st, const redisReply *r)
{
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return IDEM_UNAVAILABLE;
    if (r->element[0]->integer == STORE_TAKEOVER_TICKET_EXPIRED)
        return IDEM_TICKET_EXPIRED;
    if (r->element[0]->integer != STORE_TAKEOVER_OWNED)
        return IDEM_CLAIM; /* someone else changed it meanwhile: look again */
    return owned_ok(r) ? IDEM_OWNED : IDEM_UNAVAILABLE;
}

enum idem_final order_idem_final(enum order_outcome out)
{
    return (enum idem_final)order_outcome_row(out)->idem; /* outcome_table.h's idem column */
}
