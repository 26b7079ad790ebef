/*
 * A data-store script fenced by a lock's token alone (lc_token_fenced_script_new), as the locks
 * whose token comes from elsewhere send it: Redlock (redlock_async.c) and ZooKeeper
 * (zk_async.c). One place for the argument layout (KEYS[1] the seen key, ARGV[1] the token) and
 * for reading the guard's {0} / {1, body} answer.
 */
#ifndef LOCKCORE_TOKEN_EVAL_INTERNAL_H
#define LOCKCORE_TOKEN_EVAL_INTERNAL_H

#include <stdint.h>

#include "lockcore/lockcore_async.h"

/* Sends script on store with KEYS = seen_key, keys... and ARGV = token, args... (all copied;
 * the lens arrays may be NULL). Returns as lc_async_script: LC_OK, then cb runs exactly once. */
lc_status lc_token_eval_send(lc_async_client *store, const lc_script *script, const char *seen_key,
                             uint64_t token, int nkeys, const char *const *keys,
                             const size_t *keylens, int nargs, const char *const *args,
                             const size_t *arglens, lc_async_reply_fn cb, void *arg);

/* Reads the answer of such a script: st when it is not LC_OK; LC_ELOST for {0} (the store has
 * seen a later token: nothing ran); LC_EREDIS for any other shape (not a token-fenced script);
 * else LC_OK with *body the body's result (borrowed from r, NULL when it returned nothing). */
lc_status lc_token_eval_result(lc_status st, const redisReply *r, const redisReply **body);

#endif
