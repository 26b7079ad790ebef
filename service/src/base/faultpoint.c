/* The fault points of faultpoint.h. */
#include "faultpoint.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static char point[64];
static int action; /* SIGKILL, SIGSTOP, or 0: fail (faultpoint_fail) */
static atomic_int fired;

void faultpoint_init(void)
{
    const char *v = getenv("INVENTORY_FAULTPOINT");
    if (!v || !*v)
        return;
    size_t n = strcspn(v, ":");
    if (n >= sizeof(point))
        n = sizeof(point) - 1;
    memcpy(point, v, n);
    point[n] = '\0';
    action = strcmp(v + n, ":stop") == 0 ? SIGSTOP : strcmp(v + n, ":fail") == 0 ? 0 : SIGKILL;
    log_msg(CONFIG_LOG_WARN, "faultpoint",
            "INVENTORY_FAULTPOINT=%s: this process will %s at that point (tests only)", v,
            action == SIGSTOP   ? "stop itself"
            : action == SIGKILL ? "kill itself"
                                : "fail the step, every time");
}

int faultpoint_fail(const char *name)
{
    return point[0] && action == 0 && strcmp(name, point) == 0;
}

void faultpoint(const char *name)
{
    if (!point[0] || !action || strcmp(name, point) != 0 || atomic_exchange(&fired, 1))
        return;
    log_msg(CONFIG_LOG_WARN, "faultpoint", "fault point %s reached: %s", name,
            action == SIGSTOP ? "stopping" : "killing this process");
    raise(action);
}
