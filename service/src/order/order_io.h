/*
 * The order's record and its I/O (order_io.c; docs/design.md "The order path as a state
 * machine"). Private to service/src/order/: the order machine (order_fsm.c) and the machines it
 * hands an order over to, the Idempotency-Key claim's (order_claim.c) and the per-user limit's
 * (order_limit.c), share the record below and send their Redis calls through the functions at
 * the end, which count them against the order's budget and bring the answer back as an event of
 * the order. That event goes to the order machine through the hooks it sets in o->io
 * (struct order_io_hooks), which passes it on to the machine holding the order; so this file
 * names no machine, and a machine hands the order back through the table its caller gave it
 * (order_claim.h, order_limit.h), never by name.
 */
#ifndef INVENTORY_ORDER_IO_H
#define INVENTORY_ORDER_IO_H

#include <stdint.h>

#include <hiredis/hiredis.h>
#include <lockcore/lockcore.h>
#include <lockcore/lockcore_async.h>

#include "ids.h"
#include "order_multi.h"
#include "order_walk.h"
#include "seggate.h"
#include "skucache.h"
#include "store.h"
#include "store_scripts.h"
#include "validate.h"

/*
 * What the order waits for: one state per wait, each with its handler on_<state> (the event it
 * waits for in brackets). The states an order may go to from each, and the functions that take
 * it there, are the table `states` at the end of order_fsm.c, beside the dispatcher; every
 * change of state goes through its set_state, which checks it against that table, deletes the
 * timer of a timed state it leaves and keeps the critical-section gauge (a state marked
 * "critical" is inside the segment's critical section). In the states marked [machine] the
 * order is held by a sub-machine, which has its own states and table; the order machine passes
 * it every event and it hands the order back with a result through the table of the order
 * machine's functions it was given at the hand-over (struct claim_back, struct limit_back).
 *
 *   NEW --(key)--> CLAIM_LAYOUT -> CLAIM (order_claim.c: owned, or answered: a replay, a failure)
 *        v                           v
 *      (a round) LAYOUT -> (once: the sale rules) LIMIT (order_limit.c: reserved, or refused)
 *            |   -> RECHECK -> RECHECK_LAYOUT
 *            |  walk: ACQUIRE / GATE / ROLLOUT / ROLLOUT_PAUSE / SINGLE_ACQUIRE
 *            v
 *          HOLD -> COMMIT (segmented) | ATOMIC_COMMIT | SINGLE_COMMIT -> (the walk goes on)
 *          (stock, no segment with enough) -> MULTI -> MULTI_HOLD -> MULTI -> (decided, or a round)
 *   (decided) -> REPLICA_WAIT -> LIMIT_RELEASE (failed, units reserved) -> CLAIM_SETTLE -> DONE
 */
enum ostate {
    OS_NEW,
    OS_CLAIM_LAYOUT,   /* [layout] the layout (settled), before the key claim */
    OS_CLAIM,          /* [machine] the Idempotency-Key claim (order_claim.c): claim or replay */
    OS_LIMIT,          /* [machine] the per-user limit (order_limit.c): the reservation */
    OS_LAYOUT,         /* [layout] load the layout (settling what is pending) */
    OS_RECHECK,        /* [batch] GET stock and version of every segment */
    OS_RECHECK_LAYOUT, /* [layout] after a re-check: the layout changed or may be unsettled */
    OS_GATE,           /* [timer] queued on a segment's gate (the deadline, or the wake) */
    OS_ACQUIRE,        /* [acquired] a segment lock: try (walk) or acquire with waiting */
    OS_HOLD,           /* [timer] --hold-ms, inside the critical section (critical) */
    OS_COMMIT,         /* [eval] the fenced commit, which releases the lock */
    OS_ATOMIC_COMMIT,  /* [reply] the atomic strategy's commit script (critical) */
    OS_SINGLE_ACQUIRE, /* [acquired] single-lock: the SKU's lock, with waiting */
    OS_SINGLE_COMMIT,  /* [eval] single-lock: a fenced commit of one segment under it (critical) */
    OS_ROLLOUT,        /* [layout] settle (once per request): a PUT rolling out */
    OS_ROLLOUT_PAUSE,  /* [timer] 2 ms: a PUT rolling out, settled once already */
    OS_REPLICA_WAIT,   /* [reply] WAIT after a commit: --redis-replica-acks replicas have it */
    OS_MULTI,          /* [multi] an order from several segments (order_multi.h) */
    OS_MULTI_HOLD,     /* [timer] --hold-ms under the locks of its parts (critical) */
    OS_LIMIT_RELEASE,  /* [machine] the per-user limit: a failed order gives its units back */
    OS_CLAIM_SETTLE,   /* [machine] the claim: settled after the order (IDEM_SWAP) */
    OS_CART,           /* [cart] a cart's item, its rules passed: the cart (order_cart.c) has it */
    OS_DONE,
    OS_COUNT
};

/* What happened. */
enum oevent {
    EV_START,
    EV_REPLY,    /* a command or script answered: st, reply */
    EV_BATCH,    /* the last reply of a batch is in */
    EV_ACQUIRED, /* a lock acquire ended: st, reply = the values read */
    EV_EVAL,     /* a fenced eval ended: st, reply */
    EV_TIMER,    /* the state's timer */
    EV_LAYOUT,   /* a layout step is back: o->off_rc */
    EV_MULTI,    /* a phase of the multi-segment order ended: o->multi_end */
    EV_CANCEL    /* the loop is ending (handled by the timed states; the others finish
                    when their answer comes, o->cancelled set) */
};

/* An event with what came with it. */
struct oev {
    enum oevent ev;
    lc_status st;
    const redisReply *r; /* the reply (lockcore owns it; valid during the step) */
};

/* Which layout step is in flight (run_layout). */
enum layout_job { LJ_LOAD, LJ_RELOAD, LJ_CHECK_PENDING, LJ_SETTLE };

/* The most limit groups one order reserves in (order_limit.h group_add; a cart's items each
 * name at most one). */
#define LIMIT_GROUPS_MAX 10

struct order;
struct strategy;
struct bslot;
struct idem_claim;
struct user_resv;
struct event;

/* What the I/O asks of the order machine (order_fsm.c sets o->io when it makes the order). */
struct order_io_hooks {
    /* Hands the order an event: the order machine runs the state's handler (or passes it on to
     * the sub-machine holding the order). */
    void (*event)(struct order *o, enum oevent ev, lc_status st, const redisReply *r);
    /* 1 when the call just answered carried a write a WAIT must vouch for (a claim, a per-user
     * reservation, a commit): its connection is noted (order_note_ref). */
    int (*carries_write)(const struct order *o);
    /* Reply i of a batch, answered (o->batch_ints[i] already holds its integer): what the
     * machine holding the order reads in it (a record, an order id). */
    void (*batch_reply)(struct order *o, int i, const redisReply *r);
};

/* A cart's item (docs/design.md "Carts (SPEC §17)"): an order run by the order machine up to
 * its walk, which the cart does for all its items. ready(arg, o): the item's layout, claims and
 * rules passed, o->seen allocated (the segments' stock when item_read, else zeros: the cart's
 * lock turn probes), o in OS_CART until order_item_end;
 * answered(arg, idx, out): the item ended (its answer, if any, in its own areq's response) and
 * was freed. */
struct item_back {
    void (*ready)(void *arg, struct order *o);
    void (*answered)(void *arg, int idx, enum order_outcome out);
};

/* One order in flight: all of its state (order_fsm.c owns it; the sub-machines keep theirs in
 * ic and uv). */
struct order {
    struct areq *ar;
    struct app *app;
    const struct order_io_hooks *io; /* the order machine's (order_fsm.c) */
    lc_async_client *lc;
    const struct strategy *strat;
    enum ostate state; /* the table `states` in order_fsm.c */
    struct validate_order in;
    char user[VALIDATE_PRINTABLE_MAX + 1]; /* the verified user (identity.h) when has_user */
    int has_user;
    const char *idem; /* the claim's name in the segments' idem hashes: the client's
                         Idempotency-Key (key), or the ticket's tk_field once the order claims
                         its ticket; "" when none */
    const char *key;  /* the client's Idempotency-Key, "" when none */
    /* a waiting room's ticket (docs/design.md "The ticket and the order"), when the body has one:
     * ticket_check's verdict for this SKU and verified user (ERROR_USER_REQUIRED: no verified
     * user), its number and expiry, and whether this request claims it (tk_mode) / holds it */
    int tk_err;
    uint64_t tk_n;
    int64_t tk_exp;
    int tk_mode, tk_claimed;
    int tk_switch;     /* the key's claim being deleted for the ticket's (rules_begin) */
    char tk_field[64]; /* ORDER_TICKET_FIELD_PREFIX "<n>:<exp>": never a client's key */
    struct sku_view view;
    int64_t deadline_ms;
    int settled; /* this request already settled the SKU's layout once */
    int healed;  /* ... and that settle brought every segment to the layout (layout_heal_async) */
    int64_t stale_from;    /* the view's version when a segment ahead of it made the order re-read
                              the layout: the same version again means the segment is ahead of the
                              meta itself (docs/design.md, "The healing rules") */
    int calls;             /* Redis calls this order made (order_redis_call_budget) */
    int acked;             /* the WAIT after the commit was answered (redis_replica_acks > 0) */
    int vouching, vouched; /* a replay's WAITs (multi_replay_vouch) under way / answered ok */
    int have_ref;          /* ref names the connection of the claim, then of the commit */
    lc_async_conn_ref ref; /* where the WAIT goes (lc_async_wait): on that connection only */
    int cancelled;         /* the loop is ending: finish at the next step */
    char order_id[ORDER_ID_MAX + 1];
    char token[IDS_ORDER_HEX + 1]; /* the order id's random part: one per request */
    char *record;                  /* the order's JSON text: stored in Redis, and the 201 body */
    int rules_done;                /* the sale rules were applied (window, reservation) */
    int64_t rules_version;         /* ... to the layout of this version */
    int64_t rules_rver;            /* ... and were of this rules version (rules.h) */
    int64_t rules_stale_from;      /* the rules version a segment's newer one made the order
                                      re-read (0: never): the same again after the re-read means
                                      the meta lost a PATCH the segment kept */
    int rules_read;                /* ... after reading them again, found stale in the cache */
    struct user_resv *uv; /* the per-user limit's machine (order_limit.h): a SKU with one */
    struct user_resv *gv[LIMIT_GROUPS_MAX]; /* its limit groups' (order_limit.h group_add) */
    int ngv;
    struct user_resv *lm;       /* the reservation the limit machine works on: uv or a gv[i] */
    struct user_resv *glimited; /* the group whose limit refused the order (OUT_LIMIT) */
    char *grp_text;             /* the record's "grp" (group_record_member), or NULL */
    int64_t sale_at;            /* OUT_NOT_STARTED / OUT_ENDED: the sale's start or end */
    enum order_outcome out;
    char why[256]; /* this order's last failure, for its log line (note_why) */
    struct event *timer;
    int timer_on; /* the timer is armed (or made active): set_state deletes it */
    /* the Idempotency-Key claim's machine (order_claim.h): only for a request with a key */
    struct idem_claim *ic;
    char claim_expiry[24]; /* the claim's expiry in Redis ms; "0" without a key */
    /* the walk */
    struct walk w;
    int need_layout, first, start, i, tried, waiting;
    int k;                    /* the segment being tried */
    struct seggate *gates;    /* the loop's segment gates */
    int gate_k;               /* the segment whose gate this order owns, or -1 */
    struct seggate_waiter gw; /* queued on the gate of segment o->k (state OS_GATE) */
    int woken;            /* OS_GATE: the gate was handed over (else the timer is the deadline) */
    int chain;            /* orders before this one under the same hold (GATE_CHAIN_MAX) */
    int gate_seen;        /* this round's walk passed a segment on a gate of this loop */
    int loop, nloops;     /* this order's worker loop, of how many */
    unsigned own_salt;    /* which segments are its loop's first choice (own_segment) */
    struct seglock *lock; /* its lock (or the SKU's, single-lock): seglock.h */
    int64_t t0;
    int any_short; /* single-lock */
    enum seg_result sres;
    /* layout steps */
    enum layout_job layout_job;
    int off_rc;
    /* batches of pipelined reads */
    int batch_n, batch_left, batch_failed;
    long long *batch_ints; /* per reply: its integer (or string as integer) */
    int batch_found;       /* the claim took the batch's first string reply (claim_found) */
    struct bslot *slots;
    /* orders larger than one segment (SPEC §13) */
    long long *seen; /* [SKUCACHE_MAX_SEGMENTS] stock the walk read (short segments), or NULL */
    /* a cart's item (order_cart.c): its hand-back, its index in the cart; item_read: its
     * segments' stock read into seen (the sold-out re-check's batch; else the cart probes) */
    const struct item_back *item;
    void *item_arg;
    int item_idx, item_read;
    struct multi *multi; /* the attempt (order_multi.h) */
    enum multi_phase_end multi_end;
    int multi_tries;
};

/* ---- a cart's items (order_fsm.c; order_cart.c runs them) ---- */

/* A cart's item on shadow (a copy of the cart's areq with a response of its own, which the
 * item's answer fills): SKU, quantity and ticket of it, user_id of the cart, the cart's hex token
 * and (home item only) the Idempotency-Key. NULL when out of memory; *refused 1 when the
 * request's identity was refused (401 in shadow's response; the order is freed). */
struct order *order_item_new(struct areq *shadow, const struct validate_cart_item *it,
                             const char *user_id, const char *token, const char *key,
                             const struct item_back *back, void *arg, int idx, int *refused);
/* Starts it: its layout, its claim, its rules, then ready (or answered). */
void order_item_start(struct order *o);
/* Ends an item held in OS_CART with the cart's outcome: its limit reservation released on a
 * failure, its claim settled (the home item's with order_id/record: the cart's), then answered. */
void order_item_end(struct order *o, enum order_outcome out, const char *order_id,
                    const char *record);
/* An item held in OS_CART whose SKU turned out to be at another layout version under its locks
 * (the cart holds none of them any more): its layout and stock read again, as a one-SKU order's
 * round after a stale segment, then ready again (or answered). */
void order_item_replan(struct order *o);
/* The cart's home item, held in OS_CART, with the cart's limit groups added to o->gv[]
 * (order_limit.h group_add: one per group, the items' units summed, the entry naming the home
 * SKU, so the cart's primary): reserves each in turn (the deadlines folded into its
 * claim_expiry), then ready again; or answered (OUT_LIMIT naming the group, or a failure), the
 * reservations made released. */
void order_item_groups(struct order *o);
/* The loop is ending: passes EV_CANCEL to the item. */
void order_item_cancel(struct order *o);
/* Frees an item never started. */
void order_item_free(struct order *o);
/* A multi-segment attempt's request as the order's own (order_multi.h): its SKU, layout, reads,
 * token, user, claim, rules, deadline and its segment locks' environment and options; the
 * caller sets the rest (the budget; a cart's item, its cart's request, token and deadline). */
void order_multi_req(const struct order *o, struct multi_req *rq);

/* ---- the order's I/O and bookkeeping (order_io.c), for every machine of the order ---- */

/* Keeps msg as the order's reason when st is a failure (a busy or lost lock and a lock wait's
 * timeout are outcomes, not failures). */
void order_note_why(struct order *o, lc_status st, const char *msg);

/* A random number from a per-thread generator (claim tokens, segment choice). */
uint64_t order_rnd64(void);

/* Counts n Redis calls of the order (its budget, --order-redis-call-budget). */
void order_spend(struct order *o, int n);

/* The calls the end of an order needs whatever happens: the WAIT after a commit
 * (--redis-replica-acks), the settling of its Idempotency-Key claim, the release of its per-user
 * reservation. order_over_budget keeps them out of every step's share. */
int order_end_calls(const struct order *o);

/* 1 when a step of n more Redis calls would take the order past its budget, keeping what the
 * end of the order needs; 0 when it may go on. */
int order_over_budget(const struct order *o, int n);

/* Sends a store script (one call of the budget); its answer comes back as EV_REPLY (a start
 * failure as an EV_REPLY with LC_EIO, at once). The order's state is not changed. */
void order_script(struct order *o, enum store_script id, int nkeys, const char *const *keys,
                  int nargs, const char *const *args);

/* Sends one command of argc (2 or 3) words; its answer comes back as EV_REPLY. */
void order_command(struct order *o, int argc, const char *const *argv);

/* Sends n commands (argv i: argvs[i], argc 2 or 3) in one loop turn; EV_BATCH when all are
 * answered (o->batch_ints, o->batch_failed; o->io->batch_reply reads each reply). */
void order_batch(struct order *o, int n, const char *const (*argvs)[3], int argc);

/* WAITs --redis-replica-acks (> 0) replicas on the connection that carried the order's last
 * write (its claim, reservation or commit); the answer comes back as EV_REPLY (LC_EIO when that
 * connection is not known). */
void order_replicas_wait(struct order *o);

/* Arms the order's timer: EV_TIMER after ms. order_timer_stop disarms it (nothing when off). */
void order_timer_arm(struct order *o, int ms);
void order_timer_stop(struct order *o);

/* Hands the order an event (o->io->event): from a callback, or from outside lockcore's
 * callbacks (a replay's WAITs). */
void order_event(struct order *o, enum oevent ev, lc_status st, const redisReply *r);

/* Notes the connection of the reply just in (lc_async_reply_conn) as where the order's WAIT
 * goes, when o->io->carries_write says the call carried a write. Only inside a reply's
 * callback. */
void order_note_ref(struct order *o);

/* lockcore's reply callback for an order's call (arg: the order): notes the connection and the
 * failure, and hands the order EV_REPLY. */
void order_on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg);

#endif
