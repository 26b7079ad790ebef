/*
 * Token-fenced data-store scripts as Redlock and the ZooKeeper lock send them
 * (token_eval_internal.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "token_eval_internal.h"

lc_status lc_token_eval_send(lc_async_client *store, const lc_script *script, const char *seen_key,
                             uint64_t token, int nkeys, const char *const *keys,
                             const size_t *keylens, int nargs, const char *const *args,
                             const size_t *arglens, lc_async_reply_fn cb, void *arg)
{
    const char **k = malloc(sizeof(*k) * (size_t)(nkeys + 1));
    const char **a = malloc(sizeof(*a) * (size_t)(nargs + 1));
    size_t *kl = malloc(sizeof(*kl) * (size_t)(nkeys + 1));
    size_t *al = malloc(sizeof(*al) * (size_t)(nargs + 1));
    char tok[24];
    lc_status st = lc_fail(LC_ENOMEM, "token-fenced eval: out of memory");
    if (k && a && kl && al) {
        snprintf(tok, sizeof(tok), "%" PRIu64, token);
        k[0] = seen_key;
        kl[0] = strlen(seen_key);
        a[0] = tok;
        al[0] = strlen(tok);
        for (int i = 0; i < nkeys; i++) {
            k[1 + i] = keys[i];
            kl[1 + i] = keylens ? keylens[i] : strlen(keys[i]);
        }
        for (int i = 0; i < nargs; i++) {
            a[1 + i] = args[i];
            al[1 + i] = arglens ? arglens[i] : strlen(args[i]);
        }
        st = lc_async_script(store, script, nkeys + 1, k, kl, nargs + 1, a, al, cb, arg);
    }
    free(k);
    free(a);
    free(kl);
    free(al);
    return st;
}

lc_status lc_token_eval_result(lc_status st, const redisReply *r, const redisReply **body)
{
    *body = NULL;
    if (st != LC_OK)
        return st;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return LC_EREDIS;
    if (r->element[0]->integer == 0)
        return LC_ELOST;
    *body = r->elements > 1 ? r->element[1] : NULL;
    return LC_OK;
}
