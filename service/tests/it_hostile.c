/*
 * Hostile input over real sockets against a real inventoryd and redis-server (issue 5,
 * "Hostile input"; docs/reliability.md lists every class with its observed answer).
 *
 *   - test_hostile_table: well over 60 malformed requests, each written byte for byte on a raw
 *     socket (NUL bytes, invalid UTF-8, broken framing: things a normal client cannot send).
 *     Each row names the status it must get and the SPEC §5 error code of its JSON body, or
 *     NULL where libmicrohttpd refuses the request itself (before any handler runs) with its
 *     own HTML page. After every row the process still answers /healthz and the SKU's version,
 *     stock, sold units and orders are what they were; at the end the Redis invariant checker
 *     agrees, Redis holds exactly the keys it held before, and every key follows the schema
 *     of docs/design.md (keys are only ever built from validated SKUs);
 *   - test_hostile_looking_but_valid: printable strings that look like Redis commands or Lua
 *     are valid user ids and Idempotency-Keys: stored verbatim, nothing else happens;
 *   - test_slow_headers: 16 clients dribbling their request one byte per 100 ms do not delay
 *     normal requests (latency measured), and are answered in the end;
 *   - test_idle_connections: 1,200 connections opened and left idle (some with half a request
 *     line) while normal requests, orders included, are served; the soft RLIMIT_NOFILE is
 *     raised for the test and the inventoryd it starts;
 *   - test_log_flood: 500 malformed requests do not write 500 log lines (at most 20 of
 *     libmicrohttpd's messages a second, and a count of the dropped ones);
 *   - test_abandoned_body_ends: a client that sends part of a body and gives up gets its
 *     connection closed at once, and a SIGTERM then exits without waiting out its grace.
 */
#include "svc_raw.h"
#include "svc_test.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static sf_service *svc;
static int port;

static const char TOKEN[] = "it-hostile-admin-token-8c1f";

#define IDLE_CONNS 1200
#define MIN_IDLE_CONNS 1000
#define SLOW_CLIENTS 16
#define WANT_NOFILE (IDLE_CONNS + 512)

/* Raises the soft open-files limit to at least want (capped by the hard limit), so this test
 * and the inventoryd it starts (which inherits it) can hold IDLE_CONNS connections each. */
static void raise_nofile(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        fprintf(stderr, "it_hostile: cannot raise RLIMIT_NOFILE: %s\n", strerror(errno));
}

static int group_setup(void **state)
{
    (void)state;
    raise_nofile(WANT_NOFILE);
    /* Two HTTP threads: a handful of slow or idle clients could starve them if they blocked. */
    const char *args[] = {"--admin-token", TOKEN, "--threads", "2", "--log-level", "debug", NULL};
    svc = sf_group_service(args);
    port = svc != NULL ? sf_port(svc) : 0;
    return svc != NULL ? 0 : -1;
}

/* ---- raw HTTP ---------------------------------------------------------------------------- */

/* Builders over svc_raw's growable buffer. */
static void buf_puts(struct sr_buf *b, const char *s)
{
    sr_put(b, s, strlen(s));
}

static void buf_fill(struct sr_buf *b, char c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sr_put(b, &c, 1);
}

/* ---- the table ----------------------------------------------------------------------------- */

/* Row flags. */
#define F_JSON 1u   /* add Content-Type: application/json */
#define F_ADMIN 2u  /* add Authorization: Bearer <admin token> */
#define F_CLOSE 4u  /* the server must close the connection after answering */
#define F_SHUTWR 8u /* half-close after sending (client gives up) */
#define F_BODY 16u  /* send Content-Length even for an empty body */
#define F_KEEP 32u  /* no Connection: close (framing tests: see whether the server closes) */

/* A generator writes the whole raw request for rows that need big or built payloads. */
typedef void (*gen_fn)(struct sr_buf *out, const char *sku);

struct row {
    const char *name;
    const char *method;  /* request line method ("" for raw rows) */
    const char *target;  /* request target; $SKU and the $A/$U fillers are expanded */
    const char *headers; /* extra header lines, each ending in \r\n (NUL bytes allowed:
                            headers_len says how long); $SKU, $TOKEN, fillers expanded */
    size_t headers_len;
    const char *body; /* may hold NUL bytes: body_len says how long it is */
    size_t body_len;
    unsigned flags;
    gen_fn gen;       /* when set, builds the whole request instead of the fields above */
    int status;       /* expected status; 0: closed without any response */
    const char *code; /* expected JSON error code; NULL: libmicrohttpd's own refusal */
};

#define BODY(s) .body = s, .body_len = sizeof(s) - 1
#define HDRS(s) .headers = s, .headers_len = sizeof(s) - 1
#define ORDER(name_, body_)                                                                        \
    {                                                                                              \
        .name = name_, .method = "POST", .target = "/api/v1/orders", BODY(body_), .flags = F_JSON, \
        .status = 400, .code = "invalid_request"                                                   \
    }

/* Expands $SKU, $TOKEN, $A65 / $A256 (that many 'A'), $U129 (129 'u') in s[0..n). */
static void expand_marks(struct sr_buf *out, const char *s, size_t n, const char *sku)
{
    static const struct {
        const char *mark;
        char fill;
        size_t count;
    } fillers[] = {{"$A65", 'A', 65}, {"$A256", 'A', 256}, {"$U129", 'u', 129}};
    for (size_t i = 0; i < n;) {
        if (s[i] == '$') {
            if (n - i >= 4 && memcmp(s + i, "$SKU", 4) == 0) {
                buf_puts(out, sku);
                i += 4;
                continue;
            }
            if (n - i >= 6 && memcmp(s + i, "$TOKEN", 6) == 0) {
                buf_puts(out, TOKEN);
                i += 6;
                continue;
            }
            int done = 0;
            for (size_t f = 0; f < sizeof fillers / sizeof fillers[0] && !done; f++) {
                size_t ml = strlen(fillers[f].mark);
                if (n - i >= ml && memcmp(s + i, fillers[f].mark, ml) == 0) {
                    buf_fill(out, fillers[f].fill, fillers[f].count);
                    i += ml;
                    done = 1;
                }
            }
            if (done)
                continue;
        }
        sr_put(out, s + i, 1);
        i++;
    }
}

static void post_head(struct sr_buf *out, size_t content_length)
{
    char h[256];
    snprintf(h, sizeof h,
             "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             content_length);
    buf_puts(out, h);
}

static void gen_deep_arrays(struct sr_buf *out, const char *sku)
{
    (void)sku;
    post_head(out, 10000);
    buf_fill(out, '[', 10000);
}

static void gen_deep_objects(struct sr_buf *out, const char *sku)
{
    (void)sku;
    struct sr_buf b = {0};
    for (int i = 0; i < 3000; i++)
        buf_puts(&b, "{\"a\":");
    post_head(out, b.len);
    sr_put(out, b.p, b.len);
    free(b.p);
}

static void gen_deep_unknown_field(struct sr_buf *out, const char *sku)
{
    struct sr_buf b = {0};
    buf_puts(&b, "{\"sku\":\"");
    buf_puts(&b, sku);
    buf_puts(&b, "\",\"quantity\":0,\"x\":");
    buf_fill(&b, '[', 1000);
    buf_fill(&b, ']', 1000);
    buf_puts(&b, "}");
    post_head(out, b.len);
    sr_put(out, b.p, b.len);
    free(b.p);
}

static void gen_big_array(struct sr_buf *out, const char *sku)
{
    (void)sku;
    struct sr_buf b = {0};
    buf_puts(&b, "[");
    while (b.len < 16380)
        buf_puts(&b, "1,");
    buf_puts(&b, "1]");
    post_head(out, b.len);
    sr_put(out, b.p, b.len);
    free(b.p);
}

static void gen_chunked_100k(struct sr_buf *out, const char *sku)
{
    (void)sku;
    buf_puts(out, "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 100; i++) {
        buf_puts(out, "400\r\n");
        buf_fill(out, ' ', 1024);
        buf_puts(out, "\r\n");
    }
    buf_puts(out, "0\r\n\r\n");
}

static void gen_huge_header(struct sr_buf *out, const char *sku)
{
    (void)sku;
    buf_puts(out, "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Big: ");
    buf_fill(out, 'a', 100000);
    buf_puts(out, "\r\n\r\n");
}

static void gen_many_headers(struct sr_buf *out, const char *sku)
{
    (void)sku;
    buf_puts(out, "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (int i = 0; i < 10000; i++) {
        char h[32];
        snprintf(h, sizeof h, "X-%d: v\r\n", i);
        buf_puts(out, h);
    }
    buf_puts(out, "\r\n");
}

static void gen_long_url(struct sr_buf *out, const char *sku)
{
    (void)sku;
    buf_puts(out, "GET /api/v1/skus/");
    buf_fill(out, 'A', 100000);
    buf_puts(out, " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
}

static void gen_long_token(struct sr_buf *out, const char *sku)
{
    char h[256];
    snprintf(h, sizeof h,
             "DELETE /api/v1/skus/%s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
             "Authorization: Bearer ",
             sku);
    buf_puts(out, h);
    buf_fill(out, 'T', 10000);
    buf_puts(out, "\r\n\r\n");
}

/* Request-line and header rows: raw requests, sent as they are ("$SKU" expanded). */
#define RAW(name_, text_, status_, code_, flags_)                                                  \
    {                                                                                              \
        .name = name_, .method = "", BODY(text_), .flags = flags_, .status = status_,              \
        .code = code_                                                                              \
    }

static const struct row rows[] = {
    /* ---- JSON bodies: truncated, nested, huge ---- */
    ORDER("truncated object", "{\"sku\":\"$SKU\""),
    ORDER("truncated after a colon", "{\"sku\":\"$SKU\",\"quantity\":"),
    ORDER("a lone brace", "{"),
    {.name = "empty body (Content-Length: 0)",
     .method = "POST",
     .target = "/api/v1/orders",
     BODY(""),
     .flags = F_JSON | F_BODY,
     .status = 400,
     .code = "invalid_request"},
    {.name = "10,000 nested arrays",
     .gen = gen_deep_arrays,
     .status = 400,
     .code = "invalid_request"},
    {.name = "3,000 nested objects",
     .gen = gen_deep_objects,
     .status = 400,
     .code = "invalid_request"},
    {.name = "1,000-deep array in an unknown member",
     .gen = gen_deep_unknown_field,
     .status = 400,
     .code = "invalid_request"},
    {.name = "16 KiB top-level array",
     .gen = gen_big_array,
     .status = 400,
     .code = "invalid_request"},
    /* ---- wrong types and ranges ---- */
    ORDER("quantity 2^63", "{\"sku\":\"$SKU\",\"quantity\":9223372036854775808}"),
    ORDER("quantity 2^63-1", "{\"sku\":\"$SKU\",\"quantity\":9223372036854775807}"),
    ORDER("quantity -2^63-1", "{\"sku\":\"$SKU\",\"quantity\":-9223372036854775809}"),
    ORDER("quantity -1", "{\"sku\":\"$SKU\",\"quantity\":-1}"),
    ORDER("quantity 0", "{\"sku\":\"$SKU\",\"quantity\":0}"),
    ORDER("quantity -0", "{\"sku\":\"$SKU\",\"quantity\":-0}"),
    ORDER("quantity 1.5", "{\"sku\":\"$SKU\",\"quantity\":1.5}"),
    ORDER("quantity 1.0", "{\"sku\":\"$SKU\",\"quantity\":1.0}"),
    ORDER("quantity 1e3", "{\"sku\":\"$SKU\",\"quantity\":1e3}"),
    ORDER("quantity 1E400", "{\"sku\":\"$SKU\",\"quantity\":1E400}"),
    ORDER("quantity \"1\"", "{\"sku\":\"$SKU\",\"quantity\":\"1\"}"),
    ORDER("quantity null", "{\"sku\":\"$SKU\",\"quantity\":null}"),
    ORDER("quantity true", "{\"sku\":\"$SKU\",\"quantity\":true}"),
    ORDER("quantity []", "{\"sku\":\"$SKU\",\"quantity\":[]}"),
    ORDER("quantity 101 (over --max-quantity)", "{\"sku\":\"$SKU\",\"quantity\":101}"),
    ORDER("quantity NaN", "{\"sku\":\"$SKU\",\"quantity\":NaN}"),
    ORDER("quantity Infinity", "{\"sku\":\"$SKU\",\"quantity\":Infinity}"),
    /* ---- NUL bytes and bad UTF-8 ---- */
    ORDER("NUL byte between tokens", "{\"sku\":\"$SKU\"\0}"),
    ORDER("NUL byte inside a string", "{\"sku\":\"$SKU\0\"}"),
    ORDER("NUL byte after the object", "{\"sku\":\"$SKU\"}\0"),
    ORDER("\\u0000 in sku", "{\"sku\":\"$SKU\\u0000\"}"),
    ORDER("\\u0000 in user_id", "{\"sku\":\"$SKU\",\"user_id\":\"a\\u0000b\"}"),
    ORDER("invalid UTF-8 (0xff 0xfe)", "{\"sku\":\"\xff\xfe\"}"),
    ORDER("overlong UTF-8 (C0 AF)", "{\"sku\":\"$SKU\",\"user_id\":\"\xc0\xaf\"}"),
    ORDER("UTF-8 encoded surrogate", "{\"sku\":\"$SKU\",\"user_id\":\"\xed\xa0\x80\"}"),
    ORDER("lone surrogate escape", "{\"sku\":\"$SKU\",\"user_id\":\"\\ud800\"}"),
    ORDER("byte order mark", "\xef\xbb\xbf{\"sku\":\"$SKU\"}"),
    /* ---- SKUs ---- */
    ORDER("sku with braces (hash tag)", "{\"sku\":\"$SKU}:0{\"}"),
    ORDER("sku with a space", "{\"sku\":\"a b\"}"),
    ORDER("sku with a newline", "{\"sku\":\"a\\nb\"}"),
    ORDER("sku with a tab", "{\"sku\":\"a\\tb\"}"),
    ORDER("sku 65 characters", "{\"sku\":\"$A65\"}"),
    ORDER("sku 256 characters", "{\"sku\":\"$A256\"}"),
    ORDER("sku empty", "{\"sku\":\"\"}"),
    ORDER("sku a number", "{\"sku\":42}"),
    ORDER("sku null", "{\"sku\":null}"),
    ORDER("sku an array", "{\"sku\":[\"$SKU\"]}"),
    ORDER("sku non-ASCII", "{\"sku\":\"s\xc3\xa9\"}"),
    ORDER("sku Redis protocol (SET x y)",
          "{\"sku\":\"*3\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nx\\r\\n$1\\r\\ny\\r\\n\"}"),
    ORDER("sku Lua injection", "{\"sku\":\"x') redis.call('FLUSHALL') --\"}"),
    ORDER("sku glob", "{\"sku\":\"*\"}"),
    /* ---- user_id ---- */
    ORDER("user_id Redis protocol (FLUSHALL)",
          "{\"sku\":\"$SKU\",\"user_id\":\"*1\\r\\n$8\\r\\nFLUSHALL\\r\\n\"}"),
    ORDER("user_id 129 characters", "{\"sku\":\"$SKU\",\"user_id\":\"$U129\"}"),
    ORDER("user_id control character", "{\"sku\":\"$SKU\",\"user_id\":\"a\\u0001b\"}"),
    ORDER("user_id DEL", "{\"sku\":\"$SKU\",\"user_id\":\"a\x7f\"}"),
    ORDER("user_id non-ASCII", "{\"sku\":\"$SKU\",\"user_id\":\"\\u00e9\"}"),
    ORDER("user_id empty", "{\"sku\":\"$SKU\",\"user_id\":\"\"}"),
    ORDER("user_id a number", "{\"sku\":\"$SKU\",\"user_id\":7}"),
    /* ---- JSON grammar ---- */
    ORDER("duplicate key", "{\"sku\":\"$SKU\",\"sku\":\"$SKU\"}"),
    ORDER("trailing garbage", "{\"sku\":\"$SKU\"} x"),
    ORDER("two objects", "{\"sku\":\"$SKU\"}{\"sku\":\"$SKU\"}"),
    ORDER("top-level array", "[{\"sku\":\"$SKU\"}]"),
    ORDER("top-level string", "\"$SKU\""),
    ORDER("top-level null", "null"),
    ORDER("comment", "{\"sku\":\"$SKU\" /* c */}"),
    ORDER("single quotes", "{'sku':'$SKU'}"),
    ORDER("trailing comma", "{\"sku\":\"$SKU\",}"),
    ORDER("unquoted key", "{sku:\"$SKU\"}"),
    /* ---- PUT and restock bodies ---- */
    {.name = "PUT stock 2^63",
     .method = "PUT",
     .target = "/api/v1/skus/$SKU",
     BODY("{\"stock\":9223372036854775808,\"segments\":1}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "PUT segments 0",
     .method = "PUT",
     .target = "/api/v1/skus/$SKU",
     BODY("{\"stock\":5,\"segments\":0}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "PUT segments 1e6",
     .method = "PUT",
     .target = "/api/v1/skus/$SKU",
     BODY("{\"stock\":5,\"segments\":1000000}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "restock -1",
     .method = "POST",
     .target = "/api/v1/skus/$SKU/restock",
     BODY("{\"quantity\":-1}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "restock 10^12+1",
     .method = "POST",
     .target = "/api/v1/skus/$SKU/restock",
     BODY("{\"quantity\":1000000000001}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    /* ---- headers ---- */
    {.name = "Idempotency-Key 129 characters",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Idempotency-Key: $U129\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 400,
     .code = "invalid_request"},
    {.name = "Idempotency-Key control character",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Idempotency-Key: a\x01z\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 400,
     .code = "invalid_request"},
    {.name = "Idempotency-Key tab (Redis-protocol look)",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Idempotency-Key: *3\t$3\tSET\tx\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 400,
     .code = "invalid_request"},
    {.name = "Idempotency-Key DEL",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Idempotency-Key: a\x7f\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 400,
     .code = "invalid_request"},
    {.name = "Idempotency-Key empty",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Idempotency-Key:\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 400,
     .code = "invalid_request"},
    {.name = "Idempotency-Key UTF-8",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Idempotency-Key: \xc3\xa9\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 400,
     .code = "invalid_request"},
    {.name = "no Content-Type",
     .method = "POST",
     .target = "/api/v1/orders",
     BODY("{\"sku\":\"$SKU\"}"),
     .status = 415,
     .code = "unsupported_media_type"},
    {.name = "Content-Type text/plain",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Content-Type: text/plain\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .status = 415,
     .code = "unsupported_media_type"},
    {.name = "Content-Type charset=latin1",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Content-Type: application/json; charset=latin1\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .status = 415,
     .code = "unsupported_media_type"},
    {.name = "Content-Type application/jsonx",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Content-Type: application/jsonx\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .status = 415,
     .code = "unsupported_media_type"},
    {.name = "Content-Type multipart/form-data",
     .method = "POST",
     .target = "/api/v1/orders",
     HDRS("Content-Type: multipart/form-data; boundary=x\r\n"),
     BODY("{\"sku\":\"$SKU\"}"),
     .status = 415,
     .code = "unsupported_media_type"},
    {.name = "PUT with text/plain (admin)",
     .method = "PUT",
     .target = "/api/v1/skus/$SKU",
     HDRS("Content-Type: text/plain\r\n"),
     BODY("{\"stock\":1,\"segments\":1}"),
     .flags = F_ADMIN,
     .status = 415,
     .code = "unsupported_media_type"},
    /* ---- admin authorisation ---- */
    {.name = "PUT with a wrong token",
     .method = "PUT",
     .target = "/api/v1/skus/$SKU",
     HDRS("Authorization: Bearer $TOKENx\r\n"),
     BODY("{\"stock\":1,\"segments\":1}"),
     .flags = F_JSON,
     .status = 401,
     .code = "unauthorized"},
    {.name = "PUT with the token after a NUL byte",
     .method = "PUT",
     .target = "/api/v1/skus/$SKU",
     HDRS("Authorization: Bearer x\0$TOKEN\r\n"),
     BODY("{\"stock\":1,\"segments\":1}"),
     .flags = F_JSON,
     .status = 401,
     .code = "unauthorized"},
    {.name = "DELETE SKU without a token",
     .method = "DELETE",
     .target = "/api/v1/skus/$SKU",
     .status = 401,
     .code = "unauthorized"},
    /* A request head over 8 KiB is refused before any handler runs: 431 with our JSON error,
     * nothing changed (the SKU is checked below like every row's). */
    {.name = "DELETE SKU with a 10,000-byte token",
     .gen = gen_long_token,
     .status = 431,
     .code = "headers_too_large"},
    {.name = "restock with Basic auth",
     .method = "POST",
     .target = "/api/v1/skus/$SKU/restock",
     HDRS("Authorization: Basic YWRtaW46YWRtaW4=\r\n"),
     BODY("{\"quantity\":5}"),
     .flags = F_JSON,
     .status = 401,
     .code = "unauthorized"},
    /* ---- methods ---- */
    {.name = "PATCH orders",
     .method = "PATCH",
     .target = "/api/v1/orders",
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "TRACE orders",
     .method = "TRACE",
     .target = "/api/v1/orders",
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "garbage method",
     .method = "FOO",
     .target = "/api/v1/skus/$SKU",
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "method with odd characters",
     .method = "G@T",
     .target = "/healthz",
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "lower-case post with a valid order",
     .method = "post",
     .target = "/api/v1/orders",
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "PUT orders",
     .method = "PUT",
     .target = "/api/v1/orders",
     BODY("{\"sku\":\"$SKU\"}"),
     .flags = F_JSON,
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "CONNECT to Redis",
     .method = "CONNECT",
     .target = "127.0.0.1:6379",
     .status = 404,
     .code = "not_found"},
    {.name = "OPTIONS *", .method = "OPTIONS", .target = "*", .status = 404, .code = "not_found"},
    /* ---- paths ---- */
    {.name = "%-encoded braces in the SKU",
     .method = "GET",
     .target = "/api/v1/skus/a%7Bb%7D",
     .status = 400,
     .code = "invalid_request"},
    {.name = "%-encoded space",
     .method = "GET",
     .target = "/api/v1/skus/a%20b",
     .status = 400,
     .code = "invalid_request"},
    {.name = "%-encoded CR LF",
     .method = "GET",
     .target = "/api/v1/skus/a%0D%0Ab",
     .status = 400,
     .code = "invalid_request"},
    {.name = "%00 after the real SKU",
     .method = "GET",
     .target = "/api/v1/skus/$SKU%00junk",
     .status = 400,
     .code = "invalid_request"},
    {.name = "bad %-escape",
     .method = "GET",
     .target = "/api/v1/skus/%ZZ",
     .status = 400,
     .code = "invalid_request"},
    {.name = "%-encoded Redis protocol",
     .method = "GET",
     .target = "/api/v1/skus/*1%0D%0A$8%0D%0AFLUSHALL%0D%0A",
     .status = 400,
     .code = "invalid_request"},
    {.name = "SKU of 65 characters in the path",
     .method = "GET",
     .target = "/api/v1/skus/$A65",
     .status = 400,
     .code = "invalid_request"},
    {.name = "SKU of 256 characters in the path",
     .method = "GET",
     .target = "/api/v1/skus/$A256",
     .status = 400,
     .code = "invalid_request"},
    {.name = "PUT to a SKU with braces",
     .method = "PUT",
     .target = "/api/v1/skus/x%7D%7By",
     BODY("{\"stock\":5,\"segments\":1}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "restock a SKU with a space",
     .method = "POST",
     .target = "/api/v1/skus/a%20b/restock",
     BODY("{\"quantity\":5}"),
     .flags = F_JSON | F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "DELETE a SKU with a newline",
     .method = "DELETE",
     .target = "/api/v1/skus/a%0Ab",
     .flags = F_ADMIN,
     .status = 400,
     .code = "invalid_request"},
    {.name = "%2F makes a new path segment",
     .method = "GET",
     .target = "/api/v1/skus/$SKU%2Frestock",
     .status = 405,
     .code = "method_not_allowed"},
    {.name = "dot segments",
     .method = "GET",
     .target = "/api/v1/skus/../../healthz",
     .status = 404,
     .code = "not_found"},
    {.name = "absolute-form target",
     .method = "GET",
     .target = "http://evil.example/healthz",
     .status = 404,
     .code = "not_found"},
    {.name = "order id with braces",
     .method = "GET",
     .target = "/api/v1/orders/0123456789abcdef0123456789abcdef-0-a%7Bb%7D",
     .status = 404,
     .code = "unknown_order"},
    {.name = "order id junk, cancel as admin",
     .method = "DELETE",
     .target = "/api/v1/orders/zzz",
     .flags = F_ADMIN,
     .status = 404,
     .code = "unknown_order"},
    RAW("raw control character in the path",
        "GET /api/v1/skus/a\x01 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 400,
        "invalid_request", 0),
    RAW("raw 0xff in the path",
        "GET /api/v1/skus/a\xff HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 400,
        "invalid_request", 0),
    RAW("raw space in the path",
        "GET /api/v1/skus/a b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 400,
        "invalid_request", 0),
    {.name = "URL of 100,000 bytes", .gen = gen_long_url, .status = 414, .code = NULL},
    /* ---- malformed HTTP (libmicrohttpd answers most itself) ---- */
    RAW("request line without spaces", "GARBAGE\r\n\r\n", 0, NULL, F_CLOSE),
    RAW("HTTP/9.9", "GET /healthz HTTP/9.9\r\nHost: t\r\nConnection: close\r\n\r\n", 505, NULL,
        F_CLOSE),
    RAW("HTTP/0.9 request line", "GET /healthz\r\n\r\n", 400, NULL, F_CLOSE),
    RAW("header line without a colon",
        "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\nNoColonHere\r\n\r\n", 400, NULL,
        F_CLOSE),
    {.name = "header of 100,000 bytes", .gen = gen_huge_header, .status = 431, .code = NULL},
    {.name = "10,000 headers", .gen = gen_many_headers, .status = 431, .code = NULL},
    /* ---- body framing ---- */
    RAW("Content-Length 10^9",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000000000\r\n\r\n{\"sku\":",
        413, "body_too_large", F_CLOSE),
    RAW("Content-Length 10^23",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000000000000000000000\r\n\r\n{",
        413, NULL, F_CLOSE),
    RAW("Content-Length -1",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: -1\r\n\r\n{",
        400, NULL, F_CLOSE),
    RAW("Content-Length not a number",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: abc\r\n\r\n{",
        400, NULL, F_CLOSE),
    RAW("two Content-Length headers (smuggling)",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 5\r\nContent-Length: 14\r\n\r\n{\"sku\":\"$SKU\"}"
        "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        400, "invalid_request", F_CLOSE),
    RAW("Content-Length with Transfer-Encoding (smuggling)",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n"
        "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        400, "invalid_request", F_CLOSE),
    RAW("Transfer-Encoding gzip",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: gzip\r\n\r\nabc",
        400, "invalid_request", F_CLOSE),
    {.name = "chunked body of 100 KB",
     .gen = gen_chunked_100k,
     .status = 413,
     .code = "body_too_large"},
    RAW("chunk size not hex",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        400, NULL, F_CLOSE),
    RAW("chunk size 2^80",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
        413, NULL, F_CLOSE),
    RAW("Expect: 100-continue with 100 KB announced",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Expect: 100-continue\r\nContent-Length: 100000\r\n\r\n",
        413, "body_too_large", F_CLOSE),
    /* No answer is right, and the connection closes at once: libmicrohttpd missed the client's
     * FIN now and then, and kept the request in flight until connection_timeout_s (http.c's
     * watch_fin; test_abandoned_body_ends). */
    RAW("body shorter than Content-Length, then the client gives up",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 50\r\n\r\n{\"sku\":\"$SKU\"}",
        0, NULL, F_SHUTWR | F_CLOSE),
    /* No request reached the handler: a missed FIN keeps an idle connection until
     * connection_timeout_s, not a request in flight. Not asserted. */
    RAW("headers cut off, then the client gives up",
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Ty", 0, NULL, F_SHUTWR),
};

#define NROWS (sizeof rows / sizeof rows[0])

/* Builds the raw request of row r. */
static void build_row(const struct row *r, const char *sku, struct sr_buf *out)
{
    if (r->gen != NULL) {
        r->gen(out, sku);
        return;
    }
    if (r->method[0] == '\0') {
        expand_marks(out, r->body, r->body_len, sku);
        return;
    }
    struct sr_buf body = {0};
    if (r->body != NULL)
        expand_marks(&body, r->body, r->body_len, sku);
    buf_puts(out, r->method);
    buf_puts(out, " ");
    expand_marks(out, r->target, strlen(r->target), sku);
    buf_puts(out, " HTTP/1.1\r\nHost: t\r\n");
    if (!(r->flags & F_KEEP))
        buf_puts(out, "Connection: close\r\n");
    if (r->flags & F_JSON)
        buf_puts(out, "Content-Type: application/json\r\n");
    if (r->flags & F_ADMIN) {
        buf_puts(out, "Authorization: Bearer ");
        buf_puts(out, TOKEN);
        buf_puts(out, "\r\n");
    }
    if (r->headers != NULL)
        expand_marks(out, r->headers, r->headers_len, sku);
    if (body.len > 0 || (r->flags & F_BODY)) {
        char cl[64];
        snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", body.len);
        buf_puts(out, cl);
    }
    buf_puts(out, "\r\n");
    if (body.len > 0)
        sr_put(out, body.p, body.len);
    free(body.p);
}

/* What GET status says about sku, for before/after comparisons. */
struct snapshot {
    long long version, stock_total, remaining, sold, orders;
};

static void snap(const char *sku, struct snapshot *s)
{
    json_t *st = sf_sku_status(port, sku);
    SF_ASSERT(st != NULL, "GET status of %s failed", sku);
    s->version = sf_json_int(st, "version", -1);
    s->stock_total = sf_json_int(st, "stock_total", -1);
    s->remaining = sf_json_int(st, "remaining", -1);
    s->sold = sf_json_int(st, "sold", -1);
    s->orders = sf_json_int(st, "orders", -1);
    json_decref(st);
}

static long long dbsize(void)
{
    return rf_integer(gf_redis, "DBSIZE");
}

/* The number of keys of sku: inv:2:{<sku>} and inv:2:{<sku>/<k>} ones. */
static long long keys_of(const char *sku)
{
    long long n = 0;
    char cursor[32] = "0", pattern[128];
    snprintf(pattern, sizeof pattern, "inv:2:{%s[}/]*", sku);
    do {
        redisReply *r = rf_command(gf_redis, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        SF_ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "SCAN failed");
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        n += (long long)r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* The SKU registry (inv:2:skus, the one key without a tag) names valid SKUs only. */
static void check_registry(void)
{
    redisReply *r = rf_command(gf_redis, "SMEMBERS inv:2:skus");
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY, "%s", "SMEMBERS inv:2:skus failed");
    for (size_t i = 0; i < r->elements; i++) {
        const char *m = r->element[i]->str;
        size_t len = r->element[i]->len;
        int valid = len >= 1 && len <= 64 && strlen(m) == len;
        for (size_t j = 0; valid && j < len; j++)
            valid = (m[j] >= 'A' && m[j] <= 'Z') || (m[j] >= 'a' && m[j] <= 'z') ||
                    (m[j] >= '0' && m[j] <= '9') || m[j] == '_' || m[j] == '.' || m[j] == ':' ||
                    m[j] == '-';
        SF_ASSERT(valid, "the registry names an invalid SKU: %s", m);
    }
    freeReplyObject(r);
}

/* Every key in Redis must follow docs/design.md's schema, built from a valid SKU:
 * inv:2:{<sku>}:<meta|ver|slock|idem:...> or inv:2:{<sku>/<k>}:<stock|sver|cnt|orders|idem|lock|
 * fence|...>, or be the SKU registry inv:2:skus. Returns the number of keys seen; fails on the
 * first other one. */
static long long check_key_schema(void)
{
    long long n = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = rf_command(gf_redis, "SCAN %s COUNT 1000", cursor);
        SF_ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "SCAN failed");
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *k = r->element[1]->element[i];
            n++;
            const char *key = k->str;
            if (strcmp(key, "inv:2:skus") == 0) {
                check_registry();
                continue;
            }
            SF_ASSERT(k->len == strlen(key) && strncmp(key, "inv:2:{", 7) == 0,
                      "key outside the schema: %s", key);
            const char *tag0 = key + 7;
            const char *close = strchr(tag0, '}');
            SF_ASSERT(close != NULL && close[1] == ':', "key outside the schema: %s", key);
            /* The tag is <sku> or <sku>/<k>; the SKU part must be a valid SKU. */
            const char *slash = memchr(tag0, '/', (size_t)(close - tag0));
            if (slash != NULL) {
                int digits = close - slash > 1;
                for (const char *c = slash + 1; c < close; c++)
                    digits = digits && *c >= '0' && *c <= '9';
                SF_ASSERT(digits, "segment tag without a segment number: %s", key);
            }
            size_t skulen = (size_t)((slash != NULL ? slash : close) - tag0);
            int valid = skulen >= 1 && skulen <= 64;
            for (size_t j = 0; valid && j < skulen; j++) {
                char c = tag0[j];
                valid = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '-';
            }
            SF_ASSERT(valid, "key built from an invalid SKU: %s", key);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

static void test_hostile_table(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "hostile");
    sf_resp r = {0};
    sf_put_sku(port, TOKEN, sku, 1000, 8, &r);
    SF_ASSERT_STATUS(&r, 201);
    struct snapshot before, after;
    snap(sku, &before);
    long long keys_before = dbsize();
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);

    int answered_by_mhd = 0, json_errors = 0, no_response = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *row = &rows[i];
        struct sr_buf req = {0};
        build_row(row, sku, &req);
        int closed = 0;
        const char *method = row->method != NULL && row->method[0] ? row->method : "GET";
        int shut = (row->flags & F_SHUTWR) != 0;
        /* A client that gave up expects no answer: wait less for one. */
        sr_exchange(port, req.p, req.len, method, shut, shut ? 2000 : 10000, &r, &closed);
        if (r.status == 0 && strncmp(r.err, "connect to", 10) == 0)
            sf_fail_at(__FILE__, __LINE__, "connect", "row %zu: %s", i, r.err);
        free(req.p);

        if (r.status != row->status)
            sf_fail_at(__FILE__, __LINE__, "hostile request", "row %zu \"%s\": expected %d, got %s",
                       i, row->name, row->status, sf_resp_summary(&r));
        if (row->code != NULL) {
            if (r.json == NULL || strcmp(sf_error_code(&r), row->code) != 0)
                sf_fail_at(__FILE__, __LINE__, "hostile request",
                           "row %zu \"%s\": expected error %s, got %s", i, row->name, row->code,
                           sf_resp_summary(&r));
            SF_ASSERT_ERROR(&r, row->status, row->code);
            if (row->status == 401)
                SF_ASSERT(sf_header(&r, "WWW-Authenticate") != NULL,
                          "row \"%s\": 401 without WWW-Authenticate", row->name);
            if (row->status == 405)
                SF_ASSERT(sf_header(&r, "Allow") != NULL, "row \"%s\": 405 without Allow",
                          row->name);
            json_errors++;
        } else if (row->status != 0) {
            /* libmicrohttpd's own refusal: an HTML page, never a handler's JSON. */
            SF_ASSERT(r.json == NULL, "row \"%s\": expected libmicrohttpd's page, got %s",
                      row->name, sf_resp_summary(&r));
            answered_by_mhd++;
        } else {
            no_response++;
        }
        if (row->flags & F_CLOSE)
            SF_ASSERT(closed, "row %zu \"%s\": the connection stayed open after %s", i, row->name,
                      sf_resp_summary(&r));

        /* The process is up and the SKU is untouched after every row. */
        sf_resp h = {0};
        sf_http(port, "GET", "/healthz", NULL, NULL, 0, &h);
        if (h.status != 200)
            sf_fail_at(__FILE__, __LINE__, "process down", "after row %zu \"%s\": %s", i, row->name,
                       sf_resp_summary(&h));
        sf_resp_free(&h);
        snap(sku, &after);
        SF_ASSERT(memcmp(&before, &after, sizeof before) == 0,
                  "row %zu \"%s\" changed the SKU: version %lld->%lld remaining %lld->%lld "
                  "sold %lld->%lld orders %lld->%lld",
                  i, row->name, before.version, after.version, before.remaining, after.remaining,
                  before.sold, after.sold, before.orders, after.orders);
    }
    sf_resp_free(&r);
    fprintf(stderr,
            "it_hostile: %zu hostile requests: %d JSON errors from the service, %d refused by "
            "libmicrohttpd itself, %d closed without a response; SKU unchanged\n",
            NROWS, json_errors, answered_by_mhd, no_response);
    SF_ASSERT(NROWS >= 60, "only %zu rows", NROWS);

    /* Redis agrees, holds the same number of keys, and nothing the requests carried. */
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.version, before.version);
    SF_ASSERT_EQ(rep.remaining, before.remaining);
    SF_ASSERT_EQ(rep.sold, 0);
    SF_ASSERT_EQ(rep.orders, 0);
    SF_ASSERT_EQ(dbsize(), keys_before);
    SF_ASSERT_EQ(rf_integer(gf_redis, "EXISTS x"), 0);
    SF_ASSERT_EQ(check_key_schema(), keys_before);
}

/* Printable strings that look like Redis commands or Lua are valid user ids and keys: they
 * are stored verbatim and do nothing else. */
static void test_hostile_looking_but_valid(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "hostile-ok");
    sf_resp r = {0};
    sf_put_sku(port, TOKEN, sku, 10, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    long long keys_before = dbsize(), keys_of_before = keys_of(sku);

    static const char user[] = "*1\\r\\n$8\\r\\nFLUSHALL\\r\\n') redis.call('del', KEYS[1]) --";
    static const char idem[] = "EVAL \"redis.call('flushall')\" 0 {x} }{ *";
    json_t *body = json_pack("{s:s, s:i, s:s}", "sku", sku, "quantity", 2, "user_id", user);
    char *text = json_dumps(body, JSON_COMPACT);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, idem, text, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(strcmp(sf_str(r.json, "user_id"), user) == 0, "user_id came back as %s",
              sf_resp_summary(&r));
    char id[256];
    snprintf(id, sizeof id, "%s", sf_str(r.json, "order_id"));
    /* The replay finds it under the same key. */
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, idem, text, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(strcmp(sf_str(r.json, "order_id"), id) == 0, "replay gave %s", sf_resp_summary(&r));
    free(text);
    json_decref(body);
    sf_resp_free(&r);

    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.sold, 2);
    SF_ASSERT_EQ(rep.orders, 1);
    /* Nothing was flushed or deleted: only keys of this SKU were added (the order's and the
     * Idempotency-Key claim inv:2:{sku}:idem:<key>). */
    SF_ASSERT_EQ(dbsize() - keys_of(sku), keys_before - keys_of_before);
    char claim[512];
    snprintf(claim, sizeof claim, "inv:2:{%s}:idem:%s", sku, idem);
    SF_ASSERT_EQ(rf_integer(gf_redis, "EXISTS %s", claim), 1);
    check_key_schema();
}

/* ---- slow clients ---------------------------------------------------------------------------- */

struct slow_ctx {
    int port;
    int statuses[SLOW_CLIENTS];
    int64_t took_ms;
};

/* SLOW_CLIENTS connections each send GET /healthz one byte every 100 ms, all in step; then read
 * the answers. */
static void *slow_clients(void *arg)
{
    struct slow_ctx *ctx = arg;
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: slow\r\nConnection: close\r\n\r\n";
    int fds[SLOW_CLIENTS];
    int64_t t0 = tu_now_ms();
    for (int i = 0; i < SLOW_CLIENTS; i++)
        fds[i] = sr_connect(ctx->port, NULL);
    for (size_t b = 0; b < sizeof req - 1; b++) {
        for (int i = 0; i < SLOW_CLIENTS; i++)
            if (fds[i] >= 0)
                sr_send(fds[i], req + b, 1);
        tu_sleep_ms(100);
    }
    for (int i = 0; i < SLOW_CLIENTS; i++) {
        sf_resp r = {0};
        int closed;
        if (fds[i] >= 0) {
            sr_read_response(fds[i], "GET", 5000, &r, &closed);
            close(fds[i]);
        }
        ctx->statuses[i] = r.status;
        sf_resp_free(&r);
    }
    ctx->took_ms = tu_now_ms() - t0;
    return NULL;
}

static void test_slow_headers(void **state)
{
    (void)state;
    char sku[64];
    tu_unique_name(sku, sizeof sku, "slow");
    sf_resp r = {0};
    sf_put_sku(port, TOKEN, sku, 100, 4, &r);
    SF_ASSERT_STATUS(&r, 201);

    struct slow_ctx ctx = {.port = port};
    pthread_t th;
    SF_ASSERT(pthread_create(&th, NULL, slow_clients, &ctx) == 0, "%s", "pthread_create");
    tu_sleep_ms(300); /* the slow clients are connected and dribbling */

    /* Meanwhile, normal requests on a keep-alive connection and on fresh ones. */
    int64_t worst_us = 0, total_us = 0;
    int n = 0, orders = 0;
    sf_conn *c = sf_conn_open(port, 5000);
    int64_t until = tu_now_ms() + 3000;
    while (tu_now_ms() < until) {
        int st;
        if (n % 4 == 3) {
            st = sf_order(c, port, sku, 1, &r);
            orders += st == 201;
        } else if (n % 2 == 0) {
            st = sf_conn_request(c, "GET", "/healthz", NULL, NULL, 0, &r);
        } else {
            st = sf_http(port, "GET", "/api/v1/skus/x-unknown", NULL, NULL, 0, &r);
        }
        SF_ASSERT(st == 200 || st == 201 || st == 404, "request %d during slow clients: %s", n,
                  sf_resp_summary(&r));
        worst_us = r.elapsed_us > worst_us ? r.elapsed_us : worst_us;
        total_us += r.elapsed_us;
        n++;
        tu_sleep_ms(20);
    }
    sf_conn_close(c);
    sf_resp_free(&r);
    pthread_join(th, NULL);
    fprintf(stderr,
            "it_hostile: %d slow clients (1 byte / 100 ms, %lld ms each); meanwhile %d normal "
            "requests: mean %lld us, worst %lld us\n",
            SLOW_CLIENTS, (long long)ctx.took_ms, n, (long long)(total_us / (n ? n : 1)),
            (long long)worst_us);
    /* Generous for sanitizer builds on a shared 2-core machine; a blocked worker would mean
     * seconds here. */
    SF_ASSERT(worst_us < 1000 * 1000, "a normal request took %lld us while slow clients dribbled",
              (long long)worst_us);
    SF_ASSERT(n >= 20, "only %d requests in 3 s", n);
    for (int i = 0; i < SLOW_CLIENTS; i++)
        SF_ASSERT(ctx.statuses[i] == 200, "slow client %d got %d", i, ctx.statuses[i]);
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.orders, orders);
}

/* ---- idle connections -------------------------------------------------------------------- */

static void test_idle_connections(void **state)
{
    (void)state;
    /* As many as the open-files limit allows (the group setup raised it as far as it could),
     * with room for the test's and the service's other descriptors; at least 1,000. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    int nconns = IDLE_CONNS;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)WANT_NOFILE)
        nconns = (int)rl.rlim_cur - 200;
    if (nconns < MIN_IDLE_CONNS) {
        fprintf(stderr,
                "it_hostile: RLIMIT_NOFILE %llu allows fewer than %d idle connections: "
                "skipping the idle-connection test\n",
                (unsigned long long)rl.rlim_cur, MIN_IDLE_CONNS);
        skip();
    }
    char sku[64];
    tu_unique_name(sku, sizeof sku, "idle");
    sf_resp r = {0};
    sf_put_sku(port, TOKEN, sku, 100, 4, &r);
    SF_ASSERT_STATUS(&r, 201);

    static int fds[IDLE_CONNS];
    int opened = 0;
    for (int i = 0; i < nconns; i++) {
        fds[i] = sr_connect(port, NULL);
        SF_ASSERT(fds[i] >= 0, "idle connection %d: %s", i, strerror(errno));
        opened++;
        /* One in six has sent half a request line and stops there. */
        if (i % 6 == 0)
            sr_send(fds[i], "GET /api/v1/sk", 14);
    }
    tu_sleep_ms(500); /* let the server accept them all */

    /* Normal traffic is served while they sit there. */
    int64_t worst_us = 0;
    int orders = 0;
    for (int i = 0; i < 60; i++) {
        int st;
        if (i % 3 == 0) {
            st = sf_order(NULL, port, sku, 1, &r);
            orders += st == 201;
        } else {
            st = sf_http(port, "GET", i % 3 == 1 ? "/healthz" : "/readyz", NULL, NULL, 0, &r);
        }
        SF_ASSERT(st == 200 || st == 201, "request %d with %d idle connections: %s", i, opened,
                  sf_resp_summary(&r));
        worst_us = r.elapsed_us > worst_us ? r.elapsed_us : worst_us;
    }
    sf_resp_free(&r);

    /* The idle connections are still open (the server did not drop them to cope). */
    int alive = 0;
    for (int i = 0; i < nconns; i++) {
        char b;
        ssize_t n = recv(fds[i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
        alive += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    /* A half-sent request still completes on its connection. */
    sr_send(fds[0], "us/", 3);
    sr_send(fds[0], sku, strlen(sku));
    sr_send(fds[0], " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 41);
    int closed;
    sr_read_response(fds[0], "GET", 5000, &r, &closed);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    for (int i = 0; i < nconns; i++)
        close(fds[i]);
    fprintf(stderr,
            "it_hostile: %d idle connections (%d still open after the traffic); 60 normal "
            "requests, worst %lld us\n",
            opened, alive, (long long)worst_us);
    SF_ASSERT(alive >= nconns - 1, "only %d of %d idle connections still open", alive, nconns);
    SF_ASSERT(sf_alive(svc), "%s", "inventoryd died");
    sf_report rep;
    SF_ASSERT_INVARIANTS(rf_url(gf_redis), sku, &rep);
    SF_ASSERT_EQ(rep.orders, orders);
    SF_ASSERT_EQ(orders, 20);
}

/* ---- log flooding ------------------------------------------------------------------------ */

/* Counts occurrences of needle in svc's log after byte offset from; *size gets the log size. */
static int log_count_from(long from, const char *needle, long *size)
{
    FILE *f = fopen(sf_log_path(svc), "r");
    SF_ASSERT(f != NULL, "%s", "cannot read the service log");
    fseek(f, 0, SEEK_END);
    long end = ftell(f);
    fseek(f, from, SEEK_SET);
    char *text = malloc((size_t)(end - from) + 1);
    assert_non_null(text);
    size_t n = fread(text, 1, (size_t)(end - from), f);
    text[n] = '\0';
    fclose(f);
    int count = 0;
    for (const char *p = strstr(text, needle); *needle && p != NULL; p = strstr(p + 1, needle))
        count++;
    free(text);
    if (size != NULL)
        *size = end;
    return count;
}

/* 500 malformed requests as fast as they go: libmicrohttpd refuses each with a log message,
 * but the log takes at most 20 of them a second and reports how many it dropped. */
static void test_log_flood(void **state)
{
    (void)state;
    long start;
    tu_sleep_ms(1100); /* a fresh second: the idle connections' closing was logged before */
    log_count_from(0, "", &start);
    static const char bad[] = "GET /healthz HTTP/1.1\r\nHost: t\r\nNoColonHere\r\n\r\n";
    int64_t t0 = tu_now_ms();
    sf_resp r = {0};
    for (int i = 0; i < 500; i++) {
        int fd = sr_connect(port, NULL);
        SF_ASSERT(fd >= 0, "connect: %s", strerror(errno));
        sr_send(fd, bad, sizeof bad - 1);
        sr_read_response(fd, "GET", 5000, &r, NULL);
        close(fd);
        SF_ASSERT(r.status == 400, "malformed request %d: %s", i, sf_resp_summary(&r));
    }
    int64_t secs = (tu_now_ms() - t0) / 1000 + 1;
    /* One more in a later second reports what was dropped. */
    tu_sleep_ms(1100);
    int fd = sr_connect(port, NULL);
    sr_send(fd, bad, sizeof bad - 1);
    sr_read_response(fd, "GET", 5000, &r, NULL);
    close(fd);
    sf_resp_free(&r);
    tu_sleep_ms(100);
    int logged = log_count_from(start, "\"event\":\"http_error\"", NULL);
    int reports = log_count_from(start, "\"event\":\"http_error_suppressed\"", NULL);
    fprintf(stderr,
            "it_hostile: 501 malformed requests in %lld s: %d libmicrohttpd messages logged, %d "
            "suppression reports\n",
            (long long)secs, logged, reports);
    SF_ASSERT(logged <= 20 * (secs + 1) + 1, "%d messages logged in %lld s", logged,
              (long long)secs);
    SF_ASSERT(reports >= 1, "%s", "no report of the dropped messages");
    SF_ASSERT(sf_alive(svc), "%s", "inventoryd died");
}

/* Waits until every thread of pid is stopped (SIGSTOP is delivered asynchronously: kill returns
 * before the threads stop). 1 when they are, 0 after 2 s. */
static int wait_stopped(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    for (int64_t end = tu_now_ms() + 2000; tu_now_ms() < end; tu_sleep_ms(1)) {
        DIR *d = opendir(dir);
        if (d == NULL)
            return 0;
        int running = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && !running) {
            if (e->d_name[0] == '.')
                continue;
            char path[sizeof dir + sizeof e->d_name + 8], stat[512];
            snprintf(path, sizeof path, "%s/%s/stat", dir, e->d_name);
            FILE *f = fopen(path, "r");
            size_t n = f != NULL ? fread(stat, 1, sizeof stat - 1, f) : 0;
            if (f != NULL)
                fclose(f);
            stat[n] = '\0';
            const char *close_paren = strrchr(stat, ')'); /* "pid (comm) S ..." */
            running = close_paren == NULL || close_paren[1] != ' ' ||
                      (close_paren[2] != 'T' && close_paren[2] != 't');
        }
        closedir(d);
        if (!running)
            return 1;
    }
    return 0;
}

/* A request whose client sends its head and part of its body, then gives up (shutdown, then
 * close), ends at once: the server closes its side and the request leaves the in-flight count,
 * so a SIGTERM afterwards exits without waiting its grace. libmicrohttpd 0.9.75 (edge-triggered
 * epoll) took a read shorter than its buffer for "nothing more to read" and missed a FIN that
 * came with the last bytes: the request stayed in flight until --connection-timeout-s, and
 * every SIGTERM meanwhile waited the whole --shutdown-grace-ms. The server is paused while the
 * client writes, so the bytes and the FIN are both waiting when it reads: the case that was
 * missed every time, not now and then. Its own inventoryd (a 30 s grace and a 120 s connection
 * timeout make a missed FIN unmistakable); about 2 s. */
static void test_abandoned_body_ends(void **state)
{
    (void)state;
    const char *args[] = {"--shutdown-grace-ms", "30000", "--connection-timeout-s", "120", NULL};
    sf_service *own = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(own != NULL, "%s", "inventoryd did not start");
    int p = sf_port(own);
    static const char *const partial[] = {
        /* Content-Length announced, part of the body sent */
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 50\r\n\r\n{\"sku\":\"x\"",
        /* Content-Length announced, none of the body sent */
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 50\r\n\r\n",
        /* a chunked body cut off inside a chunk */
        "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n20\r\n{\"sku\":",
    };
    for (size_t i = 0; i < sizeof partial / sizeof partial[0]; i++) {
        int fd = sr_connect(p, NULL);
        SF_ASSERT(fd >= 0, "connect: %s", strerror(errno));
        SF_ASSERT(sf_pause(own) == 0 && wait_stopped(sf_pid(own)), "%s", "cannot pause inventoryd");
        sr_send(fd, partial[i], strlen(partial[i]));
        shutdown(fd, SHUT_WR);
        SF_ASSERT(sf_resume(own) == 0, "%s", "cannot resume inventoryd");
        /* No answer is due; the server's end of the stream is, within 5 s (not 120). */
        int64_t t0 = tu_now_ms();
        char buf[512];
        ssize_t n;
        while ((n = sr_recv(fd, buf, sizeof buf, t0 + 5000)) > 0) {
        }
        int64_t waited = tu_now_ms() - t0;
        close(fd);
        SF_ASSERT(n == 0,
                  "request %zu: the server kept the connection %lld ms after the client "
                  "gave up (%s)",
                  i, (long long)waited, n < 0 ? strerror(errno) : "");
    }
    /* The gauge counts this scrape only. */
    SF_ASSERT_EQ((long long)sf_metric(p, "inventory_requests_in_flight"), 1);
    int64_t t0 = tu_now_ms();
    int rc = sf_stop(own); /* SIGTERM; SIGKILL after 10 s */
    int64_t took = tu_now_ms() - t0;
    fprintf(stderr, "it_hostile: 3 abandoned bodies, then SIGTERM: exit %d in %lld ms\n", rc,
            (long long)took);
    SF_ASSERT(rc == 0,
              "exit status %d after %lld ms (a request left in flight holds the grace, "
              "30 s)",
              rc, (long long)took);
    SF_ASSERT(took < 5000, "SIGTERM took %lld ms with no request in flight", (long long)took);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_table), cmocka_unit_test(test_hostile_looking_but_valid),
        cmocka_unit_test(test_slow_headers),  cmocka_unit_test(test_idle_connections),
        cmocka_unit_test(test_log_flood),     cmocka_unit_test(test_abandoned_body_ends),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
