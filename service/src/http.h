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

/* Starts listening on app->cfg.bind:app->cfg.port (an IPv4 or IPv6 literal; "::" listens
 * dual-stack; port 0 picks a free port, see http_port) with app->cfg.threads worker threads,
 * app->cfg.max_connections connections and app->cfg.connection_timeout_s idle timeout.
 * app is borrowed and must outlive the server. Returns a new server to stop with http_stop, or
 * NULL with a one-line reason in err[0..errlen). */
struct http_server *http_start(struct app *app, char *err, size_t errlen);

/* True when id may be taken as a request id from a trusted proxy (see above). */
bool http_request_id_ok(const char *id);

/* The port the server listens on (useful after binding port 0); 0 when unknown. */
int http_port(const struct http_server *srv);

/* Stops the server gracefully: stops accepting connections at once (new connects are refused),
 * lets requests in flight finish for up to grace_ms milliseconds (responses sent meanwhile
 * carry Connection: close when app->draining is set), then closes every connection, joins the
 * worker threads and frees srv. NULL-safe. */
void http_stop(struct http_server *srv, int grace_ms);

#endif
