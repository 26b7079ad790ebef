/*
 * faultpoint — named points of the order path where a fault test stops or kills this process,
 * so that each cut-off point of a protocol can be tested where it is (docs/reliability.md,
 * "Fault points"): env INVENTORY_FAULTPOINT=<name>[:kill|:stop|:fail] (kill: SIGKILL, the
 * default; stop: SIGSTOP, the test sends SIGCONT; fail: the step a faultpoint_fail guards fails,
 * every time), read once; a kill or stop point fires the first time it is reached. Unset, a point
 * costs one test of a static flag. Points: multi_lock (a multi-segment order planned from the
 * stock its walk read, before its first lock), multi_intent (a multi-segment order's intent
 * written, and WAITed with --redis-replica-acks, no part yet), multi_parts (every part but the
 * primary written, and WAITed), multi_primary (the primary written, before its WAIT, the intent not
 * yet deleted), put_meta (a PUT's layout written into meta, not yet rolled out to the segments),
 * ticket_claimed (an order's waiting-room ticket claimed, and WAITed, before its first lock);
 * a cart's (order_cart.c): cart_lock (every item handed over, no lock yet), cart_intent (the
 * intent written and WAITed, no part), cart_parts (every part but the primary written and
 * WAITed), cart_primary (the primary written and WAITed, the intent not deleted), cart_hdel
 * (just before the intent's HDEL);
 * for :fail, giveback (every give-back to users' counts fails before its first call: the ended
 * orders stay queued).
 */
#ifndef INVENTORY_FAULTPOINT_H
#define INVENTORY_FAULTPOINT_H

/* Reads INVENTORY_FAULTPOINT (at start, before any thread). */
void faultpoint_init(void);

/* Fires the fault when name is the configured point (the first time only). */
void faultpoint(const char *name);

/* 1 when name is the configured point with :fail: the caller fails the step (each time). */
int faultpoint_fail(const char *name);

#endif
