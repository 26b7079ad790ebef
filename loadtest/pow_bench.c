/*
 * pow_bench — the proof of work's costs (SPEC §16, docs/performance.md "Proof of work"): how
 * many answers one thread verifies per second (the server's side; the target is
 * >= 100,000 per core), and how long a solve takes at a difficulty (the client's side). Built
 * by CMake into $BUILD_DIR/bin/pow_bench; loadtest/pow.sh runs it and writes the numbers.
 *
 *   pow_bench verify [SECONDS]      one thread verifying solved answers (the whole check:
 *                                   parse, HMAC, user, SKU, expiry, SHA-256 of the work), for
 *                                   SECONDS (default 3); also the refusal of a forged one
 *   pow_bench solve BITS [COUNT]    COUNT (default 8) challenges solved at BITS: mean, median
 *                                   and max seconds per solve, hashes per second
 *
 * Each prints one JSON line. Single-threaded on purpose: the result is per core.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pow.h"

static const unsigned char key[] = "pow-bench-key-0123456789abcdef-0123456789";
#define KEYLEN (sizeof(key) - 1)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* 64 answers for 64 users, at 8 bits (the work's difficulty does not change a check's cost:
 * it is one hash whatever the bits). */
#define NANS 64
static char ch[NANS][POW_CHALLENGE_MAX], nonce[NANS][POW_NONCE_MAX + 1], user[NANS][32];

static int verify(double seconds)
{
    const int64_t t0 = 1800000000000LL;
    for (int i = 0; i < NANS; i++) {
        snprintf(user[i], sizeof(user[i]), "user-%d", i);
        if (pow_mint(key, KEYLEN, "flash-sku-1", user[i], t0, 8, ch[i], sizeof(ch[i])) < 0 ||
            pow_solve(ch[i], 8, 0, 1u << 24, nonce[i]) < 0) {
            fprintf(stderr, "pow_bench: mint/solve failed\n");
            return 1;
        }
    }
    long long n = 0, bad = 0;
    double start = now_s(), end = start + seconds, t = start;
    while (t < end) {
        for (int k = 0; k < 1024; k++, n++) {
            int i = (int)(n % NANS);
            if (pow_verify(key, KEYLEN, ch[i], nonce[i], "flash-sku-1", user[i], t0 + 1000, 8) !=
                POW_OK)
                bad++;
        }
        t = now_s();
    }
    double rate = (double)n / (t - start);
    /* a forged answer (altered MAC) costs the same check up to the HMAC */
    char forged[POW_CHALLENGE_MAX];
    snprintf(forged, sizeof(forged), "%s", ch[0]);
    forged[strlen(forged) - 2] = forged[strlen(forged) - 2] == 'A' ? 'B' : 'A';
    long long m = 0;
    double fs = now_s(), fe = fs + seconds / 3, ft = fs;
    while (ft < fe) {
        for (int k = 0; k < 1024; k++, m++)
            if (pow_verify(key, KEYLEN, forged, nonce[0], "flash-sku-1", user[0], t0 + 1000, 8) ==
                POW_OK)
                bad++;
        ft = now_s();
    }
    printf("{\"mode\":\"verify\",\"threads\":1,\"seconds\":%.2f,\"verifications\":%lld,"
           "\"verifications_per_s\":%.0f,\"us_per_verification\":%.3f,"
           "\"forged_refusals_per_s\":%.0f,\"wrong_answers\":%lld}\n",
           t - start, n, rate, 1e6 / rate, (double)m / (ft - fs), bad);
    return bad ? 1 : 0;
}

static int solve(int bits, int count)
{
    double *secs = calloc((size_t)count, sizeof(double));
    if (!secs)
        return 1;
    long long hashes = 0;
    double total = 0;
    for (int i = 0; i < count; i++) {
        char c[POW_CHALLENGE_MAX], n[POW_NONCE_MAX + 1], u[32];
        snprintf(u, sizeof(u), "solver-%d-%ld", i, (long)time(NULL));
        if (pow_mint(key, KEYLEN, "flash-sku-1", u, 1800000000000LL, bits, c, sizeof(c)) < 0) {
            free(secs);
            return 1;
        }
        double s = now_s();
        int64_t tries = pow_solve(c, bits, 0, UINT64_MAX, n);
        secs[i] = now_s() - s;
        if (tries < 0 ||
            pow_verify(key, KEYLEN, c, n, "flash-sku-1", u, 1800000000001LL, bits) != POW_OK) {
            fprintf(stderr, "pow_bench: solve failed\n");
            free(secs);
            return 1;
        }
        hashes += tries;
        total += secs[i];
    }
    qsort(secs, (size_t)count, sizeof(double), cmp_double);
    printf("{\"mode\":\"solve\",\"bits\":%d,\"solves\":%d,\"mean_s\":%.3f,\"median_s\":%.3f,"
           "\"max_s\":%.3f,\"hashes_per_s\":%.0f,\"mean_hashes\":%.0f}\n",
           bits, count, total / count, secs[count / 2], secs[count - 1], (double)hashes / total,
           (double)hashes / count);
    free(secs);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "verify") == 0) {
        double s = argc >= 3 ? atof(argv[2]) : 3;
        return verify(s > 0 ? s : 3);
    }
    if (argc >= 3 && strcmp(argv[1], "solve") == 0) {
        int bits = atoi(argv[2]), count = argc >= 4 ? atoi(argv[3]) : 8;
        if (bits < POW_BITS_MIN || bits > POW_BITS_MAX || count < 1)
            return 2;
        return solve(bits, count);
    }
    fprintf(stderr, "usage: pow_bench verify [SECONDS] | pow_bench solve BITS [COUNT]\n");
    return 2;
}
