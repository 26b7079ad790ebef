/*
 * inventoryd — start-up and shutdown: load the configuration (SPEC §4), make the application
 * state, serve HTTP until SIGTERM/SIGINT, then drain in-flight requests (bounded by
 * shutdown_grace_ms), release everything and exit 0.
 *
 * `inventoryd --healthcheck [config...]` only asks the configured server's /healthz (exit 0 when
 * it answers 200, else 1): the container HEALTHCHECK, with no curl in the image.
 *
 * Exit status: 0 after --help/--version or a clean shutdown; 1 when the service cannot start
 * (app_init or listening failed); 2 for an invalid configuration (one message naming the key).
 * Signals: SIGTERM and SIGINT (drain and exit) and SIGHUP (re-open the access log, for
 * logrotate) are blocked in every thread and taken by sigwait in main, so no handler runs
 * inside library code; SIGPIPE is ignored (a peer closing its socket is an error
 * return, not a crash).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accesslog.h"
#include "app.h"
#include "config.h"
#include "healthcheck.h"
#include "server.h"
#include "faultpoint.h"
#include "log.h"

/* Logs the effective configuration as one line, the config object embedded as JSON. */
static void log_config(const struct config *cfg)
{
    char small[2048];
    int n = config_describe(cfg, small, sizeof(small));
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        log_json(CONFIG_LOG_INFO, "config", "config", small);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (big && config_describe(cfg, big, (size_t)n + 1) == n)
        log_json(CONFIG_LOG_INFO, "config", "config", big);
    free(big);
}

/* Says once at start who may use the admin endpoints, loudly when it is not "token holders". */
static void log_admin_access(const struct config *cfg)
{
    if (cfg->admin_token[0]) {
        if (cfg->admin_allow_loopback)
            log_msg(CONFIG_LOG_WARN, "admin_access",
                    "--admin-allow-loopback is ignored: an admin token is set, and admin "
                    "endpoints need it from every client");
        return;
    }
    if (cfg->admin_allow_loopback)
        log_msg(CONFIG_LOG_WARN, "admin_access",
                "admin endpoints accept ANY loopback client WITHOUT a token "
                "(--admin-allow-loopback): for development only; behind a proxy on this host "
                "that is everyone, unless the proxy is in --trusted-proxies");
    else
        log_msg(CONFIG_LOG_INFO, "admin_access",
                "no admin token set: admin endpoints are closed (401); set --admin-token-file "
                "or INVENTORY_ADMIN_TOKEN to use them");
}

int main(int argc, char **argv)
{
    static struct config cfg;
    static struct app app;
    char err[512] = "";

    int rc = config_load(&cfg, argc, argv, NULL, err, sizeof(err));
    if (rc == 1) {
        fputs(cfg.action == CONFIG_ACTION_VERSION ? config_version() : config_usage(), stdout);
        return 0;
    }
    if (rc != 0) {
        log_msg(CONFIG_LOG_ERROR, "config_error", "%s", err[0] ? err : "invalid configuration");
        return 2;
    }
    if (cfg.action == CONFIG_ACTION_HEALTHCHECK)
        return healthcheck_run(&cfg, 2000);
    log_init(cfg.log_level);
    if (accesslog_open(cfg.access_log, err, sizeof(err)) != 0) {
        log_msg(CONFIG_LOG_ERROR, "config_error", "%s", err);
        return 2;
    }
    log_config(&cfg);
    log_admin_access(&cfg);
    faultpoint_init();

    /* Before any thread exists (lockcore's watchdog, MHD's workers) so they all inherit it. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, NULL);

    if (app_init(&app, &cfg, err, sizeof(err)) != 0) {
        log_msg(CONFIG_LOG_ERROR, "startup_failed", "%s", err[0] ? err : "app_init failed");
        accesslog_close();
        return 1;
    }
    struct server *srv = server_start(&app, err, sizeof(err));
    if (!srv) {
        log_msg(CONFIG_LOG_ERROR, "startup_failed", "%s", err);
        app_free(&app);
        accesslog_close();
        return 1;
    }
    log_msg(CONFIG_LOG_INFO, "startup",
            "inventoryd %s listening on %s port %d (strategy %s, %d threads)", INVENTORYD_VERSION,
            cfg.bind, server_port(srv), config_strategy_name(cfg.strategy), cfg.threads);

    int sig = 0;
    for (;;) {
        if (sigwait(&stop, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            break;
        if (accesslog_reopen() == 0)
            log_msg(CONFIG_LOG_INFO, "sighup", "access log re-opened");
        else
            log_msg(CONFIG_LOG_ERROR, "sighup",
                    "cannot re-open the access log %s; still "
                    "writing to the old file",
                    cfg.access_log);
    }
    atomic_store(&app.draining, 1);
    log_msg(CONFIG_LOG_INFO, "shutdown", "received %s; draining for up to %d ms",
            sig == SIGINT ? "SIGINT" : "SIGTERM", cfg.shutdown_grace_ms);
    server_stop(srv, cfg.shutdown_grace_ms);
    app_free(&app);
    accesslog_close();
    log_msg(CONFIG_LOG_INFO, "stopped", "inventoryd stopped");
    return 0;
}
