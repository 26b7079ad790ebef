/*
 * The waiting room's state in Redis (issue 32, SPEC §16; docs/design.md "The waiting room"),
 * driven through its C API (service/src/store/gate_store.h) on a real redis-server, without
 * inventoryd (but for the DELETE/PUT test): the scripts as the binary sends them, by SHA, on
 * lockcore asynchronous clients on one event loop. The SKU's rules are written into its meta as
 * a PUT/PATCH writes them (rules_table.h's fields). What is checked:
 *   - FIFO: 5,000 joins from 4 connections at once: admission order = join order (0 inversions),
 *     each ticket's number = its place's rank = its seq - 1;
 *   - the rate: admitted over a 3 s run within ±5 % of rate × elapsed, elapsed on Redis's clock
 *     (the steps' own now_ms), so a loaded machine's late ticks change nothing but the count's
 *     granularity (a gap over a second is a precondition missed: the run is made again);
 *   - the budget (stock 100, k 150): never more than 150 live; sold out with nothing admitted;
 *     50 units back with no live ticket: exactly 75 admitted; fin_seen: a ticket used between the
 *     status read and the step is not budget twice; queue_max_active;
 *   - pause: nothing admitted while paused, no burst beyond one second's worth after, every place
 *     kept; expired live tickets leave live and fin counts them; a join twice is the same place;
 *     gate_used is idempotent;
 *   - the fair start: 50,000 joins before it (pipelined), then the start: the ranks are a
 *     permutation, |Spearman ρ| between join seq and rank < 0.02, each score recomputed in C
 *     (OpenSSL SHA-1) from the published seed with the documented formula, the first join after
 *     it behind all of them; the start step's own Redis time (SLOWLOG) is printed;
 *   - with --redis-replica-acks a join is answered once its place is on the replica;
 *   - a DELETE of the SKU (inventoryd) deletes the gate's keys, a PUT keeps them;
 *   - the four calls on a 3-master Redis Cluster (one slot: part "cluster", heavy).
 * Run times (the 2-core machine, load average 8): it_gate_store ~13 s in all (refusals 0.01 s,
 * FIFO 0.5 s, rate 3.1 s, budget 0.2 s, max_active 0.1 s, pause 3.3 s, tickets 1.1 s, fair start
 * 3-10 s (the 50,000 joins), replica 1.5 s, DELETE/PUT 1.2 s); it_gate_store_cluster ~3 s.
 * IT_GATE_STORE_LONG=1 makes the FIFO test 50,000 joins and the rate run 10 s (~40 s in all).
 * Also printed: Redis's own time per join and per place read (INFO commandstats).
 */
#include "svc_test.h"

#include <math.h>
#include <strings.h>
#include <time.h>

#include <event2/event.h>
#include <openssl/sha.h>

#include "config.h"
#include "gate_store.h"
#include "store.h"
#include "store_scripts.h"

#define GS_CONNS 4

static struct event_base *gs_base;
static struct store *gs_store;
static lc_async_client *gs_lc[GS_CONNS];
static cf_cluster *gs_cl; /* the cluster test's, stopped by the group teardown when left */

static int gs_long(void)
{
    const char *v = getenv("IT_GATE_STORE_LONG");
    return v && *v && strcmp(v, "0") != 0;
}

/* Clients on url (a redis:// or redis-cluster:// URL), with a deadline long enough for the
 * 50,000 pipelined joins. */
static void gs_clients(const char *url)
{
    lc_client_opts o;
    lc_client_opts_init(&o);
    o.command_timeout_ms = 30000;
    for (int i = 0; i < GS_CONNS; i++) {
        lc_async_client_free(gs_lc[i]);
        gs_lc[i] = NULL;
        SF_ASSERT(lc_async_client_new(gs_base, url, &o, &gs_lc[i]) == LC_OK, "client on %s", url);
    }
}

static int group_setup(void **state)
{
    (void)state;
    if (gf_start(NULL, NULL) != 0)
        return -1;
    gs_base = event_base_new();
    struct config cfg;
    config_defaults(&cfg);
    char err[256];
    if (!gs_base || store_new(&cfg, &gs_store, err, sizeof(err)) != 0) {
        fprintf(stderr, "store_new: %s\n", err);
        return -1;
    }
    gs_clients(rf_url(gf_redis));
    return 0;
}

static int group_teardown(void **state)
{
    for (int i = 0; i < GS_CONNS; i++)
        lc_async_client_free(gs_lc[i]);
    store_free(gs_store);
    if (gs_base)
        event_base_free(gs_base);
    cf_stop(gs_cl);
    return sf_group_teardown(state);
}

/* ---- the calls, made synchronous on the loop ---- */

struct gs_wait {
    int done;
    lc_status st;
    char why[256];
    union {
        struct gate_join j;
        struct gate_state g;
        struct gate_place p;
        struct gate_used u;
    } v;
};

static void gs_note(struct gs_wait *w, lc_status st, const char *why, const void *p, size_t n)
{
    w->done = 1;
    w->st = st;
    snprintf(w->why, sizeof(w->why), "%s", why ? why : "");
    if (p)
        memcpy(&w->v, p, n);
}
static void on_join(void *arg, lc_status st, const char *why, const struct gate_join *j)
{
    gs_note(arg, st, why, j, sizeof(*j));
}
static void on_state(void *arg, lc_status st, const char *why, const struct gate_state *g)
{
    gs_note(arg, st, why, g, sizeof(*g));
}
static void on_place(void *arg, lc_status st, const char *why, const struct gate_place *p)
{
    gs_note(arg, st, why, p, sizeof(*p));
}
static void on_used(void *arg, lc_status st, const char *why, const struct gate_used *u)
{
    gs_note(arg, st, why, u, sizeof(*u));
}

static void gs_run(const int *done)
{
    while (!*done)
        SF_ASSERT(event_base_loop(gs_base, EVLOOP_ONCE) == 0, "%s", "the loop");
}

static struct gate_join gs_join(const char *sku, const char *user)
{
    struct gs_wait w = {0};
    gate_store_join(gs_store, gs_lc[0], NULL, sku, user, on_join, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK, "join %s: %s", user, w.why);
    return w.v.j;
}

static struct gate_state gs_admit(const char *sku, long long remaining, long long reserved,
                                  long long fin_seen)
{
    struct gs_wait w = {0};
    gate_store_admit(gs_store, gs_lc[0], NULL, sku, remaining, reserved, fin_seen, on_state, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK, "admit: %s", w.why);
    SF_ASSERT_EQ(w.v.g.code, STORE_GATE_OK);
    return w.v.g;
}

static struct gate_place gs_place(const char *sku, const char *user)
{
    struct gs_wait w = {0};
    gate_store_place(gs_store, gs_lc[0], NULL, sku, user, on_place, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK, "place %s: %s", user, w.why);
    return w.v.p;
}

static struct gate_used gs_used(const char *sku, const char *user, const char *order)
{
    struct gs_wait w = {0};
    gate_store_used(gs_store, gs_lc[0], NULL, sku, user, order, on_used, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK, "used %s: %s", user, w.why);
    return w.v.u;
}

/* n joins users[0..n) on connection i % GS_CONNS of each, all in flight at once; out[i] their
 * answers. */
struct gs_many {
    struct gate_join *out;
    int left;
    int failed;
};
struct gs_one {
    struct gs_many *m;
    int i;
};
static void on_many(void *arg, lc_status st, const char *why, const struct gate_join *j)
{
    struct gs_one *o = arg;
    if (st != LC_OK) {
        if (!o->m->failed)
            fprintf(stderr, "join %d: %s\n", o->i, why);
        o->m->failed++;
    } else {
        o->m->out[o->i] = *j;
    }
    o->m->left--;
}
static void gs_join_many(const char *sku, char (*users)[16], int n, struct gate_join *out)
{
    struct gs_many m = {out, n, 0};
    struct gs_one *ones = calloc((size_t)n, sizeof(*ones));
    SF_ASSERT(ones != NULL, "%s", "memory");
    for (int i = 0; i < n; i++) {
        ones[i] = (struct gs_one){&m, i};
        gate_store_join(gs_store, gs_lc[i % GS_CONNS], NULL, sku, users[i], on_many, &ones[i]);
    }
    while (m.left > 0)
        SF_ASSERT(event_base_loop(gs_base, EVLOOP_ONCE) == 0, "%s", "the loop");
    free(ones);
    SF_ASSERT_EQ(m.failed, 0);
}

/* ---- Redis helpers ---- */

static long long gs_num(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long gs_num(const char *fmt, ...)
{
    redisContext *c = rf_connect(gf_redis);
    SF_ASSERT(c != NULL, "%s", "connect");
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    SF_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt, r && r->str ? r->str : "");
    long long v = r->type == REDIS_REPLY_INTEGER  ? r->integer
                  : r->type == REDIS_REPLY_STRING ? atoll(r->str)
                                                  : -1;
    freeReplyObject(r);
    return v;
}

static long long gs_now(void)
{
    redisReply *r = rf_command(gf_redis, "TIME");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY, "%s", "TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* A SKU of one segment with a waiting room: rate, max_active, ttl, pct, fifo, paused, start
 * written as a PUT writes them. */
static void gs_sku(const char *sku, long long rate, long long active, long long ttl, long long pct,
                   int fifo, int paused, long long start)
{
    gs_num("HSET inv:2:{%s}:meta version 1 segments 1 stock 1000 state r hwm 1 q_rate %lld "
           "q_active %lld q_ttl %lld q_pct %lld q_fifo %d q_paused %d sale_start %lld",
           sku, rate, active, ttl, pct, fifo, paused, start);
}

static void gs_users(char (*users)[16], int n, const char *prefix)
{
    for (int i = 0; i < n; i++)
        snprintf(users[i], 16, "%s%06d", prefix, i);
}

static void gs_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Redis's own time per EVALSHA since the last CONFIG RESETSTAT (µs; INFO commandstats), and
 * their number in *calls. */
static double gs_evalsha_us(long long *calls)
{
    char info[8192] = "";
    SF_ASSERT(rf_string(gf_redis, info, sizeof info, "INFO commandstats") == 1, "%s", "INFO");
    const char *p = strstr(info, "cmdstat_evalsha:calls=");
    double per = 0;
    *calls = 0;
    if (p)
        SF_ASSERT(sscanf(p, "cmdstat_evalsha:calls=%lld,usec=%*d,usec_per_call=%lf", calls, &per) ==
                      2,
                  "%s", p);
    return per;
}

/* ---- the tests ---- */

/* Unknown SKU, no waiting room, damaged input: refused with nothing written. Well under 1 s. */
static void test_refusals(void **state)
{
    (void)state;
    struct gs_wait w = {0};
    gate_store_join(gs_store, gs_lc[0], NULL, "nosku", "u1", on_join, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK && w.v.j.code == STORE_GATE_NO_SKU, "join: %d %s", w.st, w.why);
    gs_sku("plain", 0, 0, 0, 0, 0, 0, 0);
    memset(&w, 0, sizeof(w));
    gate_store_join(gs_store, gs_lc[0], NULL, "plain", "u1", on_join, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK && w.v.j.code == STORE_GATE_NO_ROOM, "join: %d %s", w.st, w.why);
    memset(&w, 0, sizeof(w));
    gate_store_admit(gs_store, gs_lc[0], NULL, "plain", 5, 0, 0, on_state, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK && w.v.g.code == STORE_GATE_NO_ROOM, "admit: %d %s", w.st, w.why);
    gs_sku("gated", 100, 0, 0, 0, 0, 0, 0);
    memset(&w, 0, sizeof(w));
    gate_store_admit(gs_store, gs_lc[0], NULL, "gated", -1, 0, 0, on_state, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_EREDIS, "a negative remaining: %d %s", w.st, w.why);
    gs_num("HSET inv:2:{gated}:meta q_rate 1e3");
    memset(&w, 0, sizeof(w));
    gate_store_join(gs_store, gs_lc[0], NULL, "gated", "u1", on_join, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_EREDIS && strstr(w.why, "damaged"), "damaged: %d %s", w.st, w.why);
    SF_ASSERT_EQ(gs_num("EXISTS inv:2:{gated}:q inv:2:{gated}:q:line inv:2:{plain}:q"), 0);
    SF_ASSERT_EQ(gs_used("gated", "u1", "o1").code, STORE_GATE_USED_NONE);
}

/* FIFO across connections: 5,000 joins (50,000 long) from 4 connections at once, then
 * admission steps: each ticket's number is its place's seq - 1, each step admits the places
 * right after the last one's, 0 inversions. ~3 s. */
static void test_fifo_across_connections(void **state)
{
    (void)state;
    int n = gs_long() ? 50000 : 5000;
    gs_sku("fifo", 20000, 0, 600, 0, 1, 0, 0);
    char(*users)[16] = calloc((size_t)n, 16);
    struct gate_join *j = calloc((size_t)n, sizeof(*j));
    int *step = calloc((size_t)n, sizeof(*step));
    SF_ASSERT(users && j && step, "%s", "memory");
    gs_users(users, n, "f");
    gs_num("CONFIG RESETSTAT");
    gs_join_many("fifo", users, n, j);
    long long calls;
    double us = gs_evalsha_us(&calls);
    fprintf(stderr, "FIFO: a join costs Redis %.1f us (%lld joins)\n", us, calls);
    /* seq: a permutation of 1..n, increasing on each connection in the order sent */
    char *seen = calloc((size_t)n + 1, 1);
    for (int i = 0; i < n; i++) {
        SF_ASSERT(j[i].code == STORE_GATE_OK && j[i].seq >= 1 && j[i].seq <= n && !seen[j[i].seq],
                  "join %d: code %d seq %lld", i, j[i].code, j[i].seq);
        seen[j[i].seq] = 1;
        SF_ASSERT_EQ(j[i].rank, j[i].seq - 1);
        if (i >= GS_CONNS)
            SF_ASSERT(j[i].seq > j[i - GS_CONNS].seq, "connection order at %d", i);
    }
    free(seen);
    /* admission steps until everyone is in */
    long long fin = 0, served = 0;
    int steps = 0;
    while (served < n) {
        gs_sleep_ms(20);
        struct gate_state g = gs_admit("fifo", 1000000, 0, fin);
        fin = g.fin;
        SF_ASSERT(g.served >= served && g.served - served == g.admitted, "step %d", steps);
        served = g.served;
        steps++;
        SF_ASSERT(steps < 100000, "%s", "admission stalled");
        /* every place of rank < served is admitted now: record the step that first saw it */
        redisReply *r = rf_command(gf_redis, "HGETALL inv:2:{fifo}:q:adm");
        SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY, "%s", "HGETALL");
        SF_ASSERT_EQ((long long)r->elements / 2, served);
        freeReplyObject(r);
        for (int i = 0; i < n; i++)
            if (!step[i] && j[i].seq - 1 < served)
                step[i] = steps;
    }
    /* each ticket's number is the place's rank (= seq - 1) */
    redisReply *r = rf_command(gf_redis, "HGETALL inv:2:{fifo}:q:adm");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && (int)r->elements == 2 * n, "%s", "adm");
    long long *num_of = calloc((size_t)n, sizeof(*num_of));
    for (size_t e = 0; e < r->elements; e += 2) {
        int i = atoi(r->element[e]->str + 1);
        num_of[i] = atoll(r->element[e + 1]->str);
    }
    freeReplyObject(r);
    long long inversions = 0;
    int *by_seq = calloc((size_t)n, sizeof(*by_seq)); /* the step of the place of seq s + 1 */
    for (int i = 0; i < n; i++) {
        SF_ASSERT(num_of[i] == j[i].seq - 1, "user %d: ticket %lld, seq %lld", i, num_of[i],
                  j[i].seq);
        by_seq[j[i].seq - 1] = step[i];
    }
    /* an inversion: a later join admitted in an earlier step than an earlier join */
    int worst = 0;
    for (int s = 0; s < n; s++) {
        if (by_seq[s] < worst)
            inversions++;
        worst = by_seq[s] > worst ? by_seq[s] : worst;
    }
    fprintf(stderr, "FIFO: %d joins on %d connections, %d admission steps, %lld inversions\n", n,
            GS_CONNS, steps, inversions);
    SF_ASSERT_EQ(inversions, 0);
    SF_ASSERT(steps > 1, "%s", "more than one step (the order across steps is what is checked)");
    free(by_seq);
    free(num_of);
    free(users);
    free(j);
    free(step);
}

/* One run of the rate test: ticks every 100 ms for run_ms (Redis's clock). 0 proved, 1 when a
 * gap between two steps passed a second (the allowance's cap: the machine stalled). */
static int rate_run(const char *sku, long long rate, long long run_ms, long long *admitted,
                    long long *elapsed)
{
    struct gate_state first = gs_admit(sku, 1000000, 0, 0), g = first, prev = first;
    while (g.now_ms - first.now_ms < run_ms) {
        gs_sleep_ms(100);
        g = gs_admit(sku, 1000000, 0, g.fin);
        if (g.now_ms - prev.now_ms >= 1000) {
            fprintf(stderr, "rate: a %lld ms gap between steps: run again\n",
                    (long long)(g.now_ms - prev.now_ms));
            return 1;
        }
        SF_ASSERT(g.length - g.served > 0, "%s", "the line ran dry: the rate was not the limit");
        prev = g;
    }
    (void)rate;
    *admitted = g.served - first.served;
    *elapsed = g.now_ms - first.now_ms;
    return 0;
}

/* The rate: 200/s over 3 s (10 s long) on Redis's clock, within ±5 % (plus one for the carry's
 * granularity). ~3.5 s. */
static void test_rate(void **state)
{
    (void)state;
    long long rate = 200, run_ms = gs_long() ? 10000 : 3000;
    int n = (int)(rate * run_ms / 1000 * 2 + 1000);
    gs_sku("rate", rate, 0, 600, 0, 1, 0, 0);
    char(*users)[16] = calloc((size_t)n, 16);
    struct gate_join *j = calloc((size_t)n, sizeof(*j));
    SF_ASSERT(users && j, "%s", "memory");
    gs_users(users, n, "r");
    gs_join_many("rate", users, n, j);
    long long admitted = 0, elapsed = 0;
    int tries = 0;
    while (rate_run("rate", rate, run_ms, &admitted, &elapsed) != 0) {
        SF_ASSERT(++tries < 5, "%s", "no run without a stall of a second");
        gs_num("DEL inv:2:{rate}:q:adm inv:2:{rate}:q:live");
        gs_num("HSET inv:2:{rate}:q served 0 issued 0 fin 0 carry 0");
    }
    double want = (double)rate * (double)elapsed / 1000.0;
    fprintf(stderr, "rate: %lld admitted in %lld ms of Redis time, %.1f expected (%+.2f %%)\n",
            admitted, elapsed, want, 100.0 * ((double)admitted - want) / want);
    SF_ASSERT(fabs((double)admitted - want) <= 0.05 * want + 1, "%lld admitted, %.1f expected",
              admitted, want);
    free(users);
    free(j);
}

/* The budget, k 150 on stock 100: at most 150 live; sold out admits nothing; 50 units back with
 * no live ticket: exactly 75 more; fin_seen: a ticket used between the read and the step is not
 * budget twice. Under 1 s. */
static void test_budget(void **state)
{
    (void)state;
    gs_sku("bud", 100000, 0, 600, 150, 1, 0, 0);
    int n = 1000;
    char(*users)[16] = calloc((size_t)n, 16);
    struct gate_join *j = calloc((size_t)n, sizeof(*j));
    gs_users(users, n, "b");
    gs_join_many("bud", users, n, j);
    struct gate_state g = gs_admit("bud", 100, 0, 0);
    for (int i = 0; i < 20; i++) {
        gs_sleep_ms(5);
        g = gs_admit("bud", 100, 0, g.fin);
        SF_ASSERT(g.live <= 150 && g.issued <= 150, "live %lld issued %lld", g.live, g.issued);
    }
    SF_ASSERT_EQ(g.live, 150);
    SF_ASSERT_EQ(g.served, 150);
    /* the users by place (the joins came from 4 connections at once) */
    const char **by_rank = calloc((size_t)n, sizeof(*by_rank));
    for (int i = 0; i < n; i++)
        by_rank[j[i].rank] = users[i];
    /* fin_seen: the read said 100 left, then a ticket was used (its unit sold, 99 left): with
     * the fin the read was sent after, nothing is admitted; the fresh read neither */
    long long fin_seen = g.fin;
    SF_ASSERT_EQ(gs_used("bud", by_rank[0], "order-0").code, STORE_GATE_USED_DONE);
    g = gs_admit("bud", 100, 0, fin_seen);
    SF_ASSERT_EQ(g.admitted, 0);
    SF_ASSERT_EQ(g.fin, fin_seen + 1);
    g = gs_admit("bud", 99, 0, g.fin);
    SF_ASSERT_EQ(g.admitted, 0);
    /* the other 149 tickets end (99 orders, 50 given up: marked as their expiry would); the
     * stock is gone, no holds: sold out, nothing admitted */
    for (int i = 1; i < 150; i++) {
        char order[32];
        snprintf(order, sizeof(order), "order-%d", i);
        SF_ASSERT_EQ(gs_used("bud", by_rank[i], order).code, STORE_GATE_USED_DONE);
    }
    g = gs_admit("bud", 0, 0, g.fin);
    SF_ASSERT_EQ(g.sold_out, 1);
    SF_ASSERT_EQ(g.admitted, 0);
    SF_ASSERT_EQ(g.live, 0);
    SF_ASSERT_EQ(g.fin, 150);
    g = gs_admit("bud", 0, 0, g.fin);
    SF_ASSERT_EQ(g.admitted, 0);
    /* holds still there (reserved 3): not sold out yet, nothing admitted either */
    g = gs_admit("bud", 0, 3, g.fin);
    SF_ASSERT(g.sold_out == 0 && g.admitted == 0, "sold_out %d admitted %lld", g.sold_out,
              g.admitted);
    /* 50 units back (holds expired, orders cancelled): exactly 75 admitted, then no more */
    long long total = 0;
    for (int i = 0; i < 10; i++) {
        gs_sleep_ms(5);
        g = gs_admit("bud", 50, 0, g.fin);
        total += g.admitted;
    }
    SF_ASSERT_EQ(total, 75);
    SF_ASSERT_EQ(g.live, 75);
    SF_ASSERT_EQ(g.served, 225);
    free(by_rank);
    free(users);
    free(j);
}

/* queue_max_active 10: never more than 10 live; 3 used: exactly 3 more. Well under 1 s. */
static void test_max_active(void **state)
{
    (void)state;
    gs_sku("act", 100000, 10, 600, 0, 1, 0, 0);
    char users[100][16];
    struct gate_join j[100];
    gs_users(users, 100, "a");
    gs_join_many("act", users, 100, j);
    struct gate_state g = gs_admit("act", 100000, 0, 0);
    for (int i = 0; i < 10; i++) {
        gs_sleep_ms(5);
        g = gs_admit("act", 100000, 0, g.fin);
        SF_ASSERT(g.live <= 10, "live %lld", g.live);
    }
    SF_ASSERT_EQ(g.live, 10);
    for (int i = 0, used = 0; used < 3; i++) { /* three of the admitted */
        if (j[i].rank < 10) {
            SF_ASSERT_EQ(gs_used("act", users[i], "o").code, STORE_GATE_USED_DONE);
            used++;
        }
    }
    for (int i = 0; i < 5; i++) {
        gs_sleep_ms(5);
        g = gs_admit("act", 100000, 0, g.fin);
    }
    SF_ASSERT_EQ(g.served, 13);
    SF_ASSERT_EQ(g.live, 10);
}

/* Pause: nothing admitted while paused (over 1.5 s of steps, and after 1.2 s without any), each
 * place kept; after the resume the first step admits at most one second's worth. ~3.5 s. */
static void test_pause(void **state)
{
    (void)state;
    long long rate = 50;
    gs_sku("pau", rate, 0, 600, 0, 1, 0, 0);
    char users[400][16];
    struct gate_join j[400];
    gs_users(users, 400, "p");
    gs_join_many("pau", users, 400, j);
    struct gate_state g = gs_admit("pau", 100000, 0, 0);
    gs_sleep_ms(200);
    g = gs_admit("pau", 100000, 0, g.fin);
    long long before = g.served;
    SF_ASSERT(before > 0, "%s", "admitting before the pause");
    gs_num("HSET inv:2:{pau}:meta q_paused 1");
    long long t0 = g.now_ms;
    while (g.now_ms - t0 < 1500) {
        gs_sleep_ms(100);
        g = gs_admit("pau", 100000, 0, g.fin);
        SF_ASSERT(g.paused == 1 && g.admitted == 0, "paused: admitted %lld", g.admitted);
    }
    /* resumed: no burst beyond what the time since the last step allows */
    gs_num("HSET inv:2:{pau}:meta q_paused 0");
    gs_sleep_ms(300);
    long long last = g.now_ms;
    g = gs_admit("pau", 100000, 0, g.fin);
    SF_ASSERT(g.admitted <= rate * (g.now_ms - last) / 1000 + 1,
              "first step after the resume: %lld admitted in %lld ms", g.admitted,
              (long long)(g.now_ms - last));
    /* paused with no step at all for 1.2 s, then resumed: at most one second's worth */
    gs_num("HSET inv:2:{pau}:meta q_paused 1");
    g = gs_admit("pau", 100000, 0, g.fin);
    gs_sleep_ms(1200);
    gs_num("HSET inv:2:{pau}:meta q_paused 0");
    g = gs_admit("pau", 100000, 0, g.fin);
    SF_ASSERT(g.admitted <= rate, "%lld admitted at once after a pause", g.admitted);
    /* every place kept: the same rank as joined */
    SF_ASSERT_EQ(gs_num("ZCARD inv:2:{pau}:q:line"), 400);
    for (int i = 0; i < 400; i += 37) {
        struct gate_place p = gs_place("pau", users[i]);
        SF_ASSERT(p.placed && p.rank == j[i].rank, "user %d: rank %lld, joined %lld", i, p.rank,
                  j[i].rank);
    }
}

/* A join twice is the same place; tickets expire out of live into fin; gate_used idempotent
 * (and on an expired ticket counts nothing again). ~1.5 s. */
static void test_places_tickets_used(void **state)
{
    (void)state;
    gs_sku("tk", 100000, 0, 1, 0, 1, 0, 0);
    struct gate_join a = gs_join("tk", "alice");
    struct gate_join a2 = gs_join("tk", "alice");
    SF_ASSERT(a.code == STORE_GATE_OK && a2.code == STORE_GATE_AGAIN, "codes %d %d", a.code,
              a2.code);
    SF_ASSERT(a2.rank == a.rank && a2.seq == a.seq, "%s", "the same place");
    char users[5][16];
    struct gate_join j[5];
    gs_users(users, 5, "t");
    gs_join_many("tk", users, 5, j);
    struct gate_state g = gs_admit("tk", 1000, 0, 0);
    gs_sleep_ms(20);
    g = gs_admit("tk", 1000, 0, g.fin);
    SF_ASSERT_EQ(g.live, 6);
    struct gate_place p = gs_place("tk", "alice");
    long long n = -1, exp = 0;
    SF_ASSERT(sscanf(p.adm, "%lld:%lld", &n, &exp) == 2 && n == 0, "alice: %s", p.adm);
    SF_ASSERT(exp > g.now_ms && exp <= g.now_ms + 1000, "exp %lld now %lld", exp,
              (long long)g.now_ms);
    /* used: once */
    SF_ASSERT_EQ(gs_used("tk", "alice", "order-a").code, STORE_GATE_USED_DONE);
    struct gate_used u = gs_used("tk", "alice", "order-b");
    SF_ASSERT(u.code == STORE_GATE_USED_ALREADY && strcmp(u.order, "order-a") == 0, "%d %s", u.code,
              u.order);
    SF_ASSERT_EQ(gs_num("HGET inv:2:{tk}:q fin"), 1);
    SF_ASSERT_EQ(gs_num("ZCARD inv:2:{tk}:q:live"), 5);
    /* the other five expire: out of live, counted in fin once */
    while (gs_now() <= exp)
        gs_sleep_ms(50);
    g = gs_admit("tk", 1000, 0, g.fin);
    SF_ASSERT_EQ(g.live, 0);
    SF_ASSERT_EQ(g.fin, 6);
    p = gs_place("tk", "t000001");
    SF_ASSERT(p.placed && strchr(p.adm, ':') && strncmp(p.adm, "used:", 5) != 0, "%s", p.adm);
    /* an order made just before the expiry, marked after it: no second count */
    SF_ASSERT_EQ(gs_used("tk", "t000001", "order-late").code, STORE_GATE_USED_DONE);
    SF_ASSERT_EQ(gs_num("HGET inv:2:{tk}:q fin"), 6);
    p = gs_place("tk", "nobody");
    SF_ASSERT(!p.placed && p.rank == -1 && p.adm[0] == '\0', "%s", "no place");
}

/* The shuffle key of the fair start (docs/design.md "The fair start"): the first 13 hex digits
 * of SHA-1(seed .. user) as an integer. */
static long long gs_shuffle_key(const char *seed, const char *user)
{
    char in[128];
    int len = snprintf(in, sizeof(in), "%s%s", seed, user);
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)in, (size_t)len, md);
    unsigned long long v = 0;
    for (int i = 0; i < 6; i++)
        v = v << 8 | md[i];
    return (long long)(v << 4 | md[6] >> 4); /* 13 hex digits: 52 bits */
}

/* The longest EVAL/EVALSHA in Redis's slow log (µs; the log set to record every command). */
static long long gs_slowest_eval(void)
{
    redisReply *sl = rf_command(gf_redis, "SLOWLOG GET 128");
    long long us = 0;
    for (size_t i = 0; sl && sl->type == REDIS_REPLY_ARRAY && i < sl->elements; i++) {
        const redisReply *e = sl->element[i], *args = e->element[3];
        if (args->elements > 0 && strncasecmp(args->element[0]->str, "EVAL", 4) == 0 &&
            e->element[2]->integer > us)
            us = e->element[2]->integer;
    }
    freeReplyObject(sl);
    return us;
}

/* The fair start: 50,000 joins before it (pipelined, 4 connections), then the start (the sale
 * start moved to now, as a PATCH does): ranks a permutation, |Spearman ρ| < 0.02 against the join
 * seq, each score the published seed's key (ties by user id), the first join after the start
 * behind all; the shuffle's bounded steps' own time from SLOWLOG (each one script of at most
 * STORE_GATE_SHUFFLE_STEP places). ~5 s. */
static void test_fair_start(void **state)
{
    (void)state;
    int n = 50000;
    long long start = gs_now() + 3600 * 1000;
    gs_sku("fair", 1000, 0, 600, 0, 0, 0, start);
    char(*users)[16] = calloc((size_t)n, 16);
    struct gate_join *j = calloc((size_t)n, sizeof(*j));
    SF_ASSERT(users && j, "%s", "memory");
    gs_users(users, n, "s");
    gs_join_many("fair", users, n, j);
    for (int i = 0; i < n; i++)
        SF_ASSERT(j[i].code == STORE_GATE_OK && j[i].rank == -1 && j[i].shuffled == 0,
                  "pre-start join %d: code %d rank %lld", i, j[i].code, j[i].rank);
    struct gate_place p = gs_place("fair", users[7]);
    SF_ASSERT(p.placed && p.rank == -1, "%s", "no rank before the start");
    /* before the start: the step admits nothing and publishes no seed */
    struct gate_state g = gs_admit("fair", 100000, 0, 0);
    SF_ASSERT(g.shuffled == 0 && g.admitted == 0 && g.seed[0] == '\0', "%s", "before the start");
    /* the start: now */
    gs_num("HSET inv:2:{fair}:meta sale_start %lld", gs_now());
    gs_num("CONFIG SET slowlog-log-slower-than 0");
    /* the first join after the start (which runs the shuffle's first step): behind all */
    gs_num("SLOWLOG RESET");
    struct gate_join late = gs_join("fair", "late");
    SF_ASSERT(late.code == STORE_GATE_OK && late.rank == n && late.shuffled == 0,
              "late: rank %lld shuffled %d", late.rank, late.shuffled);
    long long worst = gs_slowest_eval(), total = worst;
    int steps = 1;
    /* the shuffle's bounded steps: nothing admitted, no seed published until the last */
    for (;;) {
        gs_num("SLOWLOG RESET");
        g = gs_admit("fair", 100000, 0, g.fin);
        long long us = gs_slowest_eval();
        worst = us > worst ? us : worst;
        total += us;
        steps++;
        if (g.shuffled)
            break;
        SF_ASSERT(g.admitted == 0 && g.seed[0] == '\0', "%s", "admitted during the shuffle");
        SF_ASSERT(steps < 1000, "%s", "the shuffle does not end");
    }
    gs_num("CONFIG SET slowlog-log-slower-than 10000");
    SF_ASSERT(g.shuffled == 1 && strlen(g.seed) == 32, "seed %s", g.seed);
    /* bounded: no script rescored more than STORE_GATE_SHUFFLE_STEP places */
    SF_ASSERT(steps >= n / STORE_GATE_SHUFFLE_STEP, "%d places shuffled in %d steps", n, steps);
    fprintf(stderr,
            "fair start: %d places shuffled in %d steps, %.1f ms of Redis time in all, the "
            "longest step %.1f ms\n",
            n, steps, (double)total / 1000.0, (double)worst / 1000.0);
    /* the line as Redis orders it: each score the seed's key, ordered by (score, user) */
    redisReply *r = rf_command(gf_redis, "ZRANGE inv:2:{fair}:q:line 0 -1 WITHSCORES");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && (int)r->elements == 2 * (n + 1), "%s", "line");
    SF_ASSERT(strcmp(r->element[2 * n]->str, "late") == 0, "%s", "the late join last");
    long long *rank_of = calloc((size_t)n, sizeof(*rank_of));
    for (int i = 0; i < n; i++)
        rank_of[i] = -1;
    long long prev_key = -1;
    const char *prev_user = "";
    for (int k = 0; k < n; k++) {
        const char *u = r->element[2 * k]->str;
        long long score = atoll(r->element[2 * k + 1]->str);
        int i = atoi(u + 1);
        SF_ASSERT(i >= 0 && i < n && rank_of[i] == -1, "rank %d: %s twice", k, u);
        rank_of[i] = k;
        long long key = gs_shuffle_key(g.seed, u);
        SF_ASSERT(score == key, "%s: score %lld, key from the seed %lld", u, score, key);
        SF_ASSERT(key > prev_key || (key == prev_key && strcmp(u, prev_user) > 0),
                  "order at rank %d", k);
        prev_key = key;
        prev_user = u;
    }
    /* Spearman's rho between join seq and rank (both permutations of 0..n-1) */
    double d2 = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)(j[i].seq - 1) - (double)rank_of[i];
        d2 += d * d;
    }
    double rho = 1.0 - 6.0 * d2 / ((double)n * ((double)n * n - 1.0));
    fprintf(stderr, "fair start: Spearman rho(join seq, rank) = %+.4f over %d places\n", rho, n);
    SF_ASSERT(fabs(rho) < 0.02, "rho %f", rho);
    freeReplyObject(r);
    /* a place read costs Redis (a line of 50,001 places) */
    gs_num("CONFIG RESETSTAT");
    for (int i = 0; i < 1000; i++)
        gs_place("fair", users[(i * 7919) % n]);
    long long calls;
    double us = gs_evalsha_us(&calls);
    fprintf(stderr, "fair start: a place read costs Redis %.1f us (%lld reads)\n", us, calls);
    /* a place joined before: its rank now, the same for a second join */
    p = gs_place("fair", users[7]);
    SF_ASSERT(p.placed && p.rank == rank_of[7], "rank %lld, want %lld", p.rank, rank_of[7]);
    struct gate_join again = gs_join("fair", users[7]);
    SF_ASSERT(again.code == STORE_GATE_AGAIN && again.rank == rank_of[7], "%s", "join again");
    late = gs_join("fair", "late"); /* and again: the same place, behind all */
    SF_ASSERT(late.code == STORE_GATE_AGAIN && late.rank == n && late.shuffled == 1,
              "late rank %lld", late.rank);
    /* the admissions follow the shuffled order */
    gs_sleep_ms(50);
    g = gs_admit("fair", 100000, 0, g.fin);
    SF_ASSERT(g.served > 0, "%s", "admitted after the start");
    for (int i = 0; i < n; i += 997) {
        p = gs_place("fair", users[i]);
        SF_ASSERT((p.adm[0] != '\0') == (rank_of[i] < g.served), "user %d rank %lld served %lld", i,
                  rank_of[i], g.served);
    }
    free(rank_of);
    free(users);
    free(j);
}

/* --redis-replica-acks 1: a join is answered once WAIT saw it on the replica (the place is on
 * the replica then); with the replica frozen the join answers LC_EIO, never a place a failover
 * may lose. ~1.5 s (the replica's sync, the frozen replica's 1 s WAIT). */
static void test_join_waits_for_replicas(void **state)
{
    (void)state;
    char port[16];
    snprintf(port, sizeof port, "%d", rf_port(gf_redis));
    const char *args[] = {"--replicaof", "127.0.0.1", port, NULL};
    rf_server *rep = rf_start(args);
    SF_ASSERT(rep != NULL, "%s", "a replica");
    char info[4096] = "";
    for (int i = 0; i < 500 && !strstr(info, "state=online"); i++) {
        if (rf_string(gf_redis, info, sizeof info, "INFO replication") != 1)
            info[0] = '\0';
        gs_sleep_ms(20);
    }
    SF_ASSERT(strstr(info, "state=online") != NULL, "the replica online: %s", info);
    struct config cfg;
    config_defaults(&cfg);
    cfg.redis_replica_acks = 1;
    /* the WAIT's timeout is a quarter of it: 1 s, for a loaded machine (250 ms by default fell
     * short once, with the replica online) */
    cfg.redis_timeout_ms = 4000;
    struct store *st = NULL;
    char err[256];
    SF_ASSERT(store_new(&cfg, &st, err, sizeof(err)) == 0, "store: %s", err);
    gs_sku("rep", 100, 0, 0, 0, 1, 0, 0);
    /* the replica acknowledges writes (the precondition: waited for, never assumed) */
    SF_ASSERT(gs_num("WAIT 1 10000") == 1, "%s", "the replica acknowledges");
    struct gs_wait w = {0};
    gate_store_join(st, gs_lc[0], NULL, "rep", "u1", on_join, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK && w.v.j.code == STORE_GATE_OK, "join: %d %s", w.st, w.why);
    char score[64] = "";
    SF_ASSERT(rf_string(rep, score, sizeof score, "ZSCORE inv:2:{rep}:q:line u1") == 1, "%s",
              "the place on the replica when the join is answered");
    /* the replica frozen: the join's answer says its place is not vouched for */
    SF_ASSERT(rf_pause(rep) == 0, "%s", "SIGSTOP the replica");
    memset(&w, 0, sizeof(w));
    gate_store_join(st, gs_lc[0], NULL, "rep", "u2", on_join, &w);
    gs_run(&w.done);
    rf_resume(rep);
    SF_ASSERT(w.st == LC_EIO && strstr(w.why, "replicas"), "join, replica frozen: %d %s", w.st,
              w.why);
    store_free(st);
    rf_stop(rep);
}

#define DP_KEYS "EXISTS inv:2:{dp}:q inv:2:{dp}:q:line inv:2:{dp}:q:adm inv:2:{dp}:q:live"

/* A DELETE of the SKU (inventoryd) deletes the gate's keys; a PUT keeps them. ~1.5 s. */
static void test_delete_and_put(void **state)
{
    (void)state;
    sf_service *s = sf_start(rf_url(gf_redis), NULL);
    SF_ASSERT(s != NULL, "%s", "inventoryd");
    sf_resp resp = {0};
    SF_ASSERT_EQ(sf_put_sku(sf_port(s), NULL, "dp", 10, 2, &resp), 201);
    sf_resp_free(&resp);
    sf_json_request(NULL, sf_port(s), "PATCH", "/api/v1/skus/dp", NULL, NULL,
                    "{\"queue_rate\":1000}", &resp);
    SF_ASSERT_STATUS(&resp, 200);
    sf_resp_free(&resp);
    SF_ASSERT_EQ(gs_join("dp", "u1").code, STORE_GATE_OK);
    gs_sleep_ms(5);
    struct gate_state g = gs_admit("dp", 10, 0, 0);
    gs_sleep_ms(20);
    g = gs_admit("dp", 10, 0, g.fin);
    SF_ASSERT_EQ(g.live, 1);
    SF_ASSERT_EQ(gs_num(DP_KEYS), 4);
    /* the invariant checker takes the gate's keys (no stray) */
    sf_report rep;
    SF_ASSERT(sf_check_invariants(rf_url(gf_redis), "dp", &rep) == 0 && rep.ok, "%s",
              (sf_report_print("dp", &rep), "invariants with a waiting room"));
    /* a PUT keeps the places */
    int st = sf_json_request(NULL, sf_port(s), "PUT", "/api/v1/skus/dp", NULL, NULL,
                             "{\"stock\":20,\"segments\":2,\"queue_rate\":1000}", &resp);
    SF_ASSERT(st == 200 || st == 201, "PUT again: %d", st);
    sf_resp_free(&resp);
    SF_ASSERT_EQ(gs_num(DP_KEYS), 4);
    struct gate_join again = gs_join("dp", "u1");
    SF_ASSERT(again.code == STORE_GATE_AGAIN && again.rank == 0, "%s", "the place survived");
    /* a DELETE deletes them */
    sf_http(sf_port(s), "DELETE", "/api/v1/skus/dp", NULL, NULL, 0, &resp);
    SF_ASSERT(resp.status == 200 || resp.status == 204, "DELETE: %s", sf_resp_summary(&resp));
    sf_resp_free(&resp);
    SF_ASSERT_EQ(gs_num(DP_KEYS), 0);
    struct gs_wait w = {0};
    gate_store_join(gs_store, gs_lc[0], NULL, "dp", "u1", on_join, &w);
    gs_run(&w.done);
    SF_ASSERT(w.st == LC_OK && w.v.j.code == STORE_GATE_NO_SKU, "join a deleted SKU: %d",
              w.v.j.code);
    SF_ASSERT_EQ(sf_stop(s), 0);
}

/* The four calls on a 3-master Redis Cluster: every key of a gate in one slot, no CROSSSLOT,
 * lockcore routes each script to its master. ~10 s (the cluster's start). */
static void test_on_cluster(void **state)
{
    (void)state;
    gs_cl = cf_start(3, 0);
    SF_ASSERT(gs_cl != NULL, "%s", "a 3-master cluster");
    gs_clients(cf_url(gs_cl, 0));
    const char *skus[3] = {"cl-a", "cl-b", "cl-c"};
    for (int s = 0; s < 3; s++) {
        int at = -1;
        for (int i = 0; i < cf_nodes(gs_cl); i++) {
            /* the meta on its master: ask each node, the one that answers without MOVED */
            redisReply *r = rf_command(cf_node(gs_cl, i),
                                       "HSET inv:2:{%s}:meta version 1 segments 1 stock 10 "
                                       "state r hwm 1 q_rate 1000 q_fifo 1",
                                       skus[s]);
            int ok = r && r->type == REDIS_REPLY_INTEGER;
            freeReplyObject(r);
            if (ok) {
                at = i;
                break;
            }
        }
        SF_ASSERT(at >= 0, "meta of %s written", skus[s]);
        char users[3][16];
        struct gate_join j[3];
        gs_users(users, 3, "c");
        gs_join_many(skus[s], users, 3, j);
        for (int i = 0; i < 3; i++)
            SF_ASSERT(j[i].code == STORE_GATE_OK && j[i].rank == j[i].seq - 1, "%s %d", skus[s], i);
        struct gate_state g = gs_admit(skus[s], 10, 0, 0);
        gs_sleep_ms(20);
        g = gs_admit(skus[s], 10, 0, g.fin);
        SF_ASSERT_EQ(g.served, 3);
        struct gate_place p = gs_place(skus[s], users[2]);
        SF_ASSERT(p.placed && p.rank == j[2].rank && p.adm[0], "%s", "place on the cluster");
        SF_ASSERT_EQ(gs_used(skus[s], users[2], "o").code, STORE_GATE_USED_DONE);
        SF_ASSERT_EQ(gs_used(skus[s], users[2], "o").code, STORE_GATE_USED_ALREADY);
    }
    gs_clients(rf_url(gf_redis));
    cf_stop(gs_cl);
    gs_cl = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_refusals, gf_flush),
        cmocka_unit_test_setup(test_fifo_across_connections, gf_flush),
        cmocka_unit_test_setup(test_rate, gf_flush),
        cmocka_unit_test_setup(test_budget, gf_flush),
        cmocka_unit_test_setup(test_max_active, gf_flush),
        cmocka_unit_test_setup(test_pause, gf_flush),
        cmocka_unit_test_setup(test_places_tickets_used, gf_flush),
        cmocka_unit_test_setup(test_fair_start, gf_flush),
        cmocka_unit_test_setup(test_join_waits_for_replicas, gf_flush),
        cmocka_unit_test_setup(test_delete_and_put, gf_flush),
        cmocka_unit_test(test_on_cluster),
    };
    /* IT_GATE_STORE_PART (ctest runs it_gate_store and it_gate_store_cluster): "cluster" the
     * cluster test alone (ctest's "heavy" lock), "one-redis" the others; unset, every test. */
    const char *part = getenv("IT_GATE_STORE_PART");
    if (part && strcmp(part, "cluster") == 0)
        cmocka_set_test_filter("*cluster*");
    else if (part && strcmp(part, "one-redis") == 0)
        cmocka_set_skip_filter("*cluster*");
    else if (part && *part) {
        fprintf(stderr, "IT_GATE_STORE_PART=%s: cluster or one-redis\n", part);
        return 2;
    }
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
