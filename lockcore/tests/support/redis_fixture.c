/*
 * A throwaway redis-server for tests (see redis_fixture.h): fork/exec on a free port in a
 * mkdtemp dir, wait for PING, and make sure it dies with the test process whatever way that
 * process ends (stop, exit, abort, fatal signal, SIGKILL).
 */
#include "redis_fixture.h"

#include "proc_registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define RF_MAX_ARGS 64
#define RF_START_TIMEOUT_MS 5000
#define RF_STOP_TIMEOUT_MS 3000
#define RF_PORT_ATTEMPTS 8

struct rf_server {
    pid_t pid; /* 0 when not running */
    int port;
    int slot; /* in the process registry (proc_registry.h) */
    char dir[256];
    char url[64];
    char logpath[300];   /* redis' own --logfile */
    char outpath[300];   /* its stdout/stderr (early config errors land here) */
    char rdbpath[300];   /* dump.rdb, for the signal-time cleanup */
    char ownerpath[300]; /* "owner": pid of the test process, for rf_sweep_stale */
    char *password;      /* --requirepass value or NULL */
    char *unixsocket;    /* --unixsocket value or NULL */
    int nextra;
    char *extra[RF_MAX_ARGS]; /* extra args with {dir} substituted */
};

/* From the fatal-signal handler (proc_registry.h), after the process was killed: removes the
 * files a default server leaves in its dir, then the dir. Async-signal-safe (unlink, rmdir). */
static void rf_remove_files(void *obj)
{
    rf_server *srv = obj;
    if (srv->dir[0] == '\0')
        return;
    unlink(srv->logpath);
    unlink(srv->outpath);
    unlink(srv->rdbpath);
    unlink(srv->ownerpath);
    if (srv->unixsocket != NULL)
        unlink(srv->unixsocket);
    rmdir(srv->dir);
}

static void rf_stop_obj(void *obj)
{
    rf_stop(obj);
}

static const pr_kind rf_kind = {rf_remove_files, rf_stop_obj};

/* Removes path and, for a directory, everything below it. Best effort. */
static void rf_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d != NULL) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                char child[1024];
                snprintf(child, sizeof child, "%s/%s", path, e->d_name);
                rf_remove_tree(child);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Copies s replacing every "{dir}" with dir. Returns a new string or NULL. */
static char *rf_subst_dir(const char *s, const char *dir)
{
    static const char tag[] = "{dir}";
    size_t taglen = sizeof tag - 1, dirlen = strlen(dir), n = 0;
    for (const char *p = strstr(s, tag); p != NULL; p = strstr(p + taglen, tag))
        n++;
    char *out = malloc(strlen(s) + n * dirlen + 1);
    if (out == NULL)
        return NULL;
    char *w = out;
    for (const char *p = s;;) {
        const char *hit = strstr(p, tag);
        if (hit == NULL) {
            strcpy(w, p);
            break;
        }
        memcpy(w, p, (size_t)(hit - p));
        w += hit - p;
        memcpy(w, dir, dirlen);
        w += dirlen;
        p = hit + taglen;
    }
    return out;
}

/* Copies the server's stdout and log to stderr (after a failed start). */
static void rf_show_log(const rf_server *srv)
{
    const char *paths[] = {srv->outpath, srv->logpath};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "r");
        if (f == NULL)
            continue;
        char line[512];
        fprintf(stderr, "---- %s\n", paths[i]);
        while (fgets(line, sizeof line, f) != NULL)
            fputs(line, stderr);
        fclose(f);
    }
}

/* Connects (1 s) to 127.0.0.1:port with a 5 s command timeout and AUTHs when password is
 * set. NULL on failure, with the reason on stderr unless quiet. */
static redisContext *rf_connect_port(int port, const char *password, int quiet)
{
    struct timeval ctv = {1, 0}, ctmo = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, ctv);
    if (c == NULL || c->err) {
        if (!quiet)
            fprintf(stderr, "redis_fixture: connect to port %d: %s\n", port,
                    c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, ctmo);
    if (password != NULL) {
        redisReply *r = redisCommand(c, "AUTH %s", password);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (!ok && !quiet)
            fprintf(stderr, "redis_fixture: AUTH on port %d failed: %s\n", port,
                    r ? r->str : c->errstr);
        freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* The process_id line of INFO server, or -1. */
static long rf_server_pid(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO server");
    long pid = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "process_id:");
        if (p != NULL)
            pid = strtol(p + strlen("process_id:"), NULL, 10);
    }
    freeReplyObject(r);
    return pid;
}

/* Forks and execs redis-server on srv->port. Sets srv->pid. Returns 0 or -1. */
static int rf_spawn(rf_server *srv)
{
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    const char *bin = getenv("RF_REDIS_SERVER");
    if (bin == NULL || *bin == '\0')
        bin = "redis-server";

    const char *argv[RF_MAX_ARGS + 24];
    int argc = 0;
    argv[argc++] = bin;
    argv[argc++] = "--port";
    argv[argc++] = port;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--dir";
    argv[argc++] = srv->dir;
    argv[argc++] = "--save";
    argv[argc++] = "";
    argv[argc++] = "--appendonly";
    argv[argc++] = "no";
    argv[argc++] = "--daemonize";
    argv[argc++] = "no";
    /* A replica's full sync starts at once: Redis 7 waits repl-diskless-sync-delay (5 s) for
     * more replicas to share the transfer, which every cluster start, and every old master back
     * as a replica after a failover, spent idle. */
    argv[argc++] = "--repl-diskless-sync-delay";
    argv[argc++] = "0";
    argv[argc++] = "--logfile";
    argv[argc++] = srv->logpath;
    for (int i = 0; i < srv->nextra; i++)
        argv[argc++] = srv->extra[i];
    argv[argc] = NULL;

    int out = open(srv->outpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid_t pid = pr_spawn(argv, out, out);
    if (out >= 0)
        close(out);
    if (pid < 0)
        return -1;
    srv->pid = pid;
    pr_set_pid(srv->slot, pid);
    return 0;
}

/* Reaps srv's process if it exited. Returns 1 when it is gone. */
static int rf_reaped(rf_server *srv)
{
    int status;
    pid_t r = waitpid(srv->pid, &status, WNOHANG);
    if (r == srv->pid || (r < 0 && errno == ECHILD)) {
        srv->pid = 0;
        pr_set_pid(srv->slot, 0);
        return 1;
    }
    return 0;
}

/* Waits until srv's own process answers PING. Returns 0, or -1 if it died or timed out. */
static int rf_wait_ready(rf_server *srv, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    while (tu_now_ms() < deadline) {
        if (rf_reaped(srv))
            return -1;
        redisContext *c = rf_connect_port(srv->port, srv->password, 1);
        if (c != NULL) {
            redisReply *r = redisCommand(c, "PING");
            int pong = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
            freeReplyObject(r);
            long pid = pong ? rf_server_pid(c) : -1;
            redisFree(c);
            if (pong && pid == (long)srv->pid)
                return 0;
            if (pong) {
                /* Somebody else's server took the port before ours could bind it. */
                fprintf(stderr, "redis_fixture: port %d answered by pid %ld, not ours\n", srv->port,
                        pid);
                return -1;
            }
        }
        tu_sleep_ms(10);
    }
    fprintf(stderr, "redis_fixture: no PING answer on port %d within %d ms\n", srv->port,
            timeout_ms);
    return -1;
}

/* Signals the process and waits for it; SIGKILL after the stop timeout. */
static void rf_terminate(rf_server *srv, int sig)
{
    if (srv->pid <= 0)
        return;
    kill(srv->pid, sig);
    kill(srv->pid, SIGCONT); /* a paused server could not act on SIGTERM */
    int64_t deadline = tu_now_ms() + RF_STOP_TIMEOUT_MS;
    while (!rf_reaped(srv)) {
        if (tu_now_ms() >= deadline) {
            kill(srv->pid, SIGKILL);
            waitpid(srv->pid, NULL, 0);
            srv->pid = 0;
            pr_set_pid(srv->slot, 0);
            break;
        }
        tu_sleep_ms(5);
    }
}

/* Remembers the value following flag in the extra args, if any. */
static char *rf_find_arg(rf_server *srv, const char *flag)
{
    char *found = NULL;
    for (int i = 0; i + 1 < srv->nextra; i++) {
        if (strcmp(srv->extra[i], flag) == 0)
            found = srv->extra[i + 1];
    }
    return found;
}

/* Removes the temp dirs of test processes that are gone (killed by SIGKILL, or by a sanitizer
 * that exits without running atexit): their servers died with them (PR_SET_PDEATHSIG). */
static void rf_sweep_stale(const char *tmp)
{
    DIR *d = opendir(tmp);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "lc-redis-", 9) != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s/owner", tmp, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        long pid = 0;
        int ok = fscanf(f, "%ld", &pid) == 1 && pid > 0;
        fclose(f);
        if (ok && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
            rf_remove_tree(path);
        }
    }
    closedir(d);
}

rf_server *rf_start(const char *const *extra_args)
{
    static int swept;
    rf_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return NULL;
    if ((srv->slot = pr_add(&rf_kind, srv)) < 0) {
        free(srv);
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 64)
        tmp = "/tmp";
    if (!swept) {
        swept = 1;
        rf_sweep_stale(tmp);
    }
    snprintf(srv->dir, sizeof srv->dir, "%s/lc-redis-XXXXXX", tmp);
    if (mkdtemp(srv->dir) == NULL) {
        fprintf(stderr, "redis_fixture: mkdtemp %s: %s\n", srv->dir, strerror(errno));
        srv->dir[0] = '\0';
        rf_stop(srv);
        return NULL;
    }
    snprintf(srv->logpath, sizeof srv->logpath, "%s/redis.log", srv->dir);
    snprintf(srv->outpath, sizeof srv->outpath, "%s/stdout.log", srv->dir);
    snprintf(srv->rdbpath, sizeof srv->rdbpath, "%s/dump.rdb", srv->dir);
    snprintf(srv->ownerpath, sizeof srv->ownerpath, "%s/owner", srv->dir);
    FILE *owner = fopen(srv->ownerpath, "w");
    if (owner != NULL) {
        fprintf(owner, "%ld\n", (long)getpid());
        fclose(owner);
    }

    for (int i = 0; extra_args != NULL && extra_args[i] != NULL; i++) {
        if (i >= RF_MAX_ARGS) {
            fprintf(stderr, "redis_fixture: more than %d extra args\n", RF_MAX_ARGS);
            rf_stop(srv);
            return NULL;
        }
        srv->extra[i] = rf_subst_dir(extra_args[i], srv->dir);
        if (srv->extra[i] == NULL) {
            rf_stop(srv);
            return NULL;
        }
        srv->nextra = i + 1;
    }
    srv->password = rf_find_arg(srv, "--requirepass");
    srv->unixsocket = rf_find_arg(srv, "--unixsocket");

    for (int attempt = 0; attempt < RF_PORT_ATTEMPTS; attempt++) {
        srv->port = tu_free_port();
        if (srv->port <= 0) {
            fprintf(stderr, "redis_fixture: no free port: %s\n", strerror(errno));
            break;
        }
        snprintf(srv->url, sizeof srv->url, "redis://127.0.0.1:%d", srv->port);
        if (rf_spawn(srv) != 0)
            break;
        if (rf_wait_ready(srv, RF_START_TIMEOUT_MS) == 0)
            return srv;
        rf_terminate(srv, SIGKILL);
        if (attempt == RF_PORT_ATTEMPTS - 1)
            rf_show_log(srv);
        /* Start each attempt with clean logs so a final failure shows only its own. */
        unlink(srv->logpath);
        unlink(srv->outpath);
    }
    fprintf(stderr, "redis_fixture: could not start redis-server\n");
    rf_stop(srv);
    return NULL;
}

void rf_stop(rf_server *srv)
{
    if (srv == NULL)
        return;
    rf_terminate(srv, SIGTERM);
    if (srv->dir[0] != '\0')
        rf_remove_tree(srv->dir);
    for (int i = 0; i < srv->nextra; i++)
        free(srv->extra[i]);
    pr_remove(srv->slot);
    free(srv);
}

int rf_halt(rf_server *srv, int sig)
{
    if (srv == NULL || srv->pid <= 0)
        return -1;
    rf_terminate(srv, sig);
    return 0;
}

int rf_restart(rf_server *srv)
{
    if (srv == NULL)
        return -1;
    rf_terminate(srv, SIGTERM);
    /* The port is fixed now (clients know it): wait out a squatter for a while. */
    for (int attempt = 0; attempt < 20; attempt++) {
        if (rf_spawn(srv) != 0)
            return -1;
        if (rf_wait_ready(srv, RF_START_TIMEOUT_MS) == 0)
            return 0;
        rf_terminate(srv, SIGKILL);
        tu_sleep_ms(100);
    }
    rf_show_log(srv);
    return -1;
}

int rf_pause(rf_server *srv)
{
    if (srv == NULL || srv->pid <= 0)
        return -1;
    return kill(srv->pid, SIGSTOP);
}

int rf_resume(rf_server *srv)
{
    if (srv == NULL || srv->pid <= 0)
        return -1;
    return kill(srv->pid, SIGCONT);
}

int rf_port(const rf_server *srv)
{
    return srv->port;
}

pid_t rf_pid(const rf_server *srv)
{
    return srv->pid;
}

const char *rf_url(const rf_server *srv)
{
    return srv->url;
}

const char *rf_dir(const rf_server *srv)
{
    return srv->dir;
}

const char *rf_unixsocket(const rf_server *srv)
{
    return srv->unixsocket;
}

const char *rf_password(const rf_server *srv)
{
    return srv->password;
}

redisContext *rf_connect(const rf_server *srv)
{
    return rf_connect_port(srv->port, srv->password, 0);
}

/* rf_command with a va_list. */
static redisReply *rf_vcommand(const rf_server *srv, const char *fmt, va_list ap)
{
    redisContext *c = rf_connect(srv);
    if (c == NULL)
        return NULL;
    redisReply *r = redisvCommand(c, fmt, ap);
    if (r == NULL)
        fprintf(stderr, "redis_fixture: command '%s' failed: %s\n", fmt, c->errstr);
    redisFree(c);
    return r;
}

redisReply *rf_command(const rf_server *srv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rf_vcommand(srv, fmt, ap);
    va_end(ap);
    return r;
}

int rf_flushall(const rf_server *srv)
{
    redisReply *r = rf_command(srv, "FLUSHALL");
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    return ok ? 0 : -1;
}

long long rf_integer(const rf_server *srv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rf_vcommand(srv, fmt, ap);
    va_end(ap);
    long long v = RF_NOT_INTEGER;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r != NULL && r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "redis_fixture: '%s': %s\n", fmt, r->str);
    freeReplyObject(r);
    return v;
}

int rf_string(const rf_server *srv, char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rf_vcommand(srv, fmt, ap);
    va_end(ap);
    int ret = -1;
    if (r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)) {
        if (size > 0) {
            size_t n = r->len < size - 1 ? r->len : size - 1;
            memcpy(buf, r->str, n);
            buf[n] = '\0';
        }
        ret = 1;
    } else if (r != NULL && r->type == REDIS_REPLY_NIL) {
        ret = 0;
    } else if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redis_fixture: '%s': %s\n", fmt, r->str);
    }
    freeReplyObject(r);
    return ret;
}
