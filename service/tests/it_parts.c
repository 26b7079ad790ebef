/*
 * Multi-segment orders after they exist (SPEC §13, docs/design.md "Orders larger than one
 * segment") against a real redis-server and real inventoryd processes. The orders, parts,
 * intents and follows are written into Redis in the documented format (the order path that
 * makes them is tested with it), then:
 *   - a cancel of a 3-part order gives every part's units back to its own segment before its
 *     answer (200 with the parts), and its confirm-less repeat is 409 already_cancelled; GET of
 *     the order shows its parts, GET of a part's own id is 404, and a one-segment order's GET
 *     shows its one part;
 *   - a confirm of a 2-part hold confirms every part before its answer (r down everywhere);
 *   - a 3-part hold expires whole through the sweeper: every part expired, every segment's
 *     units back, no follow left queued;
 *   - a cancel cut off after its primary's script (follows left queued) is completed by the
 *     sweeper, on a SKU without holds or a limit too;
 *   - an intent with no primary past its deadline is rolled back by the sweepers of two instances
 *     that never saw it, at once (parts undone, units back, intent gone, counted "back"); one with
 * a primary is rolled forward (parts kept, intent gone, counted "forward"); one not yet past
 *     deadline + 1 s is left alone.
 * Each segment's counters (stock, s, o, r) are checked against what its records hold; the
 * invariant checker runs once every part has ended (it does not yet know that a live primary
 * holds only its own part in its segment: branch `checks`).
 */
#include "svc_test.h"

#define PA_TOKEN "parts-admin-token"
#define HEX "0123456789abcdef0123456789abcdef"
#define HEX2 "fedcba9876543210fedcba9876543210"

static sf_service *svc;
static int port;

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--admin-token", PA_TOKEN, "--redis-timeout-ms",
                          "500",       NULL};
    svc = sf_group_service(args);
    port = svc ? sf_port(svc) : 0;
    return svc ? 0 : -1;
}

/* ---- Redis, written and read as the scripts do ---- */

static void pa_cmd(const char *fmt, const char *a, const char *b, const char *c)
{
    redisReply *r = rf_command(gf_redis, fmt, a, b, c);
    SF_ASSERT(r && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt, r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

static long long pa_redis_ms(void)
{
    redisReply *r = rf_command(gf_redis, "TIME");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "%s", "TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Segment k of sku: sold s units (r of them held) in o live orders (parts are not orders), the rest
 * of its 10 units left (every SKU here is PUT with 10 units a segment). */
static void pa_seg(const char *sku, int k, long long s, long long o, long long r)
{
    redisReply *w = rf_command(gf_redis, "SET inv:2:{%s/%d}:stock %lld", sku, k, 10 - s);
    SF_ASSERT(w && w->type == REDIS_REPLY_STATUS, "SET stock of %s/%d", sku, k);
    freeReplyObject(w);
    w = rf_command(gf_redis, "HSET inv:2:{%s/%d}:cnt t 10 s %lld o %lld r %lld", sku, k, s, o, r);
    SF_ASSERT(w && w->type == REDIS_REPLY_INTEGER, "HSET cnt of %s/%d", sku, k);
    freeReplyObject(w);
}

/* Asserts segment k's {stock, s, o, r}. */
static void pa_expect(const char *sku, int k, long long stock, long long s, long long o,
                      long long r)
{
    long long got[4] = {sf_seg_stock(sku, k), RF_NOT_INTEGER, RF_NOT_INTEGER, RF_NOT_INTEGER};
    char buf[32];
    const char *f[3] = {"s", "o", "r"};
    for (int i = 0; i < 3; i++) {
        int found = rf_string(gf_redis, buf, sizeof buf, "HGET inv:2:{%s/%d}:cnt %s", sku, k, f[i]);
        if (found == 1)
            got[1 + i] = atoll(buf);
        else if (found == 0 && i == 2)
            got[3] = 0; /* a segment that never had a hold has no r */
    }
    long long want[4] = {stock, s, o, r};
    for (int i = 0; i < 4; i++)
        SF_ASSERT(got[i] == want[i],
                  "%s segment %d: {stock s o r} = {%lld %lld %lld %lld}, want {%lld %lld %lld "
                  "%lld}",
                  sku, k, got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3]);
}

/* The record of id in segment k (status into buf; "" when there is none). */
static void pa_status(const char *sku, int k, const char *id, char *status, size_t len)
{
    char rec[1024] = "";
    rf_string(gf_redis, rec, sizeof rec, "HGET inv:2:{%s/%d}:orders %s", sku, k, id);
    json_t *o = rec[0] ? json_loads(rec, 0, NULL) : NULL;
    snprintf(status, len, "%s", o ? sf_str(o, "status") : "");
    json_decref(o);
}

/* The order hex-k0-sku of quantities q[0..n) in segments 0..n-1 (primary in 0, a part in each
 * other), every record in status, written with each segment's counters. */
static void pa_order(const char *sku, const char *hex, const int *q, int n, const char *status)
{
    char id[160], parts[256] = "", rec[1024], key[160];
    int total = 0;
    for (int k = 0; k < n; k++) {
        size_t used = strlen(parts);
        snprintf(parts + used, sizeof parts - used, "%s{\"segment\":%d,\"quantity\":%d}",
                 k ? "," : "", k, q[k]);
        total += q[k];
    }
    int held = strcmp(status, "reserved") == 0;
    snprintf(id, sizeof id, "%s-0-%s", hex, sku);
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"sku\":\"%s\",\"quantity\":%d,\"segment\":0,\"parts\":[%s],"
             "\"user_id\":null,\"created_at\":\"2026-01-01T00:00:00.000Z\",\"status\":\"%s\"}",
             id, sku, total, parts, status);
    snprintf(key, sizeof key, "inv:2:{%s/0}:orders", sku);
    pa_cmd("HSET %s %s %s", key, id, rec);
    pa_seg(sku, 0, q[0], 1, held ? q[0] : 0);
    for (int k = 1; k < n; k++) {
        char pid[160];
        snprintf(pid, sizeof pid, "%s-%d-%s", hex, k, sku);
        snprintf(rec, sizeof rec,
                 "{\"order_id\":\"%s\",\"part_of\":\"%s\",\"sku\":\"%s\",\"segment\":%d,"
                 "\"quantity\":%d,\"status\":\"%s\",\"created_at\":\"2026-01-01T00:00:00.000Z\"}",
                 pid, id, sku, k, q[k], status);
        snprintf(key, sizeof key, "inv:2:{%s/%d}:orders", sku, k);
        pa_cmd("HSET %s %s %s", key, pid, rec);
        pa_seg(sku, k, q[k], 0, held ? q[k] : 0); /* o counts orders, not parts */
    }
}

static int pa_request(const char *method, const char *path, sf_resp *r)
{
    return sf_json_request(NULL, port, method, path, PA_TOKEN, NULL, NULL, r);
}

/* ---- tests ---- */

static void test_cancel_returns_every_part(void **state)
{
    (void)state;
    char sku[64], path[256], id[160], part[160];
    tu_unique_name(sku, sizeof sku, "pa-cancel");
    SF_PUT_SKU(port, PA_TOKEN, sku, 30, 3);
    const int q[3] = {2, 3, 4};
    pa_order(sku, HEX, q, 3, "created");
    snprintf(id, sizeof id, HEX "-0-%s", sku);
    snprintf(part, sizeof part, HEX "-2-%s", sku);

    /* GET: the order with its parts; a part's own id is not an order */
    sf_resp r = {0};
    snprintf(path, sizeof path, "/api/v1/orders/%s", id);
    pa_request("GET", path, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(json_array_size(json_object_get(r.json, "parts")) == 3, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    snprintf(path, sizeof path, "/api/v1/orders/%s", part);
    pa_request("GET", path, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_resp_free(&r);
    pa_request("DELETE", path, &r); /* nor can it be cancelled alone */
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_resp_free(&r);
    pa_expect(sku, 2, 6, 4, 0, 0);

    /* the cancel: every part's units are back when it answers */
    snprintf(path, sizeof path, "/api/v1/orders/%s", id);
    pa_request("DELETE", path, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "cancelled") == 0, "%s", sf_resp_summary(&r));
    SF_ASSERT(json_array_size(json_object_get(r.json, "parts")) == 3, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    for (int k = 0; k < 3; k++)
        pa_expect(sku, k, 10, 0, 0, 0);
    char st[32];
    pa_status(sku, 2, part, st, sizeof st);
    SF_ASSERT(strcmp(st, "cancelled") == 0, "part 2: %s", st);
    SF_ASSERT_EQ(rf_integer(gf_redis, "EXISTS inv:2:{%s/0}:follow", sku), 0);
    pa_request("DELETE", path, &r);
    SF_ASSERT_ERROR(&r, 409, "already_cancelled");
    sf_resp_free(&r);
    for (int k = 0; k < 3; k++)
        pa_expect(sku, k, 10, 0, 0, 0);
    SF_ASSERT(sf_metric(port, "inventory_part_follows_total") >= 2, "%s", "follows counted");

    /* a one-segment order's answer carries its one part */
    SF_ASSERT_EQ(sf_order(NULL, port, sku, 2, &r), 201);
    snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    int k = (int)sf_json_int(r.json, "segment", -1);
    sf_resp_free(&r);
    pa_request("GET", path, &r);
    SF_ASSERT_STATUS(&r, 200);
    json_t *p = json_array_get(json_object_get(r.json, "parts"), 0);
    SF_ASSERT(p && sf_json_int(p, "segment", -1) == k && sf_json_int(p, "quantity", -1) == 2, "%s",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    /* every part ended: the invariant checker's sums hold (a live multi-segment order's
     * primary counts only its own part in its segment, which it does not know yet) */
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

static void test_confirm_confirms_every_part(void **state)
{
    (void)state;
    char sku[64], path[256], id[160], part[160], st[32], due[32];
    tu_unique_name(sku, sizeof sku, "pa-confirm");
    SF_PUT_SKU(port, PA_TOKEN, sku, 20, 2);
    const int q[2] = {5, 6};
    pa_order(sku, HEX, q, 2, "reserved");
    snprintf(id, sizeof id, HEX "-0-%s", sku);
    snprintf(part, sizeof part, HEX "-1-%s", sku);
    char key[160];
    snprintf(key, sizeof key, "inv:2:{%s/0}:due", sku);
    snprintf(due, sizeof due, "%lld", pa_redis_ms() + 60000);
    pa_cmd("ZADD %s %s %s", key, due, id);
    sf_resp r = {0};
    snprintf(path, sizeof path, "/api/v1/orders/%s/confirm", id);
    pa_request("POST", path, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "confirmed") == 0, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* confirmed everywhere when it answers: r down in both segments, units still sold */
    pa_expect(sku, 0, 5, 5, 1, 0);
    pa_expect(sku, 1, 4, 6, 0, 0);
    pa_status(sku, 1, part, st, sizeof st);
    SF_ASSERT(strcmp(st, "confirmed") == 0, "part 1: %s", st);
    /* then cancelled: every part's units back */
    snprintf(path, sizeof path, "/api/v1/orders/%s", id);
    pa_request("DELETE", path, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    pa_expect(sku, 0, 10, 0, 0, 0);
    pa_expect(sku, 1, 10, 0, 0, 0);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

/* Polls (every 50 ms, at most timeout_ms) until the part record of segment k has status. */
static int pa_wait_status(const char *sku, int k, const char *id, const char *want, int timeout_ms)
{
    char st[32];
    for (int64_t end = tu_now_ms() + timeout_ms;; tu_sleep_ms(50)) {
        pa_status(sku, k, id, st, sizeof st);
        if (strcmp(st, want) == 0)
            return 1;
        if (tu_now_ms() > end)
            return 0;
    }
}

static void test_hold_expires_whole(void **state)
{
    (void)state;
    char sku[64], id[160], key[160], due[32], body[128], path_buf[160];
    tu_unique_name(sku, sizeof sku, "pa-expire");
    /* a SKU with holds: the sweeper looks at it */
    snprintf(path_buf, sizeof path_buf, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":30,\"segments\":3,\"reservation_ttl_s\":1}");
    sf_resp r = {0};
    sf_json_request(NULL, port, "PUT", path_buf, PA_TOKEN, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    const int q[3] = {1, 2, 3};
    pa_order(sku, HEX, q, 3, "reserved");
    snprintf(id, sizeof id, HEX "-0-%s", sku);
    snprintf(key, sizeof key, "inv:2:{%s/0}:due", sku);
    snprintf(due, sizeof due, "%lld", pa_redis_ms() + 300);
    pa_cmd("ZADD %s %s %s", key, due, id);
    for (int k = 1; k < 3; k++) {
        char part[160];
        snprintf(part, sizeof part, HEX "-%d-%s", k, sku);
        SF_ASSERT(pa_wait_status(sku, k, part, "expired", 5000), "part %d never expired", k);
    }
    char st[32];
    pa_status(sku, 0, id, st, sizeof st);
    SF_ASSERT(strcmp(st, "expired") == 0, "the primary: %s", st);
    for (int k = 0; k < 3; k++)
        pa_expect(sku, k, 10, 0, 0, 0);
    /* the follows are taken off the queue once applied */
    int64_t end = tu_now_ms() + 3000;
    while (rf_integer(gf_redis, "EXISTS inv:2:{%s/0}:follow", sku) != 0 && tu_now_ms() < end)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rf_integer(gf_redis, "EXISTS inv:2:{%s/0}:follow", sku), 0);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

/* A cancel cut off after its primary's script (the instance died before the follows): the
 * follows left queued are applied by the sweeper, on a SKU without holds or a limit too. */
static void test_cut_off_cancel_drained(void **state)
{
    (void)state;
    char sku[64], id[160], part[160], key[160], member[200];
    tu_unique_name(sku, sizeof sku, "pa-cutoff");
    SF_PUT_SKU(port, PA_TOKEN, sku, 20, 2);
    const int q[2] = {3, 4};
    pa_order(sku, HEX, q, 2, "cancelled");
    pa_seg(sku, 0, 0, 0, 0); /* the primary's script ran: its own units are back */
    pa_seg(sku, 1, 4, 0, 0); /* the part's follow did not */
    snprintf(id, sizeof id, HEX "-0-%s", sku);
    snprintf(part, sizeof part, HEX "-1-%s", sku);
    snprintf(key, sizeof key, "inv:2:{%s/1}:orders", sku);
    {
        char rec[512];
        snprintf(rec, sizeof rec,
                 "{\"order_id\":\"%s\",\"part_of\":\"%s\",\"sku\":\"%s\",\"segment\":1,"
                 "\"quantity\":4,\"status\":\"created\",\"created_at\":\"x\"}",
                 part, id, sku);
        pa_cmd("HSET %s %s %s", key, part, rec);
    }
    snprintf(key, sizeof key, "inv:2:{%s/0}:follow", sku);
    snprintf(member, sizeof member, "%s|cancelled", part);
    pa_cmd("ZADD %s %s %s", key, "1", member);
    SF_ASSERT(pa_wait_status(sku, 1, part, "cancelled", 2 * 2000 + 1500), "%s",
              "the follow left queued was never applied");
    pa_expect(sku, 1, 10, 0, 0, 0);
    int64_t end = tu_now_ms() + 2000;
    while (rf_integer(gf_redis, "EXISTS %s", key) != 0 && tu_now_ms() < end)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rf_integer(gf_redis, "EXISTS %s", key), 0);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

/* An intent of hex's order (parts q[0..n) in segments 0..n-1) with its deadline at Redis now +
 * offset ms. */
static void pa_intent(const char *sku, const char *hex, const int *q, int n, long long offset)
{
    char key[160], v[512], parts[128] = "";
    for (int k = 0; k < n; k++) {
        size_t used = strlen(parts);
        snprintf(parts + used, sizeof parts - used, "%s[%d,%d]", k ? "," : "", k, q[k]);
    }
    snprintf(key, sizeof key, "inv:2:{%s}:multi", sku);
    snprintf(v, sizeof v, "{\"order\":\"%s-0-%s\",\"parts\":[%s],\"deadline\":%lld}", hex, sku,
             parts, pa_redis_ms() + offset);
    pa_cmd("HSET %s %s %s", key, hex, v);
}

static void test_intents_healed_by_the_sweeper(void **state)
{
    (void)state;
    char sku[64], id[160], key[160];
    tu_unique_name(sku, sizeof sku, "pa-heal");
    SF_PUT_SKU(port, PA_TOKEN, sku, 40, 4);
    /* a second instance heals at the same time: each intent is still healed (and counted) once */
    const char *args[] = {"--threads", "1", "--admin-token", PA_TOKEN, "--redis-timeout-ms",
                          "500",       NULL};
    sf_service *two[2] = {svc, sf_start(rf_url(gf_redis), args)};
    SF_ASSERT(two[1] != NULL, "%s", "a second instance");
    double back0 = 0, fwd0 = 0;
    for (int i = 0; i < 2; i++) {
        back0 += sf_metric(sf_port(two[i]), "inventory_multi_healed_total{way=\"back\"}");
        fwd0 += sf_metric(sf_port(two[i]), "inventory_multi_healed_total{way=\"forward\"}");
    }
    /* HEX: cut off before its primary (parts in 1 and 2 only), past deadline + 1 s */
    const int q[3] = {2, 3, 4};
    pa_order(sku, HEX, q, 3, "created");
    snprintf(id, sizeof id, HEX "-0-%s", sku);
    snprintf(key, sizeof key, "inv:2:{%s/0}:orders", sku);
    pa_cmd("HDEL %s %s", key, id, NULL);
    pa_seg(sku, 0, 0, 0, 0);
    pa_intent(sku, HEX, q, 3, -1500);
    /* HEX2: whole (primary in 0, a part in 1), its intent left behind */
    const int q2[2] = {1, 1};
    char id2[160], part2[160];
    snprintf(id2, sizeof id2, HEX2 "-0-%s", sku);
    snprintf(part2, sizeof part2, HEX2 "-1-%s", sku);
    snprintf(key, sizeof key, "inv:2:{%s/0}:orders", sku);
    {
        char rec[512];
        snprintf(rec, sizeof rec,
                 "{\"order_id\":\"%s\",\"sku\":\"%s\",\"quantity\":2,\"segment\":0,\"parts\":"
                 "[{\"segment\":0,\"quantity\":1},{\"segment\":1,\"quantity\":1}],\"user_id\":"
                 "null,\"created_at\":\"x\",\"status\":\"created\"}",
                 id2, sku);
        pa_cmd("HSET %s %s %s", key, id2, rec);
        snprintf(rec, sizeof rec,
                 "{\"order_id\":\"%s\",\"part_of\":\"%s\",\"sku\":\"%s\",\"segment\":1,"
                 "\"quantity\":1,\"status\":\"created\",\"created_at\":\"x\"}",
                 part2, id2, sku);
        snprintf(key, sizeof key, "inv:2:{%s/1}:orders", sku);
        pa_cmd("HSET %s %s %s", key, part2, rec);
    }
    pa_seg(sku, 0, 1, 1, 0);
    pa_seg(sku, 1, 3 + 1, 0, 0); /* HEX's part (3) and HEX2's (1): parts, no orders */
    pa_intent(sku, HEX2, q2, 2, -1500);
    /* a third, still within its deadline + 1 s: left alone */
    const char *young = "cccccccccccccccccccccccccccccccc";
    pa_intent(sku, young, q2, 2, 10000);

    snprintf(key, sizeof key, "inv:2:{%s}:multi", sku);
    int64_t end = tu_now_ms() + 5000;
    while ((rf_integer(gf_redis, "HEXISTS %s %s", key, HEX) != 0 ||
            rf_integer(gf_redis, "HEXISTS %s %s", key, HEX2) != 0) &&
           tu_now_ms() < end)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rf_integer(gf_redis, "HEXISTS %s %s", key, HEX), 0);
    SF_ASSERT_EQ(rf_integer(gf_redis, "HEXISTS %s %s", key, HEX2), 0);
    SF_ASSERT_EQ(rf_integer(gf_redis, "HEXISTS %s %s", key, young), 1);
    /* back: HEX's parts gone, their units back; forward: HEX2's records kept */
    char st[32], p1[160], p2[160];
    snprintf(p1, sizeof p1, HEX "-1-%s", sku);
    snprintf(p2, sizeof p2, HEX "-2-%s", sku);
    pa_status(sku, 1, p1, st, sizeof st);
    SF_ASSERT(st[0] == '\0', "HEX's part 1 still there: %s", st);
    pa_status(sku, 2, p2, st, sizeof st);
    SF_ASSERT(st[0] == '\0', "HEX's part 2 still there: %s", st);
    pa_status(sku, 1, part2, st, sizeof st);
    SF_ASSERT(strcmp(st, "created") == 0, "HEX2's part: %s", st);
    pa_status(sku, 0, id2, st, sizeof st);
    SF_ASSERT(strcmp(st, "created") == 0, "HEX2's primary: %s", st);
    pa_expect(sku, 0, 9, 1, 1, 0);
    pa_expect(sku, 1, 9, 1, 0, 0);
    pa_expect(sku, 2, 10, 0, 0, 0);
    pa_expect(sku, 3, 10, 0, 0, 0);
    double back = -back0, fwd = -fwd0;
    for (int i = 0; i < 2; i++) {
        back += sf_metric(sf_port(two[i]), "inventory_multi_healed_total{way=\"back\"}");
        fwd += sf_metric(sf_port(two[i]), "inventory_multi_healed_total{way=\"forward\"}");
    }
    SF_ASSERT(back == 1 && fwd == 1, "healed back %g, forward %g times over the instances", back,
              fwd);
    SF_ASSERT(sf_stop(two[1]) == 0, "%s", "the second instance's exit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_returns_every_part),
        cmocka_unit_test(test_confirm_confirms_every_part),
        cmocka_unit_test(test_hold_expires_whole),
        cmocka_unit_test(test_cut_off_cancel_drained),
        cmocka_unit_test(test_intents_healed_by_the_sweeper),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
