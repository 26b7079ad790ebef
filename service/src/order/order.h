/*
 * Orders: POST /api/v1/orders (the order path of SPEC §6 for the three strategies),
 * GET /api/v1/orders/{id} and DELETE /api/v1/orders/{id} (cancel).
 *
 * Order ids read "<32 hex digits>-<segment>-<sku>", so the segment holding an order's record
 * is known from its id alone; the hex part is 128 bits from getrandom (ids.h), so ids cannot be
 * guessed from other ids.
 */
#ifndef INVENTORY_ORDER_H
#define INVENTORY_ORDER_H

#include <stddef.h>

#include "order_id.h" /* the id's format: the store's, which the sweeper reads too */

/* The order as the API answers it (SPEC §13): a one-segment order's record has no "parts"
 * (docs/design.md "Orders larger than one segment"), its answer does: "parts":[{"segment":k,
 * "quantity":Q}] from the record's segment and quantity. A multi-segment order's primary has
 * its parts already. order_answer_parts adds them to order (a record parsed; nothing when it
 * has parts or lacks the numbers); order_answer_text returns a new string (malloc; NULL when
 * out of memory): the record text with them added before its closing brace, for an answer sent
 * as text (the 201 of a one-segment order, whose segment and quantity the caller knows). */
struct json_t;
void order_answer_parts(struct json_t *order);
char *order_answer_text(const char *record, int segment, long long quantity);

/* The record of a one-segment order (docs/design.md), as json_dumps(JSON_COMPACT) of
 *   {"order_id":id,"sku":sku,"quantity":quantity,"segment":segment,"user_id":user (null when
 *    NULL),"created_at":created,"status":status}
 * would write it, rendered from that template (jsontext.h). A new string (malloc), or NULL when
 * a string is not valid UTF-8 (jansson refuses those too) or out of memory. */
char *order_record_text(const char *id, const char *sku, long long quantity, int segment,
                        const char *user, const char *created, const char *status);

#endif
