/*
 * sink_db — the database side of inventory-sink (see sink_db.h). SQL is built with every
 * value escaped by mysql_real_escape_string (or a number printed by us); a batch is one
 * multi-row INSERT IGNORE into order_events and one multi-row upsert into orders, in one
 * transaction.
 */
#include "sink_db.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mysql.h>

#include "orderlog.h"

struct sink_db {
    MYSQL *conn;
};

/* The schema, one statement each (docs/deployment.md shows the same text). Text columns that
 * hold SKUs and order ids compare bytes (ascii_bin): SKU "A" and SKU "a" are two SKUs. */
static const char *const schema[] = {
    "CREATE TABLE IF NOT EXISTS orders ("
    " order_id VARCHAR(160) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " segment INT NOT NULL,"
    " user_id VARBINARY(512) NULL,"
    " quantity BIGINT NOT NULL,"
    " status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " parts TEXT CHARACTER SET ascii COLLATE ascii_bin NULL,"
    " expires_at DATETIME(3) NULL,"
    " created_at DATETIME(3) NOT NULL,"
    " updated_at DATETIME(3) NOT NULL,"
    " last_stream_ms BIGINT UNSIGNED NOT NULL,"
    " last_stream_seq BIGINT UNSIGNED NOT NULL,"
    " PRIMARY KEY (order_id),"
    " KEY orders_sku_status (sku, status)"
    ") ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS order_events ("
    " sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " segment INT NOT NULL,"
    " stream_ms BIGINT UNSIGNED NOT NULL,"
    " stream_seq BIGINT UNSIGNED NOT NULL,"
    " order_id VARCHAR(160) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " event VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " quantity BIGINT NOT NULL,"
    " user_id VARBINARY(512) NULL,"
    " at DATETIME(3) NOT NULL,"
    " version BIGINT NOT NULL,"
    " written_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),"
    " PRIMARY KEY (sku, segment, stream_ms, stream_seq),"
    " KEY order_events_order (order_id)"
    ") ENGINE=InnoDB",
};

/* The parts of every order, one row each (issue 33: a cart's parts are in several SKUs, so
 * "units sold per SKU" is a sum over this table, not over orders). Made by the sink when
 * missing (an older database gets it at the first start of this version, then filled from
 * the orders rows, below); written in the transaction of the order's orders row. */
static const char order_items_sql[] =
    "CREATE TABLE IF NOT EXISTS order_items ("
    " order_id VARCHAR(160) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " segment INT NOT NULL,"
    " quantity BIGINT NOT NULL,"
    " PRIMARY KEY (order_id, sku, segment),"
    " KEY order_items_sku (sku, segment)"
    ") ENGINE=InnoDB";
/* What the sink has done to the schema once (a name a row): order_items' first fill. */
static const char migrations_sql[] =
    "CREATE TABLE IF NOT EXISTS sink_migrations ("
    " name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " done_at DATETIME(3) NOT NULL,"
    " PRIMARY KEY (name)"
    ") ENGINE=InnoDB";
static const char order_items_done_sql[] =
    "SELECT COUNT(*) FROM sink_migrations WHERE name = 'order_items'";
static const char order_items_mark_sql[] =
    "INSERT IGNORE INTO sink_migrations (name, done_at) VALUES ('order_items', UTC_TIMESTAMP(3))";
/* The rows of the orders written before the table existed (every one single-SKU: carts came
 * with it): each part of its parts column, or its segment and quantity when NULL. */
static const char order_items_fill_sql[] =
    "INSERT IGNORE INTO order_items (order_id, sku, segment, quantity)"
    " SELECT o.order_id, o.sku, j.segment, j.quantity FROM orders o,"
    " JSON_TABLE(COALESCE(o.parts, CONCAT('[{\"segment\":', o.segment, ',\"quantity\":',"
    " o.quantity, '}]')), '$[*]' COLUMNS (segment INT PATH '$.segment',"
    " quantity BIGINT PATH '$.quantity')) j";

/* An orders table made before issue 22 gets the parts column, one made before issue 33 the
 * expires_at column: only when it lacks them, so that the sink's user needs ALTER once, for
 * that upgrade, and no more (docs/deployment.md). */
#define HAS_COLUMN_SQL(name)                                                                       \
    "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE()"              \
    " AND table_name = 'orders' AND column_name = '" name "'"
#define ADD_PARTS_SQL                                                                              \
    "ALTER TABLE orders ADD COLUMN IF NOT EXISTS"                                                  \
    " parts TEXT CHARACTER SET ascii COLLATE ascii_bin NULL AFTER status"
#define ADD_EXPIRES_SQL                                                                            \
    "ALTER TABLE orders ADD COLUMN IF NOT EXISTS expires_at DATETIME(3) NULL AFTER parts"
static const struct {
    const char *has, *add;
} added_columns[] = {{HAS_COLUMN_SQL("parts"), ADD_PARTS_SQL},
                     {HAS_COLUMN_SQL("expires_at"), ADD_EXPIRES_SQL}};

static void dberr(sink_db *db, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s (%u)", what, mysql_error(db->conn), mysql_errno(db->conn));
}

static int run(sink_db *db, const char *sql, size_t len, const char *what, char *err, size_t errlen)
{
    if (mysql_real_query(db->conn, sql, (unsigned long)len) != 0) {
        dberr(db, what, err, errlen);
        return -1;
    }
    return 0;
}

/* Adds a column of added_columns (has: its check, add: its statement) when the table lacks
 * it. 0, or -1 with err (naming the statement to run when the user may not ALTER). */
static int add_column(sink_db *db, const char *has, const char *add, char *err, size_t errlen)
{
    if (run(db, has, strlen(has), "schema", err, errlen) != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(db->conn);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    int have = row != NULL && row[0] != NULL && strcmp(row[0], "0") != 0;
    int read = row != NULL;
    mysql_free_result(res);
    if (!read) {
        dberr(db, "schema: information_schema.columns", err, errlen);
        return -1;
    }
    if (have)
        return 0;
    if (mysql_real_query(db->conn, add, (unsigned long)strlen(add)) != 0) {
        snprintf(err, errlen,
                 "schema: the orders table lacks a column and adding it failed: %s (%u); "
                 "grant ALTER to this user for one start, or run as an admin: %s",
                 mysql_error(db->conn), mysql_errno(db->conn), add);
        return -1;
    }
    return 0;
}

/* A one-number query's answer (COUNT(*)): 0 or 1 into *out. 0, or -1 with err. */
static int scalar_nonzero(sink_db *db, const char *sql, int *out, char *err, size_t errlen)
{
    if (run(db, sql, strlen(sql), "schema", err, errlen) != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(db->conn);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    int read = row != NULL;
    *out = row != NULL && row[0] != NULL && strcmp(row[0], "0") != 0;
    mysql_free_result(res);
    if (!read) {
        dberr(db, "schema: information_schema", err, errlen);
        return -1;
    }
    return 0;
}

/* Makes order_items when missing and, once per database, fills it from the orders rows
 * written before it existed, in one transaction with its mark in sink_migrations: a sink cut
 * off before the COMMIT leaves nothing marked, and the next start fills it again (INSERT
 * IGNORE: two sinks starting at once both fill, harmlessly). Needs no grant beyond the
 * tables' own (CREATE, INSERT, SELECT). 0, or -1 with err. */
static int add_order_items(sink_db *db, char *err, size_t errlen)
{
    int done = 0;
    if (run(db, order_items_sql, strlen(order_items_sql), "schema: order_items", err, errlen) !=
            0 ||
        run(db, migrations_sql, strlen(migrations_sql), "schema: sink_migrations", err, errlen) !=
            0 ||
        scalar_nonzero(db, order_items_done_sql, &done, err, errlen) != 0)
        return -1;
    if (done)
        return 0;
    static const char begin[] = "START TRANSACTION";
    if (run(db, begin, strlen(begin), "schema: order_items", err, errlen) != 0 ||
        run(db, order_items_fill_sql, strlen(order_items_fill_sql),
            "schema: order_items from the orders rows", err, errlen) != 0 ||
        run(db, order_items_mark_sql, strlen(order_items_mark_sql), "schema: sink_migrations", err,
            errlen) != 0) {
        mysql_rollback(db->conn);
        return -1;
    }
    if (mysql_commit(db->conn) != 0) {
        dberr(db, "schema: order_items commit", err, errlen);
        return -1;
    }
    return 0;
}

int sink_db_open(const char *url, int timeout_s, sink_db **out, char *err, size_t errlen)
{
    *out = NULL;
    lc_mysql_url u;
    if (sink_db_url_parse(url, &u, err, errlen) != 0)
        return -1;
    sink_db *db = calloc(1, sizeof *db);
    if (db == NULL || (db->conn = mysql_init(NULL)) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(db);
        return -1;
    }
    unsigned int t = (unsigned int)timeout_s;
    my_bool no = 0;
    mysql_options(db->conn, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_options(db->conn, MYSQL_OPT_READ_TIMEOUT, &t);
    mysql_options(db->conn, MYSQL_OPT_WRITE_TIMEOUT, &t);
    mysql_options(db->conn, MYSQL_OPT_RECONNECT, &no);
    mysql_options(db->conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (mysql_real_connect(db->conn, u.host, u.user, u.password, u.database, u.port, NULL, 0) ==
        NULL) {
        dberr(db, "connect", err, errlen);
        sink_db_free(db);
        return -1;
    }
    /* UTC for the DATETIME(3) columns; READ COMMITTED: no gap locks between two sinks. */
    static const char *const session[] = {"SET time_zone = '+00:00'",
                                          "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"};
    for (size_t i = 0; i < sizeof session / sizeof session[0]; i++)
        if (run(db, session[i], strlen(session[i]), "session settings", err, errlen) != 0) {
            sink_db_free(db);
            return -1;
        }
    for (size_t i = 0; i < sizeof schema / sizeof schema[0]; i++)
        if (run(db, schema[i], strlen(schema[i]), "schema", err, errlen) != 0) {
            sink_db_free(db);
            return -1;
        }
    for (size_t i = 0; i < sizeof added_columns / sizeof added_columns[0]; i++)
        if (add_column(db, added_columns[i].has, added_columns[i].add, err, errlen) != 0) {
            sink_db_free(db);
            return -1;
        }
    if (add_order_items(db, err, errlen) != 0) {
        sink_db_free(db);
        return -1;
    }
    if (mysql_autocommit(db->conn, 0) != 0) {
        dberr(db, "autocommit off", err, errlen);
        sink_db_free(db);
        return -1;
    }
    *out = db;
    return 0;
}

void sink_db_free(sink_db *db)
{
    if (db == NULL)
        return;
    mysql_close(db->conn);
    free(db);
}

/* A growing SQL text. */
struct sql {
    char *buf;
    size_t len, cap;
    int oom;
};

static void sql_reserve(struct sql *s, size_t more)
{
    if (s->oom || s->len + more + 1 <= s->cap)
        return;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + more + 1)
        cap *= 2;
    char *b = realloc(s->buf, cap);
    if (b == NULL) {
        s->oom = 1;
        return;
    }
    s->buf = b;
    s->cap = cap;
}

static void sql_add(struct sql *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sql_add(struct sql *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        s->oom = 1;
        return;
    }
    sql_reserve(s, (size_t)n);
    if (s->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

/* Appends 'text' escaped, or NULL when null_if_empty and text is "". */
static void sql_str(struct sql *s, MYSQL *conn, const char *text, int null_if_empty)
{
    size_t n = strlen(text);
    if (null_if_empty && n == 0) {
        sql_add(s, "NULL");
        return;
    }
    sql_reserve(s, 2 * n + 2);
    if (s->oom)
        return;
    s->buf[s->len++] = '\'';
    s->len += mysql_real_escape_string(conn, s->buf + s->len, text, (unsigned long)n);
    s->buf[s->len++] = '\'';
    s->buf[s->len] = '\0';
}

/* 'YYYY-MM-DD HH:MM:SS.mmm' (UTC) of ms since the epoch. */
static void sql_time(struct sql *s, long long ms)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    sql_add(s, "'%04d-%02d-%02d %02d:%02d:%02d.%03lld'", tm.tm_year + 1900, tm.tm_mon + 1,
            tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

/* Orders rows in stream order per order (sorting by order, then id), which also takes row
 * locks in one order in every sink: two sinks' transactions do not deadlock on each other. */
static int by_order(const void *a, const void *b)
{
    const struct sink_entry *x = *(const struct sink_entry *const *)a;
    const struct sink_entry *y = *(const struct sink_entry *const *)b;
    int c = strcmp(x->order, y->order);
    if (c != 0)
        return c;
    if (x->ms != y->ms)
        return x->ms < y->ms ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* "the entry is newer than what the row holds", inside ON DUPLICATE KEY UPDATE. */
#define NEWER                                                                                      \
    "(VALUES(last_stream_ms) > last_stream_ms OR (VALUES(last_stream_ms) = last_stream_ms AND "    \
    "VALUES(last_stream_seq) > last_stream_seq))"

/* A status's place in an order's life: every change moves it up (reserved -> confirmed ->
 * cancelled, created -> cancelled, reserved -> expired), so a row never moves down, whichever
 * of a log entry and a backfill from Redis's record came first. */
#define RANK(x) "FIELD(" x ", 'reserved', 'created', 'confirmed', 'expired', 'cancelled')"
/* The new status (VALUES) against the row's: not lower, higher. */
#define NOT_DOWN RANK("VALUES(status)") " >= " RANK("status")
#define UP RANK("VALUES(status)") " > " RANK("status")

int sink_db_write(sink_db *db, const struct sink_entry *e, int n, long long *inserted, char *err,
                  size_t errlen)
{
    *inserted = 0;
    const struct sink_entry **rows = calloc((size_t)(n > 0 ? n : 1), sizeof *rows);
    if (rows == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (e[i].ok)
            rows[m++] = &e[i];
    if (m == 0) {
        free(rows);
        return 0;
    }
    qsort(rows, (size_t)m, sizeof *rows, by_order);
    struct sql ev = {0}, up = {0}, it = {0};
    sql_add(&it, "INSERT INTO order_items (order_id, sku, segment, quantity) VALUES ");
    int items = 0;
    sql_add(&ev, "INSERT IGNORE INTO order_events (sku, segment, stream_ms, stream_seq, order_id, "
                 "event, quantity, user_id, at, version) VALUES ");
    sql_add(&up, "INSERT INTO orders (order_id, sku, segment, user_id, quantity, status, parts, "
                 "expires_at, created_at, updated_at, last_stream_ms, last_stream_seq) VALUES ");
    static char parts[SINK_PARTS_JSON_MAX];
    for (int i = 0; i < m; i++) {
        const struct sink_entry *r = rows[i];
        sql_add(&ev, "%s(", i ? "," : "");
        sql_str(&ev, db->conn, r->sku, 0);
        sql_add(&ev, ",%d,%llu,%llu,", r->segment, r->ms, r->seq);
        sql_str(&ev, db->conn, r->order, 0);
        sql_add(&ev, ",");
        sql_str(&ev, db->conn, r->event, 0);
        sql_add(&ev, ",%lld,", r->quantity);
        sql_str(&ev, db->conn, r->user, 1);
        sql_add(&ev, ",");
        sql_time(&ev, r->at);
        sql_add(&ev, ",%lld)", r->version);

        sql_add(&up, "%s(", i ? "," : "");
        sql_str(&up, db->conn, r->order, 0);
        sql_add(&up, ",");
        sql_str(&up, db->conn, r->sku, 0);
        sql_add(&up, ",%d,", r->segment);
        sql_str(&up, db->conn, r->user, 1);
        sql_add(&up, ",%lld,", r->quantity);
        sql_str(&up, db->conn, sink_entry_status(r), 0);
        sql_add(&up, ",");
        sink_entry_parts_json(r, parts, sizeof parts);
        sql_str(&up, db->conn, parts, 0);
        sql_add(&up, ",");
        if (r->expires > 0) /* an extension's new expiry; any other entry leaves it */
            sql_time(&up, r->expires);
        else
            sql_add(&up, "NULL");
        sql_add(&up, ",");
        sql_time(&up, r->at);
        sql_add(&up, ",");
        sql_time(&up, r->at);
        sql_add(&up, ",%llu,%llu)", r->ms, r->seq);

        /* the order's parts (every entry of an order names the same ones): once per order */
        if (i > 0 && strcmp(rows[i - 1]->order, r->order) == 0)
            continue;
        const char *pos = NULL;
        char sku[SINK_SKU_MAX + 1];
        int k;
        long long q;
        while (sink_entry_next_item(r, &pos, sku, sizeof sku, &k, &q) == 1) {
            sql_add(&it, "%s(", items++ ? "," : "");
            sql_str(&it, db->conn, r->order, 0);
            sql_add(&it, ",");
            sql_str(&it, db->conn, sku, 0);
            sql_add(&it, ",%d,%lld)", k, q);
        }
    }
    /* a replay writes the same rows again: a row's quantity is the order's, whichever entry */
    sql_add(&it, " ON DUPLICATE KEY UPDATE quantity = VALUES(quantity)");
    /* Assignments run left to right on the updated row: every column guarded by NEWER comes
     * before last_stream_seq (guarded too), and last_stream_ms last, as GREATEST (a newer id
     * never has a smaller ms), so NEWER still compares against the old id where it is used. */
    sql_add(&up, " ON DUPLICATE KEY UPDATE"
                 " created_at = LEAST(created_at, VALUES(created_at)),"
                 " status = IF(" NEWER " AND " NOT_DOWN ", VALUES(status), status),"
                 " quantity = IF(" NEWER ", VALUES(quantity), quantity),"
                 " parts = IF(" NEWER " OR parts IS NULL, VALUES(parts), parts),"
                 " expires_at = IF(" NEWER " AND VALUES(expires_at) IS NOT NULL,"
                 " VALUES(expires_at), expires_at),"
                 " user_id = IF(" NEWER ", VALUES(user_id), user_id),"
                 " updated_at = IF(" NEWER ", VALUES(updated_at), updated_at),"
                 " last_stream_seq = IF(" NEWER ", VALUES(last_stream_seq), last_stream_seq),"
                 " last_stream_ms = GREATEST(last_stream_ms, VALUES(last_stream_ms))");
    free(rows);
    int rc = -1;
    if (ev.oom || up.oom || it.oom) {
        snprintf(err, errlen, "out of memory building the batch");
    } else if (run(db, ev.buf, ev.len, "insert order_events", err, errlen) == 0) {
        *inserted = (long long)mysql_affected_rows(db->conn);
        if (run(db, up.buf, up.len, "upsert orders", err, errlen) == 0 &&
            (items == 0 || run(db, it.buf, it.len, "upsert order_items", err, errlen) == 0)) {
            if (mysql_commit(db->conn) != 0)
                dberr(db, "commit", err, errlen);
            else
                rc = 0;
        }
    }
    if (rc != 0)
        mysql_rollback(db->conn); /* best effort: the caller drops the connection anyway */
    free(ev.buf);
    free(up.buf);
    free(it.buf);
    return rc;
}

int sink_db_backfill(sink_db *db, const struct sink_db_order *o, size_t n, long long *written,
                     char *err, size_t errlen)
{
    *written = 0;
    if (n == 0)
        return 0;
    struct sql ins = {0};
    sql_add(&ins, "INSERT INTO orders (order_id, sku, segment, user_id, quantity, status, parts, "
                  "created_at, updated_at, last_stream_ms, last_stream_seq) VALUES ");
    for (size_t i = 0; i < n; i++) {
        sql_add(&ins, "%s(", i ? "," : "");
        sql_str(&ins, db->conn, o[i].order, 0);
        sql_add(&ins, ",");
        sql_str(&ins, db->conn, o[i].sku, 0);
        sql_add(&ins, ",%d,", o[i].segment);
        sql_str(&ins, db->conn, o[i].user, 1);
        sql_add(&ins, ",%lld,", o[i].quantity);
        sql_str(&ins, db->conn, o[i].status, 0);
        sql_add(&ins, ",");
        sql_str(&ins, db->conn, o[i].parts ? o[i].parts : "", 1);
        sql_add(&ins, ",");
        if (o[i].created[0] != '\0')
            sql_str(&ins, db->conn, o[i].created, 0);
        else
            sql_add(&ins, "UTC_TIMESTAMP(3)");
        sql_add(&ins, ",UTC_TIMESTAMP(3),0,0)");
    }
    /* A row the log wrote keeps its ids (stream id 0-0 here: any entry is newer than a row
     * backfilled) and only moves up (RANK); updated_at first, while status is the old one. */
    sql_add(&ins, " ON DUPLICATE KEY UPDATE"
                  " updated_at = IF(" UP ", VALUES(updated_at), updated_at),"
                  " parts = IF(parts IS NULL, VALUES(parts), parts),"
                  " status = IF(" UP ", VALUES(status), status)");
    /* each order's parts (its items text: a cart's every SKU), as the log's entries write them */
    struct sql it = {0};
    int items = 0;
    sql_add(&it, "INSERT INTO order_items (order_id, sku, segment, quantity) VALUES ");
    for (size_t i = 0; i < n; i++) {
        const char *pos = o[i].items ? o[i].items : "";
        char sku[SINK_SKU_MAX + 1];
        int k;
        long long q;
        while (orderlog_items_next(&pos, sku, sizeof sku, &k, &q) == 1) {
            sql_add(&it, "%s(", items++ ? "," : "");
            sql_str(&it, db->conn, o[i].order, 0);
            sql_add(&it, ",");
            sql_str(&it, db->conn, sku, 0);
            sql_add(&it, ",%d,%lld)", k, q);
        }
    }
    sql_add(&it, " ON DUPLICATE KEY UPDATE quantity = VALUES(quantity)");
    int rc = -1;
    if (ins.oom || it.oom)
        snprintf(err, errlen, "out of memory building the backfill");
    else if (run(db, ins.buf, ins.len, "backfill orders", err, errlen) == 0) {
        /* affected rows of orders: 1 per row inserted, 2 per row changed, 0 per row left */
        long long a = (long long)mysql_affected_rows(db->conn);
        if (items > 0 && run(db, it.buf, it.len, "backfill order_items", err, errlen) != 0) {
            /* err says which; rolled back below */
        } else if (mysql_commit(db->conn) != 0) {
            dberr(db, "commit", err, errlen);
        } else {
            *written = a;
            rc = 0;
        }
    }
    if (rc != 0)
        mysql_rollback(db->conn);
    free(ins.buf);
    free(it.buf);
    return rc;
}

int sink_db_orders(sink_db *db, const char *sku, long long version, struct sink_db_order **out,
                   size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    struct sql q = {0};
    sql_add(&q, "SELECT order_id, status, quantity, user_id, segment, parts FROM orders o WHERE "
                "sku = ");
    sql_str(&q, db->conn, sku, 0);
    if (version > 0)
        sql_add(&q,
                " AND NOT EXISTS (SELECT 1 FROM order_events e WHERE e.order_id = o.order_id"
                " AND e.version < %lld)",
                version);
    sql_add(&q, " ORDER BY order_id");
    if (q.oom) {
        free(q.buf);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = run(db, q.buf, q.len, "select orders", err, errlen);
    free(q.buf);
    if (rc != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(db->conn);
    if (res == NULL) {
        dberr(db, "select orders", err, errlen);
        return -1;
    }
    size_t rows = (size_t)mysql_num_rows(res);
    struct sink_db_order *o = calloc(rows ? rows : 1, sizeof *o);
    if (o == NULL) {
        mysql_free_result(res);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    MYSQL_ROW row;
    size_t i = 0;
    while ((row = mysql_fetch_row(res)) != NULL && i < rows) {
        snprintf(o[i].order, sizeof o[i].order, "%s", row[0] ? row[0] : "");
        snprintf(o[i].status, sizeof o[i].status, "%s", row[1] ? row[1] : "");
        o[i].quantity = row[2] ? strtoll(row[2], NULL, 10) : 0;
        snprintf(o[i].user, sizeof o[i].user, "%s", row[3] ? row[3] : "");
        o[i].segment = row[4] ? atoi(row[4]) : -1;
        o[i].parts = row[5] ? strdup(row[5]) : NULL;
        i++;
    }
    mysql_free_result(res);
    mysql_commit(db->conn); /* end the read's transaction (autocommit is off) */
    *out = o;
    *n = i;
    return 0;
}

int sink_db_sold(sink_db *db, const char *sku, long long version, long long *sold, int nseg,
                 long long *beyond, char *err, size_t errlen)
{
    for (int k = 0; k < nseg; k++)
        sold[k] = 0;
    *beyond = 0;
    struct sql q = {0};
    sql_add(&q, "SELECT i.segment, SUM(i.quantity) FROM order_items i JOIN orders o ON"
                " o.order_id = i.order_id WHERE i.sku = ");
    sql_str(&q, db->conn, sku, 0);
    sql_add(&q, " AND o.status IN ('reserved', 'created', 'confirmed')");
    if (version > 0) {
        sql_add(&q, " AND (o.sku <> ");
        sql_str(&q, db->conn, sku, 0);
        sql_add(&q,
                " OR NOT EXISTS (SELECT 1 FROM order_events e WHERE e.order_id = o.order_id"
                " AND e.version < %lld))",
                version);
    }
    sql_add(&q, " GROUP BY i.segment");
    if (q.oom) {
        free(q.buf);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = run(db, q.buf, q.len, "select order_items", err, errlen);
    free(q.buf);
    if (rc != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(db->conn);
    if (res == NULL) {
        dberr(db, "select order_items", err, errlen);
        return -1;
    }
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        long long k = row[0] ? strtoll(row[0], NULL, 10) : -1;
        long long units = row[1] ? strtoll(row[1], NULL, 10) : 0;
        if (k >= 0 && k < nseg)
            sold[k] += units;
        else
            *beyond += units;
    }
    mysql_free_result(res);
    mysql_commit(db->conn); /* end the read's transaction (autocommit is off) */
    return 0;
}

void sink_db_orders_free(struct sink_db_order *o, size_t n)
{
    for (size_t i = 0; o != NULL && i < n; i++) {
        free(o[i].parts);
        free(o[i].items);
    }
    free(o);
}
