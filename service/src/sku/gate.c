/*
 * The instance's gate: admitter, snapshots and place cache; see gate.h. One mutex over the SKUs'
 * entries (a step's fields and its snapshot), one over the place cache (a hash table with an LRU
 * list); the steps run as internal requests (areq) on a loop, as statsnap.c's refreshes do.
 */
#include "gate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "app.h"
#include "areq.h"
#include "clock.h"
#include "status_read.h"
#include "hash.h"
#include "log.h"
#include "rules.h"
#include "validate.h"

enum {
    SKU_BUCKETS = 1024,
    PLACE_BUCKETS = 1 << 17,
    RING = 600,          /* snapshots kept per SKU: a minute of steps */
    WAIT_RECHECK_MS = 5, /* a waiter looks at its SKU's snapshot this often */
    IDLE_FREE_MS = 2 * GATE_ACTIVE_MS
};

/* ---- counters ---- */

static atomic_llong m_joins, m_polls_mem, m_polls_redis, m_admitted, m_ticks, m_tick_fails,
    m_wait_err_count, m_wait_err_ms;

void gate_count_join(void)
{
    atomic_fetch_add_explicit(&m_joins, 1, memory_order_relaxed);
}

void gate_count_poll(int from_redis)
{
    atomic_fetch_add_explicit(from_redis ? &m_polls_redis : &m_polls_mem, 1, memory_order_relaxed);
}

void gate_wait_error(double err_s)
{
    if (!(err_s >= 0))
        err_s = 0;
    atomic_fetch_add_explicit(&m_wait_err_ms, (long long)(err_s * 1000.0 + 0.5),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&m_wait_err_count, 1, memory_order_relaxed);
}

/* ---- the SKUs ---- */

struct sample {
    int64_t mono_ms, redis_ms;
    long long served;
};

struct gentry {
    char sku[VALIDATE_SKU_MAX + 1];
    int64_t active_ms; /* last join or poll (clock_mono_ms) */
    int stepping;      /* a step in flight (on some loop) */
    int have;          /* snap holds a reply */
    struct gate_snap snap;
    long long fin_seen; /* the last fin received: the next step's */
    char why[200];      /* the last step's failure, "" when it succeeded */
    int warned;         /* gate_first_warning's */
    struct sample ring[RING];
    int nring, head; /* head: the next slot written */
    struct gentry *next;
};

struct gate {
    struct app *app;
    pthread_mutex_t mu;
    struct gentry *bucket[SKU_BUCKETS];
    long long nskus;
    struct areq_env *env; /* loop 0's: the admitter's */
    struct event *timer;
    int stopping;

    pthread_mutex_t pmu; /* the place cache */
    struct pentry **pbucket;
    struct pentry *lru_head, *lru_tail; /* head: most recently used */
    long long nplaces;
};

static unsigned sku_bucket(const char *sku)
{
    return hash_str(HASH_FNV_BASIS, sku) % SKU_BUCKETS;
}

/* sku's entry, made when create is set and there is room. With g->mu. */
static struct gentry *entry_find(struct gate *g, const char *sku, int create)
{
    unsigned b = sku_bucket(sku);
    for (struct gentry *e = g->bucket[b]; e; e = e->next)
        if (strcmp(e->sku, sku) == 0)
            return e;
    if (!create || g->nskus >= GATE_SKUS_MAX)
        return NULL;
    struct gentry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    snprintf(e->sku, sizeof(e->sku), "%s", sku);
    e->next = g->bucket[b];
    g->bucket[b] = e;
    g->nskus++;
    return e;
}

/* Admissions per second over the ring's last GATE_RATE_WINDOW_MS (Redis's clock). With g->mu. */
static double ring_rate(const struct gentry *e)
{
    if (e->nring < 2)
        return -1;
    const struct sample *last = &e->ring[(e->head + RING - 1) % RING];
    const struct sample *first = last;
    for (int i = 2; i <= e->nring; i++) {
        const struct sample *s = &e->ring[(e->head + RING - i) % RING];
        if (last->redis_ms - s->redis_ms > GATE_RATE_WINDOW_MS)
            break;
        first = s;
    }
    if (last->redis_ms <= first->redis_ms)
        return -1;
    return (double)(last->served - first->served) * 1000.0 /
           (double)(last->redis_ms - first->redis_ms);
}

int gate_snapshot(struct gate *g, const char *sku, struct gate_snap *out)
{
    int64_t now = clock_mono_ms();
    int ok = 0;
    pthread_mutex_lock(&g->mu);
    struct gentry *e = entry_find(g, sku, 1);
    if (e) {
        e->active_ms = now;
        if (e->have && now - e->snap.mono_ms < GATE_STALE_MS) {
            *out = e->snap;
            ok = 1;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

int64_t gate_admitted_at(struct gate *g, const char *sku, long long rank)
{
    int64_t at = 0;
    pthread_mutex_lock(&g->mu);
    struct gentry *e = entry_find(g, sku, 0);
    for (int i = 1; e && i <= e->nring; i++) {
        const struct sample *s = &e->ring[(e->head + RING - i) % RING];
        if (s->served <= rank)
            break;
        at = s->mono_ms;
    }
    pthread_mutex_unlock(&g->mu);
    return at;
}

int gate_first_warning(struct gate *g, const char *sku)
{
    int first = 0;
    pthread_mutex_lock(&g->mu);
    struct gentry *e = entry_find(g, sku, 1);
    if (e && !e->warned)
        first = e->warned = 1;
    pthread_mutex_unlock(&g->mu);
    return first;
}

/* ---- a step ---- */

struct step {
    struct gate *g;
    struct areq *ar; /* the step's own request (its loop, client and log context) */
    char sku[VALIDATE_SKU_MAX + 1];
    long long fin_seen;
    long long remaining, reserved, rule_rate, ttl_s;
    int64_t sale_start_ms;
};

/* Publishes the step's end: st the reply (NULL: failed, why). */
static void step_end(struct step *t, const struct gate_state *st, const char *why)
{
    struct gate *g = t->g;
    int64_t now = clock_mono_ms();
    atomic_fetch_add_explicit(&m_ticks, 1, memory_order_relaxed);
    if (!st)
        atomic_fetch_add_explicit(&m_tick_fails, 1, memory_order_relaxed);
    else if (st->admitted > 0)
        atomic_fetch_add_explicit(&m_admitted, st->admitted, memory_order_relaxed);
    pthread_mutex_lock(&g->mu);
    struct gentry *e = entry_find(g, t->sku, 0); /* never freed while stepping */
    if (e) {
        e->stepping = 0;
        if (!st) {
            snprintf(e->why, sizeof(e->why), "%s", why ? why : "unexpected reply");
        } else {
            e->why[0] = '\0';
            e->have = 1;
            e->snap.st = *st;
            e->snap.mono_ms = now;
            e->snap.rule_rate = t->rule_rate;
            e->snap.ttl_s = t->ttl_s;
            e->snap.sale_start_ms = t->sale_start_ms;
            e->snap.remaining = t->remaining;
            e->snap.reserved = t->reserved;
            if (st->code == STORE_GATE_OK) {
                e->fin_seen = st->fin;
                e->ring[e->head] = (struct sample){now, st->now_ms, st->served};
                e->head = (e->head + 1) % RING;
                if (e->nring < RING)
                    e->nring++;
            } else {
                e->nring = e->head = 0; /* no room (any more): a new room measures anew */
                e->fin_seen = 0;
            }
            e->snap.rate = ring_rate(e);
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (!st)
        log_msg(CONFIG_LOG_WARN, "queue_step_failed", "sku %s: %s", t->sku,
                why ? why : "unexpected reply");
    areq_done(t->ar);
}

static void on_admit(void *arg, lc_status st, const char *why, const struct gate_state *gs)
{
    struct step *t = arg;
    areq_log_begin(t->ar);
    step_end(t, st == LC_OK ? gs : NULL, why ? why : "the admission step failed");
    areq_log_end();
}

static long long status_int(const json_t *o, const char *key)
{
    return (long long)json_integer_value(json_object_get(o, key));
}

static void on_read(void *arg, int rc, json_t *status, const char *why, int out_of_step)
{
    (void)out_of_step;
    struct step *t = arg;
    if (rc < 0) {
        step_end(t, NULL, why);
        json_decref(status);
        return;
    }
    if (rc == 0) { /* unknown SKU: the snapshot says so (a 404) without asking the gate */
        struct gate_state gs = {.code = STORE_GATE_NO_SKU};
        step_end(t, &gs, NULL);
        return;
    }
    t->remaining = status_int(status, "remaining");
    t->reserved = status_int(status, "reserved");
    t->rule_rate = status_int(status, "queue_rate");
    t->ttl_s = status_int(status, "queue_ticket_ttl_s");
    const char *start = json_string_value(json_object_get(status, "sale_start"));
    int64_t at = 0;
    if (start && rules_parse_time(start, strlen(start), &at) == 0)
        t->sale_start_ms = at;
    json_decref(status);
    struct app *app = t->ar->app;
    gate_store_admit(app->store, t->ar->lc, t->ar, t->sku, t->remaining, t->reserved, t->fin_seen,
                     on_admit, t);
}

static void on_step_ready(void *http)
{
    struct step *t = http;
    areq_free(t->ar);
    free(t);
}

/* Starts a step of e on env's loop; e->stepping set by the caller (with g->mu), fin_seen the
 * entry's then. */
static void step_start(struct gate *g, struct areq_env *env, const char *sku, long long fin_seen)
{
    struct step *t = calloc(1, sizeof(*t));
    char rid[VALIDATE_SKU_MAX + 16];
    snprintf(rid, sizeof(rid), "queue-%s", sku);
    struct request req = {.method = HTTP_POST, .path = "/queue/step", .request_id = rid};
    struct areq *ar = t ? areq_new(env, g->app, &req, on_step_ready, t) : NULL;
    if (!ar) {
        free(t);
        pthread_mutex_lock(&g->mu);
        struct gentry *e = entry_find(g, sku, 0);
        if (e) {
            e->stepping = 0;
            snprintf(e->why, sizeof(e->why), "out of memory");
        }
        pthread_mutex_unlock(&g->mu);
        return;
    }
    t->g = g;
    t->ar = ar;
    t->fin_seen = fin_seen;
    snprintf(t->sku, sizeof(t->sku), "%s", sku);
    /* the read is sent now, after fin_seen was received: a ticket used since counts as live
     * in the step, never as both sold and live-budget free */
    status_read_async(ar, t->sku, 0, on_read, t);
}

/* ---- the admitter ---- */

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gate *g = arg;
    if (g->stopping || atomic_load(&g->app->draining))
        return;
    int64_t now = clock_mono_ms();
    char(*due)[VALIDATE_SKU_MAX + 1] = NULL;
    long long *fins = NULL;
    int n = 0, cap = 0;
    pthread_mutex_lock(&g->mu);
    for (int b = 0; b < SKU_BUCKETS; b++)
        for (struct gentry **p = &g->bucket[b]; *p;) {
            struct gentry *e = *p;
            if (!e->stepping && now - e->active_ms > IDLE_FREE_MS) {
                *p = e->next;
                free(e);
                g->nskus--;
                continue;
            }
            p = &e->next;
            /* a SKU without a room (or unknown) is not stepped by the timer: a request asks
             * again once its answer is GATE_STALE_MS old, so polls of made-up names cost Redis
             * one read per name per GATE_STALE_MS, not one per tick */
            if (e->stepping || now - e->active_ms > GATE_ACTIVE_MS ||
                (e->have && e->snap.st.code != STORE_GATE_OK))
                continue;
            if (n == cap) {
                int nc = cap ? cap * 2 : 16;
                void *d = realloc(due, (size_t)nc * sizeof(*due));
                void *f = d ? realloc(fins, (size_t)nc * sizeof(*fins)) : NULL;
                if (d)
                    due = d;
                if (!d || !f)
                    break;
                fins = f;
                cap = nc;
            }
            e->stepping = 1;
            memcpy(due[n], e->sku, sizeof(due[n]));
            fins[n++] = e->fin_seen;
        }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < n; i++)
        step_start(g, g->env, due[i], fins[i]);
    free(due);
    free(fins);
}

int gate_start(struct gate *g, struct areq_env *env)
{
    g->env = env;
    g->timer = event_new(env->base, -1, EV_PERSIST, on_timer, g);
    if (!g->timer)
        return -1;
    struct timeval tv = {0, GATE_TICK_MS * 1000};
    return event_add(g->timer, &tv);
}

void gate_stop(struct gate *g)
{
    if (!g)
        return;
    g->stopping = 1;
    if (g->timer) {
        event_free(g->timer);
        g->timer = NULL;
    }
}

/* ---- waiting for a snapshot ---- */

struct waiter {
    struct gate *g;
    struct areq *ar;
    gate_wait_fn cb;
    void *arg;
    struct event *ev;
    int64_t until_ms;
    char sku[VALIDATE_SKU_MAX + 1];
};

static void waiter_end(struct waiter *w, int rc, const struct gate_snap *s, const char *why)
{
    struct areq *ar = w->ar;
    gate_wait_fn cb = w->cb;
    void *arg = w->arg;
    if (w->ev)
        event_free(w->ev);
    free(w);
    ar->cancel = NULL;
    ar->handler = NULL;
    cb(ar, arg, rc, s, why);
}

static void on_waiter_cancel(struct areq *ar)
{
    waiter_end(ar->handler, -1, NULL, "the service is shutting down");
}

/* Looks once: answers the waiter, or starts a step when none is in flight, or waits more. */
static void waiter_look(struct waiter *w)
{
    struct gate *g = w->g;
    int64_t now = clock_mono_ms();
    struct gate_snap s;
    int start = 0, rc = 2;
    long long fin = 0;
    char why[200] = "";
    pthread_mutex_lock(&g->mu);
    struct gentry *e = entry_find(g, w->sku, 1);
    if (!e) {
        rc = 0;
    } else {
        e->active_ms = now;
        if (e->have && now - e->snap.mono_ms < GATE_STALE_MS) {
            s = e->snap;
            rc = 1;
        } else if (!e->stepping) {
            if (e->why[0] && now >= w->until_ms) {
                snprintf(why, sizeof(why), "%s", e->why);
                rc = -1;
            } else {
                e->stepping = 1;
                fin = e->fin_seen;
                start = 1;
            }
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (start)
        step_start(g, w->ar->env, w->sku, fin);
    if (rc == 2 && now >= w->until_ms) {
        rc = -1;
        snprintf(why, sizeof(why), "the waiting room's state could not be read in time");
    }
    if (rc != 2) {
        waiter_end(w, rc, rc == 1 ? &s : NULL, why);
        return;
    }
    struct timeval tv = {0, WAIT_RECHECK_MS * 1000};
    event_add(w->ev, &tv);
}

static void on_recheck(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct waiter *w = arg;
    areq_log_begin(w->ar);
    waiter_look(w);
    areq_log_end();
}

void gate_wait(struct gate *g, struct areq *ar, const char *sku, gate_wait_fn cb, void *arg)
{
    struct gate_snap s;
    if (gate_snapshot(g, sku, &s)) {
        cb(ar, arg, 1, &s, NULL);
        return;
    }
    struct waiter *w = calloc(1, sizeof(*w));
    if (w)
        w->ev = event_new(ar->base, -1, 0, on_recheck, w);
    if (!w || !w->ev) {
        free(w);
        cb(ar, arg, -1, NULL, "out of memory");
        return;
    }
    w->g = g;
    w->arg = arg;
    w->ar = ar;
    w->cb = cb;
    w->until_ms = clock_mono_ms() + GATE_STALE_MS;
    snprintf(w->sku, sizeof(w->sku), "%s", sku);
    ar->handler = w;
    ar->cancel = on_waiter_cancel;
    waiter_look(w);
}

/* ---- the place cache ---- */

struct pentry {
    struct pentry *hnext;       /* bucket chain */
    struct pentry *prev, *next; /* LRU list */
    unsigned hash;
    struct gate_place_entry v;
    char key[]; /* "<sku>\n<user>" */
};

static unsigned place_hash(const char *sku, const char *user)
{
    return hash_str(hash_str(hash_str(HASH_FNV_BASIS, sku), "\n"), user);
}

static int key_is(const struct pentry *p, const char *sku, const char *user)
{
    size_t n = strlen(sku);
    return strncmp(p->key, sku, n) == 0 && p->key[n] == '\n' && strcmp(p->key + n + 1, user) == 0;
}

static void lru_unlink(struct gate *g, struct pentry *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        g->lru_head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        g->lru_tail = p->prev;
    p->prev = p->next = NULL;
}

static void lru_front(struct gate *g, struct pentry *p)
{
    p->next = g->lru_head;
    p->prev = NULL;
    if (g->lru_head)
        g->lru_head->prev = p;
    g->lru_head = p;
    if (!g->lru_tail)
        g->lru_tail = p;
}

/* The entry of (sku, user), or NULL. With g->pmu. */
static struct pentry *place_find(struct gate *g, const char *sku, const char *user, unsigned h)
{
    for (struct pentry *p = g->pbucket[h % PLACE_BUCKETS]; p; p = p->hnext)
        if (p->hash == h && key_is(p, sku, user))
            return p;
    return NULL;
}

static void place_drop(struct gate *g, struct pentry *p)
{
    for (struct pentry **q = &g->pbucket[p->hash % PLACE_BUCKETS]; *q; q = &(*q)->hnext)
        if (*q == p) {
            *q = p->hnext;
            break;
        }
    lru_unlink(g, p);
    free(p);
    g->nplaces--;
}

int gate_place_get(struct gate *g, const char *sku, const char *user, struct gate_place_entry *out)
{
    unsigned h = place_hash(sku, user);
    pthread_mutex_lock(&g->pmu);
    struct pentry *p = place_find(g, sku, user, h);
    if (p) {
        lru_unlink(g, p);
        lru_front(g, p);
        *out = p->v;
    }
    pthread_mutex_unlock(&g->pmu);
    return p != NULL;
}

void gate_place_put(struct gate *g, const char *sku, const char *user,
                    const struct gate_place_entry *in)
{
    if (in->rank < 0)
        return; /* not final yet (the start's shuffle will rescore it): never cached */
    unsigned h = place_hash(sku, user);
    pthread_mutex_lock(&g->pmu);
    struct pentry *p = place_find(g, sku, user, h);
    if (!p) {
        size_t ks = strlen(sku), ku = strlen(user);
        p = malloc(sizeof(*p) + ks + ku + 2);
        if (!p) {
            pthread_mutex_unlock(&g->pmu);
            return;
        }
        memcpy(p->key, sku, ks);
        p->key[ks] = '\n';
        memcpy(p->key + ks + 1, user, ku + 1);
        p->hash = h;
        p->prev = p->next = NULL;
        p->hnext = g->pbucket[h % PLACE_BUCKETS];
        g->pbucket[h % PLACE_BUCKETS] = p;
        g->nplaces++;
        while (g->nplaces > GATE_PLACES_MAX && g->lru_tail)
            place_drop(g, g->lru_tail);
    } else {
        lru_unlink(g, p);
    }
    p->v = *in;
    lru_front(g, p);
    pthread_mutex_unlock(&g->pmu);
}

/* ---- the table ---- */

struct gate *gate_new(struct app *app)
{
    struct gate *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->pbucket = calloc(PLACE_BUCKETS, sizeof(*g->pbucket));
    if (!g->pbucket) {
        free(g);
        return NULL;
    }
    g->app = app;
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_init(&g->pmu, NULL);
    return g;
}

void gate_free(struct gate *g)
{
    if (!g)
        return;
    gate_stop(g);
    for (int b = 0; b < SKU_BUCKETS; b++)
        while (g->bucket[b]) {
            struct gentry *e = g->bucket[b];
            g->bucket[b] = e->next;
            free(e);
        }
    while (g->lru_head) {
        struct pentry *p = g->lru_head;
        g->lru_head = p->next;
        free(p);
    }
    free(g->pbucket);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->pmu);
    free(g);
}

void gate_stats(struct gate *g, struct gate_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->joins = atomic_load(&m_joins);
    out->polls_memory = atomic_load(&m_polls_mem);
    out->polls_redis = atomic_load(&m_polls_redis);
    out->admitted = atomic_load(&m_admitted);
    out->ticks = atomic_load(&m_ticks);
    out->tick_failures = atomic_load(&m_tick_fails);
    out->wait_err_count = atomic_load(&m_wait_err_count);
    out->wait_err_sum_s = (double)atomic_load(&m_wait_err_ms) / 1000.0;
    if (!g)
        return;
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&g->mu);
    for (int b = 0; b < SKU_BUCKETS; b++)
        for (const struct gentry *e = g->bucket[b]; e; e = e->next) {
            if (!e->have || e->snap.st.code != STORE_GATE_OK || now - e->active_ms > GATE_ACTIVE_MS)
                continue;
            out->skus++;
            out->length += e->snap.st.length - e->snap.st.served;
            out->live += e->snap.st.live;
        }
    pthread_mutex_unlock(&g->mu);
}
