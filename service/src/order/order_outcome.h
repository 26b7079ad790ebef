/*
 * order_outcome — outcome_table.h's rows as data, and the lookups the order path makes in them:
 * what an outcome answers (its error, message and metric), what a segment's result settles or
 * ends an order with, and whether an outcome is final, retryable or a refusal. The order path
 * names an outcome (OUT_*); it never spells the status, code, message or label itself.
 */
#ifndef INVENTORY_ORDER_OUTCOME_H
#define INVENTORY_ORDER_OUTCOME_H

#include "errors.h"
#include "metrics.h"
#include "order_walk.h"

struct response;

/* What an answer tells the client of the order (outcome_table.h's fate column). */
enum outcome_fate {
    OF_PLACED,  /* the order is placed: 201, or 200 for a replay */
    OF_MAYBE,   /* it may have been placed: retry with the same Idempotency-Key */
    OF_REFUSED, /* refused by the stock, the rules or the request (4xx): nothing changed */
    OF_RETRY,   /* nothing changed, a temporary failure (503 + Retry-After): retry */
    OF_KEY      /* the Idempotency-Key step answered (its own error in the response) */
};

/* A row as data. */
struct order_outcome_row {
    const char *name; /* the id ("SOLD_OUT") */
    enum error_code error;
    const char *message; /* NULL: the error's own */
    enum metrics_order_result metric;
    enum outcome_fate fate;
    int idem;         /* enum idem_final (order_idem.h) */
    unsigned settles; /* OUTCOME_SEG() sets */
    unsigned ends;
    unsigned replies; /* OUTCOME_REPLY() set */
    const char *extra;
};
extern const struct order_outcome_row order_outcome_rows[OUT_N];

/* The row of out; a value outside the enum gets OUT_UNAVAILABLE's (a 503 that changed nothing). */
const struct order_outcome_row *order_outcome_row(enum order_outcome out);

/* The message of out's error body: the row's, else its error's own (errors.c); never NULL. */
const char *order_outcome_message(enum order_outcome out);

/* The metric out counts (hold: the order placed is a hold, counted as reserved);
 * METRICS_ORDER_RESULT_COUNT when it counts none here. */
enum metrics_order_result order_outcome_metric(enum order_outcome out, int hold);

/* 1 when out is final (placed, or refused), retryable (maybe placed, or a temporary failure),
 * a refusal (a 4xx that changed nothing); else 0. */
int order_outcome_final(enum order_outcome out);
int order_outcome_retryable(enum order_outcome out);
int order_outcome_refusal(enum order_outcome out);

/* The outcome segment result r settles the order with (ends = 0: r decides it at once), or
 * that r gives as the last word (ends = 1, and r settles nothing). Returns 1 and sets *out
 * when a row names r, else 0. */
int order_outcome_of_seg(enum seg_result r, int ends, enum order_outcome *out);

/* Counts out's metric (and metrics_sold_out_fast for OUT_SOLD_OUT_FAST) and, when it is an
 * error, fills res with its error and message. What the answer carries besides (the order, the
 * row's extra) is the caller's. hold: as order_outcome_metric. */
void order_outcome_respond(struct response *res, enum order_outcome out, int hold);

/* order_outcome_respond without the metrics: a cart's item (order_cart.c counts the cart once). */
void order_outcome_answer(struct response *res, enum order_outcome out);

#endif
