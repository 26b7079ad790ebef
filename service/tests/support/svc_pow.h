/*
 * Test support (prefix sp_): the waiting room's proof of work from the client's side, for the
 * integration tests that join a queue (SPEC §16): the challenge asked of an instance, solved
 * with pow.c's solver, made the join body's "pow" member.
 */
#ifndef SVC_TESTS_SVC_POW_H
#define SVC_TESTS_SVC_POW_H

#include <stddef.h>

#include "svc_fixture.h"

/* GET /api/v1/skus/{sku}/queue/challenge on port with headers (NULL-terminated "Name: value",
 * e.g. the user header or "Authorization: Bearer <JWT>"; may be NULL), then solves it: writes
 * {"challenge": ..., "nonce": ...} (a JSON object's text, NUL-terminated) into pow[0..cap).
 * Returns 200 when solved; 0 when the SKU asks no proof (bits 0: pow is "null"); otherwise the
 * challenge's HTTP status (its response in *resp when resp is not NULL) or -1 when no nonce was
 * found or cap is too small. */
int sp_solve_challenge(int port, const char *sku, const char *const *headers, char *pow, size_t cap,
                       sf_resp *resp);

#endif
