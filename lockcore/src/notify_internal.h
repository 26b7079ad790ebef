/*
 * The unlock listener (notify.c): a service that keeps one pub/sub connection per client on a
 * thread of its own and wakes the waiters of a lock name when its unlock is published. It uses
 * the client (its endpoint and command timeout); the client keeps it only as an opaque service
 * (client_internal.h), started by the first lc_notify_subscribe. The blocking lock's wait
 * (lock.c) is its user. Not public API.
 */
#ifndef LOCKCORE_NOTIFY_INTERNAL_H
#define LOCKCORE_NOTIFY_INTERNAL_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "lockcore/lockcore.h"

typedef struct lc_notify lc_notify;
typedef struct lc_sub lc_sub;

/* Subscribes to channel through the client's shared listener connection (starting the listener
 * on first use); returns once Redis has confirmed the subscription (so an unlock published after
 * this cannot be missed), waiting at most timeout_ms (and the command timeout) for that. NULL
 * when the listener is unavailable or too slow: the caller then falls back to polling. */
lc_sub *lc_notify_subscribe(lc_client *client, const char *channel, int timeout_ms);

/* Waits until a message arrived on the channel since the last wait (or the subscribe), or
 * timeout_ms passed. Returns 1 when woken by a message, 0 on timeout. */
int lc_notify_wait(lc_sub *sub, int timeout_ms);

/* Drops the subscription. NULL-safe. */
void lc_notify_unsubscribe(lc_sub *sub);

/* The listener's bookkeeping without its thread, for the unit tests (test_notify.c) and as the
 * steps lc_notify_subscribe is made of. */

/* A listener with no thread and no connection that behaves as if connected: what it would send
 * is read with lc_notify_take, what Redis would answer is fed with lc_notify_push. Freed with
 * lc_notify_free. NULL when out of memory. */
lc_notify *lc_notify_new_detached(void);

/* Stops the listener's thread (if any), closes its connection and frees it. NULL-safe. A
 * client's listener is freed by lc_client_free. */
void lc_notify_free(lc_notify *n);

/* Registers a waiter on channel (queueing a SUBSCRIBE when one is needed) without waiting.
 * NULL when out of memory. Drop it with lc_notify_unsubscribe. */
lc_sub *lc_notify_sub_begin(lc_notify *n, const char *channel);

/* 1 once Redis has confirmed the waiter's subscription (an unlock cannot be missed any more). */
int lc_notify_sub_ready(lc_sub *sub);

/* Takes the oldest queued (UN)SUBSCRIBE: 1 with *subscribe (1 or 0) and the channel name copied
 * into name, 0 when the queue is empty. */
int lc_notify_take(lc_notify *n, int *subscribe, char *name, size_t size);

/* Applies one push message (subscribe, unsubscribe or message confirmation/delivery) as the
 * listener thread does when Redis sends it. */
void lc_notify_push(lc_notify *n, const redisReply *r);

#endif
