/*
 * areq — a request answered later, on its worker's event loop (http.c owns the loops).
 *
 * A handler that has to wait on Redis (handlers.h, the *_async ones; a router row's start)
 * gets a struct areq instead of returning a response: it starts its work on the loop's
 * asynchronous lockcore client (areq->lc) and calls areq_done exactly once, on the loop's
 * thread, once areq->res holds the answer. Meanwhile the HTTP
 * connection is suspended (libmicrohttpd's MHD_suspend_connection) and the loop serves others.
 *
 * Ownership: http.c allocates the areq (its request strings are copies that live as long as
 * the areq) and hands it to the handler; from then until areq_done the handler owns it and
 * must not free it. areq_done gives it back: http.c answers with areq->res and frees it. When
 * the request's deadline passes first (or the process shuts down), http.c answers 503 by
 * itself and marks the areq abandoned (areq_abandoned); the handler still calls areq_done
 * later (its response is then dropped and the areq freed), so a late Redis reply stays
 * harmless.
 */
#ifndef INVENTORY_AREQ_H
#define INVENTORY_AREQ_H

#include <stdbool.h>

#include <lockcore/lockcore_async.h>

#include "app.h"
#include "request.h"
#include "router.h"

struct worker;
struct event_base;

struct areq {
    struct app *app;
    struct worker *worker;   /* the loop this request runs on */
    struct event_base *base; /* that loop's event_base */
    lc_async_client *lc;     /* that loop's Redis client (data + subscriber connection) */
    struct request req;      /* strings owned by the areq */
    struct response res;     /* filled by the handler before areq_done */
    void *http;              /* http.c's: the suspended request, NULL once abandoned */
    /* Set by the handler: called on the loop when it is ending (shutdown, after every request
     * was answered) so that work waiting on a timer ends; work waiting on lockcore ends with
     * LC_ESTATE when the loop's client is freed next. May call areq_done. */
    void (*cancel)(struct areq *ar);
    void *handler;           /* the handler's state, for cancel */
    struct areq *lprev, *lnext; /* http.c's: the loop's live areqs */
};

/* Hands the areq back (on its loop's thread): the response is sent, or dropped when the
 * request was abandoned. */
void areq_done(struct areq *ar);

/* True when http.c has answered without this handler (deadline or shutdown): whatever the
 * handler does next is not seen by the client; it should finish soon (areq_done). */
bool areq_abandoned(const struct areq *ar);

/* The per-segment gates of the request's loop (seggate.h). */
struct seggate *areq_gates(const struct areq *ar);

/* The Redlock node clients of the request's loop (--lock-redis): how many (0 = none), and
 * *nodes the array (borrowed, the loop's). */
int areq_lock_nodes(const struct areq *ar, lc_async_client *const **nodes);

/* The loop's list of live Redlock seglocks (seglock.h), closed before its node clients go. */
struct seglock;
struct seglock **areq_live_seglocks(const struct areq *ar);

/* The request's loop: its index, 0..*nloops - 1. */
int areq_loop(const struct areq *ar, int *nloops);

/* Brackets a callback of the request's work on its loop: every log line written in between
 * carries the request's id (copied: the areq may be freed inside). Nestable. */
void areq_log_begin(const struct areq *ar);
void areq_log_end(void);

#endif
