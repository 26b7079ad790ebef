/*
 * sweep — the expiry of holds and the give-backs to users' counts (SPEC §11), run by every
 * instance on its first worker loop, with no request traffic needed.
 *
 * Every second the sweeper reads the SKU registry (store_registry_key) and each SKU's layout
 * and rules; then it runs the EXPIRE script (lua/expire.lua) on each segment of every SKU with
 * holds or a limit (or that had either lately), at the latest every SWEEP_IDLE_MS and at the
 * moment the segment's next hold is due (the script says when, on Redis's clock). A hold is
 * expired in the script that takes it out of the due set, so it expires once, whichever
 * instances sweep and however often; since a hold's TTL is at least a second and a segment is
 * looked at at least every SWEEP_IDLE_MS, every hold is expired within about SWEEP_TICK_MS of
 * its expiry while any instance runs. The give-backs the script returns (the ended orders of
 * limited users, queued in the segment's give set in the same step that ended them) are applied
 * to the SKU's per-user counts and then taken off the queue: applying one twice is harmless
 * (user_release.lua removes an entry once), so a sweeper killed between the two steps loses
 * nothing. Limit groups' give-backs (the segment's ggive set, docs/design.md "Limit groups") are
 * drained the same way, after the expiry sweep of each segment of a SKU in a group (ggive_async).
 * It also keeps rclock's estimate of Redis's clock fresh (a TIME a second).
 *
 * Multi-segment orders (docs/design.md "Orders larger than one segment"): the follows an
 * expiry returns (the changes of a primary queued for its other parts, in the primary's
 * segment's follow set) are applied by follow_async (a SKU is swept for them every
 * SWEEP_FOLLOW_IDLE_MS even without holds or a limit; with follows queued it is swept like one with
 * holds for a minute); and once a second, for every SKU with a layout (and a deleted one whose cart
 * intents are left), the intents of its multi-segment orders and of the carts it is the home of
 * past their deadline + SWEEP_MULTI_MARGIN_MS on Redis's clock (lua/multi_due.lua) are healed (a
 * cart's parts each in its own SKU's segment: docs/design.md "Ending and healing a cart"):
 * part_undo.lua "primary" on the primary's segment finds the primary record → forward (the intent
 * goes); it does not, and tombstones the primary's id in the same step so it can never be written →
 * back (part_undo.lua on every other part, each tombstoned, then the intent goes). With
 * --redis-replica-acks the intent goes only once those scripts are on the replicas. Every step is
 * idempotent, so instances healing the same intent at once only repeat each other.
 */
#ifndef INVENTORY_SWEEP_H
#define INVENTORY_SWEEP_H

#include <lockcore/lockcore_async.h>

struct app;
struct areq;
struct areq_env;
struct store;

/* The sweeper's period, and the longest a segment with holds goes unswept. */
#define SWEEP_TICK_MS 50
#define SWEEP_IDLE_MS 500
/* How often each SKU's intents are looked at, and past how long after their deadline (spares
 * an order still committing on a master whose clock is behind; correctness does not rest on it:
 * the tombstones refuse whatever lands after a heal back). */
#define SWEEP_MULTI_MS 1000
#define SWEEP_MULTI_MARGIN_MS 1000
/* How often each segment of a SKU without holds or a limit is swept (for the follows a cut-off
 * cancel left queued, a multi-segment order's or a cart's; a SKU with holds or a limit every
 * SWEEP_IDLE_MS). */
#define SWEEP_FOLLOW_IDLE_MS 2000

struct sweep;

/* Makes the sweeper for env's loop (not started). NULL when out of memory. */
struct sweep *sweep_new(struct app *app, struct areq_env *env);

/* Starts it: call on env's loop. */
void sweep_start(struct sweep *sw);

/* Stops it (no new work; work in flight ends when the loop's client is freed): on the loop,
 * before its Redis client goes. */
void sweep_stop(struct sweep *sw);

/* Frees it once its loop has ended. NULL-safe. */
void sweep_free(struct sweep *sw);

/* Gives n ended orders' units back to their users' counts in sku: members are give-set members
 * of segment k (32 hex digits of the order id, then the user id). Applies them to the SKU's
 * per-user hash (user_release.lua), then, with acks > 0 (--redis-replica-acks), once a WAIT
 * acks on the connection that carried it found that hash's master's replicas have it, takes
 * them off segment k's give set. cb(arg, ok) once, on the loop: ok 0 when a step failed (the
 * members stay queued: the sweeper applies them later). members are copied. */
typedef void (*giveback_fn)(void *arg, int ok);
void giveback_async(struct store *st, lc_async_client *lc, const struct areq *ar, const char *sku,
                    int k, const char *const *members, int n, int acks, int redis_timeout_ms,
                    giveback_fn cb, void *arg);

/* The same for limit groups (docs/design.md "Limit groups"): members are ggive-set members of
 * sku's segment k ("<32 hex><user>\x1f<group>", queued by hold_end.lua for an ended order whose
 * record names its groups). The members of the group the first one names are released in that
 * group's users hash (user_release.lua: an entry is removed once, so applying one twice counts
 * once), then, after the WAIT as above, taken off the ggive set; members of other groups are left
 * for a later call, malformed ones are taken off. cb(arg, ok) once, on the loop. */
void ggive_async(struct store *st, lc_async_client *lc, const struct areq *ar, const char *sku,
                 int k, const char *const *members, int n, int acks, int redis_timeout_ms,
                 giveback_fn cb, void *arg);

/* Applies n follows of sku queued in segment k's follow set (members "<part id>|<status>",
 * written by the script that changed the primary): part_follow.lua on each part's segment (the
 * part's SKU taken from its id: a cart's parts live in other SKUs), then, when it queued a
 * give-back (a cart's item with a per-user limit), giveback_async of it in the part's SKU,
 * then, once it answered (applied, left alone, or no such part) and, with acks > 0
 * (--redis-replica-acks), a WAIT acks on the connection that carried it found the part's
 * master's replicas have it, ZREM of the member from k's follow set (a member taken off before
 * would leave a failover that lost the change with nothing to apply it again). A member that is
 * not what the scripts queue is taken off with an error logged. cb(arg, ok) once, on the loop:
 * ok 0 when a step failed (logged; the member stays queued and the sweeper applies it later).
 * members are copied. */
typedef void (*follow_fn)(void *arg, int ok);
void follow_async(struct store *st, lc_async_client *lc, const struct areq *ar, const char *sku,
                  int k, const char *const *members, int n, int acks, int redis_timeout_ms,
                  follow_fn cb, void *arg);

#endif
