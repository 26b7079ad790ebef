/*
 * The status event streams; see events.h. Per loop: a table of topics (one per SKU with
 * subscribers on the loop), each with its list of subscribers, an inbox of changes posted by
 * the statsnap listener, a tick timer and a heartbeat timer. Per subscriber: struct sub, freed
 * by libmicrohttpd's free callback of its response (when the connection is done with it).
 */
#include "events.h"

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

/* What a subscriber is writing: an event (a snapshot), the retry line or a heartbeat. */
enum piece { PIECE_NONE, PIECE_RETRY, PIECE_HB, PIECE_SNAP };

struct sub {
    struct eloop *lp;
    struct topic *t;
    struct MHD_Connection *conn;
    struct sub *prev, *next;           /* in t->subs */
    struct snap *ring[EVENTS_PENDING]; /* queued events, oldest at head */
    unsigned char head, count;
    unsigned char kind; /* enum piece being written */
    struct snap *cur;   /* PIECE_SNAP's snapshot (a reference) */
    size_t off;         /* bytes of the piece written */
    uint64_t last_id;   /* the id of the last event queued */
    unsigned suspended : 1, retry : 1, hb : 1, closing : 1;
};

struct topic {
    char sku[VALIDATE_SKU_MAX + 1];
    struct snap *last; /* the last snapshot handed to the topic (a reference), or NULL */
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
    char retry_line[32];
    size_t retry_len;
};

static const char HB_LINE[] = ": hb\n\n";

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

/* The connection goes back to libmicrohttpd's loop (outside MHD_run; the kick runs it). */
static void sub_wake(struct sub *s)
{
    if (!s->suspended)
        return;
    s->suspended = 0;
    MHD_resume_connection(s->conn);
    s->lp->need_kick = 1;
}

static void sub_shut(struct sub *s)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        shutdown(ci->connect_fd, SHUT_RDWR);
}

/* A subscriber EVENTS_PENDING events behind: closed (its socket shut down, so that
 * libmicrohttpd ends the connection even while the client reads nothing). */
static void sub_drop(struct sub *s)
{
    if (s->closing)
        return;
    s->closing = 1;
    atomic_fetch_add(&n_dropped, 1);
    log_msg(CONFIG_LOG_INFO, "events_dropped",
            "sku %s: a subscriber %d events behind was closed (it does not read)", s->t->sku,
            EVENTS_PENDING);
    sub_shut(s);
    sub_wake(s);
}

/* Queues snap for s unless it is the last event s got. */
static void sub_deliver(struct sub *s, struct snap *snap)
{
    uint64_t id = snap_id64(snap);
    if (s->closing || id == s->last_id)
        return;
    if (s->count == EVENTS_PENDING) {
        sub_drop(s);
        return;
    }
    statsnap_ref(snap);
    s->ring[(s->head + s->count) % EVENTS_PENDING] = snap;
    s->count++;
    s->last_id = id;
    sub_wake(s);
}

/* A new snapshot of t's SKU: to every subscriber (kicks are the caller's). The SKU gone (a
 * DELETE): every stream of it ends, and a reconnection gets the 404. */
static void topic_publish(struct topic *t, struct snap *snap)
{
    if (t->last == snap)
        return;
    if (!snap->found) {
        for (struct sub *s = t->subs; s; s = s->next)
            if (!s->closing) {
                s->closing = 1;
                sub_wake(s);
            }
        return;
    }
    statsnap_ref(snap);
    statsnap_unref(t->last);
    t->last = snap;
    for (struct sub *s = t->subs; s; s = s->next)
        sub_deliver(s, snap);
}

/* ---- the response's callbacks ---- */

/* Copies what is left of src[0..len) after *off into buf (at most max): bytes copied. */
static size_t piece_copy(const char *src, size_t len, size_t *off, size_t base, char *buf,
                         size_t max)
{
    /* the piece's bytes base..base+len are src; *off counts from the piece's start */
    if (*off >= base + len || max == 0)
        return 0;
    size_t from = *off - base, n = len - from;
    if (n > max)
        n = max;
    memcpy(buf, src + from, n);
    *off += n;
    return n;
}

/* Writes what is left of s's piece into buf: bytes written; *done when the piece is whole. */
static size_t sub_write_piece(struct sub *s, char *buf, size_t max, int *done)
{
    size_t n = 0;
    if (s->kind == PIECE_RETRY) {
        n = piece_copy(s->lp->ev->retry_line, s->lp->ev->retry_len, &s->off, 0, buf, max);
        *done = s->off == s->lp->ev->retry_len;
    } else if (s->kind == PIECE_HB) {
        n = piece_copy(HB_LINE, sizeof(HB_LINE) - 1, &s->off, 0, buf, max);
        *done = s->off == sizeof(HB_LINE) - 1;
    } else {
        /* "id: <id>\nevent: status\ndata: <body>\n\n" (the body is one line: compact JSON) */
        static const char a[] = "id: ", b[] = "\nevent: status\ndata: ", c[] = "\n\n";
        const struct snap *p = s->cur;
        size_t la = sizeof(a) - 1, lid = strlen(p->id), lb = sizeof(b) - 1, lc = sizeof(c) - 1;
        size_t base = 0;
        n += piece_copy(a, la, &s->off, base, buf + n, max - n);
        base += la;
        if (s->off >= base)
            n += piece_copy(p->id, lid, &s->off, base, buf + n, max - n);
        base += lid;
        if (s->off >= base)
            n += piece_copy(b, lb, &s->off, base, buf + n, max - n);
        base += lb;
        if (s->off >= base)
            n += piece_copy(p->body, p->len, &s->off, base, buf + n, max - n);
        base += p->len;
        if (s->off >= base)
            n += piece_copy(c, lc, &s->off, base, buf + n, max - n);
        base += lc;
        *done = s->off == base;
    }
    return n;
}

/* The next piece of s, or 0 when there is none. */
static int sub_next_piece(struct sub *s)
{
    s->off = 0;
    if (s->retry) {
        s->retry = 0;
        s->kind = PIECE_RETRY;
    } else if (s->count > 0) {
        s->cur = s->ring[s->head];
        s->ring[s->head] = NULL;
        s->head = (unsigned char)((s->head + 1) % EVENTS_PENDING);
        s->count--;
        s->kind = PIECE_SNAP;
    } else if (s->hb) {
        s->hb = 0;
        s->kind = PIECE_HB;
    } else {
        s->kind = PIECE_NONE;
        return 0;
    }
    return 1;
}

static ssize_t sub_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sub *s = cls;
    size_t n = 0;
    while (n < max) {
        /* closing: the piece begun is finished (no event cut in two), no other begins */
        if (s->kind == PIECE_NONE && (s->closing || !sub_next_piece(s)))
            break;
        int done = 0;
        n += sub_write_piece(s, buf + n, max - n, &done);
        if (!done)
            break;
        if (s->kind == PIECE_SNAP) {
            atomic_fetch_add(&n_sent, 1);
            statsnap_unref(s->cur);
            s->cur = NULL;
        }
        s->kind = PIECE_NONE;
    }
    if (n > 0)
        return (ssize_t)n;
    if (s->closing)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* nothing to write: the connection waits, out of libmicrohttpd's loop, for wake */
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
        free(t);
    }
    while (s->count > 0) {
        statsnap_unref(s->ring[s->head]);
        s->head = (unsigned char)((s->head + 1) % EVENTS_PENDING);
        s->count--;
    }
    statsnap_unref(s->cur);
    free(s);
    atomic_fetch_sub(&n_subscribers, 1);
    if (--lp->nsubs == 0)
        eloop_timers(lp, 0);
}

/* ---- the loop's timers and inbox ---- */

static void eloop_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct eloop *lp = arg;
    struct app *app = lp->ev->app;
    for (int b = 0; b < TOPIC_BUCKETS; b++)
        for (struct topic *t = lp->topics[b]; t; t = t->next) {
            statsnap_poke(app->snaps, app, &lp->w->env, t->sku);
            struct snap *cur;
            int64_t age;
            if (statsnap_fresh(app->snaps, t->sku, &cur, &age)) {
                topic_publish(t, cur);
                statsnap_unref(cur);
            }
        }
    eloop_kick(lp);
}

static void eloop_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct eloop *lp = arg;
    for (int b = 0; b < TOPIC_BUCKETS; b++)
        for (struct topic *t = lp->topics[b]; t; t = t->next)
            for (struct sub *s = t->subs; s; s = s->next)
                if (!s->closing) {
                    s->hb = 1;
                    sub_wake(s);
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

/* statsnap's listener (on the refreshing loop): the change goes to every loop's inbox. */
static void events_on_change(void *arg, const char *sku, struct snap *snap)
{
    struct events *ev = arg;
    if (atomic_load(&n_subscribers) == 0)
        return; /* nobody listens; a subscriber starting now reads the snapshot itself */
    for (int i = 0; i < ev->nloops; i++) {
        struct eloop *lp = &ev->loops[i];
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
    for (int i = 0; i < nloops; i++) {
        struct eloop *lp = &ev->loops[i];
        lp->ev = ev;
        lp->id = i;
        lp->w = &workers[i];
        pthread_mutex_init(&lp->mu, NULL);
        lp->tick = event_new(workers[i].env.base, -1, EV_PERSIST, eloop_tick, lp);
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
            for (struct sub *s = t->subs; s; s = s->next) {
                if (s->closing)
                    continue;
                s->closing = 1;
                if (s->suspended)
                    sub_wake(s); /* its reader ends the chunked body */
                else
                    sub_shut(s); /* in the middle of a write (or behind): cut */
            }
    lp->need_kick = 0; /* the caller runs the daemon */
}

/* ---- opening a stream ---- */

struct MHD_Response *events_open(struct events *ev, struct MHD_Connection *conn, const char *sku,
                                 size_t sku_len, struct snap *first, const char *last_event_id,
                                 int *busy)
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
    struct MHD_Response *r =
        t ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, BLOCK_SIZE, sub_read, s, sub_free)
          : NULL;
    if (!r) {
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
    s->lp = lp;
    s->t = t;
    s->conn = conn;
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
        s->last_id = snap_id64(first); /* the client has it: only later changes */
    else
        sub_deliver(s, first);
    /* a change the loop saw while this request waited for its snapshot */
    if (t->last && t->last != first && t->last->as_of_ms > first->as_of_ms)
        sub_deliver(s, t->last);
    statsnap_unref(first);
    lp->need_kick = 0; /* inside the daemon's run: nothing is suspended yet */
    /* A small send buffer: a client that does not read fills it soon and is dropped after
     * EVENTS_PENDING more events, instead of the kernel holding megabytes for it. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) {
        int sz = SEND_BUFFER;
        setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
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
