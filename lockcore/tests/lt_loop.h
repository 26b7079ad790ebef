/*
 * The libevent loop the asynchronous tests drive from the test thread (header-only, static
 * inline): a fresh loop for each test with a 5 ms tick, so one loop turn never blocks longer
 * than that, and running it until a condition holds or a deadline passes (no sleep decides an
 * outcome).
 */
#ifndef LC_TESTS_LT_LOOP_H
#define LC_TESTS_LT_LOOP_H

#include <event2/event.h>

#include "lc_test.h"

static struct event_base *lt_base; /* the test's loop, between lt_loop_start and lt_loop_stop */
static struct event *lt_tick;

static inline void lt_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Per-test setup: a new loop with its 5 ms tick. 0 or -1. */
static inline int lt_loop_start(void)
{
    lt_base = event_base_new();
    lt_tick = lt_base ? event_new(lt_base, -1, EV_PERSIST, lt_on_tick, NULL) : NULL;
    struct timeval tv = {0, 5000};
    return lt_tick && event_add(lt_tick, &tv) == 0 ? 0 : -1;
}

/* Per-test teardown: frees the tick and the loop (free the test's clients first). */
static inline void lt_loop_stop(void)
{
    if (lt_tick)
        event_free(lt_tick);
    if (lt_base)
        event_base_free(lt_base);
    lt_tick = NULL;
    lt_base = NULL;
}

/* Runs the loop until pred(arg) or timeout_ms; returns pred's last value. */
static inline int lt_run_until(int (*pred)(void *), void *arg, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    while (!pred(arg) && tu_now_ms() < deadline)
        event_base_loop(lt_base, EVLOOP_ONCE);
    return pred(arg);
}

/* A condition that never holds: lt_run_until(lt_never, NULL, ms) runs the loop for ms. */
static inline int lt_never(void *arg)
{
    (void)arg;
    return 0;
}

#endif /* LC_TESTS_LT_LOOP_H */
