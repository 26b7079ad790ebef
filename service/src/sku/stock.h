/*
 * SKU administration and status: PUT (re)initialise, GET status, restock, DELETE; and the
 * status object shared with other handlers.
 */
#ifndef INVENTORY_STOCK_H
#define INVENTORY_STOCK_H

#include <jansson.h>

#include "app.h"
#include "request.h"

/* Copies req->param into sku (65 bytes) when it is a valid SKU name; otherwise fills res with
 * 400 invalid_request and returns -1. */
int stock_sku_param(const struct request *req, struct response *res, char *sku);

/* The SPEC §5 status object of sku under layout l, from its n segments' counters as
 * lua/seg_status.lua answers them (store_item_of): 1 built (*out a new reference), 0 a segment
 * is behind l's version, 2 one is ahead of it (*off: that segment), -1 a reply of another
 * shape (or n is not l's segment count, or out of memory). */
struct layout;
struct store_item;
int stock_status_json(const char *sku, const struct layout *l, const struct store_item *items,
                      int n, json_t **out, int *off);

/* The exact status read (settled first, healed when a segment is behind; docs/api.md), for
 * ar's loop, answered to done(arg, rc, status, why, out_of_step) on that loop: rc 1 with status
 * (a new reference), 0 unknown SKU, -1 failed: why says how, out_of_step 1 when Redis answered
 * but a segment is at another version than the layout (stock_status_error makes the 503).
 * ar stays the caller's (its areq_done is not called). */
struct areq;
typedef void (*stock_status_fn)(void *arg, int rc, json_t *status, const char *why,
                                int out_of_step);
void stock_status_async(struct areq *ar, const char *sku, stock_status_fn done, void *arg);

/* The 503 of a failed status read (stock_status_async's why and out_of_step) into res. */
void stock_status_error(struct response *res, const char *why, int out_of_step);

#endif
