/*
 * Test support for the service's integration tests (prefix sf_):
 *
 *   - inventoryd processes: started on a free 127.0.0.1 port with the test's arguments, their
 *     stderr in a log file of a temp dir, ready once GET /healthz answers; stopped with SIGTERM
 *     (the exit status is returned), killed, paused and resumed for fault tests. Every process
 *     started here dies with the test: PR_SET_PDEATHSIG, plus lockcore's fixture process
 *     registry (proc_registry.h: at exit and on SIGABRT, SIGSEGV, SIGTERM and SIGINT it ends
 *     what is still running, services before the Redis they use). PR_SET_PDEATHSIG follows the
 *     *thread* that forked: start services from the main thread (cmocka group setup and test
 *     bodies are fine);
 *   - the group's Redis and inventoryd: gf_redis (lockcore's group_fixture.h) and
 *     sf_group_service, stopped by sf_group_teardown;
 *   - a small blocking HTTP/1.1 client over real sockets, keep-alive capable, with timeouts;
 *   - the invariant checker (SPEC §8; tools/check/invcheck.h, the core of inventory-check),
 *     which reads Redis directly with hiredis using the key schema of service/store_keys.txt,
 *     independently of the service's own GET status.
 *
 * Process control is not thread-safe (one thread starts and stops services); the HTTP client
 * and the checker are thread-safe (no shared state).
 */
#ifndef SVC_TESTS_SVC_FIXTURE_H
#define SVC_TESTS_SVC_FIXTURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "group_fixture.h"
#include "invcheck.h"
#include "redis_fixture.h"
#include "testutil.h"

/* ---- inventoryd processes ------------------------------------------------------------------ */

typedef struct sf_service sf_service;

/* The inventoryd binary: $INVENTORY_BUILD_BIN/inventoryd, else inventoryd next to the test
 * binary, else ../bin/inventoryd relative to it. A static string, or NULL (reason on stderr)
 * when none is executable. */
const char *sf_binary(void);

/* The group's inventoryd (cmocka group setup): starts the group's redis-server, gf_redis
 * (group_fixture.h), unless it runs already, then inventoryd on it with args, as sf_start does.
 * A file may start several. Returns the service, or NULL with every group process stopped
 * again. */
sf_service *sf_group_service(const char *const *args);

/* cmocka group teardown: stops the services sf_group_service started, then gf_redis and
 * whatever else the group fixture started (gf_group_teardown). 0, or -1 when a service did not
 * exit with status 0 (its log tail is on stderr). */
int sf_group_teardown(void **state);

/*
 * Starts inventoryd with
 *     --port P --bind 127.0.0.1 --admin-allow-loopback --status-refresh-ms 0
 *     [--redis redis_url] <extra_args...>
 * (--admin-allow-loopback: the suites' admin calls come from loopback, most without a token;
 * pass "--admin-allow-loopback=0" in extra_args for inventoryd's default, closed;
 * --status-refresh-ms 0: a status read after an order shows it, as the suites assert; pass
 * "--status-refresh-ms" "250" for the default)
 * (extra_args NULL-terminated, may be NULL; later flags override earlier ones). Its stdout and
 * stderr go to a log file in a fresh temp dir. Waits (at most 5 s, $SF_START_TIMEOUT_MS) until
 * the process logged that it listens on P and GET /healthz answers 200; a port taken meanwhile
 * is retried with another one. Returns a new service to release with sf_stop, or NULL with the
 * reason and the log on stderr.
 */
sf_service *sf_start(const char *redis_url, const char *const *extra_args);

/* Stops the service: SIGTERM (and SIGCONT, in case it is paused), waits up to 10 s, then
 * SIGKILL. Removes the temp dir and frees svc. Returns the exit status (0..255), 128 + signal
 * when a signal ended it, or -1 when it was not running (or svc is NULL). When the result is
 * not 0 the log tail is printed on stderr. */
int sf_stop(sf_service *svc);

/* sf_stop for svc[0..n) (NULL entries skipped), each set to NULL. 0 when every one exited with
 * status 0, else -1. */
int sf_stop_all(sf_service **svc, int n);

/* Sends sig to the process. SIGKILL also reaps it (a kill -9 crash); it can then be started
 * again on the same port with sf_restart. Returns 0, or -1 when not running. */
int sf_kill(sf_service *svc, int sig);

/* SIGSTOP / SIGCONT. 0, or -1 when not running. */
int sf_pause(sf_service *svc);
int sf_resume(sf_service *svc);

/* Starts a stopped or killed service again with the same port, log file and arguments (SIGTERM
 * first if it still runs). Returns 0 when it answers /healthz, -1 otherwise. */
int sf_restart(sf_service *svc);

/* Non-zero while the process runs (reaps it when it has exited). */
int sf_alive(sf_service *svc);

/* Exit status of an exited process as sf_stop reports it; -1 while it runs or never ran. */
int sf_exit_status(sf_service *svc);

int sf_port(const sf_service *svc);
pid_t sf_pid(const sf_service *svc);            /* 0 when not running */
const char *sf_log_path(const sf_service *svc); /* borrowed, valid until sf_stop */

/* Prints the last max_lines lines of svc's log on stderr, framed with its port; before them the
 * first sanitizer report in the log, whole, when it starts before those lines. */
void sf_print_log(const sf_service *svc, int max_lines);

/* sf_print_log for every service this process is running (for failure messages). */
void sf_print_all_logs(int max_lines);

/* 1 when svc's log contains needle, else 0. */
int sf_log_contains(const sf_service *svc, const char *needle);

/*
 * Runs inventoryd with args (NULL-terminated, not including the program name) to completion,
 * for tests of the command line. Its stdout goes to out and its stderr to err (each
 * NUL-terminated, truncated to len - 1; either may be NULL with len 0). Waits at most
 * timeout_ms, then kills it. Returns the exit status (0..255), 128 + signal when a signal ended
 * it, or -1 when it could not be run or timed out.
 */
int sf_run(const char *const *args, int timeout_ms, char *out, size_t outlen, char *err,
           size_t errlen);

/* ---- HTTP client --------------------------------------------------------------------------- */

#define SF_MAX_HEADERS 48
#define SF_DEFAULT_TIMEOUT_MS 10000

/* One response. status is 0 when none arrived (err says why: connect, timeout, bad syntax). */
typedef struct sf_resp {
    int status;
    char err[160];
    int nheaders;
    char *name[SF_MAX_HEADERS];  /* as received */
    char *value[SF_MAX_HEADERS]; /* trimmed */
    char *body;                  /* NUL-terminated (body_len bytes before it), never NULL after
                                    a response */
    size_t body_len;
    json_t *json;       /* the body parsed as JSON when it is valid JSON, else NULL */
    int64_t elapsed_us; /* from the start of sending to the end of the body */
} sf_resp;

/* The value of header name (case-insensitive) in r, or NULL. Borrowed. */
const char *sf_header(const sf_resp *r, const char *name);

/* Frees what r holds and zeroes it. NULL-safe; safe on a zeroed or already freed response. */
void sf_resp_free(sf_resp *r);

/* "HTTP 409: {body...}" (or "no response: <err>") for failure messages, truncated to fit. A
 * thread-local buffer, overwritten by the next call of the same thread. */
const char *sf_resp_summary(const sf_resp *r);

/* A keep-alive connection to 127.0.0.1:port. Each request waits at most timeout_ms
 * (0 = SF_DEFAULT_TIMEOUT_MS) for connect, send and the whole response. */
typedef struct sf_conn sf_conn;

/* Opens a connection (connects lazily on the first request, and again after the server closed
 * it between requests). Never NULL unless out of memory. Free with sf_conn_close. */
sf_conn *sf_conn_open(int port, int timeout_ms);
void sf_conn_close(sf_conn *c);

/*
 * Sends one request on c and reads the response into *resp (freed first with sf_resp_free).
 * headers: NULL-terminated "Name: value" strings, may be NULL. The client adds Host, and
 * Content-Length when body is not NULL (len bytes); nothing else (no Content-Type: see
 * sf_json_request). A connection the server closed while idle is reopened before sending; a
 * request is never sent twice. Returns resp->status (0 when no response arrived; the connection
 * is then closed).
 */
int sf_conn_request(sf_conn *c, const char *method, const char *path, const char *const *headers,
                    const char *body, size_t len, sf_resp *resp);

/* One request on a connection of its own ("Connection: close"). Same contract. */
int sf_http(int port, const char *method, const char *path, const char *const *headers,
            const char *body, size_t len, sf_resp *resp);

/* sf_http (c == NULL) or sf_conn_request with a JSON body (NULL for none): adds
 * "Content-Type: application/json" when there is a body, "Authorization: Bearer <token>" when
 * token is not NULL, and "Idempotency-Key: <idem>" when idem is not NULL. */
int sf_json_request(sf_conn *c, int port, const char *method, const char *path, const char *token,
                    const char *idem, const char *json_body, sf_resp *resp);

/* PUT /api/v1/skus/{sku} {"stock": stock, "segments": segments}. Returns the status. */
int sf_put_sku(int port, const char *token, const char *sku, long long stock, int segments,
               sf_resp *resp);

/* POST /api/v1/orders {"sku": sku, "quantity": quantity} on c (or a fresh connection to port
 * when c is NULL). Returns the status. */
int sf_order(sf_conn *c, int port, const char *sku, long long quantity, sf_resp *resp);

/* POST /api/v1/skus/{sku}/restock {"quantity": quantity}. Returns the status. */
int sf_restock(int port, const char *token, const char *sku, long long quantity, sf_resp *resp);

/* GET /api/v1/skus/{sku}: the status object (new reference) when the answer is 200, else NULL
 * (with the response summary on stderr). */
json_t *sf_sku_status(int port, const char *sku);

/* The error code of an error body ({"error": code, ...}) or "" (borrowed from r). */
const char *sf_error_code(const sf_resp *r);

/* An integer member of r->json (or of obj), or dflt when missing or not an integer. */
long long sf_json_int(const json_t *obj, const char *key, long long dflt);

/* The value of one sample of GET /metrics, the series given exactly as it is written before
 * the value, labels included: "inventory_critical_sections_peak",
 * "inventory_orders_total{result=\"created\"}". Returns -1 when the series is missing or the
 * scrape failed. */
double sf_metric(int port, const char *series);

/* ---- invariants (SPEC §8), read straight from Redis ----------------------------------------- */

/* The checker is tools/check/invcheck.h's (inventory-check's core): the tests and the program
 * share one implementation. */
#define SF_MAX_SEGMENTS IC_MAX_SEGMENTS
#define SF_MAX_USERS IC_MAX_USERS
#define SF_USER_ORDERS_MAX IC_USER_ORDERS_MAX
typedef ic_report sf_report;

/* ic_check (invcheck.h, which says what is checked) with the default options: every check of
 * a SKU at rest, follows and intents of multi-segment orders allowed. Returns 0 when the checks
 * could run (rep->ok says whether they passed; a missing SKU is found = 0, ok = 0), -1 when
 * Redis could not be read (rep->problems says why). */
int sf_check_invariants(const char *redis_url, const char *sku, sf_report *rep);

/* ic_check_group (invcheck.h): no user over limit group g's limit in the live orders of
 * skus[0..n), each counted in the group's entries. 0 when it held (a deleted group: nothing to
 * hold), -1 when it did not or Redis could not be read (the report is printed on stderr). */
int sf_check_group(const char *redis_url, const char *g, const char (*skus)[64], int n);

/* sf_check_invariants, and also: no follow queued and no intent left (rep->follows and
 * rep->intents 0). For once traffic has stopped and the sweepers have drained what cut-off
 * requests left. */
int sf_check_invariants_quiescent(const char *redis_url, const char *sku, sf_report *rep);

/* Waits (at most timeout_ms) until sku's follow queues and inv:2:{S}:multi are empty — the
 * sweepers drain them; a cut-off order's intent goes D + 1 s after its deadline. Returns how
 * many were left (0: drained), -1 when Redis could not be read. Call it once traffic has
 * stopped, before SF_ASSERT_QUIESCENT. */
long long sf_wait_multi_drained(const char *redis_url, const char *sku, int timeout_ms);

/* Writes the report (totals, then the problems) to stderr, prefixed with what. */
void sf_report_print(const char *what, const sf_report *rep);

/* ---- buyers (svc_buyer.c) ---------------------------------------------------------------- */

/* A buyer thread (pthread_create(&b.tid, NULL, sf_buy_ones, &b)): orders of one unit of sku on
 * port, one connection, until *stop is set or a 409 (sold out) comes; created counts 201s,
 * sold_out the 409, other anything else (each followed by a 20 ms pause). */
typedef struct sf_buyer {
    int port;
    const char *sku;
    atomic_int *stop;
    atomic_int created;
    int sold_out, other;
    pthread_t tid;
} sf_buyer;
void *sf_buy_ones(void *arg);

/* One order of one unit of sku on port, in a thread of its own (sf_post_one): its status and
 * the response's summary (sf_resp_summary). */
typedef struct sf_post {
    int port;
    const char *sku;
    int status;
    char summary[256];
    pthread_t tid;
} sf_post;
void *sf_post_one(void *arg);

#endif /* SVC_TESTS_SVC_FIXTURE_H */
