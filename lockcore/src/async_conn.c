/*
 * Commands on connections (async_internal.h): a command's record (arguments copied), its send
 * with its deadline, and the one reply callback every command passes, which hands the reply to
 * the operation, the renewal or the undo that waits for it; and the connections themselves:
 * connect (AUTH, SELECT), drop, reconnect with a back-off, the deferred fire-and-forget
 * commands sent at the next connect.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "async_internal.h"
#include "script_internal.h"

enum { RECONNECT_MIN_MS = 10, RECONNECT_MAX_MS = 1000, DEFERRED_MAX = 1024 };

static void on_cmd_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* A command record for call (arguments copied). NULL when out of memory. */
acmd *lc_acmd_new(lc_async_client *client, const lc_call *call, int builtin)
{
    int argc = 3 + call->nkeys + call->nargs;
    const char **argv = malloc(sizeof(*argv) * (size_t)argc);
    size_t *lens = malloc(sizeof(*lens) * (size_t)argc);
    char nk[16];
    acmd *c = NULL;
    if (!argv || !lens)
        goto out;
    lc_script_argv(call, 0, argv, lens, nk);
    size_t bytes = 0;
    for (int i = 2; i < argc; i++)
        bytes += lens[i] + 1;
    c = calloc(1,
               sizeof(*c) + sizeof(char *) * (size_t)argc + sizeof(size_t) * (size_t)argc + bytes);
    if (!c)
        goto out;
    c->client = client;
    c->script = call->script;
    c->builtin = builtin;
    c->slot = client->route && call->nkeys > 0 ? lc_key_slot(call->keys[0], call->keylens[0]) : -1;
    c->argc = argc;
    c->argv = (const char **)(c + 1);
    c->lens = (size_t *)(c->argv + argc);
    char *p = (char *)(c->lens + argc);
    for (int i = 2; i < argc; i++) {
        memcpy(p, argv[i], lens[i]);
        p[lens[i]] = '\0';
        c->argv[i] = p;
        c->lens[i] = lens[i];
        p += lens[i] + 1;
    }
out:
    free(argv);
    free(lens);
    return c;
}

void lc_acmd_free(acmd *c)
{
    if (!c)
        return;
    if (c->timer)
        event_free(c->timer);
    lc_acmd_free(c->undo);
    free(c);
}

static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    acmd *c = arg;
    lc_async_client *client = c->client;
    lc_async_enter(client);
    if (c->parked) {
        lc_acluster_unpark(c); /* its TRYAGAIN pause is over */
    } else if (client->route) {
        /* That node stopped answering. Its connection goes (and the subscriber connection if
         * it is on the same node); the other nodes' are not concerned. */
        aconn *conn = c->conn;
        if (client->subc.ac && client->subc.node == conn->node)
            lc_aconn_fail(&client->subc, "redis: no reply within the command timeout");
        lc_aconn_fail(conn, "redis: no reply within the command timeout");
    } else {
        /* Redis stopped answering: it is down. Both connections go; every command in flight
         * fails with LC_EIO (this one included) and the client reconnects with a back-off. */
        lc_aconn_fail(&client->data, "redis: no reply within the command timeout");
        lc_aconn_fail(&client->subc, "redis: no reply within the command timeout");
    }
    lc_async_leave(client);
}

/* Writes v in decimal at p; returns the byte after it. */
static char *put_uint(char *p, size_t v)
{
    char tmp[24], *q = tmp + sizeof(tmp);
    do {
        *--q = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t n = (size_t)(tmp + sizeof(tmp) - q);
    memcpy(p, q, n);
    return p + n;
}

/* The number of decimal digits of v. */
static size_t digits(size_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

size_t lc_acmd_format(int argc, const char *const *argv, const size_t *lens, char *buf, size_t cap)
{
    size_t total = 1 + digits((size_t)argc) + 2;
    for (int i = 0; i < argc; i++)
        total += 1 + digits(lens[i]) + 2 + lens[i] + 2;
    if (total > cap)
        return total;
    char *p = buf;
    *p++ = '*';
    p = put_uint(p, (size_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    for (int i = 0; i < argc; i++) {
        *p++ = '$';
        p = put_uint(p, lens[i]);
        *p++ = '\r';
        *p++ = '\n';
        memcpy(p, argv[i], lens[i]);
        p += lens[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    return total;
}

/* Writes c on ac with on_cmd_reply as its callback and (re)arms its deadline. 0, or -1 when
 * hiredis refused (c not sent). The command's text is made here (lc_acmd_format) rather than by
 * redisAsyncCommandArgv, whose sds formatting was 5 % of inventoryd's CPU per order (issue 23). */
static int send_armed(acmd *c, redisAsyncContext *ac)
{
    char stack[2048], *buf = stack;
    size_t n = lc_acmd_format(c->argc, c->argv, c->lens, stack, sizeof(stack));
    if (n > sizeof(stack)) { /* an EVAL with the script's source, or large arguments */
        if (!(buf = malloc(n)))
            return -1;
        lc_acmd_format(c->argc, c->argv, c->lens, buf, n);
    }
    int rc = redisAsyncFormattedCommand(ac, on_cmd_reply, c, buf, n);
    if (buf != stack)
        free(buf);
    if (rc != REDIS_OK)
        return -1;
    if (!c->timer)
        c->timer = evtimer_new(c->client->base, on_cmd_timeout, c);
    if (c->timer)
        lc_async_arm(c->timer, c->client->opts.command_timeout_ms);
    return 0;
}

/* Sends c on the data connection (EVALSHA, or EVAL once resent) with its deadline. 0, or -1
 * when the connection is down or hiredis refused (c not sent). */
int lc_acmd_send(acmd *c)
{
    lc_async_client *client = c->client;
    if (client->freeing)
        return -1;
    if (c->pin) {
        /* A WAIT for commands that went on that connection: on no other (a fresh connection's
         * WAIT covers nothing), and not on a new connection to the same node. */
        if (!c->pin->ac || c->pin->gen != c->pin_gen)
            return -1;
        c->conn = c->pin;
        return send_armed(c, c->pin->ac);
    }
    aconn *data = client->route ? lc_acluster_conn(client, c) : &client->data;
    if (!data)
        return -1;
    if (!data->ac && data->reconnect && lc_now_ms() - data->opened_ms >= RECONNECT_MIN_MS) {
        /* Down and waiting out its back-off: a command to send is worth an attempt now (at
         * most one per RECONNECT_MIN_MS). hiredis queues commands on a context still
         * connecting; if the connect fails they fail with LC_EIO as any command on a lost
         * connection would. */
        event_del(data->reconnect);
        lc_aconn_open(data);
    }
    redisAsyncContext *ac = data->ac;
    if (!ac)
        return -1;
    c->conn = data;
    if (client->route) {
        if (!c->deadline_ms)
            c->deadline_ms = lc_now_ms() + client->opts.command_timeout_ms;
        if (c->ask) {
            /* An ASK: this one command may use the importing node's slot, once. */
            const char *asking[1] = {"ASKING"};
            if (redisAsyncCommandArgv(ac, NULL, NULL, 1, asking, NULL) != REDIS_OK)
                return -1;
            c->ask = 0;
        }
    }
    if (c->script) {
        /* A plain command (lc_async_command) is sent as given; a script by SHA, or with its
         * source once resent after NOSCRIPT. */
        const char *src = lc_script_source(c->script);
        c->argv[0] = c->resent ? "EVAL" : "EVALSHA";
        c->lens[0] = strlen(c->argv[0]);
        c->argv[1] = c->resent ? src : lc_script_sha(c->script);
        c->lens[1] = c->resent ? strlen(src) : 40;
    }
    return send_armed(c, ac);
}

/* Sends a command nobody waits for (an undo, a release at lock free). When the data connection
 * is down it waits for the next connect (bounded list). Takes c. */
void lc_acmd_send_detached(acmd *c)
{
    lc_async_client *client = c->client;
    if (client->freeing || !c) {
        lc_acmd_free(c);
        return;
    }
    c->detached = 1;
    if (lc_acmd_send(c) == 0)
        return;
    if (client->ndeferred >= DEFERRED_MAX) {
        lc_acmd_free(c);
        return;
    }
    c->next = client->deferred;
    client->deferred = c;
    client->ndeferred++;
}

/* Whether an acquire reply says the lock was taken. */
static int acquire_taken(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static void on_cmd_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    acmd *c = privdata;
    lc_async_client *client = c->client;
    redisReply *r = reply;
    lc_status st;
    int sent = 1;
    if (c->timer)
        event_del(c->timer);
    aconn *conn = ac->data;
    if (!r) {
        const char *why = conn->ac == ac || !conn->why ? NULL : conn->why;
        /* hiredis writes nothing before the connect completes: a command queued on a context
         * that never connected (a send while reconnecting) did not leave. */
        sent = (ac->c.flags & REDIS_CONNECTED) != 0;
        st = lc_fail(LC_EIO, "%s",
                     why                           ? why
                     : ac->errstr && ac->errstr[0] ? ac->errstr
                                                   : "redis: connection lost");
        lc_aconn_lost(conn, ac); /* hiredis is tearing it down already */
    } else {
        conn->backoff_ms = 0; /* Redis answers: a later drop reconnects at once */
        int redirected =
            client->route && r->type == REDIS_REPLY_ERROR ? lc_acluster_redirect(c, r, conn) : 0;
        if (redirected > 0)
            return; /* on its way again, paused, or dropped: c is not ours here any more */
        if (redirected < 0) {
            /* Redirected (so not run), but the new node cannot be reached now. */
            sent = 0;
            r = NULL;
            st = lc_fail(LC_EIO, "redis cluster: the node a redirection named is not connected");
        } else if (c->script && lc_is_noscript(r) && !c->resent && (c->op || c->builtin)) {
            /* Not run: the server lost its script cache. Again with the source. */
            c->resent = 1;
            if (lc_acmd_send(c) == 0)
                return;
            sent = 0;
            r = NULL;
            st = lc_fail(LC_EIO, "redis: connection lost");
        } else if (r->type == REDIS_REPLY_ERROR) {
            st = lc_fail(LC_EREDIS, "redis: %s", r->str);
        } else {
            st = LC_OK;
        }
    }
    /* The connection this reply came on, for lc_async_reply_conn in the callbacks below (a
     * redirected command's last node: after an ASK, the importing node). */
    aconn *outer = client->reply_conn;
    uint64_t outer_gen = client->reply_gen;
    client->reply_conn = r && sent && conn->ac == ac ? conn : NULL;
    client->reply_gen = conn->gen;
    if (c->renew_of) {
        lc_async_lock *l = c->renew_of;
        c->renew_of = NULL;
        l->renew_cmd = NULL;
        lc_alock_renew_on_reply(l, st, r);
    } else if (c->op) {
        aop *op = c->op;
        c->op = NULL;
        op->cmd = NULL;
        lc_aop_on(op, EV_REPLY, st, r, sent);
    } else if (c->undo && ((st == LC_OK && acquire_taken(r)) || (st == LC_EIO && sent))) {
        acmd *undo = c->undo;
        c->undo = NULL;
        lc_acmd_send_detached(undo);
    }
    client->reply_conn = outer;
    client->reply_gen = outer_gen;
    lc_acmd_free(c);
}

static void schedule_reconnect(aconn *conn)
{
    lc_async_client *client = conn->client;
    if (client->freeing || !conn->reconnect)
        return;
    int b = conn->backoff_ms;
    b = b == 0 ? RECONNECT_MIN_MS : (b * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : b * 2);
    conn->backoff_ms = b;
    lc_async_arm(conn->reconnect, lc_jitter_ms(b / 2 > 0 ? b / 2 : 1));
}

/* The connection ac of conn is gone or going (idempotent; ignores an older context). */
void lc_aconn_lost(aconn *conn, const redisAsyncContext *ac)
{
    if (!ac || conn->ac != ac)
        return;
    conn->ac = NULL;
    conn->up = 0;
    if (conn->sub)
        lc_asub_lost(conn->client);
    else if (conn->client->route && !conn->client->freeing)
        lc_acluster_refresh_soon(conn->client); /* a node went: its slots may have a new master */
    schedule_reconnect(conn);
}

/* Drops conn's connection ourselves: every command on it gets its callback (NULL reply), which
 * reads why as its message. */
void lc_aconn_fail(aconn *conn, const char *why)
{
    redisAsyncContext *ac = conn->ac;
    if (!ac)
        return;
    if (why)
        conn->why = why;
    lc_aconn_lost(conn, ac);
    redisAsyncFree(ac);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    aconn *conn = ac->data;
    if (status != REDIS_OK)
        lc_aconn_lost(conn, ac);
    else if (conn->ac == ac)
        conn->up = 1;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    lc_aconn_lost(ac->data, ac);
}

void lc_aconn_on_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aconn *conn = arg;
    lc_async_client *client = conn->client;
    lc_async_enter(client);
    if (!conn->ac)
        lc_aconn_open(conn);
    lc_async_leave(client);
}

/* Starts connecting conn (AUTH and SELECT queued first). On failure, retries after back-off. */
void lc_aconn_open(aconn *conn)
{
    lc_async_client *client = conn->client;
    const lc_url *u = &client->url;
    conn->opened_ms = lc_now_ms();
    if (client->route && conn->sub) /* any node hears every PUBLISH of the cluster */
        conn->node = client->sub_next++ % lc_route_nodes(client->route);
    redisAsyncContext *ac = u->unix_socket ? redisAsyncConnectUnix(u->path)
                            : client->route
                                ? redisAsyncConnect(lc_route_host(client->route, conn->node),
                                                    lc_route_port(client->route, conn->node))
                                : redisAsyncConnect(u->host, u->port);
    if (!ac || ac->err || lc_ev_attach(ac, client->base, client) != 0) {
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(conn);
        return;
    }
    ac->data = conn;
    conn->gen++;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    conn->ac = ac;
    conn->why = NULL;
    if (u->password[0]) {
        const char *av[3] = {"AUTH", u->user[0] ? u->user : u->password, u->password};
        redisAsyncCommandArgv(ac, NULL, NULL, u->user[0] ? 3 : 2, av, NULL);
    }
    if (u->db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u->db);
        const char *av[2] = {"SELECT", db};
        redisAsyncCommandArgv(ac, NULL, NULL, 2, av, NULL);
    }
    if (conn->sub) {
        lc_asub_connected(client);
    } else {
        acmd *list = client->deferred;
        client->deferred = NULL;
        client->ndeferred = 0;
        while (list) {
            acmd *c = list;
            list = c->next;
            c->next = NULL;
            lc_acmd_send_detached(c);
        }
    }
}
