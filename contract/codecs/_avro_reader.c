/* The native Avro projection reader: one record of a writer schema read by a program that
 * contract/codecs/avro_decoder.py (native_program) compiles from the schema and a projection.
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
 * Values are what contract/codecs/avro_decoder.py's generated Python gives for the same schema and
 * projection (dicts in field order, unions as their branch's value); every read is bounds
 * checked, and malformed data raises ValueError (UnicodeDecodeError for a string that is not
 * UTF-8), which the caller turns into its SerdeError.  Longer than 64 bits is malformed here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>  /* (PyMemberDef; its T_ codes named apart, some clash with the COPY codes) */
enum { MEMBER_OBJECT_EX = T_OBJECT_EX, MEMBER_READONLY = READONLY };
#undef T_STRING
#undef T_BOOL
#undef T_DOUBLE
#undef T_FLOAT
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

/* The COPY text of the row image at data[at] (see copy_line) appended to ``out``: each column's
 * text written to ``text`` in the fields' order first (``spans``: per column, its start and
 * length there), then to ``out`` in the columns' order, tab-separated.  0, or -1 with an
 * exception set. */
static int line_into(const int32_t *p, const int32_t *end, Py_ssize_t ncolumns, const unsigned char *data,
                     Py_ssize_t n, Py_ssize_t at, Text *text, Text *out, Py_ssize_t *spans) {
    Reader r = {data, n, at, end, NULL};
    if (at < 0 || at >= n) {
        fail("record too short");
        return -1;
    }
    if (r.b[r.i] != 2) {
        fail("a null row image");
        return -1;
    }
    r.i++;
    text->len = 0;
    memset(spans, 0, (size_t)ncolumns * 2 * sizeof(Py_ssize_t));
    int32_t fields = p[0];
    p++;
    for (int32_t f = 0; f < fields && p != NULL; f++) {
        if (need(&r, p, 1) < 0)
            return -1;
        int32_t column = p[0];
        if (column < 0) {
            p = skip(&r, p + 1, 1);
            continue;
        }
        if (column >= ncolumns) {
            fail("a malformed COPY program");
            return -1;
        }
        spans[2 * column] = text->len;
        p = column_text(&r, p + 1, text, 1);
        spans[2 * column + 1] = text->len - spans[2 * column];
    }
    if (p == NULL || text_reserve(out, text->len + ncolumns) < 0)
        return -1;
    for (Py_ssize_t c = 0; c < ncolumns; c++) {
        if (c)
            out->buf[out->len++] = '\t';
        memcpy(out->buf + out->len, text->buf + spans[2 * c], (size_t)spans[2 * c + 1]);
        out->len += spans[2 * c + 1];
    }
    return 0;
}

static int program_ok(Py_buffer *program, Py_ssize_t ncolumns) {
    if (program->len % 4 != 0 || program->len == 0 || ncolumns < 1 || ncolumns > 100000) {
        fail("a malformed COPY program");
        return 0;
    }
    return 1;
}

static PyObject *copy_line(PyObject *self, PyObject *args) {
    Py_buffer program, data;
    Py_ssize_t ncolumns, at;
    PyObject *result = NULL;
    Text text = {NULL, 0, 0}, out = {NULL, 0, 0};
    Py_ssize_t *spans = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ny*n", &program, &ncolumns, &data, &at))
        return NULL;
    const int32_t *p = (const int32_t *)program.buf;
    if (program_ok(&program, ncolumns)) {
        spans = PyMem_Calloc((size_t)ncolumns * 2, sizeof(Py_ssize_t));
        if (spans == NULL)
            PyErr_NoMemory();
        else if (line_into(p, p + program.len / 4, ncolumns, data.buf, data.len, at, &text, &out, spans) == 0)
            result = PyBytes_FromStringAndSize(out.buf ? out.buf : "", out.len);
    }
    PyMem_Free(spans);
    PyMem_Free(text.buf);
    PyMem_Free(out.buf);
    PyBuffer_Release(&program);
    PyBuffer_Release(&data);
    return result;
}

/* copy_lines(program, ncolumns, changes, start, stop) -> bytes: the upserts' stage lines of
 * changes[start:stop] (tuples (op, position, data, row_at): spark_jobs.sinks.batch's
 * EncodedChange), each the row image's copy_line, a tab, the position, a tab, \N (no key
 * hash) and a newline: what PostgresSink._copy_encoded writes line by line otherwise. */
static PyObject *copy_lines(PyObject *self, PyObject *args) {
    Py_buffer program;
    Py_ssize_t ncolumns, start, stop;
    PyObject *changes, *result = NULL;
    Text text = {NULL, 0, 0}, out = {NULL, 0, 0};
    Py_ssize_t *spans = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nO!nn", &program, &ncolumns, &PyList_Type, &changes, &start, &stop))
        return NULL;
    const int32_t *p = (const int32_t *)program.buf;
    if (stop > PyList_GET_SIZE(changes))
        stop = PyList_GET_SIZE(changes);
    if (!program_ok(&program, ncolumns) || start < 0)
        goto done;
    if ((spans = PyMem_Calloc((size_t)ncolumns * 2, sizeof(Py_ssize_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *ch = PyList_GET_ITEM(changes, i), *pos, *data, *at_obj;
        Py_ssize_t pos_len, at;
        const char *pos_text;
        if (!PyTuple_Check(ch) || PyTuple_GET_SIZE(ch) < 4 || !PyUnicode_Check(pos = PyTuple_GET_ITEM(ch, 1))
                || !PyBytes_Check(data = PyTuple_GET_ITEM(ch, 2)) || !PyLong_Check(at_obj = PyTuple_GET_ITEM(ch, 3))) {
            PyErr_SetString(PyExc_TypeError, "copy_lines: changes are (op, position, data, row_at) tuples");
            goto done;
        }
        if ((at = PyLong_AsSsize_t(at_obj)) == -1 && PyErr_Occurred())
            goto done;
        if ((pos_text = PyUnicode_AsUTF8AndSize(pos, &pos_len)) == NULL)
            goto done;
        if (line_into(p, p + program.len / 4, ncolumns, (const unsigned char *)PyBytes_AS_STRING(data),
                      PyBytes_GET_SIZE(data), at, &text, &out, spans) < 0
                || text_reserve(&out, pos_len + 5) < 0)
            goto done;
        out.buf[out.len++] = '\t';
        memcpy(out.buf + out.len, pos_text, (size_t)pos_len);
        out.len += pos_len;
        memcpy(out.buf + out.len, "\t\\N\n", 4);
        out.len += 4;
    }
    result = PyBytes_FromStringAndSize(out.buf ? out.buf : "", out.len);
done:
    PyMem_Free(spans);
    PyMem_Free(text.buf);
    PyMem_Free(out.buf);
    PyBuffer_Release(&program);
    return result;
}

/* ---- The change scan (spark_jobs/change_scan.py) --------------------------------------------
 *
 * scan_changes(program, fields, records, start, vprefix, kprefix, db, table, width, data_high,
 *              marker_high, limit, kept, members, consts) -> (next, data_high, changes, copies)
 *
 * The merge task's loop over a partition's records (offset, key, value), from ``start``, for
 * the plain case only: stream changes (op c, u or d) of the topic's own table, framed with one
 * value and one key writer schema (``vprefix``, ``kprefix``: magic and fingerprint), no
 * snapshot window open, below the next window marker (``limit``, None: none).  Each header is
 * located with the header program of contract/codecs/avro_decoder.py (change_scan_program:
 * ``fields`` the name indices of before, after, source, op, position, snapshot_window, and of
 * source's ts_ms, db, table) without building it; a copy (at or below ``data_high``) is
 * counted and passed; every other record becomes a ``_Kept`` (the class of ``members``, its 14
 * slots in field order, filled with ``consts``: schema id, schema, table names, old key, row
 * reader) appended to ``kept``.  The scan stops at the first record it does not take in full
 * (any other case, anything malformed, an ordering error) and returns its index: the caller's
 * Python decides that one, with the same checks and errors as ever. */
enum { F_BEFORE, F_AFTER, F_SOURCE, F_OP, F_POSITION, F_WINDOW, F_TS_MS, F_DB, F_TABLE, F_COUNT };
enum { K_OP, K_ROW, K_POSITION, K_SCHEMA_ID, K_SCHEMA, K_TS_MS, K_OFFSET, K_KEY, K_VALUE, K_TABLE, K_OLD_KEY,
       K_ENVELOPE, K_ROW_READER, K_ROW_AT, K_COUNT };
#define MAX_SLOTS 128

typedef struct {
    Py_ssize_t at;
    const int32_t *node;  /* NULL: not located */
} Slot;

/* The fields of the record node at ``p`` that the program reads or locates: where each value
 * starts and its node, in ``slots`` by name index (the data checked and passed over). */
static int locate(Reader *r, const int32_t *p, Slot *slots, Py_ssize_t nslots) {
    if (need(r, p, 2) < 0 || p[0] != N_RECORD) {
        fail("not a record");
        return -1;
    }
    const int32_t *q = p + 2;
    for (int32_t f = 0; f < p[1]; f++) {
        if (need(r, q, 2) < 0)
            return -1;
        if (q[0] != A_SKIP) {
            if (q[1] < 0 || q[1] >= nslots) {
                fail("a malformed reader program");
                return -1;
            }
            slots[q[1]].at = r->i;
            slots[q[1]].node = q + 2;
        }
        if ((q = skip(r, q + 2, 1)) == NULL)
            return -1;
    }
    return 0;
}

/* The node of a located value, its unions resolved (the reader then at the value). */
static const int32_t *resolved(Reader *r, Slot s) {
    const int32_t *node = s.node;
    r->i = s.at;
    for (int depth = 0; node != NULL && node[0] == N_UNION; depth++)
        node = depth > MAX_DEPTH ? NULL : union_branch(r, node);
    return node;
}

/* A located string: 1 (``*raw``, ``*len``), 0 null, -1 anything else. */
static int slot_text(Reader *r, Slot s, const unsigned char **raw, Py_ssize_t *len) {
    const int32_t *node = s.node == NULL ? NULL : resolved(r, s);
    if (node == NULL || (node[0] != N_NULL && node[0] != N_STRING))
        return -1;
    if (node[0] == N_NULL)
        return 0;
    *len = -1;
    return (*raw = blob(r, len)) == NULL ? -1 : 1;
}

/* Whether a located value is the string ``want``. */
static int slot_is(Reader *r, Slot s, const char *want, Py_ssize_t want_len) {
    const unsigned char *raw = NULL;
    Py_ssize_t len = 0;
    return slot_text(r, s, &raw, &len) == 1 && len == want_len && memcmp(raw, want, (size_t)len) == 0;
}

/* str comparison of two ASCII strings (the positions). */
static int ascii_cmp(const char *a, Py_ssize_t alen, const char *b, Py_ssize_t blen) {
    int c = memcmp(a, b, (size_t)(alen < blen ? alen : blen));
    return c ? c : (alen > blen) - (alen < blen);
}

static PyObject *scan_changes(PyObject *self, PyObject *args) {
    Py_buffer program, vprefix, kprefix, db, table;
    PyObject *fields, *records, *data_high, *marker_high, *limit, *kept, *members, *consts;
    Py_ssize_t start, width, offsets[K_COUNT];
    int32_t field[F_COUNT];
    PyObject *result = NULL, *new_high = NULL;
    /* (the record being read, and the one whose position is the data high, held: nothing
     * here runs Python code that could change the list, but a collection could) */
    PyObject *rec = NULL, *high_rec = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!O!ny*y*y*y*nUUOO!O!O!", &program, &PyTuple_Type, &fields, &PyList_Type, &records,
                          &start, &vprefix, &kprefix, &db, &table, &width, &data_high, &marker_high, &limit,
                          &PyList_Type, &kept, &PyTuple_Type, &members, &PyTuple_Type, &consts))
        return NULL;
    PyTypeObject *kept_type = NULL;
    const char *high, *mhigh, *lim = NULL;
    Py_ssize_t high_len, mhigh_len, lim_len = 0, changes = 0, copies = 0, i = start;
    Py_ssize_t nslots = PyTuple_GET_SIZE(fields) == F_COUNT ? MAX_SLOTS : -1;
    if (program.len % 4 != 0 || program.len == 0 || nslots < 0 || vprefix.len != 10 || kprefix.len != 10
            || PyTuple_GET_SIZE(members) != K_COUNT || PyTuple_GET_SIZE(consts) != 5 || start < 0 || width < 1) {
        PyErr_SetString(PyExc_ValueError, "scan_changes: malformed arguments");
        goto done;
    }
    for (int f = 0; f < F_COUNT; f++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(fields, f));
        if (v == -1 && PyErr_Occurred())
            goto done;
        if (v < -1 || v >= MAX_SLOTS) {
            PyErr_SetString(PyExc_ValueError, "scan_changes: a field index out of range");
            goto done;
        }
        field[f] = (int32_t)v;
    }
    /* Every field but ts_ms is needed (an envelope without them is not scanned). */
    for (int f = 0; f < F_COUNT; f++) {
        if (field[f] < 0 && f != F_TS_MS) {
            PyErr_SetString(PyExc_ValueError, "scan_changes: a change envelope's field is missing");
            goto done;
        }
    }
    /* The _Kept slots: member descriptors of one class, object slots */
    for (int k = 0; k < K_COUNT; k++) {
        PyObject *d = PyTuple_GET_ITEM(members, k);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyErr_SetString(PyExc_TypeError, "scan_changes: members must be a slots class's member descriptors");
            goto done;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        PyTypeObject *owner = ((PyDescrObject *)d)->d_type;
        if (m->type != MEMBER_OBJECT_EX || (m->flags & MEMBER_READONLY) || (kept_type != NULL && owner != kept_type)) {
            PyErr_SetString(PyExc_TypeError, "scan_changes: members must be writable object slots of one class");
            goto done;
        }
        kept_type = owner;
        offsets[k] = m->offset;
    }
    if ((high = PyUnicode_AsUTF8AndSize(data_high, &high_len)) == NULL
            || (mhigh = PyUnicode_AsUTF8AndSize(marker_high, &mhigh_len)) == NULL)
        goto done;
    if (limit != Py_None && (!PyUnicode_Check(limit) || (lim = PyUnicode_AsUTF8AndSize(limit, &lim_len)) == NULL)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "scan_changes: limit must be a str or None");
        goto done;
    }
    const int32_t *prog = (const int32_t *)program.buf, *prog_end = prog + program.len / 4;
    PyObject *c_sid = PyTuple_GET_ITEM(consts, 0), *c_schema = PyTuple_GET_ITEM(consts, 1),
             *c_table = PyTuple_GET_ITEM(consts, 2), *c_old = PyTuple_GET_ITEM(consts, 3),
             *c_reader = PyTuple_GET_ITEM(consts, 4);
    Slot top[MAX_SLOTS], src[MAX_SLOTS];
    memset(top, 0, sizeof(top));
    memset(src, 0, sizeof(src));
    for (; i < PyList_GET_SIZE(records); i++) {
        Py_XSETREF(rec, Py_NewRef(PyList_GET_ITEM(records, i)));
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 3)
            break;
        PyObject *off = PyTuple_GET_ITEM(rec, 0), *kb = PyTuple_GET_ITEM(rec, 1), *vb = PyTuple_GET_ITEM(rec, 2);
        if (vb == Py_None)
            continue;  /* a tombstone: for log compaction, not a change */
        if (!PyBytes_CheckExact(vb) || !PyBytes_CheckExact(kb) || !PyLong_CheckExact(off)
                || PyBytes_GET_SIZE(vb) < 10 || PyBytes_GET_SIZE(kb) < 10
                || memcmp(PyBytes_AS_STRING(vb), vprefix.buf, 10) || memcmp(PyBytes_AS_STRING(kb), kprefix.buf, 10))
            break;
        Reader r = {(const unsigned char *)PyBytes_AS_STRING(vb), PyBytes_GET_SIZE(vb), 10, prog_end, NULL};
        const unsigned char *op, *pos;
        Py_ssize_t op_len, pos_len;
        /* (only the slots read are cleared: one program locates the same ones in every record) */
        for (int f = 0; f < F_COUNT; f++) {
            if (field[f] >= 0)
                top[field[f]].node = src[field[f]].node = NULL;
        }
        if (locate(&r, prog, top, MAX_SLOTS) < 0 || slot_text(&r, top[field[F_OP]], &op, &op_len) != 1 || op_len != 1
                || (op[0] != 'c' && op[0] != 'u' && op[0] != 'd')
                || slot_text(&r, top[field[F_POSITION]], &pos, &pos_len) != 1 || pos_len != width) {
            PyErr_Clear();
            break;
        }
        Py_ssize_t d;
        for (d = 0; d < pos_len && pos[d] >= '0' && pos[d] <= '9'; d++)
            ;
        if (d < pos_len)
            break;
        /* no window: snapshot_window null (a change's) */
        const int32_t *node = top[field[F_WINDOW]].node ? resolved(&r, top[field[F_WINDOW]]) : NULL;
        if (node == NULL || node[0] != N_NULL) {
            PyErr_Clear();
            break;
        }
        /* the topic's own table, from source */
        node = top[field[F_SOURCE]].node ? resolved(&r, top[field[F_SOURCE]]) : NULL;
        if (node == NULL || node[0] != N_RECORD || locate(&r, node, src, MAX_SLOTS) < 0
                || !slot_is(&r, src[field[F_DB]], db.buf, db.len) || !slot_is(&r, src[field[F_TABLE]], table.buf, table.len)) {
            PyErr_Clear();
            break;
        }
        int64_t ts_ms = 0;
        if (field[F_TS_MS] >= 0 && src[field[F_TS_MS]].node != NULL) {
            node = resolved(&r, src[field[F_TS_MS]]);
            if (node == NULL || (node[0] != N_NULL && node[0] != N_LONG)
                    || (node[0] == N_LONG && read_long(&r, &ts_ms) < 0)) {
                PyErr_Clear();
                break;
            }
        }
        Slot image = top[field[op[0] == 'd' ? F_BEFORE : F_AFTER]];
        if (image.node == NULL || image.at >= r.n)
            break;
        int null_image = r.b[image.at] == 0;
        if (null_image && op[0] != 'd')
            break;  /* only a delete has no row: the DBLog rule's error, raised by the caller */
        if (lim != NULL && ascii_cmp((const char *)pos, pos_len, lim, lim_len) > 0)
            break;  /* past the next window marker: the caller pushes it */
        if (ascii_cmp((const char *)pos, pos_len, high, high_len) <= 0) {
            copies++;
            continue;
        }
        if (ascii_cmp((const char *)pos, pos_len, mhigh, mhigh_len) <= 0)
            break;  /* an ordering error, raised by the caller */
        PyObject *obj = kept_type->tp_alloc(kept_type, 0);
        if (obj == NULL)
            goto done;
        PyObject *v[K_COUNT];
        v[K_OP] = PyUnicode_FromStringAndSize((const char *)op, 1);
        v[K_ROW] = Py_NewRef(Py_None);
        v[K_POSITION] = PyUnicode_FromStringAndSize((const char *)pos, pos_len);
        v[K_SCHEMA_ID] = Py_NewRef(c_sid);
        v[K_SCHEMA] = Py_NewRef(c_schema);
        v[K_TS_MS] = PyLong_FromLongLong(ts_ms);
        v[K_OFFSET] = Py_NewRef(off);
        v[K_KEY] = Py_NewRef(kb);
        v[K_VALUE] = Py_NewRef(vb);
        v[K_TABLE] = Py_NewRef(c_table);
        v[K_OLD_KEY] = Py_NewRef(c_old);
        v[K_ENVELOPE] = Py_NewRef(Py_None);
        v[K_ROW_READER] = Py_NewRef(null_image ? Py_None : c_reader);
        v[K_ROW_AT] = null_image ? PyLong_FromLong(0) : PyLong_FromSsize_t(image.at);
        int bad = 0;
        for (int k = 0; k < K_COUNT; k++) {
            bad |= v[k] == NULL;
            *(PyObject **)((char *)obj + offsets[k]) = v[k];  /* (slots of a new object: empty) */
        }
        if (bad || PyList_Append(kept, obj) < 0) {
            Py_DECREF(obj);
            goto done;
        }
        Py_DECREF(obj);
        Py_XSETREF(high_rec, Py_NewRef(rec));
        high = (const char *)pos;  /* (in vb, which high_rec holds) */
        high_len = pos_len;
        changes++;
    }
    new_high = PyUnicode_FromStringAndSize(high, high_len);
    if (new_high != NULL)
        result = Py_BuildValue("nNnn", i, new_high, changes, copies);
done:
    Py_XDECREF(rec);
    Py_XDECREF(high_rec);
    PyBuffer_Release(&program);
    PyBuffer_Release(&vprefix);
    PyBuffer_Release(&kprefix);
    PyBuffer_Release(&db);
    PyBuffer_Release(&table);
    return result;
}

static PyMethodDef methods[] = {
    {"read", read_record, METH_VARARGS, "read(program, names, data, start): one record read by a reader program."},
    {"copy_line", copy_line, METH_VARARGS, "copy_line(program, ncolumns, data, at): a row image's COPY text line."},
    {"copy_lines", copy_lines, METH_VARARGS,
     "copy_lines(program, ncolumns, changes, start, stop): the upserts' stage lines of changes[start:stop]."},
    {"scan_changes", scan_changes, METH_VARARGS,
     "scan_changes(...): the plain stream changes of a partition's records (see spark_jobs/change_scan.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "contract.codecs._avro_reader",
    .m_doc = "The native Avro projection reader (see contract/codecs/avro_decoder.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__avro_reader(void) {
    return PyModule_Create(&module);
}
