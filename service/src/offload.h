/*
 * offload — a small pool of blocking threads for the steps that still use lockcore's blocking
 * API (layout settles, admin endpoints): they run here, never on an event-loop thread, and
 * hand their result back to the loop (areq.h: worker_offload).
 */
#ifndef INVENTORY_OFFLOAD_H
#define INVENTORY_OFFLOAD_H

struct offload;

/* A pool of n threads (n >= 1). NULL when out of resources. */
struct offload *offload_new(int n);

/* Queues job(arg) for a pool thread. 0, or -1 when out of memory or stopping (job not run). */
int offload_submit(struct offload *p, void (*job)(void *), void *arg);

/* Runs the jobs still queued and joins the threads; later submits fail (-1). The pool stays
 * valid until offload_free. Idempotent. */
void offload_stop(struct offload *p);

/* offload_stop, then frees the pool. NULL-safe. */
void offload_free(struct offload *p);

#endif
