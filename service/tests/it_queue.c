/*
 * The waiting room's HTTP side (SPEC §16, issue 32; docs/design.md "The instance's gate:
 * admitter and snapshot") against a real redis-server and three real inventoryd processes over
 * HTTP, each with the same --queue-key-file, the user from --user-header X-User (the tests'
 * loopback is a trusted proxy):
 *   - joins across instances get consecutive places in join order (queue_fifo 1); a second join
 *     on another instance answers 200 and the same place; the refusals: no user (401
 *     user_required), unknown SKU (404), a SKU without a room (409 no_waiting_room), an
 *     instance without a key (503), a poll with no place (404);
 *   - proof of work (queue_pow_bits 10): a join without one (403 pow_required), with a junk
 *     one, another user's or another SKU's solved challenge (403 pow_invalid) gets no place; the
 *     user's own, solved from one instance's challenge, joins through another (201, then 200);
 *   - FIFO admission at the rule's rate: 300 joins, rate 50/s: the admission order (on Redis's
 *     clock, from the admission entries) is the join order with 0 inversions, the rate is within
 *     ±5 % of 50/s; every admitted place's poll answers a ticket that ticket_check accepts for
 *     its user and SKU, with its rank; the polls are answered from memory (at most one place
 *     read from Redis per user per instance: inventory_queue_polls_total{from="redis"});
 *   - stock 20, queue_admit_pct 150: never more than 30 live tickets; once the stock is sold,
 *     every place answers sold_out within 1 s, on every instance;
 *   - returned units admit the next in line: 10 holds of 2 s expire (the 5 other tickets ran
 *     out first): the next 15 in line are admitted within 2 s of the holds' expiry;
 *   - pause (PATCH queue_paused 1): no admission on Redis's clock later than 200 ms after the
 *     PATCH's answer, every instance's snapshot says paused; resume: admission continues;
 *   - kill -9 of an instance in the middle of the joins: no place lost, none duplicated (every
 *     user one place, the places 1..N, each user's join again answers its place);
 *   - the fair start: joins before sale_start answer waiting_for_start without a position (no
 *     pre-start rank is cached), after it every instance answers the same permutation 1..N and
 *     one published seed; a join after the start is behind them all.
 *   - on a Redis Cluster of three masters: joins, admission within 150 % of the stock, orders
 *     with the tickets, a ticket twice refused, sold_out on the waiting place, 3 units for 3.
 * About 22 s (the cluster's start ~3 s). IT_QUEUE_LONG=1 runs the rate check with 1,500 joins
 * (about 35 s more).
 */
#include "svc_test.h"
#include "svc_pow.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "ticket.h"

#define QN 3

static sf_service *svc[QN];
static char key_path[256];
static struct ticket_key qkey;

static int group_setup(void **state)
{
    (void)state;
    snprintf(key_path, sizeof key_path, "/tmp/it_queue_key_XXXXXX");
    int fd = mkstemp(key_path);
    if (fd < 0)
        return -1;
    const char *k = "it-queue-key-0123456789abcdef-0123456789abcdef";
    if (write(fd, k, strlen(k)) != (ssize_t)strlen(k)) {
        close(fd);
        return -1;
    }
    close(fd);
    char err[256];
    if (ticket_key_load(&qkey, key_path, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    const char *args[] = {"--threads",
                          "2",
                          "--queue-key-file",
                          key_path,
                          "--user-header",
                          "X-User",
                          "--trusted-proxies",
                          "127.0.0.1/32",
                          "--redis-timeout-ms",
                          "1000",
                          NULL};
    for (int i = 0; i < QN; i++)
        if (!(svc[i] = sf_group_service(args)))
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    unlink(key_path);
    return sf_group_teardown(state);
}

static int qport(int i)
{
    return sf_port(svc[i % QN]);
}

/* PUT sku with stock and the rules (",..." or ""). */
static void q_put(const char *sku, long long stock, const char *rules)
{
    char path[160], body[512];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld,\"segments\":2%s}", stock, rules);
    sf_resp r = {0};
    sf_json_request(NULL, qport(0), "PUT", path, NULL, NULL, body, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

static void q_patch(int i, const char *sku, const char *body)
{
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, qport(i), "PATCH", path, NULL, NULL, body, &r);
    SF_ASSERT(r.status == 200, "PATCH %s: %s", body, sf_resp_summary(&r));
    sf_resp_free(&r);
}

/* method on .../queue (suffix "" or "/info") of sku for user (NULL: no header) on c or port. */
static int q_call(sf_conn *c, int port, const char *method, const char *sku, const char *suffix,
                  const char *user, sf_resp *r)
{
    char path[200], hdr[200];
    snprintf(path, sizeof path, "/api/v1/skus/%s/queue%s", sku, suffix);
    snprintf(hdr, sizeof hdr, "X-User: %s", user ? user : "");
    const char *headers[] = {hdr, NULL};
    const char *const *h = user ? headers : NULL;
    if (c)
        return sf_conn_request(c, method, path, h, NULL, 0, r);
    return sf_http(port, method, path, h, NULL, 0, r);
}

/* A counter of sku's gate (inv:2:{S}:q), 0 when unset. */
static long long q_field(const char *sku, const char *field)
{
    char buf[64] = "";
    if (rf_string(gf_redis, buf, sizeof buf, "HGET inv:2:{%s}:q %s", sku, field) != 1)
        return 0;
    return atoll(buf);
}

/* Redis's clock (ms). */
static long long q_redis_ms(void)
{
    redisReply *rp = rf_command(gf_redis, "TIME");
    long long ms = -1;
    if (rp && rp->type == REDIS_REPLY_ARRAY && rp->elements == 2)
        ms = atoll(rp->element[0]->str) * 1000 + atoll(rp->element[1]->str) / 1000;
    freeReplyObject(rp);
    return ms;
}

static long long q_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void q_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The admission entries of sku: for user i ("<prefix><i>", i < n) its n and admission time
 * (exp - ttl; -1 when not admitted). Returns how many are admitted. */
static int adm_read(const char *sku, const char *prefix, int n, long long ttl_ms, long long *rank,
                    long long *at)
{
    int got = 0;
    for (int i = 0; i < n; i++)
        rank[i] = at[i] = -1;
    redisReply *rp = rf_command(gf_redis, "HGETALL inv:2:{%s}:q:adm", sku);
    SF_ASSERT(rp && rp->type == REDIS_REPLY_ARRAY, "HGETALL adm of %s", sku);
    size_t pl = strlen(prefix);
    for (size_t k = 0; k + 1 < rp->elements; k += 2) {
        const char *u = rp->element[k]->str, *v = rp->element[k + 1]->str;
        if (strncmp(u, prefix, pl) != 0)
            continue;
        int i = atoi(u + pl);
        long long a, e;
        if (i < 0 || i >= n || sscanf(v, "%lld:%lld", &a, &e) != 2)
            continue;
        rank[i] = a;
        at[i] = e - ttl_ms;
        got++;
    }
    freeReplyObject(rp);
    return got;
}

/* ---- what an idle room costs Redis ---- */

/* EVALSHA + EVAL calls in INFO commandstats so far. */
static long long q_script_calls(void)
{
    redisReply *info = rf_command(gf_redis, "INFO commandstats");
    SF_ASSERT(info != NULL && info->type == REDIS_REPLY_STRING, "%s", "INFO commandstats");
    long long n = 0;
    const char *cmds[] = {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    for (int i = 0; i < 2; i++) {
        const char *p = strstr(info->str, cmds[i]);
        n += p ? atoll(p + strlen(cmds[i])) : 0;
    }
    freeReplyObject(info);
    return n;
}

/* An admission step reads the SKU's status in one script on one Redis (lua/status_read.lua,
 * src/sku/status_read.c), not the exact read's settle plus one seg_status.lua per segment: a
 * paused room of 64 segments with a place joined on each instance costs at most 12 script
 * calls per step over 2 s on three instances, the sweepers of this suite's SKUs included
 * (measured 4.2). Before (the exact read: the settle, then seg_status.lua per segment): 36.1.
 * ~3 s. */
static void test_idle_step_cost(void **state)
{
    (void)state;
    const char *sku = "q-idle";
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, qport(0), "PUT", path, NULL, NULL,
                    "{\"stock\":640,\"segments\":64,\"queue_rate\":1,\"queue_fifo\":1,"
                    "\"queue_paused\":1}",
                    &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT: %s", sf_resp_summary(&r));
    sf_resp_free(&r);
    for (int i = 0; i < QN; i++) { /* a place joined on each instance: its admitter steps it */
        char user[32];
        snprintf(user, sizeof user, "idle-%d", i);
        int st = q_call(NULL, qport(i), "POST", sku, "", user, &r);
        SF_ASSERT(st == 201 || st == 200, "join: %s", sf_resp_summary(&r));
        sf_resp_free(&r);
    }
    q_sleep_ms(500); /* every admitter has the SKU */
    double t0 = 0, t1 = 0;
    for (int i = 0; i < QN; i++)
        t0 += sf_metric(qport(i), "inventory_queue_ticks_total");
    long long c0 = q_script_calls();
    q_sleep_ms(2000);
    long long c1 = q_script_calls();
    for (int i = 0; i < QN; i++)
        t1 += sf_metric(qport(i), "inventory_queue_ticks_total");
    double ticks = t1 - t0, per = ticks > 0 ? (double)(c1 - c0) / ticks : 1e9;
    print_message("idle room of 64 segments: %lld script calls in %.0f steps (%.1f per step)\n",
                  c1 - c0, ticks, per);
    SF_ASSERT(ticks >= 10, "only %.0f admission steps in 2 s on %d instances", ticks, QN);
    SF_ASSERT(per <= 12,
              "%.1f script calls per admission step of a 64-segment SKU (want <= 12: "
              "one status_read.lua and gate_admit.lua, the sweepers beside them)",
              per);
}

/* ---- joins: consecutive places, the same place again, the refusals ---- */

static void test_join_places(void **state)
{
    (void)state;
    const char *sku = "q-join";
    q_put(sku, 100, ",\"queue_rate\":1,\"queue_fifo\":1");
    sf_resp r = {0};
    char user[32];
    for (int i = 0; i < 30; i++) {
        snprintf(user, sizeof user, "j%d", i);
        q_call(NULL, qport(i), "POST", sku, "", user, &r);
        SF_ASSERT_STATUS(&r, 201);
        SF_ASSERT_EQ(sf_json_int(r.json, "position", -1), i + 1);
    }
    for (int i = 0; i < 30; i++) {
        snprintf(user, sizeof user, "j%d", i);
        q_call(NULL, qport(i + 1), "POST", sku, "", user, &r);
        SF_ASSERT_STATUS(&r, 200);
        SF_ASSERT_EQ(sf_json_int(r.json, "position", -1), i + 1);
        q_call(NULL, qport(i + 2), "GET", sku, "", user, &r);
        SF_ASSERT_STATUS(&r, 200);
        SF_ASSERT_EQ(sf_json_int(r.json, "position", -1), i + 1);
        const char *st = sf_str(r.json, "state");
        SF_ASSERT(strcmp(st, "waiting") == 0 || strcmp(st, "admitted") == 0, "state %s", st);
    }
    SF_ASSERT_EQ(rf_integer(gf_redis, "ZCARD inv:2:{%s}:q:line", sku), 30);

    q_call(NULL, qport(0), "POST", sku, "", NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "user_required");
    q_call(NULL, qport(0), "GET", sku, "", "nobody", &r);
    SF_ASSERT_ERROR(&r, 404, "not_found");
    q_call(NULL, qport(1), "POST", "q-nosuch", "", "j1", &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    q_call(NULL, qport(2), "GET", "q-nosuch", "", "j1", &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    q_put("q-plain", 10, "");
    q_call(NULL, qport(0), "POST", "q-plain", "", "j1", &r);
    SF_ASSERT_ERROR(&r, 409, "no_waiting_room");
    q_call(NULL, qport(1), "GET", "q-plain", "/info", NULL, &r);
    SF_ASSERT_ERROR(&r, 409, "no_waiting_room");
    /* /info answers the instance's last admission step, at most GATE_STALE_MS (2 s) old: one
     * taken before the last joins may still answer (CI's TSan pass: 27); the next step's must
     * say 30 */
    long long length = -1;
    for (int t = 0; t < 30 && length != 30; t++) {
        if (t)
            q_sleep_ms(100);
        q_call(NULL, qport(2), "GET", sku, "/info", NULL, &r);
        SF_ASSERT_STATUS(&r, 200);
        length = sf_json_int(r.json, "length", -1);
    }
    SF_ASSERT_EQ(length, 30);

    const char *args[] = {"--user-header", "X-User", "--trusted-proxies", "127.0.0.1/32", NULL};
    sf_service *nokey = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(nokey != NULL, "%s", "an instance without --queue-key-file");
    q_call(NULL, sf_port(nokey), "POST", sku, "", "j1", &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    SF_ASSERT(strstr(sf_str(r.json, "message"), "queue-key-file") != NULL, "%s",
              sf_resp_summary(&r));
    SF_ASSERT(sf_log_contains(nokey, "queue_no_key"), "%s", "the warning in the log");
    SF_ASSERT(sf_stop(nokey) == 0, "%s", "exit of the instance without a key");
    sf_resp_free(&r);
}

/* ---- FIFO admission at the rule's rate ---- */

static atomic_int joined; /* joins answered so far (the kill's trigger) */

struct joiner {
    const char *sku;
    const char *prefix;
    int from, to, step; /* users from, from + step, ... < to */
    int kill_skip;      /* instance index to avoid after a failure (-1 none) */
    long long *pos;     /* per user: the place answered */
    atomic_int *fails;
};

static void *join_run(void *arg)
{
    struct joiner *j = arg;
    sf_conn *c[QN];
    for (int i = 0; i < QN; i++)
        c[i] = sf_conn_open(qport(i), 3000);
    sf_resp r = {0};
    char user[32];
    for (int u = j->from; u < j->to; u += j->step) {
        snprintf(user, sizeof user, "%s%d", j->prefix, u);
        int inst = u % QN, ok = 0;
        for (int tries = 0; tries < 2 * QN && !ok; tries++, inst = (inst + 1) % QN) {
            int st = q_call(c[inst], 0, "POST", j->sku, "", user, &r);
            if (st == 201 || st == 200) {
                j->pos[u] = sf_json_int(r.json, "position", -1);
                atomic_fetch_add(&joined, 1);
                ok = 1;
            }
        }
        if (!ok)
            atomic_fetch_add(j->fails, 1);
    }
    sf_resp_free(&r);
    for (int i = 0; i < QN; i++)
        sf_conn_close(c[i]);
    return NULL;
}

/* Joins users prefix0..prefix(n-1) with threads threads; the places into pos. Returns the
 * joins that failed. With a join order by user index (FIFO) when threads is 1. */
static int join_all(const char *sku, const char *prefix, int n, int threads, long long *pos)
{
    pthread_t t[8];
    struct joiner j[8];
    atomic_int fails = 0;
    for (int k = 0; k < threads; k++) {
        j[k] = (struct joiner){sku, prefix, k, n, threads, -1, pos, &fails};
        pthread_create(&t[k], NULL, join_run, &j[k]);
    }
    for (int k = 0; k < threads; k++)
        pthread_join(t[k], NULL);
    return atomic_load(&fails);
}

static void fifo_rate(int n)
{
    const char *sku = "q-fifo";
    const long long rate = 50, ttl = 600;
    char rules[160];
    snprintf(rules, sizeof rules,
             ",\"queue_rate\":%lld,\"queue_fifo\":1,\"queue_ticket_ttl_s\":%lld", rate, ttl);
    q_put(sku, 100000, rules);
    long long *pos = calloc((size_t)n, sizeof(*pos));
    long long *rank = calloc((size_t)n, sizeof(*rank));
    long long *at = calloc((size_t)n, sizeof(*at));
    int *seen = calloc((size_t)n, sizeof(*seen));
    /* one thread: the join order is the user order */
    SF_ASSERT_EQ(join_all(sku, "f", n, 1, pos), 0);
    for (int i = 0; i < n; i++)
        SF_ASSERT(pos[i] == i + 1, "user f%d got place %lld", i, pos[i]);
    double before_redis[QN];
    for (int i = 0; i < QN; i++)
        before_redis[i] = sf_metric(qport(i), "inventory_queue_polls_total{from=\"redis\"}");
    /* every user polls the instance it joined on until admitted, as a browser would */
    sf_conn *c[QN];
    for (int i = 0; i < QN; i++)
        c[i] = sf_conn_open(qport(i), 3000);
    sf_resp r = {0};
    char user[32];
    int admitted = 0;
    long long deadline = q_mono_ms() + (long long)n * 1000 / rate + 10000;
    while (admitted < n && q_mono_ms() < deadline) {
        for (int u = 0; u < n; u++) {
            if (seen[u])
                continue;
            snprintf(user, sizeof user, "f%d", u);
            q_call(c[u % QN], 0, "GET", sku, "", user, &r);
            SF_ASSERT_STATUS(&r, 200);
            const char *st = sf_str(r.json, "state");
            if (strcmp(st, "admitted") != 0) {
                SF_ASSERT(strcmp(st, "waiting") == 0, "user %s: %s", user, sf_resp_summary(&r));
                SF_ASSERT(sf_header(&r, "Retry-After") != NULL, "%s", "Retry-After");
                continue;
            }
            struct ticket t;
            const char *text = sf_str(r.json, "ticket");
            SF_ASSERT(ticket_check(&qkey, text, sku, user, &t) == ERROR_NONE, "ticket %s of %s",
                      text, user);
            SF_ASSERT_EQ(t.n, u);
            SF_ASSERT(ticket_check(&qkey, text, sku, "someone-else", NULL) ==
                          ERROR_TICKET_WRONG_USER,
                      "%s", "the ticket is bound to its user");
            seen[u] = 1;
            admitted++;
            /* the same answer from the other instances: the place read costs each one read */
        }
        q_sleep_ms(100);
    }
    SF_ASSERT(admitted == n, "%d of %d admitted before the deadline", admitted, n);
    for (int i = 0; i < QN; i++) {
        double redis = sf_metric(qport(i), "inventory_queue_polls_total{from=\"redis\"}");
        double users = (n + QN - 1 - i) / QN; /* the users that polled instance i */
        SF_ASSERT(redis - before_redis[i] <= users,
                  "instance %d: %.0f place reads from Redis for "
                  "%.0f users",
                  i, redis - before_redis[i], users);
        SF_ASSERT(sf_metric(qport(i), "inventory_queue_polls_total{from=\"memory\"}") > 0, "%s",
                  "polls from memory");
    }
    double err_sum = 0, err_n = 0;
    for (int i = 0; i < QN; i++) {
        err_sum += sf_metric(qport(i), "inventory_queue_wait_error_seconds_sum");
        err_n += sf_metric(qport(i), "inventory_queue_wait_error_seconds_count");
    }
    SF_ASSERT(err_n >= n / 2, "%.0f estimated waits scored for %d places", err_n, n);
    fprintf(stderr, "it_queue: estimated wait off by %.2f s on average (%.0f places)\n",
            err_sum / err_n, err_n);
    SF_ASSERT_EQ(adm_read(sku, "f", n, ttl * 1000, rank, at), n);
    int inversions = 0;
    long long first = -1, last = -1;
    for (int i = 0; i < n; i++) {
        SF_ASSERT_EQ(rank[i], i);
        for (int k = i + 1; k < n; k++)
            inversions += at[k] < at[i];
    }
    SF_ASSERT_EQ(inversions, 0);
    /* the rate on Redis's clock, from the 10th admission (the first step's start aside) */
    int from = 10;
    first = at[from];
    last = at[n - 1];
    double measured = (double)(n - 1 - from) * 1000.0 / (double)(last - first);
    fprintf(stderr, "it_queue: %d admissions at %.2f/s (rule %lld/s) over %.1f s\n", n, measured,
            rate, (double)(last - first) / 1000.0);
    SF_ASSERT(measured >= rate * 0.95 && measured <= rate * 1.05,
              "admission rate %.2f/s, rule %lld/s", measured, rate);
    for (int i = 0; i < QN; i++)
        sf_conn_close(c[i]);
    sf_resp_free(&r);
    free(pos);
    free(rank);
    free(at);
    free(seen);
}

/* A SKU asking a proof of work (queue_pow_bits 10): a join without one, with a junk one, with
 * another user's solved challenge or another SKU's gets no place (403, the line empty); the
 * user's own solved challenge (asked of one instance, joined through another) gets one, and so
 * does the same answer again (the same place). */
static void q_join_pow(int port, const char *sku, const char *user, const char *pow, sf_resp *r)
{
    char path[200], hdr[200], body[1024];
    snprintf(path, sizeof path, "/api/v1/skus/%s/queue", sku);
    snprintf(hdr, sizeof hdr, "X-User: %s", user);
    const char *headers[] = {hdr, "Content-Type: application/json", NULL};
    snprintf(body, sizeof body, "{\"pow\":%s}", pow);
    sf_http(port, "POST", path, headers, body, strlen(body), r);
}

static void test_proof_of_work(void **state)
{
    (void)state;
    const char *sku = "q-pow", *other = "q-pow-other";
    q_put(sku, 10, ",\"queue_rate\":1,\"queue_fifo\":1,\"queue_pow_bits\":10");
    q_put(other, 10, ",\"queue_rate\":1,\"queue_fifo\":1,\"queue_pow_bits\":10");
    sf_resp r = {0};
    q_call(NULL, qport(0), "POST", sku, "", "miner", &r);
    SF_ASSERT_ERROR(&r, 403, "pow_required");
    q_join_pow(qport(1), sku, "miner", "{\"challenge\":\"p1.x.y.1.10.z\",\"nonce\":\"1\"}", &r);
    SF_ASSERT_ERROR(&r, 403, "pow_invalid");
    char pow_mine[512], pow_thief[512], pow_other[512];
    const char *h_mine[] = {"X-User: miner", NULL}, *h_thief[] = {"X-User: thief", NULL};
    SF_ASSERT_EQ(sp_solve_challenge(qport(0), sku, h_mine, pow_mine, sizeof pow_mine, NULL), 200);
    SF_ASSERT_EQ(sp_solve_challenge(qport(1), sku, h_thief, pow_thief, sizeof pow_thief, NULL),
                 200);
    SF_ASSERT_EQ(sp_solve_challenge(qport(2), other, h_mine, pow_other, sizeof pow_other, NULL),
                 200);
    q_join_pow(qport(1), sku, "miner", pow_thief, &r); /* another user's work */
    SF_ASSERT_ERROR(&r, 403, "pow_invalid");
    q_join_pow(qport(1), sku, "miner", pow_other, &r); /* another SKU's */
    SF_ASSERT_ERROR(&r, 403, "pow_invalid");
    SF_ASSERT_EQ(rf_integer(gf_redis, "ZCARD inv:2:{%s}:q:line", sku), 0);
    q_join_pow(qport(1), sku, "miner", pow_mine, &r);
    SF_ASSERT_STATUS(&r, 201);
    q_join_pow(qport(2), sku, "miner", pow_mine, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT_EQ(rf_integer(gf_redis, "ZCARD inv:2:{%s}:q:line", sku), 1);
    sf_resp_free(&r);
}

/* The walk on a Redis Cluster of three masters (the gate's keys in the SKU's slot, its stock
 * read by the exact read, one batch per master): 5 buyers join, stock 3 at 150 % admits 4 of
 * them; 3 buy with their tickets, a ticket twice is 409 ticket_used, the 4th admitted meets the
 * sold-out SKU and every place answers sold_out; never more units than stock. */
static void q_order(int port, const char *sku, const char *user, const char *ticket, sf_resp *r)
{
    char hdr[200], body[1200];
    snprintf(hdr, sizeof hdr, "X-User: %s", user);
    const char *headers[] = {hdr, "Content-Type: application/json", NULL};
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1,\"ticket\":\"%s\"}", sku, ticket);
    sf_http(port, "POST", "/api/v1/orders", headers, body, strlen(body), r);
}

static void test_cluster_walk(void **state)
{
    (void)state;
    cf_cluster *cl = cf_start(3, 0);
    SF_ASSERT(cl != NULL, "%s", "a 3-master cluster");
    const char *args[] = {"--threads",
                          "2",
                          "--queue-key-file",
                          key_path,
                          "--user-header",
                          "X-User",
                          "--trusted-proxies",
                          "127.0.0.1/32",
                          "--redis-timeout-ms",
                          "1000",
                          NULL};
    sf_service *c = sf_start(cf_url(cl, 3), args);
    SF_ASSERT(c != NULL, "%s", "an instance on the cluster");
    int port = sf_port(c);
    const char *sku = "q-cluster";
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, port, "PUT", path, NULL, NULL,
                    "{\"stock\":3,\"segments\":3,\"queue_rate\":20,\"queue_fifo\":1}", &r);
    SF_ASSERT_STATUS(&r, 201);
    char user[16], tickets[5][TICKET_TEXT_MAX] = {{0}};
    for (int i = 0; i < 5; i++) {
        snprintf(user, sizeof user, "c%d", i);
        q_call(NULL, port, "POST", sku, "", user, &r);
        SF_ASSERT_STATUS(&r, 201);
    }
    int admitted = 0;
    long long until = q_mono_ms() + 10000;
    while (admitted < 4 && q_mono_ms() < until) {
        admitted = 0;
        for (int i = 0; i < 5; i++) {
            snprintf(user, sizeof user, "c%d", i);
            q_call(NULL, port, "GET", sku, "", user, &r);
            SF_ASSERT_STATUS(&r, 200);
            const char *t = json_string_value(json_object_get(r.json, "ticket"));
            if (t && *t) {
                snprintf(tickets[i], sizeof tickets[i], "%s", t);
                admitted++;
            }
        }
        q_sleep_ms(50);
    }
    if (admitted != 4) {
        q_call(NULL, port, "GET", sku, "/info", NULL, &r);
        fprintf(stderr, "info: %s\n", sf_resp_summary(&r));
        snprintf(path, sizeof path, "/api/v1/skus/%s?consistent=1", sku);
        sf_http(port, "GET", path, NULL, NULL, 0, &r);
        fprintf(stderr, "status: %s\n", sf_resp_summary(&r));
    }
    SF_ASSERT_EQ(admitted, 4); /* floor(1.5 × 3): the fifth waits */
    SF_ASSERT(!tickets[4][0], "%s", "the fifth place was admitted past k × the stock");
    for (int i = 0; i < 3; i++) {
        snprintf(user, sizeof user, "c%d", i);
        q_order(port, sku, user, tickets[i], &r);
        SF_ASSERT_STATUS(&r, 201);
    }
    q_order(port, sku, "c0", tickets[0], &r);
    SF_ASSERT_ERROR(&r, 409, "ticket_used");
    q_order(port, sku, "c3", tickets[3], &r);
    SF_ASSERT(r.status == 409, "the 4th admitted on a sold-out SKU: %s", sf_resp_summary(&r));
    until = q_mono_ms() + 3000;
    int sold_out = 0;
    while (!sold_out && q_mono_ms() < until) {
        q_call(NULL, port, "GET", sku, "", "c4", &r);
        sold_out = r.status == 200 && strcmp(sf_str(r.json, "state"), "sold_out") == 0;
        if (!sold_out)
            q_sleep_ms(50);
    }
    SF_ASSERT(sold_out, "the waiting place never said sold_out: %s", sf_resp_summary(&r));
    sf_report rep;
    SF_ASSERT_INVARIANTS(cf_url(cl, 3), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 3);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(c), 0);
    cf_stop(cl);
}

static void test_fifo_rate(void **state)
{
    (void)state;
    const char *l = getenv("IT_QUEUE_LONG");
    fifo_rate(l && *l == '1' ? 1500 : 300);
}

/* ---- the stock bounds the tickets; sold out reaches every place ---- */

static void test_stock_bound_and_sold_out(void **state)
{
    (void)state;
    const char *sku = "q-stock";
    q_put(sku, 20, ",\"queue_rate\":500,\"queue_fifo\":1,\"queue_admit_pct\":150");
    const int n = 80;
    long long pos[80];
    SF_ASSERT_EQ(join_all(sku, "s", n, 4, pos), 0);
    /* keep the SKU active on every instance while the admission runs */
    sf_resp r = {0};
    long long issued = 0, maxlive = 0;
    for (int k = 0; k < 15; k++) {
        for (int i = 0; i < QN; i++)
            q_call(NULL, qport(i), "GET", sku, "/info", NULL, &r);
        long long live = rf_integer(gf_redis, "ZCARD inv:2:{%s}:q:live", sku);
        maxlive = live > maxlive ? live : maxlive;
        q_sleep_ms(100);
    }
    issued = q_field(sku, "issued");
    SF_ASSERT(maxlive <= 30 && issued == 30, "live at most %lld, issued %lld (k 1.5 x stock 20)",
              maxlive, issued);
    /* the admitted buy the stock (the order carries its ticket) */
    char user[32], body[1200];
    int sold = 0;
    for (int u = 0; u < n && sold < 20; u++) {
        snprintf(user, sizeof user, "s%d", u);
        q_call(NULL, qport(u), "GET", sku, "", user, &r);
        if (strcmp(sf_str(r.json, "state"), "admitted") != 0)
            continue;
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1,\"ticket\":\"%s\"}", sku,
                 sf_str(r.json, "ticket"));
        char hdr[64];
        snprintf(hdr, sizeof hdr, "X-User: %s", user);
        const char *h[] = {"Content-Type: application/json", hdr, NULL};
        sf_http(qport(u), "POST", "/api/v1/orders", h, body, strlen(body), &r);
        SF_ASSERT_STATUS(&r, 201);
        sold++;
    }
    SF_ASSERT_EQ(sold, 20);
    long long t0 = q_mono_ms();
    /* within 1 s every place, on every instance, answers sold_out */
    int all = 0;
    while (!all && q_mono_ms() - t0 < 1000) {
        all = 1;
        for (int u = 0; u < n && all; u++) {
            snprintf(user, sizeof user, "s%d", u);
            for (int i = 0; i < QN && all; i++) {
                q_call(NULL, qport(i), "GET", sku, "", user, &r);
                all = strcmp(sf_str(r.json, "state"), "sold_out") == 0 ||
                      strcmp(sf_str(r.json, "state"), "used") == 0;
            }
        }
    }
    long long took = q_mono_ms() - t0;
    SF_ASSERT(all, "after %lld ms a place still answers %s", took, sf_resp_summary(&r));
    fprintf(stderr, "it_queue: every place answered sold_out %lld ms after the last order\n", took);
    SF_ASSERT_EQ(q_field(sku, "issued"), 30);
    sf_resp_free(&r);
}

/* Returned units admit the next in line: stock 10 sold as holds of 2 s to 10 of the 15 admitted
 * (150 %), the other 5 tickets left to expire (queue_ticket_ttl_s 1); when the holds expire the
 * 10 units are back and the next 15 in line are admitted within 2 s of the holds' expiry. */
static void test_expired_holds_admit_the_next(void **state)
{
    (void)state;
    const char *sku = "q-holds";
    q_put(sku, 10,
          ",\"queue_rate\":1000,\"queue_fifo\":1,\"queue_ticket_ttl_s\":1,"
          "\"reservation_ttl_s\":2");
    const int n = 60;
    long long pos[60];
    SF_ASSERT_EQ(join_all(sku, "h", n, 4, pos), 0);
    sf_resp r = {0};
    char user[32], body[1200], hdr[64];
    int held = 0;
    long long first_hold = 0;
    long long until = q_mono_ms() + 5000;
    for (int u = 0; held < 10 && q_mono_ms() < until; u = (u + 1) % 15) {
        snprintf(user, sizeof user, "h%d", u);
        q_call(NULL, qport(u), "GET", sku, "", user, &r);
        if (strcmp(sf_str(r.json, "state"), "admitted") != 0) {
            q_sleep_ms(u == 14 ? 20 : 0);
            continue;
        }
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1,\"ticket\":\"%s\"}", sku,
                 sf_str(r.json, "ticket"));
        snprintf(hdr, sizeof hdr, "X-User: %s", user);
        const char *h[] = {"Content-Type: application/json", hdr, NULL};
        sf_http(qport(u), "POST", "/api/v1/orders", h, body, strlen(body), &r);
        if (r.status == 201) {
            SF_ASSERT(strcmp(sf_str(r.json, "status"), "reserved") == 0, "not a hold: %s",
                      sf_resp_summary(&r));
            if (held++ == 0)
                first_hold = q_redis_ms() - 100; /* made no earlier than the answer's RTT */
        }
    }
    SF_ASSERT_EQ(held, 10);
    long long holds_end = q_redis_ms() + 2000; /* the last hold's expiry, at the latest */
    long long before = q_field(sku, "served");
    SF_ASSERT(before <= 15, "%lld admitted for 10 units at 150 %%", before);
    /* keep the SKU active while the holds run out; then the next 15 within 2 s */
    long long served = before;
    while (q_redis_ms() < holds_end + 2000 && served < before + 15) {
        q_call(NULL, qport(0), "GET", sku, "/info", NULL, &r);
        served = q_field(sku, "served");
        SF_ASSERT(q_redis_ms() >= first_hold + 2000 || served == before,
                  "%lld admitted while the 10 units were held", served - before);
        q_sleep_ms(50);
    }
    long long late = q_redis_ms() - holds_end;
    SF_ASSERT(served == before + 15, "%lld more admitted %lld ms after the holds' expiry (want 15)",
              served - before, late);
    fprintf(stderr, "it_queue: the next 15 admitted by %lld ms after the holds' expiry\n", late);
    sf_resp_free(&r);
}

/* ---- pause and resume ---- */

static void test_pause_resume(void **state)
{
    (void)state;
    const char *sku = "q-pause";
    const long long ttl = 600;
    q_put(sku, 100000, ",\"queue_rate\":40,\"queue_fifo\":1,\"queue_ticket_ttl_s\":600");
    const int n = 200;
    long long *pos = calloc(n, sizeof(*pos)), *rank = calloc(n, sizeof(*rank)),
              *at = calloc(n, sizeof(*at));
    SF_ASSERT_EQ(join_all(sku, "p", n, 4, pos), 0);
    sf_resp r = {0};
    /* every instance steps the SKU (a poll makes it active there) */
    for (int i = 0; i < QN; i++)
        q_call(NULL, qport(i), "GET", sku, "/info", NULL, &r);
    long long t0 = q_mono_ms();
    while (q_field(sku, "served") < 20 && q_mono_ms() - t0 < 5000)
        q_sleep_ms(20);
    q_patch(1, sku, "{\"queue_paused\":1}");
    long long answered = q_redis_ms();
    long long tp = q_mono_ms();
    int paused[QN] = {0}, npaused = 0;
    long long seen_ms[QN] = {0};
    while (npaused < QN && q_mono_ms() - tp < 2000) {
        for (int i = 0; i < QN; i++)
            if (!paused[i]) {
                q_call(NULL, qport(i), "GET", sku, "/info", NULL, &r);
                if (json_is_true(json_object_get(r.json, "paused"))) {
                    paused[i] = 1;
                    seen_ms[i] = q_mono_ms() - tp;
                    npaused++;
                }
            }
        q_sleep_ms(5);
    }
    SF_ASSERT(npaused == QN, "%d of %d instances show the pause", npaused, QN);
    fprintf(stderr, "it_queue: the pause shown by the instances after %lld, %lld, %lld ms\n",
            seen_ms[0], seen_ms[1], seen_ms[2]);
    q_sleep_ms(1000);
    adm_read(sku, "p", n, ttl * 1000, rank, at);
    long long late = 0, served_paused = q_field(sku, "served");
    for (int i = 0; i < n; i++)
        if (at[i] > answered + 200)
            late++;
    SF_ASSERT(late == 0, "%lld places admitted later than 200 ms after the PATCH's answer", late);
    char lastu[32] = "";
    for (int u = 0; u < n; u++)
        if (pos[u] == n)
            snprintf(lastu, sizeof lastu, "p%d", u);
    for (int i = 0; i < QN; i++) { /* the last place waits, paused */
        q_call(NULL, qport(i), "GET", sku, "", lastu, &r);
        SF_ASSERT(strcmp(sf_str(r.json, "state"), "paused") == 0, "instance %d: %s", i,
                  sf_resp_summary(&r));
    }
    q_patch(2, sku, "{\"queue_paused\":0}");
    long long tr = q_mono_ms(), served = served_paused;
    while (served <= served_paused + 5 && q_mono_ms() - tr < 3000) {
        for (int i = 0; i < QN; i++)
            q_call(NULL, qport(i), "GET", sku, "/info", NULL, &r);
        q_sleep_ms(50);
        served = q_field(sku, "served");
    }
    SF_ASSERT(served > served_paused + 5, "served %lld after the resume, %lld paused", served,
              served_paused);
    sf_resp_free(&r);
    free(pos);
    free(rank);
    free(at);
}

/* ---- kill -9 in the middle of the joins ---- */

struct killer {
    int at;   /* kill once this many joins were answered */
    int when; /* joins answered when it was killed */
};

static void *kill_run(void *arg)
{
    struct killer *k = arg;
    long long t0 = q_mono_ms();
    while (atomic_load(&joined) < k->at && q_mono_ms() - t0 < 10000)
        q_sleep_ms(1);
    k->when = atomic_load(&joined);
    sf_kill(svc[2], SIGKILL);
    return NULL;
}

static void test_kill_mid_queue(void **state)
{
    (void)state;
    const char *sku = "q-kill";
    q_put(sku, 100000, ",\"queue_rate\":100,\"queue_fifo\":1");
    const int n = 600;
    long long *pos = calloc(n, sizeof(*pos));
    pthread_t kt;
    struct killer k = {n / 3, 0};
    atomic_store(&joined, 0);
    pthread_create(&kt, NULL, kill_run, &k);
    int fails = join_all(sku, "k", n, 4, pos);
    pthread_join(kt, NULL);
    SF_ASSERT_EQ(fails, 0);
    /* the precondition: the kill came in the middle of the joins */
    SF_ASSERT(k.when >= n / 3 && k.when < n, "killed after %d of %d joins", k.when, n);
    fprintf(stderr, "it_queue: instance killed -9 after %d of %d joins\n", k.when, n);
    SF_ASSERT(sf_restart(svc[2]) == 0, "%s", "restart of the killed instance");
    /* each user one place; the places are 1..n, each once */
    SF_ASSERT_EQ(rf_integer(gf_redis, "ZCARD inv:2:{%s}:q:line", sku), n);
    char *used = calloc(n + 1, 1);
    for (int i = 0; i < n; i++) {
        SF_ASSERT(pos[i] >= 1 && pos[i] <= n, "user k%d: place %lld", i, pos[i]);
        SF_ASSERT(!used[pos[i]], "place %lld given twice", pos[i]);
        used[pos[i]] = 1;
    }
    /* and a join again answers the same place, on any instance */
    sf_resp r = {0};
    char user[32];
    for (int i = 0; i < n; i += 7) {
        snprintf(user, sizeof user, "k%d", i);
        q_call(NULL, qport(i), "POST", sku, "", user, &r);
        SF_ASSERT_STATUS(&r, 200);
        SF_ASSERT_EQ(sf_json_int(r.json, "position", -1), pos[i]);
    }
    sf_resp_free(&r);
    free(used);
    free(pos);
}

/* ---- the fair start: places before it wait for the shuffle, then are a permutation ---- */

static void test_shuffled_start(void **state)
{
    (void)state;
    const char *sku = "q-start";
    long long start = q_redis_ms() + 3000;
    char rules[200], at[40];
    time_t secs = (time_t)(start / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(rules, sizeof rules, ",\"queue_rate\":1000,\"sale_start\":\"%s.%03lldZ\"", at,
             start % 1000);
    q_put(sku, 1000, rules);
    const int n = 20;
    sf_resp r = {0};
    char user[32];
    for (int u = 0; u < n; u++) {
        snprintf(user, sizeof user, "w%d", u);
        q_call(NULL, qport(u), "POST", sku, "", user, &r);
        SF_ASSERT_STATUS(&r, 201);
        SF_ASSERT(strcmp(sf_str(r.json, "state"), "waiting_for_start") == 0 &&
                      json_is_null(json_object_get(r.json, "position")),
                  "%s", sf_resp_summary(&r));
        q_call(NULL, qport(u + 1), "GET", sku, "", user, &r); /* no rank is cached before it */
        SF_ASSERT(strcmp(sf_str(r.json, "state"), "waiting_for_start") == 0, "%s",
                  sf_resp_summary(&r));
    }
    SF_ASSERT(q_redis_ms() < start, "%s", "the joins took longer than the 3 s before the start");
    while (q_redis_ms() < start + 300)
        q_sleep_ms(50);
    char seed[40] = "";
    char *got = calloc(n + 1, 1);
    for (int u = 0; u < n; u++) {
        snprintf(user, sizeof user, "w%d", u);
        for (int i = 0; i < QN; i++) {
            q_call(NULL, qport(i), "GET", sku, "", user, &r);
            long long p = sf_json_int(r.json, "position", -1);
            SF_ASSERT(p >= 1 && p <= n, "after the start, instance %d: %s", i, sf_resp_summary(&r));
            if (i == 0) {
                SF_ASSERT(!got[p], "place %lld twice", p);
                got[p] = 1;
            }
            const char *s = sf_str(r.json, "seed");
            SF_ASSERT(strlen(s) == 32, "the seed is published: %s", sf_resp_summary(&r));
            if (!seed[0])
                snprintf(seed, sizeof seed, "%s", s);
            SF_ASSERT(strcmp(seed, s) == 0, "one seed: %s and %s", seed, s);
        }
    }
    q_call(NULL, qport(0), "POST", sku, "", "w-late", &r);
    SF_ASSERT_EQ(sf_json_int(r.json, "position", -1), n + 1); /* behind every early join */
    free(got);
    sf_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_places),
        cmocka_unit_test(test_idle_step_cost),
        cmocka_unit_test(test_proof_of_work),
        cmocka_unit_test(test_fifo_rate),
        cmocka_unit_test(test_stock_bound_and_sold_out),
        cmocka_unit_test(test_expired_holds_admit_the_next),
        cmocka_unit_test(test_pause_resume),
        cmocka_unit_test(test_kill_mid_queue),
        cmocka_unit_test(test_shuffled_start),
        cmocka_unit_test(test_cluster_walk),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
