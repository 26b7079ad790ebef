/*
 * Small helpers shared by the lockcore and service tests: a monotonic millisecond clock, a
 * sleep that survives signals, polling for a condition with a deadline, and per-process unique
 * names so tests sharing one Redis do not see each other's keys.
 */
#ifndef LC_TESTS_TESTUTIL_H
#define LC_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC (arbitrary origin; only differences mean anything). */
int64_t tu_now_ms(void);

/* Microseconds on CLOCK_MONOTONIC, for latencies finer than a millisecond. */
int64_t tu_now_us(void);

/* Sleeps ms milliseconds (ms <= 0 returns at once), resuming after signal interruptions. */
void tu_sleep_ms(int ms);

/* Sleeps us microseconds (us <= 0 returns at once), resuming after signal interruptions. */
void tu_sleep_us(long us);

/* Calls pred(arg) every step_ms until it returns non-zero or timeout_ms has passed. Returns the
 * last value of pred (so 0 means it timed out). pred is always called at least once, and once
 * more after the deadline so a condition that became true during the last sleep is seen. */
int tu_poll_until(int (*pred)(void *arg), void *arg, int timeout_ms, int step_ms);

/* Writes "<prefix>:<pid>:<n>" into buf (n counts up per process) and returns buf. Truncates to
 * size - 1 bytes like snprintf. */
char *tu_unique_name(char *buf, size_t size, const char *prefix);

/* Finds a TCP port on 127.0.0.1 that is free right now by binding port 0 and closing the
 * socket. Another process may take it before the caller binds it: callers retry. Returns the
 * port, or -1 (errno set) when no socket could be made. */
int tu_free_port(void);

#endif /* LC_TESTS_TESTUTIL_H */
