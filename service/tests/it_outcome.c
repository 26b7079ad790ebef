/*
 * What POST /api/v1/orders answers when Redis stops answering, against a real redis-server
 * (frozen with SIGSTOP, thawed with SIGCONT) and a real inventoryd:
 *
 *   - frozen while the order holds its segment lock (inside --hold-ms), so the fenced commit
 *     script is sent and its reply never comes: 503 unavailable + Retry-After, marked
 *     "outcome": "unknown", the Idempotency-Key claim left pending. Once thawed, Redis runs the
 *     commit it had received: the order exists. A retry with the same key, polled until the
 *     pending claim is older than the service's bound (lock_wait + hold + lease + 2 * redis
 *     timeout), replays that order (200, same id, nothing sold twice);
 *   - frozen before the order arrives, so the lock acquire (no key) or the key's claim (with a
 *     key) times out before anything changed: a plain 503 unavailable without "outcome", stock
 *     unchanged; with a key, a retry with it then makes the one order.
 * The Redis invariant checker (SPEC §8) runs at the end of each case.
 *
 * Timing: the test freezes Redis the moment it sees the segment's lock key (the acquire has run,
 * the service is sleeping in its 400 ms hold) and thaws it once the 503 has come (the commit's
 * 200 ms timeout is over), so no sleep decides the outcome. The 2500 ms lease covers the hold,
 * the commit timeout and the test's reaction with room to spare, and every test first makes one
 * order so that Redis has the scripts cached (an EVALSHA it did not know would be refused with
 * NOSCRIPT once thawed): the commit normally finds its lock still held and places the order.
 */
#include "svc_test.h"

#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>

#define OC_HOLD_MS 400
#define OC_REDIS_TIMEOUT_MS 200
#define OC_LEASE_MS 2500
#define OC_LOCK_WAIT_MS 1000
/* How old a pending Idempotency-Key claim must be before a retry looks for its order
 * (idem_begin in service/src/order/order.c). */
#define OC_CLAIM_BOUND_MS (OC_LOCK_WAIT_MS + OC_HOLD_MS + OC_LEASE_MS + 2 * OC_REDIS_TIMEOUT_MS)
/* Generous deadlines for a loaded machine; none of them decides an outcome. */
#define OC_LOCK_SEEN_MS 10000
#define OC_RECOVERY_MS (OC_CLAIM_BOUND_MS + 20000)
#define OC_ATTEMPTS 3

static sf_service *svc; /* a fresh one per test, so its log holds that test's lines only */
static int port;

/* inventoryd on the Redis at url with this file's timings (hold, Redis timeout, lease, wait). */
static sf_service *start_on(const char *url)
{
    char hold[16], timeout[16], lease[16], wait[16];
    snprintf(hold, sizeof hold, "%d", OC_HOLD_MS);
    snprintf(timeout, sizeof timeout, "%d", OC_REDIS_TIMEOUT_MS);
    snprintf(lease, sizeof lease, "%d", OC_LEASE_MS);
    snprintf(wait, sizeof wait, "%d", OC_LOCK_WAIT_MS);
    const char *args[] = {"--threads",
                          "4",
                          "--hold-ms",
                          hold,
                          "--redis-timeout-ms",
                          timeout,
                          "--lock-lease-ms",
                          lease,
                          "--lock-wait-ms",
                          wait,
                          NULL};
    return sf_start(url, args);
}

static int svc_setup(void **state)
{
    (void)state;
    svc = start_on(rf_url(gf_redis));
    if (svc == NULL)
        return -1;
    port = sf_port(svc);
    /* One order with a key on a SKU of its own loads every order script into Redis: a script
     * sent as EVALSHA to a frozen Redis that does not know it yet would be refused with
     * NOSCRIPT once thawed (its EVAL fallback never goes out), and the frozen request would
     * then have changed nothing; these tests are about requests that did reach Redis. */
    char sku[64], key[80], body[200];
    tu_unique_name(sku, sizeof sku, "outcome-warm");
    tu_unique_name(key, sizeof key, "outcome-warm-key");
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"quantity\": 1}", sku);
    sf_resp r = {0};
    int ok = sf_put_sku(port, NULL, sku, 1, 1, &r) == 201 &&
             sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &r) == 201;
    if (!ok)
        fprintf(stderr, "warm-up order failed: %s\n", sf_resp_summary(&r));
    sf_resp_free(&r);
    return ok ? 0 : -1;
}

/* Runs after a failed test too: a test that failed with Redis frozen must not leave it so. */
static int svc_teardown(void **state)
{
    (void)state;
    rf_resume(gf_redis);
    int st = sf_stop(svc);
    svc = NULL;
    return st == 0 ? 0 : -1;
}

/* ---- helpers ---- */

static void order_body(char *buf, size_t size, const char *sku)
{
    snprintf(buf, size, "{\"sku\": \"%s\", \"quantity\": 1}", sku);
}

/* The order id segment 0's idem hash holds for key (written with the order), "" when none. */
static void idem_order_id(const char *sku, const char *key, char *id, size_t size)
{
    if (rf_string(gf_redis, id, size, "HGET inv:2:{%s/0}:idem %s", sku, key) != 1)
        id[0] = '\0';
}

/* Fails unless r is 503 unavailable with Retry-After >= 1 and, per unknown, with or without
 * "outcome": "unknown" next to error and message. */
static void assert_unavailable_at(const char *file, int line, const sf_resp *r, int unknown)
{
    if (unknown) {
        if (r->status != 503 || !json_is_object(r->json) || json_object_size(r->json) != 3 ||
            strcmp(sf_error_code(r), "unavailable") != 0 ||
            strcmp(sf_str(r->json, "outcome"), "unknown") != 0 ||
            strstr(sf_str(r->json, "message"), "Idempotency-Key") == NULL)
            sf_fail_at(file, line, "outcome-unknown answer",
                       "expected 503 {\"error\": \"unavailable\", \"message\": \"...retry with "
                       "the same Idempotency-Key...\", \"outcome\": \"unknown\"}, got %s",
                       sf_resp_summary(r));
    } else {
        sf_assert_error_at(file, line, r, 503, "unavailable"); /* exactly error + message */
    }
    const char *ra = sf_header(r, "Retry-After");
    if (ra == NULL || atoi(ra) < 1)
        sf_fail_at(file, line, "Retry-After", "got %s in %s", ra ? ra : "(none)",
                   sf_resp_summary(r));
}

#define ASSERT_UNAVAILABLE(r, unknown) assert_unavailable_at(__FILE__, __LINE__, (r), (unknown))

/* Checks the invariants and the totals of a SKU of stock_total units in one segment. */
static void expect_sold(const char *sku, long long stock_total, long long sold)
{
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.stock_total == stock_total && rep.sold == sold && rep.orders == sold &&
                  rep.remaining == stock_total - sold && rep.live_orders == sold,
              "SKU %s: expected %lld sold of %lld in %lld order(s); Redis has stock_total %lld "
              "remaining %lld sold %lld orders %lld (%lld records)",
              sku, sold, stock_total, sold, rep.stock_total, rep.remaining, rep.sold, rep.orders,
              rep.live_orders);
}

/*
 * Repeats POST body with key until it answers something other than 503 unavailable (the answer
 * while the first request's claim is pending and young, or Redis still recovering), at most
 * OC_RECOVERY_MS. Leaves the final answer in *r and returns how many 503s came before it.
 */
static int retry_until_settled(const char *key, const char *body, sf_resp *r)
{
    int64_t deadline = tu_now_ms() + OC_RECOVERY_MS;
    int waits = 0;
    for (;;) {
        sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, r);
        if (r->status != 503 || strcmp(sf_error_code(r), "unavailable") != 0 ||
            tu_now_ms() >= deadline)
            return waits;
        /* Whatever it is, a retry answer is never "unknown": it did not commit anything. */
        SF_ASSERT(json_object_get(r->json, "outcome") == NULL, "retry %d: %s", waits + 1,
                  sf_resp_summary(r));
        waits++;
        tu_sleep_ms(100);
    }
}

/* ---- Redis frozen during the commit ---- */

struct poster {
    const char *key, *body;
    sf_resp resp;
    atomic_int done;
    pthread_t tid;
};

static void *poster_run(void *arg)
{
    struct poster *p = arg;
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, p->key, p->body, &p->resp);
    atomic_store(&p->done, 1);
    return NULL;
}

/* What one attempt at freezing Redis inside the hold came to. */
enum freeze { FROZE_IN_HOLD, MISSED_NO_LOCK_SEEN, MISSED_COMMITTED, MISSED_BEFORE_HOLD };

/* After the lock key shows up, the test waits this long before freezing Redis: the key exists
 * once the acquire script has run, but its reply leaves Redis only at the end of that event
 * loop turn, so a freeze at once can catch the reply still unsent (the service then times out
 * on the acquire: a plain 503, seen in a clean-clone ASan run). Well inside the 400 ms hold. */
#define OC_FREEZE_AFTER_LOCK_MS 50

/*
 * Sends POST body with key in a thread, freezes Redis as soon as segment 0's lock key exists,
 * waits for the answer (left in *first), then thaws Redis. The answer is checked here only to
 * tell a missed window (the order was answered before Redis froze) from a real one.
 */
static enum freeze post_and_freeze_in_hold(const char *sku, const char *key, const char *body,
                                           sf_resp *first)
{
    char lock_key[256];
    snprintf(lock_key, sizeof lock_key, "inv:2:{%s/0}:lock", sku);
    redisContext *watch = rf_connect(gf_redis);
    SF_ASSERT(watch != NULL, "%s", "cannot connect to redis-server");

    struct poster p = {.key = key, .body = body};
    assert_int_equal(pthread_create(&p.tid, NULL, poster_run, &p), 0);
    int64_t deadline = tu_now_ms() + OC_LOCK_SEEN_MS;
    int seen = 0, paused = 0;
    while (!atomic_load(&p.done) && tu_now_ms() < deadline) {
        redisReply *e = redisCommand(watch, "EXISTS %s", lock_key);
        seen = e != NULL && e->type == REDIS_REPLY_INTEGER && e->integer == 1;
        if (e)
            freeReplyObject(e);
        if (seen) {
            /* The acquire has run: the service sleeps in its hold, the commit comes next. */
            tu_sleep_ms(OC_FREEZE_AFTER_LOCK_MS);
            paused = rf_pause(gf_redis) == 0;
            break;
        }
        tu_sleep_us(500);
    }
    redisFree(watch);
    pthread_join(p.tid, NULL); /* the client's own timeout (10 s) bounds this */
    if (paused)
        rf_resume(gf_redis);
    *first = p.resp;
    SF_ASSERT(!seen || paused, "%s", "could not SIGSTOP redis-server");
    if (!paused)
        return MISSED_NO_LOCK_SEEN;
    if (first->status == 201)
        return MISSED_COMMITTED;
    /* A plain 503 (no "outcome"): the freeze still caught the acquire's reply (a loaded
     * machine), so no commit was sent. */
    if (first->status == 503 && first->json && !json_object_get(first->json, "outcome"))
        return MISSED_BEFORE_HOLD;
    return FROZE_IN_HOLD;
}

/* Waits (at most 2 s) for segment 0's stock to leave start: Redis runs the commit it had
 * received as soon as it is thawed, so this is normally the first read. Returns the stock. */
static long long stock_after_thaw(const char *sku, long long start)
{
    long long s = sf_seg_stock(sku, 0);
    for (int64_t deadline = tu_now_ms() + 2000; s == start && tu_now_ms() < deadline;) {
        tu_sleep_ms(20);
        s = sf_seg_stock(sku, 0);
    }
    return s;
}

static void test_redis_frozen_during_commit_outcome_unknown_then_replay(void **state)
{
    (void)state;
    enum { UNITS = 10 };
    char sku[64], key[80], body[200];
    sf_resp first = {0}, r = {0};
    enum freeze how = MISSED_NO_LOCK_SEEN;
    for (int attempt = 1; attempt <= OC_ATTEMPTS; attempt++) {
        tu_unique_name(sku, sizeof sku, "outcome");
        tu_unique_name(key, sizeof key, "outcome-key");
        order_body(body, sizeof body, sku);
        SF_PUT_SKU(port, NULL, sku, UNITS, 1);
        sf_resp_free(&first);
        how = post_and_freeze_in_hold(sku, key, body, &first);
        if (how == FROZE_IN_HOLD)
            break;
        /* The freeze came too late (the order was answered first): not the case under test,
         * but what was answered must still be true. Try again with a new SKU. */
        fprintf(stderr, "note: attempt %d missed the hold (%s): %s\n", attempt,
                how == MISSED_COMMITTED     ? "committed before the freeze"
                : how == MISSED_BEFORE_HOLD ? "froze before the acquire's reply left Redis"
                                            : "no lock seen",
                sf_resp_summary(&first));
        if (how == MISSED_COMMITTED)
            expect_sold(sku, UNITS, 1);
        if (how == MISSED_BEFORE_HOLD)
            expect_sold(sku, UNITS, 0); /* no commit was sent: nothing sold */
    }
    SF_ASSERT(how == FROZE_IN_HOLD, "no attempt of %d froze Redis inside the hold; last: %s",
              OC_ATTEMPTS, sf_resp_summary(&first));

    /* 1. The answer: unavailable, marked unknown, with Retry-After. */
    ASSERT_UNAVAILABLE(&first, 1);
    SF_ASSERT(sf_log_contains(svc, "order_outcome_unknown"), "%s",
              "no order_outcome_unknown line in the service's log");
    sf_resp_free(&first);

    /* 2. What Redis did with the commit once thawed. The lease outlived the freeze, so the
     * normal case is "placed"; a lease that ran out would have made the commit refuse (nothing
     * sold), also a correct "unknown". Whichever it was, the retry must agree with it. */
    long long stock = stock_after_thaw(sku, UNITS);
    char placed_id[160];
    idem_order_id(sku, key, placed_id, sizeof placed_id);
    int placed = stock == UNITS - 1;
    SF_ASSERT(placed || stock == UNITS, "segment stock %lld after the thaw (was %d)", stock, UNITS);
    SF_ASSERT(placed == (placed_id[0] != '\0'), "stock %lld but idem hash entry \"%s\"", stock,
              placed_id);
    expect_sold(sku, UNITS, placed);
    if (!placed)
        fprintf(stderr, "note: the commit found its lock expired and changed nothing\n");

    /* 3. The retry with the same key: the same order (replayed, 200), or, if nothing was
     * placed, the one order now (201); never a second unit sold. */
    int waits = retry_until_settled(key, body, &r);
    fprintf(stderr, "retry settled after %d 503(s): HTTP %d\n", waits, r.status);
    const char *id = sf_str(r.json, "order_id");
    if (placed) {
        SF_ASSERT(r.status == 200,
                  "the order Redis placed (%s) was not replayed: %s; segment "
                  "stock now %lld",
                  placed_id, sf_resp_summary(&r), sf_seg_stock(sku, 0));
        SF_ASSERT(strcmp(id, placed_id) == 0, "replayed order %s, Redis placed %s", id, placed_id);
        char record[2048];
        SF_ASSERT(rf_string(gf_redis, record, sizeof record, "HGET inv:2:{%s/0}:orders %s", sku,
                            placed_id) == 1,
                  "no record of %s", placed_id);
        json_t *stored = json_loads(record, 0, NULL);
        /* the answer is the record with its parts (SPEC §13): one, for a one-segment order */
        json_object_set_new(stored, "parts",
                            json_pack("[{s:O, s:O}]", "segment", json_object_get(stored, "segment"),
                                      "quantity", json_object_get(stored, "quantity")));
        SF_ASSERT(json_equal(stored, r.json), "replay %s, stored %s", r.body, record);
        json_decref(stored);
    } else {
        SF_ASSERT_STATUS(&r, 201);
        idem_order_id(sku, key, placed_id, sizeof placed_id);
        SF_ASSERT(strcmp(id, placed_id) == 0, "created order %s, idem hash %s", id, placed_id);
    }
    const char *loc = sf_header(&r, "Location");
    char want_loc[200];
    snprintf(want_loc, sizeof want_loc, "/api/v1/orders/%s", placed_id);
    SF_ASSERT(loc != NULL && strcmp(loc, want_loc) == 0, "Location %s, expected %s",
              loc ? loc : "(none)", want_loc);
    json_t *order = json_incref(r.json);

    /* The claim is final now: the key replays at once, and GET finds the order. */
    char claim[200];
    SF_ASSERT(rf_string(gf_redis, claim, sizeof claim, "GET inv:2:{%s}:idem:%s", sku, key) == 1 &&
                  strcmp(claim, placed_id) == 0,
              "claim of the key: \"%s\", expected %s", claim, placed_id);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(json_equal(r.json, order), "second replay %s", r.body);
    char path[220];
    snprintf(path, sizeof path, "/api/v1/orders/%s", placed_id);
    sf_http(port, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(json_equal(r.json, order), "GET %s: %s", path, r.body);
    json_decref(order);
    sf_resp_free(&r);

    expect_sold(sku, UNITS, 1);
    SF_ASSERT_EQ(sf_seg_stock(sku, 0), UNITS - 1);
}

/* ---- Redis frozen before the order arrives ---- */

/* Posts the order (with key when not NULL) while redis-server is stopped, into *r: a plain
 * 503 unavailable, no unknown outcome logged, and once Redis is back no unit of the SKU's
 * `units` is sold. */
static void order_while_frozen(const char *sku, long long units, const char *key, const char *body,
                               sf_resp *r)
{
    SF_ASSERT(rf_pause(gf_redis) == 0, "%s", "could not SIGSTOP redis-server");
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, r);
    rf_resume(gf_redis);
    ASSERT_UNAVAILABLE(r, 0);
    SF_ASSERT(!sf_log_contains(svc, "order_outcome_unknown"), "%s",
              "order_outcome_unknown logged for a failure before the commit");
    SF_ASSERT_EQ(stock_after_thaw(sku, units), units);
    expect_sold(sku, units, 0);
}

/* No key: the SKU's layout is cached (the PUT went through this instance), so the order's first
 * Redis call is the segment lock's acquire, which times out. */
static void test_redis_frozen_before_acquire_plain_unavailable(void **state)
{
    (void)state;
    enum { UNITS = 10 };
    char sku[64], body[200];
    tu_unique_name(sku, sizeof sku, "outcome-acq");
    order_body(body, sizeof body, sku);
    SF_PUT_SKU(port, NULL, sku, UNITS, 1);

    sf_resp r = {0};
    order_while_frozen(sku, UNITS, NULL, body, &r);
    SF_ASSERT(sf_log_contains(svc, "order_unavailable"), "%s",
              "no order_unavailable line in the service's log");

    /* The acquire Redis received while frozen runs once thawed and may hold the segment for a
     * lease nobody renews: nothing is sold, and the next orders get through once it ends. */
    int64_t deadline = tu_now_ms() + OC_RECOVERY_MS;
    int busy = 0;
    while (sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r) == 503 &&
           tu_now_ms() < deadline) {
        SF_ASSERT(json_object_get(r.json, "outcome") == NULL, "%s", sf_resp_summary(&r));
        busy++;
        tu_sleep_ms(100);
    }
    fprintf(stderr, "next order: HTTP %d after %d 503(s)\n", r.status, busy);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    expect_sold(sku, UNITS, 1);
}

/* With a key: the layout is cached, so the first Redis call is the key's claim, which times
 * out. Plain unavailable, and the key then makes exactly one order. */
static void test_redis_frozen_before_claim_plain_unavailable(void **state)
{
    (void)state;
    enum { UNITS = 10 };
    char sku[64], key[80], body[200];
    tu_unique_name(sku, sizeof sku, "outcome-claim");
    tu_unique_name(key, sizeof key, "outcome-claim-key");
    order_body(body, sizeof body, sku);
    SF_PUT_SKU(port, NULL, sku, UNITS, 1);

    sf_resp r = {0};
    order_while_frozen(sku, UNITS, key, body, &r);

    /* The claim Redis received while frozen runs once thawed and stays pending: the retry
     * finds no order for it once it is older than the bound, and makes the one order. */
    int waits = retry_until_settled(key, body, &r);
    fprintf(stderr, "retry settled after %d 503(s): HTTP %d\n", waits, r.status);
    SF_ASSERT_STATUS(&r, 201);
    char id[160];
    idem_order_id(sku, key, id, sizeof id);
    SF_ASSERT(strcmp(sf_str(r.json, "order_id"), id) == 0, "created %s, idem hash \"%s\"",
              sf_str(r.json, "order_id"), id);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, key, body, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "order_id"), id) == 0, "replay of %s: %s", id, r.body);
    sf_resp_free(&r);
    expect_sold(sku, UNITS, 1);
}

/* ---- Redis gone before the commit was written ---- */

/* Redis is killed inside the hold (its own Redis, with every write on disk) and stays down:
 * the commit finds the connection closed and is never written, so nothing changed and the
 * answer is a plain 503, not "outcome unknown" (issue 18 item 7). Restarted from its
 * append-only file, Redis shows the stock untouched. */
static void test_redis_gone_before_commit_plain_unavailable(void **state)
{
    (void)state;
    enum { UNITS = 10 };
    const char *aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    rf_server *own = rf_start(aof);
    SF_ASSERT(own != NULL, "%s", "cannot start a redis-server");
    sf_service *s = start_on(rf_url(own));
    SF_ASSERT(s != NULL, "%s", "cannot start inventoryd");
    int p = sf_port(s);
    char sku[64], body[200], lock_key[256], stock_key[256], buf[32];
    tu_unique_name(sku, sizeof sku, "outcome-gone");
    order_body(body, sizeof body, sku);
    snprintf(lock_key, sizeof lock_key, "inv:2:{%s/0}:lock", sku);
    snprintf(stock_key, sizeof stock_key, "inv:2:{%s/0}:stock", sku);
    sf_resp r = {0};
    sf_put_sku(p, NULL, sku, UNITS, 1, &r);
    SF_ASSERT_STATUS(&r, 201);

    int killed = 0, created = 0;
    for (int attempt = 0; attempt < OC_ATTEMPTS && !killed; attempt++) {
        struct poster po = {.key = NULL, .body = body};
        int saved = port;
        port = p; /* poster_run posts to port */
        assert_int_equal(pthread_create(&po.tid, NULL, poster_run, &po), 0);
        int64_t deadline = tu_now_ms() + OC_LOCK_SEEN_MS;
        while (!atomic_load(&po.done) && tu_now_ms() < deadline) {
            if (rf_integer(own, "EXISTS %s", lock_key) == 1) {
                /* The acquire has run and its reply has left (OC_FREEZE_AFTER_LOCK_MS): the
                 * service sleeps in its hold, the commit comes next. */
                tu_sleep_ms(OC_FREEZE_AFTER_LOCK_MS);
                killed = rf_halt(own, SIGKILL) == 0;
                break;
            }
            tu_sleep_us(500);
        }
        pthread_join(po.tid, NULL);
        port = saved;
        sf_resp_free(&r);
        r = po.resp;
        if (!killed) {
            SF_ASSERT(r.status == 201, "Redis not killed, yet %s", sf_resp_summary(&r));
            created++;
        }
    }
    SF_ASSERT(killed, "%s", "could not kill redis-server inside the hold");
    fprintf(stderr, "order with Redis gone before its commit: %s\n", sf_resp_summary(&r));
    ASSERT_UNAVAILABLE(&r, 0);
    SF_ASSERT(!sf_log_contains(s, "order_outcome_unknown"), "%s",
              "order_outcome_unknown logged for a commit that was never sent");
    sf_resp_free(&r);
    SF_ASSERT_EQ(rf_restart(own), 0);
    SF_ASSERT_EQ(rf_string(own, buf, sizeof buf, "GET %s", stock_key), 1);
    SF_ASSERT_EQ(strtoll(buf, NULL, 10), UNITS - created);
    SF_ASSERT_EQ(sf_stop(s), 0);
    rf_stop(own);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_frozen_during_commit_outcome_unknown_then_replay,
                                        svc_setup, svc_teardown),
        cmocka_unit_test_setup_teardown(test_redis_frozen_before_acquire_plain_unavailable,
                                        svc_setup, svc_teardown),
        cmocka_unit_test_setup_teardown(test_redis_frozen_before_claim_plain_unavailable, svc_setup,
                                        svc_teardown),
        cmocka_unit_test(test_redis_gone_before_commit_plain_unavailable),
    };
    return SF_RUN_GROUP_TESTS(tests, gf_group_setup, sf_group_teardown);
}
