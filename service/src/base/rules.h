/*
 * rules — a SKU's sale rules (SPEC §11): the per-user limit, the sale window and the hold TTL,
 * one row each in rules_table.h, from which struct sku_rules, the PATCH field bits and the
 * descriptors rules_rows[] below are made (parsing, rendering and the scripts' arguments walk
 * those rows).
 *
 * They live in the SKU's meta hash (the SKU's slot) beside its layout, as canonical integers
 * under each row's meta field (limit units, sale_start / sale_end milliseconds since the epoch
 * on Redis's clock (TIME), ttl seconds; missing or "0": none), with their version RULES_F_VERSION.
 * A PUT writes them with the layout; a PATCH changes them alone, with a new version it pushes to
 * every segment before it answers. Every layout read returns them (struct layout), and each
 * instance caches them with the layout (skucache), re-reading them at least every
 * sold_out_recheck_ms, and at once when a commit refuses its copy as older than its segment's
 * version (docs/design.md "The sale rules' version"): no sale is judged by stale rules.
 */
#ifndef INVENTORY_RULES_H
#define INVENTORY_RULES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The meta field of the rules' version (docs/design.md "The sale rules' version"). */
#define RULES_F_VERSION "rver"

/* Largest limit_per_user (SPEC §11: above 10^6 is refused). */
#define RULES_LIMIT_MAX 1000000LL

/* Longest hold TTL, seconds (30 days): a hold is a payment window, not a warehouse. */
#define RULES_TTL_MAX 2592000LL

/* The waiting room's rules (SPEC §16; docs/design.md "The waiting room"): most admissions per
 * second, longest ticket lifetime (seconds), largest admission factor (percent of the units
 * left and held) and hardest proof of work (leading zero bits). */
#define RULES_QUEUE_RATE_MAX 100000LL
#define RULES_QUEUE_TTL_MAX 3600LL
#define RULES_QUEUE_PCT_MAX 1000LL
#define RULES_QUEUE_POW_MAX 28LL

/* Most extensions of one hold (hold_extend_max; docs/design.md "Holds and their expiry"): a
 * hold is a payment window, not a reservation that lives on by renewal. 0 in the rule is 3
 * (store_scripts.h STORE_EXTEND_DEFAULT_MAX) when hold_extend_s is set. */
#define RULES_EXTEND_MAX 100LL

/* The instants a sale_start or sale_end may name, ms since the epoch:
 * 1970-01-01T00:00:00.001Z .. 9999-12-31T23:59:59.999Z (0 means "none"). */
#define RULES_TIME_MIN 1LL
#define RULES_TIME_MAX 253402300799999LL

/* Longest STR rule value, bytes (a group name: the SKU name rules, VALIDATE_SKU_MAX). */
#define RULES_STR_MAX 64

#include "rules_table.h"

/* The rules' values, one member per row of rules_table.h in its order (INT rows long long, TIME
 * rows int64_t ms; 0: none), and their version. */
#define RULES_MEMBER_INT_(id, ...) long long id;
#define RULES_MEMBER_TIME_(id, ...) int64_t id;
#define RULES_MEMBER_STR_(id, ...) char id[RULES_STR_MAX + 1];
struct sku_rules {
    RULES_TABLE(RULES_MEMBER_INT_, RULES_MEMBER_TIME_, RULES_MEMBER_STR_)
    int64_t version; /* the rules' version (meta's rver): 0 none written yet */
};
#undef RULES_MEMBER_INT_
#undef RULES_MEMBER_TIME_
#undef RULES_MEMBER_STR_

/* The rows' indexes (RULES_I_<id>) and their number, RULES_N. */
#define RULES_INDEX_(id, ...) RULES_I_##id,
enum rules_index { RULES_TABLE(RULES_INDEX_, RULES_INDEX_, RULES_INDEX_) RULES_N };
#undef RULES_INDEX_

/* A rule's bit in a set of rules (a PATCH's fields). */
#define RULES_BIT(id) (1u << RULES_I_##id)

enum rules_kind { RULES_KIND_INT, RULES_KIND_TIME, RULES_KIND_STR };

/* One row of rules_table.h as data (rules_rows[RULES_I_<id>]). */
struct rules_row {
    enum rules_kind kind;
    const char *json;    /* the JSON member */
    long long lo, hi;    /* its range (TIME: RULES_TIME_MIN..RULES_TIME_MAX; 0 is none; STR: its
                            length, 0..RULES_STR_MAX) */
    const char *jtext;   /* docs/api.md's "JSON" cell */
    const char *deftext; /* docs/api.md's "default" cell */
    const char *meta;    /* the meta hash field */
    const char *judged;  /* where an order is judged by it */
    int error;           /* enum error_code of an order it refuses (ERROR_NONE: none) */
    const char *schema;  /* the OpenAPI schema of its value in a request */
};
extern const struct rules_row rules_rows[RULES_N];

/* The value of row i of r (0 <= i < RULES_N); 0 for a STR row (rules_get_str). */
int64_t rules_get(const struct sku_rules *r, int i);

/* Sets row i of r to v (a STR row: nothing). */
void rules_set(struct sku_rules *r, int i, int64_t v);

/* The value of STR row i of r ("" none); NULL when row i is no STR row. */
const char *rules_get_str(const struct sku_rules *r, int i);

/* Sets STR row i of r to s[0..len) (cut to RULES_STR_MAX bytes); nothing for another row. */
void rules_set_str(struct sku_rules *r, int i, const char *s, size_t len);

/* Whether s[0..len) is a STR rule's value: "" (none), or a name by the SKU name rules of
 * SPEC §5 (validate_sku). */
int rules_str_ok(const char *s, size_t len);

/* The name row i's meta field is handed to the scripts under: the field itself, "$<field>" for
 * a STR row (layout_fields.lua, put_meta.lua and patch_rules.lua take that one as a string). */
const char *rules_script_field(int i);

/* Row i's value as the meta holds it, into out: a canonical integer, or a STR row's string. */
void rules_meta_text(const struct sku_rules *r, int i, char *out, size_t n);

/* Sets row i of r from its meta text t[0..len) (integer rows: a canonical integer, else 0). */
void rules_set_meta_text(struct sku_rules *r, int i, const char *t, size_t len);

/* Parses an RFC 3339 date-time, s[0..len) (need not be NUL-terminated):
 * "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" ('T' and 'Z' in either case; the fraction
 * 1..9 digits, cut to milliseconds; seconds 00..59: no leap second), year 1970..9999, a real
 * calendar day. 0 with *ms the instant in ms since the epoch, within [RULES_TIME_MIN,
 * RULES_TIME_MAX]; -1 for anything else (*ms untouched). No time zone database, no TZ. */
int rules_parse_time(const char *s, size_t len, int64_t *ms);

/* Writes ms (ms since the epoch, 0..RULES_TIME_MAX) as "YYYY-MM-DDTHH:MM:SS.mmmZ" into out;
 * a value outside that range is clamped to it. */
void rules_format_time(int64_t ms, char out[32]);

/* Sets obj's member of every rule (rules_rows' json): an INT row as an integer, a TIME row as a
 * rules_format_time string, or null when 0, a STR row as its string ("" none). 0, or -1 out of
 * memory. */
int rules_to_json(const struct sku_rules *r, json_t *obj);

#endif
