/*
 * rules — a SKU's sale rules (SPEC §11): the per-user limit, the sale window and the hold TTL.
 *
 * They live in the SKU's meta hash (the SKU's slot) beside its layout, as canonical integers:
 * RULES_F_LIMIT units, RULES_F_START / RULES_F_END milliseconds since the epoch on Redis's
 * clock (TIME), RULES_F_TTL seconds; a field missing or "0" means "none". A PUT writes them
 * with the layout; a PATCH changes them alone. Every layout read returns them (struct layout),
 * and each instance caches them with the layout (skucache), re-reading them at least every
 * sold_out_recheck_ms: that is how long a PATCH takes to reach every instance's fast path. The
 * per-user reservation reads them from the meta itself, so a limit is never judged stale.
 */
#ifndef INVENTORY_RULES_H
#define INVENTORY_RULES_H

#include <stdint.h>

#define RULES_F_LIMIT "limit"
#define RULES_F_START "sale_start"
#define RULES_F_END "sale_end"
#define RULES_F_TTL "ttl"

/* Largest limit_per_user (SPEC §11: above 10^6 is refused). */
#define RULES_LIMIT_MAX 1000000LL

struct sku_rules {
    long long limit_per_user; /* 0: no limit */
    int64_t sale_start_ms;    /* Redis ms since the epoch; 0: no start */
    int64_t sale_end_ms;      /* 0: no end */
    long long ttl_s;          /* 0: orders are final at once; > 0: holds of ttl_s seconds */
};

/* Writes ms (since the epoch) as RFC 3339 UTC with milliseconds, "2026-11-25T18:00:00.000Z". */
void rules_format_time(int64_t ms, char out[32]);

#endif
