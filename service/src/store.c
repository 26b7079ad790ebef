/*
 * Redis access for the service; see store.h. Every command goes through a worker loop's
 * asynchronous lockcore client (worker.c makes them); the store holds the scripts and builds
 * the keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_scripts.h"

struct store {
    lc_script *scripts[SCRIPT_COUNT];
};

int store_new(const struct config *cfg, struct store **out, char *err, size_t errlen)
{
    *out = NULL;
    struct store *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "store: out of memory");
        return -1;
    }
    static const char *const sources[SCRIPT_COUNT] = {
        [SCRIPT_PUT_META] = STORE_LUA_PUT_META,
        [SCRIPT_DELETE_META] = STORE_LUA_DELETE_META,
        [SCRIPT_LAYOUT_READ] = STORE_LUA_LAYOUT_READ,
        [SCRIPT_LAYOUT_DONE] = STORE_LUA_LAYOUT_DONE,
        [SCRIPT_SEG_RESET] = STORE_LUA_SEG_RESET,
        [SCRIPT_SEG_DROP] = STORE_LUA_SEG_DROP,
        [SCRIPT_SEG_STATUS] = STORE_LUA_SEG_STATUS,
        [SCRIPT_RESTOCK_BEGIN] = STORE_LUA_RESTOCK_BEGIN,
        [SCRIPT_RESTOCK_APPLY] = STORE_LUA_RESTOCK_APPLY,
        [SCRIPT_RESTOCK_END] = STORE_LUA_RESTOCK_END,
        [SCRIPT_RESTOCK_STATE] = STORE_LUA_RESTOCK_STATE,
        [SCRIPT_COMMIT] = STORE_LUA_COMMIT_BODY,
        [SCRIPT_COMMIT_ATOMIC] = STORE_LUA_COMMIT_ATOMIC,
        [SCRIPT_CANCEL] = STORE_LUA_CANCEL,
        [SCRIPT_IDEM_CLAIM] = STORE_LUA_IDEM_CLAIM,
        [SCRIPT_IDEM_TAKEOVER] = STORE_LUA_IDEM_TAKEOVER,
        [SCRIPT_IDEM_SWAP] = STORE_LUA_IDEM_SWAP,
        [SCRIPT_VER_RAISE] = STORE_LUA_VER_RAISE,
    };
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        /* The commit is fenced by the lock: its owner and token on this Redis, or with
         * --lock-redis the Redlock's token alone (seglock.c). */
        lc_status st = i != SCRIPT_COMMIT ? lc_script_new(sources[i], &s->scripts[i])
                       : cfg->lock_redis_n ? lc_token_fenced_script_new(sources[i], &s->scripts[i])
                                           : lc_fenced_script_new(sources[i], &s->scripts[i]);
        if (st != LC_OK) {
            snprintf(err, errlen, "store: script %d: %s", i, lc_errmsg());
            store_free(s);
            return -1;
        }
    }
    *out = s;
    return 0;
}

void store_free(struct store *store)
{
    if (!store)
        return;
    for (int i = 0; i < SCRIPT_COUNT; i++)
        lc_script_free(store->scripts[i]);
    free(store);
}

const lc_script *store_script(struct store *store, enum store_script id)
{
    return store->scripts[id];
}

void store_seg_keys(const char *sku, int k, struct seg_keys *out)
{
#define SEG_KEY(field)                                                                             \
    snprintf(out->field, sizeof(out->field), STORE_KEY_PREFIX "{%s" STORE_SEG_SEP "%d}:" #field,   \
             sku, k)
    SEG_KEY(stock);
    SEG_KEY(sver);
    SEG_KEY(cnt);
    SEG_KEY(orders);
    SEG_KEY(idem);
    SEG_KEY(rst);
    SEG_KEY(lock);
#undef SEG_KEY
}

void store_sku_key(char *buf, const char *sku, const char *suffix)
{
    snprintf(buf, STORE_KEY_MAX, STORE_KEY_PREFIX "{%s}:%s", sku, suffix);
}

long long store_reply_int(const redisReply *r, long long dflt)
{
    if (!r)
        return dflt;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        long long v = strtoll(r->str, &end, 10);
        return end != r->str && *end == '\0' ? v : dflt;
    }
    return dflt;
}

/* ---- asynchronous ---- */

/* A batch in flight: owned by itself, freed when its last reply is in (after the callback). */
struct batch {
    store_batch_fn cb;
    void *arg;
    int n, left, failed;
    char why[256]; /* the first failure's message */
    struct store_item *items;
    struct batch_slot {
        struct batch *b;
        int i;
    } *slots;
    struct store_conns *conns;
    const lc_async_client *lc;
};

static void batch_end(struct batch *b)
{
    b->cb(b->arg, b->failed ? b->why : NULL, b->items, b->n);
    free(b->slots);
    free(b->items);
    free(b);
}

static void on_batch_item(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct batch_slot *s = arg;
    struct batch *b = s->b;
    store_conns_note(b->conns, b->lc);
    if (st != LC_OK || !r) {
        if (!b->failed)
            snprintf(b->why, sizeof(b->why), "%s", st != LC_OK ? errstr : "no reply");
        b->failed = 1;
        if (st == LC_EREDIS) /* answered, with an error: that call wrote nothing */
            b->items[s->i].type = REDIS_REPLY_ERROR;
    } else {
        struct store_item *it = &b->items[s->i];
        it->type = r->type;
        it->v = store_reply_int(r, 0);
        if (r->type == REDIS_REPLY_ARRAY) {
            it->n = (int)r->elements;
            for (size_t j = 0; j < r->elements && j < STORE_ITEM_MAX; j++)
                it->e[j] = store_reply_int(r->element[j], 0);
        }
    }
    if (--b->left == 0)
        batch_end(b);
}

void store_batch_async(struct store *store, lc_async_client *lc, enum store_script id, int n,
                       int nkeys, const char *const *keys, int nargs, const char *const *args,
                       struct store_conns *conns, store_batch_fn cb, void *arg)
{
    struct batch *b = calloc(1, sizeof(*b));
    if (!b) {
        cb(arg, "out of memory", NULL, 0);
        return;
    }
    b->cb = cb;
    b->arg = arg;
    b->n = n;
    b->conns = conns;
    b->lc = lc;
    b->items = calloc((size_t)n + 1, sizeof(*b->items));
    b->slots = calloc((size_t)n + 1, sizeof(*b->slots));
    b->left = 1; /* this function's own reference: the batch ends after every call started */
    if (!b->items || !b->slots) {
        snprintf(b->why, sizeof(b->why), "out of memory");
        b->failed = 1;
        n = 0;
    }
    for (int i = 0; i < n; i++) {
        b->slots[i].b = b;
        b->slots[i].i = i;
        b->left++;
        if (lc_async_script(lc, store->scripts[id], nkeys,
                            keys ? keys + (size_t)i * (size_t)nkeys : NULL, NULL, nargs,
                            args ? args + (size_t)i * (size_t)nargs : NULL, NULL, on_batch_item,
                            &b->slots[i]) != LC_OK) {
            if (!b->failed) /* the start's failure, just recorded */
                snprintf(b->why, sizeof(b->why), "%s", lc_errmsg());
            b->failed = 1;
            b->left--;
        }
    }
    if (--b->left == 0)
        batch_end(b);
}

/* WAIT's timeout: a quarter of the Redis timeout (at least 1 ms). */
static int wait_ms(int redis_timeout_ms)
{
    int timeout = redis_timeout_ms / 4;
    return timeout > 0 ? timeout : 1;
}

void store_conns_note(struct store_conns *cs, const lc_async_client *lc)
{
    lc_async_conn_ref ref;
    if (!cs || lc_async_reply_conn(lc, &ref) != 0)
        return;
    for (int i = 0; i < cs->n; i++)
        if (cs->ref[i].node == ref.node && cs->ref[i].gen == ref.gen)
            return;
    if (cs->n == STORE_CONNS_MAX) {
        cs->overflow = 1;
        return;
    }
    cs->ref[cs->n++] = ref;
}

void store_replica_wait_ref_async(lc_async_client *lc, const lc_async_conn_ref *ref, int acks,
                                  int redis_timeout_ms, lc_async_reply_fn cb, void *arg)
{
    if (lc_async_wait(lc, ref, acks, wait_ms(redis_timeout_ms), cb, arg) != LC_OK)
        cb(LC_EIO, NULL, lc_errmsg(), arg); /* not started; the message just recorded */
}

/* The WAITs of one store_replica_wait_conns_async: the fewest acknowledgements so far. */
struct wait_all {
    store_acked_fn cb;
    void *arg;
    int left; /* replies to come, + 1 while sending */
    long long fewest;
};

static void wait_all_one(struct wait_all *w, long long got)
{
    if (got < w->fewest)
        w->fewest = got;
    if (--w->left == 0) {
        struct wait_all done = *w;
        free(w);
        done.cb(done.arg, done.fewest);
    }
}

static void on_wait_all(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr; /* the fewest acknowledgements is the answer */
    wait_all_one(arg, store_reply_acks(st, r));
}

void store_replica_wait_conns_async(lc_async_client *lc, const struct store_conns *cs, int acks,
                                    int redis_timeout_ms, store_acked_fn cb, void *arg)
{
    struct wait_all *w = malloc(sizeof(*w));
    if (!w || cs->overflow) {
        free(w);
        cb(arg, -1);
        return;
    }
    /* left counts this function too, so a WAIT failing at once cannot end it mid-loop. */
    *w = (struct wait_all){cb, arg, cs->n + 1, acks};
    for (int i = 0; i < cs->n; i++)
        if (lc_async_wait(lc, &cs->ref[i], acks, wait_ms(redis_timeout_ms), on_wait_all, w) !=
            LC_OK)
            wait_all_one(w, -1);
    wait_all_one(w, w->fewest);
}

long long store_reply_acks(lc_status st, const redisReply *r)
{
    return st == LC_OK && r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

void store_script_async(struct store *store, lc_async_client *lc, enum store_script id,
                        int nkeys, const char *const *keys, int nargs, const char *const *args,
                        lc_async_reply_fn cb, void *arg)
{
    lc_status st =
        lc_async_script(lc, store->scripts[id], nkeys, keys, NULL, nargs, args, NULL, cb, arg);
    if (st != LC_OK)
        cb(st, NULL, lc_errmsg(), arg); /* nothing was sent: not LC_EIO, whose effect is unknown */
}
