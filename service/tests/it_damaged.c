/*
 * Scripts that check before they write (issue 9): Redis does not roll a script back, so a
 * commit or a cancel that failed half-way (a counter that is not a number, a key of the wrong
 * type) would leave drift. Here a segment is damaged on purpose in a real redis-server, and:
 *   - an order on it changes nothing (stock, counters, records) and answers 503;
 *   - a cancel on it changes nothing and answers 503;
 *   - orders fail over from the damaged segment to the others and are placed (one Redis error
 *     on one segment is not the order's answer while other segments can serve).
 * After repairing the damage the invariant checker (SPEC §8) passes.
 *
 * Issue 18 item 5: the scripts took numbers with tonumber, which accepts "10.0", " 5" and "1e3",
 * and then wrote with INCRBY/HINCRBY/DECRBY, which refuse them: the script failed after its
 * first write. Each number a script reads (stock, cnt t/s/o, sver, meta version/segments/rseq,
 * the pending restocks' entries) is damaged here in those three ways, and every request on it
 * must change nothing. On the old binary: a restock was added again on every status read
 * (stock 10 -> 15 -> 20 ...), an order or a cancel left its record without its units, a re-PUT
 * answered 200 over a segment it never reset, a restock answered 409 "nothing was added" while
 * it stayed pending, and a damaged pending entry was applied.
 */
#include "svc_test.h"

#define DM_TOKEN "damaged-test-token"

static sf_service *svc;
static int port;

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "4", "--admin-token", DM_TOKEN, NULL};
    svc = sf_group_service(args);
    port = svc != NULL ? sf_port(svc) : 0;
    return svc != NULL ? 0 : -1;
}

static void redis_do(const char *fmt, const char *sku, int k, const char *value)
{
    redisReply *r = rf_command(gf_redis, fmt, sku, k, value);
    SF_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt,
              r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

static void test_order_on_damaged_segment_changes_nothing(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "dmord");
    SF_PUT_SKU(port, DM_TOKEN, sku, 10, 1);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "not-a-number");
    sf_resp r = {0};
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_seg_stock(sku, 0), 10);
    SF_ASSERT_EQ(rf_integer(gf_redis, "HLEN inv:2:{%s/0}:orders", sku), 0);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "0");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 0);
}

static void test_cancel_on_damaged_segment_changes_nothing(void **state)
{
    (void)state;
    char sku[64], path[200];
    tu_unique_name(sku, sizeof sku, "dmcan");
    SF_PUT_SKU(port, DM_TOKEN, sku, 10, 1);
    sf_resp r = {0};
    sf_order(NULL, port, sku, 2, &r);
    SF_ASSERT_STATUS(&r, 201);
    snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    redis_do("HSET inv:2:{%s/%d}:cnt o %s", sku, 0, "not-a-number");
    sf_json_request(NULL, port, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    SF_ASSERT_EQ(sf_seg_stock(sku, 0), 8);
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "created") == 0, "order after a failed cancel: %s",
              r.body);
    redis_do("HSET inv:2:{%s/%d}:cnt o %s", sku, 0, "1");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 2);
    /* Repaired, the cancel works and gives the units back once. */
    sf_json_request(NULL, port, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_seg_stock(sku, 0), 10);
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

static void test_orders_fail_over_from_damaged_segment(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "dmfo");
    SF_PUT_SKU(port, DM_TOKEN, sku, 20, 2);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "not-a-number");
    for (int i = 0; i < 8; i++) {
        sf_resp r = {0};
        sf_order(NULL, port, sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        SF_ASSERT_EQ(sf_json_int(r.json, "segment", -1), 1);
        sf_resp_free(&r);
    }
    SF_ASSERT_EQ(sf_seg_stock(sku, 0), 10);
    SF_ASSERT_EQ(sf_seg_stock(sku, 1), 2);
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", sku, 0, "0");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 8);
}

/* ---- issue 18 item 5: numbers that tonumber takes and INCRBY refuses ---- */

/* Three damaged forms of the integer n: a fraction, a leading space, an exponent. */
static void damaged_forms(long long n, char out[3][32])
{
    snprintf(out[0], 32, "%lld.0", n);
    snprintf(out[1], 32, " %lld", n);
    snprintf(out[2], 32,
             "%lld"
             "e0",
             n);
}

/* PUTs sku (one segment unless told) and returns its version. */
static long long put_v(const char *sku, long long stock, int segments)
{
    sf_resp r = {0};
    sf_put_sku(port, DM_TOKEN, sku, stock, segments, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT: %s", sf_resp_summary(&r));
    long long v = sf_json_int(r.json, "version", -1);
    sf_resp_free(&r);
    return v;
}

/* A restock registered and not yet applied (as its first step leaves it): its rid. */
static long long poke_restock(const char *sku, long long version, long long units)
{
    long long rid = rf_integer(gf_redis, "HINCRBY inv:2:{%s}:meta rseq 1", sku);
    SF_ASSERT(rid > 0, "HINCRBY rseq: %lld", rid);
    redisReply *x =
        rf_command(gf_redis, "HSET inv:2:{%s}:rst %lld %lld:%lld", sku, rid, version, units);
    SF_ASSERT(x != NULL && x->type == REDIS_REPLY_INTEGER, "%s", "HSET rst");
    freeReplyObject(x);
    return rid;
}

/* The raw value of a key (field NULL) or hash field, "(nil)" when missing. */
static const char *raw(char *buf, size_t len, const char *key, const char *field)
{
    int rc = field ? rf_string(gf_redis, buf, len, "HGET %s %s", key, field)
                   : rf_string(gf_redis, buf, len, "GET %s", key);
    if (rc != 1)
        snprintf(buf, len, "(nil)");
    return buf;
}

/* Sets a key (field NULL) or hash field to value. */
static void poke(const char *key, const char *field, const char *value)
{
    redisReply *r = field ? rf_command(gf_redis, "HSET %s %s %s", key, field, value)
                          : rf_command(gf_redis, "SET %s %s", key, value);
    SF_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR, "poke %s %s", key, field ? field : "");
    freeReplyObject(r);
}

static int sku_get(const char *sku, sf_resp *r)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    return sf_http(port, "GET", path, NULL, NULL, 0, r);
}

/* A 503 that says nothing changed: no "outcome". */
static void assert_plain_503(const sf_resp *r)
{
    SF_ASSERT_ERROR(r, 503, "unavailable");
    SF_ASSERT(json_object_get(r->json, "outcome") == NULL, "a plain 503 was expected: %s",
              sf_resp_summary(r));
}

/* A pending restock on a segment whose stock or t is damaged is applied by no status read:
 * the old RESTOCK_APPLY's INCRBY of stock passed and its HINCRBY of t failed, so every read
 * added the units again (stock 10, 15, 20, ...). */
static void test_restock_on_damaged_counter_adds_nothing(void **state)
{
    (void)state;
    static const char *const fields[2] = {"t", NULL}; /* cnt t, then stock */
    for (int f = 0; f < 2; f++) {
        char forms[3][32];
        damaged_forms(10, forms);
        for (int i = 0; i < 3; i++) {
            char sku[64], key[128], before[64], after[64], cnt[128], stock[128];
            tu_unique_name(sku, sizeof sku, "dmrst");
            long long v = put_v(sku, 10, 1);
            snprintf(cnt, sizeof cnt, "inv:2:{%s/0}:cnt", sku);
            snprintf(stock, sizeof stock, "inv:2:{%s/0}:stock", sku);
            snprintf(key, sizeof key, "%s", fields[f] ? cnt : stock);
            poke(key, fields[f], forms[i]);
            poke_restock(sku, v, 5);
            raw(before, sizeof before, stock, NULL);
            sf_resp r = {0};
            for (int k = 0; k < 3; k++) {
                sku_get(sku, &r);
                assert_plain_503(&r);
            }
            SF_ASSERT(strcmp(raw(after, sizeof after, stock, NULL), before) == 0,
                      "%s %s = '%s': stock '%s' after 3 reads, was '%s'", key,
                      fields[f] ? fields[f] : "", forms[i], after, before);
            SF_ASSERT_EQ(rf_integer(gf_redis, "HLEN inv:2:{%s}:rst", sku), 1);
            /* Repaired, the restock is applied once. */
            poke(key, fields[f], "10");
            for (int k = 0; k < 2; k++) {
                sku_get(sku, &r);
                SF_ASSERT_STATUS(&r, 200);
                SF_ASSERT_EQ(sf_json_int(r.json, "stock_total", -1), 15);
            }
            sf_resp_free(&r);
            sf_report rep;
            SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
        }
    }
}

/* An order on a segment with a damaged stock, s, o or sver writes nothing: the old commit
 * wrote the order record and then failed at DECRBY or HINCRBY. */
static void test_order_on_damaged_number_changes_nothing(void **state)
{
    (void)state;
    static const struct {
        const char *suffix, *field;
        long long good;
    } cases[] = {{"stock", NULL, 10}, {"cnt", "s", 0}, {"cnt", "o", 0}, {"sver", NULL, -1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int i = 0; i < 3; i++) {
            char sku[64], key[128], st0[64], st1[64], cnt0[64], cnt1[64], forms[3][32];
            tu_unique_name(sku, sizeof sku, "dmord2");
            long long v = put_v(sku, 10, 1);
            long long good = cases[c].good < 0 ? v : cases[c].good;
            damaged_forms(good, forms);
            snprintf(key, sizeof key, "inv:2:{%s/0}:%s", sku, cases[c].suffix);
            poke(key, cases[c].field, forms[i]);
            char stock[128], cnt[128];
            snprintf(stock, sizeof stock, "inv:2:{%s/0}:stock", sku);
            snprintf(cnt, sizeof cnt, "inv:2:{%s/0}:cnt", sku);
            raw(st0, sizeof st0, stock, NULL);
            raw(cnt0, sizeof cnt0, cnt, cases[c].field ? cases[c].field : "s");
            sf_resp r = {0};
            sf_order(NULL, port, sku, 1, &r);
            SF_ASSERT(r.status == 503 || r.status == 409, "%s %s = '%s': order answered %s", key,
                      cases[c].field ? cases[c].field : "", forms[i], sf_resp_summary(&r));
            sf_resp_free(&r);
            SF_ASSERT(rf_integer(gf_redis, "HLEN inv:2:{%s/0}:orders", sku) == 0,
                      "%s %s = '%s': an order record was written", key,
                      cases[c].field ? cases[c].field : "", forms[i]);
            SF_ASSERT(strcmp(raw(st1, sizeof st1, stock, NULL), st0) == 0 &&
                          strcmp(raw(cnt1, sizeof cnt1, cnt, cases[c].field ? cases[c].field : "s"),
                                 cnt0) == 0,
                      "%s = '%s': stock '%s' -> '%s', cnt '%s' -> '%s'", key, forms[i], st0, st1,
                      cnt0, cnt1);
            char goodbuf[32];
            snprintf(goodbuf, sizeof goodbuf, "%lld", good);
            poke(key, cases[c].field, goodbuf);
            sf_report rep;
            SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
            SF_ASSERT_EQ(rep.sold, 0);
        }
    }
}

/* With --order-log, a cancel on a segment whose sver is damaged writes nothing, no log entry
 * either (a plain 503; issue 29, found by loadtest/chaos.sh's check "database"): the old
 * hold_end.lua logged GET sver verbatim as the entry's version ("<v>.0", " <v>", "<v>e0"),
 * which inventory-sink refuses as malformed and acknowledges without a row, so the database
 * kept the order's old status for good. After the repair the cancel logs the version. */
static void test_cancel_with_the_log_on_damaged_sver_logs_nothing(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--admin-token", DM_TOKEN, "--order-log", NULL};
    sf_service *lsvc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(lsvc != NULL, "%s", "inventoryd --order-log");
    int lport = sf_port(lsvc);
    char forms[3][32], sku[64], sver[128], logkey[128], path[200], goodbuf[32];
    tu_unique_name(sku, sizeof sku, "dmlog");
    sf_resp r = {0};
    sf_put_sku(lport, DM_TOKEN, sku, 10, 1, &r);
    SF_ASSERT(r.status == 201, "PUT: %s", sf_resp_summary(&r));
    long long v = sf_json_int(r.json, "version", -1);
    sf_order(NULL, lport, sku, 2, &r);
    SF_ASSERT_STATUS(&r, 201);
    snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    snprintf(sver, sizeof sver, "inv:2:{%s/0}:sver", sku);
    snprintf(logkey, sizeof logkey, "inv:2:{%s/0}:log", sku);
    SF_ASSERT_EQ(rf_integer(gf_redis, "XLEN %s", logkey), 1);
    damaged_forms(v, forms);
    for (int i = 0; i < 3; i++) {
        poke(sver, NULL, forms[i]);
        sf_json_request(NULL, lport, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
        assert_plain_503(&r);
        SF_ASSERT(rf_integer(gf_redis, "XLEN %s", logkey) == 1,
                  "sver = '%s': the refused cancel wrote a log entry", forms[i]);
        sf_http(lport, "GET", path, NULL, NULL, 0, &r);
        SF_ASSERT(r.status == 200 && strcmp(sf_str(r.json, "status"), "created") == 0,
                  "sver = '%s': the order after a refused cancel: %s", forms[i], r.body);
    }
    snprintf(goodbuf, sizeof goodbuf, "%lld", v);
    poke(sver, NULL, goodbuf);
    sf_json_request(NULL, lport, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(rf_integer(gf_redis, "XLEN %s", logkey), 2);
    redisReply *e = rf_command(gf_redis, "XREVRANGE %s + - COUNT 1", logkey);
    SF_ASSERT(e != NULL && e->type == REDIS_REPLY_ARRAY && e->elements == 1, "%s", "XREVRANGE");
    const redisReply *f = e->element[0]->element[1];
    const char *ver = NULL;
    for (size_t j = 0; j + 1 < f->elements; j += 2)
        if (strcmp(f->element[j]->str, "version") == 0)
            ver = f->element[j + 1]->str;
    SF_ASSERT(ver != NULL && strcmp(ver, goodbuf) == 0, "the cancel's entry: version '%s', want %s",
              ver ? ver : "(none)", goodbuf);
    freeReplyObject(e);
    SF_ASSERT_EQ(sf_stop(lsvc), 0);
}

/* A cancel on a segment with a damaged stock, s or o writes nothing (a plain 503): the old
 * cancel marked the record cancelled and then failed at INCRBY or HINCRBY. */
static void test_cancel_on_damaged_number_changes_nothing(void **state)
{
    (void)state;
    static const struct {
        const char *suffix, *field;
        long long good;
    } cases[] = {{"stock", NULL, 8}, {"cnt", "s", 2}, {"cnt", "o", 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char forms[3][32];
        damaged_forms(cases[c].good, forms);
        for (int i = 0; i < 3; i++) {
            char sku[64], key[128], path[200], st0[64], st1[64];
            tu_unique_name(sku, sizeof sku, "dmcan2");
            put_v(sku, 10, 1);
            sf_resp r = {0};
            sf_order(NULL, port, sku, 2, &r);
            SF_ASSERT_STATUS(&r, 201);
            snprintf(path, sizeof path, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
            snprintf(key, sizeof key, "inv:2:{%s/0}:%s", sku, cases[c].suffix);
            poke(key, cases[c].field, forms[i]);
            char stock[128];
            snprintf(stock, sizeof stock, "inv:2:{%s/0}:stock", sku);
            raw(st0, sizeof st0, stock, NULL);
            sf_json_request(NULL, port, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
            assert_plain_503(&r);
            sf_http(port, "GET", path, NULL, NULL, 0, &r);
            SF_ASSERT_STATUS(&r, 200);
            SF_ASSERT(strcmp(sf_str(r.json, "status"), "created") == 0,
                      "%s %s = '%s': the order after a refused cancel: %s", key,
                      cases[c].field ? cases[c].field : "", forms[i], r.body);
            SF_ASSERT(strcmp(raw(st1, sizeof st1, stock, NULL), st0) == 0,
                      "%s = '%s': stock '%s' -> '%s'", key, forms[i], st0, st1);
            char goodbuf[32];
            snprintf(goodbuf, sizeof goodbuf, "%lld", cases[c].good);
            poke(key, cases[c].field, goodbuf);
            sf_json_request(NULL, port, "DELETE", path, DM_TOKEN, NULL, NULL, &r);
            SF_ASSERT_STATUS(&r, 200);
            sf_resp_free(&r);
            sf_report rep;
            SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
            SF_ASSERT_EQ(rep.sold, 0);
        }
    }
}

/* A re-PUT over a segment whose sver is damaged does not reset it and does not answer 2xx: its
 * intent is recorded (503 with "outcome":"unknown") and the next read completes it once the
 * sver is repaired. The old SEG_RESET took "1e3" as version 1000 and left the segment as it
 * was, and the PUT answered 200. */
static void test_put_over_damaged_sver(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        char sku[64], sver[128], stock[128], forms[3][32], before[64], after[64];
        tu_unique_name(sku, sizeof sku, "dmsver");
        long long v = put_v(sku, 10, 2);
        damaged_forms(v, forms);
        if (i == 2)
            snprintf(forms[2], 32, "1e3"); /* an exponent that reads as a newer version */
        snprintf(sver, sizeof sver, "inv:2:{%s/1}:sver", sku);
        snprintf(stock, sizeof stock, "inv:2:{%s/1}:stock", sku);
        poke(sver, NULL, forms[i]);
        raw(before, sizeof before, stock, NULL);
        sf_resp r = {0};
        sf_put_sku(port, DM_TOKEN, sku, 40, 2, &r);
        SF_ASSERT_OUTCOME_UNKNOWN(&r); /* its intent is recorded */
        SF_ASSERT(strcmp(raw(after, sizeof after, stock, NULL), before) == 0,
                  "sver '%s': segment 1's stock '%s' -> '%s'", forms[i], before, after);
        sku_get(sku, &r);
        assert_plain_503(&r);
        char vbuf[32];
        snprintf(vbuf, sizeof vbuf, "%lld", v);
        poke(sver, NULL, vbuf);
        sku_get(sku, &r);
        SF_ASSERT_STATUS(&r, 200);
        SF_ASSERT(sf_json_int(r.json, "version", -1) > v &&
                      sf_json_int(r.json, "stock_total", -1) == 40,
                  "after repair: %s", r.body);
        sf_resp_free(&r);
        sf_report rep;
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    }
}

/* A damaged version, segments or rseq in meta: a restock writes nothing (plain 503), and a
 * status read answers 503 (not 404: the SKU exists). The old RESTOCK_BEGIN registered
 * "<version>.0:5", which the service could not parse: it answered 409 "nothing was added" and
 * left the restock pending, to be applied once someone repaired the version. */
static void test_damaged_meta_changes_nothing(void **state)
{
    (void)state;
    static const char *const fields[3] = {"version", "segments", "rseq"};
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < 3; i++) {
            char sku[64], meta[128], forms[3][32], rseq0[64], rseq1[64], goodbuf[32];
            tu_unique_name(sku, sizeof sku, "dmmeta");
            long long v = put_v(sku, 10, 1);
            long long good = f == 0 ? v : f == 1 ? 1 : 0;
            damaged_forms(good, forms);
            snprintf(meta, sizeof meta, "inv:2:{%s}:meta", sku);
            poke(meta, fields[f], forms[i]);
            raw(rseq0, sizeof rseq0, meta, "rseq");
            sf_resp r = {0};
            sf_restock(port, DM_TOKEN, sku, 5, &r);
            assert_plain_503(&r);
            SF_ASSERT(rf_integer(gf_redis, "HLEN inv:2:{%s}:rst", sku) == 0,
                      "meta %s = '%s': a restock was registered", fields[f], forms[i]);
            SF_ASSERT(strcmp(raw(rseq1, sizeof rseq1, meta, "rseq"), rseq0) == 0,
                      "meta %s = '%s': rseq '%s' -> '%s'", fields[f], forms[i], rseq0, rseq1);
            if (f < 2) {
                sku_get(sku, &r);
                assert_plain_503(&r);
            }
            snprintf(goodbuf, sizeof goodbuf, "%lld", good);
            poke(meta, fields[f], goodbuf);
            sf_restock(port, DM_TOKEN, sku, 5, &r);
            SF_ASSERT_STATUS(&r, 200);
            SF_ASSERT_EQ(sf_json_int(r.json, "stock_total", -1), 15);
            sf_resp_free(&r);
            sf_report rep;
            SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
        }
    }
}

/* A pending restock entry whose version or units is damaged is applied by no one (a status
 * read answers 503) until repaired. The old parser (sscanf %lld) read "<v>:5e3" as 5 units and
 * " <v>:5" as version v: it applied what the entry did not say. */
static void test_damaged_pending_entry_applies_nothing(void **state)
{
    (void)state;
    for (int i = 0; i < 4; i++) {
        char sku[64], val[64], stock[128], before[64], after[64];
        tu_unique_name(sku, sizeof sku, "dmpend");
        long long v = put_v(sku, 10, 1);
        long long rid = poke_restock(sku, v, 5);
        switch (i) {
        case 0: snprintf(val, sizeof val, "%lld:5.0", v); break;
        case 1: snprintf(val, sizeof val, "%lld: 5", v); break;
        case 2: snprintf(val, sizeof val, "%lld:5e3", v); break;
        default: snprintf(val, sizeof val, " %lld:5", v); break;
        }
        char rst[128], ridbuf[32];
        snprintf(rst, sizeof rst, "inv:2:{%s}:rst", sku);
        snprintf(ridbuf, sizeof ridbuf, "%lld", rid);
        poke(rst, ridbuf, val);
        snprintf(stock, sizeof stock, "inv:2:{%s/0}:stock", sku);
        raw(before, sizeof before, stock, NULL);
        sf_resp r = {0};
        sku_get(sku, &r);
        assert_plain_503(&r);
        SF_ASSERT(strcmp(raw(after, sizeof after, stock, NULL), before) == 0,
                  "pending entry '%s': stock '%s' -> '%s'", val, before, after);
        snprintf(val, sizeof val, "%lld:5", v);
        poke(rst, ridbuf, val);
        sku_get(sku, &r);
        SF_ASSERT_STATUS(&r, 200);
        SF_ASSERT_EQ(sf_json_int(r.json, "stock_total", -1), 15);
        sf_resp_free(&r);
        sf_report rep;
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    }
}

/* The log line of the order_unavailable answer for sku, into line ("" when none). */
static void unavailable_line(const sf_service *s, const char *sku, char *line, size_t size)
{
    char needle[128];
    snprintf(needle, sizeof needle, "\"msg\":\"sku %s:", sku);
    line[0] = '\0';
    FILE *f = fopen(sf_log_path(s), "r");
    SF_ASSERT(f != NULL, "%s", "cannot read the service's log");
    char buf[4096];
    while (fgets(buf, sizeof buf, f))
        if (strstr(buf, "order_unavailable") && strstr(buf, needle))
            snprintf(line, size, "%s", buf);
    fclose(f);
}

/* Two orders failing on one worker loop, each for a reason of its own: the first's commit
 * script fails in Redis (its orders key has the wrong type), the second's segment is damaged
 * (the script answers so; lockcore reports no failure). Each log line carries its own reason:
 * the message travels with the request, not in lockcore's thread-local lc_errmsg(), which
 * still held the first order's error when the second answered (issue 18 item 7). */
/* A restock pending while one segment's t is damaged: that segment refuses its share, and the
 * SKU keeps selling from the others (issue 18, found by chaos.sh's damager, seed 395170: every
 * order of the SKU answered 503 while the damage lasted, because the settle of the pending
 * restock failed as a whole). Once repaired, the next read applies the rest, once. */
static void test_pending_restock_on_damaged_segment_keeps_selling(void **state)
{
    (void)state;
    char sku[64], cnt[128];
    tu_unique_name(sku, sizeof sku, "dmrsell");
    long long v = put_v(sku, 20, 2);
    snprintf(cnt, sizeof cnt, "inv:2:{%s/1}:cnt", sku);
    poke(cnt, "t", "10.0");
    poke_restock(sku, v, 6);
    sf_resp r = {0};
    for (int i = 0; i < 6; i++) {
        sf_order(NULL, port, sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
    }
    poke(cnt, "t", "10");
    sku_get(sku, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(sf_json_int(r.json, "stock_total", -1) == 26 && sf_json_int(r.json, "sold", -1) == 6,
              "after the repair: %s", r.body);
    sku_get(sku, &r);
    SF_ASSERT_EQ(sf_json_int(r.json, "stock_total", -1), 26);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 6);
}

/* The same with the orders spread over more than sold_out_recheck_ms (500 ms), so that the
 * instance's copy of the SKU's rules (issue 20) goes stale and is read again, beside a segment
 * whose sver is damaged: the re-read must not fail the order (the other segment sells). */
static void test_rules_read_again_beside_a_damaged_segment_keeps_selling(void **state)
{
    (void)state;
    char sku[64], sver[128], val[64];
    tu_unique_name(sku, sizeof sku, "dmrules");
    long long v = put_v(sku, 20, 2);
    snprintf(sver, sizeof sver, "inv:2:{%s/1}:sver", sku);
    snprintf(val, sizeof val, "%llde0", v);
    redisReply *x = rf_command(gf_redis, "SET %s %s", sver, val);
    freeReplyObject(x);
    poke_restock(sku, v, 6);
    sf_resp r = {0};
    for (int i = 0; i < 3; i++) {
        sf_order(NULL, port, sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        tu_sleep_ms(700); /* the rules copy is stale for the next order */
    }
    snprintf(val, sizeof val, "%lld", v);
    x = rf_command(gf_redis, "SET %s %s", sver, val);
    freeReplyObject(x);
    sku_get(sku, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 3);
}

static void test_each_order_logs_its_own_error(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--admin-token", DM_TOKEN, NULL};
    sf_service *one = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(one != NULL, "%s", "cannot start inventoryd");
    int p = sf_port(one);
    char a[64], b[64], line[4096];
    tu_unique_name(a, sizeof a, "dmloga");
    tu_unique_name(b, sizeof b, "dmlogb");
    sf_resp r = {0};
    sf_put_sku(p, DM_TOKEN, a, 10, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_put_sku(p, DM_TOKEN, b, 10, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    redis_do("SET inv:2:{%s/%d}:orders %s", a, 0, "not-a-hash");
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", b, 0, "not-a-number");
    sf_order(NULL, p, a, 1, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    sf_order(NULL, p, b, 1, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    sf_resp_free(&r);
    unavailable_line(one, b, line, sizeof line);
    fprintf(stderr, "%s: %s", b, line);
    SF_ASSERT(strstr(line, "damaged") != NULL && strstr(line, "WRONGTYPE") == NULL &&
                  strstr(line, "body failed") == NULL,
              "%s's line does not carry its own reason: %s", b, line);
    unavailable_line(one, a, line, sizeof line);
    fprintf(stderr, "%s: %s", a, line);
    SF_ASSERT(strstr(line, "WRONGTYPE") != NULL, "%s's line lacks its Redis error: %s", a, line);
    SF_ASSERT_EQ(sf_stop(one), 0);
    redis_do("DEL inv:2:{%s/%d}:orders%s", a, 0, "");
    redis_do("HSET inv:2:{%s/%d}:cnt s %s", b, 0, "0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_on_damaged_segment_changes_nothing),
        cmocka_unit_test(test_cancel_on_damaged_segment_changes_nothing),
        cmocka_unit_test(test_orders_fail_over_from_damaged_segment),
        cmocka_unit_test(test_restock_on_damaged_counter_adds_nothing),
        cmocka_unit_test(test_order_on_damaged_number_changes_nothing),
        cmocka_unit_test(test_cancel_on_damaged_number_changes_nothing),
        cmocka_unit_test(test_cancel_with_the_log_on_damaged_sver_logs_nothing),
        cmocka_unit_test(test_put_over_damaged_sver),
        cmocka_unit_test(test_damaged_meta_changes_nothing),
        cmocka_unit_test(test_damaged_pending_entry_applies_nothing),
        cmocka_unit_test(test_pending_restock_on_damaged_segment_keeps_selling),
        cmocka_unit_test(test_rules_read_again_beside_a_damaged_segment_keeps_selling),
        cmocka_unit_test(test_each_order_logs_its_own_error),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
