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
 *   ARRAY item-node-length item-node | MAP value-node-length value-node (skipped only)
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

/* The union branch node for branch ``k`` of the union at ``p``. */
static const int32_t *branch_node(const int32_t *p, int32_t k) {
    p += 2;
    for (int32_t j = 0; j < k; j++)
        p += 1 + p[0];
    return p + 1;
}

static const int32_t *skip(Reader *r, const int32_t *p, int depth, int dry);
static const int32_t *value(Reader *r, const int32_t *p, PyObject **out, int depth);

/* The node after the one at ``p`` (the program walked, no data read). */
static const int32_t *node_after(Reader *r, const int32_t *p, int depth) {
    return skip(r, p, depth, 1);
}

/* Past a value of the node at ``p`` in the data; with ``dry``, only past the node in the program. */
static const int32_t *skip(Reader *r, const int32_t *p, int depth, int dry) {
    int64_t n;
    if (depth > MAX_DEPTH || need(r, p, 1) < 0)
        return fail("a malformed reader program");
    switch (p[0]) {
    case N_NULL:
        return p + 1;
    case N_BOOL:
        return !dry && advance(r, 1) < 0 ? NULL : p + 1;
    case N_LONG: case N_ENUM:
        return !dry && skip_long(r) < 0 ? NULL : p + 1;
    case N_FLOAT:
        return !dry && advance(r, 4) < 0 ? NULL : p + 1;
    case N_DOUBLE:
        return !dry && advance(r, 8) < 0 ? NULL : p + 1;
    case N_BYTES: case N_STRING:
        if (!dry && (read_long(r, &n) < 0 || advance(r, n) < 0))
            return NULL;
        return p + 1;
    case N_FIXED:
        if (need(r, p, 2) < 0 || (!dry && advance(r, p[1]) < 0))
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
            q = skip(r, q + 2, depth + 1, dry);
            if (q == NULL)
                return NULL;
        }
        return q;
    }
    case N_UNION: {
        int32_t k;
        const int32_t *after = p + 2;
        if (need(r, p, 2) < 0)
            return NULL;
        for (int32_t j = 0; j < p[1]; j++) {  /* each branch: its length, then its node */
            if (need(r, after, 1) < 0 || after[0] < 1 || need(r, after + 1, after[0]) < 0)
                return fail("a malformed reader program");
            after += 1 + after[0];
        }
        if (dry)
            return after;
        if (branch_of(r, p[1], &k) < 0)
            return NULL;
        return skip(r, branch_node(p, k), depth + 1, 0) == NULL ? NULL : after;
    }
    case N_ARRAY: case N_MAP: {
        if (need(r, p, 2) < 0 || p[1] < 1 || need(r, p + 2, p[1]) < 0)
            return fail("a malformed reader program");
        const int32_t *after = p + 2 + p[1];
        if (dry)
            return after;
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
            for (int64_t j = 0; j < n; j++) {
                if (p[0] == N_MAP) {
                    int64_t len;
                    if (read_long(r, &len) < 0 || advance(r, len) < 0)
                        return NULL;
                }
                if (skip(r, p + 2, depth + 1, 0) == NULL)
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
    case N_FLOAT: {
        float f;
        if (r->n - r->i < 4)
            return fail("record too short");
        memcpy(&f, r->b + r->i, 4);  /* (little-endian machines only: see native_program) */
        r->i += 4;
        *out = PyFloat_FromDouble((double)f);
        return *out == NULL ? NULL : p + 1;
    }
    case N_DOUBLE: {
        double d;
        if (r->n - r->i < 8)
            return fail("record too short");
        memcpy(&d, r->b + r->i, 8);
        r->i += 8;
        *out = PyFloat_FromDouble(d);
        return *out == NULL ? NULL : p + 1;
    }
    case N_BYTES: case N_STRING: {
        Py_ssize_t at;
        if (read_long(r, &n) < 0)
            return NULL;
        at = r->i;
        if (advance(r, n) < 0)
            return NULL;
        *out = p[0] == N_STRING ? PyUnicode_DecodeUTF8((const char *)r->b + at, (Py_ssize_t)n, NULL)
                                : PyBytes_FromStringAndSize((const char *)r->b + at, (Py_ssize_t)n);
        return *out == NULL ? NULL : p + 1;
    }
    case N_FIXED: {
        Py_ssize_t at = r->i;
        if (need(r, p, 2) < 0 || advance(r, p[1]) < 0)
            return NULL;
        *out = PyBytes_FromStringAndSize((const char *)r->b + at, p[1]);
        return *out == NULL ? NULL : p + 2;
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
                q = skip(r, q + 2, depth + 1, 0);
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
                q = v == NULL ? NULL : skip(r, q + 2, depth + 1, 0);
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
        int32_t k;
        const int32_t *after = node_after(r, p, depth);
        if (after == NULL || branch_of(r, p[1], &k) < 0)
            return NULL;
        return value(r, branch_node(p, k), out, depth + 1) == NULL ? NULL : after;
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
    .m_name = "contract._avro_reader",
    .m_doc = "The native Avro projection reader (see contract/avro_decoder.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__avro_reader(void) {
    return PyModule_Create(&module);
}
