/*
 * Unit tests of service/src/base/log.c: every line is one valid JSON object with
 * ts/level/event/msg, strings are escaped (quotes, backslashes, control characters, invalid UTF-8),
 * levels filter, and lines from concurrent threads never interleave.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>

#include "log.h"

static FILE *cap;
static char *cap_buf;
static size_t cap_len;

static int setup(void **state)
{
    (void)state;
    cap = open_memstream(&cap_buf, &cap_len);
    assert_non_null(cap);
    log_set_output(cap);
    log_init(CONFIG_LOG_DEBUG);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    log_set_output(NULL);
    fclose(cap);
    free(cap_buf);
    cap_buf = NULL;
    cap_len = 0;
    log_init(CONFIG_LOG_INFO);
    return 0;
}

/* Everything captured so far (borrowed, valid until the next log call). */
static const char *captured(void)
{
    fflush(cap);
    return cap_buf ? cap_buf : "";
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Parses the only captured line; fails the test unless there is exactly one valid one. */
static json_t *only_line(void)
{
    const char *s = captured();
    assert_int_equal(count_lines(s), 1);
    size_t len = strlen(s);
    assert_true(len > 0 && s[len - 1] == '\n');
    json_error_t e;
    json_t *o = json_loadb(s, len - 1, 0, &e);
    if (!o)
        fail_msg("invalid JSON line: %s (%s)", s, e.text);
    assert_true(json_is_object(o));
    return o;
}

static void test_line_shape(void **state)
{
    (void)state;
    log_msg(CONFIG_LOG_INFO, "startup", "listening on port %d", 8080);
    json_t *o = only_line();
    assert_string_equal(json_string_value(json_object_get(o, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(o, "event")), "startup");
    assert_string_equal(json_string_value(json_object_get(o, "msg")), "listening on port 8080");
    const char *ts = json_string_value(json_object_get(o, "ts"));
    assert_non_null(ts);
    /* 2026-11-22T02:40:00.123Z */
    assert_int_equal(strlen(ts), 24);
    assert_int_equal(ts[4], '-');
    assert_int_equal(ts[10], 'T');
    assert_int_equal(ts[19], '.');
    assert_int_equal(ts[23], 'Z');
    assert_int_equal(json_object_size(o), 4);
    /* The field order is fixed: ts first. */
    assert_memory_equal(captured(), "{\"ts\":\"", 7);
    json_decref(o);
}

static void test_escaping_round_trips(void **state)
{
    (void)state;
    const char *nasty = "say \"hi\"\\ back\nline2\r\tend \x01\x1f\x7f done";
    log_msg(CONFIG_LOG_WARN, "ev\"ent\n", "%s", nasty);
    const char *raw = captured();
    assert_non_null(strstr(raw, "\\\"hi\\\""));
    assert_non_null(strstr(raw, "\\\\ back"));
    assert_non_null(strstr(raw, "\\nline2\\r\\tend"));
    assert_non_null(strstr(raw, "\\u0001\\u001f\\u007f"));
    json_t *o = only_line();
    assert_string_equal(json_string_value(json_object_get(o, "msg")), nasty);
    assert_string_equal(json_string_value(json_object_get(o, "event")), "ev\"ent\n");
    assert_string_equal(json_string_value(json_object_get(o, "level")), "warn");
    json_decref(o);
}

static void test_utf8(void **state)
{
    (void)state;
    const char *good = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9d\x84\x9e"; /* héllo € 𝄞 */
    log_msg(CONFIG_LOG_INFO, "utf8", "%s", good);
    json_t *o = only_line();
    assert_string_equal(json_string_value(json_object_get(o, "msg")), good);
    json_decref(o);
}

static void test_invalid_utf8_replaced(void **state)
{
    (void)state;
    /* stray continuation, bad lead, truncated sequence, overlong '/', surrogate half */
    log_msg(CONFIG_LOG_INFO, "bad", "a\x80 b\xff c\xe2\x82 d\xc0\xaf e\xed\xa0\x80 f");
    assert_non_null(strstr(captured(), "\\ufffd"));
    json_t *o = only_line(); /* jansson refuses invalid UTF-8, so parsing proves it is gone */
    const char *msg = json_string_value(json_object_get(o, "msg"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "a\xef\xbf\xbd b"));
    assert_non_null(strstr(msg, " f"));
    json_decref(o);
}

static void test_long_message(void **state)
{
    (void)state;
    size_t n = 20000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (i % 100 == 99) ? '"' : (char)('a' + i % 26);
    big[n] = '\0';
    log_msg(CONFIG_LOG_ERROR, "big", "%s|%s", big, "tail");
    json_t *o = only_line();
    const char *msg = json_string_value(json_object_get(o, "msg"));
    assert_int_equal(strlen(msg), n + 5);
    assert_memory_equal(msg, big, n);
    assert_string_equal(msg + n, "|tail");
    json_decref(o);
    free(big);
}

static void test_level_filtering(void **state)
{
    (void)state;
    log_init(CONFIG_LOG_WARN);
    assert_false(log_enabled(CONFIG_LOG_DEBUG));
    assert_false(log_enabled(CONFIG_LOG_INFO));
    assert_true(log_enabled(CONFIG_LOG_WARN));
    assert_true(log_enabled(CONFIG_LOG_ERROR));
    log_msg(CONFIG_LOG_DEBUG, "d", "dropped");
    log_msg(CONFIG_LOG_INFO, "i", "dropped");
    log_json(CONFIG_LOG_INFO, "j", "k", "{}");
    assert_int_equal(count_lines(captured()), 0);
    log_msg(CONFIG_LOG_WARN, "w", "kept");
    log_msg(CONFIG_LOG_ERROR, "e", "kept");
    assert_int_equal(count_lines(captured()), 2);
    assert_non_null(strstr(captured(), "\"level\":\"warn\""));
    assert_non_null(strstr(captured(), "\"level\":\"error\""));

    log_init(CONFIG_LOG_ERROR);
    log_msg(CONFIG_LOG_WARN, "w", "dropped");
    assert_int_equal(count_lines(captured()), 2);
    log_init(CONFIG_LOG_DEBUG);
    log_msg(CONFIG_LOG_DEBUG, "d", "kept");
    assert_int_equal(count_lines(captured()), 3);
}

static void test_null_event(void **state)
{
    (void)state;
    log_msg(CONFIG_LOG_INFO, NULL, "x");
    json_t *o = only_line();
    assert_string_equal(json_string_value(json_object_get(o, "event")), "log");
    json_decref(o);
}

static void test_log_json_embeds(void **state)
{
    (void)state;
    log_json(CONFIG_LOG_INFO, "config", "config", "{\"port\":8080,\"bind\":\"0.0.0.0\"}");
    json_t *o = only_line();
    json_t *c = json_object_get(o, "config");
    assert_true(json_is_object(c));
    assert_int_equal(json_integer_value(json_object_get(c, "port")), 8080);
    assert_string_equal(json_string_value(json_object_get(o, "event")), "config");
    assert_null(json_object_get(o, "msg"));
    json_decref(o);
}

/* A request id set on this thread goes into every line (msg and JSON lines, escaped) until it
 * is cleared; another thread's lines do not carry it. */
static void *other_thread(void *arg)
{
    (void)arg;
    log_msg(CONFIG_LOG_INFO, "other", "from another thread");
    return NULL;
}

static void test_request_id(void **state)
{
    (void)state;
    log_set_request_id("req-\"1\"");
    assert_string_equal(log_request_id(), "req-\"1\"");
    log_msg(CONFIG_LOG_INFO, "a", "first");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, NULL);
    log_json(CONFIG_LOG_INFO, "b", "data", "{\"x\":1}");
    log_set_request_id(NULL);
    assert_null(log_request_id());
    log_msg(CONFIG_LOG_INFO, "c", "after");
    log_set_request_id("");
    assert_null(log_request_id());

    const char *text = captured();
    assert_int_equal(count_lines(text), 4);
    const char *line = text;
    const char *want[] = {"req-\"1\"", NULL, "req-\"1\"", NULL};
    for (int i = 0; i < 4; i++) {
        const char *nl = strchr(line, '\n');
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)(nl - line), 0, &je);
        assert_non_null(o);
        const char *id = json_string_value(json_object_get(o, "request_id"));
        if (want[i])
            assert_string_equal(id, want[i]);
        else
            assert_null(json_object_get(o, "request_id"));
        json_decref(o);
        line = nl + 1;
    }
}

#define THREADS 4
#define LINES_PER_THREAD 300

static void *writer(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < LINES_PER_THREAD; i++)
        log_msg(CONFIG_LOG_INFO, "thread", "thread %d line %d %s", id, i,
                "padding padding padding padding padding padding padding padding");
    return NULL;
}

static void test_threads_do_not_interleave(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    char *all = strdup(captured());
    assert_int_equal(count_lines(all), THREADS * LINES_PER_THREAD);
    char *save = NULL;
    for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        if (!o)
            fail_msg("interleaved line: %s", line);
        json_decref(o);
    }
    free(all);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_line_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escaping_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_utf8_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_filtering, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_event, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_json_embeds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_do_not_interleave, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_id, setup, teardown),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
