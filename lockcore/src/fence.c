/*
 * Fenced scripts: a caller's Lua body wrapped in the fencing guard of scripts.h, so that it runs
 * only while the caller's hold is the current one (lc_fenced_script_new), or only for a fencing
 * token at least as new as the highest one its store has seen (lc_token_fenced_script_new, for
 * Redlock); and the same token rule for stores written from C (lc_fence_newer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "scripts.h"

const char LC_LUA_FENCE_ACCEPT[] = LC_LUA_FENCE_ACCEPT_SRC;

lc_status lc_fenced_script_new(const char *body, lc_script **out)
{
    if (out)
        *out = NULL;
    if (!body || !out)
        return lc_fail(LC_EINVAL, "fenced script: NULL argument");
    char *src = malloc(strlen(LC_LUA_GUARD_HEAD) + strlen(body) + strlen(LC_LUA_GUARD_TAIL) + 1);
    if (!src)
        return lc_fail(LC_ENOMEM, "fenced script: out of memory");
    strcpy(src, LC_LUA_GUARD_HEAD);
    strcat(src, body);
    strcat(src, LC_LUA_GUARD_TAIL);
    lc_status st = lc_script_new(src, out);
    free(src);
    return st;
}

lc_status lc_token_fenced_script_new(const char *body, lc_script **out)
{
    if (out)
        *out = NULL;
    if (!body || !out)
        return lc_fail(LC_EINVAL, "token-fenced script: NULL argument");
    size_t len = strlen(LC_LUA_FENCE_ACCEPT_SRC) + strlen(LC_LUA_TOKEN_GUARD_HEAD) + strlen(body) +
                 strlen(LC_LUA_TOKEN_GUARD_TAIL) + 1;
    char *src = malloc(len);
    if (!src)
        return lc_fail(LC_ENOMEM, "token-fenced script: out of memory");
    snprintf(src, len, "%s%s%s%s", LC_LUA_FENCE_ACCEPT_SRC, LC_LUA_TOKEN_GUARD_HEAD, body,
             LC_LUA_TOKEN_GUARD_TAIL);
    lc_status st = lc_script_new(src, out);
    free(src);
    return st;
}

lc_status lc_token_reply(const redisReply *r, const redisReply **body)
{
    *body = NULL;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return LC_EREDIS;
    if (r->element[0]->integer == 0)
        return LC_ELOST;
    *body = r->elements > 1 ? r->element[1] : NULL;
    return LC_OK;
}

uint64_t lc_token_reply_seen(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer != 0)
        return 0;
    const redisReply *s = r->element[1];
    if (s->type == REDIS_REPLY_INTEGER)
        return s->integer > 0 ? (uint64_t)s->integer : 0;
    if (s->type != REDIS_REPLY_STRING || s->len == 0 || s->len > 20)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned d = (unsigned)(s->str[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return 0; /* not a token we could have handed out */
        v = v * 10 + d;
    }
    return v;
}

int lc_fence_newer(uint64_t token, uint64_t highest_seen)
{
    return token >= highest_seen;
}
