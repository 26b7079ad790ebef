/*
 * The integration tests' face of the SPEC §8 invariant checker (svc_fixture.h): the checker is
 * tools/check/invcheck.c, the core of the program inventory-check that loadtest/verify.sh and
 * loadtest/chaos.py run, so the tests, the load tests and the chaos test judge a SKU by one
 * implementation.
 */
#include "svc_fixture.h"

int sf_check_invariants(const char *redis_url, const char *sku, sf_report *rep)
{
    return ic_check(redis_url, sku, NULL, rep);
}

int sf_check_invariants_quiescent(const char *redis_url, const char *sku, sf_report *rep)
{
    const ic_options opt = {.quiescent = 1};
    return ic_check(redis_url, sku, &opt, rep);
}

int sf_check_group(const char *redis_url, const char *g, const char (*skus)[64], int n)
{
    const char *names[64];
    for (int i = 0; i < n && i < 64; i++)
        names[i] = skus[i];
    sf_report *rep = malloc(sizeof *rep);
    if (!rep)
        return -1;
    int rc = ic_check_group(redis_url, g, names, n < 64 ? n : 64, rep);
    if (rc != 0 || !rep->ok) {
        ic_report_print(g, rep);
        rc = -1;
    }
    free(rep);
    return rc;
}

long long sf_wait_multi_drained(const char *redis_url, const char *sku, int timeout_ms)
{
    return ic_wait_drained(redis_url, sku, NULL, timeout_ms);
}

void sf_report_print(const char *what, const sf_report *rep)
{
    ic_report_print(what, rep);
}
