/*
 * http — libmicrohttpd glue; see http.h. Follows MHD's largepost pattern: per-request state in
 * *req_cls on the first call, the body accumulated while *upload_data_size != 0, the answer on
 * the final call, cleanup in the NOTIFY_COMPLETED callback.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "accesslog.h"
#include "app.h"
#include "http.h"
#include "ids.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "ratelimit.h"
#include "request.h"
#include "router.h"
#include "validate.h"

struct http_server {
    struct MHD_Daemon *daemon;
    struct app *app;
    atomic_int in_flight; /* requests between their first callback and completion */
    struct ratelimit *limiter; /* per-peer token buckets; NULL when rate_limit_rps is 0 */
    int port;
};

/* Per-request state, from the first access-handler call to NOTIFY_COMPLETED. */
struct req_state {
    char *body;
    size_t len, cap;
    bool too_large; /* the upload passed VALIDATE_MAX_BODY: answer 413, keep discarding */
    bool answered;  /* a response was queued */
    bool close;     /* send Connection: close (the request's framing cannot be trusted) */
    bool has_client; /* client is known (an IPv4 or IPv6 peer) */
    bool peer_trusted; /* the peer is in trusted_proxies */
    unsigned char client[PROXY_ADDR_LEN]; /* the peer, or the client a trusted proxy names */
    char client_text[48];                 /* client as text; "" when unknown */
    char request_id[HTTP_REQUEST_ID_MAX + 1]; /* X-Request-Id: a trusted proxy's, or made here */
    struct timespec start;
};

/* The last MHD error message of this thread, so http_start can report why MHD refused. */
static _Thread_local char mhd_last_error[256];

/* libmicrohttpd writes a message for every refused connection and every malformed request, so
 * a flood of either would flood the log: at most MHD_LOG_PER_SECOND of its messages are logged
 * per second; the number dropped is reported with the next one logged. */
#define MHD_LOG_PER_SECOND 20
static pthread_mutex_t mhd_log_lock = PTHREAD_MUTEX_INITIALIZER;
static time_t mhd_log_second;
static int mhd_log_count, mhd_log_dropped;

static void mhd_logger(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[sizeof(mhd_last_error)];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    memcpy(mhd_last_error, msg, n + 1);

    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int dropped = 0;
    pthread_mutex_lock(&mhd_log_lock);
    if (now.tv_sec != mhd_log_second) {
        mhd_log_second = now.tv_sec;
        mhd_log_count = 0;
    }
    bool emit = mhd_log_count < MHD_LOG_PER_SECOND;
    if (emit) {
        mhd_log_count++;
        dropped = mhd_log_dropped;
        mhd_log_dropped = 0;
    } else {
        mhd_log_dropped++;
    }
    pthread_mutex_unlock(&mhd_log_lock);
    if (dropped > 0)
        log_msg(CONFIG_LOG_WARN, "http_error_suppressed",
                "%d libmicrohttpd message(s) not logged (more than %d per second)", dropped,
                MHD_LOG_PER_SECOND);
    if (emit)
        log_msg(CONFIG_LOG_WARN, "http_error", "%s", msg);
}

static enum http_method method_of(const char *m)
{
    /* Method names are case-sensitive (RFC 9110 §9.1). */
    if (strcmp(m, MHD_HTTP_METHOD_GET) == 0)
        return HTTP_GET;
    if (strcmp(m, MHD_HTTP_METHOD_POST) == 0)
        return HTTP_POST;
    if (strcmp(m, MHD_HTTP_METHOD_HEAD) == 0)
        return HTTP_HEAD;
    if (strcmp(m, MHD_HTTP_METHOD_PUT) == 0)
        return HTTP_PUT;
    if (strcmp(m, MHD_HTTP_METHOD_DELETE) == 0)
        return HTTP_DELETE;
    return HTTP_OTHER;
}

/* Every X-Forwarded-For header of a request joined with ',' (RFC 9110 §5.3), keeping the
 * rightmost XFF_MAX - 1 bytes when they are longer: the right end is what a trusted proxy
 * vouches for. */
#define XFF_MAX 2048
struct xff_join {
    char buf[XFF_MAX];
    size_t len;
    bool seen;
};

static void xff_append(struct xff_join *x, const char *s, size_t n)
{
    if (n >= XFF_MAX - 1) {
        s += n - (XFF_MAX - 2);
        n = XFF_MAX - 2;
    }
    if (x->len + n + 1 >= XFF_MAX) {
        size_t drop = x->len + n + 1 - (XFF_MAX - 1);
        memmove(x->buf, x->buf + drop, x->len - drop);
        x->len -= drop;
    }
    memcpy(x->buf + x->len, s, n);
    x->len += n;
    x->buf[x->len] = '\0';
}

static enum MHD_Result xff_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    struct xff_join *x = cls;
    if (strcasecmp(key, "X-Forwarded-For") != 0 || !value)
        return MHD_YES;
    if (x->seen)
        xff_append(x, ",", 1);
    xff_append(x, value, strlen(value));
    x->seen = true;
    return MHD_YES;
}

/* Works out the request's client address (config trusted_proxies, proxy.h) into st. */
static void find_client(struct http_server *srv, struct MHD_Connection *conn,
                        struct req_state *st)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    unsigned char peer[PROXY_ADDR_LEN];
    st->has_client = ci && proxy_addr_of(ci->client_addr, peer);
    if (!st->has_client)
        return;
    const struct proxy_list *trusted = &srv->app->cfg.trusted_proxies;
    if (trusted->n == 0 || !proxy_trusted(trusted, peer)) {
        memcpy(st->client, peer, PROXY_ADDR_LEN);
        proxy_addr_text(st->client, st->client_text, sizeof(st->client_text));
        return;
    }
    st->peer_trusted = true;
    static _Thread_local struct xff_join xff;
    xff.len = 0;
    xff.buf[0] = '\0';
    xff.seen = false;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, xff_iter, &xff);
    const char *real_ip = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Real-IP");
    proxy_client(trusted, peer, xff.seen ? xff.buf : NULL, real_ip, st->client);
    proxy_addr_text(st->client, st->client_text, sizeof(st->client_text));
}

bool http_request_id_ok(const char *id)
{
    if (!id)
        return false;
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        if (n >= HTTP_REQUEST_ID_MAX ||
            !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("._:@/+=-", c)))
            return false;
    }
    return n > 0;
}

/* Gives the request its id: the X-Request-Id a trusted proxy sent, when it is well-formed;
 * otherwise 32 random hex digits. */
static void assign_request_id(struct MHD_Connection *conn, struct req_state *st)
{
    if (st->peer_trusted) {
        const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
        if (http_request_id_ok(h)) {
            snprintf(st->request_id, sizeof(st->request_id), "%s", h);
            return;
        }
    }
    if (ids_order_token(st->request_id, sizeof(st->request_id)) != 0)
        snprintf(st->request_id, sizeof(st->request_id), "-");
}

static long elapsed_us(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)(now.tv_sec - start->tv_sec) * 1000000L + (now.tv_nsec - start->tv_nsec) / 1000L;
}

static bool add_header(struct MHD_Response *r, const char *name, const char *value)
{
    return MHD_add_response_header(r, name, value) == MHD_YES;
}

/* Serialises res, queues it on conn and counts it. Returns MHD's verdict. */
static enum MHD_Result send_response(struct http_server *srv, struct MHD_Connection *conn,
                                     struct req_state *st, const char *method, const char *url,
                                     struct response *res)
{
    static char empty[1];
    static char oom_body[] = "{\"error\":\"internal\",\"message\":\"out of memory\"}";
    char *buf = NULL;
    size_t len = 0;
    const char *ctype = NULL;
    enum MHD_ResponseMemoryMode mode = MHD_RESPMEM_MUST_FREE;

    if (res->status == 0)
        response_error(res, ERROR_INTERNAL, NULL);
    if (res->text) {
        buf = res->text;
        res->text = NULL; /* MHD owns it now */
        len = strlen(buf);
        ctype = res->content_type ? res->content_type : "text/plain; charset=utf-8";
    } else if (res->body) {
        buf = json_dumps(res->body, JSON_COMPACT);
        if (buf)
            len = strlen(buf);
        ctype = "application/json";
    } else {
        buf = empty;
        mode = MHD_RESPMEM_PERSISTENT;
    }
    if (!buf) {
        res->status = 500;
        buf = oom_body;
        len = sizeof(oom_body) - 1;
        mode = MHD_RESPMEM_PERSISTENT;
    }

    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(buf);
        return MHD_NO;
    }
    bool ok = true;
    if (ctype)
        ok &= add_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (res->location[0])
        ok &= add_header(r, MHD_HTTP_HEADER_LOCATION, res->location);
    if (res->allow)
        ok &= add_header(r, MHD_HTTP_HEADER_ALLOW, res->allow);
    if (res->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", res->retry_after);
        ok &= add_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (res->www_authenticate)
        ok &= add_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (res->csp)
        ok &= add_header(r, "Content-Security-Policy", res->csp);
    ok &= add_header(r, "X-Request-Id", st->request_id);
    /* While draining, tell keep-alive clients to go elsewhere for their next request. */
    if (st->close || atomic_load(&srv->app->draining))
        ok &= add_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result qr = ok ? MHD_queue_response(conn, (unsigned)res->status, r) : MHD_NO;
    MHD_destroy_response(r);
    st->answered = true;
    metrics_request_end(res->status);
    long us = elapsed_us(&st->start);
    enum metrics_route route = router_metrics_route(url);
    metrics_http_duration(route, (double)us / 1e6);
    if (log_enabled(CONFIG_LOG_DEBUG))
        log_msg(CONFIG_LOG_DEBUG, "request", "%s %s %d %ldus", method, url, res->status, us);
    if (accesslog_enabled()) {
        struct accesslog_entry e = {
            .request_id = st->request_id,
            .client = st->client_text[0] ? st->client_text : NULL,
            .method = method,
            .path = url,
            .route = metrics_route_label(route),
            .status = res->status,
            .bytes = len,
            .seconds = (double)us / 1e6,
        };
        accesslog_write(&e);
    }
    return qr;
}

/* Answers 413 body_too_large (at the first call, without reading the body, or at the end). */
static enum MHD_Result answer_too_large(struct http_server *srv, struct MHD_Connection *conn,
                                        struct req_state *st, const char *method,
                                        const char *url)
{
    struct response res = {0};
    metrics_request_begin();
    response_error(&res, ERROR_BODY_TOO_LARGE, "the request body exceeds 16384 bytes");
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

/* The probes are never rate-limited: a load balancer's health checks must not be refused
 * because its address also carries client traffic. */
static bool is_probe(const char *url)
{
    return strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0 ||
           strcmp(url, "/metrics") == 0;
}

/* Takes a token from the client's bucket; 0 when the request may go on, else the Retry-After
 * seconds of the 429. */
static int rate_check(struct http_server *srv, const struct req_state *st)
{
    if (!st->has_client)
        return 0; /* not an IP peer (a UNIX socket): not limited */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    unsigned char key[RATELIMIT_KEY_LEN];
    ratelimit_key_addr(st->client, key);
    return ratelimit_take_key(srv->limiter, key, now_ms);
}

/* Answers 429 rate_limited with Retry-After, before the handler (and the body) is looked at. */
static enum MHD_Result answer_rate_limited(struct http_server *srv, struct MHD_Connection *conn,
                                           struct req_state *st, const char *method,
                                           const char *url, int retry_after)
{
    struct response res = {0};
    metrics_request_begin();
    res.retry_after = retry_after;
    response_error(&res, ERROR_RATE_LIMITED, "too many requests from this address");
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

/* What framing_iter counts in the request headers. */
struct framing {
    int content_length;    /* Content-Length headers */
    int transfer_encoding; /* Transfer-Encoding headers */
    bool chunked;          /* the last Transfer-Encoding was exactly "chunked" */
};

static enum MHD_Result framing_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    struct framing *f = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        f->content_length++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding++;
        f->chunked = value && strcasecmp(value, "chunked") == 0;
    }
    return MHD_YES;
}

/* The body-framing rules of RFC 9112 §6 that libmicrohttpd 0.9.75 does not enforce: it takes
 * the first of several Content-Length headers, lets Transfer-Encoding override Content-Length
 * and keeps the connection open, and waits for the end of the connection on a transfer coding
 * other than chunked. Each is how requests are smuggled past a proxy that frames the body
 * differently, so such a request is refused (400) and its connection closed. Returns NULL when
 * the framing is sound, else the message. */
static const char *framing_error(struct MHD_Connection *conn)
{
    struct framing f = {0, 0, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_iter, &f);
    if (f.content_length > 1)
        return "Content-Length: must be sent once";
    if (f.transfer_encoding > 0 && f.content_length > 0)
        return "Content-Length and Transfer-Encoding: only one of them may be sent";
    if (f.transfer_encoding > 1 || (f.transfer_encoding == 1 && !f.chunked))
        return "Transfer-Encoding: only chunked is supported";
    return NULL;
}

/* Answers 400 invalid_request for a request whose body cannot be delimited, and closes. */
static enum MHD_Result answer_bad_framing(struct http_server *srv, struct MHD_Connection *conn,
                                          struct req_state *st, const char *method,
                                          const char *url, const char *why)
{
    struct response res = {0};
    metrics_request_begin();
    st->close = true;
    response_error(&res, ERROR_INVALID_REQUEST, why);
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

/* MHD_OPTION_UNESCAPE_CALLBACK: decodes %HH in place like MHD's own MHD_http_unescape, except
 * that %00 is left as it is. Decoded, it would end the C string MHD hands on, so
 * "/api/v1/skus/A%00junk" would be served as SKU "A"; left encoded, the path fails validation
 * like any other bad character. Returns the new length. */
static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static size_t unescape_keep_nul(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] == '%' && r[1] && r[2]) {
            int hi = hex_value(r[1]), lo = hex_value(r[2]);
            int v = hi >= 0 && lo >= 0 ? hi * 16 + lo : 0;
            if (v != 0) {
                *w++ = (char)v;
                r += 3;
                continue;
            }
        }
        *w++ = *r++;
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* Appends an upload chunk unless the body already overflowed. */
static bool append_body(struct req_state *st, const char *data, size_t n)
{
    if (st->too_large)
        return true;
    if (n > VALIDATE_MAX_BODY - st->len) {
        st->too_large = true;
        free(st->body);
        st->body = NULL;
        st->len = st->cap = 0;
        return true;
    }
    if (st->len + n + 1 > st->cap) {
        size_t cap = st->cap ? st->cap : 1024;
        while (cap < st->len + n + 1)
            cap *= 2;
        if (cap > VALIDATE_MAX_BODY + 1)
            cap = VALIDATE_MAX_BODY + 1;
        char *b = realloc(st->body, cap);
        if (!b)
            return false;
        st->body = b;
        st->cap = cap;
    }
    memcpy(st->body + st->len, data, n);
    st->len += n;
    st->body[st->len] = '\0'; /* convenience only: the body is length-delimited */
    return true;
}

static enum MHD_Result handle_request(struct http_server *srv, struct MHD_Connection *conn,
                                      const char *url, const char *method,
                                      const char *upload_data, size_t *upload_data_size,
                                      struct req_state *st, bool first)
{
    if (first) {
        /* The first call for this request (headers complete). */
        clock_gettime(CLOCK_MONOTONIC, &st->start);
        atomic_fetch_add(&srv->in_flight, 1);
        find_client(srv, conn, st);
        assign_request_id(conn, st);
        log_set_request_id(st->request_id);
        if (srv->limiter && !is_probe(url)) {
            int retry = rate_check(srv, st);
            if (retry > 0)
                return answer_rate_limited(srv, conn, st, method, url, retry);
        }
        const char *bad_framing = framing_error(conn);
        if (bad_framing)
            return answer_bad_framing(srv, conn, st, method, url, bad_framing);
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            /* MHD has already refused a malformed Content-Length with 400. */
            errno = 0;
            unsigned long long n = strtoull(cl, NULL, 10);
            if (errno == ERANGE || n > VALIDATE_MAX_BODY) {
                st->too_large = true;
                return answer_too_large(srv, conn, st, method, url);
            }
        }
        return MHD_YES;
    }
    if (st->answered) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        if (!append_body(st, upload_data, *upload_data_size))
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->too_large)
        return answer_too_large(srv, conn, st, method, url);

    struct request req = {
        .method = method_of(method),
        .path = url,
        .body = st->len ? st->body : NULL,
        .body_len = st->len,
        .content_type =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
        .authorization =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .idempotency_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key"),
        .request_id = st->request_id,
        .client = st->client_text[0] ? st->client_text : NULL,
        .peer_loopback = st->has_client && proxy_is_loopback(st->client),
    };
    struct response res = {0};
    metrics_request_begin();
    router_dispatch(srv->app, &req, &res);
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)version;
    struct http_server *srv = cls;
    struct req_state *st = *req_cls;
    bool first = !st;
    if (first) {
        st = calloc(1, sizeof(*st));
        if (!st)
            return MHD_NO;
        *req_cls = st;
    }
    /* Every log line written while this request is handled carries its id. */
    log_set_request_id(st->request_id);
    enum MHD_Result r = handle_request(srv, conn, url, method, upload_data, upload_data_size, st,
                                      first);
    log_set_request_id(NULL);
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    struct http_server *srv = cls;
    struct req_state *st = *req_cls;
    if (!st)
        return;
    free(st->body);
    free(st);
    *req_cls = NULL;
    atomic_fetch_sub(&srv->in_flight, 1);
}

struct http_server *http_start(struct app *app, char *err, size_t errlen)
{
    const struct config *cfg = &app->cfg;
    struct sockaddr_storage ss;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    memset(&ss, 0, sizeof(ss));

    struct sockaddr_in *in4 = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;
    if (cfg->port < 0 || cfg->port > 65535) {
        snprintf(err, errlen, "port: %d is out of range", cfg->port);
        return NULL;
    }
    if (inet_pton(AF_INET, cfg->bind, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->bind, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)cfg->port);
        /* "::" means every address: serve IPv4 too. A specific IPv6 address is IPv6 only. */
        flags |= IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "bind: \"%s\" is not an IPv4 or IPv6 address", cfg->bind);
        return NULL;
    }

    if (cfg->thread_per_connection) {
        /* One thread per connection: a lock wait parks only its own connection. */
        flags |= MHD_USE_THREAD_PER_CONNECTION;
        if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
            flags |= MHD_USE_POLL;
    } else if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES) {
        flags |= MHD_USE_EPOLL;
    } else if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES) {
        flags |= MHD_USE_POLL;
    }

    struct http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    srv->app = app;
    atomic_init(&srv->in_flight, 0);
    if (cfg->rate_limit_rps > 0) {
        int burst = cfg->rate_limit_burst > 0 ? cfg->rate_limit_burst : cfg->rate_limit_rps;
        srv->limiter = ratelimit_new(cfg->rate_limit_rps, burst);
        if (!srv->limiter) {
            snprintf(err, errlen, "rate limiter: out of memory");
            free(srv);
            return NULL;
        }
    }

    mhd_last_error[0] = '\0';
    /* A pool size of 1 means "no pool" to MHD; thread-per-connection takes no pool at all. */
    unsigned int threads = cfg->threads > 1 && !cfg->thread_per_connection ? (unsigned)cfg->threads
                                                                           : 0;
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, /* first, so it sees every message */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)cfg->max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_keep_nul, NULL,
        MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(err, errlen, "cannot listen on %s port %d: %s", cfg->bind, cfg->port,
                 mhd_last_error[0] ? mhd_last_error : "libmicrohttpd refused to start");
        ratelimit_free(srv->limiter);
        free(srv);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg->port;
    return srv;
}

int http_port(const struct http_server *srv)
{
    return srv ? srv->port : 0;
}

void http_stop(struct http_server *srv, int grace_ms)
{
    if (!srv)
        return;
    MHD_socket lsock = MHD_quiesce_daemon(srv->daemon);
    /* MHD's threads may still hold the descriptor until MHD_stop_daemon, so it is only shut
     * down here (Linux then refuses new connects instead of queueing them) and closed later. */
    if (lsock != MHD_INVALID_SOCKET)
        shutdown(lsock, SHUT_RDWR);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (atomic_load(&srv->in_flight) > 0 && elapsed_us(&start) < (long)grace_ms * 1000L) {
        struct timespec tick = {0, 5 * 1000000L};
        nanosleep(&tick, NULL);
    }
    int left = atomic_load(&srv->in_flight);
    if (left > 0)
        log_msg(CONFIG_LOG_WARN, "shutdown", "%d request(s) still in flight after %d ms; closing",
                left, grace_ms);
    MHD_stop_daemon(srv->daemon);
    if (lsock != MHD_INVALID_SOCKET)
        close(lsock);
    ratelimit_free(srv->limiter);
    free(srv);
}
