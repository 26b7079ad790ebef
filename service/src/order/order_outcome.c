/*
 * order_outcome — outcome_table.h's rows as data and their lookups (order_outcome.h).
 */
#include "order_outcome.h"

#include <stddef.h>

#include "order_idem.h"
#include "request.h"
#include "store_scripts.h"

const struct order_outcome_row order_outcome_rows[OUT_N] = {
#define OUTCOME_ROW(id, error, message, metric, fate, idem, settles, ends, replies, extra)         \
    [OUT_##id] = {#id, error, message, metric, fate, idem, settles, ends, replies, extra},
    ORDER_OUTCOME_TABLE(OUTCOME_ROW)
#undef OUTCOME_ROW
};

const struct order_outcome_row *order_outcome_row(enum order_outcome out)
{
    return (unsigned)out < OUT_N ? &order_outcome_rows[out] : &order_outcome_rows[OUT_UNAVAILABLE];
}

const char *order_outcome_message(enum order_outcome out)
{
    const struct order_outcome_row *row = order_outcome_row(out);
    return row->message ? row->message : error_default_message(row->error);
}

enum metrics_order_result order_outcome_metric(enum order_outcome out, int hold)
{
    enum metrics_order_result m = order_outcome_row(out)->metric;
    return m == METRICS_ORDER_CREATED && hold ? METRICS_ORDER_RESERVED : m;
}

int order_outcome_final(enum order_outcome out)
{
    enum outcome_fate f = order_outcome_row(out)->fate;
    return f == OF_PLACED || f == OF_REFUSED;
}

int order_outcome_retryable(enum order_outcome out)
{
    enum outcome_fate f = order_outcome_row(out)->fate;
    return f == OF_MAYBE || f == OF_RETRY;
}

int order_outcome_refusal(enum order_outcome out)
{
    return order_outcome_row(out)->fate == OF_REFUSED;
}

int order_outcome_of_seg(enum seg_result r, int ends, enum order_outcome *out)
{
    for (int i = 0; i < OUT_N; i++) {
        const struct order_outcome_row *row = &order_outcome_rows[i];
        if ((ends ? row->ends : row->settles) & OUTCOME_SEG(r)) {
            *out = (enum order_outcome)i;
            return 1;
        }
    }
    return 0;
}

void order_outcome_respond(struct response *res, enum order_outcome out, int hold)
{
    const struct order_outcome_row *row = order_outcome_row(out);
    if (out == OUT_SOLD_OUT_FAST)
        metrics_sold_out_fast();
    if (row->metric != METRICS_ORDER_RESULT_COUNT)
        metrics_order(order_outcome_metric(out, hold));
    order_outcome_answer(res, out);
}

void order_outcome_answer(struct response *res, enum order_outcome out)
{
    const struct order_outcome_row *row = order_outcome_row(out);
    if (row->error != ERROR_NONE)
        response_error(res, row->error, order_outcome_message(out));
}
