/*
 * dashboard — the handler of GET /; see dashboard.h and handlers.h.
 */
#include <stdlib.h>
#include <string.h>

#include "dashboard.h"
#include "handlers.h"

void dashboard_get(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    /* A copy: http.c hands res->text to libmicrohttpd, which frees it. */
    char *page = malloc(dashboard_html_len + 1);
    if (!page) {
        response_error(res, ERROR_INTERNAL, "out of memory");
        return;
    }
    memcpy(page, dashboard_html, dashboard_html_len + 1);
    free(res->text);
    res->text = page;
    res->content_type = "text/html; charset=utf-8";
    res->csp = DASHBOARD_CSP;
    res->status = 200;
}
