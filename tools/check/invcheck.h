/*
 * The SPEC §8 invariant checker (prefix ic_): the one implementation of the per-SKU state
 * invariants, read straight from a real Redis or Redis Cluster with its own hiredis
 * connections, knowing nothing of the service's code but the key schema
 * (service/store_keys.txt, through the generated store_keys_gen.h). Three callers share it:
 * the integration tests (SF_ASSERT_INVARIANTS, service/tests/support/svc_invariants.c), the
 * program inventory-check (invcheck_main.c: a JSON report, exit status 1 on a violation), and
 * through that program loadtest/verify.sh and loadtest/chaos.py.
 *
 * Thread-safe: no shared state (each call opens its own connections).
 */
#ifndef TOOLS_CHECK_INVCHECK_H
#define TOOLS_CHECK_INVCHECK_H

#include <jansson.h>

#define IC_MAX_SEGMENTS 1024

#define IC_MAX_USERS 256
#define IC_USER_ORDERS_MAX 8
struct ic_user {
    char user[129];
    long long units; /* in live orders */
    int nhex;
    char hex[IC_USER_ORDERS_MAX][33]; /* their ids' hex parts */
};

/* A problem, with the group of checks that found it (for a caller that judges some groups under
 * names of its own: loadtest/chaos.py):
 *   "segment"  a segment's counters and keys (stock, sver, cnt against the records, due set,
 *              Idempotency-Key entries, locks);
 *   "record"   an order record on its own (fields, status, expires_at, due entry);
 *   "multi"    a multi-segment order across segments (parts, primaries, follows, intents);
 *   "sku"      the SKU as a whole (meta, Σ, stray keys of dropped segments, not quiescent);
 *   "users"    SPEC §11's per-user limit and the users' entries;
 *   "read"     Redis could not be read as needed (the return value is then -1). */
#define IC_MAX_PROBLEMS 64
struct ic_problem {
    char check[8];
    char text[312];
};

typedef struct ic_report {
    int ok;                /* 1 when every check below passed */
    int found;             /* inv:2:{S}:meta exists */
    long long version;     /* meta.version */
    int segments;          /* meta.segments */
    long long stock_total; /* Σ cnt.t */
    long long remaining;   /* Σ stock */
    long long sold;        /* Σ cnt.s */
    long long orders;      /* Σ cnt.o */
    long long records;     /* order records read (any status, parts included) */
    long long live_units;  /* Σ quantity of live order records */
    long long live_orders; /* number of live order records (parts of multi-segment orders
                              included: each is a record of its segment, counted in its cnt.o) */
    long long cancelled;   /* number of cancelled order records */
    long long expired;     /* number of expired order records (holds) */
    long long reserved;    /* Σ units of reserved (hold) records = Σ cnt.r */
    long long reserved_orders, confirmed_orders;
    long long limit;          /* meta.limit (0: none) */
    long long max_user_units; /* most units one user holds in live orders (with a limit) */
    int nusers, users_overflow;
    struct ic_user users[IC_MAX_USERS];
    int negative_segments;  /* segments with stock < 0 */
    int locks_held;         /* segments whose lock key exists (not a violation) */
    long long multi_orders; /* primaries of multi-segment orders (any status) */
    long long live_parts;   /* live part records (part_of) */
    long long follows;      /* members of the segments' follow queues (part changes pending) */
    long long intents;      /* fields of inv:2:{S}:multi (multi-segment orders being made) */
    long long seg_stock[IC_MAX_SEGMENTS];
    long long seg_sold[IC_MAX_SEGMENTS];
    int nproblems;
    char problems[4096]; /* one line per problem (the first ones), "" when ok */
    int nlisted;         /* problems[0..nlisted) below: the first IC_MAX_PROBLEMS */
    struct ic_problem problem[IC_MAX_PROBLEMS];
} ic_report;

typedef struct ic_options {
    int quiescent;  /* also: no follow queued and no intent left */
    int live;       /* only the checks that hold at every instant while orders run: each
                       segment's own (one MULTI/EXEC), none across segments or of the SKU */
    int skip_users; /* leave out SPEC §11's per-user checks (a caller that judges the limit
                       against the history of rule changes: loadtest/chaos.py) */
    int key_schema; /* 2 (0 means 2): inv:2:{S}:…, inv:2:{S/k}:…; 1: the binaries before
                       34f3be8, inv:{S}:…, inv:{S:k}:… (no stray-key check: SKU S:1's keys are
                       segment 1's of S there) */
} ic_options;

/*
 * Reads every segment of sku from the Redis at redis_url (redis://[[user]:password@]host:port
 * [/db], or redis-cluster://host:port[,…]: the slot map from the first seed that answers, each
 * key from its master, found with CLUSTER KEYSLOT) and checks, for each k in [0, meta.segments),
 * on one MULTI/EXEC snapshot of the segment:
 *   stock >= 0; sver == meta.version; cnt.t == stock + cnt.s;
 *   cnt.s == Σ quantity of its order records whose status is not "cancelled";
 *   cnt.o == the number of those live records;
 *   every record is JSON with order_id == its hash field, sku == sku, segment == k, an integer
 *   quantity >= 1 and status created, reserved, confirmed, cancelled or expired (live: the
 *   first three), expires_at on a reserved one; cnt.r == Σ quantity of reserved records, and
 *   the due set is exactly the reserved records (every hold expires);
 *   with meta.limit > 0: no user holds more than it in live orders, and every live order of a
 *   user is in the user's entries of inv:2:{S}:users (SPEC §11; the entries are read before
 *   the segments: an entry goes only after its order has ended);
 *   every Idempotency-Key entry of the segment names one of its records;
 * and that no segment key the schema drops with its segment (store_keys.txt "dropped"), nor
 * one it does not know, exists for an index >= meta.segments, and that meta.state is not "p".
 * Multi-segment orders (docs/design.md "Orders larger than one segment", SPEC §8 "every part
 * is sold or none is"): a record's units in its segment are its own part's quantity when it
 * has parts (lua/include/units.lua), else its quantity; a part record (part_of) has no user,
 * expires_at or due entry and is no order of a user (the primary's quantity is the user's);
 * a primary's parts are in index order, its own segment first, and sum to its quantity; each
 * part record's part_of names a primary of the segment its id says, which lists the part with
 * the same quantity; each primary's parts exist with that quantity and a status agreeing with
 * the primary's (created/reserved = live, confirmed, cancelled, expired) — a part may lag
 * while `<part id>|<primary's status>` is in the primary's segment's follow queue, and parts
 * without their primary may exist while an intent for their hex is in inv:2:{S}:multi. With
 * opt->quiescent, also none of those left. opt NULL: the defaults (all zero).
 * Fills *rep (totals for comparison with GET status and a client's count of 201 units).
 * Returns 0 when the checks could run (rep->ok says whether they passed; a missing SKU is
 * found = 0, ok = 0), -1 when Redis could not be read (rep->problems says why).
 */
int ic_check(const char *redis_url, const char *sku, const ic_options *opt, ic_report *rep);

/* Waits (at most timeout_ms) until sku's follow queues and inv:2:{S}:multi are empty — the
 * sweepers drain them; a cut-off order's intent goes D + 1 s after its deadline. Returns how
 * many were left (0: drained, or no such SKU), -1 at once when Redis could not be read. */
long long ic_wait_drained(const char *redis_url, const char *sku, const ic_options *opt,
                          int timeout_ms);

/*
 * SPEC §8 for a limit group (SPEC §17; docs/design.md "Limit groups"): reads the group's limit
 * (inv:2:{G=<group>}:meta) and its users' entries (:users), then every order record of the
 * SKUs skus[0..nskus) (segments [0, max(segments, hwm))), and checks that no user holds more
 * units than the limit in live orders (created, reserved, confirmed) whose record's "grp" names
 * the group (a primary's, never a part's), and that each such order is in its user's entries of
 * the group. Fills rep's ok, found (the group exists: a deleted group caps nothing and is not
 * checked), limit, users, max_user_units and problems. 0 when the checks could run, -1 when
 * Redis could not be read.
 */
int ic_check_group(const char *redis_url, const char *group, const char *const *skus, int nskus,
                   ic_report *rep);

/* Writes the report (totals, then the problems) to stderr, prefixed with what. */
void ic_report_print(const char *what, const ic_report *rep);

/* The report as a JSON object (a new reference, NULL out of memory): the totals under the
 * names of ic_report, "segment": [{"stock", "sold"}, …] for each segment, "problems":
 * [{"check", "text"}, …] (the first IC_MAX_PROBLEMS) and "nproblems". */
json_t *ic_report_json(const char *sku, const ic_report *rep);

#endif
