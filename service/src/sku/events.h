/*
 * events — GET /api/v1/skus/{sku}/events: the SKU's status pushed as Server-Sent Events (SPEC
 * §15, docs/api.md "Status events"), from the same one refresh per SKU per instance that answers
 * the pollers (statsnap.h), however many subscribe.
 *
 * A subscriber is an HTTP connection answered with a libmicrohttpd callback response
 * (text/event-stream, chunked for HTTP/1.1) that stays on the worker loop that accepted it. Its
 * memory is a struct sub of a few hundred bytes: the events waiting to be written are
 * references to bytes rendered once per change per loop and shared, never copies, at most
 * EVENTS_PENDING of them; a subscriber that falls further behind (its socket's send buffer full,
 * the client not reading) is closed and counted as dropped. While it has nothing to write, its
 * connection is suspended, and the events of a chunked stream are then written to its socket by
 * the loop directly (one send each), not through libmicrohttpd.
 *
 * How a change reaches subscribers: statsnap calls events' one listener (statsnap_on_change) on
 * the loop whose refresh found the new status; the listener queues the snapshot in the inbox of
 * each loop with subscribers and posts the loop (worker_post); each loop renders the event once
 * and writes it to its subscribers of that SKU (or resumes the connections of those it cannot
 * write to itself). Each loop with subscribers keeps their SKUs fresh with a timer every
 * min(--status-refresh-ms, EVENTS_TICK_MS), and when the first of their snapshots expires
 * (statsnap_poke: a Redis read only when the snapshot is older than the refresh and none is in
 * flight, whichever loop asks), and on the same tick compares each SKU's current snapshot with
 * the last one its subscribers got, so a change that raced a subscriber's start is not lost. A
 * heartbeat comment (": hb") goes to every subscriber every --events-heartbeat-s seconds.
 *
 * Threads: events_new and events_free on the main thread around the loops; everything else on
 * the loop named (the loop's thread), except the statsnap listener (any loop).
 */
#ifndef INVENTORY_EVENTS_H
#define INVENTORY_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct app;
struct areq;
struct request;
struct response;
struct snap;
struct worker;
struct MHD_Connection;
struct MHD_Response;

/* Most events queued for one subscriber beyond the one being written; one more drops it. */
#define EVENTS_PENDING 8
/* Longest interval of a loop's tick (keeping its subscribers' SKUs fresh). */
#define EVENTS_TICK_MS 25
/* The reconnection delay the stream advises (its "retry:" line), in milliseconds. */
#define EVENTS_RETRY_MS 2000

struct events;

/* The event streams of the nloops loops workers[0..nloops) (not yet running), listening to
 * app->snaps' changes. NULL out of memory. */
struct events *events_new(struct app *app, struct worker *workers, int nloops);

/* Frees what events_new made; every loop has ended (their connections closed). NULL-safe. */
void events_free(struct events *ev);

/* How loop i runs its HTTP daemon after connections were resumed outside it: kick(arg) soon
 * makes it process them (http.c's kick event). Before the loop starts. */
void events_loop_hook(struct events *ev, int i, void (*kick)(void *), void *arg);

/* Loop i stops serving (shutdown, on its thread): every stream of the loop ends now (a
 * suspended one with the end of its chunked body; one in the middle of a write has its socket
 * shut down), and no new one opens. The caller runs its daemon next. */
void events_loop_quiesce(struct events *ev, int i);

/* Loop i's timers are freed (on its thread, at its end, its daemon stopped: no subscriber is
 * left). */
void events_loop_close(struct events *ev, int i);

/*
 * Opens the stream of sku[0..sku_len) for a request answered 200 with first (its snapshot, a
 * reference the callee takes over) on conn, on the calling loop: the response to queue (the caller
 * queues and destroys it; its headers are set here but for X-Request-Id), with "retry:" and first
 * as the first event unless last_event_id (the request's Last-Event-ID, may be NULL) is first's id.
 * chunked: 1 when libmicrohttpd will send the body in chunks (an HTTP/1.1 GET), which lets the
 * stream write its later events to the socket itself; 0 (HTTP/1.0, HEAD) keeps every write in
 * libmicrohttpd's hands.
 * NULL, with first released, when the subscriber bound (--max-subscribers) is reached, the loop
 * is quiescing, or out of memory: *busy says which (1: answer 503 with Retry-After).
 */
struct MHD_Response *events_open(struct events *ev, struct MHD_Connection *conn, const char *sku,
                                 size_t sku_len, struct snap *first, const char *last_event_id,
                                 int chunked, int *busy);

/* The handlers of GET /api/v1/skus/{sku}/events (router.h): run answers from a fresh snapshot
 * (res->stream) or with the error at once, else leaves it to start, which waits for the
 * snapshot's refresh (statsnap_wait). An unknown SKU answers 404 as GET /api/v1/skus/{sku}. */
void events_get_run(struct app *app, const struct request *req, struct response *res);
void events_get_async(struct areq *ar);

/* Counters for /metrics (any thread). */
struct events_stats {
    long long subscribers; /* open streams, all loops */
    long long sent;        /* status events written whole */
    long long dropped;     /* subscribers closed for falling EVENTS_PENDING events behind */
    long long refused;     /* streams refused by --max-subscribers */
};
void events_stats(struct events_stats *out);

#endif
