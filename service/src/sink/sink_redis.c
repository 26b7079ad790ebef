/*
 * sink_redis — blocking calls over lockcore's asynchronous client (see sink_redis.h). The
 * callbacks copy the borrowed reply: lockcore frees it when the callback returns.
 */
#include "sink_redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <lockcore/lockcore_async.h>

struct sink_redis {
    struct event_base *base;
    lc_async_client *client;
};

/* A deep copy of r that freeReplyObject frees (hiredis 0.14 frees str, element[] and each
 * element of an array by type). NULL when r is NULL or memory ran out. */
static redisReply *reply_dup(const redisReply *r)
{
    if (r == NULL)
        return NULL;
    redisReply *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->type = r->type;
    c->integer = r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
        r->type == REDIS_REPLY_ERROR) {
        c->str = malloc(r->len + 1);
        if (c->str == NULL) {
            free(c);
            return NULL;
        }
        memcpy(c->str, r->str, r->len);
        c->str[r->len] = '\0';
        c->len = r->len;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        c->element = calloc(r->elements, sizeof *c->element);
        if (c->element == NULL) {
            free(c);
            return NULL;
        }
        c->elements = r->elements;
        for (size_t i = 0; i < r->elements; i++) {
            c->element[i] = reply_dup(r->element[i]);
            if (c->element[i] == NULL && r->element[i] != NULL) {
                freeReplyObject(c);
                return NULL;
            }
        }
    }
    return c;
}

struct wait_state {
    int remaining;
};

struct cmd_slot {
    struct sink_cmd *cmd;
    struct wait_state *ws;
};

static void on_reply(lc_status st, const redisReply *reply, const char *errstr, void *arg)
{
    struct cmd_slot *slot = arg;
    struct sink_cmd *c = slot->cmd;
    c->st = st;
    c->reply = reply_dup(reply);
    if (reply != NULL && c->reply == NULL && st == LC_OK) {
        c->st = LC_ENOMEM;
        snprintf(c->err, sizeof c->err, "out of memory copying a reply");
    } else if (st != LC_OK) {
        snprintf(c->err, sizeof c->err, "%s: %s", lc_status_name(st),
                 errstr && *errstr ? errstr : "(no message)");
    } else {
        c->err[0] = '\0';
    }
    slot->ws->remaining--;
}

int sink_redis_new(const char *url, int timeout_ms, sink_redis **out, char *err, size_t errlen)
{
    *out = NULL;
    sink_redis *r = calloc(1, sizeof *r);
    if (r == NULL || (r->base = event_base_new()) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(r);
        return -1;
    }
    lc_client_opts o;
    lc_client_opts_init(&o);
    o.command_timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    lc_status st = lc_async_client_new(r->base, url, &o, &r->client);
    if (st != LC_OK) {
        snprintf(err, errlen, "%s: %s", lc_status_name(st), lc_errmsg());
        event_base_free(r->base);
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void sink_redis_free(sink_redis *r)
{
    if (r == NULL)
        return;
    lc_async_client_free(r->client);
    /* Let the client finish its teardown on the loop before the loop goes. */
    event_base_loop(r->base, EVLOOP_NONBLOCK);
    event_base_free(r->base);
    free(r);
}

int sink_redis_run(sink_redis *r, int n, struct sink_cmd *cmds)
{
    if (n <= 0)
        return 0;
    struct cmd_slot *slots = calloc((size_t)n, sizeof *slots);
    struct wait_state ws = {0};
    if (slots == NULL) {
        for (int i = 0; i < n; i++) {
            cmds[i].st = LC_ENOMEM;
            cmds[i].reply = NULL;
            snprintf(cmds[i].err, sizeof cmds[i].err, "out of memory");
        }
        return n;
    }
    for (int i = 0; i < n; i++) {
        struct sink_cmd *c = &cmds[i];
        c->reply = NULL;
        c->err[0] = '\0';
        slots[i].cmd = c;
        slots[i].ws = &ws;
        lc_status st = lc_async_command_key(r->client, c->key, strlen(c->key), c->argc, c->argv,
                                            c->lens, on_reply, &slots[i]);
        if (st == LC_OK) {
            ws.remaining++;
        } else {
            c->st = st;
            snprintf(c->err, sizeof c->err, "%s: %s", lc_status_name(st), lc_errmsg());
        }
    }
    /* Every command started has a deadline timer in lockcore, so its callback comes. */
    while (ws.remaining > 0) {
        if (event_base_loop(r->base, EVLOOP_ONCE) < 0)
            break;
    }
    free(slots);
    int failed = 0;
    for (int i = 0; i < n; i++)
        if (cmds[i].st != LC_OK)
            failed++;
    return failed;
}

redisReply *sink_redis_cmd(sink_redis *r, const char *key, int argc, const char **argv, char *err,
                           size_t errlen)
{
    struct sink_cmd c = {.key = key, .argc = argc, .argv = argv};
    sink_redis_run(r, 1, &c);
    if (c.reply == NULL && err != NULL)
        snprintf(err, errlen, "%s", c.err[0] ? c.err : "no reply");
    return c.reply;
}

int sink_cmd_error_is(const struct sink_cmd *c, const char *code)
{
    if (c->st != LC_EREDIS)
        return 0;
    if (c->reply != NULL && c->reply->type == REDIS_REPLY_ERROR)
        return strncmp(c->reply->str, code, strlen(code)) == 0;
    return strstr(c->err, code) != NULL; /* lockcore's message: "LC_EREDIS: redis: <error>" */
}

void sink_cmds_clear(int n, struct sink_cmd *cmds)
{
    for (int i = 0; i < n; i++) {
        freeReplyObject(cmds[i].reply);
        cmds[i].reply = NULL;
    }
}
