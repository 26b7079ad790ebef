/*
 * The tests' HTTP/1.1 client (see svc_fixture.h): blocking calls over non-blocking sockets with
 * poll() deadlines, keep-alive connections, Content-Length and chunked bodies, plus shortcuts
 * for the inventoryd endpoints the tests use most.
 */
#include "svc_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define SF_MAX_HEAD 65536
#define SF_MAX_BODY (64 * 1024 * 1024)

struct sf_conn {
    int port;
    int timeout_ms;
    int fd;    /* -1 when not connected */
    char *buf; /* received bytes not consumed yet */
    size_t len, cap;
};

sf_conn *sf_conn_open(int port, int timeout_ms)
{
    sf_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->port = port;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : SF_DEFAULT_TIMEOUT_MS;
    c->fd = -1;
    return c;
}

static void sf_conn_drop(sf_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = 0;
}

void sf_conn_close(sf_conn *c)
{
    if (c == NULL)
        return;
    sf_conn_drop(c);
    free(c->buf);
    free(c);
}

static void sf_set_err(sf_resp *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sf_set_err(sf_resp *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

/* Waits until fd is ready for events or the deadline passes. 1 ready, 0 timeout, -1 error. */
static int sf_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - tu_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 1;
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* Connects c (non-blocking socket, TCP_NODELAY). 0, or -1 with the reason in r. */
static int sf_connect(sf_conn *c, int64_t deadline, sf_resp *r)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        sf_set_err(r, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)c->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno != EINPROGRESS) {
            sf_set_err(r, "connect to port %d: %s", c->port, strerror(errno));
            close(fd);
            return -1;
        }
        int w = sf_wait(fd, POLLOUT, deadline);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (w <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            sf_set_err(r, "connect to port %d: %s", c->port,
                       w == 0 ? "timed out" : strerror(soerr ? soerr : errno));
            close(fd);
            return -1;
        }
    }
    c->fd = fd;
    c->len = 0;
    return 0;
}

/* Closes c's socket when the server closed it (or sent something) while it was idle. */
static void sf_check_idle(sf_conn *c)
{
    if (c->fd < 0)
        return;
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || n > 0)
        sf_conn_drop(c);
}

/* Sends all of data. 0; 1 when the peer closed or reset (it may have answered early); -1 on a
 * timeout or another error. */
static int sf_send_all(int fd, const char *data, size_t len, int64_t deadline)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (sf_wait(fd, POLLOUT, deadline) <= 0)
                return -1;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return 1;
        return -1;
    }
    return 0;
}

/* Reads more bytes into c->buf. >0 bytes read, 0 end of stream, -1 error or timeout (errno is
 * ETIMEDOUT for the latter). */
static ssize_t sf_fill(sf_conn *c, int64_t deadline)
{
    if (c->cap - c->len < 4096) {
        size_t cap = c->cap ? c->cap * 2 : 16384;
        char *b = realloc(c->buf, cap);
        if (b == NULL) {
            errno = ENOMEM;
            return -1;
        }
        c->buf = b;
        c->cap = cap;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
        if (n >= 0) {
            c->len += (size_t)n;
            return n;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        int w = sf_wait(c->fd, POLLIN, deadline);
        if (w == 0)
            errno = ETIMEDOUT;
        if (w <= 0)
            return -1;
    }
}

/* Offset of "\r\n\r\n" + 4 in c->buf, or 0 when not there yet. */
static size_t sf_head_end(const sf_conn *c)
{
    for (size_t i = 0; i + 3 < c->len; i++) {
        if (c->buf[i] == '\r' && c->buf[i + 1] == '\n' && c->buf[i + 2] == '\r' &&
            c->buf[i + 3] == '\n')
            return i + 4;
    }
    return 0;
}

/* Offset just past the first "\r\n" at or after from, or 0. */
static size_t sf_line_end(const sf_conn *c, size_t from)
{
    for (size_t i = from; i + 1 < c->len; i++) {
        if (c->buf[i] == '\r' && c->buf[i + 1] == '\n')
            return i + 2;
    }
    return 0;
}

/* Drops the first n bytes of c->buf. */
static void sf_consume(sf_conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

static char *sf_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Parses the status line and headers of c->buf[0..head). 0, or -1 with r->err set. */
static int sf_parse_head(const sf_conn *c, size_t head, sf_resp *r, int *http10)
{
    const char *p = c->buf, *end = c->buf + head - 2; /* the last line's CRLF stays out */
    const char *eol = strstr(p, "\r\n");
    if (eol == NULL || eol > end || strncmp(p, "HTTP/1.", 7) != 0 || eol - p < 12) {
        sf_set_err(r, "bad status line");
        return -1;
    }
    *http10 = p[7] == '0';
    int status = atoi(p + 9);
    if (status < 100 || status > 599) {
        sf_set_err(r, "bad status %d", status);
        return -1;
    }
    r->status = status;
    p = eol + 2;
    while (p < end) {
        eol = strstr(p, "\r\n");
        if (eol == NULL || eol > end)
            break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon != NULL && r->nheaders < SF_MAX_HEADERS) {
            const char *v = colon + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            r->name[r->nheaders] = sf_strndup(p, (size_t)(colon - p));
            r->value[r->nheaders] = sf_strndup(v, (size_t)(ve - v));
            r->nheaders++;
        }
        p = eol + 2;
    }
    return 0;
}

/* Appends n bytes to the response body. */
static int sf_body_append(sf_resp *r, const char *data, size_t n)
{
    if (r->body_len + n > SF_MAX_BODY)
        return -1;
    char *b = realloc(r->body, r->body_len + n + 1);
    if (b == NULL)
        return -1;
    memcpy(b + r->body_len, data, n);
    r->body = b;
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 0;
}

/* Makes sure c->buf holds at least n bytes. 0, or -1 (r->err set). */
static int sf_need(sf_conn *c, size_t n, int64_t deadline, sf_resp *r)
{
    while (c->len < n) {
        ssize_t got = sf_fill(c, deadline);
        if (got <= 0) {
            sf_set_err(r, "reading the body: %s", got == 0 ? "connection closed" : strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Reads a chunked body. 0 or -1. */
static int sf_read_chunked(sf_conn *c, int64_t deadline, sf_resp *r)
{
    for (;;) {
        size_t le;
        while ((le = sf_line_end(c, 0)) == 0) {
            if (sf_need(c, c->len + 1, deadline, r) != 0)
                return -1;
        }
        size_t size = strtoul(c->buf, NULL, 16);
        sf_consume(c, le);
        if (size == 0) {
            /* Trailers, then an empty line. */
            for (;;) {
                while ((le = sf_line_end(c, 0)) == 0) {
                    if (sf_need(c, c->len + 1, deadline, r) != 0)
                        return -1;
                }
                sf_consume(c, le);
                if (le == 2)
                    return 0;
            }
        }
        if (sf_need(c, size + 2, deadline, r) != 0 || sf_body_append(r, c->buf, size) != 0)
            return -1;
        sf_consume(c, size + 2);
    }
}

/* Reads one response on c into r. Returns 0 (keep the connection), 1 (close it after), -1. */
static int sf_read_response(sf_conn *c, const char *method, int64_t deadline, sf_resp *r)
{
    size_t head;
    while ((head = sf_head_end(c)) == 0) {
        if (c->len > SF_MAX_HEAD) {
            sf_set_err(r, "response head larger than %d bytes", SF_MAX_HEAD);
            return -1;
        }
        ssize_t got = sf_fill(c, deadline);
        if (got <= 0) {
            sf_set_err(r, "no response: %s", got == 0 ? "connection closed" : strerror(errno));
            return -1;
        }
    }
    c->buf[c->len] = '\0';
    int http10 = 0;
    if (sf_parse_head(c, head, r, &http10) != 0)
        return -1;
    sf_consume(c, head);
    const char *conn = sf_header(r, "Connection");
    int close_after = http10 || (conn != NULL && strcasecmp(conn, "close") == 0);
    const char *te = sf_header(r, "Transfer-Encoding");
    const char *cl = sf_header(r, "Content-Length");
    if (sf_body_append(r, "", 0) != 0) /* body is never NULL after a response */
        return -1;
    if (strcmp(method, "HEAD") == 0 || r->status < 200 || r->status == 204 || r->status == 304) {
        /* no body */
    } else if (te != NULL && strcasecmp(te, "chunked") == 0) {
        if (sf_read_chunked(c, deadline, r) != 0)
            return -1;
    } else if (cl != NULL) {
        size_t n = strtoul(cl, NULL, 10);
        if (sf_need(c, n, deadline, r) != 0 || sf_body_append(r, c->buf, n) != 0)
            return -1;
        sf_consume(c, n);
    } else {
        for (;;) {
            ssize_t got = sf_fill(c, deadline);
            if (got == 0)
                break;
            if (got < 0) {
                sf_set_err(r, "reading the body: %s", strerror(errno));
                return -1;
            }
        }
        if (sf_body_append(r, c->buf, c->len) != 0)
            return -1;
        c->len = 0;
        close_after = 1;
    }
    return close_after;
}

int sf_conn_request(sf_conn *c, const char *method, const char *path, const char *const *headers,
                    const char *body, size_t len, sf_resp *resp)
{
    sf_resp_free(resp);
    int64_t t0 = tu_now_us();
    int64_t deadline = tu_now_ms() + c->timeout_ms;
    sf_check_idle(c);
    if (c->fd < 0 && sf_connect(c, deadline, resp) != 0)
        return 0;

    size_t cap = 1024 + strlen(path);
    for (int i = 0; headers != NULL && headers[i] != NULL; i++)
        cap += strlen(headers[i]) + 2;
    char *head = malloc(cap);
    if (head == NULL) {
        sf_set_err(resp, "out of memory");
        return 0;
    }
    int n = snprintf(head, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", method, path, c->port);
    for (int i = 0; headers != NULL && headers[i] != NULL; i++)
        n += snprintf(head + n, cap - (size_t)n, "%s\r\n", headers[i]);
    if (body != NULL)
        n += snprintf(head + n, cap - (size_t)n, "Content-Length: %zu\r\n", len);
    n += snprintf(head + n, cap - (size_t)n, "\r\n");

    int sent = sf_send_all(c->fd, head, (size_t)n, deadline);
    if (sent == 0 && body != NULL && len > 0)
        sent = sf_send_all(c->fd, body, len, deadline);
    free(head);
    if (sent < 0) {
        sf_set_err(resp, "sending the request: %s", strerror(errno ? errno : ETIMEDOUT));
        sf_conn_drop(c);
        return 0;
    }
    /* sent == 1: the server closed early; it may still have answered (413). */
    int rc = sf_read_response(c, method, deadline, resp);
    resp->elapsed_us = tu_now_us() - t0;
    if (rc < 0) {
        int status = resp->status;
        char err[sizeof resp->err];
        memcpy(err, resp->err, sizeof err);
        sf_resp_free(resp);
        snprintf(resp->err, sizeof resp->err, "%.120s (status line: %d)", err, status);
        resp->elapsed_us = tu_now_us() - t0;
        sf_conn_drop(c);
        return 0;
    }
    if (rc == 1 || sent == 1)
        sf_conn_drop(c);
    if (resp->body_len > 0)
        resp->json = json_loadb(resp->body, resp->body_len, 0, NULL);
    return resp->status;
}

int sf_http(int port, const char *method, const char *path, const char *const *headers,
            const char *body, size_t len, sf_resp *resp)
{
    const char *h[SF_MAX_HEADERS + 2];
    int nh = 0;
    for (int i = 0; headers != NULL && headers[i] != NULL && nh < SF_MAX_HEADERS; i++)
        h[nh++] = headers[i];
    h[nh++] = "Connection: close";
    h[nh] = NULL;
    sf_conn *c = sf_conn_open(port, 0);
    if (c == NULL) {
        sf_resp_free(resp);
        sf_set_err(resp, "out of memory");
        return 0;
    }
    int st = sf_conn_request(c, method, path, h, body, len, resp);
    sf_conn_close(c);
    return st;
}

const char *sf_header(const sf_resp *r, const char *name)
{
    for (int i = 0; i < r->nheaders; i++) {
        if (r->name[i] != NULL && strcasecmp(r->name[i], name) == 0)
            return r->value[i];
    }
    return NULL;
}

void sf_resp_free(sf_resp *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < r->nheaders; i++) {
        free(r->name[i]);
        free(r->value[i]);
    }
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

const char *sf_resp_summary(const sf_resp *r)
{
    static _Thread_local char buf[1200];
    if (r->status == 0)
        snprintf(buf, sizeof buf, "no response: %s", r->err);
    else
        snprintf(buf, sizeof buf, "HTTP %d: %.1000s%s", r->status, r->body ? r->body : "",
                 r->body_len > 1000 ? "..." : "");
    return buf;
}

int sf_json_request(sf_conn *c, int port, const char *method, const char *path, const char *token,
                    const char *idem, const char *json_body, sf_resp *resp)
{
    char auth[512], key[512];
    const char *h[4];
    int nh = 0;
    if (json_body != NULL)
        h[nh++] = "Content-Type: application/json";
    if (token != NULL) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h[nh++] = auth;
    }
    if (idem != NULL) {
        snprintf(key, sizeof key, "Idempotency-Key: %s", idem);
        h[nh++] = key;
    }
    h[nh] = NULL;
    size_t len = json_body != NULL ? strlen(json_body) : 0;
    if (c != NULL)
        return sf_conn_request(c, method, path, h, json_body, len, resp);
    return sf_http(port, method, path, h, json_body, len, resp);
}

int sf_put_sku(int port, const char *token, const char *sku, long long stock, int segments,
               sf_resp *resp)
{
    char path[256], body[128];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    snprintf(body, sizeof body, "{\"stock\": %lld, \"segments\": %d}", stock, segments);
    return sf_json_request(NULL, port, "PUT", path, token, NULL, body, resp);
}

int sf_order(sf_conn *c, int port, const char *sku, long long quantity, sf_resp *resp)
{
    char body[256];
    snprintf(body, sizeof body, "{\"sku\": \"%s\", \"quantity\": %lld}", sku, quantity);
    return sf_json_request(c, port, "POST", "/api/v1/orders", NULL, NULL, body, resp);
}

int sf_restock(int port, const char *token, const char *sku, long long quantity, sf_resp *resp)
{
    char path[256], body[128];
    snprintf(path, sizeof path, "/api/v1/skus/%s/restock", sku);
    snprintf(body, sizeof body, "{\"quantity\": %lld}", quantity);
    return sf_json_request(NULL, port, "POST", path, token, NULL, body, resp);
}

json_t *sf_sku_status(int port, const char *sku)
{
    char path[256];
    snprintf(path, sizeof path, "/api/v1/skus/%s", sku);
    sf_resp r = {0};
    json_t *out = NULL;
    if (sf_http(port, "GET", path, NULL, NULL, 0, &r) == 200 && json_is_object(r.json))
        out = json_incref(r.json);
    else
        fprintf(stderr, "sf_sku_status(%d, %s): %s\n", port, sku, sf_resp_summary(&r));
    sf_resp_free(&r);
    return out;
}

const char *sf_error_code(const sf_resp *r)
{
    const char *s = json_string_value(json_object_get(r->json, "error"));
    return s != NULL ? s : "";
}

long long sf_json_int(const json_t *obj, const char *key, long long dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : dflt;
}

double sf_metric(int port, const char *series)
{
    sf_resp r = {0};
    double v = -1;
    if (sf_http(port, "GET", "/metrics", NULL, NULL, 0, &r) == 200) {
        size_t n = strlen(series);
        for (const char *line = r.body; line != NULL && *line != '\0';) {
            if (strncmp(line, series, n) == 0 && line[n] == ' ') {
                v = strtod(line + n + 1, NULL);
                break;
            }
            line = strchr(line, '\n');
            if (line != NULL)
                line++;
        }
    } else {
        fprintf(stderr, "sf_metric(%d): %s\n", port, sf_resp_summary(&r));
    }
    sf_resp_free(&r);
    return v;
}
