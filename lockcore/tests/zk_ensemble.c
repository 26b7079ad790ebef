/*
 * The ZooKeeper lock on a 3-node ensemble (lockcore_zk.h): the leader killed (SIGKILL) while a
 * lock is held and another session waits for it. The session survives (sessions belong to the
 * ensemble, not to a server), so the holder keeps the lock and is not told it lost it, the
 * waiter does not get it meanwhile, the holder's fenced commit after the election is accepted,
 * and its release hands the lock to the waiter with a higher token.
 *
 * Three JVMs and an election: about 5 s on two cores. CMake option LOCKCORE_ZK_ENSEMBLE_TEST
 * (ON by default) registers it; ctest -LE zk-ensemble leaves it out.
 */
#define _GNU_SOURCE
#include <inttypes.h>

#include "lc_test.h"
#include "lockcore/lockcore_zk.h"
#include "lt_loop.h"
#include "zk_fixture.h"

static zf_ensemble *zk;
static rf_server *redis;

typedef struct res {
    int done;
    lc_status st;
    uint64_t fence;
} res;

static int is_done(void *arg)
{
    return ((res *)arg)->done;
}

static void on_res(lc_zk_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)l;
    res *r = arg;
    r->done++;
    r->st = st;
    r->fence = fence;
}

static void on_eval(lc_zk_lock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    (void)reply;
    res *r = arg;
    r->done++;
    r->st = st;
}

static void on_lost(lc_zk_lock *l, void *arg)
{
    (void)l;
    ++*(int *)arg;
}

static int connected(void *arg)
{
    return lc_zk_client_connected(arg);
}

static int disconnected(void *arg)
{
    return !lc_zk_client_connected(arg);
}

static lc_zk_client *client(int session_ms)
{
    lc_zk_opts o;
    lc_zk_opts_init(&o);
    o.session_timeout_ms = session_ms;
    o.prefix = "lctest";
    lc_zk_client *c = NULL;
    assert_ok(lc_zk_client_new(lt_base, zf_hosts(zk), &o, &c));
    assert_true(lt_run_until(connected, c, 20000));
    return c;
}

static void test_leader_killed_mid_hold(void **state)
{
    (void)state;
    assert_ok(lt_loop_start() == 0 ? LC_OK : LC_ENOMEM);
    char name[64], key[80], seen[80];
    tu_unique_name(name, sizeof name, "zkens");
    snprintf(key, sizeof key, "%s:v", name);
    snprintf(seen, sizeof seen, "%s:seen", name);
    lc_script *script = NULL;
    assert_ok(lc_token_fenced_script_new("redis.call('SET', KEYS[1], ARGV[1]) return 1", &script));
    lc_async_client *store = NULL;
    assert_ok(lc_async_client_new(lt_base, rf_url(redis), NULL, &store));
    lc_zk_client *hc = client(6000), *wc = client(6000);
    int lost = 0;
    lc_zk_lock *h = NULL, *w = NULL;
    assert_ok(lc_zk_lock_new(hc, name, on_lost, &lost, &h));
    assert_ok(lc_zk_lock_new(wc, name, NULL, NULL, &w));
    res a = {0}, b = {0};
    assert_ok(lc_zk_lock_acquire(h, 0, on_res, &a));
    lt_run_until(is_done, &a, 10000);
    assert_int_equal(a.st, LC_OK);
    assert_ok(lc_zk_lock_acquire(w, 60000, on_res, &b));
    lt_run_until(lt_never, NULL, 300);

    int leader = zf_leader(zk);
    assert_true(leader >= 0);
    int64_t t0 = tu_now_ms();
    assert_int_equal(zf_kill(zk, leader), 0);
    /* whichever server the holder used, the ensemble elects a new leader and the session
     * lives on; wait until the holder's client is connected again */
    lt_run_until(disconnected, hc, 3000);
    assert_true(lt_run_until(connected, hc, 30000));
    lt_run_until(lt_never, NULL, 500);
    fprintf(stderr, "zk_ensemble: holder connected again %lld ms after the leader's kill\n",
            (long long)(tu_now_ms() - t0));
    assert_int_equal(lost, 0);
    assert_int_equal(lc_zk_lock_held(h), 1);
    assert_int_equal(b.done, 0); /* the waiter still waits */

    res e = {0};
    const char *keys[] = {key};
    const char *args[] = {"h"};
    assert_ok(
        lc_zk_lock_eval(h, store, script, seen, 0, 1, keys, NULL, 1, args, NULL, on_eval, &e));
    lt_run_until(is_done, &e, 10000);
    assert_int_equal(e.st, LC_OK);
    res r = {0};
    assert_ok(lc_zk_lock_release(h, on_res, &r));
    lt_run_until(is_done, &r, 10000);
    assert_int_equal(r.st, LC_OK);
    assert_true(lt_run_until(is_done, &b, 30000));
    assert_int_equal(b.st, LC_OK);
    assert_true(b.fence > a.fence);
    res r2 = {0};
    assert_ok(lc_zk_lock_release(w, on_res, &r2));
    lt_run_until(is_done, &r2, 10000);
    lc_zk_lock_free(h);
    lc_zk_lock_free(w);
    lc_zk_client_free(hc);
    lc_zk_client_free(wc);
    lc_async_client_free(store);
    lc_script_free(script);
    lt_loop_stop();
}

static int group_setup(void **state)
{
    (void)state;
    int64_t t0 = tu_now_ms();
    redis = rf_start(NULL);
    zk = zf_start(3);
    fprintf(stderr, "zk_ensemble: 3 servers up in %lld ms\n", (long long)(tu_now_ms() - t0));
    return redis && zk ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    zf_stop(zk);
    rf_stop(redis);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_leader_killed_mid_hold)};
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
