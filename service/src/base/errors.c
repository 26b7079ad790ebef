/*
 * errors — the API error table (code -> HTTP status, wire string, default message) and the
 * builder of error bodies. See errors.h.
 */
#include "errors.h"

#include <stdlib.h>
#include <string.h>

struct error_entry {
    int status;
    const char *wire;
    const char *message;
    bool retry_after;
};

/* Indexed by enum error_code; [ERROR_NONE] is unused (lookups map it to ERROR_INTERNAL). */
static const struct error_entry table[ERROR_CODE_COUNT] = {
    [ERROR_NONE] = {500, "internal", "internal error", false},
    [ERROR_INVALID_REQUEST] = {400, "invalid_request", "the request is invalid", false},
    [ERROR_UNAUTHORIZED] = {401, "unauthorized", "a valid admin bearer token is required", false},
    [ERROR_NOT_FOUND] = {404, "not_found", "no such resource", false},
    [ERROR_UNKNOWN_SKU] = {404, "unknown_sku", "no such SKU", false},
    [ERROR_UNKNOWN_ORDER] = {404, "unknown_order", "no such order", false},
    [ERROR_METHOD_NOT_ALLOWED] = {405, "method_not_allowed", "method not allowed on this resource",
                                  false},
    [ERROR_SOLD_OUT] = {409, "sold_out", "the SKU is sold out", false},
    [ERROR_INSUFFICIENT_STOCK] = {409, "insufficient_stock",
                                  "not enough stock for the requested quantity", false},
    [ERROR_ALREADY_CANCELLED] = {409, "already_cancelled", "the order is already cancelled", false},
    [ERROR_SKU_CHANGED] = {409, "sku_changed", "the SKU was re-initialised or deleted meanwhile",
                           false},
    [ERROR_USER_REQUIRED] = {401, "user_required",
                             "this SKU limits units per user: the order needs a verified user",
                             false},
    [ERROR_LIMIT_EXCEEDED] = {409, "limit_exceeded",
                              "the order would take the user past the SKU's limit per user", false},
    [ERROR_SALE_NOT_STARTED] = {409, "sale_not_started", "the sale has not started yet", false},
    [ERROR_SALE_ENDED] = {409, "sale_ended", "the sale has ended", false},
    [ERROR_RESERVATION_EXPIRED] = {409, "reservation_expired",
                                   "the hold expired before it was confirmed", false},
    [ERROR_NOT_RESERVED] = {409, "not_reserved", "the order was never a hold", false},
    [ERROR_TICKET_REQUIRED] =
        {403, "ticket_required",
         "this SKU sells through its waiting room: join the queue for a ticket", false},
    [ERROR_TICKET_INVALID] = {403, "ticket_invalid", "the ticket is not valid", false},
    [ERROR_TICKET_EXPIRED] = {403, "ticket_expired", "the ticket has expired", false},
    [ERROR_TICKET_USED] = {409, "ticket_used", "the ticket was used by another order", false},
    [ERROR_TICKET_WRONG_USER] = {403, "ticket_wrong_user", "the ticket is another user's", false},
    [ERROR_TICKET_WRONG_SKU] = {403, "ticket_wrong_sku", "the ticket is for another SKU", false},
    [ERROR_DUPLICATE_SKU] = {422, "duplicate_sku", "a cart names the same SKU twice", false},
    [ERROR_ITEMS_AND_SKU] = {422, "items_and_sku",
                             "an order is either one SKU (sku) or a cart (items), not both", false},
    [ERROR_NO_WAITING_ROOM] = {409, "no_waiting_room",
                               "this SKU has no waiting room (its queue_rate is 0)", false},
    [ERROR_UNKNOWN_GROUP] = {422, "unknown_group",
                             "no such limit group: PUT /api/v1/groups/{group} first", false},

    [ERROR_POW_REQUIRED] = {403, "pow_required",
                            "joining needs a proof of work: GET the queue's challenge and solve it",
                            false},
    [ERROR_POW_INVALID] = {403, "pow_invalid", "the proof of work is not valid", false},
    [ERROR_POW_EXPIRED] = {403, "pow_expired", "the proof of work's challenge has expired", false},
    [ERROR_EXTEND_NOT_ALLOWED] = {409, "extend_not_allowed",
                                  "this SKU's holds cannot be extended (its hold_extend_s is 0)",
                                  false},
    [ERROR_EXTEND_LIMIT] = {409, "extend_limit",
                            "the hold was extended as many times as its SKU allows", false},
    [ERROR_BODY_TOO_LARGE] = {413, "body_too_large", "the request body is too large", false},
    [ERROR_HEADERS_TOO_LARGE] = {431, "headers_too_large",
                                 "the request line and headers are too large", false},
    [ERROR_UNSUPPORTED_MEDIA_TYPE] = {415, "unsupported_media_type",
                                      "the request body must be application/json", false},
    [ERROR_RATE_LIMITED] = {429, "rate_limited", "too many requests, retry later", true},
    [ERROR_INTERNAL] = {500, "internal", "internal error", false},
    [ERROR_UNAVAILABLE] = {503, "unavailable", "the service is temporarily unavailable", true},
    [ERROR_LOCK_TIMEOUT] = {503, "lock_timeout", "timed out waiting for a stock segment lock",
                            true},
};

static const struct error_entry *entry(enum error_code code)
{
    if ((int)code <= (int)ERROR_NONE || (int)code >= (int)ERROR_CODE_COUNT)
        return &table[ERROR_INTERNAL];
    return &table[code];
}

int error_http_status(enum error_code code)
{
    return entry(code)->status;
}

const char *error_code_string(enum error_code code)
{
    return entry(code)->wire;
}

const char *error_default_message(enum error_code code)
{
    return entry(code)->message;
}

bool error_retry_after(enum error_code code)
{
    return entry(code)->retry_after;
}

bool error_from_string(const char *s, enum error_code *out)
{
    if (!s)
        return false;
    for (int c = ERROR_NONE + 1; c < ERROR_CODE_COUNT; c++) {
        if (strcmp(table[c].wire, s) == 0) {
            *out = (enum error_code)c;
            return true;
        }
    }
    return false;
}

json_t *error_json(enum error_code code, const char *message)
{
    if (!message)
        message = error_default_message(code);
    /* Messages may quote client input; json_string() refuses invalid UTF-8, so keep ASCII. */
    size_t len = strlen(message);
    char *clean = malloc(len + 1);
    if (!clean)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)message[i];
        clean[i] = (ch >= 0x20 && ch <= 0x7e) ? (char)ch : '?';
    }
    clean[len] = '\0';
    json_t *body = json_pack("{s:s, s:s}", "error", error_code_string(code), "message", clean);
    free(clean);
    return body;
}
