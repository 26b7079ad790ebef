/*
 * Small helpers shared by the lockcore and service tests (see testutil.h).
 */
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t tu_now_ms(void)
{
    return tu_now_us() / 1000;
}

int64_t tu_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void tu_sleep_ms(int ms)
{
    tu_sleep_us((long)ms * 1000);
}

void tu_sleep_us(long us)
{
    if (us <= 0)
        return;
    struct timespec req = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L};
    struct timespec rem;
    while (nanosleep(&req, &rem) == -1 && errno == EINTR)
        req = rem;
}

int tu_poll_until(int (*pred)(void *arg), void *arg, int timeout_ms, int step_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    if (step_ms <= 0)
        step_ms = 1;
    for (;;) {
        int v = pred(arg);
        if (v)
            return v;
        int64_t left = deadline - tu_now_ms();
        if (left <= 0)
            return pred(arg);
        tu_sleep_ms(left < step_ms ? (int)left : step_ms);
    }
}

char *tu_unique_name(char *buf, size_t size, const char *prefix)
{
    static atomic_uint counter;
    unsigned n = atomic_fetch_add(&counter, 1u);
    snprintf(buf, size, "%s:%ld:%u", prefix, (long)getpid(), n);
    return buf;
}

int tu_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    int saved = errno;
    close(fd);
    errno = saved;
    return port;
}

/* ---- cleanup hooks shared by the fixtures ---- */

enum { TU_MAX_CLEANUPS = 4 };
static void (*g_kill_fns[TU_MAX_CLEANUPS])(void);
static void (*g_exit_fns[TU_MAX_CLEANUPS])(void);
static int g_ncleanups;
static const int g_signals[] = {SIGABRT, SIGSEGV, SIGTERM, SIGINT};
#define TU_NSIGNALS ((int)(sizeof g_signals / sizeof g_signals[0]))
static struct sigaction g_oldact[TU_NSIGNALS];
static int g_hooked[TU_NSIGNALS];

static void tu_on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    for (int i = g_ncleanups - 1; i >= 0; i--)
        g_kill_fns[i]();
    for (int i = 0; i < TU_NSIGNALS; i++) {
        if (g_signals[i] == sig && g_hooked[i]) {
            sigaction(sig, &g_oldact[i], NULL);
            g_hooked[i] = 0;
        }
    }
    errno = saved;
    /* A real fault re-executes the faulting instruction on return and reaches the restored
     * handler with its true siginfo; anything sent by kill/raise has to be raised again. */
    if (sig == SIGSEGV && si != NULL && si->si_code > 0)
        return;
    raise(sig);
}

static void tu_at_exit(void)
{
    for (int i = g_ncleanups - 1; i >= 0; i--)
        g_exit_fns[i]();
}

void tu_on_cleanup(void (*kill_fn)(void), void (*exit_fn)(void))
{
    for (int i = 0; i < g_ncleanups; i++)
        if (g_kill_fns[i] == kill_fn)
            return;
    if (g_ncleanups == TU_MAX_CLEANUPS)
        abort();
    if (g_ncleanups == 0) {
        atexit(tu_at_exit);
        for (int i = 0; i < TU_NSIGNALS; i++) {
            struct sigaction old;
            if (sigaction(g_signals[i], NULL, &old) != 0)
                continue;
            if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)
                continue; /* an ignored signal stays ignored */
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = tu_on_signal;
            sa.sa_flags = SA_SIGINFO;
            sigemptyset(&sa.sa_mask);
            if (sigaction(g_signals[i], &sa, &g_oldact[i]) == 0)
                g_hooked[i] = 1;
        }
    }
    g_kill_fns[g_ncleanups] = kill_fn;
    g_exit_fns[g_ncleanups] = exit_fn;
    g_ncleanups++;
}
