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
 *     the same step; a log at its cap refuses the commit with nothing written.
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

static void test_reserve_lists_only_entries_past_their_deadline(void **state)
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
    SF_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements == 6, "reply type %d, %zu elements",
              r->type, r->elements);
    SF_ASSERT_EQ(r->element[0]->integer, STORE_RESERVE_OVER);
    SF_ASSERT_EQ(r->element[1]->integer, 2); /* the limit */
    SF_ASSERT_EQ(r->element[2]->integer, 2); /* held */
    SF_ASSERT_EQ(r->element[3]->integer, 6); /* segments to search: max(segments, hwm) */
    SF_ASSERT(strcmp(r->element[4]->str, HEX_A) == 0, "listed %s", r->element[4]->str);
    SF_ASSERT(strcmp(r->element[5]->str, "1000") == 0, "deadline %s", r->element[5]->str);
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
    const char *args[] = {"7", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, "256", "128", "0"};
    for (int i = 0; i < 3; i++) { /* three sweepers in turn */
        redisReply *r = eval(STORE_LUA_EXPIRE, 11, args);
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
    const char *args[] = {"7", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, id, "0"};
    redisReply *r = eval(STORE_LUA_CONFIRM, 10, args);
    SF_ASSERT_EQ(r->element[0]->integer, STORE_CONFIRM_EXPIRED);
    /* this call expired it (the instance counts the expiry) */
    SF_ASSERT(r->elements == 3 && r->element[2]->integer == 1, "%zu elements", r->elements);
    freeReplyObject(r);
    r = eval(STORE_LUA_CONFIRM, 10, args); /* and again: the same answer, nothing more */
    SF_ASSERT_EQ(r->element[0]->integer, STORE_CONFIRM_EXPIRED);
    SF_ASSERT_EQ(r->elements, 2); /* expired before: not counted again */
    freeReplyObject(r);
    SF_ASSERT_EQ(num("GET %s", STOCK), 10);
    SF_ASSERT_EQ(num("ZCARD %s", GIVE), 1);
    /* a hold not yet due is confirmed: out of the due set, r down, units still sold */
    const char *id2 = HEX_A "-0-" SKU;
    make_hold(id2, now_ms() + 60000);
    const char *args2[] = {"7", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, id2, "0"};
    r = eval(STORE_LUA_CONFIRM, 10, args2);
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
    const char *args[] = {"7",
                          STOCK,
                          SVER,
                          CNT,
                          "inv:2:{" SKU "/0}:orders",
                          "inv:2:{" SKU "/0}:idem",
                          DUE,
                          LOG,
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
                          "0"};
    return eval(STORE_LUA_COMMIT_ATOMIC, 21, args);
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
    const char *cargs[] = {"7", STOCK, CNT, ORDERS, DUE, GIVE, LOG, SVER, id, "1"};
    r = eval(STORE_LUA_CONFIRM, 10, cargs);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_release_counts_once, gf_flush),
        cmocka_unit_test_setup(test_resolve_is_compare_and_set, gf_flush),
        cmocka_unit_test_setup(test_reserve_lists_only_entries_past_their_deadline, gf_flush),
        cmocka_unit_test_setup(test_damaged_entry_fails_with_nothing_written, gf_flush),
        cmocka_unit_test_setup(test_hold_expires_once, gf_flush),
        cmocka_unit_test_setup(test_confirm_of_a_due_hold_expires_it, gf_flush),
        cmocka_unit_test_setup(test_order_log, gf_flush),
    };
    return cmocka_run_group_tests(tests, gf_group_setup, gf_group_teardown);
}
