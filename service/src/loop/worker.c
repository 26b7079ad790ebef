/*
 * worker — the event loops; see worker.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "worker.h"

/* A function posted to a loop from another thread (worker_post). */
struct worker_post {
    void (*fn)(void *);
    void *arg;
    struct worker_post *next;
};

static _Thread_local struct worker *current_worker;

struct worker *worker_current(void)
{
    return current_worker;
}

static void on_mail(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct worker *w = arg;
    uint64_t n;
    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        log_msg(CONFIG_LOG_WARN, "loop", "eventfd read: %s", strerror(errno));
    pthread_mutex_lock(&w->mu);
    struct worker_post *p = w->posts;
    w->posts = w->posts_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    while (p) {
        struct worker_post *next = p->next;
        p->fn(p->arg);
        free(p);
        p = next;
    }
}

void worker_post(struct worker *w, void (*fn)(void *), void *arg)
{
    struct worker_post *p = malloc(sizeof(*p));
    while (!p) {
        struct timespec ts = {0, 1000000L}; /* never on a loop in practice: out of memory */
        nanosleep(&ts, NULL);
        p = malloc(sizeof(*p));
    }
    p->fn = fn;
    p->arg = arg;
    p->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->posts_tail)
        w->posts_tail->next = p;
    else
        w->posts = p;
    w->posts_tail = p;
    pthread_mutex_unlock(&w->mu);
    uint64_t one = 1;
    if (write(w->mailfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_msg(CONFIG_LOG_WARN, "loop", "eventfd write: %s", strerror(errno));
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    current_worker = w;
    lc_async_mark_loop_thread(1); /* debug builds: a blocking lockcore call here asserts */
    event_base_dispatch(w->env.base);
    lc_async_mark_loop_thread(0);
    current_worker = NULL;
    return NULL;
}

int worker_start(struct worker *w)
{
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return -1;
    w->started = true;
    return 0;
}

void worker_join(struct worker *w)
{
    if (w->started)
        pthread_join(w->thread, NULL);
    w->started = false;
}

static void on_quiesce(void *arg)
{
    struct worker *w = arg;
    w->front.quiesce(w->front.data);
}

static void on_cut(void *arg)
{
    struct worker *w = arg;
    w->stopping = true;
    w->front.cut(w->front.data);
    w->front.flush(w->front.data);
}

/* The loop's Redlock node clients (--lock-redis), MySQL lock client (--lock-mysql) or ZooKeeper
 * session (--lock-zookeeper, its timeout the lock lease: how long a dead holder keeps a
 * segment): made with the data client, freed after it. */
static int lock_nodes_new(struct worker *w, const struct config *cfg, const lc_client_opts *lo,
                          char *err, size_t errlen)
{
    struct areq_env *env = &w->env;
    if (cfg->lock_zookeeper[0] && !env->zk) {
        lc_zk_opts zo;
        lc_zk_opts_init(&zo);
        zo.session_timeout_ms = cfg->lock_lease_ms;
        zo.op_timeout_ms = lo->command_timeout_ms;
        if (lc_zk_client_new(env->base, cfg->lock_zookeeper, &zo, &env->zk) != LC_OK) {
            snprintf(err, errlen, "ZooKeeper client of loop %d: %s", env->id, lc_errmsg());
            return -1;
        }
    }
    for (; env->nlocknodes < cfg->lock_redis_n; env->nlocknodes++) {
        char url[CONFIG_REDIS_URL_MAX];
        if (config_lock_redis_url(cfg, env->nlocknodes, url, sizeof(url)) != 0 ||
            lc_async_client_new(env->base, url, lo, &env->locknodes[env->nlocknodes]) != LC_OK) {
            snprintf(err, errlen, "lock node %d of loop %d: %s", env->nlocknodes + 1, env->id,
                     lc_errmsg());
            return -1;
        }
    }
    if (cfg->lock_mysql[0]) {
        lc_mysql_opts mo;
        lc_mysql_opts_init(&mo);
        mo.connect_timeout_ms = lo->connect_timeout_ms;
        mo.command_timeout_ms = lo->command_timeout_ms;
        /* GET_LOCK has no lease: the server ends a silent session (a paused or cut-off holder)
         * after --lock-lease-ms, rounded up to seconds; a live holder checks every third of it */
        mo.session_timeout_s = (cfg->lock_lease_ms + 999) / 1000;
        mo.check_ms = cfg->lock_lease_ms / 3 > 0 ? cfg->lock_lease_ms / 3 : 1;
        if (lc_mysql_client_new(env->base, cfg->lock_mysql, &mo, &env->lockmysql) != LC_OK) {
            snprintf(err, errlen, "mysql lock client of loop %d: %s", env->id, lc_errmsg());
            return -1;
        }
    }
    return 0;
}

/* What the hooks keep on the loop, freed (once: their free leaves nothing to free again). */
static void hooks_free(struct worker *w)
{
    if (w->hooks && w->hooks->free)
        w->hooks->free(&w->env);
}

static void lock_nodes_free(struct worker *w)
{
    struct areq_env *env = &w->env;
    lc_mysql_client_free(env->lockmysql); /* its live locks become orphans (LC_ESTATE) */
    env->lockmysql = NULL;
    if (w->hooks && w->hooks->close)
        w->hooks->close(env); /* no Redlock may outlive its node clients */
    for (int i = 0; i < env->nlocknodes; i++)
        lc_async_client_free(env->locknodes[i]);
    env->nlocknodes = 0;
    lc_zk_client_free(env->zk); /* closes the session: its nodes go with it */
    env->zk = NULL;
}

/* On the loop: the end. The Redis client goes first (the operations it cuts short end their
 * handlers, whose requests were all answered), then the front (nothing waits now). */
static void on_end(void *arg)
{
    struct worker *w = arg;
    if (w->on_end)
        w->on_end(w->on_end_arg);
    w->front.flush(w->front.data);
    /* Handlers waiting on a timer end now; those waiting on Redis when the client goes. */
    areq_cancel_all(&w->env);
    lc_async_client_free(w->env.lc);
    w->env.lc = NULL;
    lock_nodes_free(w);
    w->front.flush(w->front.data); /* handlers the free ended */
    hooks_free(w);                 /* every order has ended: nobody is queued */
    w->front.close(w->front.data);
    event_base_loopbreak(w->env.base);
}

void worker_quiesce(struct worker *w)
{
    worker_post(w, on_quiesce, w);
}

void worker_cut(struct worker *w)
{
    worker_post(w, on_cut, w);
}

void worker_end(struct worker *w)
{
    worker_post(w, on_end, w);
}

/* A loop's event_base with precise timers (timerfd with epoll): --hold-ms and the lock waits
 * are a few milliseconds, and epoll_wait's millisecond timeout, rounded up, made a 2 ms hold
 * last about 4. */
static struct event_base *loop_base_new(void)
{
    struct event_config *ec = event_config_new();
    if (!ec)
        return NULL;
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *b = event_base_new_with_config(ec);
    event_config_free(ec);
    return b;
}

int worker_init(struct worker *w, int id, int nloops, const struct config *cfg,
                const lc_client_opts *lo, const struct worker_hooks *hooks, char *err,
                size_t errlen)
{
    w->hooks = hooks;
    areq_log_reader();
    w->env.id = id;
    w->env.nloops = nloops;
    w->mailfd = -1;
    pthread_mutex_init(&w->mu, NULL);
    w->env.base = loop_base_new();
    w->mailfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!w->env.base || w->mailfd < 0) {
        snprintf(err, errlen, "event loop %d: %s", id, strerror(errno));
        return -1;
    }
    w->mail = event_new(w->env.base, w->mailfd, EV_READ | EV_PERSIST, on_mail, w);
    if ((hooks && hooks->init && hooks->init(&w->env) != 0) || !w->mail ||
        event_add(w->mail, NULL)) {
        snprintf(err, errlen, "event loop %d: out of memory", id);
        return -1;
    }
    if (lc_async_client_new(w->env.base, cfg->redis_url, lo, &w->env.lc) != LC_OK) {
        snprintf(err, errlen, "redis client of loop %d: %s", id, lc_errmsg());
        return -1;
    }
    return lock_nodes_new(w, cfg, lo, err, errlen);
}

void worker_free(struct worker *w)
{
    if (w->mail)
        event_free(w->mail);
    w->mail = NULL;
    if (w->env.lc)
        lc_async_client_free(w->env.lc);
    w->env.lc = NULL;
    lock_nodes_free(w);
    hooks_free(w);
    if (w->env.base)
        event_base_free(w->env.base);
    w->env.base = NULL;
    if (w->mailfd >= 0)
        close(w->mailfd);
    w->mailfd = -1;
    struct worker_post *p = w->posts;
    while (p) {
        struct worker_post *next = p->next;
        free(p);
        p = next;
    }
    w->posts = w->posts_tail = NULL;
    pthread_mutex_destroy(&w->mu);
}
