/*
 * validate — strict parsing of client input (SPEC §5): SKU names, user ids and idempotency
 * keys, the Content-Type of a body, and the JSON bodies of the order, PUT-SKU and restock
 * requests.
 *
 * The body parsers take the raw bytes as received, so every malformed body fails here with one
 * message that names the field at fault ("quantity: must be an integer between 1 and 100, got
 * 1.5"); a handler answers it with error_json(err.code, err.message). Rules: the body is one
 * JSON object (UTF-8, no trailing data, no duplicate keys, no \u0000 in strings); known fields
 * must have exactly the documented JSON type (1.0, "1", true and null are not integers);
 * integers are range-checked (also the ones beyond int64, which jansson itself refuses); unknown
 * fields are ignored. Nothing is kept from the parsed JSON: strings are copied into the
 * fixed-size buffers of the result structs, which need no freeing.
 *
 * Pure functions, no allocation that outlives a call: safe from any thread.
 */
#ifndef INVENTORY_VALIDATE_H
#define INVENTORY_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"
#include "rules.h"
#include "ticket.h"

#define VALIDATE_MAX_BODY 16384            /* largest accepted body, bytes (SPEC §5: 16 KiB) */
#define VALIDATE_SKU_MAX 64                /* longest SKU name */
#define VALIDATE_PRINTABLE_MAX 128         /* longest user_id / Idempotency-Key */
#define VALIDATE_STOCK_MAX 1000000000000LL /* 10^12: largest stock of a PUT, largest restock */
#define VALIDATE_SEGMENTS_MAX 1024         /* most segments of one SKU */

/* Why a body was refused. code is ERROR_INVALID_REQUEST, or ERROR_BODY_TOO_LARGE when the body
 * exceeds VALIDATE_MAX_BODY. message is "<field>: <problem>" (field "body" when the body as a
 * whole is at fault), printable ASCII, NUL-terminated, at most 255 characters. */
struct validate_error {
    enum error_code code;
    char message[256];
};

/* POST /api/v1/orders body: {"sku": str, "quantity": int (default 1), "user_id": str (opt.)}. */
struct validate_order {
    char sku[VALIDATE_SKU_MAX + 1];
    int64_t quantity;                         /* 1..max_quantity; 1 when absent */
    char user_id[VALIDATE_PRINTABLE_MAX + 1]; /* "" when absent */
    bool has_user_id;
    /* a waiting room's ticket (SPEC §16, ticket.h): printable ASCII, shorter than
     * TICKET_TEXT_MAX; checked by the order path only when the SKU has a waiting room */
    char ticket[TICKET_TEXT_MAX];
    bool has_ticket;
    /* the body has "items" (and no "sku"): a cart (SPEC §17), parsed by validate_cart_body;
     * nothing else above is set */
    bool is_cart;
};

/* The most items of a cart (SPEC §17; docs/api.md). */
#define VALIDATE_CART_MAX 10

/* One item of a cart: as the fields of a one-SKU order. */
struct validate_cart_item {
    char sku[VALIDATE_SKU_MAX + 1];
    int64_t quantity; /* 1..max_quantity; 1 when absent */
    char ticket[TICKET_TEXT_MAX];
    bool has_ticket;
};

/* POST /api/v1/orders body of a cart: {"items": [{"sku", "quantity", "ticket"}, ...] (1..
 * VALIDATE_CART_MAX, distinct SKUs), "user_id": str (opt.)}; no "sku". */
struct validate_cart {
    int n;
    struct validate_cart_item items[VALIDATE_CART_MAX];
    char user_id[VALIDATE_PRINTABLE_MAX + 1];
    bool has_user_id;
};

/* Parses a cart's body (validate_order_body set is_cart). 0, or -1 with *err filled: 400
 * invalid_request for a malformed item (the message names "items[i].<field>"), 422
 * ERROR_DUPLICATE_SKU for a SKU named twice, ERROR_ITEMS_AND_SKU when "sku" is there too. */
int validate_cart_body(const char *body, size_t len, int64_t max_quantity,
                       struct validate_cart *out, struct validate_error *err);

/* PUT /api/v1/skus/{sku} body: {"stock": int 0..10^12, "segments": int 1..1024}, both required,
 * and the sale rules (SPEC §11) of rules_table.h, each optional (absent or null: none, 0): an
 * INT row an integer in its range, a TIME row an RFC 3339 string (rules_parse_time) or null;
 * sale_end after sale_start when both are set. */
struct validate_put_sku {
    int64_t stock;
    int64_t segments;
    struct sku_rules rules;
};

/* Which rule fields a PATCH body names (struct validate_patch_rules' fields): RULES_BIT of each
 * row of rules_table.h given. */
#define VALIDATE_RULE_LIMIT RULES_BIT(limit_per_user)
#define VALIDATE_RULE_START RULES_BIT(sale_start_ms)
#define VALIDATE_RULE_END RULES_BIT(sale_end_ms)
#define VALIDATE_RULE_TTL RULES_BIT(ttl_s)

/* PATCH /api/v1/skus/{sku} body: any non-empty subset of the rule fields of a PUT (same types;
 * null clears a time). fields says which were given; rules holds their values (0: none / clear)
 * and 0 for the others. sale_end after sale_start is checked here when the body sets both; the
 * merge with the SKU's current rules is checked again where it happens (patch_rules.lua). */
struct validate_patch_rules {
    unsigned fields;
    struct sku_rules rules;
};

/* POST /api/v1/skus/{sku}/restock body: {"quantity": int 1..10^12}. */
struct validate_restock {
    int64_t quantity;
};

/* True when s[0..len) is a valid SKU name: [A-Za-z0-9_.:-]{1,64}. s need not be NUL-terminated
 * (a path segment, say); a NUL byte inside the range makes it invalid. */
bool validate_sku(const char *s, size_t len);

/* True when s[0..len) is 1..128 printable ASCII characters (0x20..0x7e): the rule for user_id
 * and the Idempotency-Key header. */
bool validate_printable(const char *s, size_t len);

/* True when a Content-Type header value names JSON: "application/json" (case-insensitive),
 * optionally followed by parameters, of which a charset must be utf-8
 * ("application/json; charset=UTF-8" is accepted, "text/plain" and
 * "application/json; charset=latin1" are not). NULL (header absent) gives false. */
bool validate_content_type(const char *value);

/* Parses an order body. max_quantity (>= 1) is the configured --max-quantity.
 * Returns 0 and fills *out, or -1 and fills *err (out is then unspecified). */
int validate_order_body(const char *body, size_t len, int64_t max_quantity,
                        struct validate_order *out, struct validate_error *err);

/* Parses a PUT-SKU body. Returns 0 and fills *out, or -1 and fills *err. */
int validate_put_sku_body(const char *body, size_t len, struct validate_put_sku *out,
                          struct validate_error *err);

/* Parses a PATCH-rules body. Returns 0 and fills *out, or -1 and fills *err. */
int validate_patch_rules_body(const char *body, size_t len, struct validate_patch_rules *out,
                              struct validate_error *err);

/* Parses a restock body. Returns 0 and fills *out, or -1 and fills *err. */
int validate_restock_body(const char *body, size_t len, struct validate_restock *out,
                          struct validate_error *err);

/* Parses the optional body of POST /api/v1/orders/{id}/extend, {"seconds": int 1..2592000}:
 * returns 0 with *seconds the seconds asked (0 when there is no body, or no "seconds": the
 * SKU's hold_extend_s), or -1 with *err filled (400 invalid_request: 0, negative, not an
 * integer, above the longest hold; the SKU's own bound is extend.lua's). */
int validate_extend_body(const char *body, size_t len, int64_t *seconds,
                         struct validate_error *err);
/* PUT /api/v1/groups/{group}'s body: {"limit_per_user": 1..RULES_LIMIT_MAX} (required; no other
 * member is read). 0 with *limit, or -1 with *err filled. */
int validate_group_body(const char *body, size_t len, int64_t *limit, struct validate_error *err);

#endif
