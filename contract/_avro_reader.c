/* The native Avro projection reader: one record of a writer schema read by a program that
 * contract/avro_decoder.py (native_program) compiles from the schema and a projection.
 *
 * read(program, names, data, start) -> dict
 *
 * ``program`` is a bytes object of native-endian int32 words describing the schema as a tree
 * of nodes; ``names`` a tuple of str (field names of the dicts built).  Nodes:
 *
 *   NULL | BOOL | LONG (int and long) | FLOAT | DOUBLE | BYTES | STRING | ENUM (skipped only)
 *   FIXED size
 *   RECORD nfields, then per field: action, name index, node
 *          (action 0: skipped; 1: its value read; 2: where its value starts, then skipped)
 *   UNION nbranches, then per branch: the branch node's length in words, the node
 *   ARRAY item-node-length item-least-size item-node | MAP the same of its values (skipped only;
 *          a block of more items than the bytes left can hold is malformed)
 *
 * Values are what contract/avro_decoder.py's generated Python gives for the same schema and
 * projection (dicts in field order, unions as their branch's value); every read is bounds
 * checked, and malformed data raises ValueError (UnicodeDecodeError for a string that is not
 * UTF-8), which the caller turns into its SerdeError.  Longer than 64 bits is malformed here.
 */
#define PY_SSIZE_T_CLEAN
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

static void *fail(const char *message) {
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

static int read_long(Reader *r, int64_t *out) {
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

static int skip_long(Reader *r) {
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

static int advance(Reader *r, int64_t size) {
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
static int branch_of(Reader *r, int32_t count, int32_t *out) {
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

static int need(Reader *r, const int32_t *p, Py_ssize_t words) {
    if (r->end - p < words) {
        fail("a malformed reader program");
        return -1;
    }
    return 0;
}

/* The node after the union at ``p`` (UNION nbranches, then per branch its length and node:
 * the same layout in reader and COPY programs), its branches' lengths checked. */
static const int32_t *union_after(Reader *r, const int32_t *p) {
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
static const int32_t *union_branch(Reader *r, const int32_t *p) {
    int32_t k;
    if (branch_of(r, p[1], &k) < 0)
        return NULL;
    p += 2;
    for (int32_t j = 0; j < k; j++)
        p += 1 + p[0];
    return p + 1;
}

/* A blob of the data: ``n`` bytes at the reader's position (a length read first when n < 0). */
static const unsigned char *blob(Reader *r, Py_ssize_t *n) {
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
static int read_real(Reader *r, int size, double *out) {
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
static const int32_t *skip(Reader *r, const int32_t *p, int depth) {
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

static const int32_t *value(Reader *r, const int32_t *p, PyObject **out, int depth) {
    int64_t n;
    *out = NULL;
    if (depth > MAX_DEPTH || need(r, p, 1) < 0)
        return fail("a malformed reader program");
    switch (p[0]) {
    case N_NULL:
        *out = Py_NewRef(Py_None);
        return p + 1;
    case N_BOOL:
        if (r->i >= r->n)
            return fail("record too short");
        *out = PyBool_FromLong(r->b[r->i++] == 1);
        return p + 1;
    case N_LONG:
        if (read_long(r, &n) < 0)
            return NULL;
        *out = PyLong_FromLongLong(n);
        return *out == NULL ? NULL : p + 1;
    case N_FLOAT: case N_DOUBLE: {
        double d;
        if (read_real(r, p[0] == N_DOUBLE ? 8 : 4, &d) < 0)
            return NULL;
        *out = PyFloat_FromDouble(d);
        return *out == NULL ? NULL : p + 1;
    }
    case N_BYTES: case N_STRING: case N_FIXED: {
        Py_ssize_t len = -1;
        const unsigned char *raw;
        if (p[0] == N_FIXED && need(r, p, 2) < 0)
            return NULL;
        if (p[0] == N_FIXED)
            len = p[1];
        if ((raw = blob(r, &len)) == NULL)
            return NULL;
        *out = p[0] == N_STRING ? PyUnicode_DecodeUTF8((const char *)raw, len, NULL)
                                : PyBytes_FromStringAndSize((const char *)raw, len);
        return *out == NULL ? NULL : p + (p[0] == N_FIXED ? 2 : 1);
    }
    case N_RECORD: {
        if (need(r, p, 2) < 0)
            return NULL;
        int32_t count = p[1];
        const int32_t *q = p + 2;
        PyObject *dict = PyDict_New();
        if (dict == NULL)
            return NULL;
        for (int32_t f = 0; f < count; f++) {
            PyObject *v = NULL, *name;
            if (need(r, q, 2) < 0)
                goto record_failed;
            int32_t action = q[0], index = q[1];
            if (action == A_SKIP) {
                q = skip(r, q + 2, depth + 1);
                if (q == NULL)
                    goto record_failed;
                continue;
            }
            if (index < 0 || index >= PyTuple_GET_SIZE(r->names)) {
                fail("a malformed reader program");
                goto record_failed;
            }
            name = PyTuple_GET_ITEM(r->names, index);
            if (action == A_OFFSET) {
                v = PyLong_FromSsize_t(r->i);
                q = v == NULL ? NULL : skip(r, q + 2, depth + 1);
            } else {
                q = value(r, q + 2, &v, depth + 1);
            }
            if (q == NULL || PyDict_SetItem(dict, name, v) < 0) {
                Py_XDECREF(v);
                goto record_failed;
            }
            Py_DECREF(v);
        }
        *out = dict;
        return q;
    record_failed:
        Py_DECREF(dict);
        return NULL;
    }
    case N_UNION: {
        const int32_t *after = union_after(r, p), *branch;
        if (after == NULL || (branch = union_branch(r, p)) == NULL)
            return NULL;
        return value(r, branch, out, depth + 1) == NULL ? NULL : after;
    }
    default:  /* enums, arrays and maps are read by the generated Python (native_program refuses them) */
        return fail("a malformed reader program");
    }
}

static PyObject *read_record(PyObject *self, PyObject *args) {
    Py_buffer program, data;
    PyObject *names, *out = NULL;
    Py_ssize_t start;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!y*n", &program, &PyTuple_Type, &names, &data, &start))
        return NULL;
    if (program.len % 4 != 0 || program.len == 0) {
        PyErr_SetString(PyExc_ValueError, "a malformed reader program");
    } else if (start < 0 || start > data.len) {
        PyErr_SetString(PyExc_ValueError, "record too short");
    } else {
        Reader r = {(const unsigned char *)data.buf, data.len, start,
                    (const int32_t *)program.buf + program.len / 4, names};
        if (value(&r, (const int32_t *)program.buf, &out, 0) == NULL)
            Py_CLEAR(out);
    }
    PyBuffer_Release(&program);
    PyBuffer_Release(&data);
    return out;
}

/* ---- COPY text lines (spark_jobs/sinks/copy_text.py) ----------------------------------------
 *
 * copy_line(program, ncolumns, data, at) -> bytes: the COPY text line of the row image whose
 * ["null", row] union starts at data[at], as the generated encoder of copy_text.py writes it.
 * Program: the row record's field count, then per field its column index (-1: skipped, a
 * reader node follows) or the column's text node:
 *
 *   T_NULL (\N) | T_DIGITS (a long's digits) | T_DATE | T_TIME | T_TIME_MS (longs)
 *   T_STRING (escaped) | T_DECIMAL (bytes: the unscaled value's digits) | T_DECIMAL_FIXED size
 *   T_HEX (bytes as \\x...) | T_HEX_FIXED size | T_BOOL | T_DOUBLE | T_FLOAT
 *   T_UNION nbranches, then per branch: the branch node's length in words, the node
 */
enum { T_NULL = 100, T_DIGITS, T_DATE, T_TIME, T_TIME_MS, T_STRING, T_DECIMAL, T_DECIMAL_FIXED, T_HEX, T_HEX_FIXED,
       T_BOOL, T_DOUBLE, T_FLOAT, T_UNION };
#define MAX_DECIMAL_BYTES 64

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Text;

static int text_reserve(Text *t, Py_ssize_t more) {
    if (t->len + more <= t->cap)
        return 0;
    Py_ssize_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more)
        cap *= 2;
    char *buf = PyMem_Realloc(t->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->buf = buf;
    t->cap = cap;
    return 0;
}

static int text_add(Text *t, const char *s, Py_ssize_t n) {
    if (text_reserve(t, n) < 0)
        return -1;
    memcpy(t->buf + t->len, s, (size_t)n);
    t->len += n;
    return 0;
}

static int text_unsigned(Text *t, const char *sign, unsigned long long v, int min_digits) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n < min_digits)
        digits[n++] = '0';
    if (text_reserve(t, n + 1) < 0)
        return -1;
    while (*sign)
        t->buf[t->len++] = *sign++;
    while (n)
        t->buf[t->len++] = digits[--n];
    return 0;
}

static int text_long(Text *t, int64_t v) {
    return v < 0 ? text_unsigned(t, "-", 0ULL - (unsigned long long)v, 1) : text_unsigned(t, "", (unsigned long long)v, 1);
}

/* YYYY-MM-DD of a day count since 1970-01-01 (years 1..9999, else ValueError): H. Hinnant's civil_from_days. */
static int text_date(Text *t, int64_t days) {
    if (days < -719162 || days > 2932896) {
        PyErr_Format(PyExc_ValueError, "date %lld days from 1970-01-01 is outside years 1..9999", (long long)days);
        return -1;
    }
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097, yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    char out[32];
    y += m <= 2;
    snprintf(out, sizeof out, "%04d-%02d-%02d", (int)y, (int)m, (int)d);
    return text_add(t, out, 10);
}

/* [-]H:MM:SS.ffffff of a count of microseconds (times ``scale``), hours at least two digits. */
static int text_time(Text *t, int64_t v, unsigned scale) {
    unsigned __int128 us = (unsigned __int128)(v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v) * scale;
    unsigned long long frac = (unsigned long long)(us % 1000000), secs = (unsigned long long)(us / 1000000);
    char tail[16];
    if (text_unsigned(t, v < 0 ? "-" : "", secs / 3600, 2) < 0)
        return -1;
    snprintf(tail, sizeof tail, ":%02llu:%02llu.%06llu", (secs / 60) % 60, secs % 60, frac);
    return text_add(t, tail, (Py_ssize_t)strlen(tail));
}

/* The digits of a big-endian two's-complement integer of ``n`` bytes (a decimal's unscaled value). */
static int text_unscaled(Text *t, const unsigned char *raw, Py_ssize_t n) {
    unsigned char mag[MAX_DECIMAL_BYTES];
    char digits[MAX_DECIMAL_BYTES * 3 + 2];
    int nd = 0, neg = n > 0 && (raw[0] & 0x80);
    if (n > MAX_DECIMAL_BYTES) {
        PyErr_SetString(PyExc_ValueError, "a decimal's unscaled value longer than 64 bytes");
        return -1;
    }
    memcpy(mag, raw, (size_t)n);
    if (neg) {  /* the magnitude: inverted, plus one */
        int carry = 1;
        for (Py_ssize_t j = n - 1; j >= 0; j--) {
            int v = (unsigned char)~mag[j] + carry;
            mag[j] = (unsigned char)v;
            carry = v >> 8;
        }
    }
    Py_ssize_t first = 0;
    for (;;) {  /* divide by 10 until nothing is left */
        while (first < n && mag[first] == 0)
            first++;
        if (first == n)
            break;
        unsigned rem = 0;
        for (Py_ssize_t j = first; j < n; j++) {
            unsigned cur = (rem << 8) | mag[j];
            mag[j] = (unsigned char)(cur / 10);
            rem = cur % 10;
        }
        digits[nd++] = (char)('0' + rem);
    }
    if (nd == 0)
        digits[nd++] = '0';
    if (neg)
        digits[nd++] = '-';
    if (text_reserve(t, nd) < 0)
        return -1;
    while (nd)
        t->buf[t->len++] = digits[--nd];
    return 0;
}

static int text_escaped(Text *t, const unsigned char *raw, Py_ssize_t n) {
    if (text_reserve(t, 2 * n) < 0)
        return -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        unsigned char c = raw[j];
        char e = c == '\\' ? '\\' : c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : 0;
        if (e) {
            t->buf[t->len++] = '\\';
            t->buf[t->len++] = e;
        } else {
            t->buf[t->len++] = (char)c;
        }
    }
    return 0;
}

static int text_hex(Text *t, const unsigned char *raw, Py_ssize_t n) {
    static const char hexdigits[] = "0123456789abcdef";
    if (text_reserve(t, 3 + 2 * n) < 0)
        return -1;
    memcpy(t->buf + t->len, "\\\\x", 3);
    t->len += 3;
    for (Py_ssize_t j = 0; j < n; j++) {
        t->buf[t->len++] = hexdigits[raw[j] >> 4];
        t->buf[t->len++] = hexdigits[raw[j] & 15];
    }
    return 0;
}

static int text_float(Text *t, double v) {
    char *repr = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (repr == NULL)
        return -1;
    int rc = text_add(t, repr, (Py_ssize_t)strlen(repr));
    PyMem_Free(repr);
    return rc;
}

/* The text of a column's value (the node at ``p``) appended to ``t``; the node after it. */
static const int32_t *column_text(Reader *r, const int32_t *p, Text *t, int depth) {
    int64_t v;
    Py_ssize_t n = -1;
    const unsigned char *raw;
    if (depth > MAX_DEPTH || need(r, p, 1) < 0)
        return fail("a malformed COPY program");
    switch (p[0]) {
    case T_NULL:
        return text_add(t, "\\N", 2) < 0 ? NULL : p + 1;
    case T_DIGITS: case T_DATE: case T_TIME: case T_TIME_MS:
        if (read_long(r, &v) < 0)
            return NULL;
        if ((p[0] == T_DIGITS ? text_long(t, v) : p[0] == T_DATE ? text_date(t, v)
             : text_time(t, v, p[0] == T_TIME ? 1 : 1000)) < 0)
            return NULL;
        return p + 1;
    case T_STRING: case T_DECIMAL: case T_HEX:
        if ((raw = blob(r, &n)) == NULL)
            return NULL;
        if ((p[0] == T_STRING ? text_escaped(t, raw, n) : p[0] == T_DECIMAL ? text_unscaled(t, raw, n)
             : text_hex(t, raw, n)) < 0)
            return NULL;
        return p + 1;
    case T_DECIMAL_FIXED: case T_HEX_FIXED:
        if (need(r, p, 2) < 0)
            return NULL;
        n = p[1];
        if ((raw = blob(r, &n)) == NULL)
            return NULL;
        if ((p[0] == T_DECIMAL_FIXED ? text_unscaled(t, raw, n) : text_hex(t, raw, n)) < 0)
            return NULL;
        return p + 2;
    case T_BOOL:
        if (r->i >= r->n)
            return fail("record too short");
        return text_add(t, r->b[r->i++] == 1 ? "t" : "f", 1) < 0 ? NULL : p + 1;
    case T_DOUBLE: case T_FLOAT: {
        double d;
        return read_real(r, p[0] == T_DOUBLE ? 8 : 4, &d) < 0 || text_float(t, d) < 0 ? NULL : p + 1;
    }
    case T_UNION: {
        const int32_t *after = union_after(r, p), *branch;
        if (after == NULL || (branch = union_branch(r, p)) == NULL)
            return NULL;
        return column_text(r, branch, t, depth + 1) == NULL ? NULL : after;
    }
    default:
        return fail("a malformed COPY program");
    }
}

static PyObject *copy_line(PyObject *self, PyObject *args) {
    Py_buffer program, data;
    Py_ssize_t ncolumns, at;
    PyObject *out = NULL;
    Text text = {NULL, 0, 0};
    Py_ssize_t *spans = NULL;  /* per column: start and length in ``text`` */
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ny*n", &program, &ncolumns, &data, &at))
        return NULL;
    const int32_t *p = (const int32_t *)program.buf;
    Reader r = {(const unsigned char *)data.buf, data.len, at, p + program.len / 4, NULL};
    if (program.len % 4 != 0 || program.len == 0 || ncolumns < 1 || ncolumns > 100000) {
        fail("a malformed COPY program");
        goto done;
    }
    if (at < 0 || at >= data.len) {
        fail("record too short");
        goto done;
    }
    if (r.b[r.i] != 2) {
        fail("a null row image");
        goto done;
    }
    r.i++;
    spans = PyMem_Calloc((size_t)ncolumns * 2, sizeof(Py_ssize_t));
    if (spans == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t fields = p[0];
    p++;
    for (int32_t f = 0; f < fields && p != NULL; f++) {
        if (need(&r, p, 1) < 0) {
            p = NULL;
            break;
        }
        int32_t column = p[0];
        if (column < 0) {
            p = skip(&r, p + 1, 1);
            continue;
        }
        if (column >= ncolumns) {
            p = fail("a malformed COPY program");
            break;
        }
        spans[2 * column] = text.len;
        p = column_text(&r, p + 1, &text, 1);
        spans[2 * column + 1] = text.len - spans[2 * column];
    }
    if (p != NULL) {
        out = PyBytes_FromStringAndSize(NULL, text.len + ncolumns - 1);
        if (out != NULL) {
            char *o = PyBytes_AS_STRING(out);
            for (Py_ssize_t c = 0; c < ncolumns; c++) {
                if (c)
                    *o++ = '\t';
                memcpy(o, text.buf + spans[2 * c], (size_t)spans[2 * c + 1]);
                o += spans[2 * c + 1];
            }
        }
    }
done:
    PyMem_Free(spans);
    PyMem_Free(text.buf);
    PyBuffer_Release(&program);
    PyBuffer_Release(&data);
    return out;
}

static PyMethodDef methods[] = {
    {"read", read_record, METH_VARARGS, "read(program, names, data, start): one record read by a reader program."},
    {"copy_line", copy_line, METH_VARARGS, "copy_line(program, ncolumns, data, at): a row image's COPY text line."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "contract._avro_reader",
    .m_doc = "The native Avro projection reader (see contract/avro_decoder.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__avro_reader(void) {
    return PyModule_Create(&module);
}
