/*
 * queue — the waiting room's HTTP side (SPEC §16, docs/api.md "The waiting room"):
 *
 *   POST /api/v1/skus/{sku}/queue       join (a verified user): 201 a new place, 200 the same one
 *   GET  /api/v1/skus/{sku}/queue       the caller's place, from this instance's gate snapshot
 *                                        and place cache (gate.h); a cache miss costs one
 *                                        gate_store_place
 *   GET  /api/v1/skus/{sku}/queue/info  the gate's public counters
 *
 * queue_place_run answers inside the HTTP callback when memory holds everything the answer
 * needs (no areq, no Redis); otherwise queue_place_async does, on the loop.
 */
#ifndef INVENTORY_QUEUE_H
#define INVENTORY_QUEUE_H

#include "app.h"
#include "request.h"

struct areq;

void queue_join_async(struct areq *ar);
void queue_place_run(struct app *app, const struct request *req, struct response *res);
void queue_place_async(struct areq *ar);
void queue_info_async(struct areq *ar);

#endif
