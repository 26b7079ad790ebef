/*
 * rules — a SKU's sale rules (SPEC §11): the per-user limit, the sale window and the hold TTL.
 *
 * They live in the SKU's meta hash (the SKU's slot) beside its layout, as canonical integers:
 * RULES_F_LIMIT units, RULES_F_START / RULES_F_END milliseconds since the epoch on Redis's
 * clock (TIME), RULES_F_TTL seconds; a field missing or "0" means "none"; RULES_F_VERSION their
 * version. A PUT writes them with the layout; a PATCH changes them alone, with a new version it
 * pushes to every segment before it answers. Every layout read returns them (struct layout),
 * and each instance caches them with the layout (skucache), re-reading them at least every
 * sold_out_recheck_ms, and at once when a commit refuses its copy as older than its segment's
 * version (docs/design.md "The sale rules' version"): no sale is judged by stale rules.
 */
#ifndef INVENTORY_RULES_H
#define INVENTORY_RULES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define RULES_F_LIMIT "limit"
#define RULES_F_START "sale_start"
#define RULES_F_END "sale_end"
#define RULES_F_TTL "ttl"
#define RULES_F_VERSION "rver"

/* Largest limit_per_user (SPEC §11: above 10^6 is refused). */
#define RULES_LIMIT_MAX 1000000LL

/* Longest hold TTL, seconds (30 days): a hold is a payment window, not a warehouse. */
#define RULES_TTL_MAX 2592000LL

/* The instants a sale_start or sale_end may name, ms since the epoch:
 * 1970-01-01T00:00:00.001Z .. 9999-12-31T23:59:59.999Z (0 means "none"). */
#define RULES_TIME_MIN 1LL
#define RULES_TIME_MAX 253402300799999LL

/* The JSON names of the rules (SPEC §11), in answers and request bodies. */
#define RULES_J_LIMIT "limit_per_user"
#define RULES_J_START "sale_start"
#define RULES_J_END "sale_end"
#define RULES_J_TTL "reservation_ttl_s"

struct sku_rules {
    long long limit_per_user; /* 0: no limit */
    int64_t sale_start_ms;    /* Redis ms since the epoch; 0: no start */
    int64_t sale_end_ms;      /* 0: no end */
    long long ttl_s;          /* 0: orders are final at once; > 0: holds of ttl_s seconds */
    int64_t version;          /* the rules' version (meta's rver): 0 none written yet */
};

/* Parses an RFC 3339 date-time, s[0..len) (need not be NUL-terminated):
 * "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" ('T' and 'Z' in either case; the fraction
 * 1..9 digits, cut to milliseconds; seconds 00..59: no leap second), year 1970..9999, a real
 * calendar day. 0 with *ms the instant in ms since the epoch, within [RULES_TIME_MIN,
 * RULES_TIME_MAX]; -1 for anything else (*ms untouched). No time zone database, no TZ. */
int rules_parse_time(const char *s, size_t len, int64_t *ms);

/* Writes ms (ms since the epoch, 0..RULES_TIME_MAX) as "YYYY-MM-DDTHH:MM:SS.mmmZ" into out;
 * a value outside that range is clamped to it. */
void rules_format_time(int64_t ms, char out[32]);

/* Sets the four rule members of obj (RULES_J_*): the limit and the TTL as integers, the times
 * as rules_format_time strings, or null when 0. 0, or -1 out of memory. */
int rules_to_json(const struct sku_rules *r, json_t *obj);

#endif
