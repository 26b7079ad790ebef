/*
 * Request heads of every size get an answer (issue 18 item 8), over real sockets against a real
 * inventoryd started with its DEFAULT settings (no --connection-memory-kib).
 *
 * libmicrohttpd 0.9.75 keeps a request's head, a 64-byte record per header field and cookie, a
 * copy of the Cookie header and the answer's headers in one fixed pool per connection. Heads
 * just below what the pool holds got the connection closed with no answer at all (at the old
 * default 4 KiB pool: about 1.5 KiB of 40-byte header lines, 3.8 KiB in one header); larger
 * ones got libmicrohttpd's own HTML 431.
 *
 *   - test_heads_up_to_8k_served: heads of three shapes (one long Authorization header like a
 *     JWT; header lines of about 100 bytes; a Cookie header of about 100-byte cookies), every
 *     size from 512 bytes to 8 KiB in steps of 32 bytes, each sent twice on one keep-alive
 *     connection (the second after libmicrohttpd reset the pool), to GET a SKU and to POST an
 *     order for an unknown SKU: every answer is 200 (GET) or 404 unknown_sku (POST) with a JSON
 *     body, never a close without an answer, never HTML;
 *   - test_heads_over_8k_refused: heads from 8 KiB + 1 byte up (every 32 bytes to 9 KiB, then
 *     every 256 to 16 KiB for the one-header shape) get 431 headers_too_large with our JSON
 *     error body and Connection: close.
 */
#include "svc_raw.h"
#include "svc_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define SKU "heads-sku"

static sf_service *svc;
static int port;

enum shape { SHAPE_ONE_HEADER, SHAPE_LINES, SHAPE_COOKIES, SHAPE_COUNT };
static const char *const shape_name[SHAPE_COUNT] = {"one long header", "100-byte header lines",
                                                    "100-byte cookies"};

/* Appends n copies of c. */
static void put_fill(struct sr_buf *b, char c, size_t n)
{
    char chunk[256];
    memset(chunk, c, sizeof(chunk));
    while (n > 0) {
        size_t k = n < sizeof(chunk) ? n : sizeof(chunk);
        sr_put(b, chunk, k);
        n -= k;
    }
}

static void put_str(struct sr_buf *b, const char *s)
{
    sr_put(b, s, strlen(s));
}

/* A request (GET the SKU, or POST an order with a body) whose head (request line, header lines
 * and the blank line) is exactly size bytes, padded in the given shape. */
static void build_head(struct sr_buf *b, enum shape shape, int post, size_t size)
{
    static const char body[] = "{\"sku\":\"no-such-sku\",\"quantity\":1}";
    b->len = 0;
    if (post) {
        char fixed[160];
        snprintf(fixed, sizeof(fixed),
                 "POST /api/v1/orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n",
                 sizeof(body) - 1);
        put_str(b, fixed);
    } else {
        put_str(b, "GET /api/v1/skus/" SKU " HTTP/1.1\r\nHost: t\r\n");
    }
    /* The padding: whatever is left of size after the fixed part and the final "\r\n". */
    size_t left = size - b->len - 2;
    switch (shape) {
    case SHAPE_ONE_HEADER:
        put_str(b, "Authorization: Bearer ");
        put_fill(b, 'j', left - 24);
        put_str(b, "\r\n");
        break;
    case SHAPE_LINES:
        /* lines "X-Hnnn: vvv...\r\n" of 100 bytes, the last one shorter or longer */
        for (int i = 0; left > 0; i++) {
            char name[16];
            int n = snprintf(name, sizeof(name), "X-H%03d: ", i);
            size_t line = left < 200 ? left : 100;
            put_str(b, name);
            put_fill(b, 'v', line - (size_t)n - 2);
            put_str(b, "\r\n");
            left -= line;
        }
        break;
    case SHAPE_COOKIES:
        /* "Cookie: cnnn=vvv...; cnnn=vvv...\r\n" with cookies of about 100 bytes */
        put_str(b, "Cookie: ");
        left -= 10; /* "Cookie: " and its "\r\n" */
        for (int i = 0; left > 0; i++) {
            char name[16];
            int n = snprintf(name, sizeof(name), "%sc%03d=", i ? "; " : "", i);
            size_t item = left < 200 ? left : 100;
            put_str(b, name);
            put_fill(b, 'v', item - (size_t)n);
            left -= item;
        }
        put_str(b, "\r\n");
        break;
    default: break;
    }
    put_str(b, "\r\n");
    if (post)
        sr_put(b, body, sizeof(body) - 1);
}

/* The head's length in b (up to and including the blank line). */
static size_t head_len(const struct sr_buf *b)
{
    const char *end = strstr(b->p, "\r\n\r\n");
    return end ? (size_t)(end - b->p) + 4 : 0;
}

static int is_json(const sf_resp *r)
{
    const char *ct = sf_header(r, "Content-Type");
    return ct && strncmp(ct, "application/json", 16) == 0 && r->json != NULL;
}

static int group_setup(void **state)
{
    (void)state;
    svc = sf_group_service(NULL); /* the defaults: no pool or connection flags */
    if (svc == NULL)
        return -1;
    port = sf_port(svc);
    sf_resp r = {0};
    int st = sf_put_sku(port, NULL, SKU, 5, 2, &r);
    sf_resp_free(&r);
    return st == 201 || st == 200 ? 0 : -1;
}

static void test_heads_up_to_8k_served(void **state)
{
    (void)state;
    struct sr_buf b = {0};
    sf_resp r = {0};
    int checked = 0;
    for (int shape = 0; shape < SHAPE_COUNT; shape++) {
        for (int post = 0; post <= 1; post++) {
            /* every 32 bytes, and 8 KiB itself */
            for (size_t size = 512; size <= HEAD_MAX;
                 size = size < HEAD_MAX && size + 32 > HEAD_MAX ? HEAD_MAX : size + 32) {
                build_head(&b, (enum shape)shape, post, size);
                SF_ASSERT(head_len(&b) == size, "%s: head of %zu bytes, wanted %zu",
                          shape_name[shape], head_len(&b), size);
                int fd = sr_connect(port, NULL);
                SF_ASSERT(fd >= 0, "%s", "connect");
                for (int round = 0; round < 2; round++) {
                    sr_send(fd, b.p, b.len);
                    sr_read_response(fd, post ? "POST" : "GET", 10000, &r, NULL);
                    int want = post ? 404 : 200;
                    SF_ASSERT(r.status == want && is_json(&r),
                              "%s %s, head of %zu bytes, request %d on the connection: wanted "
                              "%d JSON, got %s",
                              shape_name[shape], post ? "POST order" : "GET SKU", size, round + 1,
                              want, sf_resp_summary(&r));
                    checked++;
                }
                close(fd);
            }
        }
    }
    fprintf(stderr, "it_heads: %d answers to heads of 512..%d bytes, all JSON\n", checked,
            HEAD_MAX);
    sf_resp_free(&r);
    free(b.p);
}

static void test_heads_over_8k_refused(void **state)
{
    (void)state;
    struct sr_buf b = {0};
    sf_resp r = {0};
    int checked = 0;
    for (int shape = 0; shape < SHAPE_COUNT; shape++) {
        size_t last = shape == SHAPE_ONE_HEADER ? 16384 : 9216;
        for (size_t size = HEAD_MAX + 1; size <= last; size += size < 9216 ? 32 : 256) {
            for (int post = 0; post <= 1; post++) {
                build_head(&b, (enum shape)shape, post, size);
                int closed = 0;
                sr_exchange(port, b.p, b.len, post ? "POST" : "GET", 0, 10000, &r, &closed);
                const char *code =
                    r.json ? json_string_value(json_object_get(r.json, "error")) : NULL;
                SF_ASSERT(r.status == 431 && is_json(&r) && code &&
                              strcmp(code, "headers_too_large") == 0,
                          "%s %s, head of %zu bytes: wanted 431 headers_too_large JSON, got %s",
                          shape_name[shape], post ? "POST order" : "GET SKU", size,
                          sf_resp_summary(&r));
                SF_ASSERT(closed, "%s, head of %zu bytes: the connection stays open after 431",
                          shape_name[shape], size);
                checked++;
            }
        }
    }
    fprintf(stderr, "it_heads: %d heads over %d bytes answered 431 headers_too_large\n", checked,
            HEAD_MAX);
    SF_ASSERT(sf_alive(svc), "%s", "inventoryd died");
    sf_resp_free(&r);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heads_up_to_8k_served),
        cmocka_unit_test(test_heads_over_8k_refused),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
