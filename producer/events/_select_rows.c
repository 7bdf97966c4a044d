/* The native SELECT row encoder: a snapshot chunk's row, as MySQL's text protocol sends it,
 * straight to its Avro key and row bodies, as producer/events/select_encoder.py's generated
 * Python writes them (tests/unit/producer/events/test_select_encoder.py compares both on
 * arbitrary bytes: wherever this gives bodies they are the generated Python's).
 *
 * Program(plan)(payload) -> (key body or None, row body)
 *
 * ``plan`` is (columns, key, refusal), compiled by select_encoder.native_plan:
 *
 *   columns: per column (op, null tag or None, value tag or None, *args); the tags are a
 *     ``["null", T]`` union's branches (None: the column's type has no null). Ops:
 *     INT   lo, hi, other   an integer's text ([-]digits): its zig-zag varint when
 *           lo <= v <= hi, else ``other(v)`` (bytes, or raises)
 *     DECIMAL scale, precision   a DECIMAL's text ([-]digits, then a point and ``scale``
 *           digits): its unscaled integer as an Avro decimal's bytes, refused at or beyond
 *           ``precision`` digits (at most 38)
 *     DATETIME unit   ``YYYY-MM-DD hh:mm:ss[.f{1,6}]`` as a long of ``unit`` (1 or 1000)
 *           microseconds since 1970-01-01
 *     DATE  ``YYYY-MM-DD`` as an int of days since 1970-01-01
 *     UTF8  the text's bytes, checked to be UTF-8, as they are
 *     PY    fn, null value   ``fn(text) -> bytes or None``: the column's generated Python
 *           (None: the union's null branch); ``null value``: None, or the encoding a NULL of
 *           it takes (its value branch first: a masked column)
 *   key: per key field (column index, with its union branch, refused when NULL)
 *   refusal: the exception class raised for a row the values' way must take (NotFast)
 *
 * The texts' rules (integers, DECIMALs, DATEs, DATETIMEs) are contract/conversion_rules.py's,
 * which the generated Python runs too: a text one refuses the other refuses (a sign, a space, an
 * underscore in a number: the values' way gives that row's record).  A payload that is not one
 * row of these columns raises ValueError.
 */
#include "row_program.h"
#include "type_rules.h"   /* generated from contract/conversion_rules.py */

enum { OP_INT = 1, OP_DECIMAL = 2, OP_DATETIME = 3, OP_DATE = 4, OP_UTF8 = 5, OP_PY = 6 };
enum { NULL_COLUMN = 251, U16 = 252, U24 = 253, U64 = 254 };

typedef struct {
    int op;
    Tags tags;
    int64_t lo, hi;                      /* INT */
    PyObject *fn;                        /* INT: other(v); PY: fn(text) */
    PyObject *null_value;                /* PY: a NULL's encoding (borrowed from the plan), or NULL */
    int scale;                           /* DECIMAL */
    unsigned __int128 precision_limit;
    int unit;                            /* DATETIME */
} Column;

typedef struct {
    PyObject_HEAD
    Frame f;
    Column *columns;
} Program;

static int refuse(Program *prog) {
    return frame_refuse(&prog->f);
}

static int encode_value(Program *prog, Column *c, const unsigned char *s, Py_ssize_t n, Out *o) {
    switch (c->op) {
    case OP_INT: {
        int64_t v;
        if (!rule_int_text(s, n, &v))   /* contract.conversion_rules.int_text */
            return refuse(prog);
        if (c->lo <= v && v <= c->hi)
            return out_long(o, v);
        PyObject *pv = PyLong_FromLongLong(v);
        if (!pv)
            return -1;
        PyObject *y = PyObject_CallOneArg(c->fn, pv);
        Py_DECREF(pv);
        if (!y)
            return -1;
        int r = PyBytes_Check(y) ? out_put(o, PyBytes_AS_STRING(y), PyBytes_GET_SIZE(y)) : -1;
        if (r < 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "an integer's encoding is not bytes");
        Py_DECREF(y);
        return r;
    }
    case OP_DECIMAL: {   /* contract.conversion_rules.decimal_text */
        __int128 v;
        if (!rule_decimal_text(s, n, c->scale, &v))
            return refuse(prog);
        unsigned __int128 magnitude = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v : (unsigned __int128)v;
        if (magnitude >= c->precision_limit)
            return refuse(prog);
        return out_decimal(o, magnitude, v < 0);
    }
    case OP_DATETIME: {   /* contract.conversion_rules.datetime_text_units */
        int64_t v;
        if (!rule_datetime_text_units(s, n, c->unit, &v))
            return refuse(prog);
        return out_long(o, v);
    }
    case OP_DATE: {   /* contract.conversion_rules.date_text_days */
        int64_t days;
        if (!rule_date_text_days(s, n, &days))
            return refuse(prog);
        return out_long(o, days);
    }
    case OP_UTF8:
        if (!is_utf8(s, n)) {
            PyErr_SetString(PyExc_ValueError, "a string is not UTF-8");
            return -1;
        }
        if (out_long(o, (int64_t)n) < 0)
            return -1;
        return out_put(o, s, n);
    case OP_PY: {
        PyObject *text = PyBytes_FromStringAndSize((const char *)s, n);
        if (!text)
            return -1;
        PyObject *y = PyObject_CallOneArg(c->fn, text);
        Py_DECREF(text);
        if (!y)
            return -1;
        int r;
        if (y == Py_None)
            r = 1;
        else if (PyBytes_Check(y))
            r = out_put(o, PyBytes_AS_STRING(y), PyBytes_GET_SIZE(y));
        else {
            PyErr_SetString(PyExc_TypeError, "a column function gives bytes or None");
            r = -1;
        }
        Py_DECREF(y);
        return r;
    }
    }
    PyErr_SetString(PyExc_SystemError, "unknown column op");
    return -1;
}

static PyObject *bad_payload(void) {
    PyErr_SetString(PyExc_ValueError, "the row has more or fewer bytes than its columns");
    return NULL;
}

/* The bodies of one row (``payload``) into ``row`` and ``key``; NULL on error (raised). */
static PyObject *encode_row(Program *prog, const unsigned char *b, Py_ssize_t end, Span *spans, Out *row, Out *key) {
    Py_ssize_t p = 0;
    row->n = 0;
    for (int i = 0; i < prog->f.ncolumns; i++) {
        Column *c = &prog->columns[i];
        Span *s = &spans[i];
        if (p >= end)
            return bad_payload();
        Py_ssize_t n = b[p];
        if (n == NULL_COLUMN) {
            p += 1;
            if (put_null_or_value(&prog->f, &c->tags, c->null_value, row, s) < 0)
                return NULL;
            continue;
        }
        if (n < NULL_COLUMN) {
            p += 1;
        } else {
            int width = n == U16 ? 2 : n == U24 ? 3 : 8;
            if (p + 1 + width > end)
                return bad_payload();
            uint64_t len = 0;
            for (int k = width; k >= 1; k--)
                len = len << 8 | b[p + k];
            if (len > (uint64_t)(end - p))
                return bad_payload();
            n = (Py_ssize_t)len;
            p += 1 + width;
        }
        if (p + n > end)
            return bad_payload();
        if (begin_value(&c->tags, row, s) < 0)
            return NULL;
        int r = encode_value(prog, c, b + p, n, row);
        p += n;
        if (r < 0 || (r == 1 && null_after_all(&prog->f, &c->tags, row, s) < 0))
            return NULL;
    }
    if (p != end)
        return bad_payload();
    PyObject *key_body = key_body_of(&prog->f, spans, row, key);
    if (!key_body)
        return NULL;
    PyObject *row_body = PyBytes_FromStringAndSize(row->b ? row->b : "", row->n);
    if (!row_body) {
        Py_DECREF(key_body);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(2, key_body, row_body);
    Py_DECREF(key_body);
    Py_DECREF(row_body);
    return out;
}

static PyObject *program_call(Program *prog, PyObject *args, PyObject *kwargs) {
    PyObject *payload;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!", &PyBytes_Type, &payload))
        return NULL;
    Span *spans = PyMem_Malloc(sizeof(Span) * (prog->f.ncolumns ? prog->f.ncolumns : 1));
    if (!spans)
        return PyErr_NoMemory();
    char row_space[512], key_space[128];   /* most rows fit: no allocation */
    Out row = {row_space, 0, sizeof row_space, row_space}, key = {key_space, 0, sizeof key_space, key_space};
    PyObject *out = encode_row(prog, (const unsigned char *)PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload),
                               spans, &row, &key);
    if (row.b != row_space)
        PyMem_Free(row.b);
    if (key.b != key_space)
        PyMem_Free(key.b);
    PyMem_Free(spans);
    return out;
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
        ok = PyArg_ParseTuple(a, "LLO", &lo, &hi, &c->fn);
        c->lo = lo;
        c->hi = hi;
        break;
    }
    case OP_DECIMAL: {
        int precision;
        ok = PyArg_ParseTuple(a, "ii", &c->scale, &precision) && c->scale >= 0 && precision >= 1 && precision <= 38;
        c->precision_limit = 1;
        for (int i = 0; ok && i < precision; i++)
            c->precision_limit *= 10;
        break;
    }
    case OP_DATETIME:
        ok = PyArg_ParseTuple(a, "i", &c->unit) && (c->unit == 1 || c->unit == 1000);
        break;
    case OP_DATE:
    case OP_UTF8:
        ok = PyTuple_GET_SIZE(a) == 0;
        break;
    case OP_PY: {
        PyObject *null_value;
        ok = PyArg_ParseTuple(a, "OO", &c->fn, &null_value) && null_value_of(null_value, &c->null_value) == 0;
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
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &plan))
        return NULL;
    if (!PyArg_ParseTuple(plan, "O!O!O", &PyTuple_Type, &columns, &PyTuple_Type, &key, &refusal))
        return NULL;
    Program *prog = (Program *)type->tp_alloc(type, 0);
    if (!prog)
        return NULL;
    if (frame_init(&prog->f, plan, columns, key, refusal) < 0)   /* (the plan keeps what the columns borrow) */
        goto error;
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
    .tp_name = "producer.events._select_rows.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Program(plan)(row payload) -> (key body or None, row body)",
    .tp_new = program_new,
    .tp_dealloc = (destructor)program_dealloc,
    .tp_call = (ternaryfunc)program_call,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_select_rows",
                                    "SELECT rows straight to Avro bodies (select_encoder.native_plan).", -1, NULL};

PyMODINIT_FUNC PyInit__select_rows(void) {
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
    PyModule_AddIntConstant(m, "DATETIME", OP_DATETIME);
    PyModule_AddIntConstant(m, "DATE", OP_DATE);
    PyModule_AddIntConstant(m, "UTF8", OP_UTF8);
    PyModule_AddIntConstant(m, "PY", OP_PY);
    return m;
}
