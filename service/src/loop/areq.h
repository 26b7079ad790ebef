/*
 * areq — a request answered later, on its worker's event loop (worker.h runs the loops).
 *
 * A handler that has to wait on Redis (handlers.h, the *_async ones; a router row's start)
 * gets a struct areq instead of returning a response: it starts its work on the loop's
 * asynchronous lockcore client (areq->lc) and calls areq_done exactly once, on the loop's
 * thread, once areq->res holds the answer. Meanwhile the HTTP
 * connection is suspended (libmicrohttpd's MHD_suspend_connection) and the loop serves others.
 *
 * Ownership: the HTTP edge (http.c) makes the areq with areq_new (its request strings are
 * copies that live as long as the areq) and hands it to the handler; from then until areq_done
 * the handler owns it and must not free it. areq_done gives it back through the one callback
 * the edge gave areq_new: the edge answers with areq->res and frees it. When the request's
 * deadline passes first (or the process shuts down), the edge answers 503 by itself and
 * abandons the areq (areq_abandon); the handler still calls areq_done later (its response is
 * then dropped and the areq freed), so a late Redis reply stays harmless.
 *
 * This file knows neither libmicrohttpd nor the loop's thread: what a loop lends its requests
 * is a struct areq_env, which worker.c fills.
 */
#ifndef INVENTORY_AREQ_H
#define INVENTORY_AREQ_H

#include <stdbool.h>

#include <lockcore/lockcore_async.h>
#include <lockcore/lockcore_mysql.h>
#include <lockcore/lockcore_zk.h>

#include "app.h"
#include "request.h"

struct event_base;
struct seggate;
struct seglock;
struct areq;

/* What a loop lends the requests it runs (worker.c fills it; read through the functions
 * below). Touched only by the loop's thread once it runs. */
struct areq_env {
    struct event_base *base;                           /* the loop's event_base */
    lc_async_client *lc;                               /* the loop's Redis client */
    lc_async_client *locknodes[CONFIG_LOCK_NODES_MAX]; /* --lock-redis: the Redlock nodes */
    int nlocknodes;
    lc_mysql_client *lockmysql;    /* --lock-mysql: the loop's MySQL lock client, or NULL */
    lc_zk_client *zk;              /* --lock-zookeeper: the loop's ZooKeeper session, or NULL */
    struct seglock *live_seglocks; /* the orders' live Redlock seglocks (seglock_close_all) */
    struct seggate *gates;         /* the loop's per-segment gates (orders) */
    int id, nloops;                /* the loop's index, 0..nloops - 1 */
    struct areq *live;             /* every live areq (handlers' work in progress) */
};

struct areq {
    struct app *app;
    struct areq_env *env;      /* the loop this request runs on */
    struct event_base *base;   /* that loop's event_base */
    lc_async_client *lc;       /* that loop's Redis client (data + subscriber connection) */
    struct request req;        /* strings owned by the areq */
    struct response res;       /* filled by the handler before areq_done */
    void *http;                /* the edge's: the suspended request, NULL once abandoned */
    void (*ready)(void *http); /* the edge's: called by areq_done while not abandoned */
    /* Set by the handler: called on the loop when it is ending (shutdown, after every request
     * was answered) so that work waiting on a timer ends; work waiting on lockcore ends with
     * LC_ESTATE when the loop's client is freed next. May call areq_done. */
    void (*cancel)(struct areq *ar);
    void *handler;              /* the handler's state, for cancel */
    struct areq *lprev, *lnext; /* in env->live */
};

/* An areq on env's loop holding copies of req's strings (one allocation), in env->live; its
 * areq_done calls ready(http). NULL when out of memory. */
struct areq *areq_new(struct areq_env *env, struct app *app, const struct request *req,
                      void (*ready)(void *http), void *http);

/* Takes ar off its loop's list and frees it with its response. NULL-safe. */
void areq_free(struct areq *ar);

/* The edge answered without the handler (deadline, shutdown): ready is not called any more,
 * and the handler's areq_done frees ar. */
void areq_abandon(struct areq *ar);

/* The loop is ending: calls the cancel of every live areq of env (see cancel above). */
void areq_cancel_all(struct areq_env *env);

/* Hands the areq back (on its loop's thread): the response is sent, or dropped when the
 * request was abandoned. */
void areq_done(struct areq *ar);

/* True when the edge has answered without this handler (deadline or shutdown): whatever the
 * handler does next is not seen by the client; it should finish soon (areq_done). */
bool areq_abandoned(const struct areq *ar);

/* The per-segment gates of the request's loop (seggate.h). */
struct seggate *areq_gates(const struct areq *ar);

/* The Redlock node clients of the request's loop (--lock-redis): how many (0 = none), and
 * *nodes the array (borrowed, the loop's). */
int areq_lock_nodes(const struct areq *ar, lc_async_client *const **nodes);

/* The MySQL lock client of the request's loop (--lock-mysql), or NULL (borrowed, the loop's). */
lc_mysql_client *areq_lock_mysql(const struct areq *ar);
/* The loop's ZooKeeper client (--lock-zookeeper), or NULL. */
lc_zk_client *areq_lock_zk(const struct areq *ar);

/* The loop's list of live Redlock seglocks (seglock.h), closed before its node clients go. */
struct seglock **areq_live_seglocks(const struct areq *ar);

/* The request's loop: its index, 0..*nloops - 1. */
int areq_loop(const struct areq *ar, int *nloops);

/* Brackets a callback of the request's work on its loop: every log line written in between
 * carries the request's id (copied: the areq may be freed inside). Nestable (log_ctx_begin). */
void areq_log_begin(const struct areq *ar);
void areq_log_end(void);

/* Tells log how to read a request's id from a struct areq (log_ctx_reader), so the callbacks
 * lower layers bracket for a request (store.c) carry it: once, before the loops start. */
void areq_log_reader(void);

#endif
