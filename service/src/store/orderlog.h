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
 * Entries of one order are in its segment's stream in the order the changes happened, so the
 * latest entry of an order (by stream id) carries its current status (an extended entry:
 * reserved).
 */
#ifndef INVENTORY_ORDERLOG_H
#define INVENTORY_ORDERLOG_H

#define ORDERLOG_KEY_SUFFIX "log"
#define ORDERLOG_GROUP "sink"

/* The events are the stored statuses' names (order_status.h): an entry's event is the status
 * its order changed to (a commit: created or reserved); and "extended" (sink_entry.h
 * SINK_EVENT_EXTENDED), a hold's new expiry. */

#endif
