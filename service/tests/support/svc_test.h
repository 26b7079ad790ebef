/*
 * Assertions shared by the service's integration tests (header-only, all static inline): each
 * failure prints what was expected, what came (the response body, the invariant report) and
 * the log tail of every inventoryd the test runs, then fails the cmocka test. SF_RUN_GROUP_TESTS
 * runs a test file's group so that its teardown (which checks how the services exited) counts.
 *
 * cmocka assertions longjmp: call these from the test's main thread only. Worker threads
 * record what they saw and the main thread asserts afterwards.
 */
#ifndef SVC_TESTS_SVC_TEST_H
#define SVC_TESTS_SVC_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_fixture.h"

#define SF_LOG_TAIL 25

static inline void sf_fail_at(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prints the services' log tails, then fails with "file:line: what: <fmt...>". */
static inline void sf_fail_at(const char *file, int line, const char *what, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sf_print_all_logs(SF_LOG_TAIL);
    fail_msg("%s:%d: %s: %s", file, line, what, msg);
}

/* SF_ASSERT(cond, fmt, args...): fails with the formatted context unless cond holds. */
#define SF_ASSERT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            sf_fail_at(__FILE__, __LINE__, "check failed: " #cond, __VA_ARGS__);                   \
    } while (0)

/* Fails unless the response has status want; prints the response. */
#define SF_ASSERT_STATUS(resp, want)                                                               \
    do {                                                                                           \
        const sf_resp *sf_r_ = (resp);                                                             \
        int sf_w_ = (want);                                                                        \
        if (sf_r_->status != sf_w_)                                                                \
            sf_fail_at(__FILE__, __LINE__, "unexpected response", "expected HTTP %d, got %s",      \
                       sf_w_, sf_resp_summary(sf_r_));                                             \
    } while (0)

/* Fails unless the response is the SPEC §5 error body {"error": code, "message": "<text>"}
 * (exactly those two members, a non-empty message) with status want. */
#define SF_ASSERT_ERROR(resp, want, code)                                                          \
    sf_assert_error_at(__FILE__, __LINE__, (resp), (want), (code))

static inline void sf_assert_error_at(const char *file, int line, const sf_resp *r, int want,
                                      const char *code)
{
    if (r->status != want)
        sf_fail_at(file, line, "unexpected response", "expected HTTP %d %s, got %s", want, code,
                   sf_resp_summary(r));
    const char *ctype = sf_header(r, "Content-Type");
    if (ctype == NULL || strncmp(ctype, "application/json", 16) != 0)
        sf_fail_at(file, line, "error body", "Content-Type %s, expected application/json",
                   ctype ? ctype : "(none)");
    const char *msg = json_string_value(json_object_get(r->json, "message"));
    if (!json_is_object(r->json) || json_object_size(r->json) != 2 ||
        strcmp(sf_error_code(r), code) != 0 || msg == NULL || msg[0] == '\0')
        sf_fail_at(file, line, "error body",
                   "expected {\"error\": \"%s\", \"message\": \"...\"}, got %s", code,
                   sf_resp_summary(r));
}

/* Runs the invariant checker on sku and fails (printing the report) unless every check
 * passed. Fills *rep for further comparisons. */
#define SF_ASSERT_INVARIANTS(url, sku, rep)                                                        \
    sf_assert_invariants_at(__FILE__, __LINE__, (url), (sku), (rep))

/* SF_ASSERT_INVARIANTS with sf_check_invariants_quiescent: no follow queued, no intent left. */
#define SF_ASSERT_QUIESCENT(url, sku, rep)                                                         \
    sf_assert_invariants_at_q(__FILE__, __LINE__, (url), (sku), (rep), 1)
#define sf_assert_invariants_at(file, line, url, sku, rep)                                         \
    sf_assert_invariants_at_q((file), (line), (url), (sku), (rep), 0)

static inline void sf_assert_invariants_at_q(const char *file, int line, const char *url,
                                             const char *sku, sf_report *rep, int quiescent)
{
    int rc = quiescent ? sf_check_invariants_quiescent(url, sku, rep)
                       : sf_check_invariants(url, sku, rep);
    if (rc != 0 || !rep->ok) {
        sf_report_print(sku, rep);
        sf_fail_at(file, line, "invariants", "SKU %s: %d problem(s), first: %.300s", sku,
                   rep->nproblems, rep->problems);
    }
}

/* The string member key of obj, or "(missing)" when absent or not a string: safe to strcmp. */
static inline const char *sf_str(const json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v != NULL ? v : "(missing)";
}

/* Fails unless a == b, naming both expressions. */
#define SF_ASSERT_EQ(a, b)                                                                         \
    do {                                                                                           \
        long long sf_a_ = (long long)(a), sf_b_ = (long long)(b);                                  \
        if (sf_a_ != sf_b_)                                                                        \
            sf_fail_at(__FILE__, __LINE__, "not equal", "%s = %lld, %s = %lld", #a, sf_a_, #b,     \
                       sf_b_);                                                                     \
    } while (0)

/* Fails unless the response is a 503 unavailable whose body says "outcome": "unknown" (the
 * change may have been made). */
#define SF_ASSERT_OUTCOME_UNKNOWN(resp) sf_assert_outcome_unknown_at(__FILE__, __LINE__, (resp))

static inline void sf_assert_outcome_unknown_at(const char *file, int line, const sf_resp *r)
{
    if (r->status != 503 || strcmp(sf_error_code(r), "unavailable") != 0 ||
        strcmp(sf_str(r->json, "outcome"), "unknown") != 0)
        sf_fail_at(file, line, "unexpected response",
                   "a 503 with \"outcome\":\"unknown\" was expected: %s", sf_resp_summary(r));
}

/* PUT /api/v1/skus/{sku} {"stock", "segments"} on port with the admin token (NULL: none);
 * fails unless the answer is 201 or 200 with a version. Returns the version. */
#define SF_PUT_SKU(port, token, sku, stock, segments)                                              \
    sf_put_sku_at(__FILE__, __LINE__, (port), (token), (sku), (stock), (segments))

static inline long long sf_put_sku_at(const char *file, int line, int port, const char *token,
                                      const char *sku, long long stock, int segments)
{
    sf_resp r = {0};
    int st = sf_put_sku(port, token, sku, stock, segments, &r);
    long long v = sf_json_int(r.json, "version", -1);
    if ((st != 201 && st != 200) || v < 1)
        sf_fail_at(file, line, "PUT", "%s: %s", sku, sf_resp_summary(&r));
    sf_resp_free(&r);
    return v;
}

/* Segment k's stock read from the group's Redis (gf_redis), or RF_NOT_INTEGER when it cannot
 * be read. */
static inline long long sf_seg_stock(const char *sku, int k)
{
    char buf[32], *end;
    if (rf_string(gf_redis, buf, sizeof buf, "GET inv:2:{%s/%d}:stock", sku, k) != 1)
        return RF_NOT_INTEGER;
    long long v = strtoll(buf, &end, 10);
    return *end == '\0' && end != buf ? v : RF_NOT_INTEGER;
}

/* ---- running the group ---------------------------------------------------------------------- */

/* The group teardown SF_RUN_GROUP_TESTS wraps and what it returned. */
struct sf_group_ {
    CMFixtureFunction teardown;
    int teardown_rc;
};

static inline struct sf_group_ *sf_group_(void)
{
    static struct sf_group_ group;
    return &group;
}

static inline int sf_group_teardown_(void **state)
{
    struct sf_group_ *g = sf_group_();
    g->teardown_rc = g->teardown(state);
    return g->teardown_rc;
}

static inline int sf_run_group_tests_(const char *name, const struct CMUnitTest *tests,
                                      size_t count, CMFixtureFunction setup,
                                      CMFixtureFunction teardown)
{
    struct sf_group_ *g = sf_group_();
    g->teardown = teardown;
    g->teardown_rc = 0;
    int failed = _cmocka_run_group_tests(name, tests, count, setup,
                                         teardown != NULL ? sf_group_teardown_ : NULL);
    if (failed == 0 && g->teardown_rc != 0) {
        fprintf(stderr,
                "%s: the group teardown failed (an inventoryd did not exit with status 0 "
                "when stopped: its log is above)\n",
                name);
        return 1;
    }
    return failed;
}

/* cmocka_run_group_tests, except that a failing group teardown fails the run too: cmocka 1.1.5
 * prints "[  FAILED  ] GROUP TEARDOWN" but leaves it out of the count it returns. The group
 * teardowns are where sf_stop's status is checked, so without this an inventoryd that crashed
 * or that a sanitizer flagged (ThreadSanitizer exits 66) at the end of the group would pass. */
#define SF_RUN_GROUP_TESTS(tests, setup, teardown)                                                 \
    sf_run_group_tests_(#tests, (tests), sizeof(tests) / sizeof((tests)[0]), (setup), (teardown))

#endif /* SVC_TESTS_SVC_TEST_H */
