/*
 * Throwaway ZooKeeper servers for tests (zk_fixture.h): a temp dir with one subdir per server
 * (zoo.cfg, data/myid, server.log), the JVM started through pr_spawn so it dies with the test,
 * readiness read from the "srvr" four-letter word over a plain socket.
 */
#define _GNU_SOURCE
#include "zk_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_registry.h"
#include "testutil.h"

enum { ZF_MAX = 3, ZF_START_TIMEOUT_MS = 60000, ZF_STOP_TIMEOUT_MS = 3000 };

#define ZF_DEFAULT_CP                                                                              \
    "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:"                            \
    "/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar:"                                 \
    "/usr/share/java/netty-handler.jar:/usr/share/java/netty-transport.jar:"                       \
    "/usr/share/java/netty-common.jar:/usr/share/java/netty-buffer.jar:"                           \
    "/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:"                          \
    "/usr/share/java/netty-transport-native-epoll.jar:"                                            \
    "/usr/share/java/netty-transport-native-unix-common.jar:/usr/share/java/metrics-core.jar:"     \
    "/usr/share/java/commons-cli.jar:/usr/share/java/snappy-java.jar"

typedef struct zf_server {
    zf_ensemble *z;
    int i;
    int slot;
    pid_t pid;
    int port, peer, elect;
    char dir[256];
    char host[64];
} zf_server;

struct zf_ensemble {
    int n;
    char dir[128];
    char hosts[ZF_MAX * 24];
    zf_server s[ZF_MAX];
};

static void zf_stop_obj(void *obj)
{
    zf_server *s = obj;
    zf_stop(s->z); /* the registry's exit handler: the whole ensemble goes */
}

static const pr_kind zf_kind = {NULL, zf_stop_obj};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int zf_spawn(zf_server *s)
{
    const char *java = getenv("ZF_JAVA");
    const char *cp = getenv("ZF_CLASSPATH");
    char cfg[300], log[300];
    snprintf(cfg, sizeof cfg, "%s/zoo.cfg", s->dir);
    snprintf(log, sizeof log, "%s/server.log", s->dir);
    const char *argv[] = {java && *java ? java : "java",
                          "-Xmx128m",
                          "-XX:+UseSerialGC",
                          "-XX:TieredStopAtLevel=1",
                          "-Dzookeeper.admin.enableServer=false",
                          "-cp",
                          cp && *cp ? cp : ZF_DEFAULT_CP,
                          "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                          cfg,
                          NULL};
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid_t pid = pr_spawn(argv, out, out);
    if (out >= 0)
        close(out);
    if (pid < 0)
        return -1;
    s->pid = pid;
    pr_set_pid(s->slot, pid);
    return 0;
}

/* Sends a four-letter word to 127.0.0.1:port and reads the answer into buf (1 s). -1 if none. */
static int zf_4lw(int port, const char *word, char *buf, size_t size)
{
    buf[0] = '\0';
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, word, strlen(word)) == (ssize_t)strlen(word)) {
        ssize_t r;
        while (got + 1 < size && (r = read(fd, buf + got, size - 1 - got)) > 0)
            got += (size_t)r;
    }
    buf[got] = '\0';
    close(fd);
    return got > 0 ? 0 : -1;
}

char *zf_mode(const zf_ensemble *z, int i, char *buf, size_t size)
{
    char out[2048];
    buf[0] = '\0';
    if (zf_4lw(z->s[i].port, "srvr", out, sizeof out) != 0)
        return buf;
    const char *m = strstr(out, "Mode: ");
    if (m) {
        m += 6;
        size_t n = strcspn(m, "\r\n");
        snprintf(buf, size, "%.*s", (int)n, m);
    }
    return buf;
}

int zf_leader(const zf_ensemble *z)
{
    char mode[32];
    for (int i = 0; i < z->n; i++) {
        zf_mode(z, i, mode, sizeof mode);
        if (!strcmp(mode, "leader") || !strcmp(mode, "standalone"))
            return i;
    }
    return -1;
}

static int zf_write_cfg(zf_ensemble *z, zf_server *s)
{
    char path[320], data[300];
    snprintf(data, sizeof data, "%s/data", s->dir);
    if (mkdir(s->dir, 0700) != 0 || mkdir(data, 0700) != 0)
        return -1;
    const char *tick = getenv("ZF_TICK_MS");
    snprintf(path, sizeof path, "%s/zoo.cfg", s->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "tickTime=%s\ninitLimit=20\nsyncLimit=10\ndataDir=%s\nclientPort=%d\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,stat,cons\nmaxClientCnxns=0\n"
            "preAllocSize=4096\nsnapCount=100000\n",
            tick && *tick ? tick : "200", data, s->port);
    if (z->n > 1)
        for (int k = 0; k < z->n; k++)
            fprintf(f, "server.%d=127.0.0.1:%d:%d\n", k + 1, z->s[k].peer, z->s[k].elect);
    fclose(f);
    snprintf(path, sizeof path, "%s/myid", data);
    f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "%d\n", s->i + 1);
    fclose(f);
    return 0;
}

static int zf_reaped(zf_server *s)
{
    int status;
    pid_t r = waitpid(s->pid, &status, WNOHANG);
    if (r == s->pid || (r < 0 && errno == ECHILD)) {
        s->pid = 0;
        pr_set_pid(s->slot, 0);
        return 1;
    }
    return 0;
}

static void zf_terminate(zf_server *s, int sig)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, sig);
    kill(s->pid, SIGCONT);
    int64_t deadline = tu_now_ms() + ZF_STOP_TIMEOUT_MS;
    while (!zf_reaped(s)) {
        if (tu_now_ms() >= deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            s->pid = 0;
            pr_set_pid(s->slot, 0);
            break;
        }
        tu_sleep_ms(5);
    }
}

static void zf_show_log(const zf_server *s)
{
    char path[300], line[512];
    snprintf(path, sizeof path, "%s/server.log", s->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "zk_fixture: %s:\n", path);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

zf_ensemble *zf_start(int n)
{
    if (n < 1 || n > ZF_MAX)
        return NULL;
    zf_ensemble *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    z->n = n;
    for (int i = 0; i < n; i++) {
        z->s[i].z = z;
        z->s[i].i = i;
        z->s[i].slot = -1;
    }
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 64)
        tmp = "/tmp";
    snprintf(z->dir, sizeof z->dir, "%s/lc-zk-XXXXXX", tmp);
    if (mkdtemp(z->dir) == NULL) {
        fprintf(stderr, "zk_fixture: mkdtemp %s: %s\n", z->dir, strerror(errno));
        z->dir[0] = '\0';
        zf_stop(z);
        return NULL;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        zf_server *s = &z->s[i];
        s->port = tu_free_port();
        s->peer = tu_free_port();
        s->elect = tu_free_port();
        if (s->port <= 0 || s->peer <= 0 || s->elect <= 0 || s->port == s->peer ||
            s->peer == s->elect || s->port == s->elect) {
            fprintf(stderr, "zk_fixture: no free ports\n");
            zf_stop(z);
            return NULL;
        }
        snprintf(s->dir, sizeof s->dir, "%s/n%d", z->dir, i + 1);
        snprintf(s->host, sizeof s->host, "127.0.0.1:%d", s->port);
        off +=
            (size_t)snprintf(z->hosts + off, sizeof z->hosts - off, "%s%s", i ? "," : "", s->host);
    }
    for (int i = 0; i < n; i++) {
        zf_server *s = &z->s[i];
        if (zf_write_cfg(z, s) != 0 || (s->slot = pr_add(&zf_kind, s)) < 0 || zf_spawn(s) != 0) {
            fprintf(stderr, "zk_fixture: cannot start server %d in %s\n", i + 1, s->dir);
            zf_stop(z);
            return NULL;
        }
    }
    int64_t deadline = tu_now_ms() + ZF_START_TIMEOUT_MS;
    for (int i = 0; i < n; i++) {
        char mode[32];
        while (!zf_mode(z, i, mode, sizeof mode)[0]) {
            if (zf_reaped(&z->s[i]) || tu_now_ms() >= deadline) {
                fprintf(stderr, "zk_fixture: server %d (port %d) does not serve\n", i + 1,
                        z->s[i].port);
                zf_show_log(&z->s[i]);
                zf_stop(z);
                return NULL;
            }
            tu_sleep_ms(50);
        }
    }
    return z;
}

void zf_stop(zf_ensemble *z)
{
    if (!z)
        return;
    for (int i = z->n - 1; i >= 0; i--) {
        zf_terminate(&z->s[i], SIGTERM);
        if (z->s[i].slot >= 0)
            pr_remove(z->s[i].slot);
        z->s[i].slot = -1;
    }
    if (z->dir[0])
        nftw(z->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(z);
}

const char *zf_hosts(const zf_ensemble *z)
{
    return z->hosts;
}

const char *zf_host(const zf_ensemble *z, int i)
{
    return z->s[i].host;
}

int zf_count(const zf_ensemble *z)
{
    return z->n;
}

pid_t zf_pid(const zf_ensemble *z, int i)
{
    return z->s[i].pid;
}

int zf_pause(zf_ensemble *z, int i)
{
    return z->s[i].pid > 0 ? kill(z->s[i].pid, SIGSTOP) : -1;
}

int zf_resume(zf_ensemble *z, int i)
{
    return z->s[i].pid > 0 ? kill(z->s[i].pid, SIGCONT) : -1;
}

int zf_kill(zf_ensemble *z, int i)
{
    if (z->s[i].pid <= 0)
        return -1;
    zf_terminate(&z->s[i], SIGKILL);
    return 0;
}

int zf_restart(zf_ensemble *z, int i)
{
    zf_terminate(&z->s[i], SIGTERM);
    return zf_spawn(&z->s[i]);
}
