/*
 * rules_table — the one table of a SKU's sale rules (SPEC §11), an X-macro list as
 * config_options.h is for settings (and Redis's createIntConfig rows). Each row says once what a
 * rule is called in JSON and in the SKU's meta hash, its type and range, its default, where it
 * is judged and the error an order it refuses gets. From these rows rules.h declares the
 * members of struct sku_rules and the PATCH field bits; validate.c parses and checks a PUT's or
 * PATCH's rule fields; rules.c renders them (GET, PUT, PATCH); layout.c and layout_read.lua read
 * them from the meta, stock.c and put_meta.lua / patch_rules.lua write them (the scripts get the
 * meta fields from the table, as (field, value) pairs or a field list); store.c puts a rule
 * judged by the commit at its ARGV position (commit_body.lua names the same STORE_COMMIT_ARG_*
 * numbers of store_scripts.h); and test_rules checks that docs/api.md's rule table and
 * docs/openapi.yaml's schemas say what the rows say.
 *
 * Three kinds of row; a user of RULES_TABLE passes one macro for each:
 *
 *   INT(id, json, lo, hi, jtext, deftext, meta, arg, judged, error, schema)
 *       member `long long id`: a JSON integer lo..hi (absent: 0, none).
 *   TIME(id, json, jtext, deftext, meta, arg, judged, error, schema)
 *       member `int64_t id`: ms since the epoch, a JSON RFC 3339 string (rules_parse_time) or
 *       null (absent or null: 0, none); rendered as rules_format_time's UTC text.
 *
 * The columns: json the member's JSON name; jtext and deftext the "JSON" and "default" cells of
 * docs/api.md's table; meta the field in inv:2:{S}:meta (a canonical integer, "0" or missing:
 * none); arg the commit's ARGV position (store_scripts.h STORE_COMMIT_ARG_*; 0 when the commit is
 * not given it); judged where an order is judged by it (docs); error the code of an order it
 * refuses (errors.h; ERROR_NONE: it refuses none); schema the OpenAPI schema of its value in
 * requests (components/schemas).
 *
 * Adding a rule: its row here, its check (where it is judged: the commit's code, the answer's
 * error), the docs/api.md row and OpenAPI schema test_rules asks for, and its test. Rules that
 * depend on each other (sale_end after sale_start) are checked in validate.c and patch_rules.lua.
 */
#ifndef INVENTORY_RULES_TABLE_H
#define INVENTORY_RULES_TABLE_H

/* clang-format off */
#define RULES_TABLE(INT, TIME, STR)                                                                \
    INT(limit_per_user, "limit_per_user", 0, RULES_LIMIT_MAX, "integer 0..10^6", "0 (none)",      \
        "limit", 0, "the commit (one Redis) or user_reserve.lua (the two-step path)",             \
        ERROR_LIMIT_EXCEEDED, "LimitPerUser")                                                      \
    TIME(sale_start_ms, "sale_start", "RFC 3339 string, or `null`", "`null` (none)",              \
         "sale_start", STORE_COMMIT_ARG_SALE_START, "the commit, on Redis's clock",               \
         ERROR_SALE_NOT_STARTED, "RuleTimeIn")                                                     \
    TIME(sale_end_ms, "sale_end", "RFC 3339 string, or `null`", "`null` (none)", "sale_end",      \
         STORE_COMMIT_ARG_SALE_END, "the commit, on Redis's clock", ERROR_SALE_ENDED,             \
         "RuleTimeIn")                                                                             \
    INT(ttl_s, "reservation_ttl_s", 0, RULES_TTL_MAX, "integer 0..2592000 (30 days)", "0",       \
        "ttl", STORE_COMMIT_ARG_TTL, "the commit (the order is a hold)", ERROR_NONE,              \
        "ReservationTtl")                                                                         \
    INT(queue_rate, "queue_rate", 0, RULES_QUEUE_RATE_MAX, "integer 0..100000",                   \
        "0 (no waiting room)", "q_rate", 0,                                                        \
        "the order's claim: a SKU with a waiting room sells only to a queue ticket",              \
        ERROR_TICKET_REQUIRED, "QueueRate")                                                        \
    INT(queue_max_active, "queue_max_active", 0, RULES_LIMIT_MAX, "integer 0..10^6", "0 (none)",  \
        "q_active", 0, "the waiting room's admission", ERROR_NONE, "QueueMaxActive")              \
    INT(queue_ticket_ttl_s, "queue_ticket_ttl_s", 0, RULES_QUEUE_TTL_MAX, "integer 0..3600",      \
        "0 (120 s)", "q_ttl", 0, "the waiting room's admission and the order's claim",            \
        ERROR_NONE, "QueueTicketTtl")                                                              \
    INT(queue_admit_pct, "queue_admit_pct", 0, RULES_QUEUE_PCT_MAX, "0, or 100..1000 (percent)",     \
        "0 (150 %)", "q_pct", 0, "the waiting room's admission", ERROR_NONE, "QueueAdmitPct")     \
    INT(queue_fifo, "queue_fifo", 0, 1, "integer 0..1", "0 (joins before the start shuffled)",    \
        "q_fifo", 0, "the waiting room's order of places", ERROR_NONE, "QueueFifo")               \
    INT(queue_paused, "queue_paused", 0, 1, "integer 0..1", "0", "q_paused", 0,                   \
        "the waiting room's admission", ERROR_NONE, "QueuePaused")                                 \
    INT(queue_pow_bits, "queue_pow_bits", 0, RULES_QUEUE_POW_MAX, "integer 0..28", "0 (none)",    \
        "q_pow", 0, "the waiting room's join", ERROR_NONE, "QueuePowBits")                      \
    INT(hold_extend_s, "hold_extend_s", 0, RULES_TTL_MAX, "integer 0..2592000 (30 days)",         \
        "0 (no extension)", "ext_s", 0, "an extension of a hold (extend.lua, from the meta)",      \
        ERROR_NONE, "HoldExtendS")                                                                 \
    INT(hold_extend_max, "hold_extend_max", 0, RULES_EXTEND_MAX, "integer 0..100",                \
        "0 (3 when `hold_extend_s` > 0)", "ext_max", 0,                                            \
        "an extension of a hold (extend.lua, from the meta)", ERROR_NONE, "HoldExtendMax")       \
    STR(limit_group, "limit_group", "a group's name (the SKU name rules, at most 64 bytes) or \"\"", \
        "\"\" (none)", "grp", 0,                                                                    \
        "group_reserve.lua (the two-step path, before the walk)", ERROR_LIMIT_EXCEEDED,           \
        "LimitGroup")
/* clang-format on */

#endif
