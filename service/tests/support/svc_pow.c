/*
 * svc_pow — the client's side of the waiting room's proof of work for integration tests; see
 * svc_pow.h.
 */
#include "svc_pow.h"

#include <stdio.h>
#include <string.h>

#include "pow.h"

int sp_solve_challenge(int port, const char *sku, const char *const *headers, char *pow, size_t cap,
                       sf_resp *resp)
{
    sf_resp own = {0};
    sf_resp *r = resp ? resp : &own;
    char path[160];
    snprintf(path, sizeof path, "/api/v1/skus/%s/queue/challenge", sku);
    int status = sf_http(port, "GET", path, headers, NULL, 0, r);
    int rc = status;
    if (status == 200) {
        const char *c = json_string_value(json_object_get(r->json, "challenge"));
        int bits = (int)sf_json_int(r->json, "bits", -1);
        char nonce[POW_NONCE_MAX + 1];
        if (bits == 0 && !c)
            rc = snprintf(pow, cap, "null") < (int)cap ? 0 : -1;
        else if (!c || bits < POW_BITS_MIN || pow_solve(c, bits, 0, UINT64_MAX, nonce) < 0)
            rc = -1;
        else if (snprintf(pow, cap, "{\"challenge\": \"%s\", \"nonce\": \"%s\"}", c, nonce) >=
                 (int)cap)
            rc = -1;
    }
    if (!resp)
        sf_resp_free(&own);
    return rc;
}
