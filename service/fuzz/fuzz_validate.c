/*
 * libFuzzer target: the request validators of validate.c on arbitrary bytes. Every input goes
 * through all of them (the order, PUT-SKU and restock body parsers, the SKU, printable and
 * Content-Type checks) and each result is checked against the rules of validate.h: an accepted
 * body yields fields in range, a refused one a printable one-line message, and no validator
 * reads past the input (ASan) or overflows (UBSan). A violated rule aborts, which libFuzzer
 * reports as a crash with the input that caused it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with a message: the fuzzer saves the input. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_validate: %s:%d: check failed: %s\n", __FILE__, __LINE__,        \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A refused body's error: the documented code and a printable, terminated message. */
static void check_error(const struct validate_error *err, size_t len)
{
    CHECK(err->code == ERROR_INVALID_REQUEST || err->code == ERROR_BODY_TOO_LARGE);
    CHECK(err->code != ERROR_BODY_TOO_LARGE || len > VALIDATE_MAX_BODY);
    size_t n = strnlen(err->message, sizeof(err->message));
    CHECK(n > 0 && n < sizeof(err->message));
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)err->message[i] >= 0x20 && (unsigned char)err->message[i] <= 0x7e);
}

static void fuzz_bodies(const char *body, size_t size, int64_t max_quantity)
{
    struct validate_error err;

    struct validate_order order;
    memset(&err, 0, sizeof(err));
    if (validate_order_body(body, size, max_quantity, &order, &err) == 0) {
        size_t sl = strnlen(order.sku, sizeof(order.sku));
        CHECK(sl < sizeof(order.sku) && validate_sku(order.sku, sl));
        CHECK(order.quantity >= 1 && order.quantity <= max_quantity);
        size_t ul = strnlen(order.user_id, sizeof(order.user_id));
        CHECK(ul < sizeof(order.user_id));
        CHECK(order.has_user_id ? validate_printable(order.user_id, ul) : ul == 0);
        CHECK(size > 0 && size <= VALIDATE_MAX_BODY);
    } else {
        check_error(&err, size);
    }

    struct validate_put_sku put;
    memset(&err, 0, sizeof(err));
    if (validate_put_sku_body(body, size, &put, &err) == 0) {
        CHECK(put.stock >= 0 && put.stock <= VALIDATE_STOCK_MAX);
        CHECK(put.segments >= 1 && put.segments <= VALIDATE_SEGMENTS_MAX);
    } else {
        check_error(&err, size);
    }

    struct validate_restock restock;
    memset(&err, 0, sizeof(err));
    if (validate_restock_body(body, size, &restock, &err) == 0)
        CHECK(restock.quantity >= 1 && restock.quantity <= VALIDATE_STOCK_MAX);
    else
        check_error(&err, size);
}

/* The name checks against a plain re-statement of their rules. */
static void fuzz_names(const char *s, size_t size)
{
    bool sku_ok = size >= 1 && size <= VALIDATE_SKU_MAX;
    bool printable_ok = size >= 1 && size <= VALIDATE_PRINTABLE_MAX;
    for (size_t i = 0; i < size; i++) {
        unsigned char c = (unsigned char)s[i];
        bool name_char = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '-';
        if (!name_char)
            sku_ok = false;
        if (c < 0x20 || c > 0x7e)
            printable_ok = false;
    }
    CHECK(validate_sku(s, size) == sku_ok);
    CHECK(validate_printable(s, size) == printable_ok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so ASan sees any read past the end; data itself may be NULL when
     * size is 0, which the parsers must accept. */
    char *body = malloc(size ? size : 1);
    if (!body)
        return 0;
    if (size)
        memcpy(body, data, size);

    fuzz_bodies(size ? body : NULL, size, 100);
    /* The configured maximum is arbitrary too: take it from the input's length. */
    fuzz_bodies(body, size, (int64_t)(size % 1000000) + 1);
    fuzz_names(body, size);

    /* validate_content_type takes a C string. */
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, body, size);
        text[size] = '\0';
        bool json = validate_content_type(text);
        /* Accepted values start with the media type (after optional blanks). */
        const char *p = text + strspn(text, " \t");
        CHECK(!json || strncasecmp(p, "application/json", 16) == 0);
        free(text);
    }
    free(body);
    return 0;
}
