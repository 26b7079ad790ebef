/*
 * Integration tests of the Redis Cluster routing under the asynchronous face (cluster_slots.c,
 * cluster_route.c, async.c) against a real cluster of 3 masters with 1 replica each
 * (cluster_fixture.h, started once for the file and always stopped): lc_key_slot against
 * CLUSTER KEYSLOT for 10,000 random keys; commands and locks spread over the masters from one
 * seed node, each master's share of a loop turn's commands in one write; MOVED after a slot
 * was moved; ASK while a slot migrates, TRYAGAIN for a script whose keys are split by the
 * migration (retried until the migration ends, or reported at the command timeout);
 * CLUSTERDOWN for a slot no master serves; a master killed with SIGKILL (errors within the
 * command timeout; the client finds the promoted replica by itself, without traffic, and it
 * serves the slot). The failover test kills a master, so it runs last.
 *
 * Timing: bounds are generous (2 shared cores); loops run until a condition holds or a deadline
 * of seconds passes.
 */
#include "lt_loop.h"

#include <event2/event.h>

#include "async_internal.h"
#include "cluster_fixture.h"
#include "cluster_internal.h"
#include "lockcore/lockcore_async.h"

/* One cluster of 3 masters with a replica each for the whole file. */
static int group_setup(void **state)
{
    (void)state;
    return gf_start_cluster(3, 1);
}

static int setup(void **state)
{
    (void)state;
    return lt_loop_start();
}

static int teardown(void **state)
{
    (void)state;
    lt_loop_stop();
    return 0;
}

/* A client seeded with node 0 only: it must learn the rest from CLUSTER SLOTS and MOVED. */
static lc_async_client *cclient(int command_timeout_ms)
{
    lc_client_opts o;
    lc_client_opts_init(&o);
    if (command_timeout_ms)
        o.command_timeout_ms = command_timeout_ms;
    lc_async_client *c = NULL;
    assert_ok(lc_async_client_new(lt_base, cf_url(gf_cluster, 1), &o, &c));
    return c;
}

/* ---- results of commands ---- */

typedef struct result {
    int calls;
    lc_status st;
    char str[128];
    long long integer;
    int64_t at_ms;
} result;

static int done(void *arg)
{
    return ((result *)arg)->calls > 0;
}

static void on_reply(lc_status st, const redisReply *reply, const char *errstr, void *arg)
{
    result *r = arg;
    r->calls++;
    r->st = st;
    r->at_ms = tu_now_ms();
    r->str[0] = '\0';
    r->integer = 0;
    if (reply && (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS))
        snprintf(r->str, sizeof r->str, "%s", reply->str);
    else if (reply && reply->type == REDIS_REPLY_INTEGER)
        r->integer = reply->integer;
    else if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
             reply->element[0]->type == REDIS_REPLY_STRING &&
             reply->element[1]->type == REDIS_REPLY_STRING)
        snprintf(r->str, sizeof r->str, "%s,%s", reply->element[0]->str, reply->element[1]->str);
    else if (st == LC_EREDIS)
        snprintf(r->str, sizeof r->str, "%s", errstr);
}

/* Runs one command and waits for its reply. */
static lc_status cmd_sync(lc_async_client *c, result *r, int argc, const char **argv)
{
    memset(r, 0, sizeof(*r));
    assert_ok(lc_async_command(c, argc, argv, NULL, on_reply, r));
    assert_true(lt_run_until(done, r, 20000));
    assert_int_equal(r->calls, 1);
    return r->st;
}

static lc_status get_sync(lc_async_client *c, const char *key, result *r)
{
    const char *argv[2] = {"GET", key};
    return cmd_sync(c, r, 2, argv);
}

static lc_cluster_stats stats(lc_async_client *c)
{
    lc_cluster_stats s;
    lc_async_debug_cluster(c, &s);
    return s;
}

/* A key with the given hash tag whose slot is served by a master other than node `not`, found
 * by trying tags prefix0, prefix1, … Writes the tag into tag[32]; returns the slot. */
static int tag_not_on(const char *prefix, int not, char tag[32])
{
    for (int i = 0; i < 1000; i++) {
        snprintf(tag, 32, "%s%d", prefix, i);
        int slot = lc_key_slot(tag, strlen(tag));
        int m = cf_master_of(gf_cluster, slot);
        if (m >= 0 && m != not )
            return slot;
    }
    fail_msg("no tag off node %d", not );
    return -1;
}

/* ---- the tests ---- */

/* lc_key_slot agrees with the server's CLUSTER KEYSLOT for 10,000 random keys: random lengths
 * 0..48, bytes from the whole byte range with braces made frequent (hash tags, empty tags,
 * unbalanced braces). One pipelined connection. */
static void test_keyslot_matches_server(void **state)
{
    (void)state;
    enum { N = 10000 };
    redisContext *ctx = rf_connect(cf_node(gf_cluster, 0));
    assert_non_null(ctx);
    static char keys[N][48];
    static size_t lens[N];
    srand((unsigned)tu_now_us());
    for (int i = 0; i < N; i++) {
        lens[i] = (size_t)(rand() % 49);
        for (size_t j = 0; j < lens[i]; j++) {
            int p = rand() % 10;
            keys[i][j] = p == 0 ? '{' : p == 1 ? '}' : (char)(rand() % 256);
        }
        assert_int_equal(redisAppendCommand(ctx, "CLUSTER KEYSLOT %b", keys[i], lens[i]), REDIS_OK);
    }
    int tagged = 0;
    for (int i = 0; i < N; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(ctx, (void **)&r), REDIS_OK);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (r->integer != lc_key_slot(keys[i], lens[i]))
            fail_msg("key %d (%zu bytes): server slot %lld, lc_key_slot %d", i, lens[i], r->integer,
                     lc_key_slot(keys[i], lens[i]));
        const char *open = memchr(keys[i], '{', lens[i]);
        tagged += open && memchr(open, '}', lens[i] - (size_t)(open - keys[i])) != NULL;
        freeReplyObject(r);
    }
    redisFree(ctx);
    assert_true(tagged > N / 4); /* the hash-tag rules were exercised, not only plain keys */
}

/* From one seed, 300 keys over every slot range: every write lands on the master of its slot
 * (read back there directly), the map becomes complete, and once it is, no command is
 * redirected any more (each goes straight to its master). */
static void test_commands_spread_over_masters(void **state)
{
    (void)state;
    enum { N = 300 };
    lc_async_client *c = cclient(0);
    static result res[N];
    char key[N][32], val[N][32];
    memset(res, 0, sizeof res);
    for (int i = 0; i < N; i++) {
        snprintf(key[i], sizeof key[i], "spread:%d", i);
        snprintf(val[i], sizeof val[i], "v%d", i * 7);
        const char *argv[3] = {"SET", key[i], val[i]};
        assert_ok(lc_async_command(c, 3, argv, NULL, on_reply, &res[i]));
    }
    for (int i = 0; i < N; i++) {
        assert_true(lt_run_until(done, &res[i], 20000));
        if (res[i].st != LC_OK)
            fail_msg("SET %s: %s (%s)", key[i], lc_status_name(res[i].st), res[i].str);
    }
    int per_master[CF_MAX_NODES] = {0};
    for (int i = 0; i < N; i++) {
        int m = cf_master_of(gf_cluster, lc_key_slot(key[i], strlen(key[i])));
        assert_true(m >= 0);
        per_master[m]++;
        char got[32];
        assert_int_equal(rf_string(cf_node(gf_cluster, m), got, sizeof got, "GET %s", key[i]), 1);
        assert_string_equal(got, val[i]);
    }
    for (int m = 0; m < 3; m++)
        assert_true(per_master[m] > N / 10); /* all three masters took a share */
    lc_cluster_stats s = stats(c);
    assert_int_equal(s.known_slots, 16384);
    assert_true(s.refreshes >= 1);

    /* The map is complete: the same keys again go straight to their masters. */
    long moved = s.moved;
    for (int i = 0; i < N; i++) {
        memset(&res[i], 0, sizeof res[i]);
        const char *argv[2] = {"GET", key[i]};
        assert_ok(lc_async_command(c, 2, argv, NULL, on_reply, &res[i]));
    }
    for (int i = 0; i < N; i++) {
        assert_true(lt_run_until(done, &res[i], 20000));
        assert_int_equal(res[i].st, LC_OK);
        assert_string_equal(res[i].str, val[i]);
    }
    assert_int_equal(stats(c).moved, moved);
    lc_async_client_free(c);
}

/* lc_async_command_masters: one copy to each master, after the map is known. */
typedef struct masters_seen {
    int calls, ok;
    int ports[8];
} masters_seen;

static void on_port(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    masters_seen *m = arg;
    if (st == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && m->ok < 8)
        m->ports[m->ok++] = atoi(r->element[1]->str);
    m->calls++;
}

static int seen_three(void *arg)
{
    return ((masters_seen *)arg)->calls >= 3;
}

static void test_command_to_every_master(void **state)
{
    (void)state;
    lc_async_client *c = cclient(0);
    /* Before the map is known there is no master to send to. */
    masters_seen m = {0};
    int sent = -1;
    const char *argv[3] = {"CONFIG", "GET", "port"};
    assert_status(lc_async_command_masters(c, 3, argv, NULL, on_port, &m, &sent), LC_ESTATE);
    assert_int_equal(sent, 0);
    /* A command teaches it the map (CLUSTER SLOTS after the first MOVED or at start). */
    result r0 = {0};
    const char *ping[1] = {"PING"};
    assert_ok(lc_async_command(c, 1, ping, NULL, on_reply, &r0));
    assert_true(lt_run_until(done, &r0, 20000));
    int64_t deadline = tu_now_ms() + 20000;
    while (stats(c).known_slots < 16384 && tu_now_ms() < deadline)
        event_base_loop(lt_base, EVLOOP_ONCE);
    assert_int_equal(stats(c).known_slots, 16384);

    assert_ok(lc_async_command_masters(c, 3, argv, NULL, on_port, &m, &sent));
    assert_int_equal(sent, 3);
    assert_true(lt_run_until(seen_three, &m, 20000));
    assert_int_equal(m.calls, 3);
    assert_int_equal(m.ok, 3);
    for (int i = 0; i < 3; i++) { /* the three masters' ports, each once */
        int want = rf_port(cf_node(gf_cluster, i)), n = 0;
        for (int j = 0; j < 3; j++)
            n += m.ports[j] == want;
        if (n != 1)
            fail_msg("master %d (port %d) answered %d times", i, want, n);
    }
    assert_status(lc_async_command_masters(c, 3, argv, NULL, on_port, &m, NULL), LC_EINVAL);
    lc_async_client_free(c);
}

/* total_reads_processed of node i (INFO stats): how many reads its event loop made. */
static long long reads_of(int i)
{
    redisReply *r = rf_command(cf_node(gf_cluster, i), "INFO stats");
    long long n = -1;
    const char *p =
        r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_reads_processed:") : NULL;
    if (p)
        n = atoll(p + strlen("total_reads_processed:"));
    freeReplyObject(r);
    return n;
}

/* Commands issued in one loop turn leave in one write per master: 300 GETs over the three
 * masters (about 100 each) cost each master a handful of reads, not one per command (what a
 * status read over many segments relies on: one pipelined round per master). */
static void test_one_write_per_master(void **state)
{
    (void)state;
    enum { N = 300 };
    lc_async_client *c = cclient(0);
    static result res[N];
    char key[N][32];
    memset(res, 0, sizeof res);
    for (int i = 0; i < N; i++) { /* warm: the map and a connection to every master */
        snprintf(key[i], sizeof key[i], "batch:%d", i);
        const char *argv[2] = {"GET", key[i]};
        assert_ok(lc_async_command(c, 2, argv, NULL, on_reply, &res[i]));
    }
    for (int i = 0; i < N; i++)
        assert_true(lt_run_until(done, &res[i], 20000));
    long long before[3], per[3] = {0};
    for (int i = 0; i < N; i++) /* (asks node 0: before its reads are counted) */
        per[cf_master_of(gf_cluster, lc_key_slot(key[i], strlen(key[i])))]++;
    for (int m = 0; m < 3; m++)
        before[m] = reads_of(m);
    memset(res, 0, sizeof res);
    for (int i = 0; i < N; i++) {
        const char *argv[2] = {"GET", key[i]};
        assert_ok(lc_async_command(c, 2, argv, NULL, on_reply, &res[i]));
    }
    for (int i = 0; i < N; i++) {
        assert_true(lt_run_until(done, &res[i], 20000));
        assert_status(res[i].st, LC_OK);
    }
    for (int m = 0; m < 3; m++) {
        /* 1 read for the batch (a few more if the kernel splits it), + 1 for INFO itself:
         * measured 3 per master. */
        long long reads = reads_of(m) - before[m];
        if (per[m] < 50 || reads > 8)
            fail_msg("master %d: %lld commands took %lld reads", m, per[m], reads);
    }
    lc_async_client_free(c);
}

/* ---- locks on the cluster ---- */

typedef struct lres {
    int calls;
    lc_status st;
    uint64_t fence;
    long long value;
} lres;

static int ldone(void *arg)
{
    return ((lres *)arg)->calls > 0;
}

static void on_acquired(lc_async_lock *l, lc_status st, uint64_t fence, const redisReply *values,
                        void *arg)
{
    (void)l;
    lres *r = arg;
    r->calls++;
    r->st = st;
    r->fence = fence;
    r->value = -1;
    if (values && values->elements > 0 && values->element[0]->type == REDIS_REPLY_STRING)
        r->value = atoll(values->element[0]->str);
}

static void on_evaled(lc_async_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    lres *r = arg;
    r->calls++;
    r->st = st;
    r->value = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
}

static void on_released(lc_async_lock *l, lc_status st, void *arg)
{
    (void)l;
    lres *r = arg;
    r->calls++;
    r->st = st;
}

/* A waiter sleeps (subscribed, waiting for an unlock) on the lock called name. */
struct sleeping {
    lc_async_client *c;
    const char *name;
};

static int asleep(void *arg)
{
    struct sleeping *sl = arg;
    return lc_async_debug_sleepers(sl->c, sl->name) == 1;
}

static const char DECR_BODY[] = "local left = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
                                "if left < tonumber(ARGV[1]) then return -1 end\n"
                                "return redis.call('DECRBY', KEYS[1], ARGV[1])\n";

/* Segment locks of one SKU spread over the masters: each is taken with its stock read in the
 * same script, decremented by a fenced script that releases it, all pipelined at once; the
 * keys live on the master of their segment's slot. Then a waiter on a lock whose master is not
 * the subscriber's node is woken by the unlock published there (PUBLISH reaches every node). */
static void test_locks_over_masters(void **state)
{
    (void)state;
    enum { SEGS = 12 };
    lc_async_client *c = cclient(0);
    lc_script *decr = NULL;
    assert_ok(lc_fenced_script_new(DECR_BODY, &decr));
    char lock[SEGS][48], stock[SEGS][48];
    lc_async_lock *l[SEGS];
    lres r[SEGS];
    memset(r, 0, sizeof r);
    int masters_used[CF_MAX_NODES] = {0};
    for (int k = 0; k < SEGS; k++) {
        snprintf(lock[k], sizeof lock[k], "inv:2:{itc/%d}:lock", k);
        snprintf(stock[k], sizeof stock[k], "inv:2:{itc/%d}:stock", k);
        int m = cf_master_of(gf_cluster, lc_key_slot(stock[k], strlen(stock[k])));
        masters_used[m] = 1;
        assert_int_equal(rf_integer(cf_node(gf_cluster, m), "SET %s 10", stock[k]), RF_NOT_INTEGER);
        lc_lock_opts o = lt_opts(10000, 1);
        assert_ok(lc_async_lock_new(c, lock[k], &o, NULL, NULL, &l[k]));
        const char *reads[1] = {stock[k]};
        assert_ok(lc_async_lock_try(l[k], 1, reads, NULL, on_acquired, &r[k]));
    }
    assert_int_equal(masters_used[0] + masters_used[1] + masters_used[2], 3);
    for (int k = 0; k < SEGS; k++) {
        assert_true(lt_run_until(ldone, &r[k], 20000));
        assert_status(r[k].st, LC_OK);
        assert_int_equal(r[k].value, 10);
        assert_true(r[k].fence >= 1);
        int m = cf_master_of(gf_cluster, lc_key_slot(lock[k], strlen(lock[k])));
        assert_int_equal(rf_integer(cf_node(gf_cluster, m), "EXISTS %s", lock[k]), 1);
    }
    memset(r, 0, sizeof r);
    for (int k = 0; k < SEGS; k++) {
        const char *keys[1] = {stock[k]};
        const char *args[1] = {"3"};
        assert_ok(lc_async_eval(l[k], decr, LC_EVAL_RELEASE, 1, keys, NULL, 1, args, NULL,
                                on_evaled, &r[k]));
    }
    for (int k = 0; k < SEGS; k++) {
        assert_true(lt_run_until(ldone, &r[k], 20000));
        assert_status(r[k].st, LC_OK);
        assert_int_equal(r[k].value, 7);
        assert_int_equal(lc_async_lock_held(l[k]), 0);
        int m = cf_master_of(gf_cluster, lc_key_slot(lock[k], strlen(lock[k])));
        assert_int_equal(rf_integer(cf_node(gf_cluster, m), "EXISTS %s", lock[k]), 0);
        assert_int_equal(rf_integer(cf_node(gf_cluster, m), "DECRBY %s 0", stock[k]), 7);
    }

    /* Wake-up across nodes: the lock's master is not node 0 (where the subscriber went). */
    char tag[32], name[64];
    tag_not_on("wake", 0, tag);
    snprintf(name, sizeof name, "{%s}:lock", tag);
    lc_async_lock *a = NULL, *b = NULL;
    lc_lock_opts o = lt_opts(30000, 1);
    assert_ok(lc_async_lock_new(c, name, &o, NULL, NULL, &a));
    assert_ok(lc_async_lock_new(c, name, &o, NULL, NULL, &b));
    lres ra = {0}, rb = {0}, rr = {0};
    assert_ok(lc_async_lock_try(a, 0, NULL, NULL, on_acquired, &ra));
    assert_true(lt_run_until(ldone, &ra, 20000));
    assert_status(ra.st, LC_OK);
    long woken = lc_async_debug_wakeups(c);
    assert_ok(lc_async_lock_acquire(b, 20000, 0, NULL, NULL, on_acquired, &rb));
    struct sleeping sl = {c, name};
    assert_true(lt_run_until(asleep, &sl, 20000));
    int64_t t0 = tu_now_ms();
    assert_ok(lc_async_release(a, on_released, &rr));
    assert_true(lt_run_until(ldone, &rb, 20000));
    assert_status(rb.st, LC_OK);
    assert_true(lc_async_debug_wakeups(c) > woken); /* the unlock woke it, not a poll */
    assert_true(tu_now_ms() - t0 < 5000);
    for (int k = 0; k < SEGS; k++)
        lc_async_lock_free(l[k]);
    lc_async_lock_free(a);
    lc_async_lock_free(b);
    lc_async_client_free(c);
    lc_script_free(decr);
}

/* A slot moved to another master after the client learnt the map: the next command gets MOVED,
 * follows it, and the map then names the new master (no second redirection). */
static void test_moved_after_slot_moved(void **state)
{
    (void)state;
    char tag[32], key[48];
    int slot = tag_not_on("mv", -1, tag);
    snprintf(key, sizeof key, "{%s}:k", tag);
    int src = cf_master_of(gf_cluster, slot);
    int dst = (src + 1) % 3;
    assert_int_equal(rf_integer(cf_node(gf_cluster, src), "SET %s moved-value", key),
                     RF_NOT_INTEGER);

    lc_async_client *c = cclient(0);
    result r;
    assert_status(get_sync(c, key, &r), LC_OK); /* learns the map */
    assert_string_equal(r.str, "moved-value");
    assert_int_equal(lc_async_debug_slot_port(c, slot), rf_port(cf_node(gf_cluster, src)));
    long moved = stats(c).moved;

    const char *keys[1] = {key};
    assert_int_equal(cf_migrate_begin(gf_cluster, slot, src, dst), 0);
    assert_int_equal(cf_migrate_keys(gf_cluster, src, dst, 1, keys), 0);
    assert_int_equal(cf_migrate_end(gf_cluster, slot, src, dst), 0);

    assert_status(get_sync(c, key, &r), LC_OK);
    assert_string_equal(r.str, "moved-value");
    assert_int_equal(stats(c).moved, moved + 1);
    assert_int_equal(lc_async_debug_slot_port(c, slot), rf_port(cf_node(gf_cluster, dst)));
    assert_status(get_sync(c, key, &r), LC_OK);
    assert_int_equal(stats(c).moved, moved + 1);
    lc_async_client_free(c);
}

/* Ends the migration of struct mig's slot from a loop timer, while a command waits out a
 * TRYAGAIN pause. */
struct mig {
    int slot, src, dst, done;
    const char *key;
};

static void on_finish_migration(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mig *m = arg;
    const char *keys[1] = {m->key};
    m->done = cf_migrate_keys(gf_cluster, m->src, m->dst, 1, keys) == 0 &&
                      cf_migrate_end(gf_cluster, m->slot, m->src, m->dst) == 0
                  ? 1
                  : -1;
}

/* While a slot migrates: a key already moved is reached with ASK (+ASKING) on the importing
 * node, one not moved yet on the source; a script over both gets TRYAGAIN and is retried until
 * the migration ends (then MOVED to the new master), or, when it never ends, reports TRYAGAIN
 * at its command timeout. */
static void test_ask_and_tryagain_during_migration(void **state)
{
    (void)state;
    char tag[32], k1[48], k2[48];
    int slot = tag_not_on("ask", -1, tag);
    snprintf(k1, sizeof k1, "{%s}:1", tag);
    snprintf(k2, sizeof k2, "{%s}:2", tag);
    int src = cf_master_of(gf_cluster, slot);
    int dst = (src + 1) % 3;
    assert_int_equal(rf_integer(cf_node(gf_cluster, src), "SET %s one", k1), RF_NOT_INTEGER);
    assert_int_equal(rf_integer(cf_node(gf_cluster, src), "SET %s two", k2), RF_NOT_INTEGER);

    lc_async_client *c = cclient(3000);
    lc_async_client *fast = cclient(400);
    result r;
    assert_status(get_sync(c, k1, &r), LC_OK);
    assert_status(get_sync(fast, k1, &r), LC_OK);

    const char *keys1[1] = {k1};
    assert_int_equal(cf_migrate_begin(gf_cluster, slot, src, dst), 0);
    assert_int_equal(cf_migrate_keys(gf_cluster, src, dst, 1, keys1), 0);

    lc_cluster_stats s0 = stats(c);
    assert_status(get_sync(c, k1, &r), LC_OK); /* moved already: ASK */
    assert_string_equal(r.str, "one");
    assert_int_equal(stats(c).ask, s0.ask + 1);
    assert_status(get_sync(c, k2, &r), LC_OK); /* still on the source */
    assert_string_equal(r.str, "two");
    assert_int_equal(stats(c).ask, s0.ask + 1);
    assert_int_equal(lc_async_debug_slot_port(c, slot), rf_port(cf_node(gf_cluster, src)));

    lc_script *both = NULL;
    assert_ok(
        lc_script_new("return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}", &both));
    const char *keys[2] = {k1, k2};

    /* Never ends (within the 400 ms timeout): TRYAGAIN is reported, not retried forever. */
    result rf = {0};
    int64_t t0 = tu_now_ms();
    assert_ok(lc_async_script(fast, both, 2, keys, NULL, 0, NULL, NULL, on_reply, &rf));
    assert_true(lt_run_until(done, &rf, 20000));
    assert_status(rf.st, LC_EREDIS);
    assert_non_null(strstr(rf.str, "TRYAGAIN"));
    assert_true(stats(fast).tryagain >= 1);
    assert_true(rf.at_ms - t0 < 3000);

    /* Ends 100 ms after the script was first refused: the retry succeeds on the new master. */
    struct mig m = {slot, src, dst, 0, k2};
    struct event *finish = evtimer_new(lt_base, on_finish_migration, &m);
    struct timeval tv = {0, 100000};
    evtimer_add(finish, &tv);
    memset(&r, 0, sizeof r);
    assert_ok(lc_async_script(c, both, 2, keys, NULL, 0, NULL, NULL, on_reply, &r));
    assert_true(lt_run_until(done, &r, 20000));
    event_free(finish);
    assert_int_equal(m.done, 1);
    if (r.st != LC_OK)
        fail_msg("script during migration: %s (%s)", lc_status_name(r.st), r.str);
    assert_string_equal(r.str, "one,two");
    lc_cluster_stats s1 = stats(c);
    assert_true(s1.tryagain > s0.tryagain);
    assert_true(s1.moved > s0.moved);
    assert_int_equal(lc_async_debug_slot_port(c, slot), rf_port(cf_node(gf_cluster, dst)));
    lc_script_free(both);
    lc_async_client_free(fast);
    lc_async_client_free(c);
}

/* The client sent a CLUSTER SLOTS since the count `since`. */
struct refreshed {
    lc_async_client *c;
    long since;
};

static int refreshed_since(void *arg)
{
    struct refreshed *r = arg;
    return stats(r->c).refreshes > r->since;
}

/* A slot no master serves: the node answers CLUSTERDOWN, which is reported as it is
 * (LC_EREDIS, "CLUSTERDOWN …"), counted, and makes the client ask for the map again; once the
 * slot is served again, commands for it succeed. */
static void test_clusterdown_reported(void **state)
{
    (void)state;
    char tag[32], key[48];
    int slot = tag_not_on("cd", -1, tag);
    snprintf(key, sizeof key, "{%s}:k", tag);
    int owner = cf_master_of(gf_cluster, slot);
    assert_int_equal(rf_integer(cf_node(gf_cluster, owner), "SET %s here", key), RF_NOT_INTEGER);
    lc_async_client *c = cclient(0);
    result r;
    assert_status(get_sync(c, key, &r), LC_OK);
    lc_cluster_stats s0 = stats(c);

    redisReply *d = rf_command(cf_node(gf_cluster, owner), "CLUSTER DELSLOTS %d", slot);
    assert_non_null(d);
    assert_int_equal(d->type, REDIS_REPLY_STATUS);
    freeReplyObject(d);
    assert_status(get_sync(c, key, &r), LC_EREDIS);
    assert_non_null(strstr(r.str, "CLUSTERDOWN"));
    lc_cluster_stats s1 = stats(c);
    assert_int_equal(s1.clusterdown, s0.clusterdown + 1);

    d = rf_command(cf_node(gf_cluster, owner), "CLUSTER ADDSLOTS %d", slot);
    assert_non_null(d);
    assert_int_equal(d->type, REDIS_REPLY_STATUS);
    freeReplyObject(d);
    assert_status(get_sync(c, key, &r), LC_OK);
    assert_string_equal(r.str, "here");
    /* The map was asked for again (at most one CLUSTER SLOTS per 100 ms: maybe a bit later). */
    struct refreshed rf = {c, s0.refreshes};
    assert_true(lt_run_until(refreshed_since, &rf, 5000));
    lc_async_client_free(c);
}

/* The client's map names a master other than `from` for the slot. */
struct slot_moved {
    lc_async_client *c;
    int slot, from;
};

static int slot_moved_away(void *arg)
{
    struct slot_moved *m = arg;
    int port = lc_async_debug_slot_port(m->c, m->slot);
    return port > 0 && port != m->from;
}

static int served_ok(void *arg)
{
    return ((result *)arg)->calls > 0 && ((result *)arg)->st == LC_OK;
}

/* A master dies (SIGKILL): commands for its slots fail with LC_EIO within the command timeout
 * (never hang), commands for the other masters' slots go on; once its replica is promoted the
 * client finds the new master by itself (slot map refresh) and the slot is served again, with
 * its data, locks included. */
static void test_master_killed_then_failover(void **state)
{
    (void)state;
    char tag[32], key[48], other_tag[32], other[48], lockname[64];
    int slot = tag_not_on("fo", 0, tag); /* not node 0, the seed */
    snprintf(key, sizeof key, "{%s}:k", tag);
    snprintf(lockname, sizeof lockname, "{%s}:lock", tag);
    int victim = cf_master_of(gf_cluster, slot);
    int oslot = -1;
    for (int i = 0; oslot < 0 || cf_master_of(gf_cluster, oslot) == victim; i++) {
        snprintf(other_tag, sizeof other_tag, "fo-other%d", i);
        oslot = lc_key_slot(other_tag, strlen(other_tag));
    }
    snprintf(other, sizeof other, "{%s}:k", other_tag);
    assert_int_equal(rf_integer(cf_node(gf_cluster, victim), "SET %s survives", key),
                     RF_NOT_INTEGER);
    assert_int_equal(rf_integer(cf_node(gf_cluster, victim), "WAIT 1 5000"),
                     1); /* on its replica */
    assert_int_equal(
        rf_integer(cf_node(gf_cluster, cf_master_of(gf_cluster, oslot)), "SET %s here", other),
        RF_NOT_INTEGER);

    lc_async_client *c = cclient(500);
    result r;
    assert_status(get_sync(c, key, &r), LC_OK);
    assert_status(get_sync(c, other, &r), LC_OK);

    assert_int_equal(rf_halt(cf_node(gf_cluster, victim), SIGKILL), 0);
    int64_t t0 = tu_now_ms();
    lc_status st = get_sync(c, key, &r);
    assert_status(st, LC_EIO);
    assert_true(r.at_ms - t0 < 2000);             /* an error within the deadline, no hang */
    assert_status(get_sync(c, other, &r), LC_OK); /* the other masters serve meanwhile */
    assert_string_equal(r.str, "here");

    /* The replica takes over (node timeout 1 s). The client sends nothing meanwhile: it finds
     * the promoted master by itself (each failed reconnect to the dead master, every <= 1 s of
     * back-off, asks for CLUSTER SLOTS again). */
    struct slot_moved sm = {c, slot, rf_port(cf_node(gf_cluster, victim))};
    assert_true(lt_run_until(slot_moved_away, &sm, 30000));
    memset(&r, 0, sizeof r);
    assert_status(get_sync(c, key, &r), LC_OK); /* the first command after it succeeds */
    assert_true(served_ok(&r));
    assert_string_equal(r.str, "survives");
    int promoted = cf_master_of(gf_cluster, slot);
    assert_true(promoted >= 0 && promoted != victim);
    assert_int_equal(lc_async_debug_slot_port(c, slot), rf_port(cf_node(gf_cluster, promoted)));
    fprintf(stderr, "failover: served again %lld ms after the kill\n",
            (long long)(tu_now_ms() - t0));

    /* Locks on that slot work on the promoted master. */
    lc_async_lock *l = NULL;
    lc_lock_opts o = lt_opts(10000, 1);
    assert_ok(lc_async_lock_new(c, lockname, &o, NULL, NULL, &l));
    lres lr = {0};
    assert_ok(lc_async_lock_try(l, 0, NULL, NULL, on_acquired, &lr));
    assert_true(lt_run_until(ldone, &lr, 20000));
    assert_status(lr.st, LC_OK);
    assert_int_equal(rf_integer(cf_node(gf_cluster, promoted), "EXISTS %s", lockname), 1);
    memset(&lr, 0, sizeof lr);
    assert_ok(lc_async_release(l, on_released, &lr));
    assert_true(lt_run_until(ldone, &lr, 20000));
    assert_status(lr.st, LC_OK);
    lc_async_lock_free(l);
    lc_async_client_free(c);
}

static int sub_up(void *arg)
{
    return lc_async_debug_sub_port(arg) > 0;
}

/* Resumes every node: a test that failed with a node frozen must not leave it so. */
static int teardown_resume(void **state)
{
    for (int i = 0; i < cf_nodes(gf_cluster); i++)
        if (rf_pid(cf_node(gf_cluster, i)) != 0)
            rf_resume(cf_node(gf_cluster, i));
    return teardown(state);
}

/* The node holding the client's subscriber connection freezes (SIGSTOP) while a waiter sleeps
 * subscribed there; the lock lives on another master. Each unlock must still wake the waiter at
 * once: the liveness probe drops the silent connection within two command timeouts, the waiter
 * polls alone meanwhile, and the client subscribes again on another node (issue 18 item 7).
 * Without the probe the unlock messages go to the frozen node and the waiter only finds the lock
 * free on its fallback poll (up to a second apart). */
static void test_frozen_listener_node(void **state)
{
    (void)state;
    enum { CYCLES = 5, PROMPT_MS = 250 };
    lc_async_client *c = cclient(300), *h = cclient(300);
    assert_true(lt_run_until(sub_up, c, 20000));
    int sport = lc_async_debug_sub_port(c), frozen = -1;
    for (int i = 0; i < cf_nodes(gf_cluster); i++)
        if (rf_pid(cf_node(gf_cluster, i)) != 0 && rf_port(cf_node(gf_cluster, i)) == sport)
            frozen = i;
    assert_true(frozen >= 0);
    char tag[32], name[64];
    tag_not_on("frz", frozen, tag);
    snprintf(name, sizeof name, "{%s}:lock", tag);
    lc_lock_opts o = lt_opts(30000, 1);
    lc_async_lock *a = NULL, *b = NULL;
    assert_ok(lc_async_lock_new(h, name, &o, NULL, NULL, &a));
    assert_ok(lc_async_lock_new(c, name, &o, NULL, NULL, &b));
    lres ra = {0}, rb = {0}, rr = {0};
    assert_ok(lc_async_lock_try(a, 0, NULL, NULL, on_acquired, &ra));
    assert_true(lt_run_until(ldone, &ra, 20000));
    assert_status(ra.st, LC_OK);
    assert_ok(lc_async_lock_acquire(b, 60000, 0, NULL, NULL, on_acquired, &rb));
    struct sleeping sl = {c, name};
    assert_true(lt_run_until(asleep, &sl, 20000)); /* subscribed on the node about to freeze */
    assert_int_equal(rf_pause(cf_node(gf_cluster, frozen)), 0);
    int woken = 0;
    int64_t worst = 0;
    for (int i = 0; i < CYCLES; i++) {
        lt_run_until(lt_never, NULL, 1500); /* b sleeps; its polls have slowed down */
        assert_int_equal(rb.calls, 0);
        long before = lc_async_debug_wakeups(c);
        memset(&rr, 0, sizeof rr);
        int64_t t0 = tu_now_ms();
        assert_ok(lc_async_release(a, on_released, &rr));
        assert_true(lt_run_until(ldone, &rb, 20000));
        int64_t took = tu_now_ms() - t0;
        assert_status(rb.st, LC_OK);
        woken += lc_async_debug_wakeups(c) > before;
        worst = took > worst ? took : worst;
        fprintf(stderr, "cycle %d: the waiter had the lock %lld ms after the unlock (%s)\n", i,
                (long long)took,
                lc_async_debug_wakeups(c) > before ? "woken by the message" : "found by a poll");
        assert_true(lt_run_until(ldone, &rr, 20000));
        /* Swap: b holds, a takes it back once b releases, b waits again. */
        memset(&rr, 0, sizeof rr);
        assert_ok(lc_async_release(b, on_released, &rr));
        assert_true(lt_run_until(ldone, &rr, 20000));
        memset(&ra, 0, sizeof ra);
        assert_ok(lc_async_lock_try(a, 0, NULL, NULL, on_acquired, &ra));
        assert_true(lt_run_until(ldone, &ra, 20000));
        assert_status(ra.st, LC_OK);
        memset(&rb, 0, sizeof rb);
        assert_ok(lc_async_lock_acquire(b, 60000, 0, NULL, NULL, on_acquired, &rb));
    }
    fprintf(stderr, "worst %lld ms, %d of %d woken by the unlock message, %ld probe drops\n",
            (long long)worst, woken, CYCLES, lc_async_debug_sub_drops(c));
    assert_true(woken >= CYCLES - 1); /* subscribed again elsewhere, not just polling */
    assert_true(worst < PROMPT_MS);
    assert_true(lc_async_debug_sub_drops(c) >= 1);
    assert_true(lc_async_debug_sub_port(c) != sport);
    lc_async_lock_free(b); /* its wait ends (LC_ESTATE) */
    lc_async_lock_free(a);
    lc_async_client_free(c);
    lc_async_client_free(h);
    assert_int_equal(rf_resume(cf_node(gf_cluster, frozen)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keyslot_matches_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commands_spread_over_masters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_write_per_master, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_to_every_master, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locks_over_masters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_moved_after_slot_moved, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ask_and_tryagain_during_migration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clusterdown_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_master_killed_then_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frozen_listener_node, setup, teardown_resume),
    };
    return cmocka_run_group_tests(tests, group_setup, gf_group_teardown);
}
