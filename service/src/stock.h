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

/* Builds the SPEC §5 status object of sku from Redis. 1 with *out a new reference, 0 when the
 * SKU does not exist, -1 on a Redis error. */
int stock_status(struct app *app, const char *sku, json_t **out);

#endif
