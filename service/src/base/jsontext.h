/*
 * jsontext — JSON text written straight into a caller's buffer, for the texts of the order path
 * that are made once per order (the order record, docs/design.md): a template filled in place,
 * without building a jansson tree and dumping it (issue 23: that was a tenth of inventoryd's
 * CPU per order).
 *
 * The output is byte for byte what jansson's json_dumps(..., JSON_COMPACT) writes for the same
 * values (test_jsontext compares them on hostile strings): strings escape '"', '\\' and the
 * control characters below 0x20 (\b \f \n \r \t, the others as \u00XX with upper-case hex) and
 * pass everything else through, non-ASCII UTF-8 included; a string that is not valid UTF-8
 * (overlong forms, surrogates, past U+10FFFF, stray continuation bytes) is refused, as
 * json_string refuses it.
 *
 *     char buf[256];
 *     struct jsontext w;
 *     jsontext_init(&w, buf, sizeof(buf));
 *     jsontext_raw(&w, "{\"sku\":");
 *     jsontext_string(&w, sku);
 *     jsontext_raw(&w, "}");
 *     int n = jsontext_end(&w); // length, or -1: bad UTF-8 or buf too small
 *
 * Errors are sticky: after the first, every call does nothing and jsontext_end says -1.
 */
#ifndef INVENTORY_JSONTEXT_H
#define INVENTORY_JSONTEXT_H

#include <stddef.h>

struct jsontext {
    char *start, *p, *end; /* the buffer; the next byte to write; the NUL's last place */
    int err;
};

/* Writes into buf[0..cap) (cap >= 1). */
void jsontext_init(struct jsontext *w, char *buf, size_t cap);

/* Appends the NUL-terminated s as it is (JSON punctuation and names the caller knows). */
void jsontext_raw(struct jsontext *w, const char *s);

/* Appends the NUL-terminated s as a JSON string, quoted and escaped (above); an error when s is
 * not valid UTF-8. */
void jsontext_string(struct jsontext *w, const char *s);

/* Appends v in decimal. */
void jsontext_int(struct jsontext *w, long long v);

/* NUL-terminates the text; returns its length, or -1 after an error. */
int jsontext_end(struct jsontext *w);

#endif
