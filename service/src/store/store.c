/*
 * Redis access for the service; see store.h. Every command goes through a worker loop's
 * asynchronous lockcore client (worker.c makes them); the store holds the scripts and builds
 * the keys. Every callback of a store call goes through one funnel here (on_call_reply,
 * batch_end, wait_all_end): in its request's log context, on the loop, never from inside the
 * call that started it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "log.h"
#include "rules.h"
#include "store.h"
#include "store_scripts.h"

struct store {
    lc_script *scripts[SCRIPT_COUNT];
    int replica_acks; /* --redis-replica-acks */
    int timeout_ms;   /* --redis-timeout-ms */
};

int store_new(const struct config *cfg, struct store **out, char *err, size_t errlen)
{
    *out = NULL;
    struct store *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "store: out of memory");
        return -1;
    }
    s->replica_acks = cfg->redis_replica_acks;
    s->timeout_ms = cfg->redis_timeout_ms;
    static const char *const sources[SCRIPT_COUNT] = {
        [SCRIPT_PUT_META] = STORE_LUA_PUT_META,
        [SCRIPT_DELETE_META] = STORE_LUA_DELETE_META,
        [SCRIPT_LAYOUT_READ] = STORE_LUA_LAYOUT_READ,
        [SCRIPT_LAYOUT_DONE] = STORE_LUA_LAYOUT_DONE,
        [SCRIPT_SEG_RESET] = STORE_LUA_SEG_RESET,
        [SCRIPT_SEG_DROP] = STORE_LUA_SEG_DROP,
        [SCRIPT_SEG_STATUS] = STORE_LUA_SEG_STATUS,
        [SCRIPT_STATUS_READ] = STORE_LUA_STATUS_READ,
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
        [SCRIPT_CONFIRM] = STORE_LUA_CONFIRM,
        [SCRIPT_EXPIRE] = STORE_LUA_EXPIRE,
        [SCRIPT_USER_RESERVE] = STORE_LUA_USER_RESERVE,
        [SCRIPT_USER_RESOLVE] = STORE_LUA_USER_RESOLVE,
        [SCRIPT_USER_RELEASE] = STORE_LUA_USER_RELEASE,
        [SCRIPT_PATCH_RULES] = STORE_LUA_PATCH_RULES,
        [SCRIPT_RULES_PUSH] = STORE_LUA_RULES_PUSH,
        [SCRIPT_MULTI_BEGIN] = STORE_LUA_MULTI_BEGIN,
        [SCRIPT_CART_BEGIN] = STORE_LUA_CART_BEGIN,
        [SCRIPT_PART_FOLLOW] = STORE_LUA_PART_FOLLOW,
        [SCRIPT_PART_UNDO] = STORE_LUA_PART_UNDO,
        [SCRIPT_MULTI_DUE] = STORE_LUA_MULTI_DUE,
        [SCRIPT_HOLDS_DUE] = STORE_LUA_HOLDS_DUE,
        [SCRIPT_GATE_JOIN] = STORE_LUA_GATE_JOIN,
        [SCRIPT_GATE_ADMIT] = STORE_LUA_GATE_ADMIT,
        [SCRIPT_GATE_PLACE] = STORE_LUA_GATE_PLACE,
        [SCRIPT_GATE_USED] = STORE_LUA_GATE_USED,
        [SCRIPT_EXTEND] = STORE_LUA_EXTEND,
        [SCRIPT_GROUP_RESERVE] = STORE_LUA_GROUP_RESERVE,
        [SCRIPT_GROUP_PUT] = STORE_LUA_GROUP_PUT,
        [SCRIPT_GROUP_READ] = STORE_LUA_GROUP_READ,
    };
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        /* The commit is fenced by the lock: its owner and token on this Redis, or with
         * --lock-redis / --lock-mysql / --lock-zookeeper that lock's token alone (seglock.c). */
        int token_only = cfg->lock_redis_n || cfg->lock_mysql[0] || cfg->lock_zookeeper[0];
        lc_status st = i != SCRIPT_COMMIT ? lc_script_new(sources[i], &s->scripts[i])
                       : token_only       ? lc_token_fenced_script_new(sources[i], &s->scripts[i])
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

/* Writes pre[0..plen) and then name[0..nlen) into key (STORE_KEY_MAX), cut as snprintf cuts. */
static void seg_key(char *key, const char *pre, size_t plen, const char *name, size_t nlen)
{
    memcpy(key, pre, plen);
    if (nlen > STORE_KEY_MAX - 1 - plen)
        nlen = STORE_KEY_MAX - 1 - plen;
    memcpy(key + plen, name, nlen);
    key[plen + nlen] = '\0';
}

void store_seg_keys(const char *sku, int k, struct seg_keys *out)
{
    /* The prefix "inv:2:{<sku>/<k>}:" made once, then each name after it: eleven snprintf
     * calls were 3 % of inventoryd's CPU per order (issue 23). A key is cut to STORE_KEY_MAX - 1
     * bytes as snprintf would cut it. */
    char pre[STORE_KEY_MAX];
    int n = snprintf(pre, sizeof(pre), STORE_KEY_PREFIX "{%s" STORE_SEG_SEP "%d}:", sku, k);
    size_t plen = n < 0 ? 0 : (size_t)n < sizeof(pre) ? (size_t)n : sizeof(pre) - 1;
    /* each field named as its row of the key schema (store_keys_gen.h) */
#define SEG_KEY(field)                                                                             \
    seg_key(out->field, pre, plen, STORE_KEY_SEG_##field, sizeof(STORE_KEY_SEG_##field) - 1);
    STORE_KEYS_SEG_FIELDS(SEG_KEY)
#undef SEG_KEY
}

_Static_assert(STORE_COMMIT_ARG_RULES_VERSION + 1 == STORE_COMMIT_ARG_ITEMS &&
                   STORE_COMMIT_ARG_ITEMS == STORE_COMMIT_NARGS,
               "the rules' version, then the cart's items, are the commit's last arguments");

void store_commit_call(const struct store_commit_in *in, struct store_commit_call *c)
{
    store_seg_keys(in->sku, in->k, &c->sk);
    c->keys[0] = c->sk.stock;
    c->keys[1] = c->sk.sver;
    c->keys[2] = c->sk.cnt;
    c->keys[3] = c->sk.orders;
    c->keys[4] = c->sk.idem;
    c->keys[5] = c->sk.due;
    c->keys[6] = c->sk.log;
    c->keys[7] = c->sk.rver;
    snprintf(c->ver, sizeof(c->ver), "%" PRId64, in->version);
    snprintf(c->qty, sizeof(c->qty), "%lld", in->qty);
    snprintf(c->cap, sizeof(c->cap), "%d", in->log_cap);
    snprintf(c->seg, sizeof(c->seg), "%d", in->k);
    snprintf(c->total, sizeof(c->total), "%lld", in->total);
    snprintf(c->rver, sizeof(c->rver), "%" PRId64, in->rules->version);
    c->args[0] = c->ver;
    c->args[1] = c->qty;
    c->args[2] = in->id;
    c->args[3] = in->record;
    c->args[4] = in->idem;
    c->args[5] = in->expiry;
    c->args[9] = c->cap;
    c->args[10] = in->user;
    c->args[11] = in->sku;
    c->args[12] = c->seg;
    c->args[13] = in->kind ? in->kind : "";
    c->args[14] = in->parts ? in->parts : "";
    c->args[15] = c->total;
    c->args[16] = in->users ? in->hex : "";
    c->args[STORE_COMMIT_ARG_RULES_VERSION - 1] = c->rver;
    c->args[STORE_COMMIT_ARG_ITEMS - 1] = in->items ? in->items : "";
    /* each rule the commit judges at its position (rules_table.h's arg column) */
#define RULE_ARG_(id, json, lo, hi, jtext, deftext, meta, arg, ...)                                \
    if (arg > 0) {                                                                                 \
        snprintf(c->rules[RULES_I_##id], sizeof(c->rules[0]), "%" PRId64,                          \
                 rules_get(in->rules, RULES_I_##id));                                              \
        c->args[arg - 1] = c->rules[RULES_I_##id];                                                 \
    }
#define RULE_ARG_TIME_(id, json, jtext, deftext, meta, arg, ...)                                   \
    RULE_ARG_(id, json, 0, 0, jtext, deftext, meta, arg, 0)
    /* a STR rule (limit_group) is judged before the walk (group_reserve.lua), never here */
#define RULE_ARG_STR_(...)
    RULES_TABLE(RULE_ARG_, RULE_ARG_TIME_, RULE_ARG_STR_)
#undef RULE_ARG_STR_
#undef RULE_ARG_
#undef RULE_ARG_TIME_
    /* KEYS[9]: the segment's undone set (part_undo.lua's tombstones), which a part's or a
     * primary's commit refuses its id by (issue 29 item 7); always declared: same slot */
    c->keys[8] = c->sk.undone;
    c->nkeys = 9;
    c->nargs = STORE_COMMIT_NARGS;
    if (in->users) {
        c->keys[9] = in->users;
        c->keys[10] = in->meta;
        c->nkeys = 11;
    }
    if (in->hold_index && in->rules->ttl_s > 0 && !(in->kind && strcmp(in->kind, "part") == 0)) {
        if (!in->users) { /* declared only: the script reads them when ARGV[17] is given */
            store_sku_key(c->users, in->sku, "users");
            store_sku_key(c->meta, in->sku, "meta");
            c->keys[9] = c->users;
            c->keys[10] = c->meta;
        }
        c->keys[11] = store_holds_key();
        c->nkeys = 12;
    }
}

void store_sku_key(char *buf, const char *sku, const char *suffix)
{
    snprintf(buf, STORE_KEY_MAX, STORE_KEY_PREFIX "{%s}:%s", sku, suffix);
}

void store_group_key(char *buf, const char *group, const char *suffix)
{
    snprintf(buf, STORE_KEY_MAX, STORE_KEY_PREFIX "{G=%s}:%s", group, suffix);
}

void store_user_key(char *buf, const char *user, const char *suffix)
{
    snprintf(buf, STORE_USER_KEY_MAX, STORE_KEY_PREFIX "{@%s}:%s", user, suffix);
}

const char *store_registry_key(void)
{
    return STORE_KEY_PREFIX STORE_KEY_GLOBAL_skus;
}

const char *store_holds_key(void)
{
    return STORE_KEY_PREFIX STORE_KEY_GLOBAL_holds;
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

/* Runs fn(p) on lc's loop's next turn, so that a call that could not start never calls back
 * from inside itself. Now instead only when there is no next turn: st LC_ESTATE (the client is
 * being freed at the loop's end, and lc_async_client_free ends every operation inside itself)
 * or libevent cannot allocate the event (out of memory). */
static void defer(lc_async_client *lc, lc_status st, event_callback_fn fn, void *p)
{
    static const struct timeval next_turn = {0, 0};
    if (st == LC_ESTATE ||
        event_base_once(lc_async_client_base(lc), -1, EV_TIMEOUT, fn, p, &next_turn) != 0)
        fn(-1, EV_TIMEOUT, p);
}

/* The request context of a callback: its log lines carry ar's id (none when ar is NULL). Every
 * callback of this file is run between these two, and nowhere else in the service is a store
 * callback bracketed. */
static void ctx_begin(const struct areq *ar)
{
    if (ar)
        log_ctx_begin(ar);
}

static void ctx_end(const struct areq *ar)
{
    if (ar)
        log_ctx_end();
}

/* One call in flight, from its start to its callback (which frees it first): the callback, its
 * request and, for a call that could not start, that failure (status and lockcore's message,
 * copied when it happened: lc_errmsg() is the loop's last failure, not this call's). */
struct call {
    const struct areq *ar;
    lc_async_reply_fn cb;
    void *arg;
    lc_status st;
    char why[STORE_WHY_MAX];
};

/* The trampoline: every reply of a single call comes here, and goes to its callback in its
 * request's context. */
static void on_call_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct call *c = arg;
    const struct areq *ar = c->ar;
    lc_async_reply_fn cb = c->cb;
    void *cb_arg = c->arg;
    free(c);
    ctx_begin(ar);
    cb(st, r, errstr, cb_arg);
    ctx_end(ar);
}

static void on_call_deferred(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct call *c = arg;
    char why[STORE_WHY_MAX];
    memcpy(why, c->why, sizeof(why)); /* c is freed before the callback */
    on_call_reply(c->st, NULL, why, c);
}

/* A new call record, or NULL (out of memory: cb has been called, the one synchronous case). */
static struct call *call_new(const struct areq *ar, lc_async_reply_fn cb, void *arg)
{
    struct call *c = malloc(sizeof(*c));
    if (!c) {
        ctx_begin(ar);
        cb(LC_ENOMEM, NULL, "store: out of memory", arg);
        ctx_end(ar);
        return NULL;
    }
    c->ar = ar;
    c->cb = cb;
    c->arg = arg;
    c->st = LC_OK;
    c->why[0] = '\0';
    return c;
}

/* After a start that returned st: nothing when it started (the reply comes to on_call_reply),
 * else its failure, reported as report (st itself when LC_OK), on the next turn. */
static void call_started(lc_async_client *lc, struct call *c, lc_status st, lc_status report)
{
    if (st == LC_OK)
        return;
    c->st = report != LC_OK ? report : st;
    snprintf(c->why, sizeof(c->why), "%s", lc_errmsg()); /* the start's failure, just recorded */
    defer(lc, st, on_call_deferred, c);
}

/* A batch in flight: owned by itself, freed when its last reply is in (after the callback). */
struct batch {
    store_batch_fn cb;
    void *arg;
    const struct areq *ar;
    int n, left, failed;
    char why[STORE_WHY_MAX]; /* the first failure's message */
    struct store_item *items;
    struct batch_slot {
        struct batch *b;
        int i;
    } * slots;
    struct store_conns *conns;
    const lc_async_client *lc;
};

static void batch_end(struct batch *b)
{
    ctx_begin(b->ar);
    b->cb(b->arg, b->failed ? b->why : NULL, b->items, b->n);
    ctx_end(b->ar);
    free(b->slots);
    free(b->items);
    free(b);
}

static void on_batch_deferred(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    batch_end(arg);
}

void store_item_of(const redisReply *r, struct store_item *it)
{
    memset(it, 0, sizeof(*it));
    it->type = r->type;
    it->v = store_reply_int(r, 0);
    if (r->type == REDIS_REPLY_ARRAY) {
        it->n = (int)r->elements;
        for (size_t j = 0; j < r->elements && j < STORE_ITEM_MAX; j++)
            it->e[j] = store_reply_int(r->element[j], 0);
    }
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
        store_item_of(r, &b->items[s->i]);
    }
    if (--b->left == 0)
        batch_end(b);
}

void store_batch_async(struct store *store, lc_async_client *lc, const struct areq *ar,
                       enum store_script id, int n, int nkeys, const char *const *keys, int nargs,
                       const char *const *args, struct store_conns *conns, store_batch_fn cb,
                       void *arg)
{
    struct batch *b = calloc(1, sizeof(*b));
    if (!b) {
        ctx_begin(ar);
        cb(arg, "out of memory", NULL, 0);
        ctx_end(ar);
        return;
    }
    b->cb = cb;
    b->arg = arg;
    b->ar = ar;
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
    lc_status first = LC_OK; /* the first start's failure */
    for (int i = 0; i < n; i++) {
        b->slots[i].b = b;
        b->slots[i].i = i;
        b->left++;
        lc_status st = lc_async_script(lc, store->scripts[id], nkeys,
                                       keys ? keys + (size_t)i * (size_t)nkeys : NULL, NULL, nargs,
                                       args ? args + (size_t)i * (size_t)nargs : NULL, NULL,
                                       on_batch_item, &b->slots[i]);
        if (st != LC_OK) {
            if (!b->failed) /* the start's failure, just recorded */
                snprintf(b->why, sizeof(b->why), "%s", lc_errmsg());
            if (first == LC_OK)
                first = st;
            b->failed = 1;
            b->left--;
        }
    }
    if (--b->left == 0) /* nothing in flight: every call failed to start (or n is 0) */
        defer(lc, first, on_batch_deferred, b);
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

int store_replica_acks(const struct store *store)
{
    return store->replica_acks;
}

void store_replicated_async(struct store *store, lc_async_client *lc, const struct areq *ar,
                            const struct store_conns *cs, store_acked_fn cb, void *arg)
{
    store_replica_wait_conns_async(lc, ar, cs, store->replica_acks, store->timeout_ms, cb, arg);
}

void store_replica_wait_ref_async(lc_async_client *lc, const lc_async_conn_ref *ref, int acks,
                                  int redis_timeout_ms, lc_async_reply_fn cb, void *arg)
{
    struct call *c = call_new(NULL, cb, arg);
    if (!c)
        return;
    lc_status st = lc_async_wait(lc, ref, acks, wait_ms(redis_timeout_ms), on_call_reply, c);
    call_started(lc, c, st, LC_EIO); /* a WAIT not sent vouches for nothing */
}

/* The WAITs of one store_replica_wait_conns_async: the fewest acknowledgements so far. */
struct wait_all {
    store_acked_fn cb;
    void *arg;
    const struct areq *ar;
    int left; /* replies to come, + 1 while sending */
    long long fewest;
};

static void wait_all_end(struct wait_all *w)
{
    struct wait_all done = *w;
    free(w);
    ctx_begin(done.ar);
    done.cb(done.arg, done.fewest);
    ctx_end(done.ar);
}

static void on_wait_all_deferred(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wait_all_end(arg);
}

static void wait_all_one(struct wait_all *w, long long got)
{
    if (got < w->fewest)
        w->fewest = got;
    if (--w->left == 0)
        wait_all_end(w);
}

static void on_wait_all(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr; /* the fewest acknowledgements is the answer */
    wait_all_one(arg, store_reply_acks(st, r));
}

void store_replica_wait_conns_async(lc_async_client *lc, const struct areq *ar,
                                    const struct store_conns *cs, int acks, int redis_timeout_ms,
                                    store_acked_fn cb, void *arg)
{
    struct wait_all *w = malloc(sizeof(*w));
    if (!w) {
        ctx_begin(ar);
        cb(arg, -1);
        ctx_end(ar);
        return;
    }
    /* left counts this function too, so a WAIT failing at once cannot end it mid-loop. An
     * overflowed cs sends nothing: its WAITs could not cover every connection. */
    int n = cs->overflow ? 0 : cs->n;
    *w = (struct wait_all){cb, arg, ar, n + 1, cs->overflow ? -1 : acks};
    lc_status first = LC_OK; /* the first start's failure */
    for (int i = 0; i < n; i++) {
        lc_status st =
            lc_async_wait(lc, &cs->ref[i], acks, wait_ms(redis_timeout_ms), on_wait_all, w);
        if (st != LC_OK) {
            if (first == LC_OK)
                first = st;
            wait_all_one(w, -1);
        }
    }
    if (--w->left == 0) /* nothing in flight: no connection, or no WAIT started */
        defer(lc, first, on_wait_all_deferred, w);
}

long long store_reply_acks(lc_status st, const redisReply *r)
{
    return st == LC_OK && r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

void store_script_async(struct store *store, lc_async_client *lc, const struct areq *ar,
                        enum store_script id, int nkeys, const char *const *keys, int nargs,
                        const char *const *args, lc_async_reply_fn cb, void *arg)
{
    struct call *c = call_new(ar, cb, arg);
    if (!c)
        return;
    lc_status st = lc_async_script(lc, store->scripts[id], nkeys, keys, NULL, nargs, args, NULL,
                                   on_call_reply, c);
    call_started(lc, c, st, LC_OK); /* nothing was sent: not LC_EIO, whose effect is unknown */
}

void store_command_async(lc_async_client *lc, const struct areq *ar, int argc,
                         const char *const *argv, lc_async_reply_fn cb, void *arg)
{
    struct call *c = call_new(ar, cb, arg);
    if (!c)
        return;
    lc_status st = lc_async_command(lc, argc, argv, NULL, on_call_reply, c);
    call_started(lc, c, st, LC_OK);
}
