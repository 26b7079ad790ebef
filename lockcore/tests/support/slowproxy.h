/*
 * An in-process TCP proxy for tests that need a Redis reply to get lost: it sits between a
 * client and a redis-server on 127.0.0.1 and delays every chunk of bytes by a one-way delay that
 * the test can change at any moment (sp_set_delay_ms), so a command reaches Redis and runs there
 * after the client has given up on it. The same idea as loadtest/delayproxy.c, in a thread of
 * the test process so the delay can be switched between calls of one test.
 *
 * Bytes keep their order per direction; the delay applies to bytes read from then on (earlier
 * ones keep their due time, later ones never overtake them). An EOF travels like data: the
 * client's becomes a shutdown(SHUT_WR) towards Redis, Redis' closes both sockets. One thread,
 * poll(), at most SP_MAX_CONNS connections at once; writes are blocking (small replies on the
 * loopback). Not for throughput.
 */
#ifndef LC_TESTS_SLOWPROXY_H
#define LC_TESTS_SLOWPROXY_H

#define SP_MAX_CONNS 64

typedef struct sp_proxy sp_proxy;

/* Starts a proxy on a free 127.0.0.1 port forwarding to 127.0.0.1:upstream_port, with no delay.
 * NULL on failure (reason on stderr). Stop with sp_stop. */
sp_proxy *sp_start(int upstream_port);

/* Stops the thread, closes every connection and frees the proxy. NULL-safe. */
void sp_stop(sp_proxy *p);

/* Sets the one-way delay (each direction) for bytes read from now on. */
void sp_set_delay_ms(sp_proxy *p, int ms);

/* "redis://127.0.0.1:PORT" of the proxy (borrowed, valid until sp_stop). */
const char *sp_url(const sp_proxy *p);

/* Connections accepted so far. */
int sp_accepted(sp_proxy *p);

/* Chunks read and not yet delivered (0: nothing is on its way through the proxy). */
int sp_pending(sp_proxy *p);

#endif /* LC_TESTS_SLOWPROXY_H */
