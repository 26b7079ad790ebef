/*
 * areq — the per-request object of the asynchronous handlers; see areq.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "areq.h"
#include "log.h"

void areq_free(struct areq *ar)
{
    if (!ar)
        return;
    struct areq_env *env = ar->env;
    if (ar->lprev)
        ar->lprev->lnext = ar->lnext;
    else if (env->live == ar)
        env->live = ar->lnext;
    if (ar->lnext)
        ar->lnext->lprev = ar->lprev;
    response_free(&ar->res);
    free(ar);
}

static char *dup_into(char **p, const char *s, size_t n)
{
    if (!s)
        return NULL;
    char *d = *p;
    memcpy(d, s, n);
    d[n] = '\0';
    *p += n + 1;
    return d;
}

struct areq *areq_new(struct areq_env *env, struct app *app, const struct request *req,
                      void (*ready)(void *http), void *http)
{
    const char *strs[12] = {
        req->path,       req->content_type, req->authorization, req->idempotency_key,
        req->request_id, req->client,       req->user_header,   req->if_none_match,
        req->consistent, req->cursor,       req->limit,         NULL};
    size_t bytes = req->body ? req->body_len + 1 : 0;
    for (int i = 0; strs[i] || i < 11; i++)
        if (strs[i])
            bytes += strlen(strs[i]) + 1;
    struct areq *ar = calloc(1, sizeof(*ar) + bytes);
    if (!ar)
        return NULL;
    char *p = (char *)(ar + 1);
    ar->app = app;
    ar->env = env;
    ar->base = env->base;
    ar->lc = env->lc;
    ar->ready = ready;
    ar->http = http;
    ar->req = *req;
    ar->req.path = dup_into(&p, req->path, strlen(req->path));
    if (req->param)
        ar->req.param = ar->req.path + (req->param - req->path);
    ar->req.body = req->body ? dup_into(&p, req->body, req->body_len) : NULL;
#define DUP(f) ar->req.f = req->f ? dup_into(&p, req->f, strlen(req->f)) : NULL
    DUP(content_type);
    DUP(authorization);
    DUP(idempotency_key);
    DUP(request_id);
    DUP(client);
    DUP(user_header);
    DUP(if_none_match);
    DUP(consistent);
    DUP(cursor);
    DUP(limit);
#undef DUP
    ar->lnext = env->live;
    if (env->live)
        env->live->lprev = ar;
    env->live = ar;
    return ar;
}

void areq_abandon(struct areq *ar)
{
    ar->http = NULL;
}

void areq_cancel_all(struct areq_env *env)
{
    for (struct areq *ar = env->live, *next; ar; ar = next) {
        next = ar->lnext;
        if (ar->cancel)
            ar->cancel(ar);
    }
}

static const char *request_id_of(const void *ctx)
{
    return ((const struct areq *)ctx)->req.request_id;
}

void areq_log_reader(void)
{
    log_ctx_reader(request_id_of);
}

void areq_log_begin(const struct areq *ar)
{
    log_ctx_begin(ar);
}

void areq_log_end(void)
{
    log_ctx_end();
}

struct seggate *areq_gates(const struct areq *ar)
{
    return ar->env->gates;
}

struct seglock **areq_live_seglocks(const struct areq *ar)
{
    return &ar->env->live_seglocks;
}

lc_mysql_client *areq_lock_mysql(const struct areq *ar)
{
    return ar->env->lockmysql;
}

lc_zk_client *areq_lock_zk(const struct areq *ar)
{
    return ar->env->zk;
}

int areq_lock_nodes(const struct areq *ar, lc_async_client *const **nodes)
{
    *nodes = ar->env->locknodes;
    return ar->env->nlocknodes;
}

int areq_loop(const struct areq *ar, int *nloops)
{
    *nloops = ar->env->nloops;
    return ar->env->id;
}

bool areq_abandoned(const struct areq *ar)
{
    return ar->http == NULL;
}

void areq_done(struct areq *ar)
{
    if (!ar->http) {
        areq_free(ar); /* cut off by the deadline or the shutdown: the answer was sent */
        return;
    }
    ar->ready(ar->http);
}
