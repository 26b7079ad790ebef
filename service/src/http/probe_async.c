/*
 * GET /readyz on a worker loop: one PING on the loop's Redis client (probe.c's
 * probe_readyz_answer answers).
 */
#include <stdatomic.h>

#include "areq.h"
#include "handlers.h"
#include "store.h"

/* The PING's reply (or its failure to start): the answer, in the request's log context. */
static void on_ping(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct areq *ar = arg;
    if (st == LC_OK && !(r && r->type == REDIS_REPLY_STATUS)) {
        st = LC_EREDIS;
        errstr = "PING: unexpected reply";
    }
    probe_readyz_answer(st, st == LC_OK ? NULL : errstr, &ar->res);
    areq_done(ar);
}

void probe_readyz_async(struct areq *ar)
{
    if (atomic_load(&ar->app->draining)) {
        probe_readyz_answer(LC_ESTATE, NULL, &ar->res);
        areq_done(ar);
        return;
    }
    const char *argv[1] = {"PING"};
    store_command_async(ar->lc, ar, 1, argv, on_ping, ar);
}
