/*
 * probe — the operational endpoints: liveness (/healthz), readiness (/readyz: Redis answers
 * and the instance is not draining) and the Prometheus scrape (/metrics).
 */
#include <stdlib.h>

#include "handlers.h"
#include "log.h"
#include "metrics.h"

static void status_body(struct response *res, int status, const char *word, const char *reason)
{
    json_t *body = reason ? json_pack("{s:s, s:s}", "status", word, "reason", reason)
                          : json_pack("{s:s}", "status", word);
    if (!body) {
        response_error(res, ERROR_INTERNAL, NULL);
        return;
    }
    response_json(res, status, body);
}

void probe_healthz(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    status_body(res, 200, "ok", NULL);
}

void probe_readyz(struct app *app, const struct request *req, struct response *res)
{
    (void)req;
    if (atomic_load(&app->draining)) {
        status_body(res, 503, "unavailable", "shutting down");
        return;
    }
    char reason[256] = "";
    if (store_ping(app->store, reason, sizeof(reason)) == 0) {
        status_body(res, 200, "ready", NULL);
        return;
    }
    reason[sizeof(reason) - 1] = '\0';
    /* The details (Redis's own error text, addresses, auth failures) go to the log only: the
     * probe is open to anyone who can reach the port. */
    log_msg(CONFIG_LOG_WARN, "readyz_unavailable", "Redis did not answer the readiness ping: %s",
            reason[0] ? reason : "(no reason given)");
    status_body(res, 503, "unavailable", "redis unavailable");
}

void probe_metrics(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    char *text = metrics_render();
    if (!text) {
        response_error(res, ERROR_INTERNAL, NULL);
        return;
    }
    free(res->text);
    res->text = text;
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
    res->status = 200;
}
