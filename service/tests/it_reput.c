/*
 * Re-PUT while orders are in flight (SPEC §5: "an order that began under the old version either
 * commits before the reset or fails and is retried under the new one"). Sixteen threads order
 * from two instances; meanwhile the SKU is PUT again with a new stock and a different segment
 * count. Afterwards: no request hung, the invariant checker passes for the new version (every
 * segment belongs to it, none is left over from the old layout), sold counts exactly the new
 * version's orders, every order whose request was sent after the PUT's response belongs to the
 * new version, and no order received before the PUT was even sent does. For each strategy.
 */
#include "svc_test.h"

#include <pthread.h>

#define RP_THREADS 16
#define RP_WARMUP_MS 300       /* ordering under the old version before the PUT */
#define RP_SLOW_MS 5000        /* an answer slower than this counts as a hang */
#define RP_OLD_STOCK 1000000LL /* the old version never sells out */

static sf_service *svc[2];

struct rp_case {
    const char *strategy;
    int old_segments;
    long long new_stock;
    int new_segments;
};

/* Per test: two instances with the case's strategy. */
static int rp_start(void **state)
{
    const struct rp_case *rc = *state;
    const char *args[] = {"--threads", "8", "--strategy", rc->strategy, NULL};
    for (int i = 0; i < 2; i++) {
        svc[i] = sf_start(rf_url(gf_redis), args);
        if (svc[i] == NULL)
            return -1;
    }
    return 0;
}

static int rp_stop(void **state)
{
    (void)state;
    return sf_stop_all(svc, 2);
}

struct rp_order {
    char id[112];
    int qty, segment;
    int64_t sent_us, recv_us;
};

/* When the PUT was sent and answered (monotonic us; 0 = not yet), shared with the buyers. */
static _Atomic int64_t put_sent_us, put_done_us;

struct rp_worker {
    int port;
    const char *sku;
    unsigned seed;
    pthread_barrier_t *go;
    struct rp_order *orders;
    int n, cap;
    int lock_timeouts, unavailable, errors, sold_out;
    int64_t slowest_us;
    char err[300], first_unavailable[300];
    pthread_t tid;
};

static void rp_error(struct rp_worker *w, const char *what, const sf_resp *r)
{
    if (w->errors++ == 0)
        snprintf(w->err, sizeof w->err, "%s: %s", what, sf_resp_summary(r));
}

static void *rp_run(void *arg)
{
    struct rp_worker *w = arg;
    sf_conn *c = sf_conn_open(w->port, RP_SLOW_MS * 2);
    sf_resp r = {0};
    int only_one = 0;
    pthread_barrier_wait(w->go);
    for (int i = 0; i < 100000 && !w->sold_out && w->errors == 0; i++) {
        int qty = only_one ? 1 : 1 + (int)(rand_r(&w->seed) % 3);
        int64_t sent = tu_now_us();
        int st = sf_order(c, 0, w->sku, qty, &r);
        int64_t recv = tu_now_us();
        if (recv - sent > w->slowest_us)
            w->slowest_us = recv - sent;
        const char *code = sf_error_code(&r);
        if (st == 201) {
            if (w->n == w->cap) {
                int cap = w->cap ? w->cap * 2 : 256;
                struct rp_order *o = realloc(w->orders, sizeof *o * (size_t)cap);
                if (o == NULL) {
                    rp_error(w, "out of memory", &r);
                    break;
                }
                w->orders = o;
                w->cap = cap;
            }
            struct rp_order *o = &w->orders[w->n++];
            snprintf(o->id, sizeof o->id, "%s", sf_str(r.json, "order_id"));
            o->qty = qty;
            o->segment = (int)sf_json_int(r.json, "segment", -1);
            o->sent_us = sent;
            o->recv_us = recv;
            if (sf_json_int(r.json, "quantity", -1) != qty)
                rp_error(w, "201 with another quantity", &r);
        } else if (st == 409 && strcmp(code, "sold_out") == 0) {
            /* Only the new version can sell out: a sold_out answered before the PUT was even
             * sent would be the old version's, which holds far more than is ever ordered. */
            if (recv < put_sent_us || put_sent_us == 0)
                rp_error(w, "sold_out before the new version existed", &r);
            w->sold_out = 1;
        } else if (st == 409 && strcmp(code, "insufficient_stock") == 0 && qty > 1) {
            only_one = 1;
        } else if (st == 503 && strcmp(code, "lock_timeout") == 0 && w->lock_timeouts < 1000) {
            w->lock_timeouts++;
        } else if (st == 503 && strcmp(code, "unavailable") == 0 && w->unavailable < 1000) {
            if (w->unavailable++ == 0)
                snprintf(w->first_unavailable, sizeof w->first_unavailable, "%s",
                         sf_resp_summary(&r));
        } else {
            rp_error(w, st == 0 ? "no answer (hung?)" : "unexpected answer", &r);
        }
    }
    sf_resp_free(&r);
    sf_conn_close(c);
    return NULL;
}

/* One re-PUT amid orders, every check made. Returns 1 when the PUT landed amid orders (some
 * sent before its answer, some after), 0 when that precondition was missed (on a loaded
 * machine the new version can sell out before the PUT's answer reaches the client): the
 * caller tries again with a new SKU. */
static int reput_while_ordering(void **state)
{
    const struct rp_case *rc = *state;
    int old_segments = rc->old_segments, new_segments = rc->new_segments;
    long long new_stock = rc->new_stock;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "reput");
    int p0 = sf_port(svc[0]), p1 = sf_port(svc[1]);
    sf_resp r = {0};
    sf_put_sku(p0, NULL, sku, RP_OLD_STOCK, old_segments, &r);
    SF_ASSERT_STATUS(&r, 201);
    long long v1 = sf_json_int(r.json, "version", -1);
    put_sent_us = 0;
    put_done_us = 0;

    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, RP_THREADS + 1);
    static struct rp_worker w[RP_THREADS];
    for (int i = 0; i < RP_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].port = i % 2 ? p1 : p0;
        w[i].sku = sku;
        w[i].seed = (unsigned)(i * 104729 + 3);
        w[i].go = &go;
        assert_int_equal(pthread_create(&w[i].tid, NULL, rp_run, &w[i]), 0);
    }
    pthread_barrier_wait(&go);
    tu_sleep_ms(RP_WARMUP_MS);

    /* The re-PUT goes to instance 1; instance 0 learns of it only from Redis. */
    put_sent_us = tu_now_us();
    sf_put_sku(p1, NULL, sku, new_stock, new_segments, &r);
    put_done_us = tu_now_us();
    int put_status = r.status;
    long long v2 = sf_json_int(r.json, "version", -1);
    char put_summary[300];
    snprintf(put_summary, sizeof put_summary, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);

    for (int i = 0; i < RP_THREADS; i++)
        pthread_join(w[i].tid, NULL);
    pthread_barrier_destroy(&go);

    SF_ASSERT(put_status == 200 && v2 > v1, "re-PUT: %s (old version %lld)", put_summary, v1);
    SF_ASSERT(put_done_us - put_sent_us < RP_SLOW_MS * 1000LL, "the PUT took %lld ms",
              (long long)(put_done_us - put_sent_us) / 1000);

    int n = 0, unavailable = 0, before = 0, after = 0;
    const char *first_unavailable = NULL;
    for (int i = 0; i < RP_THREADS; i++) {
        SF_ASSERT(w[i].errors == 0, "thread %d (port %d): %s", i, w[i].port, w[i].err);
        SF_ASSERT(w[i].slowest_us < RP_SLOW_MS * 1000LL, "thread %d: an answer took %lld ms", i,
                  (long long)w[i].slowest_us / 1000);
        SF_ASSERT(w[i].sold_out, "thread %d never saw the new version sell out", i);
        n += w[i].n;
        unavailable += w[i].unavailable;
        if (first_unavailable == NULL && w[i].unavailable > 0)
            first_unavailable = w[i].first_unavailable;
    }

    /* Which 201s are orders of the new version: their records are in its segments. */
    redisContext *c = rf_connect(gf_redis);
    SF_ASSERT(c != NULL, "%s", "connect to redis");
    for (int i = 0; i < RP_THREADS; i++)
        for (int j = 0; j < w[i].n; j++)
            redisAppendCommand(c, "HGET inv:2:{%s/%d}:orders %s", sku, w[i].orders[j].segment,
                               w[i].orders[j].id);
    long long new_units = 0, new_orders = 0;
    for (int i = 0; i < RP_THREADS; i++) {
        for (int j = 0; j < w[i].n; j++) {
            const struct rp_order *o = &w[i].orders[j];
            void *v = NULL;
            SF_ASSERT(redisGetReply(c, &v) == REDIS_OK, "HGET: %s", c->errstr);
            redisReply *rec = v;
            int in_new = rec->type == REDIS_REPLY_STRING;
            freeReplyObject(rec);
            if (o->sent_us > put_done_us) {
                after++;
                SF_ASSERT(o->segment >= 0 && o->segment < new_segments,
                          "order %s sent %lld ms after the PUT's answer is in segment %d of the "
                          "old layout (new layout: %d segments)",
                          o->id, (long long)(o->sent_us - put_done_us) / 1000, o->segment,
                          new_segments);
                SF_ASSERT(in_new,
                          "order %s sent %lld ms after the PUT's answer is not an order "
                          "of the new version",
                          o->id, (long long)(o->sent_us - put_done_us) / 1000);
            } else {
                before++;
            }
            if (o->recv_us < put_sent_us)
                SF_ASSERT(!in_new,
                          "order %s, answered before the PUT was sent, is an order of "
                          "the new version",
                          o->id);
            if (in_new) {
                new_units += o->qty;
                new_orders++;
            }
        }
        free(w[i].orders);
    }
    redisFree(c);
    fprintf(stderr,
            "%s, re-PUT %d -> %d segments: %d orders (%d sent before the PUT's answer, %d "
            "after), %lld orders / %lld units of the new version, %d unavailable\n",
            rc->strategy, old_segments, new_segments, n, before, after, new_orders, new_units,
            unavailable);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT(rep.version == v2 && rep.segments == new_segments,
              "Redis layout: version %lld, %d segments; the PUT said version %lld, %d segments",
              rep.version, rep.segments, v2, new_segments);
    SF_ASSERT(rep.stock_total == new_stock && rep.sold == new_stock && rep.remaining == 0,
              "new version: stock_total %lld sold %lld remaining %lld, expected %lld sold out",
              rep.stock_total, rep.sold, rep.remaining, new_stock);
    SF_ASSERT(rep.sold == new_units && rep.orders == new_orders,
              "Redis: sold %lld in %lld orders; the clients hold %lld units in %lld 201s of the "
              "new version",
              rep.sold, rep.orders, new_units, new_orders);
    for (int i = 0; i < 2; i++) {
        json_t *st = sf_sku_status(sf_port(svc[i]), sku);
        SF_ASSERT(st != NULL, "GET status on instance %d", i);
        SF_ASSERT(
            sf_json_int(st, "version", -1) == v2 && sf_json_int(st, "sold", -1) == new_units &&
                json_array_size(json_object_get(st, "segments")) == (size_t)new_segments,
            "instance %d: version %lld sold %lld segments %zu", i, sf_json_int(st, "version", -1),
            sf_json_int(st, "sold", -1), json_array_size(json_object_get(st, "segments")));
        json_decref(st);
    }
    SF_ASSERT(unavailable == 0, "%d answers were 503 unavailable with Redis up; first: %s",
              unavailable, first_unavailable);
    if (before > 0 && after > 0)
        return 1;
    fprintf(stderr, "%s: the PUT did not land amid orders (%d before, %d after); again\n",
            rc->strategy, before, after);
    return 0;
}

/* reput_while_ordering until its precondition holds (3 tries). */
static void reput_proved(void **state)
{
    int tries = 0;
    while (!reput_while_ordering(state))
        SF_ASSERT(++tries < 3, "the PUT did not land amid orders in %d tries", tries);
}

/* 16 -> 8 segments: segments 8..15 must go, orders in flight on them must not count. */
static void test_reput_fewer_segments(void **state)
{
    reput_proved(state);
}

/* 4 -> 12 segments: new segments appear that the other instance's cache does not know. */
static void test_reput_more_segments(void **state)
{
    reput_proved(state);
}

/* The same for the baseline and the lock-free strategy: their commits check the version too. */
static void test_reput_single_lock(void **state)
{
    reput_proved(state);
}

static void test_reput_atomic(void **state)
{
    reput_proved(state);
}

int main(void)
{
    static struct rp_case fewer = {"segmented", 16, 600, 8};
    static struct rp_case more = {"segmented", 4, 480, 12};
    static struct rp_case single = {"single-lock", 16, 300, 8};
    static struct rp_case atomic = {"atomic", 16, 600, 8};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_reput_fewer_segments, rp_start, rp_stop,
                                                 &fewer),
        cmocka_unit_test_prestate_setup_teardown(test_reput_more_segments, rp_start, rp_stop,
                                                 &more),
        cmocka_unit_test_prestate_setup_teardown(test_reput_single_lock, rp_start, rp_stop,
                                                 &single),
        cmocka_unit_test_prestate_setup_teardown(test_reput_atomic, rp_start, rp_stop, &atomic),
    };
    return SF_RUN_GROUP_TESTS(tests, gf_group_setup, sf_group_teardown);
}
