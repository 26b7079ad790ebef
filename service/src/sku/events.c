/*
 * The status event streams; see events.h. Per loop: a table of topics (one per SKU with
 * subscribers on the loop), each with its list of subscribers and the bytes of its last event
 * (struct frame, rendered once per change), an inbox of changes posted by the statsnap
 * listener, a tick timer and a heartbeat timer. Per subscriber: struct sub, freed by
 * libmicrohttpd's free callback of its response (when the connection is done with it).
 *
 * Two ways to a subscriber's socket: libmicrohttpd's, its content reader (sub_read) called
 * while the connection is in the daemon's loop (the head, "retry:", the first event; every
 * event of a stream that is not chunked: HTTP/1.0), and ours, for the rest of a chunked stream:
 * once the reader has suspended the connection, libmicrohttpd has sent everything it had and
 * leaves the socket alone, so a change is one send(2) of the frame's whole chunk per
 * subscriber, straight from the fan-out (sub_flush), with no resume, no reader call and no
 * suspend. A chunk the socket cannot take whole waits for room (an EV_WRITE event of its own),
 * and the connection stays suspended until it is written; only the stream's end goes back
 * through libmicrohttpd (resumed: the reader ends the body, or the connection closes).
 */
#include "events.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <microhttpd.h>

#include "areq.h"
#include "clock.h"
#include "exact.h"
#include "hash.h"
#include "log.h"
#include "statsnap.h"
#include "stock.h"
#include "store.h"
#include "validate.h"
#include "worker.h"

enum { TOPIC_BUCKETS = 256, SEND_BUFFER = 16384, BLOCK_SIZE = 256 };

static atomic_llong n_subscribers, n_sent, n_dropped, n_refused;

struct topic;
struct eloop;

/* What a subscriber is writing: an event (a frame), the retry line or a heartbeat. */
enum piece { PIECE_NONE, PIECE_RETRY, PIECE_HB, PIECE_FRAME };

/*
 * One event's bytes, rendered once per change on each loop and shared by the loop's
 * subscribers (loop-local, so a plain count): bytes[0..len) is the whole HTTP chunk
 * ("<hex>\r\n", the event, "\r\n"), what the direct write sends; the event alone,
 * bytes[hdr..len - 2), is what the reader gives libmicrohttpd, which frames it itself.
 */
struct frame {
    int refs;
    uint64_t id; /* the snapshot's id (snap_id64) */
    size_t len, hdr;
    char bytes[];
};

struct sub {
    struct eloop *lp;
    struct topic *t;
    struct MHD_Connection *conn;
    struct sub *prev, *next;            /* in t->subs */
    struct frame *ring[EVENTS_PENDING]; /* queued events, oldest at head */
    unsigned char head, count;
    unsigned char kind; /* enum piece being written */
    struct frame *cur;  /* PIECE_FRAME's frame (a reference) */
    size_t off;         /* bytes of the piece written */
    uint64_t last_id;   /* the id of the last event queued */
    struct event *room; /* a direct write waiting for room in the socket, else NULL */
    int fd;             /* the connection's socket */
    unsigned suspended : 1, retry : 1, hb : 1, closing : 1;
    unsigned chunked : 1; /* libmicrohttpd frames the body in chunks: direct writes allowed */
};

struct topic {
    char sku[VALIDATE_SKU_MAX + 1];
    struct snap *last;   /* the last snapshot handed to the topic (a reference), or NULL */
    struct frame *frame; /* last's bytes (a reference), or NULL */
    struct sub *subs;
    int n;
    struct topic *next;
};

/* A change posted to a loop (its inbox). */
struct change {
    char sku[VALIDATE_SKU_MAX + 1];
    struct snap *snap; /* a reference */
    struct change *next;
};

struct eloop {
    struct events *ev;
    int id;
    struct worker *w;
    void (*kick)(void *);
    void *kick_arg;
    int need_kick;
    struct topic *topics[TOPIC_BUCKETS];
    int nsubs;
    atomic_int listening;    /* nsubs > 0, for the listener on other loops */
    struct event *tick, *hb; /* armed while nsubs > 0 */
    int quiesced;
    pthread_mutex_t mu; /* the inbox */
    struct change *inbox, *inbox_tail;
    int posted; /* a drain is posted and has not run */
};

struct events {
    struct app *app;
    int nloops;
    struct eloop *loops;
    int tick_ms;
    char retry_line[32], retry_chunk[48];
    size_t retry_len, retry_chunk_len;
};

static const char HB_LINE[] = ": hb\n\n", HB_CHUNK[] = "6\r\n: hb\n\n\r\n";

/* ---- helpers ---- */

static uint64_t snap_id64(const struct snap *s)
{
    uint64_t v = 0;
    for (int i = 0; i < 16 && s->id[i]; i++) {
        char c = s->id[i];
        v = (v << 4) | (uint64_t)(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
    }
    return v;
}

/* The frame of snapshot s (one reference), or NULL out of memory. */
static struct frame *frame_new(const struct snap *s)
{
    /* "id: <id>\nevent: status\ndata: <body>\n\n" (the body is one line: compact JSON) */
    static const char a[] = "id: ", b[] = "\nevent: status\ndata: ", c[] = "\n\n";
    size_t lid = strlen(s->id);
    size_t evlen = sizeof(a) - 1 + lid + sizeof(b) - 1 + s->len + sizeof(c) - 1;
    char hex[24];
    int hl = snprintf(hex, sizeof(hex), "%zx\r\n", evlen);
    struct frame *f = malloc(sizeof(*f) + (size_t)hl + evlen + 2);
    if (!f)
        return NULL;
    f->refs = 1;
    f->id = snap_id64(s);
    f->hdr = (size_t)hl;
    f->len = (size_t)hl + evlen + 2;
    char *p = f->bytes;
    memcpy(p, hex, (size_t)hl);
    p += hl;
    memcpy(p, a, sizeof(a) - 1);
    p += sizeof(a) - 1;
    memcpy(p, s->id, lid);
    p += lid;
    memcpy(p, b, sizeof(b) - 1);
    p += sizeof(b) - 1;
    memcpy(p, s->body, s->len);
    p += s->len;
    memcpy(p, c, sizeof(c) - 1);
    p += sizeof(c) - 1;
    memcpy(p, "\r\n", 2);
    return f;
}

static struct frame *frame_ref(struct frame *f)
{
    f->refs++;
    return f;
}

static void frame_unref(struct frame *f)
{
    if (f && --f->refs == 0)
        free(f);
}

static unsigned topic_bucket(const char *sku)
{
    return hash_str(HASH_FNV_BASIS, sku) % TOPIC_BUCKETS;
}

static struct topic *topic_find(struct eloop *lp, const char *sku)
{
    for (struct topic *t = lp->topics[topic_bucket(sku)]; t; t = t->next)
        if (strcmp(t->sku, sku) == 0)
            return t;
    return NULL;
}

static void eloop_kick(struct eloop *lp)
{
    if (lp->need_kick && lp->kick) {
        lp->need_kick = 0;
        lp->kick(lp->kick_arg);
    }
}

/* The connection goes back to libmicrohttpd's loop (outside MHD_run; the kick runs it). No
 * direct write may be half done (sub_end drops or finishes it first). */
static void sub_resume(struct sub *s)
{
    if (!s->suspended)
        return;
    s->suspended = 0;
    MHD_resume_connection(s->conn);
    s->lp->need_kick = 1;
}

static void sub_shut(struct sub *s)
{
    shutdown(s->fd, SHUT_RDWR);
}

/* The piece begun, and dropped unfinished: a frame's reference released, no wait for room. */
static void piece_release(struct sub *s)
{
    if (s->room) {
        event_free(s->room);
        s->room = NULL;
    }
    frame_unref(s->cur);
    s->cur = NULL;
    s->kind = PIECE_NONE;
    s->off = 0;
}

static void sub_flush(struct sub *s);

/* s ends (closing). shut: now, its socket shut down (libmicrohttpd then ends the connection
 * even while the client reads nothing; a direct write half done is dropped). Else as an event
 * stream should: the piece begun is finished (by the reader, or by the direct write waiting for
 * room: libmicrohttpd could not, its reader would frame the rest as a chunk of its own), then
 * the connection goes back to libmicrohttpd, whose reader ends the chunked body. */
static void sub_end(struct sub *s, int shut)
{
    s->closing = 1;
    if (shut) {
        if (s->suspended)
            piece_release(s);
        sub_shut(s);
        sub_resume(s);
    } else if (s->suspended && s->chunked) {
        sub_flush(s); /* resumes it once no piece is left */
    } else {
        sub_resume(s);
    }
}

/* A subscriber EVENTS_PENDING events behind: closed (its socket shut down, so that
 * libmicrohttpd ends the connection even while the client reads nothing). */
static void sub_drop(struct sub *s)
{
    if (s->closing)
        return;
    atomic_fetch_add(&n_dropped, 1);
    log_msg(CONFIG_LOG_INFO, "events_dropped",
            "sku %s: a subscriber %d events behind was closed (it does not read)", s->t->sku,
            EVENTS_PENDING);
    sub_end(s, 1);
}

/* The bytes of s's piece: the chunk (framed: a direct write) or the event alone (the reader's:
 * libmicrohttpd frames it). */
static void piece_bytes(const struct sub *s, int framed, const char **p, size_t *len)
{
    const struct events *ev = s->lp->ev;
    if (s->kind == PIECE_RETRY) {
        *p = framed ? ev->retry_chunk : ev->retry_line;
        *len = framed ? ev->retry_chunk_len : ev->retry_len;
    } else if (s->kind == PIECE_HB) {
        *p = framed ? HB_CHUNK : HB_LINE;
        *len = framed ? sizeof(HB_CHUNK) - 1 : sizeof(HB_LINE) - 1;
    } else {
        *p = framed ? s->cur->bytes : s->cur->bytes + s->cur->hdr;
        *len = framed ? s->cur->len : s->cur->len - s->cur->hdr - 2;
    }
}

/* The next piece of s, or 0 when there is none. */
static int sub_next_piece(struct sub *s)
{
    s->off = 0;
    if (s->retry) {
        s->retry = 0;
        s->kind = PIECE_RETRY;
    } else if (s->count > 0) {
        s->cur = s->ring[s->head]; /* the ring's reference */
        s->ring[s->head] = NULL;
        s->head = (unsigned char)((s->head + 1) % EVENTS_PENDING);
        s->count--;
        s->kind = PIECE_FRAME;
    } else if (s->hb) {
        s->hb = 0;
        s->kind = PIECE_HB;
    } else {
        s->kind = PIECE_NONE;
        return 0;
    }
    return 1;
}

/* s's piece is written whole. */
static void piece_done(struct sub *s)
{
    if (s->kind == PIECE_FRAME) {
        atomic_fetch_add(&n_sent, 1);
        frame_unref(s->cur);
        s->cur = NULL;
    }
    s->kind = PIECE_NONE;
    s->off = 0;
}

/* The socket has room again for s's direct write. */
static void on_room(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sub *s = arg;
    struct eloop *lp = s->lp;
    event_free(s->room);
    s->room = NULL;
    sub_flush(s);
    eloop_kick(lp);
}

/* Writes s's queue to its socket while libmicrohttpd keeps the connection suspended (a chunked
 * stream): one send per piece, until the queue is empty or the socket full (then it waits for
 * room). A failed write (the client went) ends the stream. Closing, the piece begun is
 * finished and the connection resumed (sub_end). */
static void sub_flush(struct sub *s)
{
    while (s->suspended && !s->room) {
        /* a piece begun here is finished here: the reader begins none while suspended */
        if (s->kind == PIECE_NONE && (s->closing || !sub_next_piece(s))) {
            if (s->closing)
                sub_resume(s); /* the reader ends the body */
            return;
        }
        const char *p;
        size_t len;
        piece_bytes(s, 1, &p, &len);
        ssize_t w = send(s->fd, p + s->off, len - s->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            s->room = event_new(s->lp->w->env.base, s->fd, EV_WRITE, on_room, s);
            if (!s->room || event_add(s->room, NULL) != 0)
                sub_end(s, 1); /* out of memory: the stream ends, the client reconnects */
            return;
        }
        if (w <= 0) {
            /* the client went: libmicrohttpd's write of the body's end fails, it closes */
            piece_release(s);
            s->closing = 1;
            sub_resume(s);
            return;
        }
        s->off += (size_t)w;
        if (s->off < len)
            continue; /* the next send finds the socket full (or takes the rest) */
        piece_done(s);
    }
}

/* s has something new to write: on a suspended chunked stream, written now (sub_flush); on
 * another suspended one, its connection is resumed for the reader; on one in libmicrohttpd's
 * loop, its reader finds it. */
static void sub_push(struct sub *s)
{
    if (!s->suspended || s->closing)
        return;
    if (s->chunked)
        sub_flush(s);
    else
        sub_resume(s);
}

/* Queues f for s unless it is the last event s got. */
static void sub_deliver(struct sub *s, struct frame *f)
{
    if (s->closing || f->id == s->last_id)
        return;
    if (s->count == EVENTS_PENDING) {
        sub_drop(s);
        return;
    }
    s->ring[(s->head + s->count) % EVENTS_PENDING] = frame_ref(f);
    s->count++;
    s->last_id = f->id;
    sub_push(s);
}

/* A new snapshot of t's SKU: to every subscriber (kicks are the caller's), its bytes rendered
 * once. The SKU gone (a DELETE): every stream of it ends, and a reconnection gets the 404. */
static void topic_publish(struct topic *t, struct snap *snap)
{
    if (t->last == snap)
        return;
    if (!snap->found) {
        for (struct sub *s = t->subs; s; s = s->next)
            if (!s->closing)
                sub_end(s, 0);
        return;
    }
    struct frame *f = frame_new(snap);
    if (!f)
        return; /* out of memory: the loop's next tick tries again */
    statsnap_ref(snap);
    statsnap_unref(t->last);
    t->last = snap;
    frame_unref(t->frame);
    t->frame = f;
    for (struct sub *s = t->subs; s; s = s->next)
        sub_deliver(s, f);
}

/* ---- the response's callbacks ---- */

static ssize_t sub_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sub *s = cls;
    size_t n = 0;
    while (n < max) {
        /* closing: the piece begun is finished (no event cut in two), no other begins */
        if (s->kind == PIECE_NONE && (s->closing || !sub_next_piece(s)))
            break;
        const char *p;
        size_t len;
        piece_bytes(s, 0, &p, &len);
        size_t k = len - s->off;
        if (k > max - n)
            k = max - n;
        memcpy(buf + n, p + s->off, k);
        n += k;
        s->off += k;
        if (s->off < len)
            break;
        piece_done(s);
    }
    if (n > 0)
        return (ssize_t)n;
    if (s->closing)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* nothing to write: the connection waits, out of libmicrohttpd's loop, for sub_push; on a
     * chunked stream libmicrohttpd has sent all it had (it calls the reader only then), so the
     * next events go straight to the socket */
    MHD_suspend_connection(s->conn);
    s->suspended = 1;
    return 0;
}

static void eloop_timers(struct eloop *lp, int on);

/* libmicrohttpd is done with the response (the connection completed or closed). */
static void sub_free(void *cls)
{
    struct sub *s = cls;
    struct eloop *lp = s->lp;
    struct topic *t = s->t;
    if (s->prev)
        s->prev->next = s->next;
    else
        t->subs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (--t->n == 0) {
        for (struct topic **pp = &lp->topics[topic_bucket(t->sku)]; *pp; pp = &(*pp)->next)
            if (*pp == t) {
                *pp = t->next;
                break;
            }
        statsnap_unref(t->last);
        frame_unref(t->frame);
        free(t);
    }
    while (s->count > 0) {
        frame_unref(s->ring[s->head]);
        s->head = (unsigned char)((s->head + 1) % EVENTS_PENDING);
        s->count--;
    }
    piece_release(s);
    free(s);
    atomic_fetch_sub(&n_subscribers, 1);
    if (--lp->nsubs == 0) {
        atomic_store(&lp->listening, 0);
        eloop_timers(lp, 0);
    }
}

/* ---- the loop's timers and inbox ---- */

/* The tick: every subscribed SKU's refresh started when its snapshot is stale, and its
 * current snapshot published (a change that raced a subscriber's start). The next tick comes
 * at most tick_ms later, and as soon as the first of the snapshots expires: the refresh is
 * sent on time, not up to a tick late (that wait is part of every change's delay). */
static void eloop_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct eloop *lp = arg;
    struct app *app = lp->ev->app;
    int64_t next = lp->ev->tick_ms;
    for (int b = 0; b < TOPIC_BUCKETS; b++)
        for (struct topic *t = lp->topics[b]; t; t = t->next) {
            statsnap_poke(app->snaps, app, &lp->w->env, t->sku);
            struct snap *cur;
            int64_t age;
            if (statsnap_fresh(app->snaps, t->sku, &cur, &age)) {
                topic_publish(t, cur);
                statsnap_unref(cur);
                /* stale once age reaches the refresh (statsnap's fresh: age < refresh) */
                int64_t left = app->cfg.status_refresh_ms - age;
                if (left < next)
                    next = left;
            }
        }
    eloop_kick(lp);
    if (lp->nsubs > 0) {
        if (next < 1)
            next = 1;
        struct timeval tv = {(time_t)(next / 1000), (suseconds_t)(next % 1000) * 1000};
        event_add(lp->tick, &tv);
    }
}

/* 0 when s's client has closed its end or the socket failed (a suspended connection is not
 * watched by libmicrohttpd, and a send to a closed peer succeeds once). */
static int sub_alive(const struct sub *s)
{
    char c;
    ssize_t r = recv(s->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

static void eloop_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct eloop *lp = arg;
    for (int b = 0; b < TOPIC_BUCKETS; b++)
        for (struct topic *t = lp->topics[b]; t; t = t->next)
            for (struct sub *s = t->subs; s; s = s->next) {
                if (s->closing)
                    continue;
                if (s->suspended && s->chunked && !sub_alive(s)) {
                    sub_end(s, 0);
                    continue;
                }
                s->hb = 1;
                sub_push(s);
            }
    eloop_kick(lp);
}

static void eloop_timers(struct eloop *lp, int on)
{
    if (!lp->tick)
        return;
    if (!on) {
        event_del(lp->tick);
        event_del(lp->hb);
        return;
    }
    struct timeval tv = {lp->ev->tick_ms / 1000, (lp->ev->tick_ms % 1000) * 1000};
    atomic_store(&lp->listening, 1);
    event_add(lp->tick, &tv);
    int hb = lp->ev->app->cfg.events_heartbeat_s;
    struct timeval hv = {hb, 0};
    event_add(lp->hb, &hv);
}

/* The loop's inbox: changes to hand to its topics. */
static void eloop_inbox(void *arg)
{
    struct eloop *lp = arg;
    pthread_mutex_lock(&lp->mu);
    struct change *c = lp->inbox;
    lp->inbox = lp->inbox_tail = NULL;
    lp->posted = 0;
    pthread_mutex_unlock(&lp->mu);
    while (c) {
        struct change *next = c->next;
        struct topic *t = lp->quiesced ? NULL : topic_find(lp, c->sku);
        if (t)
            topic_publish(t, c->snap);
        statsnap_unref(c->snap);
        free(c);
        c = next;
    }
    eloop_kick(lp);
}

/* statsnap's listener (on the refreshing loop): the change goes to the inbox of every loop
 * with subscribers (a subscriber starting now on another reads the snapshot itself). */
static void events_on_change(void *arg, const char *sku, struct snap *snap)
{
    struct events *ev = arg;
    for (int i = 0; i < ev->nloops; i++) {
        struct eloop *lp = &ev->loops[i];
        if (!atomic_load(&lp->listening))
            continue;
        struct change *c = malloc(sizeof(*c));
        if (!c)
            continue; /* the loop's tick finds the change */
        snprintf(c->sku, sizeof(c->sku), "%s", sku);
        statsnap_ref(snap);
        c->snap = snap;
        c->next = NULL;
        pthread_mutex_lock(&lp->mu);
        if (lp->inbox_tail)
            lp->inbox_tail->next = c;
        else
            lp->inbox = c;
        lp->inbox_tail = c;
        int post = !lp->posted;
        lp->posted = 1;
        pthread_mutex_unlock(&lp->mu);
        if (post)
            worker_post(lp->w, eloop_inbox, lp);
    }
}

/* ---- the table ---- */

struct events *events_new(struct app *app, struct worker *workers, int nloops)
{
    struct events *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return NULL;
    ev->loops = calloc((size_t)nloops, sizeof(*ev->loops));
    if (!ev->loops) {
        free(ev);
        return NULL;
    }
    ev->app = app;
    ev->nloops = nloops;
    int r = app->cfg.status_refresh_ms;
    /* --status-refresh-ms 0 (every read refreshes: tests, debugging) ticks every 10 ms, never
     * a 0 ms timer that would spin the loop */
    ev->tick_ms = r < EVENTS_TICK_MS ? (r > 10 ? r : 10) : EVENTS_TICK_MS;
    ev->retry_len =
        (size_t)snprintf(ev->retry_line, sizeof(ev->retry_line), "retry: %d\n\n", EVENTS_RETRY_MS);
    ev->retry_chunk_len = (size_t)snprintf(ev->retry_chunk, sizeof(ev->retry_chunk),
                                           "%zx\r\n%s\r\n", ev->retry_len, ev->retry_line);
    for (int i = 0; i < nloops; i++) {
        struct eloop *lp = &ev->loops[i];
        lp->ev = ev;
        lp->id = i;
        lp->w = &workers[i];
        pthread_mutex_init(&lp->mu, NULL);
        lp->tick = event_new(workers[i].env.base, -1, 0, eloop_tick, lp); /* re-armed by itself */
        lp->hb = event_new(workers[i].env.base, -1, EV_PERSIST, eloop_heartbeat, lp);
        if (!lp->tick || !lp->hb) {
            events_free(ev);
            return NULL;
        }
    }
    statsnap_on_change(app->snaps, events_on_change, ev);
    return ev;
}

void events_loop_close(struct events *ev, int i)
{
    if (!ev || i < 0 || i >= ev->nloops)
        return;
    struct eloop *lp = &ev->loops[i];
    if (lp->tick)
        event_free(lp->tick);
    if (lp->hb)
        event_free(lp->hb);
    lp->tick = lp->hb = NULL;
}

void events_free(struct events *ev)
{
    if (!ev)
        return;
    statsnap_on_change(ev->app->snaps, NULL, NULL);
    for (int i = 0; i < ev->nloops; i++) {
        struct eloop *lp = &ev->loops[i];
        events_loop_close(ev, i);
        while (lp->inbox) { /* posted to a loop that had ended */
            struct change *c = lp->inbox;
            lp->inbox = c->next;
            statsnap_unref(c->snap);
            free(c);
        }
        if (lp->w)
            pthread_mutex_destroy(&lp->mu);
    }
    free(ev->loops);
    free(ev);
}

void events_loop_hook(struct events *ev, int i, void (*kick)(void *), void *arg)
{
    if (!ev || i < 0 || i >= ev->nloops)
        return;
    ev->loops[i].kick = kick;
    ev->loops[i].kick_arg = arg;
}

void events_loop_quiesce(struct events *ev, int i)
{
    if (!ev || i < 0 || i >= ev->nloops)
        return;
    struct eloop *lp = &ev->loops[i];
    lp->quiesced = 1;
    for (int b = 0; b < TOPIC_BUCKETS; b++)
        for (struct topic *t = lp->topics[b]; t; t = t->next)
            for (struct sub *s = t->subs; s; s = s->next)
                /* suspended with nothing begun: its reader ends the chunked body; in the middle
                 * of a write (or behind): cut. Streams already ending too: one whose last piece
                 * cannot go out (its client does not read) would hold the grace, and one still
                 * suspended (its direct write waiting for room) would make libmicrohttpd abort
                 * when the daemon stops. */
                sub_end(s, !s->suspended || s->kind != PIECE_NONE);
    lp->need_kick = 0; /* the caller runs the daemon */
}

/* ---- opening a stream ---- */

struct MHD_Response *events_open(struct events *ev, struct MHD_Connection *conn, const char *sku,
                                 size_t sku_len, struct snap *first, const char *last_event_id,
                                 int chunked, int *busy)
{
    *busy = 0;
    struct worker *w = worker_current();
    int i = w ? w->env.id : -1;
    struct eloop *lp = ev && i >= 0 && i < ev->nloops ? &ev->loops[i] : NULL;
    if (!lp || lp->quiesced) {
        *busy = 1;
        statsnap_unref(first);
        return NULL;
    }
    if (atomic_fetch_add(&n_subscribers, 1) >= ev->app->cfg.max_subscribers) {
        atomic_fetch_sub(&n_subscribers, 1);
        atomic_fetch_add(&n_refused, 1);
        *busy = 1;
        statsnap_unref(first);
        return NULL;
    }
    struct sub *s = calloc(1, sizeof(*s));
    struct topic *t = NULL;
    char name[VALIDATE_SKU_MAX + 1];
    if (sku_len > VALIDATE_SKU_MAX)
        sku_len = VALIDATE_SKU_MAX;
    memcpy(name, sku, sku_len);
    name[sku_len] = '\0';
    if (s && !(t = topic_find(lp, name))) {
        t = calloc(1, sizeof(*t));
        if (t) {
            snprintf(t->sku, sizeof(t->sku), "%s", name);
            unsigned b = topic_bucket(t->sku);
            t->next = lp->topics[b];
            lp->topics[b] = t;
        }
    }
    /* the first event's bytes: the topic's when it is the same snapshot */
    struct frame *f = NULL;
    if (t)
        f = t->frame && t->frame->id == snap_id64(first) ? frame_ref(t->frame) : frame_new(first);
    struct MHD_Response *r =
        f ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, BLOCK_SIZE, sub_read, s, sub_free)
          : NULL;
    if (!r) {
        frame_unref(f);
        if (t && t->n == 0) {
            for (struct topic **pp = &lp->topics[topic_bucket(t->sku)]; *pp; pp = &(*pp)->next)
                if (*pp == t) {
                    *pp = t->next;
                    break;
                }
            free(t);
        }
        free(s);
        atomic_fetch_sub(&n_subscribers, 1);
        statsnap_unref(first);
        return NULL;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    s->lp = lp;
    s->t = t;
    s->conn = conn;
    s->fd = ci ? ci->connect_fd : -1;
    s->chunked = chunked && s->fd >= 0;
    s->retry = 1;
    s->next = t->subs;
    if (t->subs)
        t->subs->prev = s;
    t->subs = s;
    t->n++;
    if (lp->nsubs++ == 0)
        eloop_timers(lp, 1);
    int resumed = last_event_id && strcmp(last_event_id, first->id) == 0;
    if (resumed)
        s->last_id = f->id; /* the client has it: only later changes */
    else
        sub_deliver(s, f);
    frame_unref(f);
    /* a change the loop saw while this request waited for its snapshot */
    if (t->last && t->last != first && t->last->as_of_ms > first->as_of_ms && t->frame)
        sub_deliver(s, t->frame);
    statsnap_unref(first);
    lp->need_kick = 0; /* inside the daemon's run: nothing is suspended yet */
    /* A small send buffer: a client that does not read fills it soon and is dropped after
     * EVENTS_PENDING more events, instead of the kernel holding megabytes for it. */
    if (s->fd >= 0) {
        int sz = SEND_BUFFER;
        setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    }
    /* the stream's own idle: heartbeats keep it busy, and a suspended connection never times
     * out (a dead client is found by the next write) */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    int ok =
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream") == MHD_YES &&
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") == MHD_YES &&
        MHD_add_response_header(r, "X-Accel-Buffering", "no") == MHD_YES;
    if (!ok) {
        MHD_destroy_response(r); /* sub_free undoes the subscriber */
        return NULL;
    }
    return r;
}

/* ---- the handlers ---- */

/* The 503 of a stream refused for the bound. */
static void stream_busy(struct response *res, const char *why)
{
    response_error(res, ERROR_UNAVAILABLE, why);
    if (res->retry_after <= 0)
        res->retry_after = 1;
}

static int stream_over_bound(const struct app *app)
{
    return atomic_load(&n_subscribers) >= app->cfg.max_subscribers;
}

/* struct response's stream_free: the snapshot's reference. */
static void stream_release(void *s)
{
    statsnap_unref(s);
}

/* The answer of snapshot s: the stream (200), or the 404 of an unknown SKU. */
static void stream_answer(struct snap *s, struct response *res)
{
    if (s->found) {
        res->status = 200;
        res->stream = s; /* the reference goes with it */
        res->stream_free = stream_release;
        return;
    }
    char *text = malloc(s->len + 1);
    if (text) {
        memcpy(text, s->body, s->len + 1);
        res->text = text;
        res->content_type = "application/json";
        res->status = 404;
    } else {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
    }
    statsnap_unref(s);
}

void events_get_run(struct app *app, const struct request *req, struct response *res)
{
    if (!req->param || !validate_sku(req->param, req->param_len))
        return; /* the 400: events_get_async */
    if (stream_over_bound(app)) {
        atomic_fetch_add(&n_refused, 1);
        stream_busy(res, "too many event-stream subscribers on this instance; retry later");
        return;
    }
    char sku[VALIDATE_SKU_MAX + 1];
    memcpy(sku, req->param, req->param_len);
    sku[req->param_len] = '\0';
    struct snap *s;
    int64_t age;
    if (statsnap_fresh(app->snaps, sku, &s, &age))
        stream_answer(s, res);
}

static void on_stream_snap(struct areq *ar, int rc, struct snap *s, int64_t age_ms, const char *why,
                           int out_of_step)
{
    (void)age_ms;
    if (rc == 0)
        stream_busy(&ar->res, "too many SKUs in the status snapshot table; retry later");
    else if (rc < 0)
        exact_read_error(&ar->res, why, out_of_step);
    else
        stream_answer(s, &ar->res);
    if (rc <= 0)
        statsnap_unref(s);
    areq_done(ar);
}

void events_get_async(struct areq *ar)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(&ar->req, &ar->res, sku) != 0) {
        areq_done(ar);
        return;
    }
    statsnap_wait(ar->app->snaps, ar, sku, on_stream_snap);
}

void events_stats(struct events_stats *out)
{
    out->subscribers = atomic_load(&n_subscribers);
    out->sent = atomic_load(&n_sent);
    out->dropped = atomic_load(&n_dropped);
    out->refused = atomic_load(&n_refused);
}
