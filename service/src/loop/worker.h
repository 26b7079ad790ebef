/*
 * worker — one event loop: a thread running a libevent event_base, the loop's asynchronous
 * lockcore clients and per-segment gates (lent to its requests: areq.h's struct areq_env), and
 * a queue of functions posted to it from other threads.
 *
 * The loop serves whatever front end is hooked to it (http.c: a libmicrohttpd daemon on the
 * loop's base). It knows the front only by the hooks in struct worker_front, set once before
 * the loop starts (as hiredis's adapters set ev.addRead, ev.cleanup and ev.data), and calls
 * them at the steps of its end: worker_quiesce, worker_cut, worker_end.
 */
#ifndef INVENTORY_WORKER_H
#define INVENTORY_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <lockcore/lockcore_async.h>

#include "areq.h"
#include "config.h"

struct event;
struct worker_post;

/* What the loop asks of its front end, each on the loop's thread with data. */
struct worker_front {
    void *data;
    void (*quiesce)(void *data); /* stop accepting connections */
    void (*cut)(void *data);     /* answer every request still waiting (503) */
    void (*flush)(void *data);   /* send the answers that are ready */
    void (*close)(void *data);   /* the end: close every connection */
};

/* What a layer above keeps on each loop (the order path's gates and live locks: order_loop.c),
 * each part may be NULL: init with the loop (0, or -1 when out of memory); close on the loop at
 * its end, after its Redis client went and before its lock clients go (no Redlock may outlive
 * its node clients); free once nothing runs on the loop (worker_free too). */
struct worker_hooks {
    int (*init)(struct areq_env *env);
    void (*close)(struct areq_env *env);
    void (*free)(struct areq_env *env);
};

/* One event loop. Everything but the post queue (mu) is touched only by the loop's thread once
 * it runs. */
struct worker {
    struct areq_env env; /* the loop's base, Redis clients and gates, lent to its requests */
    struct worker_front front;
    const struct worker_hooks *hooks; /* worker_init's (may be NULL) */
    void (*on_end)(void *arg); /* set before worker_start (may be NULL): the loop's first step
                                  at its end, before its Redis clients go */
    void *on_end_arg;
    pthread_t thread;
    bool started;
    bool stopping;      /* worker_cut ran: no new request may start */
    struct event *mail; /* mailfd readable: posts from other threads */
    int mailfd;         /* eventfd */
    pthread_mutex_t mu;
    struct worker_post *posts, *posts_tail;
};

/* Makes loop id of nloops (not yet running): its event base, Redis clients (cfg's redis_url and
 * lock_redis with lo's timeouts) and what hooks (may be NULL) keep on it. 0, or -1 with err set;
 * worker_free undoes what was made either way. */
int worker_init(struct worker *w, int id, int nloops, const struct config *cfg,
                const lc_client_opts *lo, const struct worker_hooks *hooks, char *err,
                size_t errlen);

/* Runs the loop on a thread of its own. 0, or -1 when the thread could not start. */
int worker_start(struct worker *w);

/* The loop of the calling thread (NULL on other threads). */
struct worker *worker_current(void);

/* Runs fn(arg) on w's loop thread soon. Any thread. */
void worker_post(struct worker *w, void (*fn)(void *), void *arg);

/* The steps of the end, each posted to the loop (any thread), in this order:
 * worker_quiesce: front.quiesce;
 * worker_cut:     stopping, then front.cut and front.flush;
 * worker_end:     front.flush, cancel the live areqs, free the Redis clients (the operations
 *                 they cut short end their handlers), front.flush, hooks' free, front.close,
 *                 and the loop returns. */
void worker_quiesce(struct worker *w);
void worker_cut(struct worker *w);
void worker_end(struct worker *w);

/* Waits for the loop's thread to return (after worker_end). No-op when it never started. */
void worker_join(struct worker *w);

/* Frees what worker_init made (the front's part must be freed first). */
void worker_free(struct worker *w);

#endif
