/*
 * What operators read (issue 14, "Logs"), end to end against a real inventoryd and redis-server:
 *   - every response carries X-Request-Id: made here (32 hex digits) unless a trusted proxy
 *     sent a well-formed one, which is echoed; a malformed one, or one from a peer that is not a
 *     trusted proxy, is replaced;
 *   - every log line written about a request carries its id;
 *   - admin actions (PUT, restock, DELETE of a SKU, cancel) are logged at info as "audit" lines
 *     with the token's fingerprint (SHA-256, 8 hex digits) and never the token; a refused one
 *     (401) at warn;
 *   - --access-log FILE writes one JSON line per request with the same id, and SIGHUP re-opens
 *     the file (logrotate);
 *   - GET / is the dashboard and GET /queue the queue page: HTML with a Content-Security-Policy,
 *     and a page contacts nothing but this origin (no http(s):// URL in it).
 */
#include "svc_test.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"

#define TOKEN "ops-test-token-0123456789"

static sf_service *svc;   /* trusts 127.0.0.1 as a proxy, writes an access log */
static sf_service *plain; /* trusts no proxy */
static char access_path[512];
static char dir[256];

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s/it_ops-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return -1;
    snprintf(access_path, sizeof access_path, "%s/access.log", dir);
    const char *args[] = {"--admin-token", TOKEN, "--trusted-proxies", "127.0.0.1", "--access-log",
                          access_path,     NULL};
    const char *pargs[] = {"--admin-token", TOKEN, NULL};
    return (svc = sf_group_service(args)) && (plain = sf_group_service(pargs)) ? 0 : -1;
}

static int group_teardown(void **state)
{
    int bad = sf_group_teardown(state) != 0;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        bad = 1;
    return bad ? -1 : 0;
}

/* The whole file at path (static buffer, NUL-terminated; "" when unreadable). */
static const char *slurp(const char *path)
{
    static char text[1 << 20];
    FILE *f = fopen(path, "r");
    if (!f) {
        text[0] = '\0';
        return text;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static int is_made_id(const char *id)
{
    if (!id || strlen(id) != 32)
        return 0;
    for (const char *p = id; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* The parsed lines of the file at path whose text contains needle (a new JSON array). */
static json_t *lines_with(const char *path, const char *needle)
{
    json_t *out = json_array();
    const char *text = slurp(path);
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char *copy = strndup(line, n);
        if (strstr(copy, needle)) {
            json_error_t je;
            json_t *o = json_loads(copy, 0, &je);
            SF_ASSERT(o != NULL, "not JSON: %s", copy);
            json_array_append_new(out, o);
        }
        free(copy);
        line = nl ? nl + 1 : line + n;
    }
    return out;
}

static void test_every_response_has_an_id(void **state)
{
    (void)state;
    struct {
        const char *method, *path, *body;
        int status;
    } cases[] = {
        {"GET", "/healthz", NULL, 200},
        {"GET", "/metrics", NULL, 200},
        {"GET", "/", NULL, 200},
        {"GET", "/nope", NULL, 404},
        {"PATCH", "/api/v1/orders", NULL, 405},
        {"GET", "/api/v1/skus/none-such", NULL, 404},
        {"PUT", "/api/v1/skus/x", "{}", 401},
        {"POST", "/api/v1/orders", "{", 415},
    };
    sf_resp r = {0};
    char seen[8][64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sf_http(sf_port(plain), cases[i].method, cases[i].path, NULL, cases[i].body,
                cases[i].body ? strlen(cases[i].body) : 0, &r);
        SF_ASSERT_STATUS(&r, cases[i].status);
        const char *id = sf_header(&r, "X-Request-Id");
        SF_ASSERT(is_made_id(id), "%s %s: X-Request-Id %s", cases[i].method, cases[i].path,
                  id ? id : "(none)");
        snprintf(seen[i], sizeof seen[i], "%s", id);
        for (size_t j = 0; j < i; j++)
            SF_ASSERT(strcmp(seen[i], seen[j]) != 0, "request id %s given twice", id);
    }
    sf_resp_free(&r);
}

static void test_trusted_proxy_id(void **state)
{
    (void)state;
    sf_resp r = {0};
    const char *good[] = {"X-Request-Id: edge-1234:abc/def=+.@_", NULL};
    sf_http(sf_port(svc), "GET", "/healthz", good, NULL, 0, &r);
    SF_ASSERT(strcmp(sf_header(&r, "X-Request-Id"), "edge-1234:abc/def=+.@_") == 0,
              "a trusted proxy's id is not echoed: %s", sf_header(&r, "X-Request-Id"));
    /* Malformed (a space, a quote, too long): replaced by a made one. */
    char longid[200];
    memset(longid, 'a', 129);
    longid[129] = '\0';
    char hlong[240];
    snprintf(hlong, sizeof hlong, "X-Request-Id: %s", longid);
    const char *bad[][2] = {
        {"X-Request-Id: two words", NULL}, {"X-Request-Id: a\"b", NULL}, {hlong, NULL}};
    for (size_t i = 0; i < 3; i++) {
        sf_http(sf_port(svc), "GET", "/healthz", bad[i], NULL, 0, &r);
        SF_ASSERT(is_made_id(sf_header(&r, "X-Request-Id")), "%s was taken: %s", bad[i][0],
                  sf_header(&r, "X-Request-Id"));
    }
    /* A peer that is not a trusted proxy cannot choose its id. */
    sf_http(sf_port(plain), "GET", "/healthz", good, NULL, 0, &r);
    SF_ASSERT(is_made_id(sf_header(&r, "X-Request-Id")),
              "an untrusted peer's X-Request-Id was taken: %s", sf_header(&r, "X-Request-Id"));
    sf_resp_free(&r);
}

static void test_audit_and_request_ids_in_log(void **state)
{
    (void)state;
    char sku[64], path[128], fp[9];
    tu_unique_name(sku, sizeof sku, "ops");
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sha256_hex_prefix(TOKEN, strlen(TOKEN), fp, 8);
    sf_resp r = {0};
    const char *hdr[] = {"Content-Type: application/json", "Authorization: Bearer " TOKEN,
                         "X-Request-Id: audit-put-1", NULL};
    const char *put = "{\"stock\":10,\"segments\":2}";
    sf_http(sf_port(svc), "PUT", path, hdr, put, strlen(put), &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(sf_restock(sf_port(svc), TOKEN, sku, 3, &r) == 200, "%s", sf_resp_summary(&r));
    char restock_id[64];
    snprintf(restock_id, sizeof restock_id, "%s", sf_header(&r, "X-Request-Id"));
    sf_order(NULL, sf_port(svc), sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    char cancel[256];
    snprintf(cancel, sizeof cancel, "/api/v1/orders/%s", sf_str(r.json, "order_id"));
    sf_json_request(NULL, sf_port(svc), "DELETE", cancel, TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_json_request(NULL, sf_port(svc), "DELETE", path, "wrong-token", NULL, NULL, &r);
    SF_ASSERT_ERROR(&r, 401, "unauthorized");
    sf_json_request(NULL, sf_port(svc), "DELETE", path, TOKEN, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);

    const char *log = sf_log_path(svc);
    SF_ASSERT(strstr(slurp(log), TOKEN) == NULL, "%s", "the admin token is in the log");
    json_t *audit = lines_with(log, "\"event\":\"audit\"");
    const char *want[][4] = {{"sku_put", "201", "info", "token"},
                             {"sku_restock", "200", "info", "token"},
                             {"order_cancel", "200", "info", "token"},
                             {"sku_delete", "401", "warn", "refused"},
                             {"sku_delete", "204", "info", "token"}};
    size_t found = 0;
    size_t i;
    json_t *line;
    json_array_foreach(audit, i, line)
    {
        json_t *a = json_object_get(line, "audit");
        const char *target = json_string_value(json_object_get(a, "sku"));
        const char *order = json_string_value(json_object_get(a, "order_id"));
        if (!(target && strcmp(target, sku) == 0) && !(order && strstr(order, sku)))
            continue;
        SF_ASSERT(found < 5, "%s", "more audit lines than admin requests");
        char status[8];
        snprintf(status, sizeof status, "%lld", sf_json_int(a, "status", -1));
        SF_ASSERT(strcmp(sf_str(a, "action"), want[found][0]) == 0 &&
                      strcmp(status, want[found][1]) == 0 &&
                      strcmp(sf_str(line, "level"), want[found][2]) == 0 &&
                      strcmp(sf_str(a, "auth"), want[found][3]) == 0,
                  "audit line %zu: %s", found, json_dumps(line, JSON_COMPACT));
        SF_ASSERT(json_object_get(line, "request_id") != NULL, "%s", "audit line without id");
        if (found == 0)
            SF_ASSERT(strcmp(sf_str(line, "request_id"), "audit-put-1") == 0,
                      "the PUT's audit line has id %s", sf_str(line, "request_id"));
        if (found == 1)
            SF_ASSERT(strcmp(sf_str(line, "request_id"), restock_id) == 0,
                      "restock: log id %s, header %s", sf_str(line, "request_id"), restock_id);
        if (found == 3) {
            char wfp[9];
            sha256_hex_prefix("wrong-token", 11, wfp, 8);
            SF_ASSERT(strcmp(sf_str(a, "token_fingerprint"), wfp) == 0, "401 fingerprint %s",
                      sf_str(a, "token_fingerprint"));
        } else {
            SF_ASSERT(strcmp(sf_str(a, "token_fingerprint"), fp) == 0, "fingerprint %s, want %s",
                      sf_str(a, "token_fingerprint"), fp);
        }
        found++;
    }
    SF_ASSERT(found == 5, "%zu audit lines for %s", found, sku);
    json_decref(audit);

    /* The handler's own line about the PUT carries the same id. */
    json_t *put_lines = lines_with(log, "\"event\":\"sku_put\"");
    int ok = 0;
    json_array_foreach(put_lines, i, line) ok |=
        strstr(sf_str(line, "msg"), sku) && strcmp(sf_str(line, "request_id"), "audit-put-1") == 0;
    SF_ASSERT(ok, "%s", "the sku_put line does not carry the request id");
    json_decref(put_lines);
    /* So does the restock's, written after a layout settle and a batch of status reads: their
     * callbacks run in the request's log context (store.c's one bracket). */
    json_t *restock_lines = lines_with(log, "\"event\":\"sku_restock\"");
    ok = 0;
    json_array_foreach(restock_lines, i, line) ok |=
        strstr(sf_str(line, "msg"), sku) && strcmp(sf_str(line, "request_id"), restock_id) == 0;
    SF_ASSERT(ok, "%s", "the sku_restock line does not carry the request id");
    json_decref(restock_lines);
}

static void test_access_log_and_sighup(void **state)
{
    (void)state;
    sf_resp r = {0};
    const char *hdr[] = {"X-Request-Id: access-1", NULL};
    sf_http(sf_port(svc), "GET", "/api/v1/skus/not-there", hdr, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 404);
    json_t *lines = lines_with(access_path, "\"access-1\"");
    SF_ASSERT(json_array_size(lines) == 1, "%zu access lines with access-1",
              json_array_size(lines));
    json_t *e = json_array_get(lines, 0);
    SF_ASSERT(
        strcmp(sf_str(e, "method"), "GET") == 0 &&
            strcmp(sf_str(e, "path"), "/api/v1/skus/not-there") == 0 &&
            strcmp(sf_str(e, "route"), "/api/v1/skus/{sku}") == 0 &&
            sf_json_int(e, "status", 0) == 404 && strcmp(sf_str(e, "client"), "127.0.0.1") == 0 &&
            json_is_number(json_object_get(e, "duration_s")) && sf_json_int(e, "bytes", 0) > 0,
        "access line %s", json_dumps(e, JSON_COMPACT));
    json_decref(lines);

    /* logrotate: move the file away, SIGHUP, the next request lands in a new file. */
    char rotated[600];
    snprintf(rotated, sizeof rotated, "%s.1", access_path);
    SF_ASSERT(rename(access_path, rotated) == 0, "%s", "rename");
    SF_ASSERT(kill(sf_pid(svc), SIGHUP) == 0, "%s", "kill -HUP");
    const char *hdr2[] = {"X-Request-Id: access-2", NULL};
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        sf_http(sf_port(svc), "GET", "/healthz", hdr2, NULL, 0, &r);
        seen = strstr(slurp(access_path), "\"access-2\"") != NULL;
        if (!seen)
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    SF_ASSERT(seen, "%s", "no request reached the re-opened access log after SIGHUP");
    SF_ASSERT(strstr(slurp(rotated), "\"access-1\"") != NULL, "%s",
              "the rotated file lost its lines");
    SF_ASSERT(sf_alive(svc), "%s", "SIGHUP stopped the service");
    sf_resp_free(&r);
}

static void test_dashboard_page(void **state)
{
    (void)state;
    sf_resp r = {0};
    /* the dashboard and the waiting room's queue page (issue 32): the same build, the same CSP */
    static const char *const pages[] = {"/", "/queue"};
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        sf_http(sf_port(plain), "GET", pages[i], NULL, NULL, 0, &r);
        SF_ASSERT_STATUS(&r, 200);
        SF_ASSERT(strncmp(sf_header(&r, "Content-Type"), "text/html", 9) == 0, "Content-Type %s",
                  sf_header(&r, "Content-Type"));
        const char *csp = sf_header(&r, "Content-Security-Policy");
        SF_ASSERT(csp && strstr(csp, "connect-src 'self'") && strstr(csp, "default-src 'none'"),
                  "CSP %s", csp ? csp : "(none)");
        SF_ASSERT(strstr(r.body, "<!doctype html>") == r.body, "%s: not an HTML page", pages[i]);
        SF_ASSERT(strstr(r.body, "@DASHBOARD_") == NULL, "%s: a placeholder was not filled",
                  pages[i]);
        SF_ASSERT(strstr(r.body, "http://") == NULL && strstr(r.body, "https://") == NULL,
                  "%s: the page names another origin", pages[i]);
        SF_ASSERT(strstr(r.body, "Authorization") != NULL, "%s: no bearer header", pages[i]);
        sf_http(sf_port(plain), "HEAD", pages[i], NULL, NULL, 0, &r);
        SF_ASSERT_STATUS(&r, 200);
        sf_http(sf_port(plain), "POST", pages[i], NULL, NULL, 0, &r);
        SF_ASSERT_ERROR(&r, 405, "method_not_allowed");
    }
    sf_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_response_has_an_id),
        cmocka_unit_test(test_trusted_proxy_id),
        cmocka_unit_test(test_audit_and_request_ids_in_log),
        cmocka_unit_test(test_access_log_and_sighup),
        cmocka_unit_test(test_dashboard_page),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
