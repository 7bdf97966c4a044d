/* Avro bodies into Kafka Connect JSON payloads, by a program compiled from the writer schema.
 *
 * contract/codecs/connect_json.py derives a record's Connect schema from its Avro schema (one
 * type mapping) and, from the same walk, a program (bytes) that turns an Avro body of that
 * schema into the JSON payload the dict path (ConnectJsonWriter.payload, orjson) writes: the same
 * bytes, field for field.  Nothing here knows a column type: only Avro's encodings and
 * Connect's JSON forms of them (ints and longs as numbers, floats and doubles as numbers in
 * orjson's notation -- non-finite ones as null, as orjson writes them --, strings escaped as
 * orjson escapes them, bytes in base64, a decimal's unscaled bytes shortened to Connect's
 * Decimal.fromLogical form first).
 *
 * Program (every number little-endian):
 *   'L' u16 n, n bytes       literal text
 *   'I' u8 slot              an int or long (zig-zag varint) as a number; slot != 0xFF: kept there
 *   'F' / 'D'                a float / a double
 *   'B'                      a boolean
 *   'S'                      a string
 *   'Y' / 'Z'                bytes / a decimal's bytes, in base64
 *   'U' u8 null branch, u8 slot, u16 n, n bytes of text for a null, u32 m, m bytes of program
 *                            a union of null and one type (a null clears the slot)
 *   'M' u8 slot, u32 factor  the number kept in slot times factor, or null
 *   'R' u8 fields, per field: u32 m, m bytes of program (its value); u8 outputs, per output:
 *       u8 0 (a field), u8 index, u16 n, n bytes of text before it | u8 1 (kept number times a
 *       factor), u8 slot, u32 factor, u16 n, n bytes of text before it
 *                            a record whose JSON order is not its Avro order: its fields' values
 *                            transcoded first, then put in the JSON's order
 *
 * Used by contract/codecs/_avro_json.c (ConnectJsonWriter.transcode) and producer/_native_producer.c
 * (the change events of encoded rows as debezium-json). */
#ifndef CDC_AVRO_JSON_H
#define CDC_AVRO_JSON_H

#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AJ_SLOTS 16

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} AjBuf;

typedef struct {
    int valid[AJ_SLOTS];
    int64_t value[AJ_SLOTS];
} AjSlots;

static int aj_reserve(AjBuf *b, Py_ssize_t more) {
    if (b->n + more > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + more)
            cap *= 2;
        char *p = PyMem_Realloc(b->p, cap);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    return 0;
}

static int aj_put(AjBuf *b, const void *s, Py_ssize_t n) {
    if (aj_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int aj_bad(const char *what) {
    PyErr_Format(PyExc_ValueError, "Avro body does not fit its JSON program: %s", what);
    return -1;
}

static int aj_varint(const uint8_t **in, const uint8_t *end, int64_t *out) {
    uint64_t z = 0;
    int shift = 0;
    const uint8_t *p = *in;
    for (;;) {
        if (p >= end || shift > 63)
            return aj_bad("a truncated or overlong varint");
        uint8_t c = *p++;
        z |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            break;
        shift += 7;
    }
    *in = p;
    *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    return 0;
}

static int aj_number(AjBuf *b, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--i] = '-';
    return aj_put(b, tmp + i, 24 - i);
}

/* A double as orjson writes it (byte for byte: the keys' bytes pick their partitions): the
 * shortest digits that read back the same (Python's repr), in positional notation from 1e-5 to
 * below 1e16, else with an exponent not padded with zeros (1e-7, 1e+16). */
static int aj_double(AjBuf *b, double v) {
    if (!isfinite(v))
        return aj_put(b, "null", 4);
    char *s = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s)
        return -1;
    int rc;
    char *e = strchr(s, 'e');
    if (!e) {
        rc = aj_put(b, s, (Py_ssize_t)strlen(s));
    } else {
        int exp = atoi(e + 1);
        char text[48];
        int n = 0;
        const char *m = s;
        if (exp == -5) {   /* d.ddd e-05: 0.0000dddd */
            if (*m == '-')
                text[n++] = *m++;
            memcpy(text + n, "0.0000", 6);
            n += 6;
            for (; m < e && n < 40; m++)
                if (*m != '.')
                    text[n++] = *m;
        } else {
            n = (int)(e - s) < 30 ? (int)(e - s) : 30;
            memcpy(text, s, n);
            n += snprintf(text + n, sizeof text - n, "e%c%d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        }
        rc = aj_put(b, text, n);
    }
    PyMem_Free(s);
    return rc;
}

/* A float32 as the double of its shortest decimal digits (6 to 9 significant) that read back as
 * the same float32: what Kafka Connect's JSON converter writes (0.1, not the widened
 * 0.10000000149011612), and what the Python path writes (producer.events.values._float32). */
static double aj_float32_shortest(float f) {
    if (!isfinite(f))
        return (double)f;
    char text[40];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        double cand = strtod(text, NULL);
        if ((float)cand == f)
            return cand;
    }
    return (double)f;
}

static int aj_string(AjBuf *b, const uint8_t *s, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (aj_reserve(b, n + 2) < 0)
        return -1;
    b->p[b->n++] = '"';
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (aj_put(b, s + run, i - run) < 0)
            return -1;
        run = i + 1;
        char esc[6] = {'\\', 0};
        Py_ssize_t len = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            len = 6;
        }
        if (aj_put(b, esc, len) < 0)
            return -1;
    }
    if (aj_put(b, s + run, n - run) < 0 || aj_reserve(b, 1) < 0)
        return -1;
    b->p[b->n++] = '"';
    return 0;
}

static int aj_base64(AjBuf *b, const uint8_t *s, Py_ssize_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (aj_reserve(b, (n + 2) / 3 * 4 + 2) < 0)
        return -1;
    char *p = b->p + b->n;
    *p++ = '"';
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *p++ = abc[v >> 18];
        *p++ = abc[(v >> 12) & 63];
        *p++ = abc[(v >> 6) & 63];
        *p++ = abc[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *p++ = abc[v >> 18];
        *p++ = abc[(v >> 12) & 63];
        *p++ = i + 1 < n ? abc[(v >> 6) & 63] : '=';
        *p++ = '=';
    }
    *p++ = '"';
    b->n = p - b->p;
    return 0;
}

static uint32_t aj_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t aj_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static int aj_length(const uint8_t **in, const uint8_t *end, Py_ssize_t *n) {
    int64_t len;
    if (aj_varint(in, end, &len) < 0)
        return -1;
    if (len < 0 || len > end - *in)
        return aj_bad("a length past the body's end");
    *n = (Py_ssize_t)len;
    return 0;
}

/* The program [prog, prog_end) over the body from *in (advanced past what it read), into b. */
static int aj_run(const uint8_t *prog, const uint8_t *prog_end, const uint8_t **in, const uint8_t *end, AjBuf *b,
                  AjSlots *slots) {
    const uint8_t *pc = prog;
    while (pc < prog_end) {
        uint8_t op = *pc++;
        switch (op) {
        case 'L': {
            uint16_t n = aj_u16(pc);
            if (aj_put(b, pc + 2, n) < 0)
                return -1;
            pc += 2 + n;
            break;
        }
        case 'I': {
            uint8_t slot = *pc++;
            int64_t v;
            if (aj_varint(in, end, &v) < 0 || aj_number(b, v) < 0)
                return -1;
            if (slot < AJ_SLOTS) {
                slots->valid[slot] = 1;
                slots->value[slot] = v;
            }
            break;
        }
        case 'F': {
            float f;
            if (end - *in < 4)
                return aj_bad("a truncated float");
            memcpy(&f, *in, 4);   /* (little-endian, as Avro's) */
            *in += 4;
            if (aj_double(b, aj_float32_shortest(f)) < 0)
                return -1;
            break;
        }
        case 'D': {
            double d;
            if (end - *in < 8)
                return aj_bad("a truncated double");
            memcpy(&d, *in, 8);
            *in += 8;
            if (aj_double(b, d) < 0)
                return -1;
            break;
        }
        case 'B':
            if (*in >= end || **in > 1)
                return aj_bad("a boolean");
            if ((**in ? aj_put(b, "true", 4) : aj_put(b, "false", 5)) < 0)
                return -1;
            (*in)++;
            break;
        case 'S':
        case 'Y':
        case 'Z': {
            Py_ssize_t n;
            if (aj_length(in, end, &n) < 0)
                return -1;
            const uint8_t *s = *in;
            *in += n;
            if (op == 'Z')   /* Connect's Decimal: the shortest two's complement (BigInteger.toByteArray) */
                while (n > 1 && ((s[0] == 0x00 && s[1] < 0x80) || (s[0] == 0xff && s[1] >= 0x80))) {
                    s++;
                    n--;
                }
            if ((op == 'S' ? aj_string(b, s, n) : aj_base64(b, s, n)) < 0)
                return -1;
            break;
        }
        case 'U': {
            uint8_t null_branch = pc[0], slot = pc[1];
            uint16_t n = aj_u16(pc + 2);
            const uint8_t *text = pc + 4;
            uint32_t m = aj_u32(text + n);
            const uint8_t *body = text + n + 4;
            pc = body + m;
            int64_t branch;
            if (aj_varint(in, end, &branch) < 0)
                return -1;
            if (branch != 0 && branch != 1)
                return aj_bad("a union branch other than 0 or 1");
            if (branch == null_branch) {
                if (slot < AJ_SLOTS)
                    slots->valid[slot] = 0;
                if (aj_put(b, text, n) < 0)
                    return -1;
            } else if (aj_run(body, body + m, in, end, b, slots) < 0) {
                return -1;
            }
            break;
        }
        case 'M': {
            uint8_t slot = pc[0];
            uint32_t factor = aj_u32(pc + 1);
            pc += 5;
            if (slot < AJ_SLOTS && slots->valid[slot]) {
                if (aj_number(b, slots->value[slot] * (int64_t)factor) < 0)
                    return -1;
            } else if (aj_put(b, "null", 4) < 0) {
                return -1;
            }
            break;
        }
        case 'R': {
            uint8_t fields = *pc++;
            Py_ssize_t spans[256][2];
            Py_ssize_t start = b->n;
            for (int i = 0; i < fields; i++) {
                uint32_t m = aj_u32(pc);
                spans[i][0] = b->n;
                if (aj_run(pc + 4, pc + 4 + m, in, end, b, slots) < 0)
                    return -1;
                spans[i][1] = b->n;
                pc += 4 + m;
            }
            Py_ssize_t values_end = b->n;
            uint8_t outputs = *pc++;
            for (int i = 0; i < outputs; i++) {
                uint8_t kind = pc[0], index = pc[1];
                pc += 2;
                uint32_t factor = 0;
                if (kind == 1) {
                    factor = aj_u32(pc);
                    pc += 4;
                }
                uint16_t n = aj_u16(pc);
                if (aj_put(b, pc + 2, n) < 0)
                    return -1;
                pc += 2 + n;
                if (kind == 0) {
                    if (index >= fields)
                        return aj_bad("a record's output past its fields");
                    Py_ssize_t len = spans[index][1] - spans[index][0];
                    if (aj_reserve(b, len) < 0)
                        return -1;
                    memcpy(b->p + b->n, b->p + spans[index][0], len);
                    b->n += len;
                } else if (index < AJ_SLOTS && slots->valid[index]) {
                    if (aj_number(b, slots->value[index] * (int64_t)factor) < 0)
                        return -1;
                } else if (aj_put(b, "null", 4) < 0) {
                    return -1;
                }
            }
            /* the record in its JSON order replaces its fields' values */
            memmove(b->p + start, b->p + values_end, b->n - values_end);
            b->n = start + (b->n - values_end);
            break;
        }
        default:
            return aj_bad("an unknown op (a program of another version?)");
        }
    }
    return 0;
}

/* prefix + the payload of the Avro body [body, body + n) + suffix, appended to b. */
static int aj_transcode(const uint8_t *prog, Py_ssize_t prog_len, const char *prefix, Py_ssize_t prefix_len,
                        const char *suffix, Py_ssize_t suffix_len, const uint8_t *body, Py_ssize_t n, AjBuf *b) {
    AjSlots slots;
    memset(&slots, 0, sizeof slots);
    const uint8_t *in = body, *end = body + n;
    if (aj_put(b, prefix, prefix_len) < 0 || aj_run(prog, prog + prog_len, &in, end, b, &slots) < 0)
        return -1;
    if (in != end)
        return aj_bad("bytes left after the record");
    return aj_put(b, suffix, suffix_len);
}

#endif
