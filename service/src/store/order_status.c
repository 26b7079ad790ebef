/*
 * order_status — the rows of order_status.h as data, and the stored status's name, parse and
 * legal-change check read from them (the enum, the scripts' strings and the docs follow the
 * same rows).
 */
#include "order_status.h"

#include <string.h>

const struct order_status_row order_status_rows[ORDER_STATUS_N] = {
#define ORDER_STATUS_ROW(id, name, live, final, to, rank, meaning)                                 \
    [ORDER_STATUS_##id] = {name, live, final, to, rank, meaning},
    ORDER_STATUS_TABLE(ORDER_STATUS_ROW)
#undef ORDER_STATUS_ROW
};

const char *order_status_name(enum order_status s)
{
    if ((int)s < 0 || s >= ORDER_STATUS_N)
        return "?";
    return order_status_rows[s].name;
}

int order_status_parse(const char *p, size_t n)
{
    for (int i = 0; i < ORDER_STATUS_N; i++)
        if (strlen(order_status_rows[i].name) == n && memcmp(order_status_rows[i].name, p, n) == 0)
            return i;
    return -1;
}

int order_status_can(enum order_status from, enum order_status to)
{
    if ((int)from < 0 || from >= ORDER_STATUS_N || (int)to < 0 || to >= ORDER_STATUS_N)
        return 0;
    const char *w = order_status_rows[from].to;
    while (*w) {
        size_t n = strcspn(w, " ");
        if ((int)to == order_status_parse(w, n))
            return 1;
        w += n;
        w += strspn(w, " ");
    }
    return 0;
}

int order_status_reached(enum order_status s)
{
    for (int i = 0; i < ORDER_STATUS_N; i++)
        if (order_status_can((enum order_status)i, s))
            return 1;
    return 0;
}
