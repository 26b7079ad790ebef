/*
 * healthcheck — a one-shot HTTP/1.0 GET /healthz over a plain socket; see healthcheck.h.
 */
#include "healthcheck.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int healthcheck_run(const struct config *cfg, int timeout_ms)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;
    socklen_t slen;
    if (inet_pton(AF_INET, cfg->bind, &in4->sin_addr) == 1) {
        if (in4->sin_addr.s_addr == htonl(INADDR_ANY))
            in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)cfg->port);
        slen = sizeof(*in4);
    } else if (inet_pton(AF_INET6, cfg->bind, &in6->sin6_addr) == 1) {
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            in6->sin6_addr = in6addr_loopback;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)cfg->port);
        slen = sizeof(*in6);
    } else {
        fprintf(stderr, "healthcheck: bind address %s is not an IP literal\n", cfg->bind);
        return 1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "healthcheck: socket: %s\n", strerror(errno));
        return 1;
    }
    /* On Linux the send timeout also bounds connect. */
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&ss, slen) != 0) {
        fprintf(stderr, "healthcheck: connect to %s port %d: %s\n", cfg->bind, cfg->port,
                strerror(errno));
        close(fd);
        return 1;
    }
    static const char req[] = "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1)) {
        fprintf(stderr, "healthcheck: send: %s\n", strerror(errno));
        close(fd);
        return 1;
    }
    char buf[64];
    size_t n = 0;
    while (n < sizeof(buf) - 1) {
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    /* "HTTP/1.1 200 OK" */
    if (n >= 12 && strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 8, " 200", 4) == 0) {
        printf("healthy\n");
        return 0;
    }
    char *eol = strpbrk(buf, "\r\n");
    if (eol)
        *eol = '\0';
    fprintf(stderr, "healthcheck: GET /healthz answered \"%s\"\n", n ? buf : "(nothing)");
    return 1;
}
