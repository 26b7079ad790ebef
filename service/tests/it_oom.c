/*
 * A Redis out of memory (docs/deployment.md, "Backlog sizing": maxmemory with noeviction is the
 * order log's cap). With maxmemory-policy noeviction Redis refuses a script at its first
 * memory-growing write when the script has written nothing yet (and lets a script that has
 * written run to its end). Our scripts do every check before their first write, so a full Redis
 * refuses an order, or a cancel, whole: 503, and the data set byte for byte as it was (DEBUG
 * DIGEST: stock, counters, order records, no log entry). Once memory is freed the same order
 * is placed with its log entry, so the refusal was the memory and nothing else.
 * Both strategies: `atomic` (the commit script is the order's first write) and `segmented`
 * (the lock's SET comes first).
 */
#include "svc_test.h"

#define OOM_SEGMENTS 4
#define OOM_STOCK 100
#define OOM_FILLER_BYTES (64 * 1024)
#define OOM_FILLERS_MAX 4096

static rf_server *redis;

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--maxmemory-policy", "noeviction", "--enable-debug-command", "yes",
                          NULL};
    redis = rf_start(args);
    return redis ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    rf_stop(redis);
    redis = NULL;
    return 0;
}

/* DEBUG DIGEST: a hash of the whole data set (every key, type and value). */
static void digest(char *out, size_t cap)
{
    redisReply *r = rf_command(redis, "DEBUG DIGEST");
    SF_ASSERT(r != NULL && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING),
              "DEBUG DIGEST failed");
    snprintf(out, cap, "%s", r->str);
    freeReplyObject(r);
}

/* Entries in every segment's order log of sku. */
static long long log_entries(const char *sku)
{
    long long n = 0;
    for (int k = 0; k < OOM_SEGMENTS; k++)
        n += rf_integer(redis, "XLEN inv:2:{%s/%d}:log", sku, k);
    return n;
}

static long long info_used_memory(void)
{
    redisReply *r = rf_command(redis, "INFO memory");
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING, "INFO memory failed");
    const char *p = strstr(r->str, "used_memory:");
    SF_ASSERT(p != NULL, "no used_memory in INFO");
    long long used = strtoll(p + strlen("used_memory:"), NULL, 10);
    freeReplyObject(r);
    return used;
}

/* Sets maxmemory a little above what Redis uses and writes filler keys until a write is
 * refused with -OOM. Returns the number of fillers written. */
static int fill_memory(void)
{
    long long used = info_used_memory();
    redisReply *r = rf_command(redis, "CONFIG SET maxmemory %lld", used + 1024 * 1024);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_STATUS, "CONFIG SET maxmemory failed");
    freeReplyObject(r);
    static char filler[OOM_FILLER_BYTES];
    memset(filler, 'x', sizeof filler);
    for (int i = 0; i < OOM_FILLERS_MAX; i++) {
        r = rf_command(redis, "SET oomtest:filler:%d %b", i, filler, sizeof filler);
        SF_ASSERT(r != NULL, "SET filler: no reply");
        int oom = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "OOM", 3) == 0;
        SF_ASSERT(oom || r->type == REDIS_REPLY_STATUS, "SET filler: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        if (oom) {
            /* The refused SET's 64 KiB query buffer counted in used_memory; it is gone with
             * the connection. Pin the limit below what the data itself holds now, so no
             * transient buffer's release opens headroom again. */
            used = info_used_memory();
            r = rf_command(redis, "CONFIG SET maxmemory %lld", used - OOM_FILLER_BYTES);
            SF_ASSERT(r != NULL && r->type == REDIS_REPLY_STATUS, "CONFIG SET maxmemory failed");
            freeReplyObject(r);
            return i;
        }
    }
    SF_ASSERT(0, "Redis took %d fillers of %d bytes without running out of memory", OOM_FILLERS_MAX,
              OOM_FILLER_BYTES);
    return -1;
}

static void free_memory(int fillers)
{
    for (int i = 0; i < fillers; i++) {
        redisReply *r = rf_command(redis, "DEL oomtest:filler:%d", i);
        freeReplyObject(r);
    }
    redisReply *r = rf_command(redis, "CONFIG SET maxmemory 0");
    freeReplyObject(r);
}

/* Places one order (201) on a fresh SKU, fills Redis, then checks that a second order and a
 * cancel of the first are refused with 503 and change nothing; frees memory and checks the
 * order goes through with its log entry. */
static void refused_whole(const char *strategy)
{
    redisReply *cr = rf_command(redis, "CONFIG SET maxmemory 0");
    freeReplyObject(cr);
    rf_flushall(redis);
    const char *args[] = {"--order-log", "--strategy", strategy, "--threads", "1", NULL};
    sf_service *svc = sf_start(rf_url(redis), args);
    SF_ASSERT(svc != NULL, "inventoryd (%s) did not start", strategy);
    int port = sf_port(svc);
    char sku[32], path[224];
    snprintf(sku, sizeof sku, "oom-%s", strategy);
    sf_resp r = {0};
    sf_put_sku(port, NULL, sku, OOM_STOCK, OOM_SEGMENTS, &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_order(NULL, port, sku, 2, &r);
    SF_ASSERT_STATUS(&r, 201);
    char first[160];
    snprintf(first, sizeof first, "%s", json_string_value(json_object_get(r.json, "order_id")));
    SF_ASSERT(log_entries(sku) == 1, "the first order wrote %lld log entries", log_entries(sku));

    int fillers = fill_memory();
    char before[64], after[64];
    digest(before, sizeof before);

    int64_t t0 = tu_now_ms();
    sf_order(NULL, port, sku, 3, &r);
    int64_t took = tu_now_ms() - t0;
    SF_ASSERT_STATUS(&r, 503);
    snprintf(path, sizeof path, "/api/v1/orders/%s", first);
    sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 503);
    digest(after, sizeof after);
    SF_ASSERT(strcmp(before, after) == 0,
              "%s: the refused order and cancel changed the data set (digest %s -> %s)", strategy,
              before, after);
    SF_ASSERT(log_entries(sku) == 1, "%s: %lld log entries after the refusals (want 1)", strategy,
              log_entries(sku));
    json_t *st = sf_sku_status(port, sku);
    SF_ASSERT(st != NULL && sf_json_int(st, "remaining", -1) == OOM_STOCK - 2,
              "%s: GET status after the refusals: remaining %lld (want %d)", strategy,
              st ? sf_json_int(st, "remaining", -1) : -1, OOM_STOCK - 2);
    json_decref(st);
    print_message("  %s: order and cancel refused (503) with Redis full (%d fillers of %d B), "
                  "the order in %lld ms; data set unchanged (digest %s)\n",
                  strategy, fillers, OOM_FILLER_BYTES, (long long)took, after);

    free_memory(fillers);
    /* (The checker reads in MULTI/EXEC, which a full Redis refuses: after the memory is back.) */
    sf_report rep;
    SF_ASSERT(sf_check_invariants(rf_url(redis), sku, &rep) == 0 && rep.ok,
              "invariants after the refusals");
    SF_ASSERT(rep.remaining == OOM_STOCK - 2 && rep.sold == 2 && rep.orders == 1,
              "%s: remaining %lld sold %lld orders %lld after the refusals", strategy,
              rep.remaining, rep.sold, rep.orders);
    sf_order(NULL, port, sku, 3, &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(log_entries(sku) == 2, "%s: %lld log entries after memory was freed (want 2)",
              strategy, log_entries(sku));
    sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    SF_ASSERT(log_entries(sku) == 3, "%s: %lld log entries after the cancel (want 3)", strategy,
              log_entries(sku));
    sf_resp_free(&r);
    SF_ASSERT(sf_stop(svc) == 0, "inventoryd (%s) did not exit cleanly", strategy);
}

static void test_oom_atomic(void **state)
{
    (void)state;
    refused_whole("atomic");
}

static void test_oom_segmented(void **state)
{
    (void)state;
    refused_whole("segmented");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_atomic),
        cmocka_unit_test(test_oom_segmented),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, group_teardown);
}
