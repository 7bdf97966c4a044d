/* The native row emitter: the change events of one binlog rows event whose row images were
 * encoded in the binlog reader process (EncodedImages), their envelopes joined around the
 * bodies and each record handed to librdkafka, without a Python call per record.
 *
 * The records are the ones producer/events/builder.py's EventBuilder._fast_records gives for
 * the same rows, in the same order (tests/unit/producer/test_row_emitter.py reads them back
 * from Kafka against the Python path), each produced as KafkaWriter.produce_all produces it:
 * key, value (None for a tombstone), the ``cdc.position`` header, the topic's partitioner.
 *
 * The client is confluent-kafka's own Producer (its librdkafka handle, so transactions,
 * flushes, polls and every setting stay confluent-kafka's): row_emitter.py finds the
 * librdkafka that confluent-kafka loaded and checks its version, and Emitter() checks that
 * the handle it reads is the producer's (rd_kafka_opaque of it is the Producer object, as
 * confluent-kafka sets it).  Each record carries confluent-kafka's per-message state (its
 * Producer object and the delivery callback): a failed delivery reaches the callback, as
 * for a record produced through Producer.produce.
 *
 * Emitter(producer, librdkafka path, on_delivery)
 * Emitter.rows(topic, key header, parts, bodies, kind, keyed, start, stop, skip up to,
 *              tombstones, skip records[, first sequence]) -> (records produced, change events
 *              produced, done)
 *
 *   parts: (before absent, before present, after absent, after present, middle, op c, op u,
 *          op d, end, event digits): the constant bytes around a record's variable fields (the
 *          before and after parts end with the union's branch), and the position's first 20
 *          digits; a record's value is before part + before + after part + after + middle +
 *          source.row (zig-zag varint) + op part + the position's last 10 digits + end
 *   bodies: EncodedImages.bodies; kind 0 insert, 1 update, 2 delete (row i at sequences 2i and
 *          2i + 1, source.row i) -- or kind 3, a snapshot chunk's rows (EncodedRows.bodies:
 *          (key, row) pairs; row i at sequence ``first sequence`` + i, source.row 0, the op
 *          part in every op's place: EventBuilder.emit_chunk)
 *   skip up to: a position (30 ASCII digits) or None: records at or before it are left out
 *   skip records: records already produced by an earlier call that stopped with the queue
 *          full (done False): the caller polls, then calls again with the total so far
 *   json: None (Avro records), or debezium-json: (value program, value prefix, key program,
 *          key prefix), each record's value and key transcoded from the Avro body built as above
 *          (contract/codecs/avro_json.h; the key header is then empty)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "avro_json.h"   /* (contract/codecs: debezium-json from the Avro bodies) */

/* librdkafka's ABI, the little of it used here (rdkafka.h; stable since 1.x) */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
enum { VTYPE_END = 0, VTYPE_RKT = 2, VTYPE_VALUE = 4, VTYPE_KEY = 5, VTYPE_OPAQUE = 6, VTYPE_MSGFLAGS = 7,
       VTYPE_HEADER = 9 };
enum { MSG_F_COPY = 0x2, ERR_QUEUE_FULL = -184, RD_KAFKA_PRODUCER = 0 };

static int (*rk_producev)(rd_kafka_t *, ...);
static rd_kafka_topic_t *(*rk_topic_new)(rd_kafka_t *, const char *, void *);
static void (*rk_topic_destroy)(rd_kafka_topic_t *);
static void *(*rk_opaque)(const rd_kafka_t *);
static int (*rk_type)(const rd_kafka_t *);
static const char *(*rk_err2str)(int);

/* confluent-kafka's Handle starts with the librdkafka handle; its per-message state is the
 * Producer object and the delivery callback (src/confluent_kafka/src: confluent_kafka.h,
 * Producer.c: the same from 2.4 to 2.16), freed by its delivery report callback. */
typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
} Handle;

typedef struct {
    void *self;
    PyObject *dr_cb;
} MsgState;

static const char POSITION_HEADER[] = "cdc.position";

typedef struct {
    PyObject_HEAD
    PyObject *producer;
    PyObject *on_delivery;
    rd_kafka_t *rk;
    AjBuf avro;   /* a record's value and key as Avro */
    AjBuf json;   /* debezium-json: the same record transcoded */
} Emitter;

static int load(const char *path) {
    if (rk_producev)
        return 0;
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);   /* the copy confluent-kafka loaded */
    if (!lib) {
        PyErr_Format(PyExc_ImportError, "librdkafka is not loaded from %s", path);
        return -1;
    }
    *(void **)&rk_producev = dlsym(lib, "rd_kafka_producev");
    *(void **)&rk_topic_new = dlsym(lib, "rd_kafka_topic_new");
    *(void **)&rk_topic_destroy = dlsym(lib, "rd_kafka_topic_destroy");
    *(void **)&rk_opaque = dlsym(lib, "rd_kafka_opaque");
    *(void **)&rk_type = dlsym(lib, "rd_kafka_type");
    *(void **)&rk_err2str = dlsym(lib, "rd_kafka_err2str");
    if (!rk_producev || !rk_topic_new || !rk_topic_destroy || !rk_opaque || !rk_type || !rk_err2str) {
        rk_producev = NULL;
        PyErr_SetString(PyExc_ImportError, "librdkafka lacks a function the row emitter calls");
        return -1;
    }
    return 0;
}

static PyObject *emitter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *producer, *on_delivery;
    const char *path;
    if (!PyArg_ParseTuple(args, "OsO", &producer, &path, &on_delivery))
        return NULL;
    if (!PyCallable_Check(on_delivery)) {
        PyErr_SetString(PyExc_TypeError, "on_delivery is not callable");
        return NULL;
    }
    if (load(path) < 0)
        return NULL;
    PyObject *cimpl = PyImport_ImportModule("confluent_kafka.cimpl");
    PyObject *producer_type = cimpl ? PyObject_GetAttrString(cimpl, "Producer") : NULL;
    Py_XDECREF(cimpl);
    if (!producer_type)
        return NULL;
    int is_producer = PyType_Check(producer_type) && PyObject_TypeCheck(producer, (PyTypeObject *)producer_type);
    Py_DECREF(producer_type);
    if (!is_producer) {
        PyErr_SetString(PyExc_TypeError, "not a confluent-kafka Producer");
        return NULL;
    }
    rd_kafka_t *rk = ((Handle *)producer)->rk;
    if (!rk || rk_opaque(rk) != (void *)producer || rk_type(rk) != RD_KAFKA_PRODUCER) {
        PyErr_SetString(PyExc_TypeError, "not a confluent-kafka Producer of a known layout");
        return NULL;
    }
    Emitter *e = (Emitter *)type->tp_alloc(type, 0);
    if (!e)
        return NULL;
    e->producer = Py_NewRef(producer);
    e->on_delivery = Py_NewRef(on_delivery);
    e->rk = rk;
    return (PyObject *)e;
}

static void emitter_dealloc(Emitter *e) {
    PyMem_Free(e->avro.p);
    PyMem_Free(e->json.p);
    Py_XDECREF(e->producer);
    Py_XDECREF(e->on_delivery);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* The emitter's Avro buffer, empty, with room for ``n`` bytes (NULL: no memory, raised). */
static char *reserve(Emitter *e, Py_ssize_t n) {
    e->avro.n = 0;
    return aj_reserve(&e->avro, n) < 0 ? NULL : e->avro.p;
}

static char *put(char *p, const char *s, Py_ssize_t n) {
    memcpy(p, s, n);
    return p + n;
}

static char *put_varint(char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (char)(z | 0x80);
        z >>= 7;
    }
    *p++ = (char)z;
    return p;
}

typedef struct {
    const char *p;
    Py_ssize_t n;
} Bytes;

static int bytes_of(PyObject *o, Bytes *b, const char *what) {
    if (o == Py_None) {
        b->p = NULL;
        b->n = -1;
        return 0;
    }
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s is not bytes", what);
        return -1;
    }
    b->p = PyBytes_AS_STRING(o);
    b->n = PyBytes_GET_SIZE(o);
    return 0;
}

enum { P_BEFORE_NULL, P_BEFORE, P_AFTER_NULL, P_AFTER, P_MIDDLE, P_OP_C, P_OP_U, P_OP_D, P_END, P_EVENT, NPARTS };

typedef struct {
    Emitter *e;
    rd_kafka_topic_t *rkt;
    Bytes parts[NPARTS], key_header;
    Bytes json[4];               /* value program, value prefix, key program, key prefix; json[0].p NULL: Avro */
    const char *skip;            /* 30 digits, or NULL */
    Py_ssize_t to_skip;          /* records produced by an earlier call */
    Py_ssize_t produced, events;
    int full;                    /* the queue was full: stop */
} Run;

/* One record (value NULL: a tombstone): produced, or passed over when an earlier call
 * produced it; -1 on error (raised), 0 else (run->full set when the queue is full). */
static int record(Run *r, const char *position, Bytes key, const char *value, Py_ssize_t value_len) {
    if (r->to_skip > 0) {
        r->to_skip--;
        return 0;
    }
    MsgState *state = malloc(sizeof(MsgState));
    if (!state) {
        PyErr_NoMemory();
        return -1;
    }
    state->self = r->e->producer;
    state->dr_cb = Py_NewRef(r->e->on_delivery);
    int err = rk_producev(r->e->rk, VTYPE_RKT, r->rkt, VTYPE_MSGFLAGS, MSG_F_COPY,
                          VTYPE_VALUE, (void *)value, (size_t)(value ? value_len : 0),
                          VTYPE_KEY, (const void *)key.p, (size_t)(key.p ? key.n : 0),
                          VTYPE_HEADER, POSITION_HEADER, (const void *)position, (ssize_t)30,
                          VTYPE_OPAQUE, (void *)state, VTYPE_END);
    if (err) {
        Py_DECREF(state->dr_cb);
        free(state);
        if (err == ERR_QUEUE_FULL) {
            r->full = 1;
            return 0;
        }
        PyObject *mod = PyImport_ImportModule("confluent_kafka");
        if (mod) {
            PyObject *error = PyObject_CallMethod(mod, "KafkaError", "is", err, rk_err2str(err));
            if (error) {
                PyObject *exc_type = PyObject_GetAttrString(mod, "KafkaException");
                if (exc_type) {
                    PyErr_SetObject(exc_type, error);
                    Py_DECREF(exc_type);
                }
                Py_DECREF(error);
            }
            Py_DECREF(mod);
        }
        return -1;
    }
    r->produced++;
    if (value)
        r->events++;
    return 0;
}

/* One change of a row: its value built, its record (and tombstone) produced. */
static int change(Run *r, int64_t row, int64_t seq, char op, Bytes key, Bytes before, Bytes after,
                  int tombstones) {
    char position[30];
    memcpy(position, r->parts[P_EVENT].p, 20);
    int64_t s = seq;
    for (int i = 29; i >= 20; i--) {
        position[i] = (char)('0' + s % 10);
        s /= 10;
    }
    if (r->skip && memcmp(position, r->skip, 30) <= 0)
        return 0;
    Bytes *bp = &r->parts[before.p ? P_BEFORE : P_BEFORE_NULL], *ap = &r->parts[after.p ? P_AFTER : P_AFTER_NULL];
    Bytes *opp = &r->parts[op == 'c' ? P_OP_C : op == 'u' ? P_OP_U : P_OP_D];
    Py_ssize_t key_len = key.p ? r->key_header.n + key.n : 0;
    Py_ssize_t n = bp->n + (before.p ? before.n : 0) + ap->n + (after.p ? after.n : 0) + r->parts[P_MIDDLE].n + 10 +
                   opp->n + 10 + r->parts[P_END].n;
    char *buf = reserve(r->e, n + key_len);
    if (!buf)
        return -1;
    char *p = buf;
    p = put(p, bp->p, bp->n);
    if (before.p)
        p = put(p, before.p, before.n);
    p = put(p, ap->p, ap->n);
    if (after.p)
        p = put(p, after.p, after.n);
    p = put(p, r->parts[P_MIDDLE].p, r->parts[P_MIDDLE].n);
    p = put_varint(p, row);
    p = put(p, opp->p, opp->n);
    p = put(p, position + 20, 10);
    p = put(p, r->parts[P_END].p, r->parts[P_END].n);
    Py_ssize_t value_len = p - buf;
    Bytes framed = {NULL, -1};
    if (key.p) {
        framed.p = p;
        p = put(p, r->key_header.p, r->key_header.n);
        p = put(p, key.p, key.n);
        framed.n = key_len;
    }
    if (r->json[0].p) {   /* debezium-json: the key's record, then the value's, from their Avro bodies */
        AjBuf *j = &r->e->json;
        j->n = 0;
        Py_ssize_t key_json = -1;
        if (framed.p) {
            if (!r->json[2].p)
                return aj_bad("a key without a key program");
            if (aj_transcode((const uint8_t *)r->json[2].p, r->json[2].n, r->json[3].p, r->json[3].n, "}", 1,
                             (const uint8_t *)framed.p, framed.n, j) < 0)
                return -1;
            key_json = j->n;
        }
        if (aj_transcode((const uint8_t *)r->json[0].p, r->json[0].n, r->json[1].p, r->json[1].n, "}", 1,
                         (const uint8_t *)buf, value_len, j) < 0)
            return -1;
        if (key_json >= 0) {
            framed.p = j->p;
            framed.n = key_json;
        }
        buf = j->p + (key_json >= 0 ? key_json : 0);
        value_len = j->n - (key_json >= 0 ? key_json : 0);
    }
    if (record(r, position, framed, buf, value_len) < 0)
        return -1;
    if (op == 'd' && tombstones && !r->full && record(r, position, framed, NULL, 0) < 0)
        return -1;
    return 0;
}

enum { KIND_INSERT = 0, KIND_UPDATE = 1, KIND_DELETE = 2, KIND_READ = 3 };

static PyObject *emitter_rows(Emitter *e, PyObject *args) {
    const char *topic;
    PyObject *key_header, *parts, *bodies, *skip, *json = Py_None;
    int kind, keyed, tombstones;
    Py_ssize_t start, stop, to_skip;
    long long first_seq = 0;
    if (!PyArg_ParseTuple(args, "sOO!O!ipnnOpn|LO", &topic, &key_header, &PyTuple_Type, &parts, &PyList_Type, &bodies,
                          &kind, &keyed, &start, &stop, &skip, &tombstones, &to_skip, &first_seq, &json))
        return NULL;
    if (((Handle *)e->producer)->rk != e->rk) {   /* closed (confluent-kafka clears it): nothing to write to */
        PyErr_SetString(PyExc_RuntimeError, "the producer of this row emitter is closed");
        return NULL;
    }
    Run r = {e, NULL};
    r.to_skip = to_skip;
    if (PyTuple_GET_SIZE(parts) != NPARTS) {
        PyErr_SetString(PyExc_ValueError, "the envelope's parts are not 10");
        return NULL;
    }
    for (int i = 0; i < NPARTS; i++)
        if (bytes_of(PyTuple_GET_ITEM(parts, i), &r.parts[i], "an envelope part") < 0 || r.parts[i].n < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "an envelope part is None");
            return NULL;
        }
    if (r.parts[P_EVENT].n != 20) {
        PyErr_SetString(PyExc_ValueError, "the event's position digits are not 20");
        return NULL;
    }
    if (bytes_of(key_header, &r.key_header, "the key header") < 0)
        return NULL;
    if (json != Py_None) {
        if (!PyTuple_Check(json) || PyTuple_GET_SIZE(json) != 4) {
            PyErr_SetString(PyExc_TypeError, "json is (value program, value prefix, key program, key prefix)");
            return NULL;
        }
        for (int i = 0; i < 4; i++)
            if (bytes_of(PyTuple_GET_ITEM(json, i), &r.json[i], "a json program or prefix") < 0)
                return NULL;
        if (!r.json[0].p || !r.json[1].p) {
            PyErr_SetString(PyExc_TypeError, "json without the value's program and prefix");
            return NULL;
        }
    }
    if (r.key_header.n < 0)
        r.key_header.n = 0;
    if (skip != Py_None) {
        if (!PyBytes_Check(skip) || PyBytes_GET_SIZE(skip) != 30) {
            PyErr_SetString(PyExc_ValueError, "skip up to is a position of 30 digits");
            return NULL;
        }
        r.skip = PyBytes_AS_STRING(skip);
    }
    int per_row = kind == KIND_UPDATE ? 4 : kind == KIND_READ ? 1 : 2;
    if (kind < 0 || kind > KIND_READ || start < 0 || stop < start || PyList_GET_SIZE(bodies) < stop * per_row ||
        first_seq < 0 || first_seq + stop > 9999999999LL) {
        PyErr_SetString(PyExc_ValueError, "rows out of the bodies' range");
        return NULL;
    }
    r.rkt = rk_topic_new(e->rk, topic, NULL);
    if (!r.rkt) {
        PyErr_Format(PyExc_ValueError, "topic %s cannot be used", topic);
        return NULL;
    }
    PyObject **b = ((PyListObject *)bodies)->ob_item;
    int failed = 0;
    for (Py_ssize_t i = start; i < stop && !failed && !r.full; i++) {
        Bytes key_b = {NULL, -1}, before = {NULL, -1}, key_a = {NULL, -1}, after = {NULL, -1};
        PyObject **row = b + i * per_row;
        if (kind == KIND_READ) {
            PyObject *pair = row[0];
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "a chunk row is (key, row)");
                failed = 1;
                break;
            }
            failed = bytes_of(PyTuple_GET_ITEM(pair, 0), &key_a, "a key") < 0 ||
                     bytes_of(PyTuple_GET_ITEM(pair, 1), &after, "a row") < 0;
            if (!failed)
                failed = change(&r, 0, first_seq + i, 'c', key_a, before, after, 0) < 0;
            continue;
        }
        if (kind == 1)
            failed = bytes_of(row[0], &key_b, "a key") < 0 || bytes_of(row[1], &before, "a row") < 0 ||
                     bytes_of(row[2], &key_a, "a key") < 0 || bytes_of(row[3], &after, "a row") < 0;
        else if (kind == 0)
            failed = bytes_of(row[0], &key_a, "a key") < 0 || bytes_of(row[1], &after, "a row") < 0;
        else
            failed = bytes_of(row[0], &key_b, "a key") < 0 || bytes_of(row[1], &before, "a row") < 0;
        if (failed)
            break;
        Bytes none = {NULL, -1};
        if (kind == 1 && keyed && (key_b.n != key_a.n || (key_b.p && memcmp(key_b.p, key_a.p, key_b.n) != 0))) {
            /* the key changed: a delete of the old key, then a create of the new one */
            failed = change(&r, i, 2 * i, 'd', key_b, before, none, tombstones) < 0;
            if (!failed && !r.full)
                failed = change(&r, i, 2 * i + 1, 'c', key_a, none, after, tombstones) < 0;
        } else {
            char op = kind == 0 ? 'c' : kind == 1 ? 'u' : 'd';
            failed = change(&r, i, 2 * i, op, key_a.p ? key_a : key_b, before, after, tombstones) < 0;
        }
    }
    rk_topic_destroy(r.rkt);
    if (failed)
        return NULL;
    return Py_BuildValue("nnO", r.produced, r.events, r.full ? Py_False : Py_True);
}

static PyMethodDef emitter_methods[] = {
    {"rows", (PyCFunction)emitter_rows, METH_VARARGS,
     "rows(topic, key header, parts, bodies, kind, keyed, start, stop, skip up to, tombstones, skip records"
     "[, first sequence, json]) -> (records, change events, done)"},
    {NULL}};

static PyTypeObject EmitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "producer._row_emitter.Emitter",
    .tp_basicsize = sizeof(Emitter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Emitter(producer, librdkafka path, on_delivery): change events of encoded rows into Kafka",
    .tp_new = emitter_new,
    .tp_dealloc = (destructor)emitter_dealloc,
    .tp_methods = emitter_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_row_emitter",
                                    "Change events of encoded rows into Kafka (row_emitter.py).", -1, NULL};

PyMODINIT_FUNC PyInit__row_emitter(void) {
    if (PyType_Ready(&EmitterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Emitter", (PyObject *)&EmitterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
