/*
 * jsontext — JSON text written into a caller's buffer, as jansson's json_dumps would write it
 * (jsontext.h).
 */
#include <string.h>

#include "jsontext.h"

void jsontext_init(struct jsontext *w, char *buf, size_t cap)
{
    w->start = w->p = buf;
    w->end = buf + cap - 1;
    w->err = 0;
}

/* Appends s[0..n). */
static void put(struct jsontext *w, const char *s, size_t n)
{
    if (w->err)
        return;
    if ((size_t)(w->end - w->p) < n) {
        w->err = 1;
        return;
    }
    memcpy(w->p, s, n);
    w->p += n;
}

void jsontext_raw(struct jsontext *w, const char *s)
{
    put(w, s, strlen(s));
}

/* The length of the UTF-8 sequence at s (its first byte is >= 0x80), or 0 when it is not a
 * valid one: jansson's rules, which are RFC 3629's — no overlong forms, no surrogates, nothing
 * past U+10FFFF. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n;
    unsigned v;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        v = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        v = c & 0x07;
    } else {
        return 0; /* a continuation byte, 0xC0/0xC1 (overlong ASCII), or 0xF5.. */
    }
    for (size_t i = 1; i < n; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF) /* the string's NUL ends here too */
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) || (n == 3 && v < 0x800) ||
        (n == 4 && v < 0x10000))
        return 0;
    return n;
}

void jsontext_string(struct jsontext *w, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s, *run = u;
    put(w, "\"", 1);
    for (;;) {
        unsigned c = *u;
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            u++;
            continue;
        }
        if (c >= 0x80) {
            size_t n = utf8_len(u);
            if (!n) {
                w->err = 1;
                return;
            }
            u += n;
            continue;
        }
        put(w, (const char *)run, (size_t)(u - run));
        if (c == '\0')
            break;
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        size_t elen = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default: elen = 6; break;
        }
        put(w, esc, elen);
        run = ++u;
    }
    put(w, "\"", 1);
}

void jsontext_int(struct jsontext *w, long long v)
{
    char buf[24], *q = buf + sizeof(buf);
    /* through unsigned, so that LLONG_MIN has a magnitude */
    unsigned long long m = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + m % 10);
        m /= 10;
    } while (m);
    if (v < 0)
        *--q = '-';
    put(w, q, (size_t)(buf + sizeof(buf) - q));
}

int jsontext_end(struct jsontext *w)
{
    if (w->err)
        return -1;
    *w->p = '\0';
    return (int)(w->p - w->start);
}
