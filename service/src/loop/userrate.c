/*
 * userrate — the per-user request rate shared through Redis; see userrate.h for the rule and
 * its bound. A table of users striped under USERRATE_STRIPES mutexes (requests of different
 * users rarely meet on a lock); each stripe keeps the users whose counts grew past the first
 * request on a dirty list, which is all the flusher walks every USERRATE_FLUSH_MS. Entries of
 * windows past are freed once a second.
 */
#include "userrate.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "log.h"
#include "metrics.h"
#include "rclock.h"
#include "request.h"
#include "store.h"
#include "store_lua.h"
#include "validate.h"

#define USERRATE_STRIPES 64
#define USERRATE_BUCKETS 256 /* per stripe */

struct ur_entry {
    struct ur_entry *next;  /* in its bucket */
    struct ur_entry *dnext; /* on its stripe's dirty list */
    int dirty;
    int64_t win;              /* the window of the counts below */
    int tried, adm;           /* here, in win */
    int utried, uadm;         /* here, in win, not yet sent */
    long long g_tried, g_adm; /* every instance's in win, as last learnt (what we sent in) */
    long long prev_tried;     /* here, in win - 1 */
    long long prev_g_tried;   /* every instance's in win - 1, as known */
    long long cap;            /* the most this instance lets through in win */
    char user[];
};

struct ur_stripe {
    pthread_mutex_t lock;
    struct ur_entry *buckets[USERRATE_BUCKETS];
    struct ur_entry *dirty;
    long n;
};

/* One flush: the users' counts in flight, freed when the last reply came. */
struct ur_item {
    struct ur_batch *batch;
    int64_t win;
    int adm, tried;
    char user[VALIDATE_PRINTABLE_MAX + 1];
};

struct ur_batch {
    struct userrate *ur;
    int n, left;
    struct ur_item items[];
};

struct userrate {
    long long rps;
    lc_script *script;
    struct event_base *base; /* the flusher's loop, NULL while stopped */
    lc_async_client *lc;
    struct event *timer;
    struct ur_batch *inflight; /* at most one */
    int64_t last_gc_ms;
    struct ur_stripe stripes[USERRATE_STRIPES];
};

/* FNV-1a: the stripe and the bucket of a user. */
static uint64_t hash_user(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

struct userrate *userrate_new(int rps)
{
    if (rps < 1)
        return NULL;
    struct userrate *ur = calloc(1, sizeof(*ur));
    if (!ur)
        return NULL;
    ur->rps = rps;
    if (lc_script_new(STORE_LUA_USER_RATE, &ur->script) != LC_OK) {
        free(ur);
        return NULL;
    }
    for (int i = 0; i < USERRATE_STRIPES; i++)
        pthread_mutex_init(&ur->stripes[i].lock, NULL);
    return ur;
}

void userrate_free(struct userrate *ur)
{
    if (!ur)
        return;
    for (int i = 0; i < USERRATE_STRIPES; i++) {
        struct ur_stripe *s = &ur->stripes[i];
        for (int b = 0; b < USERRATE_BUCKETS; b++)
            for (struct ur_entry *e = s->buckets[b], *nx; e; e = nx) {
                nx = e->next;
                free(e);
            }
        pthread_mutex_destroy(&s->lock);
    }
    if (ur->inflight)
        ur->inflight->ur = NULL; /* its replies (LC_ESTATE) free it */
    lc_script_free(ur->script);
    free(ur);
}

/* The entry of user in s (the stripe locked), made when absent when make; NULL when absent or
 * out of memory. */
static struct ur_entry *find(struct ur_stripe *s, uint64_t h, const char *user, int make)
{
    struct ur_entry **head = &s->buckets[(h >> 8) % USERRATE_BUCKETS];
    for (struct ur_entry *e = *head; e; e = e->next)
        if (strcmp(e->user, user) == 0)
            return e;
    if (!make)
        return NULL;
    size_t len = strlen(user);
    struct ur_entry *e = calloc(1, sizeof(*e) + len + 1);
    if (!e)
        return NULL;
    memcpy(e->user, user, len + 1);
    e->win = -1;
    e->next = *head;
    *head = e;
    s->n++;
    return e;
}

/* This instance's cap in a window whose previous one had prev here and prev_g everywhere. */
static long long cap_of(long long rps, long long prev, long long prev_g)
{
    if (prev_g <= rps || prev_g <= 0)
        return rps;
    long long c = (rps * prev + prev_g - 1) / prev_g;
    return c < 1 ? 1 : c;
}

/* Moves e to window w (no-op when already there). */
static void roll(struct userrate *ur, struct ur_entry *e, int64_t w)
{
    if (e->win == w)
        return;
    long long pt = 0, pg = 0;
    if (w == e->win + 1) {
        pt = e->tried;
        pg = e->g_tried + e->utried;
        if (pg < pt)
            pg = pt;
    }
    /* unsent counts of an ended window are dropped: they can no longer change a decision */
    e->win = w;
    e->tried = e->adm = e->utried = e->uadm = 0;
    e->g_tried = e->g_adm = 0;
    e->prev_tried = pt;
    e->prev_g_tried = pg;
    e->cap = cap_of(ur->rps, pt, pg);
}

static int64_t window_of(int64_t now_ms)
{
    return now_ms / USERRATE_WINDOW_MS;
}

int userrate_take(struct userrate *ur, const char *user, int64_t now_ms)
{
    if (!ur || !user || !*user)
        return 0;
    uint64_t h = hash_user(user);
    struct ur_stripe *s = &ur->stripes[h % USERRATE_STRIPES];
    int64_t w = window_of(now_ms);
    pthread_mutex_lock(&s->lock);
    struct ur_entry *e = find(s, h, user, 1);
    if (!e) {
        pthread_mutex_unlock(&s->lock);
        return 0; /* out of memory: let through rather than refuse on our own failure */
    }
    roll(ur, e, w);
    e->tried++;
    e->utried++;
    int ok = e->adm < e->cap && e->g_adm + e->uadm < ur->rps;
    if (ok) {
        e->adm++;
        e->uadm++;
    }
    if (!e->dirty && e->tried >= 2) {
        e->dirty = 1;
        e->dnext = s->dirty;
        s->dirty = e;
    }
    pthread_mutex_unlock(&s->lock);
    if (ok)
        return 0;
    int64_t left = (w + 1) * USERRATE_WINDOW_MS - now_ms;
    return (int)((left + 999) / 1000);
}

/* Redis's clock as this instance knows it; the wall clock without a young estimate. */
static int64_t now_ms(void)
{
    int64_t now = 0, err = 0;
    if (rclock_now(&now, &err) == 0)
        return now;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int user_rate_check(struct app *app, const char *user, struct response *res)
{
    int retry = userrate_take(app->user_rate, user, now_ms());
    if (retry == 0)
        return 0;
    metrics_user_rate_refused();
    response_error(res, ERROR_RATE_LIMITED, "too many requests from this user");
    res->retry_after = retry;
    return -1;
}

void userrate_learn(struct userrate *ur, const char *user, int64_t win, long long adm,
                    long long tried, long long prev_tried)
{
    if (!ur)
        return;
    uint64_t h = hash_user(user);
    struct ur_stripe *s = &ur->stripes[h % USERRATE_STRIPES];
    pthread_mutex_lock(&s->lock);
    struct ur_entry *e = find(s, h, user, 0);
    if (e && e->win == win) {
        if (adm > e->g_adm)
            e->g_adm = adm;
        if (tried > e->g_tried)
            e->g_tried = tried;
        if (prev_tried > e->prev_g_tried) {
            /* the window before, complete now that every instance's late counts are in */
            e->prev_g_tried = prev_tried;
            e->cap = cap_of(ur->rps, e->prev_tried, prev_tried);
        }
    }
    pthread_mutex_unlock(&s->lock);
}

void userrate_drain(struct userrate *ur, int64_t now_ms,
                    void (*fn)(const char *user, int64_t win, int adm, int tried, void *arg),
                    void *arg)
{
    if (!ur)
        return;
    int64_t w = window_of(now_ms);
    for (int i = 0; i < USERRATE_STRIPES; i++) {
        struct ur_stripe *s = &ur->stripes[i];
        pthread_mutex_lock(&s->lock);
        for (struct ur_entry *e = s->dirty; e; e = e->dnext) {
            e->dirty = 0;
            roll(ur, e, w); /* a user quiet since an older window has nothing to send */
            if (e->utried > 0)
                fn(e->user, e->win, e->uadm, e->utried, arg);
            e->utried = e->uadm = 0;
        }
        s->dirty = NULL;
        pthread_mutex_unlock(&s->lock);
    }
}

/* Frees the entries of windows before the last one (not on a dirty list: drained first). */
static void gc(struct userrate *ur, int64_t now_ms)
{
    int64_t w = window_of(now_ms);
    for (int i = 0; i < USERRATE_STRIPES; i++) {
        struct ur_stripe *s = &ur->stripes[i];
        pthread_mutex_lock(&s->lock);
        for (int b = 0; b < USERRATE_BUCKETS; b++) {
            struct ur_entry **pp = &s->buckets[b];
            while (*pp) {
                struct ur_entry *e = *pp;
                if (!e->dirty && e->win < w - 1) {
                    *pp = e->next;
                    free(e);
                    s->n--;
                } else {
                    pp = &e->next;
                }
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
}

long userrate_tracked(struct userrate *ur)
{
    long n = 0;
    if (!ur)
        return 0;
    for (int i = 0; i < USERRATE_STRIPES; i++) {
        pthread_mutex_lock(&ur->stripes[i].lock);
        n += ur->stripes[i].n;
        pthread_mutex_unlock(&ur->stripes[i].lock);
    }
    return n;
}

/* ---- the flusher ---- */

static void on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct ur_item *it = arg;
    struct ur_batch *b = it->batch;
    if (b->ur) {
        if (st == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 4) {
            userrate_learn(b->ur, it->user, store_reply_int(r->element[0], -1),
                           store_reply_int(r->element[1], 0), store_reply_int(r->element[2], 0),
                           store_reply_int(r->element[3], 0));
        } else if (st != LC_ESTATE) {
            metrics_user_rate_flush_error();
            log_msg(CONFIG_LOG_WARN, "user_rate", "a user's count was not taken: %s",
                    errstr && *errstr ? errstr : "unexpected reply");
        }
    }
    if (--b->left == 0) {
        if (b->ur && b->ur->inflight == b)
            b->ur->inflight = NULL;
        free(b);
    }
}

struct collect {
    struct ur_item *items;
    int n, cap;
};

static void collect_one(const char *user, int64_t win, int adm, int tried, void *arg)
{
    struct collect *c = arg;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        struct ur_item *it = realloc(c->items, (size_t)cap * sizeof(*it));
        if (!it)
            return; /* out of memory: this user's counts are lost (lenient) */
        c->items = it;
        c->cap = cap;
    }
    struct ur_item *it = &c->items[c->n++];
    it->win = win;
    it->adm = adm;
    it->tried = tried;
    snprintf(it->user, sizeof(it->user), "%s", user);
}

void userrate_flush(struct userrate *ur)
{
    if (!ur || !ur->lc || ur->inflight)
        return;
    int64_t now = now_ms();
    struct collect c = {0};
    userrate_drain(ur, now, collect_one, &c);
    if (c.n > 0) {
        struct ur_batch *b = malloc(sizeof(*b) + (size_t)c.n * sizeof(struct ur_item));
        if (b) {
            b->ur = ur;
            b->n = c.n;
            b->left = c.n + 1; /* + 1 until every send was made */
            memcpy(b->items, c.items, (size_t)c.n * sizeof(struct ur_item));
            ur->inflight = b;
            for (int i = 0; i < c.n; i++) {
                struct ur_item *it = &b->items[i];
                it->batch = b;
                char key[STORE_USER_KEY_MAX], w[24], a[16], t[16];
                store_user_key(key, it->user, STORE_KEY_USER_urate);
                snprintf(w, sizeof(w), "%lld", (long long)it->win);
                snprintf(a, sizeof(a), "%d", it->adm);
                snprintf(t, sizeof(t), "%d", it->tried);
                const char *keys[] = {key};
                const char *args[] = {w, a, t};
                if (lc_async_script(ur->lc, ur->script, 1, keys, NULL, 3, args, NULL, on_reply,
                                    it) != LC_OK) {
                    metrics_user_rate_flush_error();
                    b->left--;
                }
            }
            metrics_user_rate_flushed(c.n);
            if (--b->left == 0) {
                ur->inflight = NULL;
                free(b);
            }
        }
    }
    free(c.items);
    if (now - ur->last_gc_ms >= USERRATE_WINDOW_MS) {
        ur->last_gc_ms = now;
        gc(ur, now);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct userrate *ur = arg;
    userrate_flush(ur);
}

int userrate_start(struct userrate *ur, struct event_base *base, lc_async_client *lc)
{
    if (!ur)
        return 0;
    ur->base = base;
    ur->lc = lc;
    ur->timer = event_new(base, -1, EV_PERSIST, on_tick, ur);
    if (!ur->timer)
        return -1;
    struct timeval tv = {0, USERRATE_FLUSH_MS * 1000};
    return event_add(ur->timer, &tv);
}

void userrate_stop(struct userrate *ur)
{
    if (!ur)
        return;
    if (ur->timer)
        event_free(ur->timer);
    ur->timer = NULL;
    ur->lc = NULL;
    ur->base = NULL;
}
