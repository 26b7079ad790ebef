/* seggate — a loop's per-segment FIFO gates (see seggate.h): a small chained hash table. */
#include "seggate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "validate.h"

#define SEGGATE_BUCKETS 1024 /* a power of two; gates live as long as an order uses them */

struct gate {
    char sku[VALIDATE_SKU_MAX + 1];
    int k;
    int queued;
    struct seggate_waiter *head, *tail;
    struct gate *next;
};

#define SEGGATE_HINTS 256 /* a power of two: busy-elsewhere hints, direct-mapped */

struct hint {
    char sku[VALIDATE_SKU_MAX + 1];
    int k;
    int ms;           /* the length of the last hint */
    int64_t until_ms; /* 0: an empty slot */
};

struct seggate {
    struct gate *b[SEGGATE_BUCKETS];
    struct gate *spare; /* one freed gate kept, so a busy segment does not malloc per order */
    struct hint hints[SEGGATE_HINTS];
};

static unsigned bucket(const char *sku, int k)
{
    return hash_bytes(hash_str(HASH_FNV_BASIS, sku), &k, sizeof(k)) & (SEGGATE_BUCKETS - 1);
}

static struct gate **slot(const struct seggate *g, const char *sku, int k)
{
    struct gate **p = (struct gate **)&g->b[bucket(sku, k)];
    while (*p && ((*p)->k != k || strcmp((*p)->sku, sku) != 0))
        p = &(*p)->next;
    return p;
}

struct seggate *seggate_new(void)
{
    return calloc(1, sizeof(struct seggate));
}

void seggate_free(struct seggate *g)
{
    if (!g)
        return;
    for (int i = 0; i < SEGGATE_BUCKETS; i++) {
        while (g->b[i]) {
            struct gate *n = g->b[i]->next;
            free(g->b[i]);
            g->b[i] = n;
        }
    }
    free(g->spare);
    free(g);
}

bool seggate_busy(const struct seggate *g, const char *sku, int k)
{
    return *slot(g, sku, k) != NULL;
}

int seggate_enter(struct seggate *g, const char *sku, int k)
{
    struct gate **p = slot(g, sku, k);
    if (*p)
        return -1; /* a caller's mistake: the gate is owned */
    struct gate *e = g->spare ? g->spare : malloc(sizeof(*e));
    if (!e)
        return -1;
    g->spare = NULL;
    memset(e, 0, sizeof(*e));
    snprintf(e->sku, sizeof(e->sku), "%s", sku);
    e->k = k;
    *p = e;
    return 0;
}

void seggate_queue(struct seggate *g, const char *sku, int k, struct seggate_waiter *w)
{
    struct gate *e = *slot(g, sku, k);
    w->next = NULL;
    w->prev = NULL;
    if (!e)
        return; /* never: the caller saw the gate busy on this loop's thread */
    w->prev = e->tail;
    if (e->tail)
        e->tail->next = w;
    else
        e->head = w;
    e->tail = w;
    e->queued++;
}

void seggate_unqueue(struct seggate *g, const char *sku, int k, struct seggate_waiter *w)
{
    struct gate *e = *slot(g, sku, k);
    if (!e)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else if (e->head == w)
        e->head = w->next;
    else
        return; /* not queued here */
    if (w->next)
        w->next->prev = w->prev;
    else
        e->tail = w->prev;
    w->next = w->prev = NULL;
    e->queued--;
}

struct seggate_waiter *seggate_leave(struct seggate *g, const char *sku, int k)
{
    struct gate **p = slot(g, sku, k);
    struct gate *e = *p;
    if (!e)
        return NULL;
    struct seggate_waiter *w = e->head;
    if (w) {
        e->head = w->next;
        if (e->head)
            e->head->prev = NULL;
        else
            e->tail = NULL;
        w->next = w->prev = NULL;
        e->queued--;
        return w;
    }
    *p = e->next;
    if (!g->spare)
        g->spare = e;
    else
        free(e);
    return NULL;
}

int seggate_queued(const struct seggate *g, const char *sku, int k)
{
    const struct gate *e = *slot(g, sku, k);
    return e ? e->queued : 0;
}

static struct hint *hint_slot(const struct seggate *g, const char *sku, int k)
{
    return (struct hint *)&g->hints[bucket(sku, k) & (SEGGATE_HINTS - 1)];
}

static bool hint_is(const struct hint *h, const char *sku, int k)
{
    return h->until_ms != 0 && h->k == k && strcmp(h->sku, sku) == 0;
}

void seggate_hint_busy(struct seggate *g, const char *sku, int k, int64_t now_ms, int ms,
                       int max_ms)
{
    struct hint *h = hint_slot(g, sku, k);
    if (hint_is(h, sku, k) && now_ms < h->until_ms + max_ms) {
        /* Found held again within max_ms of the last hint's end: another instance keeps it
         * busy (its queued orders take turns on it); walk past it twice as long. The window is
         * max_ms, not the hint's length, so that a loop slowed down (a loaded machine) whose
         * next look comes late still counts it as the same busy spell. */
        ms = h->ms * 2 > max_ms ? max_ms : h->ms * 2;
    } else {
        snprintf(h->sku, sizeof(h->sku), "%s", sku);
        h->k = k;
    }
    h->ms = ms;
    h->until_ms = now_ms + ms;
}

bool seggate_hinted_busy(const struct seggate *g, const char *sku, int k, int64_t now_ms)
{
    const struct hint *h = hint_slot(g, sku, k);
    return hint_is(h, sku, k) && now_ms < h->until_ms;
}

void seggate_hint_clear(struct seggate *g, const char *sku, int k)
{
    struct hint *h = hint_slot(g, sku, k);
    if (hint_is(h, sku, k))
        h->until_ms = 0;
}
