/*
 * Limit groups (SPEC §17, issue 33; docs/design.md "Limit groups") against a real redis-server
 * and three real inventoryd processes over HTTP, the user from the body (--trust-body-user-id):
 *   - a group of 12 size SKUs with a limit of 1: one user fires 50 concurrent single orders
 *     across the 12 SKUs at the 3 instances → exactly 1 unit sold to that user, every other
 *     answer 409 limit_exceeded naming the group; another user buys meanwhile, unaffected;
 *   - a cancel gives the allowance back exactly once (the user then buys exactly 1 more; a
 *     second cancel of the same order gives nothing); a hold that expires gives it back;
 *   - a multi-segment order (units over several segments) counts in the group as one order;
 *   - PATCH limit_group mid-sale holds from its answer, at every instance (rules version);
 *     "" takes the SKU out of the group;
 *   - PUT/PATCH naming a group that does not exist: 422 unknown_group, nothing changed; a bad
 *     group name 400; GET/DELETE of no group 404;
 *   - DELETE of the group uncaps its SKUs;
 *   - carts: a cart of two sizes of a limit-1 group is refused whole (409 naming the group and
 *     its first item there), a cart of one size and a SKU outside the group counts 1 whichever
 *     is its home, its cancel and a hold cart's expiry give back once; the burst of 50 with a
 *     third single orders, a third carts of a size and another SKU, a third carts of two sizes
 *     → exactly 1 unit;
 * and (IT_GROUPS_PART=cluster, it_groups_cluster) the burst (with carts, as above) on a
 * 3-master Redis Cluster with replicas and --redis-replica-acks 1, the group's master killed
 * once the user's unit is sold: never more than 1 unit to the user, refused at every instance
 * after the failover; then a cancel there gives it back (one more unit), and an order holding
 * both the SKU's two-step reservation and the group's that fails gives both back.
 * After each: the invariants of every SKU (sf_check_invariants) and no user over the group's
 * limit (sf_check_group). About 8 s on one Redis (the carts' part ~3 s: a hold's expiry), 8 s
 * for the cluster part (its start, the failover, the old master back as a replica).
 */
#include "svc_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "cluster_fixture.h"

#define GR_TOKEN "groups-admin-token"
#define GR_INSTANCES 3
#define GR_SKUS 12

static sf_service *svc[GR_INSTANCES];
static int gr_ports[GR_INSTANCES];
static const char *gr_url; /* the Redis the instances use (one Redis, or a cluster's seed) */

static int group_setup(void **state)
{
    (void)state;
    if (getenv("IT_GROUPS_PART") && strcmp(getenv("IT_GROUPS_PART"), "cluster") == 0)
        return 0; /* the cluster part starts its own */
    const char *args[] = {
        "--threads",          "2",   "--admin-token",   GR_TOKEN, "--trust-body-user-id",
        "--redis-timeout-ms", "500", "--lock-lease-ms", "1000",   NULL};
    for (int i = 0; i < GR_INSTANCES; i++) {
        if (!(svc[i] = sf_group_service(args)))
            return -1;
        gr_ports[i] = sf_port(svc[i]);
    }
    gr_url = rf_url(gf_redis);
    return 0;
}

static int gr_port(int i)
{
    return gr_ports[i % GR_INSTANCES];
}

/* An admin request on instance 0; the status. */
static int gr_admin(const char *method, const char *path, const char *body, sf_resp *r)
{
    return sf_json_request(NULL, gr_port(0), method, path, GR_TOKEN, NULL, body, r);
}

/* PUT group g with limit. */
static void gr_put_group(const char *g, int limit)
{
    char path[160], body[64];
    snprintf(path, sizeof path, "/api/v1/groups/%s", g);
    snprintf(body, sizeof body, "{\"limit_per_user\":%d}", limit);
    sf_resp r = {0};
    gr_admin("PUT", path, body, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT group %s: %s", g, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* PUT sku with stock, segments and the rules (",..." or ""). */
static void gr_put(const char *sku, long long stock, int segments, const char *rules)
{
    char path[160], body[512];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld,\"segments\":%d%s}", stock, segments, rules);
    sf_resp r = {0};
    gr_admin("PUT", path, body, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* POST an order of q units for user on c or port p. Returns the status. */
static int gr_order(sf_conn *c, int p, const char *sku, int q, const char *user, sf_resp *r)
{
    char body[256];
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":%d,\"user_id\":\"%s\"}", sku, q,
             user);
    return sf_json_request(c, p, "POST", "/api/v1/orders", NULL, NULL, body, r);
}

/* POST a cart of 1 unit of a and 1 of b for user on c or port p. Returns the status. */
static int gr_cart(sf_conn *c, int p, const char *a, const char *b, const char *user, sf_resp *r)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"items\":[{\"sku\":\"%s\",\"quantity\":1},{\"sku\":\"%s\",\"quantity\":1}],"
             "\"user_id\":\"%s\"}",
             a, b, user);
    return sf_json_request(c, p, "POST", "/api/v1/orders", NULL, NULL, body, r);
}

/* An order that must be 201; its id into id (112 bytes, may be NULL). */
static void gr_buy(int p, const char *sku, int q, const char *user, char *id)
{
    sf_resp r = {0};
    gr_order(NULL, p, sku, q, user, &r);
    SF_ASSERT(r.status == 201, "user %s buys %d of %s: %s", user, q, sku, sf_resp_summary(&r));
    if (id)
        snprintf(id, 112, "%.111s", sf_str(r.json, "order_id"));
    sf_resp_free(&r);
}

/* An order that must be refused 409 limit_exceeded by group g. */
static void gr_refused(int p, const char *sku, const char *user, const char *g)
{
    sf_resp r = {0};
    gr_order(NULL, p, sku, 1, user, &r);
    SF_ASSERT(r.status == 409 && strcmp(sf_error_code(&r), "limit_exceeded") == 0 &&
                  strcmp(sf_str(r.json, "limit_group"), g) == 0,
              "user %s on %s (group %s): %s", user, sku, g, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* Cancels order id (admin): the status. */
static int gr_cancel(const char *id, sf_resp *r)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/orders/%.120s", id);
    return gr_admin("DELETE", path, NULL, r);
}

/* How many entries user has in group g's users hash (one Redis). */
static int gr_entries(const char *g, const char *user)
{
    redisReply *r = rf_command(gf_redis, "HGET inv:2:{G=%s}:users %s", g, user);
    int n = -1;
    if (r && r->type == REDIS_REPLY_NIL) {
        n = 0;
    } else if (r && r->type == REDIS_REPLY_STRING) {
        json_t *e = json_loadb(r->str, r->len, 0, NULL);
        n = json_is_object(e) ? (int)json_object_size(e) : -1;
        json_decref(e);
    }
    freeReplyObject(r);
    SF_ASSERT(n >= 0, "group %s: user %s's entries are not what the service writes", g, user);
    return n;
}

/* The invariants of each SKU of skus[0..n), and no user over group g's limit. */
static void gr_check(char (*skus)[64], int n, const char *g)
{
    sf_report rep;
    for (int i = 0; i < n; i++)
        SF_ASSERT_INVARIANTS(gr_url, skus[i], &rep);
    SF_ASSERT(sf_check_group(gr_url, g, (const char(*)[64])skus, n) == 0,
              "group %s: a user over its limit", g);
}

/* ---- one user's burst over the instances and the group's SKUs ---- */

static atomic_int gr_sold; /* alice's 201s in the burst so far */
/* a SKU outside the group: when set ("" not), the burst mixes carts with the single orders */
static char gr_plain[64];
static char gr_alice_id[112]; /* the order of alice's unit in the last burst ("" none) */

struct gr_burst {
    int port, pace_ms;
    char (*skus)[64];
    const char *user;
    int first, orders;
    int created, limited, other;
    char other_text[256];
    char id[112];
    atomic_int *go;
    pthread_t t;
};

static void *gr_burst_run(void *arg)
{
    struct gr_burst *b = arg;
    sf_conn *c = sf_conn_open(b->port, 15000);
    while (!atomic_load(b->go))
        tu_sleep_us(100);
    for (int i = 0; i < b->orders; i++) {
        sf_resp r = {0};
        int n = b->first + i, units = 1, st;
        const char *sku = b->skus[n % GR_SKUS];
        /* with gr_plain and not bob's: a cart of two sizes (2 units of the group: first, so
         * that the race for the user's one unit is among these), a cart of a size and the
         * plain SKU, a single order, in turn */
        int kind = gr_plain[0] && b->orders > 1 ? 2 - i % 3 : 0;
        if (kind == 1)
            st = gr_cart(c, 0, sku, gr_plain, b->user, &r);
        else if (kind == 2)
            st = gr_cart(c, 0, sku, b->skus[(n + 1) % GR_SKUS], b->user, &r), units = 2;
        else
            st = gr_order(c, 0, sku, 1, b->user, &r);
        if (st == 201) {
            b->created += units;
            if (b->orders > 1) /* alice's, not bob's */
                atomic_fetch_add(&gr_sold, 1);
            snprintf(b->id, sizeof b->id, "%.111s", sf_str(r.json, "order_id"));
        } else if (st == 409 && strcmp(sf_error_code(&r), "limit_exceeded") == 0 &&
                   sf_str(r.json, "limit_group")[0]) {
            b->limited++;
        } else if (b->other++ == 0) {
            snprintf(b->other_text, sizeof b->other_text, "%s", sf_resp_summary(&r));
        }
        sf_resp_free(&r);
        if (b->pace_ms)
            tu_sleep_ms(b->pace_ms);
    }
    sf_conn_close(c);
    return NULL;
}

#define GR_THREADS 10
#define GR_ORDERS 5 /* 50 orders of the one user */

/* The burst: 50 orders of "alice" (10 threads, 5 each, pace_ms apart, over the 12 SKUs and the
 * 3 instances; with gr_plain, a third of them carts of a size and gr_plain, a third carts of two
 * sizes) and one of "bob"; kill (may be NULL) runs once the threads are going. Returns alice's
 * units of the group; *other her answers that were neither 201 nor limit_exceeded. */
static int gr_burst(char (*skus)[64], const char *alice, const char *bob, int *other,
                    void (*kill)(void), int pace_ms)
{
    atomic_int go = 0;
    atomic_store(&gr_sold, 0);
    struct gr_burst b[GR_THREADS + 1];
    for (int i = 0; i <= GR_THREADS; i++) {
        int is_bob = i == GR_THREADS;
        b[i] = (struct gr_burst){.port = gr_port(i),
                                 .skus = skus,
                                 .user = is_bob ? bob : alice,
                                 .first = i * GR_ORDERS,
                                 .orders = is_bob ? 1 : GR_ORDERS,
                                 .pace_ms = pace_ms,
                                 .go = &go};
        SF_ASSERT(pthread_create(&b[i].t, NULL, gr_burst_run, &b[i]) == 0, "%s", "thread");
    }
    atomic_store(&go, 1);
    if (kill)
        kill();
    for (int i = 0; i <= GR_THREADS; i++)
        pthread_join(b[i].t, NULL);
    int created = 0, limited = 0;
    *other = 0;
    gr_alice_id[0] = '\0';
    for (int i = 0; i < GR_THREADS; i++) {
        if (b[i].created)
            snprintf(gr_alice_id, sizeof gr_alice_id, "%s", b[i].id);
        created += b[i].created;
        limited += b[i].limited;
        *other += b[i].other;
        if (b[i].other)
            fprintf(stderr, "alice: %d other answers, the first %s\n", b[i].other, b[i].other_text);
    }
    fprintf(stderr, "alice: %d created, %d limit_exceeded, %d other of %d; bob: %d created (%s)\n",
            created, limited, *other, GR_THREADS * GR_ORDERS, b[GR_THREADS].created,
            b[GR_THREADS].other ? b[GR_THREADS].other_text : "");
    if (!kill)
        SF_ASSERT(b[GR_THREADS].created == 1, "bob: %s", b[GR_THREADS].other_text);
    return created;
}

/* GR_SKUS size SKUs named <prefix>-<size>, stock 20 each over segments, in group g. */
static void gr_sizes(char (*skus)[64], const char *prefix, const char *g, int segments)
{
    char rules[128];
    snprintf(rules, sizeof rules, ",\"limit_group\":\"%s\"", g);
    for (int i = 0; i < GR_SKUS; i++) {
        char p[48];
        snprintf(p, sizeof p, "%s-%d", prefix, 36 + i);
        tu_unique_name(skus[i], 64, p);
        gr_put(skus[i], 20, segments, rules);
    }
}

static void test_group_burst(void **state)
{
    (void)state;
    char g[64], skus[GR_SKUS][64];
    tu_unique_name(g, sizeof g, "style");
    gr_put_group(g, 1);
    gr_sizes(skus, "gr-size", g, 2);
    int other;
    int created = gr_burst(skus, "alice", "bob", &other, NULL, 0);
    SF_ASSERT_EQ(other, 0);
    SF_ASSERT_EQ(created, 1);
    gr_check(skus, GR_SKUS, g);
    /* the group's answer: its limit and the two users with a count */
    char path[160];
    snprintf(path, sizeof path, "/api/v1/groups/%s", g);
    sf_resp r = {0};
    gr_admin("GET", path, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(sf_json_int(r.json, "limit_per_user", -1), 1);
    SF_ASSERT_EQ(sf_json_int(r.json, "users", -1), 2);
    sf_resp_free(&r);
}

/* A cancel gives the allowance back exactly once; so does a hold's expiry; a multi-segment
 * order counts as one. */
static void test_give_backs(void **state)
{
    (void)state;
    char g[64], skus[3][64], id[112], id2[112];
    tu_unique_name(g, sizeof g, "give");
    gr_put_group(g, 1);
    char rules[128];
    snprintf(rules, sizeof rules, ",\"limit_group\":\"%s\"", g);
    tu_unique_name(skus[0], 64, "gr-a");
    tu_unique_name(skus[1], 64, "gr-b");
    tu_unique_name(skus[2], 64, "gr-hold");
    gr_put(skus[0], 10, 2, rules);
    gr_put(skus[1], 10, 1, rules);
    snprintf(rules, sizeof rules, ",\"limit_group\":\"%s\",\"reservation_ttl_s\":1", g);
    gr_put(skus[2], 10, 1, rules);

    gr_buy(gr_port(0), skus[0], 1, "carol", id);
    SF_ASSERT_EQ(gr_entries(g, "carol"), 1);
    gr_refused(gr_port(1), skus[1], "carol", g);
    sf_resp r = {0};
    gr_cancel(id, &r);
    SF_ASSERT_STATUS(&r, 200);
    /* given back before the cancel's answer (ggive_async), not left for a refusal to find */
    SF_ASSERT_EQ(gr_entries(g, "carol"), 0);
    gr_buy(gr_port(2), skus[1], 1, "carol", id2); /* the allowance is back: exactly 1 more */
    gr_refused(gr_port(0), skus[0], "carol", g);
    gr_cancel(id, &r); /* again: nothing more to give */
    SF_ASSERT_ERROR(&r, 409, "already_cancelled");
    sf_resp_free(&r);
    gr_refused(gr_port(1), skus[0], "carol", g);
    gr_refused(gr_port(2), skus[1], "carol", g);

    /* a hold that expires gives it back (the sweeper drains the segment's ggive set) */
    gr_buy(gr_port(0), skus[2], 1, "dave", NULL);
    gr_refused(gr_port(1), skus[0], "dave", g);
    int64_t t0 = tu_now_ms();
    while (gr_entries(g, "dave") > 0 && tu_now_ms() - t0 < 10000)
        tu_sleep_ms(100);
    SF_ASSERT(gr_entries(g, "dave") == 0,
              "dave: the expired hold's entry still there after %lld ms",
              (long long)(tu_now_ms() - t0));
    SF_ASSERT_EQ(rf_integer(gf_redis, "ZCARD inv:2:{%s/0}:ggive", skus[2]), 0);
    int st = 0;
    while (tu_now_ms() - t0 < 10000) {
        gr_order(NULL, gr_port(2), skus[0], 1, "dave", &r);
        st = r.status;
        SF_ASSERT(st == 201 || st == 409, "dave: %s", sf_resp_summary(&r));
        sf_resp_free(&r);
        if (st == 201)
            break;
        tu_sleep_ms(200);
    }
    SF_ASSERT(st == 201, "dave: the expired hold gave nothing back in %lld ms",
              (long long)(tu_now_ms() - t0));
    gr_refused(gr_port(0), skus[1], "dave", g);

    /* 2 units over a SKU of 2 segments of 1 unit left each... the group counts units: a limit
     * of 2, one order of 2 units over both segments, then nothing more */
    char g2[64], multi[1][64];
    tu_unique_name(g2, sizeof g2, "multi");
    gr_put_group(g2, 2);
    tu_unique_name(multi[0], 64, "gr-multi");
    snprintf(rules, sizeof rules, ",\"limit_group\":\"%s\"", g2);
    gr_put(multi[0], 2, 2, rules); /* one unit a segment: 2 units are a multi-segment order */
    gr_put(skus[0], 10, 2, rules);
    gr_buy(gr_port(1), multi[0], 2, "erin", id);
    SF_ASSERT(strstr(id, "-") != NULL, "%s", id);
    gr_refused(gr_port(2), skus[0], "erin", g2);
    gr_cancel(id, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    gr_buy(gr_port(0), skus[0], 2, "erin", NULL);
    gr_refused(gr_port(1), skus[0], "erin", g2);
    gr_check(skus, 3, g);
    gr_check(multi, 1, g2);
}

/* ---- carts (SPEC §17): one reservation per group a cart touches, its units summed ---- */

/* A cart that must be refused 409 limit_exceeded by group g, "sku" naming sku_named. */
static void gr_cart_refused(int p, const char *a, const char *b, const char *user, const char *g,
                            const char *sku_named)
{
    sf_resp r = {0};
    gr_cart(NULL, p, a, b, user, &r);
    SF_ASSERT(r.status == 409 && strcmp(sf_error_code(&r), "limit_exceeded") == 0 &&
                  strcmp(sf_str(r.json, "limit_group"), g) == 0 &&
                  sf_json_int(r.json, "limit_per_user", -1) == 1 &&
                  strcmp(sf_str(r.json, "sku"), sku_named) == 0,
              "user %s, cart of %s and %s (group %s): %s", user, a, b, g, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* A cart that must be 201; its id into id (112 bytes). */
static void gr_cart_buy(int p, const char *a, const char *b, const char *user, char *id)
{
    sf_resp r = {0};
    gr_cart(NULL, p, a, b, user, &r);
    SF_ASSERT(r.status == 201, "user %s, cart of %s and %s: %s", user, a, b, sf_resp_summary(&r));
    snprintf(id, 112, "%.111s", sf_str(r.json, "order_id"));
    sf_resp_free(&r);
}

/* The units sold of sku (stock 20 over nseg segments, one Redis). */
static long long gr_sold_of(const char *sku, int nseg, long long stock)
{
    long long left = 0;
    for (int k = 0; k < nseg; k++)
        left += sf_seg_stock(sku, k);
    return stock - left;
}

/* A cart of two sizes of a group of limit 1 is refused whole (before: each item reserved under
 * the cart's one id, the second finding "its" entry there, and the cart sold 2); a cart of one
 * size counts 1 (whichever item is its home); its cancel, and a hold cart's expiry, give the
 * allowance back exactly once (before: the cart's record named no group, nothing was given
 * back). About 3 s (the hold's expiry). */
static void test_cart_group(void **state)
{
    (void)state;
    char g[64], skus[GR_SKUS + 2][64], id[112], id2[112];
    tu_unique_name(g, sizeof g, "cstyle");
    gr_put_group(g, 1);
    gr_sizes(skus, "grcart", g, 2);
    char *plain = skus[GR_SKUS], *hold = skus[GR_SKUS + 1];
    tu_unique_name(plain, 64, "gr-plain");
    gr_put(plain, 100, 2, "");
    char rules[128];
    snprintf(rules, sizeof rules, ",\"limit_group\":\"%s\",\"reservation_ttl_s\":1", g);
    tu_unique_name(hold, 64, "gr-chold");
    gr_put(hold, 10, 1, rules);

    /* two sizes: refused whole, naming the group and its first item in it; nothing sold */
    gr_cart_refused(gr_port(0), skus[0], skus[1], "ivy", g, skus[0]);
    gr_cart_refused(gr_port(1), skus[1], skus[0], "ivy", g, skus[1]);
    SF_ASSERT_EQ(gr_entries(g, "ivy"), 0);
    SF_ASSERT_EQ(gr_sold_of(skus[0], 2, 20) + gr_sold_of(skus[1], 2, 20), 0);
    SF_ASSERT_EQ(gr_sold_of(plain, 2, 100), 0);

    /* one size and the plain SKU: 1 unit of the group, then nothing more of it */
    gr_cart_buy(gr_port(2), skus[2], plain, "ivy", id);
    SF_ASSERT_EQ(gr_entries(g, "ivy"), 1);
    gr_refused(gr_port(0), skus[3], "ivy", g);
    gr_cart_refused(gr_port(1), skus[4], plain, "ivy", g, skus[4]);
    gr_cart_refused(gr_port(2), plain, skus[5], "ivy", g, skus[5]);
    /* its cancel gives it back before the answer, once */
    sf_resp r = {0};
    gr_cancel(id, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(gr_entries(g, "ivy"), 0);
    gr_cancel(id, &r);
    SF_ASSERT_ERROR(&r, 409, "already_cancelled");
    sf_resp_free(&r);
    gr_buy(gr_port(0), skus[6], 1, "ivy", NULL); /* exactly 1 more */
    gr_refused(gr_port(1), skus[7], "ivy", g);
    gr_cart_refused(gr_port(2), skus[8], plain, "ivy", g, skus[8]);

    /* the group's item not the home one: the cart still counts once and gives back once */
    gr_cart_buy(gr_port(1), plain, skus[9], "kim", id2);
    SF_ASSERT_EQ(gr_entries(g, "kim"), 1);
    gr_refused(gr_port(2), skus[10], "kim", g);
    gr_cancel(id2, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(gr_entries(g, "kim"), 0);
    gr_buy(gr_port(0), skus[10], 1, "kim", NULL);
    gr_refused(gr_port(1), skus[11], "kim", g);

    /* a hold cart that expires gives the allowance back (the sweeper's ggive drain), once */
    gr_cart_buy(gr_port(0), hold, plain, "jay", id);
    gr_refused(gr_port(1), skus[0], "jay", g);
    int64_t t0 = tu_now_ms();
    while (gr_entries(g, "jay") > 0 && tu_now_ms() - t0 < 10000)
        tu_sleep_ms(100);
    SF_ASSERT(gr_entries(g, "jay") == 0, "jay: the expired cart's entry still there after %lld ms",
              (long long)(tu_now_ms() - t0));
    gr_buy(gr_port(2), skus[0], 1, "jay", NULL);
    gr_refused(gr_port(0), skus[1], "jay", g);
    gr_check(skus, GR_SKUS + 2, g);
}

/* The check with carts: one user's 50 orders at the 3 instances, a third single orders,
 * a third carts of a size and a SKU outside the group, a third carts of two sizes → exactly 1
 * unit of the group sold to her (the answers, and the stock: bob's unit and hers). ~2 s. */
static void test_cart_group_burst(void **state)
{
    (void)state;
    char g[64], skus[GR_SKUS + 1][64];
    tu_unique_name(g, sizeof g, "cburst");
    gr_put_group(g, 1);
    gr_sizes(skus, "grcb", g, 2);
    tu_unique_name(gr_plain, sizeof gr_plain, "gr-cbplain");
    gr_put(gr_plain, 200, 2, "");
    snprintf(skus[GR_SKUS], 64, "%s", gr_plain);
    int other;
    int created = gr_burst(skus, "alice", "bob", &other, NULL, 0);
    gr_plain[0] = '\0';
    SF_ASSERT_EQ(other, 0);
    SF_ASSERT_EQ(created, 1);
    long long sold = 0;
    for (int i = 0; i < GR_SKUS; i++)
        sold += gr_sold_of(skus[i], 2, 20);
    SF_ASSERT_EQ(sold, 2); /* alice's unit and bob's */
    gr_check(skus, GR_SKUS + 1, g);
}

/* PATCH limit_group mid-sale holds from its answer, at every instance; "" takes it out. */
static void test_patch_mid_sale(void **state)
{
    (void)state;
    char g[64], skus[2][64], path[160];
    tu_unique_name(g, sizeof g, "patch");
    gr_put_group(g, 1);
    char rules[128];
    snprintf(rules, sizeof rules, ",\"limit_group\":\"%s\"", g);
    tu_unique_name(skus[0], 64, "gr-in");
    tu_unique_name(skus[1], 64, "gr-out");
    gr_put(skus[0], 10, 1, rules);
    gr_put(skus[1], 10, 2, "");
    gr_buy(gr_port(0), skus[0], 1, "fay", NULL);
    /* every instance sells the SKU outside the group (and caches its rules) */
    for (int i = 0; i < GR_INSTANCES; i++)
        gr_buy(gr_port(i), skus[1], 1, "fay", NULL);
    snprintf(path, sizeof path, "/api/v1/skus/%s", skus[1]);
    char body[128];
    snprintf(body, sizeof body, "{\"limit_group\":\"%s\"}", g);
    sf_resp r = {0};
    gr_admin("PATCH", path, body, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "limit_group"), g) == 0, "%s", sf_resp_summary(&r));
    for (int i = 0; i < GR_INSTANCES; i++)
        gr_refused(gr_port(i), skus[1], "fay", g);
    gr_admin("PATCH", path, "{\"limit_group\":\"\"}", &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "limit_group"), "") == 0, "%s", sf_resp_summary(&r));
    for (int i = 0; i < GR_INSTANCES; i++)
        gr_buy(gr_port(i), skus[1], 1, "fay", NULL);
    sf_resp_free(&r);
    gr_check(skus, 2, g);
}

/* Naming a group that does not exist changes nothing; bad names; GET and DELETE. */
static void test_unknown_group_and_delete(void **state)
{
    (void)state;
    char g[64], sku[64], path[160], body[256];
    tu_unique_name(g, sizeof g, "gone");
    tu_unique_name(sku, sizeof sku, "gr-unknown");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":5,\"segments\":1,\"limit_group\":\"%s\"}", g);
    sf_resp r = {0};
    gr_admin("PUT", path, body, &r);
    SF_ASSERT_ERROR(&r, 422, "unknown_group");
    sf_json_request(NULL, gr_port(1), "GET", path, NULL, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku"); /* nothing was made */
    gr_put(sku, 5, 1, "");
    snprintf(body, sizeof body, "{\"limit_group\":\"%s\",\"limit_per_user\":3}", g);
    gr_admin("PATCH", path, body, &r);
    SF_ASSERT_ERROR(&r, 422, "unknown_group");
    sf_json_request(NULL, gr_port(2), "GET", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(sf_json_int(r.json, "limit_per_user", -1), 0); /* the PATCH changed nothing */
    SF_ASSERT(strcmp(sf_str(r.json, "limit_group"), "") == 0, "%s", sf_resp_summary(&r));
    gr_admin("PATCH", path, "{\"limit_group\":\"a b\"}", &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    gr_admin("PATCH", path, "{\"limit_group\":7}", &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    snprintf(path, sizeof path, "/api/v1/groups/%s", g);
    gr_admin("GET", path, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "not_found");
    gr_admin("DELETE", path, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "not_found");
    gr_admin("PUT", path, "{\"limit_per_user\":0}", &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    gr_admin("PUT", "/api/v1/groups/a%20b", "{\"limit_per_user\":1}", &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    sf_json_request(NULL, gr_port(0), "PUT", path, NULL, NULL, "{\"limit_per_user\":1}", &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized"); /* admin: the token */
    sf_json_request(NULL, gr_port(0), "GET", path, NULL, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    gr_put_group(g, 1);

    /* DELETE uncaps: gina at the limit buys again once the group is gone */
    snprintf(body, sizeof body, ",\"limit_group\":\"%s\"", g);
    gr_put(sku, 5, 1, body);
    gr_buy(gr_port(0), sku, 1, "gina", NULL);
    gr_refused(gr_port(1), sku, "gina", g);
    gr_admin("DELETE", path, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    gr_admin("GET", path, NULL, &r);
    SF_ASSERT_ERROR(&r, 404, "not_found");
    sf_resp_free(&r);
    gr_buy(gr_port(2), sku, 1, "gina", NULL);
    gr_buy(gr_port(0), sku, 1, "gina", NULL);
    sf_report rep;
    SF_ASSERT_INVARIANTS(gr_url, sku, &rep);
}

/* ---- a Redis Cluster, the group's master killed mid-burst ---- */

static cf_cluster *gr_cl;
static int gr_victim; /* the node serving the group's slot */
static char gr_cl_url[256];

/* Kills the group's master once the burst has sold its unit (the group's entry acknowledged by
 * a replica, --redis-replica-acks 1): the failover must keep it, while alice goes on ordering
 * (the threads' orders span ~2 s, the failover about as long). */
static void gr_kill_group_master(void)
{
    int64_t t0 = tu_now_ms();
    while (atomic_load(&gr_sold) == 0 && tu_now_ms() - t0 < 3000)
        tu_sleep_ms(2);
    SF_ASSERT(rf_halt(cf_node(gr_cl, gr_victim), SIGKILL) == 0, "kill -9 of node %d", gr_victim);
    fprintf(stderr, "the group's master (node %d) killed %lld ms into the burst, %d sold\n",
            gr_victim, (long long)(tu_now_ms() - t0), atomic_load(&gr_sold));
}

/* The slot of key, asked to a running node. */
static int gr_slot(const char *key)
{
    for (int i = 0; i < cf_nodes(gr_cl); i++) {
        if (!rf_pid(cf_node(gr_cl, i)))
            continue;
        redisReply *r = rf_command(cf_node(gr_cl, i), "CLUSTER KEYSLOT %s", key);
        int slot = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
        freeReplyObject(r);
        if (slot >= 0)
            return slot;
    }
    return -1;
}

static void test_group_burst_on_cluster(void **state)
{
    (void)state;
    gr_cl = cf_start(3, 1);
    SF_ASSERT(gr_cl != NULL, "%s", "a 3-master cluster with replicas");
    SF_ASSERT(cf_wait_replicas(gr_cl, 10000) == 0, "%s", "the replicas");
    const char *args[] = {"--threads",
                          "2",
                          "--admin-token",
                          GR_TOKEN,
                          "--trust-body-user-id",
                          "--redis-timeout-ms",
                          "500",
                          "--lock-lease-ms",
                          "1000",
                          "--redis-replica-acks",
                          "1",
                          NULL};
    snprintf(gr_cl_url, sizeof gr_cl_url, "%s", cf_url(gr_cl, 0));
    gr_url = gr_cl_url;
    for (int i = 0; i < GR_INSTANCES; i++) {
        svc[i] = sf_start(gr_url, args);
        SF_ASSERT(svc[i] != NULL, "%s", "inventoryd on the cluster");
        gr_ports[i] = sf_port(svc[i]);
    }
    char g[64], skus[GR_SKUS][64], key[160];
    tu_unique_name(g, sizeof g, "cstyle");
    gr_put_group(g, 1);
    gr_sizes(skus, "grc", g, 2);
    /* a third of alice's orders carts of a size and a SKU outside the group, a third carts of
     * two sizes (SPEC §17: the cart's one reservation in the group, its units summed) */
    tu_unique_name(gr_plain, sizeof gr_plain, "grc-plain");
    gr_put(gr_plain, 200, 2, "");
    /* the group's slot's master */
    snprintf(key, sizeof key, "inv:2:{G=%s}:meta", g);
    int slot = gr_slot(key);
    gr_victim = cf_master_of(gr_cl, slot);
    SF_ASSERT(gr_victim >= 0, "%s", "the group's master");
    int other;
    int created = gr_burst(skus, "alice", "bob", &other, gr_kill_group_master, 400);
    gr_plain[0] = '\0';
    /* the answers: 201 at most once; the others refused or 503 (the group's master failing
     * over); never a second unit */
    SF_ASSERT(created <= 1, "alice: %d units", created);
    SF_ASSERT(cf_wait_slot_served(gr_cl, slot, 20000) == 0, "%s", "the group's slot served again");
    /* after the failover: the user holds at most 1 unit in Redis, and may buy up to the limit
     * and no further */
    int64_t t0 = tu_now_ms();
    int more = 0;
    sf_resp r = {0};
    while (tu_now_ms() - t0 < 8000 && created + more < 1) {
        int st = gr_order(NULL, gr_port(0), skus[0], 1, "alice", &r);
        if (st == 201)
            more++;
        else if (st == 409)
            break;
        sf_resp_free(&r);
        tu_sleep_ms(200);
    }
    sf_resp_free(&r);
    /* once the new master answers, every instance refuses her: the entry survived */
    for (int i = 0; i < GR_INSTANCES; i++) {
        int st = 503;
        for (t0 = tu_now_ms(); st == 503 && tu_now_ms() - t0 < 10000; tu_sleep_ms(200)) {
            st = gr_order(NULL, gr_port(i), skus[i + 1], 1, "alice", &r);
            SF_ASSERT(st == 409 || st == 503, "alice past the limit: %s", sf_resp_summary(&r));
            if (st == 409)
                SF_ASSERT(strcmp(sf_error_code(&r), "limit_exceeded") == 0 &&
                              strcmp(sf_str(r.json, "limit_group"), g) == 0,
                          "%s", sf_resp_summary(&r));
            sf_resp_free(&r);
        }
        SF_ASSERT(st == 409, "instance %d: no answer but 503 for 10 s after the failover", i);
    }
    fprintf(stderr, "alice: %d unit(s) in the burst, %d after the failover\n", created, more);
    SF_ASSERT_EQ(created + more, 1);
    SF_ASSERT(sf_check_group(gr_url, g, (const char(*)[64])skus, GR_SKUS) == 0,
              "group %s: a user over its limit", g);

    /* the killed master back, as its slot's new master's replica: writes are acknowledged again */
    SF_ASSERT(rf_restart(cf_node(gr_cl, gr_victim)) == 0, "%s", "the old master's restart");
    SF_ASSERT(cf_wait_replicas(gr_cl, 15000) == 0, "%s", "every master with a replica again");

    /* a cancel on the cluster gives alice's unit back (the segment's ggive set and the group's
     * hash in other slots): she buys exactly one more */
    if (created == 1) {
        sf_resp c = {0};
        gr_cancel(gr_alice_id, &c);
        SF_ASSERT_STATUS(&c, 200);
        char gpath[160];
        snprintf(gpath, sizeof gpath, "/api/v1/groups/%s", g);
        gr_admin("GET", gpath, NULL, &c);
        SF_ASSERT_STATUS(&c, 200); /* given back before the cancel's answer: bob's count alone */
        SF_ASSERT_EQ(sf_json_int(c.json, "users", -1), 1);
        sf_resp_free(&c);
        gr_buy(gr_port(1), skus[5], 1, "alice", NULL);
        gr_refused(gr_port(2), skus[6], "alice", g);
    }

    /* an order holding both reservations (the SKU's limit, two-step on a cluster, and its
     * group's) that fails gives both back, one after the other: 2 units of a SKU of 1 */
    char g2[64], one[1][64], body[160];
    tu_unique_name(g2, sizeof g2, "cboth");
    gr_put_group(g2, 5);
    tu_unique_name(one[0], 64, "grc-one");
    snprintf(body, sizeof body, ",\"limit_per_user\":5,\"limit_group\":\"%s\"", g2);
    gr_put(one[0], 1, 1, body);
    gr_order(NULL, gr_port(1), one[0], 2, "hank", &r);
    SF_ASSERT_ERROR(&r, 409, "insufficient_stock");
    snprintf(key, sizeof key, "/api/v1/groups/%s", g2);
    gr_admin("GET", key, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(sf_json_int(r.json, "users", -1), 0); /* hank's entry went with the failure */
    sf_resp_free(&r);
    gr_buy(gr_port(2), one[0], 1, "hank", NULL);
    for (int i = 0; i < GR_INSTANCES; i++)
        SF_ASSERT(!sf_log_contains(svc[i], "bad_transition"),
                  "instance %d: a state change "
                  "not in a table",
                  i);
    SF_ASSERT(sf_stop_all(svc, GR_INSTANCES) == 0, "%s", "the instances' exits");
    cf_stop(gr_cl);
    gr_cl = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_burst),
        cmocka_unit_test(test_give_backs),
        cmocka_unit_test(test_cart_group),
        cmocka_unit_test(test_cart_group_burst),
        cmocka_unit_test(test_patch_mid_sale),
        cmocka_unit_test(test_unknown_group_and_delete),
        cmocka_unit_test(test_group_burst_on_cluster),
    };
    /* IT_GROUPS_PART (ctest runs it_groups and it_groups_cluster): "cluster" the cluster test
     * only, "one-redis" the others; unset, every test */
    const char *part = getenv("IT_GROUPS_PART");
    if (part && strcmp(part, "cluster") == 0)
        cmocka_set_test_filter("*cluster*");
    else if (part)
        cmocka_set_skip_filter("*cluster*");
    return cmocka_run_group_tests(tests, group_setup, sf_group_teardown);
}
