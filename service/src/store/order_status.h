/*
 * order_status — the one table of an order's stored status (the "status" of its record in
 * inv:2:{S/k}:orders, SPEC §11) and its legal changes, an X-macro list as rules_table.h is for
 * the sale rules. From these rows follow: the C enum order_status and order_status_name /
 * order_status_parse / order_status_can / order_status_reached below; the status strings of the Lua
 * scripts (a script writes ORDER_STATUS_RESERVED and cmake/embed_lua.cmake puts 'reserved' in its
 * place, so the text reaching Redis is the same as when the script wrote the string); the order
 * log's events (orderlog.h: an event is a status's name) and the sink's check of them
 * (sink_entry.c) and reconcile; loadtest/chaos.py's live and ended sets (it reads this file).
 * Checked against the rows by test_order_status: the sink's database rank (sink_db.c RANK, a SQL
 * literal), and the docs: docs/design.md's status table and docs/api.md's lifecycle diagram and
 * status list.
 *
 * A row: STATUS(id, name, live, final, to, rank, meaning)
 *   id       ORDER_STATUS_<id> in C and in the Lua scripts
 *   name     the stored text (the record's "status", the order log's event, the API's status)
 *   live     1: the order counts against the stock (its segment's s and o) and its user's limit
 *   final    1: no change leaves it (its units are back in the stock)
 *   to       the statuses it may change to, space-separated (the scripts that make each change
 *            are named in the row's comment; a final status has none)
 *   rank     its place in the sink's database, where a status only moves up (sink_db.c RANK):
 *            every legal change goes to a higher rank
 *   meaning  docs/design.md's status table's "meaning" cell
 * A row's first line holds `STATUS(<id>, "<name>",`: embed_lua.cmake and chaos.py
 * read the rows from this text.
 *
 * The changes, as the scripts make them (service/src/store/lua/): commit_body.lua writes an order
 * created, or reserved with a TTL (a hold); cancel.lua ends created, reserved or confirmed as
 * cancelled (reserved found due: expired); confirm.lua reserved -> confirmed (found due:
 * expired); expire.lua reserved -> expired. A multi-segment order's parts follow their primary
 * (part_follow.lua) and so take the same changes.
 *
 * Adding a status: its row here (its id, name, flags, changes, rank and meaning), the scripts
 * that make or read it (naming ORDER_STATUS_<id>), its row of docs/design.md's status table, and
 * docs/api.md's status list and diagram (test_order_status asks for both).
 */
#ifndef INVENTORY_ORDER_STATUS_H
#define INVENTORY_ORDER_STATUS_H

#include <stddef.h>

/* clang-format off */
#define ORDER_STATUS_TABLE(STATUS)                                                                 \
    STATUS(CREATED, "created", 1, 0, "cancelled", 2,                                               \
           "placed without a hold (a SKU without reservation_ttl_s)")                              \
    STATUS(RESERVED, "reserved", 1, 0, "confirmed cancelled expired", 1,                           \
           "a hold: placed with expires_at, until it is confirmed, cancelled or expires")          \
    STATUS(CONFIRMED, "confirmed", 1, 0, "cancelled", 3,                                           \
           "a hold confirmed before its expires_at")                                               \
    STATUS(EXPIRED, "expired", 0, 1, "", 4,                                                        \
           "a hold not confirmed by its expires_at; its units are back")                           \
    STATUS(CANCELLED, "cancelled", 0, 1, "", 5,                                                    \
           "cancelled by DELETE; its units are back")
/* clang-format on */

enum order_status {
#define ORDER_STATUS_ENUM(id, name, live, final, to, rank, meaning) ORDER_STATUS_##id,
    ORDER_STATUS_TABLE(ORDER_STATUS_ENUM)
#undef ORDER_STATUS_ENUM
        ORDER_STATUS_N
};

/* A row as data (order_status.c). */
struct order_status_row {
    const char *name;
    int live, final;
    const char *to;
    int rank;
    const char *meaning;
};
extern const struct order_status_row order_status_rows[ORDER_STATUS_N];

/* The stored text of s ("created", ...); "?" for a value outside the enum. */
const char *order_status_name(enum order_status s);

/* The status whose stored text is the n bytes at p; -1 for none. */
int order_status_parse(const char *p, size_t n);

/* 1 when the table lets an order change from `from` to `to`, else 0. */
int order_status_can(enum order_status from, enum order_status to);

/* 1 when some legal change leads to s (confirmed, expired, cancelled: the statuses a
 * multi-segment order's part follows its primary to), else 0. */
int order_status_reached(enum order_status s);

#endif
