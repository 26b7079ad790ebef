/*
 * order_cart — a cart: one order of several SKUs, all or nothing (SPEC §17; the protocol and its
 * failure cases: docs/design.md "Carts (SPEC §17)"). POST /api/v1/orders with "items" comes
 * here from order_create_async; a body with "sku" never does (one-SKU orders are unchanged).
 */
#ifndef INVENTORY_ORDER_CART_H
#define INVENTORY_ORDER_CART_H

struct areq;

/* Runs the cart request ar (its body has "items"): answers it (areq_done) exactly once. */
void order_cart_async(struct areq *ar);

#endif
