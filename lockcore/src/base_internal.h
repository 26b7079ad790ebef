/*
 * The bottom layer of lockcore (see layers.txt): what every other layer uses and that uses no
 * other layer: errors and the clock (status.c), owner tokens and jitter (token.c), Redis URLs
 * (url.c). Nothing here is part of the public API.
 */
#ifndef LOCKCORE_BASE_INTERNAL_H
#define LOCKCORE_BASE_INTERNAL_H

#include <stdint.h>

#include "lockcore/lockcore.h"

/* ---- errors and the clock (status.c) ---- */

/* The longest error message kept, with its NUL (lc_errmsg() and every per-handle copy). */
#define LC_ERRSTR_MAX 256

/* Records a formatted message as this thread's lc_errmsg() and returns st. Inside lockcore the
 * thread's message is only a scratch within one call chain: whatever must outlive it (a
 * deferred failure, a handle's last error, a callback's errstr) is copied where it belongs. */
lc_status lc_fail(lc_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC in milliseconds. */
int64_t lc_now_ms(void);

/* ---- tokens (token.c) ---- */

/* Fills out with 32 lowercase hex digits of a fresh random 128-bit token, NUL-terminated. */
void lc_token_new(char out[33]);

/* A random integer in [0, bound) from a per-thread generator (jitter; not for secrets). */
uint32_t lc_rand_below(uint32_t bound);

/* ---- URL (url.c) ---- */

enum { LC_URL_SEEDS_MAX = 16 };

typedef struct lc_url_seed {
    char host[256];
    int port;
} lc_url_seed;

typedef struct lc_url {
    int unix_socket; /* 1: path is set; 0: host and port */
    int cluster;     /* 1: redis-cluster://, seeds[0..nseeds) (host and port = seeds[0]) */
    int nseeds;
    lc_url_seed seeds[LC_URL_SEEDS_MAX];
    char host[256];
    int port;
    char path[256];
    char user[128];     /* "" when none */
    char password[256]; /* "" when none */
    int db;             /* 0 by default */
} lc_url;

/* Parses a Redis URL (forms in lockcore.h). LC_OK or LC_EINVAL with a message. */
lc_status lc_url_parse(const char *url, lc_url *out);

#endif
