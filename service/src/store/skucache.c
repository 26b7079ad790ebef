/*
 * The per-instance SKU cache; see skucache.h. A fixed array of hash buckets with one mutex:
 * entries are small and the critical sections a few dozen instructions.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hash.h"
#include "skucache.h"

enum { BUCKETS = 1024 };

struct entry {
    char sku[65];
    int64_t version;
    int segments;
    int nempty;
    int64_t empty_since_ms; /* when the oldest empty mark was made */
    struct sku_rules rules;
    int64_t rules_at; /* when the read that brought the rules was sent (their age runs from
                         there: a rule change answered later is at most recheck_ms behind) */
    uint64_t empty[SKUCACHE_MAX_SEGMENTS / 64];
    uint64_t held[SKUCACHE_MAX_SEGMENTS / 64];
    struct entry *next;
};

struct skucache {
    int recheck_ms;
    pthread_mutex_t mu;
    struct entry *bucket[BUCKETS];
};

static unsigned hash(const char *s)
{
    return hash_str(HASH_FNV_BASIS, s) % BUCKETS;
}

struct skucache *skucache_new(int recheck_ms)
{
    struct skucache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->recheck_ms = recheck_ms;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void skucache_free(struct skucache *c)
{
    if (!c)
        return;
    for (int i = 0; i < BUCKETS; i++)
        while (c->bucket[i]) {
            struct entry *e = c->bucket[i];
            c->bucket[i] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The entry of sku, made when create is set. Called with c->mu held. */
static struct entry *find(struct skucache *c, const char *sku, int create)
{
    unsigned h = hash(sku);
    for (struct entry *e = c->bucket[h]; e; e = e->next)
        if (strcmp(e->sku, sku) == 0)
            return e;
    if (!create)
        return NULL;
    struct entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    strncpy(e->sku, sku, sizeof(e->sku) - 1);
    e->next = c->bucket[h];
    c->bucket[h] = e;
    return e;
}

static void clear_empty(struct entry *e)
{
    memset(e->empty, 0, sizeof(e->empty));
    e->nempty = 0;
}

void skucache_get(struct skucache *c, const char *sku, struct sku_view *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, sku, 0);
    if (e) {
        out->version = e->version;
        out->segments = e->segments;
        out->rules = e->rules;
        out->rules_stale = clock_mono_ms() - e->rules_at >= c->recheck_ms;
        memcpy(out->held, e->held, sizeof(out->held));
        if (e->nempty > 0) {
            int fresh = clock_mono_ms() - e->empty_since_ms < c->recheck_ms;
            if (e->nempty == e->segments) {
                out->sold_out = 1;
                out->recheck_due = !fresh;
                memcpy(out->empty, e->empty, sizeof(out->empty));
            } else if (fresh) {
                memcpy(out->empty, e->empty, sizeof(out->empty));
            } else {
                clear_empty(e);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
}

void skucache_set_layout(struct skucache *c, const char *sku, int64_t version, int segments,
                         const struct sku_rules *rules, int64_t read_ms)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, sku, 1);
    if (e && (e->version != version || e->segments != segments)) {
        e->version = version;
        e->segments = segments;
        clear_empty(e);
    }
    if (e) {
        e->rules = *rules;
        e->rules_at = read_ms;
    }
    pthread_mutex_unlock(&c->mu);
}

void skucache_mark_empty(struct skucache *c, const char *sku, int64_t version, int k)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, sku, 0);
    if (e && e->version == version && k >= 0 && k < e->segments &&
        !((e->empty[k / 64] >> (k % 64)) & 1)) {
        if (e->nempty == 0)
            e->empty_since_ms = clock_mono_ms();
        e->empty[k / 64] |= 1ULL << (k % 64);
        e->nempty++;
    }
    pthread_mutex_unlock(&c->mu);
}

void skucache_set_empty(struct skucache *c, const char *sku, int64_t version, const uint64_t *empty)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, sku, 0);
    if (e && e->version == version) {
        memcpy(e->empty, empty, sizeof(e->empty));
        e->nempty = 0;
        for (int k = 0; k < e->segments; k++)
            e->nempty += (int)((empty[k / 64] >> (k % 64)) & 1);
        e->empty_since_ms = clock_mono_ms();
    }
    pthread_mutex_unlock(&c->mu);
}

void skucache_set_held(struct skucache *c, const char *sku, int k, int held)
{
    if (k < 0 || k >= SKUCACHE_MAX_SEGMENTS)
        return;
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, sku, held);
    if (e) {
        if (held)
            e->held[k / 64] |= 1ULL << (k % 64);
        else
            e->held[k / 64] &= ~(1ULL << (k % 64));
    }
    pthread_mutex_unlock(&c->mu);
}

void skucache_forget(struct skucache *c, const char *sku)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = find(c, sku, 0);
    if (e) {
        e->version = 0;
        e->segments = 0;
        clear_empty(e);
    }
    pthread_mutex_unlock(&c->mu);
}

int skucache_foreach(struct skucache *c, int max,
                     void (*fn)(const char *sku, int segments, int empty, void *arg), void *arg)
{
    int n = 0;
    pthread_mutex_lock(&c->mu);
    int64_t now = clock_mono_ms();
    for (int b = 0; b < BUCKETS && n < max; b++) {
        for (const struct entry *e = c->bucket[b]; e && n < max; e = e->next) {
            if (e->version == 0)
                continue;
            int fresh = now - e->empty_since_ms < c->recheck_ms;
            fn(e->sku, e->segments, fresh || e->nempty == e->segments ? e->nempty : 0, arg);
            n++;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}
