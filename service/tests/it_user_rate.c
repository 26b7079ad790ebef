/*
 * The per-user request rate (--user-rps, loop/userrate.c; docs/design.md "Bot friction") over
 * real HTTP: three inventoryd processes on one real Redis, the user taken from the trusted user
 * header (--user-header X-User, --trusted-proxies 127.0.0.0/8), the waiting room's challenge
 * route (GET /api/v1/skus/{sku}/queue/challenge) as the limited request.
 *
 * test_one_user_held_across_instances: user "bot" sends about 200 requests/s, round robin over
 * the three instances from four source addresses (127.0.0.2..5, keep-alive connections), for
 * 5 s, while user "alice" sends 4/s the same way. With N = 20: over the whole seconds of the
 * run after the first, the bot gets at most N + 3 a second through (the bound: the three
 * instances' caps) + 2 per instance in total, any one second at most N + 3 + EDGE (answers
 * near a second's edge: see EDGE), and at least 3N/4 a second over the seconds it sent 2N
 * in (N / 4 in any one: it is held to N, not shut out); in its first second (the run starts 100 ms
 * into one) at most N + 3 + what it sends in 150 ms (the instances learn of each other every 25 ms,
 * slower on a loaded machine); every 429 carries Retry-After; the instances' refusal counters add
 * up to the 429s seen; alice is never refused. Without the shared count (each instance alone) the
 * bot would get 3N a second. When the bot could not send at least 2N a second in two whole seconds
 * (a starved machine) the run is repeated, up to three times.
 * test_off_without_the_option: the same burst, no --user-rps: no 429.
 * test_challenge_signed_with_the_key_file: a challenge from one instance is the user's and the
 * SKU's, signed with the key file's bytes (pow_verify with them accepts its solution, refuses it
 * for another user or SKU), expires 120 s after the Redis clock's now, and the tests' solver
 * (svc_pow.h) makes a join body's pow of it; without a user: 401.
 *
 * About 15 s (5 s of load per run; the starts). The long form: IT_USER_RATE_SECONDS=60 runs
 * the load for 60 s.
 */
#include "pow.h"
#include "svc_pow.h"
#include "svc_raw.h"
#include "svc_test.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static const char TOKEN[] = "it-user-rate-token";
#define N_RPS 20
#define NINST 3
#define BOT_THREADS 4
#define BOT_RATE_PER_THREAD 50 /* 4 x 50 = 200 requests/s */
/* 5 s; the long form (IT_USER_RATE_SECONDS=N, up to 60) runs N seconds */
static int run_ms = 5000;
#define MAX_SECONDS 64
/* Answers near a second's edge the test may count in the neighbouring second: each instance's
 * window follows its estimate of Redis's clock, off by up to half a TIME round trip (tens of ms
 * on a loaded machine), and an instance lets its share through at the start of its window, so
 * a few of its admits can land on the test's side of the edge. A second may look this much over
 * the bound; the whole seconds together only 2 per instance (the two ends of the range). */
#define EDGE 10

static char key_path[64];
static const char KEY[] = "it-user-rate-queue-key-0123456789abcdef-0123456789";

static int64_t ur_real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct sender {
    pthread_t th;
    int ports[NINST];
    char source[16];
    const char *user;
    const char *path;
    int rate;         /* requests per second */
    int64_t start_ms; /* real time */
    int64_t first_second;
    /* per second of the run (real time, as Redis's clock on this machine): */
    int ok[MAX_SECONDS], limited[MAX_SECONDS], other[MAX_SECONDS];
    int no_retry_after;
    char other_what[200];
};

/* One request on fd (reopened when the server closed it): the status, 0 when none. */
static int ur_one(struct sender *s, int *fd, int port, sf_resp *r)
{
    char head[512];
    int n = snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: t\r\nX-User: %s\r\n\r\n", s->path,
                     s->user);
    if (*fd < 0)
        *fd = sr_connect(port, s->source);
    if (*fd < 0)
        return 0;
    sr_send(*fd, head, (size_t)n);
    sr_read_response(*fd, "GET", 5000, r, NULL);
    if (r->status == 0) {
        close(*fd);
        *fd = -1;
    }
    return r->status;
}

static void *ur_send_loop(void *arg)
{
    struct sender *s = arg;
    int fds[NINST] = {-1, -1, -1};
    sf_resp r = {0};
    int64_t interval_us = 1000000 / s->rate;
    for (long i = 0;; i++) {
        int64_t due = s->start_ms * 1000 + i * interval_us;
        int64_t now_us = ur_real_ms() * 1000;
        if (due > now_us)
            tu_sleep_us((long)(due - now_us));
        if (ur_real_ms() - s->start_ms >= run_ms)
            break;
        int64_t sent = ur_real_ms();
        int st = ur_one(s, &fds[i % NINST], s->ports[i % NINST], &r);
        int64_t mid = (sent + ur_real_ms()) / 2;
        long sec = (long)(mid / 1000 - s->first_second);
        if (sec < 0 || sec >= MAX_SECONDS)
            continue;
        if (st == 200) {
            s->ok[sec]++;
        } else if (st == 429 &&
                   strcmp(sf_error_code(&r) ? sf_error_code(&r) : "", "rate_limited") == 0) {
            s->limited[sec]++;
            const char *ra = sf_header(&r, "Retry-After");
            if (!ra || atoi(ra) < 1)
                s->no_retry_after++;
        } else {
            s->other[sec]++;
            snprintf(s->other_what, sizeof s->other_what, "%s", sf_resp_summary(&r));
        }
    }
    for (int k = 0; k < NINST; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    sf_resp_free(&r);
    return NULL;
}

/* Requests a sender made (answered or not). */
static int sent_one(const struct sender *s)
{
    int n = 0;
    for (int k = 0; k < MAX_SECONDS; k++)
        n += s->ok[k] + s->limited[k] + s->other[k];
    return n;
}

static int sent_bot(const struct sender *bot)
{
    int n = 0;
    for (int t = 0; t < BOT_THREADS; t++)
        n += sent_one(&bot[t]);
    return n;
}

/* Starts the three instances (with --user-rps rps when rps > 0). */
static void ur_start_three(sf_service **svc, int rps)
{
    char rpsbuf[16];
    snprintf(rpsbuf, sizeof rpsbuf, "%d", rps);
    const char *args[] = {"--admin-token",
                          TOKEN,
                          "--threads",
                          "2",
                          "--user-header",
                          "X-User",
                          "--trusted-proxies",
                          "127.0.0.0/8",
                          "--queue-key-file",
                          key_path,
                          rps > 0 ? "--user-rps" : NULL,
                          rpsbuf,
                          NULL};
    for (int i = 0; i < NINST; i++) {
        svc[i] = sf_start(rf_url(gf_redis), args);
        SF_ASSERT(svc[i] != NULL, "instance %d did not start", i);
    }
}

/* A SKU with a waiting room and an 8-bit proof of work; its challenge path into path. */
static void ur_make_sku(int port, char *path, size_t cap)
{
    char sku[64], url[128];
    tu_unique_name(sku, sizeof sku, "ur");
    snprintf(url, sizeof url, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_json_request(NULL, port, "PUT", url, TOKEN, NULL,
                    "{\"stock\": 100, \"segments\": 1, \"queue_rate\": 10, \"queue_pow_bits\": 8}",
                    &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    snprintf(path, cap, "/api/v1/skus/%s/queue/challenge", sku);
}

/* Runs the bot (4 threads) and alice for run_ms against the instances. */
static void ur_run(sf_service **svc, const char *path, struct sender *bot, struct sender *alice)
{
    /* from 100 ms into the next second: the first second holds the burst's start */
    int64_t start = (ur_real_ms() + 1000) / 1000 * 1000 + 100;
    memset(bot, 0, sizeof(*bot) * BOT_THREADS);
    memset(alice, 0, sizeof(*alice));
    for (int t = 0; t <= BOT_THREADS; t++) {
        struct sender *s = t < BOT_THREADS ? &bot[t] : alice;
        for (int i = 0; i < NINST; i++)
            s->ports[i] = sf_port(svc[(i + t) % NINST]);
        snprintf(s->source, sizeof s->source, "127.0.0.%d", 2 + t % BOT_THREADS);
        s->user = t < BOT_THREADS ? "bot" : "alice";
        s->path = path;
        s->rate = t < BOT_THREADS ? BOT_RATE_PER_THREAD : 4;
        s->start_ms = start;
        s->first_second = start / 1000;
        SF_ASSERT_EQ(pthread_create(&s->th, NULL, ur_send_loop, s), 0);
    }
    for (int t = 0; t <= BOT_THREADS; t++)
        pthread_join(t < BOT_THREADS ? bot[t].th : alice->th, NULL);
}

static void test_one_user_held_across_instances(void **state)
{
    (void)state;
    sf_service *svc[NINST];
    ur_start_three(svc, N_RPS);
    char path[160];
    ur_make_sku(sf_port(svc[0]), path, sizeof path);
    static struct sender bot[BOT_THREADS], alice;
    int busy = 0, attempt;
    for (attempt = 1; attempt <= 3; attempt++) {
        double refused0 = 0;
        for (int i = 0; i < NINST; i++)
            refused0 += sf_metric(sf_port(svc[i]), "inventory_user_rate_refused_total");
        ur_run(svc, path, bot, &alice);
        int ok[MAX_SECONDS] = {0}, tried[MAX_SECONDS] = {0}, limited = 0, no_ra = 0;
        for (int t = 0; t < BOT_THREADS; t++) {
            for (int k = 0; k < MAX_SECONDS; k++) {
                SF_ASSERT(bot[t].other[k] == 0, "the bot got neither 200 nor 429: %s",
                          bot[t].other_what);
                ok[k] += bot[t].ok[k];
                tried[k] += bot[t].ok[k] + bot[t].limited[k];
                limited += bot[t].limited[k];
            }
            no_ra += bot[t].no_retry_after;
        }
        for (int k = 0; k < MAX_SECONDS; k++) {
            SF_ASSERT(alice.limited[k] == 0 && alice.other[k] == 0,
                      "alice (4/s) was refused in second %d: %s", k, alice.other_what);
        }
        SF_ASSERT(no_ra == 0, "%d 429s without Retry-After", no_ra);
        double refused1 = 0, flushed = 0;
        for (int i = 0; i < NINST; i++) {
            refused1 += sf_metric(sf_port(svc[i]), "inventory_user_rate_refused_total");
            flushed += sf_metric(sf_port(svc[i]), "inventory_user_rate_flushed_total");
        }
        /* the Redis cost of the count: user_rate.lua calls per request of the bot */
        print_message("%.0f counts sent to Redis for %d requests of the bot and %d of alice\n",
                      flushed, sent_bot(bot), sent_one(&alice));
        SF_ASSERT((long)(refused1 - refused0) == limited,
                  "the instances counted %.0f refusals, the bot saw %d 429s", refused1 - refused0,
                  limited);
        /* the first second (a partial one: the run starts within it) */
        print_message("second 0: %d of %d through\n", ok[0], tried[0]);
        SF_ASSERT(ok[0] <= N_RPS + NINST + 3 + 200 * 150 / 1000,
                  "first second: %d through of %d (N = %d)", ok[0], tried[0], N_RPS);
        busy = 0;
        int whole_ok = 0, nwhole = 0, busy_ok = 0;
        for (int k = 1; k < MAX_SECONDS; k++) {
            if (tried[k] == 0)
                continue;
            int whole = (int64_t)(bot[0].first_second + k + 1) * 1000 <= bot[0].start_ms + run_ms;
            print_message("second %d: %d of %d through%s\n", k, ok[k], tried[k],
                          whole ? "" : " (partial)");
            SF_ASSERT(ok[k] <= N_RPS + NINST + EDGE, "second %d: %d through of %d (N = %d)", k,
                      ok[k], tried[k], N_RPS);
            if (whole) {
                whole_ok += ok[k];
                nwhole++;
            }
            if (whole && tried[k] >= 2 * N_RPS) {
                busy++;
                busy_ok += ok[k];
                SF_ASSERT(ok[k] >= N_RPS / 4, "second %d: only %d through of %d (N = %d)", k, ok[k],
                          tried[k], N_RPS);
            }
        }
        /* an answer near a second's edge may be counted in the next second (the instances'
         * estimate of Redis's clock is a few ms off): one second may look over the bound, the
         * whole seconds together may not */
        SF_ASSERT(whole_ok <= nwhole * (N_RPS + NINST) + 2 * NINST,
                  "%d through in %d whole seconds (N = %d, %d instances)", whole_ok, nwhole, N_RPS,
                  NINST);
        SF_ASSERT(busy_ok >= busy * N_RPS * 3 / 4,
                  "%d through in %d busy seconds (N = %d): held below N", busy_ok, busy, N_RPS);
        if (busy >= 2)
            break;
        print_message("attempt %d: the bot sent 2N/s in only %d whole seconds; again\n", attempt,
                      busy);
    }
    SF_ASSERT(busy >= 2, "%s", "the machine never let the bot send 2N requests a second");
    SF_ASSERT_EQ(sf_stop_all(svc, NINST), 0);
}

static void test_off_without_the_option(void **state)
{
    (void)state;
    sf_service *svc[NINST];
    ur_start_three(svc, 0);
    char path[160];
    ur_make_sku(sf_port(svc[0]), path, sizeof path);
    static struct sender bot[BOT_THREADS], alice;
    ur_run(svc, path, bot, &alice);
    long ok = 0;
    for (int t = 0; t < BOT_THREADS; t++)
        for (int k = 0; k < MAX_SECONDS; k++) {
            SF_ASSERT(bot[t].limited[k] == 0 && bot[t].other[k] == 0, "without --user-rps: %s",
                      bot[t].other_what);
            ok += bot[t].ok[k];
        }
    SF_ASSERT(ok > 2 * N_RPS, "without --user-rps only %ld through", ok);
    SF_ASSERT_EQ(sf_stop_all(svc, NINST), 0);
}

static void test_challenge_signed_with_the_key_file(void **state)
{
    (void)state;
    sf_service *svc[NINST];
    ur_start_three(svc, N_RPS);
    char path[160], sku[80];
    ur_make_sku(sf_port(svc[0]), path, sizeof path);
    sscanf(path, "/api/v1/skus/%79[^/]", sku);
    const char *hdr[] = {"X-User: carol", NULL};
    sf_resp r = {0};
    int64_t before = ur_real_ms();
    sf_http(sf_port(svc[1]), "GET", path, hdr, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    const char *c = json_string_value(json_object_get(r.json, "challenge"));
    SF_ASSERT(c != NULL, "no challenge: %s", sf_resp_summary(&r));
    SF_ASSERT_EQ(sf_json_int(r.json, "bits", -1), 8);
    int64_t issued = 0;
    int bits = 0;
    SF_ASSERT_EQ(pow_parse(c, &issued, &bits), 0);
    SF_ASSERT_EQ(bits, 8);
    SF_ASSERT(issued >= before - 2000 && issued <= ur_real_ms() + 2000, "issued at %lld",
              (long long)issued);
    SF_ASSERT_EQ(sf_json_int(r.json, "expires_at", -1), issued + POW_TTL_MS);
    char nonce[POW_NONCE_MAX + 1];
    SF_ASSERT(pow_solve(c, bits, 0, 1u << 24, nonce) > 0, "%s", "no solution");
    const unsigned char *k = (const unsigned char *)KEY;
    size_t kl = sizeof KEY - 1;
    SF_ASSERT_EQ(pow_verify(k, kl, c, nonce, sku, "carol", issued + 1, 8), POW_OK);
    SF_ASSERT_EQ(pow_verify(k, kl, c, nonce, sku, "dave", issued + 1, 8), POW_WRONG_USER);
    SF_ASSERT_EQ(pow_verify(k, kl, c, nonce, "other", "carol", issued + 1, 8), POW_WRONG_SKU);
    /* the tests' solver (svc_pow.h): the join body's pow member, checked the same way */
    char powtext[POW_CHALLENGE_MAX + 128];
    SF_ASSERT_EQ(sp_solve_challenge(sf_port(svc[0]), sku, hdr, powtext, sizeof powtext, NULL), 200);
    json_t *pj = json_loads(powtext, 0, NULL);
    SF_ASSERT(pj != NULL, "not JSON: %s", powtext);
    SF_ASSERT_EQ(pow_verify(k, kl, json_string_value(json_object_get(pj, "challenge")),
                            json_string_value(json_object_get(pj, "nonce")), sku, "carol",
                            ur_real_ms(), 8),
                 POW_OK);
    json_decref(pj);
    /* no user header: the waiting room needs a verified user */
    sf_http(sf_port(svc[2]), "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 401, "user_required");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop_all(svc, NINST), 0);
}

static int ur_setup(void **state)
{
    const char *long_form = getenv("IT_USER_RATE_SECONDS");
    if (long_form && atoi(long_form) >= 3 && atoi(long_form) <= 60)
        run_ms = atoi(long_form) * 1000;
    snprintf(key_path, sizeof key_path, "/tmp/it_user_rate_key_XXXXXX");
    int fd = mkstemp(key_path);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, KEY, sizeof KEY - 1);
    close(fd);
    if (w != (ssize_t)(sizeof KEY - 1))
        return -1;
    return gf_group_setup(state);
}

static int ur_teardown(void **state)
{
    unlink(key_path);
    return sf_group_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_user_held_across_instances),
        cmocka_unit_test(test_off_without_the_option),
        cmocka_unit_test(test_challenge_signed_with_the_key_file),
    };
    return SF_RUN_GROUP_TESTS(tests, ur_setup, ur_teardown);
}
