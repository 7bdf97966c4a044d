/* The merge task's change scan (spark_jobs/task/decide.py, scan_plain), over records read
 * by the reader of contract/codecs/avro_read.h.
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
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "avro_read.h"

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
    Py_ssize_t start, width;
    descrsetfunc setters[K_COUNT];
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
    PyObject *kept_class = NULL;
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
    /* The Kept slots: member descriptors of one class, each set through the descriptor protocol
     * (its __set__, as ``obj.field = value`` sets it; the class from their __objclass__) */
    for (int k = 0; k < K_COUNT; k++) {
        PyObject *d = PyTuple_GET_ITEM(members, k);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || Py_TYPE(d)->tp_descr_set == NULL) {
            PyErr_SetString(PyExc_TypeError, "scan_changes: members must be a slots class's member descriptors");
            goto done;
        }
        PyObject *owner = PyObject_GetAttrString(d, "__objclass__");
        if (owner == NULL)
            goto done;
        int same = kept_class == NULL || owner == kept_class;
        if (kept_class == NULL)
            kept_class = Py_NewRef(owner);
        Py_DECREF(owner);
        if (!same || !PyType_Check(kept_class)) {
            PyErr_SetString(PyExc_TypeError, "scan_changes: members must be writable object slots of one class");
            goto done;
        }
        setters[k] = Py_TYPE(d)->tp_descr_set;
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
        PyTypeObject *kept_type = (PyTypeObject *)kept_class;
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
            if (v[k] == NULL) {
                bad = 1;
                continue;
            }
            if (!bad && setters[k](PyTuple_GET_ITEM(members, k), obj, v[k]) < 0)
                bad = 1;
            Py_DECREF(v[k]);
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
    Py_XDECREF(kept_class);
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
    {"scan_changes", scan_changes, METH_VARARGS,
     "scan_changes(...): the plain stream changes of a partition's records (see spark_jobs/task/decide.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spark_jobs.task._change_scan",
    .m_doc = "The merge task's change scan (see spark_jobs/task/decide.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__change_scan(void) {
    return PyModule_Create(&module);
}
