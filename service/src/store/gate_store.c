/*
 * gate_store — the waiting room's four scripts sent on a worker loop's lockcore client, their
 * replies parsed into gate_store.h's structs; see gate_store.h. Each call is one
 * store_script_async (by SHA, one slot: every key in {S}), so the callback contract is the
 * store's: once, on the loop, in the request's log context. The scripts read the SKU's queue
 * rules from its meta under rules_table.h's field names, passed here (as layout.c passes them to
 * layout_read.lua), so a renamed field is one change in the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "gate_store.h"
#include "rules.h"
#include "store_scripts.h"

/* The meta fields include/gate_rules.lua reads, in its order. */
#define GATE_FIELDS 7
static void gate_fields(const char **out)
{
    out[0] = rules_rows[RULES_I_queue_rate].meta;
    out[1] = rules_rows[RULES_I_queue_max_active].meta;
    out[2] = rules_rows[RULES_I_queue_ticket_ttl_s].meta;
    out[3] = rules_rows[RULES_I_queue_admit_pct].meta;
    out[4] = rules_rows[RULES_I_queue_fifo].meta;
    out[5] = rules_rows[RULES_I_queue_paused].meta;
    out[6] = rules_rows[RULES_I_sale_start_ms].meta;
}

void gate_store_keys(const char *sku, struct gate_keys *out)
{
    store_sku_key(out->q, sku, STORE_KEY_SKU_q);
    store_sku_key(out->line, sku, STORE_KEY_SKU_q_line);
    store_sku_key(out->adm, sku, STORE_KEY_SKU_q_adm);
    store_sku_key(out->live, sku, STORE_KEY_SKU_q_live);
}

/* A seed candidate: 32 hex digits of 16 bytes from OpenSSL's CSPRNG (the start's seed must not
 * be knowable before the start). 0, or -1 when the generator failed. */
static int seed_candidate(char out[GATE_SEED_MAX])
{
    unsigned char b[16];
    if (RAND_bytes(b, sizeof(b)) != 1)
        return -1;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(b); i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
    return 0;
}

enum gate_kind { GATE_JOIN, GATE_ADMIT, GATE_PLACE, GATE_USED };

/* The callback of a call, by its kind. */
union gate_cb {
    gate_join_fn join;
    gate_state_fn admit;
    gate_place_fn place;
    gate_used_fn used;
};

/* One call in flight: freed before its callback runs. */
struct gate_call {
    enum gate_kind kind;
    struct store *store;
    lc_async_client *lc;
    const struct areq *ar;
    union gate_cb cb;
    void *arg;
    struct store_conns conns; /* a join's, for its WAIT */
    struct gate_join join;    /* a join's answer while its WAIT runs */
};

/* Calls the kind's callback with st/why and the parsed reply p (NULL on failure). */
static void deliver(enum gate_kind kind, union gate_cb cb, void *arg, lc_status st, const char *why,
                    const void *p)
{
    switch (kind) {
    case GATE_JOIN: cb.join(arg, st, why, p); break;
    case GATE_ADMIT: cb.admit(arg, st, why, p); break;
    case GATE_PLACE: cb.place(arg, st, why, p); break;
    case GATE_USED: cb.used(arg, st, why, p); break;
    }
}

/* Frees c, then calls its callback (st, why, p as for deliver). */
static void gate_finish(struct gate_call *c, lc_status st, const char *why, const void *p)
{
    enum gate_kind kind = c->kind;
    union gate_cb cb = c->cb;
    void *arg = c->arg;
    free(c);
    deliver(kind, cb, arg, st, why, p);
}

/* Element i of array r as an integer (an integer reply, or a numeric string), else dflt. */
static long long elem_int(const redisReply *r, size_t i, long long dflt)
{
    return i < r->elements ? store_reply_int(r->element[i], dflt) : dflt;
}

/* Copies element i of r, a string reply shorter than len, into out: 0, else -1. */
static int elem_str(const redisReply *r, size_t i, char *out, size_t len)
{
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING || r->element[i]->len >= len)
        return -1;
    memcpy(out, r->element[i]->str, r->element[i]->len);
    out[r->element[i]->len] = '\0';
    return 0;
}

/* A code the scripts end with, with nothing written, before the kind's reply. */
static int refused(long long code)
{
    return code == STORE_GATE_NO_ROOM || code == STORE_GATE_NO_SKU;
}

static const char bad_shape[] = "gate: the script's reply has the wrong shape";

static void on_join_acked(void *arg, long long acks)
{
    struct gate_call *c = arg;
    struct gate_join j = c->join;
    if (acks < store_replica_acks(c->store))
        gate_finish(c, LC_EIO, "gate: the join is not on the replicas (--redis-replica-acks)",
                    NULL);
    else
        gate_finish(c, LC_OK, "", &j);
}

static void on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct gate_call *c = arg;
    if (st != LC_OK) {
        gate_finish(c, st, errstr, NULL);
        return;
    }
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        gate_finish(c, LC_EREDIS, bad_shape, NULL);
        return;
    }
    long long code = elem_int(r, 0, -99);
    switch (c->kind) {
    case GATE_JOIN: {
        struct gate_join j = {.code = (int)code};
        if (!refused(code)) {
            if ((code != STORE_GATE_OK && code != STORE_GATE_AGAIN) || r->elements != 5) {
                gate_finish(c, LC_EREDIS, bad_shape, NULL);
                return;
            }
            j.rank = elem_int(r, 1, -1);
            j.seq = elem_int(r, 2, 0);
            j.served = elem_int(r, 3, 0);
            j.shuffled = (int)elem_int(r, 4, 0);
            if (store_replica_acks(c->store) > 0) {
                /* the place is answered once it is on the replicas: a failover keeps it */
                store_conns_note(&c->conns, c->lc);
                c->join = j;
                store_replicated_async(c->store, c->lc, c->ar, &c->conns, on_join_acked, c);
                return;
            }
        }
        gate_finish(c, LC_OK, "", &j);
        return;
    }
    case GATE_ADMIT: {
        struct gate_state g = {.code = (int)code};
        if (!refused(code)) {
            if (code != STORE_GATE_OK || r->elements != 12 ||
                elem_str(r, 10, g.seed, sizeof(g.seed)) != 0) {
                gate_finish(c, LC_EREDIS, bad_shape, NULL);
                return;
            }
            g.served = elem_int(r, 1, 0);
            g.length = elem_int(r, 2, 0);
            g.fin = elem_int(r, 3, 0);
            g.issued = elem_int(r, 4, 0);
            g.live = elem_int(r, 5, 0);
            g.admitted = elem_int(r, 6, 0);
            g.sold_out = (int)elem_int(r, 7, 0);
            g.paused = (int)elem_int(r, 8, 0);
            g.shuffled = (int)elem_int(r, 9, 0);
            g.now_ms = elem_int(r, 11, 0);
        }
        gate_finish(c, LC_OK, "", &g);
        return;
    }
    case GATE_PLACE: {
        struct gate_place p = {0};
        if (r->elements != 3 || elem_str(r, 1, p.adm, sizeof(p.adm)) != 0) {
            gate_finish(c, LC_EREDIS, bad_shape, NULL);
            return;
        }
        p.rank = code;
        p.placed = (int)elem_int(r, 2, 0);
        gate_finish(c, LC_OK, "", &p);
        return;
    }
    case GATE_USED: {
        struct gate_used u = {.code = (int)code};
        if (code == STORE_GATE_USED_ALREADY
                ? elem_str(r, 1, u.order, sizeof(u.order)) != 0
                : code != STORE_GATE_USED_DONE && code != STORE_GATE_USED_NONE) {
            gate_finish(c, LC_EREDIS, bad_shape, NULL);
            return;
        }
        gate_finish(c, LC_OK, "", &u);
        return;
    }
    }
}

/* A new call record, or NULL after calling cb with LC_ENOMEM (the store's one synchronous
 * failure, as store_script_async's). */
static struct gate_call *call_new(enum gate_kind kind, struct store *store, lc_async_client *lc,
                                  const struct areq *ar, union gate_cb cb, void *arg)
{
    struct gate_call *c = calloc(1, sizeof(*c));
    if (!c) {
        deliver(kind, cb, arg, LC_ENOMEM, "gate: out of memory", NULL);
        return NULL;
    }
    c->kind = kind;
    c->store = store;
    c->lc = lc;
    c->ar = ar;
    c->cb = cb;
    c->arg = arg;
    return c;
}

void gate_store_join(struct store *store, lc_async_client *lc, const struct areq *ar,
                     const char *sku, const char *user, gate_join_fn cb, void *arg)
{
    struct gate_call *c = call_new(GATE_JOIN, store, lc, ar, (union gate_cb){.join = cb}, arg);
    if (!c)
        return;
    struct gate_keys k;
    char meta[STORE_KEY_MAX], cand[GATE_SEED_MAX];
    gate_store_keys(sku, &k);
    store_sku_key(meta, sku, STORE_KEY_SKU_meta);
    if (seed_candidate(cand) != 0)
        cand[0] = '\0'; /* the script refuses it, with nothing written */
    const char *keys[3] = {k.q, k.line, meta};
    const char *args[2 + GATE_FIELDS] = {user, cand};
    gate_fields(args + 2);
    store_script_async(store, lc, ar, SCRIPT_GATE_JOIN, 3, keys, 2 + GATE_FIELDS, args, on_reply,
                       c);
}

void gate_store_admit(struct store *store, lc_async_client *lc, const struct areq *ar,
                      const char *sku, long long remaining, long long reserved, long long fin_seen,
                      gate_state_fn cb, void *arg)
{
    struct gate_call *c = call_new(GATE_ADMIT, store, lc, ar, (union gate_cb){.admit = cb}, arg);
    if (!c)
        return;
    struct gate_keys k;
    char meta[STORE_KEY_MAX], cand[GATE_SEED_MAX], rem[24], res[24], seen[24];
    gate_store_keys(sku, &k);
    store_sku_key(meta, sku, STORE_KEY_SKU_meta);
    if (seed_candidate(cand) != 0)
        cand[0] = '\0'; /* the script refuses it, with nothing written */
    snprintf(rem, sizeof(rem), "%lld", remaining);
    snprintf(res, sizeof(res), "%lld", reserved);
    snprintf(seen, sizeof(seen), "%lld", fin_seen);
    const char *keys[5] = {k.q, k.line, k.adm, k.live, meta};
    const char *args[4 + GATE_FIELDS] = {rem, res, seen, cand};
    gate_fields(args + 4);
    store_script_async(store, lc, ar, SCRIPT_GATE_ADMIT, 5, keys, 4 + GATE_FIELDS, args, on_reply,
                       c);
}

void gate_store_place(struct store *store, lc_async_client *lc, const struct areq *ar,
                      const char *sku, const char *user, gate_place_fn cb, void *arg)
{
    struct gate_call *c = call_new(GATE_PLACE, store, lc, ar, (union gate_cb){.place = cb}, arg);
    if (!c)
        return;
    struct gate_keys k;
    gate_store_keys(sku, &k);
    const char *keys[3] = {k.q, k.line, k.adm};
    const char *args[1] = {user};
    store_script_async(store, lc, ar, SCRIPT_GATE_PLACE, 3, keys, 1, args, on_reply, c);
}

void gate_store_used(struct store *store, lc_async_client *lc, const struct areq *ar,
                     const char *sku, const char *user, const char *order, gate_used_fn cb,
                     void *arg)
{
    struct gate_call *c = call_new(GATE_USED, store, lc, ar, (union gate_cb){.used = cb}, arg);
    if (!c)
        return;
    struct gate_keys k;
    gate_store_keys(sku, &k);
    const char *keys[3] = {k.q, k.adm, k.live};
    const char *args[2] = {user, order};
    store_script_async(store, lc, ar, SCRIPT_GATE_USED, 3, keys, 2, args, on_reply, c);
}
