/*
 * Unit tests of service/src/base/errors.c: the code table matches SPEC §5 (status, wire string),
 * lookups are total, and error_json() builds exactly {"error", "message"} with valid JSON for
 * any message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "errors.h"

/* What the spec says, written independently of the table under test. */
static const struct {
    enum error_code code;
    int status;
    const char *wire;
    bool retry_after;
} expected[] = {
    {ERROR_INVALID_REQUEST, 400, "invalid_request", false},
    {ERROR_UNAUTHORIZED, 401, "unauthorized", false},
    {ERROR_NOT_FOUND, 404, "not_found", false},
    {ERROR_UNKNOWN_SKU, 404, "unknown_sku", false},
    {ERROR_UNKNOWN_ORDER, 404, "unknown_order", false},
    {ERROR_METHOD_NOT_ALLOWED, 405, "method_not_allowed", false},
    {ERROR_SOLD_OUT, 409, "sold_out", false},
    {ERROR_INSUFFICIENT_STOCK, 409, "insufficient_stock", false},
    {ERROR_ALREADY_CANCELLED, 409, "already_cancelled", false},
    {ERROR_SKU_CHANGED, 409, "sku_changed", false},
    {ERROR_USER_REQUIRED, 401, "user_required", false},
    {ERROR_LIMIT_EXCEEDED, 409, "limit_exceeded", false},
    {ERROR_SALE_NOT_STARTED, 409, "sale_not_started", false},
    {ERROR_SALE_ENDED, 409, "sale_ended", false},
    {ERROR_RESERVATION_EXPIRED, 409, "reservation_expired", false},
    {ERROR_NOT_RESERVED, 409, "not_reserved", false},
    {ERROR_TICKET_REQUIRED, 403, "ticket_required", false},
    {ERROR_TICKET_INVALID, 403, "ticket_invalid", false},
    {ERROR_TICKET_EXPIRED, 403, "ticket_expired", false},
    {ERROR_TICKET_USED, 409, "ticket_used", false},
    {ERROR_TICKET_WRONG_USER, 403, "ticket_wrong_user", false},
    {ERROR_TICKET_WRONG_SKU, 403, "ticket_wrong_sku", false},
    {ERROR_NO_WAITING_ROOM, 409, "no_waiting_room", false},
    {ERROR_DUPLICATE_SKU, 422, "duplicate_sku", false},
    {ERROR_ITEMS_AND_SKU, 422, "items_and_sku", false},
    {ERROR_UNKNOWN_GROUP, 422, "unknown_group", false},

    {ERROR_POW_REQUIRED, 403, "pow_required", false},
    {ERROR_POW_INVALID, 403, "pow_invalid", false},
    {ERROR_POW_EXPIRED, 403, "pow_expired", false},
    {ERROR_EXTEND_NOT_ALLOWED, 409, "extend_not_allowed", false},
    {ERROR_EXTEND_LIMIT, 409, "extend_limit", false},
    {ERROR_BODY_TOO_LARGE, 413, "body_too_large", false},
    {ERROR_HEADERS_TOO_LARGE, 431, "headers_too_large", false},
    {ERROR_UNSUPPORTED_MEDIA_TYPE, 415, "unsupported_media_type", false},
    {ERROR_RATE_LIMITED, 429, "rate_limited", true},
    {ERROR_INTERNAL, 500, "internal", false},
    {ERROR_UNAVAILABLE, 503, "unavailable", true},
    {ERROR_LOCK_TIMEOUT, 503, "lock_timeout", true},
};
#define NEXPECTED (sizeof(expected) / sizeof(expected[0]))

static void test_table_matches_spec(void **state)
{
    (void)state;
    /* every code is listed exactly once */
    assert_int_equal(NEXPECTED, ERROR_CODE_COUNT - 1);
    for (size_t i = 0; i < NEXPECTED; i++) {
        assert_int_equal(error_http_status(expected[i].code), expected[i].status);
        assert_string_equal(error_code_string(expected[i].code), expected[i].wire);
        assert_int_equal(error_retry_after(expected[i].code), expected[i].retry_after);
        const char *msg = error_default_message(expected[i].code);
        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(expected[i].code, expected[j].code);
    }
}

static void test_wire_strings_unique_and_reversible(void **state)
{
    (void)state;
    for (int c = ERROR_NONE + 1; c < ERROR_CODE_COUNT; c++) {
        enum error_code back = ERROR_NONE;
        assert_true(error_from_string(error_code_string((enum error_code)c), &back));
        assert_int_equal(back, c);
        for (int d = ERROR_NONE + 1; d < c; d++)
            assert_string_not_equal(error_code_string((enum error_code)c),
                                    error_code_string((enum error_code)d));
    }
    enum error_code untouched = ERROR_SOLD_OUT;
    assert_false(error_from_string("no_such_code", &untouched));
    assert_false(error_from_string("", &untouched));
    assert_false(error_from_string("SOLD_OUT", &untouched));
    assert_false(error_from_string(NULL, &untouched));
    assert_int_equal(untouched, ERROR_SOLD_OUT);
}

static void test_out_of_range_is_internal(void **state)
{
    (void)state;
    const int bad[] = {ERROR_NONE, ERROR_CODE_COUNT, -1, 1000};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(error_http_status((enum error_code)bad[i]), 500);
        assert_string_equal(error_code_string((enum error_code)bad[i]), "internal");
        assert_false(error_retry_after((enum error_code)bad[i]));
    }
}

static void check_body(json_t *body, const char *code, const char *message)
{
    assert_non_null(body);
    assert_true(json_is_object(body));
    assert_int_equal(json_object_size(body), 2);
    assert_string_equal(json_string_value(json_object_get(body, "error")), code);
    assert_string_equal(json_string_value(json_object_get(body, "message")), message);
    char *text = json_dumps(body, JSON_COMPACT);
    assert_non_null(text);
    json_error_t je;
    json_t *again = json_loads(text, 0, &je); /* the wire text parses back */
    assert_non_null(again);
    assert_true(json_equal(again, body));
    json_decref(again);
    free(text);
}

static void test_error_json(void **state)
{
    (void)state;
    json_t *b = error_json(ERROR_SOLD_OUT, "SKU X is sold out");
    check_body(b, "sold_out", "SKU X is sold out");
    assert_int_equal(b->refcount, 1); /* a new reference, ours alone */
    json_decref(b);

    b = error_json(ERROR_LOCK_TIMEOUT, NULL);
    check_body(b, "lock_timeout", error_default_message(ERROR_LOCK_TIMEOUT));
    json_decref(b);

    /* the message is copied */
    char msg[] = "quantity: must be an integer between 1 and 100, got \"1\"";
    b = error_json(ERROR_INVALID_REQUEST, msg);
    memset(msg, 'x', sizeof(msg) - 1);
    check_body(b, "invalid_request", "quantity: must be an integer between 1 and 100, got \"1\"");
    json_decref(b);

    /* bytes that could break the JSON (invalid UTF-8, control characters) are replaced */
    b = error_json(ERROR_INVALID_REQUEST, "bad \xff\xfe byte\n\x01 end");
    check_body(b, "invalid_request", "bad ?? byte?? end");
    json_decref(b);

    b = error_json(ERROR_NONE, NULL);
    check_body(b, "internal", error_default_message(ERROR_INTERNAL));
    json_decref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_matches_spec),
        cmocka_unit_test(test_wire_strings_unique_and_reversible),
        cmocka_unit_test(test_out_of_range_is_internal),
        cmocka_unit_test(test_error_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
