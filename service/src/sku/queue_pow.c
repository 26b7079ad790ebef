/*
 * queue_pow — the challenge endpoint and the join's proof-of-work check; see queue_pow.h. The
 * endpoint costs at most one Redis call (an HMGET of the SKU's meta, when the SKU cache has no
 * fresh copy of its rules); the check none.
 */
#include "queue_pow.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "areq.h"
#include "identity.h"
#include "log.h"
#include "pow.h"
#include "rclock.h"
#include "skucache.h"
#include "stock.h"
#include "store.h"
#include "ticket.h"
#include "userrate.h"
#include "validate.h"

/* Redis's clock as this instance knows it (rclock.h); the wall clock while no estimate is young
 * enough (just after start): a challenge lives 120 s, far above any clock skew between hosts. */
static int64_t redis_now_ms(void)
{
    int64_t now = 0, err = 0;
    if (rclock_now(&now, &err) == 0)
        return now;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int have_key(const struct app *app)
{
    return app->queue_key && app->queue_key->len > 0;
}

int queue_pow_verify_request(struct app *app, const char *sku, const char *user, int bits,
                             const json_t *pow, struct response *res)
{
    if (bits <= 0)
        return 0;
    if (!pow || json_is_null(pow)) {
        response_error(res, ERROR_POW_REQUIRED, NULL);
        return -1;
    }
    const char *challenge = json_string_value(json_object_get(pow, "challenge"));
    const char *nonce = json_string_value(json_object_get(pow, "nonce"));
    if (!json_is_object(pow) || !challenge || !nonce || json_object_size(pow) != 2) {
        response_error(res, ERROR_INVALID_REQUEST,
                       "pow: must be {\"challenge\": string, \"nonce\": string}");
        return -1;
    }
    if (!have_key(app)) {
        response_error(res, ERROR_UNAVAILABLE, "no queue key on this instance (--queue-key-file)");
        return -1;
    }
    enum pow_result r = pow_verify(app->queue_key->bytes, app->queue_key->len, challenge, nonce,
                                   sku, user, redis_now_ms(), bits);
    if (r == POW_OK)
        return 0;
    if (r == POW_EXPIRED) {
        response_error(res, ERROR_POW_EXPIRED, NULL);
        return -1;
    }
    static const char *const why[] = {
        [POW_MALFORMED] = "the proof of work is malformed (a challenge of this service and a "
                          "nonce of 1..64 printable characters)",
        [POW_BAD_MAC] = "the challenge was not issued by this service",
        [POW_WRONG_USER] = "the challenge was issued to another user",
        [POW_WRONG_SKU] = "the challenge was issued for another SKU",
        [POW_TOO_FEW_BITS] = "the proof of work has too few leading zero bits",
    };
    response_error(res, ERROR_POW_INVALID, why[r]);
    return -1;
}

/* ---- GET /api/v1/skus/{sku}/queue/challenge ---- */

struct chal {
    struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    char user[VALIDATE_PRINTABLE_MAX + 1];
    char meta[STORE_KEY_MAX];
};

/* Answers from the SKU's rules: no waiting room, no proof asked, or a fresh challenge. */
static void answer(struct chal *c, long long queue_rate, long long bits)
{
    struct response *res = &c->ar->res;
    if (queue_rate <= 0) {
        response_error(res, ERROR_NO_WAITING_ROOM, NULL);
        return;
    }
    if (bits <= 0) {
        response_json(
            res, 200,
            json_pack("{s:s, s:n, s:i, s:n}", "sku", c->sku, "challenge", "bits", 0, "expires_at"));
        return;
    }
    int64_t now = redis_now_ms();
    char text[POW_CHALLENGE_MAX];
    if (pow_mint(c->ar->app->queue_key->bytes, c->ar->app->queue_key->len, c->sku, c->user, now,
                 (int)bits, text, sizeof(text)) < 0) {
        response_error(res, ERROR_INTERNAL, "the challenge could not be signed");
        return;
    }
    response_json(res, 200,
                  json_pack("{s:s, s:s, s:I, s:I}", "sku", c->sku, "challenge", text, "bits",
                            (json_int_t)bits, "expires_at", (json_int_t)(now + POW_TTL_MS)));
}

static void on_meta(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct chal *c = arg;
    struct areq *ar = c->ar;
    areq_log_begin(ar);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "queue_challenge", "the SKU's rules were not read: %s",
                    errstr && *errstr ? errstr : "unexpected reply");
        response_error(&ar->res, ERROR_UNAVAILABLE,
                       st == LC_ESTATE ? "shutting down" : "redis unavailable");
    } else if (store_reply_int(r->element[0], 0) <= 0) {
        response_error(&ar->res, ERROR_UNKNOWN_SKU, "no such sku");
    } else {
        answer(c, store_reply_int(r->element[1], 0), store_reply_int(r->element[2], 0));
    }
    areq_log_end();
    free(c);
    areq_done(ar);
}

/* The user of a GET (identity.h). With --trust-body-user-id (development) a GET has no order
 * body, so a JSON body's "user_id" stands for it. 0, or -1 with res filled (401). */
static int challenge_user(struct areq *ar, char *user, size_t cap)
{
    struct validate_order in;
    memset(&in, 0, sizeof(in));
    if (ar->req.body && ar->req.body_len > 0) {
        json_t *b = json_loadb(ar->req.body, ar->req.body_len, 0, NULL);
        const char *u = json_string_value(json_object_get(b, "user_id"));
        if (u && validate_printable(u, strlen(u))) {
            snprintf(in.user_id, sizeof(in.user_id), "%s", u);
            in.has_user_id = true;
        }
        json_decref(b);
    }
    char why[160];
    switch (identity_of(ar->app->identity, &ar->req, &in, user, cap, why, sizeof(why))) {
    case IDENTITY_USER: return 0;
    case IDENTITY_UNAUTHORIZED: response_error(&ar->res, ERROR_UNAUTHORIZED, why); return -1;
    case IDENTITY_NONE: break;
    }
    response_error(&ar->res, ERROR_USER_REQUIRED,
                   "the waiting room needs a verified user (a JWT or the trusted user header)");
    return -1;
}

void queue_challenge_get_async(struct areq *ar)
{
    struct app *app = ar->app;
    struct chal *c = calloc(1, sizeof(*c));
    if (!c) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return;
    }
    c->ar = ar;
    if (stock_sku_param(&ar->req, &ar->res, c->sku) != 0)
        goto done;
    /* the instance's own state first, as the join and the place do (queue.c) */
    if (!have_key(app)) {
        response_error(&ar->res, ERROR_UNAVAILABLE,
                       "no queue key on this instance (--queue-key-file)");
        goto done;
    }
    if (challenge_user(ar, c->user, sizeof(c->user)) != 0 ||
        user_rate_check(app, c->user, &ar->res) != 0)
        goto done;
    struct sku_view v;
    skucache_get(app->cache, c->sku, &v);
    if (v.version && !v.rules_stale) {
        answer(c, v.rules.queue_rate, v.rules.queue_pow_bits);
        goto done;
    }
    store_sku_key(c->meta, c->sku, STORE_KEY_SKU_meta);
    const char *argv[] = {"HMGET", c->meta, "segments", "q_rate", "q_pow"};
    if (lc_async_command(ar->lc, 5, argv, NULL, on_meta, c) == LC_OK)
        return;
    response_error(&ar->res, ERROR_UNAVAILABLE, "redis unavailable");
done:
    free(c);
    areq_done(ar);
}
