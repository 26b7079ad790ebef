/*
 * sink_entry — one order-log entry as the sink carries it from a stream to the database
 * (fields of orderlog.h), and its parser.
 */
#ifndef INVENTORY_SINK_ENTRY_H
#define INVENTORY_SINK_ENTRY_H

#include <hiredis/hiredis.h>

#include "orderlog.h"

#define SINK_SKU_MAX 64
#define SINK_ORDER_MAX 160
#define SINK_USER_MAX 512
#define SINK_PARTS_MAX 2048                           /* the parts field's text */
#define SINK_PARTS_JSON_MAX (SINK_PARTS_MAX * 8 + 64) /* its JSON: <= 7 bytes per byte */

struct sink_entry {
    int stream;                 /* index of its stream in the sink's table */
    char sku[SINK_SKU_MAX + 1]; /* the stream's SKU and segment (the unique key's stream) */
    int segment;
    unsigned long long ms, seq; /* the stream entry id */
    char id[48];                /* the id as text, "<ms>-<seq>", for XACK */
    int ok;                     /* 1: every field parsed; 0: malformed (acked, counted, logged) */
    char event[16];             /* = the order's status after it, or "extended" (a hold's
                                   expiry moved: still reserved; SINK_EVENT_EXTENDED) */
    char order[SINK_ORDER_MAX + 1];
    char user[SINK_USER_MAX + 1];       /* "" when none */
    long long quantity;                 /* the order's total (every part's units) */
    char parts[SINK_PARTS_MAX + 1];     /* a multi-segment order's "k:q,k:q,..." (index order,
                                           its own segment first, summing to quantity); "" for
                                           a one-segment order (its one part: segment:quantity) */
    char items[ORDERLOG_ITEMS_MAX + 1]; /* a cart's "<sku>:<k>:<q>,..." (every part of every
                                           item, home item first; orderlog.h); "" for a
                                           single-SKU order */
    long long at;                       /* ms since the epoch, the segment's Redis clock */
    long long expires;                  /* an "extended" entry's new expiry (ms since the epoch,
                                           Redis's clock); 0 for every other event */
    long long version;
    char why[96]; /* what was wrong with a malformed one */
};

/* The event of a hold's extension (orderlog.h): the order stays reserved, its expiry moves to
 * the entry's `expires`. */
#define SINK_EVENT_EXTENDED "extended"

/* The status an entry leaves its order in: its event, "reserved" for an extension. */
const char *sink_entry_status(const struct sink_entry *e);

/* Parses "<ms>-<seq>". 0, or -1 when s is not a stream id. */
int sink_entry_parse_id(const char *s, unsigned long long *ms, unsigned long long *seq);

/* Fills e from one stream entry as XREADGROUP / XAUTOCLAIM answer it ([id, [field, value,
 * ...]]). Returns 0 (e->ok tells whether the fields were right; an entry whose fields are nil,
 * deleted from the stream, is not ok) or -1 when item is not an entry at all. */
int sink_entry_parse(const redisReply *item, int stream, const char *sku, int segment,
                     struct sink_entry *e);

/* The order's parts as the orders table's parts column holds them:
 * [{"segment":k,"quantity":q},...] (a one-segment order: its segment and quantity). */
void sink_entry_parts_json(const struct sink_entry *e, char *out, size_t cap);

/* The order's parts, one order_items row each (docs/deployment.md): a cart's from its items,
 * a single-SKU order's from its parts or, without, its segment and quantity (in the entry's
 * SKU). Start with *pos = NULL; each call reads one into sku (cap bytes), *k, *q. 1, 0 at the
 * end, -1 when the entry's text is not the format (sink_entry_parse has checked it: not for an
 * ok entry). */
int sink_entry_next_item(const struct sink_entry *e, const char **pos, char *sku, size_t cap,
                         int *k, long long *q);

#endif
