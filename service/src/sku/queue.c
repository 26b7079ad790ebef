/*
 * The waiting room's endpoints; see queue.h. A place's answer is made from three things this
 * instance keeps in memory: the SKU's gate snapshot (the last admission step's reply, at most
 * GATE_TICK_MS old while the SKU is active), the place's final rank (cached once known: it never
 * changes), and, once the place is admitted, its admission entry (n:exp, read once from Redis;
 * re-read every ADM_RECHECK_MS until it is final, to learn a ticket used or expired).
 */
#include "queue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "areq.h"
#include "clock.h"
#include "gate.h"
#include "gate_store.h"
#include "handlers.h"
#include "identity.h"
#include "log.h"
#include "queue_pow.h"
#include "skucache.h"
#include "store.h"
#include "userrate.h"
#include "rules.h"
#include "stock.h"
#include "ticket.h"
#include "validate.h"

/* An admitted place's entry is read again after this long until it is final ("used:", or read
 * after its expiry). */
#define ADM_RECHECK_MS 2000
/* The longest Retry-After a waiting place is told. */
#define RETRY_MAX_S 30

/* ---- the request's common part ---- */

/* The SKU, the user and the key's presence of a queue request: 0, or -1 with res filled. */
static int queue_who(struct app *app, const struct request *req, struct response *res, char *sku,
                     char *user, size_t cap)
{
    if (stock_sku_param(req, res, sku) != 0)
        return -1;
    if (!app->queue_key || app->queue_key->len == 0) {
        /* a place's ticket could not be signed here: the operator's mistake, said once per SKU */
        if (!app->gate || gate_first_warning(app->gate, sku))
            log_msg(CONFIG_LOG_WARN, "queue_no_key",
                    "a waiting room request came (sku %s) but this instance has no "
                    "--queue-key-file: every waiting room request is answered 503",
                    sku);
        response_error(res, ERROR_UNAVAILABLE,
                       "this instance has no waiting room key (--queue-key-file): it cannot "
                       "sign tickets; ask another instance");
        return -1;
    }
    struct validate_order in = {0};
    if (req->body && req->body_len > 0) { /* the join's body: user_id counts only with
                                            --trust-body-user-id (identity.h) */
        json_error_t jerr;
        json_t *b = json_loadb(req->body, req->body_len, 0, &jerr);
        const char *u = json_string_value(json_object_get(b, "user_id"));
        if (!json_is_object(b)) {
            json_decref(b);
            response_error(res, ERROR_INVALID_REQUEST, "the body must be a JSON object");
            return -1;
        }
        if (u && strlen(u) <= VALIDATE_PRINTABLE_MAX && validate_printable(u, strlen(u))) {
            snprintf(in.user_id, sizeof(in.user_id), "%s", u);
            in.has_user_id = true;
        }
        json_decref(b);
    }
    char why[160] = "";
    switch (identity_of(app->identity, req, &in, user, cap, why, sizeof(why))) {
    case IDENTITY_USER: return 0;
    case IDENTITY_NONE:
        response_error(res, ERROR_USER_REQUIRED,
                       "the waiting room needs a verified user (a bearer token, or the user "
                       "header from a trusted proxy)");
        return -1;
    case IDENTITY_UNAUTHORIZED: break;
    }
    response_error(res, ERROR_UNAUTHORIZED, why);
    return -1;
}

/* The 404 / 409 of a snapshot without a room: 1 when it answered. */
static int no_room(const struct gate_snap *s, struct response *res)
{
    if (s->st.code == STORE_GATE_NO_SKU) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        return 1;
    }
    if (s->st.code != STORE_GATE_OK) {
        response_error(res, ERROR_NO_WAITING_ROOM, NULL);
        return 1;
    }
    return 0;
}

/* Redis's clock now, as the snapshot's step read it plus the time since. */
static int64_t redis_now(const struct gate_snap *s)
{
    return s->st.now_ms + (clock_mono_ms() - s->mono_ms);
}

/* The admissions per second a wait is estimated from: the measured rate, else the rule's. */
static double wait_rate(const struct gate_snap *s)
{
    return s->rate > 0 ? s->rate : (double)s->rule_rate;
}

static void set_time(json_t *o, const char *key, int64_t ms)
{
    char at[32];
    rules_format_time(ms, at);
    json_object_set_new(o, key, json_string(at));
}

/* Parses "<n>:<exp_ms>": 1, or 0 for anything else ("used:..." included). */
static int adm_parse(const char *adm, uint64_t *n, int64_t *exp)
{
    unsigned long long a;
    long long b;
    char tail;
    if (sscanf(adm, "%llu:%lld%c", &a, &b, &tail) != 2)
        return 0;
    *n = a;
    *exp = b;
    return 1;
}

/* 1 when p's admission entry must be read from Redis before answering from s. */
static int needs_read(const struct gate_place_entry *p, const struct gate_snap *s)
{
    if (p->rank >= s->st.served)
        return 0; /* not admitted as of the snapshot: its entry is empty */
    if (strncmp(p->adm, "used:", 5) == 0)
        return 0; /* final */
    uint64_t n;
    int64_t exp;
    if (!adm_parse(p->adm, &n, &exp))
        return 1; /* never read since it was admitted */
    if (clock_mono_ms() - p->adm_mono_ms < ADM_RECHECK_MS)
        return 0;
    /* read again to learn "used"; once read after its expiry it is final */
    int64_t read_at = s->st.now_ms - (s->mono_ms - p->adm_mono_ms);
    return read_at <= exp;
}

/*
 * The place's answer into res from snapshot s and place p (updated: the first estimate, the
 * wait error counted), for sku and user. Returns 1 when p changed (the caller stores it).
 */
static int place_answer(struct app *app, const char *sku, const char *user,
                        const struct gate_snap *s, struct gate_place_entry *p, int created,
                        struct response *res)
{
    const struct gate_state *g = &s->st;
    int changed = 0;
    int64_t now = redis_now(s);
    json_t *o = json_object();
    json_object_set_new(o, "sku", json_string(sku));
    const char *state;
    long long ahead = p->rank >= 0 && p->rank > g->served ? p->rank - g->served : 0;
    uint64_t n = 0;
    int64_t exp = 0;
    int retry = 0;
    double est = -1;
    if (strncmp(p->adm, "used:", 5) == 0) {
        state = "used";
    } else if (p->rank < 0) {
        state = "waiting_for_start";
    } else if (p->rank < g->served && adm_parse(p->adm, &n, &exp)) {
        /* a ticket with nothing left to buy is no use: the buyer learns it is over */
        state = now >= exp ? "expired" : g->sold_out ? "sold_out" : "admitted";
    } else if (p->rank < g->served) {
        state = "waiting"; /* admitted on Redis, its entry not read yet: the next poll reads */
        retry = 1;
    } else if (!g->shuffled) {
        state = "waiting_for_start";
    } else if (g->sold_out) {
        state = "sold_out";
    } else if (g->paused) {
        state = "paused";
        retry = 5;
    } else {
        state = "waiting";
    }
    json_object_set_new(o, "state", json_string(state));
    json_object_set_new(o, "position", p->rank >= 0 ? json_integer(p->rank + 1) : json_null());
    json_object_set_new(o, "ahead", p->rank >= 0 ? json_integer(ahead) : json_null());
    int waiting = strcmp(state, "waiting") == 0 || strcmp(state, "waiting_for_start") == 0 ||
                  strcmp(state, "paused") == 0;
    double rate = wait_rate(s);
    if (waiting && p->rank >= 0 && rate > 0) {
        est = (double)ahead / rate;
        if (!g->shuffled && s->sale_start_ms > now)
            est += (double)(s->sale_start_ms - now) / 1000.0;
    }
    /* whole seconds, rounded up: a wait under a second is 1, none is 0 */
    long long est_s = est > 0 ? (long long)est + ((double)(long long)est < est) : 0;
    json_object_set_new(o, "estimated_wait_s", est >= 0 ? json_integer(est_s) : json_null());
    if (waiting && retry == 0) {
        /* further back: less often (polling, not buying, is the load) */
        double r = est >= 0 ? 1 + est / 10 : 1 + (double)ahead / 500;
        if (!g->shuffled && s->sale_start_ms > now)
            r = (double)(s->sale_start_ms - now) / 2000.0;
        retry = r < 1 ? 1 : r > RETRY_MAX_S ? RETRY_MAX_S : (int)r;
    }
    if (waiting) {
        json_object_set_new(o, "retry_after_s", json_integer(retry));
        res->retry_after = retry;
    }
    if (strcmp(state, "admitted") == 0) {
        char t[TICKET_TEXT_MAX];
        if (ticket_mint(app->queue_key, sku, user, n, exp, t, sizeof(t)) < 0) {
            json_decref(o);
            response_error(res, ERROR_INTERNAL, "the ticket could not be signed");
            return changed;
        }
        json_object_set_new(o, "ticket", json_string(t));
        set_time(o, "expires_at", exp);
    }
    if (s->sale_start_ms > 0)
        set_time(o, "sale_start", s->sale_start_ms);
    if (g->seed[0])
        json_object_set_new(o, "seed", json_string(g->seed));
    /* the estimated-wait error: the first estimate answered against the wait it was */
    if (est >= 0 && p->est_wait_s < 0 && !p->wait_scored) {
        p->est_wait_s = est;
        p->first_mono_ms = clock_mono_ms();
        changed = 1;
    }
    if (p->rank >= 0 && p->rank < g->served && p->est_wait_s >= 0 && !p->wait_scored) {
        int64_t at = gate_admitted_at(app->gate, sku, p->rank);
        if (at == 0 || at < p->first_mono_ms)
            at = at == 0 ? clock_mono_ms() : p->first_mono_ms;
        double actual = (double)(at - p->first_mono_ms) / 1000.0;
        double err = p->est_wait_s - actual;
        gate_wait_error(err < 0 ? -err : err);
        p->wait_scored = 1;
        changed = 1;
    }
    response_json(res, created ? 201 : 200, o);
    return changed;
}

/* ---- GET .../queue: the place ---- */

void queue_place_run(struct app *app, const struct request *req, struct response *res)
{
    char sku[VALIDATE_SKU_MAX + 1], user[VALIDATE_PRINTABLE_MAX + 1];
    struct response tmp = {0};
    if (!app->gate || queue_who(app, req, &tmp, sku, user, sizeof(user)) != 0) {
        response_free(&tmp); /* the slow way answers the same error */
        return;
    }
    /* --user-rps: judged here once per poll (the slow way, which follows only when this does
     * not answer, does not count it again) */
    if (user_rate_check(app, user, res) != 0)
        return;
    struct gate_snap s;
    struct gate_place_entry p;
    if (!gate_snapshot(app->gate, sku, &s))
        return;
    if (s.st.code != STORE_GATE_OK) {
        no_room(&s, res);
        gate_count_poll(0);
        return;
    }
    if (!gate_place_get(app->gate, sku, user, &p) || needs_read(&p, &s))
        return;
    if (place_answer(app, sku, user, &s, &p, 0, res))
        gate_place_put(app->gate, sku, user, &p);
    gate_count_poll(0);
}

struct place_req {
    struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    char user[VALIDATE_PRINTABLE_MAX + 1];
    struct gate_snap snap;
};

static void place_end(struct place_req *q)
{
    struct areq *ar = q->ar;
    free(q);
    areq_done(ar);
}

static void on_place(void *arg, lc_status st, const char *why, const struct gate_place *gp)
{
    struct place_req *q = arg;
    struct areq *ar = q->ar;
    areq_log_begin(ar);
    if (st != LC_OK) {
        log_msg(CONFIG_LOG_WARN, "queue_place_failed", "sku %s: %s", q->sku,
                why ? why : "unexpected reply");
        response_error(&ar->res, ERROR_UNAVAILABLE, "the waiting room's store is unavailable");
    } else if (!gp->placed) {
        response_error(&ar->res, ERROR_NOT_FOUND,
                       "you have no place in this SKU's waiting room: POST to join it");
    } else {
        gate_count_poll(1);
        struct gate_place_entry p = {.rank = gp->rank, .est_wait_s = -1};
        struct gate_place_entry old;
        if (gate_place_get(ar->app->gate, q->sku, q->user, &old)) {
            p.est_wait_s = old.est_wait_s;
            p.first_mono_ms = old.first_mono_ms;
            p.wait_scored = old.wait_scored;
        }
        snprintf(p.adm, sizeof(p.adm), "%s", gp->adm);
        p.adm_mono_ms = clock_mono_ms();
        place_answer(ar->app, q->sku, q->user, &q->snap, &p, 0, &ar->res);
        gate_place_put(ar->app->gate, q->sku, q->user, &p);
    }
    areq_log_end();
    place_end(q);
}

static void on_place_snap(struct areq *ar, void *arg, int rc, const struct gate_snap *s,
                          const char *why)
{
    struct place_req *pq = arg;
    if (rc <= 0) {
        free(pq);
        if (rc == 0)
            response_error(&ar->res, ERROR_UNAVAILABLE, "too many waiting rooms on this instance");
        else
            response_error(&ar->res, ERROR_UNAVAILABLE, why ? why : "out of memory");
        areq_done(ar);
        return;
    }
    if (no_room(s, &ar->res)) {
        free(pq);
        gate_count_poll(0);
        areq_done(ar);
        return;
    }
    pq->snap = *s;
    struct gate_place_entry p;
    if (gate_place_get(ar->app->gate, pq->sku, pq->user, &p) && !needs_read(&p, s)) {
        if (place_answer(ar->app, pq->sku, pq->user, s, &p, 0, &ar->res))
            gate_place_put(ar->app->gate, pq->sku, pq->user, &p);
        gate_count_poll(0);
        place_end(pq);
        return;
    }
    gate_store_place(ar->app->store, ar->lc, ar, pq->sku, pq->user, on_place, pq);
}

void queue_place_async(struct areq *ar)
{
    struct place_req *pq = calloc(1, sizeof(*pq));
    if (!pq) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return;
    }
    if (queue_who(ar->app, &ar->req, &ar->res, pq->sku, pq->user, sizeof(pq->user)) != 0) {
        free(pq);
        areq_done(ar);
        return;
    }
    pq->ar = ar;
    gate_wait(ar->app->gate, ar, pq->sku, on_place_snap, pq);
}

/* ---- POST .../queue: join ---- */

struct join_req {
    struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    char user[VALIDATE_PRINTABLE_MAX + 1];
    char meta[STORE_KEY_MAX];
    json_t *pow; /* the body's "pow" member (a reference), NULL none */
};

static void join_free(struct join_req *q)
{
    json_decref(q->pow);
    free(q);
}

static void on_join(void *arg, lc_status st, const char *why, const struct gate_join *j)
{
    struct join_req *q = arg;
    struct areq *ar = q->ar;
    struct app *app = ar->app;
    areq_log_begin(ar);
    if (st != LC_OK) {
        log_msg(CONFIG_LOG_WARN, "queue_join_failed", "sku %s: %s", q->sku,
                why ? why : "unexpected reply");
        /* a join is safe to repeat: the same place comes back */
        response_error(&ar->res, ERROR_UNAVAILABLE,
                       "the waiting room's store is unavailable: join again (your place, if it "
                       "was made, is kept)");
    } else if (j->code == STORE_GATE_NO_SKU) {
        response_error(&ar->res, ERROR_UNKNOWN_SKU, "no such sku");
    } else if (j->code == STORE_GATE_NO_ROOM) {
        response_error(&ar->res, ERROR_NO_WAITING_ROOM, NULL);
    } else {
        gate_count_join();
        struct gate_snap s;
        if (!gate_snapshot(app->gate, q->sku, &s)) {
            /* the SKU's first request here: the join's own counters stand in until the
             * admitter's first step (within GATE_TICK_MS) */
            memset(&s, 0, sizeof(s));
            s.st.code = STORE_GATE_OK;
            s.st.served = j->served;
            s.st.shuffled = j->shuffled;
            s.rate = -1;
            s.mono_ms = clock_mono_ms();
        }
        if (j->served >= s.st.served) { /* the join is newer than the snapshot */
            s.st.served = j->served;
            s.st.shuffled = j->shuffled;
        }
        struct gate_place_entry p = {.rank = j->rank, .est_wait_s = -1};
        struct gate_place_entry old;
        if (gate_place_get(app->gate, q->sku, q->user, &old))
            p = old;
        int changed =
            place_answer(app, q->sku, q->user, &s, &p, j->code == STORE_GATE_OK, &ar->res);
        if (changed || p.rank >= 0)
            gate_place_put(app->gate, q->sku, q->user, &p);
    }
    areq_log_end();
    join_free(q);
    areq_done(ar);
}

/* The join once the SKU's proof-of-work bits are known: the proof checked (queue_pow.h), then
 * the place. An unknown SKU or one without a room is the join script's to answer. */
static void join_with_bits(struct join_req *q, long long bits)
{
    struct areq *ar = q->ar;
    if (queue_pow_verify_request(ar->app, q->sku, q->user, (int)bits, q->pow, &ar->res) != 0) {
        join_free(q);
        areq_done(ar);
        return;
    }
    gate_store_join(ar->app->store, ar->lc, ar, q->sku, q->user, on_join, q);
}

static void on_join_meta(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct join_req *q = arg;
    struct areq *ar = q->ar;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements != 1) {
        areq_log_begin(ar);
        log_msg(CONFIG_LOG_WARN, "queue_join_failed", "sku %s: the rules were not read: %s", q->sku,
                errstr && *errstr ? errstr : "unexpected reply");
        response_error(&ar->res, ERROR_UNAVAILABLE,
                       st == LC_ESTATE ? "shutting down" : "redis unavailable");
        areq_log_end();
        join_free(q);
        areq_done(ar);
        return;
    }
    join_with_bits(q, store_reply_int(r->element[0], 0));
}

void queue_join_async(struct areq *ar)
{
    struct join_req *q = calloc(1, sizeof(*q));
    if (!q) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return;
    }
    if (queue_who(ar->app, &ar->req, &ar->res, q->sku, q->user, sizeof(q->user)) != 0) {
        free(q);
        areq_done(ar);
        return;
    }
    q->ar = ar;
    if (user_rate_check(ar->app, q->user, &ar->res) != 0) {
        join_free(q);
        areq_done(ar);
        return;
    }
    if (ar->req.body && ar->req.body_len > 0) { /* an object: queue_who checked it */
        json_t *b = json_loadb(ar->req.body, ar->req.body_len, 0, NULL);
        q->pow = json_incref(json_object_get(b, "pow"));
        json_decref(b);
    }
    /* The SKU's queue_pow_bits: from the cached rules when fresh, else from its meta. */
    struct sku_view v;
    skucache_get(ar->app->cache, q->sku, &v);
    if (v.version && !v.rules_stale) {
        join_with_bits(q, v.rules.queue_pow_bits);
        return;
    }
    store_sku_key(q->meta, q->sku, STORE_KEY_SKU_meta);
    const char *argv[] = {"HMGET", q->meta, "q_pow"};
    if (lc_async_command(ar->lc, 3, argv, NULL, on_join_meta, q) == LC_OK)
        return;
    response_error(&ar->res, ERROR_UNAVAILABLE, "redis unavailable");
    join_free(q);
    areq_done(ar);
}

/* ---- GET .../queue/info ---- */

static void on_info_snap(struct areq *ar, void *arg, int rc, const struct gate_snap *s,
                         const char *why)
{
    (void)arg;
    if (rc <= 0) {
        response_error(&ar->res, ERROR_UNAVAILABLE,
                       rc == 0 ? "too many waiting rooms on this instance"
                       : why   ? why
                               : "out of memory");
        areq_done(ar);
        return;
    }
    if (no_room(s, &ar->res)) {
        areq_done(ar);
        return;
    }
    const struct gate_state *g = &s->st;
    json_t *o = json_object();
    char sku[VALIDATE_SKU_MAX + 1];
    snprintf(sku, sizeof(sku), "%.*s", (int)ar->req.param_len, ar->req.param);
    json_object_set_new(o, "sku", json_string(sku));
    json_object_set_new(o, "length", json_integer(g->length));
    json_object_set_new(o, "waiting", json_integer(g->length - g->served));
    json_object_set_new(o, "served", json_integer(g->served));
    json_object_set_new(o, "issued", json_integer(g->issued));
    json_object_set_new(o, "fin", json_integer(g->fin));
    json_object_set_new(o, "live", json_integer(g->live));
    json_object_set_new(o, "rate", json_integer(s->rule_rate));
    json_object_set_new(o, "rate_measured", s->rate >= 0 ? json_real(s->rate) : json_null());
    json_object_set_new(o, "paused", json_boolean(g->paused));
    json_object_set_new(o, "sold_out", json_boolean(g->sold_out));
    json_object_set_new(o, "started", json_boolean(g->shuffled));
    json_object_set_new(o, "seed", g->seed[0] ? json_string(g->seed) : json_null());
    set_time(o, "as_of", g->now_ms);
    response_json(&ar->res, 200, o);
    areq_done(ar);
}

void queue_info_async(struct areq *ar)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(&ar->req, &ar->res, sku) != 0) {
        areq_done(ar);
        return;
    }
    gate_wait(ar->app->gate, ar, sku, on_info_snap, NULL);
}
