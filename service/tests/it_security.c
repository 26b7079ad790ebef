/*
 * Secrets and Redis credentials end to end (issue 5, "Security"; docs/reliability.md):
 *   - the admin token, given by flag, environment or config file, is never written to the log
 *     (the log is read after every kind of admin request, right and wrong tokens, at debug
 *     level), nor echoed in a 401, nor in the exit-2 message of a bad token;
 *   - inventoryd works against a Redis with a password and with an ACL user whose rights are
 *     limited to the inv:* keys and channels (so the service touches no other key), and the
 *     password is never logged; a wrong password makes /readyz and orders 503, also unlogged.
 * Issue #10, "safe by default":
 *   - with no admin token the admin endpoints are closed, also to loopback; --admin-allow-loopback
 *     opens them to loopback clients (with a warning at start), but not to a remote client that
 *     a trusted proxy on loopback names in X-Forwarded-For;
 *   - order ids carry 128 random bits (32 hex digits), not a PRNG's guessable output;
 *   - /readyz answers a short reason, the Redis error only goes to the log;
 *   - --admin-token-file and --redis-url-file keep both secrets out of the process's argv and
 *     environment, and out of the log;
 *   - --healthcheck asks the configured port's /healthz (the container HEALTHCHECK).
 */
#include "svc_test.h"

#include <unistd.h>

/* Fails when the log file at path contains secret; returns the log's size. */
static long assert_not_in_log(const char *path, const char *secret, const char *what)
{
    FILE *f = fopen(path, "r");
    SF_ASSERT(f != NULL, "cannot read the log %s", path);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    SF_ASSERT(strstr(text, secret) == NULL, "%s appears in the log %s", what, path);
    return (long)n;
}

/* Copies svc's log before it is removed by sf_stop. */
static void keep_log(const sf_service *svc, char *copy, size_t size)
{
    snprintf(copy, size, "%s/it_security-log-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(copy);
    SF_ASSERT(fd >= 0, "mkstemp %s", copy);
    FILE *in = fopen(sf_log_path(svc), "r");
    SF_ASSERT(in != NULL, "%s", "cannot open the service log");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        SF_ASSERT(write(fd, buf, n) == (ssize_t)n, "%s", "write");
    fclose(in);
    close(fd);
}

/* Every kind of admin request, with the right token and with wrong ones. */
static void admin_traffic(int port, const char *token)
{
    char sku[64], path[128], restock[160], cancel[256];
    tu_unique_name(sku, sizeof sku, "sec");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(restock, sizeof restock, "%s/restock", path);
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, token, sku, 10, 2, &r) == 201, "PUT: %s", sf_resp_summary(&r));
    SF_ASSERT(sf_restock(port, token, sku, 4, &r) == 200, "restock: %s", sf_resp_summary(&r));
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    snprintf(cancel, sizeof cancel, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    sf_json_request(NULL, port, "DELETE", cancel, token, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);

    /* Wrong tokens: one that starts like the right one, and lookalikes. */
    char near[600];
    snprintf(near, sizeof near, "%s-but-longer", token);
    const char *wrong[] = {near, "Bearer", "wrong-token-DEADBEEF"};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        sf_json_request(NULL, port, "PUT", path, wrong[i], NULL, "{\"stock\":1,\"segments\":1}",
                        &r);
        SF_ASSERT_ERROR(&r, 401, "unauthorized");
        /* The 401 does not echo what was presented. */
        SF_ASSERT(strstr(r.body, wrong[i]) == NULL, "the 401 echoes the token: %s", r.body);
    }
    sf_json_request(NULL, port, "DELETE", path, token, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);
}

static void test_admin_token_never_logged(void **state)
{
    (void)state;
    static const char flag_token[] = "Flag-Secret-7Qz9-admin";
    static const char env_token[] = "Env-Secret-4Kx2-admin";
    static const char file_token[] = "File-Secret-9Wm5-admin";
    char log_copy[3][512];

    /* 1. --admin-token, at debug level (every request is logged). */
    const char *args[] = {"--admin-token", flag_token, "--log-level", "debug", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    admin_traffic(sf_port(svc), flag_token);
    SF_ASSERT(sf_log_contains(svc, "\"admin_token\":\"***\""), "%s",
              "the startup config line does not mask the token");
    keep_log(svc, log_copy[0], sizeof log_copy[0]);
    SF_ASSERT_EQ(sf_stop(svc), 0);

    /* 2. INVENTORY_ADMIN_TOKEN (inherited by the service). */
    setenv("INVENTORY_ADMIN_TOKEN", env_token, 1);
    const char *dbg[] = {"--log-level", "debug", NULL};
    svc = sf_start(rf_url(gf_redis), dbg);
    unsetenv("INVENTORY_ADMIN_TOKEN");
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    admin_traffic(sf_port(svc), env_token);
    keep_log(svc, log_copy[1], sizeof log_copy[1]);
    SF_ASSERT_EQ(sf_stop(svc), 0);

    /* 3. The config file. */
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/it_security-config-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(cfg);
    SF_ASSERT(fd >= 0, "mkstemp %s", cfg);
    char text[256];
    int n = snprintf(text, sizeof text, "{\"admin_token\": \"%s\", \"log_level\": \"debug\"}",
                     file_token);
    SF_ASSERT(write(fd, text, (size_t)n) == n, "%s", "write");
    close(fd);
    const char *cargs[] = {"--config", cfg, NULL};
    svc = sf_start(rf_url(gf_redis), cargs);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    admin_traffic(sf_port(svc), file_token);
    keep_log(svc, log_copy[2], sizeof log_copy[2]);
    SF_ASSERT_EQ(sf_stop(svc), 0);
    unlink(cfg);

    static const char *const tokens[] = {flag_token, env_token, file_token};
    for (int i = 0; i < 3; i++) {
        for (int t = 0; t < 3; t++)
            assert_not_in_log(log_copy[i], tokens[t], "the admin token");
        long size = assert_not_in_log(log_copy[i], "Bearer", "an Authorization header");
        SF_ASSERT(size > 1000, "log %d is only %ld bytes: was debug logging on?", i, size);
        unlink(log_copy[i]);
    }

    /* 4. A bad token (a space in it) or a bad value next to a good token: exit 2, and the
     * message quotes neither token. */
    static const char bad_token[] = "Bad Secret-3Jh8";
    const char *bad1[] = {"--admin-token", bad_token, NULL};
    const char *bad2[] = {"--admin-token", flag_token, "--port", "nope", NULL};
    const char *const *bads[] = {bad1, bad2};
    for (int i = 0; i < 2; i++) {
        char out[1024], err[4096];
        int st = sf_run(bads[i], 5000, out, sizeof out, err, sizeof err);
        SF_ASSERT(st == 2, "exit %d: %s", st, err);
        SF_ASSERT(strstr(err, "Secret") == NULL, "the error message shows the token: %s", err);
    }
}

static void test_redis_password_and_acl_user(void **state)
{
    (void)state;
    static const char password[] = "Redis-Pass-5Tn1";
    static const char user_password[] = "Acl-Pass-8Vb3";
    const char *rargs[] = {"--requirepass", password, NULL};
    rf_server *pw = rf_start(rargs);
    SF_ASSERT(pw != NULL, "%s", "redis-server with a password did not start");
    /* An ACL user limited to the service's keys and channels (inv:*), so the service provably
     * touches nothing else. */
    redisReply *rr = rf_command(pw,
                                "ACL SETUSER inventoryd on >%s ~inv:* &inv:* +@all -@admin "
                                "-@dangerous +info",
                                user_password);
    SF_ASSERT(rr != NULL && rr->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s",
              rr && rr->str ? rr->str : "(no reply)");
    freeReplyObject(rr);

    char url[3][256];
    snprintf(url[0], sizeof url[0], "redis://:%s@127.0.0.1:%d", password, rf_port(pw));
    snprintf(url[1], sizeof url[1], "redis://inventoryd:%s@127.0.0.1:%d/0", user_password,
             rf_port(pw));
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--log-level", "debug", "--admin-token", "t0ken-it-security", NULL};
        sf_service *svc = sf_start(url[i], args);
        SF_ASSERT(svc != NULL, "inventoryd did not start with %s",
                  i ? "an ACL user" : "a password");
        int port = sf_port(svc);
        sf_resp r = {0};
        sf_http(port, "GET", "/readyz", NULL, NULL, 0, &r);
        SF_ASSERT_STATUS(&r, 200);
        char sku[64];
        tu_unique_name(sku, sizeof sku, i ? "acl" : "pw");
        SF_ASSERT(sf_put_sku(port, "t0ken-it-security", sku, 20, 4, &r) == 201, "PUT: %s",
                  sf_resp_summary(&r));
        /* With an Idempotency-Key too: its claim key is under inv:2:{sku} like the rest. */
        char body[160];
        snprintf(body, sizeof body, "{\"sku\": \"%s\"}", sku);
        for (int k = 0; k < 5; k++) {
            sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, k < 2 ? "idem-1" : NULL,
                            body, &r);
            SF_ASSERT(r.status == (k == 1 ? 200 : 201), "order %d: %s", k, sf_resp_summary(&r));
        }
        json_t *st = sf_sku_status(port, sku);
        SF_ASSERT(st != NULL && sf_json_int(st, "sold", -1) == 4, "%s",
                  "status after 4 orders and a replay");
        json_decref(st);
        SF_ASSERT(sf_log_contains(svc, ":***@127.0.0.1"), "%s",
                  "the startup config line does not mask the password");
        assert_not_in_log(sf_log_path(svc), password, "the Redis password");
        assert_not_in_log(sf_log_path(svc), user_password, "the ACL user's password");
        sf_resp_free(&r);
        SF_ASSERT_EQ(sf_stop(svc), 0);
    }
    redisReply *who = rf_command(pw, "ACL LOG");
    SF_ASSERT(who != NULL && who->type == REDIS_REPLY_ARRAY && who->elements == 0,
              "the ACL user was refused something (%zu ACL LOG entries)",
              who ? who->elements : (size_t)0);
    freeReplyObject(who);

    /* A wrong password: the service starts, is not ready, answers 503, logs no password. */
    snprintf(url[2], sizeof url[2], "redis://:Wrong-Pass-2Gd7@127.0.0.1:%d", rf_port(pw));
    sf_service *svc = sf_start(url[2], NULL);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with a wrong password");
    sf_resp r = {0};
    sf_http(sf_port(svc), "GET", "/readyz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 503);
    sf_order(NULL, sf_port(svc), "any-sku", 1, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    sf_resp_free(&r);
    assert_not_in_log(sf_log_path(svc), "Wrong-Pass-2Gd7", "the wrong Redis password");
    SF_ASSERT_EQ(sf_stop(svc), 0);
    rf_stop(pw);
}

/* ---- issue #10 ------------------------------------------------------------------------------ */

static void test_admin_closed_without_token_over_http(void **state)
{
    (void)state;
    /* inventoryd's default (the fixture adds --admin-allow-loopback; this takes it back). */
    const char *closed[] = {"--admin-allow-loopback=0", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), closed);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with --admin-allow-loopback=0");
    int port = sf_port(svc);
    char sku[64], path[128];
    tu_unique_name(sku, sizeof sku, "closed");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 10, 2, &r) == 401, "PUT from loopback, no token: %s",
              sf_resp_summary(&r));
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    SF_ASSERT(sf_put_sku(port, "anything", sku, 10, 2, &r) == 401, "PUT with a token: %s",
              sf_resp_summary(&r));
    sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    SF_ASSERT(sf_log_contains(svc, "admin endpoints are closed"), "%s",
              "no start-up line says the admin endpoints are closed");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);

    /* --admin-allow-loopback: open to loopback, with a warning; behind a trusted proxy on
     * loopback, the client it names decides. */
    const char *open_lb[] = {"--trusted-proxies", "127.0.0.1/32", NULL};
    svc = sf_start(rf_url(gf_redis), open_lb);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with --admin-allow-loopback");
    port = sf_port(svc);
    SF_ASSERT(sf_log_contains(svc, "WITHOUT a token (--admin-allow-loopback)"), "%s",
              "no warning at start about --admin-allow-loopback");
    SF_ASSERT(sf_put_sku(port, NULL, sku, 10, 2, &r) == 201, "PUT from loopback: %s",
              sf_resp_summary(&r));
    static const char body[] = "{\"stock\": 5, \"segments\": 1}";
    const char *remote[] = {"Content-Type: application/json", "X-Forwarded-For: 203.0.113.9", NULL};
    sf_http(port, "PUT", path, remote, body, strlen(body), &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    const char *local[] = {"Content-Type: application/json", "X-Forwarded-For: 127.0.0.1", NULL};
    sf_http(port, "PUT", path, local, body, strlen(body), &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* True when s is "<32 lower-case hex>-<digits>-<sku>". */
static int id_well_formed(const char *s, const char *sku)
{
    for (int i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    if (s[32] != '-')
        return 0;
    const char *p = s + 33;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == '-' && strcmp(p + 1, sku) == 0;
}

static void test_order_ids_unguessable(void **state)
{
    (void)state;
    sf_service *svc = sf_start(rf_url(gf_redis), NULL);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    int port = sf_port(svc);
    char sku[64];
    tu_unique_name(sku, sizeof sku, "ids");
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 10, 1, &r) == 201, "PUT: %s", sf_resp_summary(&r));
    char first[160] = "";
    for (int i = 0; i < 3; i++) {
        sf_order(NULL, port, sku, 1, &r);
        SF_ASSERT_STATUS(&r, 201);
        const char *id = sf_str(r.json, "order_id");
        SF_ASSERT(id_well_formed(id, sku), "order id %s: not <32 hex digits>-<segment>-<sku>", id);
        SF_ASSERT(strncmp(id, first, 32) != 0, "two orders share the random part: %s", id);
        if (i == 0)
            snprintf(first, sizeof first, "%s", id);
        /* Readable at its id, and not at a neighbour's. */
        char path[256];
        snprintf(path, sizeof path, "/api/v1/orders/%s", id);
        sf_resp g = {0};
        sf_http(port, "GET", path, NULL, NULL, 0, &g);
        SF_ASSERT_STATUS(&g, 200);
        path[strlen("/api/v1/orders/") + 31] ^= 1; /* flip one bit of the last hex digit */
        sf_http(port, "GET", path, NULL, NULL, 0, &g);
        SF_ASSERT_ERROR(&g, 404, "unknown_order");
        sf_resp_free(&g);
    }
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static void test_readyz_reason_is_short(void **state)
{
    (void)state;
    rf_server *own = rf_start(NULL);
    SF_ASSERT(own != NULL, "%s", "redis-server did not start");
    sf_service *svc = sf_start(rf_url(own), NULL);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    sf_resp r = {0};
    sf_http(sf_port(svc), "GET", "/readyz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    /* Redis now refuses the probe's PING with its own error text (NOPERM, naming the user and
     * the command): that text must stay in the log. */
    redisReply *rr = rf_command(own, "ACL SETUSER default -ping");
    SF_ASSERT(rr != NULL && rr->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s",
              rr && rr->str ? rr->str : "(no reply)");
    freeReplyObject(rr);
    sf_http(sf_port(svc), "GET", "/readyz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 503);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "unavailable") == 0, "%s", r.body);
    SF_ASSERT(strcmp(sf_str(r.json, "reason"), "redis unavailable") == 0,
              "/readyz tells the world more than \"redis unavailable\": %s", r.body);
    SF_ASSERT(sf_log_contains(svc, "readyz_unavailable") && sf_log_contains(svc, "NOPERM"), "%s",
              "the Redis error is not in the log");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
    rf_stop(own);
}

/* Writes text to a new mode-0600 file under the temp dir; its path goes in path. */
static void secret_file(const char *text, char *path, size_t size)
{
    snprintf(path, size, "%s/it_security-secret-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(path);
    SF_ASSERT(fd >= 0, "mkstemp %s", path);
    size_t n = strlen(text);
    SF_ASSERT(write(fd, text, n) == (ssize_t)n, "%s", "write");
    close(fd);
}

/* Fails when the NUL-separated /proc/<pid>/<what> of pid contains secret. */
static void assert_not_in_proc(pid_t pid, const char *what, const char *secret)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
    FILE *f = fopen(path, "r");
    SF_ASSERT(f != NULL, "cannot read %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (text[i] == '\0')
            text[i] = '\n';
    text[n] = '\0';
    SF_ASSERT(strstr(text, secret) == NULL, "a secret is in %s", path);
}

static void test_secret_files_at_start(void **state)
{
    (void)state;
    static const char password[] = "File-Redis-Pass-6Ty2";
    static const char token[] = "File-Admin-Token-1Pk7";
    const char *rargs[] = {"--requirepass", password, NULL};
    rf_server *pw = rf_start(rargs);
    SF_ASSERT(pw != NULL, "%s", "redis-server with a password did not start");
    char url[256], url_file[512], token_file[512];
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d\n", password, rf_port(pw));
    secret_file(url, url_file, sizeof url_file);
    snprintf(url, sizeof url, "%s\n", token);
    secret_file(url, token_file, sizeof token_file);

    const char *args[] = {"--redis-url-file",
                          url_file,
                          "--admin-token-file",
                          token_file,
                          "--log-level",
                          "debug",
                          NULL};
    sf_service *svc = sf_start(NULL, args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with secret files");
    int port = sf_port(svc);
    sf_resp r = {0};
    sf_http(port, "GET", "/readyz", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    char sku[64];
    tu_unique_name(sku, sizeof sku, "files");
    SF_ASSERT(sf_put_sku(port, NULL, sku, 5, 1, &r) == 401, "PUT without the token: %s",
              sf_resp_summary(&r));
    SF_ASSERT(sf_put_sku(port, token, sku, 5, 1, &r) == 201, "PUT with the file's token: %s",
              sf_resp_summary(&r));
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
    pid_t pid = sf_pid(svc);
    assert_not_in_proc(pid, "cmdline", password);
    assert_not_in_proc(pid, "cmdline", token);
    assert_not_in_proc(pid, "environ", password);
    assert_not_in_proc(pid, "environ", token);
    assert_not_in_log(sf_log_path(svc), password, "the Redis password");
    assert_not_in_log(sf_log_path(svc), token, "the admin token");
    SF_ASSERT(sf_log_contains(svc, "\"admin_token_file\":\""), "%s",
              "the config line does not name the token file");
    SF_ASSERT_EQ(sf_stop(svc), 0);
    unlink(url_file);
    unlink(token_file);
    rf_stop(pw);
}

static void test_healthcheck_mode(void **state)
{
    (void)state;
    sf_service *svc = sf_start(rf_url(gf_redis), NULL);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start");
    char port[16];
    snprintf(port, sizeof port, "%d", sf_port(svc));
    /* The port through the environment, as a container sets it. */
    setenv("INVENTORY_PORT", port, 1);
    const char *args[] = {"--healthcheck", "--bind", "127.0.0.1", NULL};
    char out[256], err[512];
    int st = sf_run(args, 5000, out, sizeof out, err, sizeof err);
    SF_ASSERT(st == 0, "--healthcheck against a live server: exit %d, %s", st, err);
    SF_ASSERT(strstr(out, "healthy") != NULL, "stdout: %s", out);
    SF_ASSERT_EQ(sf_stop(svc), 0);
    st = sf_run(args, 5000, out, sizeof out, err, sizeof err);
    unsetenv("INVENTORY_PORT");
    SF_ASSERT(st == 1, "--healthcheck against nothing: exit %d", st);
    SF_ASSERT(strstr(err, "healthcheck: connect") != NULL, "stderr: %s", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_token_never_logged),
        cmocka_unit_test(test_redis_password_and_acl_user),
        cmocka_unit_test(test_admin_closed_without_token_over_http),
        cmocka_unit_test(test_order_ids_unguessable),
        cmocka_unit_test(test_readyz_reason_is_short),
        cmocka_unit_test(test_secret_files_at_start),
        cmocka_unit_test(test_healthcheck_mode),
    };
    return SF_RUN_GROUP_TESTS(tests, gf_group_setup, sf_group_teardown);
}
