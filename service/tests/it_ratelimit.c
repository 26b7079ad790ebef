/*
 * The per-client-IP abuse limits over real HTTP (service/src/http/ratelimit.c, http.c): the token
 * bucket (rate_limit_rps / rate_limit_burst) answering 429 rate_limited + Retry-After before
 * any handler runs, per peer address (127.0.0.2 and 127.0.0.3 are two clients on one machine),
 * with the probes exempt and a refused order changing nothing; the connection cap
 * (max_connections_per_ip); both off by default; bad values exit 2.
 * Behind a trusted proxy (issue #10: trusted_proxies) the bucket is the client's that the proxy
 * names in X-Forwarded-For, not the proxy's; an untrusted peer's X-Forwarded-For changes nothing.
 */
#include "svc_raw.h"
#include "svc_test.h"

#include <errno.h>
#include <unistd.h>

static const char TOKEN[] = "it-ratelimit-token";

/* One request on fd (keep-alive), read back into *r. Returns the status (0: none). */
static int request_on(int fd, const char *method, const char *path, const char *body, sf_resp *r)
{
    char head[512];
    int n;
    if (body != NULL)
        n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, strlen(body), body);
    else
        n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: t\r\n\r\n", method, path);
    sr_send(fd, head, (size_t)n);
    sr_read_response(fd, method, 5000, r, NULL);
    return r->status;
}

/* A keep-alive connection from source_ip, asserted open. */
static int connect_from(int port, const char *source_ip)
{
    int fd = sr_connect(port, source_ip);
    SF_ASSERT(fd >= 0, "connect from %s: %s", source_ip, strerror(errno));
    return fd;
}

/* One request on a new connection from source_ip. Returns the status (0: none). */
static int request_from(int port, const char *source_ip, const char *method, const char *path,
                        const char *body, sf_resp *r)
{
    int fd = connect_from(port, source_ip);
    int st = request_on(fd, method, path, body, r);
    close(fd);
    return st;
}

static void test_token_bucket(void **state)
{
    (void)state;
    /* 2 requests/s, bursts of 5. */
    const char *args[] = {"--admin-token",      TOKEN, "--threads", "2", "--rate-limit-rps", "2",
                          "--rate-limit-burst", "5",   NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64], path[128];
    tu_unique_name(sku, sizeof sku, "rl");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    sf_put_sku(port, TOKEN, sku, 100, 2, &r); /* from 127.0.0.1: its own bucket */
    SF_ASSERT_STATUS(&r, 201);

    /* Client A (127.0.0.2): the burst of 5 passes on one keep-alive connection, the 6th is
     * refused; being answered before the request is read, the 429 closes the connection. */
    int a = connect_from(port, "127.0.0.2");
    for (int i = 0; i < 5; i++) {
        request_on(a, "GET", path, NULL, &r);
        SF_ASSERT(r.status == 200, "request %d of the burst: %s", i + 1, sf_resp_summary(&r));
    }
    request_on(a, "GET", path, NULL, &r);
    SF_ASSERT_ERROR(&r, 429, "rate_limited");
    const char *ra = sf_header(&r, "Retry-After");
    SF_ASSERT(ra != NULL && atoi(ra) >= 1, "429 without a Retry-After: %s", ra ? ra : "(none)");
    const char *conn = sf_header(&r, "Connection");
    SF_ASSERT(conn != NULL && strcmp(conn, "close") == 0, "429 without Connection: close: %s",
              conn ? conn : "(none)");
    close(a);

    /* An order while limited is refused before its body is read: nothing is sold. */
    char order[160];
    snprintf(order, sizeof order, "{\"sku\": \"%s\", \"quantity\": 3}", sku);
    request_from(port, "127.0.0.2", "POST", "/api/v1/orders", order, &r);
    SF_ASSERT_ERROR(&r, 429, "rate_limited");

    /* The probes are never limited. */
    static const char *const probes[] = {"/healthz", "/readyz", "/metrics"};
    for (int i = 0; i < 30; i++) {
        request_from(port, "127.0.0.2", "GET", probes[i % 3], NULL, &r);
        SF_ASSERT(r.status == 200, "probe %s while limited: %s", probes[i % 3],
                  sf_resp_summary(&r));
    }

    /* Client B (127.0.0.3) has a bucket of its own. */
    request_from(port, "127.0.0.3", "GET", path, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);

    /* A token comes back after 1/rps = 500 ms. */
    tu_sleep_ms(600);
    request_from(port, "127.0.0.2", "GET", path, NULL, &r);
    SF_ASSERT(r.status == 200, "after the refill: %s", sf_resp_summary(&r));
    request_from(port, "127.0.0.2", "GET", path, NULL, &r);
    SF_ASSERT_ERROR(&r, 429, "rate_limited");

    /* Steady state: B asks every 20 ms for 3 s. Its bucket is full again (4 left plus 600 ms
     * of refill, capped at 5), then 2/s: 5 + 6 pass, give or take the token in flight at
     * either end. */
    int passed = 0, refused = 0;
    int64_t until = tu_now_ms() + 3000;
    while (tu_now_ms() < until) {
        request_from(port, "127.0.0.3", "GET", path, NULL, &r);
        SF_ASSERT(r.status == 200 || r.status == 429, "steady state: %s", sf_resp_summary(&r));
        passed += r.status == 200;
        refused += r.status == 429;
        tu_sleep_ms(20);
    }
    fprintf(stderr,
            "it_ratelimit: 3 s at ~50 requests/s against 2/s burst 5: %d passed, %d "
            "refused\n",
            passed, refused);
    SF_ASSERT(passed >= 9 && passed <= 12, "%d passed in 3 s", passed);
    SF_ASSERT(refused > 50, "only %d refused", refused);
    sf_resp_free(&r);

    /* The refused order changed nothing. */
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 0);
    SF_ASSERT_EQ(rep.orders, 0);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static void test_connection_cap(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--max-connections-per-ip", "4", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    sf_resp r = {0};

    /* Four connections from 127.0.0.2, one of them in use, the rest idle. */
    int held[4];
    for (int i = 0; i < 4; i++)
        held[i] = connect_from(port, "127.0.0.2");
    request_on(held[0], "GET", "/healthz", NULL, &r);
    SF_ASSERT_STATUS(&r, 200);

    /* The fifth is closed at once, without an answer. */
    int fifth = connect_from(port, "127.0.0.2");
    request_on(fifth, "GET", "/healthz", NULL, &r);
    SF_ASSERT(r.status == 0, "a fifth connection from one address was served: %s",
              sf_resp_summary(&r));
    close(fifth);

    /* Another address is not affected. */
    int other = connect_from(port, "127.0.0.3");
    request_on(other, "GET", "/healthz", NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    close(other);

    /* Once one of the four is closed, the address may connect again. */
    close(held[3]);
    int ok = 0;
    for (int attempt = 0; attempt < 50 && !ok; attempt++) {
        tu_sleep_ms(20);
        int again = connect_from(port, "127.0.0.2");
        ok = request_on(again, "GET", "/healthz", NULL, &r) == 200;
        close(again);
    }
    SF_ASSERT(ok, "no connection from 127.0.0.2 after one closed: %s", sf_resp_summary(&r));
    for (int i = 0; i < 3; i++)
        close(held[i]);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static void test_off_by_default(void **state)
{
    (void)state;
    sf_service *svc = sf_start(rf_url(gf_redis), NULL);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    sf_resp r = {0};
    int fds[12];
    for (int i = 0; i < 12; i++)
        fds[i] = connect_from(port, "127.0.0.2");
    for (int i = 0; i < 300; i++) {
        request_on(fds[i % 12], "GET", "/api/v1/skus/no-such-sku", NULL, &r);
        SF_ASSERT(r.status == 404, "request %d: %s", i, sf_resp_summary(&r));
    }
    for (int i = 0; i < 12; i++)
        close(fds[i]);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static void test_bad_values_exit_2(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"--rate-limit-rps", "-1"},
        {"--rate-limit-rps", "1000001"},
        {"--rate-limit-burst", "2.5"},
        {"--max-connections-per-ip", "lots"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[512], err[2048];
        const char *args[] = {bad[i][0], bad[i][1], NULL};
        int st = sf_run(args, 5000, out, sizeof out, err, sizeof err);
        SF_ASSERT(st == 2, "%s %s: exit %d, stderr %s", bad[i][0], bad[i][1], st, err);
        SF_ASSERT(strstr(err, bad[i][0] + 2) != NULL || strstr(err, "rate_limit") != NULL ||
                      strstr(err, "max_connections_per_ip") != NULL,
                  "%s %s: the message does not name the key: %s", bad[i][0], bad[i][1], err);
    }
}

/* GET path from source_ip with "X-Forwarded-For: xff" on a new connection. The status. */
static int get_forwarded(int port, const char *source_ip, const char *xff, const char *path,
                         sf_resp *r)
{
    int fd = connect_from(port, source_ip);
    char head[512];
    int n =
        snprintf(head, sizeof head,
                 "GET %s HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: %s\r\nConnection: close\r\n\r\n",
                 path, xff);
    sr_send(fd, head, (size_t)n);
    sr_read_response(fd, "GET", 5000, r, NULL);
    close(fd);
    return r->status;
}

/* Requests (at most 40) for path from source_ip as client xff until one is refused; the number
 * that passed, or -1 when none was refused. 40 requests at 1/s with a burst of 3 are refused
 * unless they take over 36 s, so this cannot flake on a slow machine. */
static int passed_until_429(int port, const char *source_ip, const char *xff, const char *path)
{
    sf_resp r = {0};
    for (int i = 0; i < 40; i++) {
        char spoof[64];
        if (strcmp(xff, "*") == 0) /* a new forged client every time */
            snprintf(spoof, sizeof spoof, "198.51.100.%d", i + 1);
        int st = get_forwarded(port, source_ip, strcmp(xff, "*") == 0 ? spoof : xff, path, &r);
        if (st == 429) {
            sf_resp_free(&r);
            return i;
        }
        SF_ASSERT(st == 200, "request %d from %s as %s: %s", i, source_ip, xff,
                  sf_resp_summary(&r));
    }
    sf_resp_free(&r);
    return -1;
}

static void test_trusted_proxy(void **state)
{
    (void)state;
    /* 127.0.0.2 plays the proxy (trusted); 127.0.0.3 is a client that forges the header. */
    const char *args[] = {"--admin-token",
                          TOKEN,
                          "--threads",
                          "2",
                          "--rate-limit-rps",
                          "1",
                          "--rate-limit-burst",
                          "3",
                          "--trusted-proxies",
                          "127.0.0.2/32, ::1",
                          NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64], path[128];
    tu_unique_name(sku, sizeof sku, "xff");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, TOKEN, sku, 10, 1, &r) == 201, "PUT: %s", sf_resp_summary(&r));
    sf_resp_free(&r);

    /* Customer 203.0.113.1 through the proxy uses up its bucket... */
    int passed = passed_until_429(port, "127.0.0.2", "203.0.113.1", path);
    SF_ASSERT(passed >= 3, "customer 1 through the proxy was limited after %d requests", passed);
    /* ...customer 203.0.113.2 through the same proxy still has its own (before issue #10 both
     * shared the proxy's). A forged hop left of the proxy's entry does not matter. */
    get_forwarded(port, "127.0.0.2", "6.6.6.6, 203.0.113.2", path, &r);
    SF_ASSERT(r.status == 200, "customer 2 through the proxy: %s", sf_resp_summary(&r));
    /* The proxy's own requests (no header) are the proxy's bucket, not customer 1's. */
    request_from(port, "127.0.0.2", "GET", path, NULL, &r);
    SF_ASSERT(r.status == 200, "the proxy itself: %s", sf_resp_summary(&r));

    /* An untrusted peer cannot escape its bucket with a new X-Forwarded-For each time. */
    passed = passed_until_429(port, "127.0.0.3", "*", path);
    SF_ASSERT(passed >= 0, "%s", "an untrusted peer forging X-Forwarded-For was never limited");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_bucket),   cmocka_unit_test(test_connection_cap),
        cmocka_unit_test(test_off_by_default), cmocka_unit_test(test_bad_values_exit_2),
        cmocka_unit_test(test_trusted_proxy),
    };
    return SF_RUN_GROUP_TESTS(tests, gf_group_setup, sf_group_teardown);
}
