/*
 * ids — random identifiers from getrandom; see ids.h. A per-thread buffer of random bytes saves
 * one system call per order: it is refilled with one getrandom call every IDS_BUF orders' worth.
 */
#include "ids.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

#define IDS_BUF 512 /* bytes per refill: 32 ids */

struct ids_pool {
    unsigned char buf[IDS_BUF];
    size_t used; /* bytes of buf already handed out; IDS_BUF = empty */
};

static _Thread_local struct ids_pool pool = {.used = IDS_BUF};

/* Fills p->buf from the kernel. 0 or -1. */
static int refill(struct ids_pool *p)
{
    size_t got = 0;
    while (got < IDS_BUF) {
        ssize_t r = getrandom(p->buf + got, IDS_BUF - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    p->used = 0;
    return 0;
}

int ids_order_token(char *hex, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    enum { BYTES = IDS_ORDER_BITS / 8 };
    if (!hex || n < IDS_ORDER_HEX + 1) {
        if (hex && n)
            hex[0] = '\0';
        return -1;
    }
    if (pool.used + BYTES > IDS_BUF && refill(&pool) != 0) {
        hex[0] = '\0';
        return -1;
    }
    const unsigned char *b = pool.buf + pool.used;
    for (int i = 0; i < BYTES; i++) {
        hex[2 * i] = digits[b[i] >> 4];
        hex[2 * i + 1] = digits[b[i] & 15];
    }
    hex[IDS_ORDER_HEX] = '\0';
    /* Each byte is used once: wipe it so a later memory disclosure cannot replay it. */
    memset(pool.buf + pool.used, 0, BYTES);
    pool.used += BYTES;
    return 0;
}
