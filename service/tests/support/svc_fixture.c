/*
 * inventoryd processes for the integration tests (see svc_fixture.h): fork/exec on a free port
 * with the log in a mkdtemp dir, wait for the "listening" log line and /healthz, and make sure
 * every process dies with the test whatever way the test ends.
 */
#include "svc_fixture.h"

#include "proc_registry.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SF_MAX_ARGS 64
#define SF_START_TIMEOUT_MS 5000
#define SF_STOP_TIMEOUT_MS 10000
#define SF_PORT_ATTEMPTS 8

struct sf_service {
    pid_t pid; /* 0 when not running */
    int port;
    int slot;        /* in the process registry (proc_registry.h) */
    int exit_status; /* as sf_stop reports it; -1 while running or never ran */
    char dir[256];
    char logpath[300];
    char url[1024];
    int has_url;
    int nextra;
    char *extra[SF_MAX_ARGS];
};

/* From the fatal-signal handler (proc_registry.h), after the process was killed: removes its
 * log and dir. Async-signal-safe. */
static void sf_remove_files(void *obj)
{
    sf_service *svc = obj;
    if (svc->dir[0] != '\0') {
        unlink(svc->logpath);
        rmdir(svc->dir);
    }
}

static void sf_stop_obj(void *obj)
{
    sf_stop(obj);
}

static const pr_kind sf_kind = {sf_remove_files, sf_stop_obj};

/* ---- the binary ---- */

static int sf_executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

const char *sf_binary(void)
{
    static char path[PATH_MAX + 32];
    if (path[0] != '\0')
        return path;
    const char *dir = getenv("INVENTORY_BUILD_BIN");
    if (dir != NULL && *dir != '\0') {
        snprintf(path, sizeof path, "%s/inventoryd", dir);
        if (sf_executable(path))
            return path;
        fprintf(stderr, "svc_fixture: INVENTORY_BUILD_BIN=%s has no executable inventoryd\n", dir);
    }
    char self[PATH_MAX - 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            /* Tests and inventoryd share build/bin; ../bin covers a tests/ sibling dir. */
            static const char *const rel[] = {"inventoryd", "../bin/inventoryd"};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
                snprintf(path, sizeof path, "%s/%s", self, rel[i]);
                if (sf_executable(path))
                    return path;
            }
        }
    }
    path[0] = '\0';
    fprintf(stderr, "svc_fixture: no inventoryd binary (set INVENTORY_BUILD_BIN)\n");
    return NULL;
}

/* ---- logs ---- */

/* Reads the whole file into a new NUL-terminated buffer (NULL when unreadable). */
static char *sf_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

void sf_print_log(const sf_service *svc, int max_lines)
{
    if (svc == NULL)
        return;
    char *text = sf_slurp(svc->logpath);
    fprintf(stderr, "---- inventoryd port %d (pid %ld) log tail, %s\n", svc->port, (long)svc->pid,
            svc->logpath);
    if (text != NULL) {
        size_t len = strlen(text);
        const char *start = text;
        int lines = 0;
        for (size_t i = len; i > 0; i--) {
            if (text[i - 1] == '\n' && i != len && ++lines >= max_lines) {
                start = text + i;
                break;
            }
        }
        /* The first sanitizer report (ThreadSanitizer's, AddressSanitizer's) comes first and
         * whole, up to its SUMMARY line: its opening lines say what went wrong and would
         * otherwise fall outside the tail. */
        const char *report = strstr(text, "Sanitizer: ");
        if (report != NULL && report < start) {
            while (report > text && report[-1] != '\n')
                report--;
            const char *summary = strstr(report, "SUMMARY: ");
            const char *end = summary != NULL ? strchr(summary, '\n') : NULL;
            end = end != NULL ? end + 1 : text + len;
            if (end > start)
                start = report;
            else
                fprintf(stderr, "%.*s...\n", (int)(end - report), report);
        }
        fputs(start, stderr);
        if (len > 0 && text[len - 1] != '\n')
            fputc('\n', stderr);
    }
    fprintf(stderr, "---- end of log\n");
    free(text);
}

static void sf_print_log_of(void *obj, void *arg)
{
    sf_print_log(obj, *(const int *)arg);
}

void sf_print_all_logs(int max_lines)
{
    pr_each(&sf_kind, sf_print_log_of, &max_lines);
}

int sf_log_contains(const sf_service *svc, const char *needle)
{
    char *text = sf_slurp(svc->logpath);
    int found = text != NULL && strstr(text, needle) != NULL;
    free(text);
    return found;
}

/* ---- processes ---- */

/* The exit status as the API reports it. */
static int sf_decode_status(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

/* Starts svc's process on svc->port. Returns 0 or -1. */
static int sf_spawn(sf_service *svc)
{
    const char *bin = sf_binary();
    if (bin == NULL)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", svc->port);
    const char *argv[SF_MAX_ARGS + 16];
    int argc = 0;
    argv[argc++] = bin;
    argv[argc++] = "--port";
    argv[argc++] = port;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    /* The suites' admin calls come from loopback, most without a token (inventoryd's default is
     * closed); a test of the default passes --admin-allow-loopback=0, which comes later. */
    argv[argc++] = "--admin-allow-loopback";
    /* The suites read a SKU's status right after their orders and assert exact numbers: every
     * read refreshes the snapshot (SPEC §15) for them (it_status tests the default). */
    argv[argc++] = "--status-refresh-ms";
    argv[argc++] = "0";
    if (svc->has_url) {
        argv[argc++] = "--redis";
        argv[argc++] = svc->url;
    }
    for (int i = 0; i < svc->nextra; i++)
        argv[argc++] = svc->extra[i];
    argv[argc] = NULL;

    int out = open(svc->logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out < 0) {
        fprintf(stderr, "svc_fixture: open %s: %s\n", svc->logpath, strerror(errno));
        return -1;
    }
    pid_t pid = pr_spawn(argv, out, out);
    close(out);
    if (pid < 0)
        return -1;
    svc->pid = pid;
    svc->exit_status = -1;
    pr_set_pid(svc->slot, pid);
    return 0;
}

/* Reaps svc's process if it exited. Returns 1 when it is gone. */
static int sf_reaped(sf_service *svc)
{
    if (svc->pid <= 0)
        return 1;
    int status;
    pid_t r = waitpid(svc->pid, &status, WNOHANG);
    if (r == svc->pid) {
        svc->exit_status = sf_decode_status(status);
        svc->pid = 0;
        pr_set_pid(svc->slot, 0);
        return 1;
    }
    if (r < 0 && errno == ECHILD) {
        svc->pid = 0;
        pr_set_pid(svc->slot, 0);
        return 1;
    }
    return 0;
}

int sf_alive(sf_service *svc)
{
    return svc != NULL && !sf_reaped(svc);
}

int sf_exit_status(sf_service *svc)
{
    if (svc == NULL || sf_alive(svc))
        return -1;
    return svc->exit_status;
}

static int sf_start_timeout_ms(void)
{
    const char *v = getenv("SF_START_TIMEOUT_MS");
    int ms = v != NULL ? atoi(v) : 0;
    return ms > 0 ? ms : SF_START_TIMEOUT_MS;
}

/* Waits until /healthz answers 200 from svc's own process: it logged that it listens on its
 * port, or (should that log line change) it has been alive for a second, long enough for a
 * failed bind to have ended it. Returns 0; 1 when the port was taken (try another); -1 when it
 * died or timed out. */
static int sf_wait_ready(sf_service *svc)
{
    char listening[64];
    snprintf(listening, sizeof listening, " port %d (", svc->port);
    int timeout = sf_start_timeout_ms();
    int64_t start = tu_now_ms(), deadline = start + timeout;
    while (tu_now_ms() < deadline) {
        if (sf_reaped(svc)) {
            if (sf_log_contains(svc, "cannot listen"))
                return 1;
            fprintf(stderr, "svc_fixture: inventoryd on port %d exited with status %d\n", svc->port,
                    svc->exit_status);
            return -1;
        }
        if (sf_log_contains(svc, listening) || tu_now_ms() - start >= 1000) {
            sf_resp r = {0};
            int st = sf_http(svc->port, "GET", "/healthz", NULL, NULL, 0, &r);
            sf_resp_free(&r);
            if (st == 200)
                return 0;
        }
        tu_sleep_ms(10);
    }
    fprintf(stderr, "svc_fixture: inventoryd on port %d not ready within %d ms\n", svc->port,
            timeout);
    return -1;
}

/* After a logged clean stop, how much longer the exit may take (sanitizer builds). */
#define SF_EXIT_GRACE_MS 50000

/* Prints every thread's stack of pid to stderr with gdb, when gdb is installed (a process that
 * will not end is about to be killed: this is what tells why). */
static void sf_dump_threads(pid_t pid)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd,
             "command -v gdb >/dev/null && timeout 30 gdb -p %d -batch -ex 'thread apply all bt' "
             "2>/dev/null | grep -v '^\\[New' >&2",
             (int)pid);
    if (system(cmd) != 0)
        fprintf(stderr, "svc_fixture: no thread dump of pid %d (gdb missing or failed)\n",
                (int)pid);
}

/* Signals the process and waits for it; SIGKILL after timeout_ms. */
static void sf_terminate(sf_service *svc, int sig, int timeout_ms)
{
    if (svc->pid <= 0)
        return;
    /* SIGCONT first (a paused process could not act on SIGTERM), never after: a SIGCONT that
     * arrives once the process is exiting discards the SIGSTOP with which LeakSanitizer's
     * tracer (sanitizer builds) stops it for the leak check, and the tracer then waits for that
     * stop forever (it_security hung 2 in 12 runs under ASan when this fixture was descheduled
     * between a SIGTERM and its SIGCONT). */
    if (sig != SIGKILL)
        kill(svc->pid, SIGCONT);
    kill(svc->pid, sig);
    int64_t deadline = tu_now_ms() + timeout_ms;
    int extended = 0;
    while (!sf_reaped(svc)) {
        if (tu_now_ms() >= deadline && sig != SIGKILL && !extended &&
            sf_log_contains(svc, "\"event\":\"stopped\"")) {
            /* It logged its clean stop: what is left is the process's exit, where a sanitizer
             * build runs LeakSanitizer's check, which took over 10 s once on a loaded machine.
             * Give it longer, and show where it is if it still does not end. */
            fprintf(stderr,
                    "svc_fixture: inventoryd on port %d stopped but has not exited "
                    "after %d ms; waiting up to %d ms more\n",
                    svc->port, timeout_ms, SF_EXIT_GRACE_MS);
            deadline = tu_now_ms() + SF_EXIT_GRACE_MS;
            extended = 1;
        }
        if (tu_now_ms() >= deadline) {
            fprintf(stderr,
                    "svc_fixture: inventoryd on port %d ignored signal %d for %d ms; "
                    "SIGKILL\n",
                    svc->port, sig, timeout_ms);
            sf_dump_threads(svc->pid);
            kill(svc->pid, SIGKILL);
            int status;
            if (waitpid(svc->pid, &status, 0) == svc->pid)
                svc->exit_status = sf_decode_status(status);
            svc->pid = 0;
            pr_set_pid(svc->slot, 0);
            break;
        }
        tu_sleep_ms(5);
    }
}

static void sf_free(sf_service *svc)
{
    if (svc->dir[0] != '\0' && getenv("SF_KEEP_LOGS") == NULL) {
        unlink(svc->logpath);
        rmdir(svc->dir);
    }
    for (int i = 0; i < svc->nextra; i++)
        free(svc->extra[i]);
    pr_remove(svc->slot);
    free(svc);
}

sf_service *sf_start(const char *redis_url, const char *const *extra_args)
{
    if (sf_binary() == NULL)
        return NULL;
    sf_service *svc = calloc(1, sizeof *svc);
    if (svc == NULL)
        return NULL;
    svc->exit_status = -1;
    if ((svc->slot = pr_add(&sf_kind, svc)) < 0) {
        free(svc);
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 64)
        tmp = "/tmp";
    snprintf(svc->dir, sizeof svc->dir, "%s/sf-inventoryd-XXXXXX", tmp);
    if (mkdtemp(svc->dir) == NULL) {
        fprintf(stderr, "svc_fixture: mkdtemp %s: %s\n", svc->dir, strerror(errno));
        svc->dir[0] = '\0';
        sf_free(svc);
        return NULL;
    }
    snprintf(svc->logpath, sizeof svc->logpath, "%s/inventoryd.log", svc->dir);
    if (redis_url != NULL) {
        snprintf(svc->url, sizeof svc->url, "%s", redis_url);
        svc->has_url = 1;
    }
    for (int i = 0; extra_args != NULL && extra_args[i] != NULL; i++) {
        if (i >= SF_MAX_ARGS) {
            fprintf(stderr, "svc_fixture: more than %d extra args\n", SF_MAX_ARGS);
            sf_free(svc);
            return NULL;
        }
        svc->extra[i] = strdup(extra_args[i]);
        if (svc->extra[i] == NULL) {
            sf_free(svc);
            return NULL;
        }
        svc->nextra = i + 1;
    }
    for (int attempt = 0; attempt < SF_PORT_ATTEMPTS; attempt++) {
        svc->port = tu_free_port();
        if (svc->port <= 0) {
            fprintf(stderr, "svc_fixture: no free port: %s\n", strerror(errno));
            break;
        }
        if (sf_spawn(svc) != 0)
            break;
        int rc = sf_wait_ready(svc);
        if (rc == 0)
            return svc;
        if (rc < 0 || attempt == SF_PORT_ATTEMPTS - 1) {
            sf_terminate(svc, SIGKILL, 1000);
            sf_print_log(svc, 40);
            break;
        }
        sf_terminate(svc, SIGKILL, 1000);
        unlink(svc->logpath); /* the next attempt's log starts clean */
    }
    fprintf(stderr, "svc_fixture: could not start inventoryd\n");
    sf_free(svc);
    return NULL;
}

int sf_stop_all(sf_service **svc, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (svc[i] != NULL && sf_stop(svc[i]) != 0)
            bad = 1;
        svc[i] = NULL;
    }
    return bad ? -1 : 0;
}

int sf_stop(sf_service *svc)
{
    if (svc == NULL)
        return -1;
    int was_running = svc->pid > 0 && !sf_reaped(svc);
    if (was_running)
        sf_terminate(svc, SIGTERM, SF_STOP_TIMEOUT_MS);
    int status = was_running ? svc->exit_status : -1;
    if (was_running && status != 0)
        sf_print_log(svc, 40);
    sf_free(svc);
    return status;
}

int sf_kill(sf_service *svc, int sig)
{
    if (svc == NULL || svc->pid <= 0 || sf_reaped(svc))
        return -1;
    if (sig == SIGKILL) {
        sf_terminate(svc, SIGKILL, 5000);
        return 0;
    }
    return kill(svc->pid, sig) == 0 ? 0 : -1;
}

int sf_pause(sf_service *svc)
{
    return sf_kill(svc, SIGSTOP);
}

int sf_resume(sf_service *svc)
{
    return sf_kill(svc, SIGCONT);
}

int sf_restart(sf_service *svc)
{
    if (svc == NULL)
        return -1;
    if (svc->pid > 0)
        sf_terminate(svc, SIGTERM, SF_STOP_TIMEOUT_MS);
    /* The port is fixed now (clients know it): wait out a squatter for a while. */
    for (int attempt = 0; attempt < 20; attempt++) {
        if (sf_spawn(svc) != 0)
            return -1;
        int rc = sf_wait_ready(svc);
        if (rc == 0)
            return 0;
        sf_terminate(svc, SIGKILL, 1000);
        if (rc < 0)
            break;
        tu_sleep_ms(100);
    }
    sf_print_log(svc, 40);
    return -1;
}

int sf_port(const sf_service *svc)
{
    return svc->port;
}

pid_t sf_pid(const sf_service *svc)
{
    return svc->pid;
}

const char *sf_log_path(const sf_service *svc)
{
    return svc->logpath;
}

/* An unlinked temp file for captured output, or -1. */
static int sf_temp_fd(void)
{
    char path[] = "/tmp/sf-run-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "svc_fixture: mkstemp: %s\n", strerror(errno));
        return -1;
    }
    unlink(path);
    return fd;
}

/* Copies what fd holds into buf (NUL-terminated, truncated to len - 1) and closes fd. */
static void sf_read_back(int fd, char *buf, size_t len)
{
    if (len > 0) {
        ssize_t n = fd >= 0 ? pread(fd, buf, len - 1, 0) : -1;
        buf[n > 0 ? n : 0] = '\0';
    }
    if (fd >= 0)
        close(fd);
}

int sf_run(const char *const *args, int timeout_ms, char *out, size_t outlen, char *err,
           size_t errlen)
{
    if (outlen > 0)
        out[0] = '\0';
    if (errlen > 0)
        err[0] = '\0';
    const char *bin = sf_binary();
    if (bin == NULL)
        return -1;
    const char *argv[SF_MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = bin;
    for (int i = 0; args != NULL && args[i] != NULL && argc < SF_MAX_ARGS + 1; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;

    int ofd = sf_temp_fd(), efd = sf_temp_fd();
    pid_t pid = ofd >= 0 && efd >= 0 ? pr_spawn(argv, ofd, efd) : -1;
    int status = 0, result = -1;
    int64_t deadline = tu_now_ms() + timeout_ms;
    while (pid > 0) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            result = sf_decode_status(status);
            break;
        }
        if (tu_now_ms() >= deadline) {
            fprintf(stderr, "svc_fixture: inventoryd still running after %d ms; killed\n",
                    timeout_ms);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            break;
        }
        tu_sleep_ms(5);
    }
    sf_read_back(ofd, out, outlen);
    sf_read_back(efd, err, errlen);
    return result;
}

/* ---- the group's services ---- */

#define SF_GROUP_MAX 4
static sf_service *g_group[SF_GROUP_MAX];
static int g_ngroup;

sf_service *sf_group_service(const char *const *args)
{
    if (gf_redis == NULL && gf_start(NULL, NULL) != 0)
        return NULL;
    sf_service *svc = NULL;
    if (g_ngroup == SF_GROUP_MAX)
        fprintf(stderr, "svc_fixture: more than %d group services\n", SF_GROUP_MAX);
    else
        svc = sf_start(rf_url(gf_redis), args);
    if (svc == NULL) {
        sf_group_teardown(NULL);
        return NULL;
    }
    g_group[g_ngroup++] = svc;
    return svc;
}

int sf_group_teardown(void **state)
{
    int bad = sf_stop_all(g_group, g_ngroup) != 0;
    g_ngroup = 0;
    gf_group_teardown(state);
    return bad ? -1 : 0;
}
