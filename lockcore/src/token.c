/*
 * Owner tokens and jitter. Tokens are 128 bits from getrandom() — unique across processes and
 * hosts, which is what makes an owner check meaningful. Jitter uses a cheap per-thread
 * xorshift generator seeded once from getrandom().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base_internal.h"

static void fill_random(void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(p + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue; /* a signal before the pool was ready: ask again */
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got < len) {
        /* No getrandom (ENOSYS in an old kernel or a seccomp sandbox): the same pool by file. */
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        while (fd >= 0 && got < len) {
            ssize_t n = read(fd, p + got, len - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        if (fd >= 0)
            close(fd);
    }
    if (got < len) {
        /* Neither source answered: stay unique per process and instant at least. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t mix = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
        for (size_t i = got; i < len; i++) {
            mix = mix * 6364136223846793005ULL + 1442695040888963407ULL;
            p[i] = (unsigned char)(mix >> 56);
        }
    }
}

void lc_token_new(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];
    fill_random(raw, sizeof(raw));
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
}

uint32_t lc_rand_below(uint32_t bound)
{
    static _Thread_local uint64_t state;
    if (state == 0) {
        fill_random(&state, sizeof(state));
        state |= 1;
    }
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return bound ? (uint32_t)(state % bound) : 0;
}
