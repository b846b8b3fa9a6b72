/* What the compiled readers share (valis_core.dns.zone._rows, valis_core.dns.wire._master):
 * a token of a line and the readings of plain tokens that master.py makes in Python. Each
 * function here is the C twin of the Python function it names; the Python one stays the
 * reference (tests/property/test_zone_rows.py, test_master_compiled.py). */
#ifndef VALIS_SPANS_H
#define VALIS_SPANS_H

#include <Python.h>
#include <string.h>

#define MAX_NAME 255
#define MAX_LABEL 63

typedef struct { const char *at; Py_ssize_t len; } Span;

static int same(Span s, const char *text) {
    Py_ssize_t n = (Py_ssize_t)strlen(text);
    if (s.len != n) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((s.at[i] | 0x20) != text[i]) return 0;
    return 1;
}

/* master._uint: ASCII digits only, at most `limit`; -1 otherwise. */
static long long number(Span s, long long limit) {
    if (s.len == 0) return -1;
    long long value = 0;
    for (Py_ssize_t i = 0; i < s.len; i++) {
        if (s.at[i] < '0' || s.at[i] > '9') return -1;
        value = value * 10 + (s.at[i] - '0');
        if (value > limit) return -1;
    }
    return value;
}

/* names.plain_labels: the wire form of dot-separated labels (1 to 63 octets each, as
 * written, lowercased if `lower`), into `out`; its length, or -1. */
static Py_ssize_t labels(Span s, char *out, Py_ssize_t room, int lower) {
    Py_ssize_t written = 0, start = 0;
    if (s.len == 0) return -1;
    for (Py_ssize_t i = 0; i <= s.len; i++) {
        if (i < s.len && s.at[i] != '.') continue;
        Py_ssize_t size = i - start;
        if (size == 0 || size > MAX_LABEL || written + 1 + size > room) return -1;
        out[written++] = (char)size;
        for (Py_ssize_t j = start; j < i; j++) {
            char c = s.at[j];
            out[written++] = lower && c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
        }
        start = i + 1;
    }
    return written;
}

/* master.ipv4: four decimal octets, no leading zeros; -1 otherwise. */
static Py_ssize_t ipv4(Span s, char *out) {
    int part = 0;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= s.len; i++) {
        if (i < s.len && s.at[i] != '.') continue;
        Span octet = {s.at + start, i - start};
        if (part == 4 || octet.len == 0 || octet.len > 3) return -1;
        if (octet.len > 1 && octet.at[0] == '0') return -1;
        long long value = number(octet, 255);
        if (value < 0) return -1;
        out[part++] = (char)value;
        start = i + 1;
    }
    return part == 4 ? 4 : -1;
}

#endif
