/*
 * GET /api/v1/skus: the SKU registry (inv:2:skus, the set of the names a PUT created; docs/api.md
 * "SKU list"), a page at a time with Redis's SSCAN, so that a registry of any size is never read
 * whole for one request. The dashboard lists it. Names come sorted within a page; the pages'
 * order and their sizes are SSCAN's (COUNT is a hint: a small set comes whole in one page).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "areq.h"
#include "handlers.h"
#include "store.h"
#include "validate.h"

#define SKULIST_LIMIT_DEFAULT 100
#define SKULIST_LIMIT_MAX 1000

static int skulist_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when s is 1..max_digits decimal digits (a number in 0..10^max_digits - 1), its value in *v. */
static int skulist_digits(const char *s, int max_digits, unsigned long long *v)
{
    size_t n = strlen(s);
    if (n == 0 || n > (size_t)max_digits || strspn(s, "0123456789") != n)
        return 0;
    *v = strtoull(s, NULL, 10);
    return 1;
}

static void skulist_on_scan(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct areq *ar = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
        response_error(&ar->res, ERROR_UNAVAILABLE,
                       st != LC_OK ? errstr : "unexpected reply from Redis to SSCAN");
        areq_done(ar);
        return;
    }
    const redisReply *names = r->element[1];
    const char **v = calloc(names->elements + 1, sizeof(*v));
    json_t *list = json_array();
    json_t *body = json_object();
    if (!v || !list || !body) {
        free(v);
        json_decref(list);
        json_decref(body);
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < names->elements; i++) {
        const redisReply *e = names->element[i];
        /* only names a PUT could have written (the set is ours, but it is read, not trusted) */
        if (e->type == REDIS_REPLY_STRING && validate_sku(e->str, e->len))
            v[n++] = e->str;
    }
    qsort(v, n, sizeof(*v), skulist_cmp);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, json_string(v[i]));
    free(v);
    const char *next = r->element[0]->str;
    json_object_set_new(body, "skus", list);
    json_object_set_new(body, "next_cursor",
                        strcmp(next, "0") == 0 ? json_null() : json_string(next));
    response_json(&ar->res, 200, body);
    ar->res.cache_control = "no-store";
    areq_done(ar);
}

void skulist_get_async(struct areq *ar)
{
    unsigned long long cursor = 0, limit = SKULIST_LIMIT_DEFAULT;
    if (ar->req.cursor && !skulist_digits(ar->req.cursor, 20, &cursor)) {
        response_error(&ar->res, ERROR_INVALID_REQUEST,
                       "cursor: the next_cursor of the previous page (decimal digits)");
        areq_done(ar);
        return;
    }
    if (ar->req.limit &&
        (!skulist_digits(ar->req.limit, 4, &limit) || limit < 1 || limit > SKULIST_LIMIT_MAX)) {
        response_error(&ar->res, ERROR_INVALID_REQUEST, "limit: an integer 1..1000");
        areq_done(ar);
        return;
    }
    char c[24], l[8];
    snprintf(c, sizeof(c), "%llu", cursor);
    snprintf(l, sizeof(l), "%llu", limit);
    const char *argv[5] = {"SSCAN", store_registry_key(), c, "COUNT", l};
    store_command_async(ar->lc, ar, 5, argv, skulist_on_scan, ar);
}
