/*
 * A SKU's layout under concurrent, interrupted and retried admin calls (issue 9, layout.c), on
 * a real redis-server and two real inventoryd instances:
 *
 *   - concurrent PUTs of one SKU with different stock and segment counts, through both
 *     instances, leave exactly one PUT's layout, consistent and sellable;
 *   - a PUT cut off after its meta write (written into Redis by the test, as a killed PUT
 *     leaves it) is completed by the next order, or by the next status read;
 *   - PUT and restock with an Idempotency-Key apply once, a replay answers the same;
 *   - a restock while a PUT is half rolled out adds to the new layout and says what it added;
 *     a restock overtaken by a re-PUT answers 409 sku_changed;
 *   - a restock cut off after registering is completed by the next status read, or (on a SKU
 *     sold out) by the next order once the instance re-checks its sold-out answer;
 *   - every status answer read while orders run satisfies SPEC §8 on its own (each segment is
 *     read by one script now; the old read, GET stock then HMGET counters, could interleave
 *     with a commit only where Redis split the pipelined read, which this test never caught
 *     in practice: it guards the new read, it did not fail before).
 * The invariant checker (SPEC §8, from Redis directly) runs after each.
 */
#include "svc_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define LY_TOKEN "layout-test-token"
#define LY_PUT_THREADS 8
#define LY_PUT_ROUNDS 6

static sf_service *svc[2];
static int port[2];

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "8", "--admin-token", LY_TOKEN, "--lock-wait-ms",
                          "3000",      NULL};
    for (int i = 0; i < 2; i++) {
        if (!(svc[i] = sf_group_service(args)))
            return -1;
        port[i] = sf_port(svc[i]);
    }
    return 0;
}

static long long put_with_key(int p, const char *sku, long long stock, int segments,
                              const char *key, int want)
{
    char body[96];
    snprintf(body, sizeof body, "{\"stock\": %lld, \"segments\": %d}", stock, segments);
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, p, "PUT", path, LY_TOKEN, key, body, &r);
    SF_ASSERT_STATUS(&r, want);
    long long v = sf_json_int(r.json, "version", -1);
    sf_resp_free(&r);
    return v;
}

static void restock(int p, const char *sku, long long qty, const char *key, sf_resp *r)
{
    char body[64], path[256];
    snprintf(body, sizeof body, "{\"quantity\": %lld}", qty);
    snprintf(path, sizeof path, "/api/v1/skus/%s/restock", sku);
    sf_json_request(NULL, p, "POST", path, LY_TOKEN, key, body, r);
}

/* Checks SPEC §8 on a status answer alone; "" when it holds, else what is wrong. */
static const char *status_problem(const json_t *st, char *buf, size_t len)
{
    long long total = sf_json_int(st, "stock_total", -1), rem = sf_json_int(st, "remaining", -1),
              sold = sf_json_int(st, "sold", -1);
    long long srem = 0, ssold = 0;
    const json_t *segs = json_object_get(st, "segments");
    size_t i;
    const json_t *s;
    json_array_foreach(segs, i, s)
    {
        long long a = sf_json_int(s, "remaining", -1), b = sf_json_int(s, "sold", -1);
        if (a < 0 || b < 0)
            return snprintf(buf, len, "segment %zu negative", i), buf;
        srem += a;
        ssold += b;
    }
    if (total < 0 || rem < 0 || sold < 0 || sold != total - rem || srem != rem || ssold != sold)
        return snprintf(buf, len,
                        "stock_total %lld remaining %lld sold %lld, segments: "
                        "remaining %lld sold %lld",
                        total, rem, sold, srem, ssold),
               buf;
    return "";
}

/* ---- concurrent PUTs -------------------------------------------------------------------- */

struct ly_putter {
    int p;
    const char *sku;
    long long stock;
    int segments;
    pthread_barrier_t *go;
    int status;
    long long version;
    pthread_t tid;
};

static void *ly_put_run(void *arg)
{
    struct ly_putter *w = arg;
    char body[96], path[160];
    snprintf(body, sizeof body, "{\"stock\": %lld, \"segments\": %d}", w->stock, w->segments);
    snprintf(path, sizeof path, "/api/v1/skus/%s", w->sku);
    pthread_barrier_wait(w->go);
    sf_resp r = {0};
    w->status = sf_json_request(NULL, w->p, "PUT", path, LY_TOKEN, NULL, body, &r);
    w->version = sf_json_int(r.json, "version", -1);
    sf_resp_free(&r);
    return NULL;
}

static void test_concurrent_puts_leave_one_layout(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "cput");
    for (int round = 0; round < LY_PUT_ROUNDS; round++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, LY_PUT_THREADS);
        struct ly_putter w[LY_PUT_THREADS];
        for (int i = 0; i < LY_PUT_THREADS; i++) {
            /* Different segment counts (large and small) and a stock that tells them apart. */
            w[i] = (struct ly_putter){.p = port[i % 2],
                                      .sku = sku,
                                      .go = &go,
                                      .segments = 1 + (i * 37 + round * 11) % 64,
                                      .stock = 1000 + 100 * i + round};
            assert_int_equal(pthread_create(&w[i].tid, NULL, ly_put_run, &w[i]), 0);
        }
        for (int i = 0; i < LY_PUT_THREADS; i++)
            pthread_join(w[i].tid, NULL);
        pthread_barrier_destroy(&go);
        int newest = -1;
        for (int i = 0; i < LY_PUT_THREADS; i++) {
            SF_ASSERT(w[i].status == 200 || w[i].status == 201, "PUT %d answered %d", i,
                      w[i].status);
            if (newest < 0 || w[i].version > w[newest].version)
                newest = i;
        }
        /* The layout is the newest PUT's, whole, on every segment, through either instance. */
        json_t *st = sf_sku_status(port[round % 2], sku);
        SF_ASSERT(st != NULL, "round %d: no status", round);
        char buf[200];
        const char *bad = status_problem(st, buf, sizeof buf);
        SF_ASSERT(bad[0] == '\0', "round %d: %s", round, bad);
        long long segs = (long long)json_array_size(json_object_get(st, "segments"));
        SF_ASSERT(sf_json_int(st, "version", -1) == w[newest].version &&
                      segs == w[newest].segments &&
                      sf_json_int(st, "stock_total", -1) == w[newest].stock,
                  "round %d: status version %lld, %lld segments, stock_total %lld; the newest "
                  "PUT was version %lld with %d segments and stock %lld",
                  round, sf_json_int(st, "version", -1), segs, sf_json_int(st, "stock_total", -1),
                  w[newest].version, w[newest].segments, w[newest].stock);
        json_decref(st);
        sf_report rep;
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
        /* And it sells. */
        sf_resp r = {0};
        sf_order(NULL, port[(round + 1) % 2], sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        sf_resp_free(&r);
    }
}

/* ---- interrupted PUT ------------------------------------------------------------------ */

/* Writes into Redis what a PUT killed right after its meta write leaves: the new version and
 * layout in meta, state "p", the segments untouched. Returns the new version. */
static long long cut_off_put(const char *sku, long long stock, int segments, int old_segments)
{
    long long v = rf_integer(gf_redis, "INCR inv:2:{%s}:ver", sku);
    SF_ASSERT(v > 0, "INCR ver: %lld", v);
    redisReply *r =
        rf_command(gf_redis,
                   "HSET inv:2:{%s}:meta version %lld segments %d stock %lld state p "
                   "hwm %d",
                   sku, v, segments, stock, segments > old_segments ? segments : old_segments);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "%s", "HSET meta");
    freeReplyObject(r);
    return v;
}

static void test_interrupted_put_completed_by_next_order(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "iput");
    put_with_key(port[0], sku, 100, 4, NULL, 201);
    long long v = cut_off_put(sku, 10, 2, 4);
    /* Orders on the other instance (it has not cached the SKU yet) sell from the new layout. */
    for (int i = 0; i < 3; i++) {
        sf_resp r = {0};
        sf_order(NULL, port[1], sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        sf_resp_free(&r);
    }
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.version == v && rep.segments == 2 && rep.stock_total == 10 && rep.sold == 3,
              "version %lld (want %lld), %d segments, stock_total %lld, sold %lld", rep.version, v,
              rep.segments, rep.stock_total, rep.sold);
}

static void test_interrupted_put_completed_by_status_read(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "iputs");
    put_with_key(port[0], sku, 100, 3, NULL, 201);
    long long v = cut_off_put(sku, 50, 5, 3);
    json_t *st = sf_sku_status(port[1], sku);
    SF_ASSERT(st != NULL, "%s", "no status");
    SF_ASSERT(sf_json_int(st, "version", -1) == v && sf_json_int(st, "stock_total", -1) == 50 &&
                  json_array_size(json_object_get(st, "segments")) == 5,
              "status after a cut-off PUT: %s", json_dumps(st, JSON_COMPACT));
    json_decref(st);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

/* ---- Idempotency-Key on PUT and restock --------------------------------------------------- */

static void test_put_idempotency_key_applies_once(void **state)
{
    (void)state;
    char sku[64], key[80];
    tu_unique_name(sku, sizeof sku, "iputk");
    snprintf(key, sizeof key, "put-%s", sku);
    long long v1 = put_with_key(port[0], sku, 40, 4, key, 201);
    sf_resp o = {0};
    sf_order(NULL, port[0], sku, 1, &o);
    SF_ASSERT_STATUS(&o, 201);
    sf_resp_free(&o);
    /* The retry (through the other instance) replays the first answer, and re-PUTs nothing: the
     * order made meanwhile is still there. */
    long long v2 = put_with_key(port[1], sku, 40, 4, key, 201);
    SF_ASSERT(v2 == v1, "a replayed PUT answered version %lld, the first %lld", v2, v1);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.version == v1 && rep.sold == 1, "version %lld (want %lld), sold %lld (want 1)",
              rep.version, v1, rep.sold);
    /* Another key is another PUT. */
    long long v3 = put_with_key(port[1], sku, 40, 4, "another-key", 200);
    SF_ASSERT(v3 > v1, "version %lld after a new PUT, was %lld", v3, v1);
}

static void test_restock_idempotency_key_applies_once(void **state)
{
    (void)state;
    char sku[64], key[80];
    tu_unique_name(sku, sizeof sku, "irst");
    snprintf(key, sizeof key, "restock-%s", sku);
    put_with_key(port[0], sku, 8, 4, NULL, 201);
    sf_resp r = {0}, r2 = {0};
    restock(port[0], sku, 6, key, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(sf_json_int(r.json, "added", -1), 6);
    restock(port[1], sku, 6, key, &r2);
    SF_ASSERT_STATUS(&r2, 200);
    SF_ASSERT(json_equal(r.json, r2.json), "replay %s differs from the first answer %s", r2.body,
              r.body);
    sf_resp_free(&r);
    sf_resp_free(&r2);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.stock_total, 14);
}

static void test_restock_during_rollout_adds_to_new_layout(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rroll");
    put_with_key(port[0], sku, 100, 4, NULL, 201);
    cut_off_put(sku, 20, 4, 4); /* a PUT half-way: meta new, segments still old */
    sf_resp r = {0};
    restock(port[1], sku, 8, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(sf_json_int(r.json, "added", -1) == 8 && sf_json_int(r.json, "stock_total", -1) == 28,
              "restock answered %s, want added 8 and stock_total 20 + 8", r.body);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.stock_total, 28);
}

static void test_restock_overtaken_by_put_is_sku_changed(void **state)
{
    (void)state;
    char sku[64], key[80];
    tu_unique_name(sku, sizeof sku, "rchg");
    snprintf(key, sizeof key, "rk-%s", sku);
    long long v = put_with_key(port[0], sku, 10, 2, NULL, 201);
    /* A restock registered (as its first step leaves it), then a re-PUT before it was applied;
     * its client retries with the key. */
    long long rid = rf_integer(gf_redis, "HINCRBY inv:2:{%s}:meta rseq 1", sku);
    redisReply *x = rf_command(gf_redis, "HSET inv:2:{%s}:rst %lld %lld:5", sku, rid, v);
    freeReplyObject(x);
    char val[64];
    snprintf(val, sizeof val, "P %lld 5", rid);
    x = rf_command(gf_redis, "SET inv:2:{%s}:aidem:restock:%s %s", sku, key, val);
    freeReplyObject(x);
    put_with_key(port[1], sku, 30, 3, NULL, 200);
    sf_resp r = {0};
    restock(port[0], sku, 5, key, &r);
    SF_ASSERT_ERROR(&r, 409, "sku_changed");
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.stock_total, 30);
}

static void test_interrupted_restock_completed_by_status_read(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rcut");
    long long v = put_with_key(port[0], sku, 10, 3, NULL, 201);
    long long rid = rf_integer(gf_redis, "HINCRBY inv:2:{%s}:meta rseq 1", sku);
    redisReply *x = rf_command(gf_redis, "HSET inv:2:{%s}:rst %lld %lld:7", sku, rid, v);
    freeReplyObject(x);
    json_t *st = sf_sku_status(port[1], sku);
    SF_ASSERT(st != NULL && sf_json_int(st, "stock_total", -1) == 17,
              "status after a cut-off restock of 7 on 10: %s",
              st ? json_dumps(st, JSON_COMPACT) : "none");
    json_decref(st);
    /* Applied once: a second read adds nothing. */
    st = sf_sku_status(port[0], sku);
    SF_ASSERT_EQ(sf_json_int(st, "stock_total", -1), 17);
    json_decref(st);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
}

static void test_cut_off_restock_after_sell_out_completed_by_order(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rso");
    long long v = put_with_key(port[0], sku, 2, 1, NULL, 201);
    sf_resp r = {0};
    for (int i = 0; i < 2; i++) {
        sf_order(NULL, port[1], sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
    }
    sf_order(NULL, port[1], sku, 1, &r);
    SF_ASSERT_ERROR(&r, 409, "sold_out");
    /* A restock registered and cut off before it reached the segment; only orders come. */
    long long rid = rf_integer(gf_redis, "HINCRBY inv:2:{%s}:meta rseq 1", sku);
    redisReply *x = rf_command(gf_redis, "HSET inv:2:{%s}:rst %lld %lld:5", sku, rid, v);
    freeReplyObject(x);
    /* The instance's sold-out answer is re-checked within sold_out_recheck_ms (<= 1 s). */
    int64_t until = tu_now_ms() + 5000;
    int st;
    do {
        tu_sleep_ms(100);
        st = sf_order(NULL, port[1], sku, 1, &r);
    } while (st == 409 && tu_now_ms() < until);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.stock_total == 7 && rep.sold == 3, "stock_total %lld (want 7), sold %lld",
              rep.stock_total, rep.sold);
}

/* ---- counters that go back (issue 18 item 4) -------------------------------------------- */

/* The SKU's master fails over before its last PUT replicated: its meta and version counter go
 * back to the previous PUT's, while the segments (other masters) kept the lost PUT's version.
 * The next PUT must still apply: with a reused version every segment's reset was a no-op and
 * the PUT was answered 200 with the old stock left in place. Failed on the old binary
 * (stock_total 20, not 50). */
static void test_put_after_version_counter_went_back(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "vback");
    long long v1 = put_with_key(port[0], sku, 10, 2, NULL, 201);
    long long v2 = put_with_key(port[0], sku, 20, 2, NULL, 200);
    SF_ASSERT(v2 > v1, "versions %lld then %lld", v1, v2);
    /* What the promoted replica holds: the first PUT's meta and counter. */
    redisReply *x = rf_command(gf_redis, "SET inv:2:{%s}:ver %lld", sku, v1);
    freeReplyObject(x);
    x = rf_command(gf_redis, "HSET inv:2:{%s}:meta version %lld stock 10 state r", sku, v1);
    freeReplyObject(x);
    tu_sleep_ms(5); /* a failover takes seconds (the cluster's node timeout), never less */
    long long v3 = put_with_key(port[1], sku, 50, 2, NULL, 200);
    SF_ASSERT(v3 > v2,
              "the PUT after the counter went back got version %lld, the segments "
              "already carry %lld",
              v3, v2);
    json_t *st = sf_sku_status(port[0], sku);
    SF_ASSERT(st != NULL && sf_json_int(st, "stock_total", -1) == 50,
              "status after the PUT of 50: %s", st ? json_dumps(st, JSON_COMPACT) : "none");
    json_decref(st);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.stock_total, 50);
}

/* The same for restock ids: the meta's rseq goes back below a restock every segment has
 * applied (and its "done" marker is lost with it). The next restock must add its units: with
 * a reused id every segment took it for a replay and the restock answered 200 "added" with
 * nothing added. Failed on the old binary (stock_total 15, not 22). */
static void test_restock_after_restock_id_went_back(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rback");
    put_with_key(port[0], sku, 10, 2, NULL, 201);
    sf_resp r = {0};
    restock(port[0], sku, 5, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    long long rid = rf_integer(gf_redis, "HINCRBY inv:2:{%s}:meta rseq 0", sku);
    SF_ASSERT(rid > 0, "rseq %lld", rid);
    redisReply *x = rf_command(gf_redis, "HSET inv:2:{%s}:meta rseq %lld", sku, rid - 1);
    freeReplyObject(x);
    x = rf_command(gf_redis, "DEL inv:2:{%s}:rres:%lld", sku, rid);
    freeReplyObject(x);
    tu_sleep_ms(5); /* as a failover: never that fast */
    restock(port[1], sku, 7, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(sf_json_int(r.json, "stock_total", -1) == 22,
              "restock of 7 on 15 after rseq went back answered %s", r.body);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.stock_total, 22);
}

/* ---- status answers under load ---------------------------------------------------------- */

struct ly_buyer {
    int p;
    const char *sku;
    atomic_int *stop;
    int created;
    pthread_t tid;
};

static void *ly_buy(void *arg)
{
    struct ly_buyer *b = arg;
    sf_conn *c = sf_conn_open(b->p, 5000);
    sf_resp r = {0};
    while (!atomic_load(b->stop) && b->created < 100000)
        if (sf_order(c, 0, b->sku, 1, &r) == 201)
            b->created++;
    sf_resp_free(&r);
    sf_conn_close(c);
    return NULL;
}

/* Issue 18 item 1: SKU names may contain ':', so schema 1's segment tag {x:1} was SKU "x:1"'s
 * own tag: restocking "x" made every request of "x:1" answer 503, and a PUT or DELETE of "x:1"
 * erased x's applied-restock set (a pending restock of x could then be applied twice). Failed
 * on the schema-1 binary (GET x:1 answered 503 after the restock of x). */
static void test_sku_names_that_alias(void **state)
{
    (void)state;
    char base[48], var[3][64];
    tu_unique_name(base, sizeof base, "alias");
    put_with_key(port[0], base, 40, 4, NULL, 201);
    for (int i = 0; i < 3; i++) {
        snprintf(var[i], sizeof var[i], "%s:%d", base, i + 1);
        put_with_key(port[i % 2], var[i], 10, 2, NULL, 201);
    }
    sf_resp r = {0};
    restock(port[0], base, 8, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        json_t *st = sf_sku_status(port[1], var[i]);
        SF_ASSERT(st != NULL && sf_json_int(st, "stock_total", -1) == 10,
                  "status of %s after a restock of %s: %s", var[i], base,
                  st ? json_dumps(st, JSON_COMPACT) : "no answer");
        json_decref(st);
        sf_order(NULL, port[i % 2], var[i], 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        sf_resp_free(&r);
        restock(port[1], var[i], 2, NULL, &r);
        SF_ASSERT_STATUS(&r, 200);
        sf_resp_free(&r);
    }
    /* A re-PUT and a DELETE of a variant leave the base SKU alone. */
    put_with_key(port[1], var[0], 6, 4, NULL, 200);
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", var[1]);
    sf_json_request(NULL, port[0], "DELETE", path, LY_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);
    for (int k = 0; k < 4; k++) {
        sf_order(NULL, port[k % 2], base, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        sf_resp_free(&r);
    }
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), base, &rep);
    SF_ASSERT(rep.stock_total == 48 && rep.sold == 4, "%s: stock_total %lld (want 48), sold %lld",
              base, rep.stock_total, rep.sold);
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), var[0], &rep);
    SF_ASSERT(rep.stock_total == 6 && rep.sold == 0, "%s: stock_total %lld (want 6)", var[0],
              rep.stock_total);
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), var[2], &rep);
    SF_ASSERT(rep.stock_total == 12 && rep.sold == 1, "%s: stock_total %lld (want 12)", var[2],
              rep.stock_total);
}

static void test_status_answers_consistent_under_orders(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "stcons");
    put_with_key(port[0], sku, 10000000, 64, NULL, 201);
    atomic_int stop = 0;
    struct ly_buyer b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (struct ly_buyer){.p = port[i % 2], .sku = sku, .stop = &stop};
        assert_int_equal(pthread_create(&b[i].tid, NULL, ly_buy, &b[i]), 0);
    }
    int bad = 0, reads = 0;
    char first[300] = "", buf[200];
    sf_conn *c = sf_conn_open(port[0], 5000);
    sf_resp r = {0};
    int64_t until = tu_now_ms() + 3000;
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    while (tu_now_ms() < until && reads < 2000) {
        if (sf_conn_request(c, "GET", path, NULL, NULL, 0, &r) != 200)
            continue;
        reads++;
        const char *p = status_problem(r.json, buf, sizeof buf);
        if (p[0] != '\0' && bad++ == 0)
            snprintf(first, sizeof first, "%s", p);
    }
    sf_resp_free(&r);
    sf_conn_close(c);
    atomic_store(&stop, 1);
    int created = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(b[i].tid, NULL);
        created += b[i].created;
    }
    fprintf(stderr, "%d status reads while %d orders were placed; %d inconsistent\n", reads,
            created, bad);
    SF_ASSERT(reads > 20 && created > 20, "only %d reads, %d orders", reads, created);
    SF_ASSERT(bad == 0, "%d of %d status answers broke SPEC §8 on their own, e.g. %s", bad, reads,
              first);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_puts_leave_one_layout),
        cmocka_unit_test(test_interrupted_put_completed_by_next_order),
        cmocka_unit_test(test_interrupted_put_completed_by_status_read),
        cmocka_unit_test(test_put_idempotency_key_applies_once),
        cmocka_unit_test(test_restock_idempotency_key_applies_once),
        cmocka_unit_test(test_restock_during_rollout_adds_to_new_layout),
        cmocka_unit_test(test_restock_overtaken_by_put_is_sku_changed),
        cmocka_unit_test(test_interrupted_restock_completed_by_status_read),
        cmocka_unit_test(test_cut_off_restock_after_sell_out_completed_by_order),
        cmocka_unit_test(test_sku_names_that_alias),
        cmocka_unit_test(test_status_answers_consistent_under_orders),
        cmocka_unit_test(test_put_after_version_counter_went_back),
        cmocka_unit_test(test_restock_after_restock_id_went_back),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
