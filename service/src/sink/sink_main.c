/*
 * inventory-sink — moves the order log (Redis streams, orderlog.h) into MySQL/MariaDB, and
 * `inventory-sink reconcile` compares the two (SPEC §12, docs/deployment.md).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "sink.h"

volatile sig_atomic_t sink_stop;

static void on_signal(int sig)
{
    (void)sig;
    sink_stop = 1;
}

int main(int argc, char **argv)
{
    struct sink_config cfg;
    char err[512];
    int rc = sink_config_load(&cfg, argc, argv, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc != 0) {
        fprintf(stderr, "inventory-sink: %s\n", err);
        return 2;
    }
    log_init(cfg.log_level);
    if (cfg.reconcile)
        return sink_reconcile(&cfg);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return sink_run(&cfg);
}
