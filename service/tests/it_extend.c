/*
 * The extension of a hold (POST /api/v1/orders/{id}/extend, SPEC §17, issue 33) against a real
 * redis-server and real inventoryd processes over HTTP:
 *   - the answers: 200 with the new expires_at (the old one + the seconds) and extensions;
 *     the due set's score moves with the record, the hold index never names a later time than
 *     the segment's earliest hold, the order log gets an "extended" entry with the new expiry;
 *     no token or a wrong one 401, the confirm token and the admin token 200, the audit line
 *     order_extend; hold_extend_s 0 409 extend_not_allowed, hold_extend_max reached 409
 *     extend_limit, bad seconds (0, negative, not an integer, a string, above hold_extend_s or
 *     the longest hold, bad JSON) 400 invalid_request, each with the record unchanged;
 *     confirmed and never a hold 409 not_reserved, cancelled 409 already_cancelled, expired 409
 *     reservation_expired, unknown or malformed ids and a part's id 404; a PATCH of
 *     hold_extend_s / hold_extend_max holds from its answer (the script reads the meta);
 *   - with --redis-replica-acks 1 and no replica: the extension is applied, its WAIT falls
 *     short, 503 "outcome": "unknown"; a refusal (nothing written) is answered without a WAIT;
 *   - the sweeper expires an extended hold at its new time (not at the old one: still reserved
 *     1.6 s after it, the index moved to the new time), within 1 s + one --redis-timeout-ms;
 *   - a multi-segment hold extended: its parts follow the primary (reserved past the old time,
 *     all expired after the new one, every unit back once);
 *   - 48 extends racing the expiry (two instances, sent from 150 ms before to 90 ms after each
 *     expires_at): each answer agrees with the final record (200: extended, then confirmed or
 *     expired at the new time; 409 reservation_expired: expired at the old time, never
 *     extended), the units back exactly once (the invariant checker, inventory_holds_total);
 *   - a Redis Cluster of three masters (the limits read from the meta before the script, fenced
 *     by the rules' version): an extension, a PATCH to 0 refusing the next at once, the expiry
 *     at the new time.
 * About 13 s on one Redis (it_extend) and 7 s on the cluster (it_extend_cluster, IT_EXTEND_PART
 * as it_holds does).
 */
#include "svc_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "cluster_fixture.h"

#define EX_TOKEN "extend-admin-token"
#define EX_CONFIRM "extend-confirm-token-0123456789"
#define EX_TIMEOUT_MS 500 /* --redis-timeout-ms of every instance here */

static sf_service *svc, *svc_acks;
static int port;
static char dir[64], confirm_file[128];

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/it_extend-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(confirm_file, sizeof confirm_file, "%s/confirm.token", dir);
    FILE *f = fopen(confirm_file, "w");
    if (!f)
        return -1;
    fprintf(f, "%s\n", EX_CONFIRM);
    fclose(f);
    if (getenv("IT_EXTEND_PART") && strcmp(getenv("IT_EXTEND_PART"), "cluster") == 0)
        return 0; /* the cluster's tests start their own */
    const char *args[] = {"--threads",     "2",
                          "--admin-token", EX_TOKEN,
                          "--order-log",   "--confirm-token-file",
                          confirm_file,    "--redis-timeout-ms",
                          "500",           "--lock-lease-ms",
                          "1000",          NULL};
    svc = sf_group_service(args);
    port = svc ? sf_port(svc) : 0;
    if (!svc)
        return -1;
    const char *acks[] = {
        "--threads",  "1",           "--admin-token",        EX_TOKEN, "--confirm-token-file",
        confirm_file, "--order-log", "--redis-replica-acks", "1",      "--redis-timeout-ms",
        "400",        NULL};
    svc_acks = sf_group_service(acks);
    return svc_acks ? 0 : -1;
}

static int group_teardown(void **state)
{
    int rc = sf_group_teardown(state);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return rc == 0 && system(cmd) == 0 ? 0 : -1;
}

/* ---- time ---- */

/* Redis's clock (TIME) in ms on srv, or -1. */
static int64_t ex_redis_ms(const rf_server *srv)
{
    redisReply *r = rf_command(srv, "TIME");
    int64_t ms = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Redis ms - tu_now_ms() (monotonic), measured over the fastest of a few round trips. */
static int64_t ex_redis_offset(const rf_server *srv)
{
    int64_t best_rtt = INT64_MAX, off = 0;
    for (int i = 0; i < 5; i++) {
        int64_t t0 = tu_now_us();
        int64_t r = ex_redis_ms(srv);
        int64_t t1 = tu_now_us();
        SF_ASSERT(r > 0, "%s", "TIME");
        if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            off = r - (t0 + t1) / 2000;
        }
    }
    return off;
}

/* RFC 3339 "YYYY-MM-DDTHH:MM:SS.mmmZ" -> ms since the epoch, or -1. */
static int64_t ex_iso_ms(const char *s)
{
    int y, mo, d, h, mi, sec, ms;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &y, &mo, &d, &h, &mi, &sec, &ms) != 7)
        return -1;
    y -= mo <= 2; /* H. Hinnant's days_from_civil */
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    return ((days * 24 + h) * 60 + mi) * 60000 + sec * 1000 + ms;
}

/* ---- requests ---- */

static void ex_put(int p, const char *sku, long long stock, int segments, const char *rules)
{
    char path[160], body[512];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld,\"segments\":%d%s}", stock, segments, rules);
    sf_resp r = {0};
    sf_json_request(NULL, p, "PUT", path, EX_TOKEN, NULL, body, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

static void ex_patch(int p, const char *sku, const char *body)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, p, "PATCH", path, EX_TOKEN, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
}

/* Places a hold of q units on p; fails unless the answer is 201 "reserved" with expires_at.
 * Copies the id into id (112 bytes); returns expires_at in Redis ms. */
static int64_t ex_hold(int p, const char *sku, int q, char *id)
{
    char body[256];
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":%d}", sku, q);
    sf_resp r = {0};
    sf_json_request(NULL, p, "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "reserved") == 0, "%s", sf_resp_summary(&r));
    int64_t exp = ex_iso_ms(sf_str(r.json, "expires_at"));
    SF_ASSERT(exp > 0, "expires_at: %s", sf_resp_summary(&r));
    snprintf(id, 112, "%.111s", sf_str(r.json, "order_id"));
    sf_resp_free(&r);
    return exp;
}

/* POST /api/v1/orders/{id}/extend with token (NULL: none) and body (NULL: none) on c or p. */
static int ex_extend(sf_conn *c, int p, const char *id, const char *token, const char *body,
                     sf_resp *r)
{
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%.200s/extend", id);
    return sf_json_request(c, p, "POST", path, token, NULL, body, r);
}

static int ex_post(int p, const char *id, const char *what, const char *token, sf_resp *r)
{
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%.200s/%s", id, what);
    return sf_json_request(NULL, p, "POST", path, token, NULL, NULL, r);
}

static int ex_get(int p, const char *id, sf_resp *r)
{
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%.200s", id);
    return sf_json_request(NULL, p, "GET", path, NULL, NULL, NULL, r);
}

/* The segment and SKU of an order id. */
static int ex_id_seg(const char *id, char *sku, size_t len)
{
    int k = -1;
    char s[80] = "";
    const char *dash = strchr(id, '-');
    if (dash)
        sscanf(dash + 1, "%d-%79s", &k, s);
    snprintf(sku, len, "%s", s);
    return k;
}

/* The order's record text as Redis holds it ("" none). */
static void ex_record(const char *id, char *rec, size_t len)
{
    char sku[80];
    int k = ex_id_seg(id, sku, sizeof sku);
    rec[0] = '\0';
    rf_string(gf_redis, rec, len, "HGET inv:2:{%s/%d}:orders %s", sku, k, id);
}

/* The record's status, expires_at (Redis ms, -1 none) and extensions (0 none). */
static void ex_record_state(const char *id, char *status, size_t len, int64_t *exp, int *ext)
{
    char rec[2048];
    ex_record(id, rec, sizeof rec);
    json_t *o = rec[0] ? json_loads(rec, 0, NULL) : NULL;
    snprintf(status, len, "%s", o ? sf_str(o, "status") : "");
    *exp = ex_iso_ms(json_string_value(json_object_get(o, "expires_at")));
    *ext = (int)sf_json_int(o, "extensions", 0);
    json_decref(o);
}

/* The due set's score of id (-1 none) and the hold index's score of its segment (-1 none). */
static int64_t ex_due(const char *id, int64_t *index)
{
    char sku[80], buf[32] = "";
    int k = ex_id_seg(id, sku, sizeof sku);
    int64_t due =
        rf_string(gf_redis, buf, sizeof buf, "ZSCORE inv:2:{%s/%d}:due %s", sku, k, id) == 1
            ? atoll(buf)
            : -1;
    buf[0] = '\0';
    *index = rf_string(gf_redis, buf, sizeof buf, "ZSCORE inv:2:holds %s/%d", sku, k) == 1
                 ? atoll(buf)
                 : -1;
    return due;
}

/* The earliest score of id's segment's due set, -1 none. */
static int64_t ex_earliest(const char *id)
{
    char sku[80];
    int k = ex_id_seg(id, sku, sizeof sku);
    redisReply *r = rf_command(gf_redis, "ZRANGE inv:2:{%s/%d}:due 0 0 WITHSCORES", sku, k);
    int64_t v =
        r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoll(r->element[1]->str) : -1;
    freeReplyObject(r);
    return v;
}

/* Fails unless the hold index names id's segment no later than the segment's earliest hold. */
#define EX_ASSERT_INDEX(id)                                                                        \
    do {                                                                                           \
        int64_t ix_;                                                                               \
        ex_due((id), &ix_);                                                                        \
        int64_t first_ = ex_earliest(id);                                                          \
        SF_ASSERT(ix_ > 0 && ix_ <= first_, "hold index %lld, the segment's earliest hold %lld",   \
                  (long long)ix_, (long long)first_);                                              \
    } while (0)

static void ex_wait_no_holds(const char *url, const char *sku, int timeout_ms)
{
    int64_t end = tu_now_ms() + timeout_ms;
    sf_report rep;
    for (;;) {
        int rc = sf_check_invariants(url, sku, &rep);
        if (rc == 0 && rep.reserved_orders == 0)
            return;
        if (tu_now_ms() > end) {
            sf_report_print(sku, &rep);
            SF_ASSERT(0, "%s: %lld holds still live after %d ms", sku, rep.reserved_orders,
                      timeout_ms);
        }
        tu_sleep_ms(50);
    }
}

static double ex_metric_sum(sf_service *const *s, int n, const char *series)
{
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double v = sf_metric(sf_port(s[i]), series);
        SF_ASSERT(v >= 0, "metric %s on port %d", series, sf_port(s[i]));
        sum += v;
    }
    return sum;
}

#define EX_EXPIRED "inventory_holds_total{event=\"expired\"}"
#define EX_EXTENDED "inventory_hold_extensions_total"

/* Fails unless a refusal left the record's text exactly as before (rec0). */
#define EX_ASSERT_UNCHANGED(id, rec0)                                                              \
    do {                                                                                           \
        char now_[2048];                                                                           \
        ex_record((id), now_, sizeof now_);                                                        \
        SF_ASSERT(strcmp(now_, (rec0)) == 0, "record changed by a refusal: %s -> %s", (rec0),      \
                  now_);                                                                           \
    } while (0)

/* ---- the answers ---- */

static void test_extend_answers(void **state)
{
    (void)state;
    char sku[64], id[112], id2[112], rec0[2048];
    tu_unique_name(sku, sizeof sku, "ex-ans");
    ex_put(port, sku, 20, 1, ",\"reservation_ttl_s\":30");
    sf_resp r = {0};

    /* hold_extend_s 0 (the default): 409 extend_not_allowed, nothing changed */
    int64_t exp = ex_hold(port, sku, 2, id);
    ex_record(id, rec0, sizeof rec0);
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "extend_not_allowed");
    EX_ASSERT_UNCHANGED(id, rec0);

    /* a PATCH holds from its answer: the next extension is judged by it */
    ex_patch(port, sku, "{\"hold_extend_s\":60,\"hold_extend_max\":2}");
    ex_extend(NULL, port, id, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    ex_extend(NULL, port, id, "not-the-token", NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    EX_ASSERT_UNCHANGED(id, rec0);
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r); /* no body: hold_extend_s */
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "reserved") == 0, "%s", sf_resp_summary(&r));
    SF_ASSERT_EQ(ex_iso_ms(sf_str(r.json, "expires_at")), exp + 60000);
    SF_ASSERT_EQ(sf_json_int(r.json, "extensions", -1), 1);
    SF_ASSERT(json_is_array(json_object_get(r.json, "parts")), "%s", sf_resp_summary(&r));
    int64_t ix, due = ex_due(id, &ix);
    SF_ASSERT_EQ(due, exp + 60000);
    EX_ASSERT_INDEX(id);
    ex_get(port, id, &r);
    SF_ASSERT_EQ(ex_iso_ms(sf_str(r.json, "expires_at")), exp + 60000);
    SF_ASSERT_EQ(sf_json_int(r.json, "extensions", -1), 1);

    /* bad seconds: 400 invalid_request, nothing changed */
    ex_record(id, rec0, sizeof rec0);
    static const char *const bad[] = {"{\"seconds\":0}",
                                      "{\"seconds\":-5}",
                                      "{\"seconds\":1.5}",
                                      "{\"seconds\":\"3\"}",
                                      "{\"seconds\":61}",
                                      "{\"seconds\":2592001}",
                                      "{\"seconds\":null}",
                                      "{\"seconds\":",
                                      "[1]",
                                      "{\"seconds\":1,\"seconds\":2}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ex_extend(NULL, port, id, EX_TOKEN, bad[i], &r);
        if (r.status != 400 || strcmp(sf_error_code(&r), "invalid_request") != 0)
            SF_ASSERT(0, "body %s: %s", bad[i], sf_resp_summary(&r));
        EX_ASSERT_UNCHANGED(id, rec0);
    }

    /* the admin token, a given number of seconds */
    ex_extend(NULL, port, id, EX_TOKEN, "{\"seconds\":7}", &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(ex_iso_ms(sf_str(r.json, "expires_at")), exp + 67000);
    SF_ASSERT_EQ(sf_json_int(r.json, "extensions", -1), 2);
    due = ex_due(id, &ix);
    SF_ASSERT_EQ(due, exp + 67000);
    EX_ASSERT_INDEX(id);

    /* hold_extend_max reached: 409 extend_limit; a PATCH raising it holds at once */
    ex_record(id, rec0, sizeof rec0);
    ex_extend(NULL, port, id, EX_CONFIRM, "{\"seconds\":1}", &r);
    SF_ASSERT_ERROR(&r, 409, "extend_limit");
    EX_ASSERT_UNCHANGED(id, rec0);
    ex_patch(port, sku, "{\"hold_extend_max\":0}"); /* 0: 3 */
    ex_extend(NULL, port, id, EX_CONFIRM, "{\"seconds\":1}", &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(sf_json_int(r.json, "extensions", -1), 3);
    ex_extend(NULL, port, id, EX_CONFIRM, "{\"seconds\":1}", &r);
    SF_ASSERT_ERROR(&r, 409, "extend_limit");
    /* and a PATCH to 0 seconds turns it off at once */
    ex_hold(port, sku, 1, id2);
    ex_patch(port, sku, "{\"hold_extend_s\":0}");
    ex_extend(NULL, port, id2, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "extend_not_allowed");
    ex_patch(port, sku, "{\"hold_extend_s\":60}");

    /* the order log: the extension's entry, with the new expiry */
    int k = ex_id_seg(id, sku, sizeof sku);
    redisReply *x = rf_command(gf_redis, "XRANGE inv:2:{%s/%d}:log - +", sku, k);
    int extended = 0;
    int64_t last_expires = -1;
    for (size_t i = 0; x && x->type == REDIS_REPLY_ARRAY && i < x->elements; i++) {
        const redisReply *f = x->element[i]->element[1];
        int mine = 0, ext = 0;
        int64_t e = -1;
        for (size_t j = 0; j + 1 < f->elements; j += 2) {
            if (strcmp(f->element[j]->str, "order") == 0)
                mine = strcmp(f->element[j + 1]->str, id) == 0;
            if (strcmp(f->element[j]->str, "event") == 0)
                ext = strcmp(f->element[j + 1]->str, "extended") == 0;
            if (strcmp(f->element[j]->str, "expires") == 0)
                e = atoll(f->element[j + 1]->str);
        }
        if (mine && ext) {
            extended++;
            last_expires = e;
        }
    }
    freeReplyObject(x);
    SF_ASSERT_EQ(extended, 3);
    SF_ASSERT_EQ(last_expires, exp + 68000);
    SF_ASSERT(sf_log_contains(svc, "\"action\":\"order_extend\""), "%s", "the audit line");
    SF_ASSERT(sf_log_contains(svc, "\"auth\":\"confirm_token\""), "%s", "the confirm token");

    /* confirmed: 409 not_reserved; cancelled: 409 already_cancelled */
    ex_post(port, id, "confirm", EX_CONFIRM, &r);
    SF_ASSERT_STATUS(&r, 200);
    ex_record(id, rec0, sizeof rec0);
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "not_reserved");
    EX_ASSERT_UNCHANGED(id, rec0);
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%s", id2);
    sf_json_request(NULL, port, "DELETE", path, EX_TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    ex_record(id2, rec0, sizeof rec0);
    ex_extend(NULL, port, id2, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "already_cancelled");
    EX_ASSERT_UNCHANGED(id2, rec0);

    /* unknown and malformed ids */
    char unknown[160];
    snprintf(unknown, sizeof unknown, "0123456789abcdef0123456789abcdef-0-%s", sku);
    const char *const ids[] = {unknown, "nope", "0123456789abcdef-0-x", "%2e%2e"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        ex_extend(NULL, port, ids[i], EX_CONFIRM, NULL, &r);
        SF_ASSERT_ERROR(&r, 404, "unknown_order");
    }

    /* never a hold: 409 not_reserved */
    ex_patch(port, sku, "{\"reservation_ttl_s\":0}");
    tu_sleep_ms(600); /* the instance's copy of the rules is stale for --sold-out-recheck-ms */
    char body[160];
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1}", sku);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "created") == 0, "%s", sf_resp_summary(&r));
    snprintf(id2, sizeof id2, "%s", sf_str(r.json, "order_id"));
    ex_extend(NULL, port, id2, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "not_reserved");
    sf_resp_free(&r);

    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 3);
    SF_ASSERT_EQ(rep.cancelled, 1);
    SF_ASSERT_EQ(rep.confirmed_orders, 1);
}

/* An expired hold: 409 reservation_expired; one found due by the extension is expired by it
 * (the sweeper paused out of the way: the only instance but the acks one, SIGSTOPped). */
static void test_extend_expired(void **state)
{
    (void)state;
    char sku[64], id[112], rec0[2048];
    tu_unique_name(sku, sizeof sku, "ex-exp");
    ex_put(port, sku, 5, 1, ",\"reservation_ttl_s\":1,\"hold_extend_s\":5");
    int64_t exp = ex_hold(port, sku, 2, id);
    int64_t off = ex_redis_offset(gf_redis);
    /* every sweeper stopped: the hold stays reserved past its expires_at */
    SF_ASSERT(sf_pause(svc_acks) == 0, "%s", "SIGSTOP");
    SF_ASSERT(sf_pause(svc) == 0, "%s", "SIGSTOP");
    int64_t wait = exp + 300 - off - tu_now_ms();
    if (wait > 0)
        tu_sleep_ms((int)wait);
    SF_ASSERT(sf_resume(svc) == 0, "%s", "SIGCONT");
    SF_ASSERT(sf_resume(svc_acks) == 0, "%s", "SIGCONT");
    sf_resp r = {0};
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "reservation_expired");
    char status[32];
    int64_t rexp;
    int ext;
    ex_record_state(id, status, sizeof status, &rexp, &ext);
    SF_ASSERT(strcmp(status, "expired") == 0 && rexp == exp && ext == 0,
              "record %s expires_at %lld extensions %d", status, (long long)rexp, ext);
    ex_record(id, rec0, sizeof rec0);
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "reservation_expired");
    EX_ASSERT_UNCHANGED(id, rec0);
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.remaining, 5);
    SF_ASSERT_EQ(rep.expired, 1);
}

/* --redis-replica-acks 1 with no replica: applied, the WAIT short: 503 outcome unknown; a
 * refusal wrote nothing and waits for nothing. */
static void test_extend_waits_for_replicas(void **state)
{
    (void)state;
    char sku[64], id[112];
    tu_unique_name(sku, sizeof sku, "ex-acks");
    ex_put(port, sku, 5, 1, ",\"reservation_ttl_s\":30,\"hold_extend_s\":10,\"hold_extend_max\":1");
    int64_t exp = ex_hold(port, sku, 1, id);
    sf_resp r = {0};
    ex_extend(NULL, sf_port(svc_acks), id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_OUTCOME_UNKNOWN(&r);
    char status[32];
    int64_t rexp;
    int ext;
    ex_record_state(id, status, sizeof status, &rexp, &ext);
    SF_ASSERT(strcmp(status, "reserved") == 0 && rexp == exp + 10000 && ext == 1,
              "record %s expires_at %lld extensions %d", status, (long long)rexp, ext);
    ex_extend(NULL, sf_port(svc_acks), id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "extend_limit");
    sf_resp_free(&r);
}

/* ---- the sweeper expires an extended hold at its new time ---- */

static void test_sweeper_takes_the_new_time(void **state)
{
    (void)state;
    char sku[64], id[112];
    tu_unique_name(sku, sizeof sku, "ex-sweep");
    ex_put(port, sku, 5, 1, ",\"reservation_ttl_s\":1,\"hold_extend_s\":3");
    int64_t exp = ex_hold(port, sku, 1, id);
    sf_resp r = {0};
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    int64_t nexp = exp + 3000, ix;
    SF_ASSERT_EQ(ex_due(id, &ix), nexp);
    EX_ASSERT_INDEX(id);
    int64_t off = ex_redis_offset(gf_redis);
    /* 1.6 s past the old time (the sweeper's bound there: 1 s + one Redis timeout): still
     * reserved, and the sweeper's pass at the old time moved the index to the new one */
    int64_t wait = exp + 1000 + EX_TIMEOUT_MS + 100 - off - tu_now_ms();
    if (wait > 0)
        tu_sleep_ms((int)wait);
    char status[32];
    int64_t rexp;
    int ext;
    ex_record_state(id, status, sizeof status, &rexp, &ext);
    SF_ASSERT(strcmp(status, "reserved") == 0, "extended hold %s 1.6 s after its old expiry",
              status);
    ex_due(id, &ix);
    SF_ASSERT_EQ(ix, nexp);
    /* then expired at the new time, within 1 s + one Redis timeout */
    int64_t seen = -1;
    int64_t end = tu_now_ms() + 6000;
    while (tu_now_ms() < end) {
        ex_record_state(id, status, sizeof status, &rexp, &ext);
        int64_t t = ex_redis_ms(gf_redis); /* after the read: at or after the expiry */
        if (strcmp(status, "reserved") != 0) {
            seen = t;
            break;
        }
        tu_sleep_ms(20);
    }
    SF_ASSERT(strcmp(status, "expired") == 0, "status %s", status);
    fprintf(stderr, "extended hold expired %+lld ms from its new expires_at\n",
            (long long)(seen - nexp));
    SF_ASSERT(seen >= nexp && seen <= nexp + 1000 + EX_TIMEOUT_MS,
              "expired at %+lld ms of the new expiry", (long long)(seen - nexp));
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.remaining, 5);
}

/* ---- a multi-segment hold: its parts follow the primary ---- */

static void test_multi_segment_hold_extended(void **state)
{
    (void)state;
    char sku[64], id[112], part[160];
    tu_unique_name(sku, sizeof sku, "ex-multi");
    ex_put(port, sku, 8, 4, ",\"reservation_ttl_s\":1,\"hold_extend_s\":2");
    int64_t exp = ex_hold(port, sku, 5, id);
    sf_resp r = {0};
    ex_extend(NULL, port, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    json_t *parts = json_object_get(r.json, "parts");
    SF_ASSERT(json_array_size(parts) >= 3, "a multi-segment order: %s", sf_resp_summary(&r));
    SF_ASSERT_EQ(ex_iso_ms(sf_str(r.json, "expires_at")), exp + 2000);
    int own = (int)sf_json_int(r.json, "segment", -1), other = -1;
    for (size_t i = 0; i < json_array_size(parts); i++) {
        int k = (int)sf_json_int(json_array_get(parts, i), "segment", -1);
        if (k != own)
            other = k;
    }
    snprintf(part, sizeof part, "%.32s-%d-%s", id, other, sku);
    ex_extend(NULL, port, part, EX_CONFIRM, NULL, &r); /* a part's id is not an order */
    SF_ASSERT_ERROR(&r, 404, "unknown_order");
    sf_resp_free(&r);
    int64_t off = ex_redis_offset(gf_redis);
    int64_t wait = exp + 1300 - off - tu_now_ms();
    if (wait > 0)
        tu_sleep_ms((int)wait);
    char status[32], pstatus[32];
    int64_t rexp;
    int ext;
    ex_record_state(id, status, sizeof status, &rexp, &ext);
    ex_record_state(part, pstatus, sizeof pstatus, &rexp, &ext);
    SF_ASSERT(strcmp(status, "reserved") == 0 && strcmp(pstatus, "reserved") == 0,
              "past the old expiry: the order %s, a part %s", status, pstatus);
    ex_wait_no_holds(rf_url(gf_redis), sku, 2000 + 1000 + EX_TIMEOUT_MS + 1000);
    ex_record_state(id, status, sizeof status, &rexp, &ext);
    SF_ASSERT(strcmp(status, "expired") == 0, "the order %s", status);
    SF_ASSERT(sf_wait_multi_drained(rf_url(gf_redis), sku, 5000) == 0, "%s", "follows drained");
    ex_record_state(part, pstatus, sizeof pstatus, &rexp, &ext);
    SF_ASSERT(strcmp(pstatus, "expired") == 0, "the part %s", pstatus);
    sf_report rep;
    SF_ASSERT_QUIESCENT(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.remaining, 8);
    SF_ASSERT_EQ(rep.sold, 0);
}

/* ---- extends racing the expiry ---- */

#define EX_RACE_HOLDS 48
#define EX_RACE_THREADS 6

struct ex_racer {
    int port;
    int64_t offset; /* Redis ms - tu_now_ms() */
    char (*ids)[112];
    int64_t *at; /* Redis ms to send each extend at */
    int *answer; /* HTTP status */
    char (*code)[32];
    int64_t *answer_exp; /* a 200's expires_at */
    int64_t *sent, *got; /* when each extend was sent and answered (Redis ms) */
    int from, n, stride;
    pthread_t t;
};

static void *ex_race(void *arg)
{
    struct ex_racer *w = arg;
    sf_conn *c = sf_conn_open(w->port, 15000);
    for (int i = w->from; i < w->n; i += w->stride) {
        int64_t wait = w->at[i] - w->offset - tu_now_ms();
        if (wait > 0)
            tu_sleep_ms((int)wait);
        sf_resp r = {0};
        w->sent[i] = tu_now_ms() + w->offset;
        w->answer[i] = ex_extend(c, 0, w->ids[i], EX_CONFIRM, NULL, &r);
        w->got[i] = tu_now_ms() + w->offset;
        w->answer_exp[i] = ex_iso_ms(json_string_value(json_object_get(r.json, "expires_at")));
        snprintf(w->code[i], 32, "%s",
                 r.status == 200                                     ? sf_str(r.json, "status")
                 : strcmp(sf_str(r.json, "outcome"), "unknown") == 0 ? "outcome unknown"
                                                                     : sf_error_code(&r));
        sf_resp_free(&r);
    }
    sf_conn_close(c);
    return NULL;
}

/* One race on a fresh SKU: the number extended (200) into *ext; 0, or -1 when the race was
 * not one (every extend on the same side of the expiry: the caller tries again). */
static int ex_race_once(sf_service *other, int *extended_out)
{
    char sku[64];
    static char ids[EX_RACE_HOLDS][112], code[EX_RACE_HOLDS][32];
    static int64_t at[EX_RACE_HOLDS], exp[EX_RACE_HOLDS], answer_exp[EX_RACE_HOLDS];
    static int64_t sent[EX_RACE_HOLDS], got[EX_RACE_HOLDS];
    static int answer[EX_RACE_HOLDS];
    tu_unique_name(sku, sizeof sku, "ex-race");
    ex_put(port, sku, 200, 4, ",\"reservation_ttl_s\":1,\"hold_extend_s\":2");
    /* every instance on the group's Redis sweeps (the acks one too) */
    sf_service *all[3] = {svc, other, svc_acks};
    double expired0 = ex_metric_sum(all, 3, EX_EXPIRED);
    double extended0 = ex_metric_sum(all, 3, EX_EXTENDED);
    for (int i = 0; i < EX_RACE_HOLDS; i++) {
        exp[i] = ex_hold(i % 2 ? sf_port(other) : port, sku, 1, ids[i]);
        /* from 150 ms before to 90 ms after the expiry, 5 ms apart */
        at[i] = exp[i] - 150 + (i * 5) % 240;
    }
    int64_t offset = ex_redis_offset(gf_redis);
    struct ex_racer w[EX_RACE_THREADS];
    for (int t = 0; t < EX_RACE_THREADS; t++) {
        w[t] = (struct ex_racer){.port = t % 2 ? sf_port(other) : port,
                                 .offset = offset,
                                 .ids = ids,
                                 .at = at,
                                 .answer = answer,
                                 .code = code,
                                 .answer_exp = answer_exp,
                                 .sent = sent,
                                 .got = got,
                                 .from = t,
                                 .n = EX_RACE_HOLDS,
                                 .stride = EX_RACE_THREADS};
        SF_ASSERT(pthread_create(&w[t].t, NULL, ex_race, &w[t]) == 0, "%s", "pthread_create");
    }
    for (int t = 0; t < EX_RACE_THREADS; t++)
        pthread_join(w[t].t, NULL);
    /* every answer agrees with the record */
    int extended = 0, expired = 0;
    for (int i = 0; i < EX_RACE_HOLDS; i++) {
        char status[32];
        int64_t rexp;
        int ext;
        ex_record_state(ids[i], status, sizeof status, &rexp, &ext);
        SF_ASSERT(answer[i] != 503, "hold %s: extend %d %s", ids[i], answer[i], code[i]);
        if (answer[i] == 200) {
            /* extended: reserved until the new time (or expired at it, on a slow machine) */
            int64_t now = ex_redis_ms(gf_redis);
            SF_ASSERT(strcmp(code[i], "reserved") == 0 && answer_exp[i] == exp[i] + 2000 &&
                          rexp == answer_exp[i] && ext == 1 &&
                          (strcmp(status, "reserved") == 0 ||
                           (strcmp(status, "expired") == 0 && now >= rexp)),
                      "hold %s: extend 200 %s until %lld, record %s until %lld, %d extensions",
                      ids[i], code[i], (long long)answer_exp[i], status, (long long)rexp, ext);
            /* never extended once due: sent before the expiry (25 ms for the offset's error) */
            SF_ASSERT(sent[i] <= exp[i] + 25,
                      "hold %s: extended, but sent %lld ms after its expiry", ids[i],
                      (long long)(sent[i] - exp[i]));
            extended++;
        } else {
            SF_ASSERT(got[i] >= exp[i] - 25,
                      "hold %s: 409 reservation_expired answered %lld ms before its expiry", ids[i],
                      (long long)(exp[i] - got[i]));
            SF_ASSERT(answer[i] == 409 && strcmp(code[i], "reservation_expired") == 0 &&
                          strcmp(status, "expired") == 0 && rexp == exp[i] && ext == 0,
                      "hold %s: extend %d %s, record %s until %lld (was %lld), %d extensions",
                      ids[i], answer[i], code[i], status, (long long)rexp, (long long)exp[i], ext);
            expired++;
        }
    }
    fprintf(stderr, "extend vs expiry: %d extended, %d expired first\n", extended, expired);
    if (extended == 0 || expired == 0)
        return -1;
    /* the extended ones: every other one confirmed (200, in its new time), the rest expire at
     * their new time */
    sf_resp r = {0};
    int confirmed = 0;
    for (int i = 0, j = 0; i < EX_RACE_HOLDS; i++) {
        if (answer[i] != 200 || j++ % 2)
            continue;
        ex_post(i % 2 ? port : sf_port(other), ids[i], "confirm", EX_CONFIRM, &r);
        SF_ASSERT_STATUS(&r, 200);
        confirmed++;
    }
    sf_resp_free(&r);
    ex_wait_no_holds(rf_url(gf_redis), sku, 2000 + 1000 + EX_TIMEOUT_MS + 1500);
    double expired_n = ex_metric_sum(all, 3, EX_EXPIRED) - expired0;
    double extended_n = ex_metric_sum(all, 3, EX_EXTENDED) - extended0;
    SF_ASSERT(expired_n == EX_RACE_HOLDS - confirmed && extended_n == extended,
              "metrics: %g expired, %g extended; the records: %d expired, %d extended", expired_n,
              extended_n, EX_RACE_HOLDS - confirmed, extended);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.confirmed_orders, confirmed);
    SF_ASSERT_EQ(rep.expired, EX_RACE_HOLDS - confirmed);
    SF_ASSERT_EQ(rep.sold, confirmed);
    SF_ASSERT_EQ(rep.remaining, 200 - confirmed);
    *extended_out = extended;
    return 0;
}

static void test_extend_races_expiry(void **state)
{
    (void)state;
    const char *args[] = {"--threads",
                          "1",
                          "--admin-token",
                          EX_TOKEN,
                          "--confirm-token-file",
                          confirm_file,
                          "--redis-timeout-ms",
                          "500",
                          "--lock-lease-ms",
                          "1000",
                          NULL};
    sf_service *other = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(other != NULL, "%s", "second instance");
    int extended = 0, tries = 0;
    while (ex_race_once(other, &extended) != 0)
        SF_ASSERT(++tries < 3, "%d races in a row with every extend on one side", tries);
    SF_ASSERT(sf_stop(other) == 0, "%s", "second instance's exit");
}

/* ---- a Redis Cluster ---- */

static void test_extend_on_cluster(void **state)
{
    (void)state;
    cf_cluster *cl = cf_start(3, 0);
    SF_ASSERT(cl != NULL, "%s", "a 3-master cluster");
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    const char *args[] = {"--threads",
                          "1",
                          "--admin-token",
                          EX_TOKEN,
                          "--confirm-token-file",
                          confirm_file,
                          "--redis-timeout-ms",
                          "500",
                          NULL};
    sf_service *s = sf_start(url, args);
    if (!s)
        cf_stop(cl);
    SF_ASSERT(s != NULL, "%s", "inventoryd on the cluster");
    int p = sf_port(s);
    char sku[64], id[112], id2[112];
    tu_unique_name(sku, sizeof sku, "ex-cluster");
    ex_put(p, sku, 30, 6, ",\"reservation_ttl_s\":1,\"hold_extend_s\":3");
    int64_t exp = ex_hold(p, sku, 1, id);
    ex_hold(p, sku, 1, id2);
    sf_resp r = {0};
    ex_extend(NULL, p, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(ex_iso_ms(sf_str(r.json, "expires_at")), exp + 3000);
    /* the PATCH holds from its answer here too: the limits are fenced by the rules' version */
    ex_patch(p, sku, "{\"hold_extend_s\":0}");
    ex_extend(NULL, p, id2, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "extend_not_allowed");
    ex_patch(p, sku, "{\"hold_extend_s\":3,\"hold_extend_max\":1}");
    ex_extend(NULL, p, id, EX_CONFIRM, NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "extend_limit");
    /* id2 expires at its time, id at its new one */
    tu_sleep_ms(1800);
    ex_get(p, id, &r);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "reserved") == 0, "%s", sf_resp_summary(&r));
    ex_get(p, id2, &r);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "expired") == 0, "%s", sf_resp_summary(&r));
    int64_t end = tu_now_ms() + 4000;
    while (tu_now_ms() < end) {
        ex_get(p, id, &r);
        if (strcmp(sf_str(r.json, "status"), "reserved") != 0)
            break;
        tu_sleep_ms(50);
    }
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "expired") == 0, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    sf_report rep;
    SF_ASSERT_INVARIANTS(url, sku, &rep);
    SF_ASSERT_EQ(rep.remaining, 30);
    SF_ASSERT_EQ(rep.expired, 2);
    int rc = sf_stop(s);
    cf_stop(cl);
    SF_ASSERT(rc == 0, "%s", "inventoryd's exit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extend_answers),
        cmocka_unit_test(test_extend_expired),
        cmocka_unit_test(test_extend_waits_for_replicas),
        cmocka_unit_test(test_sweeper_takes_the_new_time),
        cmocka_unit_test(test_multi_segment_hold_extended),
        cmocka_unit_test(test_extend_races_expiry),
        cmocka_unit_test(test_extend_on_cluster),
    };
    /* IT_EXTEND_PART (ctest runs the two as it_extend and it_extend_cluster): "cluster" runs
     * the test on a Redis Cluster only, "one-redis" the others; unset, every test. */
    const char *part = getenv("IT_EXTEND_PART");
    if (part && strcmp(part, "cluster") == 0)
        cmocka_set_test_filter("*cluster*");
    else if (part && strcmp(part, "one-redis") == 0)
        cmocka_set_skip_filter("*cluster*");
    else if (part) {
        fprintf(stderr, "IT_EXTEND_PART=%s: cluster or one-redis\n", part);
        return 2;
    }
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
