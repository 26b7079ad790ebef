/*
 * The per-instance status snapshots; see statsnap.h. One mutex over a table of entries (the
 * critical sections copy a pointer or link a waiter); a refresh runs as an internal request
 * (areq) on the loop of the reader that found the snapshot stale.
 */
#include "statsnap.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "areq.h"
#include "clock.h"
#include "config.h"
#include "hash.h"
#include "log.h"
#include "rules.h"
#include "sha256.h"
#include "status_read.h"
#include "validate.h"
#include "worker.h"

enum { BUCKETS = 4096, EVICT_SCAN = 64, IDLE_EVICT_MS = 60000 };

struct snap_entry;

/* A request waiting for an entry's refresh, linked in the entry's list of its loop. */
struct waiter {
    struct statsnap *sn;
    struct areq *ar;
    statsnap_fn cb;
    struct snap_entry *e;
    int loop;
    unsigned round; /* the refresh that answers it (struct snap_entry's round) */
    struct waiter *prev, *next;
};

struct snap_entry {
    char sku[VALIDATE_SKU_MAX + 1];
    struct snap *cur;   /* the last snapshot, or NULL */
    int64_t checked_ms; /* clock_mono_ms() when the read that confirmed cur was sent; 0: stale */
    int64_t used_ms;    /* last asked for */
    unsigned gen;       /* statsnap_forget's: a refresh begun before it does not confirm */
    unsigned round;     /* refreshes started: the one in flight, or the last */
    int refreshing;
    int segments; /* the layout's segment count as last read (the script's keys) */
    int failed;   /* the last refresh failed: why, oos (for the waiters it wakes) */
    int oos;
    char why[200];
    int nwaiting;          /* waiters on every loop */
    int wakes;             /* worker_post'ed wakes not yet run */
    struct waiter **waits; /* [nloops] heads, made with the first waiter */
    struct snap_entry *next;
};

struct statsnap {
    int refresh_ms;
    char cache_control[48];
    pthread_mutex_t mu;
    struct snap_entry *bucket[BUCKETS];
    long long entries;
    int cursor; /* the next bucket the eviction scan looks at */
    int nloops;
    struct worker **loops; /* [nloops], each filled by its first waiter */
    statsnap_change_fn on_change;
    void *on_change_arg;
    struct statsnap_stats stats;
};

/* ---- snapshots ---- */

void statsnap_ref(struct snap *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void statsnap_unref(struct snap *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        free(s->body);
        free(s);
    }
}

/* "not_started", "open" or "ended": the window of status st at now_ms. */
static const char *sale_state(const json_t *st, int64_t now_ms)
{
    int64_t at;
    const char *s = json_string_value(json_object_get(st, "sale_start"));
    if (s && rules_parse_time(s, strlen(s), &at) == 0 && now_ms < at)
        return "not_started";
    s = json_string_value(json_object_get(st, "sale_end"));
    if (s && rules_parse_time(s, strlen(s), &at) == 0 && now_ms >= at)
        return "ended";
    return "open";
}

/* The snapshot of status st (a SKU's, consumed) or, st NULL, of an unknown SKU; prev when it
 * holds the same status (a new reference to it). NULL out of memory. */
static struct snap *snap_make(const struct statsnap *sn, json_t *st, struct snap *prev)
{
    int64_t now = clock_wall_ms();
    struct response tmp = {0};
    if (!st) {
        response_error(&tmp, ERROR_UNKNOWN_SKU, "no such sku");
        st = tmp.body;
        tmp.body = NULL;
    }
    int found = tmp.status == 0;
    const char *sale = found ? sale_state(st, now) : "open";
    if (found)
        json_object_set_new(st, "sale", json_string(sale));
    char *content = st ? json_dumps(st, JSON_COMPACT) : NULL;
    if (!content) {
        json_decref(st);
        return NULL;
    }
    char id[17];
    sha256_hex_prefix(content, strlen(content), id, 16);
    free(content);
    if (prev && prev->found == found && strcmp(prev->id, id) == 0) {
        json_decref(st);
        statsnap_ref(prev);
        return prev;
    }
    struct snap *s = calloc(1, sizeof(*s));
    if (!s) {
        json_decref(st);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->found = found;
    memcpy(s->id, id, sizeof(id));
    s->as_of_ms = now;
    s->sale = sale;
    if (found) {
        char at[32];
        rules_format_time(now, at);
        json_object_set_new(st, "as_of", json_string(at));
        json_object_set_new(st, "refresh_ms", json_integer(sn->refresh_ms));
        s->version = json_integer_value(json_object_get(st, "version"));
        s->remaining = json_integer_value(json_object_get(st, "remaining"));
        s->sold_out = json_is_true(json_object_get(st, "sold_out"));
    }
    s->body = json_dumps(st, JSON_COMPACT);
    json_decref(st);
    if (!s->body) {
        free(s);
        return NULL;
    }
    s->len = strlen(s->body);
    char hex[17];
    sha256_hex_prefix(s->body, s->len, hex, 16);
    snprintf(s->etag, sizeof(s->etag), "\"%s\"", hex);
    return s;
}

/* ---- the table ---- */

struct statsnap *statsnap_new(int refresh_ms)
{
    struct statsnap *sn = calloc(1, sizeof(*sn));
    if (!sn)
        return NULL;
    sn->refresh_ms = refresh_ms;
    /* whole seconds (RFC 9111); a refresh under 1 s is cached for 1 s at most by others */
    snprintf(sn->cache_control, sizeof(sn->cache_control), "public, max-age=%d",
             (refresh_ms + 999) / 1000);
    pthread_mutex_init(&sn->mu, NULL);
    return sn;
}

static void entry_free(struct snap_entry *e)
{
    statsnap_unref(e->cur);
    free(e->waits);
    free(e);
}

void statsnap_free(struct statsnap *sn)
{
    if (!sn)
        return;
    for (int i = 0; i < BUCKETS; i++)
        while (sn->bucket[i]) {
            struct snap_entry *e = sn->bucket[i];
            sn->bucket[i] = e->next;
            entry_free(e);
        }
    free(sn->loops);
    pthread_mutex_destroy(&sn->mu);
    free(sn);
}

const char *statsnap_cache_control(const struct statsnap *sn)
{
    return sn->cache_control;
}

void statsnap_on_change(struct statsnap *sn, statsnap_change_fn fn, void *arg)
{
    sn->on_change = fn;
    sn->on_change_arg = arg;
}

void statsnap_stats(struct statsnap *sn, struct statsnap_stats *out)
{
    pthread_mutex_lock(&sn->mu);
    *out = sn->stats;
    out->entries = sn->entries;
    pthread_mutex_unlock(&sn->mu);
}

static unsigned bucket_of(const char *sku)
{
    return hash_str(HASH_FNV_BASIS, sku) % BUCKETS;
}

static int evictable(const struct snap_entry *e, int64_t now)
{
    return !e->refreshing && e->nwaiting == 0 && e->wakes == 0 && now - e->used_ms > IDLE_EVICT_MS;
}

/* Frees up to one idle entry, looking at EVICT_SCAN buckets from the cursor. With sn->mu. */
static int evict_one(struct statsnap *sn, int64_t now)
{
    for (int i = 0; i < EVICT_SCAN; i++) {
        int b = sn->cursor;
        sn->cursor = (sn->cursor + 1) % BUCKETS;
        for (struct snap_entry **p = &sn->bucket[b]; *p; p = &(*p)->next)
            if (evictable(*p, now)) {
                struct snap_entry *e = *p;
                *p = e->next;
                entry_free(e);
                sn->entries--;
                return 1;
            }
    }
    return 0;
}

/* sku's entry, made when create is set and there is room. With sn->mu. */
static struct snap_entry *entry_find(struct statsnap *sn, const char *sku, int create, int64_t now)
{
    unsigned b = bucket_of(sku);
    for (struct snap_entry *e = sn->bucket[b]; e; e = e->next)
        if (strcmp(e->sku, sku) == 0)
            return e;
    if (!create || (sn->entries >= STATSNAP_MAX_ENTRIES && !evict_one(sn, now)))
        return NULL;
    struct snap_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    snprintf(e->sku, sizeof(e->sku), "%s", sku);
    e->next = sn->bucket[b];
    sn->bucket[b] = e;
    sn->entries++;
    return e;
}

static int fresh(const struct statsnap *sn, const struct snap_entry *e, int64_t now)
{
    return e->cur && e->checked_ms > 0 && now - e->checked_ms < sn->refresh_ms;
}

int statsnap_fresh(struct statsnap *sn, const char *sku, struct snap **out, int64_t *age_ms)
{
    int64_t now = clock_mono_ms();
    int ok = 0;
    pthread_mutex_lock(&sn->mu);
    struct snap_entry *e = entry_find(sn, sku, 0, now);
    if (e && fresh(sn, e, now)) {
        e->used_ms = now;
        statsnap_ref(e->cur);
        *out = e->cur;
        *age_ms = now - e->checked_ms;
        ok = 1;
    }
    pthread_mutex_unlock(&sn->mu);
    return ok;
}

void statsnap_forget(struct statsnap *sn, const char *sku)
{
    pthread_mutex_lock(&sn->mu);
    struct snap_entry *e = entry_find(sn, sku, 0, 0);
    if (e) {
        e->checked_ms = 0;
        e->gen++;
    }
    pthread_mutex_unlock(&sn->mu);
}

/* ---- waiters ---- */

static void unlink_waiter(struct waiter *w)
{
    struct snap_entry *e = w->e;
    if (w->prev)
        w->prev->next = w->next;
    else
        e->waits[w->loop] = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    e->nwaiting--;
}

/* Answers w from its entry as it stands (taken off the list already) and frees it. */
static void waiter_answer(struct statsnap *sn, struct waiter *w, struct snap *s, int64_t age,
                          const char *why, int oos)
{
    struct areq *ar = w->ar;
    statsnap_fn cb = w->cb;
    free(w);
    ar->cancel = NULL;
    ar->handler = NULL;
    (void)sn;
    cb(ar, s ? 1 : -1, s, age, why, oos);
}

/* Takes the waiters of loop that refresh round (or an earlier one) answers off e (with
 * sn->mu) and answers them (without): a waiter that came after that refresh was sent waits for
 * the next one. */
static void answer_loop(struct statsnap *sn, struct snap_entry *e, int loop, unsigned round)
{
    pthread_mutex_lock(&sn->mu);
    struct waiter *list = NULL;
    int n = 0;
    for (struct waiter *w = e->waits ? e->waits[loop] : NULL, *next; w; w = next) {
        next = w->next;
        if ((int)(w->round - round) > 0)
            continue;
        unlink_waiter(w);
        w->next = list;
        list = w;
        n++;
    }
    struct snap *s = e->failed ? NULL : e->cur;
    if (s)
        for (int i = 0; i < n; i++)
            statsnap_ref(s);
    int64_t age = s ? clock_mono_ms() - e->checked_ms : 0;
    if (s && e->checked_ms == 0)
        age = 0; /* forgotten since: the answer is this refresh's */
    char why[200];
    snprintf(why, sizeof(why), "%s", e->why);
    int oos = e->oos;
    pthread_mutex_unlock(&sn->mu);
    while (list) {
        struct waiter *w = list;
        list = w->next;
        waiter_answer(sn, w, s, age < 0 ? 0 : age, why, oos);
    }
}

struct wake {
    struct statsnap *sn;
    struct snap_entry *e;
    int loop;
    unsigned round;
};

static void on_wake(void *arg)
{
    struct wake *wk = arg;
    answer_loop(wk->sn, wk->e, wk->loop, wk->round);
    pthread_mutex_lock(&wk->sn->mu);
    wk->e->wakes--;
    pthread_mutex_unlock(&wk->sn->mu);
    free(wk);
}

/* The loop is ending: the waiter is answered 503 (the refresh may never end on its loop). */
static void on_waiter_cancel(struct areq *ar)
{
    struct waiter *w = ar->handler;
    struct statsnap *sn = w->sn;
    pthread_mutex_lock(&sn->mu);
    if (w->e->waits && (w->prev || w->e->waits[w->loop] == w))
        unlink_waiter(w);
    pthread_mutex_unlock(&sn->mu);
    waiter_answer(sn, w, NULL, 0, "the service is shutting down", 1);
}

/* ---- the refresh ---- */

struct refresh {
    struct statsnap *sn;
    struct app *app;
    struct snap_entry *e; /* not evicted while refreshing */
    struct areq *ar;      /* the refresh's own request (its loop, client and log context) */
    char sku[VALIDATE_SKU_MAX + 1];
    unsigned gen;
    unsigned round; /* its number (struct snap_entry's round) */
    int64_t sent_ms;
};

static void refresh_start(struct statsnap *sn, struct app *app, struct areq_env *env,
                          struct snap_entry *e, unsigned gen, unsigned round, int segments);

/* Publishes the refresh's result: st (consumed) the status, NULL with found 0 an unknown SKU,
 * found -1 a failure (why, oos). Wakes every waiter, then ends the refresh. */
static void refresh_end(struct refresh *r, int found, json_t *st, const char *why, int oos)
{
    struct statsnap *sn = r->sn;
    struct snap_entry *e = r->e;
    int loop = r->ar->env->id;
    int nseg = found > 0 && st ? (int)json_array_size(json_object_get(st, "segments")) : 0;
    /* built outside the lock: compared with the snapshot it may replace */
    pthread_mutex_lock(&sn->mu);
    struct snap *prev = e->cur;
    if (prev)
        statsnap_ref(prev);
    pthread_mutex_unlock(&sn->mu);
    struct snap *s = NULL;
    if (found >= 0) {
        s = snap_make(sn, found ? st : NULL, prev);
        if (!found)
            json_decref(st);
        if (!s) {
            found = -1;
            why = "out of memory";
            oos = 0;
        }
    } else {
        json_decref(st);
    }
    int changed = s && s != prev;
    pthread_mutex_lock(&sn->mu);
    sn->stats.refreshes++;
    if (nseg > 0) /* the next refresh's script reads that many segments at once */
        e->segments = nseg;
    if (found < 0) {
        sn->stats.refresh_fails++;
        e->failed = 1;
        e->oos = oos;
        snprintf(e->why, sizeof(e->why), "%s", why ? why : "unexpected reply");
    } else {
        e->failed = 0;
        e->why[0] = '\0';
        statsnap_unref(e->cur);
        e->cur = s; /* the table's reference */
        statsnap_ref(s);
        e->checked_ms = e->gen == r->gen ? r->sent_ms : 0;
        if (changed)
            sn->stats.changes++;
    }
    if (found >= 0 && e->gen != r->gen && e->nwaiting > 0) {
        /* An admin change was answered here after this read was sent (statsnap_forget): a
         * waiter may have come after that answer, so every waiter gets a read sent after it. */
        unsigned gen = e->gen, round = ++e->round;
        int segments = e->segments;
        pthread_mutex_unlock(&sn->mu);
        statsnap_unref(prev);
        if (changed && sn->on_change)
            sn->on_change(sn->on_change_arg, e->sku, s);
        statsnap_unref(s);
        refresh_start(sn, r->app, r->ar->env, e, gen, round, segments);
        areq_done(r->ar);
        return;
    }
    e->refreshing = 0;
    /* the other loops' waiters are woken on their loops (their lists are theirs to touch) */
    int nloops = sn->nloops;
    char *post = nloops > 0 ? calloc((size_t)nloops, 1) : NULL;
    for (int j = 0; post && e->waits && j < nloops; j++)
        if (j != loop && e->waits[j] && sn->loops[j]) {
            post[j] = 1;
            e->wakes++;
        }
    pthread_mutex_unlock(&sn->mu);
    statsnap_unref(prev);
    if (changed && sn->on_change)
        sn->on_change(sn->on_change_arg, e->sku, s);
    statsnap_unref(s);
    answer_loop(sn, e, loop, r->round);
    for (int j = 0; post && j < nloops; j++) {
        if (!post[j])
            continue;
        struct wake *wk = malloc(sizeof(*wk));
        if (!wk) { /* cannot wake them: they end by their deadline (503) */
            pthread_mutex_lock(&sn->mu);
            e->wakes--;
            pthread_mutex_unlock(&sn->mu);
            continue;
        }
        *wk = (struct wake){sn, e, j, r->round};
        worker_post(sn->loops[j], on_wake, wk);
    }
    free(post);
    areq_done(r->ar);
}

static void on_exact(void *arg, int rc, json_t *status, const char *why, int out_of_step)
{
    struct refresh *r = arg;
    refresh_end(r, rc, status, why, out_of_step);
}

static void on_refresh_ready(void *http)
{
    struct refresh *r = http;
    areq_free(r->ar);
    free(r);
}

/* Starts e's refresh on env's loop (e->refreshing set by the caller, with its gen). */
static void refresh_start(struct statsnap *sn, struct app *app, struct areq_env *env,
                          struct snap_entry *e, unsigned gen, unsigned round, int segments)
{
    struct refresh *r = calloc(1, sizeof(*r));
    char rid[VALIDATE_SKU_MAX + 16];
    snprintf(rid, sizeof(rid), "status-%s", e->sku);
    struct request req = {.method = HTTP_GET, .path = "/statsnap", .request_id = rid};
    struct areq *ar = r ? areq_new(env, app, &req, on_refresh_ready, r) : NULL;
    if (!ar) {
        free(r);
        pthread_mutex_lock(&sn->mu);
        e->refreshing = 0;
        e->failed = 1;
        e->oos = 0;
        snprintf(e->why, sizeof(e->why), "out of memory");
        pthread_mutex_unlock(&sn->mu);
        log_msg(CONFIG_LOG_WARN, "status_refresh_failed", "sku %s: out of memory", e->sku);
        answer_loop(sn, e, env->id, round); /* the other loops' end by their deadline */
        return;
    }
    r->sn = sn;
    r->app = app;
    r->e = e;
    r->ar = ar;
    r->gen = gen;
    r->round = round;
    r->sent_ms = clock_mono_ms();
    snprintf(r->sku, sizeof(r->sku), "%s", e->sku);
    status_read_async(ar, r->sku, segments, on_exact, r);
}

/* The loop table, made by the first waiter (every loop's env says how many). With sn->mu. */
static int loops_ready(struct statsnap *sn, const struct areq_env *env)
{
    if (!sn->loops) {
        sn->loops = calloc((size_t)env->nloops, sizeof(*sn->loops));
        if (!sn->loops)
            return -1;
        sn->nloops = env->nloops;
    }
    if (env->id < 0 || env->id >= sn->nloops)
        return -1;
    if (!sn->loops[env->id])
        sn->loops[env->id] = worker_current();
    return sn->loops[env->id] ? 0 : -1;
}

void statsnap_wait(struct statsnap *sn, struct areq *ar, const char *sku, statsnap_fn cb)
{
    int64_t now = clock_mono_ms();
    struct waiter *w = calloc(1, sizeof(*w));
    pthread_mutex_lock(&sn->mu);
    struct snap_entry *e = w && loops_ready(sn, ar->env) == 0 ? entry_find(sn, sku, 1, now) : NULL;
    if (!e) { /* the table is full (or out of memory): read exactly */
        sn->stats.uncached++;
        pthread_mutex_unlock(&sn->mu);
        free(w);
        cb(ar, 0, NULL, 0, NULL, 0);
        return;
    }
    e->used_ms = now;
    if (fresh(sn, e, now)) {
        struct snap *s = e->cur;
        statsnap_ref(s);
        int64_t age = now - e->checked_ms;
        pthread_mutex_unlock(&sn->mu);
        free(w);
        cb(ar, 1, s, age, NULL, 0);
        return;
    }
    if (!e->waits) {
        e->waits = calloc((size_t)sn->nloops, sizeof(*e->waits));
        if (!e->waits) {
            pthread_mutex_unlock(&sn->mu);
            free(w);
            cb(ar, 0, NULL, 0, NULL, 0);
            return;
        }
    }
    int lead = !e->refreshing;
    if (lead)
        e->round++;
    *w = (struct waiter){
        .sn = sn, .ar = ar, .cb = cb, .e = e, .loop = ar->env->id, .round = e->round};
    w->next = e->waits[w->loop];
    if (w->next)
        w->next->prev = w;
    e->waits[w->loop] = w;
    e->nwaiting++;
    ar->handler = w;
    ar->cancel = on_waiter_cancel;
    e->refreshing = 1;
    unsigned gen = e->gen, round = e->round;
    int segments = e->segments;
    pthread_mutex_unlock(&sn->mu);
    if (lead)
        refresh_start(sn, ar->app, ar->env, e, gen, round, segments);
}

void statsnap_poke(struct statsnap *sn, struct app *app, struct areq_env *env, const char *sku)
{
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&sn->mu);
    struct snap_entry *e = entry_find(sn, sku, 1, now);
    int lead = e && !e->refreshing && !fresh(sn, e, now);
    unsigned gen = 0, round = 0;
    int segments = 0;
    if (lead) {
        e->refreshing = 1;
        e->used_ms = now;
        gen = e->gen;
        round = ++e->round;
        segments = e->segments;
    }
    pthread_mutex_unlock(&sn->mu);
    if (lead)
        refresh_start(sn, app, env, e, gen, round, segments);
}
