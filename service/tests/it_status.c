/*
 * The status snapshot (issue 30, SPEC §15, statsnap.h): GET /api/v1/skus/{sku} answered from a
 * per-instance snapshot refreshed at most every --status-refresh-ms, against a real
 * redis-server, a real Redis Cluster (3 masters) and real inventoryd processes over HTTP:
 *
 *   - staleness: while one buyer sells a SKU through instance A, pollers on A and on B never see
 *     a remaining below the stock less the orders sent so far, and every poll sent refresh_ms +
 *     ST_MARGIN_MS after an order's 201 shows it; sold_out within that of the last unit;
 *   - shared refresh: 200 GETs from 20 connections over 2 s cost at most 2 s / refresh + 2
 *     refreshes (inventory_status_refreshes_total) and, in Redis's INFO commandstats, at most
 *     2 EVALSHA a refresh beyond an idle baseline measured just before (the sweeper's);
 *   - consistency: while PUTs switch the SKU between 4 segments (1000 units) and 8 (4000) and a
 *     restock and a buyer run, every 200 is one layout: segments as many as its version's PUT
 *     said, each segment's units (remaining + sold) its layout's share plus restocks at most,
 *     sold = stock_total - remaining, and the sums over the segments equal the totals (read
 *     through an instance refreshing every 100 ms and one every 1 ms, whose reads meet the
 *     PUTs' roll-outs);
 *   - HTTP caching: a strong ETag, If-None-Match (the tag, W/ the tag, a list, `*`) → 304
 *     without a body and with the same ETag; a new ETag after a change (the old one then gets a
 *     200), the same ETag and as_of across refreshes that read the same status; Cache-Control
 *     and Age; ?consistent=1 exact with no-store, and 401 without admin where admin is closed;
 *     the default refresh (250 ms) in the body of an instance started without the flag;
 *   - 404 for an unknown SKU turning into 200 after a PUT on another instance (and back to 404
 *     after a DELETE there) within refresh + ST_MARGIN_MS; a PUT on the same instance is seen
 *     at once; a bad name is 400;
 *   - the same staleness and consistency on a Redis Cluster (where the refresh is the exact
 *     read);
 *   - Redis down (stopped) or hung (SIGSTOP): GETs answer 503 within ST_OUTAGE_MS, the refresh
 *     failures are counted, and after Redis is back the snapshot answers the right status.
 *
 * The bounds are causal, not timing guesses: a snapshot is fresh for refresh_ms from the moment
 * its read was SENT, so a GET sent refresh_ms after an order's 201 is answered by a read sent
 * after the commit, unless it joined a refresh in flight for longer than ST_MARGIN_MS (a loaded
 * loop); the margin is for that. Refreshes of 100 ms (the instances of the group) keep it short.
 * About 16 s alone on 2 cores (18 s beside a second copy and a busy core); IT_STATUS_FILTER
 * (a cmocka pattern) runs some of the tests.
 */
#include "svc_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "cluster_fixture.h"

#define ST_REFRESH_MS 100
#define ST_MARGIN_MS 500  /* a refresh in flight on a loaded loop (see the header) */
#define ST_OUTAGE_MS 4000 /* --redis-timeout-ms 500, a reconnect, ASan */
#define ST_TOKEN "status-test-token"

static sf_service *svc[3]; /* A, B: --status-refresh-ms 100; C: default refresh, admin closed */
static int port[3];

static const char *st_args[] = {"--threads", "2", "--status-refresh-ms", "100", NULL};

static int group_setup(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        if (!(svc[i] = sf_group_service(st_args)))
            return -1;
        port[i] = sf_port(svc[i]);
    }
    /* the fixture's --status-refresh-ms 0 overridden: C runs inventoryd's default */
    const char *closed[] = {"--threads",     "2",      "--admin-allow-loopback=0",
                            "--admin-token", ST_TOKEN, "--status-refresh-ms",
                            "250",           NULL};
    if (!(svc[2] = sf_group_service(closed)))
        return -1;
    port[2] = sf_port(svc[2]);
    return 0;
}

/* ---- one GET ---------------------------------------------------------------------------- */

/* What a GET of a SKU's status answered, and when. */
struct st_poll {
    int64_t sent_ms, recv_ms;
    int status;
    long long remaining, version, stock_total, sold;
    int sold_out;
    long long started; /* the buyers' orders sent before recv_ms */
};

/* GET /api/v1/skus/{sku}[suffix] on c with optional extra headers. */
static int st_get(sf_conn *c, const char *sku, const char *suffix, const char *const *headers,
                  sf_resp *r)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s%s", sku, suffix ? suffix : "");
    return sf_conn_request(c, "GET", path, headers, NULL, 0, r);
}

/* "" when status answer st is one layout's (SPEC §5, §8 on its own), else what is wrong. */
static const char *st_sums_problem(const json_t *st, char *buf, size_t len)
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
        if (a < 0 || b < 0 || sf_json_int(s, "index", -1) != (long long)i)
            return snprintf(buf, len, "segment %zu: %s", i, "bad index or negative"), buf;
        srem += a;
        ssold += b;
    }
    if (!json_is_array(segs) || total < 0 || rem < 0 || sold < 0 || sold != total - rem ||
        srem != rem || ssold != sold || json_is_true(json_object_get(st, "sold_out")) != (rem == 0))
        return snprintf(buf, len,
                        "stock_total %lld remaining %lld sold %lld, segments: remaining %lld "
                        "sold %lld",
                        total, rem, sold, srem, ssold),
               buf;
    return "";
}

/* ---- staleness: a buyer and pollers ---------------------------------------------------- */

#define ST_MAX_ACKS 4096
#define ST_MAX_POLLS 8192

struct st_sale {
    const char *sku;
    long long stock;
    int buy_port;
    atomic_llong started;        /* orders sent */
    int64_t ack_ms[ST_MAX_ACKS]; /* when each 201 came (one unit each, in order) */
    int nacks, other;            /* 201s; answers other than 201 and 409 */
    int64_t sold_out_ms;         /* the first 409 */
    atomic_int bought_out;       /* the buyer is done */
};

static void *st_buyer(void *arg)
{
    struct st_sale *s = arg;
    sf_conn *c = sf_conn_open(s->buy_port, 10000);
    for (;;) {
        sf_resp r = {0};
        atomic_fetch_add(&s->started, 1);
        int st = sf_order(c, 0, s->sku, 1, &r);
        sf_resp_free(&r);
        if (st == 201 && s->nacks < ST_MAX_ACKS) {
            s->ack_ms[s->nacks++] = tu_now_ms();
        } else if (st == 409) {
            s->sold_out_ms = tu_now_ms();
            break;
        } else {
            s->other++;
            if (s->other > 50)
                break;
        }
        tu_sleep_ms(3);
    }
    sf_conn_close(c);
    atomic_store(&s->bought_out, 1);
    return NULL;
}

struct st_poller {
    struct st_sale *sale;
    int port;
    int64_t until_after_sold_out_ms; /* keeps polling this long after the sale ended */
    struct st_poll polls[ST_MAX_POLLS];
    int npolls;
    int bad; /* a 200 whose sums do not hold */
    char bad_why[256];
    pthread_t tid;
};

static void *st_poll_run(void *arg)
{
    struct st_poller *p = arg;
    sf_conn *c = sf_conn_open(p->port, 10000);
    int64_t end = 0;
    while (p->npolls < ST_MAX_POLLS) {
        if (!end && atomic_load(&p->sale->bought_out))
            end = tu_now_ms() + p->until_after_sold_out_ms;
        if (end && tu_now_ms() > end)
            break;
        struct st_poll *q = &p->polls[p->npolls++];
        sf_resp r = {0};
        q->sent_ms = tu_now_ms();
        q->status = st_get(c, p->sale->sku, NULL, NULL, &r);
        q->recv_ms = tu_now_ms();
        q->started = atomic_load(&p->sale->started);
        q->remaining = sf_json_int(r.json, "remaining", -1);
        q->version = sf_json_int(r.json, "version", -1);
        q->sold_out = json_is_true(json_object_get(r.json, "sold_out"));
        char buf[200];
        if (q->status == 200 && !p->bad && st_sums_problem(r.json, buf, sizeof buf)[0]) {
            p->bad = 1;
            snprintf(p->bad_why, sizeof p->bad_why, "%s: %s", buf, sf_resp_summary(&r));
        }
        sf_resp_free(&r);
        tu_sleep_ms(2);
    }
    sf_conn_close(c);
    return NULL;
}

/* The orders acknowledged (201 received) before t. */
static long long st_acked_before(const struct st_sale *s, int64_t t)
{
    long long n = 0;
    while (n < s->nacks && s->ack_ms[n] < t)
        n++;
    return n;
}

/* Sells sku (stock units, made by the caller) one unit at a time through buy_port while
 * pollers on poll_ports[0..npoll) read it; checks the staleness bounds of the header. */
static void st_check_staleness(const char *sku, long long stock, int buy_port,
                               const int *poll_ports, int npoll, int refresh_ms)
{
    static struct st_sale sale;
    static struct st_poller pollers[2];
    memset(&sale, 0, sizeof sale);
    sale.sku = sku;
    sale.stock = stock;
    sale.buy_port = buy_port;
    SF_ASSERT(npoll <= 2, "%d pollers", npoll);
    for (int i = 0; i < npoll; i++) {
        memset(&pollers[i], 0, sizeof pollers[i]);
        pollers[i].sale = &sale;
        pollers[i].port = poll_ports[i];
        pollers[i].until_after_sold_out_ms = refresh_ms + ST_MARGIN_MS + 300;
        assert_int_equal(pthread_create(&pollers[i].tid, NULL, st_poll_run, &pollers[i]), 0);
    }
    pthread_t buyer;
    assert_int_equal(pthread_create(&buyer, NULL, st_buyer, &sale), 0);
    pthread_join(buyer, NULL);
    for (int i = 0; i < npoll; i++)
        pthread_join(pollers[i].tid, NULL);
    SF_ASSERT(sale.nacks == stock && sale.other == 0 && sale.sold_out_ms > 0,
              "the buyer: %d 201s of %lld, %d other answers, sold out %s", sale.nacks, stock,
              sale.other, sale.sold_out_ms ? "yes" : "no");
    int64_t last = sale.ack_ms[sale.nacks - 1];
    for (int i = 0; i < npoll; i++) {
        struct st_poller *p = &pollers[i];
        SF_ASSERT(!p->bad, "port %d: a status answer that is not one layout's: %s", p->port,
                  p->bad_why);
        int after_last = 0, shown = 0;
        for (int k = 0; k < p->npolls; k++) {
            const struct st_poll *q = &p->polls[k];
            SF_ASSERT(q->status == 200, "port %d: poll %d answered %d", p->port, k, q->status);
            /* Never a unit gone that no order had been sent for. */
            SF_ASSERT(q->remaining >= stock - q->started,
                      "port %d: remaining %lld below %lld - %lld orders sent by then", p->port,
                      q->remaining, stock, q->started);
            /* Every order acknowledged refresh + margin before the poll was sent is in it. */
            long long acked = st_acked_before(&sale, q->sent_ms - refresh_ms - ST_MARGIN_MS);
            SF_ASSERT(q->remaining <= stock - acked,
                      "port %d: poll sent at +%lld ms answered remaining %lld, but %lld orders "
                      "had their 201 more than %d + %d ms before (%lld left then at most)",
                      p->port, (long long)(q->sent_ms - sale.ack_ms[0]), q->remaining, acked,
                      refresh_ms, ST_MARGIN_MS, stock - acked);
            if (q->sent_ms >= last + refresh_ms + ST_MARGIN_MS) {
                after_last++;
                SF_ASSERT(q->sold_out && q->remaining == 0,
                          "port %d: %lld ms after the last unit went: sold_out %d remaining "
                          "%lld",
                          p->port, (long long)(q->sent_ms - last), q->sold_out, q->remaining);
            }
            /* A poll that saw an order within the window proves the snapshot moves. */
            if (q->remaining < stock && q->remaining > 0)
                shown++;
        }
        SF_ASSERT(after_last > 0 && shown > 0,
                  "port %d: %d polls, %d after the sale ended + refresh + margin, %d in the middle "
                  "of it: the precondition was missed",
                  p->port, p->npolls, after_last, shown);
    }
}

static void test_staleness_bound(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "stale");
    SF_PUT_SKU(port[0], NULL, sku, 150, 4);
    const int polls[2] = {port[0], port[1]};
    st_check_staleness(sku, 150, port[0], polls, 2, ST_REFRESH_MS);
}

/* ---- shared refresh --------------------------------------------------------------------- */

#define SH_THREADS 20
#define SH_PER_THREAD 10
#define SH_SPAN_MS 2000

/* calls=N of one command in INFO commandstats (0 when it never ran). */
static long long st_calls(const rf_server *srv, const char *cmd)
{
    redisReply *info = rf_command(srv, "INFO commandstats");
    SF_ASSERT(info != NULL && info->type == REDIS_REPLY_STRING, "%s", "INFO failed");
    char needle[64];
    snprintf(needle, sizeof needle, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(info->str, needle);
    long long n = p ? atoll(p + strlen(needle)) : 0;
    freeReplyObject(info);
    return n;
}

struct sh_poller {
    int port;
    const char *sku;
    int delay_ms;
    int ok, other;
    pthread_t tid;
};

static void *sh_poll_run(void *arg)
{
    struct sh_poller *p = arg;
    sf_conn *c = sf_conn_open(p->port, 10000);
    tu_sleep_ms(p->delay_ms);
    for (int i = 0; i < SH_PER_THREAD; i++) {
        sf_resp r = {0};
        if (st_get(c, p->sku, NULL, NULL, &r) == 200)
            p->ok++;
        else
            p->other++;
        sf_resp_free(&r);
        tu_sleep_ms(SH_SPAN_MS / SH_PER_THREAD);
    }
    sf_conn_close(c);
    return NULL;
}

static void test_shared_refresh(void **state)
{
    (void)state;
    /* A Redis of its own: only this instance's sweeper and refreshes run EVALSHA on it. */
    rf_server *srv = rf_start(NULL);
    SF_ASSERT(srv != NULL, "%s", "redis-server did not start");
    sf_service *s = sf_start(rf_url(srv), st_args);
    SF_ASSERT(s != NULL, "%s", "inventoryd did not start");
    int p = sf_port(s);
    char sku[64];
    tu_unique_name(sku, sizeof sku, "shared");
    /* 2 segments: the sweeper's EVALSHA (a few a segment each second) stay a small baseline */
    SF_PUT_SKU(p, NULL, sku, 1000, 2);
    json_t *st = sf_sku_status(p, sku);
    SF_ASSERT(st != NULL, "%s", "no status");
    json_decref(st);

    /* The idle baseline over the same span. */
    long long e0 = st_calls(srv, "evalsha") + st_calls(srv, "eval");
    tu_sleep_ms(SH_SPAN_MS);
    long long e1 = st_calls(srv, "evalsha") + st_calls(srv, "eval");
    long long idle = e1 - e0;

    double ref0 = sf_metric(p, "inventory_status_refreshes_total");
    double full0 = sf_metric(p, "inventory_status_answers_total{answer=\"full\"}");
    long long e2 = st_calls(srv, "evalsha") + st_calls(srv, "eval");
    int64_t t0 = tu_now_ms();
    struct sh_poller w[SH_THREADS];
    for (int i = 0; i < SH_THREADS; i++) {
        w[i] = (struct sh_poller){.port = p, .sku = sku, .delay_ms = i * 9};
        assert_int_equal(pthread_create(&w[i].tid, NULL, sh_poll_run, &w[i]), 0);
    }
    int ok = 0, other = 0;
    for (int i = 0; i < SH_THREADS; i++) {
        pthread_join(w[i].tid, NULL);
        ok += w[i].ok;
        other += w[i].other;
    }
    int64_t span = tu_now_ms() - t0;
    long long e3 = st_calls(srv, "evalsha") + st_calls(srv, "eval");
    double ref1 = sf_metric(p, "inventory_status_refreshes_total");
    double full1 = sf_metric(p, "inventory_status_answers_total{answer=\"full\"}");
    long long refreshes = (long long)(ref1 - ref0), evals = e3 - e2;
    fprintf(stderr,
            "shared refresh: %d GETs in %lld ms: %lld refreshes, %lld EVALSHA (idle baseline "
            "%lld over %d ms)\n",
            ok, (long long)span, refreshes, evals, idle, SH_SPAN_MS);
    SF_ASSERT(ok == SH_THREADS * SH_PER_THREAD && other == 0, "%d 200s, %d other answers", ok,
              other);
    SF_ASSERT_EQ(full1 - full0, ok);
    /* At most one refresh a refresh period while the GETs ran, plus the two ends. */
    long long most = span / ST_REFRESH_MS + 2;
    /* In Redis: a refresh is one script (two the first time it learns the segment count), over
     * the sweeper's idle rate scaled to the span, and a few to spare. Each GET reading Redis
     * itself would be 200 or more. */
    long long budget = 2 * most + idle * span / SH_SPAN_MS + idle / 4 + 6;
    SF_ASSERT(evals >= refreshes && evals <= budget,
              "%lld EVALSHA while %lld refreshes ran (budget %lld, idle %lld)", evals, refreshes,
              budget, idle);
    SF_ASSERT(refreshes >= 1 && refreshes <= most,
              "%lld refreshes for %d GETs over %lld ms (at most %lld)", refreshes, ok,
              (long long)span, most);
    SF_ASSERT(sf_stop(s) == 0, "%s", "inventoryd did not exit cleanly");
    rf_stop(srv);
}

/* ---- consistency across PUTs and restocks ----------------------------------------------- */

#define CO_MAX_VERSIONS 256
#define CO_RESTOCKS_MAX 150

struct co_layout {
    long long version, stock;
    int segments;
};

struct co_run {
    const char *sku;
    int put_port, restock_port, buy_port;
    const char *token;
    int puts;
    atomic_int stop;
    struct co_layout layouts[CO_MAX_VERSIONS];
    int nlayouts;
    int put_fail;
    char put_why[256];
    atomic_int restocks; /* sent (an upper bound on what was added) */
};

/* One 200 a poller saw. */
struct co_seen {
    long long version, stock_total;
    int segments;
    long long seg_units[8]; /* remaining + sold of each segment */
    int sums_ok;
    char why[200];
};

struct co_poller {
    struct co_run *run;
    int port;
    int n200, n503, nother;
    /* the 200s, checked after the run (the PUT thread's answers may come after a GET's) */
    struct co_seen seen[ST_MAX_POLLS];
    int nseen;
    char other_why[256];
    pthread_t tid;
};

static void *co_put_run(void *arg)
{
    struct co_run *r = arg;
    for (int i = 0; i < r->puts && r->nlayouts < CO_MAX_VERSIONS; i++) {
        /* 4 segments of 250, or 8 of 500: each segment's units tell the layouts apart. */
        long long stock = i % 2 ? 1000 : 4000;
        int segs = i % 2 ? 4 : 8;
        sf_resp resp = {0};
        int st = sf_put_sku(r->put_port, r->token, r->sku, stock, segs, &resp);
        long long v = sf_json_int(resp.json, "version", -1);
        if ((st == 200 || st == 201) && v > 0)
            r->layouts[r->nlayouts++] = (struct co_layout){v, stock, segs};
        else if (!r->put_fail) {
            r->put_fail = 1;
            snprintf(r->put_why, sizeof r->put_why, "%s", sf_resp_summary(&resp));
        }
        sf_resp_free(&resp);
        tu_sleep_ms(80);
    }
    atomic_store(&r->stop, 1);
    return NULL;
}

static void *co_restock_run(void *arg)
{
    struct co_run *r = arg;
    while (!atomic_load(&r->stop) && atomic_load(&r->restocks) < CO_RESTOCKS_MAX) {
        atomic_fetch_add(&r->restocks, 1);
        sf_resp resp = {0};
        sf_restock(r->restock_port, r->token, r->sku, 1, &resp); /* 409 sku_changed at times */
        sf_resp_free(&resp);
        tu_sleep_ms(10);
    }
    return NULL;
}

static void *co_buy_run(void *arg)
{
    struct co_run *r = arg;
    sf_conn *c = sf_conn_open(r->buy_port, 10000);
    while (!atomic_load(&r->stop)) {
        sf_resp resp = {0};
        sf_order(c, 0, r->sku, 1, &resp);
        sf_resp_free(&resp);
        tu_sleep_ms(5);
    }
    sf_conn_close(c);
    return NULL;
}

static void *co_poll_run(void *arg)
{
    struct co_poller *p = arg;
    sf_conn *c = sf_conn_open(p->port, 10000);
    while (!atomic_load(&p->run->stop) && p->nseen < ST_MAX_POLLS) {
        sf_resp r = {0};
        int st = st_get(c, p->run->sku, NULL, NULL, &r);
        if (st == 200) {
            p->n200++;
            struct co_seen *s = &p->seen[p->nseen++];
            s->version = sf_json_int(r.json, "version", -1);
            s->stock_total = sf_json_int(r.json, "stock_total", -1);
            const json_t *segs = json_object_get(r.json, "segments");
            s->segments = (int)json_array_size(segs);
            for (int k = 0; k < s->segments && k < 8; k++) {
                const json_t *g = json_array_get(segs, (size_t)k);
                s->seg_units[k] = sf_json_int(g, "remaining", -1) + sf_json_int(g, "sold", -1);
            }
            const char *why = st_sums_problem(r.json, s->why, sizeof s->why);
            s->sums_ok = why[0] == '\0';
            if (!s->sums_ok)
                snprintf(s->why, sizeof s->why, "%s", sf_resp_summary(&r));
        } else if (st == 503) {
            p->n503++; /* the exact read met a layout being rolled out: retry, no answer */
        } else {
            if (!p->nother)
                snprintf(p->other_why, sizeof p->other_why, "%s", sf_resp_summary(&r));
            p->nother++;
        }
        sf_resp_free(&r);
        tu_sleep_ms(1);
    }
    sf_conn_close(c);
    return NULL;
}

/* PUTs switching sku between the two layouts through put_port while a restock and a buyer run
 * through other_port and pollers on both read it; every 200 must be one layout's. Then SPEC §8
 * on the Redis at url. */
static void st_check_consistency(const char *url, const char *sku, int put_port, int other_port,
                                 int puts)
{
    static struct co_run run;
    static struct co_poller pollers[2];
    memset(&run, 0, sizeof run);
    run.sku = sku;
    run.put_port = put_port;
    run.restock_port = other_port;
    run.buy_port = other_port;
    run.puts = puts;
    long long v0 = SF_PUT_SKU(put_port, NULL, sku, 4000, 8);
    run.layouts[run.nlayouts++] = (struct co_layout){v0, 4000, 8};
    const int ports[2] = {put_port, other_port};
    for (int i = 0; i < 2; i++) {
        memset(&pollers[i], 0, sizeof pollers[i]);
        pollers[i].run = &run;
        pollers[i].port = ports[i];
        assert_int_equal(pthread_create(&pollers[i].tid, NULL, co_poll_run, &pollers[i]), 0);
    }
    pthread_t put, restock, buy;
    assert_int_equal(pthread_create(&restock, NULL, co_restock_run, &run), 0);
    assert_int_equal(pthread_create(&buy, NULL, co_buy_run, &run), 0);
    assert_int_equal(pthread_create(&put, NULL, co_put_run, &run), 0);
    pthread_join(put, NULL);
    pthread_join(restock, NULL);
    pthread_join(buy, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(pollers[i].tid, NULL);
    SF_ASSERT(!run.put_fail, "a PUT failed: %s", run.put_why);
    long long restocks = atomic_load(&run.restocks);
    for (int i = 0; i < 2; i++) {
        struct co_poller *p = &pollers[i];
        SF_ASSERT(p->nother == 0, "port %d: %d answers neither 200 nor 503, first: %s", p->port,
                  p->nother, p->other_why);
        int kinds[2] = {0, 0}, versions = 0;
        long long last_version = -1;
        for (int k = 0; k < p->nseen; k++) {
            const struct co_seen *s = &p->seen[k];
            SF_ASSERT(s->sums_ok, "port %d: answer %d is not one layout's: %s", p->port, k, s->why);
            const struct co_layout *l = NULL;
            for (int j = 0; j < run.nlayouts; j++)
                if (run.layouts[j].version == s->version)
                    l = &run.layouts[j];
            SF_ASSERT(l != NULL, "port %d: answer %d at version %lld, which no PUT answered",
                      p->port, k, s->version);
            SF_ASSERT(s->segments == l->segments,
                      "port %d: answer %d: version %lld has %d segments, the answer %d", p->port, k,
                      s->version, l->segments, s->segments);
            SF_ASSERT(s->stock_total >= l->stock && s->stock_total <= l->stock + restocks,
                      "port %d: answer %d: version %lld stock_total %lld, its PUT %lld (+ at "
                      "most %lld restocked)",
                      p->port, k, s->version, s->stock_total, l->stock, restocks);
            long long share = l->stock / l->segments;
            for (int g = 0; g < s->segments; g++)
                SF_ASSERT(s->seg_units[g] >= share && s->seg_units[g] <= share + restocks,
                          "port %d: answer %d: version %lld (%d segments of %lld) segment %d "
                          "holds %lld units: another layout's",
                          p->port, k, s->version, l->segments, share, g, s->seg_units[g]);
            kinds[l->segments == 8]++;
            if (s->version != last_version)
                versions++;
            last_version = s->version;
        }
        fprintf(stderr,
                "consistency port %d: %d answers 200 (%d of 4 segments, %d of 8; %d version "
                "changes), %d 503\n",
                p->port, p->n200, kinds[0], kinds[1], versions, p->n503);
        SF_ASSERT(kinds[0] > 0 && kinds[1] > 0 && versions >= 3 && p->n200 > p->n503,
                  "port %d: the answers did not span the PUTs (%d of 4 segments, %d of 8, %d "
                  "version changes, %d 200, %d 503): nothing was proved",
                  p->port, kinds[0], kinds[1], versions, p->n200, p->n503);
    }
    sf_report rep;
    SF_ASSERT_INVARIANTS(url, sku, &rep);
}

/* --status-refresh-ms 1: nearly every GET of a poller reads Redis, so the reads meet the PUTs'
 * roll-outs (a few ms each) often; the group's instances (100 ms) answer from memory. */
static const char *co_args[] = {"--threads", "2", "--status-refresh-ms", "1", NULL};

static void test_consistency_across_put_and_restock(void **state)
{
    (void)state;
    sf_service *d = sf_start(rf_url(gf_redis), co_args);
    SF_ASSERT(d != NULL, "%s", "inventoryd did not start");
    char sku[64];
    tu_unique_name(sku, sizeof sku, "consist");
    st_check_consistency(rf_url(gf_redis), sku, sf_port(d), port[0], 16);
    SF_ASSERT(sf_stop(d) == 0, "%s", "inventoryd did not exit cleanly");
}

/* ---- HTTP caching ----------------------------------------------------------------------- */

/* The status of a GET with If-None-Match inm on c, with *etag (when not NULL) its ETag. */
static int inm_get(sf_conn *c, const char *sku, const char *inm, sf_resp *r)
{
    char h[256];
    snprintf(h, sizeof h, "If-None-Match: %s", inm);
    const char *headers[] = {h, NULL};
    return st_get(c, sku, NULL, headers, r);
}

static void test_http_caching(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "cache");
    SF_PUT_SKU(port[0], NULL, sku, 100, 4);
    sf_conn *c = sf_conn_open(port[0], 10000);
    sf_resp r = {0}, r2 = {0};

    SF_ASSERT_EQ(st_get(c, sku, NULL, NULL, &r), 200);
    const char *et = sf_header(&r, "ETag");
    SF_ASSERT(et && et[0] == '"' && strlen(et) >= 3 && et[strlen(et) - 1] == '"',
              "ETag %s: a strong entity tag was expected", et ? et : "(none)");
    char etag[128];
    snprintf(etag, sizeof etag, "%s", et);
    const char *cc = sf_header(&r, "Cache-Control");
    SF_ASSERT(cc && strcmp(cc, "public, max-age=1") == 0, "Cache-Control %s", cc ? cc : "(none)");
    const char *age = sf_header(&r, "Age");
    SF_ASSERT(age && age[0] >= '0' && age[0] <= '9', "Age %s", age ? age : "(none)");
    SF_ASSERT(strcmp(sf_str(r.json, "sale"), "open") == 0 &&
                  sf_json_int(r.json, "refresh_ms", -1) == ST_REFRESH_MS &&
                  json_is_string(json_object_get(r.json, "as_of")) &&
                  sf_json_int(r.json, "remaining", -1) == 100,
              "body: %s", sf_resp_summary(&r));
    char as_of[64];
    snprintf(as_of, sizeof as_of, "%s", sf_str(r.json, "as_of"));

    /* If-None-Match: the tag, W/ the tag (weak comparison), a list naming it, `*`. */
    char weak[140], list[200];
    snprintf(weak, sizeof weak, "W/%s", etag);
    snprintf(list, sizeof list, "\"0000000000000000\", %s", etag);
    const char *matching[] = {etag, weak, list, "*"};
    for (size_t i = 0; i < sizeof matching / sizeof matching[0]; i++) {
        SF_ASSERT(inm_get(c, sku, matching[i], &r2) == 304,
                  "If-None-Match: %s: a 304 was expected, got %s", matching[i],
                  sf_resp_summary(&r2));
        SF_ASSERT(r2.body_len == 0, "a 304 with a %zu-byte body", r2.body_len);
        /* RFC 9110 8.6: a 304's Content-Length, if any, is the 200's (never "0") */
        const char *cl = sf_header(&r2, "Content-Length");
        SF_ASSERT(!cl || strtoull(cl, NULL, 10) == r.body_len,
                  "the 304's Content-Length %s, the 200's body %zu bytes", cl, r.body_len);
        const char *e2 = sf_header(&r2, "ETag");
        SF_ASSERT(e2 && strcmp(e2, etag) == 0, "the 304's ETag %s, the 200's %s",
                  e2 ? e2 : "(none)", etag);
        SF_ASSERT(sf_header(&r2, "Cache-Control") != NULL, "%s", "a 304 without Cache-Control");
    }
    SF_ASSERT(inm_get(c, sku, "\"0000000000000000\"", &r2) == 200, "another tag: %s",
              sf_resp_summary(&r2));

    /* Across refreshes that read the same status: the same snapshot (ETag, as_of). */
    double ref0 = sf_metric(port[0], "inventory_status_refreshes_total");
    for (int i = 0; i < 3; i++) {
        tu_sleep_ms(ST_REFRESH_MS + 30);
        SF_ASSERT(inm_get(c, sku, etag, &r2) == 304, "unchanged, refresh %d: %s", i,
                  sf_resp_summary(&r2));
    }
    SF_ASSERT_EQ(st_get(c, sku, NULL, NULL, &r2), 200);
    double ref1 = sf_metric(port[0], "inventory_status_refreshes_total");
    SF_ASSERT(ref1 - ref0 >= 3, "%.0f refreshes over 4 refresh periods", ref1 - ref0);
    SF_ASSERT(strcmp(sf_header(&r2, "ETag") ? sf_header(&r2, "ETag") : "", etag) == 0 &&
                  strcmp(sf_str(r2.json, "as_of"), as_of) == 0,
              "unchanged status: ETag %s as_of %s, before %s %s", sf_header(&r2, "ETag"),
              sf_str(r2.json, "as_of"), etag, as_of);

    /* A change: the old tag gets a 200 with the new status and a new ETag. */
    SF_ASSERT_EQ(sf_order(NULL, port[1], sku, 1, &r2), 201);
    /* ?consistent=1 is exact at once (and not for caches), whatever the snapshot holds. */
    SF_ASSERT_EQ(st_get(c, sku, "?consistent=1", NULL, &r2), 200);
    SF_ASSERT(sf_json_int(r2.json, "remaining", -1) == 99, "exact read: %s", sf_resp_summary(&r2));
    cc = sf_header(&r2, "Cache-Control");
    SF_ASSERT(cc && strcmp(cc, "no-store") == 0, "?consistent=1: Cache-Control %s",
              cc ? cc : "(none)");
    tu_sleep_ms(ST_REFRESH_MS + ST_MARGIN_MS);
    SF_ASSERT(inm_get(c, sku, etag, &r2) == 200, "after an order, the old ETag: %s",
              sf_resp_summary(&r2));
    const char *e3 = sf_header(&r2, "ETag");
    SF_ASSERT(e3 && strcmp(e3, etag) != 0 && sf_json_int(r2.json, "remaining", -1) == 99,
              "after an order: ETag %s (before %s), %s", e3 ? e3 : "(none)", etag,
              sf_resp_summary(&r2));
    SF_ASSERT(strcmp(sf_str(r2.json, "as_of"), as_of) != 0, "the same as_of %s after a change",
              as_of);
    snprintf(etag, sizeof etag, "%s", e3);
    SF_ASSERT(inm_get(c, sku, etag, &r2) == 304, "the new ETag: %s", sf_resp_summary(&r2));

    /* Admin closed (C): ?consistent=1 needs the token; the snapshot is public. C runs the
     * default refresh, 250 ms. */
    SF_ASSERT_EQ(
        sf_json_request(NULL, port[2], "GET", "/api/v1/skus/x?consistent=1", NULL, NULL, NULL, &r2),
        401);
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s?consistent=1", sku);
    SF_ASSERT_EQ(sf_json_request(NULL, port[2], "GET", path, NULL, NULL, NULL, &r2), 401);
    SF_ASSERT_ERROR(&r2, 401, "unauthorized");
    SF_ASSERT_EQ(sf_json_request(NULL, port[2], "GET", path, ST_TOKEN, NULL, NULL, &r2), 200);
    SF_ASSERT(sf_json_int(r2.json, "remaining", -1) == 99, "%s", sf_resp_summary(&r2));
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    SF_ASSERT_EQ(sf_json_request(NULL, port[2], "GET", path, NULL, NULL, NULL, &r2), 200);
    SF_ASSERT(sf_json_int(r2.json, "refresh_ms", -1) == 250 &&
                  sf_json_int(r2.json, "remaining", -1) == 99,
              "the default refresh: %s", sf_resp_summary(&r2));
    sf_resp_free(&r);
    sf_resp_free(&r2);
    sf_conn_close(c);
}

/* ---- 404, 400, DELETE ------------------------------------------------------------------- */

/* Polls sku's status on port until it answers want, for at most limit_ms after since_ms; returns
 * how long after since_ms it did, or -1. Every answer after since_ms + limit_ms must be want:
 * checked by the caller with one more GET. */
static int64_t until_status(int p, const char *sku, int want, int64_t since_ms, int limit_ms)
{
    sf_conn *c = sf_conn_open(p, 10000);
    int64_t at = -1;
    while (tu_now_ms() - since_ms <= limit_ms + 1000) {
        sf_resp r = {0};
        int64_t sent = tu_now_ms();
        int st = st_get(c, sku, NULL, NULL, &r);
        sf_resp_free(&r);
        if (st == want) {
            at = sent - since_ms;
            break;
        }
        tu_sleep_ms(5);
    }
    sf_conn_close(c);
    return at;
}

static void test_unknown_bad_and_deleted(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "later");
    sf_conn *a = sf_conn_open(port[0], 10000);
    sf_resp r = {0};
    SF_ASSERT_EQ(st_get(a, sku, NULL, NULL, &r), 404);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    /* The 404 is a snapshot too: a PUT on B reaches A within refresh + margin. */
    SF_PUT_SKU(port[1], NULL, sku, 10, 2);
    int64_t put_ms = tu_now_ms();
    int64_t at = until_status(port[0], sku, 200, put_ms, ST_REFRESH_MS + ST_MARGIN_MS);
    SF_ASSERT(at >= 0 && at <= ST_REFRESH_MS + ST_MARGIN_MS,
              "the PUT on B reached A's snapshot %lld ms after (bound %d)", (long long)at,
              ST_REFRESH_MS + ST_MARGIN_MS);
    SF_ASSERT_EQ(st_get(a, sku, NULL, NULL, &r), 200);
    SF_ASSERT(sf_json_int(r.json, "remaining", -1) == 10, "%s", sf_resp_summary(&r));

    /* Bad names: 400, from the snapshot path too. */
    SF_ASSERT_EQ(st_get(a, "bad%20name", NULL, NULL, &r), 400);
    char longname[80];
    memset(longname, 'x', 65);
    longname[65] = '\0';
    SF_ASSERT_EQ(st_get(a, longname, NULL, NULL, &r), 400);

    /* DELETE on B: A says 404 within refresh + margin. */
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    SF_ASSERT_EQ(sf_json_request(NULL, port[1], "DELETE", path, NULL, NULL, NULL, &r), 204);
    int64_t del_ms = tu_now_ms();
    at = until_status(port[0], sku, 404, del_ms, ST_REFRESH_MS + ST_MARGIN_MS);
    SF_ASSERT(at >= 0 && at <= ST_REFRESH_MS + ST_MARGIN_MS,
              "the DELETE on B reached A's snapshot %lld ms after (bound %d)", (long long)at,
              ST_REFRESH_MS + ST_MARGIN_MS);

    /* A PUT on A itself is seen by A at once (the snapshot is forgotten), and a DELETE too. */
    SF_PUT_SKU(port[0], NULL, sku, 7, 1);
    SF_ASSERT_EQ(st_get(a, sku, NULL, NULL, &r), 200);
    SF_ASSERT(sf_json_int(r.json, "remaining", -1) == 7, "%s", sf_resp_summary(&r));
    SF_ASSERT_EQ(sf_json_request(NULL, port[0], "DELETE", path, NULL, NULL, NULL, &r), 204);
    SF_ASSERT_EQ(st_get(a, sku, NULL, NULL, &r), 404);
    sf_resp_free(&r);
    sf_conn_close(a);
}

/* ---- on a Redis Cluster ----------------------------------------------------------------- */

static void test_cluster_staleness_and_consistency(void **state)
{
    (void)state;
    cf_cluster *cl = cf_start(3, 0);
    SF_ASSERT(cl != NULL, "%s", "the cluster did not start");
    char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cl, 3));
    /* two instances refreshing every 100 ms, one every 1 ms (co_args) */
    sf_service *cs[3] = {NULL, NULL, NULL};
    int cp[3];
    for (int i = 0; i < 3; i++) {
        cs[i] = sf_start(url, i < 2 ? st_args : co_args);
        SF_ASSERT(cs[i] != NULL, "%s", "inventoryd on the cluster did not start");
        cp[i] = sf_port(cs[i]);
    }
    char sku[64];
    tu_unique_name(sku, sizeof sku, "clstale");
    SF_PUT_SKU(cp[0], NULL, sku, 120, 6);
    st_check_staleness(sku, 120, cp[0], cp, 2, ST_REFRESH_MS);
    sf_report rep;
    SF_ASSERT_INVARIANTS(url, sku, &rep);

    tu_unique_name(sku, sizeof sku, "clconsist");
    st_check_consistency(url, sku, cp[2], cp[0], 10);
    SF_ASSERT(sf_stop_all(cs, 3) == 0, "%s", "an inventoryd did not exit cleanly");
    cf_stop(cl);
}

/* ---- Redis down or hung ----------------------------------------------------------------- */

/* A GET of path on p that must answer 503 unavailable, fast. */
static void outage_get(int p, const char *path, const char *what)
{
    sf_resp r = {0};
    int64_t t0 = tu_now_ms();
    int st = sf_json_request(NULL, p, "GET", path, NULL, NULL, NULL, &r);
    int64_t took = tu_now_ms() - t0;
    fprintf(stderr, "Redis %s: GET answered %d in %lld ms\n", what, st, (long long)took);
    SF_ASSERT(st == 503 && strcmp(sf_error_code(&r), "unavailable") == 0 && took <= ST_OUTAGE_MS,
              "Redis %s: GET answered %s after %lld ms (a 503 within %d ms expected)", what,
              sf_resp_summary(&r), (long long)took, ST_OUTAGE_MS);
    sf_resp_free(&r);
}

/* Waits (at most 10 s) until the GET answers 200 with remaining want. */
static void outage_recovers(int p, const char *path, long long want, const char *what)
{
    int64_t t0 = tu_now_ms();
    sf_resp r = {0};
    int st = 0;
    while (tu_now_ms() - t0 < 10000) {
        st = sf_json_request(NULL, p, "GET", path, NULL, NULL, NULL, &r);
        if (st == 200)
            break;
        tu_sleep_ms(50);
    }
    SF_ASSERT(st == 200 && sf_json_int(r.json, "remaining", -1) == want,
              "after Redis %s: %s (remaining %lld expected)", what, sf_resp_summary(&r), want);
    sf_resp_free(&r);
}

static void test_redis_outage(void **state)
{
    (void)state;
    /* A Redis of its own, its data kept across a restart (append-only file). */
    const char *redis_args[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    rf_server *srv = rf_start(redis_args);
    SF_ASSERT(srv != NULL, "%s", "redis-server did not start");
    const char *args[] = {"--threads", "2", "--status-refresh-ms", "100", "--redis-timeout-ms",
                          "500",       NULL};
    sf_service *s = sf_start(rf_url(srv), args);
    SF_ASSERT(s != NULL, "%s", "inventoryd did not start");
    int p = sf_port(s);
    char sku[64], path[160];
    tu_unique_name(sku, sizeof sku, "outage");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    SF_PUT_SKU(p, NULL, sku, 50, 4);
    sf_resp r = {0};
    SF_ASSERT_EQ(sf_order(NULL, p, sku, 1, &r), 201);
    sf_resp_free(&r);
    outage_recovers(p, path, 49, "up");

    /* Down: the refresh fails at once (connection refused), every GET is a 503. */
    double fail0 = sf_metric(p, "inventory_status_refresh_failures_total");
    SF_ASSERT(rf_halt(srv, SIGTERM) == 0, "%s", "redis-server did not stop");
    tu_sleep_ms(ST_REFRESH_MS + 20);
    for (int i = 0; i < 3; i++)
        outage_get(p, path, "down");
    double fail1 = sf_metric(p, "inventory_status_refresh_failures_total");
    SF_ASSERT(fail1 - fail0 >= 1, "refresh failures %.0f -> %.0f while Redis was down", fail0,
              fail1);
    SF_ASSERT(rf_restart(srv) == 0, "%s", "redis-server did not restart");
    outage_recovers(p, path, 49, "restarted");

    /* Hung (SIGSTOP): the refresh waits for --redis-timeout-ms, then 503, not a hang. */
    tu_sleep_ms(ST_REFRESH_MS + 20);
    SF_ASSERT(rf_pause(srv) == 0, "%s", "redis-server could not be paused");
    double fail2 = sf_metric(p, "inventory_status_refresh_failures_total");
    outage_get(p, path, "paused");
    outage_get(p, path, "paused");
    double fail3 = sf_metric(p, "inventory_status_refresh_failures_total");
    SF_ASSERT(rf_resume(srv) == 0, "%s", "redis-server could not be resumed");
    SF_ASSERT(fail3 - fail2 >= 1, "refresh failures %.0f -> %.0f while Redis was hung", fail2,
              fail3);
    outage_recovers(p, path, 49, "resumed");
    SF_ASSERT_EQ(sf_order(NULL, p, sku, 1, &r), 201);
    sf_resp_free(&r);
    tu_sleep_ms(ST_REFRESH_MS + ST_MARGIN_MS);
    outage_recovers(p, path, 48, "resumed, after an order");
    SF_ASSERT(sf_stop(s) == 0, "%s", "inventoryd did not exit cleanly");
    rf_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staleness_bound),
        cmocka_unit_test(test_shared_refresh),
        cmocka_unit_test(test_consistency_across_put_and_restock),
        cmocka_unit_test(test_http_caching),
        cmocka_unit_test(test_unknown_bad_and_deleted),
        cmocka_unit_test(test_redis_outage),
        cmocka_unit_test(test_cluster_staleness_and_consistency),
    };
    /* IT_STATUS_FILTER: a cmocka pattern of the tests to run (e.g. "test_http_*") */
    const char *filter = getenv("IT_STATUS_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
