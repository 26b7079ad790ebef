/*
 * SKU administration: PUT (re)initialise, PATCH the sale rules, restock, DELETE (their
 * handlers: handlers.h); and the check of the {sku} path parameter the SKU handlers share.
 */
#ifndef INVENTORY_STOCK_H
#define INVENTORY_STOCK_H

#include "app.h"
#include "request.h"

/* Copies req->param into sku (65 bytes) when it is a valid SKU name; otherwise fills res with
 * 400 invalid_request and returns -1. */
int stock_sku_param(const struct request *req, struct response *res, char *sku);

#endif
