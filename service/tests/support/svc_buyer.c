/*
 * Buyers for the lock-backend suites (it_lock_redis, it_lock_mysql, it_lock_zookeeper; see
 * svc_fixture.h): a thread placing orders of one unit until told to stop or sold out, and a
 * thread placing one order.
 */
#include "svc_fixture.h"

void *sf_buy_ones(void *arg)
{
    sf_buyer *b = arg;
    sf_conn *c = sf_conn_open(b->port, 10000);
    while (!atomic_load(b->stop)) {
        sf_resp r = {0};
        int st = sf_order(c, b->port, b->sku, 1, &r);
        if (st == 201)
            atomic_fetch_add(&b->created, 1);
        else if (st == 409)
            b->sold_out++;
        else
            b->other++;
        sf_resp_free(&r);
        if (st == 409)
            break;
        if (st != 201)
            tu_sleep_ms(20);
    }
    sf_conn_close(c);
    return NULL;
}

void *sf_post_one(void *arg)
{
    sf_post *p = arg;
    sf_resp r = {0};
    p->status = sf_order(NULL, p->port, p->sku, 1, &r);
    snprintf(p->summary, sizeof p->summary, "%s", sf_resp_summary(&r));
    sf_resp_free(&r);
    return NULL;
}
