/*
 * sink_redis — blocking Redis calls for inventory-sink, on lockcore's asynchronous client, so
 * that one Redis and a Redis Cluster are the same to the sink: every command goes to the master
 * of its key's slot (MOVED/ASK followed and the slot map refreshed inside lockcore) and carries
 * its own deadline (the command timeout). The sink is one thread: it hands a set of commands to
 * sink_redis_run, which sends them all at once (pipelined per node) and runs the client's loop
 * until every one has its answer or has timed out.
 */
#ifndef INVENTORY_SINK_REDIS_H
#define INVENTORY_SINK_REDIS_H

#include <stddef.h>

#include <lockcore/lockcore.h>

typedef struct sink_redis sink_redis;

/* One command: argv (argc strings, lens may be NULL for NUL-terminated) is borrowed until
 * sink_redis_run returns; key routes it (the key the command names). After the run: st
 * (LC_OK; LC_EREDIS with reply the error; LC_EIO / LC_EDOWN: no answer), reply (new, the
 * caller frees it with freeReplyObject, may be NULL) and err (the failure's message). */
struct sink_cmd {
    const char *key;
    int argc;
    const char **argv;
    const size_t *lens;
    lc_status st;
    redisReply *reply;
    char err[160];
};

/* Makes a client for url (redis://, unix:// or redis-cluster://) with timeout_ms as every
 * command's deadline. 0 with *out to free with sink_redis_free, else -1 and err. A Redis that
 * is down is no error here: commands report it. */
int sink_redis_new(const char *url, int timeout_ms, sink_redis **out, char *err, size_t errlen);

/* NULL-safe. */
void sink_redis_free(sink_redis *r);

/* Sends cmds[0..n) at once and waits for all of them. Returns the number that failed (st not
 * LC_OK, an error reply included). */
int sink_redis_run(sink_redis *r, int n, struct sink_cmd *cmds);

/* One command given as NUL-terminated strings (argv[0..argc)), routed by key. Returns the new
 * reply (an error reply included: check its type), or NULL when no answer came (err set). */
redisReply *sink_redis_cmd(sink_redis *r, const char *key, int argc, const char **argv, char *err,
                           size_t errlen);

/* 1 when c ended with Redis's error reply starting with code ("BUSYGROUP", "NOGROUP"). */
int sink_cmd_error_is(const struct sink_cmd *c, const char *code);

/* Frees every cmds[i].reply and sets it NULL. */
void sink_cmds_clear(int n, struct sink_cmd *cmds);

#endif
