/*
 * statsnap — each SKU's stock status as this instance last read it from Redis (SPEC §15), so
 * that the crowd polling a product page costs Redis one read per --status-refresh-ms per SKU
 * per instance, however many ask.
 *
 * A snapshot (struct snap) is immutable and reference-counted: the JSON text of the status
 * (docs/api.md "SKU status", with "as_of" and "refresh_ms"), its strong ETag, and the fields the
 * event stream compares. It is read in one step: on one Redis one script (lua/status_read.lua)
 * reads the layout and every segment at one moment; on a cluster, or when that script finds a
 * layout being rolled out, the exact read of exact.c (settled, healed) makes it. A refresh whose
 * status is the same as the snapshot's keeps the snapshot (same bytes, same ETag, so pollers'
 * If-None-Match keeps answering 304) and only marks it confirmed.
 *
 * Requests ask on their worker loop. A fresh snapshot (confirmed less than refresh_ms ago) is
 * answered at once (statsnap_fresh, without leaving the HTTP callback); otherwise the request
 * waits (statsnap_wait) for the one refresh in flight for that SKU, which the first waiter
 * starts on its own loop as an internal request (areq) of its own. Waiters on other loops are
 * woken on theirs (worker_post). Orders never wait behind any of it: the refresh is one more
 * Redis call on a loop, like a request's.
 *
 * Memory: at most STATSNAP_MAX_ENTRIES SKUs are kept; past that, entries idle for a minute are
 * reused, and when none is, the status is read exactly (uncached) for that request.
 */
#ifndef INVENTORY_STATSNAP_H
#define INVENTORY_STATSNAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct app;
struct areq;
struct response;
struct worker;

#define STATSNAP_MAX_ENTRIES 16384

/* One snapshot of one SKU (immutable once published; statsnap_ref / statsnap_unref). */
struct snap {
    atomic_int refs;
    int found;        /* 1 the SKU's status, 0 unknown SKU (body: the 404's) */
    char *body;       /* JSON text, NUL-terminated */
    size_t len;       /* strlen(body) */
    char etag[24];    /* "\"<16 hex>\"": SHA-256 prefix of body */
    char id[17];      /* 16 hex of the status without as_of: equal on every instance for the
                         same status (the event stream's event id) */
    int64_t as_of_ms; /* wall clock of the read that first returned this status */
    int64_t version;  /* the layout's version (0: unknown SKU) */
    long long remaining;
    int sold_out;
    const char *sale; /* "not_started", "open", "ended" (this instance's clock at the read) */
};

void statsnap_ref(struct snap *s);
void statsnap_unref(struct snap *s); /* NULL-safe */

struct statsnap;

/* A table for snapshots refreshed at most every refresh_ms (0..250; 0: every read refreshes,
 * concurrent ones sharing the refresh in flight). NULL out of memory. */
struct statsnap *statsnap_new(int refresh_ms);
void statsnap_free(struct statsnap *sn); /* NULL-safe; no request may be waiting */

/* The Cache-Control value of a snapshot's answer ("public, max-age=N"), static in sn. */
const char *statsnap_cache_control(const struct statsnap *sn);

/* 1 with *out (a reference: statsnap_unref it) and *age_ms (since it was last confirmed by a
 * read) when sku's snapshot was confirmed less than refresh_ms ago; else 0. Any thread. */
int statsnap_fresh(struct statsnap *sn, const char *sku, struct snap **out, int64_t *age_ms);

/* What a waiter gets: rc 1 a snapshot (snap, a reference the callee owns, age_ms), -1 the read
 * failed (why, out_of_step: exact_read_error's arguments), 0 not cached at all (the table is
 * full: read exactly). Called on ar's loop. */
typedef void (*statsnap_fn)(struct areq *ar, int rc, struct snap *snap, int64_t age_ms,
                            const char *why, int out_of_step);

/* Answers ar's wait for sku's snapshot: at once (before returning) when it is fresh, else after
 * the refresh in flight, which this starts when there is none. ar's cancel is taken while it
 * waits (shutdown answers it rc -1). On ar's loop. */
void statsnap_wait(struct statsnap *sn, struct areq *ar, const char *sku, statsnap_fn cb);

/* Starts a refresh of sku on env's loop when its snapshot is not fresh and none is in flight,
 * with no request waiting (the event stream keeps its SKUs fresh so). On that loop. */
struct areq_env;
void statsnap_poke(struct statsnap *sn, struct app *app, struct areq_env *env, const char *sku);

/* The next read of sku refreshes (an admin change made on this instance). Any thread. */
void statsnap_forget(struct statsnap *sn, const char *sku);

/* Called on the refreshing loop, outside the table's lock, each time sku's snapshot is
 * replaced by one of another status (not when a refresh confirms it); snap is borrowed (take a
 * reference to keep it). Set once before the loops start. */
typedef void (*statsnap_change_fn)(void *arg, const char *sku, struct snap *snap);
void statsnap_on_change(struct statsnap *sn, statsnap_change_fn fn, void *arg);

/* Counters for /metrics (any thread). */
struct statsnap_stats {
    long long refreshes;     /* refreshes ended (read from Redis) */
    long long refresh_fails; /* of which failed */
    long long changes;       /* of which brought a new status */
    long long entries;       /* SKUs in the table */
    long long uncached;      /* reads answered exactly because the table was full */
};
void statsnap_stats(struct statsnap *sn, struct statsnap_stats *out);

#endif
