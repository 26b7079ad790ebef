/*
 * bare_handler — the HTTP ceiling of the load test: a libmicrohttpd server that answers every
 * request with a fixed, small JSON 201 (the size of a real order), with no parsing, no Redis and
 * no allocation per request beyond what MHD does itself. It uses the same threading flags as
 * inventoryd's service/src/http/http.c (internal polling thread pool over epoll, ITC, the same
 * connection limit and timeout), so "order path / bare handler" isolates the cost of the order
 * path. GET /healthz answers 200 so scripts can wait for readiness.
 *
 * Built by loadtest/CMakeLists.txt into bin/bare_handler.
 * Usage: bare_handler PORT [THREADS]   (binds 127.0.0.1; SIGTERM/SIGINT stop it)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

static char order_body[] = "{\"order_id\":\"0000000000000000-0-bare\",\"sku\":\"bare\","
                           "\"quantity\":1,\"segment\":0,\"user_id\":null,"
                           "\"created_at\":\"2026-01-01T00:00:00.000Z\",\"status\":\"created\"}";
static char ok_body[] = "{\"status\":\"ok\"}";

static struct MHD_Response *order_resp; /* built once, queued for every POST */
static struct MHD_Response *ok_resp;    /* built once, queued for every GET */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* MHD access handler: first call marks the request, upload calls discard the body, the final
 * call queues the prebuilt response. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    (void)cls;
    (void)url;
    (void)version;
    (void)upload_data;
    static int marker;
    if (*req_cls == NULL) {
        *req_cls = &marker;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
        return MHD_queue_response(conn, MHD_HTTP_CREATED, order_resp);
    return MHD_queue_response(conn, MHD_HTTP_OK, ok_resp);
}

static struct MHD_Response *fixed_json(char *body, size_t len, const char *location)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (location)
        MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, location);
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [THREADS]\n", argv[0]);
        return 2;
    }
    long port = strtol(argv[1], NULL, 10);
    long threads = argc > 2 ? strtol(argv[2], NULL, 10) : 2;
    if (port < 1 || port > 65535 || threads < 1 || threads > 1024) {
        fprintf(stderr, "bare_handler: bad port or thread count\n");
        return 2;
    }

    order_resp =
        fixed_json(order_body, sizeof(order_body) - 1, "/api/v1/orders/0000000000000000-0-bare");
    ok_resp = fixed_json(ok_body, sizeof(ok_body) - 1, NULL);
    if (!order_resp || !ok_resp)
        return 1;

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    /* The same flags and options as service/src/http/http.c (IPv4 bind, epoll when available). */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
        flags |= MHD_USE_EPOLL;
    else if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
        flags |= MHD_USE_POLL;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)threads,
        MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "bare_handler: cannot listen on 127.0.0.1:%ld\n", port);
        return 1;
    }

    struct sigaction act;
    memset(&act, 0, sizeof(act));
    act.sa_handler = on_signal;
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);
    while (!stop_requested)
        sleep(1); /* a signal interrupts it; at worst the stop is seen a second late */

    MHD_stop_daemon(d);
    MHD_destroy_response(order_resp);
    MHD_destroy_response(ok_resp);
    return 0;
}
