/*
 * log — JSON log lines on stderr; see log.h. A line is built in a buffer that starts on the
 * stack and moves to the heap only for long messages, then written with one fwrite under a
 * process-wide mutex.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

static atomic_int log_level = CONFIG_LOG_INFO;
static _Atomic(FILE *) log_out = NULL; /* NULL: stderr */
static pthread_mutex_t log_write_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local const char *log_req_id; /* borrowed; NULL: no request */

void log_set_request_id(const char *id)
{
    log_req_id = id && *id ? id : NULL;
}

const char *log_request_id(void)
{
    return log_req_id;
}

static _Atomic(log_ctx_id_fn) ctx_reader;
static _Thread_local char ctx_id[LOG_CTX_ID_MAX + 1];
static _Thread_local int ctx_depth;

void log_ctx_reader(log_ctx_id_fn fn)
{
    atomic_store(&ctx_reader, fn);
}

void log_ctx_begin(const void *ctx)
{
    if (ctx_depth++ > 0)
        return;
    log_ctx_id_fn fn = atomic_load(&ctx_reader);
    const char *id = ctx && fn ? fn(ctx) : NULL;
    snprintf(ctx_id, sizeof(ctx_id), "%s", id ? id : "");
    log_set_request_id(ctx_id);
}

void log_ctx_end(void)
{
    if (--ctx_depth == 0)
        log_set_request_id(NULL);
}

void log_init(enum config_log_level level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

void log_set_output(FILE *out)
{
    atomic_store(&log_out, out);
}

int log_enabled(enum config_log_level level)
{
    return (int)level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

/* A growable byte buffer; failed set once an allocation failed (the line is then dropped). */
struct lbuf {
    char *p;
    size_t len, cap;
    bool heap, failed;
};

static void lb_reserve(struct lbuf *b, size_t extra)
{
    if (b->failed || b->len + extra <= b->cap)
        return;
    size_t cap = b->cap * 2;
    while (cap < b->len + extra)
        cap *= 2;
    char *n = b->heap ? realloc(b->p, cap) : malloc(cap);
    if (!n) {
        b->failed = true;
        return;
    }
    if (!b->heap)
        memcpy(n, b->p, b->len);
    b->p = n;
    b->cap = cap;
    b->heap = true;
}

static void lb_put(struct lbuf *b, const char *s, size_t n)
{
    lb_reserve(b, n);
    if (b->failed)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void lb_puts(struct lbuf *b, const char *s)
{
    lb_put(b, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when s does not start one (overlong
 * forms, surrogates and code points past U+10FFFF are invalid). s[0] >= 0x80. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

/* Appends s[0..n) as a quoted JSON string. */
static void lb_json_string(struct lbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    lb_put(b, "\"", 1);
    size_t run = 0; /* start of the pending run of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t seq = 1;
        const char *esc = NULL;
        char ubuf[7];
        if (c >= 0x80) {
            seq = utf8_seq(u + i, n - i);
            if (seq) {
                i += seq;
                continue;
            }
            seq = 1;
            esc = "\\ufffd";
        } else if (c == '"') {
            esc = "\\\"";
        } else if (c == '\\') {
            esc = "\\\\";
        } else if (c == '\n') {
            esc = "\\n";
        } else if (c == '\r') {
            esc = "\\r";
        } else if (c == '\t') {
            esc = "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(ubuf, "\\u00", 4);
            ubuf[4] = hex[c >> 4];
            ubuf[5] = hex[c & 0xf];
            ubuf[6] = '\0';
            esc = ubuf;
        } else {
            i++;
            continue;
        }
        lb_put(b, s + run, i - run);
        lb_puts(b, esc);
        i += seq;
        run = i;
    }
    lb_put(b, s + run, n - run);
    lb_put(b, "\"", 1);
}

static const char *level_name(enum config_log_level level)
{
    switch (level) {
    case CONFIG_LOG_DEBUG: return "debug";
    case CONFIG_LOG_INFO: return "info";
    case CONFIG_LOG_WARN: return "warn";
    case CONFIG_LOG_ERROR: return "error";
    }
    return "error";
}

void log_timestamp(char *buf, size_t len)
{
    int64_t ms = clock_wall_ms();
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
}

/* Appends {"ts":..,"level":..,"event":.., (without the closing brace). */
static void lb_head(struct lbuf *b, enum config_log_level level, const char *event)
{
    char when[LOG_TIMESTAMP_LEN];
    log_timestamp(when, sizeof(when));
    lb_puts(b, "{\"ts\":\"");
    lb_puts(b, when);
    lb_puts(b, "\",\"level\":\"");
    lb_puts(b, level_name(level));
    lb_puts(b, "\",\"event\":");
    if (!event)
        event = "log";
    lb_json_string(b, event, strlen(event));
    if (log_req_id) {
        lb_puts(b, ",\"request_id\":");
        lb_json_string(b, log_req_id, strlen(log_req_id));
    }
}

/* Finishes the line and writes it with one fwrite, then releases the buffer. */
static void lb_emit(struct lbuf *b)
{
    lb_put(b, "}\n", 2);
    if (!b->failed) {
        FILE *out = atomic_load(&log_out);
        if (!out)
            out = stderr;
        /* Our own mutex rather than flockfile: same effect, and visible to ThreadSanitizer. */
        pthread_mutex_lock(&log_write_lock);
        fwrite(b->p, 1, b->len, out);
        fflush(out);
        pthread_mutex_unlock(&log_write_lock);
    }
    if (b->heap)
        free(b->p);
}

void log_vmsg(enum config_log_level level, const char *event, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    char msgbuf[512];
    char *msg = msgbuf;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(msgbuf, sizeof(msgbuf), fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        msgbuf[0] = '\0';
        n = 0;
    } else if ((size_t)n >= sizeof(msgbuf)) {
        msg = malloc((size_t)n + 1);
        if (!msg)
            return;
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
    }

    char linebuf[1024];
    struct lbuf b = {.p = linebuf, .cap = sizeof(linebuf)};
    lb_head(&b, level, event);
    lb_puts(&b, ",\"msg\":");
    lb_json_string(&b, msg, (size_t)n);
    lb_emit(&b);
    if (msg != msgbuf)
        free(msg);
}

void log_msg(enum config_log_level level, const char *event, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, event, fmt, ap);
    va_end(ap);
}

void log_json(enum config_log_level level, const char *event, const char *key, const char *json)
{
    if (!log_enabled(level))
        return;
    char linebuf[1024];
    struct lbuf b = {.p = linebuf, .cap = sizeof(linebuf)};
    lb_head(&b, level, event);
    lb_puts(&b, ",");
    if (!key)
        key = "data";
    lb_json_string(&b, key, strlen(key));
    lb_puts(&b, ":");
    lb_puts(&b, json && *json ? json : "null");
    lb_emit(&b);
}
