/*
 * http — libmicrohttpd glue; see http.h, and worker.h and areq.h for the loops and the requests
 * answered later.
 *
 * --threads worker loops (worker.h), each with one MHD daemon of ours in external-epoll mode
 * (MHD's epoll fd is a persistent read event on the loop, MHD_get_timeout a timer), hooked to the
 * loop as its front end (struct worker_front). The daemons share the port with SO_REUSEPORT, so
 * the kernel spreads connections over the loops, and a connection stays on its loop.
 *
 * Per request, MHD's largepost pattern: state in *req_cls on the first call, the body
 * accumulated while *upload_data_size != 0, the answer on the final call, cleanup in the
 * NOTIFY_COMPLETED callback. A handler that waits on Redis gets an areq (areq.h): the
 * connection is suspended, the handler runs on the loop's Redis client, areq_done calls back
 * mark_ready, which queues the request, and the loop resumes the connection and runs MHD again,
 * which calls the access handler once more: the answer is queued then. Every suspended request has
 * a deadline timer; at shutdown every suspended connection is resumed before MHD_stop_daemon.
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <lockcore/lockcore_async.h>

#include <microhttpd.h>

#include "accesslog.h"
#include "app.h"
#include "areq.h"
#include "clock.h"
#include "events.h"
#include "hash.h"
#include "http.h"
#include "ids.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "ratelimit.h"
#include "request.h"
#include "router.h"
#include "validate.h"
#include "worker.h"

struct http_loop;
struct req_state;

/* A per-peer count of open connections, for max_connections_per_ip across every loop's
 * daemon (MHD's own per-IP limit only sees one daemon). */
struct ipcount {
    unsigned char addr[PROXY_ADDR_LEN];
    int n;
    struct ipcount *next;
};
#define IPCOUNT_BUCKETS 256

struct http_server {
    struct app *app;
    struct http_loop *loops; /* our front end on each loop */
    int nattached;           /* loops attached so far (http_attach), of nloops */
    int nloops;
    struct sockaddr_storage ss; /* the listening address (listen_addr) */
    unsigned int flags;         /* the daemons' MHD flags */
    atomic_int in_flight;       /* requests between their first callback and completion */
    struct ratelimit *limiter;  /* per-peer token buckets; NULL when rate_limit_rps is 0 */
    int port;
    int listen_fd;          /* the first daemon's listening socket (borrowed) */
    int async_deadline_ms;  /* a suspended request's safety deadline */
    struct events *events;  /* the status event streams of every loop (events.h; http_events) */
    atomic_int connections; /* open connections, all loops */
    pthread_mutex_t ip_mu;
    struct ipcount *ip[IPCOUNT_BUCKETS];
};

/* Our front end on one loop (its struct worker_front's data): the loop's MHD daemon and the
 * requests suspended on it. Touched only by the loop's thread once it runs. */
struct http_loop {
    struct http_server *srv;
    struct worker *w;
    struct MHD_Daemon *mhd;
    MHD_socket lsock;            /* the listening socket once quiesced */
    struct event *mhd_io;        /* MHD's epoll fd readable */
    struct event *mhd_timer;     /* MHD_get_timeout */
    struct event *kick;          /* resume the ready requests and run MHD (same loop) */
    struct req_state *suspended; /* suspended requests (list) */
    struct req_state *ready;     /* answered, waiting for MHD_resume_connection */
    struct req_state *unwatched; /* reading their body, no FIN watch yet (see watch_fin) */
};

/* Per-request state, from the first access-handler call to NOTIFY_COMPLETED. */
struct req_state {
    char *body;
    size_t len, cap;
    bool too_large;    /* the upload passed VALIDATE_MAX_BODY: answer 413, keep discarding */
    bool answered;     /* a response was queued */
    bool close;        /* send Connection: close (the request's framing cannot be trusted) */
    bool chunked;      /* an HTTP/1.1 GET: a body of unknown size goes in chunks (events_open) */
    bool has_client;   /* client is known (an IPv4 or IPv6 peer) */
    bool peer_trusted; /* the peer is in trusted_proxies */
    unsigned char client[PROXY_ADDR_LEN]; /* the peer, or the client a trusted proxy names */
    char client_text[48];                 /* client as text; "" when unknown */
    char request_id[REQUEST_ID_MAX + 1];  /* X-Request-Id: a trusted proxy's, or made here */
    int64_t start_us;                     /* clock_mono_us() at the first call */
    /* An asynchronous request (areq.h): from the suspend to the resumed call. */
    struct http_loop *loop;
    struct MHD_Connection *conn;
    struct areq *ar;     /* the handler's while !ready; ours once ready */
    struct response own; /* our answer when the handler was cut off (deadline, stop) */
    bool suspended, ready, abandoned;
    bool begun; /* counted by metrics_request_begin on the final call */
    struct event *deadline;
    struct router_route route;
    bool allowed;
    struct req_state *prev, *next; /* in loop->suspended, or next in loop->ready */
    /* While the body is read (see watch_fin): the socket, and the watch for the client's FIN. */
    int fd;
    bool receiving;                  /* from the first call to the final one */
    struct event *fin_watch;         /* EV_CLOSED on fd */
    struct event *fin_poke;          /* after the FIN: wakes MHD again until it ends the request */
    struct req_state *uprev, *unext; /* in loop->unwatched */
};

/* The last MHD error message of this thread, so http_attach can report why MHD refused. */
static _Thread_local char mhd_last_error[256];

/* Set (until MHD_run returns) when the handler returns MHD_NO after answering on the socket itself,
 * so that libmicrohttpd's "internal error" message for that close is not logged. */
static _Thread_local bool mhd_close_is_ours;

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
    if (mhd_close_is_ours) {
        mhd_close_is_ours = false;
        if (strncmp(msg, "Application reported internal error", 35) == 0)
            return; /* the handler answered on the socket and asked for the close */
    }

    time_t second = (time_t)(clock_mono_ms() / 1000);
    int dropped = 0;
    pthread_mutex_lock(&mhd_log_lock);
    if (second != mhd_log_second) {
        mhd_log_second = second;
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
    if (strcmp(m, MHD_HTTP_METHOD_PATCH) == 0)
        return HTTP_PATCH;
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
static void find_client(struct http_server *srv, struct MHD_Connection *conn, struct req_state *st)
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

/* The headers named name of a request: how many came, and the first one's value. */
struct header_count {
    const char *name;
    const char *first;
    int n;
};

static enum MHD_Result header_count_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                         const char *value)
{
    (void)kind;
    struct header_count *h = cls;
    if (strcasecmp(key, h->name) != 0)
        return MHD_YES;
    if (h->n++ == 0)
        h->first = value ? value : "";
    return MHD_YES;
}

/* Fills req's user header (--user-header, identity.h): its value and how often it came. Looked
 * up from every peer; identity_of believes it from trusted proxies only. */
static void find_user_header(struct http_server *srv, struct MHD_Connection *conn,
                             struct request *req)
{
    const char *name = srv->app->cfg.user_header;
    if (!name[0])
        return;
    struct header_count h = {.name = name};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, header_count_iter, &h);
    req->user_header = h.first;
    req->user_header_n = h.n;
}

bool http_request_id_ok(const char *id)
{
    if (!id)
        return false;
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        if (n >= REQUEST_ID_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                     (c >= '0' && c <= '9') || strchr("._:@/+=-", c)))
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

static long elapsed_us(int64_t start_us)
{
    return (long)(clock_mono_us() - start_us);
}

static bool add_header(struct MHD_Response *r, const char *name, const char *value)
{
    return MHD_add_response_header(r, name, value) == MHD_YES;
}

/* Marks st answered and counts the answer: metrics, the debug line, the access log. */
static void count_answer(struct req_state *st, const char *method, const char *url, int status,
                         size_t body_bytes)
{
    st->answered = true;
    metrics_request_end(status);
    long us = elapsed_us(st->start_us);
    metrics_http_duration(st->route.label, (double)us / 1e6);
    if (log_enabled(CONFIG_LOG_DEBUG))
        log_msg(CONFIG_LOG_DEBUG, "request", "%s %s %d %ldus", method, url, status, us);
    if (accesslog_enabled()) {
        struct accesslog_entry e = {
            .request_id = st->request_id,
            .client = st->client_text[0] ? st->client_text : NULL,
            .method = method,
            .path = url,
            .route = router_label(st->route.label),
            .status = status,
            .bytes = body_bytes,
            .seconds = (double)us / 1e6,
        };
        accesslog_write(&e);
    }
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
    if (res->stream && res->status == 200) {
        /* an event stream (events.h): a callback response that lives as long as the
         * connection reads it */
        struct snap *first = res->stream;
        res->stream = NULL; /* events_open takes the reference */
        res->stream_free = NULL;
        int busy = 0;
        const char *last_id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID");
        struct MHD_Response *sr =
            events_open(srv->events, conn, st->route.param, st->route.param_len, first, last_id,
                        st->chunked, &busy);
        if (sr) {
            enum MHD_Result qr = add_header(sr, "X-Request-Id", st->request_id)
                                     ? MHD_queue_response(conn, 200, sr)
                                     : MHD_NO;
            MHD_destroy_response(sr);
            count_answer(st, method, url, 200, 0);
            return qr;
        }
        response_error(res, busy ? ERROR_UNAVAILABLE : ERROR_INTERNAL,
                       busy ? "too many event-stream subscribers on this instance (or it is "
                              "shutting down); retry later"
                            : "out of memory");
        if (busy)
            res->retry_after = 1;
    }
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
    if (res->location)
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
    if (res->cache_control)
        ok &= add_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, res->cache_control);
    if (res->etag[0])
        ok &= add_header(r, MHD_HTTP_HEADER_ETAG, res->etag);
    if (res->has_age) {
        char age[24];
        snprintf(age, sizeof(age), "%ld", res->age_s);
        ok &= add_header(r, MHD_HTTP_HEADER_AGE, age);
    }
    ok &= add_header(r, "X-Request-Id", st->request_id);
    /* While draining, tell keep-alive clients to go elsewhere for their next request. */
    if (st->close || atomic_load(&srv->app->draining))
        ok &= add_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result qr = ok ? MHD_queue_response(conn, (unsigned)res->status, r) : MHD_NO;
    MHD_destroy_response(r);
    count_answer(st, method, url, res->status, len);
    return qr;
}

/* Answers 413 body_too_large (at the first call, without reading the body, or at the end). */
static enum MHD_Result answer_too_large(struct http_server *srv, struct MHD_Connection *conn,
                                        struct req_state *st, const char *method, const char *url)
{
    struct response res = {0};
    metrics_request_begin();
    response_error(&res, ERROR_BODY_TOO_LARGE, "the request body exceeds 16384 bytes");
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

/* ---- the request head and libmicrohttpd's connection pool ----
 *
 * libmicrohttpd 0.9.75 keeps everything of a request in one fixed pool per connection
 * (--connection-memory-kib): the head's bytes, a 56-byte record (64 with its alignment) for
 * each header line, cookie and query parameter, a copy of the Cookie header, and, when the
 * answer goes out, the answer's status line and headers. A head that does not fit gets
 * libmicrohttpd's own 431 (HTML); one that fits with too little room left for the answer's
 * headers got the connection closed with no answer at all ("failed to create response
 * header"): with 40-byte header lines that happened at 1.5 KiB in a 4 KiB pool. So every head
 * that reaches the handler is weighed here, and one that is longer than HTTP_HEAD_MAX or leaves
 * less than POOL_ANSWER_ROOM in the pool is answered 431 headers_too_large, written on the
 * socket by us (the pool may have no room for it). */

/* A field's record in the pool: sizeof(struct MHD_HTTP_Header) (56) rounded to 16. */
#define POOL_FIELD_COST 64
/* Room kept for the answer's status line and headers (the largest, the dashboard's with its
 * Content-Security-Policy and a 128-character X-Request-Id, is about 520 bytes). */
#define POOL_ANSWER_ROOM 768

static size_t round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

struct head_weigh {
    size_t fields;
    size_t cookie_bytes;
};

static enum MHD_Result head_weigh_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                       size_t key_size, const char *value, size_t value_size)
{
    struct head_weigh *hw = cls;
    hw->fields++;
    if (kind == MHD_HEADER_KIND && key_size == 6 && strncasecmp(key, "Cookie", 6) == 0 && value)
        hw->cookie_bytes += round16(value_size + 1);
    return MHD_YES;
}

/* The pool bytes the request head of conn takes, and its size (*head_bytes). */
static size_t head_cost(struct MHD_Connection *conn, size_t *head_bytes)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    *head_bytes = ci ? ci->header_size : 0;
    struct head_weigh hw = {0, 0};
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND | MHD_COOKIE_KIND | MHD_GET_ARGUMENT_KIND,
                                head_weigh_iter, &hw);
    return round16(*head_bytes) + hw.fields * POOL_FIELD_COST + hw.cookie_bytes;
}

/* Why the head of conn is refused (431), or NULL when it is served. */
static const char *head_too_large(const struct http_server *srv, struct MHD_Connection *conn,
                                  char *why, size_t whylen)
{
    size_t bytes;
    size_t cost = head_cost(conn, &bytes);
    size_t pool = (size_t)srv->app->cfg.connection_memory_kib * 1024;
    if (bytes > HTTP_HEAD_MAX) {
        snprintf(why, whylen, "the request head (request line and headers) of %zu bytes exceeds %d",
                 bytes, HTTP_HEAD_MAX);
        return why;
    }
    if (cost + POOL_ANSWER_ROOM > pool) {
        snprintf(why, whylen,
                 "the request head of %zu bytes has too many header fields or cookies for the "
                 "connection memory (%d KiB)",
                 bytes, srv->app->cfg.connection_memory_kib);
        return why;
    }
    return NULL;
}

/* Answers 431 headers_too_large: the answer is written on the connection's socket here, whole
 * (the socket's send buffer is empty while a request is read, and the answer is small), and
 * MHD_NO makes libmicrohttpd close the connection without writing anything itself. */
static enum MHD_Result answer_head_too_large(struct MHD_Connection *conn, struct req_state *st,
                                             const char *method, const char *url, const char *why)
{
    struct response res = {0};
    metrics_request_begin();
    response_error(&res, ERROR_HEADERS_TOO_LARGE, why);
    char *body = res.body ? json_dumps(res.body, JSON_COMPACT) : NULL;
    response_free(&res);
    size_t blen = body ? strlen(body) : 0;
    char date[40];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    char head[512];
    int hlen = snprintf(head, sizeof(head),
                        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                        "Date: %s\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n"
                        "X-Request-Id: %s\r\n"
                        "Connection: close\r\n\r\n",
                        date, blen, st->request_id);
    struct iovec iov[2] = {{head, (size_t)hlen}, {body, blen}};
    struct msghdr msg = {0};
    msg.msg_iov = iov;
    msg.msg_iovlen = body && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0 ? 2 : 1;
    size_t want = (size_t)hlen + (msg.msg_iovlen == 2 ? blen : 0);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    ssize_t sent = ci ? sendmsg(ci->connect_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
    if (sent != (ssize_t)want)
        log_msg(CONFIG_LOG_WARN, "http_431", "the 431 answer could not be written whole: %s",
                sent < 0 ? strerror(errno) : "short write");
    count_answer(st, method, url, 431, blen);
    free(body);
    mhd_close_is_ours = true;
    return MHD_NO;
}

/* Takes a token from the client's bucket; 0 when the request may go on, else the Retry-After
 * seconds of the 429. */
static int rate_check(struct http_server *srv, const struct req_state *st)
{
    if (!st->has_client)
        return 0; /* not an IP peer (a UNIX socket): not limited */
    int64_t now_ms = clock_mono_ms();
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
                                          struct req_state *st, const char *method, const char *url,
                                          const char *why)
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
        /* The first chunk is usually the whole body: its own size, not more (every in-flight
         * request holds its buffer until it is copied into its areq). */
        size_t cap = st->cap ? st->cap : n + 1;
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

/* ---- asynchronous requests (areq.h) ---- */

/* Queues st for resumption on its loop (never from inside MHD_run's access handler call: the
 * kick event does it). */
static void mark_ready(void *arg)
{
    struct req_state *st = arg;
    struct http_loop *hl = st->loop;
    if (st->deadline)
        event_del(st->deadline);
    if (st->prev)
        st->prev->next = st->next;
    else if (hl->suspended == st)
        hl->suspended = st->next;
    if (st->next)
        st->next->prev = st->prev;
    st->prev = NULL;
    st->ready = true;
    st->next = hl->ready;
    hl->ready = st;
    event_active(hl->kick, EV_TIMEOUT, 0);
}

/* Answers a suspended request without its handler (503): the handler's areq is abandoned and
 * freed by its areq_done. */
static void abandon(struct req_state *st, const char *why, bool outcome_unknown)
{
    if (st->ready || !st->ar)
        return;
    areq_abandon(st->ar);
    st->ar = NULL;
    st->abandoned = true;
    response_error(&st->own, ERROR_UNAVAILABLE, why);
    if (outcome_unknown && st->own.body)
        json_object_set_new(st->own.body, "outcome", json_string("unknown"));
    mark_ready(st);
}

static void on_request_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct req_state *st = arg;
    log_set_request_id(st->request_id);
    log_msg(CONFIG_LOG_WARN, "request_deadline", "no answer within %d ms; answering 503",
            st->loop->srv->async_deadline_ms);
    abandon(st, "the request did not finish in time; retry later",
            st->route.row->flags & ROUTER_WRITES);
    log_set_request_id(NULL);
}

/* Starts the handler of an asynchronous endpoint: copies the request into an areq, suspends the
 * connection and arms the deadline. MHD_YES, or MHD_NO when out of memory. */
static enum MHD_Result start_async(struct http_server *srv, struct MHD_Connection *conn,
                                   struct req_state *st, const struct request *req)
{
    struct http_loop *hl = worker_current()->front.data;
    struct areq *ar = areq_new(&hl->w->env, srv->app, req, mark_ready, st);
    if (!ar)
        return MHD_NO;
    st->deadline = evtimer_new(hl->w->env.base, on_request_deadline, st);
    if (!st->deadline) {
        areq_free(ar);
        return MHD_NO;
    }
    st->loop = hl;
    st->conn = conn;
    st->ar = ar;
    MHD_suspend_connection(conn);
    st->suspended = true;
    st->next = hl->suspended;
    if (hl->suspended)
        hl->suspended->prev = st;
    hl->suspended = st;
    struct timeval tv = {srv->async_deadline_ms / 1000, (srv->async_deadline_ms % 1000) * 1000};
    evtimer_add(st->deadline, &tv);
    st->route.row->start(ar);
    return MHD_YES;
}

/* The resumed call of an asynchronous request: sends its answer. */
static enum MHD_Result finish_async(struct http_server *srv, struct MHD_Connection *conn,
                                    struct req_state *st, const char *method, const char *url)
{
    struct response res = {0};
    if (st->ar) {
        res = st->ar->res;
        memset(&st->ar->res, 0, sizeof(st->ar->res));
        router_end(srv->app, &st->ar->req, &st->route, &res, st->allowed);
        areq_free(st->ar);
        st->ar = NULL;
    } else {
        res = st->own;
        memset(&st->own, 0, sizeof(st->own));
    }
    st->suspended = false;
    st->ready = false;
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

/* ---- a client that gives up while its body is read ----
 *
 * libmicrohttpd 0.9.75 registers each connection in its epoll set edge-triggered and takes a
 * read shorter than its buffer for "nothing more to read". When a client sends its last bytes
 * and its FIN before the read (it gives up in the middle of its body: a shutdown, then a close),
 * that read returns the bytes only; the FIN that would make the next read return 0 raises no
 * new edge, so the request stays in the middle of its body, counted in flight, until
 * connection_timeout_s (30 s by default), and a SIGTERM meanwhile waits out its whole grace.
 * So a request still reading its body when MHD_run returns gets a watch: an EV_CLOSED event on
 * its socket (EPOLLRDHUP, level-triggered in our loop's own epoll set). When the client's FIN is
 * there, shutdown(SHUT_RD) on the socket (the peer sends nothing more anyway; queued bytes are
 * still read) wakes every epoll set watching it: libmicrohttpd reads again, gets 0 and ends the
 * request (MHD_REQUEST_TERMINATED_CLIENT_ABORT). The poke is repeated every FIN_POKE_MS until
 * the request ends, in case bytes queued before the FIN were read first and the end was
 * missed once more. Requests whose body comes with their head never leave MHD_run unanswered,
 * so they cost no system call. */
#define FIN_POKE_MS 100

static void unwatch_fin(struct req_state *st)
{
    if (!st->receiving)
        return;
    st->receiving = false;
    if (st->uprev)
        st->uprev->unext = st->unext;
    else if (st->loop && st->loop->unwatched == st)
        st->loop->unwatched = st->unext;
    if (st->unext)
        st->unext->uprev = st->uprev;
    st->uprev = st->unext = NULL;
    if (st->fin_watch)
        event_free(st->fin_watch);
    if (st->fin_poke)
        event_free(st->fin_poke);
    st->fin_watch = st->fin_poke = NULL;
}

static void on_fin_poke(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct req_state *st = arg;
    shutdown(st->fd, SHUT_RD);
}

static void on_client_fin(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct req_state *st = arg;
    shutdown(fd, SHUT_RD);
    /* fin_watch stays level-ready from now on: not added again, the poke takes over. */
    if (!st->fin_poke) {
        st->fin_poke = event_new(st->loop->w->env.base, -1, EV_PERSIST, on_fin_poke, st);
        struct timeval tv = {0, FIN_POKE_MS * 1000};
        if (st->fin_poke)
            evtimer_add(st->fin_poke, &tv);
    }
}

/* Called after MHD_run: watches the requests that are still reading their body. */
static void watch_fin(struct http_loop *hl)
{
    while (hl->unwatched) {
        struct req_state *st = hl->unwatched;
        hl->unwatched = st->unext;
        if (hl->unwatched)
            hl->unwatched->uprev = NULL;
        st->unext = NULL;
        st->fin_watch = event_new(hl->w->env.base, st->fd, EV_CLOSED, on_client_fin, st);
        if (!st->fin_watch || event_add(st->fin_watch, NULL) != 0)
            log_msg(CONFIG_LOG_WARN, "http_fin_watch",
                    "cannot watch a connection for its client's end (out of memory?)");
    }
}

/* Puts st, at the end of its first call, on its loop's list of requests reading their body. */
static void begin_receiving(struct MHD_Connection *conn, struct req_state *st)
{
    struct worker *w = worker_current();
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!w || !ci)
        return;
    struct http_loop *hl = w->front.data;
    st->fd = ci->connect_fd;
    st->loop = hl;
    st->receiving = true;
    st->unext = hl->unwatched;
    if (hl->unwatched)
        hl->unwatched->uprev = st;
    hl->unwatched = st;
}

static enum MHD_Result handle_request(struct http_server *srv, struct MHD_Connection *conn,
                                      const char *url, const char *method, const char *upload_data,
                                      size_t *upload_data_size, struct req_state *st, bool first)
{
    if (first) {
        /* The first call for this request (headers complete). */
        st->start_us = clock_mono_us();
        atomic_fetch_add(&srv->in_flight, 1);
        /* The route (its metrics label, whether it is a probe) for answers given before the
         * body is read; router_begin matches again once it is. */
        router_match(method_of(method), url, &st->route);
        find_client(srv, conn, st);
        assign_request_id(conn, st);
        log_set_request_id(st->request_id);
        char why[160];
        if (head_too_large(srv, conn, why, sizeof(why)))
            return answer_head_too_large(conn, st, method, url, why);
        /* A load balancer's probes are never limited: its checks must not be refused because
         * its address also carries client traffic. */
        if (srv->limiter && !(st->route.row && (st->route.row->flags & ROUTER_PROBE))) {
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
        begin_receiving(conn, st);
        return MHD_YES;
    }
    if (st->ready)
        return finish_async(srv, conn, st, method, url);
    if (st->suspended) {
        *upload_data_size = 0;
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
    unwatch_fin(st); /* the final call: the body is whole */
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
        .peer_trusted = st->peer_trusted,
        .if_none_match =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
        .consistent = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "consistent"),
        .cursor = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor"),
        .limit = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit"),
    };
    find_user_header(srv, conn, &req);
    struct response res = {0};
    metrics_request_begin();
    st->begun = true;
    if (router_begin(srv->app, &req, &res, &st->route, &st->allowed)) {
        const struct router_row *row = st->route.row;
        if (row->run) /* answers at once, or (a row with start too) leaves it to start */
            row->run(srv->app, &req, &res);
        if (res.status == 0 && row->start) {
            if (!worker_current() || worker_current()->stopping) {
                response_error(&res, ERROR_UNAVAILABLE,
                               "the service is shutting down; retry later");
            } else {
                enum MHD_Result r = start_async(srv, conn, st, &req);
                if (r == MHD_YES) {
                    /* The areq has its own copy: the connection may wait long (a lock wait),
                     * so nothing of the body stays with it (at 10,000 waiting orders, 10 MiB). */
                    free(st->body);
                    st->body = NULL;
                    st->len = st->cap = 0;
                    return r;
                }
                response_error(&res, ERROR_INTERNAL, "out of memory");
            }
        }
        router_end(srv->app, &req, &st->route, &res, st->allowed);
    }
    enum MHD_Result r = send_response(srv, conn, st, method, url, &res);
    response_free(&res);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct http_server *srv = cls;
    struct req_state *st = *req_cls;
    bool first = !st;
    if (first) {
        st = calloc(1, sizeof(*st));
        if (!st)
            return MHD_NO;
        *req_cls = st;
        st->chunked =
            strcmp(version, MHD_HTTP_VERSION_1_1) == 0 && strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    }
    /* Every log line written while this request is handled carries its id. */
    log_set_request_id(st->request_id);
    enum MHD_Result r =
        handle_request(srv, conn, url, method, upload_data, upload_data_size, st, first);
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
    unwatch_fin(st);
    if (st->begun && !st->answered) {
        /* The connection went before the answer could be sent (the client gave up while the
         * request was suspended): the request still ends for the in-flight gauge. */
        int status = st->ar ? st->ar->res.status : st->own.status;
        metrics_request_end(status ? status : 503);
    }
    if (st->ar) {
        if (st->ready) {
            areq_free(st->ar); /* answered, but the connection went before it was sent */
        } else {
            areq_abandon(st->ar); /* never: a suspended connection does not complete */
        }
    }
    if (st->ready && st->loop) {
        /* Still on the ready list (the connection closed first): take it off. */
        for (struct req_state **pp = &st->loop->ready; *pp; pp = &(*pp)->next)
            if (*pp == st) {
                *pp = st->next;
                break;
            }
    }
    if (st->deadline)
        event_free(st->deadline);
    response_free(&st->own);
    free(st->body);
    free(st);
    *req_cls = NULL;
    atomic_fetch_sub(&srv->in_flight, 1);
}

/* ---- connection limits across the loops ---- */

static unsigned ip_bucket(const unsigned char *a)
{
    return hash_bytes(HASH_FNV_BASIS, a, PROXY_ADDR_LEN) % IPCOUNT_BUCKETS;
}

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    struct http_server *srv = cls;
    const struct config *cfg = &srv->app->cfg;
    if (atomic_load(&srv->connections) >= cfg->max_connections)
        return MHD_NO;
    unsigned char a[PROXY_ADDR_LEN];
    if (cfg->max_connections_per_ip <= 0 || !proxy_addr_of(addr, a))
        return MHD_YES;
    int n = 0;
    pthread_mutex_lock(&srv->ip_mu);
    for (struct ipcount *c = srv->ip[ip_bucket(a)]; c; c = c->next)
        if (memcmp(c->addr, a, PROXY_ADDR_LEN) == 0)
            n = c->n;
    pthread_mutex_unlock(&srv->ip_mu);
    return n < cfg->max_connections_per_ip ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct http_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&srv->connections, 1);
        *socket_context = NULL;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        unsigned char a[PROXY_ADDR_LEN];
        if (srv->app->cfg.max_connections_per_ip <= 0 || !ci || !proxy_addr_of(ci->client_addr, a))
            return;
        unsigned b = ip_bucket(a);
        pthread_mutex_lock(&srv->ip_mu);
        struct ipcount *c = srv->ip[b];
        while (c && memcmp(c->addr, a, PROXY_ADDR_LEN) != 0)
            c = c->next;
        if (!c && (c = calloc(1, sizeof(*c))) != NULL) {
            memcpy(c->addr, a, PROXY_ADDR_LEN);
            c->next = srv->ip[b];
            srv->ip[b] = c;
        }
        if (c)
            c->n++;
        *socket_context = c;
        pthread_mutex_unlock(&srv->ip_mu);
        return;
    }
    atomic_fetch_sub(&srv->connections, 1);
    struct ipcount *c = *socket_context;
    if (!c)
        return;
    pthread_mutex_lock(&srv->ip_mu);
    if (--c->n == 0) {
        for (struct ipcount **pp = &srv->ip[ip_bucket(c->addr)]; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        free(c);
    }
    pthread_mutex_unlock(&srv->ip_mu);
    *socket_context = NULL;
}

/* ---- our front end on the loops (struct worker_front) ---- */

/* Runs MHD and re-arms its timer. */
static void mhd_pump(struct http_loop *hl)
{
    if (!hl->mhd)
        return;
    MHD_run(hl->mhd);
    mhd_close_is_ours = false;
    watch_fin(hl);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(hl->mhd, &ms) == MHD_YES) {
        if (ms > 3600000ULL)
            ms = 3600000ULL;
        struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
        evtimer_add(hl->mhd_timer, &tv);
    } else {
        evtimer_del(hl->mhd_timer);
    }
}

static void on_mhd(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mhd_pump(arg);
}

/* Resumes every ready request, then lets MHD send their answers (front.flush). */
static void loop_flush(void *arg)
{
    struct http_loop *hl = arg;
    struct req_state *list = hl->ready;
    hl->ready = NULL;
    while (list) {
        struct req_state *st = list;
        list = st->next;
        st->next = NULL;
        MHD_resume_connection(st->conn);
    }
    mhd_pump(hl);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    loop_flush(arg);
}

/* The event streams resumed connections outside MHD_run: run the daemon soon (events.h). */
static void kick_loop(void *arg)
{
    struct http_loop *hl = arg;
    event_active(hl->kick, EV_TIMEOUT, 0);
}

/* Stop accepting (front.quiesce): the listening socket is shut down, so Linux refuses new
 * connects instead of queueing them. */
static void loop_quiesce(void *arg)
{
    struct http_loop *hl = arg;
    hl->lsock = MHD_quiesce_daemon(hl->mhd);
    if (hl->lsock != MHD_INVALID_SOCKET)
        shutdown(hl->lsock, SHUT_RDWR);
    /* the event streams end now: they would hold the in-flight count up to the grace */
    events_loop_quiesce(hl->srv->events, hl->w->env.id);
    mhd_pump(hl);
}

/* Answers every request still suspended (503) (front.cut; the loop flushes next). */
static void loop_cut(void *arg)
{
    struct http_loop *hl = arg;
    while (hl->suspended) {
        struct req_state *st = hl->suspended;
        log_set_request_id(st->request_id);
        abandon(st, "the service is shutting down; retry later",
                st->route.row->flags & ROUTER_WRITES);
        log_set_request_id(NULL);
    }
}

/* The end (front.close): no connection is suspended now. */
static void loop_close(void *arg)
{
    struct http_loop *hl = arg;
    if (hl->mhd) {
        /* Resumed connections are moved back by MHD_run; stop only once none is suspended. */
        for (int i = 0; i < 8 && hl->suspended; i++)
            mhd_pump(hl);
        MHD_stop_daemon(hl->mhd);
        hl->mhd = NULL;
    }
    events_loop_close(hl->srv->events, hl->w->env.id);
}

static void loop_free(struct http_loop *hl)
{
    if (hl->mhd_io)
        event_free(hl->mhd_io);
    if (hl->mhd_timer)
        event_free(hl->mhd_timer);
    if (hl->kick)
        event_free(hl->kick);
    hl->mhd_io = hl->mhd_timer = hl->kick = NULL;
    if (hl->mhd)
        MHD_stop_daemon(hl->mhd);
    hl->mhd = NULL;
    if (hl->lsock != MHD_INVALID_SOCKET)
        close(hl->lsock);
    hl->lsock = MHD_INVALID_SOCKET;
}

/* Parses cfg's bind address and port into *ss, adding the IPv6 flags to *flags. 0, or -1 with
 * err set. */
static int listen_addr(const struct config *cfg, struct sockaddr_storage *ss, unsigned int *flags,
                       char *err, size_t errlen)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)(void *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
    if (cfg->port < 0 || cfg->port > 65535) {
        snprintf(err, errlen, "port: %d is out of range", cfg->port);
        return -1;
    }
    if (inet_pton(AF_INET, cfg->bind, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->bind, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)cfg->port);
        /* "::" means every address: serve IPv4 too. A specific IPv6 address is IPv6 only. */
        *flags |= IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "bind: \"%s\" is not an IPv4 or IPv6 address", cfg->bind);
        return -1;
    }
    return 0;
}

/* Starts loop i's MHD daemon on ss (flags as for MHD_start_daemon); the first one's port and
 * listening socket go to srv. 0, or -1 with err set. */
static int loop_daemon(struct http_loop *hl, int i, struct sockaddr_storage *ss, unsigned int flags,
                       char *err, size_t errlen)
{
    struct http_server *srv = hl->srv;
    const struct config *cfg = &srv->app->cfg;
    struct sockaddr_in *in4 = (struct sockaddr_in *)(void *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
    /* Every daemon listens on the same port (SO_REUSEPORT): the first one's, when the
     * configured port is 0. */
    if (i > 0) {
        if (in4->sin_family == AF_INET)
            in4->sin_port = htons((uint16_t)srv->port);
        else
            in6->sin6_port = htons((uint16_t)srv->port);
    }
    /* With a per-IP connection cap, the loops accept from one queue instead (a dup of the
     * first daemon's socket each): connections are then accepted in the order they came,
     * so the cap counts a client's earlier connections before its next one. Separate
     * SO_REUSEPORT queues could accept a later connection first. */
    int shared = i > 0 && cfg->max_connections_per_ip > 0 ? dup(srv->listen_fd) : -1;
    if (i > 0 && cfg->max_connections_per_ip > 0 && shared < 0) {
        snprintf(err, errlen, "dup of the listening socket: %s", strerror(errno));
        return -1;
    }
    /* The options every daemon has; then either the shared accept queue's socket or
     * an address of its own (SO_REUSEPORT). */
    struct MHD_OptionItem common[] = {
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)cfg->max_connections, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->connection_timeout_s, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)cfg->connection_memory_kib * 1024, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, srv},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, srv},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)unescape_keep_nul, NULL},
        {MHD_OPTION_END, 0, NULL}};
    if (shared >= 0)
        hl->mhd = MHD_start_daemon(
            flags, 0, on_accept, srv, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger,
            NULL, /* first: it sees every message */
            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)shared, MHD_OPTION_ARRAY, common, MHD_OPTION_END);
    else
        hl->mhd = MHD_start_daemon(
            flags, (uint16_t)(i > 0 ? srv->port : cfg->port), on_accept, srv, on_request, srv,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, /* first: it sees every message */
            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)ss, MHD_OPTION_LISTENING_ADDRESS_REUSE,
            (unsigned int)1, MHD_OPTION_ARRAY, common, MHD_OPTION_END);
    if (!hl->mhd && shared >= 0)
        close(shared);
    if (!hl->mhd) {
        snprintf(err, errlen, "cannot listen on %s port %d: %s", cfg->bind, cfg->port,
                 mhd_last_error[0] ? mhd_last_error : "libmicrohttpd refused to start");
        return -1;
    }
    if (i == 0) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(hl->mhd, MHD_DAEMON_INFO_BIND_PORT);
        srv->port = di ? di->port : cfg->port;
        const union MHD_DaemonInfo *li = MHD_get_daemon_info(hl->mhd, MHD_DAEMON_INFO_LISTEN_FD);
        srv->listen_fd = li ? li->listen_fd : -1;
        if (srv->listen_fd < 0 && cfg->max_connections_per_ip > 0) {
            snprintf(err, errlen, "libmicrohttpd: no listening socket");
            return -1;
        }
    }
    return 0;
}

/* Attaches our front end to loop w (made by worker_init, not yet running): its daemon and
 * events on the loop's base. 0, or -1 with err set (http_free undoes what was made). */
int http_attach(struct http_server *srv, struct worker *w, char *err, size_t errlen)
{
    int i = w->env.id;
    if (i < 0 || i >= srv->nloops || srv->nattached != i) {
        snprintf(err, errlen, "http: loop %d attached out of order", i);
        return -1;
    }
    struct http_loop *hl = &srv->loops[i];
    srv->nattached++;
    hl->srv = srv;
    hl->w = w;
    hl->lsock = MHD_INVALID_SOCKET;
    w->front = (struct worker_front){.data = hl,
                                     .quiesce = loop_quiesce,
                                     .cut = loop_cut,
                                     .flush = loop_flush,
                                     .close = loop_close};
    if (loop_daemon(hl, i, &srv->ss, srv->flags, err, errlen) != 0)
        return -1;
    const union MHD_DaemonInfo *ei = MHD_get_daemon_info(hl->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!ei) {
        snprintf(err, errlen, "libmicrohttpd: no epoll fd");
        return -1;
    }
    struct event_base *base = w->env.base;
    hl->mhd_io = event_new(base, ei->epoll_fd, EV_READ | EV_PERSIST, on_mhd, hl);
    hl->mhd_timer = evtimer_new(base, on_mhd, hl);
    hl->kick = event_new(base, -1, 0, on_kick, hl);
    if (!hl->mhd_io || !hl->mhd_timer || !hl->kick || event_add(hl->mhd_io, NULL)) {
        snprintf(err, errlen, "event loop %d: out of memory", i);
        return -1;
    }
    struct timeval now = {0, 0};
    evtimer_add(hl->mhd_timer, &now);
    return 0;
}

void http_events(struct http_server *srv, struct events *ev)
{
    srv->events = ev;
    for (int i = 0; i < srv->nattached; i++)
        events_loop_hook(ev, i, kick_loop, &srv->loops[i]);
}

/* Descriptors kept beside the connections: Redis connections of every loop, the listening
 * sockets, epoll and event fds, the log and order-log files. */
#define FD_RESERVE 256

/* Raises the soft open-file limit so that --max-connections connections can be open at once
 * (a soft limit of 1024 is common, the hard one far higher): as far as the hard limit allows,
 * with a warning when it does not. */
static void raise_fd_limit(const struct config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)cfg->max_connections + FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
        if (rl.rlim_cur > was && setrlimit(RLIMIT_NOFILE, &rl) == 0)
            log_msg(CONFIG_LOG_INFO, "fd_limit", "open-file limit raised from %llu to %llu",
                    (unsigned long long)was, (unsigned long long)rl.rlim_cur);
        else
            rl.rlim_cur = was;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
        log_msg(CONFIG_LOG_WARN, "fd_limit",
                "the open-file limit (%llu) is below max_connections (%d) + %d: connections "
                "beyond it are refused; raise the hard limit (ulimit -Hn, LimitNOFILE=)",
                (unsigned long long)rl.rlim_cur, cfg->max_connections, FD_RESERVE);
}

struct http_server *http_new(struct app *app, char *err, size_t errlen)
{
    const struct config *cfg = &app->cfg;
    struct sockaddr_storage ss;
    unsigned int flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (listen_addr(cfg, &ss, &flags, err, errlen) != 0)
        return NULL;
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) != MHD_YES) {
        snprintf(err, errlen, "libmicrohttpd was built without epoll");
        return NULL;
    }
    raise_fd_limit(cfg);
    struct http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    srv->app = app;
    srv->ss = ss;
    srv->flags = flags;
    atomic_init(&srv->in_flight, 0);
    atomic_init(&srv->connections, 0);
    pthread_mutex_init(&srv->ip_mu, NULL);
    srv->async_deadline_ms = 2 * (cfg->lock_wait_ms + cfg->hold_ms) + cfg->lock_lease_ms +
                             4 * cfg->redis_timeout_ms + 5000;
    if (cfg->rate_limit_rps > 0) {
        int burst = cfg->rate_limit_burst > 0 ? cfg->rate_limit_burst : cfg->rate_limit_rps;
        srv->limiter = ratelimit_new(cfg->rate_limit_rps, burst);
        if (!srv->limiter) {
            snprintf(err, errlen, "rate limiter: out of memory");
            http_free(srv);
            return NULL;
        }
    }
    srv->nloops = cfg->threads > 0 ? cfg->threads : 1;
    srv->loops = calloc((size_t)srv->nloops, sizeof(*srv->loops));
    if (!srv->loops) {
        snprintf(err, errlen, "out of memory");
        http_free(srv);
        return NULL;
    }
    mhd_last_error[0] = '\0';
    return srv;
}

int http_port(const struct http_server *srv)
{
    return srv ? srv->port : 0;
}

int http_in_flight(const struct http_server *srv)
{
    return atomic_load(&srv->in_flight);
}

void http_free(struct http_server *srv)
{
    if (!srv)
        return;
    for (int i = 0; i < srv->nattached; i++)
        loop_free(&srv->loops[i]);
    free(srv->loops);
    ratelimit_free(srv->limiter);
    for (int b = 0; b < IPCOUNT_BUCKETS; b++)
        while (srv->ip[b]) {
            struct ipcount *c = srv->ip[b];
            srv->ip[b] = c->next;
            free(c);
        }
    pthread_mutex_destroy(&srv->ip_mu);
    free(srv);
}
