/*
 * What the two translation units of nbprec.compare._fused share: the kernel (_fused.c) and the metrics made
 * from its sums (_fused_metrics.c). Internal to the extension: nothing here is a public C API.
 */
#ifndef NBPREC_FUSED_H
#define NBPREC_FUSED_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Element types of the buffers the kernel reads. */
enum { TYPE_F64 = 0, TYPE_F32 = 1, TYPE_F16 = 2, TYPE_BF16 = 3, N_TYPES = 4 };

/* Parameters of one pass over a pair (the KL offsets/floors and the shifts of the centred sums). */
typedef struct {
    double off_x, floor_x, off_y, floor_y; /* KL: max(v - off, floor) */
    double shift_x, shift_y;               /* centred sums: v - shift */
    double eps_b;                          /* the benchmark dtype's eps, used where y == 0 */
    int kl_normal; /* the caller vouches that every max(v - off, floor) is a positive normal double */
} Params;

/* Running totals; the order is the order of the tuple pair_sums returns (FUSED_SUMS in _sums.py, less the count
   it starts with). */
enum {
    S_SX, S_SY, S_SXX, S_SYY, S_SXY, S_SDD, S_SAD, S_MAD, S_REL, S_MREL,
    S_P1, S_P5, S_KSX, S_KSY, S_KT, S_CX, S_CXX, S_CY, S_CYY, S_LX, S_HX, S_LY, S_HY, N_SUMS
};

/* The state of a pass: the totals, then the element count and whether KL takes its short series first. */
enum { ST_N = N_SUMS, ST_NEAR = N_SUMS + 1, STATE_SIZE = N_SUMS + 2 };

/* _fused.c: a fresh state; one pass over n elements of each buffer, continuing `state` (touches no Python
   object: callable without the GIL); a contiguous read-only buffer of whole `type` elements (0 and an error set
   on failure). */
void nbprec_init_state(double *state);
void nbprec_measure(const char *x, int xt, const char *y, int yt, Py_ssize_t n, const Params *p, double *state);
int nbprec_get_buffer(PyObject *obj, int type, Py_buffer *view, Py_ssize_t *n, const char *side);
/* _fused.c, also callable without the GIL: min_max's pass (the extremes of n elements, their NaN and infinity
   counts) and nonfinite_counts's (the NaN and infinity counts of n elements). */
void nbprec_min_max(const char *b, int type, Py_ssize_t n, double *lo, double *hi, Py_ssize_t *nans,
                    Py_ssize_t *infs);
void nbprec_nonfinite(const char *b, int type, Py_ssize_t n, Py_ssize_t *nans, Py_ssize_t *infs);

/* _fused_metrics.c: the Python functions pair_metrics and pair_metrics_many, and their docstrings. */
PyObject *nbprec_pair_metrics(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *nbprec_pair_metrics_many(PyObject *self, PyObject *calls);
extern const char nbprec_pair_metrics_doc[];
extern const char nbprec_pair_metrics_many_doc[];

#endif
