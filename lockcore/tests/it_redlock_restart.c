/*
 * Why Redlock needs the delayed-restart rule (docs/lockcore.md): five redis-servers *without*
 * persistence. A holds the lock on {0, 1, 2} (3 and 4 are down). Node 2 crashes and comes back
 * empty; 3 and 4 come back.
 *   - Restarted at once, node 2 has forgotten A's hold, so B gets {2, 3, 4}: two holders while
 *     A's validity still runs. The test measures that overlap (it must be > 0: it shows the
 *     hazard is real, not that lockcore prevents it).
 *   - Kept down for at least the lease (the rule), B can only get {3, 4} while A's hold lasts on
 *     {0, 1}; B is refused until A's validity is over.
 */
#include "lt_nodes.h"

static lt_nodes nodes;

static int group_setup(void **state)
{
    (void)state;
    return lt_nodes_start(&nodes, NULL);
}

static int setup(void **state)
{
    (void)state;
    return lt_nodes_reset(&nodes);
}

enum { LEASE_MS = 6000 }; /* seconds of margin for the restarts on a loaded machine */

typedef struct holder {
    lc_redlock_client *rc;
    lc_redlock *lock;
} holder;

static holder holder_new(const char *name)
{
    holder h = {0};
    lc_redlock_opts o = lt_redlock_opts(LEASE_MS, 0); /* no watchdog: the lease is the TTL */
    assert_ok(lc_redlock_client_new(LT_NODES, nodes.urls, NULL, &h.rc));
    assert_ok(lc_redlock_new(h.rc, name, &o, NULL, NULL, &h.lock));
    return h;
}

static void holder_free(holder *h)
{
    lc_redlock_free(h->lock);
    lc_redlock_client_free(h->rc);
}

/* A takes the lock on {0, 1, 2} with 3 and 4 down; returns the end of A's validity. */
static int64_t a_holds(holder *a)
{
    lt_node_crash(&nodes, 3);
    lt_node_crash(&nodes, 4);
    assert_ok(lc_redlock_acquire(a->lock, 5000, NULL));
    int64_t valid_until = tu_now_ms() + lc_redlock_validity_ms(a->lock);
    assert_int_equal(lt_nodes_owned(&nodes, "rlr:lock", lc_redlock_token(a->lock)), 3);
    return valid_until;
}

static void test_restart_at_once_admits_two(void **state)
{
    (void)state;
    holder a = holder_new("rlr:lock");
    int64_t a_until = a_holds(&a);
    lt_node_crash(&nodes, 2);
    lt_node_restart(&nodes, 2); /* at once, empty: the rule is broken */
    lt_node_restart(&nodes, 3);
    lt_node_restart(&nodes, 4);
    holder b = holder_new("rlr:lock");
    lc_status st = lc_redlock_acquire(b.lock, LEASE_MS, NULL);
    int64_t b_at = tu_now_ms();
    assert_ok(st);
    int64_t overlap = a_until - b_at;
    print_message("rule broken: B acquired while A's validity had %lld ms to run "
                  "(two holders)\n",
                  (long long)overlap);
    assert_true(overlap > 0);
    assert_int_equal(lt_nodes_owned(&nodes, "rlr:lock", lc_redlock_token(b.lock)), 3);
    holder_free(&b);
    holder_free(&a);
}

static void test_delayed_restart_keeps_one(void **state)
{
    (void)state;
    holder a = holder_new("rlr:lock");
    int64_t a_until = a_holds(&a);
    lt_node_crash(&nodes, 2);
    int64_t crashed_at = tu_now_ms();
    lt_node_restart(&nodes, 3);
    lt_node_restart(&nodes, 4);
    holder b = holder_new("rlr:lock");
    /* While A's validity runs, B is refused: node 2 is down and 0, 1 still carry A's hold. */
    int refused = 0;
    while (tu_now_ms() < a_until - 100) {
        lc_status st = lc_redlock_try(b.lock, NULL);
        if (st == LC_OK)
            fail_msg("B acquired %lld ms before A's validity ended",
                     (long long)(a_until - tu_now_ms()));
        refused++;
        tu_sleep_ms(50);
    }
    assert_true(refused > 0);
    /* The rule: node 2 rejoins only after the longest lease has passed since its crash. */
    int64_t wait = crashed_at + LEASE_MS - tu_now_ms();
    tu_sleep_ms((int)wait);
    lt_node_restart(&nodes, 2);
    assert_ok(lc_redlock_acquire(b.lock, 5000, NULL));
    assert_true(tu_now_ms() >= a_until);
    print_message("rule kept: B refused %d times, acquired after A's validity\n", refused);
    holder_free(&b);
    holder_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_restart_at_once_admits_two, setup),
        cmocka_unit_test_setup(test_delayed_restart_keeps_one, setup),
    };
    return cmocka_run_group_tests(tests, group_setup, gf_group_teardown);
}
