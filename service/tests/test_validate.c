/*
 * Unit tests of service/src/base/validate.c: name and header checks, and the body parsers driven by
 * tables of valid and invalid bodies. Every table row is its own cmocka test, and every invalid
 * row states the field its message must name, so a body refused for the wrong reason fails.
 * Bodies are copied into exactly-sized heap buffers (no NUL terminator) so a sanitizer build
 * catches any read past the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "validate.h"

#define MAXQ 100 /* --max-quantity used by the order rows */

enum body_kind { ORDER, PUT_SKU, RESTOCK, PATCH };

struct invalid_case {
    const char *name;
    enum body_kind kind;
    const char *body;
    size_t len;        /* 0: strlen(body) */
    const char *field; /* the message must start with "<field>: " */
    enum error_code code;
};

struct valid_case {
    const char *name;
    enum body_kind kind;
    const char *body;
    size_t len; /* 0: strlen(body) */
    /* expected result: */
    const char *sku;
    int64_t a;           /* order quantity / PUT stock / restock quantity */
    int64_t b;           /* PUT segments */
    const char *user_id; /* NULL: absent */
};

/* Bodies too long to write literally; filled by make_buffers() before the tests run. */
static char big_body[VALIDATE_MAX_BODY + 64];
static char sku64_body[128], sku65_body[128], user128_body[256], user129_body[256];
static char sku64[65], user128[129];

#define IR ERROR_INVALID_REQUEST

static const struct invalid_case invalid[] = {
    /* the body as a whole */
    {"empty body", ORDER, "", 0, "body", IR},
    {"whitespace only", ORDER, "  \n", 0, "body", IR},
    {"array", ORDER, "[]", 0, "body", IR},
    {"array of object", ORDER, "[{\"sku\":\"A\"}]", 0, "body", IR},
    {"top-level string", ORDER, "\"sku\"", 0, "body", IR},
    {"top-level number", ORDER, "123", 0, "body", IR},
    {"top-level null", ORDER, "null", 0, "body", IR},
    {"truncated", ORDER, "{\"sku\":\"A\"", 0, "body", IR},
    {"truncated in string", ORDER, "{\"sku\":\"A", 0, "body", IR},
    {"truncated after colon", ORDER, "{\"sku\":", 0, "body", IR},
    {"trailing comma", ORDER, "{\"sku\":\"A\",}", 0, "body", IR},
    {"missing comma", ORDER, "{\"sku\":\"A\" \"quantity\":1}", 0, "body", IR},
    {"trailing object", ORDER, "{\"sku\":\"A\"} {}", 0, "body", IR},
    {"trailing junk", ORDER, "{\"sku\":\"A\"}x", 0, "body", IR},
    {"unquoted key", ORDER, "{sku:\"A\"}", 0, "body", IR},
    {"single quotes", ORDER, "{'sku':'A'}", 0, "body", IR},
    {"utf-8 BOM", ORDER, "\xef\xbb\xbf{\"sku\":\"A\"}", 0, "body", IR},
    {"invalid utf-8", ORDER, "{\"sku\":\"\xff\"}", 0, "body", IR},
    {"raw newline in string", ORDER, "{\"sku\":\"A\nB\"}", 0, "body", IR},
    {"raw NUL after object", ORDER, "{\"sku\":\"A\"}\0", 12, "body", IR},
    {"raw NUL in string", ORDER, "{\"sku\":\"A\0B\"}", 13, "body", IR},
    {"leading zero", ORDER, "{\"sku\":\"A\",\"quantity\":01}", 0, "body", IR},
    {"plus sign", ORDER, "{\"sku\":\"A\",\"quantity\":+1}", 0, "body", IR},
    {"hex number", ORDER, "{\"sku\":\"A\",\"quantity\":0x10}", 0, "body", IR},
    {"NaN", ORDER, "{\"sku\":\"A\",\"quantity\":NaN}", 0, "body", IR},
    {"nested duplicate key", ORDER, "{\"x\":{\"b\":1,\"b\":2},\"sku\":\"A\"}", 0, "body", IR},
    {"duplicate via escape", ORDER, "{\"sku\":\"A\",\"s\\u006bu\":\"B\"}", 0, "body", IR},
    {"too large", ORDER, big_body, sizeof(big_body) - 1, "body", ERROR_BODY_TOO_LARGE},
    /* sku */
    {"sku missing", ORDER, "{\"quantity\":1}", 0, "sku", IR},
    {"empty object", ORDER, "{}", 0, "sku", IR},
    {"sku duplicated", ORDER, "{\"sku\":\"A\",\"sku\":\"B\"}", 0, "sku", IR},
    {"sku number", ORDER, "{\"sku\":1}", 0, "sku", IR},
    {"sku null", ORDER, "{\"sku\":null}", 0, "sku", IR},
    {"sku true", ORDER, "{\"sku\":true}", 0, "sku", IR},
    {"sku array", ORDER, "{\"sku\":[\"A\"]}", 0, "sku", IR},
    {"sku empty", ORDER, "{\"sku\":\"\"}", 0, "sku", IR},
    {"sku space", ORDER, "{\"sku\":\"a b\"}", 0, "sku", IR},
    {"sku slash", ORDER, "{\"sku\":\"A/B\"}", 0, "sku", IR},
    {"sku non-ascii", ORDER, "{\"sku\":\"caf\\u00e9\"}", 0, "sku", IR},
    {"sku 65 chars", ORDER, sku65_body, 0, "sku", IR},
    {"sku escaped NUL", ORDER, "{\"sku\":\"A\\u0000B\"}", 0, "sku", IR},
    /* quantity */
    {"quantity duplicated", ORDER, "{\"sku\":\"A\",\"quantity\":1,\"quantity\":2}", 0, "quantity",
     IR},
    {"quantity 0", ORDER, "{\"sku\":\"A\",\"quantity\":0}", 0, "quantity", IR},
    {"quantity -1", ORDER, "{\"sku\":\"A\",\"quantity\":-1}", 0, "quantity", IR},
    {"quantity above max", ORDER, "{\"sku\":\"A\",\"quantity\":101}", 0, "quantity", IR},
    {"quantity 1.0", ORDER, "{\"sku\":\"A\",\"quantity\":1.0}", 0, "quantity", IR},
    {"quantity 1.5", ORDER, "{\"sku\":\"A\",\"quantity\":1.5}", 0, "quantity", IR},
    {"quantity -0.0", ORDER, "{\"sku\":\"A\",\"quantity\":-0.0}", 0, "quantity", IR},
    {"quantity 1e2", ORDER, "{\"sku\":\"A\",\"quantity\":1e2}", 0, "quantity", IR},
    {"quantity string", ORDER, "{\"sku\":\"A\",\"quantity\":\"1\"}", 0, "quantity", IR},
    {"quantity true", ORDER, "{\"sku\":\"A\",\"quantity\":true}", 0, "quantity", IR},
    {"quantity null", ORDER, "{\"sku\":\"A\",\"quantity\":null}", 0, "quantity", IR},
    {"quantity array", ORDER, "{\"sku\":\"A\",\"quantity\":[1]}", 0, "quantity", IR},
    {"quantity object", ORDER, "{\"sku\":\"A\",\"quantity\":{}}", 0, "quantity", IR},
    {"quantity int64 max", ORDER, "{\"sku\":\"A\",\"quantity\":9223372036854775807}", 0, "quantity",
     IR},
    {"quantity beyond int64", ORDER, "{\"sku\":\"A\",\"quantity\":99999999999999999999}", 0,
     "quantity", IR},
    {"quantity beyond -int64", ORDER, "{\"sku\":\"A\",\"quantity\":-99999999999999999999}", 0,
     "quantity", IR},
    {"quantity real overflow", ORDER, "{\"quantity\":1e999,\"sku\":\"A\"}", 0, "quantity", IR},
    {"unknown field beyond int64", ORDER, "{\"sku\":\"A\",\"extra\":99999999999999999999}", 0,
     "extra", IR},
    /* user_id */
    {"user_id empty", ORDER, "{\"sku\":\"A\",\"user_id\":\"\"}", 0, "user_id", IR},
    {"user_id 129 chars", ORDER, user129_body, 0, "user_id", IR},
    {"user_id tab", ORDER, "{\"sku\":\"A\",\"user_id\":\"a\\tb\"}", 0, "user_id", IR},
    {"user_id DEL", ORDER, "{\"sku\":\"A\",\"user_id\":\"a\\u007f\"}", 0, "user_id", IR},
    {"user_id non-ascii", ORDER, "{\"sku\":\"A\",\"user_id\":\"\\u00e9\"}", 0, "user_id", IR},
    {"user_id number", ORDER, "{\"sku\":\"A\",\"user_id\":5}", 0, "user_id", IR},
    {"user_id null", ORDER, "{\"sku\":\"A\",\"user_id\":null}", 0, "user_id", IR},
    {"user_id escaped NUL", ORDER, "{\"sku\":\"A\",\"user_id\":\"x\\u0000y\"}", 0, "user_id", IR},
    /* PUT /skus/{sku} */
    {"put empty object", PUT_SKU, "{}", 0, "stock", IR},
    {"put stock missing", PUT_SKU, "{\"segments\":4}", 0, "stock", IR},
    {"put segments missing", PUT_SKU, "{\"stock\":10}", 0, "segments", IR},
    {"put stock -1", PUT_SKU, "{\"stock\":-1,\"segments\":4}", 0, "stock", IR},
    {"put stock 10^12+1", PUT_SKU, "{\"stock\":1000000000001,\"segments\":4}", 0, "stock", IR},
    {"put stock real", PUT_SKU, "{\"stock\":10.0,\"segments\":4}", 0, "stock", IR},
    {"put stock string", PUT_SKU, "{\"stock\":\"10\",\"segments\":4}", 0, "stock", IR},
    {"put stock duplicated", PUT_SKU, "{\"stock\":10,\"segments\":4,\"stock\":5}", 0, "stock", IR},
    {"put stock beyond int64", PUT_SKU, "{\"segments\":4,\"stock\":18446744073709551616}", 0,
     "stock", IR},
    {"put segments 0", PUT_SKU, "{\"stock\":10,\"segments\":0}", 0, "segments", IR},
    {"put segments 1025", PUT_SKU, "{\"stock\":10,\"segments\":1025}", 0, "segments", IR},
    {"put segments true", PUT_SKU, "{\"stock\":10,\"segments\":true}", 0, "segments", IR},
    {"put segments null", PUT_SKU, "{\"stock\":10,\"segments\":null}", 0, "segments", IR},
    {"put array", PUT_SKU, "[10,4]", 0, "body", IR},
    {"put truncated", PUT_SKU, "{\"stock\":10,\"segments\":4", 0, "body", IR},
    /* PUT's sale rules (SPEC §11) */
    {"put limit -1", PUT_SKU, "{\"stock\":1,\"segments\":1,\"limit_per_user\":-1}", 0,
     "limit_per_user", IR},
    {"put limit 10^6+1", PUT_SKU, "{\"stock\":1,\"segments\":1,\"limit_per_user\":1000001}", 0,
     "limit_per_user", IR},
    {"put limit null", PUT_SKU, "{\"stock\":1,\"segments\":1,\"limit_per_user\":null}", 0,
     "limit_per_user", IR},
    {"put limit beyond int64", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"limit_per_user\":99999999999999999999999}", 0, "limit_per_user",
     IR},
    {"put ttl -1", PUT_SKU, "{\"stock\":1,\"segments\":1,\"reservation_ttl_s\":-1}", 0,
     "reservation_ttl_s", IR},
    {"put ttl 30 days + 1", PUT_SKU, "{\"stock\":1,\"segments\":1,\"reservation_ttl_s\":2592001}",
     0, "reservation_ttl_s", IR},
    {"put ttl real", PUT_SKU, "{\"stock\":1,\"segments\":1,\"reservation_ttl_s\":1.5}", 0,
     "reservation_ttl_s", IR},
    {"put start number", PUT_SKU, "{\"stock\":1,\"segments\":1,\"sale_start\":1795629600}", 0,
     "sale_start", IR},
    {"put start garbage", PUT_SKU, "{\"stock\":1,\"segments\":1,\"sale_start\":\"tomorrow\"}", 0,
     "sale_start", IR},
    {"put end Feb 30", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"sale_end\":\"2026-02-30T00:00:00Z\"}", 0, "sale_end", IR},
    {"put end year 10000", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"sale_end\":\"10000-01-01T00:00:00Z\"}", 0, "sale_end", IR},
    {"put start 1969", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"sale_start\":\"1969-12-31T23:59:59Z\"}", 0, "sale_start", IR},
    {"put end not after start", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"sale_start\":\"2026-11-25T18:00:00Z\","
     "\"sale_end\":\"2026-11-25T20:00:00+02:00\"}",
     0, "sale_end", IR},
    {"put end before start", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"sale_start\":\"2026-11-25T18:00:00Z\","
     "\"sale_end\":\"2026-11-24T18:00:00Z\"}",
     0, "sale_end", IR},
    {"put start duplicated", PUT_SKU,
     "{\"stock\":1,\"segments\":1,\"sale_start\":null,\"sale_start\":null}", 0, "sale_start", IR},
    {"put rules but no stock", PUT_SKU, "{\"segments\":1,\"limit_per_user\":1}", 0, "stock", IR},
    /* k under 100 % would leave units nobody is admitted for (issue 32); 0 is the default */
    {"put admit pct 1", PUT_SKU, "{\"stock\":1,\"segments\":1,\"queue_admit_pct\":1}", 0,
     "queue_admit_pct", IR},
    {"put admit pct 99", PUT_SKU, "{\"stock\":1,\"segments\":1,\"queue_admit_pct\":99}", 0,
     "queue_admit_pct", IR},
    /* PATCH /skus/{sku} */
    {"patch empty object", PATCH, "{}", 0, "body", IR},
    {"patch unknown fields only", PATCH, "{\"stock\":5,\"limit\":1}", 0, "body", IR},
    {"patch empty body", PATCH, "", 0, "body", IR},
    {"patch array", PATCH, "[]", 0, "body", IR},
    {"patch truncated", PATCH, "{\"limit_per_user\":1", 0, "body", IR},
    /* limit_group (rules_table.h's STR row): "" or a name by the SKU name rules */
    {"patch group not a string", PATCH, "{\"limit_group\":7}", 0, "limit_group", IR},
    {"patch group null", PATCH, "{\"limit_group\":null}", 0, "limit_group", IR},
    {"patch group with a space", PATCH, "{\"limit_group\":\"a b\"}", 0, "limit_group", IR},
    {"patch group with a brace", PATCH, "{\"limit_group\":\"a{b}\"}", 0, "limit_group", IR},
    {"patch group of 65 bytes", PATCH,
     "{\"limit_group\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", 0,
     "limit_group", IR},
    {"put group not a string", PUT_SKU, "{\"stock\":1,\"segments\":1,\"limit_group\":[]}", 0,
     "limit_group", IR},
    {"patch limit string", PATCH, "{\"limit_per_user\":\"1\"}", 0, "limit_per_user", IR},
    {"patch limit true", PATCH, "{\"limit_per_user\":true}", 0, "limit_per_user", IR},
    {"patch limit 10^6+1", PATCH, "{\"limit_per_user\":1000001}", 0, "limit_per_user", IR},
    {"patch limit huge", PATCH, "{\"limit_per_user\":1e400}", 0, "limit_per_user", IR},
    {"patch limit beyond int64", PATCH, "{\"limit_per_user\":18446744073709551616}", 0,
     "limit_per_user", IR},
    {"patch limit duplicated", PATCH, "{\"limit_per_user\":1,\"limit_per_user\":2}", 0,
     "limit_per_user", IR},
    {"patch ttl negative", PATCH, "{\"reservation_ttl_s\":-60}", 0, "reservation_ttl_s", IR},
    {"patch ttl null", PATCH, "{\"reservation_ttl_s\":null}", 0, "reservation_ttl_s", IR},
    {"patch start object", PATCH, "{\"sale_start\":{}}", 0, "sale_start", IR},
    {"patch start empty", PATCH, "{\"sale_start\":\"\"}", 0, "sale_start", IR},
    {"patch start no zone", PATCH, "{\"sale_start\":\"2026-11-25T18:00:00\"}", 0, "sale_start", IR},
    {"patch start NUL", PATCH, "{\"sale_start\":\"2026-11-25T18:00:00Z\\u0000\"}", 0, "sale_start",
     IR},
    {"patch end 24:00", PATCH, "{\"sale_end\":\"2026-11-25T24:00:00Z\"}", 0, "sale_end", IR},
    {"patch end equal to start", PATCH,
     "{\"sale_start\":\"2026-11-25T18:00:00Z\",\"sale_end\":\"2026-11-25T18:00:00.000Z\"}", 0,
     "sale_end", IR},
    {"patch admit pct 50", PATCH, "{\"queue_admit_pct\":50}", 0, "queue_admit_pct", IR},
    /* POST /skus/{sku}/restock */
    {"restock empty object", RESTOCK, "{}", 0, "quantity", IR},
    {"restock 0", RESTOCK, "{\"quantity\":0}", 0, "quantity", IR},
    {"restock negative", RESTOCK, "{\"quantity\":-5}", 0, "quantity", IR},
    {"restock 10^12+1", RESTOCK, "{\"quantity\":1000000000001}", 0, "quantity", IR},
    {"restock string", RESTOCK, "{\"quantity\":\"5\"}", 0, "quantity", IR},
    {"restock real", RESTOCK, "{\"quantity\":5.0}", 0, "quantity", IR},
    {"restock null", RESTOCK, "{\"quantity\":null}", 0, "quantity", IR},
    {"restock beyond int64", RESTOCK, "{\"quantity\":9223372036854775808}", 0, "quantity", IR},
    {"restock truncated", RESTOCK, "{\"quantity\":1", 0, "body", IR},
    {"restock empty body", RESTOCK, "", 0, "body", IR},
};

static const struct valid_case valid[] = {
    {"minimal order", ORDER, "{\"sku\":\"A\"}", 0, "A", 1, 0, NULL},
    {"order quantity max", ORDER, "{\"sku\":\"A\",\"quantity\":100}", 0, "A", 100, 0, NULL},
    {"order with user", ORDER, "{\"sku\":\"A\",\"quantity\":1,\"user_id\":\"u-1\"}", 0, "A", 1, 0,
     "u-1"},
    {"order keys reordered", ORDER, "{\"user_id\":\"bob\",\"quantity\":3,\"sku\":\"X\"}", 0, "X", 3,
     0, "bob"},
    {"order whitespace", ORDER, " \n{ \"sku\" : \"B\" ,\t\"quantity\" : 2 }\r\n", 0, "B", 2, 0,
     NULL},
    {"order unknown fields", ORDER,
     "{\"sku\":\"A\",\"note\":\"x\",\"extra\":{\"deep\":[1,2.5,null,true]},\"q\":1e300}", 0, "A", 1,
     0, NULL},
    {"order sku charset", ORDER, "{\"sku\":\"aZ09_.:-\"}", 0, "aZ09_.:-", 1, 0, NULL},
    {"order sku 64 chars", ORDER, sku64_body, 0, sku64, 1, 0, NULL},
    {"order sku unicode escape", ORDER, "{\"sku\":\"\\u0041\\u0042\"}", 0, "AB", 1, 0, NULL},
    {"order user_id 128 chars", ORDER, user128_body, 0, "A", 1, 0, user128},
    {"order user_id space and tilde", ORDER, "{\"sku\":\"A\",\"user_id\":\" ~ \"}", 0, "A", 1, 0,
     " ~ "},
    {"order user_id escapes", ORDER, "{\"sku\":\"A\",\"user_id\":\"a\\\"b\\\\c\\/d\"}", 0, "A", 1,
     0, "a\"b\\c/d"},
    {"order unknown field duplicate-looking", ORDER, "{\"sku\":\"A\",\"sku_\":\"B\"}", 0, "A", 1, 0,
     NULL},
    {"order -0 unknown field", ORDER, "{\"sku\":\"A\",\"z\":-0}", 0, "A", 1, 0, NULL},
    {"put minimal", PUT_SKU, "{\"stock\":0,\"segments\":1}", 0, NULL, 0, 1, NULL},
    {"put maximal", PUT_SKU, "{\"stock\":1000000000000,\"segments\":1024}", 0, NULL,
     1000000000000LL, 1024, NULL},
    {"put reordered + unknown", PUT_SKU, "{\"segments\":16,\"x\":[],\"stock\":1000}", 0, NULL, 1000,
     16, NULL},
    {"restock 1", RESTOCK, "{\"quantity\":1}", 0, NULL, 1, 0, NULL},
    {"restock 10^12", RESTOCK, "{\"quantity\":1000000000000}", 0, NULL, 1000000000000LL, 0, NULL},
};

#define NINVALID (sizeof(invalid) / sizeof(invalid[0]))
#define NVALID (sizeof(valid) / sizeof(valid[0]))

static void make_buffers(void)
{
    memset(sku64, 'S', 64);
    sku64[64] = '\0';
    memset(user128, 'u', 128);
    user128[128] = '\0';
    snprintf(sku64_body, sizeof(sku64_body), "{\"sku\":\"%s\"}", sku64);
    snprintf(sku65_body, sizeof(sku65_body), "{\"sku\":\"%sS\"}", sku64);
    snprintf(user128_body, sizeof(user128_body), "{\"sku\":\"A\",\"user_id\":\"%s\"}", user128);
    snprintf(user129_body, sizeof(user129_body), "{\"sku\":\"A\",\"user_id\":\"%su\"}", user128);
    /* A valid order padded with spaces past the limit: refused for its size alone. */
    memset(big_body, ' ', sizeof(big_body) - 1);
    memcpy(big_body, "{\"sku\":\"A\"}", 11);
    big_body[sizeof(big_body) - 1] = '\0';
}

/* Runs the parser for kind on an exactly-sized copy of body[0..len). */
static int parse(enum body_kind kind, const char *body, size_t len, struct validate_order *o,
                 struct validate_put_sku *p, struct validate_restock *r,
                 struct validate_patch_rules *pr, struct validate_error *err)
{
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, body, len);
    int rc = -2;
    switch (kind) {
    case ORDER: rc = validate_order_body(copy, len, MAXQ, o, err); break;
    case PUT_SKU: rc = validate_put_sku_body(copy, len, p, err); break;
    case RESTOCK: rc = validate_restock_body(copy, len, r, err); break;
    case PATCH: rc = validate_patch_rules_body(copy, len, pr, err); break;
    }
    free(copy);
    return rc;
}

static void test_invalid_case(void **state)
{
    const struct invalid_case *c = *state;
    struct validate_order o;
    struct validate_put_sku p;
    struct validate_restock r;
    struct validate_patch_rules pr;
    struct validate_error err = {ERROR_NONE, "unset"};
    size_t len = c->len ? c->len : strlen(c->body);
    int rc = parse(c->kind, c->body, len, &o, &p, &r, &pr, &err);
    print_message("  %s -> %s\n", c->name, err.message);
    assert_int_equal(rc, -1);
    assert_int_equal(err.code, c->code);
    size_t flen = strlen(c->field);
    if (strncmp(err.message, c->field, flen) != 0 || strncmp(err.message + flen, ": ", 2) != 0)
        fail_msg("message \"%s\" does not name field \"%s\"", err.message, c->field);
    for (const char *m = err.message; *m; m++)
        assert_true(*m >= 0x20 && *m <= 0x7e);
}

static void test_valid_case(void **state)
{
    const struct valid_case *c = *state;
    struct validate_order o;
    struct validate_put_sku p;
    struct validate_restock r;
    struct validate_patch_rules pr;
    struct validate_error err = {ERROR_NONE, ""};
    size_t len = c->len ? c->len : strlen(c->body);
    int rc = parse(c->kind, c->body, len, &o, &p, &r, &pr, &err);
    if (rc != 0)
        fail_msg("%s refused: %s", c->name, err.message);
    switch (c->kind) {
    case ORDER:
        assert_string_equal(o.sku, c->sku);
        assert_int_equal(o.quantity, c->a);
        if (c->user_id) {
            assert_true(o.has_user_id);
            assert_string_equal(o.user_id, c->user_id);
        } else {
            assert_false(o.has_user_id);
            assert_string_equal(o.user_id, "");
        }
        break;
    case PUT_SKU:
        assert_int_equal(p.stock, c->a);
        assert_int_equal(p.segments, c->b);
        assert_int_equal(p.rules.limit_per_user, 0); /* no rules given: none */
        assert_int_equal(p.rules.sale_start_ms, 0);
        assert_int_equal(p.rules.sale_end_ms, 0);
        assert_int_equal(p.rules.ttl_s, 0);
        break;
    case RESTOCK: assert_int_equal(r.quantity, c->a); break;
    case PATCH: fail_msg("PATCH rows are in test_rules_valid"); break;
    }
}

/* The sale rules of PUT and PATCH bodies that must be taken, with what they must give. */
static void test_rules_valid(void **state)
{
    (void)state;
    static const struct {
        enum body_kind kind;
        const char *body;
        unsigned fields; /* PATCH: the fields named */
        struct sku_rules want;
    } cases[] = {
        {PUT_SKU,
         "{\"stock\":5,\"segments\":2,\"limit_per_user\":2,\"sale_start\":"
         "\"2026-11-25T18:00:00Z\",\"sale_end\":\"2026-11-25T19:00:00.250+01:00\","
         "\"reservation_ttl_s\":600}",
         0,
         {.limit_per_user = 2,
          .sale_start_ms = 1795629600000LL,
          .sale_end_ms = 1795629600250LL,
          .ttl_s = 600}},
        {PUT_SKU,
         "{\"stock\":5,\"segments\":2,\"limit_per_user\":0,\"sale_start\":null,"
         "\"sale_end\":null,\"reservation_ttl_s\":0}",
         0,
         {.limit_per_user = 0}},
        {PUT_SKU,
         "{\"stock\":5,\"segments\":2,\"limit_per_user\":1000000,\"reservation_ttl_s\":2592000,"
         "\"sale_end\":\"9999-12-31T23:59:59.999Z\"}",
         0,
         {.limit_per_user = 1000000, .sale_end_ms = RULES_TIME_MAX, .ttl_s = 2592000}},
        {PATCH, "{\"limit_per_user\":3}", VALIDATE_RULE_LIMIT, {.limit_per_user = 3}},
        {PATCH, "{\"limit_per_user\":0}", VALIDATE_RULE_LIMIT, {.limit_per_user = 0}},
        {PATCH, "{\"sale_start\":null}", VALIDATE_RULE_START, {.limit_per_user = 0}},
        {PATCH,
         "{\"sale_end\":\"2026-11-25T18:00:00Z\",\"x\":1}",
         VALIDATE_RULE_END,
         {.sale_end_ms = 1795629600000LL}},
        /* the end alone may be before a start the SKU has: the merge judges it */
        {PATCH,
         "{\"sale_end\":\"1970-01-01T00:00:00.001Z\",\"sale_start\":null}",
         VALIDATE_RULE_END | VALIDATE_RULE_START,
         {.sale_end_ms = 1}},
        {PATCH, "{\"reservation_ttl_s\":1}", VALIDATE_RULE_TTL, {.ttl_s = 1}},
        /* queue_admit_pct: 0 (the default, 150 %) and 100..1000 are taken */
        {PATCH, "{\"queue_admit_pct\":0}", RULES_BIT(queue_admit_pct), {.queue_admit_pct = 0}},
        {PATCH, "{\"queue_admit_pct\":100}", RULES_BIT(queue_admit_pct), {.queue_admit_pct = 100}},
        {PATCH,
         "{\"reservation_ttl_s\":5,\"limit_per_user\":1,\"sale_start\":\"2026-01-01T00:00:00Z\","
         "\"sale_end\":\"2026-01-01T00:00:00.001Z\"}",
         15,
         {.limit_per_user = 1,
          .sale_start_ms = 1767225600000LL,
          .sale_end_ms = 1767225600001LL,
          .ttl_s = 5}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct validate_order o;
        struct validate_put_sku p;
        struct validate_restock r;
        struct validate_patch_rules pr;
        struct validate_error err = {ERROR_NONE, ""};
        if (parse(cases[i].kind, cases[i].body, strlen(cases[i].body), &o, &p, &r, &pr, &err) != 0)
            fail_msg("case %zu refused: %s", i, err.message);
        const struct sku_rules *got = cases[i].kind == PATCH ? &pr.rules : &p.rules;
        if (cases[i].kind == PATCH)
            assert_int_equal(pr.fields, cases[i].fields);
        for (int j = 0; j < RULES_N; j++) /* every rule of rules_table.h */
            assert_int_equal(rules_get(got, j), rules_get(&cases[i].want, j));
    }
}

/* limit_group, rules_table.h's STR row: a name or "" taken as it is, its field bit set. */
static void test_rules_str_valid(void **state)
{
    (void)state;
    struct validate_order o;
    struct validate_put_sku p;
    struct validate_restock r;
    struct validate_patch_rules pr;
    struct validate_error err = {ERROR_NONE, ""};
    const char *b = "{\"limit_group\":\"style-123:x.y_z\"}";
    assert_int_equal(parse(PATCH, b, strlen(b), &o, &p, &r, &pr, &err), 0);
    assert_int_equal(pr.fields, RULES_BIT(limit_group));
    assert_string_equal(pr.rules.limit_group, "style-123:x.y_z");
    b = "{\"limit_group\":\"\"}";
    assert_int_equal(parse(PATCH, b, strlen(b), &o, &p, &r, &pr, &err), 0);
    assert_int_equal(pr.fields, RULES_BIT(limit_group));
    assert_string_equal(pr.rules.limit_group, "");
    b = "{\"stock\":1,\"segments\":1,\"limit_per_user\":2,\"limit_group\":\"g\"}";
    assert_int_equal(parse(PUT_SKU, b, strlen(b), &o, &p, &r, &pr, &err), 0);
    assert_string_equal(p.rules.limit_group, "g");
    assert_int_equal(p.rules.limit_per_user, 2);
    b = "{\"stock\":1,\"segments\":1}"; /* absent: none */
    assert_int_equal(parse(PUT_SKU, b, strlen(b), &o, &p, &r, &pr, &err), 0);
    assert_string_equal(p.rules.limit_group, "");
}

/* ---- hand-written tests ---------------------------------------------------------------- */

static void test_sku(void **state)
{
    (void)state;
    assert_true(validate_sku("A", 1));
    assert_true(validate_sku("abc-XYZ_0.9:1", 13));
    assert_true(validate_sku(sku64, 64));
    assert_false(validate_sku(sku64, 0));
    assert_false(validate_sku("", 0));
    assert_false(validate_sku(NULL, 0));
    char s65[66];
    memset(s65, 'a', 65);
    s65[65] = '\0';
    assert_false(validate_sku(s65, 65));
    assert_true(validate_sku(s65, 64)); /* only len bytes are looked at */
    assert_false(validate_sku("a b", 3));
    assert_false(validate_sku("a/b", 3));
    assert_false(validate_sku("a%2F", 4));
    assert_false(validate_sku("a\0b", 3));
    assert_false(validate_sku("caf\xc3\xa9", 5));
    assert_false(validate_sku("a+b", 3));
}

static void test_printable(void **state)
{
    (void)state;
    assert_true(validate_printable(" ", 1));
    assert_true(validate_printable("~!@#$%^&*()", 11));
    assert_true(validate_printable(user128, 128));
    assert_false(validate_printable(user128, 0));
    char u129[130];
    memset(u129, 'u', 129);
    assert_false(validate_printable(u129, 129));
    assert_false(validate_printable("a\tb", 3));
    assert_false(validate_printable("a\x7f", 2));
    assert_false(validate_printable("a\0", 2));
    assert_false(validate_printable("\xc3\xa9", 2));
    assert_false(validate_printable(NULL, 1));
}

static void test_content_type(void **state)
{
    (void)state;
    assert_true(validate_content_type("application/json"));
    assert_true(validate_content_type("Application/JSON"));
    assert_true(validate_content_type("application/json; charset=utf-8"));
    assert_true(validate_content_type("application/json;charset=UTF-8"));
    assert_true(validate_content_type("application/json; charset=\"utf-8\""));
    assert_true(validate_content_type("application/json ; foo=bar"));
    assert_true(validate_content_type(" application/json"));
    assert_false(validate_content_type(NULL));
    assert_false(validate_content_type(""));
    assert_false(validate_content_type("text/plain"));
    assert_false(validate_content_type("application/jsonx"));
    assert_false(validate_content_type("application/json-patch+json"));
    assert_false(validate_content_type("application/x-www-form-urlencoded"));
    assert_false(validate_content_type("application/json; charset=latin1"));
    assert_false(validate_content_type("application/json; charset"));
    assert_false(validate_content_type("application/json junk"));
    assert_false(validate_content_type("application/json; charset=\"utf-8"));
}

static void test_messages(void **state)
{
    (void)state;
    struct validate_order o;
    struct validate_error err;
    const char *b = "{\"sku\":\"A\",\"quantity\":1.0}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_string_equal(err.message, "quantity: must be an integer between 1 and 100, got 1.0");
    b = "{\"sku\":\"A\",\"quantity\":\"1\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_string_equal(err.message, "quantity: must be an integer between 1 and 100, got \"1\"");
    b = "{\"sku\":\"A\",\"quantity\":99999999999999999999}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_string_equal(err.message,
                        "quantity: must be an integer between 1 and 100, got 99999999999999999999");
    /* a waiting room's ticket: optional, a printable string shorter than TICKET_TEXT_MAX */
    b = "{\"sku\":\"A\",\"ticket\":\"t1.QQ.dQ.0.9.x\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), 0);
    assert_true(o.has_ticket);
    assert_string_equal(o.ticket, "t1.QQ.dQ.0.9.x");
    b = "{\"sku\":\"A\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), 0);
    assert_false(o.has_ticket);
    b = "{\"sku\":\"A\",\"ticket\":7}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_string_equal(err.message, "ticket: must be a waiting room's ticket: a string of 1 to "
                                     "799 printable ASCII characters, got 7");
    b = "{\"sku\":\"A\",\"ticket\":\"\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    b = "{\"sku\":\"A\",\"ticket\":\"a\\u0001b\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    char big[TICKET_TEXT_MAX + 64];
    snprintf(big, sizeof(big), "{\"sku\":\"A\",\"ticket\":\"%0*d\"}", TICKET_TEXT_MAX - 1, 0);
    assert_int_equal(validate_order_body(big, strlen(big), 100, &o, &err), 0);
    snprintf(big, sizeof(big), "{\"sku\":\"A\",\"ticket\":\"%0*d\"}", TICKET_TEXT_MAX, 0);
    assert_int_equal(validate_order_body(big, strlen(big), 100, &o, &err), -1);
    b = "{\"sku\":\"A\",\"sku\":\"B\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_string_equal(err.message, "sku: duplicate key");
    b = "{\"quantity\":2}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_string_equal(err.message, "sku: is required (a string matching [A-Za-z0-9_.:-]{1,64})");
    /* the configured maximum is the bound, both ways */
    b = "{\"sku\":\"A\",\"quantity\":6}";
    assert_int_equal(validate_order_body(b, strlen(b), 5, &o, &err), -1);
    assert_string_equal(err.message, "quantity: must be an integer between 1 and 5, got 6");
    assert_int_equal(validate_order_body(b, strlen(b), 6, &o, &err), 0);
    assert_int_equal(o.quantity, 6);
    /* a long offending value is cut, and non-ASCII is escaped */
    b = "{\"sku\":\"\\u00e9AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_non_null(strstr(err.message, "got \"\\u00E9AAA"));
    assert_non_null(strstr(err.message, "..."));
    assert_true(strlen(err.message) < 160);
    /* parse errors say where */
    b = "{\"sku\":\n\"A\",}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), -1);
    assert_non_null(strstr(err.message, "body: invalid JSON: "));
    assert_non_null(strstr(err.message, "line 2"));
    /* body size: exactly the limit is parsed, one more byte is refused as too large */
    static char at_limit[VALIDATE_MAX_BODY];
    memset(at_limit, ' ', sizeof(at_limit));
    memcpy(at_limit, "{\"sku\":\"A\"}", 11);
    assert_int_equal(validate_order_body(at_limit, sizeof(at_limit), 100, &o, &err), 0);
    assert_int_equal(validate_order_body(big_body, VALIDATE_MAX_BODY + 1, 100, &o, &err), -1);
    assert_int_equal(err.code, ERROR_BODY_TOO_LARGE);
    /* NULL body */
    assert_int_equal(validate_order_body(NULL, 0, 100, &o, &err), -1);
    assert_int_equal(err.code, ERROR_INVALID_REQUEST);
}

/* A cart's body (SPEC §17): validate_order_body only notes items; validate_cart_body parses it. */
static void test_cart(void **state)
{
    (void)state;
    struct validate_order o;
    struct validate_cart c;
    struct validate_error err;
    const char *b = "{\"items\":[{\"sku\":\"A\",\"quantity\":2},{\"sku\":\"B\",\"ticket\":"
                    "\"t1\"}],\"user_id\":\"u\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), 0);
    assert_true(o.is_cart);
    assert_int_equal(validate_cart_body(b, strlen(b), 100, &c, &err), 0);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.items[0].sku, "A");
    assert_int_equal(c.items[0].quantity, 2);
    assert_false(c.items[0].has_ticket);
    assert_int_equal(c.items[1].quantity, 1);
    assert_true(c.items[1].has_ticket);
    assert_string_equal(c.items[1].ticket, "t1");
    assert_true(c.has_user_id);
    assert_string_equal(c.user_id, "u");
    /* a one-SKU body is not a cart */
    b = "{\"sku\":\"A\"}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), 0);
    assert_false(o.is_cart);
    b = "{\"items\":[{\"sku\":\"A\"},{\"sku\":\"A\"}]}";
    assert_int_equal(validate_cart_body(b, strlen(b), 100, &c, &err), -1);
    assert_int_equal(err.code, ERROR_DUPLICATE_SKU);
    assert_string_equal(err.message, "items[1].sku: A is already items[0]");
    b = "{\"sku\":\"A\",\"items\":[{\"sku\":\"B\"}]}";
    assert_int_equal(validate_order_body(b, strlen(b), 100, &o, &err), 0);
    assert_int_equal(validate_cart_body(b, strlen(b), 100, &c, &err), -1);
    assert_int_equal(err.code, ERROR_ITEMS_AND_SKU);
    b = "{\"items\":[{\"sku\":\"A\",\"quantity\":6}]}";
    assert_int_equal(validate_cart_body(b, strlen(b), 5, &c, &err), -1);
    assert_int_equal(err.code, ERROR_INVALID_REQUEST);
    assert_string_equal(err.message,
                        "items[0].quantity: must be an integer between 1 and 5, got 6");
    b = "{\"items\":[{\"quantity\":1}]}";
    assert_int_equal(validate_cart_body(b, strlen(b), 5, &c, &err), -1);
    assert_string_equal(err.message,
                        "items[0].sku: is required (a string matching [A-Za-z0-9_.:-]{1,64})");
    const char *bad[] = {"{\"items\":[]}", "{\"items\":{}}", "{\"items\":[7]}", "{\"items\":null}",
                         "{\"items\":[{\"sku\":\"A\"}],\"user_id\":7}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(validate_cart_body(bad[i], strlen(bad[i]), 5, &c, &err), -1);
        assert_int_equal(err.code, ERROR_INVALID_REQUEST);
    }
    char many[1024] = "{\"items\":[";
    for (int i = 0; i <= VALIDATE_CART_MAX; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s{\"sku\":\"S%d\"}",
                 i ? "," : "", i);
    strcat(many, "]}");
    assert_int_equal(validate_cart_body(many, strlen(many), 5, &c, &err), -1);
    assert_string_equal(err.message, "items: must be an array of 1 to 10 items");
}

int main(void)
{
    make_buffers();
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_sku),
        cmocka_unit_test(test_rules_valid),
        cmocka_unit_test(test_rules_str_valid),
        cmocka_unit_test(test_printable),
        cmocka_unit_test(test_content_type),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_cart),
    };
    size_t nfixed = sizeof(fixed) / sizeof(fixed[0]);
    size_t n = nfixed + NINVALID + NVALID;
    struct CMUnitTest *tests = calloc(n, sizeof(*tests));
    static char names[NINVALID + NVALID][96];
    assert_non_null(tests);
    memcpy(tests, fixed, sizeof(fixed));
    size_t t = nfixed;
    for (size_t i = 0; i < NINVALID; i++, t++) {
        snprintf(names[t - nfixed], sizeof(names[0]), "invalid[%zu] %s", i, invalid[i].name);
        tests[t].name = names[t - nfixed];
        tests[t].test_func = test_invalid_case;
        tests[t].initial_state = (void *)&invalid[i];
    }
    for (size_t i = 0; i < NVALID; i++, t++) {
        snprintf(names[t - nfixed], sizeof(names[0]), "valid[%zu] %s", i, valid[i].name);
        tests[t].name = names[t - nfixed];
        tests[t].test_func = test_valid_case;
        tests[t].initial_state = (void *)&valid[i];
    }
    int failed = _cmocka_run_group_tests("validate", tests, n, NULL, NULL);
    free(tests);
    return failed;
}
