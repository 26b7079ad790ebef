/*
 * order_id — the format of an order id, "<32 hex digits>-<segment>-<sku>": the segment holding
 * the order's record is known from its id alone (the order's keys: store.h), and the hex part is
 * 128 bits from getrandom (ids.h), so ids cannot be guessed from other ids. The order path makes
 * them; the order path and the sweeper read them.
 */
#ifndef INVENTORY_ORDER_ID_H
#define INVENTORY_ORDER_ID_H

#include <stddef.h>

/* Longest order id: 32 (IDS_ORDER_HEX) + 1 + 4 + 1 + 64. */
#define ORDER_ID_MAX 102

/* Splits an order id into its segment and SKU (sku: 65 bytes). 0, or -1 when id is not one. */
int order_id_parse(const char *id, size_t len, int *segment, char *sku);

#endif
