/*
 * Plain commands and scripts of the asynchronous face (no lock): sent as given on the node of
 * their key (or every master), a script by SHA with the EVAL fallback, and WAIT on the
 * connection a reply came on (lc_async_reply_conn).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "async_internal.h"

/* A command record holding a copy of argv (sent as it is). NULL when out of memory. */
static acmd *cmd_new_raw(lc_async_client *client, int argc, const char *const *argv,
                         const size_t *lens)
{
    size_t bytes = 0;
    for (int i = 0; i < argc; i++)
        bytes += (lens ? lens[i] : strlen(argv[i])) + 1;
    acmd *c = calloc(1, sizeof(*c) + sizeof(char *) * (size_t)argc + sizeof(size_t) * (size_t)argc +
                            bytes);
    if (!c)
        return NULL;
    c->client = client;
    c->argc = argc;
    c->argv = (const char **)(c + 1);
    c->lens = (size_t *)(c->argv + argc);
    c->slot = -1;
    char *p = (char *)(c->lens + argc);
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        memcpy(p, argv[i], n);
        p[n] = '\0';
        c->argv[i] = p;
        c->lens[i] = n;
        p += n + 1;
    }
    if (client->route) {
        int k = lc_command_key(argc, c->argv, c->lens);
        c->slot = k < 0 ? -1 : lc_key_slot(c->argv[k], c->lens[k]);
    }
    return c;
}

/* Starts op for the command c (taken). */
lc_status lc_acommand_start(lc_async_client *client, acmd *c, lc_async_reply_fn cb, void *arg)
{
    aop *op = c ? lc_aop_new(client, NULL, OP_COMMAND, arg) : NULL;
    if (!op) {
        lc_acmd_free(c);
        return lc_fail(LC_ENOMEM, "async: out of memory");
    }
    op->cb.reply = cb;
    lc_aop_send(op, c);
    return LC_OK;
}

/* The checks every plain command call makes: a live client and argc non-NULL arguments (the
 * caller has checked client, argc and argv themselves). */
static lc_status command_args_ok(const lc_async_client *client, int argc, const char *const *argv)
{
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async command: the client was freed");
    for (int i = 0; i < argc; i++)
        if (!argv[i])
            return lc_fail(LC_EINVAL, "async command: argument %d is NULL", i);
    return LC_OK;
}

lc_status lc_async_command(lc_async_client *client, int argc, const char *const *argv,
                           const size_t *lens, lc_async_reply_fn cb, void *arg)
{
    if (!client || argc <= 0 || !argv)
        return lc_fail(LC_EINVAL, "async command: bad arguments");
    lc_status chk = command_args_ok(client, argc, argv);
    if (chk != LC_OK)
        return chk;
    return lc_acommand_start(client, cmd_new_raw(client, argc, argv, lens), cb, arg);
}

lc_status lc_async_command_masters(lc_async_client *client, int argc, const char *const *argv,
                                   const size_t *lens, lc_async_reply_fn cb, void *arg, int *sent)
{
    if (sent)
        *sent = 0;
    if (!client || argc <= 0 || !argv || !sent)
        return lc_fail(LC_EINVAL, "async command: bad arguments");
    lc_status chk = command_args_ok(client, argc, argv);
    if (chk != LC_OK)
        return chk;
    if (!client->route) {
        lc_status st = lc_acommand_start(client, cmd_new_raw(client, argc, argv, lens), cb, arg);
        *sent = st == LC_OK;
        return st;
    }
    int n = lc_route_nodes(client->route);
    int *slots = malloc(sizeof(*slots) * (size_t)(n > 0 ? n : 1));
    if (!slots)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    int masters = lc_route_master_slots(client->route, slots, n);
    lc_status st = masters > 0 ? LC_OK : lc_fail(LC_ESTATE, "async command: no master known yet");
    for (int i = 0; i < masters && st == LC_OK; i++) {
        acmd *c = cmd_new_raw(client, argc, argv, lens);
        if (c)
            c->slot = slots[i]; /* routed like a key of that slot: to its master */
        st = lc_acommand_start(client, c, cb, arg);
        *sent += st == LC_OK;
    }
    free(slots);
    return st;
}

lc_status lc_async_command_key(lc_async_client *client, const char *key, size_t keylen, int argc,
                               const char *const *argv, const size_t *lens, lc_async_reply_fn cb,
                               void *arg)
{
    if (!client || !key || argc <= 0 || !argv)
        return lc_fail(LC_EINVAL, "async command: bad arguments");
    lc_status chk = command_args_ok(client, argc, argv);
    if (chk != LC_OK)
        return chk;
    acmd *c = cmd_new_raw(client, argc, argv, lens);
    if (c && client->route)
        c->slot = lc_key_slot(key, keylen);
    return lc_acommand_start(client, c, cb, arg);
}

int lc_async_reply_conn(const lc_async_client *client, lc_async_conn_ref *out)
{
    if (!client || !out)
        return -1;
    const aconn *conn = client->reply_conn;
    if (!conn)
        return -1;
    out->node = conn->node;
    out->gen = client->reply_gen;
    return 0;
}

lc_status lc_async_wait(lc_async_client *client, const lc_async_conn_ref *ref, int numreplicas,
                        int timeout_ms, lc_async_reply_fn cb, void *arg)
{
    if (!client || !ref || numreplicas < 0 || timeout_ms < 0)
        return lc_fail(LC_EINVAL, "async wait: bad arguments");
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async wait: the client was freed");
    aconn *conn = NULL;
    if (!client->route)
        conn = ref->node == -1 ? &client->data : NULL;
    else if (ref->node >= 0 && ref->node < client->nnodes)
        conn = client->nodes[ref->node];
    if (!conn)
        return lc_fail(LC_EINVAL, "async wait: not a connection of this client");
    char n[16], ms[16];
    snprintf(n, sizeof(n), "%d", numreplicas);
    snprintf(ms, sizeof(ms), "%d", timeout_ms);
    const char *argv[3] = {"WAIT", n, ms};
    acmd *c = cmd_new_raw(client, 3, argv, NULL);
    if (c) {
        c->pin = conn;
        c->pin_gen = ref->gen;
    }
    /* A connection gone since (or going) fails the WAIT with LC_EDOWN from the loop (lc_aop_send):
     * never sent. */
    return lc_acommand_start(client, c, cb, arg);
}

lc_status lc_async_token_script(lc_async_client *client, const lc_script *script,
                                const char *seen_key, uint64_t token, const char *owner, int nkeys,
                                const char *const *keys, const size_t *keylens, int nargs,
                                const char *const *args, const size_t *arglens,
                                lc_async_reply_fn cb, void *arg)
{
    if (!seen_key || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args) ||
        (owner && strlen(owner) > LC_NAME_MAX))
        return lc_fail(LC_EINVAL, "async token script: bad arguments");
    const char **k = malloc(sizeof(*k) * (size_t)(nkeys + 1));
    const char **a = malloc(sizeof(*a) * (size_t)(nargs + 1));
    size_t *kl = malloc(sizeof(*kl) * (size_t)(nkeys + 1));
    size_t *al = malloc(sizeof(*al) * (size_t)(nargs + 1));
    char t[24 + LC_NAME_MAX];
    lc_status st = lc_fail(LC_ENOMEM, "async: out of memory");
    if (k && a && kl && al) {
        if (owner && *owner)
            snprintf(t, sizeof(t), "%" PRIu64 ":%s", token, owner);
        else
            snprintf(t, sizeof(t), "%" PRIu64, token);
        k[0] = seen_key;
        kl[0] = strlen(seen_key);
        a[0] = t;
        al[0] = strlen(t);
        for (int i = 0; i < nkeys; i++) {
            k[1 + i] = keys[i];
            kl[1 + i] = keylens ? keylens[i] : strlen(keys[i]);
        }
        for (int i = 0; i < nargs; i++) {
            a[1 + i] = args[i];
            al[1 + i] = arglens ? arglens[i] : strlen(args[i]);
        }
        st = lc_async_script(client, script, nkeys + 1, k, kl, nargs + 1, a, al, cb, arg);
    }
    free(k);
    free(a);
    free(kl);
    free(al);
    return st;
}

lc_status lc_async_script(lc_async_client *client, const lc_script *script, int nkeys,
                          const char *const *keys, const size_t *keylens, int nargs,
                          const char *const *args, const size_t *arglens, lc_async_reply_fn cb,
                          void *arg)
{
    enum { INLINE = 16 };
    if (!client || !script || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args))
        return lc_fail(LC_EINVAL, "async script: bad arguments");
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async script: the client was freed");
    size_t klv[INLINE], alv[INLINE];
    size_t *kl = nkeys <= INLINE ? klv : malloc(sizeof(*kl) * (size_t)nkeys);
    size_t *al = nargs <= INLINE ? alv : malloc(sizeof(*al) * (size_t)nargs);
    lc_status st = lc_fail(LC_ENOMEM, "async: out of memory");
    if (kl && al) {
        for (int i = 0; i < nkeys; i++)
            kl[i] = keylens ? keylens[i] : strlen(keys[i]);
        for (int i = 0; i < nargs; i++)
            al[i] = arglens ? arglens[i] : strlen(args[i]);
        lc_call call;
        memset(&call, 0, sizeof(call));
        call.script = script;
        call.nkeys = nkeys;
        call.nargs = nargs;
        call.keys = (const char **)keys;
        call.args = (const char **)args;
        call.keylens = kl;
        call.arglens = al;
        st = lc_acommand_start(client, lc_acmd_new(client, &call, 0), cb, arg);
    }
    if (kl != klv)
        free(kl);
    if (al != alv)
        free(al);
    return st;
}
