/* The frame both native row encoders (_binlog_images.c, _select_rows.c) put their columns in:
 * a column's union tags, where each column's encoding lies in the row being written, a NULL
 * written or refused, and the key body cut from the row's encodings (value_code.key_fields). */
#ifndef CDC_ROW_PROGRAM_H
#define CDC_ROW_PROGRAM_H

#include "avro_out.h"

/* A column's ``["null", T]`` union branches (NULL: its type has no null), borrowed from the
 * plan, which the program keeps. */
typedef struct {
    const char *null_tag, *value_tag;
    Py_ssize_t null_len, value_len;
} Tags;

/* A key field: its column, whether the column's union branch is part of it, whether a NULL
 * in it is refused. */
typedef struct {
    int column;
    int with_tag;
    int refuse_null;
} KeyField;

/* Per column of the row being written: where its encoding starts (its union branch's first
 * byte), where its value starts, and whether it is NULL. */
typedef struct {
    Py_ssize_t tag, value;
    int null;
} Span;

/* What every program holds besides its columns: the plan (owning what the columns borrow),
 * the exception class of a refusal, and the key. */
typedef struct {
    PyObject *plan;
    PyObject *refusal;
    int ncolumns, nkey;
    KeyField *key;
} Frame;

static int frame_refuse(const Frame *f) {
    PyErr_SetNone(f->refusal);
    return -1;
}

static int tag_of(PyObject *t, const char **p, Py_ssize_t *n) {
    if (t == Py_None) {
        *p = NULL;
        *n = 0;
        return 0;
    }
    if (!PyBytes_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "a union tag is bytes or None");
        return -1;
    }
    *p = PyBytes_AS_STRING(t);
    *n = PyBytes_GET_SIZE(t);
    return 0;
}

/* The tags of a column spec ``(op, null tag, value tag, *args)``, its op, and its args. */
static PyObject *column_spec(PyObject *spec, int *op, Tags *tags) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 3) {
        PyErr_SetString(PyExc_TypeError, "a column is (op, null tag, value tag, ...)");
        return NULL;
    }
    *op = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if ((*op == -1 && PyErr_Occurred()) || tag_of(PyTuple_GET_ITEM(spec, 1), &tags->null_tag, &tags->null_len) < 0 ||
        tag_of(PyTuple_GET_ITEM(spec, 2), &tags->value_tag, &tags->value_len) < 0)
        return NULL;
    return PyTuple_GetSlice(spec, 3, PyTuple_GET_SIZE(spec));
}

/* The frame of a plan's ``columns`` tuple, ``key`` tuple and ``refusal``. */
static int frame_init(Frame *f, PyObject *plan, PyObject *columns, PyObject *key, PyObject *refusal) {
    f->plan = Py_NewRef(plan);
    f->refusal = Py_NewRef(refusal);
    f->ncolumns = (int)PyTuple_GET_SIZE(columns);
    f->nkey = (int)PyTuple_GET_SIZE(key);
    f->key = PyMem_Calloc(f->nkey ? f->nkey : 1, sizeof(KeyField));
    if (!f->key) {
        PyErr_NoMemory();
        return -1;
    }
    for (int k = 0; k < f->nkey; k++) {
        KeyField *field = &f->key[k];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(key, k), "ipp", &field->column, &field->with_tag, &field->refuse_null))
            return -1;
        if (field->column < 0 || field->column >= f->ncolumns) {
            PyErr_SetString(PyExc_ValueError, "a key field's column is out of range");
            return -1;
        }
    }
    return 0;
}

/* The program's columns, ``size`` bytes each, read from the plan's ``columns`` by ``from``; NULL
 * on error (raised).  Free with PyMem_Free. */
static void *frame_columns(const Frame *f, PyObject *columns, size_t size, int (*from)(void *column, PyObject *spec)) {
    char *out = PyMem_Calloc(f->ncolumns ? f->ncolumns : 1, size);
    if (!out)
        return PyErr_NoMemory();
    for (int i = 0; i < f->ncolumns; i++)
        if (from(out + i * size, PyTuple_GET_ITEM(columns, i)) < 0) {
            PyMem_Free(out);
            return NULL;
        }
    return out;
}

static void frame_clear(Frame *f) {
    PyMem_Free(f->key);
    f->key = NULL;
    Py_CLEAR(f->plan);
    Py_CLEAR(f->refusal);
}

/* A NULL of the column at ``s`` (its null branch), or refused where its type has no null. */
static int put_null(const Frame *f, const Tags *t, Out *row, Span *s) {
    if (!t->null_tag)
        return frame_refuse(f);
    s->tag = row->n;
    if (out_put(row, t->null_tag, t->null_len) < 0)
        return -1;
    s->null = 1;
    s->value = row->n;
    return 0;
}

/* A column's value about to be written at ``s``: its value branch first. */
static int begin_value(const Tags *t, Out *row, Span *s) {
    s->tag = row->n;
    s->null = 0;
    if (t->value_tag && out_put(row, t->value_tag, t->value_len) < 0)
        return -1;
    s->value = row->n;
    return 0;
}

/* A NULL's encoding of a column spec (None: its null branch; bytes: the value a NULL of it
 * is, as a masked column's), into ``*out`` (borrowed from the plan, NULL for None); -1 when
 * it is neither (raised). */
static int null_value_of(PyObject *v, PyObject **out) {
    *out = NULL;
    if (v == Py_None)
        return 0;
    if (!PyBytes_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "a NULL's encoding is bytes or None");
        return -1;
    }
    *out = v;
    return 0;
}

/* A NULL of the column at ``s``: the value ``null_value`` (its value branch first) where the
 * column has one, else its null branch (or refused). */
static int put_null_or_value(const Frame *f, const Tags *t, PyObject *null_value, Out *row, Span *s) {
    if (!null_value)
        return put_null(f, t, row, s);
    if (begin_value(t, row, s) < 0)
        return -1;
    return out_put(row, PyBytes_AS_STRING(null_value), PyBytes_GET_SIZE(null_value));
}

/* The column's converter made its value None after all: what was written of it goes, its null
 * branch instead (or refused). */
static int null_after_all(const Frame *f, const Tags *t, Out *row, Span *s) {
    row->n = s->tag;
    return put_null(f, t, row, s);
}

/* The key body cut from the row's encodings (Py_None without a key), or NULL (raised). */
static PyObject *key_body_of(const Frame *f, const Span *spans, const Out *row, Out *key) {
    if (f->nkey == 0)
        return Py_NewRef(Py_None);
    key->n = 0;
    for (int k = 0; k < f->nkey; k++) {
        const KeyField *field = &f->key[k];
        const Span *s = &spans[field->column];
        if (field->refuse_null && s->null)
            return frame_refuse(f), NULL;
        Py_ssize_t from = field->with_tag ? s->tag : s->value;
        Py_ssize_t to = field->column + 1 < f->ncolumns ? spans[field->column + 1].tag : row->n;
        if (out_put(key, row->b + from, to - from) < 0)
            return NULL;
    }
    return PyBytes_FromStringAndSize(key->b ? key->b : "", key->n);
}

#endif
