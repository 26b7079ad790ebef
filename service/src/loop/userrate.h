/*
 * userrate — the per-user request rate of the waiting room (SPEC §16, --user-rps N; docs/design.md
 * "Bot friction"): one verified user is held to about N requests per second on the queue routes
 * (join, place poll, challenge) and on orders of SKUs with a waiting room, in total over every
 * instance and every address the user sends from.
 *
 * The count is shared through Redis without a Redis round trip per request. Time is cut into
 * windows of one second of Redis's clock (rclock.h; the wall clock while no estimate is young
 * enough). Each instance counts, per user and window, the requests it saw (tried) and let
 * through (admitted), and decides at once from what it knows: a request is let through while
 * the user's admitted count of the window, every instance's as last learned plus this
 * instance's not yet sent, is below N, and while this instance's own admits stay below its cap.
 * Every USERRATE_FLUSH_MS the first loop sends what each user's count grew by since (one small
 * script per user, lua/user_rate.lua, all in one pipelined batch on its Redis client) and learns
 * every instance's totals back from the replies. The cap is N for a user who kept under N in the
 * window before; for one who went over (a bot), it is this instance's share of the user's
 * requests in the window before, ceil(N x tried here / tried everywhere), at least 1, so the
 * instances together let through at most about N + (instances) in each window without waiting
 * to hear from each other.
 *
 * A user who sent this instance a single request in a window costs no Redis call at all: the
 * count is sent only once it reaches 2 (an ordinary poller asks every few seconds, and one
 * request per instance moves a total by at most one per instance).
 *
 * What a user can get in one window (the bound docs/design.md "Bot friction" states): once
 * the user went over N in the window before, at most the sum of the instances' caps, N + I
 * (I instances: each cap rounds up, and is at least 1); in the first window of a burst, N plus
 * what the user sends in one flush period and a Redis round trip (while the instances have not
 * heard from each other), plus I.
 *
 * Thread-safe (lock-striped table); the flusher runs on one loop.
 */
#ifndef INVENTORY_USERRATE_H
#define INVENTORY_USERRATE_H

#include <stdint.h>

#include <lockcore/lockcore_async.h>

struct app;
struct response;
struct store;
struct userrate;
struct event_base;

/* How often the counts go to Redis (and come back). */
#define USERRATE_FLUSH_MS 25
/* The window: whole seconds of Redis's clock. */
#define USERRATE_WINDOW_MS 1000

/* A limiter of rps (>= 1) requests per second per user, its script made with lockcore.
 * NULL when out of memory or rps < 1 (no limit: every check lets through). */
struct userrate *userrate_new(int rps);

/* Frees it (its flusher stopped first). NULL-safe. */
void userrate_free(struct userrate *ur);

/* The check itself, at now_ms (Redis's clock, ms): counts the request and returns 0 when it
 * may go on, else the seconds to the next window (>= 1, the Retry-After). ur NULL: 0. */
int userrate_take(struct userrate *ur, const char *user, int64_t now_ms);

/* The rule for callers (join, place poll, challenge, orders of a SKU with a waiting room):
 * call once per request, after the user was verified (identity.h) and before anything costs
 * Redis. Returns 0 when the request may go on (always, without --user-rps or without a user:
 * user NULL or ""). Otherwise res holds the 429 rate_limited with Retry-After, the refusal is
 * counted (inventory_user_rate_refused_total) and -1 is returned: answer res as it is. Any
 * thread; no Redis call of its own. */
int user_rate_check(struct app *app, const char *user, struct response *res);

/* The flusher, on one loop: every USERRATE_FLUSH_MS, one script per user whose count grew
 * (lua/user_rate.lua on the user's key, store_user_key "urate"), pipelined on lc, at most one
 * batch in flight (a slow Redis delays the counts, never piles them up); and once a second the
 * entries of past windows are freed. Start and stop on the loop's thread; stop before lc goes.
 * ur NULL: nothing. */
int userrate_start(struct userrate *ur, struct event_base *base, lc_async_client *lc);
void userrate_stop(struct userrate *ur);

/* For tests: sends the counts now as the flusher does (on the loop's thread), and the number
 * of users tracked. */
void userrate_flush(struct userrate *ur);
long userrate_tracked(struct userrate *ur);

/* For unit tests without Redis: what a flush would send, taken as the flusher takes it (each
 * user with a count grown, the count then counted as sent), passed to fn, which runs under the
 * limiter's lock and must not call back into it (collect, then learn); and a reply learnt as
 * the flusher learns it. */
void userrate_drain(struct userrate *ur, int64_t now_ms,
                    void (*fn)(const char *user, int64_t win, int adm, int tried, void *arg),
                    void *arg);
void userrate_learn(struct userrate *ur, const char *user, int64_t win, long long adm,
                    long long tried, long long prev_tried);

#endif
