/*
 * lockcore-bench: how fast lockcore's locks are, measured against the raw round-trip rate of the
 * same client code (lc_client_ping) on the same Redis, in one run:
 *
 *   ping-1t / ping-8t    PING round trips through the client pool, 1 and 8 threads
 *   uncontended-1t       lc_lock_try + lc_lock_release on one handle, 1 thread
 *   uncontended-1t-nowd  the same with the watchdog off (its cost on the fast path)
 *   own-key-8t           try + release on 8 threads, each on its own key (no contention)
 *   contended-1key-8t    8 threads (own handles) on 1 key: lc_lock_acquire with a wait + release
 *   16keys-8t            8 threads on 16 keys, each pair on a random one of the 16
 *
 * Each op is one PING or one acquire+release pair; its latency is taken on CLOCK_MONOTONIC into
 * a per-thread sample array, merged and sorted for p50/p99/max. On a shared machine the load
 * from other processes comes and goes, so every scenario's measured time is cut into rounds
 * run round-robin over the scenarios: a noisy second then hits all of them alike. Redis-side
 * counts (commands, their CPU time, the busy acquire attempts that are the lock waits) come
 * from INFO commandstats deltas. Without --redis the bench starts its own redis-server
 * (tests/support/redis_fixture) and stops it at exit; an alarm aborts a run that hangs, and the
 * fixture's abort hook then kills the server.
 *
 * --pipeline runs everything with lc_client_opts.pipeline = 1 (one multiplexed, auto-pipelined
 * connection shared by all threads) instead of the default pool of connections.
 *
 * Usage: lockcore-bench [--redis URL] [--seconds N] [--rounds R] [--pipeline] [--json FILE]
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "lockcore/lockcore.h"
#include "redis_fixture.h"

#define MAX_THREADS 8
#define MAX_KEYS 16
#define WARMUP_MS 200  /* per round, not measured: connections, subscriptions, caches */
#define WAIT_MS 2000   /* lc_lock_acquire wait in the contended scenarios */
#define LEASE_MS 30000 /* the library default */

enum kind { K_PING, K_TRY, K_ACQUIRE };

typedef struct scenario {
    const char *name;
    enum kind kind;
    int threads;
    int keys;         /* lock names in play (K_TRY: one per thread) */
    int watchdog;     /* lock option: renew leases in the background (the default, 1) */
    const char *what; /* one-line description */
} scenario;

static const scenario SCENARIOS[] = {
    {"ping-1t", K_PING, 1, 0, 0, "lc_client_ping, 1 thread"},
    {"ping-8t", K_PING, 8, 0, 0, "lc_client_ping, 8 threads"},
    {"uncontended-1t", K_TRY, 1, 1, 1, "lc_lock_try + release, 1 thread, 1 key"},
    {"uncontended-1t-nowd", K_TRY, 1, 1, 0, "the same with the watchdog off"},
    {"own-key-8t", K_TRY, 8, 8, 1, "lc_lock_try + release, 8 threads, a key each"},
    {"contended-1key-8t", K_ACQUIRE, 8, 1, 1, "lc_lock_acquire(wait) + release, 8 threads, 1 key"},
    {"16keys-8t", K_ACQUIRE, 8, 16, 1, "lc_lock_acquire(wait) + release, 8 threads, 16 keys"},
};
#define NSCENARIOS ((int)(sizeof(SCENARIOS) / sizeof(SCENARIOS[0])))

/* Redis commandstats counters (absolute, or a delta). */
typedef struct cmdstats {
    int ok; /* INFO commandstats was readable */
    long long evalsha, eval, failed, publish, subscribe, unsubscribe, ping, info, total;
    long long usec; /* Redis CPU time spent executing commands, all of them */
} cmdstats;

/* One scenario's results, accumulated over its rounds. */
typedef struct result {
    const scenario *sc;
    double seconds;
    long long ops, errors, busy, timeouts;
    long long thread_ops[MAX_THREADS];
    double round_min, round_max; /* ops/s of the slowest and fastest round */
    int rounds;
    int64_t *samples; /* latency of every measured op, ns */
    size_t n, cap;
    double p50_us, p99_us, max_us;
    cmdstats cs;
    long long script_busy; /* acquire attempts answered "held by another owner" (from Redis) */
    char first_error[160];
} result;

/* ---- per-thread work ------------------------------------------------------------------ */

enum { PH_WARMUP, PH_MEASURE, PH_STOP };

typedef struct run {
    const scenario *sc;
    lc_client *client;
    char names[MAX_KEYS][96];
    atomic_int phase;
    pthread_barrier_t ready;
} run;

typedef struct worker {
    run *r;
    lc_lock *locks[MAX_KEYS]; /* this thread's own handles */
    int64_t *samples;         /* latency of each measured op, ns */
    size_t n, cap;
    long long errors, busy, timeouts;
    char first_error[160];
    uint64_t rng;
    pthread_t tid;
} worker;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static uint32_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

static void note_error(worker *w, const char *what, lc_status st)
{
    w->errors++;
    if (!w->first_error[0])
        snprintf(w->first_error, sizeof(w->first_error), "%s: %s (%s)", what, lc_status_name(st),
                 lc_errmsg());
}

/* Appends v to a growable sample array. 0, or -1 when out of memory. */
static int push_sample(int64_t **v, size_t *n, size_t *cap, int64_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 65536;
        int64_t *p = realloc(*v, c * sizeof(*p));
        if (!p)
            return -1;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* One op of the scenario. Returns 1 when it completed (counts as an op), 0 when it did not. */
static int one_op(worker *w)
{
    const scenario *sc = w->r->sc;
    lc_status st;
    switch (sc->kind) {
    case K_PING:
        st = lc_client_ping(w->r->client);
        if (st != LC_OK) {
            note_error(w, "ping", st);
            return 0;
        }
        return 1;
    case K_TRY: {
        lc_lock *l = w->locks[0];
        st = lc_lock_try(l, NULL);
        if (st == LC_EBUSY) {
            w->busy++;
            return 0;
        }
        if (st != LC_OK) {
            note_error(w, "try", st);
            return 0;
        }
        st = lc_lock_release(l);
        if (st != LC_OK) {
            note_error(w, "release", st);
            return 0;
        }
        return 1;
    }
    case K_ACQUIRE: {
        int k = sc->keys > 1 ? (int)(rng_next(&w->rng) % (uint32_t)sc->keys) : 0;
        lc_lock *l = w->locks[k];
        st = lc_lock_acquire(l, WAIT_MS, NULL);
        if (st == LC_ETIMEOUT) {
            w->timeouts++;
            return 0;
        }
        if (st != LC_OK) {
            note_error(w, "acquire", st);
            return 0;
        }
        st = lc_lock_release(l);
        if (st != LC_OK) {
            note_error(w, "release", st);
            return 0;
        }
        return 1;
    }
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    run *r = w->r;
    pthread_barrier_wait(&r->ready);
    for (;;) {
        int ph = atomic_load(&r->phase);
        if (ph == PH_STOP)
            break;
        int64_t t0 = now_ns();
        int done = one_op(w);
        int64_t t1 = now_ns();
        if (!done && w->errors)
            sleep_ms(1); /* do not spin on a broken connection */
        if (done && ph == PH_MEASURE && push_sample(&w->samples, &w->n, &w->cap, t1 - t0)) {
            note_error(w, "samples", LC_ENOMEM);
            break;
        }
    }
    return NULL;
}

/* ---- Redis-side counters ---------------------------------------------------------------- */

/* Reads "field=NUMBER" from a commandstats line (0 when absent). */
static long long stat_field(const char *line, const char *field)
{
    const char *p = strstr(line, field);
    return p ? strtoll(p + strlen(field), NULL, 10) : 0;
}

/* Takes a snapshot of INFO commandstats into cs. */
static void read_cmdstats(lc_client *client, cmdstats *cs)
{
    memset(cs, 0, sizeof(*cs));
    const char *argv[2] = {"INFO", "commandstats"};
    redisReply *r = NULL;
    if (lc_client_command(client, 2, argv, NULL, &r) != LC_OK || !r ||
        r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return;
    }
    cs->ok = 1;
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (strncmp(line, "cmdstat_", 8) != 0)
            continue;
        const char *cmd = line + 8;
        size_t len = strcspn(cmd, ":");
        long long calls = stat_field(line, ":calls=");
        /* Redis 7 counts errors raised while executing (NOSCRIPT included) in failed_calls. */
        long long failed = stat_field(line, "failed_calls=");
        cs->total += calls;
        cs->usec += stat_field(line, ",usec=");
#define IS(s) (len == sizeof(s) - 1 && strncmp(cmd, s, len) == 0)
        if (IS("evalsha")) {
            cs->evalsha = calls;
            cs->failed += failed;
        } else if (IS("eval")) {
            cs->eval = calls;
            cs->failed += failed;
        } else if (IS("publish")) {
            cs->publish = calls;
        } else if (IS("subscribe")) {
            cs->subscribe = calls;
        } else if (IS("unsubscribe")) {
            cs->unsubscribe = calls;
        } else if (IS("ping")) {
            cs->ping = calls;
        } else if (IS("info")) {
            cs->info = calls;
        }
#undef IS
    }
    freeReplyObject(r);
}

/* acc += b - a, leaving out the INFO commands the bench itself sent. */
static void cmdstats_add_delta(cmdstats *acc, const cmdstats *a, const cmdstats *b)
{
    if (!a->ok || !b->ok) {
        acc->ok = 0;
        return;
    }
    acc->evalsha += b->evalsha - a->evalsha;
    acc->eval += b->eval - a->eval;
    acc->failed += b->failed - a->failed;
    acc->publish += b->publish - a->publish;
    acc->subscribe += b->subscribe - a->subscribe;
    acc->unsubscribe += b->unsubscribe - a->unsubscribe;
    acc->ping += b->ping - a->ping;
    acc->total += (b->total - b->info) - (a->total - a->info);
    acc->usec += b->usec - a->usec; /* includes one INFO: a few us, noise */
}

/* ---- one round of one scenario ------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n), in microseconds. */
static double pct_us(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)v[rank - 1] / 1000.0;
}

/* Runs sc for measure_ms (after a warm-up) and adds what it measured to res. */
static int run_round(lc_client *client, const scenario *sc, int measure_ms, const char *prefix,
                     result *res)
{
    run r;
    memset(&r, 0, sizeof(r));
    r.sc = sc;
    r.client = client;
    atomic_init(&r.phase, PH_WARMUP);
    for (int k = 0; k < MAX_KEYS; k++)
        snprintf(r.names[k], sizeof(r.names[k]), "%s:%s:%d", prefix, sc->name, k);

    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof(ws));
    lc_lock_opts lo;
    lc_lock_opts_init(&lo);
    lo.lease_ms = LEASE_MS;
    lo.watchdog = sc->watchdog;
    for (int i = 0; i < sc->threads; i++) {
        worker *w = &ws[i];
        w->r = &r;
        w->rng = (0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1)) ^ (uint64_t)now_ns();
        if (!w->rng)
            w->rng = 1;
        int nlocks = sc->kind == K_PING ? 0 : sc->kind == K_TRY ? 1 : sc->keys;
        for (int k = 0; k < nlocks; k++) {
            const char *name = sc->kind == K_TRY ? r.names[i] : r.names[k];
            lc_status st = lc_lock_new(client, name, &lo, &w->locks[k]);
            if (st != LC_OK) {
                fprintf(stderr, "lockcore-bench: lc_lock_new: %s (%s)\n", lc_status_name(st),
                        lc_errmsg());
                return -1;
            }
        }
    }

    pthread_barrier_init(&r.ready, NULL, (unsigned)sc->threads + 1);
    for (int i = 0; i < sc->threads; i++) {
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "lockcore-bench: pthread_create failed\n");
            abort(); /* the fixture's SIGABRT hook stops the server */
        }
    }
    pthread_barrier_wait(&r.ready);
    sleep_ms(WARMUP_MS);

    cmdstats before, after;
    read_cmdstats(client, &before);
    int64_t t_start = now_ns();
    atomic_store(&r.phase, PH_MEASURE);
    sleep_ms(measure_ms);
    atomic_store(&r.phase, PH_STOP);
    int64_t t_stop = now_ns();
    for (int i = 0; i < sc->threads; i++)
        pthread_join(ws[i].tid, NULL);
    read_cmdstats(client, &after);
    pthread_barrier_destroy(&r.ready);

    /* Accumulate. The samples cover ops started in the measured window, the counters what
     * Redis ran in it: they agree up to the ops in flight at each edge. */
    if (res->rounds == 0)
        res->cs.ok = 1;
    cmdstats_add_delta(&res->cs, &before, &after);
    double secs = (double)(t_stop - t_start) / 1e9;
    long long ops = 0;
    for (int i = 0; i < sc->threads; i++) {
        worker *w = &ws[i];
        for (size_t j = 0; j < w->n; j++)
            if (push_sample(&res->samples, &res->n, &res->cap, w->samples[j]) != 0) {
                fprintf(stderr, "lockcore-bench: out of memory\n");
                abort();
            }
        ops += (long long)w->n;
        res->thread_ops[i] += (long long)w->n;
        res->errors += w->errors;
        res->busy += w->busy;
        res->timeouts += w->timeouts;
        if (!res->first_error[0] && w->first_error[0])
            snprintf(res->first_error, sizeof(res->first_error), "%s", w->first_error);
        free(w->samples);
        for (int k = 0; k < MAX_KEYS; k++)
            lc_lock_free(w->locks[k]);
    }
    double rate = secs > 0 ? (double)ops / secs : 0;
    if (res->rounds == 0 || rate < res->round_min)
        res->round_min = rate;
    if (res->rounds == 0 || rate > res->round_max)
        res->round_max = rate;
    res->rounds++;
    res->ops += ops;
    res->seconds += secs;

    /* Remove the keys the round made (fencing counters never expire). */
    if (sc->kind != K_PING) {
        int n = sc->kind == K_TRY ? sc->threads : sc->keys;
        for (int k = 0; k < n; k++) {
            char fence[128];
            snprintf(fence, sizeof(fence), "%s:fence", r.names[k]);
            const char *argv[3] = {"DEL", fence, r.names[k]};
            lc_client_command(client, 3, argv, NULL, NULL);
        }
    }
    return 0;
}

/* Sorts the samples and derives the percentiles and the busy attempts. */
static void finish(result *res)
{
    qsort(res->samples, res->n, sizeof(*res->samples), cmp_i64);
    res->p50_us = pct_us(res->samples, res->n, 50);
    res->p99_us = pct_us(res->samples, res->n, 99);
    res->max_us = res->n ? (double)res->samples[res->n - 1] / 1000.0 : 0;
    /* Every measured pair ran the acquire and the release script once each; any further
     * script run is an acquire attempt that found the lock held. */
    if (res->sc->kind != K_PING && res->cs.ok) {
        long long scripts = res->cs.evalsha + res->cs.eval - res->cs.failed;
        res->script_busy = scripts - 2 * res->ops;
        if (res->script_busy < 0)
            res->script_busy = 0;
    }
}

/* ---- output ------------------------------------------------------------------------------ */

static double rate(const result *r)
{
    return r->seconds > 0 ? (double)r->ops / r->seconds : 0;
}

/* Commands the clients sent (scripts, PINGs, the listener's (UN)SUBSCRIBEs) per op. */
static double sent_per_op(const result *r)
{
    const cmdstats *c = &r->cs;
    long long sent = c->evalsha + c->eval + c->ping + c->subscribe + c->unsubscribe;
    return r->ops ? (double)sent / (double)r->ops : 0;
}

/* Redis CPU time executing commands, per op (us). */
static double redis_us_per_op(const result *r)
{
    return r->ops ? (double)r->cs.usec / (double)r->ops : 0;
}

static const result *find(const result *rs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rs[i].sc->name, name) == 0)
            return &rs[i];
    return NULL;
}

typedef struct ratio {
    const char *name, *num, *den;
    int p50; /* 1: ratio of p50 latencies instead of rates */
    const char *ideal;
} ratio;

static const ratio RATIOS[] = {
    {"uncontended pairs/s / ping-1t ops/s", "uncontended-1t", "ping-1t", 0,
     "0.5 (two round trips)"},
    {"uncontended p50 / ping-1t p50", "uncontended-1t", "ping-1t", 1, "2.0"},
    {"watchdog off / on, uncontended pairs/s", "uncontended-1t-nowd", "uncontended-1t", 0,
     "1 if the watchdog is free"},
    {"own-key-8t pairs/s / ping-8t ops/s", "own-key-8t", "ping-8t", 0, "0.5"},
    {"ping-8t / ping-1t", "ping-8t", "ping-1t", 0, "<= 2 cores' worth"},
    {"contended-1key / uncontended-1t pairs/s", "contended-1key-8t", "uncontended-1t", 0,
     "<= 1 (one holder at a time)"},
    {"16keys / contended-1key pairs/s", "16keys-8t", "contended-1key-8t", 0, "> 1"},
    {"16keys / own-key-8t pairs/s", "16keys-8t", "own-key-8t", 0, "1 (no collisions)"},
};
#define NRATIOS ((int)(sizeof(RATIOS) / sizeof(RATIOS[0])))

static double ratio_value(const result *rs, int n, const ratio *q)
{
    const result *a = find(rs, n, q->num), *b = find(rs, n, q->den);
    if (!a || !b)
        return 0;
    if (q->p50)
        return b->p50_us > 0 ? a->p50_us / b->p50_us : 0;
    return rate(b) > 0 ? rate(a) / rate(b) : 0;
}

static void print_table(const result *rs, int n)
{
    printf("\n%-19s %3s %4s %8s %15s %7s %8s %7s %7s %8s %7s %5s %4s %s\n", "scenario", "thr",
           "keys", "ops/s", "rounds min..max", "p50 us", "p99 us", "max ms", "sent/op", "redis us",
           "waits", "tmout", "errs", "ops/thread min..max");
    for (int i = 0; i < n; i++) {
        const result *r = &rs[i];
        char spread[32], sent[16] = "n/a", rus[16] = "n/a", waits[24] = "-";
        snprintf(spread, sizeof(spread), "%.0f..%.0f", r->round_min, r->round_max);
        if (r->cs.ok && r->ops > 0) {
            snprintf(sent, sizeof(sent), "%.2f", sent_per_op(r));
            snprintf(rus, sizeof(rus), "%.1f", redis_us_per_op(r));
        }
        if (r->sc->kind == K_TRY)
            snprintf(waits, sizeof(waits), "%lld", r->busy);
        else if (r->sc->kind == K_ACQUIRE && r->cs.ok)
            snprintf(waits, sizeof(waits), "%lld", r->script_busy);
        long long tmin = -1, tmax = 0;
        for (int t = 0; t < r->sc->threads; t++) {
            if (tmin < 0 || r->thread_ops[t] < tmin)
                tmin = r->thread_ops[t];
            if (r->thread_ops[t] > tmax)
                tmax = r->thread_ops[t];
        }
        printf("%-19s %3d %4d %8.0f %15s %7.1f %8.1f %7.1f %7s %8s %7s %5lld %4lld %lld..%lld\n",
               r->sc->name, r->sc->threads, r->sc->keys, rate(r), spread, r->p50_us, r->p99_us,
               r->max_us / 1000.0, sent, rus, waits, r->timeouts, r->errors, tmin, tmax);
    }
    printf("\nops are PINGs or acquire+release pairs; latency is per op. rounds: ops/s of the "
           "slowest and\nfastest round. sent/op: commands the client sent per op (scripts, "
           "PINGs, the listener's\n(UN)SUBSCRIBEs); redis us: Redis CPU executing commands per "
           "op; both from INFO commandstats.\nwaits: acquire attempts answered \"held by another "
           "owner\" (try-lock: LC_EBUSY results;\nlc_lock_acquire: acquire scripts Redis ran "
           "beyond one per pair).\n");
    for (int i = 0; i < n; i++)
        if (rs[i].first_error[0])
            printf("first error in %s: %s\n", rs[i].sc->name, rs[i].first_error);
    for (int i = 0; i < n; i++) {
        const result *r = &rs[i];
        if (r->sc->kind == K_PING || !r->cs.ok)
            continue;
        printf("%-19s redis: evalsha %lld, eval %lld, publish %lld, subscribe %lld, "
               "unsubscribe %lld; %.1f commands/op counting those inside scripts\n",
               r->sc->name, r->cs.evalsha, r->cs.eval, r->cs.publish, r->cs.subscribe,
               r->cs.unsubscribe, r->ops ? (double)r->cs.total / (double)r->ops : 0.0);
    }
    printf("\n%-42s %8s   %s\n", "ratio", "value", "ideal");
    for (int i = 0; i < NRATIOS; i++)
        printf("%-42s %8.3f   %s\n", RATIOS[i].name, ratio_value(rs, n, &RATIOS[i]),
               RATIOS[i].ideal);
}

/* Writes s as a JSON string (the names and messages here are ASCII). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int write_json(const char *path, const result *rs, int n, int seconds, int rounds,
                      int pipeline, const char *redis_desc, const char *redis_version)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "lockcore-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct utsname u;
    memset(&u, 0, sizeof(u));
    uname(&u);
    fprintf(f, "{\n  \"tool\": \"lockcore-bench\",\n  \"lockcore_version\": ");
    json_str(f, LC_VERSION);
    fprintf(f,
            ",\n  \"machine\": {\"cpus_online\": %ld, \"kernel\": ", sysconf(_SC_NPROCESSORS_ONLN));
    json_str(f, u.release);
    fprintf(f, ", \"arch\": ");
    json_str(f, u.machine);
    fprintf(f, "},\n  \"redis\": ");
    json_str(f, redis_desc);
    fprintf(f, ",\n  \"redis_version\": ");
    json_str(f, redis_version);
    fprintf(f,
            ",\n  \"client_mode\": \"%s\",\n  \"seconds_per_scenario\": %d,\n  \"rounds\": "
            "%d,\n  \"warmup_ms_per_round\": %d,\n  \"acquire_wait_ms\": %d,\n  "
            "\"lease_ms\": %d,\n  \"scenarios\": [\n",
            pipeline ? "pipeline" : "pool", seconds, rounds, WARMUP_MS, WAIT_MS, LEASE_MS);
    for (int i = 0; i < n; i++) {
        const result *r = &rs[i];
        fprintf(f, "    {\"name\": ");
        json_str(f, r->sc->name);
        fprintf(f, ", \"what\": ");
        json_str(f, r->sc->what);
        fprintf(f,
                ", \"threads\": %d, \"keys\": %d, \"watchdog\": %d, \"seconds\": %.3f, "
                "\"ops\": %lld, \"ops_per_s\": %.1f, \"round_ops_per_s_min\": %.1f, "
                "\"round_ops_per_s_max\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
                "\"max_us\": %.1f, \"busy\": %lld, \"timeouts\": %lld, \"errors\": %lld, "
                "\"thread_ops\": [",
                r->sc->threads, r->sc->keys, r->sc->watchdog, r->seconds, r->ops, rate(r),
                r->round_min, r->round_max, r->p50_us, r->p99_us, r->max_us, r->busy, r->timeouts,
                r->errors);
        for (int t = 0; t < r->sc->threads; t++)
            fprintf(f, "%s%lld", t ? ", " : "", r->thread_ops[t]);
        fprintf(f, "]");
        if (r->cs.ok)
            fprintf(f,
                    ", \"redis_cmds\": {\"total\": %lld, \"evalsha\": %lld, \"eval\": %lld, "
                    "\"failed_scripts\": %lld, \"publish\": %lld, \"subscribe\": %lld, "
                    "\"unsubscribe\": %lld, \"ping\": %lld, \"usec\": %lld}, "
                    "\"sent_per_op\": %.3f, \"redis_cmds_per_op\": %.3f, "
                    "\"redis_us_per_op\": %.2f, \"busy_acquire_attempts\": %lld",
                    r->cs.total, r->cs.evalsha, r->cs.eval, r->cs.failed, r->cs.publish,
                    r->cs.subscribe, r->cs.unsubscribe, r->cs.ping, r->cs.usec, sent_per_op(r),
                    r->ops ? (double)r->cs.total / (double)r->ops : 0.0, redis_us_per_op(r),
                    r->script_busy);
        if (r->first_error[0]) {
            fprintf(f, ", \"first_error\": ");
            json_str(f, r->first_error);
        }
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n  \"ratios\": {\n");
    for (int i = 0; i < NRATIOS; i++) {
        fprintf(f, "    ");
        json_str(f, RATIOS[i].name);
        fprintf(f, ": %.4f%s\n", ratio_value(rs, n, &RATIOS[i]), i + 1 < NRATIOS ? "," : "");
    }
    fprintf(f, "  }\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "lockcore-bench: error writing %s\n", path);
        return -1;
    }
    return 0;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lockcore-bench [--redis URL] [--seconds N] [--rounds R] [--pipeline]\n"
            "                      [--json FILE]\n"
            "  --redis URL    Redis to measure (redis://host:port[/db], unix:///path); default:\n"
            "                 start a private redis-server on a free port and stop it at exit\n"
            "  --seconds N    measured seconds per scenario (default 3, 1..3600)\n"
            "  --rounds R     cut each scenario's time into R rounds, run round-robin over the\n"
            "                 scenarios so background load hits all alike (default 3)\n"
            "  --pipeline     use the client's multiplexed auto-pipelined connection\n"
            "                 (lc_client_opts.pipeline = 1) instead of its connection pool\n"
            "  --json FILE    also write the results as JSON to FILE\n");
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "lockcore-bench: run did not finish in time, aborting\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    abort(); /* the fixture's SIGABRT hook kills the redis-server */
}

/* Value of an option given as "--opt VALUE" or "--opt=VALUE"; advances *i. NULL if absent. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt)
{
    size_t len = strlen(opt);
    if (strncmp(argv[*i], opt, len) != 0)
        return NULL;
    if (argv[*i][len] == '=')
        return argv[*i] + len + 1;
    if (argv[*i][len] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "lockcore-bench: %s needs a value\n", opt);
        exit(2);
    }
    return argv[++*i];
}

/* Parses an integer in [lo, hi] or exits with status 2. */
static int int_arg(const char *opt, const char *v, int lo, int hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "lockcore-bench: %s must be %d..%d, got \"%s\"\n", opt, lo, hi, v);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *json = NULL;
    int seconds = 3, rounds = 3, pipeline = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--pipeline") == 0) {
            pipeline = 1;
        } else if ((v = opt_value(argc, argv, &i, "--redis"))) {
            url = v;
        } else if ((v = opt_value(argc, argv, &i, "--json"))) {
            json = v;
        } else if ((v = opt_value(argc, argv, &i, "--seconds"))) {
            seconds = int_arg("--seconds", v, 1, 3600);
        } else if ((v = opt_value(argc, argv, &i, "--rounds"))) {
            rounds = int_arg("--rounds", v, 1, 100);
        } else {
            fprintf(stderr, "lockcore-bench: unknown argument \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    int round_ms = seconds * 1000 / rounds;
    if (round_ms < 100) {
        fprintf(stderr, "lockcore-bench: rounds of %d ms are too short: fewer --rounds\n",
                round_ms);
        return 2;
    }

    /* Worst case per round: warm-up, window, a wait timeout at its end, key clean-up. */
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(NSCENARIOS * rounds * ((round_ms + WARMUP_MS + WAIT_MS) / 1000 + 2) + 30));

    rf_server *srv = NULL;
    char redis_desc[300];
    if (!url) {
        srv = rf_start(NULL);
        if (!srv) {
            fprintf(stderr, "lockcore-bench: could not start redis-server (is it installed?)\n");
            return 1;
        }
        url = rf_url(srv);
        snprintf(redis_desc, sizeof(redis_desc), "private redis-server on %s", url);
    } else {
        snprintf(redis_desc, sizeof(redis_desc), "--redis (given)"); /* URL may hold a password */
    }

    lc_client_opts co;
    lc_client_opts_init(&co);
    co.pipeline = pipeline;
    lc_client *client = NULL;
    lc_status st = lc_client_new(url, &co, &client);
    if (st != LC_OK) {
        fprintf(stderr, "lockcore-bench: %s: %s (%s)\n", srv ? url : "--redis", lc_status_name(st),
                lc_errmsg());
        rf_stop(srv);
        return 1;
    }

    char version[64] = "?";
    {
        const char *av[2] = {"INFO", "server"};
        redisReply *r = NULL;
        if (lc_client_command(client, 2, av, NULL, &r) == LC_OK && r->type == REDIS_REPLY_STRING) {
            const char *p = strstr(r->str, "redis_version:");
            if (p)
                sscanf(p + strlen("redis_version:"), "%63[^\r\n]", version);
        }
        if (r)
            freeReplyObject(r);
    }

    char prefix[64];
    snprintf(prefix, sizeof(prefix), "lcbench:%ld", (long)getpid());
    printf("lockcore-bench %s: redis %s (%s), %ld CPUs online, client mode: %s\n%d s per "
           "scenario in %d rounds of %d ms (+%d ms warm-up each), lease %d ms, acquire wait %d "
           "ms\n",
           LC_VERSION, version, redis_desc, sysconf(_SC_NPROCESSORS_ONLN),
           pipeline ? "pipeline (one multiplexed connection)" : "pool (a connection per caller)",
           seconds, rounds, round_ms, WARMUP_MS, LEASE_MS, WAIT_MS);
    fflush(stdout);

    result rs[NSCENARIOS];
    memset(rs, 0, sizeof(rs));
    for (int i = 0; i < NSCENARIOS; i++)
        rs[i].sc = &SCENARIOS[i];
    int rc = 0;
    for (int round = 0; round < rounds && rc == 0; round++) {
        printf("round %d/%d:", round + 1, rounds);
        fflush(stdout);
        for (int i = 0; i < NSCENARIOS && rc == 0; i++) {
            if (run_round(client, &SCENARIOS[i], round_ms, prefix, &rs[i]) != 0)
                rc = 1;
            printf(" %s", SCENARIOS[i].name);
            fflush(stdout);
        }
        printf("\n");
    }
    if (rc == 0) {
        for (int i = 0; i < NSCENARIOS; i++)
            finish(&rs[i]);
        print_table(rs, NSCENARIOS);
        if (json &&
            write_json(json, rs, NSCENARIOS, seconds, rounds, pipeline, redis_desc, version) != 0)
            rc = 1;
        for (int i = 0; i < NSCENARIOS; i++)
            if (rs[i].errors)
                rc = 1;
    }
    for (int i = 0; i < NSCENARIOS; i++)
        free(rs[i].samples);

    lc_client_free(client);
    rf_stop(srv);
    alarm(0);
    return rc;
}
