/*
 * accesslog — the HTTP access log (config access_log, --access-log FILE|-): one JSON object per
 * answered request, apart from the diagnostic log on stderr:
 *
 *   {"ts":"2026-11-22T02:40:00.123Z","request_id":"3f9c...","client":"127.0.0.1",
 *    "method":"POST","path":"/api/v1/orders","route":"/api/v1/orders","status":201,
 *    "bytes":161,"duration_s":0.000812}
 *
 * "-" writes to stdout. The file is opened for appending (created 0640) and re-opened by
 * accesslog_reopen (inventoryd does it on SIGHUP, for logrotate). Thread-safe: each line is
 * written whole under a mutex.
 */
#ifndef INVENTORY_ACCESSLOG_H
#define INVENTORY_ACCESSLOG_H

#include <stddef.h>

/* One answered request. Strings are borrowed; any may be NULL (written as null). path may hold
 * any bytes (those outside printable ASCII are written as '?'). */
struct accesslog_entry {
    const char *request_id;
    const char *client; /* the client address as text (the peer, or who a trusted proxy names) */
    const char *method;
    const char *path;
    const char *route; /* the route pattern, e.g. "/api/v1/skus/{sku}"; "other" for a 404 */
    int status;
    size_t bytes;   /* body bytes sent */
    double seconds; /* from the first byte of the request to the response being queued */
};

/* Opens the access log at path ("-": stdout; NULL or "": none, accesslog_write then does
 * nothing). Returns 0, or -1 with a one-line reason in err. Call once at start-up. */
int accesslog_open(const char *path, char *err, size_t errlen);

/* Re-opens the file named at accesslog_open (after a log rotation). 0, or -1 (the old stream
 * is kept). No-op for stdout or none. */
int accesslog_reopen(void);

/* Closes the access log (a no-op when none is open). */
void accesslog_close(void);

/* Nonzero when an access log is open. */
int accesslog_enabled(void);

/* Writes e as one line (when an access log is open). Never fails visibly. */
void accesslog_write(const struct accesslog_entry *e);

#endif
