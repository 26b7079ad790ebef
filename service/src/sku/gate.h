/*
 * gate — this instance's view of each waiting room (SPEC §16, docs/design.md "The instance's
 * gate: admitter and snapshot"): the admitter that steps every active gated SKU's gate every
 * GATE_TICK_MS, the snapshot each step leaves (shared by every loop), the admission rate measured
 * from those snapshots, and a bounded cache of users' places.
 *
 * The admitter runs on loop 0 (a timer, like the expiry sweeper): for each SKU that had a join or
 * a poll on this instance in the last GATE_ACTIVE_MS and has no step in flight, one step = the
 * exact status read (exact.h) SENT after the previous step's reply (its fin) was received, then
 * gate_store_admit with that fin as fin_seen (gate_store.h says why). The reply is the snapshot.
 * A request that finds no snapshot (the SKU's first join or poll here) starts a step itself on
 * its own loop and waits for its snapshot (gate_wait). Orders never wait behind any of it: a step
 * is two Redis calls on a loop's client, like a request's.
 *
 * The place cache maps (SKU, user) to the place's rank and, once read, its admission entry. A
 * rank is cached only once it is final (>= 0: the start has passed or the line is FIFO: the
 * gate's scripts never rescore a member then), so the cache is exact; at most
 * GATE_PLACES_MAX entries, the least recently used going first.
 *
 * Threads: gate_new / gate_free on the main thread around the loops, gate_start / gate_stop on
 * loop 0, everything else on any loop (one mutex over the SKUs, one over the places; the
 * critical sections copy a few fields).
 */
#ifndef INVENTORY_GATE_H
#define INVENTORY_GATE_H

#include <stdint.h>

#include "gate_store.h"

struct app;
struct areq;
struct areq_env;

#define GATE_TICK_MS 100
/* A SKU is stepped while it had a join or poll on this instance this recently. */
#define GATE_ACTIVE_MS 30000
/* The admission rate is measured over the snapshots of this long. */
#define GATE_RATE_WINDOW_MS 10000
/* SKUs with a gate entry (more: gate_wait answers rc 0, a 503) and places cached. */
#define GATE_SKUS_MAX 4096
#define GATE_PLACES_MAX 100000
/* A snapshot older than this is not answered (the steps are failing): the request waits for a
 * step of its own. */
#define GATE_STALE_MS 2000

/* One snapshot: the reply of the last admission step of the SKU on this instance. */
struct gate_snap {
    struct gate_state st;  /* code STORE_GATE_OK / NO_ROOM / NO_SKU and the counters */
    int64_t mono_ms;       /* clock_mono_ms() when the reply was received */
    double rate;           /* admissions per second measured over GATE_RATE_WINDOW_MS of
                            * snapshots; -1 not measured yet (fewer than 2 snapshots) */
    long long rule_rate;   /* the SKU's queue_rate as the step's status read found it */
    long long ttl_s;       /* its queue_ticket_ttl_s (0: 120 s) */
    int64_t sale_start_ms; /* its sale_start (0: none) */
    long long remaining;   /* the step's status read: units for sale and in holds */
    long long reserved;
};

struct gate;

/* The table for app (its store, queue key and cache). NULL out of memory. */
struct gate *gate_new(struct app *app);
/* NULL-safe; the loops have ended. */
void gate_free(struct gate *g);

/* The admitter's timer on env's loop (loop 0): started, and stopped before its Redis client
 * goes (the loop's end). On that loop. */
int gate_start(struct gate *g, struct areq_env *env);
void gate_stop(struct gate *g);

/* Notes a join or poll of sku (it is stepped for GATE_ACTIVE_MS from now), and copies its
 * snapshot into *out when there is one younger than GATE_STALE_MS: 1, else 0. Any thread. */
int gate_snapshot(struct gate *g, const char *sku, struct gate_snap *out);

/* What a gate_wait gets: rc 1 the snapshot (borrowed for the call), -1 the step failed (why),
 * 0 no room in the table (GATE_SKUS_MAX SKUs active). On ar's loop. */
typedef void (*gate_wait_fn)(struct areq *ar, void *arg, int rc, const struct gate_snap *s,
                             const char *why);

/* Answers ar's wait for sku's snapshot: at once when gate_snapshot would give one, else after a
 * step (started on ar's loop when none is in flight), re-looking every few milliseconds up to
 * GATE_STALE_MS. ar's cancel is taken while it waits. On ar's loop. */
void gate_wait(struct gate *g, struct areq *ar, const char *sku, gate_wait_fn cb, void *arg);

/* 1 the first time it is called for sku (while sku has an entry), else 0: a warning said once
 * per SKU. Any thread. */
int gate_first_warning(struct gate *g, const char *sku);

/* A place as the cache holds it. */
struct gate_place_entry {
    long long rank;         /* final (>= 0) */
    char adm[GATE_ADM_MAX]; /* "" not read since admitted, or the entry as last read */
    int64_t adm_mono_ms;    /* when adm was read (clock_mono_ms) */
    double est_wait_s;      /* the estimated wait first answered (-1: none yet) */
    int64_t first_mono_ms;  /* when it was answered */
    int wait_scored;        /* the estimate's error was counted */
};

/* 1 with *out when (sku, user)'s place is cached (it becomes the most recently used), else 0. */
int gate_place_get(struct gate *g, const char *sku, const char *user, struct gate_place_entry *out);
/* Caches (sku, user)'s place (rank >= 0; else nothing is cached), replacing what was. */
void gate_place_put(struct gate *g, const char *sku, const char *user,
                    const struct gate_place_entry *in);

/* The mono time of sku's first snapshot (of those kept: about a minute) whose served passed
 * rank (the place was admitted then, at most a step late); 0 when none does. */
int64_t gate_admitted_at(struct gate *g, const char *sku, long long rank);

/* Counts an answered estimate's error (|estimated - actual| seconds) for /metrics. */
void gate_wait_error(double err_s);

/* Counts for /metrics (any thread). */
struct gate_stats {
    long long joins;         /* POST .../queue answered with a place */
    long long polls_memory;  /* place polls answered from the snapshot and the place cache */
    long long polls_redis;   /* place polls that needed one gate_store_place */
    long long admitted;      /* places admitted by this instance's steps */
    long long ticks;         /* admission steps made (ended) */
    long long tick_failures; /* of which failed */
    long long length;        /* places waiting (length - served), summed over active SKUs */
    long long live;          /* tickets live, summed over active SKUs */
    long long skus;          /* SKUs stepped now */
    double wait_err_sum_s;   /* the estimated-wait errors counted, and how many */
    long long wait_err_count;
};
void gate_stats(struct gate *g, struct gate_stats *out);
/* The join and poll counters (queue.c). */
void gate_count_join(void);
void gate_count_poll(int from_redis);

#endif
