/*
 * sse_fanout — the load generator of loadtest/events.sh: opens N subscribers of one SKU's status
 * event stream (GET /api/v1/skus/{sku}/events) on one inventoryd, waits until each has its first
 * event, reads the server's RSS (/proc/PID/status) before and after, then makes K changes (one
 * order of one unit each, at a random phase of the refresh) and measures, for every subscriber
 * and change, the delay from sending the order to receiving the subscriber's next status event.
 * Prints one JSON object: the delays' p50, p99 and max; per change, the first subscriber's delay
 * (the wait for the refresh and the read) and the spread to the last one (the fan-out), p50 and
 * max; subscribers that missed a change; the RSS per subscriber; the server's CPU time per change
 * (/proc/PID/stat, over the changes) and this client's own (it shares the cores); the load
 * average before and after the changes; then, the N still listening for 5 s with nothing
 * changing, the server's status reads per second (one per refresh at most, whatever N), its
 * subscriber gauge and dropped count (/metrics).
 *
 *   sse_fanout PORT SKU N K SERVER_PID [REFRESH_MS]
 *   sse_fanout --floor N K [WRITERS [BYTES]]   (the same fan-out without inventoryd: floor_main)
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
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
    int ended;         /* the server closed it after it was ready (each later change: missed) */
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

/* This process's own CPU time (user + system), in ms: the client shares the cores. */
static double self_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* The 1-minute load average (/proc/loadavg): how shared the machine was. */
static double loadavg1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1)
        l = -1;
    if (f)
        fclose(f);
    return l;
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

/* The value of the line "<name> <value>" of the server's GET /metrics, or -1. */
static double metric(int port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static const char req[] =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while (len < cap && (r = read(fd, buf + len, cap - len)) > 0)
        len += (size_t)r;
    close(fd);
    buf[len] = '\0';
    double v = -1;
    size_t nl = strlen(name);
    for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
            v = atof(p + nl + 1);
            break;
        }
    free(buf);
    return v;
}

/* The Redis status reads per second of the server while the n subscribers keep listening (and
 * are read) for hold_ms: *gauge, *dropped from its metrics at the end. */
static double reads_while_listening(int port, int ep, struct conn *cs, int hold_ms, double *gauge,
                                    double *dropped)
{
    double r0 = metric(port, "inventory_status_refreshes_total"), t0 = now_ms();
    struct epoll_event evs[1024];
    char buf[65536];
    while (now_ms() - t0 < hold_ms) {
        int m = epoll_wait(ep, evs, 1024, 100);
        for (int i = 0; i < m; i++) {
            struct conn *c = &cs[evs[i].data.u32];
            ssize_t r = read(c->fd, buf, sizeof(buf));
            if (r > 0)
                on_bytes(c, buf, (size_t)r, now_ms());
            else if (r == 0 || errno != EAGAIN) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = -1;
            }
        }
    }
    double r1 = metric(port, "inventory_status_refreshes_total"), t1 = now_ms();
    *gauge = metric(port, "inventory_status_subscribers");
    *dropped = metric(port, "inventory_status_subscribers_dropped_total");
    return r0 >= 0 && r1 >= 0 ? (r1 - r0) * 1e3 / (t1 - t0) : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- --floor: the fan-out's cost on this machine without inventoryd ---- */

struct floor_run {
    int n, k, writers;
    size_t bytes;
    int *srv; /* the writers' ends */
    pthread_barrier_t go, written;
    pthread_mutex_t mu;
    double writer_cpu_ms;
};

static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct floor_writer {
    struct floor_run *f;
    int from, to;
};

/* A writer (one of inventoryd's loops): per round, one send of the message to each of its
 * connections. */
static void *floor_write(void *arg)
{
    struct floor_writer *w = arg;
    struct floor_run *f = w->f;
    char *msg = malloc(f->bytes);
    memset(msg, 'x', f->bytes);
    double cpu = 0;
    for (int r = 0; r < f->k; r++) {
        pthread_barrier_wait(&f->go);
        double c0 = thread_cpu_ms();
        for (int i = w->from; i < w->to; i++)
            if (send(f->srv[i], msg, f->bytes, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)f->bytes)
                fprintf(stderr, "sse_fanout --floor: a short send\n");
        cpu += thread_cpu_ms() - c0;
        pthread_barrier_wait(&f->written);
    }
    pthread_mutex_lock(&f->mu);
    f->writer_cpu_ms += cpu;
    pthread_mutex_unlock(&f->mu);
    free(msg);
    return NULL;
}

/* The reader, a process of its own (the client): n connections to port, then per round every
 * message read (epoll, one read per readiness) and a byte to done; at the end its CPU time. */
static int floor_reader(struct floor_run *f, int port, int done)
{
    int ep = epoll_create1(0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < f->n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
            return 3;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        struct epoll_event e = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
    }
    struct epoll_event evs[1024];
    char buf[65536];
    long long got = 0;
    double c0 = self_cpu_ms();
    for (int r = 0; r < f->k; r++) {
        long long want = (long long)(r + 1) * f->n * (long long)f->bytes;
        while (got < want) {
            int m = epoll_wait(ep, evs, 1024, 5000);
            if (m <= 0)
                return 3;
            for (int i = 0; i < m; i++) {
                ssize_t n = read(evs[i].data.fd, buf, sizeof(buf));
                got += n > 0 ? n : 0;
            }
        }
        char c = 1;
        if (write(done, &c, 1) != 1)
            return 3;
    }
    double cpu = self_cpu_ms() - c0;
    return write(done, &cpu, sizeof(cpu)) == sizeof(cpu) ? 0 : 3;
}

/*
 * sse_fanout --floor N K [WRITERS [BYTES]]: the fan-out's cost on this machine without
 * inventoryd: N loopback TCP connections between this process and a child; K rounds (300 ms
 * apart), in each of which WRITERS threads (inventoryd's loops, default 2) send one BYTES message
 * (default 1,400, about a status event of loadtest/events.sh) to each of their share of the
 * connections while the child reads them all as the client above does. Prints the writers' and
 * the reader's CPU per message and the wall time of a round (from its start to the last message
 * read; p50, max). Each process needs N + a few descriptors.
 */
static int floor_main(int argc, char **argv)
{
    struct floor_run f = {.n = atoi(argv[2]), .k = atoi(argv[3])};
    f.writers = argc > 4 ? atoi(argv[4]) : 2;
    f.bytes = argc > 5 ? (size_t)atol(argv[5]) : 1400;
    if (f.n <= 0 || f.k <= 0 || f.writers <= 0 || f.bytes == 0 || f.bytes > 65536) {
        fprintf(stderr, "usage: sse_fanout --floor N K [WRITERS [BYTES]]\n");
        return 2;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0), pp[2];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(ls, 4096) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) != 0 || pipe(pp) != 0)
        return 3;
    pid_t child = fork();
    if (child == 0) {
        close(ls);
        close(pp[0]);
        _exit(floor_reader(&f, ntohs(sa.sin_port), pp[1]));
    }
    close(pp[1]);
    f.srv = calloc((size_t)f.n, sizeof(int));
    for (int i = 0; i < f.n; i++) {
        f.srv[i] = accept(ls, NULL, NULL);
        if (f.srv[i] < 0) {
            perror("sse_fanout --floor: accept (raise ulimit -n)");
            return 3;
        }
        int sz = 16384; /* inventoryd's SEND_BUFFER */
        setsockopt(f.srv[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    }
    close(ls);
    pthread_barrier_init(&f.go, NULL, (unsigned)f.writers + 1);
    pthread_barrier_init(&f.written, NULL, (unsigned)f.writers + 1);
    pthread_mutex_init(&f.mu, NULL);
    pthread_t *wt = calloc((size_t)f.writers, sizeof(pthread_t));
    struct floor_writer *ws = calloc((size_t)f.writers, sizeof(*ws));
    for (int i = 0; i < f.writers; i++) {
        ws[i] = (struct floor_writer){&f, f.n * i / f.writers, f.n * (i + 1) / f.writers};
        pthread_create(&wt[i], NULL, floor_write, &ws[i]);
    }
    double *wall = calloc((size_t)f.k, sizeof(double)), load0 = loadavg1(), rcpu = -1;
    int ok = 1;
    for (int r = 0; r < f.k; r++) {
        usleep(300 * 1000);
        double t0 = now_ms();
        pthread_barrier_wait(&f.go);
        pthread_barrier_wait(&f.written);
        char c;
        ok = ok && read(pp[0], &c, 1) == 1; /* the child read the round's last message */
        wall[r] = now_ms() - t0;
    }
    for (int i = 0; i < f.writers; i++)
        pthread_join(wt[i], NULL);
    ok = ok && read(pp[0], &rcpu, sizeof(rcpu)) == sizeof(rcpu);
    waitpid(child, NULL, 0);
    qsort(wall, (size_t)f.k, sizeof(double), cmp_double);
    double msgs = (double)f.n * f.k;
    printf("{\"floor\":{\"connections\":%d,\"rounds\":%d,\"writers\":%d,\"bytes\":%zu,"
           "\"writer_cpu_us_per_message\":%.2f,\"reader_cpu_us_per_message\":%.2f,"
           "\"round_ms\":{\"p50\":%.1f,\"max\":%.1f},\"loadavg\":[%.2f,%.2f]}}\n",
           f.n, f.k, f.writers, f.bytes, f.writer_cpu_ms * 1e3 / msgs, rcpu * 1e3 / msgs,
           wall[f.k / 2], wall[f.k - 1], load0, loadavg1());
    for (int i = 0; i < f.n; i++)
        close(f.srv[i]);
    free(f.srv);
    free(wt);
    free(ws);
    free(wall);
    return ok ? 0 : 3;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--floor") == 0)
        return floor_main(argc, argv);
    if (argc < 6) {
        fprintf(stderr, "usage: sse_fanout PORT SKU N K SERVER_PID [REFRESH_MS]\n"
                        "       sse_fanout --floor N K [WRITERS [BYTES]]\n");
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
    /* per change: the first subscriber's delay (the wait for the refresh, the read, the first
     * write) and the spread from the first to the last (the fan-out, with the client's reads) */
    double *firsts = calloc((size_t)k + 1, sizeof(double)),
           *spreads = calloc((size_t)k + 1, sizeof(double));
    int nk = 0;
    long nd = 0, missed = 0;
    double cpu0 = cpu_ms(pid), own0 = self_cpu_ms(), load0 = loadavg1();
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
        long nd0 = nd;
        char *done = calloc((size_t)n, 1);
        long gone = 0;
        for (int i = 0; i < n; i++)
            if (cs[i].fd < 0) {
                done[i] = 1;
                got++;
                gone += cs[i].ended;
            }
        while (got < n && now_ms() - t0 < 5000) {
            int m = epoll_wait(ep, evs, 1024, 100);
            double t = now_ms();
            for (int i = 0; i < m; i++) {
                struct conn *c = &cs[evs[i].data.u32];
                int x = (int)evs[i].data.u32;
                /* one read per readiness (an event is one chunk): a second read would only
                 * find EAGAIN, a system call per subscriber and change for nothing; what is
                 * left, epoll reports again */
                ssize_t r = read(c->fd, buf, sizeof(buf));
                if (r > 0) {
                    on_bytes(c, buf, (size_t)r, t);
                } else if (r == 0 || errno != EAGAIN) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    c->fd = -1;
                    c->ended = 1;
                    if (!done[x]) {
                        done[x] = 1;
                        got++;
                        gone++;
                    }
                    continue;
                }
                if (!done[x] && c->events > seen[x]) {
                    done[x] = 1;
                    got++;
                    delays[nd++] = c->last_event - t0;
                }
            }
        }
        missed += n - got + gone;
        if (nd > nd0) {
            double lo = delays[nd0], hi = delays[nd0];
            for (long i = nd0; i < nd; i++) {
                lo = delays[i] < lo ? delays[i] : lo;
                hi = delays[i] > hi ? delays[i] : hi;
            }
            firsts[nk] = lo;
            spreads[nk++] = hi - lo;
        }
        free(done);
        free(seen);
    }
    double cpu_changes = cpu_ms(pid) - cpu0, own_changes = self_cpu_ms() - own0;
    double load1 = loadavg1();
    /* the Redis reads while the N listen and nothing changes: one per refresh at most */
    double gauge, dropped;
    double reads = reads_while_listening(port, ep, cs, 5000, &gauge, &dropped);
    qsort(delays, (size_t)nd, sizeof(double), cmp_double);
    qsort(firsts, (size_t)nk, sizeof(double), cmp_double);
    qsort(spreads, (size_t)nk, sizeof(double), cmp_double);
    double p50 = nd ? delays[nd / 2] : -1, p99 = nd ? delays[(long)((double)nd * 0.99)] : -1,
           mx = nd ? delays[nd - 1] : -1;
    printf("{\"subscribers\":%d,\"ready\":%d,\"failed\":%d,\"open_s\":%.1f,\"changes\":%d,"
           "\"samples\":%ld,\"missed\":%ld,\"delay_ms\":{\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},"
           "\"first_ms\":{\"p50\":%.1f,\"max\":%.1f},\"spread_ms\":{\"p50\":%.1f,\"max\":%.1f},"
           "\"rss_kib\":{\"before\":%ld,\"after\":%ld,\"per_subscriber\":%.2f},"
           "\"server_cpu_ms_per_change\":%.1f,\"client_cpu_ms_per_change\":%.1f,"
           "\"loadavg\":[%.2f,%.2f],\"status_reads_per_s\":%.2f,\"subscribers_gauge\":%.0f,"
           "\"dropped\":%.0f}\n",
           n, ready, failed, open_s, k, nd, missed, p50, p99, mx, nk ? firsts[nk / 2] : -1.0,
           nk ? firsts[nk - 1] : -1.0, nk ? spreads[nk / 2] : -1.0, nk ? spreads[nk - 1] : -1.0,
           rss0, rss1, ready > 0 ? (double)(rss1 - rss0) / ready : -1.0,
           k > 0 ? cpu_changes / k : -1.0, k > 0 ? own_changes / k : -1.0, load0, load1, reads,
           gauge, dropped);
    for (int i = 0; i < n; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    free(cs);
    free(delays);
    free(firsts);
    free(spreads);
    return missed == 0 && failed == 0 ? 0 : 1;
}
