/*
 * The MariaDB test server (mariadb_fixture.h).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "mariadb_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_registry.h"
#include "testutil.h"

#define MDB_START_TIMEOUT_MS 30000
#define MDB_STOP_TIMEOUT_MS 20000
#define MDB_PORT_ATTEMPTS 5

struct mdb_server {
    int slot;
    pid_t pid;
    int port;
    char dir[128];
    char datadir[160];
    char sock[160];
    char errlog[160];
    char url[256];
};

static const char *mdb_tool(const char *env, const char *name, char *buf, size_t cap)
{
    const char *v = getenv(env);
    if (v != NULL && *v != '\0')
        return v;
    static const char *const dirs[] = {"/usr/sbin", "/usr/bin", "/usr/local/sbin",
                                       "/usr/local/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(buf, cap, "%s/%s", dirs[i], name);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

int mdb_available(void)
{
    char a[256], b[256];
    return mdb_tool("MDB_MARIADBD", "mariadbd", a, sizeof a) != NULL &&
           mdb_tool("MDB_INSTALL_DB", "mariadb-install-db", b, sizeof b) != NULL;
}

static int mdb_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void mdb_remove_tree(const char *path)
{
    nftw(path, mdb_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void mdb_stop_obj(void *obj)
{
    mdb_stop(obj);
}

/* The registry kills the process on a fatal signal; the data dir cannot be removed from a
 * signal handler (a whole tree): the next mdb_start sweeps it (its owner pid is gone). */
static const pr_kind mdb_kind = {NULL, mdb_stop_obj};

static void mdb_sweep_stale(const char *tmp)
{
    DIR *d = opendir(tmp);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "svc-mariadb-", 12) != 0)
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
            mdb_remove_tree(path);
        }
    }
    closedir(d);
}

void mdb_show_log(const mdb_server *srv, int lines)
{
    FILE *f = fopen(srv->errlog, "r");
    if (f == NULL)
        return;
    char *ring[64] = {0};
    int n = 0;
    char line[1024];
    if (lines > 64)
        lines = 64;
    while (fgets(line, sizeof line, f) != NULL) {
        free(ring[n % lines]);
        ring[n % lines] = strdup(line);
        n++;
    }
    fclose(f);
    fprintf(stderr, "--- mariadbd error log (%s), last lines ---\n", srv->errlog);
    for (int i = n > lines ? n - lines : 0; i < n; i++)
        fputs(ring[i % lines] ? ring[i % lines] : "", stderr);
    for (int i = 0; i < 64; i++)
        free(ring[i]);
}

/* Runs argv to completion (output to the error log). 0 when it exited 0. */
static int mdb_run_tool(mdb_server *srv, const char *const *argv)
{
    int out = open(srv->errlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid_t pid = pr_spawn(argv, out, out);
    if (out >= 0)
        close(out);
    if (pid < 0)
        return -1;
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "mariadb_fixture: %s failed\n", argv[0]);
        return -1;
    }
    return 0;
}

static int mdb_spawn(mdb_server *srv)
{
    char tool[256], port[16], datadir[200], sock[200], errlog[200], pidf[200];
    const char *bin = mdb_tool("MDB_MARIADBD", "mariadbd", tool, sizeof tool);
    snprintf(port, sizeof port, "--port=%d", srv->port);
    snprintf(datadir, sizeof datadir, "--datadir=%s", srv->datadir);
    snprintf(sock, sizeof sock, "--socket=%s", srv->sock);
    snprintf(errlog, sizeof errlog, "--log-error=%s", srv->errlog);
    snprintf(pidf, sizeof pidf, "--pid-file=%s/mariadbd.pid", srv->dir);
    const char *argv[] = {bin,
                          "--no-defaults",
                          datadir,
                          "--skip-networking=0",
                          "--bind-address=127.0.0.1",
                          port,
                          sock,
                          errlog,
                          pidf,
                          "--innodb-buffer-pool-size=32M",
                          "--skip-name-resolve",
                          geteuid() == 0 ? "--user=root" : NULL,
                          NULL};
    pid_t pid = pr_spawn(argv, -1, -1);
    if (pid < 0)
        return -1;
    srv->pid = pid;
    pr_set_pid(srv->slot, pid);
    return 0;
}

static int mdb_reaped(mdb_server *srv)
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

static MYSQL *mdb_connect_as(const mdb_server *srv, const char *user, const char *password,
                             const char *db, int quiet)
{
    MYSQL *m = mysql_init(NULL);
    if (m == NULL)
        return NULL;
    unsigned int t = 5;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &t);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &t);
    if (mysql_real_connect(m, "127.0.0.1", user, password, db, (unsigned)srv->port, NULL, 0) ==
        NULL) {
        if (!quiet)
            fprintf(stderr, "mariadb_fixture: connect as %s: %s\n", user, mysql_error(m));
        mysql_close(m);
        return NULL;
    }
    return m;
}

/* Waits until our own mariadbd answers (its datadir is ours). 0, or -1. */
static int mdb_wait_ready(mdb_server *srv, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    while (tu_now_ms() < deadline) {
        if (mdb_reaped(srv))
            return -1;
        MYSQL *m = mdb_connect_as(srv, "root", "", NULL, 1);
        if (m != NULL) {
            int ours = 0;
            if (mysql_query(m, "SELECT @@datadir") == 0) {
                MYSQL_RES *res = mysql_store_result(m);
                MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
                ours = row && row[0] && strncmp(row[0], srv->datadir, strlen(srv->datadir)) == 0;
                mysql_free_result(res);
            }
            mysql_close(m);
            if (ours)
                return 0;
            fprintf(stderr, "mariadb_fixture: port %d answered by another server\n", srv->port);
            return -1;
        }
        tu_sleep_ms(50);
    }
    fprintf(stderr, "mariadb_fixture: no answer on port %d within %d ms\n", srv->port, timeout_ms);
    return -1;
}

static void mdb_terminate(mdb_server *srv, int sig)
{
    if (srv->pid <= 0)
        return;
    kill(srv->pid, sig);
    kill(srv->pid, SIGCONT);
    int64_t deadline = tu_now_ms() + MDB_STOP_TIMEOUT_MS;
    while (!mdb_reaped(srv)) {
        if (tu_now_ms() >= deadline) {
            kill(srv->pid, SIGKILL);
            waitpid(srv->pid, NULL, 0);
            srv->pid = 0;
            pr_set_pid(srv->slot, 0);
            break;
        }
        tu_sleep_ms(10);
    }
}

mdb_server *mdb_start(void)
{
    static int swept;
    char tool[256];
    if (!mdb_available()) {
        fprintf(stderr, "mariadb_fixture: mariadbd / mariadb-install-db not found\n");
        return NULL;
    }
    mdb_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return NULL;
    if ((srv->slot = pr_add(&mdb_kind, srv)) < 0) {
        free(srv);
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 64)
        tmp = "/tmp";
    if (!swept) {
        swept = 1;
        mdb_sweep_stale(tmp);
    }
    snprintf(srv->dir, sizeof srv->dir, "%s/svc-mariadb-XXXXXX", tmp);
    if (mkdtemp(srv->dir) == NULL) {
        fprintf(stderr, "mariadb_fixture: mkdtemp: %s\n", strerror(errno));
        srv->dir[0] = '\0';
        mdb_stop(srv);
        return NULL;
    }
    snprintf(srv->datadir, sizeof srv->datadir, "%s/data", srv->dir);
    snprintf(srv->sock, sizeof srv->sock, "%s/sock", srv->dir);
    snprintf(srv->errlog, sizeof srv->errlog, "%s/error.log", srv->dir);
    char owner[200];
    snprintf(owner, sizeof owner, "%s/owner", srv->dir);
    FILE *f = fopen(owner, "w");
    if (f != NULL) {
        fprintf(f, "%ld\n", (long)getpid());
        fclose(f);
    }
    char datadir[200];
    snprintf(datadir, sizeof datadir, "--datadir=%s", srv->datadir);
    const char *install[] = {mdb_tool("MDB_INSTALL_DB", "mariadb-install-db", tool, sizeof tool),
                             "--no-defaults",
                             datadir,
                             "--auth-root-authentication-method=normal",
                             "--skip-test-db",
                             geteuid() == 0 ? "--user=root" : NULL,
                             NULL};
    if (mdb_run_tool(srv, install) != 0) {
        mdb_show_log(srv, 30);
        mdb_stop(srv);
        return NULL;
    }
    for (int attempt = 0; attempt < MDB_PORT_ATTEMPTS; attempt++) {
        srv->port = tu_free_port();
        snprintf(srv->url, sizeof srv->url,
                 "mysql://" MDB_USER ":" MDB_PASSWORD "@127.0.0.1:%d/" MDB_DATABASE, srv->port);
        if (srv->port <= 0 || mdb_spawn(srv) != 0)
            break;
        if (mdb_wait_ready(srv, MDB_START_TIMEOUT_MS) == 0) {
            /* The sink's database and user, with the privileges docs/deployment.md lists. */
            if (mdb_exec(srv, "CREATE DATABASE " MDB_DATABASE) != 0 ||
                mdb_exec(srv, "CREATE USER '" MDB_USER "'@'127.0.0.1' IDENTIFIED BY '" MDB_PASSWORD
                              "'") != 0 ||
                mdb_exec(srv, "GRANT SELECT, INSERT, UPDATE, CREATE ON " MDB_DATABASE
                              ".* TO '" MDB_USER "'@'127.0.0.1'") != 0)
                break;
            return srv;
        }
        mdb_terminate(srv, SIGKILL);
    }
    mdb_show_log(srv, 30);
    fprintf(stderr, "mariadb_fixture: could not start mariadbd\n");
    mdb_stop(srv);
    return NULL;
}

void mdb_stop(mdb_server *srv)
{
    if (srv == NULL)
        return;
    mdb_terminate(srv, SIGTERM);
    if (srv->dir[0] != '\0')
        mdb_remove_tree(srv->dir);
    pr_remove(srv->slot);
    free(srv);
}

int mdb_halt(mdb_server *srv, int sig)
{
    if (srv == NULL || srv->pid <= 0)
        return -1;
    mdb_terminate(srv, sig);
    return 0;
}

int mdb_restart(mdb_server *srv)
{
    if (srv == NULL)
        return -1;
    mdb_terminate(srv, SIGTERM);
    for (int attempt = 0; attempt < 20; attempt++) {
        if (mdb_spawn(srv) != 0)
            return -1;
        if (mdb_wait_ready(srv, MDB_START_TIMEOUT_MS) == 0)
            return 0;
        mdb_terminate(srv, SIGKILL);
        tu_sleep_ms(250); /* the port may still be held by the killed server's sockets */
    }
    mdb_show_log(srv, 30);
    return -1;
}

int mdb_port(const mdb_server *srv)
{
    return srv->port;
}

pid_t mdb_pid(const mdb_server *srv)
{
    return srv->pid;
}

const char *mdb_url(const mdb_server *srv)
{
    return srv->url;
}

MYSQL *mdb_connect(const mdb_server *srv)
{
    return mdb_connect_as(srv, "root", "", MDB_DATABASE, 0);
}

int mdb_exec(const mdb_server *srv, const char *sql)
{
    MYSQL *m = mdb_connect_as(srv, "root", "", NULL, 0);
    if (m == NULL)
        return -1;
    int rc = 0;
    if (mysql_query(m, sql) != 0) {
        fprintf(stderr, "mariadb_fixture: %s: %s\n", sql, mysql_error(m));
        rc = -1;
    }
    mysql_close(m);
    return rc;
}

long long mdb_scalar(const mdb_server *srv, const char *sql)
{
    MYSQL *m = mdb_connect(srv);
    if (m == NULL)
        return MDB_NO_VALUE;
    long long v = MDB_NO_VALUE;
    if (mysql_query(m, sql) == 0) {
        MYSQL_RES *res = mysql_store_result(m);
        MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
        if (row != NULL && row[0] != NULL)
            v = strtoll(row[0], NULL, 10);
        mysql_free_result(res);
    } else {
        fprintf(stderr, "mariadb_fixture: %s: %s\n", sql, mysql_error(m));
    }
    mysql_close(m);
    return v;
}
