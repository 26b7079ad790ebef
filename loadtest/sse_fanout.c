/*
 * sse_fanout — the load generator of loadtest/events.sh: opens N subscribers of one SKU's status
 * event stream (GET /api/v1/skus/{sku}/events) on one inventoryd, waits until each has its first
 * event, reads the server's RSS (/proc/PID/status) before and after, then makes K changes (one
 * order of one unit each, at a random phase of the refresh) and measures, for every subscriber
 * and change, the delay from sending the order to receiving the subscriber's next status event.
 * Prints one JSON object: the delays' p50, p99 and max, subscribers that missed a change, the
 * RSS per subscriber, and the server's CPU time per change (/proc/PID/stat, over the changes).
 *
 *   sse_fanout PORT SKU N K SERVER_PID [REFRESH_MS]
 *
 * One thread, epoll, non-blocking sockets; at most 256 connects in flight (the listen backlog).
 * Each connection's chunked body is decoded as it comes, and a status event is counted at each
 * "event: status" line.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct conn {
    int fd;
    int head_done;   /* the response head was read */
    long chunk_left; /* bytes left in the current chunk; -1: reading a size line */
    char line[32];   /* a size line (or the head's last bytes) being read */
    int linelen;
    char tail[16]; /* the last bytes of decoded text (a marker split across reads) */
    int taillen;
    long events;       /* status events received */
    double last_event; /* when the last one came (ms) */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const char MARK[] = "event: status";

/* Decoded body bytes: counts the markers in them (with the tail of the previous bytes). */
static void on_text(struct conn *c, const char *p, size_t n, double t)
{
    char buf[65536 + 16];
    size_t len = 0;
    memcpy(buf, c->tail, (size_t)c->taillen);
    len = (size_t)c->taillen;
    while (n > 0) {
        size_t take = n > 65536 ? 65536 : n;
        memcpy(buf + len, p, take);
        len += take;
        p += take;
        n -= take;
        for (char *q = buf; (q = memmem(q, len - (size_t)(q - buf), MARK, sizeof(MARK) - 1));
             q += sizeof(MARK) - 1) {
            c->events++;
            c->last_event = t;
        }
        size_t keep = len < sizeof(MARK) - 2 ? len : sizeof(MARK) - 2;
        memmove(buf, buf + len - keep, keep);
        len = keep;
    }
    memcpy(c->tail, buf, len);
    c->taillen = (int)len;
}

/* Raw bytes of the connection: the head skipped, the chunked body decoded. */
static void on_bytes(struct conn *c, const char *p, size_t n, double t)
{
    while (n > 0) {
        if (!c->head_done) {
            /* the head ends at "\r\n\r\n": keep the last 3 bytes seen */
            for (; n > 0; p++, n--) {
                c->line[c->linelen++ % 4] = *p;
                if (c->linelen >= 4) {
                    int i = c->linelen;
                    if (c->line[(i - 4) % 4] == '\r' && c->line[(i - 3) % 4] == '\n' &&
                        c->line[(i - 2) % 4] == '\r' && c->line[(i - 1) % 4] == '\n') {
                        c->head_done = 1;
                        c->chunk_left = -1;
                        c->linelen = 0;
                        p++;
                        n--;
                        break;
                    }
                }
            }
            continue;
        }
        if (c->chunk_left < 0) { /* a size line "<hex>\r\n" (after a chunk's "\r\n") */
            char ch = *p++;
            n--;
            if (ch == '\n') {
                c->line[c->linelen < 31 ? c->linelen : 31] = '\0';
                if (c->linelen > 0 && c->line[0] != '\r') {
                    c->chunk_left = strtol(c->line, NULL, 16);
                    if (c->chunk_left == 0)
                        c->chunk_left = -1; /* the end: nothing more comes */
                }
                c->linelen = 0;
            } else if (c->linelen < 31) {
                c->line[c->linelen++] = ch;
            }
            continue;
        }
        size_t take = (size_t)c->chunk_left < n ? (size_t)c->chunk_left : n;
        on_text(c, p, take, t);
        p += take;
        n -= take;
        c->chunk_left -= (long)take;
        if (c->chunk_left == 0)
            c->chunk_left = -1; /* its "\r\n", then the next size line */
    }
}

/* utime + stime of pid, in ms (/proc/PID/stat). */
static double cpu_ms(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p)
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static long rss_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

/* One order of one unit (blocking, its own connection). 1 on 201. */
static int order(int port, const char *sku)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return 0;
    }
    char body[160], req[512];
    int bl = snprintf(body, sizeof(body), "{\"sku\":\"%s\",\"quantity\":1}", sku);
    int rl = snprintf(req, sizeof(req),
                      "POST /api/v1/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
                      bl, body);
    int ok = write(fd, req, (size_t)rl) == rl;
    char buf[512];
    ssize_t n = ok ? read(fd, buf, sizeof(buf) - 1) : -1;
    close(fd);
    return n > 12 && strncmp(buf + 9, "201", 3) == 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: sse_fanout PORT SKU N K SERVER_PID [REFRESH_MS]\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[3]), k = atoi(argv[4]), pid = atoi(argv[5]);
    const char *sku = argv[2];
    int refresh = argc > 6 ? atoi(argv[6]) : 250;
    struct conn *cs = calloc((size_t)n, sizeof(*cs));
    int ep = epoll_create1(0);
    char req[256];
    int rl = snprintf(req, sizeof(req),
                      "GET /api/v1/skus/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Accept: text/event-stream\r\n\r\n",
                      sku);
    long rss0 = rss_kib(pid);
    struct epoll_event evs[1024];
    char buf[65536];
    int opened = 0, ready = 0, failed = 0;
    double t_open = now_ms();
    /* open: at most 256 waiting for their first event at once */
    while (ready + failed < n) {
        while (opened < n && opened - ready - failed < 256) {
            struct conn *c = &cs[opened];
            c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            if (c->fd < 0) {
                perror("socket (raise ulimit -n)");
                return 3;
            }
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            connect(c->fd, (struct sockaddr *)&sa, sizeof(sa));
            struct epoll_event e = {.events = EPOLLOUT | EPOLLIN, .data.u32 = (uint32_t)opened};
            epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
            opened++;
        }
        int m = epoll_wait(ep, evs, 1024, 1000);
        double t = now_ms();
        for (int i = 0; i < m; i++) {
            struct conn *c = &cs[evs[i].data.u32];
            if (evs[i].events & EPOLLOUT) {
                if (write(c->fd, req, (size_t)rl) != rl) {
                    failed++;
                    close(c->fd);
                    c->fd = -1;
                    continue;
                }
                struct epoll_event e = {.events = EPOLLIN, .data.u32 = evs[i].data.u32};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                ssize_t r = read(c->fd, buf, sizeof(buf));
                if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
                    failed++;
                    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    c->fd = -1;
                    continue;
                }
                long before = c->events;
                if (r > 0)
                    on_bytes(c, buf, (size_t)r, t);
                if (before == 0 && c->events > 0)
                    ready++;
            }
        }
        if (t - t_open > 120000) {
            fprintf(stderr, "sse_fanout: %d of %d ready after 120 s\n", ready, n);
            break;
        }
    }
    double open_s = (now_ms() - t_open) / 1e3;
    usleep(500 * 1000);
    long rss1 = rss_kib(pid);
    fprintf(stderr, "sse_fanout: %d subscribers ready in %.1f s (%d failed); RSS %ld -> %ld KiB\n",
            ready, open_s, failed, rss0, rss1);
    /* the changes */
    double *delays = calloc((size_t)n * (size_t)k + 1, sizeof(double));
    long nd = 0, missed = 0;
    double cpu0 = cpu_ms(pid);
    srand((unsigned)getpid());
    for (int j = 0; j < k; j++) {
        /* a random phase of the refresh, and time for the previous change to settle */
        usleep((useconds_t)(300 + rand() % (refresh + 1)) * 1000);
        long *seen = malloc(sizeof(long) * (size_t)n);
        for (int i = 0; i < n; i++)
            seen[i] = cs[i].events;
        double t0 = now_ms();
        if (!order(port, sku)) {
            fprintf(stderr, "sse_fanout: an order was not placed\n");
            return 3;
        }
        int got = 0;
        char *done = calloc((size_t)n, 1);
        for (int i = 0; i < n; i++)
            if (cs[i].fd < 0) {
                done[i] = 1;
                got++;
            }
        while (got < n && now_ms() - t0 < 5000) {
            int m = epoll_wait(ep, evs, 1024, 100);
            double t = now_ms();
            for (int i = 0; i < m; i++) {
                struct conn *c = &cs[evs[i].data.u32];
                ssize_t r;
                while ((r = read(c->fd, buf, sizeof(buf))) > 0)
                    on_bytes(c, buf, (size_t)r, t);
                int x = (int)evs[i].data.u32;
                if (!done[x] && c->events > seen[x]) {
                    done[x] = 1;
                    got++;
                    delays[nd++] = c->last_event - t0;
                }
            }
        }
        missed += n - got;
        free(done);
        free(seen);
    }
    double cpu_changes = cpu_ms(pid) - cpu0;
    qsort(delays, (size_t)nd, sizeof(double), cmp_double);
    double p50 = nd ? delays[nd / 2] : -1, p99 = nd ? delays[(long)((double)nd * 0.99)] : -1,
           mx = nd ? delays[nd - 1] : -1;
    printf("{\"subscribers\":%d,\"ready\":%d,\"failed\":%d,\"open_s\":%.1f,\"changes\":%d,"
           "\"samples\":%ld,\"missed\":%ld,\"delay_ms\":{\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},"
           "\"rss_kib\":{\"before\":%ld,\"after\":%ld,\"per_subscriber\":%.2f},"
           "\"server_cpu_ms_per_change\":%.1f}\n",
           n, ready, failed, open_s, k, nd, missed, p50, p99, mx, rss0, rss1,
           ready > 0 ? (double)(rss1 - rss0) / ready : -1.0, k > 0 ? cpu_changes / k : -1.0);
    for (int i = 0; i < n; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    free(cs);
    free(delays);
    return missed == 0 && failed == 0 ? 0 : 1;
}
