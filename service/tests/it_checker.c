/*
 * The invariant checker itself (tools/check/invcheck.c) on multi-segment orders (docs/design.md
 * "Orders larger than one segment", SPEC §8 "every part of a multi-segment order is sold or
 * none is"): a SKU's keys are written by hand into a real redis-server, no inventoryd, and the
 * checker must accept each good state and refuse each bad one — a part without its primary, a
 * primary missing a part, a part whose status disagrees with its primary's, parts whose
 * quantities do not sum to the order's, a part the primary does not list — while a part
 * lagging behind a queued follow and an orphan part under an intent pass the plain check and
 * fail the quiescent one. And the program inventory-check (tools/check/invcheck_main.c, what
 * loadtest/verify.sh and chaos.py run), the same code as a command: its JSON report and exit
 * status on a good state, a corrupted counter, stray keys of a dropped segment (those the key
 * schema's table keeps pass), a missing SKU, a Redis that is not there, bad usage and --live.
 * And a hold's due-set score must be its record's expires_at (an extension moves both).
 * About 1 s.
 */
#include "svc_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define CK_SKU "ck"
#define CK_HEX "0123456789abcdef0123456789abcdef"
#define CK_HEX2 "fedcba9876543210fedcba9876543210"
#define CK_STOCK 10 /* t of each of the 3 segments */

static rf_server *redis;

static int group_setup(void **state)
{
    (void)state;
    redis = rf_start(NULL);
    return redis ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    rf_stop(redis);
    redis = NULL;
    return 0;
}

/* Runs a command (redisCommand's format: JSON without spaces stays one argument) and fails
 * on an error reply. */
#define cmd(...) cmd_done(rf_command(redis, __VA_ARGS__), #__VA_ARGS__)
static void cmd_done(redisReply *r, const char *text)
{
    SF_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR, "%.300s: %s", text,
              r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

/* Sets a record (JSON without spaces, so that redisCommand's split keeps it one argument). */
static void record(int k, const char *id, const char *json)
{
    redisReply *r = rf_command(redis, "HSET inv:2:{" CK_SKU "/%d}:orders %s %s", k, id, json);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "HSET record %s", id);
    freeReplyObject(r);
}

/* Segment k's counters: live units s in o live records, r of them in holds. */
static void counters(int k, long long s, long long o, long long r)
{
    cmd("SET inv:2:{" CK_SKU "/%d}:stock %lld", k, CK_STOCK - s);
    cmd("HSET inv:2:{" CK_SKU "/%d}:cnt t %d s %lld o %lld r %lld", k, CK_STOCK, s, o, r);
}

/*
 * A good state: 3 segments of 10, limit 20; order A (user u1) of 12 units, created, in parts
 * 5 (segment 0, the primary), 4 (segment 1) and 3 (segment 2); order B (user u2), a hold of 2
 * in segment 1 alone.
 */
static void good_state(void)
{
    cmd("FLUSHALL");
    cmd("HSET inv:2:{" CK_SKU "}:meta version 7 segments 3 stock 30 state r hwm 3 limit 20");
    for (int k = 0; k < 3; k++)
        cmd("SET inv:2:{" CK_SKU "/%d}:sver 7", k);
    record(0, CK_HEX "-0-" CK_SKU,
           "{\"order_id\":\"" CK_HEX "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
           "\",\"segment\":0,\"quantity\":12,\"status\":\"created\",\"user_id\":\"u1\","
           "\"parts\":[{\"segment\":0,\"quantity\":5},{\"segment\":1,\"quantity\":4},"
           "{\"segment\":2,\"quantity\":3}],\"created_at\":\"2026-01-01T00:00:00.000Z\"}");
    record(1, CK_HEX "-1-" CK_SKU,
           "{\"order_id\":\"" CK_HEX "-1-" CK_SKU "\",\"part_of\":\"" CK_HEX "-0-" CK_SKU
           "\",\"sku\":\"" CK_SKU "\",\"segment\":1,\"quantity\":4,\"status\":\"created\","
           "\"created_at\":\"2026-01-01T00:00:00.000Z\"}");
    record(2, CK_HEX "-2-" CK_SKU,
           "{\"order_id\":\"" CK_HEX "-2-" CK_SKU "\",\"part_of\":\"" CK_HEX "-0-" CK_SKU
           "\",\"sku\":\"" CK_SKU "\",\"segment\":2,\"quantity\":3,\"status\":\"created\","
           "\"created_at\":\"2026-01-01T00:00:00.000Z\"}");
    record(1, CK_HEX2 "-1-" CK_SKU,
           "{\"order_id\":\"" CK_HEX2 "-1-" CK_SKU "\",\"sku\":\"" CK_SKU
           "\",\"segment\":1,\"quantity\":2,\"status\":\"reserved\",\"user_id\":\"u2\","
           "\"expires_at\":\"2030-01-01T00:00:00.000Z\","
           "\"created_at\":\"2026-01-01T00:00:00.000Z\"}");
    cmd("ZADD inv:2:{" CK_SKU "/1}:due 1893456000000 " CK_HEX2 "-1-" CK_SKU);
    counters(0, 5, 1, 0);
    counters(1, 6, 1, 2); /* o counts orders: the hold, not the part */
    counters(2, 3, 0, 0);
    cmd("HSET inv:2:{" CK_SKU "}:users u1 {\"" CK_HEX "\":[12,0,0]} u2 {\"" CK_HEX2 "\":[2,0,1]}");
}

/* Checks; fails unless the outcome is as wanted (printing the report when not). */
static void judge(int quiescent, int want_ok, const char *what)
{
    sf_report rep;
    int rc = quiescent ? sf_check_invariants_quiescent(rf_url(redis), CK_SKU, &rep)
                       : sf_check_invariants(rf_url(redis), CK_SKU, &rep);
    if (rc != 0 || rep.ok != want_ok) {
        sf_report_print(what, &rep);
        fail_msg("%s: the %s checker %s (rc %d)", what, quiescent ? "quiescent" : "plain",
                 want_ok ? "refused a good state" : "accepted a bad state", rc);
    }
}

static void test_good_multi_order(void **state)
{
    (void)state;
    good_state();
    judge(0, 1, "a whole order of 3 parts");
    judge(1, 1, "a whole order of 3 parts, quiescent");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(redis), CK_SKU, &rep);
    SF_ASSERT(rep.sold == 14 && rep.max_user_units == 12 && rep.multi_orders == 1 &&
                  rep.live_parts == 2 && rep.follows == 0 && rep.intents == 0,
              "sold %lld, most units of a user %lld, multi %lld, parts %lld", rep.sold,
              rep.max_user_units, rep.multi_orders, rep.live_parts);

    /* cancelled whole: every part cancelled, every unit back */
    good_state();
    cmd("HSET inv:2:{" CK_SKU "/0}:orders " CK_HEX "-0-" CK_SKU " {\"order_id\":\"" CK_HEX
        "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":0,\"quantity\":12,\"status\":\"cancelled\",\"user_id\":\"u1\","
        "\"parts\":[{\"segment\":0,\"quantity\":5},{\"segment\":1,\"quantity\":4},"
        "{\"segment\":2,\"quantity\":3}]}");
    for (int k = 1; k < 3; k++)
        cmd("HSET inv:2:{" CK_SKU "/%d}:orders " CK_HEX "-%d-" CK_SKU " {\"order_id\":\"" CK_HEX
            "-%d-" CK_SKU "\",\"part_of\":\"" CK_HEX "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
            "\",\"segment\":%d,\"quantity\":%d,\"status\":\"cancelled\"}",
            k, k, k, k, k == 1 ? 4 : 3);
    counters(0, 0, 0, 0);
    counters(1, 2, 1, 2);
    counters(2, 0, 0, 0);
    cmd("HSET inv:2:{" CK_SKU "}:users u1 {}");
    judge(1, 1, "an order cancelled whole");
}

static void test_part_without_primary(void **state)
{
    (void)state;
    good_state();
    cmd("HDEL inv:2:{" CK_SKU "/0}:orders " CK_HEX "-0-" CK_SKU);
    counters(0, 0, 0, 0);
    cmd("HSET inv:2:{" CK_SKU "}:users u1 {}");
    judge(0, 0, "two parts without their primary");
    /* the same while its intent is still there (a cut-off order not yet rolled back) */
    cmd("HSET inv:2:{" CK_SKU "}:multi " CK_HEX " {\"order\":\"" CK_HEX "-0-" CK_SKU
        "\",\"parts\":[[0,5],[1,4],[2,3]],\"deadline\":1}");
    judge(0, 1, "orphan parts under their intent");
    judge(1, 0, "orphan parts under their intent, quiescent");
}

static void test_primary_missing_part(void **state)
{
    (void)state;
    good_state();
    cmd("HDEL inv:2:{" CK_SKU "/2}:orders " CK_HEX "-2-" CK_SKU);
    counters(2, 0, 0, 0);
    judge(0, 0, "a primary whose part in segment 2 is gone");
    cmd("HSET inv:2:{" CK_SKU "}:multi " CK_HEX " {\"order\":\"" CK_HEX "-0-" CK_SKU
        "\",\"parts\":[[0,5],[1,4],[2,3]],\"deadline\":1}");
    judge(0, 0, "a primary whose part is gone, with an intent");
}

static void test_status_mismatch(void **state)
{
    (void)state;
    good_state();
    /* the primary confirmed, one part still created */
    cmd("HSET inv:2:{" CK_SKU "/0}:orders " CK_HEX "-0-" CK_SKU " {\"order_id\":\"" CK_HEX
        "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":0,\"quantity\":12,\"status\":\"confirmed\",\"user_id\":\"u1\","
        "\"parts\":[{\"segment\":0,\"quantity\":5},{\"segment\":1,\"quantity\":4},"
        "{\"segment\":2,\"quantity\":3}]}");
    cmd("HSET inv:2:{" CK_SKU "/1}:orders " CK_HEX "-1-" CK_SKU " {\"order_id\":\"" CK_HEX
        "-1-" CK_SKU "\",\"part_of\":\"" CK_HEX "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":1,\"quantity\":4,\"status\":\"confirmed\"}");
    judge(0, 0, "a confirmed order's part still created");
    /* ... which is fine while the follow for it is queued in the primary's segment */
    cmd("ZADD inv:2:{" CK_SKU "/0}:follow 1 " CK_HEX "-2-" CK_SKU "|confirmed");
    judge(0, 1, "a part lagging behind its queued follow");
    judge(1, 0, "a part lagging behind its queued follow, quiescent");
    /* the wait for the sweepers: times out with the follow still queued, returns at once
     * when nothing is */
    SF_ASSERT_EQ(sf_wait_multi_drained(rf_url(redis), CK_SKU, 300), 1);
    cmd("DEL inv:2:{" CK_SKU "/0}:follow");
    SF_ASSERT_EQ(sf_wait_multi_drained(rf_url(redis), CK_SKU, 300), 0);
    cmd("ZADD inv:2:{" CK_SKU "/0}:follow 1 " CK_HEX "-2-" CK_SKU "|confirmed");
    /* a follow queued for another status does not cover it */
    cmd("DEL inv:2:{" CK_SKU "/0}:follow");
    cmd("ZADD inv:2:{" CK_SKU "/0}:follow 1 " CK_HEX "-2-" CK_SKU "|cancelled");
    judge(0, 0, "a part lagging behind a follow of another status");

    /* the primary live, a part cancelled (its units back) */
    good_state();
    cmd("HSET inv:2:{" CK_SKU "/2}:orders " CK_HEX "-2-" CK_SKU " {\"order_id\":\"" CK_HEX
        "-2-" CK_SKU "\",\"part_of\":\"" CK_HEX "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":2,\"quantity\":3,\"status\":\"cancelled\"}");
    counters(2, 0, 0, 0);
    judge(0, 0, "a live order with a cancelled part");
}

/* A hold's due-set score is its record's expires_at (the commit and an extension write both in
 * one step): a record moved without its score, or the score without the record, is refused. */
static void test_hold_due_score(void **state)
{
    (void)state;
    good_state();
    judge(0, 1, "a hold scored at its expires_at");
    cmd("ZADD inv:2:{" CK_SKU "/1}:due 1893456001000 " CK_HEX2 "-1-" CK_SKU);
    judge(0, 0, "a hold scored 1 s after its expires_at");
    good_state();
    cmd("HSET inv:2:{" CK_SKU "/1}:orders " CK_HEX2 "-1-" CK_SKU " {\"order_id\":\"" CK_HEX2
        "-1-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":1,\"quantity\":2,\"status\":\"reserved\",\"user_id\":\"u2\","
        "\"expires_at\":\"2030-01-01T00:00:02.000Z\",\"extensions\":1,"
        "\"created_at\":\"2026-01-01T00:00:00.000Z\"}");
    judge(0, 0, "a hold extended in its record, not in the due set");
    cmd("ZADD inv:2:{" CK_SKU "/1}:due 1893456002000 " CK_HEX2 "-1-" CK_SKU);
    judge(0, 1, "a hold extended in both");
}

static void test_quantities(void **state)
{
    (void)state;
    /* parts 5 + 4 + 3 on an order of 13 */
    good_state();
    cmd("HSET inv:2:{" CK_SKU "/0}:orders " CK_HEX "-0-" CK_SKU " {\"order_id\":\"" CK_HEX
        "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":0,\"quantity\":13,\"status\":\"created\",\"user_id\":\"u1\","
        "\"parts\":[{\"segment\":0,\"quantity\":5},{\"segment\":1,\"quantity\":4},"
        "{\"segment\":2,\"quantity\":3}]}");
    cmd("HSET inv:2:{" CK_SKU "}:users u1 {\"" CK_HEX "\":[13,0,0]}");
    judge(0, 0, "parts that do not sum to the order's quantity");
    /* the part in segment 2 holds 2 units, its primary says 3 (counters agree with the part) */
    good_state();
    cmd("HSET inv:2:{" CK_SKU "/2}:orders " CK_HEX "-2-" CK_SKU " {\"order_id\":\"" CK_HEX
        "-2-" CK_SKU "\",\"part_of\":\"" CK_HEX "-0-" CK_SKU "\",\"sku\":\"" CK_SKU
        "\",\"segment\":2,\"quantity\":2,\"status\":\"created\"}");
    counters(2, 2, 0, 0);
    judge(0, 0, "a part whose quantity is not its primary's");
    /* the primary's units in its own segment are its part's (5), not the order's 12 */
    good_state();
    counters(0, 12, 1, 0);
    judge(0, 0, "segment 0 counting the whole order");
    /* a part the primary does not list */
    good_state();
    record(1, CK_HEX "-1-" CK_SKU,
           "{\"order_id\":\"" CK_HEX "-1-" CK_SKU "\",\"part_of\":\"" CK_HEX2 "-1-" CK_SKU
           "\",\"sku\":\"" CK_SKU "\",\"segment\":1,\"quantity\":4,\"status\":\"created\"}");
    judge(0, 0, "a part naming another order as its primary");
}

static void test_user_limit_counts_the_whole_order(void **state)
{
    (void)state;
    good_state();
    cmd("HSET inv:2:{" CK_SKU "}:meta limit 11");
    judge(0, 0, "a user at 12 units in one multi-segment order over a limit of 11");
    good_state();
    cmd("HSET inv:2:{" CK_SKU "}:users u1 {}");
    judge(0, 0, "a multi-segment order missing from its user's entries");
}

/* Runs inventory-check (next to this test, or in $INVENTORY_BUILD_BIN) with args; returns its
 * exit status and its stdout parsed as JSON in *out (NULL when it printed none). */
static int run_check(const char *args, json_t **out)
{
    char self[512] = ".";
    const char *dir = getenv("INVENTORY_BUILD_BIN");
    ssize_t len = dir ? -1 : readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        *strrchr(self, '/') = '\0';
    }
    char cmdline[1024];
    snprintf(cmdline, sizeof cmdline, "%s/inventory-check %s 2>/dev/null", dir ? dir : self, args);
    FILE *f = popen(cmdline, "r");
    SF_ASSERT(f != NULL, "popen %s", cmdline);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    int st = pclose(f);
    *out = n > 0 ? json_loads(buf, 0, NULL) : NULL;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Does the report list a problem of group check whose text holds text? */
static int has_problem(const json_t *rep, const char *check, const char *text)
{
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(rep, "problems"), i, p)
    {
        if (strcmp(json_string_value(json_object_get(p, "check")), check) == 0 &&
            strstr(json_string_value(json_object_get(p, "text")), text) != NULL)
            return 1;
    }
    return 0;
}

static void test_program(void **state)
{
    (void)state;
    char args[512];
    json_t *rep;
    /* the good state: exit 0, ok, the totals of the library's report */
    good_state();
    snprintf(args, sizeof args, "--redis %s --sku " CK_SKU " --quiescent", rf_url(redis));
    int rc = run_check(args, &rep);
    SF_ASSERT(rc == 0 && json_is_true(json_object_get(rep, "ok")) &&
                  sf_json_int(rep, "sold", -1) == 14 && sf_json_int(rep, "orders", -1) == 2 &&
                  sf_json_int(rep, "records", -1) == 4 &&
                  sf_json_int(rep, "multi_orders", -1) == 1 &&
                  json_array_size(json_object_get(rep, "segment")) == 3 &&
                  sf_json_int(rep, "nproblems", -1) == 0,
              "good state: exit %d, report %s", rc, rep ? json_dumps(rep, 0) : "none");
    json_decref(rep);
    /* a corrupted counter: cnt.s of segment 2 says 99 */
    cmd("HSET inv:2:{" CK_SKU "/2}:cnt s 99");
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 1 && json_is_false(json_object_get(rep, "ok")) &&
                  has_problem(rep, "segment", "segment 2: t 10 != stock 7 + s 99") &&
                  has_problem(rep, "segment", "segment 2: s 99 != 3 units"),
              "cnt.s corrupted: exit %d, report %s", rc, rep ? json_dumps(rep, 0) : "none");
    json_decref(rep);
    /* a dropped segment (3): keys the drop deletes are strays, those it keeps (the sver
     * tombstone, the rules version, the log, lockcore's) are not; nor is a key it does not
     * know under a kept one (lock:fence) */
    good_state();
    cmd("SET inv:2:{" CK_SKU "/3}:sver 6");
    cmd("SET inv:2:{" CK_SKU "/3}:rver 6");
    cmd("SET inv:2:{" CK_SKU "/3}:lock:seen 5:x");
    cmd("SET inv:2:{" CK_SKU "/3}:lock:fence 5");
    cmd("XADD inv:2:{" CK_SKU "/3}:log * e x");
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 0, "kept keys of a dropped segment: exit %d, report %s", rc,
              rep ? json_dumps(rep, 0) : "none");
    json_decref(rep);
    cmd("SET inv:2:{" CK_SKU "/3}:stock 4");
    cmd("SET inv:2:{" CK_SKU "/3}:bogus 1");
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 1 && has_problem(rep, "sku", "stray key inv:2:{" CK_SKU "/3}:stock") &&
                  has_problem(rep, "sku", "stray key inv:2:{" CK_SKU "/3}:bogus") &&
                  sf_json_int(rep, "nproblems", -1) == 2,
              "strays of a dropped segment: exit %d, report %s", rc,
              rep ? json_dumps(rep, 0) : "none");
    json_decref(rep);
    /* --live: a layout still rolling out (meta state p) is no violation while orders run, and
     * nothing across segments is judged; the full check refuses it */
    good_state();
    cmd("HSET inv:2:{" CK_SKU "}:meta state p");
    snprintf(args, sizeof args, "--redis %s --sku " CK_SKU " --live", rf_url(redis));
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 0, "live, state p: exit %d, report %s", rc, rep ? json_dumps(rep, 0) : "none");
    json_decref(rep);
    snprintf(args, sizeof args, "--redis %s --sku " CK_SKU, rf_url(redis));
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 1 && has_problem(rep, "sku", "meta.state p"), "state p: exit %d", rc);
    json_decref(rep);
    /* --skip-users: a user over the limit is the limit checks' finding alone */
    good_state();
    cmd("HSET inv:2:{" CK_SKU "}:meta limit 11");
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 1 && has_problem(rep, "users", "over the limit 11"), "limit: exit %d", rc);
    json_decref(rep);
    snprintf(args, sizeof args, "--redis %s --sku " CK_SKU " --skip-users", rf_url(redis));
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 0, "limit, --skip-users: exit %d", rc);
    json_decref(rep);
    /* no such SKU: a violation (exit 1, found false) */
    snprintf(args, sizeof args, "--redis %s --sku nosuch", rf_url(redis));
    rc = run_check(args, &rep);
    SF_ASSERT(rc == 1 && json_is_false(json_object_get(rep, "found")), "missing SKU: exit %d", rc);
    json_decref(rep);
    /* a Redis that is not there: exit 3, after --retry-s 0 (no retry) */
    rc = run_check("--redis redis://127.0.0.1:1 --sku x --retry-s 0", &rep);
    SF_ASSERT(rc == 3, "no Redis: exit %d", rc);
    json_decref(rep);
    /* bad usage: exit 2, nothing read */
    rc = run_check("--sku x", &rep);
    SF_ASSERT(rc == 2 && rep == NULL, "no --redis: exit %d", rc);
    rc = run_check("--redis redis://127.0.0.1:1 --sku x --key-schema 3", &rep);
    SF_ASSERT(rc == 2 && rep == NULL, "--key-schema 3: exit %d", rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_multi_order),
        cmocka_unit_test(test_part_without_primary),
        cmocka_unit_test(test_primary_missing_part),
        cmocka_unit_test(test_status_mismatch),
        cmocka_unit_test(test_quantities),
        cmocka_unit_test(test_hold_due_score),
        cmocka_unit_test(test_user_limit_counts_the_whole_order),
        cmocka_unit_test(test_program),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
