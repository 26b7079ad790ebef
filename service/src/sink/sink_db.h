/*
 * sink_db — inventory-sink's side of the database (MySQL/MariaDB through libmariadb): the
 * connection (every call bounded by the connect / read / write timeouts), the schema (created
 * when missing; docs/deployment.md lists it), a batch of log entries written in one
 * transaction, and the orders of one SKU for reconcile.
 */
#ifndef INVENTORY_SINK_DB_H
#define INVENTORY_SINK_DB_H

#include <stddef.h>

#include "sink_config.h"
#include "sink_entry.h"

typedef struct sink_db sink_db;

/* Connects to the database at url (sink_db_url_parse) with timeout_s for connecting, reading
 * and writing, sets the session to UTC, and creates the tables when missing. 0 with *out to
 * free with sink_db_free; -1 with the reason in err (the server down, bad credentials, no
 * permission for CREATE). */
int sink_db_open(const char *url, int timeout_s, sink_db **out, char *err, size_t errlen);

/* NULL-safe. */
void sink_db_free(sink_db *db);

/* Writes entries e[0..n) (only those with ok set) in one transaction: each into order_events
 * (INSERT IGNORE: unique on its stream and id, so a replay adds nothing), into orders (an
 * upsert that moves forward only: a row's status, quantity, user and updated_at change only
 * for an entry with a later stream id than the one it holds) and its order's parts into
 * order_items (sink_entry_next_item: a cart's every SKU; an upsert on (order, sku, segment), so
 * a replay adds nothing). 0 once COMMIT succeeded; -1
 * (rolled back or unknown: the caller drops the connection and retries the whole batch, which
 * is harmless) with err. *inserted gets the number of order_events rows added. */
int sink_db_write(sink_db *db, const struct sink_entry *e, int n, long long *inserted, char *err,
                  size_t errlen);

/* One row of orders for reconcile (and for the backfill: sku and created set too). */
struct sink_db_order {
    char order[SINK_ORDER_MAX + 1];
    char sku[SINK_SKU_MAX + 1];
    char created[32]; /* "YYYY-MM-DD HH:MM:SS.mmm" UTC, "" for now */
    char status[16];
    long long quantity;
    char user[SINK_USER_MAX + 1]; /* "" for NULL */
    int segment;
    char *parts; /* the parts column as read (JSON), NULL for NULL (a row written before the
                    column existed); reconcile turns it into "k:q,..." text in place */
    char *items; /* the backfill's: every part of the order, "<sku>:<k>:<q>,..." (orderlog.h;
                    a cart's from its record's items, else the SKU's parts), its order_items
                    rows; NULL: none */
};

/* Reads the orders rows of sku, sorted by order_id, into a new array *out of *n rows (free
 * with sink_db_orders_free): with version > 0 only those of that layout or a later one (no
 * order_events row of theirs carries an older version: a PUT or DELETE since reset the older
 * orders out of Redis). 0, or -1 with err. */
int sink_db_orders(sink_db *db, const char *sku, long long version, struct sink_db_order **out,
                   size_t *n, char *err, size_t errlen);

/* Writes Redis's order records o[0..n) (order, sku, segment, user, quantity, status, parts as
 * JSON text, created) into orders in one transaction: a missing row is inserted (stream id
 * 0-0, so every log entry is newer), an existing one only moves its status up (never down:
 * an entry's and a record's statuses meet in the same order of life) and gets parts when NULL;
 * each one's items into order_items in the same transaction (as sink_db_write's).
 * *written gets MariaDB's affected rows (1 per insert, 2 per change). 0, or -1 with err. */
int sink_db_backfill(sink_db *db, const struct sink_db_order *o, size_t n, long long *written,
                     char *err, size_t errlen);

/* Units in live orders (reserved, created, confirmed) of sku per segment, from order_items
 * joined with orders (so a cart's parts count in each of their SKUs): sold[k] for k < nseg,
 * the rest (segments of no current layout) summed in *beyond. With version > 0, an order of
 * sku itself counts only when none of its order_events carries an older version (as
 * sink_db_orders); a cart's parts in sku whose order is another SKU's always count. 0, or -1
 * with err. */
int sink_db_sold(sink_db *db, const char *sku, long long version, long long *sold, int nseg,
                 long long *beyond, char *err, size_t errlen);

/* Frees what sink_db_orders (or reconcile) made: each row's parts and items, then the array. */
void sink_db_orders_free(struct sink_db_order *o, size_t n);

#endif
