/*
 * orderlog — the order log (SPEC §12): one Redis stream per segment, inv:2:{S/k}:log
 * (store_seg_keys' log), appended by the very script that changes an order (commit, confirm,
 * cancel, expiry, extension), so the log and the stock never disagree. Written only with
 * --order-log; read by inventory-sink with a consumer group (ORDERLOG_GROUP), which moves it into
 * the shop's database and trims what every group has acknowledged.
 *
 * An entry's fields (XADD <key> <MAXLEN-free> * field value ...), every value a string:
 *   event     a stored status's name (order_status.h): created | reserved | confirmed | expired |
 *             cancelled; or extended (extend.lua: a hold's expiry moved, the order still
 *             reserved)
 *   order     the order id ("<32 hex>-<segment>-<sku>")
 *   sku       the SKU
 *   segment   the segment k (decimal)
 *   user      the order's user_id ("" when none)
 *   quantity  units (decimal): a multi-segment order's total, every part's
 *   parts     only a multi-segment order's (docs/design.md "Orders larger than one segment"):
 *             "k:q,k:q,..." in index order, its own segment first, summing to quantity; a
 *             one-segment order has none (its one part is segment:quantity)
 *   at        when, on the segment's Redis clock (ms since the epoch, decimal)
 *   version   the segment's version (sver) when the entry was written (decimal)
 *   expires   only an extended entry's: the hold's new expiry (Redis ms, decimal), which
 *             inventory-sink writes into orders.expires_at
 *   parts     only for a multi-segment order (docs/design.md "Orders larger than one segment"):
 *             its parts "k:q,k:q,..." in segment order; quantity is then the order's total
 *             and segment its first part's (the entry is in that segment's stream; its other
 *             parts have no entries of their own)
 *   items     only for a cart (several SKUs in one order, SPEC §17; the last field, after
 *             parts): "<sku>:<k>:<q>,..." for every part of every item, home item first (the
 *             order's own SKU, whose parts are quantity and parts above); the entry is in the
 *             home SKU's stream, its parts in other SKUs have no entries of their own. Every
 *             entry of a cart carries the same items (the commit's from ARGV, the later ones
 *             from the record: lua/include/log.lua items_text). A single-SKU order has none.
 * Entries of one order are in its segment's stream in the order the changes happened, so the
 * latest entry of an order (by stream id) carries its current status (an extended entry:
 * reserved).
 */
#ifndef INVENTORY_ORDERLOG_H
#define INVENTORY_ORDERLOG_H

#include <stddef.h>

#define ORDERLOG_KEY_SUFFIX "log"
#define ORDERLOG_GROUP "sink"

/* The longest items text (bytes, without its NUL) a cart may have: what inventory-sink reads
 * (sink_entry.h). A cart whose parts do not fit is refused before anything is written
 * (orderlog_items_add says so). */
#define ORDERLOG_ITEMS_MAX 4096

/* Appends one part of a cart's item, "<sku>:<k>:<q>" (after a ',' unless buf is empty), to
 * the NUL-terminated items text in buf (cap bytes; start with buf[0] = '\0'). Call it for every
 * part of every item, home item first, each item's parts in index order: the text the commit
 * gets (store_commit_in's items) and the record's items spell the same (items_text in
 * lua/include/log.lua). 0, or -1 with buf unchanged when the text would pass
 * ORDERLOG_ITEMS_MAX or cap - 1 bytes, or sku, k (0..STORE_SEGMENTS_MAX-1) or q (>= 1) is not
 * one a part can have. */
int orderlog_items_add(char *buf, size_t cap, const char *sku, int k, long long q);

/* Reads the next part of an items text at *pos (start: the text; a SKU may hold ':', so a part
 * is read from its right end): its SKU into sku (skucap bytes), its segment and units. 1 with
 * *pos moved past it, 0 at the end of the text, -1 when the text is not the format (an empty
 * part, a trailing ',', a bad SKU name, segment or quantity). */
int orderlog_items_next(const char **pos, char *sku, size_t skucap, int *k, long long *q);

/* The events are the stored statuses' names (order_status.h): an entry's event is the status
 * its order changed to (a commit: created or reserved); and "extended" (sink_entry.h
 * SINK_EVENT_EXTENDED), a hold's new expiry. */

#endif
