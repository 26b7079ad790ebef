/*
 * SPEC §9's connection budget with the DEFAULT settings (issue 23): inventoryd started with no
 * connection flags under the common soft open-file limit of 1024 (the hard one higher) serves
 * more connections than that limit at once.
 *
 *   - test_fd_limit_raised: the soft limit of the running inventoryd is --max-connections
 *     (default 16384) + 256, or the hard limit when that is lower;
 *   - test_more_connections_than_the_inherited_limit: 1,500 keep-alive connections opened one
 *     after the other, each answered 200 on GET /healthz and kept open, then every one of them
 *     answered again. Before the limit was raised, the accept beyond about 1,000 descriptors
 *     failed (EMFILE) and the connection got no answer.
 */
#include "svc_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define INHERITED_SOFT 1024
#define CONNS 1500
#define WANT_LIMIT (16384 + 256)

static sf_service *svc;
static int port;
static rlim_t hard;

static int group_setup(void **state)
{
    (void)state;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    hard = rl.rlim_max;
    if (hard != RLIM_INFINITY && hard < CONNS + 256) {
        fprintf(stderr, "it_conns: the hard open-file limit (%llu) is below %d: cannot test\n",
                (unsigned long long)hard, CONNS + 256);
        return -1;
    }
    /* inventoryd inherits the soft limit of 1024 ... */
    struct rlimit low = {INHERITED_SOFT, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0)
        return -1;
    svc = sf_group_service(NULL); /* the defaults: no connection flags */
    /* ... and this test needs more than 1024 itself. */
    struct rlimit back = {rl.rlim_max == RLIM_INFINITY ? 65536 : rl.rlim_max, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &back) != 0)
        return -1;
    if (svc == NULL)
        return -1;
    port = sf_port(svc);
    return 0;
}

/* The soft "Max open files" of pid, or -1. */
static long long soft_nofile(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    long long v = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "Max open files", 14) == 0) {
            v = strtoll(line + 14, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static void test_fd_limit_raised(void **state)
{
    (void)state;
    long long want = hard != RLIM_INFINITY && hard < WANT_LIMIT ? (long long)hard : WANT_LIMIT;
    long long got = soft_nofile(sf_pid(svc));
    SF_ASSERT(got == want, "inventoryd's soft open-file limit is %lld, wanted %lld (inherited %d)",
              got, want, INHERITED_SOFT);
}

static void test_more_connections_than_the_inherited_limit(void **state)
{
    (void)state;
    sf_conn **c = calloc(CONNS, sizeof(*c));
    SF_ASSERT(c != NULL, "%s", "out of memory");
    sf_resp r = {0};
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < CONNS; i++) {
            if (!c[i])
                c[i] = sf_conn_open(port, 3000);
            int st = sf_conn_request(c[i], "GET", "/healthz", NULL, NULL, 0, &r);
            SF_ASSERT(st == 200, "round %d, connection %d of %d (all open at once): %s", round + 1,
                      i + 1, CONNS, sf_resp_summary(&r));
        }
    fprintf(stderr, "it_conns: %d connections open at once, each answered twice\n", CONNS);
    sf_resp_free(&r);
    for (int i = 0; i < CONNS; i++)
        sf_conn_close(c[i]);
    free(c);
    SF_ASSERT(sf_alive(svc), "%s", "inventoryd died");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_limit_raised),
        cmocka_unit_test(test_more_connections_than_the_inherited_limit),
    };
    return SF_RUN_GROUP_TESTS(tests, group_setup, sf_group_teardown);
}
