/*
 * dashboard — GET /: the live dashboard, one HTML page with its stylesheet and script inline,
 * built into the binary from service/dashboard/ (cmake/embed_dashboard.cmake generates
 * dashboard_html at build time; no CDN, nothing fetched but this service's own REST API and
 * /metrics). The page is described in docs/api.md ("Dashboard"). GET /queue: the buyer's
 * waiting room page (queue_page_html, from service/dashboard/queue.*, built the same way;
 * docs/api.md "The queue page"): static, the SKU and the buyer's token are read by its script.
 */
#ifndef INVENTORY_DASHBOARD_H
#define INVENTORY_DASHBOARD_H

#include <stddef.h>

/* The page: dashboard_html_len bytes of UTF-8 HTML, then a NUL. Generated; static data. */
extern const unsigned char dashboard_html[];
extern const size_t dashboard_html_len;
/* The queue page, as dashboard_html. */
extern const unsigned char queue_page_html[];
extern const size_t queue_page_html_len;

/* The Content-Security-Policy sent with the page: its own inline script and style only, fetches
 * to this origin only, no frames, no forms posting anywhere. */
#define DASHBOARD_CSP                                                                              \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "              \
    "frame-ancestors 'none'"

#endif
