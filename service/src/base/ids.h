/*
 * ids — unguessable identifiers. Order ids must not be predictable from one another (GET
 * /api/v1/orders/{id} needs no token, so a guessable id would let a client read other
 * customers' orders): their random part is IDS_ORDER_BITS bits straight from the kernel's CSPRNG
 * (getrandom), not from a seeded PRNG whose output reveals its state.
 */
#ifndef INVENTORY_IDS_H
#define INVENTORY_IDS_H

#include <stddef.h>

#define IDS_ORDER_BITS 128
#define IDS_ORDER_HEX (IDS_ORDER_BITS / 4) /* 32 lower-case hex digits */

/* Writes IDS_ORDER_HEX random lower-case hex digits and a NUL into hex (n >= IDS_ORDER_HEX + 1).
 * The bytes come from getrandom, drawn in blocks into a per-thread buffer (each byte used once).
 * Returns 0, or -1 when n is too small or the kernel gives no randomness (hex is then "";
 * getrandom blocks only before the kernel's pool is first initialised, at early boot). */
int ids_order_token(char *hex, size_t n);

#endif
