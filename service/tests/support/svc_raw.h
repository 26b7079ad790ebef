/*
 * Raw HTTP for the hostile-input and abuse-limit tests (prefix sr_): requests written byte for
 * byte on a socket (NUL bytes, broken framing, half requests, a chosen source address), and a
 * tolerant reader of one response into an sf_resp, so svc_test.h's assertions apply.
 *
 * Thread-safe (no shared state). Failures to allocate abort.
 */
#ifndef SVC_TESTS_SVC_RAW_H
#define SVC_TESTS_SVC_RAW_H

#include <stddef.h>
#include <sys/types.h>

#include "svc_fixture.h"

/* A growable byte buffer, always NUL-terminated; {0} is empty, free(p) releases it. */
struct sr_buf {
    char *p;
    size_t len, cap;
};

/* Appends n bytes to b. */
void sr_put(struct sr_buf *b, const void *data, size_t n);

/* A blocking TCP connection to 127.0.0.1:port (TCP_NODELAY), from source_ip when it is not
 * NULL (any 127.x.y.z works on Linux: a second "client address" on one machine). Returns the
 * socket, or -1 with errno set. */
int sr_connect(int port, const char *source_ip);

/* Sends all of data[0..len); stops quietly when the peer closed (it may have answered). */
void sr_send(int fd, const void *data, size_t len);

/* recv with a deadline (tu_now_ms() milliseconds). >0 bytes, 0 end of stream, -1 error or
 * timeout (errno ETIMEDOUT). */
ssize_t sr_recv(int fd, void *buf, size_t cap, long long deadline_ms);

/*
 * Reads one response from fd into *r (freed first): status, headers, the body (by
 * Content-Length, else up to the end of the stream; none for HEAD, 204, 304) and its JSON.
 * status is 0 with r->err set when no complete head came within timeout_ms. *closed is set
 * when the server closed the connection, during the response or within 1 s after it (that
 * check waits up to 1 s for the end of the stream; pass closed = NULL to skip it, e.g. on a
 * keep-alive connection).
 */
void sr_read_response(int fd, const char *method, int timeout_ms, sf_resp *r, int *closed);

/* One exchange on a new connection to port: sends data, half-closes when shut_wr, reads the
 * response (timeout_ms) with sr_read_response, closes. Returns r->status. */
int sr_exchange(int port, const void *data, size_t len, const char *method, int shut_wr,
                int timeout_ms, sf_resp *r, int *closed);

#endif /* SVC_TESTS_SVC_RAW_H */
