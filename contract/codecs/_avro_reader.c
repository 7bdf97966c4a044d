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

#include "avro_read.h"

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
static PyMethodDef methods[] = {
    {"read", read_record, METH_VARARGS, "read(program, names, data, start): one record read by a reader program."},
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
