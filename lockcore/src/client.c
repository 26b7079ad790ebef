/*
 * The client: a pool of Redis connections (each used by one thread at a time, dropped after
 * any I/O error and reopened on demand), plus the lazily started watchdog and unlock listener.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "lockcore_internal.h"

void lc_client_opts_init(lc_client_opts *opts)
{
    if (!opts)
        return;
    opts->connect_timeout_ms = 1000;
    opts->command_timeout_ms = 1000;
    opts->pool_max_idle = 64;
    opts->pipeline = 0;
}

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

lc_status lc_reply_status(redisContext *ctx, const redisReply *reply, int *broken)
{
    if (!reply) {
        *broken = 1;
        return lc_fail(LC_EIO, "redis: %s", ctx && ctx->err ? ctx->errstr : "no reply");
    }
    if (reply->type == REDIS_REPLY_ERROR)
        return lc_fail(LC_EREDIS, "redis: %s", reply->str);
    return LC_OK;
}

/* Runs one simple command on a fresh connection during connect. */
static lc_status setup_command(redisContext *ctx, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    int broken = 0;
    lc_status st = lc_reply_status(ctx, r, &broken);
    if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_connect(const lc_client *client, redisContext **out)
{
    *out = NULL;
    const lc_url *u = &client->url;
    struct timeval ctv = tv_ms(client->opts.connect_timeout_ms);
    redisContext *ctx = u->unix_socket ? redisConnectUnixWithTimeout(u->path, ctv)
                                       : redisConnectWithTimeout(u->host, u->port, ctv);
    if (!ctx)
        return lc_fail(LC_ENOMEM, "redis connect: out of memory");
    if (ctx->err) {
        lc_status st = u->unix_socket
                           ? lc_fail(LC_EIO, "redis connect %s: %s", u->path, ctx->errstr)
                           : lc_fail(LC_EIO, "redis connect %s:%d: %s", u->host, u->port,
                                     ctx->errstr);
        redisFree(ctx);
        return st;
    }
    redisSetTimeout(ctx, tv_ms(client->opts.command_timeout_ms));
    if (!u->unix_socket)
        redisEnableKeepAlive(ctx);
    lc_status st = LC_OK;
    if (u->password[0]) {
        const char *av[3] = {"AUTH", u->user[0] ? u->user : u->password, u->password};
        st = setup_command(ctx, u->user[0] ? 3 : 2, av);
    }
    if (st == LC_OK && u->db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u->db);
        const char *av[2] = {"SELECT", db};
        st = setup_command(ctx, 2, av);
    }
    if (st != LC_OK) {
        redisFree(ctx);
        return st;
    }
    *out = ctx;
    return LC_OK;
}

lc_status lc_conn_get(lc_client *client, lc_conn **out)
{
    pthread_mutex_lock(&client->pool_mu);
    lc_conn *c = client->idle;
    if (c) {
        client->idle = c->next;
        client->nidle--;
    }
    pthread_mutex_unlock(&client->pool_mu);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return lc_fail(LC_ENOMEM, "redis connect: out of memory");
        lc_status st = lc_connect(client, &c->ctx);
        if (st != LC_OK) {
            free(c);
            return st;
        }
    }
    *out = c;
    return LC_OK;
}

void lc_conn_put(lc_client *client, lc_conn *conn, int broken)
{
    if (!broken) {
        pthread_mutex_lock(&client->pool_mu);
        if (client->nidle < client->opts.pool_max_idle) {
            conn->next = client->idle;
            client->idle = conn;
            client->nidle++;
            conn = NULL;
        }
        pthread_mutex_unlock(&client->pool_mu);
    }
    if (conn) {
        redisFree(conn->ctx);
        free(conn);
    }
}

lc_status lc_client_new(const char *url, const lc_client_opts *opts, lc_client **out)
{
    if (out)
        *out = NULL;
    if (!url || !out)
        return lc_fail(LC_EINVAL, "client: NULL argument");
    lc_client *c = calloc(1, sizeof(*c));
    if (!c)
        return lc_fail(LC_ENOMEM, "client: out of memory");
    lc_client_opts_init(&c->opts);
    if (opts) {
        if (opts->connect_timeout_ms <= 0 || opts->command_timeout_ms <= 0 ||
            opts->pool_max_idle < 0) {
            free(c);
            return lc_fail(LC_EINVAL, "client: timeouts must be > 0 and pool_max_idle >= 0");
        }
        c->opts = *opts;
    }
    lc_status st = lc_url_parse(url, &c->url);
    if (st == LC_OK && c->url.cluster)
        st = lc_fail(LC_EINVAL, "redis url: redis-cluster:// needs the asynchronous face "
                                "(lc_async_client_new); the blocking client speaks to one Redis");
    if (st != LC_OK) {
        free(c);
        return st;
    }
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_mutex_init(&c->lazy_mu, NULL);
    c->s_acquire = lc_builtin_script(LC_S_ACQUIRE);
    c->s_release = lc_builtin_script(LC_S_RELEASE);
    c->s_renew = lc_builtin_script(LC_S_RENEW);
    c->s_force = lc_builtin_script(LC_S_FORCE);
    if (!c->s_acquire || !c->s_release || !c->s_renew || !c->s_force) {
        lc_client_free(c);
        return lc_fail(LC_ENOMEM, "client: out of memory");
    }
    if (c->opts.pipeline && (st = lc_mux_new(c, &c->mux)) != LC_OK) {
        lc_client_free(c);
        return st;
    }
    st = lc_client_ping(c);
    if (st != LC_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        lc_client_free(c);
        return lc_fail(st, "%s", msg);
    }
    *out = c;
    return LC_OK;
}

void lc_client_free(lc_client *client)
{
    if (!client)
        return;
    lc_watchdog_free(atomic_load(&client->watchdog));
    lc_notify_free(client->notify);
    lc_mux_free(client->mux);
    while (client->idle) {
        lc_conn *c = client->idle;
        client->idle = c->next;
        redisFree(c->ctx);
        free(c);
    }
    pthread_mutex_destroy(&client->pool_mu);
    pthread_mutex_destroy(&client->lazy_mu);
    free(client);
}

lc_status lc_exec(lc_client *client, int n, const int *argcs, const char **const *argvs,
                  const size_t *const *lens, redisReply **replies, int *sent)
{
    assert(lc_in_loop == 0 && "blocking lockcore call on an event-loop thread");
    for (int i = 0; i < n; i++)
        replies[i] = NULL;
    if (sent)
        *sent = 0;
    if (client->mux)
        return lc_mux_exec(client->mux, n, argcs, argvs, lens, replies, sent);
    lc_conn *conn;
    lc_status st = lc_conn_get(client, &conn);
    if (st != LC_OK)
        return st;
    if (sent)
        *sent = 1; /* from here on a failure may come after the server read the commands */
    int broken = 0;
    if (n == 1) {
        replies[0] = redisCommandArgv(conn->ctx, argcs[0], argvs[0], lens ? lens[0] : NULL);
        broken = replies[0] == NULL;
    } else {
        for (int i = 0; i < n && !broken; i++)
            if (redisAppendCommandArgv(conn->ctx, argcs[i], argvs[i], lens ? lens[i] : NULL) !=
                REDIS_OK)
                broken = 1;
        for (int i = 0; i < n && !broken; i++) {
            void *r = NULL;
            if (redisGetReply(conn->ctx, &r) != REDIS_OK || !r)
                broken = 1;
            replies[i] = r;
        }
    }
    if (broken) {
        st = lc_fail(LC_EIO, "redis: %s", conn->ctx->err ? conn->ctx->errstr : "no reply");
        for (int i = 0; i < n; i++)
            if (replies[i]) {
                freeReplyObject(replies[i]);
                replies[i] = NULL;
            }
    }
    lc_conn_put(client, conn, broken);
    return st;
}

lc_status lc_client_command(lc_client *client, int argc, const char **argv, const size_t *argvlen,
                            redisReply **reply)
{
    if (reply)
        *reply = NULL;
    if (!client || argc <= 0 || !argv)
        return lc_fail(LC_EINVAL, "command: bad argument");
    for (int i = 0; i < argc; i++)
        if (!argv[i])
            return lc_fail(LC_EINVAL, "command: argument %d is NULL", i);
    redisReply *r = NULL;
    const char **const cmds[1] = {argv};
    const size_t *const lv[1] = {argvlen};
    lc_status st = lc_exec(client, 1, &argc, cmds, lv, &r, NULL);
    if (st == LC_OK && r->type == REDIS_REPLY_ERROR)
        st = lc_fail(LC_EREDIS, "redis: %s", r->str);
    if (reply)
        *reply = r;
    else if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_client_ping(lc_client *client)
{
    const char *argv[1] = {"PING"};
    redisReply *r = NULL;
    lc_status st = lc_client_command(client, 1, argv, NULL, &r);
    if (st == LC_OK && (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0))
        st = lc_fail(LC_EREDIS, "redis: unexpected PING reply");
    if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_client_pipeline(lc_client *client, int n, const int *argcs, const char **const *cmds,
                             const size_t *const *lens, redisReply **replies)
{
    if (!client || n <= 0 || !argcs || !cmds || !replies)
        return lc_fail(LC_EINVAL, "pipeline: bad argument");
    for (int i = 0; i < n; i++) {
        replies[i] = NULL;
        if (argcs[i] <= 0 || !cmds[i])
            return lc_fail(LC_EINVAL, "pipeline: command %d is empty", i);
    }
    return lc_exec(client, n, argcs, cmds, lens, replies, NULL);
}
