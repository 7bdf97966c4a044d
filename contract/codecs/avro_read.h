/* The Avro reading every native reader shares: the program's node codes, the reader over a
 * record's bytes, its bounds-checked reads of longs, floats, blobs and union branches, and
 * skipping a value.  Programs are native-endian int32 words that contract/codecs/avro_decoder.py
 * compiles from a writer schema (native_program; native_skip_words for the nodes other programs
 * skip fields with).  Included by contract/codecs/_avro_reader.c (records into dicts),
 * spark_jobs/sinks/_copy_text.c (a row image's COPY line) and spark_jobs/task/_change_scan.c
 * (the merge task's change scan): each a module of its own layer. */
#ifndef CDC_AVRO_READ_H
#define CDC_AVRO_READ_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { N_NULL = 0, N_BOOL, N_LONG, N_FLOAT, N_DOUBLE, N_BYTES, N_STRING, N_FIXED, N_ENUM, N_RECORD, N_UNION,
       N_ARRAY, N_MAP };
enum { A_SKIP = 0, A_VALUE = 1, A_OFFSET = 2 };
#define MAX_DEPTH 64

typedef struct {
    const unsigned char *b;
    Py_ssize_t n;
    Py_ssize_t i;
    const int32_t *end;   /* the program's end */
    PyObject *names;      /* tuple of str */
} Reader;

static inline void *fail(const char *message) {
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

static inline int read_long(Reader *r, int64_t *out) {
    uint64_t z = 0;
    int shift = 0;
    for (;;) {
        if (r->i >= r->n) {
            fail("record too short");
            return -1;
        }
        unsigned char x = r->b[r->i++];
        if (shift == 63 && (x & 0x7E)) {
            fail("an Avro long beyond 64 bits");
            return -1;
        }
        z |= (uint64_t)(x & 0x7F) << shift;
        if (x < 0x80)
            break;
        shift += 7;
        if (shift > 63) {
            fail("an Avro long longer than 10 bytes");
            return -1;
        }
    }
    *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    return 0;
}

static inline int skip_long(Reader *r) {
    Py_ssize_t stop = r->i + 10;
    for (;;) {
        if (r->i >= r->n) {
            fail("record too short");
            return -1;
        }
        if (r->b[r->i++] < 0x80)
            return 0;
        if (r->i >= stop) {
            fail("an Avro long longer than 10 bytes");
            return -1;
        }
    }
}

static inline int advance(Reader *r, int64_t size) {
    if (size < 0) {
        fail("negative length");
        return -1;
    }
    if (size > r->n - r->i) {
        fail("record too short");
        return -1;
    }
    r->i += (Py_ssize_t)size;
    return 0;
}

/* The branch index of a union of ``count`` branches (as the generated Python reads it). */
static inline int branch_of(Reader *r, int32_t count, int32_t *out) {
    int64_t k;
    if (count <= 64) {
        if (r->i >= r->n) {
            fail("record too short");
            return -1;
        }
        unsigned char x = r->b[r->i++];
        if ((x & 1) || (x >> 1) >= count) {
            PyErr_Format(PyExc_ValueError, "union branch (zig-zag) %d out of range", (int)x);
            return -1;
        }
        *out = x >> 1;
        return 0;
    }
    if (read_long(r, &k) < 0)
        return -1;
    if (k < 0 || k >= count) {
        PyErr_Format(PyExc_ValueError, "union branch (zig-zag) %lld out of range", (long long)(2 * k));
        return -1;
    }
    *out = (int32_t)k;
    return 0;
}

static inline int need(Reader *r, const int32_t *p, Py_ssize_t words) {
    if (r->end - p < words) {
        fail("a malformed reader program");
        return -1;
    }
    return 0;
}

/* The node after the union at ``p`` (UNION nbranches, then per branch its length and node:
 * the same layout in reader and COPY programs), its branches' lengths checked. */
static inline const int32_t *union_after(Reader *r, const int32_t *p) {
    const int32_t *after = p + 2;
    if (need(r, p, 2) < 0)
        return NULL;
    for (int32_t j = 0; j < p[1]; j++) {
        if (need(r, after, 1) < 0 || after[0] < 1 || need(r, after + 1, after[0]) < 0)
            return fail("a malformed program");
        after += 1 + after[0];
    }
    return after;
}

/* The node of the branch the data holds for the union at ``p`` (checked by union_after). */
static inline const int32_t *union_branch(Reader *r, const int32_t *p) {
    int32_t k;
    if (branch_of(r, p[1], &k) < 0)
        return NULL;
    p += 2;
    for (int32_t j = 0; j < k; j++)
        p += 1 + p[0];
    return p + 1;
}

/* A blob of the data: ``n`` bytes at the reader's position (a length read first when n < 0). */
static inline const unsigned char *blob(Reader *r, Py_ssize_t *n) {
    int64_t len = *n;
    if (len < 0 && read_long(r, &len) < 0)
        return NULL;
    Py_ssize_t at = r->i;
    if (advance(r, len) < 0)
        return NULL;
    *n = (Py_ssize_t)len;
    return r->b + at;
}

/* A float (``size`` 4) or double (8), little-endian as this machine is (see native_enabled). */
static inline int read_real(Reader *r, int size, double *out) {
    if (r->n - r->i < size) {
        fail("record too short");
        return -1;
    }
    if (size == 8) {
        memcpy(out, r->b + r->i, 8);
    } else {
        float f;
        memcpy(&f, r->b + r->i, 4);
        *out = f;
    }
    r->i += size;
    return 0;
}

/* Past a value of the node at ``p`` in the data; the node after it in the program. */
static inline const int32_t *skip(Reader *r, const int32_t *p, int depth) {
    int64_t n;
    if (depth > MAX_DEPTH || need(r, p, 1) < 0)
        return fail("a malformed reader program");
    switch (p[0]) {
    case N_NULL:
        return p + 1;
    case N_BOOL:
        return advance(r, 1) < 0 ? NULL : p + 1;
    case N_LONG: case N_ENUM:
        return skip_long(r) < 0 ? NULL : p + 1;
    case N_FLOAT:
        return advance(r, 4) < 0 ? NULL : p + 1;
    case N_DOUBLE:
        return advance(r, 8) < 0 ? NULL : p + 1;
    case N_BYTES: case N_STRING:
        if (read_long(r, &n) < 0 || advance(r, n) < 0)
            return NULL;
        return p + 1;
    case N_FIXED:
        if (need(r, p, 2) < 0 || advance(r, p[1]) < 0)
            return NULL;
        return p + 2;
    case N_RECORD: {
        if (need(r, p, 2) < 0)
            return NULL;
        int32_t count = p[1];
        const int32_t *q = p + 2;
        for (int32_t f = 0; f < count; f++) {
            if (need(r, q, 2) < 0)
                return NULL;
            q = skip(r, q + 2, depth + 1);
            if (q == NULL)
                return NULL;
        }
        return q;
    }
    case N_UNION: {
        const int32_t *after = union_after(r, p), *branch;
        if (after == NULL || (branch = union_branch(r, p)) == NULL)
            return NULL;
        return skip(r, branch, depth + 1) == NULL ? NULL : after;
    }
    case N_ARRAY: case N_MAP: {
        /* [code, item node length, item's least size in bytes, item node] */
        if (need(r, p, 3) < 0 || p[1] < 1 || p[2] < 0 || need(r, p + 3, p[1]) < 0)
            return fail("a malformed reader program");
        const int32_t *after = p + 3 + p[1];
        for (;;) {
            if (read_long(r, &n) < 0)
                return NULL;
            if (n == 0)
                return after;
            if (n < 0) {  /* the block's size in bytes follows: jump */
                if (read_long(r, &n) < 0)
                    return NULL;
                if (n < 0)
                    return fail("negative block size");
                if (advance(r, n) < 0)
                    return NULL;
                continue;
            }
            if (p[2] == 0)  /* items of no bytes (nulls): nothing to skip */
                continue;
            if (n > (r->n - r->i) / p[2])
                return fail("a block of more items than the bytes left hold");
            for (int64_t j = 0; j < n; j++) {
                if (p[0] == N_MAP) {
                    int64_t len;
                    if (read_long(r, &len) < 0 || advance(r, len) < 0)
                        return NULL;
                }
                if (skip(r, p + 3, depth + 1) == NULL)
                    return NULL;
            }
        }
    }
    default:
        return fail("a malformed reader program");
    }
}

#endif
