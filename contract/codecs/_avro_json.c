/* Avro bodies into Kafka Connect JSON records (ConnectJsonWriter.transcode in
 * contract/codecs/connect_json.py): the interpreter of avro_json.h, called from Python.
 *
 * transcode(program, prefix, suffix, body) -> prefix + the JSON payload of body + suffix */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "avro_json.h"

static AjBuf out;   /* (reused: every call holds the GIL throughout) */

static PyObject *transcode(PyObject *self, PyObject *args) {
    Py_buffer prog, prefix, suffix, body;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &prog, &prefix, &suffix, &body))
        return NULL;
    out.n = 0;
    PyObject *result = NULL;
    if (aj_transcode(prog.buf, prog.len, prefix.buf, prefix.len, suffix.buf, suffix.len, body.buf, body.len,
                     &out) == 0)
        result = PyBytes_FromStringAndSize(out.p, out.n);
    if (out.cap > (1 << 20)) {   /* (a rare huge record: its buffer is not kept) */
        PyMem_Free(out.p);
        out.p = NULL;
        out.cap = 0;
    }
    PyBuffer_Release(&prog);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&suffix);
    PyBuffer_Release(&body);
    return result;
}

static PyMethodDef methods[] = {
    {"transcode", transcode, METH_VARARGS,
     "transcode(program, prefix, suffix, body) -> prefix + the JSON payload of the Avro body + suffix"},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro_json",
                                    "Avro bodies into Kafka Connect JSON payloads (avro_json.h).", -1, methods};

PyMODINIT_FUNC PyInit__avro_json(void) {
    return PyModule_Create(&module);
}
