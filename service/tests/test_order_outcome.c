/*
 * Unit tests of the order outcome table (service/src/order/outcome_table.h, order_outcome.h):
 * its rows' columns agree with each other and with errors.c (a refusal is a 4xx, a retry a 503
 * with Retry-After, a message the error already says is not written again); the answer and the
 * metric order_outcome_respond makes of each row; the commit script's replies (every
 * STORE_COMMIT_* code of store_scripts.h, through order_walk_commit_verdict) lead where the rows
 * say; and the docs: docs/api.md's table of order answers, its POST /api/v1/orders row and its
 * inventory_orders_total labels, and docs/openapi.yaml's OrderConflict and OrderUnavailable
 * enums say what the rows say. Each doc check also runs on a drifted copy and must find it.
 * Takes well under a second.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "errors.h"
#include "metrics.h"
#include "order_idem.h"
#include "order_outcome.h"
#include "order_walk.h"
#include "request.h"
#include "router.h"
#include "store_scripts.h"
#include "tree_text.h"

static int has_error(const struct order_outcome_row *r)
{
    return r->error != ERROR_NONE;
}

/* The columns agree with each other and with errors.c. */
static void test_outcome_rows(void **state)
{
    (void)state;
    unsigned settles = 0, ends = 0;
    for (int i = 0; i < OUT_N; i++) {
        const struct order_outcome_row *r = &order_outcome_rows[i];
        assert_non_null(r->name);
        assert_ptr_equal(order_outcome_row((enum order_outcome)i), r);
        int status = error_http_status(r->error);
        switch (r->fate) {
        case OF_PLACED: /* answered with the order: its status leads the extra ("201: ...") */
            assert_false(has_error(r));
            assert_true(strncmp(r->extra, "201: ", 5) == 0 || strncmp(r->extra, "200: ", 5) == 0);
            break;
        case OF_REFUSED:
            if (status < 400 || status > 499 || error_retry_after(r->error))
                fail_msg("%s: a refusal answers %d", r->name, status);
            break;
        case OF_MAYBE:
        case OF_RETRY:
            if (status != 503 || !error_retry_after(r->error))
                fail_msg("%s: a retry answers %d", r->name, status);
            break;
        case OF_KEY: assert_false(has_error(r)); break;
        default: fail_msg("%s: fate %d", r->name, (int)r->fate);
        }
        assert_int_equal(order_outcome_final((enum order_outcome)i),
                         r->fate == OF_PLACED || r->fate == OF_REFUSED);
        assert_int_equal(order_outcome_retryable((enum order_outcome)i),
                         r->fate == OF_MAYBE || r->fate == OF_RETRY);
        assert_int_equal(order_outcome_refusal((enum order_outcome)i), r->fate == OF_REFUSED);
        /* a message only for an error, never the one errors.c has for it (written once) */
        if (r->message &&
            (!has_error(r) || strcmp(r->message, error_default_message(r->error)) == 0))
            fail_msg("%s: message \"%s\" (NULL says the error's own)", r->name, r->message);
        if (has_error(r))
            assert_non_null(order_outcome_message((enum order_outcome)i));
        assert_true(r->metric < METRICS_ORDER_RESULT_COUNT || r->fate == OF_KEY);
        assert_true(r->idem == IDEM_FINAL_ORDER || r->idem == IDEM_FINAL_DELETE ||
                    r->idem == IDEM_FINAL_LEAVE);
        /* a segment's result leads to one outcome, settling or ending */
        assert_int_equal(settles & r->settles, 0);
        assert_int_equal(ends & r->ends, 0);
        settles |= r->settles;
        ends |= r->ends;
        /* a reply leads to a segment result (SEG_UNKNOWN is a reply lost, not one) */
        assert_true(!r->replies || (r->settles | r->ends) != 0);
    }
    assert_int_equal(settles & ends, 0);
    assert_int_equal(order_outcome_metric(OUT_CREATED, 1), METRICS_ORDER_RESERVED);
    assert_int_equal(order_outcome_metric(OUT_CREATED, 0), METRICS_ORDER_CREATED);
    assert_int_equal(order_outcome_metric(OUT_REPLAYED, 1), METRICS_ORDER_REPLAYED);
    assert_ptr_equal(order_outcome_row(OUT_N), &order_outcome_rows[OUT_UNAVAILABLE]);
}

/* The counter of result="label" in a metrics render. */
static unsigned long long order_count(const char *label)
{
    char *doc = metrics_render(router_label);
    assert_non_null(doc);
    char key[80];
    snprintf(key, sizeof(key), "inventory_orders_total{result=\"%s\"} ", label);
    const char *at = strstr(doc, key);
    assert_non_null(at);
    unsigned long long n = strtoull(at + strlen(key), NULL, 10);
    free(doc);
    return n;
}

/* What order_outcome_respond answers and counts for each row. */
static void test_respond(void **state)
{
    (void)state;
    for (int i = 0; i < OUT_N; i++) {
        const struct order_outcome_row *r = &order_outcome_rows[i];
        for (int hold = 0; hold <= 1; hold++) {
            const char *label = r->metric < METRICS_ORDER_RESULT_COUNT
                                    ? metrics_order_label(order_outcome_metric(i, hold))
                                    : "created";
            unsigned long long before = order_count(label);
            struct response res = {0};
            order_outcome_respond(&res, (enum order_outcome)i, hold);
            assert_int_equal(order_count(label) - before, r->metric < METRICS_ORDER_RESULT_COUNT);
            if (!has_error(r)) {
                assert_int_equal(res.status, 0); /* the caller answers with the order */
                assert_null(res.body);
                continue;
            }
            assert_int_equal(res.status, error_http_status(r->error));
            assert_string_equal(json_string_value(json_object_get(res.body, "error")),
                                error_code_string(r->error));
            assert_string_equal(json_string_value(json_object_get(res.body, "message")),
                                r->message ? r->message : error_default_message(r->error));
            assert_int_equal(json_object_size(res.body), 2);
            assert_int_equal(res.retry_after > 0, error_retry_after(r->error));
            response_free(&res);
        }
    }
    assert_string_equal(order_outcome_message(OUT_ENDED), "the sale has ended");
}

/* store_scripts.h's STORE_COMMIT_<NAME> <code> lines (not the ARGV positions). */
static int commit_codes(const char *h, long long *codes, char names[][40], int max)
{
    int n = 0;
    for (const char *p = h; (p = strstr(p, "#define STORE_COMMIT_")) != NULL; p++) {
        const char *name = p + strlen("#define ");
        size_t len = strcspn(name, " ");
        if (strncmp(name, "STORE_COMMIT_ARG_", 17) == 0 ||
            strncmp(name, "STORE_COMMIT_NARGS", 18) == 0 ||
            strncmp(name, "STORE_COMMIT_ATOMIC", 19) == 0)
            continue;
        const char *v = name + len + strspn(name + len, " (");
        char *end;
        long long c = strtoll(v, &end, 10);
        if (end == v)
            continue; /* a macro of another kind */
        assert_true(n < max && len < 40);
        snprintf(names[n], 40, "%.*s", (int)len, name);
        codes[n++] = c;
    }
    return n;
}

static struct seg_verdict verdict(long long code, long long value)
{
    redisReply e0 = {.type = REDIS_REPLY_INTEGER, .integer = code};
    redisReply e1 = {.type = REDIS_REPLY_INTEGER, .integer = value};
    redisReply *el[2] = {&e0, &e1};
    redisReply r = {.type = REDIS_REPLY_ARRAY, .elements = 2, .element = el};
    struct seg_verdict v;
    order_walk_commit_verdict(&r, &v);
    return v;
}

/* Every reply of the commit script leads where the rows say: a row's reply gives one of its
 * segment results (for some stock left), a reply no row names only makes the order read its
 * layout or rules again. */
static void test_replies(void **state)
{
    (void)state;
    char *h = tree_text("service/src/store/store_scripts.h");
    long long codes[32];
    char names[32][40];
    int nc = commit_codes(h, codes, names, 32);
    assert_true(nc >= 10);
    unsigned all = 0;
    for (int c = 0; c < nc; c++) {
        unsigned bit = OUTCOME_REPLY(codes[c]);
        all |= bit;
        int listed = 0;
        for (int i = 0; i < OUT_N; i++) {
            const struct order_outcome_row *r = &order_outcome_rows[i];
            if (!(r->replies & bit))
                continue;
            listed = 1;
            int found = 0;
            for (long long value = 0; value <= 3; value++) {
                struct seg_verdict v = verdict(codes[c], value);
                found |= !v.differs && ((r->settles | r->ends) & OUTCOME_SEG(v.r));
            }
            if (!found)
                fail_msg("%s lists %s: no stock left makes it one of its results", r->name,
                         names[c]);
        }
        for (long long value = 0; value <= 3; value++) {
            struct seg_verdict v = verdict(codes[c], value);
            int retried = v.differs || v.r == SEG_STALE;
            if (listed == retried)
                fail_msg("%s (%lld left): %s", names[c], value,
                         retried ? "re-reads, yet a row lists it" : "a result no row lists it for");
            if (retried)
                continue;
            int named = 0; /* the result it gives is a row's that lists it */
            for (int i = 0; i < OUT_N; i++)
                named |= (order_outcome_rows[i].replies & bit) &&
                         ((order_outcome_rows[i].settles | order_outcome_rows[i].ends) &
                          OUTCOME_SEG(v.r));
            if (!named)
                fail_msg("%s (%lld left): result %d, in no row listing it", names[c], value,
                         (int)v.r);
        }
    }
    for (int i = 0; i < OUT_N; i++) /* every reply a row names is the script's */
        assert_int_equal(order_outcome_rows[i].replies & ~all, 0);
    free(h);
}

/* docs/api.md's row of outcome i: | status | `error` | "message" | also | `result` | order |. */
static void api_row(int i, char *want, size_t size)
{
    const struct order_outcome_row *r = &order_outcome_rows[i];
    static const char *const fates[] = {
        [OF_PLACED] = "placed",
        [OF_MAYBE] = "may have been placed: retry with the same Idempotency-Key",
        [OF_REFUSED] = "refused: nothing changed",
        [OF_RETRY] = "nothing changed: retry",
    };
    char status[8], error[64] = "—", message[300] = "—", also[200], result[80];
    const char *extra = r->extra;
    if (has_error(r)) {
        snprintf(status, sizeof(status), "%d", error_http_status(r->error));
        snprintf(error, sizeof(error), "`%s`", error_code_string(r->error));
        snprintf(message, sizeof(message), "\"%s\"", order_outcome_message(i));
    } else { /* "201: the order, ..." */
        snprintf(status, sizeof(status), "%.3s", extra);
        extra += 5;
    }
    snprintf(also, sizeof(also), "%s%s%s", extra,
             extra[0] && error_retry_after(r->error) ? ", " : "",
             error_retry_after(r->error) ? "`Retry-After`" : "");
    if (!also[0])
        snprintf(also, sizeof(also), "—");
    snprintf(result, sizeof(result), "`%s`%s", metrics_order_label(r->metric),
             i == OUT_CREATED ? " (`reserved`: a hold)" : "");
    snprintf(want, size, "| %s | %s | %s | %s | %s | %s |", status, error, message, also, result,
             fates[r->fate]);
}

/*
 * docs/api.md "### What an order gets back": one row per outcome in the table's order; an
 * outcome answered as the one before it (OUT_SOLD_OUT_FAST) shares its row, and the key step's
 * own answers (OF_KEY) are "Idempotency-Key"'s. Returns the number of differences (printed).
 */
static int api_table_check(const char *doc)
{
    const char *sec = strstr(doc, "\n### What an order gets back");
    if (!sec) {
        print_error("docs/api.md: no \"### What an order gets back\"\n");
        return 1;
    }
    const char *line = strstr(sec, "\n|---");
    if (!line)
        return 1;
    line = strchr(line + 1, '\n');
    int failures = 0;
    char want[600], prev[600] = "";
    for (int i = 0; i < OUT_N; i++) {
        if (order_outcome_rows[i].fate == OF_KEY)
            continue;
        api_row(i, want, sizeof(want));
        if (strcmp(want, prev) == 0)
            continue;
        snprintf(prev, sizeof(prev), "%s", want);
        if (!line || line[1] != '|') {
            print_error("docs/api.md: no row for %s: \"%s\"\n", order_outcome_rows[i].name, want);
            failures++;
            continue;
        }
        const char *eol = strchr(line + 1, '\n');
        int len = eol ? (int)(eol - line - 1) : (int)strlen(line + 1);
        if ((int)strlen(want) != len || strncmp(want, line + 1, (size_t)len) != 0) {
            print_error("docs/api.md: %s's row \"%.*s\", outcome_table.h says \"%s\"\n",
                        order_outcome_rows[i].name, len, line + 1, want);
            failures++;
        }
        line = eol;
    }
    if (line && line[1] == '|') {
        print_error("docs/api.md: a row no outcome has: %.*s\n", (int)strcspn(line + 1, "\n"),
                    line + 1);
        failures++;
    }
    return failures;
}

/* The line of doc that starts with start (NULL: none); its length in *len. */
static const char *doc_line(const char *doc, const char *start, int *len)
{
    const char *at = strstr(doc, start);
    if (at)
        *len = (int)strcspn(at, "\n");
    return at;
}

/* docs/api.md's POST /api/v1/orders row names every outcome's error, and its
 * inventory_orders_total row every result label (metrics.h). */
static int api_lists_check(const char *doc)
{
    int failures = 0, len = 0;
    const char *row = doc_line(doc, "| `POST /api/v1/orders` |", &len);
    for (int i = 0; row && i < OUT_N; i++) {
        const struct order_outcome_row *r = &order_outcome_rows[i];
        char want[64];
        snprintf(want, sizeof(want), "`%s`", error_code_string(r->error));
        char *copy = strndup(row, (size_t)len);
        if (has_error(r) && !strstr(copy, want)) {
            print_error("docs/api.md: the POST /api/v1/orders row lacks %s (%s)\n", want, r->name);
            failures++;
        }
        free(copy);
    }
    const char *m = doc_line(doc, "| `inventory_orders_total{result}` |", &len);
    for (int i = 0; m && i < METRICS_ORDER_RESULT_COUNT; i++) {
        char want[64];
        snprintf(want, sizeof(want), "`%s`", metrics_order_label(i));
        char *copy = strndup(m, (size_t)len);
        if (!strstr(copy, want)) {
            print_error("docs/api.md: inventory_orders_total lacks the label %s\n", want);
            failures++;
        }
        free(copy);
    }
    return failures + !row + !m;
}

static void test_api_answers(void **state)
{
    (void)state;
    char *doc = tree_text("docs/api.md");
    assert_int_equal(api_table_check(doc), 0);
    assert_int_equal(api_lists_check(doc), 0);
    /* drifted copies: a message changed, a row dropped, a label and an error not listed */
    char *bad = tree_drift(doc, "| \"the sale has ended\" |", "| \"the sale is over\" |");
    assert_int_equal(api_table_check(bad), 1);
    free(bad);
    bad = tree_drift(doc,
                     "| 409 | `sale_ended` | \"the sale has ended\" | — | `sale_ended` | refused: "
                     "nothing changed |\n",
                     "");
    assert_true(api_table_check(bad) > 0);
    free(bad);
    bad = tree_drift(doc, "`sale_not_started`, `sale_ended`, `user_required`, and",
                     "`sale_not_started`, `user_required`, and");
    assert_int_equal(api_lists_check(bad), 1);
    free(bad);
    bad = tree_drift(doc, "`limit_exceeded` / `sale_not_started`", "`sale_not_started`");
    assert_int_equal(api_lists_check(bad), 1);
    free(bad);
    free(doc);
}

/* docs/openapi.yaml: the enum of `error` in components/schemas/<schema> is the set of the
 * wire codes of the outcomes answering status. */
static int openapi_enum_check(const char *doc, const char *schema, int status)
{
    char head[80];
    snprintf(head, sizeof(head), "\n    %s:\n", schema);
    const char *s = strstr(doc, head);
    const char *e = s ? strstr(s, "error: {enum: [") : NULL;
    if (!e) {
        print_error("docs/openapi.yaml: no %s with an error enum\n", schema);
        return 1;
    }
    e += strlen("error: {enum: [");
    char list[400];
    snprintf(list, sizeof(list), "%.*s", (int)strcspn(e, "]"), e);
    int failures = 0;
    for (int i = 0; i < OUT_N; i++) {
        const struct order_outcome_row *r = &order_outcome_rows[i];
        if (!has_error(r) || error_http_status(r->error) != status)
            continue;
        const char *w = error_code_string(r->error);
        int found = 0;
        for (const char *p = list; *p; p += strspn(p, ", ")) {
            size_t n = strcspn(p, ", ");
            found |= n == strlen(w) && strncmp(p, w, n) == 0;
            p += n;
        }
        if (!found) {
            print_error("docs/openapi.yaml: %s's error enum lacks %s (%s)\n", schema, w, r->name);
            failures++;
        }
    }
    for (const char *p = list; *p; p += strspn(p, ", ")) { /* and no code no outcome answers */
        size_t n = strcspn(p, ", ");
        int answered = 0;
        for (int i = 0; i < OUT_N; i++) {
            const struct order_outcome_row *r = &order_outcome_rows[i];
            const char *w = error_code_string(r->error);
            answered |= has_error(r) && error_http_status(r->error) == status && n == strlen(w) &&
                        strncmp(p, w, n) == 0;
        }
        if (!answered) {
            print_error("docs/openapi.yaml: %s's error enum names %.*s, no outcome's\n", schema,
                        (int)n, p);
            failures++;
        }
        p += n;
    }
    return failures;
}

static void test_openapi(void **state)
{
    (void)state;
    char *doc = tree_text("docs/openapi.yaml");
    assert_int_equal(openapi_enum_check(doc, "OrderConflict", 409), 0);
    assert_int_equal(openapi_enum_check(doc, "OrderUnavailable", 503), 0);
    assert_int_equal(openapi_enum_check(doc, "OrderForbidden", 403), 0);
    char *bad = tree_drift(doc, "ticket_wrong_user, ticket_wrong_sku]}", "ticket_wrong_user]}");
    assert_int_equal(openapi_enum_check(bad, "OrderForbidden", 403), 1);
    free(bad);
    bad = tree_drift(doc, "limit_exceeded, sale_not_started, sale_ended, ticket_used]}",
                     "limit_exceeded, sale_not_started, ticket_used]}");
    assert_int_equal(openapi_enum_check(bad, "OrderConflict", 409), 1);
    free(bad);
    bad = tree_drift(doc, "error: {enum: [unavailable, lock_timeout]}",
                     "error: {enum: [unavailable]}");
    assert_int_equal(openapi_enum_check(bad, "OrderUnavailable", 503), 1);
    free(bad);
    bad = tree_drift(doc, "error: {enum: [unavailable, lock_timeout]}",
                     "error: {enum: [unavailable, lock_timeout, internal]}");
    assert_int_equal(openapi_enum_check(bad, "OrderUnavailable", 503), 1);
    free(bad);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcome_rows), cmocka_unit_test(test_respond),
        cmocka_unit_test(test_replies),      cmocka_unit_test(test_api_answers),
        cmocka_unit_test(test_openapi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
