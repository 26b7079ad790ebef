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

#endif
