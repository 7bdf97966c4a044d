/* Kafka's default partitioner for keyed records, natively (common/kafka/partitioner.py has
 * the same in Python and says what it is for). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The Java client's Utils.murmur2 (seed 0x9747b28c), which librdkafka's murmur2_random
 * partitioner reproduces. */
static uint32_t murmur2(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t i, n4 = length / 4;
    for (i = 0; i < n4; i++) {
        const unsigned char *p = data + 4 * i;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * n4;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *py_murmur2(PyObject *self, PyObject *arg) {
    char *buf;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &buf, &len) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(murmur2((const unsigned char *)buf, len));
}

/* in_partition(keys, count, partition): whether every key (bytes) is where the partitioner
 * puts it among ``count`` partitions: in ``partition``.  A key that is not bytes (None)
 * answers False. */
static PyObject *py_in_partition(PyObject *self, PyObject *args) {
    PyObject *keys, *seq;
    long count, partition;
    Py_ssize_t i, n;
    int ok = 1;
    if (!PyArg_ParseTuple(args, "Oll", &keys, &count, &partition))
        return NULL;
    if (count <= 0) {
        PyErr_SetString(PyExc_ValueError, "the partition count must be positive");
        return NULL;
    }
    seq = PySequence_Fast(keys, "keys must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n && ok; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i); /* borrowed */
        if (!PyBytes_Check(key)) {
            ok = 0;
            break;
        }
        uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        if ((long)((h & 0x7fffffffu) % (uint32_t)count) != partition)
            ok = 0;
    }
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"murmur2", py_murmur2, METH_O, "The Java client's murmur2 of the bytes, as an unsigned 32-bit int."},
    {"in_partition", py_in_partition, METH_VARARGS,
     "Whether every key (bytes) is where Kafka's default partitioner puts it among count partitions."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_partitioner", NULL, -1, methods};

PyMODINIT_FUNC PyInit__partitioner(void) { return PyModule_Create(&module); }
