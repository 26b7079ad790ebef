/*
 * Unit tests of queue_pow_verify_request (service/src/sku/queue_pow.c), the join's check of its
 * body's "pow" member, with a real queue key and real challenges (pow.c): no proof asked (bits
 * 0), absent, not an object of two strings, each refusal pow_verify gives mapped to its HTTP
 * answer (403 pow_invalid with the reason, 403 pow_expired), no key on the instance (503), and
 * a solved challenge accepted (twice: a replay is allowed). Well under a second.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "app.h"
#include "pow.h"
#include "queue_pow.h"
#include "ticket.h"

static struct ticket_key key = {.len = 40};
static struct app app;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Checks pow on (sku, user) at bits; the status (0 when let through) and the error code. */
static int check(const char *sku, const char *user, int bits, json_t *pow, const char **code)
{
    static char last[64];
    struct response res;
    memset(&res, 0, sizeof(res));
    int rc = queue_pow_verify_request(&app, sku, user, bits, pow, &res);
    int status = rc == 0 ? 0 : res.status;
    assert_true((rc == 0) == (res.status == 0));
    snprintf(last, sizeof(last), "%s",
             res.body ? json_string_value(json_object_get(res.body, "error")) : "");
    *code = last;
    response_free(&res);
    json_decref(pow);
    return status;
}

static json_t *answer(const char *challenge, const char *nonce)
{
    return json_pack("{s:s, s:s}", "challenge", challenge, "nonce", nonce);
}

static void test_queue_pow_check(void **state)
{
    (void)state;
    memcpy(key.bytes, "queue-pow-unit-test-key-0123456789abcdef", 40);
    app.queue_key = &key;
    const char *code;
    char c[POW_CHALLENGE_MAX], nonce[POW_NONCE_MAX + 1], weak[POW_NONCE_MAX + 1];
    assert_true(pow_mint(key.bytes, key.len, "SKU-1", "alice", wall_ms(), 6, c, sizeof(c)) > 0);
    assert_true(pow_solve(c, 6, 0, 1u << 24, nonce) > 0);
    for (int i = 0;; i++) {
        snprintf(weak, sizeof(weak), "w%d", i);
        if (pow_work_bits(c, weak) < 6)
            break;
    }
    /* no proof asked: anything goes */
    assert_int_equal(check("SKU-1", "alice", 0, NULL, &code), 0);
    assert_int_equal(check("SKU-1", "alice", 0, json_string("junk"), &code), 0);
    /* solved: through, and again */
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, nonce), &code), 0);
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, nonce), &code), 0);
    assert_int_equal(check("SKU-1", "alice", 4, answer(c, nonce), &code), 0);
    /* absent */
    assert_int_equal(check("SKU-1", "alice", 6, NULL, &code), 403);
    assert_string_equal(code, "pow_required");
    assert_int_equal(check("SKU-1", "alice", 6, json_null(), &code), 403);
    assert_string_equal(code, "pow_required");
    /* not {challenge, nonce} strings */
    json_t *bad[] = {json_string(c), json_pack("{s:s}", "challenge", c),
                     json_pack("{s:s, s:i}", "challenge", c, "nonce", 5),
                     json_pack("{s:s, s:s, s:s}", "challenge", c, "nonce", nonce, "x", "y")};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(check("SKU-1", "alice", 6, bad[i], &code), 400);
        assert_string_equal(code, "invalid_request");
    }
    /* each refusal */
    assert_int_equal(check("SKU-1", "alice", 6, answer("p1.x", nonce), &code), 403);
    assert_string_equal(code, "pow_invalid");
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, ""), &code), 403);
    assert_string_equal(code, "pow_invalid");
    assert_int_equal(check("SKU-1", "bob", 6, answer(c, nonce), &code), 403);
    assert_string_equal(code, "pow_invalid");
    assert_int_equal(check("SKU-2", "alice", 6, answer(c, nonce), &code), 403);
    assert_string_equal(code, "pow_invalid");
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, weak), &code), 403);
    assert_string_equal(code, "pow_invalid");
    assert_int_equal(check("SKU-1", "alice", 7, answer(c, nonce), &code), 403);
    assert_string_equal(code, "pow_invalid");
    char old[POW_CHALLENGE_MAX], on[POW_NONCE_MAX + 1];
    assert_true(pow_mint(key.bytes, key.len, "SKU-1", "alice", wall_ms() - POW_TTL_MS - 5000, 2,
                         old, sizeof(old)) > 0);
    assert_true(pow_solve(old, 2, 0, 1u << 20, on) > 0);
    assert_int_equal(check("SKU-1", "alice", 2, answer(old, on), &code), 403);
    assert_string_equal(code, "pow_expired");
    /* another key signed it */
    struct ticket_key other = key;
    other.bytes[0] ^= 1;
    app.queue_key = &other;
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, nonce), &code), 403);
    assert_string_equal(code, "pow_invalid");
    /* no key on this instance */
    struct ticket_key none = {.len = 0};
    app.queue_key = &none;
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, nonce), &code), 503);
    assert_string_equal(code, "unavailable");
    app.queue_key = NULL;
    assert_int_equal(check("SKU-1", "alice", 6, answer(c, nonce), &code), 503);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_queue_pow_check)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
