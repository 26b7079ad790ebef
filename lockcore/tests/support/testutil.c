/*
 * Small helpers shared by the lockcore and service tests (see testutil.h).
 */
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t tu_now_ms(void)
{
    return tu_now_us() / 1000;
}

int64_t tu_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void tu_sleep_ms(int ms)
{
    tu_sleep_us((long)ms * 1000);
}

void tu_sleep_us(long us)
{
    if (us <= 0)
        return;
    struct timespec req = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L};
    struct timespec rem;
    while (nanosleep(&req, &rem) == -1 && errno == EINTR)
        req = rem;
}

int tu_poll_until(int (*pred)(void *arg), void *arg, int timeout_ms, int step_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    if (step_ms <= 0)
        step_ms = 1;
    for (;;) {
        int v = pred(arg);
        if (v)
            return v;
        int64_t left = deadline - tu_now_ms();
        if (left <= 0)
            return pred(arg);
        tu_sleep_ms(left < step_ms ? (int)left : step_ms);
    }
}

char *tu_unique_name(char *buf, size_t size, const char *prefix)
{
    static atomic_uint counter;
    unsigned n = atomic_fetch_add(&counter, 1u);
    snprintf(buf, size, "%s:%ld:%u", prefix, (long)getpid(), n);
    return buf;
}

int tu_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    int saved = errno;
    close(fd);
    errno = saved;
    return port;
}
