/*
 * hash — FNV-1a, the one hash of the service's small in-memory tables (the SKU cache, the
 * segment gates, the per-IP connection counts, the loops' shares of a SKU's segments). Not for
 * anything an attacker must not steer: tables that hash client input bound their chains.
 */
#ifndef INVENTORY_HASH_H
#define INVENTORY_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV_BASIS 2166136261u

/* Folds n bytes of p into h (start with HASH_FNV_BASIS). */
static inline uint32_t hash_bytes(uint32_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Folds the NUL-terminated string s into h. */
static inline uint32_t hash_str(uint32_t h, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

#endif
