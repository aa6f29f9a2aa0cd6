/*
 * nbprec.capture._stats: the statistics of one tensor in one pass over its memory, in C.
 *
 * The capture calls stats(address, n, type) on a CPU tensor's contiguous data, in its own dtype (float64,
 * float32, float16, bfloat16, the signed integers, uint8 and bool): no copy, no widening to float64 first.
 * Each block of BLOCK elements is read from memory once (float16, bfloat16 and the integers converted into an
 * L1-resident stack array) and fed to two vectorised loops (`omp simd` reductions): the minimum, the maximum
 * and the zero count in the lane type, then, in double, the sum and the sum of squares of the values less a
 * shift c, the mean of the first block's finite values (read twice: it is in L1). From those two sums come
 * the mean (c + sum/n), the variance (sum of squares/n - (sum/n)^2, without the one-pass formula's
 * cancellation: the values less c are centred) and the sum of squares of the values themselves
 * (sum of squares + 2c sum + n c^2). That last one cancels only if n c^2 is much larger than it, and since the
 * first block's squares are part of it (B c^2 at least, B its finite count), its relative error stays below
 * about 4e-16 n/B. Where n c^2 exceeds 10^4 times that sum (a tensor of at least 10^4 blocks whose first
 * block's mean is far from the rest's values, or with few finite values there), the squares are summed again,
 * exactly: a second pass, for such tensors only. Block totals are added with Neumaier's compensation, so the
 * rounding error grows with BLOCK/lanes, not with n.
 *
 * A block whose sums are not finite holds a NaN or an inf (float64 inputs: or squares beyond 1e308): it is
 * redone one element at a time, counting NaN and inf and leaving them out of the value statistics, which
 * are over the finite values (the meaning of nbprec.stats.tensor_stats). The block is still in the cache.
 *
 * Returns (min, max, mean, std, norm, abs_max, nan_count, inf_count, zero_count): the order of
 * nbprec.stats.STAT_COLUMNS; the six value statistics are None when no value is finite. Tensors of at least
 * 2^15 elements, and those summed in parts, are summed with the GIL released.
 *
 * stats(..., threads) with threads > 1 (the capture passes torch's own thread count) sums a tensor of at least
 * 2 SPLIT_FROM bytes in up to that many parts at once (at least SPLIT_FROM bytes each), on the threads of the
 * OpenMP runtime torch has loaded: the same threads that run torch's ops, which wait for work between them (a
 * thread of our own would have to take turns with them for a core). The parts share the shift, and their
 * totals are added in order: the result depends on n and the part count only, not on which thread ran what.
 * Without an OpenMP runtime in the process the tensor is summed whole. A process forked from one that ran
 * OpenMP regions must pass threads=1, as it must call torch.set_num_threads(1): a region would wait there for
 * threads the child does not have.
 *
 * Parts are of 64 KB at least (tensors of 128 KB and more are split). In a capture torch's threads spin between
 * its ops, so a region starts in a microsecond or two; the parts of 1 MB this kernel first took left the
 * capture's tensors of 128 KB-2 MB (about 100 a MiniLM training step) to the calling thread alone.
 *
 * On x86-64 with GCC or Clang the kernel is compiled for AVX-512, AVX2+FMA and the baseline, and the best
 * build the CPU runs is picked at import time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../_elements.h"

#if (defined(__unix__) || defined(__APPLE__)) && (defined(__GNUC__) || defined(__clang__))
#include <dlfcn.h>
#define NBPREC_TEAM 1
#else
#define NBPREC_TEAM 0
#endif

#define BLOCK 2048
#define NOGIL_FROM 32768
#define SPLIT_FROM (1 << 16) /* bytes per part at least: below, starting a parallel region costs what it saves
                                 (with torch's threads waiting for work between ops, as they are in a capture) */
#define MAX_PARTS 8

/* Running totals of one tensor. */
typedef struct {
    double dsum, dsum_c, dsq, dsq_c; /* sums of (x - shift) and its squares, with their Neumaier compensations */
    double lo, hi, shift;
    Py_ssize_t nan, inf, zero;
} Totals;

ALWAYS_INLINE void neumaier(double *total, double *comp, double x)
{
    double t = *total + x;
    *comp += fabs(*total) >= fabs(x) ? (*total - t) + x : (x - t) + *total;
    *total = t;
}

/* One element at a time: NaN and inf counted and left out. */
ALWAYS_INLINE void slow_block(const double *restrict v, Py_ssize_t m, Totals *t)
{
    double ds = 0.0, dq = 0.0, lo = t->lo, hi = t->hi;
    Py_ssize_t i, zero = 0;
    for (i = 0; i < m; i++) {
        double x = v[i];
        if (isnan(x)) {
            t->nan++;
        } else if (isinf(x)) {
            t->inf++;
        } else {
            double d = x - t->shift;
            ds += d;
            dq += d * d;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
            zero += x == 0.0;
        }
    }
    neumaier(&t->dsum, &t->dsum_c, ds);
    neumaier(&t->dsq, &t->dsq_c, dq);
    t->lo = lo;
    t->hi = hi;
    t->zero += zero;
}

/* The sums of one block, vectorised, in two loops over the block (read from memory once, then from L1): the
   minimum, maximum and zero count in the lane type (float for the 4- and 2-byte floats: twice the lanes of a
   double), then the two sums in double. The sums run over the two halves of the block at once: two
   independent chains of additions per sum, so that the loop waits on the adder's throughput, not on its
   latency. */
typedef struct {
    double ds, dq, lo, hi;
    Py_ssize_t zero;
} BlockSums;

#define FAST_BLOCK(NAME, CTYPE, LANE, CONVERT, CONVERTED)                                                      \
    ALWAYS_INLINE void NAME(const char *base, Py_ssize_t start, Py_ssize_t m, double shift, BlockSums *out)     \
    {                                                                                                           \
        const CTYPE *restrict src = (const CTYPE *)base + start;                                                \
        LANE buf[BLOCK];                                                                                        \
        const LANE *restrict v = (const LANE *)src;                                                             \
        LANE lo = (LANE)INFINITY, hi = (LANE)-INFINITY;                                                         \
        double ds = 0.0, dq = 0.0, ds2 = 0.0, dq2 = 0.0;                                                        \
        Py_ssize_t i, h = m / 2;                                                                                \
        int zero = 0;                                                                                           \
        if (CONVERTED) {                                                                                        \
            for (i = 0; i < m; i++) buf[i] = (LANE)CONVERT(src[i]);                                             \
            v = buf;                                                                                            \
        }                                                                                                       \
        _Pragma("omp simd reduction(min : lo) reduction(max : hi) reduction(+ : zero)")                        \
        for (i = 0; i < m; i++) {                                                                               \
            LANE x = v[i];                                                                                      \
            lo = x < lo ? x : lo;                                                                               \
            hi = x > hi ? x : hi;                                                                               \
            zero += x == (LANE)0;                                                                               \
        }                                                                                                       \
        _Pragma("omp simd reduction(+ : ds, dq, ds2, dq2)")                                                   \
        for (i = 0; i < h; i++) {                                                                               \
            double d = (double)v[i] - shift, e = (double)v[h + i] - shift;                                      \
            ds += d;                                                                                            \
            dq += d * d;                                                                                        \
            ds2 += e;                                                                                           \
            dq2 += e * e;                                                                                       \
        }                                                                                                       \
        for (i = 2 * h; i < m; i++) { /* the odd element out */                                                 \
            double d = (double)v[i] - shift;                                                                    \
            ds += d;                                                                                            \
            dq += d * d;                                                                                        \
        }                                                                                                       \
        out->ds = ds + ds2, out->dq = dq + dq2;                                                                 \
        out->zero = zero, out->lo = (double)lo, out->hi = (double)hi;                                           \
    }

FAST_BLOCK(block_f64, double, double, AS_LANE, 0)
FAST_BLOCK(block_f32, float, float, AS_LANE, 0)
FAST_BLOCK(block_f16, uint16_t, float, f16_to_float, 1)
FAST_BLOCK(block_bf16, uint16_t, float, BF16_TO_FLOAT, 1)
FAST_BLOCK(block_i64, int64_t, double, AS_LANE, 1)
FAST_BLOCK(block_i32, int32_t, double, AS_LANE, 1)
FAST_BLOCK(block_i16, int16_t, float, AS_LANE, 1)
FAST_BLOCK(block_i8, int8_t, float, AS_LANE, 1)
FAST_BLOCK(block_u8, uint8_t, float, AS_LANE, 1)

ALWAYS_INLINE void stats_body(const char *base, int type, Py_ssize_t n, Totals *t)
{
    double buf[BLOCK];
    BlockSums b;
    Py_ssize_t start;
    /* double lanes (float64, int64, int32): half the elements, so that a block and its doubles fit in L1 */
    Py_ssize_t block = type == TYPE_F64 || type == TYPE_I64 || type == TYPE_I32 ? BLOCK / 2 : BLOCK;
    for (start = 0; start < n; start += block) {
        Py_ssize_t m = n - start < block ? n - start : block;
        switch (type) { /* the same branch every block: predicted */
        case TYPE_F64: block_f64(base, start, m, t->shift, &b); break;
        case TYPE_F32: block_f32(base, start, m, t->shift, &b); break;
        case TYPE_F16: block_f16(base, start, m, t->shift, &b); break;
        case TYPE_BF16: block_bf16(base, start, m, t->shift, &b); break;
        case TYPE_I64: block_i64(base, start, m, t->shift, &b); break;
        case TYPE_I32: block_i32(base, start, m, t->shift, &b); break;
        case TYPE_I16: block_i16(base, start, m, t->shift, &b); break;
        case TYPE_I8: block_i8(base, start, m, t->shift, &b); break;
        default: block_u8(base, start, m, t->shift, &b); break;
        }
        if (isfinite(b.dq)) { /* no NaN, no inf in the block (else neither sum is finite) */
            neumaier(&t->dsum, &t->dsum_c, b.ds);
            neumaier(&t->dsq, &t->dsq_c, b.dq);
            t->lo = b.lo < t->lo ? b.lo : t->lo;
            t->hi = b.hi > t->hi ? b.hi : t->hi;
            t->zero += b.zero;
        } else {
            load_block(base, type, start, m, buf);
            slow_block(buf, m, t);
        }
    }
}

ISA_BUILDS(stats, stats_body, Totals)

/* The shift of the centred sums: the mean of the finite values among the first BLOCK (0 if none), summed in
   vector lanes (`omp simd`; a chain of one addition after another took 2 us a tensor, a tenth of a MiniLM step's
   mid-sized tensors' time). x - x is 0 for a finite x, NaN for NaN and the infinities. */
ALWAYS_INLINE void shift_body(const char *base, int type, Py_ssize_t n, double *shift)
{
    double buf[BLOCK], s = 0.0, k = 0.0;
    Py_ssize_t i, m = n < BLOCK ? n : BLOCK;
    load_block(base, type, 0, m, buf);
    _Pragma("omp simd reduction(+ : s, k)")
    for (i = 0; i < m; i++) {
        double x = buf[i];
        int finite = x - x == 0.0;
        s += finite ? x : 0.0;
        k += finite ? 1.0 : 0.0;
    }
    *shift = k > 0.0 ? s / k : 0.0;
}

ISA_BUILDS(shift, shift_body, double)

typedef void (*stats_fn)(const char *, int, Py_ssize_t, Totals *);
typedef void (*shift_fn)(const char *, int, Py_ssize_t, double *);
static stats_fn stats_impl = stats_base; /* chosen once at import; read-only afterwards */
static shift_fn shift_impl = shift_base;
static const char *isa_name = "baseline";

/* Large tensors in parts at once, on the threads of the OpenMP runtime torch already loaded (see the top of the
   file). The runtime is looked up, never loaded: with dlopen(RTLD_NOLOAD), by the names of GNU's, LLVM's and
   Intel's, which all have GOMP_parallel (GCC's entry point of a parallel region, a stable ABI since GCC 4.9). */
#if NBPREC_TEAM
typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
static gomp_parallel_fn gomp_parallel = NULL;
static const char *team_name = NULL; /* the runtime found */

static void team_find(void) /* with the GIL held, until found (torch may be imported after this module) */
{
    static const char *const names[] = {"libgomp.so.1", "libomp.so", "libiomp5.so", "libomp.dylib", "libiomp5.dylib"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *lib = dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (lib != NULL) {
            gomp_parallel = (gomp_parallel_fn)dlsym(lib, "GOMP_parallel");
            if (gomp_parallel != NULL) {
                team_name = names[i];
                return;
            }
        }
    }
}

typedef struct {
    const char *base;
    int type;
    Py_ssize_t n, part;  /* elements, and per part (whole blocks) */
    int parts, next;     /* parts, and the next one not yet taken */
    Totals totals[MAX_PARTS];
} Team;

/* Each thread of the region takes parts until none is left: right however many threads the runtime gives. */
static void team_work(void *data)
{
    Team *team = (Team *)data;
    int p;
    while ((p = __atomic_fetch_add(&team->next, 1, __ATOMIC_RELAXED)) < team->parts) {
        Py_ssize_t start = (Py_ssize_t)p * team->part;
        Py_ssize_t m = p == team->parts - 1 ? team->n - start : team->part;
        stats_impl(team->base + start * type_size[team->type], team->type, m, &team->totals[p]);
    }
}
#endif

/* How many parts a tensor of `bytes` is summed in with `threads` threads: at most MAX_PARTS, each of SPLIT_FROM
   bytes at least (1: whole). Where no OpenMP runtime is loaded the tensor is summed whole all the same. */
static int part_count(Py_ssize_t bytes, long threads)
{
    long parts = threads < 1 ? 1 : threads < MAX_PARTS ? threads : MAX_PARTS;
    return (int)(parts > bytes / SPLIT_FROM ? (bytes / SPLIT_FROM > 1 ? bytes / SPLIT_FROM : 1) : parts);
}

/* The totals of n elements: in `parts` parts at once (part_count) when an OpenMP runtime is loaded. */
static void sum_all(const char *base, int type, Py_ssize_t n, int parts, Totals *t)
{
#if NBPREC_TEAM
    int p;
    if (parts >= 2 && gomp_parallel != NULL) {
        Team team;
        team.base = base, team.type = type, team.n = n, team.parts = parts, team.next = 0;
        team.part = n / parts / BLOCK * BLOCK; /* whole blocks of either size (BLOCK, BLOCK / 2) */
        for (p = 0; p < parts; p++) {
            memset(&team.totals[p], 0, sizeof(Totals));
            team.totals[p].lo = INFINITY, team.totals[p].hi = -INFINITY, team.totals[p].shift = t->shift;
        }
        gomp_parallel(team_work, &team, (unsigned)parts, 0);
        for (p = 0; p < parts; p++) { /* in order: the result does not depend on which thread took what */
            const Totals *h = &team.totals[p];
            neumaier(&t->dsum, &t->dsum_c, h->dsum);
            t->dsum_c += h->dsum_c;
            neumaier(&t->dsq, &t->dsq_c, h->dsq);
            t->dsq_c += h->dsq_c;
            t->lo = h->lo < t->lo ? h->lo : t->lo;
            t->hi = h->hi > t->hi ? h->hi : t->hi;
            t->nan += h->nan, t->inf += h->inf, t->zero += h->zero;
        }
        return;
    }
#else
    (void)parts;
#endif
    stats_impl(base, type, n, t);
}

/* The sum of squares of the finite values, plainly (the rare second pass, see the top of the file). */
static double sum_of_squares(const char *base, int type, Py_ssize_t n)
{
    double buf[BLOCK], sq = 0.0, comp = 0.0;
    Py_ssize_t start, i;
    for (start = 0; start < n; start += BLOCK) {
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK;
        double q = 0.0;
        load_block(base, type, start, m, buf);
        for (i = 0; i < m; i++)
            if (isfinite(buf[i])) q += buf[i] * buf[i];
        neumaier(&sq, &comp, q);
    }
    return isfinite(sq) ? sq + comp : sq;
}

/* A compensated total; an overflowed one (inf) stays inf instead of becoming inf - inf. */
static double total(double sum, double comp) { return isfinite(sum) ? sum + comp : sum; }

/* The statistics from the totals; `sq` is the sum of squares of the values themselves (see the top). */
static PyObject *build_result(const Totals *t, Py_ssize_t n, double sq)
{
    Py_ssize_t finite = n - t->nan - t->inf;
    if (finite <= 0) {
        return Py_BuildValue("(OOOOOOnnn)", Py_None, Py_None, Py_None, Py_None, Py_None, Py_None, t->nan, t->inf,
                             t->zero);
    }
    double dsum = total(t->dsum, t->dsum_c), dsq = total(t->dsq, t->dsq_c);
    double nf = (double)finite, dmean = dsum / nf;
    double var = isinf(dsq) ? dsq : dsq / nf - dmean * dmean; /* squares beyond 1e308: inf, as numpy has it */
    double abs_max = fabs(t->lo) > fabs(t->hi) ? fabs(t->lo) : fabs(t->hi);
    return Py_BuildValue("(ddddddnnn)", t->lo, t->hi, t->shift + dmean, sqrt(var > 0.0 ? var : 0.0),
                         sqrt(sq > 0.0 ? sq : 0.0), abs_max, t->nan, t->inf, t->zero);
}

/* The sum of squares of the values: from the centred sums when that is accurate to 1e-12 or so (always, but
   for tensors with few finite values in their first block), else summed again. */
static double squares(const Totals *t, const char *base, int type, Py_ssize_t n)
{
    Py_ssize_t finite = n - t->nan - t->inf;
    double dsum = total(t->dsum, t->dsum_c), dsq = total(t->dsq, t->dsq_c), c = t->shift;
    double nc2 = (double)finite * c * c, sq = dsq + 2.0 * c * dsum + nc2;
    if (finite <= 0 || !isfinite(sq)) return finite <= 0 ? 0.0 : sum_of_squares(base, type, n);
    /* the error is a few ulps of dsq + 2|c dsum| + nc2 <= 3 nc2 + 3 dsq: below 1e-11 of sq unless nc2 > 1e4 sq;
       the first block's k finite values put k c^2 into sq, so nc2 / sq < finite / k: that takes 10^4 blocks */
    return nc2 > 1e4 * sq ? sum_of_squares(base, type, n) : sq;
}

PyDoc_STRVAR(stats_doc,
             "stats(address, n, type, threads=1, owner=None) -> (min, max, mean, std, norm, abs_max, nan_count, "
             "inf_count, zero_count)\n\n"
             "Statistics of n contiguous elements at memory address ``address`` of element type ``type`` (0 "
             "float64, 1 float32, 2 float16, 3 bfloat16, 4 int64, 5 int32, 6 int16, 7 int8, 8 uint8, 9 bool), "
             "over the finite values, in one pass. The caller keeps the memory alive and unchanged: ``owner``, "
             "the object holding it (a tensor), is not read, only referenced for the call (compiled code may "
             "release a local after its last use, before the call it is an argument of would be). ``threads``: a "
             "large tensor is summed in up to that many parts at once, on the threads of the OpenMP runtime loaded.");

static PyObject *py_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "stats() takes 3 to 5 arguments (address, n, type[, threads[, owner]])");
        return NULL;
    }
    void *address = PyLong_AsVoidPtr(args[0]);
    if (address == NULL && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    long type = PyLong_AsLong(args[2]);
    if (type == -1 && PyErr_Occurred()) return NULL;
    long threads = 1;  /* parts at most: the caller's thread count */
    if (nargs >= 4 && (threads = PyLong_AsLong(args[3])) == -1 && PyErr_Occurred()) return NULL;
    if (type < 0 || type >= N_TYPES) {
        PyErr_Format(PyExc_ValueError, "unknown element type %ld", type);
        return NULL;
    }
    if (n < 0 || (n > 0 && address == NULL)) {
        PyErr_SetString(PyExc_ValueError, "need a non-negative element count and a non-null address");
        return NULL;
    }
    Totals t;
    memset(&t, 0, sizeof t);
    t.lo = INFINITY;
    t.hi = -INFINITY;
    double sq = 0.0;
    if (n > 0) {
        const char *base = (const char *)address;
        int parts = part_count(n * type_size[type], threads); /* (summed whole without a runtime loaded) */
#if NBPREC_TEAM
        if (parts > 1 && gomp_parallel == NULL) team_find();
#endif
        if (n >= NOGIL_FROM || parts > 1) {
            Py_BEGIN_ALLOW_THREADS;
            shift_impl(base, (int)type, n, &t.shift);
            sum_all(base, (int)type, n, parts, &t);
            sq = squares(&t, base, (int)type, n);
            Py_END_ALLOW_THREADS;
        } else {
            shift_impl(base, (int)type, n, &t.shift);
            stats_impl(base, (int)type, n, &t);
            sq = squares(&t, base, (int)type, n);
        }
    }
    return build_result(&t, n, sq);
}

static PyObject *py_isa(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(isa_name);
}

static PyObject *py_parts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "parts() takes 2 arguments (nbytes, threads)");
        return NULL;
    }
    Py_ssize_t bytes = PyLong_AsSsize_t(args[0]);
    if (bytes == -1 && PyErr_Occurred()) return NULL;
    long threads = PyLong_AsLong(args[1]);
    if (threads == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(part_count(bytes, threads));
}

static PyObject *py_team(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
#if NBPREC_TEAM
    if (gomp_parallel == NULL) team_find();
    if (team_name != NULL) return PyUnicode_FromString(team_name);
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"stats", (PyCFunction)(void (*)(void))py_stats, METH_FASTCALL, stats_doc},
    {"parts", (PyCFunction)(void (*)(void))py_parts, METH_FASTCALL,
     "parts(nbytes, threads) -> int: how many parts stats() sums a tensor of nbytes in with that many threads "
     "(1: whole; more only where an OpenMP runtime is loaded)."},
    {"isa", py_isa, METH_NOARGS, "The instruction set the kernel was compiled for and chose at import."},
    {"team", py_team, METH_NOARGS,
     "The OpenMP runtime whose threads sum large tensors in parts (looked up among those loaded), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stats", "One-pass tensor statistics, in C (see nbprec/capture/_stats.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stats(void)
{
#if NBPREC_DISPATCH
    int isa;
    __builtin_cpu_init();
    isa = best_isa();
    stats_impl = stats_BUILDS[isa];
    shift_impl = shift_BUILDS[isa];
    isa_name = ISA_NAMES[isa];
#endif
    PyObject *m = PyModule_Create(&module);
    /* the smallest tensor summed in parts, in bytes (the bench and the tests read it rather than repeat it) */
    if (m != NULL && PyModule_AddIntConstant(m, "SPLIT_BYTES", 2 * SPLIT_FROM) < 0) Py_CLEAR(m);
    return m;
}
