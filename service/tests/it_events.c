/*
 * The status event stream, GET /api/v1/skus/{sku}/events (SPEC §15, docs/api.md "Status
 * events"), against real redis-server and inventoryd processes over sockets: the snapshot comes
 * at once (with retry:), each change comes within the refresh plus a margin (an order, a restock,
 * a PATCH of the window and the window closing), a reconnection with Last-Event-ID gets no
 * repeat but the next change, also from another instance (ids are equal for equal statuses),
 * heartbeats come, --max-subscribers answers 503 with Retry-After, a client that does not read
 * is dropped (and a reading one beside it is not), one that stops reading for a while and then
 * reads gets every event whole, an HTTP/1.0 stream is plain text, a DELETE ends the SKU's
 * streams, the Redis reads do not grow with the subscribers, SIGTERM ends open streams with exit
 * 0 (those behind and ending too, at once), and GET /api/v1/skus pages the registry.
 *
 * About 15 s (most of it waiting for heartbeats, drops, the window to close and the refresh
 * counts).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <strings.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "events.h"
#include "svc_raw.h"
#include "svc_test.h"

#define EV_REFRESH_MS 100
/* A change reaches a subscriber within the refresh, a tick (25 ms) and the read; the margin is
 * for a loaded 2-core machine under a sanitizer. */
#define EV_BOUND_MS (EV_REFRESH_MS + 25 + 1500)

static sf_service *a, *b;
static int pa, pb;

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--status-refresh-ms", "100", "--events-heartbeat-s",
                          "1",         NULL};
    if (!(a = sf_group_service(args)) || !(b = sf_group_service(args)))
        return -1;
    pa = sf_port(a);
    pb = sf_port(b);
    return 0;
}

/* ---- a small SSE client over a raw socket (chunked transfer decoded) ---- */

struct sse {
    int fd;
    int status;
    char head[4096];
    struct sr_buf raw;  /* bytes after the head, not yet de-chunked */
    struct sr_buf text; /* the de-chunked stream */
    size_t pos;         /* text consumed */
    int eof;
    int plain; /* an HTTP/1.0 stream: the body is not chunked */
};

struct sse_event {
    char id[64];
    char event[32];
    char *data; /* malloc'd, NULL for a comment or retry-only block */
    char comment[64];
    int retry;
};

static void sse_event_free(struct sse_event *e)
{
    free(e->data);
    memset(e, 0, sizeof(*e));
}

/* Moves whole chunks from raw to text (all of raw when the body is plain). */
static void dechunk(struct sse *s)
{
    if (s->plain) {
        sr_put(&s->text, s->raw.p, s->raw.len);
        s->raw.len = 0;
        return;
    }
    for (;;) {
        char *crlf = s->raw.len ? memmem(s->raw.p, s->raw.len, "\r\n", 2) : NULL;
        if (!crlf)
            return;
        size_t n = strtoul(s->raw.p, NULL, 16);
        size_t hl = (size_t)(crlf - s->raw.p) + 2;
        if (n == 0) {
            s->eof = 1; /* the last chunk: the stream ended cleanly */
            return;
        }
        if (s->raw.len < hl + n + 2)
            return;
        sr_put(&s->text, s->raw.p + hl, n);
        memmove(s->raw.p, s->raw.p + hl + n + 2, s->raw.len - hl - n - 2);
        s->raw.len -= hl + n + 2;
    }
}

/* Reads more of the stream (at most until deadline). 1 read, 0 timeout, -1 end of stream. */
static int sse_fill(struct sse *s, long long deadline)
{
    char buf[65536];
    ssize_t n = sr_recv(s->fd, buf, sizeof(buf), deadline);
    if (n > 0) {
        sr_put(&s->raw, buf, (size_t)n);
        dechunk(s);
        return 1;
    }
    if (n == 0 || (n < 0 && errno != ETIMEDOUT))
        s->eof = 1;
    return s->eof ? -1 : 0;
}

/* Opens GET /api/v1/skus/{sku}/events on port (Last-Event-ID last when not NULL) and reads the
 * head, as HTTP/1.1 (a chunked body) or, http10, HTTP/1.0 (a plain one). The socket's receive
 * buffer is rcvbuf bytes when > 0 (a client that reads slowly). Returns the status (0: no head in
 * 5 s). */
static int sse_open_as(struct sse *s, int port, const char *sku, const char *last, int rcvbuf,
                       int http10)
{
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return 0;
    }
    s->fd = fd;
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET /api/v1/skus/%s/events HTTP/1.%d\r\nHost: 127.0.0.1\r\n"
                     "Accept: text/event-stream\r\n%s%s%s\r\n",
                     sku, http10 ? 0 : 1, last ? "Last-Event-ID: " : "", last ? last : "",
                     last ? "\r\n" : "");
    sr_send(fd, req, (size_t)n);
    long long deadline = tu_now_ms() + 5000;
    struct sr_buf in = {0};
    char *end = NULL;
    while (!(end = in.len ? memmem(in.p, in.len, "\r\n\r\n", 4) : NULL)) {
        char buf[4096];
        ssize_t r = sr_recv(fd, buf, sizeof(buf), deadline);
        if (r <= 0) {
            free(in.p);
            return 0;
        }
        sr_put(&in, buf, (size_t)r);
    }
    size_t hl = (size_t)(end - in.p) + 4;
    snprintf(s->head, sizeof(s->head), "%.*s", (int)hl, in.p);
    sr_put(&s->raw, in.p + hl, in.len - hl);
    free(in.p);
    s->status = atoi(s->head + 9);
    s->plain = http10;
    dechunk(s);
    return s->status;
}

static int sse_open(struct sse *s, int port, const char *sku, const char *last, int rcvbuf)
{
    return sse_open_as(s, port, sku, last, rcvbuf, 0);
}

static void sse_close(struct sse *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->raw.p);
    free(s->text.p);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

/* The next block (event, comment or retry) within timeout_ms: 1, 0 timeout, -1 end. */
static int sse_next(struct sse *s, int timeout_ms, struct sse_event *e)
{
    memset(e, 0, sizeof(*e));
    long long deadline = tu_now_ms() + timeout_ms;
    for (;;) {
        char *start = s->text.p ? s->text.p + s->pos : NULL;
        char *blank = start ? memmem(start, s->text.len - s->pos, "\n\n", 2) : NULL;
        if (blank) {
            *blank = '\0';
            for (char *line = start; line && *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                    *nl = '\0';
                if (strncmp(line, "id: ", 4) == 0)
                    snprintf(e->id, sizeof(e->id), "%s", line + 4);
                else if (strncmp(line, "event: ", 7) == 0)
                    snprintf(e->event, sizeof(e->event), "%s", line + 7);
                else if (strncmp(line, "data: ", 6) == 0)
                    e->data = strdup(line + 6);
                else if (strncmp(line, "retry: ", 7) == 0)
                    e->retry = atoi(line + 7);
                else if (line[0] == ':')
                    snprintf(e->comment, sizeof(e->comment), "%s", line);
                line = nl ? nl + 1 : NULL;
            }
            s->pos = (size_t)(blank - s->text.p) + 2;
            return 1;
        }
        if (s->eof)
            return -1;
        long long left = deadline - tu_now_ms();
        if (left <= 0)
            return 0;
        if (sse_fill(s, deadline) < 0 &&
            !memmem(s->text.p + s->pos, s->text.len - s->pos, "\n\n", 2))
            return -1;
    }
}

/* The next status event within timeout_ms (comments and retry skipped): its data as JSON (a
 * new reference) and id, or NULL. */
static json_t *sse_status(struct sse *s, int timeout_ms, char *id, size_t idlen)
{
    long long deadline = tu_now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - tu_now_ms();
        struct sse_event e;
        if (left <= 0 || sse_next(s, (int)left, &e) <= 0)
            return NULL;
        if (e.data && strcmp(e.event, "status") == 0) {
            json_t *j = json_loads(e.data, 0, NULL);
            if (id)
                snprintf(id, idlen, "%s", e.id);
            sse_event_free(&e);
            return j;
        }
        sse_event_free(&e);
    }
}

/* The next status event whose "remaining" is want (earlier ones skipped), within timeout_ms. */
static int await_remaining(struct sse *s, long long want, int timeout_ms, char *id, size_t idlen)
{
    long long deadline = tu_now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - tu_now_ms();
        json_t *j = left > 0 ? sse_status(s, (int)left, id, idlen) : NULL;
        if (!j)
            return 0;
        long long got = sf_json_int(j, "remaining", -1);
        json_decref(j);
        if (got == want)
            return 1;
    }
}

static const char *head_value(const struct sse *s, const char *name, char *out, size_t outlen)
{
    out[0] = '\0';
    size_t n = strlen(name);
    for (const char *p = strstr(s->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
            const char *v = p + 3 + n;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            snprintf(out, outlen, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return out;
        }
    return NULL;
}

static void put_sku(int port, const char *sku, long long stock, int segments)
{
    sf_resp r = {0};
    sf_put_sku(port, NULL, sku, stock, segments, &r);
    SF_ASSERT(r.status == 201 || r.status == 200, "PUT %s: %s", sku, sf_resp_summary(&r));
    sf_resp_free(&r);
}

static void order_one(int port, const char *sku)
{
    sf_resp r = {0};
    sf_order(NULL, port, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_resp_free(&r);
}

/* ---- the tests ---- */

static void test_first_event_then_changes(void **state)
{
    (void)state;
    const char *sku = "ev-first";
    put_sku(pa, sku, 50, 4);
    struct sse s;
    long long t0 = tu_now_ms();
    SF_ASSERT(sse_open(&s, pa, sku, NULL, 0) == 200, "stream: %s", s.head);
    char v[128];
    SF_ASSERT(strcmp(head_value(&s, "Content-Type", v, sizeof(v)) ? v : "", "text/event-stream") ==
                  0,
              "Content-Type %s", v);
    SF_ASSERT(strcmp(head_value(&s, "Cache-Control", v, sizeof(v)) ? v : "", "no-cache") == 0,
              "Cache-Control %s", v);
    struct sse_event e;
    SF_ASSERT(sse_next(&s, 2000, &e) == 1 && e.retry > 0, "a retry: line first");
    sse_event_free(&e);
    char id[64];
    json_t *j = sse_status(&s, 2000, id, sizeof(id));
    SF_ASSERT(j, "the snapshot at once");
    SF_ASSERT(tu_now_ms() - t0 < 2000, "the first event took %lld ms", tu_now_ms() - t0);
    SF_ASSERT(sf_json_int(j, "remaining", -1) == 50, "remaining %lld",
              sf_json_int(j, "remaining", -1));
    SF_ASSERT(strlen(id) == 16 && strspn(id, "0123456789abcdef") == 16, "id %s", id);
    json_decref(j);

    /* an order */
    long long t = tu_now_ms();
    order_one(pa, sku);
    SF_ASSERT(await_remaining(&s, 49, EV_BOUND_MS, NULL, 0), "the order's change");
    long long took = tu_now_ms() - t;
    SF_ASSERT(took <= EV_BOUND_MS, "the change took %lld ms", took);
    /* a restock through the other instance */
    sf_resp r = {0};
    sf_restock(pb, NULL, sku, 10, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(await_remaining(&s, 59, EV_BOUND_MS, NULL, 0), "the restock's change");
    /* the window: a PATCH giving it an end 2 s ahead, then its closing */
    time_t end = time(NULL) + 2;
    struct tm tm;
    char at[64], body[128];
    strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&end, &tm));
    snprintf(body, sizeof(body), "{\"sale_end\":\"%s\"}", at);
    char path[128];
    snprintf(path, sizeof(path), "/api/v1/skus/%s", sku);
    sf_json_request(NULL, pa, "PATCH", path, NULL, NULL, body, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    j = sse_status(&s, EV_BOUND_MS, NULL, 0);
    SF_ASSERT(j && json_is_string(json_object_get(j, "sale_end")), "the PATCH's change");
    SF_ASSERT(strcmp(json_string_value(json_object_get(j, "sale")), "open") == 0, "sale %s",
              json_string_value(json_object_get(j, "sale")));
    json_decref(j);
    j = sse_status(&s, 3000 + EV_BOUND_MS, NULL, 0);
    SF_ASSERT(j && strcmp(json_string_value(json_object_get(j, "sale")), "ended") == 0,
              "the window closing as an event");
    SF_ASSERT(tu_now_ms() <= (long long)end * 1000 + EV_BOUND_MS, "the closing came late");
    json_decref(j);
    sse_close(&s);
}

/* A DELETE ends the SKU's streams; coming back gets the 404. */
static void test_delete_ends_stream(void **state)
{
    (void)state;
    const char *sku = "ev-deleted";
    put_sku(pa, sku, 5, 1);
    struct sse s;
    SF_ASSERT(sse_open(&s, pa, sku, NULL, 0) == 200, "stream");
    json_t *j = sse_status(&s, 3000, NULL, 0);
    SF_ASSERT(j, "first event");
    json_decref(j);
    sf_resp r = {0};
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/skus/%s", sku);
    sf_http(pb, "DELETE", path, NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 204);
    struct sse_event e;
    int rc;
    long long deadline = tu_now_ms() + EV_BOUND_MS;
    while ((rc = sse_next(&s, (int)(deadline - tu_now_ms()), &e)) == 1) {
        SF_ASSERT(!e.data, "no status event after the DELETE");
        sse_event_free(&e);
    }
    SF_ASSERT(rc == -1 && s.eof, "the stream did not end within %d ms", EV_BOUND_MS);
    sse_close(&s);
    snprintf(path, sizeof(path), "/api/v1/skus/%s/events", sku);
    sf_http(pa, "GET", path, NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_resp_free(&r);
}

static void test_errors(void **state)
{
    (void)state;
    sf_resp r = {0};
    sf_http(pa, "GET", "/api/v1/skus/ev-nobody/events", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 404, "unknown_sku");
    sf_http(pa, "GET", "/api/v1/skus/bad%20name/events", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    sf_http(pa, "POST", "/api/v1/skus/ev-first/events", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 405);
    sf_resp_free(&r);
}

/* Reconnecting with the last id seen: no repeat, then the next change; on either instance. */
static void reconnect_on(int port_first, int port_again, const char *sku)
{
    put_sku(pa, sku, 20, 2);
    struct sse s;
    SF_ASSERT(sse_open(&s, port_first, sku, NULL, 0) == 200, "stream");
    char id[64];
    json_t *j = sse_status(&s, 3000, id, sizeof(id));
    SF_ASSERT(j, "the first event");
    json_decref(j);
    sse_close(&s);
    SF_ASSERT(sse_open(&s, port_again, sku, id, 0) == 200, "the reconnection");
    j = sse_status(&s, 3 * EV_REFRESH_MS + 500, NULL, 0);
    SF_ASSERT(!j, "the snapshot the client had came again: %s", j ? "a status event" : "");
    order_one(port_first, sku);
    char id2[64];
    SF_ASSERT(await_remaining(&s, 19, EV_BOUND_MS, id2, sizeof(id2)), "the next change");
    SF_ASSERT(strcmp(id, id2) != 0, "a new id");
    sse_close(&s);
    /* an id that is not the current one: the current snapshot at once */
    SF_ASSERT(sse_open(&s, port_again, sku, id, 0) == 200, "the reconnection with an old id");
    SF_ASSERT(await_remaining(&s, 19, 2000, NULL, 0), "the current snapshot");
    sse_close(&s);
}

static void test_reconnect_with_last_event_id(void **state)
{
    (void)state;
    reconnect_on(pa, pa, "ev-again");
}

static void test_last_event_id_across_instances(void **state)
{
    (void)state;
    reconnect_on(pa, pb, "ev-across");
}

static void test_heartbeat(void **state)
{
    (void)state;
    const char *sku = "ev-hb";
    put_sku(pa, sku, 5, 1);
    struct sse s;
    SF_ASSERT(sse_open(&s, pa, sku, NULL, 0) == 200, "stream");
    long long deadline = tu_now_ms() + 4000; /* --events-heartbeat-s 1 */
    int seen = 0;
    while (!seen && tu_now_ms() < deadline) {
        struct sse_event e;
        if (sse_next(&s, (int)(deadline - tu_now_ms()), &e) != 1)
            break;
        seen = strcmp(e.comment, ": hb") == 0;
        sse_event_free(&e);
    }
    SF_ASSERT(seen, "no heartbeat within 4 s");
    sse_close(&s);
}

static void test_subscriber_bound(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--max-subscribers", "3", "--events-heartbeat-s",
                          "1",         NULL};
    sf_service *c = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(c, "instance");
    int pc = sf_port(c);
    put_sku(pc, "ev-bound", 5, 1);
    struct sse s[3];
    for (int i = 0; i < 3; i++) {
        SF_ASSERT(sse_open(&s[i], pc, "ev-bound", NULL, 0) == 200, "stream %d", i);
        json_t *j = sse_status(&s[i], 3000, NULL, 0);
        SF_ASSERT(j, "stream %d's first event", i);
        json_decref(j);
    }
    SF_ASSERT(sf_metric(pc, "inventory_status_subscribers") == 3, "gauge %g",
              sf_metric(pc, "inventory_status_subscribers"));
    sf_resp r = {0};
    sf_http(pc, "GET", "/api/v1/skus/ev-bound/events", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 503, "unavailable");
    SF_ASSERT(sf_header(&r, "Retry-After"), "Retry-After");
    /* one goes: its slot is free again (found at its next heartbeat at the latest) */
    sse_close(&s[0]);
    long long deadline = tu_now_ms() + 5000;
    while (sf_metric(pc, "inventory_status_subscribers") > 2 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT(sse_open(&s[0], pc, "ev-bound", NULL, 0) == 200, "a slot again");
    for (int i = 0; i < 3; i++)
        sse_close(&s[i]);
    sf_resp_free(&r);
    SF_ASSERT(sf_stop(c) == 0, "exit status");
}

static void test_slow_reader_dropped(void **state)
{
    (void)state;
    const char *sku = "ev-slow";
    put_sku(pa, sku, 100000, 256); /* large events: the buffers fill soon */
    double dropped0 = sf_metric(pa, "inventory_status_subscribers_dropped_total");
    struct sse slow, good;
    SF_ASSERT(sse_open(&slow, pa, sku, NULL, 2048) == 200, "slow stream");
    SF_ASSERT(sse_open(&good, pa, sku, NULL, 0) == 200, "reading stream");
    sf_conn *c = sf_conn_open(pa, 0);
    sf_resp r = {0};
    long long deadline = tu_now_ms() + 20000;
    long long orders = 0;
    while (sf_metric(pa, "inventory_status_subscribers_dropped_total") <= dropped0 &&
           tu_now_ms() < deadline) {
        for (int i = 0; i < 5; i++) {
            sf_order(c, pa, sku, 1, &r);
            SF_ASSERT_STATUS(&r, 201);
            orders++;
            tu_sleep_ms(EV_REFRESH_MS / 4);
        }
        /* the reading client keeps up */
        struct sse_event e;
        while (sse_next(&good, 1, &e) == 1)
            sse_event_free(&e);
    }
    SF_ASSERT(sf_metric(pa, "inventory_status_subscribers_dropped_total") == dropped0 + 1,
              "one subscriber dropped (%lld orders)", orders);
    /* the slow one's connection ends: reading now finds its end */
    int ended = 0;
    deadline = tu_now_ms() + 5000;
    while (!ended && tu_now_ms() < deadline) {
        char buf[65536];
        ssize_t n = sr_recv(slow.fd, buf, sizeof(buf), deadline);
        ended = n <= 0 && !(n < 0 && errno == ETIMEDOUT);
    }
    SF_ASSERT(ended, "the dropped connection was not closed");
    /* the reading one is still served: the next change (the remaining count from the exact
     * read: the plain GET is a snapshot up to a refresh old, which may miss the last orders) */
    char path[128];
    snprintf(path, sizeof path, "/api/v1/skus/%s?consistent=1", sku);
    SF_ASSERT(sf_http(pa, "GET", path, NULL, NULL, 0, &r) == 200, "exact read: %s",
              sf_resp_summary(&r));
    long long now_remaining = sf_json_int(r.json, "remaining", -1);
    sf_resp_free(&r);
    sf_order(c, pa, sku, 1, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(await_remaining(&good, now_remaining - 1, EV_BOUND_MS + 2000, NULL, 0),
              "the reading subscriber missed the change to %lld", now_remaining - 1);
    sf_resp_free(&r);
    sf_conn_close(c);
    sse_close(&slow);
    sse_close(&good);
}

/* A client that stops reading while changes come, then reads: the server's writes of its events
 * (straight to the socket once the stream is under way, events.c) found the socket full, one
 * stopped part-way and waited for room while the next ones queued; read now, every event comes
 * whole and in order (the chunked framing intact: dechunk would garble the text otherwise), the
 * last change included, and the client was not dropped (fewer than EVENTS_PENDING behind).
 * About 2 s. */
static void test_behind_then_caught_up(void **state)
{
    (void)state;
    const char *sku = "ev-behind";
    put_sku(pa, sku, 100000, 256); /* events of about 10 KB: a few fill the buffers */
    double dropped0 = sf_metric(pa, "inventory_status_subscribers_dropped_total");
    struct sse s;
    SF_ASSERT(sse_open(&s, pa, sku, NULL, 2048) == 200, "stream");
    json_t *j = sse_status(&s, 3000, NULL, 0);
    SF_ASSERT(j && sf_json_int(j, "remaining", -1) == 100000, "the first event");
    json_decref(j);
    size_t event_bytes = s.text.len;
    /* EVENTS_PENDING - 2 changes, a refresh apart (so most are events of their own), not read:
     * the event being written and the queue stay short of a drop */
    int changes = EVENTS_PENDING - 2;
    for (int i = 0; i < changes; i++) {
        order_one(pa, sku);
        tu_sleep_ms(EV_REFRESH_MS + 60);
    }
    tu_sleep_ms(EV_REFRESH_MS + 200); /* the last change is read and queued */
    long long last = 100000, want = 100000 - changes;
    int events = 0;
    while (last != want) {
        j = sse_status(&s, EV_BOUND_MS + 2000, NULL, 0);
        SF_ASSERT(j, "after %d events (remaining %lld), no more whole event (want %lld)", events,
                  last, want);
        long long got = sf_json_int(j, "remaining", -1);
        json_decref(j);
        SF_ASSERT(got < last && got >= want, "remaining %lld after %lld", got, last);
        last = got;
        events++;
    }
    fprintf(stderr, "%d events of about %zu bytes read after the pause\n", events, event_bytes);
    SF_ASSERT(events >= 2, "the changes came as %d event(s): nothing queued behind", events);
    SF_ASSERT(sf_metric(pa, "inventory_status_subscribers_dropped_total") == dropped0,
              "the client was dropped");
    /* and the stream goes on: the next change */
    order_one(pa, sku);
    SF_ASSERT(await_remaining(&s, want - 1, EV_BOUND_MS, NULL, 0), "the next change");
    sse_close(&s);
}

/* An HTTP/1.0 client: the body is not chunked (libmicrohttpd sends it as it comes and closes at
 * its end), so its events never take the chunked direct write: plain SSE text, the first event
 * and then a change. About 1 s. */
static void test_http10_stream(void **state)
{
    (void)state;
    const char *sku = "ev-http10";
    put_sku(pa, sku, 5, 1);
    struct sse s;
    SF_ASSERT(sse_open_as(&s, pa, sku, NULL, 0, 1) == 200, "stream: %s", s.head);
    SF_ASSERT(!strcasestr(s.head, "chunked"), "an HTTP/1.0 answer in chunks: %s", s.head);
    json_t *j = sse_status(&s, 3000, NULL, 0);
    SF_ASSERT(j && sf_json_int(j, "remaining", -1) == 5, "the first event");
    json_decref(j);
    order_one(pa, sku);
    SF_ASSERT(await_remaining(&s, 4, EV_BOUND_MS, NULL, 0), "the order's change");
    /* plain text: no chunk framing (a size line, CRLF) written into the body */
    SF_ASSERT(!memmem(s.text.p, s.text.len, "\r\n", 2), "chunk framing in a plain body: %.*s",
              (int)(s.text.len < 200 ? s.text.len : 200), s.text.p);
    sse_close(&s);
}

/* The refreshes an instance makes for a SKU do not grow with its subscribers. */
static void test_reads_independent_of_subscribers(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", "--status-refresh-ms", "100", NULL};
    sf_service *c = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(c, "instance");
    int pc = sf_port(c);
    put_sku(pc, "ev-reads", 5, 2);
    double per_s[2];
    int counts[2] = {1, 200};
    for (int k = 0; k < 2; k++) {
        struct sse *s = calloc((size_t)counts[k], sizeof(*s));
        for (int i = 0; i < counts[k]; i++)
            SF_ASSERT(sse_open(&s[i], pc, "ev-reads", NULL, 0) == 200, "stream %d", i);
        tu_sleep_ms(300);
        double r0 = sf_metric(pc, "inventory_status_refreshes_total");
        long long t0 = tu_now_ms();
        tu_sleep_ms(2000);
        double r1 = sf_metric(pc, "inventory_status_refreshes_total");
        long long ms = tu_now_ms() - t0;
        per_s[k] = (r1 - r0) * 1000.0 / (double)ms;
        /* at most one read per refresh (the window's edges may see one more), whatever the
         * number of subscribers */
        SF_ASSERT(r1 - r0 <= (double)ms / 100.0 + 1,
                  "%g refreshes in %lld ms with %d "
                  "subscriber(s)",
                  r1 - r0, ms, counts[k]);
        for (int i = 0; i < counts[k]; i++)
            sse_close(&s[i]);
        free(s);
    }
    fprintf(stderr, "refreshes/s: %.1f with 1 subscriber, %.1f with 200\n", per_s[0], per_s[1]);
    SF_ASSERT(per_s[1] >= 3, "the subscribed SKU is kept fresh: %.1f refreshes/s", per_s[1]);
    SF_ASSERT(sf_stop(c) == 0, "exit status");
}

static void test_sigterm_ends_streams(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "2", NULL};
    sf_service *c = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(c, "instance");
    int pc = sf_port(c);
    put_sku(pc, "ev-term", 5, 1);
    struct sse s;
    SF_ASSERT(sse_open(&s, pc, "ev-term", NULL, 0) == 200, "stream");
    json_t *j = sse_status(&s, 3000, NULL, 0);
    SF_ASSERT(j, "first event");
    json_decref(j);
    long long t = tu_now_ms();
    SF_ASSERT(sf_stop(c) == 0, "exit status");
    long long took = tu_now_ms() - t;
    struct sse_event e;
    int rc;
    while ((rc = sse_next(&s, 2000, &e)) == 1)
        sse_event_free(&e);
    SF_ASSERT(rc == -1, "the stream did not end");
    SF_ASSERT(s.eof, "end of stream");
    /* well inside the 5 s grace: an open stream does not hold the shutdown */
    SF_ASSERT(took < 3000, "the stop took %lld ms", took);
    sse_close(&s);
}

/* SIGTERM while streams are behind and ending: their clients stopped reading (the sockets full;
 * on the HTTP/1.1 stream an event half written straight to its socket and waiting for room, the
 * connection suspended meanwhile; on the HTTP/1.0 one, libmicrohttpd's write waiting), and
 * their SKU was deleted (each ends after the event it is writing, which cannot go out). The
 * instance still stops at once with exit 0: the shutdown cuts them too (an ending stream was
 * left alone and held the whole grace; libmicrohttpd aborts when its daemon is stopped with a
 * connection still suspended). About 2 s. */
static void test_sigterm_with_a_stream_behind(void **state)
{
    (void)state;
    const char *args[] = {"--threads", "1", "--status-refresh-ms", "100", NULL};
    sf_service *c = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(c, "instance");
    int pc = sf_port(c);
    const char *sku = "ev-term-behind";
    put_sku(pc, sku, 100000, 256); /* events of about 14 KB */
    struct sse s[2];
    for (int v = 0; v < 2; v++) {
        SF_ASSERT(sse_open_as(&s[v], pc, sku, NULL, 2048, v) == 200, "stream %d", v);
        json_t *j = sse_status(&s[v], 3000, NULL, 0);
        SF_ASSERT(j, "first event of %d", v);
        json_decref(j);
    }
    /* four changes, not read: more than the sockets' buffers hold, fewer than a drop */
    for (int i = 0; i < 4; i++) {
        order_one(pc, sku);
        tu_sleep_ms(EV_REFRESH_MS + 60);
    }
    sf_resp r = {0};
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/skus/%s", sku);
    sf_http(pc, "DELETE", path, NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 204);
    sf_resp_free(&r);
    tu_sleep_ms(EV_REFRESH_MS + 100); /* the DELETE reaches the stream */
    long long t = tu_now_ms();
    SF_ASSERT(sf_stop(c) == 0, "exit status");
    long long took = tu_now_ms() - t;
    SF_ASSERT(took < 3000, "the stop took %lld ms", took);
    sse_close(&s[0]);
    sse_close(&s[1]);
}

static void test_sku_list(void **state)
{
    (void)state;
    char name[32];
    for (int i = 0; i < 30; i++) {
        snprintf(name, sizeof(name), "ev-list-%02d", i);
        put_sku(pa, name, 1, 1);
    }
    sf_resp r = {0};
    sf_http(pb, "GET", "/api/v1/skus", NULL, NULL, 0, &r);
    SF_ASSERT_STATUS(&r, 200);
    json_t *skus = json_object_get(r.json, "skus");
    SF_ASSERT(json_is_array(skus), "skus");
    int found = 0;
    for (size_t i = 0; i < json_array_size(skus); i++)
        found += strncmp(json_string_value(json_array_get(skus, i)), "ev-list-", 8) == 0;
    SF_ASSERT(found == 30 || json_is_string(json_object_get(r.json, "next_cursor")),
              "%d of 30 in a first page without a next cursor", found);
    /* every page, following next_cursor, with a small limit */
    found = 0;
    char cursor[32] = "0";
    for (int pages = 0; pages < 200; pages++) {
        char path[96];
        snprintf(path, sizeof(path), "/api/v1/skus?limit=5&cursor=%s", cursor);
        sf_http(pb, "GET", path, NULL, NULL, 0, &r);
        SF_ASSERT_STATUS(&r, 200);
        skus = json_object_get(r.json, "skus");
        for (size_t i = 0; i < json_array_size(skus); i++)
            found += strncmp(json_string_value(json_array_get(skus, i)), "ev-list-", 8) == 0;
        const char *next = json_string_value(json_object_get(r.json, "next_cursor"));
        if (!next)
            break;
        snprintf(cursor, sizeof(cursor), "%s", next);
    }
    SF_ASSERT(found >= 30, "%d of the 30 names over the pages", found);
    sf_http(pb, "GET", "/api/v1/skus?cursor=x1", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    sf_http(pb, "GET", "/api/v1/skus?limit=0", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    sf_http(pb, "GET", "/api/v1/skus?limit=1001", NULL, NULL, 0, &r);
    SF_ASSERT_ERROR(&r, 400, "invalid_request");
    sf_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_event_then_changes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_delete_ends_stream),
        cmocka_unit_test(test_reconnect_with_last_event_id),
        cmocka_unit_test(test_last_event_id_across_instances),
        cmocka_unit_test(test_heartbeat),
        cmocka_unit_test(test_subscriber_bound),
        cmocka_unit_test(test_slow_reader_dropped),
        cmocka_unit_test(test_behind_then_caught_up),
        cmocka_unit_test(test_http10_stream),
        cmocka_unit_test(test_reads_independent_of_subscribers),
        cmocka_unit_test(test_sigterm_ends_streams),
        cmocka_unit_test(test_sigterm_with_a_stream_behind),
        cmocka_unit_test(test_sku_list),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
