/*
 * The sale rules' scripts (SPEC §11) run straight on a real redis-server, without inventoryd, so
 * each step of the protocols of docs/design.md "Per-user limits" and "Holds and their expiry" is
 * seen alone, including the ones a crash makes happen twice:
 *   - a give-back applied twice (two sweepers, or a sweeper and the canceller) counts once;
 *   - an entry is settled only with the deadline its settler saw (compare-and-set);
 *   - a refusal lists only the entries past their deadline and the clock margin;
 *   - a hold expires once, however many sweeps run, and a confirm that meets a due hold
 *     expires it instead of confirming it;
 *   - a user's damaged entry fails the reservation with nothing written;
 *   - the order log (SPEC §12): the commit, a confirm and an expiry each append their entry in
 *     the same step; a log at its cap refuses the commit with nothing written;
 *   - multi-segment orders (SPEC §13): a part's follow applied twice counts once, a confirm's
 *     follow and a cancel's end right in either order, an undo twice counts once and never
 *     touches a primary, multi_due.lua lists only intents past deadline + margin, a primary's
 *     end gives back its own part, queues a follow per other part and logs the order's total
 *     with its parts, and the expiry sweep returns the follows it queued.
 * The scripts are the text the binary sends (the generated store_lua.h).
 */
#include "svc_test.h"

#include <stdarg.h>

#include "store_scripts.h"

#define SKU "sale"
#define USERS "inv:2:{" SKU "}:users"
#define META "inv:2:{" SKU "}:meta"
#define STOCK "inv:2:{" SKU "/0}:stock"
#define CNT "inv:2:{" SKU "/0}:cnt"
#define ORDERS "inv:2:{" SKU "/0}:orders"
#define DUE "inv:2:{" SKU "/0}:due"
#define GIVE "inv:2:{" SKU "/0}:give"
#define LOG "inv:2:{" SKU "/0}:log"
#define SVER "inv:2:{" SKU "/0}:sver"
#define FOLLOW "inv:2:{" SKU "/0}:follow"
#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* One command on the group's Redis: its reply as an integer (an integer, or a string that is
 * one; -1 for a nil reply), for assertions on counters kept as strings. */
static long long num(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long num(const char *fmt, ...)
{
    redisContext *c = rf_connect(gf_redis);
    SF_ASSERT(c != NULL, "%s", "connect");
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    SF_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt, r && r->str ? r->str : "");
    long long v = r->type == REDIS_REPLY_INTEGER  ? r->integer
                  : r->type == REDIS_REPLY_STRING ? atoll(r->str)
                                                  : -1;
    freeReplyObject(r);
    return v;
}

/* A bulk string reply (HGET), allocated, or NULL for nil. */
static char *str(const char *fmt, const char *a, const char *b)
{
    redisReply *r = rf_command(gf_redis, fmt, a, b);
    char *v = r && r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

/* EVAL of script with the keys and args given (argv: "numkeys", keys..., args...). */
static redisReply *eval(const char *script, int argc, const char **argv)
{
    redisContext *c = redisConnect("127.0.0.1", rf_port(gf_redis));
    SF_ASSERT(c && !c->err, "connect: %s", c ? c->errstr : "oom");
    const char *full[32] = {"EVAL", script};
    for (int i = 0; i < argc; i++)
        full[2 + i] = argv[i];
    redisReply *r = redisCommandArgv(c, argc + 2, full, NULL);
    redisFree(c);
    SF_ASSERT(r != NULL, "EVAL: no reply");
    return r;
}

static long long now_ms(void)
{
    redisReply *r = rf_command(gf_redis, "TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

static void test_release_counts_once(void **state)
{
    (void)state;
    num("HSET %s u1 {\"" HEX_A "\":[2,0,0],\"" HEX_B "\":[1,0,0]}", USERS);
    const char *args[] = {"1", USERS, "u1", HEX_A};
    redisReply *r = eval(STORE_LUA_USER_RELEASE, 4, args);
    SF_ASSERT_EQ(r->element[0]->integer, 1);
    freeReplyObject(r);
    r = eval(STORE_LUA_USER_RELEASE, 4, args); /* the same give-back again */
    SF_ASSERT_EQ(r->element[0]->integer, 0);
    freeReplyObject(r);
    char *v = str("HGET %s %s", USERS, "u1");
    SF_ASSERT(v && strstr(v, HEX_B) && !strstr(v, HEX_A), "entries left: %s", v ? v : "none");
    free(v);
    const char *last[] = {"1", USERS, "u1", HEX_B};
    freeReplyObject(eval(STORE_LUA_USER_RELEASE, 4, last));
    SF_ASSERT_EQ(num("HEXISTS %s u1", USERS), 0); /* no entry: no field */
}

static void test_resolve_is_compare_and_set(void **state)
{
    (void)state;
    num("HSET %s u1 {\"" HEX_A "\":[1,1000,-1],\"" HEX_B "\":[1,2000,-1]}", USERS);
    /* a settler that saw another deadline changes nothing */
    const char *stale[] = {"1", USERS, "u1", HEX_A, "999", "0"};
    redisReply *r = eval(STORE_LUA_USER_RESOLVE, 6, stale);
    SF_ASSERT_EQ(r->integer, 0);
    freeReplyObject(r);
    const char *ok[] = {"1", USERS, "u1", HEX_A, "1000", "0", HEX_B, "2000", "1"};
    r = eval(STORE_LUA_USER_RESOLVE, 9, ok);
    SF_ASSERT_EQ(r->integer, 2);
    freeReplyObject(r);
    char *v = str("HGET %s %s", USERS, "u1");
    /* A went (never committed), B stays, known committed (deadline 0) */
    SF_ASSERT(v && !strstr(v, HEX_A) && strstr(v, "\"" HEX_B "\":[1,0,-1]"), "entries: %s",
              v ? v : "none");
    free(v);
}

static void test_reserve_lists_entries_past_their_deadline_first(void **state)
{
    (void)state;
    num("HSET %s segments 4 hwm 6 limit 2", META);
    long long now = now_ms();
    char fresh[128];
    snprintf(fresh, sizeof fresh, "{\"" HEX_A "\":[1,1000,-1],\"" HEX_B "\":[1,%lld,-1]}",
             now + 60000);
    redisReply *w = rf_command(gf_redis, "HSET %s u1 %s", USERS, fresh);
    freeReplyObject(w);
    const char *args[] = {"2", USERS,  META,  "u1", "cccccccccccccccccccccccccccccccc",
                          "1", "5000", "1000"};
    redisReply *r = eval(STORE_LUA_USER_RESERVE, 8, args);
    SF_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements == 10, "reply type %d, %zu elements",
              r->type, r->elements);
    SF_ASSERT_EQ(r->element[0]->integer, STORE_RESERVE_OVER);
    SF_ASSERT_EQ(r->element[1]->integer, 2); /* the limit */
    SF_ASSERT_EQ(r->element[2]->integer, 2); /* held */
    SF_ASSERT_EQ(r->element[3]->integer, 6); /* segments to search: max(segments, hwm) */
    /* the entry past its deadline first, then (issue 29: its order may have ended) the one
     * within it, each marked */
    SF_ASSERT(strcmp(r->element[4]->str, HEX_A) == 0, "listed %s", r->element[4]->str);
    SF_ASSERT(strcmp(r->element[5]->str, "1000") == 0, "deadline %s", r->element[5]->str);
    SF_ASSERT(strcmp(r->element[6]->str, "1") == 0, "past %s", r->element[6]->str);
    SF_ASSERT(strcmp(r->element[7]->str, HEX_B) == 0, "listed %s", r->element[7]->str);
    SF_ASSERT(strcmp(r->element[9]->str, "0") == 0, "past %s", r->element[9]->str);
    freeReplyObject(r);
    /* nothing was written for the refused request */
    char *v = str("HGET %s %s", USERS, "u1");
    SF_ASSERT(v && !strstr(v, "cccc"), "entries: %s", v ? v : "none");
    free(v);
}

static void test_damaged_entry_fails_with_nothing_written(void **state)
{
    (void)state;
    num("HSET %s segments 1 hwm 1 limit 5", META);
    num("HSET %s u1 %s", USERS, "[1,2,3]x");
    const char *args[] = {"2", USERS, META, "u1", HEX_A, "1", "5000", "1000"};
    redisReply *r = eval(STORE_LUA_USER_RESERVE, 8, args);
    SF_ASSERT(r->type == REDIS_REPLY_ERROR, "reply type %d", r->type);
    freeReplyObject(r);
    char *v = str("HGET %s %s", USERS, "u1");
    SF_ASSERT(v && strcmp(v, "[1,2,3]x") == 0, "entry changed: %s", v ? v : "none");
    free(v);
}

/* A segment with one hold of 3 units (due at due_ms) of user u1, plus 7 units left. */
static void make_hold(const char *id, long long due_ms)
{
    num("SET %s 7", STOCK);
    num("HSET %s t 10 s 3 o 1 r 3", CNT);
    char rec[256];
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"sku\":\"" SKU "\",\"quantity\":3,\"segment\":0,"
             "\"user_id\":\"u1\",\"status\":\"reserved\",\"expires_at\":\"x\"}",
             id);
    redisReply *w = rf_command(gf_redis, "HSET %s %s %s", ORDERS, id, rec);
    freeReplyObject(w);
    num("ZADD %s %lld %s", DUE, due_ms, id);
}

static void test_hold_expires_once(void **state)
{
    (void)state;
    const char *id = HEX_A "-0-" SKU;
    make_hold(id, now_ms() - 10);
    const char *args[] = {"8",  STOCK,  CNT,   ORDERS, DUE, GIVE, LOG,
                          SVER, FOLLOW, "256", "128",  "0", "128"};
    for (int i = 0; i < 3; i++) { /* three sweepers in turn */
        redisReply *r = eval(STORE_LUA_EXPIRE, 13, args);
        SF_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements >= 5, "reply type %d", r->type);
        SF_ASSERT_EQ(r->element[0]->integer, i == 0 ? 1 : 0);
        SF_ASSERT_EQ(r->element[3]->integer, 0); /* no hold left to be due */
        SF_ASSERT_EQ(r->element[4]->integer, 1); /* the give-back stays queued until applied */
        freeReplyObject(r);
    }
    SF_ASSERT_EQ(num("GET %s", STOCK), 10);
    SF_ASSERT_EQ(num("HGET %s s", CNT), 0);
    SF_ASSERT_EQ(num("HGET %s r", CNT), 0);
    SF_ASSERT_EQ(num("ZCARD %s", DUE), 0);
    char *rec = str("HGET %s %s", ORDERS, id);
    SF_ASSERT(rec && strstr(rec, "\"status\":\"expired\""), "record %s", rec ? rec : "none");
    free(rec);
    SF_ASSERT_EQ(num("ZSCORE %s %s", GIVE, HEX_A "u1") > 0, 1);
}

static void test_confirm_of_a_due_hold_expires_it(void **state)
{
    (void)state;
    const char *id = HEX_B "-0-" SKU;
    make_hold(id, now_ms() - 10);
    const char *args[] = {"8", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, FOLLOW, id, "0"};
    redisReply *r = eval(STORE_LUA_CONFIRM, 11, args);
    SF_ASSERT_EQ(r->element[0]->integer, STORE_CONFIRM_EXPIRED);
    /* this call expired it (the instance counts the expiry) */
    SF_ASSERT(r->elements == 3 && r->element[2]->integer == 1, "%zu elements", r->elements);
    freeReplyObject(r);
    r = eval(STORE_LUA_CONFIRM, 11, args); /* and again: the same answer, nothing more */
    SF_ASSERT_EQ(r->element[0]->integer, STORE_CONFIRM_EXPIRED);
    SF_ASSERT_EQ(r->elements, 2); /* expired before: not counted again */
    freeReplyObject(r);
    SF_ASSERT_EQ(num("GET %s", STOCK), 10);
    SF_ASSERT_EQ(num("ZCARD %s", GIVE), 1);
    /* a hold not yet due is confirmed: out of the due set, r down, units still sold */
    const char *id2 = HEX_A "-0-" SKU;
    make_hold(id2, now_ms() + 60000);
    const char *args2[] = {"8", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, FOLLOW, id2, "0"};
    r = eval(STORE_LUA_CONFIRM, 11, args2);
    SF_ASSERT_EQ(r->element[0]->integer, STORE_CONFIRM_DONE);
    SF_ASSERT(strstr(r->element[1]->str, "\"status\":\"confirmed\"") &&
                  !strstr(r->element[1]->str, "expires_at"),
              "record %s", r->element[1]->str);
    freeReplyObject(r);
    SF_ASSERT_EQ(num("GET %s", STOCK), 7);
    SF_ASSERT_EQ(num("HGET %s r", CNT), 0);
    SF_ASSERT_EQ(num("ZSCORE %s %s", DUE, id2), -1);
    SF_ASSERT_EQ(num("EXISTS %s", LOG), 0); /* no order log asked for: none written */
}

/* The commit (the atomic strategy's script is the commit's body alone) of 2 units as a hold. */
static redisReply *commit(const char *id, const char *cap)
{
    char rec[256];
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"sku\":\"" SKU "\",\"quantity\":2,\"segment\":0,"
             "\"user_id\":\"u1\",\"status\":\"reserved\"}",
             id);
    const char *args[] = {"8",
                          STOCK,
                          SVER,
                          CNT,
                          "inv:2:{" SKU "/0}:orders",
                          "inv:2:{" SKU "/0}:idem",
                          DUE,
                          LOG,
                          "inv:2:{" SKU "/0}:rver",
                          "5",
                          "2",
                          id,
                          rec,
                          "",
                          "0",
                          "0",
                          "0",
                          "60",
                          cap,
                          "u1",
                          SKU,
                          "0",
                          "",
                          "",
                          "0",
                          "",
                          "0"};
    return eval(STORE_LUA_COMMIT_ATOMIC, 27, args);
}

static void test_order_log(void **state)
{
    (void)state;
    num("SET %s 10", STOCK);
    num("SET %s 5", SVER);
    num("HSET %s t 10 s 0 o 0", CNT);
    const char *id = HEX_A "-0-" SKU;
    redisReply *r = commit(id, "2");
    SF_ASSERT_EQ(r->element[0]->integer, STORE_COMMIT_OK);
    freeReplyObject(r);
    SF_ASSERT_EQ(num("XLEN %s", LOG), 1);
    redisReply *x = rf_command(gf_redis, "XRANGE %s - +", LOG);
    const redisReply *f = x->element[0]->element[1];
    const char *want[] = {"event", "reserved", "order", id,         "sku", SKU,       "segment",
                          "0",     "user",     "u1",    "quantity", "2",   "version", "5"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i += 2) {
        int found = 0;
        for (size_t j = 0; j + 1 < f->elements; j += 2)
            if (strcmp(f->element[j]->str, want[i]) == 0) {
                SF_ASSERT(strcmp(f->element[j + 1]->str, want[i + 1]) == 0, "%s: %s, want %s",
                          want[i], f->element[j + 1]->str, want[i + 1]);
                found = 1;
            }
        SF_ASSERT(found, "field %s missing", want[i]);
    }
    freeReplyObject(x);
    /* a confirm logs its change */
    const char *cargs[] = {"8", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, FOLLOW, id, "1"};
    r = eval(STORE_LUA_CONFIRM, 11, cargs);
    SF_ASSERT_EQ(r->element[0]->integer, STORE_CONFIRM_DONE);
    freeReplyObject(r);
    SF_ASSERT_EQ(num("XLEN %s", LOG), 2);
    /* at the cap (2 entries), the next commit writes nothing at all */
    r = commit(HEX_B "-0-" SKU, "2");
    SF_ASSERT_EQ(r->element[0]->integer, STORE_COMMIT_LOG_FULL);
    SF_ASSERT_EQ(r->element[1]->integer, 2);
    freeReplyObject(r);
    SF_ASSERT_EQ(num("GET %s", STOCK), 8);
    SF_ASSERT_EQ(num("HLEN %s", ORDERS), 1);
    SF_ASSERT_EQ(num("XLEN %s", LOG), 2);
}

/* ---- multi-segment orders (SPEC §13, docs/design.md "Orders larger than one segment") ---- */

#define SEG(k, suffix) "inv:2:{" SKU "/" #k "}:" suffix
#define MULTI "inv:2:{" SKU "}:multi"
#define PRIMARY HEX_A "-0-" SKU
#define PART1 HEX_A "-1-" SKU
#define PART2 HEX_A "-2-" SKU

/* Segment k (0..2) with t 10 units of which the records given are live: sold s (r of them
 * held) in o orders. */
static void seg_counts(int k, long long stock, long long s, long long o, long long r)
{
    char key[64];
    snprintf(key, sizeof key, "inv:2:{" SKU "/%d}:stock", k);
    num("SET %s %lld", key, stock);
    snprintf(key, sizeof key, "inv:2:{" SKU "/%d}:cnt", k);
    num("HSET %s t %lld s %lld o %lld r %lld", key, stock + s, s, o, r);
}

/* The counters of segment k, {stock, s, o, r}, asserted. */
static void seg_expect(int k, long long stock, long long s, long long o, long long r)
{
    char key[64], cnt[64];
    snprintf(key, sizeof key, "inv:2:{" SKU "/%d}:stock", k);
    snprintf(cnt, sizeof cnt, "inv:2:{" SKU "/%d}:cnt", k);
    long long got[4] = {num("GET %s", key), num("HGET %s s", cnt), num("HGET %s o", cnt),
                        num("HGET %s r", cnt)};
    long long want[4] = {stock, s, o, r};
    for (int i = 0; i < 4; i++)
        SF_ASSERT(got[i] == want[i],
                  "segment %d: {stock s o r} = {%lld %lld %lld %lld}, want "
                  "{%lld %lld %lld %lld}",
                  k, got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3]);
}

/* A part record (part_of the primary HEX_A-0) of q units in segment k, in status. */
static void put_part(int k, int q, const char *status)
{
    char id[128], rec[512], key[64];
    snprintf(id, sizeof id, HEX_A "-%d-" SKU, k);
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"part_of\":\"" PRIMARY "\",\"sku\":\"" SKU "\",\"segment\":%d,"
             "\"quantity\":%d,\"status\":\"%s\",\"created_at\":\"x\"}",
             id, k, q, status);
    snprintf(key, sizeof key, "inv:2:{" SKU "/%d}:orders", k);
    redisReply *w = rf_command(gf_redis, "HSET %s %s %s", key, id, rec);
    freeReplyObject(w);
}

/* The primary HEX_A-0 of 9 units (parts 0:2, 1:3, 2:4) of user u1, in status. */
static void put_primary(const char *status)
{
    char rec[512];
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"" PRIMARY "\",\"sku\":\"" SKU "\",\"segment\":0,\"quantity\":9,"
             "\"parts\":[{\"segment\":0,\"quantity\":2},{\"segment\":1,\"quantity\":3},"
             "{\"segment\":2,\"quantity\":4}],\"user_id\":\"u1\",\"status\":\"%s\","
             "\"created_at\":\"x\"}",
             status);
    redisReply *w = rf_command(gf_redis, "HSET %s %s %s", ORDERS, PRIMARY, rec);
    freeReplyObject(w);
}

/* The code of a script's {code, ...} reply; fails on any other reply (an error: its text). */
static long long code(const redisReply *r)
{
    SF_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER,
              "reply type %d: %s", r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
    return r->element[0]->integer;
}

static long long follow(int k, const char *id, const char *status)
{
    char stock[64], cnt[64], orders[64];
    snprintf(stock, sizeof stock, "inv:2:{" SKU "/%d}:stock", k);
    snprintf(cnt, sizeof cnt, "inv:2:{" SKU "/%d}:cnt", k);
    snprintf(orders, sizeof orders, "inv:2:{" SKU "/%d}:orders", k);
    const char *args[] = {"3", stock, cnt, orders, id, status};
    redisReply *r = eval(STORE_LUA_PART_FOLLOW, 6, args);
    long long code = r->type == REDIS_REPLY_ARRAY ? r->element[0]->integer : -100;
    freeReplyObject(r);
    return code;
}

/* part_undo.lua on segment k for id; mode "" (a part) or "primary" (the healer's question). */
static long long undo_as(int k, const char *id, const char *mode)
{
    char stock[64], cnt[64], orders[64], undone[64];
    snprintf(stock, sizeof stock, "inv:2:{" SKU "/%d}:stock", k);
    snprintf(cnt, sizeof cnt, "inv:2:{" SKU "/%d}:cnt", k);
    snprintf(orders, sizeof orders, "inv:2:{" SKU "/%d}:orders", k);
    snprintf(undone, sizeof undone, "inv:2:{" SKU "/%d}:undone", k);
    const char *args[] = {"4", stock, cnt, orders, undone, id, "60000", mode};
    redisReply *r = eval(STORE_LUA_PART_UNDO, 8, args);
    long long code = r->type == REDIS_REPLY_ARRAY ? r->element[0]->integer : -100;
    freeReplyObject(r);
    return code;
}

static long long undo(int k, const char *id)
{
    return undo_as(k, id, "");
}

static void test_part_follow_counts_once(void **state)
{
    (void)state;
    put_part(1, 3, "reserved");
    seg_counts(1, 7, 3, 0, 3);
    SF_ASSERT_EQ(follow(1, PART1, "cancelled"), STORE_FOLLOW_DONE);
    SF_ASSERT_EQ(follow(1, PART1, "cancelled"), STORE_FOLLOW_LEFT); /* twice: counted once */
    SF_ASSERT_EQ(follow(1, PART1, "expired"), STORE_FOLLOW_LEFT);
    seg_expect(1, 10, 0, 0, 0);
    char *rec = str("HGET %s %s", SEG(1, "orders"), PART1);
    SF_ASSERT(rec && strstr(rec, "\"status\":\"cancelled\""), "record %s", rec ? rec : "none");
    free(rec);
    SF_ASSERT_EQ(follow(2, PART2, "cancelled"), STORE_FOLLOW_NONE); /* no such part */
    /* not a part: refused with nothing written; a status no part takes: refused */
    put_primary("created");
    seg_counts(0, 8, 2, 1, 0);
    SF_ASSERT_EQ(follow(0, PRIMARY, "cancelled"), -100);
    SF_ASSERT_EQ(follow(1, PART1, "created"), -100);
    seg_expect(0, 8, 2, 1, 0);
    rec = str("HGET %s %s", ORDERS, PRIMARY);
    SF_ASSERT(rec && strstr(rec, "\"status\":\"created\""), "record %s", rec ? rec : "none");
    free(rec);
}

static void test_part_follow_confirm_and_cancel_in_either_order(void **state)
{
    (void)state;
    /* segment 1: a confirm's follow, then the cancel's; segment 2: the other way round */
    put_part(1, 3, "reserved");
    seg_counts(1, 7, 3, 0, 3);
    put_part(2, 4, "reserved");
    seg_counts(2, 6, 4, 0, 4);
    SF_ASSERT_EQ(follow(1, PART1, "confirmed"), STORE_FOLLOW_DONE);
    seg_expect(1, 7, 3, 0, 0);
    SF_ASSERT_EQ(follow(1, PART1, "confirmed"), STORE_FOLLOW_LEFT);
    SF_ASSERT_EQ(follow(1, PART1, "cancelled"), STORE_FOLLOW_DONE);
    SF_ASSERT_EQ(follow(2, PART2, "cancelled"), STORE_FOLLOW_DONE);
    SF_ASSERT_EQ(follow(2, PART2, "confirmed"), STORE_FOLLOW_LEFT);
    seg_expect(1, 10, 0, 0, 0);
    seg_expect(2, 10, 0, 0, 0);
    char *a = str("HGET %s %s", SEG(1, "orders"), PART1),
         *b = str("HGET %s %s", SEG(2, "orders"), PART2);
    SF_ASSERT(a && b && strstr(a, "\"cancelled\"") && strstr(b, "\"cancelled\""), "%s / %s",
              a ? a : "none", b ? b : "none");
    free(a);
    free(b);
    /* a created part asked to be confirmed is left alone */
    put_part(1, 3, "created");
    seg_counts(1, 7, 3, 0, 0);
    SF_ASSERT_EQ(follow(1, PART1, "confirmed"), STORE_FOLLOW_LEFT);
    seg_expect(1, 7, 3, 0, 0);
}

static void test_part_undo_counts_once_and_refuses_a_primary(void **state)
{
    (void)state;
    put_part(1, 3, "reserved");
    seg_counts(1, 7, 3, 0, 3);
    SF_ASSERT_EQ(undo(1, PART1), STORE_UNDO_DONE);
    SF_ASSERT_EQ(undo(1, PART1), STORE_UNDO_NONE); /* twice: counted once */
    seg_expect(1, 10, 0, 0, 0);
    SF_ASSERT_EQ(num("HEXISTS %s %s", SEG(1, "orders"), PART1), 0);
    put_part(2, 4, "created");
    seg_counts(2, 6, 4, 0, 0);
    SF_ASSERT_EQ(undo(2, PART2), STORE_UNDO_DONE);
    seg_expect(2, 10, 0, 0, 0);
    /* never a primary: refused, nothing written */
    put_primary("created");
    seg_counts(0, 8, 2, 1, 0);
    SF_ASSERT_EQ(undo(0, PRIMARY), -100);
    seg_expect(0, 8, 2, 1, 0);
    SF_ASSERT_EQ(num("HEXISTS %s %s", ORDERS, PRIMARY), 1);
    /* issue 29: every undo tombstones the id (a part undone, or never written), with a TTL,
     * and an error writes none */
    SF_ASSERT(num("ZSCORE %s %s", SEG(1, "undone"), PART1) > 0, "%s", "part 1's tombstone");
    SF_ASSERT(num("ZSCORE %s %s", SEG(2, "undone"), PART2) > 0, "%s", "part 2's tombstone");
    SF_ASSERT(num("PTTL %s", SEG(1, "undone")) > 0, "%s", "the tombstones' TTL");
    SF_ASSERT_EQ(num("EXISTS %s", SEG(0, "undone")), 0);
    /* the healer's question on the primary's segment: there -> whole, nothing written; absent
     * -> tombstoned in the same step (its commit can never land after) */
    SF_ASSERT_EQ(undo_as(0, PRIMARY, "primary"), STORE_UNDO_WHOLE);
    SF_ASSERT_EQ(num("EXISTS %s", SEG(0, "undone")), 0);
    SF_ASSERT_EQ(num("HDEL %s %s", ORDERS, PRIMARY), 1);
    SF_ASSERT_EQ(undo_as(0, PRIMARY, "primary"), STORE_UNDO_NONE);
    SF_ASSERT(num("ZSCORE %s %s", SEG(0, "undone"), PRIMARY) > 0, "%s", "the primary's tombstone");
}

static void test_multi_due_only_past_deadline_and_margin(void **state)
{
    (void)state;
    long long now = now_ms();
    const char *hex[3] = {HEX_A, HEX_B, "cccccccccccccccccccccccccccccccc"};
    long long deadline[3] = {now - 3000, now - 200, now + 60000};
    for (int i = 0; i < 3; i++) {
        char v[256];
        snprintf(v, sizeof v,
                 "{\"order\":\"%s-0-" SKU "\",\"parts\":[[0,2],[1,3]],\"deadline\":%lld}", hex[i],
                 deadline[i]);
        redisReply *w = rf_command(gf_redis, "HSET %s %s %s", MULTI, hex[i], v);
        freeReplyObject(w);
    }
    /* the reply (issue 33): {cart intents, m, then m multi-segment hex/intent pairs, then the
     * due cart intents' pairs}; KEYS multi alone: no cart intent */
    const char *args[] = {"1", MULTI, "1000", "64"};
    redisReply *r = eval(STORE_LUA_MULTI_DUE, 4, args);
    SF_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements == 4, "reply type %d, %zu elements",
              r->type, r->elements);
    SF_ASSERT_EQ(r->element[0]->integer, 0);
    SF_ASSERT_EQ(r->element[1]->integer, 1);
    SF_ASSERT(strcmp(r->element[2]->str, HEX_A) == 0, "due: %s", r->element[2]->str);
    SF_ASSERT(strstr(r->element[3]->str, "\"deadline\""), "intent %s", r->element[3]->str);
    freeReplyObject(r);
    const char *none[] = {"1", MULTI, "5000", "64"}; /* a wider margin: none due yet */
    r = eval(STORE_LUA_MULTI_DUE, 4, none);
    SF_ASSERT_EQ(r->elements, 2);
    SF_ASSERT_EQ(r->element[1]->integer, 0);
    freeReplyObject(r);
    SF_ASSERT_EQ(num("HLEN %s", MULTI), 3); /* it only reads */
}

/* The end of a primary: its own units back, a follow queued per other part, one log entry with
 * the order's total and its parts; a part's own id is no order. */
static void test_primary_end_queues_follows(void **state)
{
    (void)state;
    put_primary("reserved");
    seg_counts(0, 8, 2, 1, 2);
    num("ZADD %s %lld %s", DUE, now_ms() + 60000, PRIMARY);
    put_part(1, 3, "reserved");
    seg_counts(1, 7, 3, 0, 3);
    /* confirm: "|confirmed" follows */
    const char *cargs[] = {"8", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, FOLLOW, PRIMARY, "1"};
    redisReply *r = eval(STORE_LUA_CONFIRM, 11, cargs);
    SF_ASSERT_EQ(code(r), STORE_CONFIRM_DONE);
    freeReplyObject(r);
    seg_expect(0, 8, 2, 1, 0);
    SF_ASSERT(num("ZSCORE %s %s", FOLLOW, PART1 "|confirmed") > 0, "%s", "confirm follow");
    SF_ASSERT(num("ZSCORE %s %s", FOLLOW, PART2 "|confirmed") > 0, "%s", "confirm follow");
    SF_ASSERT_EQ(num("ZCARD %s", FOLLOW), 2);
    /* cancel: its own part back, "|cancelled" follows, the give-back */
    const char *args[] = {"8", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, FOLLOW, PRIMARY, "1"};
    r = eval(STORE_LUA_CANCEL, 11, args);
    SF_ASSERT_EQ(code(r), STORE_CANCEL_DONE);
    freeReplyObject(r);
    seg_expect(0, 10, 0, 0, 0);
    SF_ASSERT(num("ZSCORE %s %s", FOLLOW, PART1 "|cancelled") > 0, "%s", "cancel follow");
    SF_ASSERT(num("ZSCORE %s %s", FOLLOW, PART2 "|cancelled") > 0, "%s", "cancel follow");
    SF_ASSERT_EQ(num("ZCARD %s", GIVE), 1);
    seg_expect(1, 7, 3, 0, 3); /* the part waits for its follow */
    /* the log: two entries, each with the order's 9 units and its parts */
    redisReply *x = rf_command(gf_redis, "XRANGE %s - +", LOG);
    SF_ASSERT(x && x->elements == 2, "%zu log entries", x ? x->elements : 0);
    for (size_t e = 0; e < 2; e++) {
        const redisReply *f = x->element[e]->element[1];
        int q = 0, parts = 0;
        for (size_t j = 0; j + 1 < f->elements; j += 2) {
            if (strcmp(f->element[j]->str, "quantity") == 0)
                q = strcmp(f->element[j + 1]->str, "9") == 0;
            if (strcmp(f->element[j]->str, "parts") == 0)
                parts = strcmp(f->element[j + 1]->str, "0:2,1:3,2:4") == 0;
        }
        SF_ASSERT(q && parts, "log entry %zu: quantity 9 %d, parts %d", e, q, parts);
    }
    freeReplyObject(x);
    /* a part's id is not an order: no cancel, nothing written */
    const char *pargs[] = {"8",
                           SEG(1, "stock"),
                           SEG(1, "cnt"),
                           SEG(1, "orders"),
                           SEG(1, "due"),
                           SEG(1, "give"),
                           SEG(1, "log"),
                           SEG(1, "sver"),
                           SEG(1, "follow"),
                           PART1,
                           "1"};
    r = eval(STORE_LUA_CANCEL, 11, pargs);
    SF_ASSERT_EQ(code(r), STORE_CANCEL_NONE);
    freeReplyObject(r);
    seg_expect(1, 7, 3, 0, 3);
    SF_ASSERT_EQ(num("EXISTS %s", SEG(1, "log")), 0);
    /* a primary whose parts do not add up to its quantity is damaged: nothing written */
    redisReply *w = rf_command(gf_redis, "HSET %s %s %s", ORDERS, HEX_B "-0-" SKU,
                               "{\"order_id\":\"" HEX_B "-0-" SKU "\",\"sku\":\"" SKU "\","
                               "\"segment\":0,\"quantity\":9,\"parts\":[{\"segment\":0,"
                               "\"quantity\":2},{\"segment\":1,\"quantity\":3}],"
                               "\"status\":\"created\"}");
    freeReplyObject(w);
    seg_counts(0, 8, 2, 1, 0);
    const char *bargs[] = {"8", STOCK, CNT,    ORDERS,          DUE, GIVE,
                           LOG, SVER,  FOLLOW, HEX_B "-0-" SKU, "1"};
    r = eval(STORE_LUA_CANCEL, 11, bargs);
    SF_ASSERT(r->type == REDIS_REPLY_ERROR, "reply type %d", r->type);
    freeReplyObject(r);
    seg_expect(0, 8, 2, 1, 0);
}

/* The sweep expires a due primary and returns the follows of its segment with the give-backs. */
static void test_expire_returns_follows(void **state)
{
    (void)state;
    put_primary("reserved");
    seg_counts(0, 8, 2, 1, 2);
    num("ZADD %s %lld %s", DUE, now_ms() - 10, PRIMARY);
    const char *args[] = {"8",  STOCK,  CNT,   ORDERS, DUE, GIVE, LOG,
                          SVER, FOLLOW, "256", "128",  "0", "128"};
    redisReply *r = eval(STORE_LUA_EXPIRE, 13, args);
    SF_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements == 10, "reply type %d, %zu elements",
              r->type, r->elements);
    SF_ASSERT_EQ(r->element[0]->integer, 1); /* expired */
    SF_ASSERT_EQ(r->element[4]->integer, 1); /* give-backs queued */
    SF_ASSERT_EQ(r->element[5]->integer, 2); /* follows queued */
    SF_ASSERT_EQ(r->element[6]->integer, 1); /* give-backs returned */
    SF_ASSERT(strcmp(r->element[7]->str, HEX_A "u1") == 0, "give-back %s", r->element[7]->str);
    int seen = 0;
    for (int i = 8; i < 10; i++)
        seen += strcmp(r->element[i]->str, PART1 "|expired") == 0 ||
                strcmp(r->element[i]->str, PART2 "|expired") == 0;
    SF_ASSERT_EQ(seen, 2);
    freeReplyObject(r);
    seg_expect(0, 10, 0, 0, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_release_counts_once, gf_flush),
        cmocka_unit_test_setup(test_resolve_is_compare_and_set, gf_flush),
        cmocka_unit_test_setup(test_reserve_lists_entries_past_their_deadline_first, gf_flush),
        cmocka_unit_test_setup(test_damaged_entry_fails_with_nothing_written, gf_flush),
        cmocka_unit_test_setup(test_hold_expires_once, gf_flush),
        cmocka_unit_test_setup(test_confirm_of_a_due_hold_expires_it, gf_flush),
        cmocka_unit_test_setup(test_order_log, gf_flush),
        cmocka_unit_test_setup(test_part_follow_counts_once, gf_flush),
        cmocka_unit_test_setup(test_part_follow_confirm_and_cancel_in_either_order, gf_flush),
        cmocka_unit_test_setup(test_part_undo_counts_once_and_refuses_a_primary, gf_flush),
        cmocka_unit_test_setup(test_multi_due_only_past_deadline_and_margin, gf_flush),
        cmocka_unit_test_setup(test_primary_end_queues_follows, gf_flush),
        cmocka_unit_test_setup(test_expire_returns_follows, gf_flush),
    };
    return cmocka_run_group_tests(tests, gf_group_setup, gf_group_teardown);
}
