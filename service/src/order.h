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

/* Longest order id: 32 (IDS_ORDER_HEX) + 1 + 4 + 1 + 64. */
#define ORDER_ID_MAX 102

/* Splits an order id into its segment and SKU (sku: 65 bytes). 0, or -1 when id is not one. */
int order_id_parse(const char *id, size_t len, int *segment, char *sku);

#endif
