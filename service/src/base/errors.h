/*
 * errors — the one table of API error codes.
 *
 * Every error the HTTP API returns is one of these codes: the table maps it to its HTTP status
 * and to the string sent on the wire, and error_json() builds the body
 * {"error": "<code>", "message": "<human text>"} (SPEC §5). Handlers name a code; they never
 * spell a status number or a wire string themselves.
 */
#ifndef INVENTORY_ERRORS_H
#define INVENTORY_ERRORS_H

#include <stdbool.h>

#include <jansson.h>

/* ERROR_NONE (0) is "no error": a zero-initialised code means success. It is not in the table;
 * the functions below treat it (and any out-of-range value) as ERROR_INTERNAL. */
enum error_code {
    ERROR_NONE = 0,
    ERROR_INVALID_REQUEST,     /* 400 invalid_request */
    ERROR_UNAUTHORIZED,        /* 401 unauthorized (send WWW-Authenticate: Bearer) */
    ERROR_NOT_FOUND,           /* 404 not_found: unknown path */
    ERROR_UNKNOWN_SKU,         /* 404 unknown_sku */
    ERROR_UNKNOWN_ORDER,       /* 404 unknown_order */
    ERROR_METHOD_NOT_ALLOWED,  /* 405 method_not_allowed (send Allow) */
    ERROR_SOLD_OUT,            /* 409 sold_out */
    ERROR_INSUFFICIENT_STOCK,  /* 409 insufficient_stock */
    ERROR_ALREADY_CANCELLED,   /* 409 already_cancelled */
    ERROR_SKU_CHANGED,         /* 409 sku_changed: re-PUT or deleted during a restock */
    ERROR_USER_REQUIRED,       /* 401 user_required: a limit, and no verified user */
    ERROR_LIMIT_EXCEEDED,      /* 409 limit_exceeded: past the user's limit per SKU */
    ERROR_SALE_NOT_STARTED,    /* 409 sale_not_started (+ Retry-After, sale_start) */
    ERROR_SALE_ENDED,          /* 409 sale_ended */
    ERROR_RESERVATION_EXPIRED, /* 409 reservation_expired: a confirm after the expiry */
    ERROR_NOT_RESERVED,        /* 409 not_reserved: a confirm of an order never a hold */
    ERROR_TICKET_REQUIRED,     /* 403 ticket_required: a waiting room, and no ticket */
    ERROR_TICKET_INVALID,      /* 403 ticket_invalid: not a ticket this service signed */
    ERROR_TICKET_EXPIRED,      /* 403 ticket_expired: past its expiry (Redis's clock) */
    ERROR_TICKET_USED,         /* 409 ticket_used: another order used it */
    ERROR_TICKET_WRONG_USER,   /* 403 ticket_wrong_user: signed for another user */
    ERROR_TICKET_WRONG_SKU,    /* 403 ticket_wrong_sku: signed for another SKU */
    ERROR_NO_WAITING_ROOM,     /* 409 no_waiting_room: the SKU's queue_rate is 0 */
    ERROR_DUPLICATE_SKU,       /* 422 duplicate_sku: a cart names a SKU twice (SPEC §17) */
    ERROR_ITEMS_AND_SKU,       /* 422 items_and_sku: an order body with both items and sku */
    ERROR_UNKNOWN_GROUP,       /* 422 unknown_group: a limit_group no PUT of a group made */

    ERROR_POW_REQUIRED,       /* 403 pow_required: the join needs a proof of work */
    ERROR_POW_INVALID,        /* 403 pow_invalid: not a solved challenge for this user/SKU */
    ERROR_POW_EXPIRED,        /* 403 pow_expired: the challenge is older than 120 s */
    ERROR_EXTEND_NOT_ALLOWED, /* 409 extend_not_allowed: the SKU's hold_extend_s is 0 */
    ERROR_EXTEND_LIMIT,       /* 409 extend_limit: the hold was extended hold_extend_max times */
    ERROR_BODY_TOO_LARGE,     /* 413 body_too_large */
    ERROR_HEADERS_TOO_LARGE,  /* 431 headers_too_large: the request head */
    ERROR_UNSUPPORTED_MEDIA_TYPE, /* 415 unsupported_media_type */
    ERROR_RATE_LIMITED,           /* 429 rate_limited (send Retry-After) */
    ERROR_INTERNAL,               /* 500 internal */
    ERROR_UNAVAILABLE,            /* 503 unavailable (send Retry-After) */
    ERROR_LOCK_TIMEOUT,           /* 503 lock_timeout (send Retry-After) */
    ERROR_CODE_COUNT              /* number of values above, ERROR_NONE included; not a code */
};

/* The HTTP status of code (400, 404, ...). ERROR_NONE and unknown values give 500. */
int error_http_status(enum error_code code);

/* The wire string of code ("invalid_request", ...): a static string, never NULL. ERROR_NONE and
 * unknown values give "internal". */
const char *error_code_string(enum error_code code);

/* A generic human message for code ("the request is invalid", ...): a static string, never NULL.
 * Used by error_json() when no message is given. */
const char *error_default_message(enum error_code code);

/* True when a response with this code must carry Retry-After (the condition is temporary:
 * unavailable, lock_timeout, rate_limited). */
bool error_retry_after(enum error_code code);

/* Looks up a wire string ("sold_out") and stores its code in *out. Returns true when found;
 * false (and *out untouched) otherwise. Handy for clients and tests reading error bodies. */
bool error_from_string(const char *s, enum error_code *out);

/* Builds the error body {"error": error_code_string(code), "message": message}.
 * message may be NULL (the default message is used); it is copied, the caller keeps it. Bytes
 * that are not printable ASCII are replaced by '?' so any input yields valid JSON.
 * Returns a NEW reference the caller releases with json_decref(), or NULL when out of memory. */
json_t *error_json(enum error_code code, const char *message);

#endif
