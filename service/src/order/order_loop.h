/*
 * order_loop — the order path's part of every event loop (order_loop.c): its gates and live
 * locks, made, closed and freed with the loop.
 */
#ifndef INVENTORY_ORDER_LOOP_H
#define INVENTORY_ORDER_LOOP_H

#include "worker.h"

/* For worker_init: every loop that runs orders gets them. */
extern const struct worker_hooks order_loop_hooks;

#endif
