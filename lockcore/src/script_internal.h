/*
 * Scripts (script.c), above the connection layer: Lua scripts known by SHA1, a prepared script
 * call (a script with its keys and arguments: the same value whichever face sends it), and
 * running a call on a client with EVALSHA and the EVAL fallback on NOSCRIPT. Not public API.
 */
#ifndef LOCKCORE_SCRIPT_INTERNAL_H
#define LOCKCORE_SCRIPT_INTERNAL_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "base_internal.h"

/* Opaque to the public API (lockcore.h); defined here so that a layer above can keep scripts in
 * static storage (lc_script_init_static). */
struct lc_script {
    const char *source;
    char *owned; /* the copy of source that lc_script_new made; NULL: static (never freed) */
    size_t len;
    char sha[41];
};

/* Makes *s the script of source without copying it: source must outlive *s (a string literal).
 * No allocation, no failure. Never pass *s to lc_script_free. */
void lc_script_init_static(lc_script *s, const char *source);

/* A script call's keys and args. Pointers into the caller's arrays and strings (borrowed: keep
 * them alive until the call is sent). Fill with lc_call_init and a builder (hold.c), free with
 * lc_call_done. Not movable (points into itself). */
enum { LC_CALL_INLINE = 16 };
typedef struct lc_call {
    const lc_script *script;
    int nkeys, nargs;
    const char **keys, **args;
    size_t *keylens, *arglens;
    const char *kv[LC_CALL_INLINE], *av[LC_CALL_INLINE];
    size_t kl[LC_CALL_INLINE], al[LC_CALL_INLINE];
    char lease[16], held[16], fence[24]; /* room for the numbers a builder formats */
} lc_call;

/* Makes room in c for nkeys keys and nargs args of script s (on the call's own arrays when
 * they fit), to be filled by the caller. LC_OK, or LC_ENOMEM (also when s is NULL); c needs
 * lc_call_done either way. */
lc_status lc_call_init(lc_call *c, const lc_script *s, int nkeys, int nargs);
void lc_call_done(lc_call *c);

/* Builds EVALSHA (use_source = 0) or EVAL (1) of call into argv/lens, which must have room
 * for 3 + call->nkeys + call->nargs entries; nk is scratch for the key count. Returns argc. */
int lc_script_argv(const lc_call *call, int use_source, const char **argv, size_t *lens,
                   char nk[16]);

/* 1 when r is Redis' NOSCRIPT error (the script must be sent again with EVAL). */
int lc_is_noscript(const redisReply *r);

/* Runs call on client (EVALSHA; EVAL after NOSCRIPT). As lc_script_run, plus *sent (may be
 * NULL) as for lc_exec: whether the script may have run when the status is LC_EIO. */
lc_status lc_call_run(lc_client *client, const lc_call *call, redisReply **reply, int *sent);

#endif
