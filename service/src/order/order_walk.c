/*
 * The order path's pure decisions (order_walk.h): what order_fsm.c's states do with what they
 * read, with no I/O of their own.
 */
#include "order_walk.h"

#include "order_outcome.h"
#include "store_scripts.h"

void order_walk_busy(struct walk *w, int k)
{
    uint64_t bit = 1ULL << (k % 64);
    if (!(w->busy[k / 64] & bit)) {
        w->busy[k / 64] |= bit;
        w->nbusy++;
    }
}

int order_walk_busy_nth(const struct walk *w, int n)
{
    for (int i = 0; i < SKUCACHE_MAX_SEGMENTS / 64; i++) {
        int c = __builtin_popcountll(w->busy[i]);
        if (n >= c) {
            n -= c;
            continue;
        }
        uint64_t b = w->busy[i];
        while (n-- > 0)
            b &= b - 1;
        return i * 64 + __builtin_ctzll(b);
    }
    return 0; /* never: n < nbusy */
}

int order_walk_note(struct walk *w, int k, enum seg_result r)
{
    uint64_t bit = 1ULL << (k % 64);
    switch (r) {
    case SEG_BUSY: order_walk_busy(w, k); return 0;
    case SEG_NOTREADY: w->retry = w->notready = 1; return 0;
    case SEG_LOST: w->retry = 1; return 1;
    case SEG_SHORT:
        w->any_short = 1;
        w->done[k / 64] |= bit;
        return 1;
    case SEG_EMPTY: w->done[k / 64] |= bit; return 1;
    case SEG_ERROR:
        w->any_error = 1;
        w->done[k / 64] |= bit;
        return 1;
    default: return 0;
    }
}

enum order_outcome order_walk_end(const struct walk *w, int timed_out)
{
    if (w->any_error)
        return OUT_UNAVAILABLE;
    if (timed_out || w->nbusy > 0 || w->retry)
        return OUT_LOCK_TIMEOUT;
    return w->any_short ? OUT_INSUFFICIENT : OUT_SOLD_OUT;
}

int order_walk_settles(enum seg_result r)
{
    enum order_outcome out;
    return order_outcome_of_seg(r, 0, &out);
}

enum order_outcome order_walk_settled_outcome(enum seg_result r)
{
    enum order_outcome out;
    return order_outcome_of_seg(r, 0, &out) ? out : OUT_UNAVAILABLE;
}

enum round_end order_walk_round_end(const struct walk *w, int need_layout, int64_t left,
                                    int settled)
{
    if (need_layout)
        return RE_RELOAD;
    if (w->nbusy == 0 && !w->retry)
        return RE_ANSWER;
    if (left <= 0)
        return RE_TIMEOUT;
    if (w->nbusy > 0)
        return RE_WAIT;
    if (!w->notready)
        return RE_AGAIN;
    return settled ? RE_PAUSE : RE_SETTLE;
}

void order_walk_acquire_verdict(long long stock, long long sver, int64_t version, int64_t qty,
                                struct seg_verdict *v)
{
    *v = (struct seg_verdict){.r = SEG_DONE, .sver = sver};
    if (sver != version) {
        v->differs = 1;
        return;
    }
    if (stock < qty) {
        v->empty = stock <= 0;
        v->r = stock <= 0 ? SEG_EMPTY : SEG_SHORT;
    }
}

void order_walk_commit_verdict(const redisReply *r, struct seg_verdict *v)
{
    *v = (struct seg_verdict){.r = SEG_UNKNOWN};
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return;
    long long code = r->element[0]->integer, value = r->element[1]->integer;
    switch (code) {
    case STORE_COMMIT_OK:
        v->r = SEG_DONE;
        v->empty = value == 0;
        return;
    case STORE_COMMIT_SHORT:
        v->r = value <= 0 ? SEG_EMPTY : SEG_SHORT;
        v->empty = value <= 0;
        return;
    case STORE_COMMIT_EXPIRED: v->r = SEG_EXPIRED; return;
    case STORE_COMMIT_NOT_STARTED:
        v->r = SEG_NOT_STARTED;
        v->at = value;
        return;
    case STORE_COMMIT_ENDED:
        v->r = SEG_ENDED;
        v->at = value;
        return;
    case STORE_COMMIT_LIMIT:
        v->r = SEG_LIMIT;
        v->at = value; /* the limit */
        return;
    case STORE_COMMIT_LOG_FULL: /* nothing written; the order may go on elsewhere */
        v->r = SEG_ERROR;
        v->at = value > 0 ? value : 1;
        return;
    case STORE_COMMIT_DAMAGED:
        v->r = SEG_ERROR;
        v->damaged = 1;
        return;
    case STORE_COMMIT_RULES: /* nothing written; the same path as a stale layout */
        v->r = SEG_STALE;
        v->rules = 1;
        v->at = value;
        return;
    default: /* STORE_COMMIT_VERSION, as the commit's caller always took it */
        v->differs = 1;
        v->sver = value;
        return;
    }
}

enum seg_result order_walk_commit_failed(lc_status st, int fenced)
{
    if (fenced && st == LC_ELOST)
        return SEG_LOST;
    return st == LC_EIO ? SEG_UNKNOWN : SEG_ERROR;
}

enum version_verdict order_walk_version(long long sver, int64_t version, int healed,
                                        int64_t stale_from)
{
    if (sver < version)
        return healed ? VV_LEFT_OUT : VV_NOTREADY;
    return stale_from != version ? VV_STALE : VV_AHEAD;
}

enum single_end order_walk_single_end(enum seg_result r, int any_short, int settled,
                                      enum order_outcome *out)
{
    if (r != SEG_DONE && any_short)
        r = SEG_SHORT;
    /* settled at once, or the last word of a segment left (outcome_table.h: settles, ends) */
    if (order_outcome_of_seg(r, 0, out) || order_outcome_of_seg(r, 1, out))
        return SE_ANSWER;
    switch (r) {
    case SEG_NOTREADY: return settled ? SE_PAUSE : SE_SETTLE;
    case SEG_LOST: return SE_AGAIN;
    default: /* stale: read the layout again */ return SE_RELOAD;
    }
}

int order_walk_plan(int n, const long long *stock, int64_t qty, long long *take)
{
    long long total = 0;
    for (int i = 0; i < n; i++) {
        take[i] = 0;
        if (stock[i] > 0)
            total += stock[i];
    }
    if (qty <= 0 || total < qty)
        return 0;
    /* The fewest segments: the largest first (ties: the lower index), until they hold qty. A
     * plan has at most n parts; chosen[] marks them (take[] as a flag for now: -1). */
    long long got = 0;
    int parts = 0;
    while (got < qty) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (stock[i] > 0 && take[i] == 0 && (best < 0 || stock[i] > stock[best]))
                best = i;
        take[best] = -1;
        got += stock[best];
        parts++;
    }
    /* The smaller ones emptied (smallest first), the rest from the largest: every chosen one but
     * the largest sums to less than qty (they are the largest but one), so each part is >= 1. */
    long long left = qty;
    for (int done = 0; done < parts; done++) {
        int small = -1;
        for (int i = 0; i < n; i++)
            if (take[i] == -1 &&
                (small < 0 || stock[i] < stock[small] || (stock[i] == stock[small] && i > small)))
                small = i;
        long long t = stock[small] < left ? stock[small] : left;
        take[small] = t;
        left -= t;
    }
    return parts;
}
