/*
 * nbprec.overflow._profile: what nbprec.overflow.numerics.profile_array counts on a payload, in one pass, in C.
 *
 * profile(buffer, type, upper, lower, lower_inclusive, exact) reads the buffer's elements of one type
 * (nbprec/_elements.h: the floats, the signed integers, uint8 and bool) in blocks of BLOCK, each converted
 * exactly to doubles in an L1-resident stack array and taken as magnitudes, and counts over them, in vectorised
 * loops: NaN, infinities, finite non-zero magnitudes, and for each threshold t of each list the finite
 * magnitudes x with x >= t (upper), 0 < x < t (lower), 0 < x <= t (lower_inclusive), x == t (exact); with the
 * largest finite magnitude and the sum of the finite squares. The numpy version makes about fifteen passes
 * over a float64 copy of every chunk; this one reads the payload once, with the GIL released.
 *
 * Returns (nan, inf, nonzero, abs_max, sum of squares, at_least, below, at_most, equal), the four last as
 * tuples in the order of their thresholds; abs_max is -inf when no value is finite. The counts are exact (the
 * comparisons are on exact conversions); the sum of squares is added in blocks of lane-parallel partial sums,
 * so it may differ from numpy's in its last bits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../_elements.h"

#define BLOCK 1024
#define MAX_THRESHOLDS 64 /* per list: the callers pass a handful */

enum { UPPER, LOWER, LOWER_INCLUSIVE, EXACT, N_LISTS };

typedef struct {
    double values[N_LISTS][MAX_THRESHOLDS];
    Py_ssize_t count[N_LISTS];
    int64_t hits[N_LISTS][MAX_THRESHOLDS];
    int64_t nan, inf, nonzero;
    double abs_max, sumsq;
} Profile;

/* One block of magnitudes a[0..m): each threshold's count, in a loop of its own over the block (in L1). */
ALWAYS_INLINE void count_block(const double *restrict a, Py_ssize_t m, Profile *p)
{
    Py_ssize_t i, k;
    for (k = 0; k < p->count[UPPER]; k++) {
        const double t = p->values[UPPER][k];
        int64_t c = 0;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < m; i++) c += (a[i] >= t) & (a[i] < INFINITY);
        p->hits[UPPER][k] += c;
    }
    for (k = 0; k < p->count[LOWER]; k++) {
        const double t = p->values[LOWER][k];
        int64_t c = 0;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < m; i++) c += (a[i] > 0.0) & (a[i] < t) & (a[i] < INFINITY);
        p->hits[LOWER][k] += c;
    }
    for (k = 0; k < p->count[LOWER_INCLUSIVE]; k++) {
        const double t = p->values[LOWER_INCLUSIVE][k];
        int64_t c = 0;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < m; i++) c += (a[i] > 0.0) & (a[i] <= t) & (a[i] < INFINITY);
        p->hits[LOWER_INCLUSIVE][k] += c;
    }
    for (k = 0; k < p->count[EXACT]; k++) {
        const double t = p->values[EXACT][k];
        int64_t c = 0;
#pragma omp simd reduction(+ : c)
        for (i = 0; i < m; i++) c += (a[i] == t) & (a[i] < INFINITY);
        p->hits[EXACT][k] += c;
    }
}

ALWAYS_INLINE void profile_body(const char *base, int type, Py_ssize_t n, Profile *p)
{
    double a[BLOCK];
    Py_ssize_t start, i;
    for (start = 0; start < n; start += BLOCK) {
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK;
        int64_t nan = 0, inf = 0, nonzero = 0;
        double hi = -INFINITY, sq = 0.0;
        load_block(base, type, start, m, a);
#pragma omp simd reduction(+ : nan, inf, nonzero, sq) reduction(max : hi)
        for (i = 0; i < m; i++) {
            double x = fabs(a[i]);
            int finite = x < INFINITY; /* false for NaN too */
            a[i] = x;
            nan += x != x;
            inf += x == INFINITY;
            nonzero += finite & (x > 0.0);
            hi = (finite & (x > hi)) ? x : hi;
            sq += finite ? x * x : 0.0;
        }
        p->nan += nan;
        p->inf += inf;
        p->nonzero += nonzero;
        p->abs_max = hi > p->abs_max ? hi : p->abs_max;
        p->sumsq += sq;
        count_block(a, m, p);
    }
}

/* The kernel of each instruction set (see _elements.h), the CPU's chosen at import. */
ISA_BUILDS(profile, profile_body, Profile)
static void (*profile_impl)(const char *, int, Py_ssize_t, Profile *) = profile_base; /* read-only after import */
static int isa = 0;

/* The thresholds of one list argument (a sequence of numbers) into p; 0 and an error set on failure. */
static int take_list(PyObject *seq, int list, Profile *p)
{
    PyObject *fast = PySequence_Fast(seq, "profile: thresholds must be a sequence of numbers");
    Py_ssize_t k, count;
    if (fast == NULL) return 0;
    count = PySequence_Fast_GET_SIZE(fast);
    if (count > MAX_THRESHOLDS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "profile: at most %d thresholds a list (%zd given)", MAX_THRESHOLDS, count);
        return 0;
    }
    for (k = 0; k < count; k++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, k));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return 0;
        }
        p->values[list][k] = v;
        p->hits[list][k] = 0;
    }
    p->count[list] = count;
    Py_DECREF(fast);
    return 1;
}

static PyObject *hits_tuple(const Profile *p, int list)
{
    PyObject *out = PyTuple_New(p->count[list]);
    Py_ssize_t k;
    if (out == NULL) return NULL;
    for (k = 0; k < p->count[list]; k++) {
        PyObject *v = PyLong_FromLongLong(p->hits[list][k]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, v);
    }
    return out;
}

PyDoc_STRVAR(profile_doc,
             "profile(buffer, type, upper, lower, lower_inclusive, exact) -> (nan, inf, nonzero, abs_max, sumsq, "
             "at_least, below, at_most, equal)\n\n"
             "The counts of nbprec.overflow.numerics.profile_array over a contiguous buffer of whole elements of "
             "`type` (0 float64, 1 float32, 2 float16, 3 bfloat16, 4 int64, 5 int32, 6 int16, 7 int8, 8 uint8, "
             "9 bool), in one pass; abs_max is -inf when no value is finite.");

static PyObject *py_profile(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Profile *p;
    PyObject *result = NULL;
    long type;
    int list;
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "profile takes 6 arguments (%zd given)", nargs);
    type = PyLong_AsLong(args[1]);
    if (type == -1 && PyErr_Occurred()) return NULL;
    if (type < 0 || type >= N_TYPES) return PyErr_Format(PyExc_ValueError, "profile: unknown element type %ld", type);
    p = PyMem_Calloc(1, sizeof *p);
    if (p == NULL) return PyErr_NoMemory();
    for (list = 0; list < N_LISTS; list++) {
        if (!take_list(args[2 + list], list, p)) {
            PyMem_Free(p);
            return NULL;
        }
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyMem_Free(p);
        return NULL;
    }
    if (view.len % type_size[type]) {
        PyErr_Format(PyExc_ValueError, "profile: %zd bytes are not whole elements of %d bytes", view.len,
                     type_size[type]);
    } else {
        p->abs_max = -INFINITY;
        Py_BEGIN_ALLOW_THREADS
        profile_impl((const char *)view.buf, (int)type, view.len / type_size[type], p);
        Py_END_ALLOW_THREADS
        PyObject *hits[N_LISTS];
        int made = 0;
        for (list = 0; list < N_LISTS && (list == 0 || hits[list - 1] != NULL); list++, made++)
            hits[list] = hits_tuple(p, list);
        if (made == N_LISTS && hits[N_LISTS - 1] != NULL) {
            result = Py_BuildValue("(LLLddNNNN)", (long long)p->nan, (long long)p->inf, (long long)p->nonzero,
                                   p->abs_max, p->sumsq, hits[UPPER], hits[LOWER], hits[LOWER_INCLUSIVE], hits[EXACT]);
        } else {
            for (list = 0; list < made; list++) Py_XDECREF(hits[list]);
        }
    }
    PyBuffer_Release(&view);
    PyMem_Free(p);
    return result;
}

static PyMethodDef methods[] = {
    {"profile", (PyCFunction)(void (*)(void))py_profile, METH_FASTCALL, profile_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_profile", "One-pass overflow counts of a payload, in C (see nbprec/overflow/_profile.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__profile(void)
{
    PyObject *m;
#if NBPREC_DISPATCH
    __builtin_cpu_init();
    isa = best_isa();
#endif
    profile_impl = profile_BUILDS[isa];
    m = PyModule_Create(&module);
    /* the instruction set of the kernel in use, for the tests and the benchmarks */
    if (m != NULL && PyModule_AddStringConstant(m, "ISA", ISA_NAMES[isa]) < 0) Py_CLEAR(m);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_THRESHOLDS", MAX_THRESHOLDS) < 0) Py_CLEAR(m);
    return m;
}
