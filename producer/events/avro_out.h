/* What the native row encoders (_binlog_images.c, _select_rows.c) share: a growing output
 * buffer, Avro's long, strict UTF-8, the Gregorian calendar and an Avro decimal's bytes --
 * each the same as the Python it stands for (producer/events/value_code.py, avro_template.py). */
#ifndef CDC_AVRO_OUT_H
#define CDC_AVRO_OUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ``b``: the bytes written (``n``) in room for ``cap``; ``fixed``: a buffer of the caller's that
 * ``b`` starts in (never freed here), or NULL.  Free ``b`` with PyMem_Free when it is not ``fixed``. */
typedef struct {
    char *b;
    Py_ssize_t n, cap;
    char *fixed;
} Out;

static int out_reserve(Out *o, Py_ssize_t more) {
    if (o->n + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->n + more)
        cap *= 2;
    char *b;
    if (o->b && o->b == o->fixed) {
        b = PyMem_Malloc(cap);
        if (b)
            memcpy(b, o->b, o->n);
    } else {
        b = PyMem_Realloc(o->b, cap);
    }
    if (!b) {
        PyErr_NoMemory();
        return -1;
    }
    o->b = b;
    o->cap = cap;
    return 0;
}

static int out_put(Out *o, const void *p, Py_ssize_t n) {
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->b + o->n, p, n);
    o->n += n;
    return 0;
}

/* Avro's long (and int): zig-zag, then base-128 little-endian. */
static int out_long(Out *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    if (out_reserve(o, 10) < 0)
        return -1;
    unsigned char *p = (unsigned char *)o->b + o->n;
    while (z >= 0x80) {
        *p++ = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    o->n = (char *)p - o->b;
    return 0;
}

/* An Avro decimal's bytes of the unscaled integer -``total`` when ``negative``, else ``total``:
 * its length, then two's complement big-endian in (bit length + 8) >> 3 bytes, the bit length
 * being |v|'s (value_code.decimal_lines: int.to_bytes with a sign bit to spare). */
static int out_decimal(Out *o, unsigned __int128 total, int negative) {
    int bits = 0;
    for (unsigned __int128 t = total; t; t >>= 1)
        bits++;
    int n = (bits + 8) >> 3;
    unsigned __int128 twos = negative ? (unsigned __int128)0 - total : total;
    unsigned char bytes[17];
    for (int i = n - 1; i >= 0; i--) {
        bytes[i] = (unsigned char)twos;
        twos >>= 8;
    }
    if (out_long(o, (int64_t)n) < 0)
        return -1;
    return out_put(o, bytes, n);
}

/* Strict UTF-8, as Python's decoder takes it: no overlong forms, no surrogates, nothing
 * above U+10FFFF. */
static int is_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n)
                return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if (c == 0xE0 && c1 < 0xA0)
                return 0;   /* overlong */
            if (c == 0xED && c1 >= 0xA0)
                return 0;   /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n)
                return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && c1 < 0x90)
                return 0;   /* overlong */
            if (c == 0xF4 && c1 >= 0x90)
                return 0;   /* above U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

#endif
