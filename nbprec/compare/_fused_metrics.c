/*
 * nbprec.compare._fused, second part: the metric columns of a pair from the kernel's sums, in C.
 *
 * pair_metrics() is what nbprec.compare.metrics.tensor_metrics does on a pair of contiguous arrays, in C: the
 * pass's parameters from the recorded extremes (_pair_params), the pass, the pass again when those extremes were
 * not the pair's (direct_sums), or without usable extremes each side's minimum and maximum first (fused_sums);
 * then the metric columns from the sums (sums_values, _finish, _one_pass_std), and for a side holding NaN or
 * inf its counts from the bits (_nonfinite_reason). A pair costs a few microseconds of Python that way instead
 * of about twenty (120 for one holding NaN or inf), and pair_metrics_many() does a whole batch with the GIL
 * released once. Every value is the one the Python functions give, to the bit (the tests hold the two to each
 * other on real pairs): the same operations in the same order on IEEE doubles, the C library's sqrt, log and
 * log1p (which Python's math module calls), and no fused multiply-add (NO_CONTRACT), which would round a product
 * and a sum once instead of twice. One thing is not held: the sign of a NaN, which Python's own sum of two NaN
 * does not keep from one call to the next (it takes either's, as its interpreter has specialised the addition).
 */
#include "_fused.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#define NO_CONTRACT /* (see the pragma below) */
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NO_CONTRACT
#endif

#define EPS 2.220446049250313e-16          /* float64's epsilon (_sums.EPS) */
#define FLOAT32_EPS 1.1920928955078125e-07 /* 2^-23 (_sums.FLOAT32_EPS) */
#define SPAN_LIMIT 0x1p1020                /* _sums._SPAN_LIMIT */
#define STD_CANCEL 1e-4                    /* _sums._one_pass_std */

/* The metric columns, in the order of _sums._finish's dict. */
enum {
    M_COSINE, M_MAX_ABS, M_MEAN_ABS, M_RMSE, M_REL_EUCLIDEAN, M_ACC_REL, M_MAX_REL, M_MEAN_REL, M_KL,
    M_TARGET_MEAN, M_TARGET_STD, M_BENCH_MEAN, M_BENCH_STD, M_P1, M_P5, M_EUCLIDEAN, N_METRICS
};
static const char *const METRIC_NAMES[N_METRICS] = {
    "cosine", "max_abs_err", "mean_abs_err", "rmse", "rel_euclidean", "accumulated_rel_err", "max_rel_err",
    "mean_rel_err", "kl_divergence", "target_mean", "target_std", "bench_mean", "bench_std", "thousandth_ratio",
    "five_thousandth_ratio", "euclidean",
};
static PyObject *metric_keys[N_METRICS]; /* interned, made on the first call (with the GIL) */

typedef enum { REASON_NONE, REASON_TARGET_ZERO, REASON_BENCH_ZERO, REASON_NONFINITE } Reason;
static const char *const REASONS[] = {
    "",
    "target is all zero, benchmark is not: cosine undefined",
    "benchmark is all zero, target is not: cosine undefined",
    "", /* (made from the counts: nonfinite_reason) */
};

typedef struct {
    Py_buffer xv, yv;
    int xt, yt;
    Py_ssize_t n;
    double hints[4]; /* target min, max, benchmark min, max */
    int has_hints;
    double eps_b;
    int measured; /* 0: no columns here (the pair needs its arrays: the caller measures it) */
    double values[N_METRICS];
    Reason reason;
    int held;                /* whether the hints were the pair's extremes; -1 when there were no usable hints */
    Py_ssize_t nan[2], inf[2]; /* each side's NaN and infinities (counted when its sums are not finite) */
} Pair;

/* ---- _sums.py, operation for operation -------------------------------------------------------------- */

/* _sums._sqrt: NaN for NaN or a negative value, as numpy gives it */
static double sqrt_or_nan(double v) { return v >= 0 ? sqrt(v) : NAN; }

/* _sums._log_of_ratio: log(a / b), from log1p of the exact difference where a and b are close */
static double log_of_ratio(double a, double b)
{
    double ratio = a / b; /* (_ratio: IEEE division, inf or NaN where b is 0, as C divides) */
    if (0.5 < ratio && ratio < 2.0) return log1p((a - b) / b);
    if (ratio > 0) return log(ratio);
    return ratio == 0 ? -INFINITY : NAN;
}

/* _sums.usable_side: a side's recorded (min, max), finite and in order */
static int usable_side(const double *h) { return -INFINITY < h[0] && h[0] <= h[1] && h[1] < INFINITY; }

/* _sums.usable_hints */
static int usable(const double *h) { return usable_side(h) && usable_side(h + 2); }

/* _sums._pair_params from (min_x, max_x, min_y, max_y) */
NO_CONTRACT static void pair_params(const double *e, double eps_b, Params *p)
{
    double span_x = e[1] - e[0], span_y = e[3] - e[2];
    double shift_x = 0.5 * e[0] + 0.5 * e[1], shift_y = 0.5 * e[2] + 0.5 * e[3];
    p->off_x = span_x > 0 ? e[0] : 0.0; /* kl_offset_floor */
    p->floor_x = span_x > 0 ? FLOAT32_EPS * span_x : FLOAT32_EPS;
    p->off_y = span_y > 0 ? e[2] : 0.0;
    p->floor_y = span_y > 0 ? FLOAT32_EPS * span_y : FLOAT32_EPS;
    p->kl_normal = 0.0 <= span_x && span_x < SPAN_LIMIT && 0.0 <= span_y && span_y < SPAN_LIMIT &&
                   (p->floor_y < p->floor_x ? p->floor_y : p->floor_x) >= DBL_MIN;
    p->shift_x = isfinite(shift_x) ? shift_x : 0.0;
    p->shift_y = isfinite(shift_y) ? shift_y : 0.0;
    p->eps_b = eps_b;
}

/* _sums._one_pass_std; 0 where the sums cancel (an exact second pass is needed) */
NO_CONTRACT static int one_pass_std(double s, double ss, double n, double *out)
{
    double mean = s / n, mean_sq = ss / n;
    double var = mean_sq - mean * mean;
    if (!(var >= STD_CANCEL * mean_sq) && isfinite(var)) return 0;
    *out = isnan(var) ? NAN : sqrt(0.0 > var ? 0.0 : var);
    return 1;
}

/* _sums._finish and the standard deviations of sums_values (metrics._std where the one-pass sums do not
   cancel): the columns from a finished state of n > 0 elements; 0 when the pair needs its arrays (a standard
   deviation whose one-pass sums cancel). */
NO_CONTRACT static int finish(const double *st, Py_ssize_t count, double *v, Reason *reason)
{
    double n = (double)count, norm_x, norm_y, cosine, kl;
    if (!one_pass_std(st[S_CX], st[S_CXX], n, &v[M_TARGET_STD]) || !one_pass_std(st[S_CY], st[S_CYY], n, &v[M_BENCH_STD]))
        return 0;
    norm_x = sqrt_or_nan(st[S_SXX]);
    norm_y = sqrt_or_nan(st[S_SYY]);
    if (count == 1) {
        cosine = isfinite(st[S_SXY]) ? 1.0 : NAN;
    } else if (norm_x <= EPS && norm_y <= EPS) {
        cosine = 1.0;
    } else if (norm_x <= EPS || norm_y <= EPS) {
        cosine = NAN;
    } else if (isnan(st[S_SXY])) {
        cosine = NAN;
    } else {
        double r = st[S_SXY] / (norm_x * norm_y);
        cosine = 1.0 < r ? 1.0 : r; /* min(r, 1.0) */
    }
    kl = st[S_KT] / st[S_KSX] + log_of_ratio(st[S_KSY], st[S_KSX]);
    v[M_COSINE] = cosine;
    v[M_MAX_ABS] = st[S_MAD];
    v[M_MEAN_ABS] = st[S_SAD] / n;
    v[M_RMSE] = sqrt_or_nan(st[S_SDD] / n);
    v[M_REL_EUCLIDEAN] = sqrt_or_nan(st[S_SYY]) <= EPS ? 0.0 : sqrt_or_nan(st[S_SDD] / st[S_SYY]);
    v[M_ACC_REL] = st[S_REL];
    v[M_MAX_REL] = st[S_MREL];
    v[M_MEAN_REL] = st[S_REL] / n;
    v[M_KL] = kl < EPS ? 0.0 : kl;
    v[M_TARGET_MEAN] = st[S_SX] / n;
    v[M_BENCH_MEAN] = st[S_SY] / n;
    v[M_P1] = (double)(long long)st[S_P1] / n; /* (counts below 2^53: exact, as Python's int / int) */
    v[M_P5] = (double)(long long)st[S_P5] / n;
    v[M_EUCLIDEAN] = sqrt_or_nan(st[S_SDD]);
    *reason = !isnan(cosine) ? REASON_NONE : sqrt(st[S_SXX]) <= EPS ? REASON_TARGET_ZERO : REASON_BENCH_ZERO;
    return 1;
}

/* _kernels._fused_min_max of one side: (min, max) ignoring NaN, or NaN for both when the side holds a NaN. Python
   takes them window by window; one pass gives the same values but perhaps a zero's sign, which no column shows:
   a KL offset of -0 subtracts as +0 does, and a shift is a signed zero only for a side of zeros, whose centred
   sums are zero either way. */
static void side_min_max(const char *b, int type, Py_ssize_t n, double *out, Py_ssize_t *nans, Py_ssize_t *infs)
{
    double lo = INFINITY, hi = -INFINITY;
    nbprec_min_max(b, type, n, &lo, &hi, nans, infs);
    out[0] = *nans ? NAN : lo;
    out[1] = *nans ? NAN : hi;
}

static void measure_with(const Pair *it, const double *extremes, double *state)
{
    Params p;
    pair_params(extremes, it->eps_b, &p);
    nbprec_init_state(state);
    nbprec_measure((const char *)it->xv.buf, it->xt, (const char *)it->yv.buf, it->yt, it->n, &p, state);
}

/* Whether the pass in `state` found side k's values to be all finite with the extremes `h` (its recorded ones):
   then that pass is the one the side's own extremes give, and the side holds no NaN (its centred sum of squares
   would be NaN) and no infinity (an extreme would be one). */
static int partly_held(const double *state, int k, const double *h)
{
    double lo = state[k ? S_LY : S_LX], hi = state[k ? S_HY : S_HX];
    return !isnan(state[k ? S_CYY : S_CXX]) && lo == h[0] && hi == h[1];
}

/* One pair, start to end (no Python object touched: runs without the GIL), as metrics.tensor_metrics measures
   it. With usable hints (_sums.direct_sums): a pass with their parameters, and another with the extremes it
   found when those (Sums.extremes: NaN for a side holding NaN) were not the hints. Without (_kernels.fused_sums):
   each side's minimum and maximum first, then the pass; a side whose own hints are usable takes them instead of
   that first pass, and is checked by the pass (partly_held): where it held, the pass is the one its own extremes
   give; where not, the side's extremes are found and the pass made again. A float16 run that overflowed records
   NaN or inf statistics for most of its tensors, and its benchmark's usable ones: the benchmark's side (the
   wider type: two thirds of the pair's bytes) is then read once instead of twice. Then the columns; for a side
   holding NaN or inf, its counts (metrics._nonfinite_reason) and no pass ratios. The counts come from the
   extremes' pass when it ran (a pair holding NaN or inf has no usable recorded extremes: the usual case; a side
   whose own held has none), else from a pass of their own: on the float16 pair of bench/README.md that
   overflowed, the comparison took 71.1 against 74.2 ms (2026-12-04). */
static void measure_pair(Pair *it)
{
    double state[STATE_SIZE];
    const char *x = (const char *)it->xv.buf, *y = (const char *)it->yv.buf;
    int counted = 0; /* whether the extremes' pass counted each side's NaN and infinities */
    it->measured = 0;
    it->held = -1;
    if (it->n == 0) return;
    if (it->has_hints && usable(it->hints)) {
        double found[4];
        measure_with(it, it->hints, state);
        it->held = state[S_LX] == it->hints[0] && state[S_HX] == it->hints[1] && state[S_LY] == it->hints[2] &&
                   state[S_HY] == it->hints[3];
        found[0] = isnan(state[S_CXX]) ? NAN : state[S_LX];
        found[1] = isnan(state[S_CXX]) ? NAN : state[S_HX];
        found[2] = isnan(state[S_CYY]) ? NAN : state[S_LY];
        found[3] = isnan(state[S_CYY]) ? NAN : state[S_HY];
        if (found[0] == it->hints[0] && found[1] == it->hints[1] && found[2] == it->hints[2] &&
            found[3] == it->hints[3])
            it->held = 1;
        else
            measure_with(it, found, state);
    } else {
        double extremes[4];
        const char *bufs[2] = {x, y};
        const int types[2] = {it->xt, it->yt};
        int k, hinted[2], again = 0;
        for (k = 0; k < 2; k++) { /* a side whose recorded extremes are usable takes them (see partly_held) */
            hinted[k] = it->has_hints && usable_side(it->hints + 2 * k);
            if (hinted[k]) {
                extremes[2 * k] = it->hints[2 * k];
                extremes[2 * k + 1] = it->hints[2 * k + 1];
            } else {
                side_min_max(bufs[k], types[k], it->n, extremes + 2 * k, &it->nan[k], &it->inf[k]);
            }
        }
        measure_with(it, extremes, state);
        for (k = 0; k < 2; k++) {
            if (!hinted[k]) continue;
            if (partly_held(state, k, it->hints + 2 * k)) {
                it->nan[k] = it->inf[k] = 0;
            } else { /* (wrong recorded extremes: the side's own, as without them) */
                side_min_max(bufs[k], types[k], it->n, extremes + 2 * k, &it->nan[k], &it->inf[k]);
                again = 1;
            }
        }
        if (again) measure_with(it, extremes, state);
        counted = 1;
    }
    if (isfinite(state[S_SXX] + state[S_SYY])) {
        it->measured = finish(state, it->n, it->values, &it->reason);
        return;
    }
    if (!counted) { /* (a side of NaN or inf has no usable recorded extremes: it was counted, in the usual case) */
        nbprec_nonfinite(x, it->xt, it->n, &it->nan[0], &it->inf[0]);
        nbprec_nonfinite(y, it->yt, it->n, &it->nan[1], &it->inf[1]);
    }
    if (!(it->nan[0] + it->inf[0] + it->nan[1] + it->inf[1])) return; /* finite values whose squares overflow */
    if (!finish(state, it->n, it->values, &it->reason)) return;
    it->values[M_P1] = it->values[M_P5] = NAN;
    it->reason = REASON_NONFINITE;
    it->measured = 1;
}

/* ---- Python interface ------------------------------------------------------------------------------- */

/* The arguments of one pair (x, x_type, y, y_type, extremes, eps_b), its buffers held; 0 with an error set and
   nothing held on failure. */
static int pair_arguments(PyObject *const *args, Pair *it)
{
    Py_ssize_t ny;
    PyObject *hints = args[4];
    memset(it, 0, sizeof *it);
    it->xt = (int)PyLong_AsLong(args[1]);
    it->yt = (int)PyLong_AsLong(args[3]);
    it->eps_b = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) return 0;
    if (hints != Py_None) {
        int k;
        if (!PyTuple_Check(hints) || PyTuple_GET_SIZE(hints) != 4) {
            PyErr_SetString(PyExc_TypeError, "pair_metrics: extremes must be None or a tuple of 4 floats");
            return 0;
        }
        for (k = 0; k < 4; k++) {
            it->hints[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(hints, k));
            if (it->hints[k] == -1.0 && PyErr_Occurred()) return 0;
        }
        it->has_hints = 1;
    }
    if (!nbprec_get_buffer(args[0], it->xt, &it->xv, &it->n, "pair_metrics (target)")) return 0;
    if (!nbprec_get_buffer(args[2], it->yt, &it->yv, &ny, "pair_metrics (benchmark)")) {
        PyBuffer_Release(&it->xv);
        return 0;
    }
    if (it->n != ny) {
        PyBuffer_Release(&it->xv);
        PyBuffer_Release(&it->yv);
        PyErr_Format(PyExc_ValueError, "pair_metrics: element counts differ: %zd vs %zd", it->n, ny);
        return 0;
    }
    return 1;
}

static int make_keys(void)
{
    int k;
    if (metric_keys[N_METRICS - 1] != NULL) return 1;
    for (k = 0; k < N_METRICS; k++) {
        if (metric_keys[k] == NULL && (metric_keys[k] = PyUnicode_InternFromString(METRIC_NAMES[k])) == NULL) return 0;
    }
    return 1;
}

/* metrics._nonfinite_reason's text: 'non-finite values: target has 2 NaN, 1 inf; benchmark has ...' */
static PyObject *nonfinite_reason(const Pair *it)
{
    static const char *const LABELS[2] = {"target", "benchmark"};
    PyObject *parts[2] = {NULL, NULL}, *joined, *out;
    int k, found = 0;
    for (k = 0; k < 2; k++) {
        if (!(it->nan[k] || it->inf[k])) continue;
        parts[found] = PyUnicode_FromFormat("%s has %zd NaN, %zd inf", LABELS[k], it->nan[k], it->inf[k]);
        if (parts[found] == NULL) goto fail;
        found++;
    }
    joined = found == 2 ? PyUnicode_FromFormat("%U; %U", parts[0], parts[1]) : (Py_INCREF(parts[0]), parts[0]);
    if (joined == NULL) goto fail;
    out = PyUnicode_FromFormat("non-finite values: %U", joined);
    Py_DECREF(joined);
    Py_XDECREF(parts[0]);
    Py_XDECREF(parts[1]);
    return out;
fail:
    Py_XDECREF(parts[0]);
    Py_XDECREF(parts[1]);
    return NULL;
}

/* What pair_metrics returns for a measured pair: None, or (columns, reason, held, counts). */
static PyObject *pair_result(const Pair *it)
{
    PyObject *values, *value, *reason;
    int k;
    if (!it->measured) Py_RETURN_NONE;
    if (!make_keys() || (values = PyDict_New()) == NULL) return NULL;
    for (k = 0; k < N_METRICS; k++) {
        value = PyFloat_FromDouble(it->values[k]);
        if (value == NULL || PyDict_SetItem(values, metric_keys[k], value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(values);
            return NULL;
        }
        Py_DECREF(value);
    }
    reason = it->reason == REASON_NONFINITE ? nonfinite_reason(it) : PyUnicode_FromString(REASONS[it->reason]);
    if (reason == NULL) {
        Py_DECREF(values);
        return NULL;
    }
    return Py_BuildValue("(NNO(nn))", values, reason, it->held < 0 ? Py_None : it->held ? Py_True : Py_False,
                         it->nan[0] + it->inf[0], it->nan[1] + it->inf[1]);
}

const char nbprec_pair_metrics_doc[] =
    "pair_metrics(x, x_type, y, y_type, extremes, eps_b) -> (columns, reason, held, counts) or None\n\n"
    "The metric columns of one pair as nbprec.compare.metrics.tensor_metrics gives them on its arrays, to the bit\n"
    "(a NaN's sign aside): a pass with the parameters the recorded `extremes` (target min, max, benchmark min, max)\n"
    "give, again with the extremes found when they were not the pair's (direct_sums); without usable extremes\n"
    "(None, NaN, inf) each side's minimum and maximum first (fused_sums). `columns` a dict in sums_values's order,\n"
    "`reason` why columns are missing ('' when none is: a side all zero, or the NaN and inf counted), `held`\n"
    "whether the extremes were the pair's (None without usable ones), `counts` each side's NaN and infinities. None\n"
    "when the pair is empty or needs its arrays (a standard deviation whose one-pass sums cancel, squares that\n"
    "overflow float64). x and y as for pair_sums; eps_b the benchmark dtype's epsilon. The GIL is released while it\n"
    "measures.";

PyObject *nbprec_pair_metrics(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Pair it;
    PyObject *out;
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "pair_metrics takes 6 arguments (%zd given)", nargs);
    if (!pair_arguments(args, &it)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    measure_pair(&it);
    Py_END_ALLOW_THREADS
    out = pair_result(&it);
    PyBuffer_Release(&it.xv);
    PyBuffer_Release(&it.yv);
    return out;
}

const char nbprec_pair_metrics_many_doc[] =
    "pair_metrics_many(calls) -> list\n\n"
    "[pair_metrics(*call) for call in calls] (`calls`: a list of its 6-argument tuples), with the GIL released once\n"
    "for all of them rather than once per pair: threads measuring batches of small pairs then hand the GIL over\n"
    "once per batch. A call that is not valid fails the whole call, and nothing is measured.";

PyObject *nbprec_pair_metrics_many(PyObject *self, PyObject *calls)
{
    PyObject *seq, *out = NULL;
    Pair *items;
    Py_ssize_t count, held, k;
    (void)self;
    seq = PySequence_Fast(calls, "pair_metrics_many: expected a list of argument tuples");
    if (seq == NULL) return NULL;
    count = PySequence_Fast_GET_SIZE(seq);
    items = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Pair));
    if (items == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (held = 0; held < count; held++) { /* every call's arguments and buffers, before any is measured */
        PyObject *call = PySequence_Fast_GET_ITEM(seq, held);
        if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 6) {
            PyErr_SetString(PyExc_TypeError, "pair_metrics_many: each call is a tuple of pair_metrics's 6 arguments");
            goto done;
        }
        if (!pair_arguments(&PyTuple_GET_ITEM(call, 0), &items[held])) goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (k = 0; k < count; k++) measure_pair(&items[k]);
    Py_END_ALLOW_THREADS
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (k = 0; k < count; k++) {
        PyObject *result = pair_result(&items[k]);
        if (result == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, k, result);
    }
done:
    for (k = 0; k < held; k++) {
        PyBuffer_Release(&items[k].xv);
        PyBuffer_Release(&items[k].yv);
    }
    PyMem_Free(items);
    Py_DECREF(seq);
    return out;
}
