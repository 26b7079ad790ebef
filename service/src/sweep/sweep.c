/*
 * The expiry sweeper and the give-backs; see sweep.h. Everything here runs on one worker loop:
 * no locks. The sweeper owns itself from sweep_new to sweep_free; each call in flight holds a
 * struct call naming the SKU entry it is for, and an entry is freed only when nothing is in
 * flight for it (entries are pointed to, never moved).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "app.h"
#include "areq.h"
#include "clock.h"
#include "faultpoint.h"
#include "ids.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "order_id.h"
#include "rclock.h"
#include "skucache.h"
#include "order_status.h"
#include "store.h"
#include "store_scripts.h"
#include "sweep.h"
#include "validate.h"

/* Holds one EXPIRE call expires at most, give-backs it returns at most, SKUs the sweeper keeps,
 * and calls it has in flight at once. */
#define SWEEP_BATCH 256
#define SWEEP_GIVE_BATCH 128
#define SWEEP_FOLLOW_BATCH 128
#define SWEEP_MULTI_BATCH 64
#define SWEEP_MAX_SKUS 1000000
#define SWEEP_MAX_INFLIGHT 64
/* How long a SKU is swept after its last sign of holds or give-backs (its rules may have been
 * PATCHed to none while holds were live). */
#define SWEEP_LINGER_MS 60000
#define SWEEP_REGISTRY_MS 1000
/* Parts of one multi-segment order or cart the healer handles, and SKUs of one cart (more: the
 * intent is left, logged; a cart has at most ORDER_CART_MAX = 10 items). */
#define HEAL_PARTS_MAX 1024
#define HEAL_SKUS_MAX 16

/* ---- give-backs ---- */

struct giveback {
    struct store *st;
    lc_async_client *lc;
    const struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    int k, n;
    char **members;
    int acks, redis_timeout_ms; /* the WAIT before the members are taken off (0: none) */
    int group;                  /* ggive_async: members of the ggive set, for this group */
    giveback_fn cb;
    void *arg;
};

static void giveback_end(struct giveback *g, int ok)
{
    g->cb(g->arg, ok);
    for (int i = 0; i < g->n; i++)
        free(g->members[i]);
    free(g->members);
    free(g);
}

static void on_give_dequeued(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct giveback *g = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER)
        log_msg(CONFIG_LOG_WARN, "giveback_failed",
                "sku %s segment %d: give-backs applied, not yet taken off the queue (%s): the "
                "sweeper does it later",
                g->sku, g->k, st != LC_OK ? errstr : "unexpected reply");
    giveback_end(g, st == LC_OK && r && r->type == REDIS_REPLY_INTEGER);
}

static void give_dequeue(struct giveback *g);

static void on_give_acked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct giveback *g = arg;
    long long got = store_reply_acks(st, r);
    if (got < g->acks) {
        log_msg(CONFIG_LOG_WARN, "giveback_failed",
                "sku %s segment %d: give-backs applied, on %lld of %d replicas (%s): left "
                "queued, the sweeper applies them again",
                g->sku, g->k, got < 0 ? 0 : got, g->acks, st != LC_OK ? errstr : "WAIT timed out");
        giveback_end(g, 0);
        return;
    }
    give_dequeue(g);
}

static void on_give_released(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct giveback *g = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        log_msg(CONFIG_LOG_WARN, "giveback_failed",
                "sku %s segment %d: giving units back to users: %s (left queued)", g->sku, g->k,
                st != LC_OK ? errstr : "unexpected reply");
        giveback_end(g, 0);
        return;
    }
    if (r->element[1]->integer > 0)
        log_msg(CONFIG_LOG_ERROR, "user_entries_damaged",
                "sku %s: %lld users' entries are not what the service writes: left alone", g->sku,
                r->element[1]->integer);
    /* On the users' hash's master's replicas before the members go (a WAIT on the connection
     * that carried the script): a failover that lost the release would otherwise keep the
     * ended orders in their users' counts for good, their give-backs already taken off
     * (chaos --cluster --short seed 18835: 4 expired holds left in their users' entries). The
     * release is idempotent: applied again, it changes nothing. */
    if (g->acks > 0) {
        lc_async_conn_ref ref;
        if (lc_async_reply_conn(g->lc, &ref) != 0) {
            on_give_acked(LC_EIO, NULL, "the connection of the script is not known", g);
            return;
        }
        store_replica_wait_ref_async(g->lc, &ref, g->acks, g->redis_timeout_ms, on_give_acked, g);
        return;
    }
    give_dequeue(g);
}

static void give_dequeue(struct giveback *g)
{
    struct seg_keys sk;
    store_seg_keys(g->sku, g->k, &sk);
    const char **argv = calloc((size_t)g->n + 2, sizeof(*argv));
    if (!argv) {
        giveback_end(g, 0);
        return;
    }
    argv[0] = "ZREM";
    argv[1] = g->group ? sk.ggive : sk.give;
    for (int i = 0; i < g->n; i++)
        argv[2 + i] = g->members[i];
    store_command_async(g->lc, g->ar, g->n + 2, argv, on_give_dequeued, g);
    free(argv);
}

/* giveback_async, or with group ggive_async: the members' (user, hex) pairs are released in
 * the SKU's users hash, or in the users hash of the group the first well-formed member names
 * (the members of other groups are left for a later call). */
static void give_start(struct store *st, lc_async_client *lc, const struct areq *ar,
                       const char *sku, int k, const char *const *members, int n, int acks,
                       int redis_timeout_ms, int group, giveback_fn cb, void *arg)
{
    if (faultpoint_fail("giveback")) { /* tests: the give-backs stay queued */
        cb(arg, 0);
        return;
    }
    struct giveback *g = calloc(1, sizeof(*g));
    const char **args = calloc((size_t)n * 2 + 1, sizeof(*args));
    char(*hex)[33] = calloc((size_t)n + 1, sizeof(*hex));
    if (g)
        g->members = calloc((size_t)n + 1, sizeof(*g->members));
    if (!g || !g->members || !args || !hex) {
        if (g)
            free(g->members);
        free(g);
        free(args);
        free(hex);
        cb(arg, 0);
        return;
    }
    *g = (struct giveback){.st = st,
                           .lc = lc,
                           .ar = ar,
                           .k = k,
                           .cb = cb,
                           .arg = arg,
                           .members = g->members,
                           .acks = acks,
                           .redis_timeout_ms = redis_timeout_ms,
                           .group = group};
    snprintf(g->sku, sizeof(g->sku), "%s", sku);
    int na = 0;
    char gname[VALIDATE_SKU_MAX + 1] = "";
    char(*user)[VALIDATE_PRINTABLE_MAX + 1] = group ? calloc((size_t)n + 1, sizeof(*user)) : NULL;
    if (group && !user)
        n = 0; /* out of memory: nothing taken, the sweeper tries again */
    for (int i = 0; i < n; i++) {
        size_t len = strlen(members[i]);
        const char *sep = group && len > 32 ? strchr(members[i] + 32, '\x1f') : NULL;
        if (group && sep) { /* "<32 hex><user>\x1f<group>": this call's group only */
            size_t ul = (size_t)(sep - members[i]) - 32;
            if (!gname[0] && validate_sku(sep + 1, strlen(sep + 1)) && ul <= VALIDATE_PRINTABLE_MAX)
                snprintf(gname, sizeof(gname), "%s", sep + 1);
            if (strcmp(sep + 1, gname) != 0 && validate_sku(sep + 1, strlen(sep + 1)) &&
                ul <= VALIDATE_PRINTABLE_MAX)
                continue; /* another group's: a later call */
        }
        if (!(g->members[g->n] = strdup(members[i])))
            break;
        g->n++;
        if (len <= 32 || (group && (!sep || strcmp(sep + 1, gname) != 0)))
            continue; /* not what the scripts queue: taken off the queue, nothing to give */
        memcpy(hex[i], members[i], 32);
        hex[i][32] = '\0';
        if (group) {
            snprintf(user[i], sizeof(user[i]), "%.*s", (int)(sep - members[i]) - 32,
                     members[i] + 32);
            args[na++] = user[i];
        } else {
            args[na++] = members[i] + 32; /* the user */
        }
        args[na++] = hex[i];
    }
    char users[STORE_KEY_MAX];
    if (group && gname[0])
        store_group_key(users, gname, "users");
    else
        store_sku_key(users, sku, "users");
    if (group && na == 0) {      /* nothing to release (malformed members only): off the queue */
        int done = user != NULL; /* else out of memory: nothing was looked at */
        free(args);
        free(hex);
        free(user);
        if (g->n > 0)
            give_dequeue(g);
        else
            giveback_end(g, done);
        return;
    }
    const char *keys[1] = {users};
    store_script_async(st, lc, ar, SCRIPT_USER_RELEASE, 1, keys, na, args, on_give_released, g);
    free(args);
    free(hex);
    free(user);
}

void giveback_async(struct store *st, lc_async_client *lc, const struct areq *ar, const char *sku,
                    int k, const char *const *members, int n, int acks, int redis_timeout_ms,
                    giveback_fn cb, void *arg)
{
    give_start(st, lc, ar, sku, k, members, n, acks, redis_timeout_ms, 0, cb, arg);
}

void ggive_async(struct store *st, lc_async_client *lc, const struct areq *ar, const char *sku,
                 int k, const char *const *members, int n, int acks, int redis_timeout_ms,
                 giveback_fn cb, void *arg)
{
    give_start(st, lc, ar, sku, k, members, n, acks, redis_timeout_ms, 1, cb, arg);
}

/* ---- follows (multi-segment orders' parts taking their primary's change) ---- */

struct follow_run {
    struct store *st;
    lc_async_client *lc;
    const struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    char key[STORE_KEY_MAX]; /* the primary's segment's follow set */
    int pending, ok;
    int acks, redis_timeout_ms; /* the WAIT before a member is taken off (0: none) */
    follow_fn cb;
    void *arg;
};

struct follow_one {
    struct follow_run *run;
    char member[ORDER_ID_MAX + 16];
    char sku[VALIDATE_SKU_MAX + 1]; /* the part's own SKU (a cart's part: another SKU's) */
    int k;                          /* the part's segment */
    char give[ORDER_ID_MAX + 16];   /* the give-back part_follow.lua queued ("" none) */
};

static void follow_one_end(struct follow_one *f, int ok)
{
    struct follow_run *run = f->run;
    free(f);
    if (!ok)
        run->ok = 0;
    if (--run->pending > 0)
        return;
    run->cb(run->arg, run->ok);
    free(run);
}

static void on_follow_dequeued(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct follow_one *f = arg;
    int ok = st == LC_OK && r && r->type == REDIS_REPLY_INTEGER;
    if (!ok)
        log_msg(CONFIG_LOG_WARN, "follow_failed",
                "sku %s: follow %s applied, not yet taken off the queue (%s): the sweeper does "
                "it later",
                f->run->sku, f->member, st != LC_OK ? errstr : "unexpected reply");
    follow_one_end(f, ok);
}

static void follow_dequeue_now(struct follow_one *f)
{
    const char *argv[3] = {"ZREM", f->run->key, f->member};
    store_command_async(f->run->lc, f->run->ar, 3, argv, on_follow_dequeued, f);
}

static void on_follow_given(void *arg, int ok)
{
    (void)ok; /* logged by giveback_async; queued in the part's segment, the sweeper drains it */
    follow_dequeue_now(arg);
}

/* The member leaves the follow set; first, the give-back the part's end queued (a cart's item
 * with a per-user limit: part_follow.lua), so that a cancel's answer finds that SKU's count
 * dropped too. */
static void follow_dequeue(struct follow_one *f)
{
    if (!f->give[0]) {
        follow_dequeue_now(f);
        return;
    }
    const char *members[1] = {f->give};
    giveback_async(f->run->st, f->run->lc, f->run->ar, f->sku, f->k, members, 1, f->run->acks,
                   f->run->redis_timeout_ms, on_follow_given, f);
}

static void on_follow_acked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct follow_one *f = arg;
    long long got = store_reply_acks(st, r);
    if (got < f->run->acks) {
        log_msg(CONFIG_LOG_WARN, "follow_failed",
                "sku %s: follow %s applied, on %lld of %d replicas (%s): left queued, the "
                "sweeper applies it again",
                f->run->sku, f->member, got < 0 ? 0 : got, f->run->acks,
                st != LC_OK ? errstr : "WAIT timed out");
        follow_one_end(f, 0);
        return;
    }
    follow_dequeue(f);
}

static void on_followed(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct follow_one *f = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        log_msg(CONFIG_LOG_WARN, "follow_failed",
                "sku %s: follow %s: %s (left queued: the sweeper retries)", f->run->sku, f->member,
                st != LC_OK                         ? errstr
                : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                    : "unexpected reply");
        follow_one_end(f, 0);
        return;
    }
    /* issue 29: on the part's master's replicas before the member goes (a WAIT on the
     * connection that carried the script) */
    lc_async_conn_ref ref;
    if (f->run->acks > 0) {
        if (lc_async_reply_conn(f->run->lc, &ref) != 0) {
            on_follow_acked(LC_EIO, NULL, "the connection of the script is not known", f);
            return;
        }
    }
    long long code = r->element[0]->integer;
    if (code == STORE_FOLLOW_DONE && r->elements > 1 && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(f->give, sizeof(f->give), "%s", r->element[1]->str);
    if (code == STORE_FOLLOW_DONE)
        metrics_part_follows(1);
    else if (code == STORE_FOLLOW_NONE)
        log_msg(CONFIG_LOG_WARN, "follow_no_part",
                "sku %s: follow %s: the part's record is missing (its segment was reset?): "
                "nothing to apply",
                f->run->sku, f->member);
    if (f->run->acks > 0) {
        store_replica_wait_ref_async(f->run->lc, &ref, f->run->acks, f->run->redis_timeout_ms,
                                     on_follow_acked, f);
        return;
    }
    follow_dequeue(f);
}

void follow_async(struct store *st, lc_async_client *lc, const struct areq *ar, const char *sku,
                  int k, const char *const *members, int n, int acks, int redis_timeout_ms,
                  follow_fn cb, void *arg)
{
    struct follow_run *run = calloc(1, sizeof(*run));
    if (!run) {
        cb(arg, 0);
        return;
    }
    *run = (struct follow_run){.st = st,
                               .lc = lc,
                               .ar = ar,
                               .ok = 1,
                               .acks = acks,
                               .redis_timeout_ms = redis_timeout_ms,
                               .cb = cb,
                               .arg = arg};
    snprintf(run->sku, sizeof(run->sku), "%s", sku);
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    memcpy(run->key, sk.follow, sizeof(run->key));
    run->pending = 1; /* this function's own, dropped at its end */
    for (int i = 0; i < n; i++) {
        struct follow_one *f = calloc(1, sizeof(*f));
        if (!f) {
            run->ok = 0;
            break;
        }
        f->run = run;
        run->pending++;
        snprintf(f->member, sizeof(f->member), "%s", members[i]);
        const char *bar = strrchr(members[i], '|');
        char part_sku[VALIDATE_SKU_MAX + 1], status[16];
        int pk;
        size_t idlen = bar ? (size_t)(bar - members[i]) : 0;
        if (!bar || strlen(members[i]) >= sizeof(f->member) ||
            order_id_parse(members[i], idlen, &pk, part_sku) != 0 ||
            snprintf(status, sizeof(status), "%s", bar + 1) >= (int)sizeof(status) ||
            !order_status_reached(order_status_parse(status, strlen(status)))) {
            log_msg(CONFIG_LOG_ERROR, "follow_damaged",
                    "sku %s segment %d: follow member %.200s is not what the scripts queue: "
                    "taken off the queue",
                    sku, k, members[i]);
            follow_dequeue(f);
            continue;
        }
        char id[ORDER_ID_MAX + 1];
        snprintf(id, sizeof(id), "%.*s", (int)idlen, members[i]);
        /* The part's own SKU, from its id: a cart's parts live in other SKUs' segments (on a
         * cluster, perhaps on other masters; the script goes to its key's master, and the WAIT
         * on the connection that carried it) */
        snprintf(f->sku, sizeof(f->sku), "%s", part_sku);
        f->k = pk;
        struct seg_keys pkeys;
        store_seg_keys(part_sku, pk, &pkeys);
        const char *keys[4] = {pkeys.stock, pkeys.cnt, pkeys.orders, pkeys.give};
        const char *args[2] = {id, status};
        store_script_async(st, lc, ar, SCRIPT_PART_FOLLOW, 4, keys, 2, args, on_followed, f);
    }
    if (--run->pending == 0) { /* nothing was started (n == 0, or out of memory at once) */
        cb(arg, run->ok);
        free(run);
    }
}

/* ---- the sweeper ---- */

struct sweep_sku {
    char sku[VALIDATE_SKU_MAX + 1];
    int segments; /* as last read (0: not known, or deleted) */
    struct sku_rules rules;
    int holds;             /* layout.h struct layout's: holds may exist (meta's hold flag) */
    int pending;           /* its layout was not yet rolled out at the last read */
    int64_t linger_until;  /* mono ms: swept until then whatever its rules */
    int64_t glinger_until; /* mono ms: its ggive sets drained until then (sku_ggive) */
    int64_t *next_at;      /* per segment: mono ms of its next sweep */
    unsigned char *busy;   /* per segment: a call in flight */
    int inflight;          /* calls in flight for this SKU (layout read and segments) */
    int64_t multi_at;      /* mono ms of its last look at its intents */
    int multi_busy;        /* that look (and its heals) in flight */
    int carts;             /* cart intents (due or not) its last look found in its :cart hash */
    int64_t gone_at;       /* mono ms it was first missing from the registry (0: named there) */
    int layout_busy;       /* a read of its layout in flight */
    int64_t layout_at;     /* mono ms of that read's start */
    int cursor;            /* the segment its next tick's probes start at (round robin) */
    int seen;              /* named by the last registry read */
};

struct sweep {
    struct app *app;
    struct areq_env *env;
    struct event *timer;
    int stopping;
    int inflight;
    struct sweep_sku **skus;
    int nskus;
    int64_t registry_at, clock_at;
    int registry_busy, clock_busy;
    int cursor;        /* the SKU the next tick starts at (round robin) */
    int layout_cursor; /* the SKU whose layout the next tick reads first (round robin) */
    /* the hold index (one Redis: store_holds_key): holds expire from it, not from the SKUs'
     * rules; its segments being swept ("" a free slot) */
    int index, index_busy;
    int index_n; /* the hold index's calls in flight (their own cap: the SKUs' cannot starve them)
                  */
    char index_flight[SWEEP_MAX_INFLIGHT][VALIDATE_SKU_MAX + 16];
};

struct sweep_call {
    struct sweep *sw;
    struct sweep_sku *s;
    int k;
    int64_t sent;
    int pending; /* a segment's give-backs and follows in flight; a look's heals */
    int ok;
    int slot;     /* a sweep from the hold index (s NULL): its index_flight slot, else -1 */
    int of_index; /* a call of the hold index (counted in index_n) */
    char sku[VALIDATE_SKU_MAX + 1]; /* that sweep's SKU */
};

static struct sweep_call *sweep_call_new(struct sweep *sw, struct sweep_sku *s, int k)
{
    struct sweep_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    *c = (struct sweep_call){sw, s, k, clock_mono_ms(), 0, 1, -1, 0, ""};
    sw->inflight++;
    if (s)
        s->inflight++;
    return c;
}

static void sweep_call_end(struct sweep_call *c)
{
    if (c->slot >= 0)
        c->sw->index_flight[c->slot][0] = '\0';
    if (c->of_index)
        c->sw->index_n--;
    c->sw->inflight--;
    if (c->s)
        c->s->inflight--;
    free(c);
}

static void sku_free(struct sweep_sku *s)
{
    if (!s)
        return;
    free(s->next_at);
    free(s->busy);
    free(s);
}

static int sku_active(const struct sweep *sw, const struct sweep_sku *s, int64_t now);

/* The SKU's layout changed to n segments: new per-segment state, all due now. A call of the old
 * layout still in flight finds its segment by index when it ends (on_expired,
 * on_segment_given check it against the new count): a resize never waits for it, since under a
 * storm of PUTs some call is nearly always in flight, and a sweeper stuck on an old, smaller
 * layout would never look at the new segments' holds. */
static int sku_resize(struct sweep_sku *s, int n)
{
    if (n == s->segments && (n == 0 || s->next_at))
        return 0;
    free(s->next_at);
    free(s->busy);
    s->next_at = NULL;
    s->busy = NULL;
    s->segments = 0;
    if (n > 0) {
        s->next_at = calloc((size_t)n, sizeof(*s->next_at));
        s->busy = calloc((size_t)n, 1);
        if (!s->next_at || !s->busy)
            return -1;
    }
    s->segments = n;
    return 0;
}

static void on_sku_layout(void *arg, int found, struct layout *l)
{
    struct sweep_call *c = arg;
    struct sweep_sku *s = c->s;
    int64_t now = clock_mono_ms();
    s->layout_busy = 0;
    if (found >= 0 && sku_resize(s, found > 0 ? l->segments : 0) == 0) {
        int was = sku_active(c->sw, s, now);
        s->rules = l->rules;
        s->holds = l->holds;
        s->pending = l->pending;
        /* holds or a limit just came (a PATCH): every segment is due now, not at the slow
         * pace of a SKU without them (SWEEP_FOLLOW_IDLE_MS) */
        if (!was && sku_active(c->sw, s, now))
            for (int k = 0; k < s->segments; k++)
                s->next_at[k] = 0;
    }
    sweep_call_end(c);
}

static int sku_cmp(const void *a, const void *b)
{
    return strcmp((*(struct sweep_sku *const *)a)->sku, (*(struct sweep_sku *const *)b)->sku);
}

static void on_registry(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    struct sweep *sw = c->sw;
    sw->registry_busy = 0;
    sweep_call_end(c);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY) {
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "sweep_failed", "reading the SKU registry: %s",
                    st != LC_OK ? errstr : "unexpected reply");
        return;
    }
    if (sw->stopping)
        return;
    for (int i = 0; i < sw->nskus; i++)
        sw->skus[i]->seen = 0;
    /* the entries known before this read, by name: a registry of n names is matched in
     * O(n log n), not O(n * SKUs) (issue 29: 12,000 names kept the loop busy for seconds) */
    int nknown = sw->nskus;
    if (nknown > 1) /* (NULL while none is known: qsort's argument must not be) */
        qsort(sw->skus, (size_t)nknown, sizeof(*sw->skus), sku_cmp);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING || !validate_sku(e->str, e->len))
            continue;
        struct sweep_sku key, *kp = &key, **found = NULL;
        snprintf(key.sku, sizeof(key.sku), "%s", e->str);
        if (nknown > 0)
            found = bsearch(&kp, sw->skus, (size_t)nknown, sizeof(*sw->skus), sku_cmp);
        struct sweep_sku *s = found ? *found : NULL;
        if (!s) {
            if (sw->nskus >= SWEEP_MAX_SKUS) {
                log_msg(CONFIG_LOG_WARN, "sweep_too_many_skus",
                        "the SKU registry holds more than %d SKUs: the rest are not swept by "
                        "this instance",
                        SWEEP_MAX_SKUS);
                break;
            }
            struct sweep_sku **grown =
                realloc(sw->skus, sizeof(*sw->skus) * (size_t)(sw->nskus + 1));
            if (!grown || !(s = calloc(1, sizeof(*s)))) {
                if (grown)
                    sw->skus = grown;
                break;
            }
            sw->skus = grown;
            snprintf(s->sku, sizeof(s->sku), "%s", e->str);
            sw->skus[sw->nskus++] = s;
        }
        s->seen = 1;
    }
    /* Entries the registry no longer names go (once nothing is in flight for them); the
     * others' layouts are read again by the ticks (layout_reads). */
    for (int i = 0; i < sw->nskus;) {
        struct sweep_sku *s = sw->skus[i];
        /* A SKU the registry no longer names (a DELETE) is kept until a look started after that
         * has found no cart intents in its :cart hash (a DELETE keeps them: parts in other SKUs
         * depend on them), so a cart cut off just before its home's DELETE is still healed. */
        if (!s->seen && !s->gone_at)
            s->gone_at = clock_mono_ms();
        if (s->seen)
            s->gone_at = 0;
        if (!s->seen && s->inflight == 0 && s->carts == 0 && s->multi_at > s->gone_at) {
            sku_free(s);
            sw->skus[i] = sw->skus[--sw->nskus];
            continue;
        }
        i++;
    }
}

/* Each SKU's layout and rules are read again once SWEEP_REGISTRY_MS old, whatever else of the
 * SKU is in flight (only not while its last read is): waiting for a moment with nothing in
 * flight kept a busy SKU's sweeper on an old layout, and the holds in segments it did not know
 * never expired (it_holds test_layout_grows_under_a_busy_sweeper). Round robin within the cap
 * on calls in flight: all of them started at once at each registry read, 10,000 layout reads
 * made the loop's own orders time out (issue 29, it_holds test_registry_past_ten_thousand). */
static void layout_reads(struct sweep *sw, int64_t now)
{
    int first = sw->nskus > 0 ? sw->layout_cursor % sw->nskus : 0;
    for (int n = 0; n < sw->nskus && sw->inflight - sw->index_n < SWEEP_MAX_INFLIGHT / 2; n++) {
        int i = (first + n) % sw->nskus;
        struct sweep_sku *s = sw->skus[i];
        sw->layout_cursor = i + 1;
        if (!s->seen || s->layout_busy || (s->layout_at && now - s->layout_at < SWEEP_REGISTRY_MS))
            continue;
        struct sweep_call *lc = sweep_call_new(sw, s, -1);
        if (!lc)
            return;
        s->layout_busy = 1;
        s->layout_at = now;
        /* a roll-out seen pending is completed (as any reader does): a PUT cut off half-way
         * would leave the old layout's holds in segments nobody resets or sweeps */
        if (s->pending)
            layout_read_settled_async(sw->app->store, sw->env->lc, s->sku, on_sku_layout, lc);
        else
            layout_read_async(sw->app->store, sw->env->lc, s->sku, on_sku_layout, lc);
    }
}

static void on_time(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct sweep_call *c = arg;
    c->sw->clock_busy = 0;
    if (st == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        long long secs = store_reply_int(r->element[0], -1);
        long long usecs = store_reply_int(r->element[1], -1);
        if (secs > 0 && usecs >= 0)
            rclock_note(secs * 1000 + usecs / 1000, c->sent, clock_mono_ms());
    }
    sweep_call_end(c);
}

/* The give-backs or the follows of an expiry sweep are done (the call ends with the last). */
static void on_segment_given(void *arg, int ok)
{
    struct sweep_call *c = arg;
    if (!ok)
        c->ok = 0;
    if (--c->pending > 0)
        return;
    if (c->s && !c->ok && c->k < c->s->segments)
        c->s->next_at[c->k] = clock_mono_ms() + SWEEP_IDLE_MS;
    if (c->s && c->k < c->s->segments)
        c->s->busy[c->k] = 0;
    sweep_call_end(c);
}

static void sweep_drain(struct sweep_call *c, const char *sku, int k, const redisReply *r,
                        int ngive, int nfollow, int ggive);

/* Whether a sweep of the SKU's segments drains their ggive sets too: a SKU in a limit group,
 * or one that was lately (its ended orders' records still name the group: a PATCH or PUT
 * since leaves them queued), for SWEEP_LINGER_MS after the last member seen. */
static int sku_ggive(const struct sweep_sku *s, int64_t now)
{
    return s->rules.limit_group[0] || now < s->glinger_until;
}

static void on_expired(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    struct sweep_sku *s = c->s;
    int64_t now = clock_mono_ms();
    int k = c->k;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 7 ||
        r->element[6]->integer < 0 || r->element[6]->integer > (long long)r->elements - 7) {
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "sweep_failed", "sku %s segment %d: expiry sweep: %s", s->sku,
                    k, st != LC_OK ? errstr : "unexpected reply");
        if (k < s->segments) {
            s->next_at[k] = now + SWEEP_IDLE_MS;
            s->busy[k] = 0;
        }
        sweep_call_end(c);
        return;
    }
    long long expired = r->element[0]->integer, bad = r->element[1]->integer;
    long long rnow = r->element[2]->integer, next = r->element[3]->integer;
    long long queued = r->element[4]->integer, fqueued = r->element[5]->integer;
    int ngive = (int)r->element[6]->integer;
    int nfollow = (int)r->elements - 7 - ngive;
    if (expired > 0)
        metrics_holds_expired(expired);
    if (bad > 0)
        log_msg(CONFIG_LOG_ERROR, "hold_damaged",
                "sku %s segment %d: %lld due holds' records or counters are damaged: left as "
                "they are",
                s->sku, k, bad);
    if ((!c->sw->index && (expired > 0 || next > 0)) || queued > 0 || fqueued > 0)
        s->linger_until = now + SWEEP_LINGER_MS;
    /* Next look: when the next hold is due (by Redis's clock, which moves as ours does), at
     * the latest SWEEP_IDLE_MS from now; at once when the batch was full. */
    int64_t wait = SWEEP_IDLE_MS;
    if (next > 0 && next - rnow < wait)
        wait = next - rnow > 0 ? next - rnow : 0;
    if (!sku_active(c->sw, s, now) && wait == SWEEP_IDLE_MS)
        wait = SWEEP_FOLLOW_IDLE_MS; /* a look for cut-off follows alone */
    if (expired >= SWEEP_BATCH || queued > ngive || fqueued > nfollow)
        wait = 0;
    if (k < s->segments) /* else the layout changed meanwhile (sku_resize) */
        s->next_at[k] = now + wait;
    int gg = sku_ggive(s, now);
    if ((ngive == 0 && nfollow == 0 && !gg) || c->sw->stopping) {
        if (k < s->segments)
            s->busy[k] = 0;
        sweep_call_end(c);
        return;
    }
    sweep_drain(c, s->sku, k, r, ngive, nfollow, gg);
}

/* The ggive set's first members are in (a ZRANGE): their give-backs, or the end. */
static void on_ggive_range(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY) {
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "giveback_failed", "sku %s segment %d: ggive: %s",
                    c->s ? c->s->sku : c->sku, c->k, st != LC_OK ? errstr : "unexpected reply");
        on_segment_given(c, 0);
        return;
    }
    const char *members[SWEEP_GIVE_BATCH];
    int n = 0;
    for (size_t i = 0; i < r->elements && n < SWEEP_GIVE_BATCH; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            members[n++] = r->element[i]->str;
    if (n == 0 || c->sw->stopping) {
        on_segment_given(c, 1);
        return;
    }
    if (c->s) /* drained for a while after, whatever the rules say by then */
        c->s->glinger_until = clock_mono_ms() + SWEEP_LINGER_MS;
    /* the members are copied before this returns */
    ggive_async(c->sw->app->store, c->sw->env->lc, NULL, c->s ? c->s->sku : c->sku, c->k, members,
                n, c->sw->app->cfg.redis_replica_acks, c->sw->app->cfg.redis_timeout_ms,
                on_segment_given, c);
}

/* Applies the give-backs and follows an expiry sweep of sku's segment k returned (r: its reply,
 * ngive and nfollow of them); the call ends with the last (on_segment_given). */
static void sweep_drain(struct sweep_call *c, const char *sku, int k, const redisReply *r,
                        int ngive, int nfollow, int ggive)
{
    const char *members[SWEEP_GIVE_BATCH], *follows[SWEEP_FOLLOW_BATCH];
    int n = 0, nf = 0;
    for (int i = 0; i < ngive && n < SWEEP_GIVE_BATCH; i++)
        if (r->element[7 + i]->type == REDIS_REPLY_STRING)
            members[n++] = r->element[7 + i]->str;
    for (int i = 0; i < nfollow && nf < SWEEP_FOLLOW_BATCH; i++)
        if (r->element[7 + ngive + i]->type == REDIS_REPLY_STRING)
            follows[nf++] = r->element[7 + ngive + i]->str;
    /* All run at once; the call ends with the last (on_segment_given). */
    c->pending = (n > 0) + (nf > 0) + (ggive != 0) + 1;
    if (ggive) { /* the limit groups' give-backs (docs/design.md "Limit groups") */
        struct seg_keys sk;
        store_seg_keys(sku, k, &sk);
        char most[24];
        snprintf(most, sizeof(most), "%d", SWEEP_GIVE_BATCH - 1);
        const char *argv[4] = {"ZRANGE", sk.ggive, "0", most};
        store_command_async(c->sw->env->lc, NULL, 4, argv, on_ggive_range, c);
    }
    if (n > 0)
        giveback_async(c->sw->app->store, c->sw->env->lc, NULL, sku, k, members, n,
                       c->sw->app->cfg.redis_replica_acks, c->sw->app->cfg.redis_timeout_ms,
                       on_segment_given, c);
    if (nf > 0)
        follow_async(c->sw->app->store, c->sw->env->lc, NULL, sku, k, follows, nf,
                     c->sw->app->cfg.redis_replica_acks, c->sw->app->cfg.redis_timeout_ms,
                     on_segment_given, c);
    on_segment_given(c, 1); /* this function's own share */
}

/* The expiry sweep of segment c->k of c->s, for its queued follows and give-backs (a SKU
 * without holds or a limit). */
static void sweep_segment(struct sweep_call *c)
{
    char batch[24], give[24], follows[24];
    snprintf(batch, sizeof(batch), "%d", SWEEP_BATCH);
    snprintf(give, sizeof(give), "%d", SWEEP_GIVE_BATCH);
    snprintf(follows, sizeof(follows), "%d", SWEEP_FOLLOW_BATCH);
    const char *args[4] = {batch, give, c->sw->app->cfg.order_log ? "1" : "0", follows};
    struct seg_keys sk;
    store_seg_keys(c->s->sku, c->k, &sk);
    const char *keys[8] = {sk.stock, sk.cnt, sk.orders, sk.due,
                           sk.give,  sk.log, sk.sver,   sk.follow};
    store_script_async(c->sw->app->store, c->sw->env->lc, NULL, SCRIPT_EXPIRE, 8, keys, 4, args,
                       on_expired, c);
}

/* A segment of a SKU without holds or a limit is swept only for what a cut-off cancel or an
 * ended order left queued (follows, give-backs) or a hold its rules no longer say it may have
 * (a due set: the sweep these segments had every SWEEP_FOLLOW_IDLE_MS before issue 33 expired
 * them too): EXISTS of the three first, a plain command at a fraction of the script's cost,
 * and expire.lua only when one exists. Every SKU is probed so (a cart's home may have one
 * segment), every SWEEP_FOLLOW_IDLE_MS. */
static void on_follow_probe(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    struct sweep_sku *s = c->s;
    int k = c->k;
    if (st == LC_OK && r && r->type == REDIS_REPLY_INTEGER && r->integer > 0 && !c->sw->stopping &&
        k < s->segments) {
        sweep_segment(c);
        return;
    }
    if (st != LC_OK && st != LC_ESTATE)
        log_msg(CONFIG_LOG_WARN, "sweep_failed", "sku %s segment %d: looking for follows: %s",
                s->sku, k, errstr);
    if (k < s->segments) { /* else the layout changed meanwhile (sku_resize) */
        s->next_at[k] = clock_mono_ms() + (st == LC_OK ? SWEEP_FOLLOW_IDLE_MS : SWEEP_IDLE_MS);
        s->busy[k] = 0;
    }
    sweep_call_end(c);
}

/* ---- healing the intents of multi-segment orders ---- */

struct heal {
    struct sweep_call *c; /* the look it came from (pending counts the heals) */
    char sku[VALIDATE_SKU_MAX + 1];
    char hex[IDS_ORDER_HEX + 1];
    char id[ORDER_ID_MAX + 1];
    char multi[STORE_KEY_MAX]; /* the intent's hash: the SKU's multi, or its cart */
    int cart;                  /* a cart's intent (parts in several SKUs) */
    int k1, nparts, pending, ok, forward;
    int parts[HEAL_PARTS_MAX];
    unsigned char psku[HEAL_PARTS_MAX]; /* a cart's part's SKU: its index in skus */
    char skus[HEAL_SKUS_MAX][VALIDATE_SKU_MAX + 1];
    int nskus;
    struct store_conns conns; /* where the heal's scripts ran: WAITed before the intent goes */
};

static void look_end(struct sweep_call *c)
{
    if (--c->pending > 0)
        return;
    c->s->multi_busy = 0;
    sweep_call_end(c);
}

static void heal_end(struct heal *h)
{
    struct sweep_call *c = h->c;
    free(h);
    look_end(c);
}

static void on_intent_deleted(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct heal *h = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER) {
        log_msg(CONFIG_LOG_WARN, "multi_heal_failed",
                "sku %s order %s: healed %s, the intent not yet deleted (%s): the next look does "
                "it",
                h->sku, h->id, h->forward ? "forward" : "back",
                st != LC_OK ? errstr : "unexpected reply");
    } else if (r->integer > 0) {
        /* counted by whoever deleted it, so instances healing at once count it once */
        metrics_multi_healed(h->forward);
        log_msg(CONFIG_LOG_INFO, h->cart ? "cart_healed" : "multi_healed",
                "sku %s order %s: healed %s", h->sku, h->id,
                h->forward ? "forward (the order is whole)" : "back (its parts undone: no order)");
    }
    heal_end(h);
}

static void heal_delete_intent_now(struct heal *h)
{
    const char *argv[3] = {"HDEL", h->multi, h->hex};
    store_command_async(h->c->sw->env->lc, NULL, 3, argv, on_intent_deleted, h);
}

static void on_heal_acked(void *arg, long long acks)
{
    struct heal *h = arg;
    int want = h->c->sw->app->cfg.redis_replica_acks;
    if (acks < want || h->c->sw->stopping) {
        if (acks < want)
            log_msg(CONFIG_LOG_WARN, "multi_heal_failed",
                    "sku %s order %s: healed %s, on %lld of %d replicas: the intent stays for "
                    "the next look",
                    h->sku, h->id, h->forward ? "forward" : "back", acks < 0 ? 0 : acks, want);
        heal_end(h);
        return;
    }
    heal_delete_intent_now(h);
}

/* The intent goes once what the heal found or did (the primary there, the parts undone and
 * tombstoned) is on --redis-replica-acks replicas: else a failover could bring back parts, or
 * lose the primary, with no intent left to heal them (issue 29). */
static void heal_delete_intent(struct heal *h)
{
    int acks = h->c->sw->app->cfg.redis_replica_acks;
    if (acks <= 0) {
        heal_delete_intent_now(h);
        return;
    }
    store_replica_wait_conns_async(h->c->sw->env->lc, NULL, &h->conns, acks,
                                   h->c->sw->app->cfg.redis_timeout_ms, on_heal_acked, h);
}

static void on_part_undone(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct heal *h = arg;
    store_conns_note(&h->conns, h->c->sw->env->lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        log_msg(CONFIG_LOG_WARN, "multi_heal_failed",
                "sku %s order %s: undoing a part: %s (the next look retries)", h->sku, h->id,
                st != LC_OK                         ? errstr
                : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                    : "unexpected reply");
        h->ok = 0;
    }
    if (--h->pending > 0)
        return;
    if (h->ok && !h->c->sw->stopping)
        heal_delete_intent(h);
    else
        heal_end(h);
}

static void on_primary_checked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct heal *h = arg;
    store_conns_note(&h->conns, h->c->sw->env->lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        log_msg(CONFIG_LOG_WARN, "multi_heal_failed",
                "sku %s order %s: looking for the primary record: %s (the next look retries)",
                h->sku, h->id,
                st != LC_OK                         ? errstr
                : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                    : "unexpected reply");
        heal_end(h);
        return;
    }
    if (h->c->sw->stopping) {
        heal_end(h);
        return;
    }
    /* The primary is written only after every other part: there, the order is whole; absent,
     * its id was tombstoned in the same step, so it never will be, whatever the clocks say
     * (part_undo.lua "primary"); the parts' undos tombstone them as well (issue 29). */
    h->forward = r->element[0]->integer == STORE_UNDO_WHOLE;
    if (h->forward || h->nparts == 0) {
        heal_delete_intent(h);
        return;
    }
    h->pending = h->nparts;
    char keep[24];
    snprintf(keep, sizeof(keep), "%d", STORE_UNDONE_KEEP_MS);
    for (int i = 0; i < h->nparts; i++) {
        /* a cart's part in its own SKU's segment (on a cluster, perhaps another master: the
         * WAIT before the HDEL covers every connection the undos came back on) */
        const char *sku = h->cart ? h->skus[h->psku[i]] : h->sku;
        char part[ORDER_ID_MAX + 16];
        snprintf(part, sizeof(part), "%s-%d-%s", h->hex, h->parts[i], sku);
        struct seg_keys sk;
        store_seg_keys(sku, h->parts[i], &sk);
        const char *keys[4] = {sk.stock, sk.cnt, sk.orders, sk.undone};
        const char *args[3] = {part, keep, ""};
        store_script_async(h->c->sw->app->store, h->c->sw->env->lc, NULL, SCRIPT_PART_UNDO, 4, keys,
                           3, args, on_part_undone, h);
    }
}

/* A cart intent's part [k, q, "sku"]: its SKU's index in h->skus (added when new), or -1 when
 * it is not one. */
static int heal_cart_sku(struct heal *h, const json_t *p)
{
    const char *sku = json_string_value(json_array_get(p, 2));
    if (!json_is_array(p) || !sku || !validate_sku(sku, strlen(sku)))
        return -1;
    for (int i = 0; i < h->nskus; i++)
        if (strcmp(h->skus[i], sku) == 0)
            return i;
    if (h->nskus >= HEAL_SKUS_MAX)
        return -1;
    snprintf(h->skus[h->nskus], sizeof(h->skus[0]), "%s", sku);
    return h->nskus++;
}

/* Starts healing one intent (hex, its JSON; cart: of the SKU's :cart hash, a cart's, else of
 * its :multi hash); 0, or -1 when it is not what its writer writes (logged, left alone). */
static int heal_start(struct sweep_call *c, const redisReply *hex, const redisReply *text, int cart)
{
    struct sweep_sku *s = c->s;
    json_t *j = json_loadb(text->str, text->len, 0, NULL);
    const char *id = json_string_value(json_object_get(j, "order"));
    json_t *parts = json_object_get(j, "parts");
    char sku[VALIDATE_SKU_MAX + 1];
    int k1 = -1, bad = !id || !json_is_array(parts) || json_array_size(parts) > HEAL_PARTS_MAX ||
                       hex->len != IDS_ORDER_HEX || order_id_parse(id, strlen(id), &k1, sku) != 0 ||
                       strcmp(sku, s->sku) != 0 || strncmp(id, hex->str, hex->len) != 0 ||
                       id[hex->len] != '-';
    struct heal *h = bad ? NULL : calloc(1, sizeof(*h));
    if (h) {
        h->c = c;
        h->k1 = k1;
        h->ok = 1;
        h->cart = cart;
        snprintf(h->sku, sizeof(h->sku), "%s", s->sku);
        snprintf(h->hex, sizeof(h->hex), "%.*s", (int)hex->len, hex->str);
        snprintf(h->id, sizeof(h->id), "%s", id);
        store_sku_key(h->multi, s->sku, cart ? "cart" : "multi");
        for (size_t i = 0; i < json_array_size(parts) && !bad; i++) {
            json_t *p = json_array_get(parts, i);
            json_t *kj = json_array_get(p, 0);
            int si = cart ? heal_cart_sku(h, p) : 0;
            if (!json_is_integer(kj) || json_integer_value(kj) < 0 ||
                json_integer_value(kj) >= SKUCACHE_MAX_SEGMENTS || si < 0) {
                bad = 1;
                break;
            }
            int k = (int)json_integer_value(kj);
            /* the primary's own segment (of the home SKU): it never has a part record */
            if (k == k1 && (!cart || strcmp(h->skus[si], s->sku) == 0))
                continue;
            h->psku[h->nparts] = (unsigned char)si;
            h->parts[h->nparts++] = k;
        }
    }
    json_decref(j);
    if (bad || !h) {
        if (bad)
            log_msg(CONFIG_LOG_ERROR, "multi_intent_damaged",
                    "sku %s: %s intent %.*s is not what its writer writes: left alone", s->sku,
                    cart ? "cart" : "multi-segment", (int)(hex->len < 64 ? hex->len : 64),
                    hex->str);
        free(h);
        return -1;
    }
    c->pending++;
    struct seg_keys sk;
    store_seg_keys(s->sku, k1, &sk);
    char keep[24];
    snprintf(keep, sizeof(keep), "%d", STORE_UNDONE_KEEP_MS);
    const char *keys[4] = {sk.stock, sk.cnt, sk.orders, sk.undone};
    const char *args[3] = {h->id, keep, "primary"};
    store_script_async(c->sw->app->store, c->sw->env->lc, NULL, SCRIPT_PART_UNDO, 4, keys, 3, args,
                       on_primary_checked, h);
    return 0;
}

static void on_multi_due(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    c->pending = 1; /* this function's own share */
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY) {
        c->s->carts = 1; /* not known: a SKU gone from the registry is looked at again */
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "sweep_failed", "sku %s: multi-segment intents: %s", c->s->sku,
                    st != LC_OK ? errstr : "unexpected reply");
    } else if (r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
               r->element[1]->type == REDIS_REPLY_INTEGER) {
        /* {cart intents, m, m multi-segment intents' (hex, JSON), the due carts' (hex, JSON)} */
        c->s->carts = (int)r->element[0]->integer;
        long long m = r->element[1]->integer;
        for (size_t i = 2; i + 1 < r->elements && !c->sw->stopping; i += 2)
            if (r->element[i]->type == REDIS_REPLY_STRING &&
                r->element[i + 1]->type == REDIS_REPLY_STRING)
                (void)heal_start(c, r->element[i], r->element[i + 1], (long long)(i - 2) / 2 >= m);
    }
    look_end(c);
}

/* The look's first, cheap step: EXISTS of the SKU's multi and cart hashes (one slot). Most
 * SKUs have neither, and a plain command costs a fraction of a script: only when one exists
 * does multi_due.lua read them. */
static void on_look_probe(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    struct sweep_sku *s = c->s;
    if (st == LC_OK && r && r->type == REDIS_REPLY_INTEGER && r->integer > 0 && !c->sw->stopping) {
        char multi[STORE_KEY_MAX], cart[STORE_KEY_MAX], margin[24], most[24];
        store_sku_key(multi, s->sku, "multi");
        store_sku_key(cart, s->sku, "cart");
        snprintf(margin, sizeof(margin), "%d", SWEEP_MULTI_MARGIN_MS);
        snprintf(most, sizeof(most), "%d", SWEEP_MULTI_BATCH);
        const char *keys[2] = {multi, cart};
        const char *margs[2] = {margin, most};
        store_script_async(c->sw->app->store, c->sw->env->lc, NULL, SCRIPT_MULTI_DUE, 2, keys, 2,
                           margs, on_multi_due, c);
        return;
    }
    if (st == LC_OK && r && r->type == REDIS_REPLY_INTEGER) {
        s->carts = 0; /* neither hash exists */
    } else if (!c->sw->stopping) {
        s->carts = 1; /* not known: a SKU gone from the registry is looked at again */
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "sweep_failed", "sku %s: looking for intents: %s", s->sku,
                    st != LC_OK ? errstr : "unexpected reply");
    }
    s->multi_busy = 0;
    sweep_call_end(c);
}

/* Whether the SKU is swept at all now: holds may exist by meta's hold flag, not by its rules
 * (issue 29: a PATCH to TTL 0 leaves the flag set) where the hold index does not name them (a
 * Redis Cluster; on one Redis, a layout whose holds an older binary may have placed); its
 * layout is being rolled out (the old layout's holds live until their segment's reset); a
 * limit, or a limit group (the ggive set's give-backs); or signs of either lately. */
static int sku_active(const struct sweep *sw, const struct sweep_sku *s, int64_t now)
{
    return s->segments > 0 &&
           (s->holds == 2 || (s->holds == 1 && !sw->index) || s->pending ||
            s->rules.limit_per_user > 0 || s->rules.limit_group[0] || now < s->linger_until);
}

/* ---- the hold index (one Redis; docs/design.md "The sweeper") ---- */

static void on_ignored(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)st;
    (void)r;
    (void)errstr;
    (void)arg;
}

/* An expiry sweep of a segment the hold index named is done; expire.lua has set the segment's
 * next turn in the index (or taken it out) in the same step. */
static void on_index_expired(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 7 ||
        r->element[6]->integer < 0 || r->element[6]->integer > (long long)r->elements - 7) {
        /* the segment keeps its turn in the index: the next look at the index retries it */
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "sweep_failed", "sku %s segment %d: expiry sweep: %s", c->sku,
                    c->k,
                    st != LC_OK                         ? errstr
                    : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                        : "unexpected reply");
        sweep_call_end(c);
        return;
    }
    long long expired = r->element[0]->integer, bad = r->element[1]->integer;
    int ngive = (int)r->element[6]->integer;
    int nfollow = (int)r->elements - 7 - ngive;
    if (expired > 0)
        metrics_holds_expired(expired);
    if (bad > 0)
        log_msg(CONFIG_LOG_ERROR, "hold_damaged",
                "sku %s segment %d: %lld due holds' records or counters are damaged: left as "
                "they are",
                c->sku, c->k, bad);
    if ((ngive == 0 && nfollow == 0) || c->sw->stopping) {
        sweep_call_end(c);
        return;
    }
    sweep_drain(c, c->sku, c->k, r, ngive, nfollow, 0);
}

/* Starts the expiry sweep of the index's member m ("<sku>/<k>") unless it is in flight. */
static void index_sweep(struct sweep *sw, const redisReply *m)
{
    int slot = -1;
    for (int i = 0; i < SWEEP_MAX_INFLIGHT; i++) {
        if (strcmp(sw->index_flight[i], m->str) == 0)
            return; /* its sweep has not answered yet */
        if (slot < 0 && !sw->index_flight[i][0])
            slot = i;
    }
    const char *bar = memchr(m->str, '/', m->len);
    char *end = NULL;
    long k = bar ? strtol(bar + 1, &end, 10) : -1;
    if (!bar || !validate_sku(m->str, (size_t)(bar - m->str)) || end == bar + 1 ||
        end != m->str + m->len || k < 0 || k >= SKUCACHE_MAX_SEGMENTS) {
        log_msg(CONFIG_LOG_ERROR, "hold_index_damaged",
                "the hold index names %.100s, not a segment: taken out", m->str);
        const char *argv[3] = {"ZREM", store_holds_key(), m->str};
        store_command_async(sw->env->lc, NULL, 3, argv, on_ignored, NULL);
        return;
    }
    if (slot < 0)
        return;
    struct sweep_call *c = sweep_call_new(sw, NULL, (int)k);
    if (!c)
        return;
    c->slot = slot;
    c->of_index = 1;
    sw->index_n++;
    snprintf(sw->index_flight[slot], sizeof(sw->index_flight[slot]), "%s", m->str);
    snprintf(c->sku, sizeof(c->sku), "%.*s", (int)(bar - m->str), m->str);
    char batch[24], give[24], follows[24];
    snprintf(batch, sizeof(batch), "%d", SWEEP_BATCH);
    snprintf(give, sizeof(give), "%d", SWEEP_GIVE_BATCH);
    snprintf(follows, sizeof(follows), "%d", SWEEP_FOLLOW_BATCH);
    const char *args[5] = {batch, give, sw->app->cfg.order_log ? "1" : "0", follows, m->str};
    struct seg_keys sk;
    store_seg_keys(c->sku, c->k, &sk);
    const char *keys[9] = {sk.stock, sk.cnt,  sk.orders, sk.due,           sk.give,
                           sk.log,   sk.sver, sk.follow, store_holds_key()};
    store_script_async(sw->app->store, sw->env->lc, NULL, SCRIPT_EXPIRE, 9, keys, 5, args,
                       on_index_expired, c);
}

static void on_index_due(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct sweep_call *c = arg;
    struct sweep *sw = c->sw;
    sw->index_busy = 0;
    sweep_call_end(c);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        if (st != LC_ESTATE)
            log_msg(CONFIG_LOG_WARN, "sweep_failed", "reading the hold index: %s",
                    st != LC_OK                         ? errstr
                    : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                        : "unexpected reply");
        return;
    }
    for (size_t i = 1; i < r->elements && !sw->stopping; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING && sw->index_n < SWEEP_MAX_INFLIGHT)
            index_sweep(sw, r->element[i]);
}

/* Every tick: the segments whose turn in the hold index has come (at most twice the calls in
 * flight, so that those still being swept cannot hide the rest). */
static void index_look(struct sweep *sw)
{
    if (!sw->index || sw->index_busy || sw->index_n >= SWEEP_MAX_INFLIGHT)
        return;
    struct sweep_call *c = sweep_call_new(sw, NULL, -1);
    if (!c)
        return;
    c->of_index = 1;
    sw->index_n++;
    sw->index_busy = 1;
    char most[24];
    snprintf(most, sizeof(most), "%d", 2 * SWEEP_MAX_INFLIGHT);
    const char *keys[1] = {store_holds_key()};
    const char *args[1] = {most};
    store_script_async(sw->app->store, sw->env->lc, NULL, SCRIPT_HOLDS_DUE, 1, keys, 1, args,
                       on_index_due, c);
}

static void tick(struct sweep *sw)
{
    struct store *store = sw->app->store;
    lc_async_client *lc = sw->env->lc;
    int64_t now = clock_mono_ms();
    index_look(sw); /* first: the holds' expiry takes the slots before the rest */
    if (!sw->clock_busy && now - sw->clock_at >= 1000) {
        struct sweep_call *c = sweep_call_new(sw, NULL, -1);
        if (c) {
            sw->clock_busy = 1;
            sw->clock_at = now;
            const char *argv[1] = {"TIME"};
            store_command_async(lc, NULL, 1, argv, on_time, c);
        }
    }
    if (!sw->registry_busy && now - sw->registry_at >= SWEEP_REGISTRY_MS) {
        struct sweep_call *c = sweep_call_new(sw, NULL, -1);
        if (c) {
            sw->registry_busy = 1;
            sw->registry_at = now;
            const char *argv[2] = {"SMEMBERS", store_registry_key()};
            store_command_async(lc, NULL, 2, argv, on_registry, c);
        }
    }
    layout_reads(sw, now);
    char batch[24], give[24];
    snprintf(batch, sizeof(batch), "%d", SWEEP_BATCH);
    snprintf(give, sizeof(give), "%d", SWEEP_GIVE_BATCH);
    char follows[24];
    snprintf(follows, sizeof(follows), "%d", SWEEP_FOLLOW_BATCH);
    const char *args[4] = {batch, give, sw->app->cfg.order_log ? "1" : "0", follows};
    /* Calls in flight are capped (SWEEP_MAX_INFLIGHT): each tick starts where the last one ran
     * out, at the SKU and at the segment, so that a slow Redis or many segments delay every
     * segment alike rather than starve the last ones (the first 64 segments, due again every
     * SWEEP_IDLE_MS, took every slot: it_holds test_layout_grows_under_a_busy_sweeper). */
    int first = sw->nskus > 0 ? sw->cursor % sw->nskus : 0;
    for (int n = 0; n < sw->nskus && sw->inflight - sw->index_n < SWEEP_MAX_INFLIGHT; n++) {
        int i = (first + n) % sw->nskus;
        struct sweep_sku *s = sw->skus[i];
        sw->cursor = i; /* where the slots run out, the next tick starts */
        /* Every SKU with a layout may be a cart's home (its :cart hash; a PUT or DELETE of the
         * home keeps it: parts in other SKUs depend on it), and one whose last look found cart
         * intents is looked at even once deleted or out of the registry, until they are
         * healed; only a SKU of several segments can have multi-segment orders (a PUT or
         * DELETE deletes the intents of the layout it replaces). One script for both. */
        if ((s->segments > 0 || s->carts > 0 || s->gone_at) && !s->multi_busy &&
            now - s->multi_at >= SWEEP_MULTI_MS) {
            struct sweep_call *c = sweep_call_new(sw, s, -1);
            if (!c)
                return;
            s->multi_busy = 1;
            s->multi_at = now;
            char multi[STORE_KEY_MAX], cart[STORE_KEY_MAX];
            store_sku_key(multi, s->sku, "multi");
            store_sku_key(cart, s->sku, "cart");
            const char *argv[3] = {"EXISTS", multi, cart};
            store_command_async(lc, NULL, 3, argv, on_look_probe, c);
        }
        /* A SKU without holds or a limit is swept too, every SWEEP_FOLLOW_IDLE_MS (on_expired),
         * for the follows a cut-off cancel left queued: a multi-segment order's parts, or a
         * cart's (whose home may have one segment). */
        int j = 0;
        for (; j < s->segments && sw->inflight - sw->index_n < SWEEP_MAX_INFLIGHT; j++) {
            int k = (s->cursor + j) % s->segments;
            if (s->busy[k] || s->next_at[k] > now)
                continue;
            struct sweep_call *c = sweep_call_new(sw, s, k);
            if (!c)
                return;
            s->busy[k] = 1;
            struct seg_keys sk;
            store_seg_keys(s->sku, k, &sk);
            if (!sku_active(sw, s, now)) { /* follows (or give-backs) alone: probed first */
                const char *argv[4] = {"EXISTS", sk.follow, sk.give, sk.due};
                store_command_async(lc, NULL, 4, argv, on_follow_probe, c);
                continue;
            }
            const char *keys[8] = {sk.stock, sk.cnt, sk.orders, sk.due,
                                   sk.give,  sk.log, sk.sver,   sk.follow};
            store_script_async(store, lc, NULL, SCRIPT_EXPIRE, 8, keys, 4, args, on_expired, c);
        }
        if (j < s->segments) /* the slots ran out before its last segment */
            s->cursor = (s->cursor + j) % s->segments;
    }
    if (sw->inflight - sw->index_n < SWEEP_MAX_INFLIGHT)
        sw->cursor = 0; /* every SKU had its turn */
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sweep *sw = arg;
    if (!sw->stopping)
        tick(sw);
}

struct sweep *sweep_new(struct app *app, struct areq_env *env)
{
    struct sweep *sw = calloc(1, sizeof(*sw));
    if (!sw)
        return NULL;
    sw->app = app;
    sw->env = env;
    sw->index = !config_redis_cluster(&app->cfg);
    sw->timer = event_new(env->base, -1, EV_PERSIST, on_tick, sw);
    if (!sw->timer) {
        free(sw);
        return NULL;
    }
    return sw;
}

void sweep_start(struct sweep *sw)
{
    struct timeval tv = {0, SWEEP_TICK_MS * 1000};
    event_add(sw->timer, &tv);
}

void sweep_stop(struct sweep *sw)
{
    sw->stopping = 1;
    event_del(sw->timer);
}

void sweep_free(struct sweep *sw)
{
    if (!sw)
        return;
    event_free(sw->timer);
    for (int i = 0; i < sw->nskus; i++)
        sku_free(sw->skus[i]);
    free(sw->skus);
    free(sw);
}
