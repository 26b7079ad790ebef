/*
 * exact — a SKU's exact status read (docs/api.md "The exact read"): the layout settled first,
 * then every segment's counters, healed when a segment is behind; the SPEC §5 status object
 * made from them; and the 503 of a read that failed. Shared by the one-script read's
 * fall-back (status_read.c: the snapshots' refresh, the waiting room's step), GET
 * ?consistent=1 (status.c) and the admin writes that answer with the status or vouch for the
 * segments (stock.c).
 */
#ifndef INVENTORY_EXACT_H
#define INVENTORY_EXACT_H

#include <jansson.h>

struct areq;
struct layout;
struct response;
struct store_conns;
struct store_item;

/* The SPEC §5 status object of sku under layout l, from its n segments' counters as
 * lua/seg_status.lua answers them (store_item_of): 1 built (*out a new reference), 0 a segment
 * is behind l's version, 2 one is ahead of it (*off: that segment), -1 a reply of another
 * shape (or n is not l's segment count, or out of memory). */
int exact_status_json(const char *sku, const struct layout *l, const struct store_item *items,
                      int n, json_t **out, int *off);

/* The exact status read of sku, for ar's loop, answered to done(arg, rc, status, why,
 * out_of_step) on that loop: rc 1 with status (a new reference), 0 unknown SKU, -1 failed: why
 * says how, out_of_step 1 when Redis answered but a segment is at another version than the
 * layout (exact_read_error makes the 503). Settled first, so the answer is one layout's,
 * complete; a PUT racing the read shows as a segment of another version, and the read starts
 * again (at most 5 reads). conns, when not NULL, collects the connections its commands went on
 * (a write's WAITs go there). ar stays the caller's (its areq_done is not called). */
typedef void (*exact_read_fn)(void *arg, int rc, json_t *status, const char *why, int out_of_step);
void exact_read_async(struct areq *ar, const char *sku, struct store_conns *conns,
                      exact_read_fn done, void *arg);

/* The 503 of a failed status read (exact_read_async's why and out_of_step) into res: a segment
 * out of step, with why as its message; else the store's failure (why logged, counted). */
void exact_read_error(struct response *res, const char *why, int out_of_step);

#endif
