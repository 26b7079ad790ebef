/*
 * accesslog — JSON access-log lines; see accesslog.h. Lines are built with jansson (strings
 * escaped there) and written with one fwrite under a mutex.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "accesslog.h"
#include "log.h"

static pthread_mutex_t al_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *al_out;       /* NULL: no access log */
static char al_path[4096]; /* "" for stdout */

/* Opens path for appending, close-on-exec, 0640. NULL with errno set on failure. */
static FILE *open_append(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "a");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int accesslog_open(const char *path, char *err, size_t errlen)
{
    accesslog_close();
    if (!path || !*path)
        return 0;
    FILE *f;
    if (strcmp(path, "-") == 0) {
        f = stdout;
        al_path[0] = '\0';
    } else {
        if (strlen(path) >= sizeof(al_path)) {
            snprintf(err, errlen, "access_log: the path is longer than %zu bytes",
                     sizeof(al_path) - 1);
            return -1;
        }
        f = open_append(path);
        if (!f) {
            snprintf(err, errlen, "access_log: cannot open %s: %s", path, strerror(errno));
            return -1;
        }
        snprintf(al_path, sizeof(al_path), "%s", path);
    }
    pthread_mutex_lock(&al_lock);
    al_out = f;
    pthread_mutex_unlock(&al_lock);
    return 0;
}

int accesslog_reopen(void)
{
    if (!al_path[0])
        return 0;
    FILE *f = open_append(al_path);
    if (!f)
        return -1;
    pthread_mutex_lock(&al_lock);
    FILE *old = al_out;
    al_out = f;
    pthread_mutex_unlock(&al_lock);
    if (old && old != stdout)
        fclose(old);
    return 0;
}

void accesslog_close(void)
{
    pthread_mutex_lock(&al_lock);
    FILE *old = al_out;
    al_out = NULL;
    pthread_mutex_unlock(&al_lock);
    if (old && old != stdout)
        fclose(old);
    else if (old)
        fflush(old);
}

int accesslog_enabled(void)
{
    pthread_mutex_lock(&al_lock);
    int on = al_out != NULL;
    pthread_mutex_unlock(&al_lock);
    return on;
}

/* A JSON string of s with bytes outside printable ASCII as '?', or null for NULL. */
static json_t *printable(const char *s)
{
    if (!s)
        return json_null();
    char buf[2048];
    size_t n = 0;
    for (; s[n] && n < sizeof(buf) - 1; n++)
        buf[n] = (s[n] >= 0x20 && s[n] < 0x7f) ? s[n] : '?';
    buf[n] = '\0';
    return json_string(buf);
}

void accesslog_write(const struct accesslog_entry *e)
{
    if (!accesslog_enabled())
        return;
    char when[LOG_TIMESTAMP_LEN];
    log_timestamp(when, sizeof(when));
    json_t *o = json_object();
    if (!o)
        return;
    json_object_set_new(o, "ts", json_string(when));
    json_object_set_new(o, "request_id", printable(e->request_id));
    json_object_set_new(o, "client", printable(e->client));
    json_object_set_new(o, "method", printable(e->method));
    json_object_set_new(o, "path", printable(e->path));
    json_object_set_new(o, "route", printable(e->route));
    json_object_set_new(o, "status", json_integer(e->status));
    json_object_set_new(o, "bytes", json_integer((json_int_t)e->bytes));
    json_object_set_new(o, "duration_s", json_real(e->seconds));
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!line)
        return;
    pthread_mutex_lock(&al_lock);
    if (al_out) {
        fputs(line, al_out);
        fputc('\n', al_out);
        fflush(al_out);
    }
    pthread_mutex_unlock(&al_lock);
    free(line);
}
