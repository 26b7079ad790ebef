/*
 * outcome_table — the one table of an order request's outcomes (POST /api/v1/orders), an X-macro
 * list as rules_table.h is for the sale rules and order_status.h for the stored statuses. Each
 * row says once what an outcome answers and what leads to it. From these rows follow: enum
 * order_outcome (OUT_<id>, order_walk.h); order_outcome.c's rows as data and its lookups: the
 * answer's error and message and the metric it counts (order_outcome_respond, which
 * order_fsm.c's answer() calls), the outcome a segment's result settles or ends an order with
 * (order_walk_settles, order_walk_settled_outcome, order_walk_single_end) and what the
 * Idempotency-Key claim becomes (order_idem_final). Checked against the rows by
 * test_order_outcome: the commit script's replies (order_walk_commit_verdict of each
 * STORE_COMMIT_* code of store_scripts.h), and the docs: docs/api.md's table of order answers,
 * its metrics table's labels and docs/openapi.yaml's OrderConflict / OrderUnavailable enums.
 *
 * A row: OUTCOME(id, error, message, metric, fate, idem, settles, ends, replies, extra)
 *   id       OUT_<id>
 *   error    its ERROR_* row (errors.h: the HTTP status, the wire code, Retry-After);
 *            ERROR_NONE for an order answered with the order (201, 200)
 *   message  the error body's message; NULL: the error's own message (errors.c), so a text
 *            both would say is written once
 *   metric   the METRICS_ORDER_* row it counts (metrics.h: the label of
 *            inventory_orders_total{result}); METRICS_ORDER_RESULT_COUNT: none here (the step
 *            that made the answer counted it). OUT_CREATED counts METRICS_ORDER_RESERVED for a
 *            hold (order_outcome_metric)
 *   fate     what the answer tells the client of the order: OF_PLACED (it is placed), OF_MAYBE
 *            (it may have been placed: retry with the same Idempotency-Key), OF_REFUSED (refused
 *            by the stock, the rules or the request: a 4xx, nothing changed), OF_RETRY (nothing
 *            changed, a temporary failure: a 503 with Retry-After), OF_KEY (the Idempotency-Key
 *            step answered, res holds its answer). Final: placed or refused; retryable: maybe or
 *            retry; a refusal: refused (order_outcome_final / _retryable / _refusal)
 *   idem     what the order's Idempotency-Key claim becomes (order_idem.h IDEM_FINAL_*)
 *   settles  the segment results (OUTCOME_SEG(SEG_*), order_walk.h) that decide the whole order
 *            with this outcome at once, whatever the other segments hold
 *   ends     the segment results that give this outcome when they are the last word (the
 *            single-lock attempt's, order_walk_single_end)
 *   replies  the commit script's replies (OUTCOME_REPLY(STORE_COMMIT_*), store_scripts.h) whose
 *            segment result is in settles or ends (STORE_COMMIT_SHORT: empty or short, by the
 *            stock it left); STORE_COMMIT_VERSION and STORE_COMMIT_RULES lead to none: the
 *            order reads its layout or rules again
 *   extra    docs/api.md's "also in the answer" cell: what the answer carries besides the error
 *            and message (order_fsm.c's answer() adds it)
 *
 * Adding an outcome: its row here, the code that produces it (place_done(o, OUT_<id>), or the
 * segment result or reply named in its row), its extra in answer() if it has one, and its row of
 * docs/api.md's order answers (test_order_outcome asks for it; a new error or metric label is a
 * row of errors.c or metrics.h too).
 */
#ifndef INVENTORY_OUTCOME_TABLE_H
#define INVENTORY_OUTCOME_TABLE_H

/* A set of segment results (enum seg_result) and of commit replies (STORE_COMMIT_*, 1..-10). */
#define OUTCOME_SEG(s) (1u << (s))
#define OUTCOME_REPLY(c) (1u << (1 - (c)))

/* clang-format off */
#define ORDER_OUTCOME_TABLE(OUTCOME)                                                               \
    OUTCOME(CREATED, ERROR_NONE, NULL, METRICS_ORDER_CREATED, OF_PLACED, IDEM_FINAL_ORDER,         \
            OUTCOME_SEG(SEG_DONE), 0, OUTCOME_REPLY(STORE_COMMIT_OK),                              \
            "201: the order, `Location`")                                                          \
    OUTCOME(SOLD_OUT, ERROR_SOLD_OUT, "sold out", METRICS_ORDER_SOLD_OUT, OF_REFUSED,              \
            IDEM_FINAL_DELETE, 0, OUTCOME_SEG(SEG_EMPTY), OUTCOME_REPLY(STORE_COMMIT_SHORT), "")   \
    OUTCOME(SOLD_OUT_FAST, ERROR_SOLD_OUT, "sold out", METRICS_ORDER_SOLD_OUT, OF_REFUSED,         \
            IDEM_FINAL_DELETE, 0, 0, 0, "")                                                        \
    OUTCOME(INSUFFICIENT, ERROR_INSUFFICIENT_STOCK,                                                \
            "fewer units remain than the quantity asked for", METRICS_ORDER_INSUFFICIENT,          \
            OF_REFUSED, IDEM_FINAL_DELETE, 0, OUTCOME_SEG(SEG_SHORT),                              \
            OUTCOME_REPLY(STORE_COMMIT_SHORT), "")                                                 \
    OUTCOME(LOCK_TIMEOUT, ERROR_LOCK_TIMEOUT, "every segment with stock stayed busy",              \
            METRICS_ORDER_LOCK_TIMEOUT, OF_RETRY, IDEM_FINAL_DELETE, 0, OUTCOME_SEG(SEG_BUSY), 0,  \
            "")                                                                                    \
    OUTCOME(UNAVAILABLE, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later",         \
            METRICS_ORDER_UNAVAILABLE, OF_RETRY, IDEM_FINAL_LEAVE, OUTCOME_SEG(SEG_EXPIRED),       \
            OUTCOME_SEG(SEG_ERROR),                                                                \
            OUTCOME_REPLY(STORE_COMMIT_EXPIRED) | OUTCOME_REPLY(STORE_COMMIT_DAMAGED) |            \
                OUTCOME_REPLY(STORE_COMMIT_LOG_FULL),                                              \
            "")                                                                                    \
    OUTCOME(OVER_BUDGET, ERROR_UNAVAILABLE,                                                        \
            "this order would need more Redis calls than its budget allows "                       \
            "(order_redis_call_budget); nothing was changed, retry later",                         \
            METRICS_ORDER_UNAVAILABLE, OF_RETRY, IDEM_FINAL_DELETE, 0, 0, 0, "")                   \
    OUTCOME(OUTCOME_UNKNOWN, ERROR_UNAVAILABLE,                                                    \
            "the stock store failed during the commit: the order may have been "                   \
            "placed; retry with the same Idempotency-Key to find out",                             \
            METRICS_ORDER_UNAVAILABLE, OF_MAYBE, IDEM_FINAL_LEAVE, OUTCOME_SEG(SEG_UNKNOWN), 0, 0, \
            "`\"outcome\": \"unknown\"`")                                                          \
    OUTCOME(UNKNOWN_SKU, ERROR_UNKNOWN_SKU, "no such sku", METRICS_ORDER_UNKNOWN_SKU, OF_REFUSED,  \
            IDEM_FINAL_DELETE, 0, 0, 0, "")                                                        \
    OUTCOME(NOT_STARTED, ERROR_SALE_NOT_STARTED, NULL, METRICS_ORDER_NOT_STARTED, OF_REFUSED,      \
            IDEM_FINAL_DELETE, OUTCOME_SEG(SEG_NOT_STARTED), 0,                                    \
            OUTCOME_REPLY(STORE_COMMIT_NOT_STARTED), "`sale_start`, `Retry-After`")                \
    OUTCOME(ENDED, ERROR_SALE_ENDED, NULL, METRICS_ORDER_ENDED, OF_REFUSED, IDEM_FINAL_DELETE,      \
            OUTCOME_SEG(SEG_ENDED), 0, OUTCOME_REPLY(STORE_COMMIT_ENDED), "")                      \
    OUTCOME(LIMIT, ERROR_LIMIT_EXCEEDED, NULL, METRICS_ORDER_LIMIT, OF_REFUSED, IDEM_FINAL_DELETE, \
            OUTCOME_SEG(SEG_LIMIT), 0, OUTCOME_REPLY(STORE_COMMIT_LIMIT), "`limit_per_user`")      \
    OUTCOME(USER_REQUIRED, ERROR_USER_REQUIRED,                                                    \
            "this SKU limits units per user: the order needs a verified user "                     \
            "(a bearer token, or the user header from a trusted proxy)",                           \
            METRICS_ORDER_USER_REQUIRED, OF_REFUSED, IDEM_FINAL_DELETE, 0, 0, 0, "")               \
    OUTCOME(TICKET_REQUIRED, ERROR_TICKET_REQUIRED, NULL, METRICS_ORDER_TICKET_REQUIRED,          \
            OF_REFUSED, IDEM_FINAL_DELETE, 0, 0, 0, "")                                            \
    OUTCOME(TICKET_USER_REQUIRED, ERROR_USER_REQUIRED,                                             \
            "this SKU has a waiting room: the order needs a verified user "                        \
            "(a bearer token, or the user header from a trusted proxy)",                           \
            METRICS_ORDER_USER_REQUIRED, OF_REFUSED, IDEM_FINAL_DELETE, 0, 0, 0, "")               \
    OUTCOME(TICKET_INVALID, ERROR_TICKET_INVALID, NULL, METRICS_ORDER_TICKET_INVALID, OF_REFUSED,  \
            IDEM_FINAL_DELETE, 0, 0, 0, "")                                                        \
    OUTCOME(TICKET_EXPIRED, ERROR_TICKET_EXPIRED, NULL, METRICS_ORDER_TICKET_EXPIRED, OF_REFUSED,  \
            IDEM_FINAL_DELETE, 0, 0, 0, "")                                                        \
    OUTCOME(TICKET_USED, ERROR_TICKET_USED, NULL, METRICS_ORDER_TICKET_USED, OF_REFUSED,           \
            IDEM_FINAL_DELETE, 0, 0, 0, "")                                                        \
    OUTCOME(TICKET_WRONG_USER, ERROR_TICKET_WRONG_USER, NULL, METRICS_ORDER_TICKET_WRONG_USER,     \
            OF_REFUSED, IDEM_FINAL_DELETE, 0, 0, 0, "")                                            \
    OUTCOME(TICKET_WRONG_SKU, ERROR_TICKET_WRONG_SKU, NULL, METRICS_ORDER_TICKET_WRONG_SKU,        \
            OF_REFUSED, IDEM_FINAL_DELETE, 0, 0, 0, "")                                            \
    OUTCOME(TICKET_RECLAIM, ERROR_UNAVAILABLE,                                                     \
            "the SKU's waiting room was turned on while this order ran under its "                 \
            "Idempotency-Key, and the service is ending: nothing was placed, retry with the "      \
            "ticket",                                                                              \
            METRICS_ORDER_UNAVAILABLE, OF_RETRY, IDEM_FINAL_DELETE, 0, 0, 0, "")                   \
    OUTCOME(REPLAYED, ERROR_NONE, NULL, METRICS_ORDER_REPLAYED, OF_PLACED, IDEM_FINAL_DELETE, 0,   \
            0, 0, "200: the order the key names")                                                  \
    OUTCOME(IDEM_FAILED, ERROR_NONE, NULL, METRICS_ORDER_RESULT_COUNT, OF_KEY, IDEM_FINAL_DELETE,  \
            0, 0, 0, "")
/* clang-format on */

#endif
