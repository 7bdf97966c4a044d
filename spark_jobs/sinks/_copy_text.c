/* COPY text lines of row images (spark_jobs/sinks/copy_text.py), read from their Avro bodies
 * by the reader of contract/codecs/avro_read.h: the PostgreSQL sink's own encoder.
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
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "avro_read.h"
#include "type_codes.h" /* the T_ codes: written by setup.py from contract/type_table.py */
#include "type_rules.h" /* the calendar rules: written by setup.py from contract/conversion_rules.py */
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

/* YYYY-MM-DD of a day count since 1970-01-01 (years 1..9999, else ValueError):
 * contract.conversion_rules.civil_date. */
static int text_date(Text *t, int64_t days) {
    int64_t ymd;
    if (!rule_civil_date(days, &ymd)) {
        PyErr_Format(PyExc_ValueError, "date %lld days from 1970-01-01 is outside years 1..9999", (long long)days);
        return -1;
    }
    char out[32];
    snprintf(out, sizeof out, "%04d-%02d-%02d", (int)(ymd / 10000), (int)(ymd / 100 % 100), (int)(ymd % 100));
    return text_add(t, out, 10);
}

/* [-]H:MM:SS.ffffff of a count of microseconds (times ``scale``), hours at least two digits. */
static int text_time(Text *t, int64_t v, unsigned scale) {
    __int128 fields = rule_time_fields(v, scale);   /* contract.conversion_rules.time_fields */
    unsigned __int128 f = fields < 0 ? (unsigned __int128)0 - (unsigned __int128)fields : (unsigned __int128)fields;
    char tail[16];
    if (text_unsigned(t, fields < 0 ? "-" : "", (unsigned long long)(f / 10000000000ULL), 2) < 0)
        return -1;
    snprintf(tail, sizeof tail, ":%02llu:%02llu.%06llu", (unsigned long long)(f / 100000000 % 100),
             (unsigned long long)(f / 1000000 % 100), (unsigned long long)(f % 1000000));
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
static PyMethodDef methods[] = {
    {"copy_line", copy_line, METH_VARARGS, "copy_line(program, ncolumns, data, at): a row image's COPY text line."},
    {"copy_lines", copy_lines, METH_VARARGS,
     "copy_lines(program, ncolumns, changes, start, stop): the upserts' stage lines of changes[start:stop]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spark_jobs.sinks._copy_text",
    .m_doc = "COPY text lines of row images (see spark_jobs/sinks/copy_text.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__copy_text(void) {
    return PyModule_Create(&module);
}
