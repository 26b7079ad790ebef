/*
 * libFuzzer target: router.c's pure parts on arbitrary bytes. The input is split at '\n' into a
 * method selector (first byte), a path, an Authorization header value and a Content-Type value:
 *   - router_match: the outcome agrees with the parameter it reports (a non-empty segment
 *     inside the path, without '/'), Allow is set exactly when the path is known, the row
 *     found has the request's method, the label is one router_label names;
 *   - router_admin_ok: with a token configured, only "Bearer <that token>" passes (checked
 *     against a plain re-statement of the rule); without one, only a loopback peer;
 *   - router_token_equal agrees with memcmp on two arbitrary byte strings;
 *   - router_media_ok agrees with validate_content_type.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "router.h"
#include "validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_router: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char TOKEN[] = "fuzz-admin-token";

/* Next '\n'-terminated field of buf[*pos..len) as a NUL-terminated string (in place). */
static char *field(char *buf, size_t len, size_t *pos)
{
    if (*pos > len)
        return NULL;
    char *s = buf + *pos;
    char *nl = memchr(s, '\n', len - *pos);
    size_t n = nl ? (size_t)(nl - s) : len - *pos;
    s[n] = '\0';
    *pos += n + 1;
    return s;
}

static void check_match(enum http_method m, const char *path)
{
    struct router_route r;
    enum router_outcome o = router_match(m, path, &r);
    CHECK(o == r.outcome);
    size_t plen = strlen(path);
    switch (o) {
    case ROUTER_NOT_FOUND:
        CHECK(r.allow == NULL && r.row == NULL && r.label == ROUTER_LABEL_OTHER);
        break;
    case ROUTER_METHOD_NOT_ALLOWED: CHECK(r.allow != NULL && r.row == NULL); break;
    case ROUTER_FOUND:
        CHECK(r.allow != NULL && r.row != NULL);
        CHECK(path[0] == '/');
        CHECK(r.row->method == (m == HTTP_HEAD ? HTTP_GET : m));
        break;
    }
    CHECK(router_label(r.label) != NULL);
    if (r.param) {
        CHECK(r.param >= path && r.param + r.param_len <= path + plen);
        CHECK(r.param_len > 0 && memchr(r.param, '/', r.param_len) == NULL);
    }
}

/* The admin rule restated: optional blanks, "bearer" in any case, blanks, the token, blanks. */
static int admin_expected(const char *h)
{
    if (!h)
        return 0;
    while (*h == ' ' || *h == '\t')
        h++;
    if (strncasecmp(h, "bearer", 6) != 0)
        return 0;
    h += 6;
    if (*h != ' ' && *h != '\t')
        return 0;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strlen(h);
    while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
        n--;
    return n == sizeof(TOKEN) - 1 && memcmp(h, TOKEN, n) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';

    static const enum http_method methods[] = {HTTP_OTHER, HTTP_GET,    HTTP_HEAD, HTTP_POST,
                                               HTTP_PUT,   HTTP_DELETE, HTTP_PATCH};
    enum http_method m = methods[(unsigned char)buf[0] % 7];
    size_t pos = 1;
    char *path = field(buf, size, &pos);
    char *auth = field(buf, size, &pos);
    char *ctype = field(buf, size, &pos);

    check_match(m, path ? path : "");
    CHECK(router_match(m, NULL, &(struct router_route){0}) == ROUTER_NOT_FOUND);

    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    struct request req = {.method = m,
                          .path = path,
                          .authorization = auth,
                          .content_type = ctype,
                          .peer_loopback = buf[0] & 1};
    /* No token configured: closed, whatever is presented; with --admin-allow-loopback,
     * loopback decides. */
    CHECK(!router_admin_ok(&cfg, &req));
    cfg.admin_allow_loopback = 1;
    CHECK(router_admin_ok(&cfg, &req) == (req.peer_loopback != 0));
    /* A token configured: only the token decides (admin_allow_loopback is ignored). */
    snprintf(cfg.admin_token, sizeof(cfg.admin_token), "%s", TOKEN);
    CHECK(router_admin_ok(&cfg, &req) == admin_expected(auth));
    cfg.admin_allow_loopback = 0;
    CHECK(router_admin_ok(&cfg, &req) == admin_expected(auth));

    req.body = buf;
    req.body_len = size;
    CHECK(router_media_ok(&req) == validate_content_type(ctype));
    req.body_len = 0;
    CHECK(router_media_ok(&req));

    /* Constant-time equality against memcmp, on the two halves of the raw input. */
    size_t half = size / 2;
    const char *a = (const char *)data, *b = (const char *)data + half;
    size_t alen = half, blen = size - half;
    CHECK(router_token_equal(a, alen, b, blen) == (alen == blen && memcmp(a, b, alen) == 0));
    CHECK(router_token_equal(a, alen, a, alen));

    free(buf);
    return 0;
}
