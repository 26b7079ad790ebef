/*
 * The in-process delaying proxy (see slowproxy.h): one thread polls the listener and every
 * connected socket, queues what it reads with a due time and writes it to the other side once
 * due.
 */
#include "slowproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

typedef struct sp_chunk {
    int64_t due_us;
    size_t len; /* 0: the EOF */
    struct sp_chunk *next;
    char data[];
} sp_chunk;

/* One direction of a connection: bytes read from fd[from], to be written to fd[1 - from]. */
typedef struct sp_dir {
    sp_chunk *head, *tail;
    int64_t last_due_us;
    int eof_read;
} sp_dir;

typedef struct sp_conn {
    int used;
    int fd[2]; /* 0: the client, 1: Redis */
    sp_dir dir[2];
} sp_conn;

struct sp_proxy {
    pthread_t thread;
    int listen_fd;
    int wake[2];
    int upstream_port;
    atomic_int delay_us;
    atomic_int stop;
    atomic_int accepted;
    atomic_int pending;
    char url[64];
    sp_conn conns[SP_MAX_CONNS];
};

static void sp_close_conn(sp_proxy *p, sp_conn *c)
{
    for (int s = 0; s < 2; s++) {
        close(c->fd[s]);
        for (sp_chunk *k = c->dir[s].head, *next; k; k = next) {
            next = k->next;
            free(k);
            atomic_fetch_sub(&p->pending, 1);
        }
    }
    memset(c, 0, sizeof *c);
}

static void sp_accept(sp_proxy *p)
{
    int cfd = accept(p->listen_fd, NULL, NULL);
    if (cfd < 0)
        return;
    atomic_fetch_add(&p->accepted, 1);
    int ufd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)p->upstream_port);
    sp_conn *c = NULL;
    for (int i = 0; i < SP_MAX_CONNS && !c; i++)
        if (!p->conns[i].used)
            c = &p->conns[i];
    if (ufd < 0 || !c || connect(ufd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(cfd);
        if (ufd >= 0)
            close(ufd);
        return;
    }
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    memset(c, 0, sizeof *c);
    c->used = 1;
    c->fd[0] = cfd;
    c->fd[1] = ufd;
}

/* Reads what fd[from] has and queues it (or its EOF). Returns -1 when the pair must close. */
static int sp_read(sp_proxy *p, sp_conn *c, int from)
{
    char buf[16384];
    ssize_t n = recv(c->fd[from], buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    sp_chunk *k = malloc(sizeof *k + (size_t)n);
    if (!k)
        return -1;
    sp_dir *d = &c->dir[from];
    int64_t due = tu_now_us() + atomic_load(&p->delay_us);
    if (due < d->last_due_us)
        due = d->last_due_us; /* never overtake bytes read earlier */
    d->last_due_us = due;
    k->due_us = due;
    k->len = (size_t)n;
    k->next = NULL;
    memcpy(k->data, buf, (size_t)n);
    if (d->tail)
        d->tail->next = k;
    else
        d->head = k;
    d->tail = k;
    d->eof_read = n == 0;
    atomic_fetch_add(&p->pending, 1);
    return 0;
}

/* Delivers the due chunks of one direction. Returns -1 when the pair must close. */
static int sp_deliver(sp_proxy *p, sp_conn *c, int from, int64_t now)
{
    sp_dir *d = &c->dir[from];
    while (d->head && d->head->due_us <= now) {
        sp_chunk *k = d->head;
        d->head = k->next;
        if (!d->head)
            d->tail = NULL;
        int to = 1 - from;
        int rc = 0;
        if (k->len == 0) {
            if (from == 0)
                shutdown(c->fd[to], SHUT_WR); /* client EOF: Redis closes its side next */
            else
                rc = -1; /* Redis closed: so does the client's connection */
        } else {
            for (size_t off = 0; off < k->len && rc == 0;) {
                ssize_t w = send(c->fd[to], k->data + off, k->len - off, MSG_NOSIGNAL);
                if (w < 0 && errno != EINTR)
                    rc = -1;
                else if (w > 0)
                    off += (size_t)w;
            }
        }
        free(k);
        atomic_fetch_sub(&p->pending, 1);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static void *sp_main(void *arg)
{
    sp_proxy *p = arg;
    struct pollfd pfd[2 + 2 * SP_MAX_CONNS];
    int owner[2 + 2 * SP_MAX_CONNS]; /* index into conns * 2 + side */
    while (!atomic_load(&p->stop)) {
        int64_t now = tu_now_us(), next = now + 200000;
        int n = 0;
        pfd[n++] = (struct pollfd){p->listen_fd, POLLIN, 0};
        pfd[n++] = (struct pollfd){p->wake[0], POLLIN, 0};
        for (int i = 0; i < SP_MAX_CONNS; i++) {
            sp_conn *c = &p->conns[i];
            if (!c->used)
                continue;
            for (int s = 0; s < 2; s++) {
                if (c->dir[s].head && c->dir[s].head->due_us < next)
                    next = c->dir[s].head->due_us;
                if (!c->dir[s].eof_read) {
                    owner[n] = i * 2 + s;
                    pfd[n++] = (struct pollfd){c->fd[s], POLLIN, 0};
                }
            }
        }
        int64_t wait_us = next - now;
        int timeout = wait_us <= 0 ? 0 : (int)((wait_us + 999) / 1000);
        if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN)
            sp_accept(p);
        if (pfd[1].revents & POLLIN) {
            char b[64];
            while (read(p->wake[0], b, sizeof b) > 0)
                ;
        }
        for (int j = 2; j < n; j++) {
            sp_conn *c = &p->conns[owner[j] / 2];
            if (c->used && (pfd[j].revents & (POLLIN | POLLHUP | POLLERR)) &&
                sp_read(p, c, owner[j] % 2) < 0)
                sp_close_conn(p, c);
        }
        now = tu_now_us();
        for (int i = 0; i < SP_MAX_CONNS; i++) {
            sp_conn *c = &p->conns[i];
            for (int s = 0; s < 2 && c->used; s++)
                if (sp_deliver(p, c, s, now) < 0)
                    sp_close_conn(p, c);
        }
    }
    for (int i = 0; i < SP_MAX_CONNS; i++)
        if (p->conns[i].used)
            sp_close_conn(p, &p->conns[i]);
    return NULL;
}

sp_proxy *sp_start(int upstream_port)
{
    sp_proxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->upstream_port = upstream_port;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(p->listen_fd, 64) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&sa, &len) != 0 || pipe(p->wake) != 0) {
        fprintf(stderr, "slowproxy: cannot listen: %s\n", strerror(errno));
        if (p->listen_fd >= 0)
            close(p->listen_fd);
        free(p);
        return NULL;
    }
    fcntl(p->listen_fd, F_SETFL, O_NONBLOCK);
    fcntl(p->wake[0], F_SETFL, O_NONBLOCK);
    snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", ntohs(sa.sin_port));
    if (pthread_create(&p->thread, NULL, sp_main, p) != 0) {
        fprintf(stderr, "slowproxy: cannot start its thread\n");
        close(p->listen_fd);
        close(p->wake[0]);
        close(p->wake[1]);
        free(p);
        return NULL;
    }
    return p;
}

void sp_stop(sp_proxy *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    ssize_t w = write(p->wake[1], "x", 1);
    (void)w;
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    free(p);
}

void sp_set_delay_ms(sp_proxy *p, int ms)
{
    atomic_store(&p->delay_us, ms * 1000);
}

const char *sp_url(const sp_proxy *p)
{
    return p->url;
}

int sp_accepted(sp_proxy *p)
{
    return atomic_load(&p->accepted);
}

int sp_pending(sp_proxy *p)
{
    return atomic_load(&p->pending);
}
