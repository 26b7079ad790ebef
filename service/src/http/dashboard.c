/*
 * dashboard — the handlers of GET / and GET /queue; see dashboard.h and handlers.h.
 */
#include <stdlib.h>
#include <string.h>

#include "dashboard.h"
#include "handlers.h"

/* Answers one of the built-in pages: len bytes of html (NUL after them). */
static void page_answer(struct response *res, const unsigned char *html, size_t len)
{
    /* A copy: http.c hands res->text to libmicrohttpd, which frees it. */
    char *page = malloc(len + 1);
    if (!page) {
        response_error(res, ERROR_INTERNAL, "out of memory");
        return;
    }
    memcpy(page, html, len + 1);
    free(res->text);
    res->text = page;
    res->content_type = "text/html; charset=utf-8";
    res->csp = DASHBOARD_CSP;
    res->status = 200;
}

void dashboard_get(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    page_answer(res, dashboard_html, dashboard_html_len);
}

void dashboard_queue_get(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    page_answer(res, queue_page_html, queue_page_html_len);
}
