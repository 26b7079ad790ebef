/*
 * log — structured logs: one JSON object per line on stderr (SPEC §4).
 *
 *     {"ts":"2026-11-22T02:40:00.123Z","level":"info","event":"startup","msg":"..."}
 *
 * ts is UTC with milliseconds; level is debug/info/warn/error; event is a short machine-readable
 * name ("startup", "shutdown", "redis_error"); msg is printf-formatted human text. Every string
 * is JSON-escaped (quotes, backslashes, control characters as \uXXXX, invalid UTF-8 as U+FFFD),
 * so each line parses as JSON whatever the message holds.
 *
 * A line written while a request is being handled on the thread (log_set_request_id) carries
 * its id too: {"ts":..,"level":..,"event":..,"request_id":"<id>","msg":..}.
 *
 * Thread-safe: a line is formatted in memory and written with one fwrite under a mutex, so
 * lines from different threads never interleave. A message below the configured level
 * costs one relaxed atomic load (log_enabled); guard expensive argument building with it.
 */
#ifndef INVENTORY_LOG_H
#define INVENTORY_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "config.h"

/* Sets the lowest level that is written (messages below it are dropped). May be called again
 * at any time, from any thread. Before the first call the level is CONFIG_LOG_INFO. */
void log_init(enum config_log_level level);

/* Redirects the log to out (tests); NULL goes back to stderr. The stream is borrowed: the
 * caller keeps it open while it is in use and closes it after switching away. */
void log_set_output(FILE *out);

/* Sets the id of the request this thread is handling now (X-Request-Id): every line this thread
 * writes until the next call carries it as "request_id". NULL or "" clears it. The string is
 * borrowed: keep it alive until it is cleared. */
void log_set_request_id(const char *id);

/* The id set by log_set_request_id on this thread, or NULL. Borrowed. */
const char *log_request_id(void);

/* The request of asynchronous work: a lower layer that calls back into a request's code
 * (store.c's reply callbacks) brackets the callback with log_ctx_begin(ctx) and log_ctx_end(),
 * ctx the request's object on the layer above (struct areq; NULL: no id), so the callback's
 * lines carry the request's id without the lower layer knowing that object. The layer that owns
 * ctx says once, at start-up, how to read the id from it (log_ctx_reader; none set: no id).
 * Nested brackets keep the outermost id. Per thread. */
#define LOG_CTX_ID_MAX 128 /* longer ids are cut (REQUEST_ID_MAX, request.h) */
typedef const char *(*log_ctx_id_fn)(const void *ctx);
void log_ctx_reader(log_ctx_id_fn fn);
void log_ctx_begin(const void *ctx);
void log_ctx_end(void);

/* Writes the current UTC time as the logs show it, "2026-11-22T02:40:00.123Z", into buf
 * (len >= LOG_TIMESTAMP_LEN). */
#define LOG_TIMESTAMP_LEN 32
void log_timestamp(char *buf, size_t len);

/* Nonzero when a message at level would be written. */
int log_enabled(enum config_log_level level);

/* Writes one log line at level with event (a short static name; NULL gives "log") and the
 * printf-formatted message. Never fails visibly: on out-of-memory the line is dropped. */
void log_msg(enum config_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* log_msg with a va_list (for adapters such as libmicrohttpd's error logger). */
void log_vmsg(enum config_log_level level, const char *event, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Writes one line whose field key holds json, a complete JSON value embedded verbatim (e.g. the
 * effective configuration from config_describe): {"ts",...,"event":event,key:json}. The caller
 * guarantees json is valid JSON; key is escaped like any string. */
void log_json(enum config_log_level level, const char *event, const char *key, const char *json);

#endif
