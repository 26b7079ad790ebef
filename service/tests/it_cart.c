/*
 * Carts (SPEC §17, issue 33; docs/design.md "Carts (SPEC §17)") against a real redis-server and
 * real inventoryd processes over HTTP (about 12 s):
 *   - carts of 2 to 5 SKUs succeed whole: 201 with items (home first, each with its parts), the
 *     primary in the home SKU, a part record (part_of the cart, its own sku) for every other
 *     part, and per SKU sold = total - remaining;
 *   - one item short or sold out: nothing sold in any SKU, the answer names the SKU; an unknown
 *     SKU likewise; the bad bodies (duplicate_sku, items with sku, 0 or 11 items) change nothing;
 *   - an item that needs several segments;
 *   - an Idempotency-Key replays the whole cart (200, the same body); GET of the cart answers
 *     its record with items, of a part's id 404;
 *   - a per-user limit in an item's SKU (not the home one) counts the cart and refuses past it;
 *   - a hold cart: the shortest TTL, every part reserved (r), the primary's expires_at;
 *   - one --order-redis-call-budget for the cart: over it, 503 and nothing sold;
 *   - an item planned without reading its segments first (a probe): its stock only in a segment
 *     the instance cached empty (another instance cancelled an order there) and needing two
 *     segments: 201 from both; a SKU one unit short, never seen: insufficient_stock (~1 s);
 *   - contention: 12 clients on 3 instances, 2-3 item carts over 5 SKUs in random orders until
 *     the stock is gone: every request answered within the lock wait (no deadlock), then 0
 *     partial carts and every SKU whole;
 *   - an instance killed -9 at each step of a cart (cart_lock, cart_intent, cart_parts,
 *     cart_primary, cart_hdel; the five at once, ~6 s): no answer, Redis holds exactly the
 *     state of its step; then the group's sweepers heal every intent (forward when the primary
 *     was written, else back: no part anywhere, every part's id tombstoned, every unit back),
 *     every SKU's invariants hold, and the client's retry with the cart's Idempotency-Key
 *     replays a cart healed forward (200, its id) or makes a new one when it was healed back
 *     (201, another id);
 *   - waiting rooms: an item's ticket (items[i].ticket) missing, forged, another user's or
 *     another SKU's refuses the cart naming the SKU, nothing sold; a cart refused for another
 *     item leaves it unused; a valid one sells once (then 409 ticket_used), the key replays;
 *     a cart with a ticket item cut off before or after its primary: healed back, the ticket
 *     buys again (with the key at once, else after its claim's expiry); forward, it replays
 *     (~6 s);
 * On a 3-master Redis Cluster (it_cart_cluster, IT_CART_PART=cluster, ~5 s and the cluster's
 * start): carts whose SKUs sit on different masters, one with an item of several segments, a
 * limit and a hold item under a home SKU without a TTL (the home meta's hold flag set), a
 * refused cart selling nothing; and a master killed mid-sale (test_cluster_cart_master_killed,
 * --redis-replica-acks 1, a replica each: 6 clients' carts of 2-3 of 4 SKUs retried with their
 * keys, the master of one SKU's segment killed -9 and failed over: 0 partial carts, every SKU's
 * invariants whole, every 201 whole; ~12 s); and the kill -9 at each step of a cart on a cluster
 * with a replica each and --redis-replica-acks 1 (test_cluster_cart_killed_at_each_step: the same
 * helpers as on one Redis, each cart's intent and parts spread over the three masters, the five
 * cuts at once, ~5 s and the cluster's start). The cluster part takes ~24 s.
 */
#include "svc_test.h"

#include "cluster_fixture.h"
#include "rules.h"
#include "ticket.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define CT_TOKEN "cart-admin-token"
#define CT_INSTANCES 3

static sf_service *svc[CT_INSTANCES];
/* The waiting room's key every instance reads (--queue-key-file): the tickets are minted here
 * with it (ticket_mint), as it_ticket does; ct_other_key forges. */
static char ct_key_path[256];
static struct ticket_key ct_key, ct_other_key;

static int group_setup(void **state)
{
    (void)state;
    snprintf(ct_key_path, sizeof ct_key_path, "/tmp/it_cart_key_%d", (int)getpid());
    FILE *f = fopen(ct_key_path, "w");
    if (!f)
        return -1;
    fputs("it_cart: a queue key of more than thirty-two bytes, for this test only\n", f);
    fclose(f);
    chmod(ct_key_path, 0600);
    char err[256];
    if (ticket_key_load(&ct_key, ct_key_path, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    memset(ct_other_key.bytes, 'x', 40);
    ct_other_key.len = 40;
    const char *args[] = {"--threads",
                          "2",
                          "--admin-token",
                          CT_TOKEN,
                          "--trust-body-user-id",
                          "--queue-key-file",
                          ct_key_path,
                          "--redis-timeout-ms",
                          "500",
                          "--lock-lease-ms",
                          "1000",
                          NULL};
    for (int i = 0; i < CT_INSTANCES; i++)
        if (!(svc[i] = sf_group_service(args)))
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    unlink(ct_key_path);
    return sf_group_teardown(state);
}

/* No state change outside the tables of the order's machines (order_fsm.c, order_claim.c,
 * order_cart.c: an assertion in debug builds, an error line in release builds) on the group's
 * instances. */
static void ct_no_bad_move(void)
{
    for (int i = 0; i < CT_INSTANCES; i++)
        SF_ASSERT(!sf_log_contains(svc[i], "_bad_transition"), "instance %d: %s", i,
                  "a state change not in a machine's table (its log above)");
}

static int ct_port(int i)
{
    return sf_port(svc[i % CT_INSTANCES]);
}

/* The node holding key's slot. */
static rf_server *ct_node_of(cf_cluster *cl, const char *key)
{
    redisReply *r = rf_command(cf_node(cl, 0), "CLUSTER KEYSLOT %s", key);
    int m = r && r->type == REDIS_REPLY_INTEGER ? cf_master_of(cl, (int)r->integer) : -1;
    freeReplyObject(r);
    SF_ASSERT(m >= 0, "the master of %s", key);
    return cf_node(cl, m);
}

/* Where the Redis side of a check lives, so the cut-off tests run on one Redis and on a
 * cluster with the same helpers: ct_one (all zero) is the group's Redis (gf_redis) and its
 * instances; a cluster's has its fixture (each key read on its slot's master), its URL, the
 * faulty instance's extra arguments and the ports of the instances whose sweepers heal. */
struct ct_where {
    cf_cluster *cl;
    const char *url;
    const char *const *extra; /* NULL-terminated, or NULL */
    int ports[CT_INSTANCES], nports;
};
static const struct ct_where ct_one;

/* The server holding key on w. */
static rf_server *ct_at(const struct ct_where *w, const char *key)
{
    return w->cl ? ct_node_of(w->cl, key) : gf_redis;
}

static const char *ct_url(const struct ct_where *w)
{
    return w->url ? w->url : rf_url(gf_redis);
}

static int ct_port_at(const struct ct_where *w, int i)
{
    return w->nports ? w->ports[i % w->nports] : ct_port(i);
}

/* PUT sku with stock, segments and the rules (",..." or "") through w's first instance. */
static void ct_put_at(const struct ct_where *w, const char *sku, long long stock, int segments,
                      const char *rules)
{
    char path[160], body[512];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld,\"segments\":%d%s}", stock, segments, rules);
    sf_resp r = {0};
    sf_json_request(NULL, ct_port_at(w, 0), "PUT", path, CT_TOKEN, NULL, body, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

static void ct_put(const char *sku, long long stock, int segments, const char *rules)
{
    ct_put_at(&ct_one, sku, stock, segments, rules);
}

/* POSTs {"items":[items],"user_id":user} (user NULL: none) to port p. The status. */
static int ct_cart(int p, const char *items, const char *user, const char *idem, sf_resp *r)
{
    char body[2048];
    if (user)
        snprintf(body, sizeof body, "{\"items\":[%s],\"user_id\":\"%s\"}", items, user);
    else
        snprintf(body, sizeof body, "{\"items\":[%s]}", items);
    return sf_json_request(NULL, p, "POST", "/api/v1/orders", NULL, idem, body, r);
}

/* The segments' stock of sku on w summed (nseg segments). */
static long long ct_remaining_at(const struct ct_where *w, const char *sku, int nseg)
{
    long long sum = 0;
    for (int k = 0; k < nseg; k++) {
        char key[160], buf[32] = "", *end;
        snprintf(key, sizeof key, "inv:2:{%s/%d}:stock", sku, k);
        SF_ASSERT(rf_string(ct_at(w, key), buf, sizeof buf, "GET %s", key) == 1, "GET %s", key);
        long long v = strtoll(buf, &end, 10);
        SF_ASSERT(*end == '\0' && end != buf, "stock of %s/%d: %s", sku, k, buf);
        sum += v;
    }
    return sum;
}

static long long ct_remaining(const char *sku, int nseg)
{
    return ct_remaining_at(&ct_one, sku, nseg);
}

/* The units of a record in its segment k: its parts' entry for k, else its quantity. */
static long long ct_units(json_t *o, int k)
{
    json_t *parts = json_object_get(o, "parts");
    if (json_is_array(parts)) {
        size_t i;
        json_t *p;
        json_array_foreach(parts, i, p)
        {
            if (sf_json_int(p, "segment", -1) == k)
                return sf_json_int(p, "quantity", 0);
        }
        return 0;
    }
    return sf_json_int(o, "quantity", 0);
}

/* Whether the record id exists in segment k of sku on w. */
static int ct_exists_at(const struct ct_where *w, const char *sku, int k, const char *id)
{
    char key[160];
    snprintf(key, sizeof key, "inv:2:{%s/%d}:orders", sku, k);
    return rf_integer(ct_at(w, key), "HEXISTS %s %s", key, id) == 1;
}

/* Splits "<32 hex>-<k>-<sku>": 0, or -1 when it is not an order id. */
static int ct_split(const char *id, char *hex, int *k, char *sku)
{
    const char *a = strchr(id, '-');
    if (!a || a - id != 32)
        return -1;
    const char *b = strchr(a + 1, '-');
    if (!b)
        return -1;
    memcpy(hex, id, 32);
    hex[32] = '\0';
    *k = atoi(a + 1);
    snprintf(sku, 80, "%s", b + 1);
    return 0;
}

/* SPEC §8 for carts, over skus (each of nseg segments, stock total[i]): sold = total -
 * remaining from the live records' units; every part's part_of names a primary that exists
 * and lists it among its items; every primary's items' parts exist. Returns the live carts. */
static int ct_whole_at(const struct ct_where *w, const char *const *skus, const long long *total,
                       int n, int nseg)
{
    int primaries = 0;
    for (int s = 0; s < n; s++) {
        long long sold = 0;
        for (int k = 0; k < nseg; k++) {
            char okey[160];
            snprintf(okey, sizeof okey, "inv:2:{%s/%d}:orders", skus[s], k);
            redisReply *rep = rf_command(ct_at(w, okey), "HGETALL %s", okey);
            SF_ASSERT(rep && rep->type == REDIS_REPLY_ARRAY, "HGETALL %s/%d", skus[s], k);
            for (size_t i = 0; i + 1 < rep->elements; i += 2) {
                const char *id = rep->element[i]->str;
                json_t *o = json_loads(rep->element[i + 1]->str, 0, NULL);
                SF_ASSERT(o != NULL, "record %s", id);
                const char *st = json_string_value(json_object_get(o, "status"));
                int live = st && strcmp(st, "cancelled") != 0 && strcmp(st, "expired") != 0;
                if (live)
                    sold += ct_units(o, k);
                const char *of = json_string_value(json_object_get(o, "part_of"));
                char hex[33], psku[80];
                int pk;
                if (of) {
                    SF_ASSERT(ct_split(of, hex, &pk, psku) == 0, "part_of %s", of);
                    SF_ASSERT(strncmp(hex, id, 32) == 0, "part %s of %s: another hex", id, of);
                    SF_ASSERT(ct_exists_at(w, psku, pk, of),
                              "a partial cart: part %s, no primary %s", id, of);
                    SF_ASSERT(strcmp(json_string_value(json_object_get(o, "sku")), skus[s]) == 0,
                              "part %s: sku %s", id, json_string_value(json_object_get(o, "sku")));
                }
                json_t *items = json_object_get(o, "items");
                if (json_is_array(items)) {
                    primaries++;
                    size_t a, b;
                    json_t *it, *p;
                    json_array_foreach(items, a, it)
                    {
                        const char *isku = json_string_value(json_object_get(it, "sku"));
                        json_array_foreach(json_object_get(it, "parts"), b, p)
                        {
                            char pid[160];
                            int kk = (int)sf_json_int(p, "segment", -1);
                            snprintf(pid, sizeof pid, "%.32s-%d-%s", id, kk, isku);
                            SF_ASSERT(ct_exists_at(w, isku, kk, pid),
                                      "a partial cart: %s has no part %s", id, pid);
                        }
                    }
                }
                json_decref(o);
            }
            freeReplyObject(rep);
        }
        long long left = ct_remaining_at(w, skus[s], nseg);
        SF_ASSERT(sold == total[s] - left, "%s: sold %lld, total %lld, remaining %lld", skus[s],
                  sold, total[s], left);
    }
    return primaries;
}

static int ct_whole(const char *const *skus, const long long *total, int n, int nseg)
{
    return ct_whole_at(&ct_one, skus, total, n, nseg);
}

/* The number of carts being made (intents) with home sku on w. */
static long long ct_intents_at(const struct ct_where *w, const char *sku)
{
    char key[160];
    snprintf(key, sizeof key, "inv:2:{%s}:cart", sku);
    return rf_integer(ct_at(w, key), "HLEN %s", key);
}

static long long ct_intents(const char *sku)
{
    return ct_intents_at(&ct_one, sku);
}

/* ---- whole carts ---- */

static void test_carts_of_two_to_five(void **state)
{
    (void)state;
    const char *skus[5] = {"ct-a", "ct-b", "ct-c", "ct-d", "ct-e"};
    long long total[5];
    for (int i = 0; i < 5; i++)
        ct_put(skus[i], total[i] = 40, 4, "");
    for (int n = 2; n <= 5; n++) {
        char items[1024] = "";
        size_t used = 0;
        for (int i = 0; i < n; i++) /* home: the last SKU, so the lock order is not the items' */
            used += (size_t)snprintf(items + used, sizeof items - used,
                                     "%s{\"sku\":\"%s\",\"quantity\":%d}", i ? "," : "",
                                     skus[(n - 1 + i) % n], i + 1);
        sf_resp r = {0};
        SF_ASSERT(ct_cart(ct_port(n), items, "u-whole", NULL, &r) == 201, "%d items: %s", n,
                  sf_resp_summary(&r));
        json_t *its = json_object_get(r.json, "items");
        SF_ASSERT(json_is_array(its) && (int)json_array_size(its) == n, "items: %s",
                  sf_resp_summary(&r));
        const char *id = json_string_value(json_object_get(r.json, "order_id"));
        char hex[33], home[80];
        int k1;
        SF_ASSERT(id && ct_split(id, hex, &k1, home) == 0, "order_id: %s", sf_resp_summary(&r));
        SF_ASSERT(strcmp(home, skus[(n - 1) % n]) == 0, "the home SKU is items[0]'s: %s", id);
        SF_ASSERT_EQ(sf_json_int(r.json, "quantity", -1), 1);
        for (int i = 0; i < n; i++) {
            json_t *it = json_array_get(its, (size_t)i);
            SF_ASSERT(
                strcmp(json_string_value(json_object_get(it, "sku")), skus[(n - 1 + i) % n]) == 0,
                "items[%d]: %s", i, sf_resp_summary(&r));
            SF_ASSERT_EQ(sf_json_int(it, "quantity", -1), i + 1);
        }
        sf_resp_free(&r);
        SF_ASSERT_EQ(ct_intents(home), 0);
    }
    SF_ASSERT_EQ(ct_whole(skus, total, 5, 4), 4);
}

static void test_refusals_sell_nothing(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-r1", "ct-r2", "ct-r3"};
    long long total[3] = {10, 10, 0};
    ct_put(skus[0], 10, 2, "");
    ct_put(skus[1], 10, 2, "");
    ct_put(skus[2], 0, 2, "");
    struct {
        const char *items;
        int status;
        const char *error, *sku;
    } cases[] = {
        {"{\"sku\":\"ct-r1\",\"quantity\":2},{\"sku\":\"ct-r3\"}", 409, "sold_out", "ct-r3"},
        {"{\"sku\":\"ct-r1\",\"quantity\":2},{\"sku\":\"ct-r2\",\"quantity\":11}", 409,
         "insufficient_stock", "ct-r2"},
        {"{\"sku\":\"ct-r2\"},{\"sku\":\"ct-nope\"}", 404, "unknown_sku", "ct-nope"},
        {"{\"sku\":\"ct-r1\"},{\"sku\":\"ct-r1\"}", 422, "duplicate_sku", NULL},
        {"{\"sku\":\"ct-r1\",\"quantity\":0}", 400, "invalid_request", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sf_resp r = {0};
        int st = ct_cart(ct_port((int)i), cases[i].items, NULL, NULL, &r);
        SF_ASSERT(st == cases[i].status && strcmp(sf_error_code(&r), cases[i].error) == 0, "%s: %s",
                  cases[i].items, sf_resp_summary(&r));
        const char *sku = json_string_value(json_object_get(r.json, "sku"));
        if (cases[i].sku)
            SF_ASSERT(sku && strcmp(sku, cases[i].sku) == 0, "no sku %s: %s", cases[i].sku,
                      sf_resp_summary(&r));
        sf_resp_free(&r);
    }
    /* sku and items together; 11 items */
    sf_resp r = {0};
    int st = sf_json_request(NULL, ct_port(0), "POST", "/api/v1/orders", NULL, NULL,
                             "{\"sku\":\"ct-r1\",\"items\":[{\"sku\":\"ct-r2\"}]}", &r);
    SF_ASSERT(st == 422 && strcmp(sf_error_code(&r), "items_and_sku") == 0, "%s",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    char items[1024] = "";
    size_t used = 0;
    for (int i = 0; i < 11; i++)
        used += (size_t)snprintf(items + used, sizeof items - used, "%s{\"sku\":\"ct-x%d\"}",
                                 i ? "," : "", i);
    SF_ASSERT_EQ(ct_cart(ct_port(1), items, NULL, NULL, &r), 400);
    sf_resp_free(&r);
    SF_ASSERT_EQ(ct_remaining("ct-r1", 2), 10);
    SF_ASSERT_EQ(ct_remaining("ct-r2", 2), 10);
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 2), 0);
    SF_ASSERT_EQ(ct_intents("ct-r1") + ct_intents("ct-r2"), 0);
}

static void test_multi_segment_item_replay_get(void **state)
{
    (void)state;
    const char *skus[2] = {"ct-m1", "ct-m2"};
    long long total[2] = {40, 40};
    ct_put(skus[0], 40, 4, "");
    ct_put(skus[1], 40, 4, ""); /* 10 a segment: 25 units take three parts */
    const char *items = "{\"sku\":\"ct-m1\",\"quantity\":3},{\"sku\":\"ct-m2\",\"quantity\":25}";
    sf_resp r = {0}, again = {0}, get = {0};
    double created = sf_metric(ct_port(0), "inventory_orders_total{result=\"created\"}");
    SF_ASSERT(ct_cart(ct_port(0), items, NULL, "ct-key-1", &r) == 201, "%s", sf_resp_summary(&r));
    /* one cart, one order counted (not one per item) */
    SF_ASSERT(sf_metric(ct_port(0), "inventory_orders_total{result=\"created\"}") == created + 1,
              "%s", "inventory_orders_total{result=\"created\"} counted the cart's items");
    json_t *m2 = json_array_get(json_object_get(r.json, "items"), 1);
    SF_ASSERT(json_array_size(json_object_get(m2, "parts")) >= 3, "%s", sf_resp_summary(&r));
    /* the same key on another instance: the stored cart */
    SF_ASSERT(ct_cart(ct_port(1), items, NULL, "ct-key-1", &again) == 200, "%s",
              sf_resp_summary(&again));
    SF_ASSERT(json_equal(json_object_get(r.json, "items"), json_object_get(again.json, "items")) &&
                  json_equal(json_object_get(r.json, "order_id"),
                             json_object_get(again.json, "order_id")),
              "replay %s vs %s", sf_resp_summary(&again), sf_resp_summary(&r));
    const char *id = json_string_value(json_object_get(r.json, "order_id"));
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%s", id);
    SF_ASSERT(sf_http(ct_port(2), "GET", path, NULL, NULL, 0, &get) == 200, "%s",
              sf_resp_summary(&get));
    SF_ASSERT(json_equal(json_object_get(get.json, "items"), json_object_get(r.json, "items")),
              "GET %s", sf_resp_summary(&get));
    sf_resp_free(&get);
    /* a part's id is no order */
    int k = (int)sf_json_int(json_array_get(json_object_get(m2, "parts"), 0), "segment", -1);
    snprintf(path, sizeof path, "/api/v1/orders/%.32s-%d-ct-m2", id, k);
    SF_ASSERT(sf_http(ct_port(2), "GET", path, NULL, NULL, 0, &get) == 404, "%s",
              sf_resp_summary(&get));
    sf_resp_free(&get);
    sf_resp_free(&r);
    sf_resp_free(&again);
    SF_ASSERT_EQ(ct_remaining("ct-m1", 4), 37);
    SF_ASSERT_EQ(ct_remaining("ct-m2", 4), 15);
    SF_ASSERT_EQ(ct_whole(skus, total, 2, 4), 1);
}

static void test_limit_in_another_item(void **state)
{
    (void)state;
    const char *skus[2] = {"ct-l1", "ct-l2"};
    long long total[2] = {20, 20};
    ct_put(skus[0], 20, 2, "");
    ct_put(skus[1], 20, 2, ",\"limit_per_user\":2");
    const char *items = "{\"sku\":\"ct-l1\"},{\"sku\":\"ct-l2\",\"quantity\":2}";
    sf_resp r = {0};
    SF_ASSERT(ct_cart(ct_port(0), items, "u-lim", NULL, &r) == 201, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    SF_ASSERT(ct_cart(ct_port(1), "{\"sku\":\"ct-l1\"},{\"sku\":\"ct-l2\"}", "u-lim", NULL, &r) ==
                      409 &&
                  strcmp(sf_error_code(&r), "limit_exceeded") == 0,
              "%s", sf_resp_summary(&r));
    const char *sku = json_string_value(json_object_get(r.json, "sku"));
    SF_ASSERT(sku && strcmp(sku, "ct-l2") == 0, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* no verified user: the SKU with a limit refuses */
    SF_ASSERT(ct_cart(ct_port(2), items, NULL, NULL, &r) == 401, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    SF_ASSERT_EQ(ct_remaining("ct-l1", 2), 19);
    SF_ASSERT_EQ(ct_remaining("ct-l2", 2), 18);
    SF_ASSERT_EQ(ct_whole(skus, total, 2, 2), 1);
}

static void test_hold_cart(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-h0", "ct-h1", "ct-h2"};
    long long total[3] = {20, 20, 20};
    ct_put(skus[0], 20, 2, "");                           /* no hold: the home SKU */
    ct_put(skus[1], 20, 2, ",\"reservation_ttl_s\":300"); /* ... */
    ct_put(skus[2], 20, 2, ",\"reservation_ttl_s\":60");  /* the shortest */
    sf_resp r = {0};
    SF_ASSERT(ct_cart(ct_port(0),
                      "{\"sku\":\"ct-h0\"},{\"sku\":\"ct-h1\",\"quantity\":2},{\"sku\":\"ct-h2\"}",
                      NULL, NULL, &r) == 201,
              "%s", sf_resp_summary(&r));
    SF_ASSERT(strcmp(json_string_value(json_object_get(r.json, "status")), "reserved") == 0, "%s",
              sf_resp_summary(&r));
    const char *exp = json_string_value(json_object_get(r.json, "expires_at"));
    const char *cr = json_string_value(json_object_get(r.json, "created_at"));
    SF_ASSERT(exp && cr, "%s", sf_resp_summary(&r));
    int64_t e = 0, c = 0;
    SF_ASSERT(rules_parse_time(exp, strlen(exp), &e) == 0 &&
                  rules_parse_time(cr, strlen(cr), &c) == 0,
              "%s", sf_resp_summary(&r));
    SF_ASSERT(e - c > 55000 && e - c < 65000, "expires %lld ms after its creation, not 60 s",
              (long long)(e - c));
    sf_resp_free(&r);
    /* every part reserved: r counts its units in its segment */
    long long reserved = 0;
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2; k++) {
            char buf[32] = "0";
            (void)rf_string(gf_redis, buf, sizeof buf, "HGET inv:2:{%s/%d}:cnt r", skus[s], k);
            reserved += atoll(buf);
        }
    SF_ASSERT_EQ(reserved, 4);
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 2), 1);
}

/* One --order-redis-call-budget for the whole cart: three items of 15 units in SKUs of 8
 * segments of 10 each: each item's probe (a lock and its release, 2 calls) falls short, the
 * other 7 segments are read (7) and one more lock is taken (2): 11 an item, plus each item's
 * layout read (1) and the intent's 3: within a budget of 30 each item is, the cart is not: 503,
 * nothing sold; two items fit. */
static void test_one_budget_for_the_cart(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-b1", "ct-b2", "ct-b3"};
    long long total[3] = {80, 80, 80};
    for (int i = 0; i < 3; i++)
        ct_put(skus[i], 80, 8, "");
    const char *args[] = {"--threads", "1", "--order-redis-call-budget", "30", NULL};
    sf_service *x = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(x != NULL, "%s", "an instance with a budget of 30");
    sf_resp r = {0};
    int st = ct_cart(sf_port(x),
                     "{\"sku\":\"ct-b1\",\"quantity\":15},{\"sku\":\"ct-b2\",\"quantity\":15},"
                     "{\"sku\":\"ct-b3\",\"quantity\":15}",
                     NULL, NULL, &r);
    SF_ASSERT(st == 503 && strcmp(sf_error_code(&r), "unavailable") == 0, "%s",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    /* two of them fit */
    st = ct_cart(sf_port(x),
                 "{\"sku\":\"ct-b1\",\"quantity\":15},{\"sku\":\"ct-b2\",\"quantity\":15}", NULL,
                 NULL, &r);
    SF_ASSERT(st == 201, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    SF_ASSERT(sf_stop(x) == 0, "%s", "the instance's exit");
    total[0] = total[1] = 80;
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 8), 1);
    SF_ASSERT_EQ(ct_remaining("ct-b3", 8), 80);
}

/* A re-PUT of one SKU through another instance: this instance's cached layout of it is then at
 * the old version, which its items learn only under their locks (the version is read with the
 * lock). The cart re-reads that item's layout and stock and takes its locks again within the
 * request, as a one-SKU order re-reads it: 201 (the re-PUT's larger stock serves it). Before,
 * the cart answered 503 with the layout forgotten (a PUT mid-sale turned carts that could
 * succeed into 503s). Round 0 re-PUTs the other item's SKU (found at its lock), round 1 the
 * home SKU (found at its lock, or by the intent's version check). */
static void test_cart_after_reput_elsewhere(void **state)
{
    (void)state;
    const char *pairs[2][2] = {{"ct-pa", "ct-pb"}, {"ct-pc", "ct-pd"}};
    for (int round = 0; round < 2; round++) {
        const char *home = pairs[round][0], *other = pairs[round][1];
        const char *reput = round ? home : other;
        ct_put(home, 20, 2, "");
        ct_put(other, 20, 2, "");
        char items[256], path[160];
        snprintf(items, sizeof items,
                 "{\"sku\":\"%s\",\"quantity\":%d},{\"sku\":\"%s\",\"quantity\":%d}", home,
                 round ? 25 : 1, other, round ? 1 : 25);
        /* instance 1 caches both layouts: 25 of the 20 units, refused, nothing sold */
        sf_resp r = {0};
        SF_ASSERT(ct_cart(ct_port(1), items, NULL, NULL, &r) == 409 &&
                      strcmp(sf_error_code(&r), "insufficient_stock") == 0,
                  "%s", sf_resp_summary(&r));
        sf_resp_free(&r);
        snprintf(path, sizeof path, "/api/v1/skus/%s", reput);
        sf_json_request(NULL, ct_port(0), "PUT", path, CT_TOKEN, NULL,
                        "{\"stock\":30,\"segments\":2}", &r);
        SF_ASSERT(r.status == 200 || r.status == 201, "re-PUT: %s", sf_resp_summary(&r));
        sf_resp_free(&r);
        SF_ASSERT(ct_cart(ct_port(1), items, NULL, NULL, &r) == 201, "round %d: %s", round,
                  sf_resp_summary(&r));
        sf_resp_free(&r);
        long long total[2] = {round ? 30 : 20, round ? 20 : 30};
        const char *skus[2] = {home, other};
        SF_ASSERT_EQ(ct_remaining(home, 2), round ? 5 : 19);
        SF_ASSERT_EQ(ct_remaining(other, 2), round ? 19 : 5);
        SF_ASSERT_EQ(ct_whole(skus, total, 2, 2), 1);
        sf_report rep;
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), home, &rep);
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), other, &rep);
    }
    ct_no_bad_move();
}

/* An item is planned without reading its segments first (order_multi.h, probe: one segment's
 * try-lock, the others read only when it falls short). Its stock only in a segment this
 * instance found empty (another instance cancelled an order there since) and in the one it did
 * not, and the item needing both: the probe falls short, the read finds the rest: 201 from two
 * parts, never insufficient_stock while the SKU holds the quantity; and a cart whose item's SKU
 * is short by one unit sells nothing (insufficient_stock). ~1 s. */
static void test_item_stock_where_thought_empty(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--sold-out-recheck-ms", "1000", NULL};
    sf_service *x = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(x != NULL, "%s", "an instance remembering empty segments for 1 s");
    for (int attempt = 0;; attempt++) {
        /* the precondition: 3 of the 4 segments cached empty on x when the cart comes (a loaded
         * machine may take the 1 s between: then again, with new SKUs) */
        SF_ASSERT(attempt < 10, "%s", "3 segments were never cached empty on time");
        char sku[32], other[32], shortsku[32], body[160], path[200], series[96];
        snprintf(sku, sizeof sku, "ct-e%d", attempt);
        snprintf(other, sizeof other, "ct-f%d", attempt);
        snprintf(shortsku, sizeof shortsku, "ct-g%d", attempt);
        ct_put(sku, 8, 4, "");
        ct_put(other, 12, 4, "");
        /* x sells three whole segments (2 units each): it marks them empty */
        char first[160] = "";
        int ks[3];
        for (int i = 0; i < 3; i++) {
            sf_resp r = {0};
            snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":2}", sku);
            int st =
                sf_json_request(NULL, sf_port(x), "POST", "/api/v1/orders", NULL, NULL, body, &r);
            SF_ASSERT(st == 201, "%s", sf_resp_summary(&r));
            ks[i] = (int)sf_json_int(r.json, "segment", -1);
            if (i == 0)
                snprintf(first, sizeof first, "%s",
                         json_string_value(json_object_get(r.json, "order_id")));
            sf_resp_free(&r);
        }
        /* another instance cancels the first: its 2 units are back in a segment x thinks empty
         */
        sf_resp r = {0};
        snprintf(path, sizeof path, "/api/v1/orders/%s", first);
        int st = sf_json_request(NULL, ct_port(1), "DELETE", path, CT_TOKEN, NULL, NULL, &r);
        SF_ASSERT(st == 200, "%s", sf_resp_summary(&r));
        sf_resp_free(&r);
        snprintf(series, sizeof series, "inventory_sku_segments_empty{sku=\"%s\"}", sku);
        double empty = sf_metric(sf_port(x), series);
        int rest = 0 + 1 + 2 + 3 - ks[0] - ks[1] - ks[2];
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":4},{\"sku\":\"%s\"}", sku, other);
        st = ct_cart(sf_port(x), body, NULL, NULL, &r);
        SF_ASSERT(st == 201, "the SKU holds 4 units: %s", sf_resp_summary(&r));
        json_t *parts =
            json_object_get(json_array_get(json_object_get(r.json, "items"), 0), "parts");
        SF_ASSERT(json_array_size(parts) == 2, "two parts: %s", sf_resp_summary(&r));
        for (size_t i = 0; i < 2; i++) {
            int k = (int)sf_json_int(json_array_get(parts, i), "segment", -1);
            SF_ASSERT(k == ks[0] || k == rest, "part in segment %d: %s", k, sf_resp_summary(&r));
        }
        sf_resp_free(&r);
        const char *skus[2] = {sku, other};
        long long total[2] = {8, 12};
        SF_ASSERT_EQ(ct_whole(skus, total, 2, 4), 1);
        SF_ASSERT_EQ(ct_remaining(sku, 4), 0);
        if (empty != 3)
            continue; /* sold right, but the cache was not as the test needs: again */
        /* an item's SKU short by one unit, none of it seen here: every segment read before the
         * answer, nothing sold */
        ct_put(shortsku, 7, 4, "");
        snprintf(body, sizeof body, "{\"sku\":\"%s\"},{\"sku\":\"%s\",\"quantity\":8}", other,
                 shortsku);
        st = ct_cart(sf_port(x), body, NULL, NULL, &r);
        SF_ASSERT(st == 409 && strcmp(sf_error_code(&r), "insufficient_stock") == 0, "%s",
                  sf_resp_summary(&r));
        const char *named = json_string_value(json_object_get(r.json, "sku"));
        SF_ASSERT(named && strcmp(named, shortsku) == 0, "%s", sf_resp_summary(&r));
        sf_resp_free(&r);
        SF_ASSERT_EQ(ct_remaining(shortsku, 4), 7);
        SF_ASSERT_EQ(ct_remaining(other, 4), 11);
        printf("thought empty: the cache as needed on attempt %d\n", attempt + 1);
        break;
    }
    SF_ASSERT(sf_stop(x) == 0, "%s", "the instance's exit");
}

/* ---- contention ---- */

#define CT_CLIENTS 12
static const char *const cskus[5] = {"ct-c0", "ct-c1", "ct-c2", "ct-c3", "ct-c4"};
static atomic_int c_created, c_refused, c_busy, c_other;
static atomic_llong c_slowest;

static void *ct_client(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    sf_conn *conn = sf_conn_open(ct_port((int)(uintptr_t)arg), 5000);
    int sold_out_in_a_row = 0;
    while (sold_out_in_a_row < 6) {
        int n = 2 + (int)(rand_r(&seed) % 2), pick[3], used = 0;
        while (used < n) {
            int s = (int)(rand_r(&seed) % 5), dup = 0;
            for (int j = 0; j < used; j++)
                dup |= pick[j] == s;
            if (!dup)
                pick[used++] = s;
        }
        char items[512];
        size_t w = 0;
        for (int i = 0; i < n; i++)
            w += (size_t)snprintf(items + w, sizeof items - w, "%s{\"sku\":\"%s\",\"quantity\":%d}",
                                  i ? "," : "", cskus[pick[i]], 1 + (int)(rand_r(&seed) % 3));
        char body[600];
        snprintf(body, sizeof body, "{\"items\":[%s]}", items);
        sf_resp r = {0};
        int64_t t0 = tu_now_ms();
        int st = sf_json_request(conn, 0, "POST", "/api/v1/orders", NULL, NULL, body, &r);
        int64_t took = tu_now_ms() - t0;
        long long prev = atomic_load(&c_slowest);
        while (took > prev && !atomic_compare_exchange_weak(&c_slowest, &prev, took))
            ;
        if (st == 201) {
            atomic_fetch_add(&c_created, 1);
            sold_out_in_a_row = 0;
        } else if (st == 409) {
            atomic_fetch_add(&c_refused, 1);
            sold_out_in_a_row++;
        } else if (st == 503 && strcmp(sf_error_code(&r), "lock_timeout") == 0) {
            atomic_fetch_add(&c_busy, 1);
        } else {
            fprintf(stderr, "cart: %s\n", sf_resp_summary(&r));
            atomic_fetch_add(&c_other, 1);
            sold_out_in_a_row++;
        }
        sf_resp_free(&r);
    }
    sf_conn_close(conn);
    return NULL;
}

static void test_contention_no_partial_cart(void **state)
{
    (void)state;
    long long total[5];
    for (int i = 0; i < 5; i++)
        ct_put(cskus[i], total[i] = 60, 3, "");
    pthread_t t[CT_CLIENTS];
    for (int i = 0; i < CT_CLIENTS; i++)
        pthread_create(&t[i], NULL, ct_client, (void *)(uintptr_t)i);
    for (int i = 0; i < CT_CLIENTS; i++)
        pthread_join(t[i], NULL);
    fprintf(stderr,
            "contention: %d carts, %d refused, %d lock_timeout, %d other; slowest %lld ms\n",
            atomic_load(&c_created), atomic_load(&c_refused), atomic_load(&c_busy),
            atomic_load(&c_other), (long long)atomic_load(&c_slowest));
    SF_ASSERT(atomic_load(&c_created) > 20, "only %d carts", atomic_load(&c_created));
    SF_ASSERT_EQ(atomic_load(&c_other), 0);
    /* every request answered within its lock wait (default 2 s), plus the machine's load */
    SF_ASSERT(atomic_load(&c_slowest) < 6000, "a cart took %lld ms",
              (long long)atomic_load(&c_slowest));
    int carts = ct_whole(cskus, total, 5, 3);
    SF_ASSERT_EQ(carts, atomic_load(&c_created));
    for (int i = 0; i < 5; i++)
        SF_ASSERT_EQ(ct_intents(cskus[i]), 0);
}

/* ---- cut-off points ---- */

/* Starts an instance on w's Redis (with w's extra arguments) that dies at point (faultpoint.h). */
static sf_service *ct_faulty_at(const struct ct_where *w, const char *point)
{
    const char *args[24] = {"--threads",
                            "1",
                            "--admin-token",
                            CT_TOKEN,
                            "--trust-body-user-id",
                            "--queue-key-file",
                            ct_key_path,
                            "--redis-timeout-ms",
                            "500",
                            "--lock-wait-ms",
                            "800",
                            "--lock-lease-ms",
                            "1000",
                            NULL};
    int n = 0;
    while (args[n])
        n++;
    for (int i = 0; w->extra && w->extra[i]; i++) {
        SF_ASSERT(n < 23, "%s", "too many extra arguments");
        args[n++] = w->extra[i];
    }
    args[n] = NULL;
    setenv("INVENTORY_FAULTPOINT", point, 1);
    sf_service *s = sf_start(ct_url(w), args);
    unsetenv("INVENTORY_FAULTPOINT");
    SF_ASSERT(s != NULL, "%s", "start the faulty instance");
    return s;
}

static sf_service *ct_faulty(const char *point)
{
    return ct_faulty_at(&ct_one, point);
}

/* One cut-off cart: its fault point, what Redis holds right after the kill (the intent, the
 * parts but the primary, the primary) and which way the healer must end it. */
struct ct_cut {
    const char *point, *prefix;
    int intent, parts, primary, forward;
    char sku[3][40]; /* a, b (home), c */
    char key[64];    /* the cart's Idempotency-Key */
    char id[160];    /* the cart's id (from its intent; "" when none was written) */
    char ids[4][160];
    char isku[4][40];
    int nids;
};

/* The index of the master holding key on cluster cl. */
static int ct_master_at(cf_cluster *cl, const char *key)
{
    rf_server *n = ct_node_of(cl, key);
    for (int m = 0; m < cf_nodes(cl); m++)
        if (cf_node(cl, m) == n)
            return m;
    return -1;
}

/* The master (index) of the key "inv:2:{<sku><j><suffix>" on cl: "}:cart" for the intent,
 * "/k}:orders" for segment k. */
static int ct_master_of_name(cf_cluster *cl, const char *sku, int j, const char *suffix)
{
    char key[200];
    snprintf(key, sizeof key, "inv:2:{%s%d%s", sku, j, suffix);
    return ct_master_at(cl, key);
}

/* On a cluster: names the cut's SKUs "<prefix>-<a|b|c><j>" so that every cart spans the three
 * masters: the first j for a whose two segments sit on the two masters other than the home b's
 * intent (its {b} slot), and for c whose segments are not on the intent's master either. (A
 * SKU's two segments cannot sit on every pair of masters: CRC16 is linear, so "{x/1}"'s slot is
 * "{x/0}"'s XOR a constant; hence the search over b too.) On one Redis: "<prefix>-<a|b|c>". */
static void ct_cut_skus(const struct ct_where *w, struct ct_cut *x)
{
    char base[3][32];
    for (int i = 0; i < 3; i++)
        snprintf(base[i], sizeof base[i], "%.24s-%c", x->prefix, "abc"[i]);
    if (!w->cl) {
        for (int i = 0; i < 3; i++)
            memcpy(x->sku[i], base[i], sizeof base[i]);
        return;
    }
    for (int jb = 0; jb < 20; jb++) {
        int home = ct_master_of_name(w->cl, base[1], jb, "}:cart"), ja = -1, jc = -1;
        for (int j = 0; j < 200 && ja < 0; j++) {
            int m0 = ct_master_of_name(w->cl, base[0], j, "/0}:orders");
            int m1 = ct_master_of_name(w->cl, base[0], j, "/1}:orders");
            if (m0 != home && m1 != home && m0 != m1)
                ja = j;
        }
        for (int j = 0; j < 200 && jc < 0; j++)
            if (ct_master_of_name(w->cl, base[2], j, "/0}:orders") != home &&
                ct_master_of_name(w->cl, base[2], j, "/1}:orders") != home)
                jc = j;
        if (ja >= 0 && jc >= 0) {
            snprintf(x->sku[0], sizeof x->sku[0], "%s%d", base[0], ja);
            snprintf(x->sku[1], sizeof x->sku[1], "%s%d", base[1], jb);
            snprintf(x->sku[2], sizeof x->sku[2], "%s%d", base[2], jc);
            return;
        }
    }
    SF_ASSERT(0, "%s: no SKU names spanning the three masters", x->prefix);
}

/* Sends the cut's cart of 3 SKUs (home b, a on both its segments, c) to an instance on w dying
 * at its point: no answer; then Redis holds exactly the state of its step (on a cluster, the
 * intent and its parts on the three masters). */
static void ct_cut_run(const struct ct_where *w, struct ct_cut *x)
{
    ct_cut_skus(w, x);
    snprintf(x->key, sizeof x->key, "ct-key-%s", x->point);
    for (int i = 0; i < 3; i++)
        ct_put_at(w, x->sku[i], 20, 2, "");
    char items[256];
    snprintf(items, sizeof items,
             "{\"sku\":\"%s\"},{\"sku\":\"%s\",\"quantity\":15},{\"sku\":\"%s\",\"quantity\":2}",
             x->sku[1], x->sku[0], x->sku[2]);
    sf_service *s = ct_faulty_at(w, x->point);
    sf_resp r = {0};
    ct_cart(sf_port(s), items, NULL, x->key, &r);
    SF_ASSERT(r.status == 0, "%s: the killed instance answered: %s", x->point, sf_resp_summary(&r));
    sf_resp_free(&r);
    for (int t = 0; t < 100 && sf_alive(s); t++)
        tu_sleep_ms(20);
    SF_ASSERT(!sf_alive(s), "%s: the instance did not die at its fault point", x->point);
    (void)sf_stop(s);
    char ikey[160];
    snprintf(ikey, sizeof ikey, "inv:2:{%s}:cart", x->sku[1]);
    redisReply *rep = rf_command(ct_at(w, ikey), "HVALS %s", ikey);
    SF_ASSERT(rep && rep->type == REDIS_REPLY_ARRAY && (int)rep->elements == x->intent,
              "%s: %d intent expected", x->point, x->intent);
    if (!x->intent) { /* cut off before the intent: nothing in any SKU */
        freeReplyObject(rep);
        for (int i = 0; i < 3; i++)
            SF_ASSERT_EQ(ct_remaining_at(w, x->sku[i], 2), 20);
        return;
    }
    json_t *in = json_loads(rep->element[0]->str, 0, NULL);
    freeReplyObject(rep);
    json_t *ip = json_object_get(in, "parts");
    const char *id = json_string_value(json_object_get(in, "order"));
    SF_ASSERT(id && json_is_array(ip) && json_array_size(ip) == 4 &&
                  json_is_integer(json_object_get(in, "deadline")),
              "%s: intent without its order, 4 parts or deadline", x->point);
    snprintf(x->id, sizeof x->id, "%s", id);
    long long made = 0, prim = 0;
    unsigned masters = w->cl ? 1u << ct_master_at(w->cl, ikey) : 0;
    size_t i;
    json_t *p;
    json_array_foreach(ip, i, p)
    {
        int k = (int)json_integer_value(json_array_get(p, 0));
        const char *sku = json_string_value(json_array_get(p, 2));
        snprintf(x->ids[i], sizeof x->ids[i], "%.32s-%d-%s", id, k, sku);
        snprintf(x->isku[i], sizeof x->isku[i], "%s", sku);
        if (strcmp(x->ids[i], id) == 0)
            prim += ct_exists_at(w, sku, k, x->ids[i]);
        else
            made += ct_exists_at(w, sku, k, x->ids[i]);
        if (w->cl) {
            char okey[160];
            snprintf(okey, sizeof okey, "inv:2:{%s/%d}:orders", sku, k);
            masters |= 1u << ct_master_at(w->cl, okey);
        }
    }
    x->nids = (int)json_array_size(ip);
    json_decref(in);
    SF_ASSERT(!w->cl || masters == 7u, "%s: the intent and its parts on masters %#x, not the three",
              x->point, masters);
    SF_ASSERT(made == (x->parts ? 3 : 0) && prim == x->primary,
              "%s: %lld of 3 parts and %lld primary, expected %d and %d", x->point, made, prim,
              x->parts ? 3 : 0, x->primary);
}

/* Once the healer is done: the cut's cart whole, forward (every part and the primary, the
 * units out) or back (no part anywhere, every part's id tombstoned in its segment, every unit
 * back), and each SKU's invariants (SPEC §8, carts included) whole. */
static void ct_cut_healed(const struct ct_where *w, const struct ct_cut *x)
{
    long long total[3] = {20, 20, 20};
    const char *skus[3] = {x->sku[0], x->sku[1], x->sku[2]};
    SF_ASSERT(ct_whole_at(w, skus, total, 3, 2) == (x->forward ? 1 : 0), "%s: not healed %s",
              x->point, x->forward ? "forward" : "back");
    SF_ASSERT_EQ(ct_remaining_at(w, x->sku[0], 2), x->forward ? 5 : 20);
    SF_ASSERT_EQ(ct_remaining_at(w, x->sku[1], 2), x->forward ? 19 : 20);
    SF_ASSERT_EQ(ct_remaining_at(w, x->sku[2], 2), x->forward ? 18 : 20);
    for (int i = 0; i < x->nids; i++) {
        const char *a = strchr(x->ids[i], '-');
        int k = atoi(a + 1);
        int there = ct_exists_at(w, x->isku[i], k, x->ids[i]);
        SF_ASSERT(there == x->forward, "%s: part %s %s", x->point, x->ids[i],
                  there ? "left after a heal back" : "missing after a heal forward");
        if (!x->forward) {
            char buf[32] = "", ukey[160];
            snprintf(ukey, sizeof ukey, "inv:2:{%s/%d}:undone", x->isku[i], k);
            SF_ASSERT(rf_string(ct_at(w, ukey), buf, sizeof buf, "ZSCORE %s %s", ukey, x->ids[i]) ==
                          1,
                      "%s: %s not tombstoned", x->point, x->ids[i]);
        }
    }
    sf_report rep;
    for (int i = 0; i < 3; i++)
        SF_ASSERT_INVARIANTS(ct_url(w), x->sku[i], &rep);
}

/* The client's retry with the cart's Idempotency-Key, answered as the heal decided: a cart
 * healed forward replays (200, its id and items); one healed back (or never begun) sold
 * nothing, so the key is free once its claim expired: a new cart (201, another id). A 503
 * meanwhile (the claim still pending: "in progress") is retried, as a client does. */
static void ct_cut_retry(const struct ct_where *w, const struct ct_cut *x, int port)
{
    char items[256];
    snprintf(items, sizeof items,
             "{\"sku\":\"%s\"},{\"sku\":\"%s\",\"quantity\":15},{\"sku\":\"%s\",\"quantity\":2}",
             x->sku[1], x->sku[0], x->sku[2]);
    sf_resp r = {0};
    int st = 0;
    for (int64_t end = tu_now_ms() + 15000;; tu_sleep_ms(200)) {
        sf_resp_free(&r);
        memset(&r, 0, sizeof r);
        st = ct_cart(port, items, NULL, x->key, &r);
        if (st != 503 || tu_now_ms() > end)
            break;
    }
    const char *id = json_string_value(json_object_get(r.json, "order_id"));
    json_t *its = json_object_get(r.json, "items");
    SF_ASSERT(st == (x->forward ? 200 : 201) && id && json_array_size(its) == 3, "%s: retry: %s",
              x->point, sf_resp_summary(&r));
    if (x->forward)
        SF_ASSERT(strcmp(id, x->id) == 0, "%s: replayed %s, not the healed cart %s", x->point, id,
                  x->id);
    else
        SF_ASSERT(strcmp(id, x->id) != 0, "%s: the cart healed back was answered: %s", x->point,
                  id);
    SF_ASSERT(
        strcmp(json_string_value(json_object_get(json_array_get(its, 1), "sku")), x->sku[0]) == 0 &&
            sf_json_int(json_array_get(its, 1), "quantity", -1) == 15,
        "%s: retry's items: %s", x->point, sf_resp_summary(&r));
    sf_resp_free(&r);
    /* one cart either way, whole */
    long long total[3] = {20, 20, 20};
    const char *skus[3] = {x->sku[0], x->sku[1], x->sku[2]};
    SF_ASSERT_EQ(ct_whole_at(w, skus, total, 3, 2), 1);
    SF_ASSERT_EQ(ct_remaining_at(w, x->sku[0], 2), 5);
    sf_report rep;
    for (int i = 0; i < 3; i++)
        SF_ASSERT_INVARIANTS(ct_url(w), x->sku[i], &rep);
}

/* An instance on w killed -9 at each step of a cart (faultpoint.h's cart points), the five at
 * once: Redis holds each step's state; the sweepers of w's instances heal every intent
 * (bounded: the intent's deadline, about 1.3 s with the faulty instance's settings, + the 1 s
 * margin + a look a second, with room for a loaded machine); every cart ends whole, forward
 * or back, every SKU's invariants hold, and the key's retry answers as the heal decided. */
static void ct_cuts_on(const struct ct_where *w)
{
    struct ct_cut cuts[] = {
        {.point = "cart_lock", .prefix = "ct-kl", .intent = 0, .parts = 0, .primary = 0},
        {.point = "cart_intent", .prefix = "ct-ki", .intent = 1, .parts = 0, .primary = 0},
        {.point = "cart_parts", .prefix = "ct-kp", .intent = 1, .parts = 1, .primary = 0},
        {.point = "cart_primary", .prefix = "ct-kq", .intent = 1, .parts = 1, .primary = 1},
        {.point = "cart_hdel", .prefix = "ct-kh", .intent = 1, .parts = 1, .primary = 1},
    };
    int n = (int)(sizeof cuts / sizeof cuts[0]);
    for (int i = 0; i < n; i++) {
        cuts[i].forward = cuts[i].primary;
        ct_cut_run(w, &cuts[i]);
    }
    for (int i = 0; i < n; i++) {
        for (int64_t end = tu_now_ms() + 15000; ct_intents_at(w, cuts[i].sku[1]) > 0;
             tu_sleep_ms(100))
            SF_ASSERT(tu_now_ms() < end, "%s: the intent was not healed in 15 s", cuts[i].point);
        ct_cut_healed(w, &cuts[i]);
    }
    for (int i = 0; i < n; i++)
        ct_cut_retry(w, &cuts[i], ct_port_at(w, i));
}

static void test_cart_killed_at_each_step(void **state)
{
    (void)state;
    ct_cuts_on(&ct_one);
}

/* ---- waiting rooms: a ticket per item ---- */

/* A ticket for sku and user, number n, valid 60 s on Redis's clock, signed with key. */
static void ct_mint(const struct ticket_key *key, const char *sku, const char *user, uint64_t n,
                    char *out)
{
    redisReply *r = rf_command(gf_redis, "TIME");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "%s", "TIME");
    int64_t ms =
        strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    SF_ASSERT(ticket_mint(key, sku, user, n, ms + 60000, out, TICKET_TEXT_MAX) > 0, "%s",
              "ticket_mint");
}

/* A cart's answer: status and error code (NULL: none expected) and the SKU it names. */
static void ct_expect(int p, const char *items, const char *user, const char *idem, int status,
                      const char *code, const char *sku)
{
    sf_resp r = {0};
    int st = ct_cart(p, items, user, idem, &r);
    SF_ASSERT(st == status && (!code || strcmp(sf_error_code(&r), code) == 0), "%s: %s", items,
              sf_resp_summary(&r));
    const char *named = json_string_value(json_object_get(r.json, "sku"));
    if (sku)
        SF_ASSERT(named && strcmp(named, sku) == 0, "%s: not naming %s: %s", items, sku,
                  sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* An item whose SKU has a waiting room needs its ticket (items[i].ticket), judged as a one-SKU
 * order's: missing, forged, another user's or another SKU's → the cart refused naming the SKU,
 * nothing sold; a cart failing for another item (sold out) leaves the ticket unused; a valid
 * one sells the cart and is then used (another cart or order with it: 409 ticket_used); the key
 * replays a cart whose ticket item is the home one or another. */
static void test_cart_tickets(void **state)
{
    (void)state;
    const char *skus[3] = {"ct-ta", "ct-tr", "ct-ts"};
    long long total[3] = {10, 10, 0};
    ct_put("ct-ta", 10, 2, "");
    ct_put("ct-tr", 10, 2, ",\"queue_rate\":10");
    ct_put("ct-ts", 0, 2, "");
    char t[TICKET_TEXT_MAX], items[1024];
#define CT_TITEMS(tk)                                                                              \
    snprintf(items, sizeof items, "{\"sku\":\"ct-ta\"},{\"sku\":\"ct-tr\",\"ticket\":\"%s\"}", tk)
    ct_expect(ct_port(0), "{\"sku\":\"ct-ta\"},{\"sku\":\"ct-tr\"}", "u-tk", NULL, 403,
              "ticket_required", "ct-tr");
    ct_mint(&ct_other_key, "ct-tr", "u-tk", 1, t); /* forged: another key */
    CT_TITEMS(t);
    ct_expect(ct_port(1), items, "u-tk", NULL, 403, "ticket_invalid", "ct-tr");
    ct_mint(&ct_key, "ct-tr", "u-other", 1, t);
    CT_TITEMS(t);
    ct_expect(ct_port(2), items, "u-tk", NULL, 403, "ticket_wrong_user", "ct-tr");
    ct_mint(&ct_key, "ct-ta", "u-tk", 1, t);
    CT_TITEMS(t);
    ct_expect(ct_port(0), items, "u-tk", NULL, 403, "ticket_wrong_sku", "ct-tr");
    SF_ASSERT_EQ(ct_remaining("ct-ta", 2), 10);
    SF_ASSERT_EQ(ct_remaining("ct-tr", 2), 10);
    /* a valid ticket in a cart refused for another item: unused, it buys the next cart */
    ct_mint(&ct_key, "ct-tr", "u-tk", 1, t);
    snprintf(items, sizeof items,
             "{\"sku\":\"ct-ta\"},{\"sku\":\"ct-tr\",\"ticket\":\"%s\"},{\"sku\":\"ct-ts\"}", t);
    ct_expect(ct_port(1), items, "u-tk", NULL, 409, "sold_out", "ct-ts");
    SF_ASSERT_EQ(ct_remaining("ct-ta", 2), 10);
    SF_ASSERT_EQ(ct_remaining("ct-tr", 2), 10);
    CT_TITEMS(t);
    ct_expect(ct_port(2), items, "u-tk", NULL, 201, NULL, NULL);
    ct_expect(ct_port(0), items, "u-tk", NULL, 409, "ticket_used", "ct-tr");
    sf_resp r = {0};
    char body[1200];
    snprintf(body, sizeof body, "{\"sku\":\"ct-tr\",\"user_id\":\"u-tk\",\"ticket\":\"%s\"}", t);
    sf_json_request(NULL, ct_port(1), "POST", "/api/v1/orders", NULL, NULL, body, &r);
    SF_ASSERT_ERROR(&r, 409, "ticket_used");
    sf_resp_free(&r);
    /* the key replays a cart with its ticket item at home, and with it in another item */
    ct_mint(&ct_key, "ct-tr", "u-tk", 2, t);
    snprintf(items, sizeof items, "{\"sku\":\"ct-tr\",\"ticket\":\"%s\"},{\"sku\":\"ct-ta\"}", t);
    sf_resp a = {0}, b = {0};
    SF_ASSERT(ct_cart(ct_port(0), items, "u-tk", "ct-tk-home", &a) == 201, "%s",
              sf_resp_summary(&a));
    SF_ASSERT(
        ct_cart(ct_port(1), items, "u-tk", "ct-tk-home", &b) == 200 &&
            json_equal(json_object_get(a.json, "order_id"), json_object_get(b.json, "order_id")),
        "replay: %s", sf_resp_summary(&b));
    sf_resp_free(&a);
    sf_resp_free(&b);
    ct_expect(ct_port(2), items, "u-tk", "ct-tk-other", 409, "ticket_used", "ct-tr");
    ct_mint(&ct_key, "ct-tr", "u-tk", 3, t);
    CT_TITEMS(t);
    SF_ASSERT(ct_cart(ct_port(0), items, "u-tk", "ct-tk-item", &a) == 201, "%s",
              sf_resp_summary(&a));
    SF_ASSERT(
        ct_cart(ct_port(1), items, "u-tk", "ct-tk-item", &b) == 200 &&
            json_equal(json_object_get(a.json, "order_id"), json_object_get(b.json, "order_id")),
        "replay: %s", sf_resp_summary(&b));
    sf_resp_free(&a);
    sf_resp_free(&b);
#undef CT_TITEMS
    SF_ASSERT_EQ(ct_remaining("ct-ta", 2), 7);
    SF_ASSERT_EQ(ct_remaining("ct-tr", 2), 7);
    SF_ASSERT_EQ(ct_whole(skus, total, 3, 2), 3);
    sf_report rep;
    for (int i = 0; i < 3; i++)
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), skus[i], &rep);
    ct_no_bad_move();
}

/* A cart whose other item holds a ticket, cut off (kill -9) before its primary (healed back)
 * or after it (healed forward), with and without a key. Healed back, nothing was sold: the
 * ticket buys again, at once with the cart's key (its claim carries the key), else once its
 * claim expired (as a one-SKU order's). Healed forward, the key replays the cart and the ticket
 * stays used. Before the fix (the claim carried no key; an expired claim was made final with
 * the undone part's id) the retry was refused 409 ticket_used for good. ~6 s. */
static void test_cart_ticket_cut_off(void **state)
{
    (void)state;
    struct {
        const char *point, *prefix, *key;
        int forward;
        char a[40], r[40], t[TICKET_TEXT_MAX], items[1024], id[160];
    } cuts[] = {
        {.point = "cart_parts", .prefix = "ct-tb", .key = "ct-tk-back"},
        {.point = "cart_parts", .prefix = "ct-tn", .key = NULL},
        {.point = "cart_primary", .prefix = "ct-tf", .key = "ct-tk-fwd", .forward = 1},
    };
    int n = (int)(sizeof cuts / sizeof cuts[0]);
    for (int i = 0; i < n; i++) {
        snprintf(cuts[i].a, sizeof cuts[i].a, "%s-a", cuts[i].prefix);
        snprintf(cuts[i].r, sizeof cuts[i].r, "%s-r", cuts[i].prefix);
        ct_put(cuts[i].a, 20, 2, "");
        ct_put(cuts[i].r, 20, 2, ",\"queue_rate\":10");
        ct_mint(&ct_key, cuts[i].r, "u-tk", 7, cuts[i].t);
        snprintf(cuts[i].items, sizeof cuts[i].items,
                 "{\"sku\":\"%s\"},{\"sku\":\"%s\",\"quantity\":15,\"ticket\":\"%s\"}", cuts[i].a,
                 cuts[i].r, cuts[i].t);
        sf_service *s = ct_faulty(cuts[i].point);
        sf_resp r = {0};
        ct_cart(sf_port(s), cuts[i].items, "u-tk", cuts[i].key, &r);
        SF_ASSERT(r.status == 0, "the killed instance answered: %s", sf_resp_summary(&r));
        sf_resp_free(&r);
        for (int w = 0; w < 100 && sf_alive(s); w++)
            tu_sleep_ms(20);
        SF_ASSERT(!sf_alive(s), "%s", "the instance did not die at its fault point");
        (void)sf_stop(s);
        SF_ASSERT_EQ(ct_intents(cuts[i].a), 1);
    }
    int64_t killed = tu_now_ms();
    for (int i = 0; i < n; i++) {
        for (int64_t end = tu_now_ms() + 15000; ct_intents(cuts[i].a) > 0; tu_sleep_ms(100))
            SF_ASSERT(tu_now_ms() < end, "%s: the intent was not healed in 15 s", cuts[i].prefix);
        SF_ASSERT_EQ(ct_remaining(cuts[i].r, 2), cuts[i].forward ? 5 : 20);
    }
    /* the faulty instance's claims: bound 800 + 1000 + 2 × 500 ms, taken over 1 s after */
    const int64_t claim_ms = 800 + 1000 + 2 * 500 + 1000;
    for (int i = 0; i < n; i++) {
        sf_resp r = {0};
        int st;
        for (;;) {
            st = ct_cart(ct_port(i), cuts[i].items, "u-tk", cuts[i].key, &r);
            /* the claim still pending: 503 in progress with the key, 409 without one */
            int pending = tu_now_ms() < killed + claim_ms + 5000 &&
                          (st == 503 || (!cuts[i].key && !cuts[i].forward && st == 409));
            if (!pending)
                break;
            sf_resp_free(&r);
            memset(&r, 0, sizeof r);
            tu_sleep_ms(200);
        }
        SF_ASSERT(st == (cuts[i].forward ? 200 : 201), "%s: retry: %s", cuts[i].prefix,
                  sf_resp_summary(&r));
        sf_resp_free(&r);
        SF_ASSERT_EQ(ct_remaining(cuts[i].r, 2), 5);
        if (cuts[i].forward) { /* used by the cart healed forward: another cart is refused */
            while (tu_now_ms() < killed + claim_ms + 500)
                tu_sleep_ms(100);
            ct_expect(ct_port(i), cuts[i].items, "u-tk", NULL, 409, "ticket_used", cuts[i].r);
        }
        long long total[2] = {20, 20};
        const char *skus[2] = {cuts[i].a, cuts[i].r};
        SF_ASSERT_EQ(ct_whole(skus, total, 2, 2), 1);
        sf_report rep;
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), cuts[i].a, &rep);
        SF_ASSERT_INVARIANTS(rf_url(gf_redis), cuts[i].r, &rep);
    }
    ct_no_bad_move();
}

/* ---- on a Redis Cluster ---- */

static long long ct_cl_stock(cf_cluster *cl, const char *sku, int nseg)
{
    long long sum = 0;
    for (int k = 0; k < nseg; k++) {
        char key[160], buf[32] = "";
        snprintf(key, sizeof key, "inv:2:{%s/%d}:stock", sku, k);
        SF_ASSERT(rf_string(ct_node_of(cl, key), buf, sizeof buf, "GET %s", key) == 1, "GET %s",
                  key);
        sum += atoll(buf);
    }
    return sum;
}

/* Every part of the cart answered in r exists on its master (the primary too). */
static void ct_cl_parts(cf_cluster *cl, const sf_resp *r)
{
    const char *id = json_string_value(json_object_get(r->json, "order_id"));
    size_t a, b;
    json_t *it, *p;
    json_array_foreach(json_object_get(r->json, "items"), a, it)
    {
        const char *sku = json_string_value(json_object_get(it, "sku"));
        json_array_foreach(json_object_get(it, "parts"), b, p)
        {
            int k = (int)sf_json_int(p, "segment", -1);
            char key[160], pid[160];
            snprintf(key, sizeof key, "inv:2:{%s/%d}:orders", sku, k);
            snprintf(pid, sizeof pid, "%.32s-%d-%s", id, k, sku);
            SF_ASSERT(rf_integer(ct_node_of(cl, key), "HEXISTS %s %s", key, pid) == 1,
                      "part %s missing", pid);
        }
    }
}

static void test_cluster_carts(void **state)
{
    (void)state;
    cf_cluster *cl = cf_start(3, 0);
    SF_ASSERT(cl != NULL, "%s", "a 3-master cluster");
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    const char *args[] = {"--threads", "2", "--admin-token", CT_TOKEN, "--trust-body-user-id",
                          NULL};
    sf_service *s = sf_start(url, args);
    if (!s)
        cf_stop(cl);
    SF_ASSERT(s != NULL, "%s", "inventoryd on the cluster");
    int port = sf_port(s);
    const char *skus[4] = {"cl-home", "cl-multi", "cl-limit", "cl-hold"};
    const char *rules[4] = {"", "", ",\"limit_per_user\":3", ",\"reservation_ttl_s\":120"};
    for (int i = 0; i < 4; i++) {
        char path[160], body[256];
        snprintf(path, sizeof path, "/api/v1/skus/%s", skus[i]);
        snprintf(body, sizeof body, "{\"stock\":40,\"segments\":4%s}", rules[i]);
        sf_resp r = {0};
        sf_json_request(NULL, port, "PUT", path, CT_TOKEN, NULL, body, &r);
        SF_ASSERT(r.status == 201, "PUT %s: %s", skus[i], sf_resp_summary(&r));
        sf_resp_free(&r);
    }
    /* masters: the SKUs' slots spread over at least two */
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        char key[160];
        snprintf(key, sizeof key, "inv:2:{%s}:meta", skus[i]);
        for (int m = 0; m < 3; m++)
            if (ct_node_of(cl, key) == cf_node(cl, m))
                seen |= 1 << m;
    }
    SF_ASSERT(__builtin_popcount((unsigned)seen) >= 2, "SKUs on masters %#x", seen);
    sf_resp r = {0};
    SF_ASSERT(ct_cart(port,
                      "{\"sku\":\"cl-home\"},{\"sku\":\"cl-multi\",\"quantity\":25},"
                      "{\"sku\":\"cl-limit\",\"quantity\":3}",
                      "u-cl", "cl-key", &r) == 201,
              "%s", sf_resp_summary(&r));
    ct_cl_parts(cl, &r);
    sf_resp_free(&r);
    SF_ASSERT(ct_cart(port,
                      "{\"sku\":\"cl-home\"},{\"sku\":\"cl-multi\",\"quantity\":25},"
                      "{\"sku\":\"cl-limit\",\"quantity\":3}",
                      "u-cl", "cl-key", &r) == 200,
              "replay: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* over the limit (reserved on the limit SKU's master): nothing sold */
    SF_ASSERT(ct_cart(port, "{\"sku\":\"cl-multi\"},{\"sku\":\"cl-limit\"}", "u-cl", NULL, &r) ==
                      409 &&
                  strcmp(sf_error_code(&r), "limit_exceeded") == 0,
              "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* a hold item under a home SKU without a TTL: the cart is a hold, the home SKU flagged */
    SF_ASSERT(ct_cart(port, "{\"sku\":\"cl-home\",\"quantity\":2},{\"sku\":\"cl-hold\"}", NULL,
                      NULL, &r) == 201,
              "%s", sf_resp_summary(&r));
    SF_ASSERT(json_string_value(json_object_get(r.json, "expires_at")) != NULL, "%s",
              sf_resp_summary(&r));
    ct_cl_parts(cl, &r);
    sf_resp_free(&r);
    char buf[16] = "";
    SF_ASSERT(rf_string(ct_node_of(cl, "inv:2:{cl-home}:meta"), buf, sizeof buf,
                        "HGET inv:2:{cl-home}:meta holds") == 1 &&
                  strcmp(buf, "1") == 0,
              "the home SKU's hold flag: %s", buf);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-home", 4), 37);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-multi", 4), 15);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-limit", 4), 37);
    SF_ASSERT_EQ(ct_cl_stock(cl, "cl-hold", 4), 39);
    SF_ASSERT(rf_integer(ct_node_of(cl, "inv:2:{cl-home}:cart"), "HLEN inv:2:{cl-home}:cart") == 0,
              "%s", "an intent left");
    int rc = sf_stop(s);
    cf_stop(cl);
    SF_ASSERT(rc == 0, "%s", "inventoryd's exit");
}

/* ---- a master killed mid-sale (issue 33's check: carts on a Redis Cluster) ---- */

#define FO_CLIENTS 6
#define FO_SKUS 4
#define FO_IDS 4096
static const char *const fo_skus[FO_SKUS] = {"fo-a", "fo-b", "fo-c", "fo-d"};
static atomic_int fo_stop;
static int fo_ports[2];

struct fo_client {
    int idx;
    char (*ids)[160]; /* the carts answered 201 (or 200: a replay of one) */
    int nids;
    int created, unknown, unavailable, other;
};

/* Carts of 2 or 3 of the SKUs, each with its own Idempotency-Key, retried with it on a 503 (as
 * a client does: "outcome":"unknown" or not), until fo_stop. */
static void *fo_client(void *arg)
{
    struct fo_client *c = arg;
    unsigned seed = (unsigned)c->idx * 104729u + 7;
    sf_conn *conn = sf_conn_open(fo_ports[c->idx % 2], 8000);
    for (int n = 0; !atomic_load(&fo_stop); n++) {
        int k = 2 + (int)(rand_r(&seed) % 2), pick[3], used = 0;
        while (used < k) {
            int s = (int)(rand_r(&seed) % FO_SKUS), dup = 0;
            for (int j = 0; j < used; j++)
                dup |= pick[j] == s;
            if (!dup)
                pick[used++] = s;
        }
        char body[512], key[64];
        size_t w = (size_t)snprintf(body, sizeof body, "{\"items\":[");
        for (int i = 0; i < k; i++)
            w += (size_t)snprintf(body + w, sizeof body - w, "%s{\"sku\":\"%s\",\"quantity\":%d}",
                                  i ? "," : "", fo_skus[pick[i]], 1 + (int)(rand_r(&seed) % 2));
        snprintf(body + w, sizeof body - w, "]}");
        snprintf(key, sizeof key, "fo-%d-%d", c->idx, n);
        sf_resp r = {0};
        int st = 0;
        for (int t = 0; t < 40; t++) { /* up to ~8 s of retries with the key */
            sf_resp_free(&r);
            memset(&r, 0, sizeof r);
            st = sf_json_request(conn, 0, "POST", "/api/v1/orders", NULL, key, body, &r);
            if (st != 503 && st != 0)
                break;
            if (st == 503 && r.json && json_object_get(r.json, "outcome"))
                c->unknown++;
            else
                c->unavailable++;
            tu_sleep_ms(200);
        }
        const char *id = json_string_value(json_object_get(r.json, "order_id"));
        if ((st == 201 || st == 200) && id && c->nids < FO_IDS) {
            snprintf(c->ids[c->nids], 160, "%s", id);
            __atomic_store_n(&c->nids, c->nids + 1, __ATOMIC_RELEASE); /* fo_created reads it */
            c->created += st == 201;
        } else if (st != 409 && st != 503 && st != 0) {
            if (c->other++ < 3)
                fprintf(stderr, "failover cart: %s\n", sf_resp_summary(&r));
        }
        sf_resp_free(&r);
    }
    sf_conn_close(conn);
    return NULL;
}

static int fo_created(struct fo_client *c)
{
    int n = 0;
    for (int i = 0; i < FO_CLIENTS; i++)
        n += __atomic_load_n(&c[i].nids, __ATOMIC_RELAXED);
    return n;
}

/* Carts of 2-3 of 4 SKUs from 6 clients through 2 instances on a 3-master cluster with a
 * replica each and --redis-replica-acks 1; the master of one of the SKUs' segments (and not of
 * every SKU's meta) is killed -9 mid-sale, its replica promoted, the old master back as its
 * replica, the sale goes on a second. Then: every intent healed, every SKU's invariants whole
 * (inventory-check: 0 partial carts, sold = total - remaining), every cart answered 201 (or
 * replayed 200) exists whole (GET 200 with its items, each part on its master). ~30 s (the
 * cluster's start and failover). */
static void test_cluster_cart_master_killed(void **state)
{
    (void)state;
    const char *redis_args[] = {"--min-replicas-to-write", "1", "--min-replicas-max-lag", "2",
                                NULL};
    cf_cluster *cl = cf_start_ex(3, 1, redis_args);
    SF_ASSERT(cl != NULL, "%s", "a 3-master cluster with replicas");
    if (cf_wait_replicas(cl, 30000) != 0) {
        cf_stop(cl);
        SF_ASSERT(0, "%s", "the replicas' sync");
    }
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    const char *args[] = {"--threads",
                          "2",
                          "--redis-replica-acks",
                          "1",
                          "--lock-lease-ms",
                          "2000",
                          "--redis-timeout-ms",
                          "1000",
                          "--hold-ms",
                          "5",
                          "--admin-token",
                          CT_TOKEN,
                          NULL};
    sf_service *s[2] = {sf_start(url, args), sf_start(url, args)};
    if (!s[0] || !s[1]) {
        sf_stop_all(s, 2);
        cf_stop(cl);
        SF_ASSERT(0, "%s", "inventoryd on the cluster");
    }
    fo_ports[0] = sf_port(s[0]);
    fo_ports[1] = sf_port(s[1]);
    for (int i = 0; i < FO_SKUS; i++) {
        char path[160];
        snprintf(path, sizeof path, "/api/v1/skus/%s", fo_skus[i]);
        sf_resp r = {0};
        sf_json_request(NULL, fo_ports[0], "PUT", path, CT_TOKEN, NULL,
                        "{\"stock\":4000,\"segments\":4}", &r);
        SF_ASSERT(r.status == 201, "PUT %s: %s", fo_skus[i], sf_resp_summary(&r));
        sf_resp_free(&r);
    }
    /* the victim: a master holding a segment of a SKU but not every SKU's meta */
    int victim = -1, vslot = -1;
    for (int i = 0; i < FO_SKUS && victim < 0; i++)
        for (int k = 0; k < 4 && victim < 0; k++) {
            char key[160], meta[160];
            snprintf(key, sizeof key, "inv:2:{%s/%d}:stock", fo_skus[i], k);
            snprintf(meta, sizeof meta, "inv:2:{%s}:meta", fo_skus[i]);
            rf_server *m = ct_node_of(cl, key);
            if (m == ct_node_of(cl, meta))
                continue;
            for (int j = 0; j < 3; j++)
                if (cf_node(cl, j) == m)
                    victim = j;
            redisReply *r = rf_command(cf_node(cl, 0), "CLUSTER KEYSLOT %s", key);
            vslot = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
            freeReplyObject(r);
        }
    SF_ASSERT(victim >= 0 && vslot >= 0, "%s", "a victim master");
    static struct fo_client cs[FO_CLIENTS];
    static char ids[FO_CLIENTS][FO_IDS][160];
    pthread_t t[FO_CLIENTS];
    atomic_store(&fo_stop, 0);
    for (int i = 0; i < FO_CLIENTS; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        cs[i].idx = i;
        cs[i].ids = ids[i];
        pthread_create(&t[i], NULL, fo_client, &cs[i]);
    }
    tu_sleep_ms(1500); /* the sale under way */
    int before = fo_created(cs);
    SF_ASSERT(rf_halt(cf_node(cl, victim), SIGKILL) == 0, "kill -9 of node %d", victim);
    int64_t killed = tu_now_ms();
    int promoted = cf_wait_slot_served(cl, vslot, 30000) == 0;
    int64_t up = tu_now_ms();
    int back = promoted && rf_restart(cf_node(cl, victim)) == 0 && cf_wait_replicas(cl, 30000) == 0;
    int at_back = fo_created(cs);
    tu_sleep_ms(1500); /* the sale after the failover */
    atomic_store(&fo_stop, 1);
    for (int i = 0; i < FO_CLIENTS; i++)
        pthread_join(t[i], NULL);
    int total = fo_created(cs), unknown = 0, unavailable = 0, other = 0;
    for (int i = 0; i < FO_CLIENTS; i++) {
        unknown += cs[i].unknown;
        unavailable += cs[i].unavailable;
        other += cs[i].other;
    }
    fprintf(stderr,
            "cart failover: node %d killed, promoted after %lld ms; carts %d before, %d to the old "
            "master's return, %d after; %d outcome unknown and %d other 503s retried; %d other\n",
            victim, (long long)(up - killed), before, at_back - before, total - at_back, unknown,
            unavailable, other);
    SF_ASSERT(promoted && back, "%s", "the failover did not complete");
    SF_ASSERT(before > 0 && total > at_back, "carts before the kill %d, after %d", before,
              total - at_back);
    SF_ASSERT_EQ(other, 0);
    /* every intent healed (the sweepers: a deadline + 1 s and a look; room for a loaded host)
     */
    for (int i = 0; i < FO_SKUS; i++) {
        char key[160];
        snprintf(key, sizeof key, "inv:2:{%s}:cart", fo_skus[i]);
        long long left = -1;
        for (int64_t end = tu_now_ms() + 20000; tu_now_ms() < end; tu_sleep_ms(100)) {
            redisReply *r = rf_command(ct_node_of(cl, key), "HLEN %s", key);
            left = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
            freeReplyObject(r);
            if (left == 0)
                break;
        }
        SF_ASSERT(left == 0, "%s: %lld cart intents never healed", fo_skus[i], left);
    }
    sf_report rep;
    for (int i = 0; i < FO_SKUS; i++)
        SF_ASSERT_INVARIANTS(url, fo_skus[i], &rep);
    /* every cart answered 201 (or replayed) is whole */
    for (int i = 0; i < FO_CLIENTS; i++)
        for (int j = 0; j < cs[i].nids; j++) {
            char path[200];
            snprintf(path, sizeof path, "/api/v1/orders/%s", cs[i].ids[j]);
            sf_resp g = {0};
            int st = sf_http(fo_ports[j % 2], "GET", path, NULL, NULL, 0, &g);
            for (int w = 0; w < 10 && st == 503; w++) {
                sf_resp_free(&g);
                tu_sleep_ms(300);
                st = sf_http(fo_ports[(j + w + 1) % 2], "GET", path, NULL, NULL, 0, &g);
            }
            SF_ASSERT(st == 200 && json_array_size(json_object_get(g.json, "items")) >= 2,
                      "cart %s answered 201: %s", cs[i].ids[j], sf_resp_summary(&g));
            ct_cl_parts(cl, &g);
            sf_resp_free(&g);
        }
    int rc = sf_stop_all(s, 2);
    cf_stop(cl);
    SF_ASSERT(rc == 0, "%s", "inventoryd's exit");
}

/* The kill -9 at each step of a cart (ct_cuts_on, the five at once) on a 3-master cluster with a
 * replica each, every instance with --redis-replica-acks 1: each cart's intent on one master,
 * its parts on the two others (ct_cut_skus); the sweepers of 2 instances on the cluster heal
 * every intent whole, forward or back, across the masters. ~6 s and the cluster's start. */
static void test_cluster_cart_killed_at_each_step(void **state)
{
    (void)state;
    const char *redis_args[] = {"--min-replicas-to-write", "1", "--min-replicas-max-lag", "2",
                                NULL};
    cf_cluster *cl = cf_start_ex(3, 1, redis_args);
    SF_ASSERT(cl != NULL, "%s", "a 3-master cluster with replicas");
    if (cf_wait_replicas(cl, 30000) != 0) {
        cf_stop(cl);
        SF_ASSERT(0, "%s", "the replicas' sync");
    }
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    const char *acks[] = {"--redis-replica-acks", "1", NULL};
    const char *args[] = {"--threads",
                          "2",
                          "--redis-replica-acks",
                          "1",
                          "--admin-token",
                          CT_TOKEN,
                          "--trust-body-user-id",
                          "--redis-timeout-ms",
                          "1000",
                          "--lock-lease-ms",
                          "1000",
                          NULL};
    sf_service *s[2] = {sf_start(url, args), sf_start(url, args)};
    if (!s[0] || !s[1]) {
        sf_stop_all(s, 2);
        cf_stop(cl);
        SF_ASSERT(0, "%s", "inventoryd on the cluster");
    }
    struct ct_where w = {.cl = cl, .url = url, .extra = acks, .nports = 2};
    w.ports[0] = sf_port(s[0]);
    w.ports[1] = sf_port(s[1]);
    int64_t t0 = tu_now_ms();
    ct_cuts_on(&w);
    fprintf(stderr, "cluster cart cut-offs: the five cut, healed and retried in %lld ms\n",
            (long long)(tu_now_ms() - t0));
    int rc = sf_stop_all(s, 2);
    cf_stop(cl);
    SF_ASSERT(rc == 0, "%s", "inventoryd's exit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_carts_of_two_to_five),
        cmocka_unit_test(test_refusals_sell_nothing),
        cmocka_unit_test(test_multi_segment_item_replay_get),
        cmocka_unit_test(test_limit_in_another_item),
        cmocka_unit_test(test_hold_cart),
        cmocka_unit_test(test_one_budget_for_the_cart),
        cmocka_unit_test(test_cart_after_reput_elsewhere),
        cmocka_unit_test(test_item_stock_where_thought_empty),
        cmocka_unit_test(test_contention_no_partial_cart),
        cmocka_unit_test(test_cart_killed_at_each_step),
        cmocka_unit_test(test_cart_tickets),
        cmocka_unit_test(test_cart_ticket_cut_off),
        cmocka_unit_test(test_cluster_carts),
        cmocka_unit_test(test_cluster_cart_master_killed),
        cmocka_unit_test(test_cluster_cart_killed_at_each_step),
    };
    /* IT_CART_PART (ctest runs it_cart and it_cart_cluster): "cluster" the cluster's test only,
     * "one-redis" the others; unset, every test */
    const char *part = getenv("IT_CART_PART");
    if (part && strcmp(part, "cluster") == 0)
        cmocka_set_test_filter("*cluster*");
    else if (part && strcmp(part, "one-redis") == 0)
        cmocka_set_skip_filter("*cluster*");
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
