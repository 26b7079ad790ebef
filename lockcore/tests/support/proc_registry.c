/*
 * The fixtures' process registry (see proc_registry.h): plain slots the signal handler reads
 * without a lock, an atexit handler, and the fatal-signal handlers.
 */
#include "proc_registry.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PR_MAX 128

/* One slot: seq orders entries by registration (0 = free). */
static volatile pid_t g_pid[PR_MAX];
static volatile pid_t g_owner[PR_MAX];
static volatile unsigned long g_seq[PR_MAX];
static const pr_kind *volatile g_kind[PR_MAX];
static void *volatile g_obj[PR_MAX];
static unsigned long g_next_seq;

static const int g_signals[] = {SIGABRT, SIGSEGV, SIGTERM, SIGINT};
#define PR_NSIGNALS ((int)(sizeof g_signals / sizeof g_signals[0]))
static struct sigaction g_oldact[PR_NSIGNALS];
static int g_hooked[PR_NSIGNALS];

/* The slot of this process's newest entry registered before seq `below`, or -1. */
static int pr_newest_below(unsigned long below)
{
    pid_t self = getpid();
    int best = -1;
    for (int i = 0; i < PR_MAX; i++) {
        if (g_seq[i] != 0 && g_seq[i] < below && g_owner[i] == self &&
            (best < 0 || g_seq[i] > g_seq[best]))
            best = i;
    }
    return best;
}

/* Kills (SIGKILL) and reaps every process this process registered, newest first, and removes
 * their files. Async-signal-safe. */
static void pr_kill_all(void)
{
    unsigned long below = (unsigned long)-1;
    for (int i; (i = pr_newest_below(below)) >= 0; below = g_seq[i]) {
        pid_t pid = g_pid[i];
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            g_pid[i] = 0;
        }
        if (g_kind[i]->remove_files != NULL)
            g_kind[i]->remove_files(g_obj[i]);
    }
}

/* atexit: stop whatever the test left running, newest first. */
static void pr_at_exit(void)
{
    unsigned long below = (unsigned long)-1;
    for (int i; (i = pr_newest_below(below)) >= 0;) {
        below = g_seq[i];
        g_kind[i]->stop(g_obj[i]);
    }
}

static void pr_on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    pr_kill_all();
    for (int i = 0; i < PR_NSIGNALS; i++) {
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

/* Once per process image: the atexit handler and the signal handlers. */
static void pr_install(void)
{
    static int installed;
    if (installed)
        return;
    installed = 1;
    atexit(pr_at_exit);
    for (int i = 0; i < PR_NSIGNALS; i++) {
        struct sigaction old;
        if (sigaction(g_signals[i], NULL, &old) != 0)
            continue;
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)
            continue; /* an ignored signal stays ignored */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = pr_on_signal;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(g_signals[i], &sa, &g_oldact[i]) == 0)
            g_hooked[i] = 1;
    }
}

pid_t pr_spawn(const char *const *argv, int outfd, int errfd)
{
    pid_t parent = getpid();
    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd < 0 || maxfd > 4096)
        maxfd = 4096;
    /* Opened before fork: the child may only make async-signal-safe calls. */
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "proc_registry: fork: %s\n", strerror(errno));
        if (devnull >= 0)
            close(devnull);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the test died before prctl took effect */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        static const int dfl[] = {SIGTERM, SIGINT, SIGPIPE, SIGABRT, SIGSEGV};
        for (size_t i = 0; i < sizeof dfl / sizeof dfl[0]; i++)
            signal(dfl[i], SIG_DFL);
        if (devnull >= 0)
            dup2(devnull, 0);
        int out = outfd >= 0 ? outfd : devnull, err = errfd >= 0 ? errfd : devnull;
        if (out >= 0)
            dup2(out, 1);
        if (err >= 0)
            dup2(err, 2);
        /* Do not let the child keep the test's pipes and sockets open. */
        for (long fd = 3; fd < maxfd; fd++)
            close((int)fd);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (devnull >= 0)
        close(devnull);
    return pid;
}

int pr_add(const pr_kind *kind, void *obj)
{
    pr_install();
    for (int i = 0; i < PR_MAX; i++) {
        if (g_seq[i] == 0) {
            g_kind[i] = kind;
            g_obj[i] = obj;
            g_owner[i] = getpid();
            g_pid[i] = 0;
            g_seq[i] = ++g_next_seq;
            return i;
        }
    }
    fprintf(stderr, "proc_registry: more than %d fixture processes at once\n", PR_MAX);
    return -1;
}

void pr_set_pid(int slot, pid_t pid)
{
    if (slot >= 0 && slot < PR_MAX)
        g_pid[slot] = pid;
}

void pr_remove(int slot)
{
    if (slot < 0 || slot >= PR_MAX)
        return;
    g_seq[slot] = 0;
    g_pid[slot] = 0;
    g_obj[slot] = NULL;
}

void pr_each(const pr_kind *kind, void (*fn)(void *obj, void *arg), void *arg)
{
    pid_t self = getpid();
    unsigned long after = 0;
    for (;;) {
        int next = -1;
        for (int i = 0; i < PR_MAX; i++) {
            if (g_seq[i] > after && g_owner[i] == self && g_kind[i] == kind &&
                (next < 0 || g_seq[i] < g_seq[next]))
                next = i;
        }
        if (next < 0)
            return;
        after = g_seq[next];
        fn(g_obj[next], arg);
    }
}
