/*
 * delayproxy — a TCP proxy that adds a fixed one-way delay, for the fault tests: it sits between
 * inventoryd and Redis and puts D ms of latency on each direction, so every Redis round trip
 * gains 2·D, the way `tc qdisc ... netem delay` would on a machine that has netem.
 *
 * Every chunk read from either side is queued with a due time (read time + D, CLOCK_MONOTONIC)
 * and written to the other side once due. Bytes keep their order per direction and any number
 * of chunks may be in flight, so throughput is not limited to one chunk per delay. A direction
 * with more than 4 MiB queued stops reading its source until it drains. An EOF travels like
 * data (D ms later, after everything read before it): the client's EOF becomes a
 * shutdown(SHUT_WR) towards the upstream; the upstream's EOF closes both sockets, so a Redis
 * restart behind the proxy looks like a dropped connection to the client. An error or a reset
 * on either side closes both at once. One thread, level-triggered epoll; the epoll_wait
 * timeout comes from the earliest due chunk (rounded up to the next millisecond).
 *
 * Usage: delayproxy [--delay-ms D] [--listen-host HOST] LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
 * LISTEN_PORT 0 binds a free port. Ready once it prints
 * "delayproxy: listening on HOST:PORT -> UHOST:UPORT delay D ms" on stderr; SIGTERM or SIGINT
 * stops it (exit 0); bad arguments exit 2, a listener or resolver failure exits 1.
 * Built by loadtest/CMakeLists.txt into bin/delayproxy.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS 1000000ull
#define MAX_QUEUED ((size_t)4 << 20) /* per direction; above it its source is not read */
#define CONNECT_TIMEOUT_NS (2000 * NS_PER_MS)
#define ACCEPT_PAUSE_NS (100 * NS_PER_MS) /* after EMFILE and the like */
#define MAX_EVENTS 256

/* An intrusive circular doubly-linked list; a node linked to itself is in no list. */
struct link {
    struct link *prev, *next;
};
#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static void link_init(struct link *l)
{
    l->prev = l->next = l;
}

static bool link_empty(const struct link *l)
{
    return l->next == l;
}

static void link_append(struct link *head, struct link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

static void link_remove(struct link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    link_init(l);
}

enum { CLIENT = 0, UPSTREAM = 1 };

struct pair;

/* Bytes read from one side, to be written to the other once due. len 0 is the EOF. */
struct chunk {
    struct link in_dir;   /* its direction's queue, in read order */
    struct link in_timer; /* the global timer queue until due, then self-linked */
    struct pair *pair;
    int side;     /* the side it was read from */
    uint64_t due; /* CLOCK_MONOTONIC, ns */
    size_t len, off;
    unsigned char data[];
};

/* One direction of a pair: what was read from fd[s], to be written to fd[1 - s]. */
struct dir {
    struct link chunks;
    size_t queued; /* bytes in chunks */
    bool eof_read;
    bool blocked; /* the last write would block: wait for EPOLLOUT */
};

/* What an epoll registration points at: one socket of a pair. */
struct end {
    struct pair *pair;
    int side;
    uint32_t mask; /* events registered */
    bool registered;
};

struct pair {
    int fd[2];
    struct dir dir[2]; /* dir[s] is read from fd[s] */
    struct end end[2];
    bool connecting, closed, shut_wr[2];
    uint64_t connect_deadline;
    struct link in_list;       /* the live pairs; once closed, the dead ones (freed per batch) */
    struct link in_connecting; /* connects in progress, in deadline order */
};

static int epfd = -1, listen_fd = -1;
static uint64_t delay_ns;
static struct sockaddr_storage up_addr;
static socklen_t up_addrlen;
static const char *up_host, *up_port;
/* The delay is constant and the clock monotonic, so appending keeps timers in due order, and
 * connects likewise in deadline order. */
static struct link timers, connecting, live, dead;
static struct end listen_end, signal_end; /* identity only */
static bool accept_paused;
static uint64_t accept_resume;
static unsigned long accepted;
static unsigned char read_buf[65536];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 * NS_PER_MS + (uint64_t)ts.tv_nsec;
}

static void set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Closes both sockets (which drops their epoll registrations) and frees the queued chunks;
 * the pair itself moves to the dead list, freed after the current event batch, since later
 * events of the batch may still point at it. */
static void close_pair(struct pair *p)
{
    if (p->closed)
        return;
    p->closed = true;
    for (int s = 0; s < 2; s++) {
        close(p->fd[s]);
        while (!link_empty(&p->dir[s].chunks)) {
            struct chunk *c = CONTAINER_OF(p->dir[s].chunks.next, struct chunk, in_dir);
            link_remove(&c->in_dir);
            link_remove(&c->in_timer);
            free(c);
        }
    }
    link_remove(&p->in_connecting);
    link_remove(&p->in_list);
    link_append(&dead, &p->in_list);
}

/* Registers for fd[s] the events its state needs: EPOLLIN while its direction may read,
 * EPOLLOUT while the other direction waits to write to it (or the connect is in progress). A
 * socket that has been read to EOF and shut for writing has nothing left to report but
 * EPOLLHUP, forever: it leaves the epoll set. */
static void update_events(struct pair *p, int s)
{
    struct end *e = &p->end[s];
    const struct dir *in = &p->dir[s];
    if (p->closed)
        return;
    if (in->eof_read && p->shut_wr[s]) {
        if (e->registered)
            epoll_ctl(epfd, EPOLL_CTL_DEL, p->fd[s], NULL);
        e->registered = false;
        return;
    }
    bool connect_wait = s == UPSTREAM && p->connecting;
    uint32_t mask = 0;
    if (!in->eof_read && in->queued < MAX_QUEUED && !connect_wait)
        mask |= EPOLLIN;
    if (p->dir[1 - s].blocked || connect_wait)
        mask |= EPOLLOUT;
    if (e->registered && mask == e->mask)
        return;
    struct epoll_event ev = {.events = mask, .data.ptr = e};
    if (epoll_ctl(epfd, e->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, p->fd[s], &ev) < 0) {
        fprintf(stderr, "delayproxy: epoll_ctl: %s\n", strerror(errno));
        close_pair(p);
        return;
    }
    e->mask = mask;
    e->registered = true;
}

/* Writes the due chunks of dir[s] to the other side, in order, until a write would block. */
static void flush(struct pair *p, int s)
{
    struct dir *d = &p->dir[s];
    int out = 1 - s;
    d->blocked = false;
    while (!link_empty(&d->chunks)) {
        struct chunk *c = CONTAINER_OF(d->chunks.next, struct chunk, in_dir);
        if (!link_empty(&c->in_timer) || (out == UPSTREAM && p->connecting))
            break;
        if (c->len == 0 && s == UPSTREAM) {
            close_pair(p); /* Redis went away: so does the client's connection */
            return;
        }
        if (c->len == 0) {
            shutdown(p->fd[UPSTREAM], SHUT_WR);
            p->shut_wr[UPSTREAM] = true;
        } else {
            ssize_t n = send(p->fd[out], c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                d->blocked = true;
                break;
            }
            if (n < 0) {
                close_pair(p);
                return;
            }
            c->off += (size_t)n;
            if (c->off < c->len)
                continue;
        }
        d->queued -= c->len;
        link_remove(&c->in_dir);
        free(c);
    }
    update_events(p, s); /* reading may resume below MAX_QUEUED */
    update_events(p, out);
}

/* One read from fd[s], queued with its due time; a read of 0 queues the EOF. On EPOLLHUP the
 * peer has finished sending, so what is left in the socket is bounded by its receive buffer
 * and is read even above MAX_QUEUED (not reading would leave EPOLLHUP firing). */
static void on_readable(struct pair *p, int s, bool hup)
{
    struct dir *d = &p->dir[s];
    if (d->eof_read || (!hup && d->queued >= MAX_QUEUED))
        return;
    ssize_t n = recv(p->fd[s], read_buf, sizeof(read_buf), 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            close_pair(p); /* ECONNRESET and the like */
        return;
    }
    struct chunk *c = malloc(sizeof(*c) + (size_t)n);
    if (!c) {
        fprintf(stderr, "delayproxy: out of memory, dropping a connection\n");
        close_pair(p);
        return;
    }
    c->pair = p;
    c->side = s;
    c->due = now_ns() + delay_ns;
    c->len = (size_t)n;
    c->off = 0;
    memcpy(c->data, read_buf, c->len);
    link_append(&d->chunks, &c->in_dir);
    link_append(&timers, &c->in_timer);
    d->queued += c->len;
    d->eof_read = n == 0;
    update_events(p, s);
}

/* The upstream connect finished, one way or the other. */
static void finish_connect(struct pair *p)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(p->fd[UPSTREAM], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err != 0) {
        fprintf(stderr, "delayproxy: connect to %s:%s: %s\n", up_host, up_port, strerror(err));
        close_pair(p);
        return;
    }
    p->connecting = false;
    link_remove(&p->in_connecting);
    set_nodelay(p->fd[UPSTREAM]);
    flush(p, CLIENT); /* what the client sent meanwhile, if due; registers both ends */
}

static void on_event(struct pair *p, int s, uint32_t ev)
{
    if (p->closed)
        return;
    if (s == UPSTREAM && p->connecting) {
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            finish_connect(p);
        return;
    }
    if (ev & EPOLLERR) {
        close_pair(p);
        return;
    }
    if (ev & (EPOLLIN | EPOLLHUP))
        on_readable(p, s, (ev & EPOLLHUP) != 0);
    if (!p->closed && (ev & EPOLLOUT))
        flush(p, 1 - s);
}

/* A new client: a pair with a non-blocking connect to the upstream. */
static void start_pair(int cfd)
{
    int ufd = socket(up_addr.ss_family, SOCK_STREAM, 0);
    struct pair *p = ufd >= 0 ? calloc(1, sizeof(*p)) : NULL;
    if (!p) {
        fprintf(stderr, "delayproxy: new connection: %s\n", strerror(errno));
        close(cfd);
        if (ufd >= 0)
            close(ufd);
        return;
    }
    set_nonblock(cfd);
    set_nonblock(ufd);
    set_nodelay(cfd);
    p->fd[CLIENT] = cfd;
    p->fd[UPSTREAM] = ufd;
    for (int s = 0; s < 2; s++) {
        link_init(&p->dir[s].chunks);
        p->end[s].pair = p;
        p->end[s].side = s;
    }
    link_init(&p->in_connecting);
    link_append(&live, &p->in_list);
    if (connect(ufd, (struct sockaddr *)&up_addr, up_addrlen) == 0) {
        set_nodelay(ufd);
    } else if (errno == EINPROGRESS) {
        p->connecting = true;
        p->connect_deadline = now_ns() + CONNECT_TIMEOUT_NS;
        link_append(&connecting, &p->in_connecting);
    } else {
        fprintf(stderr, "delayproxy: connect to %s:%s: %s\n", up_host, up_port, strerror(errno));
        close_pair(p);
        return;
    }
    update_events(p, CLIENT);
    update_events(p, UPSTREAM);
}

static void set_listening(bool on)
{
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = &listen_end};
    epoll_ctl(epfd, EPOLL_CTL_MOD, listen_fd, &ev);
}

static void accept_all(void)
{
    for (;;) {
        int cfd = accept(listen_fd, NULL, NULL);
        if (cfd >= 0) {
            accepted++;
            start_pair(cfd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        /* EMFILE, ENOBUFS...: the pending connection stays readable, so pause, not spin. */
        fprintf(stderr, "delayproxy: accept: %s (pausing accepts for 100 ms)\n", strerror(errno));
        accept_paused = true;
        accept_resume = now_ns() + ACCEPT_PAUSE_NS;
        set_listening(false);
        return;
    }
}

/* The epoll_wait timeout in ms (rounded up: never early) to the next timer, or -1. */
static int next_timeout(void)
{
    uint64_t next = UINT64_MAX;
    if (!link_empty(&timers))
        next = CONTAINER_OF(timers.next, struct chunk, in_timer)->due;
    if (!link_empty(&connecting)) {
        uint64_t t = CONTAINER_OF(connecting.next, struct pair, in_connecting)->connect_deadline;
        next = t < next ? t : next;
    }
    if (accept_paused && accept_resume < next)
        next = accept_resume;
    if (next == UINT64_MAX)
        return -1;
    uint64_t now = now_ns();
    if (next <= now)
        return 0;
    uint64_t ms = (next - now + NS_PER_MS - 1) / NS_PER_MS;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void run_timers(void)
{
    uint64_t now = now_ns();
    while (!link_empty(&timers)) {
        struct chunk *c = CONTAINER_OF(timers.next, struct chunk, in_timer);
        if (c->due > now)
            break;
        link_remove(&c->in_timer);
        if (!c->pair->dir[c->side].blocked) /* else EPOLLOUT will flush it */
            flush(c->pair, c->side);
    }
    while (!link_empty(&connecting)) {
        struct pair *p = CONTAINER_OF(connecting.next, struct pair, in_connecting);
        if (p->connect_deadline > now)
            break;
        fprintf(stderr, "delayproxy: connect to %s:%s: timed out\n", up_host, up_port);
        close_pair(p);
    }
    if (accept_paused && accept_resume <= now) {
        accept_paused = false;
        set_listening(true);
    }
}

static void reap(void)
{
    while (!link_empty(&dead)) {
        struct pair *p = CONTAINER_OF(dead.next, struct pair, in_list);
        link_remove(&p->in_list);
        free(p);
    }
}

static int bad_usage(const char *msg, const char *arg)
{
    fprintf(stderr, "delayproxy: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    fprintf(stderr, "usage: delayproxy [--delay-ms D] [--listen-host HOST] LISTEN_PORT "
                    "UPSTREAM_HOST UPSTREAM_PORT\n");
    return 2;
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* The listening socket on host:port (non-blocking), or -1 with the reason on stderr. */
static int open_listener(const char *host, const char *port, unsigned *bound_port)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "delayproxy: cannot resolve %s: %s\n", host, gai_strerror(rc));
        return -1;
    }
    int one = 1, fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) {
        fprintf(stderr, "delayproxy: cannot listen on %s:%s: %s\n", host, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    set_nonblock(fd);
    *bound_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

int main(int argc, char **argv)
{
    long delay_ms = 0, port;
    const char *listen_host = "127.0.0.1", *pos[3];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--delay-ms") == 0 || strcmp(a, "--listen-host") == 0) {
            if (i + 1 >= argc)
                return bad_usage("missing value for", a);
            const char *v = argv[++i];
            if (a[2] == 'l')
                listen_host = v;
            else if (!parse_long(v, 0, 3600000, &delay_ms))
                return bad_usage("--delay-ms wants 0..3600000", v);
        } else if (a[0] == '-' && a[1] != '\0') {
            return bad_usage("unknown option", a);
        } else if (npos == 3) {
            return bad_usage("too many arguments", a);
        } else {
            pos[npos++] = a;
        }
    }
    if (npos < 3)
        return bad_usage("LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT are required", NULL);
    if (!parse_long(pos[0], 0, 65535, &port))
        return bad_usage("bad LISTEN_PORT", pos[0]);
    if (!parse_long(pos[2], 1, 65535, &port))
        return bad_usage("bad UPSTREAM_PORT", pos[2]);
    up_host = pos[1];
    up_port = pos[2];
    delay_ns = (uint64_t)delay_ms * NS_PER_MS;

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(up_host, up_port, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "delayproxy: cannot resolve %s: %s\n", up_host, gai_strerror(rc));
        return 1;
    }
    memcpy(&up_addr, ai->ai_addr, ai->ai_addrlen);
    up_addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);

    /* Two descriptors per connection: take all the soft limit may have. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGPIPE, &ign, NULL);
    /* SIGTERM/SIGINT arrive through a signalfd, so a stop is never lost between checks. An
     * ignored signal never reaches it, and `cmd &` in a script starts with SIGINT ignored. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);
    int sig_fd = signalfd(-1, &stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sig_fd < 0 || epfd < 0) {
        fprintf(stderr, "delayproxy: signalfd/epoll_create1: %s\n", strerror(errno));
        return 1;
    }
    unsigned bound_port;
    listen_fd = open_listener(listen_host, pos[0], &bound_port);
    if (listen_fd < 0)
        return 1;
    link_init(&timers);
    link_init(&connecting);
    link_init(&live);
    link_init(&dead);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_end};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &signal_end};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &lev) < 0 ||
        epoll_ctl(epfd, EPOLL_CTL_ADD, sig_fd, &sev) < 0) {
        fprintf(stderr, "delayproxy: epoll_ctl: %s\n", strerror(errno));
        return 1;
    }
    fprintf(stderr, "delayproxy: listening on %s:%u -> %s:%s delay %ld ms\n", listen_host,
            bound_port, up_host, up_port, delay_ms);

    int status = 0;
    bool stop = false;
    struct epoll_event evs[MAX_EVENTS];
    while (!stop) {
        int n = epoll_wait(epfd, evs, MAX_EVENTS, next_timeout());
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "delayproxy: epoll_wait: %s\n", strerror(errno));
            status = 1;
            break;
        }
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e == &signal_end)
                stop = true;
            else if (e == &listen_end)
                accept_all();
            else
                on_event(e->pair, e->side, evs[i].events);
        }
        run_timers();
        reap();
    }

    while (!link_empty(&live))
        close_pair(CONTAINER_OF(live.next, struct pair, in_list));
    reap();
    close(listen_fd);
    close(sig_fd);
    close(epfd);
    fprintf(stderr, "delayproxy: stopped after %lu connections\n", accepted);
    return status;
}
