/* The producer's own Kafka client: a librdkafka producer handle of its own (rd_kafka_t), driven
 * through librdkafka's public API only (its rdkafka.h), with delivery reports, errors and
 * transactions, and the native row emitter on it.
 *
 * KafkaWriter (producer/kafka_writer.py) writes through it: records one by one (produce), the
 * change events of a whole rows event or snapshot chunk in one call (rows: the envelopes joined
 * around the encoded bodies and each record handed to librdkafka without a Python call per
 * record), polls, flushes and transactions.  native_producer.py opens the librdkafka that
 * confluent-kafka's wheel ships (the one the rest of the project uses through confluent-kafka),
 * checks its version and gives the settings as text; this module resolves the functions it calls
 * with dlsym, typed by the header, so nothing of another library's layout is read or copied.
 *
 * NativeProducer(librdkafka file, settings: dict[str, str], on_delivery, on_error)
 *   on_delivery(KafkaError, topic): a record's delivery failed (a success is passed over here,
 *          without a Python call; librdkafka's own delivery.report.only.error is best left off:
 *          with it no report wakes flush() and commit_transaction(), which then wait in steps of
 *          10 ms: single-row transactions at 0.72 of the throughput, in-process A/B); on_error(KafkaError):
 *          librdkafka's error callback (a
 *          fatal error's own code and reason, fatal() true).  Both are called from poll, flush
 *          and the transaction calls, in the calling thread; an exception they raise is raised
 *          by that call.
 *   produce(topic, value=None, key=None, headers=None): one record (headers: (name, bytes)
 *          pairs); BufferError when the local queue is full, KafkaException on another refusal
 *   rows(topic, key header, parts, bodies, kind, keyed, start, stop, skip up to, tombstones,
 *        skip records[, first sequence, json]) -> (records produced, change events produced, done)
 *   poll(timeout s) -> events served; flush(timeout s) -> records still queued
 *   init_transactions(timeout s), begin_transaction(), commit_transaction(timeout s),
 *   abort_transaction(timeout s): KafkaException as confluent-kafka raises it (the KafkaError's
 *          fatal(), retriable() and txn_requires_abort() from librdkafka's rd_kafka_error_t)
 *   purge(): drop what is queued and in flight; close(): the handle destroyed (every later call
 *          raises RuntimeError "closed"); len(): what librdkafka still holds (0 once closed)
 *
 * rows():
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
 *   The records are the ones producer/events/builder.py's EventBuilder gives for the same rows,
 *   in the same order (tests/integration/producer/test_native_producer.py reads them back),
 *   each with its key, value (None for a tombstone), the ``cdc.position`` header and the
 *   topic's partitioner.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <librdkafka/rdkafka.h>   /* (librdkafka-dev: the types and prototypes; the code is resolved at run time) */

#include "avro_json.h"   /* (contract/codecs: debezium-json from the Avro bodies) */

/* The librdkafka functions called here, resolved from the library native_producer.py names. */
#define RK_FUNCTIONS(X) \
    X(rd_kafka_version) X(rd_kafka_conf_new) X(rd_kafka_conf_set) X(rd_kafka_conf_destroy) \
    X(rd_kafka_conf_set_opaque) X(rd_kafka_conf_set_dr_msg_cb) X(rd_kafka_conf_set_error_cb) \
    X(rd_kafka_new) X(rd_kafka_destroy) X(rd_kafka_producev) X(rd_kafka_produceva) X(rd_kafka_poll) X(rd_kafka_flush) \
    X(rd_kafka_outq_len) X(rd_kafka_purge) X(rd_kafka_topic_new) X(rd_kafka_topic_destroy) \
    X(rd_kafka_topic_name) X(rd_kafka_err2str) X(rd_kafka_fatal_error) X(rd_kafka_init_transactions) \
    X(rd_kafka_begin_transaction) X(rd_kafka_commit_transaction) X(rd_kafka_abort_transaction) \
    X(rd_kafka_error_code) X(rd_kafka_error_string) X(rd_kafka_error_is_fatal) X(rd_kafka_error_is_retriable) \
    X(rd_kafka_error_txn_requires_abort) X(rd_kafka_error_destroy)
#define RK_POINTER(f) static __typeof__(&f) p_##f;
RK_FUNCTIONS(RK_POINTER)
#define RK(f) (*p_##f)

/* librdkafka 2.0 or later: every function above, as rdkafka.h declares it */
#define OLDEST_LIBRDKAFKA 0x02000000

static const char POSITION_HEADER[] = "cdc.position";
static PyObject *KafkaError, *KafkaException;   /* confluent-kafka's error types, raised as it raises them */

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;               /* NULL once closed */
    PyObject *on_delivery, *on_error;
    PyObject *raised;             /* what a callback raised: (type, value, traceback), raised by the call */
    int busy;                     /* calls running without the GIL (close refuses then) */
    AjBuf avro;   /* a record's value and key as Avro */
    AjBuf json;   /* debezium-json: the same record transcoded */
} NativeProducer;

static int load(const char *path) {
    if (p_rd_kafka_produceva)
        return 0;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_ImportError, "librdkafka could not be loaded from %s: %s", path, dlerror());
        return -1;
    }
    const char *missing = NULL;
#define RK_RESOLVE(f) if (!missing && !(*(void **)&p_##f = dlsym(lib, #f))) missing = #f;
    RK_FUNCTIONS(RK_RESOLVE)
    if (missing) {
        p_rd_kafka_produceva = NULL;
        PyErr_Format(PyExc_ImportError, "the librdkafka of %s has no %s", path, missing);
        return -1;
    }
    if (RK(rd_kafka_version)() < OLDEST_LIBRDKAFKA) {
        p_rd_kafka_produceva = NULL;
        PyErr_Format(PyExc_ImportError, "the librdkafka of %s is older than 2.0 (0x%x)", path,
                     RK(rd_kafka_version)());
        return -1;
    }
    return 0;
}

/* confluent-kafka's KafkaError for a code and a reason, with librdkafka's flags. */
static PyObject *kafka_error(int code, const char *reason, int fatal, int retriable, int abortable) {
    PyObject *args = Py_BuildValue("(is)", code, reason ? reason : "");
    PyObject *kw = Py_BuildValue("{s:O,s:O,s:O}", "fatal", fatal ? Py_True : Py_False, "retriable",
                                 retriable ? Py_True : Py_False, "txn_requires_abort", abortable ? Py_True : Py_False);
    PyObject *err = args && kw ? PyObject_Call(KafkaError, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return err;
}

/* Raise KafkaException(KafkaError(...)); NULL. */
static PyObject *raise_kafka(int code, const char *reason, int fatal, int retriable, int abortable) {
    PyObject *err = kafka_error(code, reason, fatal, retriable, abortable);
    if (err) {
        PyErr_SetObject(KafkaException, err);
        Py_DECREF(err);
    }
    return NULL;
}

/* Raise a transaction call's rd_kafka_error_t (destroyed) as confluent-kafka raises it; NULL. */
static PyObject *raise_error(rd_kafka_error_t *error) {
    raise_kafka(RK(rd_kafka_error_code)(error), RK(rd_kafka_error_string)(error), RK(rd_kafka_error_is_fatal)(error),
                RK(rd_kafka_error_is_retriable)(error), RK(rd_kafka_error_txn_requires_abort)(error));
    RK(rd_kafka_error_destroy)(error);
    return NULL;
}

/* A callback raised (the GIL held): kept for the call that served it (the first one only). */
static void keep_raised(NativeProducer *self) {
    if (self->raised) {
        PyErr_Clear();
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    self->raised = Py_BuildValue("(OOO)", type ? type : Py_None, value ? value : Py_None, tb ? tb : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* After a call that served callbacks: -1 with what one raised, else 0. */
static int reraise(NativeProducer *self) {
    if (!self->raised)
        return 0;
    PyObject *kept = self->raised;
    self->raised = NULL;
    PyObject *type = PyTuple_GET_ITEM(kept, 0), *value = PyTuple_GET_ITEM(kept, 1), *tb = PyTuple_GET_ITEM(kept, 2);
    PyErr_Restore(Py_NewRef(type), value == Py_None ? NULL : Py_NewRef(value), tb == Py_None ? NULL : Py_NewRef(tb));
    Py_DECREF(kept);
    return -1;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    if (!msg->err)
        return;
    NativeProducer *self = opaque;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *err = kafka_error(msg->err, RK(rd_kafka_err2str)(msg->err), 0, 0, 0);
    PyObject *res = err ? PyObject_CallFunction(self->on_delivery, "Os", err, RK(rd_kafka_topic_name)(msg->rkt)) : NULL;
    if (!res)
        keep_raised(self);
    Py_XDECREF(res);
    Py_XDECREF(err);
    PyGILState_Release(gil);
}

static void on_error(rd_kafka_t *rk, int code, const char *reason, void *opaque) {
    NativeProducer *self = opaque;
    char fatal_reason[512];
    int fatal = code == RD_KAFKA_RESP_ERR__FATAL;
    if (fatal) {   /* the fatal error's own code and reason */
        code = RK(rd_kafka_fatal_error)(rk, fatal_reason, sizeof fatal_reason);
        reason = fatal_reason;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *err = kafka_error(code, reason, fatal, 0, 0);
    PyObject *res = err ? PyObject_CallFunctionObjArgs(self->on_error, err, NULL) : NULL;
    if (!res)
        keep_raised(self);
    Py_XDECREF(res);
    Py_XDECREF(err);
    PyGILState_Release(gil);
}

static PyObject *producer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *path;
    PyObject *settings, *delivered, *errors;
    if (!PyArg_ParseTuple(args, "sO!OO", &path, &PyDict_Type, &settings, &delivered, &errors))
        return NULL;
    if (!PyCallable_Check(delivered) || !PyCallable_Check(errors)) {
        PyErr_SetString(PyExc_TypeError, "on_delivery and on_error are callables");
        return NULL;
    }
    if (load(path) < 0)
        return NULL;
    NativeProducer *self = (NativeProducer *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->on_delivery = Py_NewRef(delivered);
    self->on_error = Py_NewRef(errors);
    char reason[512];
    rd_kafka_conf_t *conf = RK(rd_kafka_conf_new)();
    PyObject *name, *value;
    Py_ssize_t i = 0;
    while (PyDict_Next(settings, &i, &name, &value)) {
        const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        const char *v = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
        if (!n || !v) {
            RK(rd_kafka_conf_destroy)(conf);
            Py_DECREF(self);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "the settings are text: {name: value}");
            return NULL;
        }
        if (RK(rd_kafka_conf_set)(conf, n, v, reason, sizeof reason) != RD_KAFKA_CONF_OK) {
            RK(rd_kafka_conf_destroy)(conf);
            Py_DECREF(self);
            return raise_kafka(RD_KAFKA_RESP_ERR__INVALID_ARG, reason, 0, 0, 0);
        }
    }
    RK(rd_kafka_conf_set_opaque)(conf, self);
    RK(rd_kafka_conf_set_dr_msg_cb)(conf, on_delivery);
    RK(rd_kafka_conf_set_error_cb)(conf, on_error);
    self->rk = RK(rd_kafka_new)(RD_KAFKA_PRODUCER, conf, reason, sizeof reason);   /* (takes conf when made) */
    if (!self->rk) {
        RK(rd_kafka_conf_destroy)(conf);
        Py_DECREF(self);
        return raise_kafka(RD_KAFKA_RESP_ERR__INVALID_ARG, reason, 0, 0, 0);
    }
    return (PyObject *)self;
}

/* The handle, or NULL with RuntimeError when closed. */
static rd_kafka_t *handle(NativeProducer *self) {
    if (!self->rk)
        PyErr_SetString(PyExc_RuntimeError, "the native producer is closed");
    return self->rk;
}

static void destroy(NativeProducer *self) {
    rd_kafka_t *rk = self->rk;
    self->rk = NULL;
    if (rk) {
        Py_BEGIN_ALLOW_THREADS
        RK(rd_kafka_destroy)(rk);
        Py_END_ALLOW_THREADS
    }
}

static void producer_dealloc(NativeProducer *self) {
    destroy(self);
    PyMem_Free(self->avro.p);
    PyMem_Free(self->json.p);
    Py_XDECREF(self->on_delivery);
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->raised);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int timeout_ms(double seconds) {
    return seconds < 0 ? -1 : seconds > 2000000.0 ? 2000000000 : (int)(seconds * 1000.0);
}

static PyObject *producer_produce(NativeProducer *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"topic", "value", "key", "headers", NULL};
    const char *topic;
    Py_buffer value = {NULL}, key = {NULL};
    PyObject *headers = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|z*z*O", names, &topic, &value, &key, &headers))
        return NULL;
    PyObject *result = NULL;
    rd_kafka_vu_t vu[4 + 16];
    size_t n = 0;
    rd_kafka_t *rk = handle(self);
    if (!rk)
        goto done;
    Py_ssize_t nh = headers == Py_None ? 0 : PyList_Check(headers) ? PyList_GET_SIZE(headers) : -1;
    if (nh < 0 || nh > 16) {
        PyErr_SetString(PyExc_TypeError, "headers are a list of up to 16 (name, bytes) pairs");
        goto done;
    }
    vu[n].vtype = RD_KAFKA_VTYPE_TOPIC;
    vu[n++].u.cstr = topic;
    vu[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vu[n++].u.i = RD_KAFKA_MSG_F_COPY;
    vu[n].vtype = RD_KAFKA_VTYPE_VALUE;
    vu[n].u.mem.ptr = value.buf;
    vu[n++].u.mem.size = value.buf ? (size_t)value.len : 0;
    vu[n].vtype = RD_KAFKA_VTYPE_KEY;
    vu[n].u.mem.ptr = key.buf;
    vu[n++].u.mem.size = key.buf ? (size_t)key.len : 0;
    for (Py_ssize_t h = 0; h < nh; h++) {
        PyObject *pair = PyList_GET_ITEM(headers, h);
        const char *hname;
        const char *hvalue;
        Py_ssize_t hsize;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !(hname = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0))) ||
            PyBytes_AsStringAndSize(PyTuple_GET_ITEM(pair, 1), (char **)&hvalue, &hsize) < 0) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "a header is a (name, bytes) pair");
            }
            goto done;
        }
        vu[n].vtype = RD_KAFKA_VTYPE_HEADER;
        vu[n].u.header.name = hname;
        vu[n].u.header.val = hvalue;
        vu[n++].u.header.size = hsize;
    }
    rd_kafka_error_t *error = RK(rd_kafka_produceva)(rk, vu, n);
    if (error) {
        if (RK(rd_kafka_error_code)(error) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            RK(rd_kafka_error_destroy)(error);
            PyErr_SetString(PyExc_BufferError, "the local queue is full");
        } else {
            raise_error(error);
        }
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    if (value.buf)
        PyBuffer_Release(&value);
    if (key.buf)
        PyBuffer_Release(&key);
    return result;
}

static PyObject *producer_poll(NativeProducer *self, PyObject *args) {
    double timeout = 0;
    if (!PyArg_ParseTuple(args, "|d", &timeout))
        return NULL;
    rd_kafka_t *rk = handle(self);
    if (!rk)
        return NULL;
    int served;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    served = RK(rd_kafka_poll)(rk, timeout_ms(timeout));
    Py_END_ALLOW_THREADS
    self->busy--;
    if (reraise(self) < 0)
        return NULL;
    return PyLong_FromLong(served);
}

/* Flushed in slices of 100 ms, so that a signal (Ctrl-C) is seen while it waits. */
static PyObject *producer_flush(NativeProducer *self, PyObject *args) {
    double timeout = -1;
    if (!PyArg_ParseTuple(args, "|d", &timeout))
        return NULL;
    rd_kafka_t *rk = handle(self);
    if (!rk)
        return NULL;
    int left = timeout_ms(timeout);
    for (;;) {
        int slice = left < 0 || left > 100 ? 100 : left;
        self->busy++;
        Py_BEGIN_ALLOW_THREADS
        RK(rd_kafka_flush)(rk, slice);
        Py_END_ALLOW_THREADS
        self->busy--;
        if (reraise(self) < 0 || PyErr_CheckSignals() < 0)
            return NULL;
        if (RK(rd_kafka_outq_len)(rk) == 0 || left == 0)
            break;
        if (left > 0)
            left -= slice;
    }
    return PyLong_FromLong(RK(rd_kafka_outq_len)(rk));
}

/* A transaction call: its error raised as confluent-kafka raises it, or a callback's exception. */
static PyObject *transaction_done(NativeProducer *self, rd_kafka_error_t *error) {
    if (error) {
        Py_CLEAR(self->raised);   /* (the call's own error says more) */
        return raise_error(error);
    }
    if (reraise(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

#define TRANSACTION_CALL(method, call)                                  \
    static PyObject *producer_##method(NativeProducer *self, PyObject *args) { \
        double timeout = -1;                                            \
        if (!PyArg_ParseTuple(args, "|d", &timeout))                    \
            return NULL;                                                \
        rd_kafka_t *rk = handle(self);                                  \
        if (!rk)                                                        \
            return NULL;                                                \
        rd_kafka_error_t *error;                                        \
        int ms = timeout_ms(timeout);                                   \
        self->busy++;                                                   \
        Py_BEGIN_ALLOW_THREADS                                          \
        error = RK(call)(rk, ms);                                       \
        Py_END_ALLOW_THREADS                                            \
        self->busy--;                                                   \
        return transaction_done(self, error);                           \
    }
TRANSACTION_CALL(init_transactions, rd_kafka_init_transactions)
TRANSACTION_CALL(commit_transaction, rd_kafka_commit_transaction)
TRANSACTION_CALL(abort_transaction, rd_kafka_abort_transaction)

static PyObject *producer_begin_transaction(NativeProducer *self, PyObject *unused) {
    rd_kafka_t *rk = handle(self);
    return rk ? transaction_done(self, RK(rd_kafka_begin_transaction)(rk)) : NULL;
}

static PyObject *producer_purge(NativeProducer *self, PyObject *unused) {
    rd_kafka_t *rk = handle(self);
    if (!rk)
        return NULL;
    rd_kafka_resp_err_t err;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    err = RK(rd_kafka_purge)(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (err)
        return raise_kafka(err, RK(rd_kafka_err2str)(err), 0, 0, 0);
    Py_RETURN_NONE;
}

static PyObject *producer_close(NativeProducer *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the native producer is in use by another thread");
        return NULL;
    }
    destroy(self);
    Py_RETURN_NONE;
}

/* The producer's Avro buffer, empty, with room for ``n`` bytes (NULL: no memory, raised). */
static char *reserve(NativeProducer *e, Py_ssize_t n) {
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
    NativeProducer *e;
    rd_kafka_t *rk;
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
    rd_kafka_resp_err_t err = RK(rd_kafka_producev)(
        r->rk, RD_KAFKA_V_RKT(r->rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_VALUE((void *)value, (size_t)(value ? value_len : 0)),
        RD_KAFKA_V_KEY((const void *)key.p, (size_t)(key.p ? key.n : 0)),
        RD_KAFKA_V_HEADER(POSITION_HEADER, (const void *)position, (ssize_t)30), RD_KAFKA_V_END);
    if (err) {
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            r->full = 1;
            return 0;
        }
        raise_kafka(err, RK(rd_kafka_err2str)(err), 0, 0, 0);
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

static PyObject *producer_rows(NativeProducer *e, PyObject *args) {
    const char *topic;
    PyObject *key_header, *parts, *bodies, *skip, *json = Py_None;
    int kind, keyed, tombstones;
    Py_ssize_t start, stop, to_skip;
    long long first_seq = 0;
    if (!PyArg_ParseTuple(args, "sOO!O!ipnnOpn|LO", &topic, &key_header, &PyTuple_Type, &parts, &PyList_Type, &bodies,
                          &kind, &keyed, &start, &stop, &skip, &tombstones, &to_skip, &first_seq, &json))
        return NULL;
    rd_kafka_t *rk = handle(e);
    if (!rk)
        return NULL;
    Run r = {e, rk, NULL};
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
    r.rkt = RK(rd_kafka_topic_new)(rk, topic, NULL);
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
    RK(rd_kafka_topic_destroy)(r.rkt);
    if (failed)
        return NULL;
    return Py_BuildValue("nnO", r.produced, r.events, r.full ? Py_False : Py_True);
}

/* len(): records and requests still in librdkafka's queues (0 once closed): the producer's
 * metrics read it from their own thread. */
static Py_ssize_t producer_len(NativeProducer *self) {
    return self->rk ? RK(rd_kafka_outq_len)(self->rk) : 0;
}

static PySequenceMethods producer_sequence = {.sq_length = (lenfunc)producer_len};

static PyMethodDef producer_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))producer_produce, METH_VARARGS | METH_KEYWORDS,
     "produce(topic, value=None, key=None, headers=None): one record (BufferError: the local queue is full)"},
    {"rows", (PyCFunction)producer_rows, METH_VARARGS,
     "rows(topic, key header, parts, bodies, kind, keyed, start, stop, skip up to, tombstones, skip records"
     "[, first sequence, json]) -> (records, change events, done)"},
    {"poll", (PyCFunction)producer_poll, METH_VARARGS, "poll(timeout=0) -> events served"},
    {"flush", (PyCFunction)producer_flush, METH_VARARGS, "flush(timeout=-1) -> records still queued"},
    {"init_transactions", (PyCFunction)producer_init_transactions, METH_VARARGS, "init_transactions(timeout=-1)"},
    {"begin_transaction", (PyCFunction)producer_begin_transaction, METH_NOARGS, "begin_transaction()"},
    {"commit_transaction", (PyCFunction)producer_commit_transaction, METH_VARARGS, "commit_transaction(timeout=-1)"},
    {"abort_transaction", (PyCFunction)producer_abort_transaction, METH_VARARGS, "abort_transaction(timeout=-1)"},
    {"purge", (PyCFunction)producer_purge, METH_NOARGS, "purge(): drop the records queued and in flight"},
    {"close", (PyCFunction)producer_close, METH_NOARGS, "close(): the librdkafka handle destroyed"},
    {NULL}};

static PyTypeObject NativeProducerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "producer._native_producer.NativeProducer",
    .tp_basicsize = sizeof(NativeProducer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NativeProducer(librdkafka file, settings, on_delivery, on_error): the producer's own Kafka client",
    .tp_new = producer_new,
    .tp_dealloc = (destructor)producer_dealloc,
    .tp_methods = producer_methods,
    .tp_as_sequence = &producer_sequence,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_producer",
                                    "The producer's own librdkafka client (native_producer.py).", -1, NULL};

PyMODINIT_FUNC PyInit__native_producer(void) {
    if (PyType_Ready(&NativeProducerType) < 0)
        return NULL;
    PyObject *confluent = PyImport_ImportModule("confluent_kafka");
    if (!confluent)
        return NULL;
    KafkaError = PyObject_GetAttrString(confluent, "KafkaError");
    KafkaException = PyObject_GetAttrString(confluent, "KafkaException");
    Py_DECREF(confluent);
    if (!KafkaError || !KafkaException)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "NativeProducer", (PyObject *)&NativeProducerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
