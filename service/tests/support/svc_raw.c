/*
 * Raw HTTP exchanges for the tests; see svc_raw.h.
 */
#include "svc_raw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int sr_connect(int port, const char *source_ip)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa;
    if (source_ip != NULL) {
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        if (inet_pton(AF_INET, source_ip, &sa.sin_addr) != 1 ||
            bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

void sr_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, p + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

ssize_t sr_recv(int fd, void *buf, size_t cap, long long deadline_ms)
{
    for (;;) {
        long long left = deadline_ms - (long long)tu_now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = ETIMEDOUT;
        if (r <= 0)
            return -1;
        ssize_t n = recv(fd, buf, cap, 0);
        if (n < 0 && errno == EINTR)
            continue;
        return n;
    }
}

void sr_put(struct sr_buf *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL)
            abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static char *sr_dup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d == NULL)
        abort();
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void sr_read_response(int fd, const char *method, int timeout_ms, sf_resp *r, int *closed)
{
    sf_resp_free(r);
    struct sr_buf in = {0};
    long long deadline = (long long)tu_now_ms() + timeout_ms;
    char chunk[16384];
    size_t head = 0;
    int eof = 0, dummy;
    if (closed == NULL)
        closed = &dummy;
    *closed = 0;
    while (head == 0) {
        ssize_t n = sr_recv(fd, chunk, sizeof chunk, deadline);
        if (n <= 0) {
            snprintf(r->err, sizeof r->err, "%s after %zu bytes",
                     n == 0 ? "connection closed" : strerror(errno), in.len);
            *closed = n == 0 || errno == ECONNRESET;
            free(in.p);
            return;
        }
        sr_put(&in, chunk, (size_t)n);
        char *end = strstr(in.p, "\r\n\r\n");
        if (end != NULL)
            head = (size_t)(end - in.p) + 4;
    }
    if (strncmp(in.p, "HTTP/1.", 7) != 0 || head < 12) {
        snprintf(r->err, sizeof r->err, "bad status line");
        free(in.p);
        return;
    }
    r->status = atoi(in.p + 9);
    const char *p = strstr(in.p, "\r\n") + 2;
    while (p < in.p + head - 2 && r->nheaders < SF_MAX_HEADERS) {
        const char *eol = strstr(p, "\r\n");
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon != NULL) {
            const char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            r->name[r->nheaders] = sr_dup(p, (size_t)(colon - p));
            r->value[r->nheaders] = sr_dup(v, (size_t)(eol - v));
            r->nheaders++;
        }
        p = eol + 2;
    }
    const char *cl = sf_header(r, "Content-Length");
    size_t want = cl != NULL ? strtoul(cl, NULL, 10) : SIZE_MAX;
    if (strcmp(method, "HEAD") == 0 || r->status == 204 || r->status == 304)
        want = 0;
    while (in.len - head < want) {
        ssize_t n = sr_recv(fd, chunk, sizeof chunk, deadline);
        if (n <= 0) {
            eof = n == 0 || errno == ECONNRESET;
            break;
        }
        sr_put(&in, chunk, (size_t)n);
    }
    size_t blen = in.len - head < want ? in.len - head : want;
    r->body = sr_dup(in.p + head, blen);
    r->body_len = blen;
    r->json = json_loadb(r->body, blen, 0, NULL);
    if (eof) {
        *closed = 1;
    } else if (closed != &dummy) {
        /* Anything after the response means the connection lives on; EOF means closed. */
        ssize_t n = sr_recv(fd, chunk, sizeof chunk, (long long)tu_now_ms() + 1000);
        *closed = n == 0 || (n < 0 && errno == ECONNRESET);
    }
    free(in.p);
}

int sr_exchange(int port, const void *data, size_t len, const char *method, int shut_wr,
                int timeout_ms, sf_resp *r, int *closed)
{
    sf_resp_free(r);
    *closed = 0;
    int fd = sr_connect(port, NULL);
    if (fd < 0) {
        snprintf(r->err, sizeof r->err, "connect to port %d: %s", port, strerror(errno));
        return 0;
    }
    sr_send(fd, data, len);
    if (shut_wr)
        shutdown(fd, SHUT_WR);
    sr_read_response(fd, method, timeout_ms, r, closed);
    close(fd);
    return r->status;
}
