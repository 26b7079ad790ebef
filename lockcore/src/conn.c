/*
 * Opening one Redis connection for a client: connect with the connect timeout, AUTH and SELECT
 * when the URL asks for them, the command timeout on the socket, TCP keep-alive. Every
 * connection of the blocking face is opened here, whoever uses it afterwards.
 */
#include <stdio.h>
#include <sys/time.h>

#include "base_internal.h"
#include "conn_internal.h"

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Runs one simple command on a fresh connection during connect: LC_OK, LC_EIO (no reply) or
 * LC_EREDIS (an error reply), with the message set. */
static lc_status setup_command(redisContext *ctx, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    lc_status st = LC_OK;
    if (!r)
        st = lc_fail(LC_EIO, "redis: %s", ctx->err ? ctx->errstr : "no reply");
    else if (r->type == REDIS_REPLY_ERROR)
        st = lc_fail(LC_EREDIS, "redis: %s", r->str);
    if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_connect(const lc_endpoint *ep, redisContext **out)
{
    *out = NULL;
    const lc_url *u = &ep->url;
    struct timeval ctv = tv_ms(ep->opts.connect_timeout_ms);
    redisContext *ctx = u->unix_socket ? redisConnectUnixWithTimeout(u->path, ctv)
                                       : redisConnectWithTimeout(u->host, u->port, ctv);
    if (!ctx)
        return lc_fail(LC_ENOMEM, "redis connect: out of memory");
    if (ctx->err) {
        lc_status st =
            u->unix_socket
                ? lc_fail(LC_EIO, "redis connect %s: %s", u->path, ctx->errstr)
                : lc_fail(LC_EIO, "redis connect %s:%d: %s", u->host, u->port, ctx->errstr);
        redisFree(ctx);
        return st;
    }
    redisSetTimeout(ctx, tv_ms(ep->opts.command_timeout_ms));
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
