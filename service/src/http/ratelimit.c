/*
 * ratelimit — fixed-size, lock-striped table of per-peer token buckets; see ratelimit.h.
 * Tokens are counted in thousandths and time in milliseconds, so a refill of rps tokens per
 * second is exactly rps thousandths per millisecond: integer arithmetic, no drift.
 */
#include "ratelimit.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#define MILLI 1000 /* thousandths of a token per token */

struct bucket {
    unsigned char key[RATELIMIT_KEY_LEN];
    bool used;
    int64_t tokens;  /* thousandths of a token, 0..cap, as of last_ms */
    int64_t last_ms; /* when tokens was computed */
};

struct stripe {
    pthread_mutex_t lock;
    struct bucket ways[RATELIMIT_WAYS];
};

struct ratelimit {
    int64_t rps; /* tokens per second = thousandths of a token per millisecond */
    int64_t cap; /* burst, in thousandths */
    uint64_t seed;
    struct stripe stripes[RATELIMIT_STRIPES];
};

struct ratelimit *ratelimit_new(int rps, int burst)
{
    if (rps < 1 || rps > 1000000 || burst < 1 || burst > 1000000)
        return NULL;
    struct ratelimit *rl = calloc(1, sizeof(*rl));
    if (!rl)
        return NULL;
    rl->rps = rps;
    rl->cap = (int64_t)burst * MILLI;
    /* A secret seed: peers cannot pick addresses that all land in one stripe. */
    if (getrandom(&rl->seed, sizeof(rl->seed), GRND_NONBLOCK) != (ssize_t)sizeof(rl->seed)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rl->seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)rl;
    }
    for (int i = 0; i < RATELIMIT_STRIPES; i++)
        pthread_mutex_init(&rl->stripes[i].lock, NULL);
    return rl;
}

void ratelimit_free(struct ratelimit *rl)
{
    if (!rl)
        return;
    for (int i = 0; i < RATELIMIT_STRIPES; i++)
        pthread_mutex_destroy(&rl->stripes[i].lock);
    free(rl);
}

int ratelimit_key(const struct sockaddr *sa, unsigned char key[RATELIMIT_KEY_LEN])
{
    memset(key, 0, RATELIMIT_KEY_LEN);
    if (!sa)
        return -1;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in->sin_addr.s_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            memcpy(key, in6->sin6_addr.s6_addr, RATELIMIT_KEY_LEN);
            return 0;
        }
        memcpy(key, in6->sin6_addr.s6_addr, 8); /* the /64 */
        return 0;
    }
    return -1;
}

void ratelimit_key_addr(const unsigned char addr[16], unsigned char key[RATELIMIT_KEY_LEN])
{
    static const unsigned char v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memcpy(key, addr, RATELIMIT_KEY_LEN);
    if (memcmp(addr, v4_prefix, 12) != 0)
        memset(key + 8, 0, 8); /* IPv6: the /64 */
}

/* FNV-1a over the key, mixed with the seed. */
static uint64_t hash_key(const struct ratelimit *rl, const unsigned char *key)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ rl->seed;
    for (int i = 0; i < RATELIMIT_KEY_LEN; i++) {
        h ^= key[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

/* b's tokens at now_ms (capped at cap; a clock that went backwards refills nothing). */
static int64_t refilled(const struct ratelimit *rl, const struct bucket *b, int64_t now_ms)
{
    if (now_ms <= b->last_ms)
        return b->tokens;
    /* Unsigned: the difference of any two int64 values fits. */
    uint64_t elapsed = (uint64_t)now_ms - (uint64_t)b->last_ms;
    if (elapsed > (uint64_t)rl->cap) /* rps >= 1: that long refills any bucket */
        return rl->cap;
    int64_t t = b->tokens + (int64_t)elapsed * rl->rps;
    return t > rl->cap ? rl->cap : t;
}

int ratelimit_take_key(struct ratelimit *rl, const unsigned char key[RATELIMIT_KEY_LEN],
                       int64_t now_ms)
{
    if (!rl)
        return 0;
    uint64_t h = hash_key(rl, key);
    struct stripe *s = &rl->stripes[h % RATELIMIT_STRIPES];
    pthread_mutex_lock(&s->lock);

    struct bucket *b = NULL, *free_way = NULL, *oldest = NULL;
    for (int i = 0; i < RATELIMIT_WAYS; i++) {
        struct bucket *w = &s->ways[i];
        if (w->used && memcmp(w->key, key, RATELIMIT_KEY_LEN) == 0) {
            b = w;
            break;
        }
        /* A full bucket says nothing a fresh one would not: its entry is free again. */
        if (!w->used || refilled(rl, w, now_ms) >= rl->cap) {
            if (!free_way)
                free_way = w;
        } else if (!oldest || w->last_ms < oldest->last_ms) {
            oldest = w;
        }
    }
    int64_t tokens;
    if (b) {
        tokens = refilled(rl, b, now_ms);
    } else {
        b = free_way ? free_way : oldest;
        memcpy(b->key, key, RATELIMIT_KEY_LEN);
        b->used = true;
        tokens = rl->cap;
    }
    /* A clock that went backwards leaves last_ms alone, so no time is refilled twice. */
    if (now_ms > b->last_ms || tokens == rl->cap)
        b->last_ms = now_ms;
    int retry = 0;
    if (tokens >= MILLI) {
        tokens -= MILLI;
    } else {
        /* Milliseconds until the missing thousandths have dripped in, as whole seconds. */
        int64_t wait_ms = (MILLI - tokens + rl->rps - 1) / rl->rps;
        retry = (int)((wait_ms + 999) / 1000);
        if (retry < 1)
            retry = 1;
    }
    b->tokens = tokens;
    pthread_mutex_unlock(&s->lock);
    return retry;
}

int ratelimit_take(struct ratelimit *rl, const struct sockaddr *sa, int64_t now_ms)
{
    unsigned char key[RATELIMIT_KEY_LEN];
    if (!rl || ratelimit_key(sa, key) != 0)
        return 0;
    return ratelimit_take_key(rl, key, now_ms);
}

size_t ratelimit_tracked(struct ratelimit *rl, int64_t now_ms)
{
    size_t n = 0;
    if (!rl)
        return 0;
    for (int i = 0; i < RATELIMIT_STRIPES; i++) {
        struct stripe *s = &rl->stripes[i];
        pthread_mutex_lock(&s->lock);
        for (int j = 0; j < RATELIMIT_WAYS; j++)
            if (s->ways[j].used && refilled(rl, &s->ways[j], now_ms) < rl->cap)
                n++;
        pthread_mutex_unlock(&s->lock);
    }
    return n;
}
