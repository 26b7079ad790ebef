/*
 * lockcore's own libevent adapter for hiredis async contexts (instead of Debian hiredis
 * 0.14.1's hiredis/adapters/libevent.h, which predates fixes for freeing a context from inside its
 * callbacks). Two differences: every read/write event is bracketed by lc_async_enter/leave, so
 * a client freed from inside a callback is freed only once hiredis has returned; and the
 * adapter keeps no pointer into the context after a handler returns (hiredis may have freed the
 * context, and this adapter with it, during the call).
 *
 * Ownership: the adapter state is made by lc_ev_attach and freed by hiredis through the
 * cleanup hook when the context is freed.
 */
#include <stdlib.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "async_internal.h"

typedef struct lc_ev {
    redisAsyncContext *ac;
    lc_async_client *client;
    struct event *rev, *wev;
} lc_ev;

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_ev *e = arg;
    lc_async_client *client = e->client; /* e may be gone after the call */
    lc_async_enter(client);
    redisAsyncHandleRead(e->ac);
    lc_async_leave(client);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_ev *e = arg;
    lc_async_client *client = e->client;
    lc_async_enter(client);
    redisAsyncHandleWrite(e->ac);
    lc_async_leave(client);
}

static void add_read(void *arg)
{
    lc_ev *e = arg;
    event_add(e->rev, NULL);
}

static void del_read(void *arg)
{
    lc_ev *e = arg;
    event_del(e->rev);
}

static void add_write(void *arg)
{
    lc_ev *e = arg;
    event_add(e->wev, NULL);
}

static void del_write(void *arg)
{
    lc_ev *e = arg;
    event_del(e->wev);
}

static void cleanup(void *arg)
{
    lc_ev *e = arg;
    event_free(e->rev);
    event_free(e->wev);
    free(e);
}

int lc_ev_attach(redisAsyncContext *ac, struct event_base *base, lc_async_client *client)
{
    if (ac->ev.data)
        return -1;
    lc_ev *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    e->ac = ac;
    e->client = client;
    e->rev = event_new(base, ac->c.fd, EV_READ, on_readable, e);
    e->wev = event_new(base, ac->c.fd, EV_WRITE, on_writable, e);
    if (!e->rev || !e->wev) {
        if (e->rev)
            event_free(e->rev);
        if (e->wev)
            event_free(e->wev);
        free(e);
        return -1;
    }
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    ac->ev.data = e;
    /* hiredis asks for writability itself once commands are queued; the connect completes on
     * the first write event. */
    event_add(e->rev, NULL);
    event_add(e->wev, NULL);
    return 0;
}
