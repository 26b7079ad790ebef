/*
 * The per-user limit as its own state machine (order_limit.c; docs/design.md "Per-user limits"
 * and "The order path as a state machine"): the order machine (order_fsm.c) hands an order of a
 * SKU with a limit over to it before the walk (limit_reserve: the units against the user's
 * count) and, when the order then fails, at the end (limit_release: the units given back), and
 * gets the result back through the table it gives at the hand-over (struct limit_back), never
 * by name: this machine uses only the order's record and I/O (order_io.h). The reservation's
 * numbers are here too: the commit checks the limit itself on one Redis (in_commit), and a 409
 * names it.
 *
 * Limit groups (docs/design.md "Limit groups") are the same machine on another hash: a
 * reservation of the order's units in the group's users hash (group_reserve.lua, the group's own
 * slot, so always this two-step path, on one Redis as on a cluster), made before the walk
 * (group_add, group_reserve), its deadline folded into the commit's as the SKU's is, given back
 * when the order fails (group_release) and, once the order has ended, by the give-back queued in
 * the segment's ggive set (hold_end.lua; the sweeper's ggive_async). One order may hold several
 * (a cart: one per group it touches, with the sum of its items' units in that group): o->gv[],
 * each its own struct user_resv; o->lm is the one the machine works on at the moment.
 */
#ifndef INVENTORY_ORDER_LIMIT_H
#define INVENTORY_ORDER_LIMIT_H

#include "order_io.h"

/* The limit's states: what it waits for (the event in brackets). */
enum lstate {
    LM_IDLE,     /* nothing yet: no reservation asked (or the commit checks the limit itself) */
    LM_RESERVE,  /* [reply] the USER_RESERVE script: the units against the user's limit */
    LM_VERIFY,   /* [batch] HGET of the orders of the user's entries past their deadline */
    LM_RESOLVE,  /* [reply] the USER_RESOLVE script settling those entries as found */
    LM_WAIT,     /* [reply] WAIT on the reservation's connection (replicas first) */
    LM_BACK,     /* handed back to the order (back->limited): reserved, or the answer */
    LM_RELEASE,  /* [reply] the USER_RELEASE script: a failed order gives its units back */
    LM_RELEASED, /* handed back (back->released): the end goes on */
    LM_COUNT
};

/* What the limit hands the order back with: the order machine's functions, given at the
 * hand-over (limit_reserve, limit_release) and kept with the limit's state. */
struct limit_back {
    /* The limit is decided: OUT_CREATED the units are reserved (or the limit is gone), the walk
     * goes on; any other outcome is the answer (OUT_LIMIT, OUT_UNAVAILABLE, ...). */
    void (*limited)(struct order *o, enum order_outcome out);
    /* The failed order's units were given back (limit_release): the end goes on. */
    void (*released)(struct order *o);
};

/* A per-user reservation's state and strings (docs/design.md "Per-user limits"): allocated for
 * an order of a SKU with a limit only. */
#define USER_UNCERTAIN_MAX 8
struct user_resv {
    enum lstate state;
    const struct limit_back *back; /* the order machine's (limit_reserve, limit_release) */
    char users[STORE_KEY_MAX], meta[STORE_KEY_MAX];
    char qty[24], bound[24], margin[24];
    int reserved;   /* this request's entry is written: a failed order removes it */
    int in_commit;  /* checked by the commit itself (one Redis): no reservation before the walk */
    long long open; /* the commit's refusal: entries not known to have committed */
    int verified;   /* the entries past their deadline were looked for once */
    long long limit, held;
    int nseg; /* segments to look in: [0, nseg) (a group's: each entry's own, ens[]) */
    int n;    /* entries to look for (STORE_RESERVE_OVER) */
    char hex[USER_UNCERTAIN_MAX][IDS_ORDER_HEX + 1];
    char exp[USER_UNCERTAIN_MAX][24];
    int past[USER_UNCERTAIN_MAX]; /* past its commit deadline, or known committed */
    /* a limit group's reservation (group_add): the group, the SKU and segments the entry names
     * (its order "<hex>-<k>-<sku>", k in [0, n)), and for each entry to look for, its own */
    int group;
    long long units;
    char name[VALIDATE_SKU_MAX + 1], sku[VALIDATE_SKU_MAX + 1], nsegs[24];
    char esku[USER_UNCERTAIN_MAX][VALIDATE_SKU_MAX + 1];
    int ens[USER_UNCERTAIN_MAX];
};

/* Takes the order (state OS_LIMIT; o->uv filled): reserves its units against the user's limit;
 * back->limited when decided. */
void limit_reserve(struct order *o, const struct limit_back *back);

/* The order's event while the limit holds it (OS_LIMIT, OS_LIMIT_RELEASE). */
void limit_step(struct order *o, const struct oev *e);

/* 1 when an order ending with out must give its reservation back first (its entry is written
 * and nothing may have committed). */
int limit_to_release(const struct order *o, enum order_outcome out);

/* Takes the order (state OS_LIMIT_RELEASE): gives its units back; back->released. */
void limit_release(struct order *o, const struct limit_back *back);

/* ---- limit groups: the interface the order machine and carts use ---- */

/* Adds a reservation of units for the order's user (o->user: a verified user is required, as
 * for a SKU's limit) in limit group `group` to o->gv[] (o->ngv), for the order whose id's random
 * part is o->token and whose record (the primary's, for a multi-segment order or a cart) is
 * "<o->token>-<k>-<sku>" with k in [0, nseg): the entry names it, so a refusal can look it up.
 * Nothing is sent. A reservation of the same group not asked yet takes the units on (a cart:
 * one reservation per group, the sum of its items' units there; the entry names the first
 * call's sku and nseg). The index in o->gv[], or -1: out of memory, or LIMIT_GROUPS_MAX reached. */
int group_add(struct order *o, const char *group, const char *sku, int nseg, long long units);

/* Takes the order (state OS_LIMIT; o->gv[i] from group_add): reserves its units in the group
 * (group_reserve.lua: the entry, with a deadline the commit's folds in; WAIT with
 * --redis-replica-acks; a refusal looks the user's entries' orders up once and settles them);
 * back->limited when decided: OUT_CREATED reserved (or no such group any more: uncapped),
 * OUT_LIMIT the user is at the group's limit (o->lm is that group's reservation: its name and
 * limit), else the answer. Reserving again an entry already written keeps it (idempotent). */
void group_reserve(struct order *o, int i, const struct limit_back *back);

/* The first group reservation of the order to give back before it ends with out (written, and
 * nothing may have committed: as limit_to_release), or -1. */
int group_to_release(const struct order *o, enum order_outcome out);

/* Takes the order (state OS_LIMIT_RELEASE): gives o->gv[i]'s units back (user_release.lua on
 * the group's users hash); back->released. */
void group_release(struct order *o, int i, const struct limit_back *back);

/* The order's groups, for its record's "grp" member: a malloc'd JSON object text
 * {"<group>": units, ...} of every reservation written, or NULL when there is none (or out of
 * memory). The ending script queues one give-back per member (hold_end.lua). */
char *group_record_member(const struct order *o);

/* 1 when the limit waits on a write whose connection a WAIT must then use (the reservation). */
int limit_carries_write(const struct user_resv *uv);

/* 1 while the limit's batch of order reads is in flight (its replies are read as records). */
int limit_verifying(const struct user_resv *uv);

#endif
