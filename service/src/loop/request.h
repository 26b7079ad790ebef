/*
 * The parsed request a handler gets and the response it fills: the only thing handlers know of
 * HTTP. http.c (which owns libmicrohttpd) builds a struct request, router.c picks the handler,
 * the handler fills a struct response, http.c sends it. Handlers never touch sockets, so they
 * run in unit tests with a hand-made request.
 */
#ifndef INVENTORY_REQUEST_H
#define INVENTORY_REQUEST_H

#include <stddef.h>

#include <jansson.h>

#include "errors.h"

/* Longest X-Request-Id taken from a trusted proxy (http.h says which ids are taken). */
#define REQUEST_ID_MAX 128

enum http_method {
    HTTP_OTHER = 0,
    HTTP_GET,
    HTTP_HEAD,
    HTTP_POST,
    HTTP_PUT,
    HTTP_DELETE,
    HTTP_PATCH,
    HTTP_METHOD_LAST = HTTP_PATCH /* the last one: tests loop over them all */
};

struct request {
    enum http_method method;
    const char *path;  /* URL path without query, NUL-terminated */
    const char *param; /* the {sku} or {id} path segment matched by the router; or NULL */
    size_t param_len;
    const char *body; /* NULL when there is none */
    size_t body_len;
    const char *content_type; /* header values, NULL when absent */
    const char *authorization;
    const char *idempotency_key;
    const char *request_id;    /* X-Request-Id of this request (never NULL from http.c) */
    const char *client;        /* the client address as text (see peer_loopback), or NULL */
    int peer_loopback;         /* 1 when the client address (the peer, or the client a
                                  trusted proxy names: proxy.h) is 127.0.0.0/8 or ::1 */
    int peer_trusted;          /* 1 when the peer itself is in trusted_proxies (proxy.h) */
    const char *user_header;   /* --user-header's value (any peer; identity.h decides whether it
                                  counts), NULL when absent or not configured */
    int user_header_n;         /* how many times that header came (0 when absent) */
    const char *if_none_match; /* If-None-Match, NULL when absent */
    const char *consistent;    /* the query argument "consistent" (GET of a SKU: the exact
                                  read), NULL when absent */
    int consistent_ok;         /* with consistent: the request has admin authorization
                                  (router_admin_ok; router_begin sets it) */
    const char *cursor;        /* the query arguments "cursor" and "limit" (GET /api/v1/skus), */
    const char *limit;         /* NULL when absent */
};

struct response {
    int status;                /* 0 until set */
    json_t *body;              /* owned by the response (response_free); NULL for no body */
    char *text;                /* alternative raw body (malloc'd, owned), e.g. /metrics */
    const char *content_type;  /* for text; JSON bodies are application/json */
    char *location;            /* Location header when non-NULL (malloc'd, owned):
                                  response_order_location */
    const char *allow;         /* Allow header when non-NULL (static string) */
    int retry_after;           /* Retry-After seconds when > 0 */
    int www_authenticate;      /* 1: send WWW-Authenticate: Bearer */
    const char *csp;           /* Content-Security-Policy header when non-NULL (static) */
    const char *cache_control; /* Cache-Control header when non-NULL (static or long-lived) */
    char etag[24];             /* ETag header when non-empty (a quoted strong validator) */
    int has_age;               /* 1: send Age: age_s */
    long age_s;
    void *stream; /* 200 as an event stream whose first event is this (events.h: a status
                     snapshot reference, owned: stream_free releases it) */
    void (*stream_free)(void *stream);
};

/* The token of an Authorization header value "Bearer <token>" (scheme case-insensitive, blanks
 * around the token allowed): a pointer into h, *len bytes (no NUL at its end when blanks
 * follow). NULL when h is NULL, another scheme, or no token. */
const char *request_bearer_token(const char *h, size_t *len);

/* Sets status and a JSON body (steals the reference to body). */
void response_json(struct response *res, int status, json_t *body);

/* Sets the error response of code with message (may be NULL for the default message), plus
 * Retry-After / WWW-Authenticate where the code calls for them. Returns the status. */
int response_error(struct response *res, enum error_code code, const char *message);

/* The 503 of a write that may have changed something (its request reached Redis and the reply
 * was lost, or its intent is recorded and a later step failed): unavailable with message,
 * plus "outcome": "unknown" (docs/api.md, "What a 503 means"). A plain 503 says nothing
 * changed. Returns the status. */
int response_outcome_unknown(struct response *res, const char *message);

/* Sets the Location header to /api/v1/orders/<the first id_len bytes of id>. 0, or -1 out of
 * memory (then the response has no Location). Allocated, not kept inline: an order waiting
 * in flight would carry 200 unused bytes (10,000 open connections, issue #11). */
int response_order_location(struct response *res, const char *id, int id_len);

/* Releases what the response owns and zeroes it. NULL-safe. */
void response_free(struct response *res);

#endif
