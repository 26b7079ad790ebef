/*
 * redlock-bench: what one Redlock acquire costs next to one single-Redis lock, in one run on the
 * same machine. One thread, no contention, watchdog off (the fast path of each):
 *
 *   lock-1           lc_lock_try + lc_lock_release on one Redis (the baseline)
 *   redlock-1        lc_redlock_try + release with one node (Redlock's machinery alone: the hop
 *                    to the loop thread, the round, the quorum)
 *   redlock-5        lc_redlock_try + release on five nodes (the real thing)
 *   redlock-5-async  lc_async_redlock_acquire + release on five nodes, on a loop in this thread
 *                    (no thread hop)
 *   redlock-5-raise  redlock-5 where one node's counter was moved ahead before each acquire, so
 *                    the token must be written back: the two-round acquire
 *
 * Each op is timed on CLOCK_MONOTONIC: the acquire alone, and the acquire + release pair;
 * p50/p99/mean over all rounds. Scenarios run round-robin in rounds so that load from other
 * processes hits all alike. The bench starts its own five redis-servers (tests/support) and
 * stops them at exit; an alarm aborts a run that hangs.
 *
 * Usage: redlock-bench [--ops N (per round, 2000)] [--rounds R (5)]
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lockcore/lockcore.h"
#include "lockcore/lockcore_async.h"
#include "redis_fixture.h"

#define NODES 5

enum scen { S_LOCK1, S_RL1, S_RL5, S_RL5_ASYNC, S_RL5_RAISE, S_COUNT };
static const char *const NAMES[S_COUNT] = {"lock-1", "redlock-1", "redlock-5", "redlock-5-async",
                                           "redlock-5-raise"};

typedef struct samples {
    int64_t *acq, *pair;
    size_t n, cap;
} samples;

static rf_server *srv[NODES];
static const char *urls[NODES];

static void die(const char *what, lc_status st)
{
    fprintf(stderr, "redlock-bench: %s: %s: %s\n", what, lc_status_name(st), lc_errmsg());
    exit(1);
}

static void add(samples *s, int64_t acq, int64_t pair)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        s->acq = realloc(s->acq, s->cap * sizeof(*s->acq));
        s->pair = realloc(s->pair, s->cap * sizeof(*s->pair));
        if (!s->acq || !s->pair)
            exit(1);
    }
    s->acq[s->n] = acq;
    s->pair[s->n++] = pair;
}

/* ---- the async scenario: one acquire + release on the loop, driven to completion ---- */

static int async_calls;
static lc_status async_st;

static void on_async(lc_async_redlock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    (void)fence;
    (void)arg;
    async_calls++;
    async_st = st;
}

static void async_wait(struct event_base *base)
{
    while (!async_calls)
        event_base_loop(base, EVLOOP_ONCE);
}

static void run_async(struct event_base *base, lc_async_redlock *l, int ops, samples *s)
{
    for (int i = 0; i < ops; i++) {
        int64_t t0 = tu_now_us();
        async_calls = 0;
        if (lc_async_redlock_acquire(l, 0, on_async, NULL) != LC_OK)
            die("async acquire", LC_ESTATE);
        async_wait(base);
        if (async_st != LC_OK)
            die("async acquire", async_st);
        int64_t t1 = tu_now_us();
        async_calls = 0;
        if (lc_async_redlock_release(l, on_async, NULL) != LC_OK)
            die("async release", LC_ESTATE);
        async_wait(base);
        if (async_st != LC_OK)
            die("async release", async_st);
        add(s, t1 - t0, tu_now_us() - t0);
    }
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, samples *s)
{
    double mean_a = 0, mean_p = 0;
    for (size_t i = 0; i < s->n; i++) {
        mean_a += (double)s->acq[i];
        mean_p += (double)s->pair[i];
    }
    mean_a /= (double)s->n;
    mean_p /= (double)s->n;
    qsort(s->acq, s->n, sizeof(*s->acq), cmp64);
    qsort(s->pair, s->n, sizeof(*s->pair), cmp64);
    printf("| %-16s | %8zu | %7.0f | %7" PRId64 " | %7" PRId64 " | %7.0f | %7" PRId64 " |\n", name,
           s->n, mean_a, s->acq[s->n / 2], s->acq[s->n * 99 / 100], mean_p,
           s->pair[s->n * 99 / 100]);
}

int main(int argc, char **argv)
{
    int ops = 2000, rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: redlock-bench [--ops N] [--rounds R]\n");
            return 2;
        }
    }
    alarm(600);
    for (int i = 0; i < NODES; i++) {
        if (!(srv[i] = rf_start(NULL)))
            return 1;
        urls[i] = rf_url(srv[i]);
    }
    lc_status st;
    lc_client *single = NULL;
    lc_redlock_client *rc1 = NULL, *rc5 = NULL;
    if ((st = lc_client_new(urls[0], NULL, &single)) != LC_OK)
        die("client", st);
    if ((st = lc_redlock_client_new(1, urls, NULL, &rc1)) != LC_OK ||
        (st = lc_redlock_client_new(NODES, urls, NULL, &rc5)) != LC_OK)
        die("redlock client", st);
    struct event_base *base = event_base_new();
    lc_async_client *ac[NODES];
    for (int i = 0; i < NODES; i++)
        if ((st = lc_async_client_new(base, urls[i], NULL, &ac[i])) != LC_OK)
            die("async client", st);

    lc_lock_opts lo;
    lc_lock_opts_init(&lo);
    lo.watchdog = 0;
    lc_redlock_opts ro;
    lc_redlock_opts_init(&ro);
    ro.watchdog = 0;
    ro.node_timeout_ms = 1000;
    lc_lock *lock = NULL;
    lc_redlock *rl1 = NULL, *rl5 = NULL, *rlraise = NULL;
    lc_async_redlock *arl = NULL;
    if ((st = lc_lock_new(single, "bench:lock", &lo, &lock)) != LC_OK ||
        (st = lc_redlock_new(rc1, "bench:rl1", &ro, NULL, NULL, &rl1)) != LC_OK ||
        (st = lc_redlock_new(rc5, "bench:rl5", &ro, NULL, NULL, &rl5)) != LC_OK ||
        (st = lc_redlock_new(rc5, "bench:raise", &ro, NULL, NULL, &rlraise)) != LC_OK ||
        (st = lc_async_redlock_new(NODES, ac, "bench:async", &ro, NULL, NULL, &arl)) != LC_OK)
        die("lock", st);

    samples s[S_COUNT];
    memset(s, 0, sizeof(s));
    for (int r = 0; r < rounds + 1; r++) { /* round 0 warms up, not counted */
        for (int sc = 0; sc < S_COUNT; sc++) {
            samples scratch = {0};
            samples *out = r == 0 ? &scratch : &s[sc];
            int n = r == 0 ? ops / 10 + 1 : ops;
            if (sc == S_RL5_ASYNC) {
                run_async(base, arl, n, out);
                free(scratch.acq);
                free(scratch.pair);
                continue;
            }
            for (int i = 0; i < n; i++) {
                if (sc == S_RL5_RAISE) /* node 0 ahead: the token must be written back */
                    freeReplyObject(rf_command(srv[0], "INCRBY bench:raise:fence 5"));
                int64_t t0 = tu_now_us();
                if (sc == S_LOCK1)
                    st = lc_lock_try(lock, NULL);
                else
                    st = lc_redlock_try(sc == S_RL1 ? rl1 : sc == S_RL5 ? rl5 : rlraise, NULL);
                if (st != LC_OK)
                    die(NAMES[sc], st);
                int64_t t1 = tu_now_us();
                if (sc == S_LOCK1)
                    st = lc_lock_release(lock);
                else
                    st = lc_redlock_release(sc == S_RL1 ? rl1 : sc == S_RL5 ? rl5 : rlraise);
                if (st != LC_OK)
                    die(NAMES[sc], st);
                add(out, t1 - t0, tu_now_us() - t0);
            }
            free(scratch.acq);
            free(scratch.pair);
        }
    }
    printf("redlock-bench: %d rounds x %d ops, one thread, watchdog off, %d redis-servers on "
           "this machine; times in microseconds\n\n",
           rounds, ops, NODES);
    printf("| scenario         |      ops | acquire mean | p50 | p99 | acquire+release mean | "
           "p99 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (int sc = 0; sc < S_COUNT; sc++) {
        report(NAMES[sc], &s[sc]);
        free(s[sc].acq);
        free(s[sc].pair);
    }

    lc_async_redlock_free(arl);
    for (int i = 0; i < NODES; i++)
        lc_async_client_free(ac[i]);
    event_base_free(base);
    lc_redlock_free(rl1);
    lc_redlock_free(rl5);
    lc_redlock_free(rlraise);
    lc_lock_free(lock);
    lc_redlock_client_free(rc1);
    lc_redlock_client_free(rc5);
    lc_client_free(single);
    for (int i = 0; i < NODES; i++)
        rf_stop(srv[i]);
    return 0;
}
