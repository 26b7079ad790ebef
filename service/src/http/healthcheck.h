/*
 * healthcheck — `inventoryd --healthcheck`: the container HEALTHCHECK without curl in the image.
 * Asks GET /healthz of the server the configuration describes (its port, and its bind address,
 * or loopback when it binds every address) and turns the answer into an exit status.
 */
#ifndef INVENTORY_HEALTHCHECK_H
#define INVENTORY_HEALTHCHECK_H

#include "config.h"

/* Connects to cfg->bind (127.0.0.1 for 0.0.0.0, ::1 for ::) port cfg->port, sends
 * GET /healthz and waits at most timeout_ms for each step. Returns 0 when the answer is HTTP 200,
 * else 1 with one line on stderr saying why. */
int healthcheck_run(const struct config *cfg, int timeout_ms);

#endif
