/*
 * nbprec._floattext: float64 values as Python's repr writes them (the shortest text that reads back as the same
 * double, the closest to it when several are as short), about eight times faster than repr, for the CSV exports
 * of large comparisons (ten thousand tensors: half a million numbers).
 *
 * The shortest text is found the Schubfach way (R. Giulietti, "The Schubfach way to render doubles", 2020): with
 * v = c 2^q and its rounding interval [lo, hi] (hi - lo = 2^q, or 3/4 2^q below a power of two), k is the largest
 * integer with 10^k <= hi - lo, so that the interval holds one or two multiples of 10^k and at most one of
 * 10^(k+1). Scaled by 4 10^-k, v and the bounds are computed with one 126-bit approximation g of a power of ten
 * and rounded to odd, which keeps every comparison with an even integer exact (the paper proves it for all
 * doubles). The multiple of 10^(k+1) is taken when it is in the interval, else the multiple of 10^k in it, the
 * closer to v when both are (ties to the even one).
 *
 * The tables (k and the shift for each binary exponent, g for each k) are not written here: nbprec/floattext.py
 * computes them exactly with Python integers and hands them over once (set_tables). Subnormal numbers, rare in
 * metrics, are left to Python's own formatter (PyOS_double_to_string, which repr uses), as is everything when the
 * tables are not set.
 *
 * The text is laid out as repr lays it out: fixed notation for decimal exponents from -4 to 15 (with ".0" on
 * integers), else d.ddde+XX.
 *
 * nbprec._csvjoin writes columns of numbers with the same formatter, which it finds through the capsule
 * _C_API (nbprec/_floattext.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_floattext.h"

#define Q_MIN (-1074) /* binary exponents of v = c 2^q: normal numbers have q from -1074 to 971 */
#define Q_COUNT 2046
#define K_MIN (-324) /* decimal exponents k the tables cover */
#define K_COUNT 617

/* The tables, set once by set_tables: for each q (normal interval, then the narrower one below a power of two)
   k and h (the left shift of c that lines c 2^q up with g 10^-k), and g = g1 2^63 + g0 for each k. */
static int16_t k_of_q[2][Q_COUNT], h_of_q[2][Q_COUNT];
static uint64_t g1_of_k[K_COUNT], g0_of_k[K_COUNT];
static int tables_set = 0;

static uint64_t mul_high(uint64_t a, uint64_t b) { return (uint64_t)(((unsigned __int128)a * b) >> 64); }

/* floor(g cp / 2^127) with its lowest bit set when bits 64..126 of the product are not all zero (rounded to
   odd; the bits below, which hold the error of g, are left out). */
static uint64_t round_to_odd(uint64_t g1, uint64_t g0, uint64_t cp)
{
    uint64_t x1 = mul_high(g0, cp);
    unsigned __int128 y = (unsigned __int128)g1 * cp;
    uint64_t y0 = (uint64_t)y, y1 = (uint64_t)(y >> 64);
    uint64_t z = (y0 >> 1) + x1;
    uint64_t vb = y1 + (z >> 63);
    return vb | (((z & 0x7fffffffffffffffULL) + 0x7fffffffffffffffULL) >> 63);
}

/* The shortest decimal digits * 10^exp10 in the rounding interval of the positive normal double c 2^q. */
static void shortest(uint64_t c, int q, int closer, uint64_t *digits, int *exp10)
{
    int k = k_of_q[closer][q - Q_MIN], h = h_of_q[closer][q - Q_MIN];
    uint64_t g1 = g1_of_k[k - K_MIN], g0 = g0_of_k[k - K_MIN];
    uint64_t out = c & 1; /* bounds are in the interval when c is even (ties round to even) */
    uint64_t cb = c << 2, cbr = cb + 2, cbl = cb - 2 + (uint64_t)closer;
    uint64_t vb = round_to_odd(g1, g0, cb << h);
    uint64_t vbl = round_to_odd(g1, g0, cbl << h);
    uint64_t vbr = round_to_odd(g1, g0, cbr << h);
    uint64_t s = vb >> 2;
    if (s >= 10) { /* the multiples of 10^(k+1) on either side of v: one digit shorter */
        uint64_t up = s / 10 * 10, wp = up + 10;
        int up_in = vbl + out <= 4 * up, wp_in = 4 * wp + out <= vbr;
        if (up_in != wp_in) {
            *digits = up_in ? up : wp;
            *exp10 = k;
            return;
        }
    }
    uint64_t u = s, w = s + 1;
    int u_in = vbl + out <= 4 * u, w_in = 4 * w + out <= vbr;
    if (u_in != w_in) {
        *digits = u_in ? u : w;
    } else { /* both in: the closer to v, the even one on a tie */
        int64_t cmp = (int64_t)(vb - ((u + w) << 1));
        *digits = (cmp < 0 || (cmp == 0 && (s & 1) == 0)) ? u : w;
    }
    *exp10 = k;
}

static const char DIGIT_PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";

/* Two digits of v < 100 at p. */
#define PUT_PAIR(p, v) memcpy((p), DIGIT_PAIRS + 2 * (v), 2)

/* The eight digits of v < 10^8 at p, leading zeros included: four pairs, each from its own quotient (no chain of
   divisions through the digits). */
static void put_eight(char *p, uint32_t v)
{
    uint32_t a = v / 10000, b = v % 10000;
    PUT_PAIR(p, a / 100);
    PUT_PAIR(p + 2, a % 100);
    PUT_PAIR(p + 4, b / 100);
    PUT_PAIR(p + 6, b % 100);
}

/* The decimal digits of 0 < d < 10^17 at the end of buf (20 bytes): returns where they start. */
static char *put_digits(char *end, uint64_t d)
{
    char *p = end;
    if (d >= 100000000) {
        put_eight(p -= 8, (uint32_t)(d % 100000000));
        d /= 100000000;
        if (d >= 100000000) {
            put_eight(p -= 8, (uint32_t)(d % 100000000));
            d /= 100000000;
        }
    }
    uint32_t v = (uint32_t)d;
    while (v >= 100) {
        PUT_PAIR(p -= 2, v % 100);
        v /= 100;
    }
    if (v >= 10)
        PUT_PAIR(p -= 2, v);
    else
        *--p = (char)('0' + v);
    return p;
}

/* Write the text of a positive normal double into buf (at least 32 bytes); returns its length. */
static int write_positive(char *buf, uint64_t c, int q, int closer)
{
    uint64_t d;
    int e, n, point;
    char digits[24], *end = digits + sizeof digits, *first;
    shortest(c, q, closer, &d, &e);
    /* its trailing zeros off (d > 0: v is positive; at most 16 of them): a step for each bit of their count, not
       a division for each zero (a value such as 0.125 has 15, which took half of its formatting one by one) */
    while (d % 100000000 == 0) {
        d /= 100000000;
        e += 8;
    }
    if (d % 10000 == 0) {
        d /= 10000;
        e += 4;
    }
    if (d % 100 == 0) {
        d /= 100;
        e += 2;
    }
    if (d % 10 == 0) {
        d /= 10;
        e++;
    }
    first = put_digits(end, d);
    n = (int)(end - first);
    point = n + e; /* the value is 0.DIGITS x 10^point */
    char *p = buf;
    if (point >= -3 && point <= 16) { /* decimal exponent point - 1 from -4 to 15: fixed notation */
        if (point <= 0) {
            nbprec_copy_short(p, "0.000", 2 - point);
            p += 2 - point;
            nbprec_copy_short(p, first, n);
            p += n;
        } else if (point < n) {
            nbprec_copy_short(p, first, point);
            p[point] = '.';
            nbprec_copy_short(p + point + 1, first + point, n - point);
            p += n + 1;
        } else {
            nbprec_copy_short(p, first, n);
            p += n;
            nbprec_copy_short(p, "000000000000000", point - n); /* (at most 15) */
            p += point - n;
            memcpy(p, ".0", 2);
            p += 2;
        }
    } else {
        int x = point - 1;
        *p++ = first[0];
        if (n > 1) {
            *p++ = '.';
            nbprec_copy_short(p, first + 1, n - 1);
            p += n - 1;
        }
        *p++ = 'e';
        *p++ = x < 0 ? '-' : '+';
        if (x < 0) x = -x;
        if (x >= 100) {
            *p++ = (char)('0' + x / 100);
            x %= 100;
        }
        PUT_PAIR(p, x);
        p += 2;
    }
    return (int)(p - buf);
}

/* The text of v (not NaN) into buf (at least 32 bytes), as repr writes it: its length, or -1 with an exception
   set. Zeros and infinities are written here, subnormal numbers (rare in metrics) and every number while the
   tables are not set by Python's own formatter. */
static int write_double(char *buf, double v)
{
    char *p = buf;
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint64_t fraction = bits & 0x000fffffffffffffULL;
    int biased = (int)((bits >> 52) & 0x7ff);
    if (bits >> 63) *p++ = '-';
    if ((biased == 0 && fraction == 0) || biased == 0x7ff) { /* zero, infinity (v is not NaN) */
        memcpy(p, biased ? "inf" : "0.0", 3);
        return (int)(p - buf) + 3;
    }
    if (!tables_set || biased == 0) {
        char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) return -1;
        size_t len = strlen(text);
        if (len > FLOAT_TEXT_MAX) len = FLOAT_TEXT_MAX; /* (never: repr of a double is at most 24 characters) */
        memcpy(buf, text, len);
        PyMem_Free(text);
        return (int)len;
    }
    return (int)(p - buf) + write_positive(p, fraction | (1ULL << 52), biased - 1075, fraction == 0 && biased > 1);
}

/* The text of v (not NaN) as a new str, repr's. */
static PyObject *text_of(double v)
{
    char buf[40];
    int len = write_double(buf, v);
    if (len < 0) return NULL;
    PyObject *out = PyUnicode_New(len, 127);
    if (out == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(out), buf, (size_t)len);
    return out;
}

PyDoc_STRVAR(texts_doc,
             "texts(values, nan_text) -> list[str]\n\n"
             "repr() of each value of a contiguous float64 buffer, nan_text for NaN.");

static PyObject *py_texts(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *nan_text, *out;
    Py_ssize_t n, i;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*U:texts", &view, &nan_text)) return NULL;
    if (view.len % (Py_ssize_t)sizeof(double) != 0 || !PyBuffer_IsContiguous(&view, 'C')) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "texts: expected a contiguous buffer of float64 values");
    }
    n = view.len / (Py_ssize_t)sizeof(double);
    out = PyList_New(n);
    if (out != NULL) {
        const char *base = (const char *)view.buf;
        for (i = 0; i < n; i++) {
            double v;
            memcpy(&v, base + i * (Py_ssize_t)sizeof v, sizeof v); /* the buffer need not be aligned */
            PyObject *text;
            if (v != v) {
                text = nan_text;
                Py_INCREF(text);
            } else {
                text = text_of(v);
            }
            if (text == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, text);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(json_texts_doc,
             "json_texts(values) -> tuple[str, ...]\n\n"
             "Each value of a tuple as JSON text, as nbprec's dump writer has it: an int as str() writes it, a\n"
             "finite float as repr() does, NaN and infinities as the strings \"NaN\", \"Infinity\" and \"-Infinity\",\n"
             "None as null. Anything else is a TypeError.");

static PyObject *py_json_texts(PyObject *self, PyObject *values)
{
    static PyObject *null_text, *nan_text, *inf_text, *minus_inf_text;
    Py_ssize_t n, i;
    PyObject *out;
    (void)self;
    if (!PyTuple_Check(values)) return PyErr_Format(PyExc_TypeError, "json_texts: expected a tuple");
    if (null_text == NULL) {
        null_text = PyUnicode_InternFromString("null");
        nan_text = PyUnicode_InternFromString("\"NaN\"");
        inf_text = PyUnicode_InternFromString("\"Infinity\"");
        minus_inf_text = PyUnicode_InternFromString("\"-Infinity\"");
        if (null_text == NULL || nan_text == NULL || inf_text == NULL || minus_inf_text == NULL) return NULL;
    }
    n = PyTuple_GET_SIZE(values);
    out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(values, i), *text;
        if (v == Py_None) {
            text = null_text;
            Py_INCREF(text);
        } else if (PyFloat_CheckExact(v)) {
            double x = PyFloat_AS_DOUBLE(v);
            if (x != x) {
                text = nan_text;
                Py_INCREF(text);
            } else if (x - x != 0.0) {
                text = x > 0 ? inf_text : minus_inf_text;
                Py_INCREF(text);
            } else {
                text = text_of(x);
            }
        } else if (PyLong_CheckExact(v)) {
            text = PyObject_Str(v);
        } else {
            Py_DECREF(out);
            return PyErr_Format(PyExc_TypeError, "json_texts: expected int, float or None, not %.100s",
                                Py_TYPE(v)->tp_name);
        }
        if (text == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, text);
    }
    return out;
}

PyDoc_STRVAR(set_tables_doc,
             "set_tables(k_and_h, g) -> None\n\n"
             "Hand over the tables (see nbprec/floattext.py): k_and_h, 4 x 2046 int16 (k normal, k below a power of\n"
             "two, then h for each), and g, 617 x 2 uint64 (g1, g0 for k = -324 upwards), native byte order.");

static PyObject *py_set_tables(PyObject *self, PyObject *args)
{
    Py_buffer kh, g;
    Py_ssize_t i;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*:set_tables", &kh, &g)) return NULL;
    if (kh.len != (Py_ssize_t)(4 * Q_COUNT * sizeof(int16_t)) || g.len != (Py_ssize_t)(2 * K_COUNT * sizeof(uint64_t))) {
        PyBuffer_Release(&kh);
        PyBuffer_Release(&g);
        return PyErr_Format(PyExc_ValueError, "set_tables: tables of the wrong size");
    }
    const int16_t *khv = (const int16_t *)kh.buf;
    const uint64_t *gv = (const uint64_t *)g.buf;
    for (i = 0; i < Q_COUNT; i++) {
        k_of_q[0][i] = khv[i];
        k_of_q[1][i] = khv[Q_COUNT + i];
        h_of_q[0][i] = khv[2 * Q_COUNT + i];
        h_of_q[1][i] = khv[3 * Q_COUNT + i];
    }
    for (i = 0; i < K_COUNT; i++) {
        g1_of_k[i] = gv[2 * i];
        g0_of_k[i] = gv[2 * i + 1];
    }
    PyBuffer_Release(&kh);
    PyBuffer_Release(&g);
    tables_set = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"texts", py_texts, METH_VARARGS, texts_doc},
    {"json_texts", py_json_texts, METH_O, json_texts_doc},
    {"set_tables", py_set_tables, METH_VARARGS, set_tables_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_floattext", "Float64 values as repr writes them, in C (see nbprec/_floattext.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

static nbprec_floattext_api api = {write_double};

PyMODINIT_FUNC PyInit__floattext(void)
{
    PyObject *m = PyModule_Create(&module), *capsule;
    if (m == NULL) return NULL;
    capsule = PyCapsule_New(&api, NBPREC_FLOATTEXT_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
