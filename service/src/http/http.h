/*
 * http — the HTTP edge: the only file that knows libmicrohttpd. It listens, reads each request
 * (body capped at 16 KiB: 413 body_too_large), turns it into a struct request, runs the
 * handler of its router row between router_begin and router_end (at once, or suspended until
 * the handler's areq_done: areq.h), and sends back the struct response the handler filled
 * (JSON compact, or the handler's raw text). Handlers run on the worker loops (cfg.threads,
 * worker.h), where this file's daemons are the loops' front ends (struct worker_front).
 *
 * Abuse limits, both per peer address and off by default: cfg.rate_limit_rps/rate_limit_burst
 * (ratelimit.h token buckets; a request over the rate gets 429 rate_limited + Retry-After before
 * its body is read or a handler runs; the probe rows, /healthz, /readyz and /metrics, are
 * exempt) and cfg.max_connections_per_ip (libmicrohttpd closes a connection over it at once).
 *
 * The client of a request is its peer address, or, when the peer is in cfg.trusted_proxies, the
 * client that peer names in X-Forwarded-For / X-Real-IP (proxy.h): the rate limit and the
 * loopback test of admin_allow_loopback use it; the per-IP connection cap always uses the peer.
 *
 * Every request gets an id: the X-Request-Id header a trusted proxy sent (when it is 1..128
 * characters of [A-Za-z0-9._:@/+=-]), else 32 random hex digits. It is sent back in the
 * X-Request-Id header of every response, carried by every log line written while the request
 * is handled (log_set_request_id) and by its access-log line (accesslog.h). Each answered
 * request is timed into inventory_http_request_duration_seconds{route}.
 */
#ifndef INVENTORY_HTTP_H
#define INVENTORY_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct app;

/* Longest request head served (request line, header lines and the blank line, in bytes);
 * a longer one is answered 431 headers_too_large. A head must also fit the connection's
 * pool (--connection-memory-kib): see head_cost in http.c. */
#define HTTP_HEAD_MAX 8192
struct http_server;

/* The libmicrohttpd edge of the service: one MHD daemon per event loop, in external-epoll mode
 * on the loop's base, sharing the port with SO_REUSEPORT; the server (server.c) makes the loops
 * and attaches this to each. */

/* Checks app->cfg's listening address (bind: an IPv4 or IPv6 literal, "::" listens dual-stack;
 * port 0 picks a free port, see http_port), raises the open-file limit for max_connections,
 * makes the rate limiter. app is borrowed and must outlive it. NULL with a one-line reason in
 * err[0..errlen). */
struct http_server *http_new(struct app *app, char *err, size_t errlen);

/* Attaches the front end to loop w (worker_init'ed, not yet running; loops in index order): w's
 * worker_front, and a daemon listening on w's base with app->cfg.max_connections connections
 * and app->cfg.connection_timeout_s idle timeout. 0, or -1 with err set (http_free undoes
 * it). */
struct worker;
int http_attach(struct http_server *srv, struct worker *w, char *err, size_t errlen);

/* The status event streams (events.h) the front end opens on their route and wakes each loop
 * for: once every loop is attached, before the loops run. */
struct events;
void http_events(struct http_server *srv, struct events *ev);

/* True when id may be taken as a request id from a trusted proxy (see above). */
bool http_request_id_ok(const char *id);

/* The port the server listens on (useful after binding port 0); 0 when unknown. */
int http_port(const struct http_server *srv);

/* Requests between their first callback and their completion, on every loop (the grace of a
 * shutdown waits for 0). */
int http_in_flight(const struct http_server *srv);

/* Frees what http_new and http_attach made: after the loops ended (worker_end, worker_join),
 * before they are freed. NULL-safe. */
void http_free(struct http_server *srv);

#endif
