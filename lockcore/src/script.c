/*
 * Lua scripts known by SHA1: made once, run with EVALSHA and re-sent with EVAL when the server
 * answers NOSCRIPT (after a restart or SCRIPT FLUSH). Includes a small SHA1 so a script's
 * digest is known without a round trip. A call (lc_call) is a script with its keys and
 * arguments, built by the layer above (hold.c) and run here on a client's connections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "client_internal.h"
#include "script_internal.h"

/* ---- SHA1 (FIPS 180-1), enough for script digests ---- */

#define ROL(v, n) (((v) << (n)) | ((v) >> (32 - (n))))

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = ROL(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = ROL(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = ROL(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

static void sha1_hex(const char *data, size_t len, char out[41])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    const unsigned char *p = (const unsigned char *)data;
    size_t full = len / 64 * 64;
    for (size_t i = 0; i < full; i += 64)
        sha1_block(h, p + i);
    unsigned char tail[128] = {0};
    size_t rest = len - full;
    memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    size_t tlen = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tlen == 128)
        sha1_block(h, tail + 64);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[40] = '\0';
}

lc_status lc_script_new(const char *source, lc_script **out)
{
    if (out)
        *out = NULL;
    if (!source || !out || !*source)
        return lc_fail(LC_EINVAL, "script: NULL or empty source");
    lc_script *s = calloc(1, sizeof(*s));
    if (!s || !(s->owned = strdup(source))) {
        free(s);
        return lc_fail(LC_ENOMEM, "script: out of memory");
    }
    s->source = s->owned;
    s->len = strlen(source);
    sha1_hex(s->source, s->len, s->sha);
    *out = s;
    return LC_OK;
}

void lc_script_init_static(lc_script *s, const char *source)
{
    s->source = source;
    s->owned = NULL;
    s->len = strlen(source);
    sha1_hex(s->source, s->len, s->sha);
}

const char *lc_script_source(const lc_script *script)
{
    return script->source;
}

const char *lc_script_sha(const lc_script *script)
{
    return script->sha;
}

void lc_script_free(lc_script *script)
{
    if (!script)
        return;
    free(script->owned);
    free(script);
}

lc_status lc_call_init(lc_call *c, const lc_script *s, int nkeys, int nargs)
{
    memset(c, 0, sizeof(*c));
    c->script = s;
    c->nkeys = nkeys;
    c->nargs = nargs;
    c->keys = c->kv;
    c->keylens = c->kl;
    c->args = c->av;
    c->arglens = c->al;
    if (!s)
        return lc_fail(LC_ENOMEM, "script: out of memory");
    if (nkeys > LC_CALL_INLINE) {
        c->keys = malloc(sizeof(*c->keys) * (size_t)nkeys);
        c->keylens = malloc(sizeof(*c->keylens) * (size_t)nkeys);
    }
    if (nargs > LC_CALL_INLINE) {
        c->args = malloc(sizeof(*c->args) * (size_t)nargs);
        c->arglens = malloc(sizeof(*c->arglens) * (size_t)nargs);
    }
    if (!c->keys || !c->keylens || !c->args || !c->arglens) {
        lc_call_done(c);
        return lc_fail(LC_ENOMEM, "script: out of memory");
    }
    return LC_OK;
}

void lc_call_done(lc_call *c)
{
    if (c->keys != c->kv)
        free(c->keys);
    if (c->keylens != c->kl)
        free(c->keylens);
    if (c->args != c->av)
        free(c->args);
    if (c->arglens != c->al)
        free(c->arglens);
    c->keys = c->kv;
    c->keylens = c->kl;
    c->args = c->av;
    c->arglens = c->al;
}

int lc_script_argv(const lc_call *call, int use_source, const char **argv, size_t *lens,
                   char nk[16])
{
    const lc_script *script = call->script;
    int nklen = snprintf(nk, 16, "%d", call->nkeys);
    argv[0] = use_source ? "EVAL" : "EVALSHA";
    lens[0] = use_source ? 4 : 7;
    argv[1] = use_source ? script->source : script->sha;
    lens[1] = use_source ? script->len : 40;
    argv[2] = nk;
    lens[2] = (size_t)nklen;
    for (int i = 0; i < call->nkeys; i++) {
        argv[3 + i] = call->keys[i];
        lens[3 + i] = call->keylens[i];
    }
    for (int i = 0; i < call->nargs; i++) {
        argv[3 + call->nkeys + i] = call->args[i];
        lens[3 + call->nkeys + i] = call->arglens[i];
    }
    return 3 + call->nkeys + call->nargs;
}

int lc_is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Runs EVALSHA (or EVAL with the source when use_source) of call through lc_exec. */
static lc_status send_eval(lc_client *client, const lc_call *call, int use_source,
                           redisReply **reply, int *sent)
{
    enum { STACK_ARGS = 24 };
    const char *sv[STACK_ARGS];
    size_t sl[STACK_ARGS];
    int argc = 3 + call->nkeys + call->nargs;
    const char **argv = sv;
    size_t *lens = sl;
    if (argc > STACK_ARGS) {
        argv = malloc(sizeof(*argv) * (size_t)argc);
        lens = malloc(sizeof(*lens) * (size_t)argc);
        if (!argv || !lens) {
            free(argv);
            free(lens);
            return lc_fail(LC_ENOMEM, "script: out of memory");
        }
    }
    char nk[16];
    lc_script_argv(call, use_source, argv, lens, nk);
    const char **const cmds[1] = {argv};
    const size_t *const lv[1] = {lens};
    lc_status st = lc_exec(client, 1, &argc, cmds, lv, reply, sent);
    if (argv != sv) {
        free(argv);
        free(lens);
    }
    return st;
}

lc_status lc_call_run(lc_client *client, const lc_call *call, redisReply **reply, int *sent)
{
    if (reply)
        *reply = NULL;
    if (sent)
        *sent = 0;
    redisReply *r = NULL;
    lc_status st = send_eval(client, call, 0, &r, sent);
    if (st == LC_OK && lc_is_noscript(r)) {
        freeReplyObject(r);
        r = NULL;
        st = send_eval(client, call, 1, &r, sent);
    }
    if (st == LC_OK && r->type == REDIS_REPLY_ERROR)
        st = lc_fail(LC_EREDIS, "redis: %s", r->str);
    if (reply)
        *reply = r;
    else if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_script_run(lc_client *client, const lc_script *script, int nkeys, const char **keys,
                        const size_t *keylens, int nargs, const char **args, const size_t *arglens,
                        redisReply **reply)
{
    if (reply)
        *reply = NULL;
    if (!client || !script || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args))
        return lc_fail(LC_EINVAL, "script run: bad argument");
    for (int i = 0; i < nkeys; i++)
        if (!keys[i])
            return lc_fail(LC_EINVAL, "script run: key %d is NULL", i);
    for (int i = 0; i < nargs; i++)
        if (!args[i])
            return lc_fail(LC_EINVAL, "script run: arg %d is NULL", i);
    /* Borrow the caller's arrays through a call; only missing lengths need room. */
    lc_call call;
    memset(&call, 0, sizeof(call));
    call.script = script;
    call.nkeys = nkeys;
    call.nargs = nargs;
    call.keys = keys;
    call.args = args;
    size_t *kl = NULL, *al = NULL;
    if (!keylens && nkeys > 0 && !(kl = malloc(sizeof(*kl) * (size_t)nkeys)))
        return lc_fail(LC_ENOMEM, "script: out of memory");
    if (!arglens && nargs > 0 && !(al = malloc(sizeof(*al) * (size_t)nargs))) {
        free(kl);
        return lc_fail(LC_ENOMEM, "script: out of memory");
    }
    for (int i = 0; kl && i < nkeys; i++)
        kl[i] = strlen(keys[i]);
    for (int i = 0; al && i < nargs; i++)
        al[i] = strlen(args[i]);
    call.keylens = keylens ? (size_t *)keylens : kl;
    call.arglens = arglens ? (size_t *)arglens : al;
    lc_status st = lc_call_run(client, &call, reply, NULL);
    free(kl);
    free(al);
    return st;
}
