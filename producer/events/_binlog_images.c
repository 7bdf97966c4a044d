/* The native binlog image encoder: the row images of one table map's rows events straight to
 * their Avro key and row bodies, as producer/events/image_encoder.py's generated Python writes
 * them, byte for byte (tests/unit/producer/events/test_image_encoder.py compares both on
 * arbitrary row data, refusals included).
 *
 * Program(plan)(buf) -> [key body or None, row body, key body or None, row body, ...]
 *
 * ``plan`` is (null bytes, columns, key, refusal), compiled by image_encoder.native_plan:
 *
 *   columns: per column (op, null tag or None, value tag or None, *args); the tags are a
 *     ``["null", T]`` union's branches (None: the column's type has no null). Ops:
 *     INT   size, signed, lo, hi, other   a little-endian integer of ``size`` bytes: its
 *           zig-zag varint when lo <= v <= hi, else ``other(v)`` (bytes, or raises)
 *     DECIMAL size, digits, scale, precision   a packed DECIMAL(digits, scale) of ``size`` bytes:
 *           its unscaled integer (contract.conversion_rules.packed_decimal: a group beyond its
 *           digits is refused) as an Avro decimal's bytes, refused at or beyond ``precision``
 *           digits; at most 38 digits (else the plan uses PY)
 *     DATETIME2 fsp, unit   a DATETIME2 as a long of ``unit`` (1 or 1000) microseconds since
 *           1970-01-01 of its wall clock; a zero or invalid date or time is refused
 *     UTF8  length size   a length-prefixed string of UTF-8 bytes (checked), as they are
 *     PY    fn, null value   ``fn(buf, off, reasons) -> (bytes or None, next offset)``: the
 *           column's generated Python (None: the union's null branch); ``null value``: None, or
 *           the encoding a NULL of it takes (its value branch first: a masked column)
 *     SKIP  size, length size, utf8, reader   a column left out of the events, read past and
 *           written as nothing: ``size`` bytes (size >= 0), or a little-endian length of
 *           ``length size`` bytes and that many (checked to be UTF-8 where ``utf8``), or
 *           ``reader(buf, off, reasons) -> (value, next offset)`` (the decoder's, its value dropped)
 *   key: per key field (column index, with its union branch, refused when NULL)
 *   refusal: the exception class raised for a row the values' way must take (NotFast)
 *
 * Truncated or overrunning row data raises ValueError.  Everything is bounds checked.
 */
#include "row_program.h"
#include "type_rules.h"   /* generated from contract/conversion_rules.py */

enum { OP_INT = 1, OP_DECIMAL = 2, OP_DATETIME2 = 3, OP_UTF8 = 4, OP_PY = 5, OP_SKIP = 6 };

typedef struct {
    int op;
    Tags tags;
    int size, is_signed;                 /* INT; size also DECIMAL, UTF8 and SKIP (length size) */
    int64_t lo, hi;
    PyObject *fn;                        /* INT: other(v); PY: fn(buf, off, reasons); SKIP: reader or None */
    PyObject *null_value;                /* PY: a NULL's encoding, or None */
    int fixed, utf8;                     /* SKIP */
    int digits, scale;                   /* DECIMAL */
    unsigned __int128 precision_limit;
    int fsp, fsp_size, unit;             /* DATETIME2 */
} Column;

typedef struct {
    PyObject_HEAD
    Frame f;
    int null_bytes;
    Column *columns;
} Program;

static void *refuse(Program *prog) {
    frame_refuse(&prog->f);
    return NULL;
}

static void *overrun(void) {
    PyErr_SetString(PyExc_ValueError, "row data overrun");
    return NULL;
}

static uint64_t be_uint(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The length-prefixed string at ``*at`` (a little-endian length of ``size`` bytes, then that
 * many), checked to be UTF-8 where ``utf8``: its length in ``*n``, ``*at`` moved to its bytes;
 * 0, or -1 on error (raised). */
static int length_prefixed(const unsigned char *b, Py_ssize_t end, int size, int utf8, Py_ssize_t *at, Py_ssize_t *n) {
    if (*at + size > end)
        return overrun(), -1;
    Py_ssize_t len = 0;
    for (int i = size - 1; i >= 0; i--)
        len = len << 8 | b[*at + i];
    *at += size;
    if (*at + len > end)
        return overrun(), -1;
    if (utf8 && !is_utf8(b + *at, len)) {
        PyErr_SetString(PyExc_ValueError, "a string is not UTF-8");
        return -1;
    }
    *n = len;
    return 0;
}

/* Past the non-NULL value of SKIP column ``c`` at ``*off``: 0, or -1 on error. */
static int skip_value(Column *c, PyObject *buf, const unsigned char *b, Py_ssize_t end, Py_ssize_t *off,
                      PyObject **reasons) {
    Py_ssize_t at = *off;
    if (c->fixed >= 0) {
        if (at + c->fixed > end)
            return overrun(), -1;
        *off = at + c->fixed;
        return 0;
    }
    if (c->size) {
        Py_ssize_t n;
        if (length_prefixed(b, end, c->size, c->utf8, &at, &n) < 0)
            return -1;
        *off = at + n;
        return 0;
    }
    if (*reasons == NULL && !(*reasons = PyDict_New()))
        return -1;
    PyObject *r = PyObject_CallFunction(c->fn, "OnO", buf, at, *reasons);
    if (!r)
        return -1;
    Py_ssize_t next = -1;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2)
        next = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    else
        PyErr_SetString(PyExc_TypeError, "a reader gives (value, offset)");
    Py_DECREF(r);
    if (next == -1 && PyErr_Occurred())
        return -1;
    if (next < at || next > end)
        return overrun(), -1;
    *off = next;
    return 0;
}

/* One non-NULL value of column ``c`` at ``*off`` into ``o`` (no union branch); 1 when a PY
 * column gave the union's null branch instead, 0 when written, -1 on error. */
static int encode_value(Program *prog, Column *c, PyObject *buf, const unsigned char *b, Py_ssize_t end,
                        Py_ssize_t *off, PyObject **reasons, Out *o) {
    Py_ssize_t at = *off;
    switch (c->op) {
    case OP_INT: {
        if (at + c->size > end)
            return overrun(), -1;
        uint64_t u = 0;
        for (int i = c->size - 1; i >= 0; i--)
            u = u << 8 | b[at + i];
        *off = at + c->size;
        int64_t v;
        int fits;
        if (c->is_signed) {
            int shift = 64 - 8 * c->size;
            v = shift ? (int64_t)(u << shift) >> shift : (int64_t)u;
            fits = c->lo <= v && v <= c->hi;
        } else {
            v = (int64_t)u;
            fits = u <= (uint64_t)INT64_MAX && c->lo <= v && v <= c->hi;
        }
        if (fits)
            return out_long(o, v);
        PyObject *pv = c->is_signed ? PyLong_FromLongLong(v) : PyLong_FromUnsignedLongLong(u);
        if (!pv)
            return -1;
        PyObject *y = PyObject_CallOneArg(c->fn, pv);
        Py_DECREF(pv);
        if (!y)
            return -1;
        if (!PyBytes_Check(y)) {
            Py_DECREF(y);
            PyErr_SetString(PyExc_TypeError, "an integer's encoding is not bytes");
            return -1;
        }
        int r = out_put(o, PyBytes_AS_STRING(y), PyBytes_GET_SIZE(y));
        Py_DECREF(y);
        return r;
    }
    case OP_DECIMAL: {   /* contract.conversion_rules.packed_decimal */
        if (at + c->size > end)
            return overrun(), -1;
        __int128 v;
        if (!rule_packed_decimal(b, at + c->size, at, c->digits, c->scale, &v))
            return refuse(prog), -1;
        *off = at + c->size;
        unsigned __int128 magnitude = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v : (unsigned __int128)v;
        if (magnitude >= c->precision_limit)
            return refuse(prog), -1;
        return out_decimal(o, magnitude, v < 0);
    }
    case OP_DATETIME2: {   /* contract.conversion_rules.datetime2_units */
        if (at + 5 + c->fsp_size > end)
            return overrun(), -1;
        int64_t v;
        if (!rule_datetime2_units((int64_t)be_uint(b + at, 5), (int64_t)be_uint(b + at + 5, c->fsp_size), c->fsp,
                                  c->unit, &v))
            return refuse(prog), -1;
        *off = at + 5 + c->fsp_size;
        return out_long(o, v);
    }
    case OP_UTF8: {
        Py_ssize_t n;
        if (length_prefixed(b, end, c->size, 1, &at, &n) < 0)
            return -1;
        *off = at + n;
        if (out_long(o, (int64_t)n) < 0)
            return -1;
        return out_put(o, b + at, n);
    }
    case OP_PY: {
        if (*reasons == NULL && !(*reasons = PyDict_New()))
            return -1;
        PyObject *r = PyObject_CallFunction(c->fn, "OnO", buf, at, *reasons);
        if (!r)
            return -1;
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_TypeError, "a column function gives (bytes or None, offset)");
            return -1;
        }
        PyObject *y = PyTuple_GET_ITEM(r, 0);
        Py_ssize_t next = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
        if (next == -1 && PyErr_Occurred()) {
            Py_DECREF(r);
            return -1;
        }
        if (next < at || next > end) {
            Py_DECREF(r);
            return overrun(), -1;
        }
        *off = next;
        int result;
        if (y == Py_None)
            result = 1;
        else if (PyBytes_Check(y))
            result = out_put(o, PyBytes_AS_STRING(y), PyBytes_GET_SIZE(y));
        else {
            PyErr_SetString(PyExc_TypeError, "a column function gives bytes or None");
            result = -1;
        }
        Py_DECREF(r);
        return result;
    }
    }
    PyErr_SetString(PyExc_SystemError, "unknown column op");
    return -1;
}

static PyObject *program_call(Program *prog, PyObject *args, PyObject *kwargs) {
    PyObject *buf;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!", &PyBytes_Type, &buf))
        return NULL;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t end = PyBytes_GET_SIZE(buf), off = 0;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    PyObject *reasons = NULL;
    Out row = {NULL, 0, 0}, key = {NULL, 0, 0};
    Span *spans = PyMem_Malloc(sizeof(Span) * (prog->f.ncolumns ? prog->f.ncolumns : 1));
    if (!spans) {
        PyErr_NoMemory();
        goto error;
    }
    while (off < end) {
        if (off + prog->null_bytes > end) {
            overrun();
            goto error;
        }
        const unsigned char *nulls = b + off;
        off += prog->null_bytes;
        row.n = 0;
        for (int i = 0; i < prog->f.ncolumns; i++) {
            Column *c = &prog->columns[i];
            Span *s = &spans[i];
            int null = nulls[i >> 3] >> (i & 7) & 1;
            if (c->op == OP_SKIP) {   /* left out: nothing written (the next column starts here) */
                s->tag = s->value = row.n;
                s->null = 0;
                if (!null && skip_value(c, buf, b, end, &off, &reasons) < 0)
                    goto error;
                continue;
            }
            if (null) {
                if (put_null_or_value(&prog->f, &c->tags, c->null_value, &row, s) < 0)
                    goto error;
                continue;
            }
            if (begin_value(&c->tags, &row, s) < 0)
                goto error;
            int r = encode_value(prog, c, buf, b, end, &off, &reasons, &row);
            if (r < 0 || (r == 1 && null_after_all(&prog->f, &c->tags, &row, s) < 0))
                goto error;
        }
        PyObject *key_body = key_body_of(&prog->f, spans, &row, &key);
        if (!key_body)
            goto error;
        int failed = PyList_Append(out, key_body);
        Py_DECREF(key_body);
        if (failed)
            goto error;
        PyObject *row_body = PyBytes_FromStringAndSize(row.b ? row.b : "", row.n);
        if (!row_body)
            goto error;
        failed = PyList_Append(out, row_body);
        Py_DECREF(row_body);
        if (failed)
            goto error;
    }
    if (off != end) {
        overrun();
        goto error;
    }
    PyMem_Free(spans);
    PyMem_Free(row.b);
    PyMem_Free(key.b);
    Py_XDECREF(reasons);
    return out;
error:
    PyMem_Free(spans);
    PyMem_Free(row.b);
    PyMem_Free(key.b);
    Py_XDECREF(reasons);
    Py_DECREF(out);
    return NULL;
}

static unsigned __int128 ten_to(int digits) {
    unsigned __int128 v = 1;
    while (digits-- > 0)
        v *= 10;
    return v;
}

static int column_from(void *column, PyObject *spec) {
    Column *c = column;
    PyObject *a = column_spec(spec, &c->op, &c->tags);
    if (!a)
        return -1;
    int ok = 0;
    switch (c->op) {
    case OP_INT: {
        long long lo, hi;
        ok = PyArg_ParseTuple(a, "iiLLO", &c->size, &c->is_signed, &lo, &hi, &c->fn) && c->size >= 1 &&
             c->size <= 8;
        c->lo = lo;
        c->hi = hi;
        break;
    }
    case OP_DECIMAL: {
        int precision;
        ok = PyArg_ParseTuple(a, "iiii", &c->size, &c->digits, &c->scale, &precision) && c->size >= 1 &&
             c->digits >= 1 && c->digits <= 38 && c->scale >= 0 && c->scale <= c->digits && precision >= 1 &&
             precision <= 38;
        c->precision_limit = ten_to(precision);
        break;
    }
    case OP_DATETIME2:
        ok = PyArg_ParseTuple(a, "ii", &c->fsp, &c->unit) && c->fsp >= 0 && c->fsp <= 6 &&
             (c->unit == 1 || c->unit == 1000);
        c->fsp_size = (c->fsp + 1) / 2;
        break;
    case OP_UTF8:
        ok = PyArg_ParseTuple(a, "i", &c->size) && c->size >= 1 && c->size <= 4;
        break;
    case OP_PY: {
        PyObject *null_value;
        ok = PyArg_ParseTuple(a, "OO", &c->fn, &null_value) && null_value_of(null_value, &c->null_value) == 0;
        break;
    }
    case OP_SKIP: {
        PyObject *reader;
        ok = PyArg_ParseTuple(a, "iipO", &c->fixed, &c->size, &c->utf8, &reader) && c->size >= 0 && c->size <= 4 &&
             (c->fixed >= 0 || c->size > 0 || PyCallable_Check(reader));
        c->fn = reader;
        break;
    }
    default:
        PyErr_SetString(PyExc_ValueError, "unknown column op");
    }
    Py_DECREF(a);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a column's arguments are out of range");
        return -1;
    }
    return 0;
}

static PyObject *program_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *plan, *columns, *key, *refusal;
    int null_bytes;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &plan))
        return NULL;
    if (!PyArg_ParseTuple(plan, "iO!O!O", &null_bytes, &PyTuple_Type, &columns, &PyTuple_Type, &key, &refusal))
        return NULL;
    Program *prog = (Program *)type->tp_alloc(type, 0);
    if (!prog)
        return NULL;
    if (frame_init(&prog->f, plan, columns, key, refusal) < 0)   /* (the plan keeps what the columns borrow) */
        goto error;
    prog->null_bytes = null_bytes;
    if (null_bytes != (prog->f.ncolumns + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "the null bitmap's size is not the columns'");
        goto error;
    }
    prog->columns = frame_columns(&prog->f, columns, sizeof(Column), column_from);
    if (!prog->columns)
        goto error;
    return (PyObject *)prog;
error:
    Py_DECREF(prog);
    return NULL;
}

static void program_dealloc(Program *prog) {
    PyMem_Free(prog->columns);
    frame_clear(&prog->f);
    Py_TYPE(prog)->tp_free((PyObject *)prog);
}

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "producer.events._binlog_images.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Program(plan)(row data) -> [key body or None, row body, ...]",
    .tp_new = program_new,
    .tp_dealloc = (destructor)program_dealloc,
    .tp_call = (ternaryfunc)program_call,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_binlog_images",
                                    "Binlog row images straight to Avro bodies (image_encoder.native_plan).", -1, NULL};

PyMODINIT_FUNC PyInit__binlog_images(void) {
    if (PyType_Ready(&ProgramType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "INT", OP_INT);
    PyModule_AddIntConstant(m, "DECIMAL", OP_DECIMAL);
    PyModule_AddIntConstant(m, "DATETIME2", OP_DATETIME2);
    PyModule_AddIntConstant(m, "UTF8", OP_UTF8);
    PyModule_AddIntConstant(m, "PY", OP_PY);
    PyModule_AddIntConstant(m, "SKIP", OP_SKIP);
    return m;
}
