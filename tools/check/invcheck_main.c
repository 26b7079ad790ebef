/*
 * inventory-check: SPEC §8's invariants of one SKU, read straight from Redis (invcheck.h), as a
 * JSON report on stdout. What loadtest/verify.sh runs (and through it loadtest/chaos.py); the
 * integration tests call the same code as a library (SF_ASSERT_INVARIANTS).
 *
 *   inventory-check --redis URL --sku S [--quiescent [--drain-s N]] [--live] [--skip-users]
 *                   [--key-schema 1|2] [--retry-s N] [--pretty]
 *   inventory-check --redis URL --group G --sku S [--sku S2 ...] [--retry-s N] [--pretty]
 *       (a limit group, SPEC §17: no user over its limit in the live orders of those SKUs,
 *       ic_check_group)
 *
 * Exit status: 0 every check passed, 1 a check failed (or there is no such SKU), 2 bad usage,
 * 3 Redis could not be read (for --retry-s seconds: a Redis Cluster's failover settling).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "invcheck.h"

static void usage(FILE *f)
{
    fputs("usage: inventory-check --redis URL --sku S [options]\n"
          "  --redis URL       redis://[[user]:password@]host:port[/db], or\n"
          "                    redis-cluster://host:port[,host:port...] (any nodes: seeds)\n"
          "  --sku S           the SKU to check (with --group: one of its SKUs; repeat it)\n"
          "  --group G         check limit group G across the --sku SKUs instead (SPEC §17: no\n"
          "                    user over its limit); the report is the group's\n"
          "  --quiescent       also: no follow queued, no intent of a multi-segment order left\n"
          "  --drain-s N       with --quiescent: first wait up to N s for the sweepers to drain\n"
          "                    them (0)\n"
          "  --live            only the checks that hold at every instant while orders run\n"
          "                    (each segment's own, one MULTI/EXEC each)\n"
          "  --skip-users      leave out SPEC §11's per-user limit checks\n"
          "  --key-schema N    2 (inv:2:{S}:..., default) or 1 (inv:{S}:..., before 34f3be8)\n"
          "  --retry-s N       read again for up to N s while Redis cannot be read (5)\n"
          "  --pretty          indent the JSON\n"
          "Prints the report as JSON (docs/design.md \"The invariant checker\"). Exit 0 every\n"
          "check passed, 1 one failed, 2 bad usage, 3 Redis could not be read.\n",
          f);
}

/* A whole number in [lo, hi] from text, or -1. */
static long whole(const char *text, long lo, long hi)
{
    char *end;
    long v = strtol(text, &end, 10);
    return end != text && *end == '\0' && v >= lo && v <= hi ? v : -1;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *sku = NULL, *group = NULL;
    const char *skus[64];
    int nskus = 0;
    ic_options opt = {0};
    long drain_s = 0, retry_s = 5;
    int pretty = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--redis") == 0 && v) {
            url = argv[++i];
        } else if (strcmp(a, "--sku") == 0 && v) {
            sku = argv[++i];
            if (nskus < 64)
                skus[nskus++] = sku;
        } else if (strcmp(a, "--group") == 0 && v) {
            group = argv[++i];
        } else if (strcmp(a, "--quiescent") == 0) {
            opt.quiescent = 1;
        } else if (strcmp(a, "--live") == 0) {
            opt.live = 1;
        } else if (strcmp(a, "--skip-users") == 0) {
            opt.skip_users = 1;
        } else if (strcmp(a, "--pretty") == 0) {
            pretty = 1;
        } else if (strcmp(a, "--drain-s") == 0 && v && (drain_s = whole(v, 0, 3600)) >= 0) {
            i++;
        } else if (strcmp(a, "--retry-s") == 0 && v && (retry_s = whole(v, 0, 3600)) >= 0) {
            i++;
        } else if (strcmp(a, "--key-schema") == 0 && v && whole(v, 1, 2) > 0) {
            opt.key_schema = (int)whole(argv[++i], 1, 2);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "inventory-check: bad argument %s%s%s\n", a, v ? " " : "", v ? v : "");
            usage(stderr);
            return 2;
        }
    }
    if (url == NULL || sku == NULL || sku[0] == '\0') {
        fputs("inventory-check: --redis and --sku are required\n", stderr);
        usage(stderr);
        return 2;
    }
    if (opt.live && opt.quiescent) {
        fputs("inventory-check: --live and --quiescent exclude each other\n", stderr);
        return 2;
    }
    if (opt.quiescent && drain_s > 0 && !group)
        ic_wait_drained(url, sku, &opt, (int)drain_s * 1000);
    ic_report *rep = malloc(sizeof *rep);
    if (rep == NULL) {
        fputs("inventory-check: out of memory\n", stderr);
        return 3;
    }
    /* A read that failed (a master failing over, MOVED in a MULTI) is made again, whole, with
     * a fresh slot map: never half of one snapshot and half of another. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc;
    for (;;) {
        rc = group ? ic_check_group(url, group, skus, nskus, rep) : ic_check(url, sku, &opt, rep);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (rc == 0 || t.tv_sec - t0.tv_sec >= retry_s)
            break;
        struct timespec nap = {0, 200 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    json_t *j = ic_report_json(group ? group : sku, rep);
    if (j && group) /* a group that does not exist caps nothing: nothing to fail */
        json_object_set_new(j, "group", json_string(group));
    char *text = j ? json_dumps(j, pretty ? JSON_INDENT(2) : JSON_COMPACT) : NULL;
    if (text == NULL) {
        fputs("inventory-check: out of memory\n", stderr);
        return 3;
    }
    puts(text);
    free(text);
    json_decref(j);
    int status = rc != 0 ? 3 : rep->ok ? 0 : 1;
    if (rc != 0)
        fprintf(stderr, "inventory-check: cannot read Redis at %s: %s", url, rep->problems);
    free(rep);
    return status;
}
