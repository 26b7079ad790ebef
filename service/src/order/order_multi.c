/*
 * An order served from several segments, all or nothing (order_multi.h; docs/design.md "Orders
 * larger than one segment"). The states of one attempt, each waiting for one kind of answer:
 *
 *   M_TRY      a batch of try-locks (each reads the segment's stock and version)
 *   M_READ     a cart's item planned by a probe (rq.probe) that fell short: the other segments'
 *              stock (one GET each, pipelined), then M_TRY again planned from it
 *   M_WAIT     one acquire with waiting, in index order (after a try pass fell short with some
 *              segments busy: every lock dropped first, so waits only ever go up the indexes)
 *   M_INTENT   multi_begin.lua on the SKU's slot, then its WAIT -> MULTI_READY
 *   M_PARTS    the fenced commits of the parts but the primary (one batch), then their WAITs
 *   M_PRIMARY  the primary's fenced commit
 *   M_ACKS     the WAIT of --redis-replica-acks on the primary's connection
 *   M_UNDO     part_undo.lua on each part made or maybe made (the primary was not written),
 *              then their WAITs
 *   M_END      HDEL of the intent                               -> MULTI_DONE
 * With --redis-replica-acks N each step is on N replicas before the next one starts (intent ->
 * parts -> primary; an undo before the intent goes): a failover of any master involved then
 * loses nothing a later step relies on (docs/design.md "Orders larger than one segment").
 * A lock no longer needed is dropped at once (seglock_free releases it in the background).
 */
#include "order_multi.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app.h"
#include "clock.h"
#include "faultpoint.h"
#include "ids.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "order_io.h"
#include "order_status.h"
#include "skucache.h"
#include "store.h"
#include "store_scripts.h"

enum mstate {
    M_IDLE,
    M_TRY,
    M_READ,
    M_WAIT,
    M_INTENT,
    M_PARTS,
    M_PRIMARY,
    M_ACKS,
    M_UNDO,
    M_END,
    M_COUNT
};

#define MTO(s) (1u << (s))
/* Each state's name and the states an attempt may go to from it (the functions that take it
 * there in the comments); m_move() checks every change against it. M_IDLE is reached by
 * finish() (the result handed back) and ready() (MULTI_READY: the critical section). */
static const struct mstate_row {
    const char *name;
    uint32_t next;
} mstates[M_COUNT] = {
    /* multi_lock: try_more, read_rest (a probe without a segment to try); multi_commit: the
     * parts, or (abort) end_intent, finish; a cart's item: multi_cart_primary, multi_cart_undo */
    [M_IDLE] = {"idle", MTO(M_TRY) | MTO(M_READ) | MTO(M_PARTS) | MTO(M_END) | MTO(M_IDLE) |
                            MTO(M_PRIMARY) | MTO(M_UNDO)},
    /* tries_back: try_more again, read_rest (the probe fell short), plan (the intent, or ready),
     * finish; tries_done: wait_next */
    [M_TRY] = {"try", MTO(M_TRY) | MTO(M_READ) | MTO(M_WAIT) | MTO(M_INTENT) | MTO(M_IDLE)},
    /* read_back: try_more, finish (insufficient, a read failed, over budget) */
    [M_READ] = {"read", MTO(M_TRY) | MTO(M_IDLE)},
    /* on_seg_acquired: wait_next (no change), plan, finish */
    [M_WAIT] = {"wait", MTO(M_INTENT) | MTO(M_IDLE)},
    /* on_intent: its WAIT (acks_wait); on_intent_acked: ready, or end_intent; finish */
    [M_INTENT] = {"intent", MTO(M_INTENT) | MTO(M_END) | MTO(M_IDLE)},
    /* parts_done, on_parts_acked: the primary, or undo_made; a cart's item: MULTI_PARTS */
    [M_PARTS] = {"parts", MTO(M_PRIMARY) | MTO(M_UNDO) | MTO(M_IDLE)},
    /* on_primary: the WAIT, end_intent, undo_made, finish (outcome unknown) */
    [M_PRIMARY] = {"primary", MTO(M_ACKS) | MTO(M_END) | MTO(M_UNDO) | MTO(M_IDLE)},
    /* on_acked: end_intent, or finish (outcome unknown) */
    [M_ACKS] = {"acks", MTO(M_END) | MTO(M_IDLE)},
    /* undo_made (no intent: end_intent finishes), on_undone, on_undos_acked: end_intent, finish */
    [M_UNDO] = {"undo", MTO(M_END) | MTO(M_IDLE)},
    /* on_intent_gone: finish */
    [M_END] = {"end", MTO(M_IDLE)},
};
_Static_assert(M_COUNT <= 32, "a state's next states are a 32-bit mask");

/* A candidate segment. */
struct mseg {
    struct multi *m;
    int k;
    long long seen;  /* its stock as the walk read it */
    long long stock; /* read under its lock (held) */
    int read;        /* stock was read under its lock (held then, or found empty) */
    int tried;       /* a try or wait was made for it */
    int busy;        /* found held by another owner */
    struct seglock *lock;
    long long take;      /* units of the order it serves (a part when > 0) */
    enum seg_result res; /* its commit's result */
    int made;            /* its part may exist: committed, or its commit's outcome unknown */
    char id[ORDER_ID_MAX + 1];
};

struct multi {
    struct multi_req rq;
    multi_fn cb;
    void *arg;
    enum mstate state;
    int n;
    struct mseg *s; /* candidates, by seen stock (largest first) */
    int next;       /* the next candidate a try pass takes */
    int waited;     /* the pass with waiting was made */
    int wi;         /* its position: index into order[] */
    int *order;     /* candidates in index order (the pass with waiting) */
    int pending;
    int any_error, stale;
    int any_made;   /* a part's commit was answered OK or not at all: never walk again (its
                     * hex may have a part or a tombstone in a segment) */
    long long held; /* units in held segments */
    int primary;    /* index in s of the primary part (the lowest segment with a part) */
    int skip;       /* the part multi_commit leaves for the primary's commit: primary, or -1 for
                       a cart's item other than the home one (all its parts are parts) */
    char hex_id[ORDER_ID_MAX + 1];
    char parts[1024 * 12]; /* "k:q,k:q,..." */
    char deadline[24];     /* the intent's deadline (Redis ms) */
    char multi_key[STORE_KEY_MAX];
    char *primary_rec;
    char *items; /* a cart's primary: its log entry's items text (multi_cart_primary) */
    struct store_conns conns;  /* the intent's, then the parts', then the undos' connections */
    struct store_conns pconns; /* the primary's */
    struct multi_result res;
    /* a probe (rq.probe): planning from its one segment until read_rest's reads */
    int probing;
    int readall;      /* the other segments were read: seenv holds every segment */
    long long *seenv; /* [nseg] each segment's stock as read_rest read it (the probe's under its
                         lock), NULL before */
    struct rslot *rs; /* read_rest's replies in flight */
    int read_left, read_failed;
};

/* One GET of read_rest. */
struct rslot {
    struct multi *m;
    int k;
};

/* The one way an attempt changes state: the move must be in the table `mstates` (an assertion in
 * debug builds, an error line in release builds). */
static void m_move(struct multi *m, enum mstate next)
{
    if (!(mstates[m->state].next & MTO(next))) {
        log_msg(CONFIG_LOG_ERROR, "multi_bad_transition",
                "sku %s: state %s to %s is not in the table of order_multi.c", m->rq.sku,
                mstates[m->state].name, mstates[next].name);
        assert(!"a multi-segment attempt's state change that is not in the table");
    }
    m->state = next;
}

static void finish(struct multi *m, enum order_outcome out);
static void undo_made(struct multi *m, enum order_outcome out);
static void end_intent(struct multi *m, enum order_outcome out);
static void on_primary(struct seglock *lock, lc_status st, const redisReply *r, void *arg);

/* Keeps "<step>: <what>" as the attempt's last failure. */
static void multi_why(struct multi *m, const char *step, const char *what)
{
    snprintf(m->res.why, sizeof(m->res.why), "%s%s%s", step, *step ? ": " : "",
             what && *what ? what : "failed");
}

static int budget_left(struct multi *m, int n)
{
    if (m->res.calls + n > m->rq.budget)
        return 0;
    m->res.calls += n;
    return 1;
}

static void drop(struct mseg *g)
{
    struct seglock *l = g->lock;
    g->lock = NULL;
    seglock_free(l); /* a hold is released in the background */
}

static void drop_all(struct multi *m)
{
    for (int i = 0; i < m->n; i++)
        drop(&m->s[i]);
    m->held = 0;
}

/* Sorts s[from..n) by seen, largest first (a stable insertion sort: ties keep their order),
 * then order[] (every candidate's position in s[]) by segment index. */
static void sort_candidates(struct multi *m, int from)
{
    for (int a = from + 1; a < m->n; a++) {
        struct mseg t = m->s[a];
        int b = a - 1;
        while (b >= from && m->s[b].seen < t.seen) {
            m->s[b + 1] = m->s[b];
            b--;
        }
        m->s[b + 1] = t;
    }
    for (int a = 0; a < m->n; a++)
        m->order[a] = a;
    for (int a = 1; a < m->n; a++) {
        int t = m->order[a], b = a - 1;
        while (b >= 0 && m->s[m->order[b]].k > m->s[t].k) {
            m->order[b + 1] = m->order[b];
            b--;
        }
        m->order[b + 1] = t;
    }
}

/* Segments a probe tries at most, one after the other, while each is busy or empty (as a
 * one-segment order's walk goes on to the next); then, or at once when one falls short, the
 * others are read (read_rest). */
#define MULTI_PROBES 3

/* A probe's segment: from a random start, the first not tried yet that this instance neither
 * found empty (within sold_out_recheck_ms) nor holds the lock of, else the first not tried and
 * not found empty (its other requests let go soon); -1 when there is none. */
static int probe_segment(const struct multi *m)
{
    int nseg = m->rq.nseg;
    if (nseg <= 0)
        return -1;
    struct sku_view v;
    skucache_get(m->rq.app->cache, m->rq.sku, &v);
    int known = v.version == m->rq.version && v.segments == nseg;
    int start = (int)(order_rnd64() % (uint64_t)nseg), spare = -1;
    for (int j = 0; j < nseg; j++) {
        int k = (start + j) % nseg, tried = 0;
        for (int i = 0; i < m->n && !tried; i++)
            tried = m->s[i].k == k;
        if (tried)
            continue;
        if (!known)
            return k;
        if (skucache_is_empty(&v, k))
            continue;
        if (!skucache_is_held(&v, k))
            return k;
        if (spare < 0)
            spare = k;
    }
    return spare;
}

struct multi *multi_new(const struct multi_req *rq, multi_fn cb, void *arg)
{
    struct multi *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->rq = *rq;
    m->cb = cb;
    m->arg = arg;
    m->primary = -1;
    /* a probe's arrays hold every segment: read_rest may make each a candidate */
    int cap = rq->probe ? rq->nseg : 0;
    if (!rq->probe)
        for (int k = 0; k < rq->nseg; k++)
            cap += rq->seen[k] > 0;
    m->s = calloc((size_t)(cap ? cap : 1), sizeof(*m->s));
    m->order = calloc((size_t)(cap ? cap : 1), sizeof(*m->order));
    if (!m->s || !m->order) {
        multi_free(m);
        return NULL;
    }
    if (rq->probe) {
        m->probing = 1;
        int k = probe_segment(m);
        if (k >= 0) { /* seen = qty: the first try pass takes it alone */
            m->s[0] = (struct mseg){.m = m, .k = k, .seen = rq->qty, .res = SEG_EMPTY};
            m->n = 1;
        }
    } else {
        /* a cart's items start at a random segment among equals (every cart planning from
         * equal reads would try segment 0 first); an order's walk keeps index order */
        int start = rq->cart && rq->nseg > 0 ? (int)(order_rnd64() % (uint64_t)rq->nseg) : 0;
        for (int j = 0; j < rq->nseg; j++) {
            int k = (start + j) % rq->nseg;
            if (rq->seen[k] > 0)
                m->s[m->n++] = (struct mseg){.m = m, .k = k, .seen = rq->seen[k], .res = SEG_EMPTY};
        }
    }
    sort_candidates(m, 0);
    store_sku_key(m->multi_key, rq->sku, "multi");
    m->res.out = OUT_UNAVAILABLE;
    return m;
}

void multi_free(struct multi *m)
{
    if (!m)
        return;
    if (m->s)
        drop_all(m);
    free(m->res.record);
    free(m->primary_rec);
    free(m->items);
    free(m->s);
    free(m->order);
    free(m->seenv);
    free(m->rs);
    free(m);
}

struct multi_result *multi_result(struct multi *m)
{
    return &m->res;
}

int multi_seen(const struct multi *m, long long *seen)
{
    if (m->seenv)
        memcpy(seen, m->seenv, sizeof(*seen) * (size_t)m->rq.nseg);
    for (int i = 0; i < m->n; i++)
        if (m->s[i].read)
            seen[m->s[i].k] = m->s[i].stock > 0 ? m->s[i].stock : 0;
    return !m->rq.probe || m->readall;
}

static void finish(struct multi *m, enum order_outcome out)
{
    for (int i = 0; i < m->n; i++)
        m->res.left |= m->s[i].made;
    if (out == OUT_OUTCOME_UNKNOWN)
        m->res.left = 1;
    if (m->any_made) /* issue 29: a second walk would reuse the hex of parts that may exist */
        m->res.again = m->res.reload = 0;
    m->res.out = out;
    m_move(m, M_IDLE);
    m->cb(m->arg, MULTI_DONE);
}

/* ---- phase one: the locks ---- */

static void try_more(struct multi *m);
static void wait_next(struct multi *m);
static void plan(struct multi *m);
static void read_rest(struct multi *m);

/* A probe's segment did not hold the item: the next probe while the last was busy or empty and
 * nothing is held (as a walk goes on), else the other segments' stock (read_rest). */
static void probe_next(struct multi *m)
{
    const struct mseg *g = &m->s[m->n - 1];
    int k = -1;
    if (m->n < MULTI_PROBES && m->held == 0 && (g->busy || (g->read && g->stock <= 0)))
        k = probe_segment(m);
    if (k < 0) {
        read_rest(m);
        return;
    }
    m->s[m->n++] = (struct mseg){.m = m, .k = k, .seen = m->rq.qty, .res = SEG_EMPTY};
    sort_candidates(m, m->n); /* order[] only: the tried keep their places */
    try_more(m);
}

/* A try pass's last answer is in. */
static void tries_back(struct multi *m)
{
    if (m->stale) {
        drop_all(m);
        m->res.again = m->res.reload = 1;
        finish(m, OUT_UNAVAILABLE);
    } else if (m->held >= m->rq.qty) {
        plan(m);
    } else if (m->probing) {
        probe_next(m);
    } else {
        try_more(m);
    }
}

/* An acquire's answer for candidate g: held (stock read), busy, stale or failed. */
static void on_seg_acquired(struct seglock *lock, lc_status st, const redisReply *v, void *arg)
{
    (void)lock;
    struct mseg *g = arg;
    struct multi *m = g->m;
    if (st == LC_EBUSY || st == LC_ETIMEOUT) {
        g->busy = 1;
        drop(g);
    } else if (st != LC_OK || !v || v->type != REDIS_REPLY_ARRAY || v->elements < 2) {
        if (st != LC_ESTATE)
            metrics_redis_error();
        multi_why(m, "a segment's lock", seglock_errmsg(g->lock));
        m->any_error = 1;
        drop(g);
    } else {
        struct seg_verdict sv;
        order_walk_acquire_verdict(store_reply_int(v->element[0], 0),
                                   store_reply_int(v->element[1], 0), m->rq.version, 1, &sv);
        g->busy = 0;
        if (sv.differs) {
            m->stale = 1;
            drop(g);
        } else {
            g->stock = store_reply_int(v->element[0], 0);
            g->read = 1;
            if (g->stock > 0) {
                m->held += g->stock;
            } else {
                skucache_mark_empty(m->rq.app->cache, m->rq.sku, m->rq.version, g->k);
                drop(g);
            }
        }
    }
    if (m->state == M_TRY) {
        if (--m->pending == 0)
            tries_back(m);
        return;
    }
    /* M_WAIT */
    if (m->stale) {
        drop_all(m);
        m->res.again = m->res.reload = 1;
        finish(m, OUT_UNAVAILABLE);
    } else if (g->busy) {
        drop_all(m);
        finish(m, OUT_LOCK_TIMEOUT);
    } else if (m->held >= m->rq.qty) {
        plan(m);
    } else {
        m->wi++;
        wait_next(m);
    }
}

/* Starts the acquire of candidate g (wait_ms 0: a try). 0 started, -1 not (g failed). */
static int acquire(struct multi *m, struct mseg *g, int wait_ms)
{
    struct seg_keys sk;
    store_seg_keys(m->rq.sku, g->k, &sk);
    g->tried = 1;
    if (seglock_new(&m->rq.env, sk.lock, &m->rq.lo, &g->lock) != LC_OK) {
        g->lock = NULL;
        multi_why(m, "", "lock handle: out of memory");
        m->any_error = 1;
        return -1;
    }
    const char *reads[2] = {sk.stock, sk.sver};
    if (seglock_acquire(g->lock, wait_ms, 2, reads, on_seg_acquired, g) != LC_OK) {
        multi_why(m, "", "the lock operation did not start");
        m->any_error = 1;
        drop(g);
        return -1;
    }
    return 0;
}

/* The answer when no more locks can be tried: what the tries found. */
static void tries_done(struct multi *m)
{
    int any_busy = 0;
    for (int i = 0; i < m->n; i++)
        any_busy |= m->s[i].busy;
    int64_t left = m->rq.deadline_ms - clock_mono_ms();
    if (any_busy && !m->waited && left > 0) {
        /* waits only up the indexes: drop every lock, then take them in index order */
        drop_all(m);
        m->waited = 1;
        m->wi = 0;
        m_move(m, M_WAIT);
        wait_next(m);
        return;
    }
    drop_all(m);
    if (any_busy)
        finish(m, OUT_LOCK_TIMEOUT);
    else if (m->any_error)
        finish(m, OUT_UNAVAILABLE);
    else
        finish(m, OUT_INSUFFICIENT);
}

/* The try pass: the next candidates (largest seen first) until what they were seen to hold,
 * with what is held, covers the order; all tried at once. */
static void try_more(struct multi *m)
{
    m_move(m, M_TRY);
    long long need = m->rq.qty - m->held;
    int first = m->next, count = 0;
    while (m->next < m->n && need > 0) {
        need -= m->s[m->next].seen;
        m->next++;
        count++;
    }
    if (count == 0) {
        tries_done(m);
        return;
    }
    if (!budget_left(m, 2 * count)) { /* each: the acquire, and its commit or release */
        drop_all(m);
        finish(m, OUT_OVER_BUDGET);
        return;
    }
    m->pending = count + 1; /* + 1 for this function: the batch ends after every start */
    for (int i = first; i < first + count; i++)
        if (acquire(m, &m->s[i], 0) != 0)
            m->pending--;
    /* the last answer (or this, when none started) ends the batch */
    if (--m->pending == 0)
        tries_back(m);
}

/* The pass with waiting: the next candidate in index order not held yet. */
static void wait_next(struct multi *m)
{
    for (; m->wi < m->n; m->wi++) {
        struct mseg *g = &m->s[m->order[m->wi]];
        if (g->lock)
            continue;
        int64_t left = m->rq.deadline_ms - clock_mono_ms();
        if (left <= 0) {
            drop_all(m);
            finish(m, OUT_LOCK_TIMEOUT);
            return;
        }
        if (!budget_left(m, 2)) {
            drop_all(m);
            finish(m, OUT_OVER_BUDGET);
            return;
        }
        if (acquire(m, g, (int)left) != 0)
            continue;
        return; /* on_seg_acquired goes on */
    }
    drop_all(m);
    finish(m, m->any_error ? OUT_UNAVAILABLE : OUT_INSUFFICIENT);
}

static void read_back(struct multi *m);

/* Every segment read empty: sold out, unless a restock (or PUT) was cut off half-way, which
 * would never reach the segments if nobody met it (as a one-segment order's sold-out re-check:
 * order_fsm.c): then it is completed, and the cart's answer is 503 with the layout forgotten,
 * so that its retry plans from the restocked segments. */
static void on_pending_settled(void *arg, int rc, struct layout *l)
{
    (void)rc;
    (void)l;
    struct multi *m = arg;
    multi_why(m, "", "a restock was pending: completed, retry");
    m->res.again = m->res.reload = 1;
    finish(m, OUT_UNAVAILABLE);
}

static void on_pending(void *arg, int rc, struct layout *l)
{
    struct multi *m = arg;
    if (rc < 0) {
        multi_why(m, "the layout", "read failed");
        finish(m, OUT_UNAVAILABLE);
    } else if (rc > 0 && layout_unsettled(l)) {
        if (!budget_left(m, 1)) {
            finish(m, OUT_OVER_BUDGET);
            return;
        }
        layout_read_settled_async(m->rq.app->store, m->rq.lc, m->rq.sku, on_pending_settled, m);
    } else if (rc == 0 || l->version != m->rq.version) {
        m->res.again = m->res.reload = 1; /* deleted or replaced meanwhile: read it again */
        finish(m, OUT_UNAVAILABLE);
    } else {
        finish(m, OUT_SOLD_OUT);
    }
}

static void on_read(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct rslot *rs = arg;
    struct multi *m = rs->m;
    if (st != LC_OK || !r || r->type == REDIS_REPLY_ERROR) {
        if (st != LC_ESTATE)
            metrics_redis_error();
        multi_why(m, "a segment's stock", st != LC_OK ? errstr : r ? r->str : NULL);
        m->read_failed = 1;
    } else {
        long long v = store_reply_int(r, 0);
        m->seenv[rs->k] = v > 0 ? v : 0;
    }
    if (--m->read_left == 0)
        read_back(m);
}

/* The probe fell short: every segment's stock but the probe's when its lock read it, one GET
 * each, pipelined. The probe's lock is kept (a read waits for no lock). */
static void read_rest(struct multi *m)
{
    m_move(m, M_READ);
    int nseg = m->rq.nseg, count = nseg;
    for (int i = 0; i < m->n; i++)
        count -= m->s[i].read;
    m->seenv = calloc((size_t)nseg, sizeof(*m->seenv));
    m->rs = calloc((size_t)(count ? count : 1), sizeof(*m->rs));
    if (!m->seenv || !m->rs) {
        drop_all(m);
        multi_why(m, "", "out of memory");
        finish(m, OUT_UNAVAILABLE);
        return;
    }
    if (!budget_left(m, count)) {
        drop_all(m);
        finish(m, OUT_OVER_BUDGET);
        return;
    }
    m->read_failed = 0;
    m->read_left = count + 1; /* + 1 for this function: the batch ends after every start */
    int j = 0;
    for (int k = 0; k < nseg; k++) {
        int skip = 0; /* read under its lock */
        for (int i = 0; i < m->n && !skip; i++)
            skip = m->s[i].k == k && m->s[i].read;
        if (skip)
            continue;
        struct seg_keys sk;
        store_seg_keys(m->rq.sku, k, &sk);
        m->rs[j] = (struct rslot){m, k};
        const char *argv[2] = {"GET", sk.stock};
        if (lc_async_command(m->rq.lc, 2, argv, NULL, on_read, &m->rs[j]) != LC_OK) {
            multi_why(m, "a segment's stock", lc_errmsg());
            m->read_failed = 1;
            m->read_left--;
        }
        j++;
    }
    if (--m->read_left == 0)
        read_back(m);
}

/* Every segment's stock is known: the probes stay the first candidates when their lock is held
 * (or they were busy or failed: tried; the pass with waiting takes them), the others follow by
 * their stock, largest first, and the tries go on as for an attempt planned from a walk's
 * reads. No acquire is in flight: the probes' entries may move. */
static void read_back(struct multi *m)
{
    if (m->read_failed) {
        drop_all(m);
        finish(m, OUT_UNAVAILABLE);
        return;
    }
    int nseg = m->rq.nseg;
    m->probing = 0;
    m->readall = 1;
    int keep = 0, probes = m->n;
    for (int i = 0; i < probes; i++) {
        struct mseg *p = &m->s[i];
        if (p->read)
            m->seenv[p->k] = p->stock > 0 ? p->stock : 0;
        p->seen = m->seenv[p->k];
        if (p->lock != NULL || (!p->read && p->seen > 0))
            m->s[keep++] = *p;
    }
    long long total = 0;
    uint64_t empty[SKUCACHE_MAX_SEGMENTS / 64] = {0};
    for (int k = 0; k < nseg; k++) {
        total += m->seenv[k];
        if (m->seenv[k] <= 0)
            empty[k / 64] |= 1ULL << (k % 64);
    }
    /* as the sold-out re-check's read: the single orders' walks skip these */
    skucache_set_empty(m->rq.app->cache, m->rq.sku, m->rq.version, empty);
    m->n = keep;
    m->next = keep;
    int start = (int)(order_rnd64() % (uint64_t)nseg);
    for (int j = 0; j < nseg; j++) {
        int k = (start + j) % nseg, probed = 0;
        for (int i = 0; i < keep && !probed; i++)
            probed = m->s[i].k == k;
        if (!probed && m->seenv[k] > 0)
            m->s[m->n++] = (struct mseg){.m = m, .k = k, .seen = m->seenv[k], .res = SEG_EMPTY};
    }
    sort_candidates(m, keep);
    if (total == 0) { /* sold out, once no restock is cut off half-way (on_pending) */
        drop_all(m);
        if (!budget_left(m, 1)) {
            finish(m, OUT_OVER_BUDGET);
            return;
        }
        layout_read_async(m->rq.app->store, m->rq.lc, m->rq.sku, on_pending, m);
        return;
    }
    if (total < m->rq.qty) { /* SPEC §13: the remaining total is below the quantity */
        drop_all(m);
        finish(m, OUT_INSUFFICIENT);
        return;
    }
    try_more(m);
}

static void on_intent(lc_status st, const redisReply *r, const char *errstr, void *arg);

/* Held enough: the parts (order_walk_plan over what the locks read), the ids and records, then
 * the intent. */
static void plan(struct multi *m)
{
    long long *stock = calloc((size_t)m->n, sizeof(*stock)),
              *take = calloc((size_t)m->n, sizeof(*take));
    if (!stock || !take) {
        free(stock);
        free(take);
        drop_all(m);
        multi_why(m, "", "out of memory");
        finish(m, OUT_UNAVAILABLE);
        return;
    }
    for (int i = 0; i < m->n; i++)
        stock[i] = m->s[i].lock ? m->s[i].stock : 0;
    m->res.parts = order_walk_plan(m->n, stock, m->rq.qty, take);
    free(stock);
    m->primary = -1;
    size_t used = 0;
    json_t *parts = json_array();
    for (int a = 0; a < m->n; a++) {
        struct mseg *g = &m->s[m->order[a]];
        g->take = take[m->order[a]];
        if (g->take <= 0) {
            drop(g); /* not needed */
            continue;
        }
        if (m->primary < 0)
            m->primary = m->order[a];
        snprintf(g->id, sizeof(g->id), "%s-%d-%s", m->rq.token, g->k, m->rq.sku);
        int w = snprintf(m->parts + used, sizeof(m->parts) - used, "%s%d:%lld", used ? "," : "",
                         g->k, g->take);
        if (w > 0 && (size_t)w < sizeof(m->parts) - used)
            used += (size_t)w;
        json_array_append_new(
            parts, json_pack("{s:i, s:I}", "segment", g->k, "quantity", (json_int_t)g->take));
    }
    free(take);
    struct mseg *p = m->primary >= 0 ? &m->s[m->primary] : NULL;
    if (!p || !parts) {
        json_decref(parts);
        drop_all(m);
        finish(m, OUT_UNAVAILABLE); /* never: held >= qty */
        return;
    }
    m->skip = m->rq.cart && !m->rq.cart_home ? -1 : m->primary;
    if (m->rq.cart) {
        /* a cart's item: no intent of its own (the cart's), the primary's record the cart's */
        json_decref(parts);
        m_move(m, M_IDLE);
        m->cb(m->arg, MULTI_READY);
        return;
    }
    snprintf(m->res.order_id, sizeof(m->res.order_id), "%s", p->id);
    char created[32];
    rules_format_time(clock_wall_ms(), created);
    const char *status =
        order_status_name(m->rq.rules.ttl_s > 0 ? ORDER_STATUS_RESERVED : ORDER_STATUS_CREATED);
    /* one part (a segment held enough by the time its lock was taken): a one-segment order,
     * without parts, intent or follows */
    json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:o, s:s, s:s}", "order_id", p->id, "sku",
                          m->rq.sku, "quantity", (json_int_t)m->rq.qty, "segment", p->k, "user_id",
                          *m->rq.user ? json_string(m->rq.user) : json_null(), "created_at",
                          created, "status", status);
    if (j && m->res.parts > 1)
        json_object_set(j, "parts", parts);
    if (j && m->rq.grp) /* its limit groups' give-backs (hold_end.lua) */
        json_object_set_new(j, "grp", json_loads(m->rq.grp, 0, NULL));
    json_decref(parts);
    m->primary_rec = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!m->primary_rec) {
        drop_all(m);
        multi_why(m, "", "out of memory");
        finish(m, OUT_UNAVAILABLE);
        return;
    }
    if (m->res.parts == 1) {
        snprintf(m->deadline, sizeof(m->deadline), "%s", m->rq.claim_expiry);
        m_move(m, M_IDLE);
        m->cb(m->arg, MULTI_READY);
        return;
    }
    if (!budget_left(m, 2)) { /* the intent and its deletion */
        drop_all(m);
        finish(m, OUT_OVER_BUDGET);
        return;
    }
    /* the intent's deadline: the request's time left, plus the critical section and one Redis
     * timeout for the commits under way (a request near its deadline still gets to commit what
     * it holds the locks for) */
    int64_t left = m->rq.deadline_ms - clock_mono_ms();
    char budget[24];
    snprintf(budget, sizeof(budget), "%" PRId64,
             (left > 0 ? left : 0) + m->rq.app->cfg.hold_ms + m->rq.app->cfg.redis_timeout_ms);
    char meta[STORE_KEY_MAX], version[24];
    store_sku_key(meta, m->rq.sku, "meta");
    snprintf(version, sizeof(version), "%" PRId64, m->rq.version);
    const char *keys[2] = {m->multi_key, meta};
    const char *args[5] = {m->rq.token, p->id, m->parts, budget, version};
    m_move(m, M_INTENT);
    store_script_async(m->rq.app->store, m->rq.lc, m->rq.ar, SCRIPT_MULTI_BEGIN, 2, keys, 5, args,
                       on_intent, m);
}

static void ready(struct multi *m)
{
    faultpoint("multi_intent");
    m_move(m, M_IDLE);
    m->cb(m->arg, MULTI_READY);
}

/* The intent's WAIT: on enough replicas, the parts may go (a failover of the SKU's master can
 * no longer lose the intent that heals them); else nothing was made: the intent goes. */
static void on_intent_acked(void *arg, long long acks)
{
    struct multi *m = arg;
    if (acks < m->rq.app->cfg.redis_replica_acks) {
        snprintf(m->res.why, sizeof(m->res.why),
                 "the intent is on %lld of %d replicas: no part was made", acks < 0 ? 0 : acks,
                 m->rq.app->cfg.redis_replica_acks);
        drop_all(m);
        end_intent(m, OUT_UNAVAILABLE);
        return;
    }
    ready(m);
}

/* WAITs --redis-replica-acks on the connections in cs (each answered a step), then then(m,
 * acks); with acks 0 then(m, 0) at once. */
static void acks_wait(struct multi *m, struct store_conns *cs, store_acked_fn then)
{
    int acks = m->rq.app->cfg.redis_replica_acks;
    if (acks <= 0) {
        then(m, 0);
        return;
    }
    m->res.calls += cs->n;
    store_replica_wait_conns_async(m->rq.lc, m->rq.ar, cs, acks, m->rq.app->cfg.redis_timeout_ms,
                                   then, m);
}

static void on_intent(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct multi *m = arg;
    store_conns_note(&m->conns, m->rq.lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        /* it may have been written: with no part ever made, its healing only deletes it */
        multi_why(m, "the intent", errstr);
        drop_all(m);
        finish(m, OUT_UNAVAILABLE);
        return;
    }
    long long d = store_reply_int(r->element[0], 0);
    if (d < 0) { /* the SKU is at another layout: nothing written */
        drop_all(m);
        m->res.again = m->res.reload = 1;
        finish(m, OUT_UNAVAILABLE);
        return;
    }
    /* the commits refuse after the intent's deadline, or the key claim's, whichever is first */
    long long claim = atoll(m->rq.claim_expiry);
    snprintf(m->deadline, sizeof(m->deadline), "%lld", claim > 0 && claim < d ? claim : d);
    m_move(m, M_INTENT);
    acks_wait(m, &m->conns, on_intent_acked);
}

void multi_lock(struct multi *m)
{
    m->next = 0;
    m->held = 0;
    if (m->probing && m->n == 0)
        read_rest(m); /* every segment was found empty here: read them */
    else
        try_more(m);
}

/* ---- phase two: the commits ---- */

/* What a part's commit came to. */
static enum seg_result part_result(struct mseg *g, lc_status st, const redisReply *r,
                                   struct multi *m)
{
    if (st != LC_OK) {
        enum seg_result res = order_walk_commit_failed(st, 1);
        if (res == SEG_LOST)
            metrics_lock_lost();
        else
            metrics_redis_error();
        multi_why(m, "a part's commit", seglock_errmsg(g->lock));
        return res;
    }
    struct seg_verdict v;
    order_walk_commit_verdict(r, &v);
    if (v.differs)
        return SEG_STALE;
    if (v.r == SEG_DONE && v.empty)
        skucache_mark_empty(m->rq.app->cache, m->rq.sku, m->rq.version, g->k);
    if (v.r == SEG_NOT_STARTED || v.r == SEG_ENDED)
        m->res.sale_at = v.at;
    return v.r;
}

/* The record of part g (not the primary): malloc'd JSON, NULL when out of memory. */
static char *part_record(struct multi *m, const struct mseg *g)
{
    char created[32];
    rules_format_time(clock_wall_ms(), created);
    const char *of = m->rq.cart ? m->rq.cart_id : m->res.order_id;
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:i, s:I, s:s, s:s}", "order_id", g->id, "part_of", of, "sku", m->rq.sku,
        "segment", g->k, "quantity", (json_int_t)g->take, "created_at", created, "status",
        order_status_name(m->rq.rules.ttl_s > 0 ? ORDER_STATUS_RESERVED : ORDER_STATUS_CREATED));
    /* a cart's item in a SKU with a limit: its first part carries the user, so the part's end
     * gives that SKU's units back (docs/design.md "Carts (SPEC §17)") */
    if (j && m->rq.cart && m->rq.lim_user && *m->rq.lim_user && g == &m->s[m->primary]) {
        json_object_set_new(j, "user", json_string(m->rq.lim_user));
        json_object_set_new(j, "lim", json_integer(1));
    }
    char *rec = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return rec;
}

/* The commit of part g with record rec: kind "part", or for the primary "primary" (a single
 * part: a one-segment order's commit, as order_fsm.c's). */
static void part_call(struct multi *m, const struct mseg *g, int primary, const char *rec,
                      struct store_commit_call *c)
{
    const struct multi_req *rq = &m->rq;
    int whole = primary && (m->res.parts > 1 || m->rq.cart);
    struct store_commit_in in = {
        .sku = rq->sku,
        .k = g->k,
        .version = rq->version,
        .qty = g->take,
        .id = g->id,
        .record = rec,
        /* a cart's other item claims only its ticket: its first part carries the claim's name,
         * so a claim found pending past its expiry finds its order (CL_FIND) */
        .idem = primary || (rq->cart && !rq->cart_home && g == &m->s[m->primary]) ? rq->idem : "",
        .expiry = m->deadline,
        .rules = &rq->rules,
        .log_cap = primary && rq->app->cfg.order_log ? rq->app->cfg.order_log_cap : 0,
        .user = primary ? rq->user : "",
        .kind = !primary ? "part"
                : whole  ? "primary"
                         : "",
        .parts = whole ? m->parts : "",
        .items = primary && m->items ? m->items : "",
        .total = rq->qty,
        .hold_index = !config_redis_cluster(&rq->app->cfg), /* issue 29: the sweeper's index */
    };
    store_commit_call(&in, c);
}

/* The outcome of a part refused (nothing of the order exists once the parts made are undone). */
static enum order_outcome refused_outcome(struct multi *m, enum seg_result r)
{
    switch (r) {
    case SEG_LOST:
    case SEG_SHORT: m->res.again = 1; return OUT_UNAVAILABLE;
    case SEG_STALE:
    case SEG_NOTREADY: m->res.again = m->res.reload = 1; return OUT_UNAVAILABLE;
    case SEG_EXPIRED:
    case SEG_NOT_STARTED:
    case SEG_ENDED: return order_walk_settled_outcome(r);
    default: return OUT_UNAVAILABLE;
    }
}

static void parts_done(struct multi *m);
static void on_parts_acked(void *arg, long long acks);
static void primary_commit(struct multi *m);

static void on_part(struct seglock *lock, lc_status st, const redisReply *r, void *arg)
{
    (void)lock;
    struct mseg *g = arg;
    struct multi *m = g->m;
    store_conns_note(&m->conns, m->rq.lc);
    g->res = part_result(g, st, r, m);
    g->made = g->res == SEG_DONE || g->res == SEG_UNKNOWN;
    m->any_made |= g->made;
    drop(g); /* released by the commit (or to be let go) */
    if (--m->pending == 0)
        parts_done(m);
}

/* Every part but the primary answered: on to the primary, or undo. */
static void parts_done(struct multi *m)
{
    enum seg_result worst = SEG_DONE;
    for (int i = 0; i < m->n; i++)
        if (i != m->skip && m->s[i].take > 0 && m->s[i].res != SEG_DONE)
            worst = m->s[i].res;
    if (worst != SEG_DONE) {
        if (m->skip >= 0)
            drop(&m->s[m->skip]);
        undo_made(m, refused_outcome(m, worst));
        return;
    }
    /* every other part is written: on the replicas too, then the primary makes the order
     * whole (a primary whose part a failover lost would be an order short of its units) */
    acks_wait(m, &m->conns, on_parts_acked);
}

static void on_parts_acked(void *arg, long long acks)
{
    struct multi *m = arg;
    if (acks < m->rq.app->cfg.redis_replica_acks) {
        snprintf(m->res.why, sizeof(m->res.why),
                 "the parts are on %lld of %d replicas: undone, no order", acks < 0 ? 0 : acks,
                 m->rq.app->cfg.redis_replica_acks);
        if (m->skip >= 0)
            drop(&m->s[m->skip]);
        undo_made(m, OUT_UNAVAILABLE);
        return;
    }
    if (m->rq.cart) { /* the cart commits its primary once every item's parts are in */
        m->res.out = OUT_CREATED;
        m_move(m, M_IDLE);
        m->cb(m->arg, MULTI_PARTS);
        return;
    }
    faultpoint("multi_parts");
    primary_commit(m);
}

/* The primary's fenced commit (the parts are in, on the replicas). */
static void primary_commit(struct multi *m)
{
    struct mseg *p = &m->s[m->primary];
    struct store_commit_call c;
    part_call(m, p, 1, m->primary_rec, &c);
    m_move(m, M_PRIMARY);
    m->pending = 1;
    if (seglock_eval(p->lock, store_script(m->rq.app->store, SCRIPT_COMMIT), LC_EVAL_RELEASE,
                     c.nkeys, c.keys, c.nargs, c.args, on_primary, p) != LC_OK) {
        multi_why(m, "", "the primary's commit did not start");
        drop(p);
        undo_made(m, OUT_UNAVAILABLE);
    }
}

static void on_acked(void *arg, long long acks)
{
    struct multi *m = arg;
    m->res.acked = 1;
    if (acks < m->rq.app->cfg.redis_replica_acks) {
        snprintf(m->res.why, sizeof(m->res.why),
                 "committed, but the primary's master has it on %lld of %d replicas",
                 acks < 0 ? 0 : acks, m->rq.app->cfg.redis_replica_acks);
        /* the intent stays: a failover that lost the primary leaves the parts to its healing */
        finish(m, OUT_OUTCOME_UNKNOWN);
        return;
    }
    end_intent(m, OUT_CREATED);
}

static void on_primary(struct seglock *lock, lc_status st, const redisReply *r, void *arg)
{
    (void)lock;
    struct mseg *p = arg;
    struct multi *m = p->m;
    store_conns_note(&m->pconns, m->rq.lc);
    p->res = part_result(p, st, r, m);
    m->any_made |= p->res == SEG_DONE || p->res == SEG_UNKNOWN;
    drop(p);
    if (p->res == SEG_UNKNOWN) {
        /* the order may exist: the intent stays, its healing decides */
        finish(m, OUT_OUTCOME_UNKNOWN);
        return;
    }
    if (p->res != SEG_DONE) {
        undo_made(m, refused_outcome(m, p->res));
        return;
    }
    /* a hold's record comes back as stored, with expires_at */
    const char *rec = m->primary_rec;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 2 &&
        r->element[2]->type == REDIS_REPLY_STRING)
        rec = r->element[2]->str;
    m->res.record = strdup(rec);
    faultpoint("multi_primary");
    if (m->rq.app->cfg.redis_replica_acks > 0) {
        m_move(m, M_ACKS);
        acks_wait(m, &m->pconns, on_acked);
        return;
    }
    end_intent(m, OUT_CREATED);
}

static void on_intent_gone(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct multi *m = arg;
    if (st != LC_OK && st != LC_ESTATE) /* the sweeper's healing deletes it later */
        multi_why(m, "deleting the intent", errstr);
    finish(m, m->res.out);
}

/* The order is decided (out): its intent goes. */
static void end_intent(struct multi *m, enum order_outcome out)
{
    m->res.out = out;
    if (m->res.parts == 1 || m->rq.cart) { /* no intent was written (a cart's: the cart's) */
        finish(m, out);
        return;
    }
    m_move(m, M_END);
    const char *argv[3] = {"HDEL", m->multi_key, m->rq.token};
    store_command_async(m->rq.lc, m->rq.ar, 3, argv, on_intent_gone, m);
}

static void on_undos_acked(void *arg, long long acks);

static void on_undone(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct mseg *g = arg;
    struct multi *m = g->m;
    store_conns_note(&m->conns, m->rq.lc);
    if (st == LC_OK) {
        g->made = 0;
    } else {
        metrics_redis_error();
        multi_why(m, "undoing a part", errstr);
    }
    if (--m->pending > 0)
        return;
    for (int i = 0; i < m->n; i++)
        if (m->s[i].made) {
            /* a part may still be there: the intent stays, the sweeper undoes it */
            finish(m, m->res.out);
            return;
        }
    /* the undos on the replicas before the intent goes (else a failover could bring a part
     * back with no intent left to heal it) */
    acks_wait(m, &m->conns, on_undos_acked);
}

static void on_undos_acked(void *arg, long long acks)
{
    struct multi *m = arg;
    if (acks < m->rq.app->cfg.redis_replica_acks) {
        /* the intent stays: the sweeper undoes the parts again, then deletes it */
        size_t n = strlen(m->res.why); /* after why they were undone */
        snprintf(m->res.why + n, sizeof(m->res.why) - n,
                 "%sthe parts were undone, on %lld of %d replicas: the intent is left to healing",
                 n ? "; " : "", acks < 0 ? 0 : acks, m->rq.app->cfg.redis_replica_acks);
        finish(m, m->res.out);
        return;
    }
    end_intent(m, m->res.out);
}

/* The primary was not written (and now cannot be): undo every part that may exist. */
static void undo_made(struct multi *m, enum order_outcome out)
{
    drop_all(m);
    m->res.out = out;
    m->res.record = NULL;
    m_move(m, M_UNDO);
    int n = 0;
    for (int i = 0; i < m->n; i++)
        n += m->s[i].made;
    if (n == 0) {
        end_intent(m, out);
        return;
    }
    m->pending = n;
    m->res.calls += n;
    memset(&m->conns, 0, sizeof(m->conns)); /* the undos' WAITs: on their connections */
    char keep[24];
    snprintf(keep, sizeof(keep), "%d", STORE_UNDONE_KEEP_MS);
    for (int i = 0; i < m->n; i++) {
        struct mseg *g = &m->s[i];
        if (!g->made)
            continue;
        struct seg_keys sk;
        store_seg_keys(m->rq.sku, g->k, &sk);
        const char *keys[4] = {sk.stock, sk.cnt, sk.orders, sk.undone};
        const char *args[3] = {g->id, keep, ""};
        store_script_async(m->rq.app->store, m->rq.lc, m->rq.ar, SCRIPT_PART_UNDO, 4, keys, 3, args,
                           on_undone, g);
    }
}

void multi_commit(struct multi *m, int abort)
{
    if (abort) {
        drop_all(m);
        end_intent(m, OUT_UNAVAILABLE);
        return;
    }
    m_move(m, M_PARTS);
    memset(&m->conns, 0, sizeof(m->conns)); /* the parts' WAITs: on their connections */
    int n = 0;
    for (int i = 0; i < m->n; i++)
        n += i != m->skip && m->s[i].take > 0;
    m->pending = n + 1; /* + 1 for this function */
    for (int i = 0; i < m->n; i++) {
        struct mseg *g = &m->s[i];
        if (i == m->skip || g->take <= 0)
            continue;
        struct store_commit_call c;
        char *rec = part_record(m, g);
        lc_status st = LC_ENOMEM;
        if (rec) {
            part_call(m, g, 0, rec, &c);
            st = seglock_eval(g->lock, store_script(m->rq.app->store, SCRIPT_COMMIT),
                              LC_EVAL_RELEASE, c.nkeys, c.keys, c.nargs, c.args, on_part, g);
        }
        free(rec);
        if (st != LC_OK) {
            g->res = SEG_ERROR;
            drop(g);
            m->pending--;
        }
    }
    /* the parts' answers (or this, when none was sent or all failed to start) go on */
    if (--m->pending == 0)
        parts_done(m);
}

/* ---- a cart's item ---- */

json_t *multi_cart_parts(const struct multi *m, int *first)
{
    json_t *parts = json_array();
    *first = -1;
    for (int a = 0; parts && a < m->n; a++) {
        const struct mseg *g = &m->s[m->order[a]];
        if (g->take <= 0)
            continue;
        if (*first < 0)
            *first = g->k;
        json_array_append_new(
            parts, json_pack("{s:i, s:I}", "segment", g->k, "quantity", (json_int_t)g->take));
    }
    return parts;
}

int multi_cart_intent_parts(const struct multi *m, char *buf, size_t cap)
{
    size_t used = strlen(buf);
    for (int a = 0; a < m->n; a++) {
        const struct mseg *g = &m->s[m->order[a]];
        if (g->take <= 0)
            continue;
        int w = snprintf(buf + used, cap - used, "%s%d:%lld:%s", used ? "," : "", g->k, g->take,
                         m->rq.sku);
        if (w < 0 || (size_t)w >= cap - used)
            return -1;
        used += (size_t)w;
    }
    return 0;
}

void multi_cart_deadline(struct multi *m, const char *deadline)
{
    snprintf(m->deadline, sizeof(m->deadline), "%s", deadline);
}

void multi_cart_primary(struct multi *m, const char *rec, const char *items)
{
    free(m->primary_rec);
    free(m->items);
    m->primary_rec = strdup(rec);
    m->items = strdup(items);
    snprintf(m->res.order_id, sizeof(m->res.order_id), "%s", m->s[m->primary].id);
    if (!m->primary_rec || !m->items) {
        multi_why(m, "", "out of memory");
        drop(&m->s[m->primary]);
        undo_made(m, OUT_UNAVAILABLE);
        return;
    }
    primary_commit(m);
}

void multi_cart_undo(struct multi *m, enum order_outcome out)
{
    undo_made(m, out);
}

/* ---- a replay's WAITs ---- */

struct vouch {
    struct app *app;
    lc_async_client *lc;
    const struct areq *ar;
    multi_vouch_fn cb;
    void *arg;
    struct store_conns conns;
    int pending, missing;
};

static void on_vouch_acked(void *arg, long long acks)
{
    struct vouch *v = arg;
    int ok = acks >= v->app->cfg.redis_replica_acks;
    multi_vouch_fn cb = v->cb;
    void *cbarg = v->arg;
    free(v);
    cb(cbarg, ok);
}

static void vouch_wait(struct vouch *v)
{
    if (v->missing) /* an overflowed set WAITs on nothing and answers -1 (on the next turn) */
        v->conns.overflow = 1;
    store_replica_wait_conns_async(v->lc, v->ar, &v->conns, v->app->cfg.redis_replica_acks,
                                   v->app->cfg.redis_timeout_ms, on_vouch_acked, v);
}

static void on_vouch_read(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct vouch *v = arg;
    store_conns_note(&v->conns, v->lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        v->missing = 1; /* a part that is not there cannot be vouched for */
    if (--v->pending == 0)
        vouch_wait(v);
}

void multi_replay_vouch(struct app *app, lc_async_client *lc, const struct areq *ar,
                        const char *sku, const json_t *order, const lc_async_conn_ref *ref,
                        multi_vouch_fn cb, void *arg)
{
    struct vouch *v = calloc(1, sizeof(*v));
    if (!v) {
        cb(arg, 0);
        return;
    }
    *v = (struct vouch){.app = app, .lc = lc, .ar = ar, .cb = cb, .arg = arg};
    if (ref) {
        v->conns.ref[0] = *ref;
        v->conns.n = 1;
    } else {
        v->missing = 1; /* the record's connection is not known: nothing can vouch for it */
    }
    const char *id = json_string_value(json_object_get(order, "order_id"));
    json_t *own = json_object_get(order, "segment");
    json_t *parts = json_object_get(order, "parts");
    v->pending = 1; /* this function's own, dropped at its end */
    for (size_t i = 0;
         id && strlen(id) > IDS_ORDER_HEX && json_is_array(parts) && i < json_array_size(parts);
         i++) {
        json_t *kj = json_object_get(json_array_get(parts, i), "segment");
        if (!json_is_integer(kj) || json_equal(kj, own))
            continue; /* the primary's own segment: its record is the one fetched */
        char pid[ORDER_ID_MAX + 16];
        snprintf(pid, sizeof(pid), "%.*s-%d-%s", IDS_ORDER_HEX, id, (int)json_integer_value(kj),
                 sku);
        struct seg_keys sk;
        store_seg_keys(sku, (int)json_integer_value(kj), &sk);
        const char *argv[3] = {"HEXISTS", sk.orders, pid};
        v->pending++;
        store_command_async(lc, ar, 3, argv, on_vouch_read, v);
    }
    if (--v->pending == 0)
        vouch_wait(v);
}
