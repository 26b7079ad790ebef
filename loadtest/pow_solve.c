/*
 * pow-solve — the waiting room's proof of work from the client's side, for load tests and
 * scripts (SPEC §16): given the challenge GET /api/v1/skus/{sku}/queue/challenge answered,
 * prints a nonce whose SHA-256(challenge "." nonce) has the challenge's leading zero bits, ready
 * for the join's body {"pow": {"challenge": ..., "nonce": ...}}. The work is pow.c's pow_solve
 * (libcrypto's SHA-256), the same code the service's tests use. Built by CMake into
 * $BUILD_DIR/bin/pow-solve.
 *
 *   pow-solve CHALLENGE [START]   prints the nonce; START (default 0) the first nonce tried,
 *                                 so parallel solvers of one challenge can split the space
 *
 * Exit 0 with the nonce on stdout, 2 on a malformed challenge.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pow.h"

int main(int argc, char **argv)
{
    int64_t issued = 0;
    int bits = 0;
    if (argc < 2 || pow_parse(argv[1], &issued, &bits) != 0) {
        fprintf(stderr, "usage: pow-solve CHALLENGE [START] (a p1. challenge)\n");
        return 2;
    }
    uint64_t start = argc >= 3 ? strtoull(argv[2], NULL, 10) : 0;
    char nonce[POW_NONCE_MAX + 1];
    if (pow_solve(argv[1], bits, start, UINT64_MAX, nonce) < 0) {
        fprintf(stderr, "pow-solve: no nonce found\n");
        return 1;
    }
    printf("%s\n", nonce);
    return 0;
}
