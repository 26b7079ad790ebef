/*
 * qclient: the waiting room's buyers for loadtest/queue.sh (issue 32, SPEC §16), one thread,
 * epoll, HTTP/1.1 keep-alive connections to one or more ports (connection i uses port i mod
 * the count), each request carrying its user in a header (the trusted proxy's user header:
 * inventoryd --user-header, --trusted-proxies 127.0.0.1/32). wrk cannot say which request an
 * answer belongs to; these checks need each join's send and answer times and its place, so the
 * client is ours. Times are CLOCK_REALTIME in ns: comparable with Redis's TIME on this host.
 *
 *   join   users <prefix><from> .. <prefix><from+count-1>, each POSTed once to .../queue; a
 *          connection error or a 5xx (an instance killed: nginx answers 502) is sent again for
 *          the same user (the second join of a placed user answers its place, 200). One line per
 *          user: user first_send_ns answer_ns status position attempts. The first send is kept:
 *          a place given by a join whose answer was lost was given after it.
 *   buy    the users of --users FILE, in its order (the place order), --conns at a time: each is
 *          polled (GET .../queue) every --poll-ms until its state is final; admitted: one order
 *          (POST /api/v1/orders {"sku","quantity":1,"ticket"}) with its ticket, sent again
 *          after a 5xx. One line per user: user state order_status answer_ns error retries
 *          last-retry-status-and-error polls order-sent-ns. --stop-on-sold-out: the first poll
 *          answering sold_out stops the run (every later place is sold out too).
 *   watch  the users of --users FILE polled round robin until each answered sold_out or
 *          --deadline-s passed. One line per user: user first_sold_out_ns last_other_send_ns
 *          polls last_state.
 *
 * Usage: qclient MODE --port P[,P...] --sku S --out FILE [--header NAME] [--conns N]
 *        [--prefix P --from A --count N] [--users FILE] [--poll-ms M] [--deadline-s D]
 *        [--stop-on-sold-out]
 * Exit 0 when every user was done, 1 when the deadline came first, 2 usage, 3 infrastructure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum qc_mode { QC_JOIN, QC_BUY, QC_WATCH };
enum qc_phase { QC_IDLE, QC_SENT, QC_SLEEP };
enum qc_what { QC_W_JOIN, QC_W_POLL, QC_W_ORDER };

#define QC_BUF 16384
#define QC_TICKET 512

struct qc_user {
    char name[64];
    long long first_send, answer, sold_ns, other_ns;
    int status, attempts, polls, order_status;
    long long position;
    char state[24], error[40], retry_why[48];
    int done;
};

struct qc_conn {
    int fd, port, phase;
    enum qc_what what;
    long long user; /* index into users, -1 none */
    long long wake, sent_at;
    size_t len;
    char buf[QC_BUF];
    char ticket[QC_TICKET];
};

static enum qc_mode mode;
static int *ports, nports, nconns = 64, poll_ms = 100, stop_on_sold_out, deadline_s = 600;
static const char *sku, *header = "X-User-Id", *out_path, *prefix = "u", *users_path;
static long long from, count;
static struct qc_user *users;
static long long nusers, next_user, users_done;
static int epfd, stopped;

static long long qc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void qc_die(const char *what)
{
    perror(what);
    exit(3);
}

/* A connection to its port, non-blocking, in epoll: 0, or -1 (refused: an instance down). */
static int qc_connect(struct qc_conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        qc_die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        qc_die("epoll_ctl");
    c->len = 0;
    return 0;
}

static void qc_close(struct qc_conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
}

/* The next user this connection takes, or -1 when none is left. Watch mode cycles. */
static long long qc_take(void)
{
    if (mode == QC_WATCH) {
        for (long long k = 0; k < nusers; k++) {
            long long u = next_user++ % nusers;
            if (!users[u].done)
                return u;
        }
        return -1;
    }
    if (stopped || next_user >= nusers)
        return -1;
    return next_user++;
}

/* Sends the connection's request (what, for its user); reconnects first when needed. A
 * connection that cannot connect sleeps 50 ms and tries again. */
static void qc_send(struct qc_conn *c)
{
    struct qc_user *u = &users[c->user];
    if (c->fd < 0 && qc_connect(c) != 0) {
        c->phase = QC_SLEEP;
        c->wake = qc_now() + 50000000LL;
        return;
    }
    char req[2048];
    int n;
    if (c->what == QC_W_ORDER) {
        char body[QC_TICKET + 200];
        int bl = snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1,\"ticket\":\"%s\"}",
                          sku, c->ticket);
        n = snprintf(req, sizeof req,
                     "POST /api/v1/orders HTTP/1.1\r\nHost: qclient\r\n%s: %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                     header, u->name, bl, body);
    } else {
        n = snprintf(req, sizeof req,
                     "%s /api/v1/skus/%s/queue HTTP/1.1\r\nHost: qclient\r\n%s: %s\r\n"
                     "Content-Length: 0\r\n\r\n",
                     c->what == QC_W_JOIN ? "POST" : "GET", sku, header, u->name);
    }
    c->sent_at = qc_now();
    if (c->what == QC_W_ORDER && u->first_send == 0)
        u->first_send = c->sent_at;
    if (c->what == QC_W_JOIN && u->first_send == 0)
        u->first_send = c->sent_at;
    if (c->what == QC_W_JOIN)
        u->attempts++;
    if (send(c->fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        qc_close(c); /* the peer is gone: the same request again on a new connection */
        c->phase = QC_SLEEP;
        c->wake = qc_now() + 50000000LL;
        return;
    }
    c->phase = QC_SENT;
    c->len = 0;
}

/* Gives the connection its next user and request, or leaves it idle. */
static void qc_next(struct qc_conn *c)
{
    c->user = qc_take();
    if (c->user < 0) {
        c->phase = QC_IDLE;
        return;
    }
    c->what = mode == QC_JOIN ? QC_W_JOIN : QC_W_POLL;
    qc_send(c);
}

/* The JSON string value of "key" in body into out (cap), or "" when absent. */
static void qc_jstr(const char *body, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    out[0] = 0;
    const char *p = strstr(body, pat);
    if (!p)
        return;
    p += strlen(pat);
    size_t i = 0;
    while (p[i] && p[i] != '"' && i + 1 < cap) {
        out[i] = p[i];
        i++;
    }
    out[i] = 0;
}

static long long qc_jint(const char *body, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(body, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static void qc_user_done(struct qc_user *u)
{
    if (!u->done) {
        u->done = 1;
        users_done++;
    }
}

/* One whole answer (status, body) on connection c. */
static void qc_answer(struct qc_conn *c, int status, const char *body)
{
    struct qc_user *u = &users[c->user];
    long long now = qc_now();
    if (status >= 500 || status == 0) { /* an instance gone (nginx 502) or overloaded: again */
        if (c->what == QC_W_JOIN || mode != QC_WATCH) {
            if (c->what == QC_W_ORDER) { /* said in the buy file: retried, and why */
                u->attempts++;
                snprintf(u->retry_why, sizeof u->retry_why, "%d_", status);
                qc_jstr(body, "error", u->retry_why + strlen(u->retry_why),
                        sizeof u->retry_why - strlen(u->retry_why));
            }
            c->phase = QC_SLEEP;
            c->wake = now + 50000000LL;
            return;
        }
    }
    switch (c->what) {
    case QC_W_JOIN:
        u->answer = now;
        u->status = status;
        u->position = qc_jint(body, "position");
        qc_user_done(u);
        qc_next(c);
        return;
    case QC_W_ORDER:
        u->order_status = status;
        u->answer = now;
        qc_jstr(body, "error", u->error, sizeof u->error);
        qc_user_done(u);
        qc_next(c);
        return;
    case QC_W_POLL: break;
    }
    u->polls++;
    if (status != 200)
        snprintf(u->state, sizeof u->state, "http%d", status);
    else
        qc_jstr(body, "state", u->state, sizeof u->state);
    if (mode == QC_WATCH) {
        if (strcmp(u->state, "sold_out") == 0) {
            if (!u->sold_ns)
                u->sold_ns = now;
            qc_user_done(u);
        } else {
            u->other_ns = c->sent_at;
        }
        c->phase = QC_SLEEP;
        c->wake = now + (long long)poll_ms * 1000000LL / (nusers > nconns ? nusers / nconns : 1);
        if (c->wake > now + (long long)poll_ms * 1000000LL)
            c->wake = now + (long long)poll_ms * 1000000LL;
        return;
    }
    /* buy */
    if (strcmp(u->state, "admitted") == 0) {
        qc_jstr(body, "ticket", c->ticket, sizeof c->ticket);
        c->what = QC_W_ORDER;
        qc_send(c);
        return;
    }
    if (strcmp(u->state, "waiting") == 0 || strcmp(u->state, "paused") == 0 ||
        strcmp(u->state, "waiting_for_start") == 0 || strncmp(u->state, "http5", 5) == 0) {
        c->phase = QC_SLEEP;
        c->wake = now + (long long)poll_ms * 1000000LL;
        return;
    }
    /* sold_out, used, expired, or a refusal: final */
    u->answer = now;
    qc_user_done(u);
    if (stop_on_sold_out && strcmp(u->state, "sold_out") == 0)
        stopped = 1;
    qc_next(c);
}

/* Reads what came; answers every complete response (one at a time: no pipelining). */
static void qc_read(struct qc_conn *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->len, QC_BUF - 1 - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            if (c->len >= QC_BUF - 1)
                break;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        /* EOF or error: the request is answered "0" (sent again) on a new connection */
        qc_close(c);
        if (c->phase == QC_SENT)
            qc_answer(c, 0, "");
        return;
    }
    c->buf[c->len] = 0;
    char *end = strstr(c->buf, "\r\n\r\n");
    if (!end)
        return;
    int status = 0;
    sscanf(c->buf, "HTTP/1.%*d %d", &status);
    long long clen = 0;
    for (char *h = strstr(c->buf, "\r\n"); h && h < end; h = strstr(h + 2, "\r\n"))
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0)
            clen = strtoll(h + 17, NULL, 10);
    if (clen < 0 || (size_t)(end + 4 - c->buf) + (size_t)clen >= QC_BUF) {
        qc_close(c); /* not an answer of the waiting room's size: dropped, sent again */
        if (c->phase == QC_SENT)
            qc_answer(c, 0, "");
        return;
    }
    size_t whole = (size_t)(end + 4 - c->buf) + (size_t)clen;
    if (c->len < whole)
        return;
    char *cl = strcasestr(c->buf, "\r\nConnection: close");
    int closing = cl && cl < end;
    char body[QC_BUF];
    memcpy(body, end + 4, (size_t)clen);
    body[clen] = 0;
    c->len = 0;
    if (closing)
        qc_close(c);
    if (c->phase == QC_SENT)
        qc_answer(c, status, body);
}

static int qc_load_users(void)
{
    if (mode == QC_JOIN) {
        nusers = count;
        users = calloc((size_t)nusers, sizeof *users);
        for (long long i = 0; i < nusers; i++)
            snprintf(users[i].name, sizeof users[i].name, "%s%lld", prefix, from + i);
        return 0;
    }
    FILE *f = fopen(users_path, "r");
    if (!f)
        return -1;
    long long cap = 1024;
    users = calloc((size_t)cap, sizeof *users);
    char line[128];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n")] = 0;
        if (!line[0])
            continue;
        if (nusers == cap) {
            cap *= 2;
            users = realloc(users, (size_t)cap * sizeof *users);
            memset(users + nusers, 0, (size_t)(cap - nusers) * sizeof *users);
        }
        snprintf(users[nusers++].name, sizeof users[0].name, "%.63s", line);
    }
    fclose(f);
    return 0;
}

static void qc_usage(void)
{
    fprintf(stderr, "usage: qclient join|buy|watch --port P[,P...] --sku S --out FILE [--header "
                    "NAME] [--conns N] [--prefix P --from A --count N] [--users FILE] "
                    "[--poll-ms M] [--deadline-s D] [--stop-on-sold-out]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        qc_usage();
    if (strcmp(argv[1], "join") == 0)
        mode = QC_JOIN;
    else if (strcmp(argv[1], "buy") == 0)
        mode = QC_BUY;
    else if (strcmp(argv[1], "watch") == 0)
        mode = QC_WATCH;
    else
        qc_usage();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--stop-on-sold-out") == 0) {
            stop_on_sold_out = 1;
            continue;
        }
        if (!v)
            qc_usage();
        i++;
        if (strcmp(a, "--port") == 0) {
            ports = calloc(16, sizeof *ports);
            for (char *s = strdup(v), *t = strtok(s, ","); t && nports < 16; t = strtok(NULL, ","))
                ports[nports++] = atoi(t);
        } else if (strcmp(a, "--sku") == 0)
            sku = v;
        else if (strcmp(a, "--out") == 0)
            out_path = v;
        else if (strcmp(a, "--header") == 0)
            header = v;
        else if (strcmp(a, "--conns") == 0)
            nconns = atoi(v);
        else if (strcmp(a, "--prefix") == 0)
            prefix = v;
        else if (strcmp(a, "--from") == 0)
            from = atoll(v);
        else if (strcmp(a, "--count") == 0)
            count = atoll(v);
        else if (strcmp(a, "--users") == 0)
            users_path = v;
        else if (strcmp(a, "--poll-ms") == 0)
            poll_ms = atoi(v);
        else if (strcmp(a, "--deadline-s") == 0)
            deadline_s = atoi(v);
        else
            qc_usage();
    }
    if (!nports || !sku || !out_path || nconns < 1 || (mode == QC_JOIN && count < 1) ||
        (mode != QC_JOIN && !users_path))
        qc_usage();
    if (qc_load_users() != 0)
        qc_die(users_path);
    if (nusers == 0)
        return 0;
    epfd = epoll_create1(0);
    if (epfd < 0)
        qc_die("epoll_create1");
    if (nconns > nusers)
        nconns = (int)nusers;
    struct qc_conn *conns = calloc((size_t)nconns, sizeof *conns);
    for (int i = 0; i < nconns; i++) {
        conns[i].fd = -1;
        conns[i].port = ports[i % nports];
        conns[i].user = -1;
        qc_next(&conns[i]);
    }
    long long end = qc_now() + (long long)deadline_s * 1000000000LL;
    struct epoll_event evs[256];
    while (users_done < nusers && qc_now() < end) {
        int busy = 0;
        long long now = qc_now(), wait = 50;
        for (int i = 0; i < nconns; i++) {
            struct qc_conn *c = &conns[i];
            if (c->phase == QC_SLEEP) {
                if (c->wake <= now) {
                    if (mode == QC_WATCH && c->user >= 0 && c->what == QC_W_POLL)
                        qc_next(c); /* the next user of the round */
                    else
                        qc_send(c);
                } else if ((c->wake - now) / 1000000 < wait)
                    wait = (c->wake - now) / 1000000;
            }
            if (c->phase != QC_IDLE)
                busy = 1;
        }
        if (!busy)
            break;
        int n = epoll_wait(epfd, evs, 256, (int)wait);
        for (int k = 0; k < n; k++)
            qc_read(evs[k].data.ptr);
    }
    FILE *f = fopen(out_path, "w");
    if (!f)
        qc_die(out_path);
    for (long long i = 0; i < nusers; i++) {
        struct qc_user *u = &users[i];
        if (mode == QC_JOIN)
            fprintf(f, "%s\t%lld\t%lld\t%d\t%lld\t%d\n", u->name, u->first_send, u->answer,
                    u->status, u->position, u->attempts);
        else if (mode == QC_BUY)
            fprintf(f, "%s\t%s\t%d\t%lld\t%s\t%d\t%s\t%d\t%lld\n", u->name,
                    u->state[0] ? u->state : "-", u->order_status, u->answer,
                    u->error[0] ? u->error : "-", u->attempts, u->retry_why[0] ? u->retry_why : "-",
                    u->polls, u->first_send);
        else
            fprintf(f, "%s\t%lld\t%lld\t%d\t%s\n", u->name, u->sold_ns, u->other_ns, u->polls,
                    u->state[0] ? u->state : "-");
    }
    fclose(f);
    return users_done == nusers || stopped ? 0 : 1;
}
