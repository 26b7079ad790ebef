/*
 * order_loop — what the order path keeps on each event loop (worker.h's struct worker_hooks):
 * the per-segment gates its orders queue at (seggate.h) and the list of live Redlock seglocks,
 * closed at the loop's end before the lock clients they use go (seglock.h). The server passes
 * order_loop_hooks to every loop it makes, so the loop layer never knows the order path.
 */
#include "order_loop.h"

#include "seggate.h"
#include "seglock.h"

static int loop_init(struct areq_env *env)
{
    env->gates = seggate_new();
    return env->gates ? 0 : -1;
}

static void loop_close(struct areq_env *env)
{
    seglock_close_all(&env->live_seglocks);
}

static void loop_free(struct areq_env *env)
{
    seggate_free(env->gates);
    env->gates = NULL;
}

const struct worker_hooks order_loop_hooks = {loop_init, loop_close, loop_free};
