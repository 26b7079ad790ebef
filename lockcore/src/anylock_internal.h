/*
 * Private declarations of the anylock layer (anylock.c), for the backends above it (Redlock,
 * MySQL, ZooKeeper): the one fenced-eval helper their lc_*_lock_eval are made of. Not public API.
 *
 * A token-fenced commit (lc_token_fenced_script_new) runs on the data store with the hold's
 * fencing token; the store answers {1, body} (it ran) or {0, seen} (a later holder's token was
 * seen: nothing ran). The helper sends it, parses the answer, and hands the verdict to its
 * owner unless the owner detached from it first (its operation ended without it: freed).
 */
#ifndef LOCKCORE_ANYLOCK_INTERNAL_H
#define LOCKCORE_ANYLOCK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lockcore/lockcore_anylock.h"

/* The store's verdict on a token-fenced commit. */
typedef struct lc_fenced_result {
    lc_status st;           /* LC_OK, LC_ELOST (a later token seen), LC_EREDIS, or the send's */
    int answered;           /* the store answered (a bad shape is then LC_EREDIS) */
    const redisReply *body; /* LC_OK: the body's result (borrowed), may be NULL */
    uint64_t seen;          /* LC_ELOST: the store's highest token seen (0: unreadable) */
    const char *errstr;     /* the send's failure message ("" when answered) */
} lc_fenced_result;

typedef struct lc_fenced lc_fenced;
typedef void (*lc_fenced_fn)(void *owner, const lc_fenced_result *res);

/* Sends script on store with token (and owner_id beside it: lc_async_token_script) and calls
 * done(owner, verdict) from the loop, once, unless lc_fenced_detach came first. *out: the
 * commit in flight (to detach). LC_OK, else nothing was sent (lc_errmsg says why). */
lc_status lc_fenced_send(lc_async_client *store, const lc_script *script, const char *seen_key,
                         uint64_t token, const char *owner_id, int nkeys, const char *const *keys,
                         const size_t *keylens, int nargs, const char *const *args,
                         const size_t *arglens, lc_fenced_fn done, void *owner, lc_fenced **out);

/* The owner stops waiting: the verdict, when it comes, is dropped. NULL-safe. */
void lc_fenced_detach(lc_fenced *f);

/* Writes the message of a failed verdict into why (len bytes) as "<what> <name>: ...", the name
 * cut at name_max bytes (-1: whole): unchanged when res->st is LC_OK. fence: the hold's. */
void lc_fenced_why(char *why, size_t len, const char *what, const char *name, int name_max,
                   const lc_fenced_result *res, uint64_t fence);

#endif
