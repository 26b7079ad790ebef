/*
 * Helpers that fill a struct response, and the Authorization header's bearer token; see
 * request.h.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

const char *request_bearer_token(const char *h, size_t *len)
{
    if (!h)
        return NULL;
    while (is_ows(*h))
        h++;
    static const char scheme[] = "bearer";
    for (size_t i = 0; i < sizeof(scheme) - 1; i++) {
        char c = h[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != scheme[i])
            return NULL; /* also at the end of h */
    }
    h += sizeof(scheme) - 1;
    if (!is_ows(*h))
        return NULL;
    while (is_ows(*h))
        h++;
    size_t n = strlen(h);
    while (n > 0 && is_ows(h[n - 1]))
        n--;
    *len = n;
    return n > 0 ? h : NULL;
}

void response_json(struct response *res, int status, json_t *body)
{
    if (res->body)
        json_decref(res->body);
    res->status = status;
    res->body = body;
}

int response_error(struct response *res, enum error_code code, const char *message)
{
    response_json(res, error_http_status(code), error_json(code, message));
    if (error_retry_after(code) && res->retry_after <= 0)
        res->retry_after = 1;
    if (error_http_status(code) == 401) /* RFC 9110: every 401 names its scheme */
        res->www_authenticate = 1;
    return res->status;
}

int response_outcome_unknown(struct response *res, const char *message)
{
    response_error(res, ERROR_UNAVAILABLE, message);
    if (res->body)
        json_object_set_new(res->body, "outcome", json_string("unknown"));
    return res->status;
}

int response_order_location(struct response *res, const char *id, int id_len)
{
    static const char prefix[] = "/api/v1/orders/";
    size_t n = strnlen(id, (size_t)(id_len > 0 ? id_len : 0));
    char *l = malloc(sizeof(prefix) + n);
    if (!l)
        return -1;
    memcpy(l, prefix, sizeof(prefix) - 1);
    memcpy(l + sizeof(prefix) - 1, id, n);
    l[sizeof(prefix) - 1 + n] = '\0';
    free(res->location);
    res->location = l;
    return 0;
}

void response_free(struct response *res)
{
    if (!res)
        return;
    if (res->body)
        json_decref(res->body);
    free(res->text);
    free(res->location);
    if (res->stream && res->stream_free)
        res->stream_free(res->stream);
    memset(res, 0, sizeof(*res));
}
