/*
 * The per-loop segment gates (service/src/order/seggate.c, order_fsm.c): under contention only one
 * order of a loop goes to Redis for a segment; the others queue on the loop and are handed the
 * hold with their commit pipelined behind the previous one.
 *   - 32 keep-alive clients on a SKU of 4 segments, one loop: every order 201, SPEC §8 holds,
 *     at most 2.0 top-level Redis calls (EVALSHA/EVAL) per order and no SUBSCRIBE at all (no
 *     order of the loop waited on Redis's unlock channel). Before the gates: 4.2 calls per order
 *     and thousands of SUBSCRIBEs (orders of one loop tried segments their own loop held).
 *   - Three instances of two loops, 16 segments, hold 5 ms, with and without the
 *     busy-elsewhere hints (--busy-hint-max-ms): the hints cut the top-level calls per order by
 *     at least a quarter (measured: by 60 %), every order 201, SPEC §8 holds.
 *   - A chain of holders outliving the lease (renewal off, lease 150 ms, hold 60 ms, 1 segment):
 *     the commits sent past the lease are refused as lost (inventory_locks_lost_total > 0) and
 *     retried, every answer is 201 or 503 lock_timeout, and SPEC §8 holds: handing a hold on
 *     never lets a commit through that the lock no longer covers.
 *   - Two loops, two segments, one loop's nearly dry: its queued orders go on to the other
 *     loop's segment; every order 201.
 * Counts, not timing, are asserted.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "svc_test.h"

#define GT_CLIENTS 32
#define GT_PER_CLIENT 25

struct gt_client {
    int port;
    const char *sku;
    int n;
    int created, lock_timeouts, other;
    char other_desc[160];
    pthread_t tid;
};

static void *gt_run(void *arg)
{
    struct gt_client *c = arg;
    sf_conn *conn = sf_conn_open(c->port, 0);
    for (int i = 0; i < c->n; i++) {
        sf_resp r = {0};
        int st = sf_order(conn, c->port, c->sku, 1, &r);
        if (st == 201) {
            c->created++;
        } else if (st == 503 && !strcmp(sf_error_code(&r), "lock_timeout")) {
            c->lock_timeouts++;
        } else {
            c->other++;
            snprintf(c->other_desc, sizeof(c->other_desc), "%s", sf_resp_summary(&r));
        }
        sf_resp_free(&r);
    }
    sf_conn_close(conn);
    return NULL;
}

/* Runs n clients of per orders each; returns the 201s, lock timeouts in *timeouts. Fails the
 * test on any other answer. */
static int gt_load(int port, const char *sku, int n, int per, int *timeouts)
{
    struct gt_client *c = calloc((size_t)n, sizeof(*c));
    SF_ASSERT(c != NULL, "%s", "out of memory");
    for (int i = 0; i < n; i++) {
        c[i].port = port;
        c[i].sku = sku;
        c[i].n = per;
        SF_ASSERT_EQ(pthread_create(&c[i].tid, NULL, gt_run, &c[i]), 0);
    }
    int created = 0;
    *timeouts = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(c[i].tid, NULL);
        SF_ASSERT(c[i].other == 0, "client %d: %d unexpected answers, e.g. %s", i, c[i].other,
                  c[i].other_desc);
        created += c[i].created;
        *timeouts += c[i].lock_timeouts;
    }
    free(c);
    return created;
}

/* calls=N of one command in INFO commandstats (0 when it never ran). */
static long long gt_calls(const char *info, const char *cmd)
{
    char needle[64];
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
    const char *p = strstr(info, needle);
    return p ? atoll(p + strlen(needle)) : 0;
}

/* Redis's command counts since gt_reset_stats. */
struct gt_stats {
    long long calls; /* top-level: EVALSHA + EVAL */
    long long subs;  /* SUBSCRIBE */
    long long pttl;  /* PTTL: one per try that found the lock taken */
};

static void gt_reset_stats(void)
{
    redisReply *reset = rf_command(gf_redis, "CONFIG RESETSTAT");
    SF_ASSERT(reset != NULL, "%s", "CONFIG RESETSTAT failed");
    freeReplyObject(reset);
}

static struct gt_stats gt_read_stats(void)
{
    redisReply *info = rf_command(gf_redis, "INFO commandstats");
    SF_ASSERT(info != NULL && info->type == REDIS_REPLY_STRING, "%s", "INFO failed");
    struct gt_stats st = {gt_calls(info->str, "evalsha") + gt_calls(info->str, "eval"),
                          gt_calls(info->str, "subscribe"), gt_calls(info->str, "pttl")};
    freeReplyObject(info);
    return st;
}

static void test_contended_orders_calls(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--lock-wait-ms", "10000", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64];
    snprintf(sku, sizeof(sku), "gate-%d-a", (int)getpid());
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 1000000, 4, &r) / 100 == 2, "PUT: %s",
              sf_resp_summary(&r));
    sf_resp_free(&r);
    /* The layout is read once and cached: an order before the count starts. */
    SF_ASSERT_EQ(sf_order(NULL, port, sku, 1, &r), 201);
    sf_resp_free(&r);
    gt_reset_stats();
    int timeouts;
    int created = gt_load(port, sku, GT_CLIENTS, GT_PER_CLIENT, &timeouts);
    struct gt_stats stats = gt_read_stats();
    long long calls = stats.calls, subs = stats.subs;
    printf("# %d orders created, %d lock timeouts; %lld top-level calls (%.2f per order), "
           "%lld SUBSCRIBE\n",
           created, timeouts, calls, created ? (double)calls / created : 0.0, subs);
    SF_ASSERT_EQ(timeouts, 0);
    SF_ASSERT_EQ(created, GT_CLIENTS * GT_PER_CLIENT);
    SF_ASSERT(calls <= 2LL * created, "%lld top-level Redis calls for %d orders (> 2.0 each)",
              calls, created);
    SF_ASSERT(subs == 0, "%lld SUBSCRIBEs: orders of the one loop waited on Redis", subs);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created + 1);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* gt_load on one instance of several running at once (one Redis). */
struct gt_inst {
    int port, n, per, created, timeouts;
    const char *sku;
    pthread_t tid;
};

static void *gt_inst_run(void *arg)
{
    struct gt_inst *p = arg;
    p->created = gt_load(p->port, p->sku, p->n, p->per, &p->timeouts);
    return NULL;
}

#define GT_INSTANCES 3
#define GT_INST_CLIENTS 21
#define GT_INST_PER 20

/* Three instances of two loops on a SKU of 16 segments with a 5 ms hold (loadtest/run.sh's
 * shape, with a longer hold) and --busy-hint-max-ms hint_ms; returns the top-level Redis calls per
 * order. Every order 201 and SPEC §8 holds. */
static double gt_three_instances(const char *tag, const char *hint_ms)
{
    const char *args[] = {
        "--threads",          "2",     "--hold-ms", "5", "--lock-wait-ms", "10000",
        "--busy-hint-max-ms", hint_ms, NULL};
    sf_service *svc[GT_INSTANCES];
    struct gt_inst p[GT_INSTANCES];
    char sku[64];
    snprintf(sku, sizeof(sku), "gate-%d-%s", (int)getpid(), tag);
    sf_resp r = {0};
    for (int i = 0; i < GT_INSTANCES; i++) {
        svc[i] = sf_start(rf_url(gf_redis), args);
        SF_ASSERT(svc[i] != NULL, "inventoryd %d did not start", i);
        if (i == 0) {
            SF_ASSERT(sf_put_sku(sf_port(svc[0]), NULL, sku, 1000000, 16, &r) / 100 == 2, "PUT: %s",
                      sf_resp_summary(&r));
            sf_resp_free(&r);
        }
        p[i] = (struct gt_inst){
            .port = sf_port(svc[i]), .n = GT_INST_CLIENTS, .per = GT_INST_PER, .sku = sku};
    }
    for (int i = 0; i < GT_INSTANCES; i++) { /* each caches the layout before the count */
        for (int j = 0; j < 4; j++) {
            SF_ASSERT_EQ(sf_order(NULL, p[i].port, sku, 1, &r), 201);
            sf_resp_free(&r);
        }
    }
    gt_reset_stats();
    for (int i = 0; i < GT_INSTANCES; i++)
        SF_ASSERT_EQ(pthread_create(&p[i].tid, NULL, gt_inst_run, &p[i]), 0);
    int created = 0, timeouts = 0;
    for (int i = 0; i < GT_INSTANCES; i++) {
        pthread_join(p[i].tid, NULL);
        created += p[i].created;
        timeouts += p[i].timeouts;
    }
    struct gt_stats stats = gt_read_stats();
    long long calls = stats.calls, pttl = stats.pttl;
    printf("# --busy-hint-max-ms %s: %d orders created, %d lock timeouts; %lld top-level calls "
           "(%.2f per order), %lld busy tries (PTTL, %.2f per order)\n",
           hint_ms, created, timeouts, calls, created ? (double)calls / created : 0.0, pttl,
           created ? (double)pttl / created : 0.0);
    SF_ASSERT_EQ(timeouts, 0);
    SF_ASSERT_EQ(created, GT_INSTANCES * GT_INST_CLIENTS * GT_INST_PER);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created + 4 * GT_INSTANCES);
    for (int i = 0; i < GT_INSTANCES; i++)
        SF_ASSERT_EQ(sf_stop(svc[i]), 0);
    return (double)calls / created;
}

/* The gates and the held hint of one instance do not know the other instances' holds: without
 * the busy-elsewhere hint every order sends tries bound to find those segments locked; with it
 * the loop walks past them for about a hold (longer while they stay locked). Measured here
 * (hold 5 ms): 5.6-6.1 calls per order without, 2.5-2.7 with; with / without 0.44-0.45, and
 * 0.44-0.51 with two busy loops on the 2 cores (2026-11-28: 3.6 without, 1.9 with, 0.52;
 * ASan: 0.42-0.45, loaded 0.55-0.65, later 0.61-0.89: not asserted there, below). The two
 * runs are compared within the test, so a slow machine moves both; hold 2 ms made the cut
 * sensitive to load (0.58-0.75). */
static void test_busy_elsewhere_hint(void **state)
{
    (void)state;
    double off = gt_three_instances("nohint", "0");
    double on = gt_three_instances("hint", "20");
    printf("# with the hint / without: %.2f\n", on / off);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* Under the sanitizers inventoryd runs 2-15 times slower and the loops' turns can outlast
     * the holds. ThreadSanitizer: with / without was 0.58 there, 0.69-0.82 with two busy loops
     * on the cores. AddressSanitizer (2026-11-28, issue 33's build): 0.61-0.65 on an idle
     * machine, 0.89 once in a clean-clone CI beside another test (2.46 calls per order with the
     * hint, 2.75 without), while the normal build measured 0.52 the same hour. The orders and
     * SPEC §8 are checked above in every build; the cut is a performance property, asserted in
     * the normal build only. */
    printf("# sanitizer build: the cut is not asserted\n");
#else
    SF_ASSERT(on <= 0.8 * off,
              "%.2f top-level calls per order with the busy hint, %.2f without: the loops kept "
              "trying segments other instances held",
              on, off);
#endif
}

static void test_chain_past_the_lease(void **state)
{
    (void)state;
    const char *args[] = {"--threads",
                          "1",
                          "--lock-renewal",
                          "0",
                          "--lock-lease-ms",
                          "150",
                          "--hold-ms",
                          "60",
                          "--lock-wait-ms",
                          "6000",
                          NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64];
    snprintf(sku, sizeof(sku), "gate-%d-b", (int)getpid());
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 1000, 1, &r) / 100 == 2, "PUT: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    int timeouts;
    int created = gt_load(port, sku, 8, 3, &timeouts);
    double lost = sf_metric(port, "inventory_locks_lost_total");
    printf("# %d created, %d lock timeouts, %g commits refused as lost\n", created, timeouts, lost);
    SF_ASSERT(lost >= 1, "%s", "no commit was refused: the chain never outlived the lease");
    SF_ASSERT(created >= 1, "%s", "nothing was sold");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* Two loops, two segments (one in each loop's share), and the first loop's segment nearly dry:
 * its orders queue on its gate and are handed the hold; once it is empty, the walk that goes on
 * must still try the other loop's segment. Every order 201 (the stock is enough for all): the
 * guard on the walk's second pass (a loop queues behind its own gates before it tries the other
 * loops' share) must never turn into a sold_out while the other share has stock. */
static void test_own_share_runs_dry(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--lock-wait-ms", "10000", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64];
    snprintf(sku, sizeof(sku), "gate-%d-c", (int)getpid());
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 2000, 2, &r) / 100 == 2, "PUT: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    /* segment 0: 1000 -> 5 units (its total t down by the same, SPEC §8 kept) */
    freeReplyObject(rf_command(gf_redis, "SET inv:2:{%s/0}:stock 5", sku));
    freeReplyObject(rf_command(gf_redis, "HINCRBY inv:2:{%s/0}:cnt t -995", sku));
    int timeouts;
    int created = gt_load(port, sku, GT_CLIENTS, GT_PER_CLIENT, &timeouts);
    SF_ASSERT_EQ(timeouts, 0);
    SF_ASSERT_EQ(created, GT_CLIENTS * GT_PER_CLIENT);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, created);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contended_orders_calls),
        cmocka_unit_test(test_busy_elsewhere_hint),
        cmocka_unit_test(test_chain_past_the_lease),
        cmocka_unit_test(test_own_share_runs_dry),
    };
    return SF_RUN_GROUP_TESTS(tests, gf_group_setup, sf_group_teardown);
}
