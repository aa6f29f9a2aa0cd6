/*
 * nbprec.compare._fused: the metric sums of one target/benchmark tensor pair in one pass, in C.
 *
 * The numpy kernel (_kernels.py) makes about 30 passes over every chunk; this one reads the pair from memory
 * once (after a min/max pass per side, which KL needs first) and feeds every running sum of METRICS.md. It
 * allocates nothing per call and runs with the GIL released, so worker threads compare pairs in parallel.
 *
 * Inputs are C-contiguous buffers of one of four element types (TYPE_*). Data is converted in blocks of
 * BLOCK elements into two stack arrays of doubles (L1-resident; the AVX-512 build converts a whole block of the
 * usual kind in registers instead, _fused_avx512.c), and each block's sums are accumulated in lane-parallel
 * partial sums (vectorised with `omp simd` reductions) before they are added to the totals: a two-level summation
 * whose rounding error grows with BLOCK/lanes + n/BLOCK, not with n.
 *
 * NaN and inf propagate as numpy propagates them: sums become NaN/inf; a maximum is NaN when any term was
 * NaN (detected from the matching sum of non-negative terms, which is NaN exactly when one term is).
 *
 * KL's logarithm, log(kx / ky), dominates the cost. Most terms of nearly equal tensors have kx / ky near 1,
 * where log(kx / ky) = 2 atanh(s) with s = (kx - ky) / (kx + ky) small: four terms of the series, no
 * exponent work (kl_block_near). The few terms farther from 1 are then gathered and corrected in one
 * vectorised loop with log_ratio, a branch-free logarithm of a ratio exact to a few ulp (exponents, mantissas,
 * 2 atanh(s) over the whole range), and a block where many are far takes log_ratio for every term (kl_block).
 * Blocks holding a value that is not a positive normal double are redone with the C library's log.
 *
 * On x86-64 with GCC or Clang the kernels are compiled three times, for AVX-512, for AVX2+FMA (both with F16C,
 * which converts float16) and for the baseline, and the fastest the CPU runs is picked at import time. The
 * AVX-512 build gains the 32 vector registers, the mask registers and the direct conversions: 8% faster than
 * the AVX2 build on the msprobe pair's bfloat16/float32 tensors (Zen 4); its registers hold every sum of a block
 * at once, so it measures a block in one loop where the others take three (pair_body: 17% less time a pair on an
 * Intel Xeon, 2026-12-05), and that loop is written out in intrinsics for whole blocks (_fused_avx512.c: the
 * values converted as they are read, 17% less time a pair again on Zen 4, 2026-12-07). GCC gives it 512-bit
 * vectors, which
 * Zen 4 runs as two halves: the same build held to 256-bit ones (target "prefer-vector-width=256") took 4-5%
 * longer per element pair on 64 K-element pairs (2026-11-30).
 *
 * The extension's other part, _fused_metrics.c, turns the sums of a pair into its metric columns (pair_metrics);
 * _fused.h holds what the two share.
 */
#include "_fused.h"
#include "_fused_kernel.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const Py_ssize_t ITEMSIZE[N_TYPES] = {8, 4, 2, 2};

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define CTZ64(v) __builtin_ctzll(v)
#else
#define ALWAYS_INLINE static inline
static int ctz64_portable(uint64_t v) /* trailing zero bits of v != 0 */
{
    int n = 0;
    for (; !(v & 1u); v >>= 1) n++;
    return n;
}
#define CTZ64(v) ctz64_portable(v)
#endif

static double bits_to_double(uint64_t b) { double d; memcpy(&d, &b, sizeof d); return d; }
static uint64_t double_to_bits(double d) { uint64_t b; memcpy(&b, &d, sizeof b); return b; }
static float bits_to_float(uint32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }

/* ---- conversion of one block to double ---------------------------------------------------------- */

#if NBPREC_DISPATCH
/* float16 to double with the F16C conversion (exact: subnormals included; NaN stays NaN, quieted), eight
   values at a time: a third of the bit-by-bit conversion's time on the NPU dumps' float16 tensors. */
TARGET_AVX2 static inline void load_f16_hw(const uint16_t *src, Py_ssize_t m, double *restrict out)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_pd(out + i, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
        _mm256_storeu_pd(out + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
    }
    for (; i < m; i++) out[i] = (double)_cvtsh_ss(src[i]);
}
#endif

/* `avx2`, a constant at each call, is true in the builds for CPUs with AVX2 and F16C: the helpers compiled for
   them (load_f16_hw, far_bits_avx2) may be called; it is 2 in the AVX-512 build, which calls far_bits_avx512. */
ALWAYS_INLINE void load_block(const char *base, int type, Py_ssize_t start, Py_ssize_t m, double *restrict out,
                              int avx2)
{
    Py_ssize_t i;
    if (type == TYPE_F64) {
        const double *src = (const double *)base + start;
        for (i = 0; i < m; i++) out[i] = src[i];
    } else if (type == TYPE_F32) {
        const float *src = (const float *)base + start;
        for (i = 0; i < m; i++) out[i] = (double)src[i];
    } else if (type == TYPE_BF16) {
        /* bfloat16 is the upper half of a float32 */
        const uint16_t *src = (const uint16_t *)base + start;
        for (i = 0; i < m; i++) out[i] = (double)bits_to_float((uint32_t)src[i] << 16);
    } else {
#if NBPREC_DISPATCH
        if (avx2) {
            load_f16_hw((const uint16_t *)base + start, m, out);
            return;
        }
#else
        (void)avx2;
#endif
        /* float16 by bits: the sign-extended half shifted left by 42 puts exponent and mantissa where a
           double keeps them, the mask clears the sign-extension copies, and 2^1008 moves the exponent bias
           from 15 to 1023 (exact for normals and subnormals). Exponent 31 (inf, NaN) gets the double's
           all-ones exponent instead, keeping sign and mantissa. */
        const uint16_t *src = (const uint16_t *)base + start;
        for (i = 0; i < m; i++) {
            uint16_t h = src[i];
            uint64_t b = ((uint64_t)(int64_t)(int16_t)h << 42) & 0x81ffffffffffffffULL;
            uint64_t special = (uint64_t)0 - (uint64_t)((h & 0x7c00u) == 0x7c00u);
            uint64_t finite = double_to_bits(bits_to_double(b) * 0x1p1008);
            out[i] = bits_to_double((finite & ~special) | ((b | 0x7ff0000000000000ULL) & special));
        }
    }
}

/* ---- natural logarithm of a ratio, branch-free -------------------------------------------------- */

/* (LN2_HI, LN2_LO, SQRT2, ONE_BITS, MANTISSA_BITS, EXP_MAGIC: _fused_kernel.h) */

/* 2 atanh(s) = log((1 + s) / (1 - s)) for |s| <= 0.1716...: 2 s (1 + z/3 + z^2/5 + ... + z^8/17), z = s^2 <=
   0.0295. The first term left out is below 4e-14 of the result at the ends of the range and shrinks as s^18
   towards 1 (ratios near 1, where KL's cancellation is, come out exact to the last bits). The polynomial is
   evaluated in Estrin's scheme (pairs, then pairs of pairs): four dependent steps instead of eight. */
ALWAYS_INLINE double two_atanh(double s)
{
    double z = s * s, z2 = z * z, z4 = z2 * z2;
    double p01 = 1.0 / 3.0 + z * (1.0 / 5.0), p23 = 1.0 / 7.0 + z * (1.0 / 9.0);
    double p45 = 1.0 / 11.0 + z * (1.0 / 13.0), p67 = 1.0 / 15.0 + z * (1.0 / 17.0);
    double p = (p01 + z2 * p23) + z4 * (p45 + z2 * p67);
    return 2.0 * s + 2.0 * s * z * p;
}

/* log(a / b) for positive normal doubles a and b, without forming a / b: with a = 2^ea ma and b = 2^eb mb
   (mantissas in [1, 2)), one mantissa is doubled when their ratio is outside [sqrt(1/2), sqrt(2)], so that
   s = (ma - mb) / (ma + mb) is small; ma - mb is then exact and log(a / b) = k ln 2 + 2 atanh(s). The
   exponents become doubles through EXP_MAGIC (AVX2 has no int64 -> double conversion). */
ALWAYS_INLINE double log_ratio(double a, double b)
{
    uint64_t abits = double_to_bits(a), bbits = double_to_bits(b);
    double k = bits_to_double((abits >> 52) | EXP_MAGIC) - bits_to_double((bbits >> 52) | EXP_MAGIC);
    double ma = bits_to_double((abits & MANTISSA_BITS) | ONE_BITS);
    double mb = bits_to_double((bbits & MANTISSA_BITS) | ONE_BITS);
    uint64_t up = (uint64_t)0 - (uint64_t)(ma > SQRT2 * mb); /* masks: `c ? 1.0 : 0.0` blocks vectorising */
    uint64_t down = (uint64_t)0 - (uint64_t)(SQRT2 * ma < mb);
    mb += bits_to_double(double_to_bits(mb) & up);
    ma += bits_to_double(double_to_bits(ma) & down);
    k += bits_to_double(ONE_BITS & up) - bits_to_double(ONE_BITS & down);
    double s = (ma - mb) / (ma + mb);
    return k * LN2_HI + (two_atanh(s) + k * LN2_LO);
}

/* 1 for a positive normal double (bits in [bits(DBL_MIN), bits(inf))), else 0. */
ALWAYS_INLINE uint64_t is_positive_normal(double v)
{
    return (double_to_bits(v) - 0x0010000000000000ULL) < (0x7ff0000000000000ULL - 0x0010000000000000ULL);
}

/* v where `keep` is all ones, 1.0 where it is 0 (a select by bit mask: GCC does not vectorise `c ? v : 1.0`
   in these loops). */
ALWAYS_INLINE double keep_or_one(double v, uint64_t keep)
{
    return bits_to_double((double_to_bits(v) & keep) | (ONE_BITS & ~keep));
}

/* ---- the kernels --------------------------------------------------------------------------------- */

/* Extremes of floats by their bits, for float32, float16 and bfloat16 (their conversions to double are exact
   and keep the order, so the double extremes are the conversions of these). A sign-magnitude pattern b
   becomes a two's-complement key with the order of the values: b itself for a positive sign, b with every bit
   but the sign flipped for a negative one (-0 then sorts just below +0, which compare equal as doubles). NaN
   patterns (magnitude bits above those of inf) take neutral keys and are counted. Integer lanes: 16 per
   256-bit vector for the 16-bit types, against 4 doubles for the converting loop. */
#define MINMAX_KEYS(NAME, UT, ST, SHIFT, ST_MAX, ST_MIN)                                                      \
    ALWAYS_INLINE void NAME(const UT *src, Py_ssize_t n, UT nan_above, UT *out_lo, UT *out_hi,              \
                            Py_ssize_t *out_nan, Py_ssize_t *out_inf)                                       \
    {                                                                                                       \
        const UT magnitude = (UT)((UT)~(UT)0 >> 1);                                                         \
        ST lo = ST_MAX, hi = ST_MIN;                                                                        \
        Py_ssize_t nans = 0, infs = 0, start, i;                                                            \
        for (start = 0; start < n; start += 16384) { /* the counts of a part fit in ST */                   \
            Py_ssize_t m = n - start < 16384 ? n - start : 16384;                                           \
            const UT *part = src + start;                                                                   \
            ST count = 0, inf_count = 0;                                                                    \
            _Pragma("omp simd reduction(min : lo) reduction(max : hi) reduction(+ : count, inf_count)")     \
            for (i = 0; i < m; i++) {                                                                       \
                UT b = part[i];                                                                             \
                ST key = (ST)(b ^ ((UT)((ST)b >> SHIFT) & magnitude));                                      \
                ST nan = (ST)((b & magnitude) > nan_above);                                                 \
                ST for_lo = nan ? ST_MAX : key, for_hi = nan ? ST_MIN : key;                                \
                lo = for_lo < lo ? for_lo : lo;                                                             \
                hi = for_hi > hi ? for_hi : hi;                                                             \
                count += nan;                                                                               \
                inf_count += (ST)((b & magnitude) == nan_above); /* (the magnitude of inf) */               \
            }                                                                                               \
            nans += (Py_ssize_t)(UT)count;                                                                  \
            infs += (Py_ssize_t)(UT)inf_count;                                                              \
        }                                                                                                   \
        *out_lo = (UT)((UT)lo ^ ((UT)((ST)lo >> SHIFT) & magnitude)); /* keys back to bit patterns */        \
        *out_hi = (UT)((UT)hi ^ ((UT)((ST)hi >> SHIFT) & magnitude));                                       \
        *out_nan = nans;                                                                                    \
        *out_inf = infs;                                                                                    \
    }
MINMAX_KEYS(minmax_keys16, uint16_t, int16_t, 15, INT16_MAX, INT16_MIN)
MINMAX_KEYS(minmax_keys32, uint32_t, int32_t, 31, INT32_MAX, INT32_MIN)

ALWAYS_INLINE void minmax_body(const char *base, int type, Py_ssize_t n, double *out_min, double *out_max,
                               Py_ssize_t *out_nan, Py_ssize_t *out_inf)
{
    double block[BLOCK];
    double lo = INFINITY, hi = -INFINITY, nans = 0.0, infs = 0.0;
    Py_ssize_t start, i;
    if (type != TYPE_F64) {
        Py_ssize_t count;
        if (type == TYPE_F32) {
            uint32_t bits[2];
            minmax_keys32((const uint32_t *)base, n, 0x7f800000u, &bits[0], &bits[1], &count, out_inf);
            block[0] = (double)bits_to_float(bits[0]);
            block[1] = (double)bits_to_float(bits[1]);
        } else {
            uint16_t bits[2];
            minmax_keys16((const uint16_t *)base, n, type == TYPE_F16 ? 0x7c00u : 0x7f80u, &bits[0], &bits[1],
                          &count, out_inf);
            load_block((const char *)bits, type, 0, 2, block, 0);
        }
        *out_nan = count;
        if (count == n) { /* nothing but NaN (or nothing): no extremes */
            block[0] = INFINITY;
            block[1] = -INFINITY;
        }
        *out_min = block[0];
        *out_max = block[1];
        return;
    }
    for (start = 0; start < n; start += BLOCK) {
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK;
        double blo = INFINITY, bhi = -INFINITY, bnan = 0.0, binf = 0.0;
        load_block(base, type, start, m, block, 0);
#pragma omp simd reduction(min : blo) reduction(max : bhi) reduction(+ : bnan, binf)
        for (i = 0; i < m; i++) {
            double v = block[i];
            blo = v < blo ? v : blo;
            bhi = v > bhi ? v : bhi;
            bnan += (v != v) ? 1.0 : 0.0;
            binf += fabs(v) == INFINITY ? 1.0 : 0.0;
        }
        lo = blo < lo ? blo : lo;
        hi = bhi > hi ? bhi : hi;
        nans += bnan;
        infs += binf;
    }
    *out_min = lo;
    *out_max = hi;
    *out_nan = (Py_ssize_t)nans;
    *out_inf = (Py_ssize_t)infs;
}

/* A KL term's value: v less its side's offset, floored (NaN stays NaN: the comparison is false). */
ALWAYS_INLINE double kl_value(double v, double off, double floor)
{
    double t = v - off;
    return t < floor ? floor : t;
}

/* The KL term of one block with the C library's log (used when a value was not a positive normal). */
static double kl_block_libm(const double *x, const double *y, Py_ssize_t m, const Params *p)
{
    double kt = 0.0;
    Py_ssize_t i;
    for (i = 0; i < m; i++) {
        double tx = x[i] - p->off_x, ty = y[i] - p->off_y;
        double ax = tx < p->floor_x ? p->floor_x : tx;
        double ay = ty < p->floor_y ? p->floor_y : ty;
        kt += ax * log(ax / ay);
    }
    return kt;
}

/* log(r) as the C library gives it where r is not a positive finite double (the KL terms of infinities and NaN):
   inf for inf, -inf for 0, r itself for NaN; the library's log elsewhere. */
static double log_special(double r)
{
    if (r != r) return r;
    if (r == INFINITY) return INFINITY;
    if (r == 0.0) return -INFINITY;
    return log(r);
}

/* kl_block_libm's sum for a block some of whose KL terms are not of positive normal values (kl_block counted them,
   `odd`), to the bit, without taking the C library's log of every term where it can. For float32, float16 and
   bfloat16 values (`narrow`) such a term is one of an infinity or a NaN (the floors keep the others positive
   normal), and no finite term reaches 1e43: the block's sum is then decided by those terms alone. +inf (x
   infinite) and -inf (y infinite) terms give +inf or -inf; a NaN term, or infinities of both signs, give a NaN,
   found as the library's sum finds it, the odd terms summed in order to the first NaN (NaN + anything is that
   NaN). Otherwise the whole block is summed as kl_block_libm sums it. A tensor holding NaN or inf (a float16
   overflow) made every block take the library's log 512 times: 5-9 times the time of a finite pair
   (2026-12-01). */
ALWAYS_INLINE double kl_block_odd(const double *x, const double *y, Py_ssize_t m, const Params *p, int narrow)
{
    const double off_x = p->off_x, floor_x = p->floor_x, off_y = p->off_y, floor_y = p->floor_y;
    double nans = 0, pos = 0, neg = 0, kt = 0;
    Py_ssize_t i;
    if (!narrow) return kl_block_libm(x, y, m, p);
#pragma omp simd reduction(+ : nans, pos, neg)
    for (i = 0; i < m; i++) {
        double ax = kl_value(x[i], off_x, floor_x), ay = kl_value(y[i], off_y, floor_y);
        double inf_x = ax == INFINITY ? 1.0 : 0.0, inf_y = ay == INFINITY ? 1.0 : 0.0;
        nans += (ax != ax ? 1.0 : 0.0) + (ay != ay ? 1.0 : 0.0) + inf_x * inf_y;
        pos += inf_x * (1.0 - inf_y);
        neg += inf_y * (1.0 - inf_x);
    }
    if (nans == 0.0 && (pos == 0.0 || neg == 0.0)) {
        if (pos != 0.0) return INFINITY;
        if (neg != 0.0) return -INFINITY;
        return kl_block_libm(x, y, m, p); /* (none: not expected of narrow values) */
    }
    for (i = 0; i < m; i++) {
        double ax = kl_value(x[i], off_x, floor_x), ay = kl_value(y[i], off_y, floor_y);
        if (is_positive_normal(ax) & is_positive_normal(ay)) continue; /* (finite: it cannot change a NaN) */
        kt += ax * log_special(ax / ay);
        if (kt != kt) break;
    }
    return kt;
}

/* kl_block's ksx, ksy and count of terms not of positive normal values, without its logarithms, for a block of
   float32, float16 or bfloat16 values added to a KL sum that is already an infinity or a NaN: a finite block sum
   leaves it as it is (inf + x is inf, and a NaN stays), and such a block's finite terms cannot add up to an
   infinity, so only its odd terms can change the sum (kl_block_odd sums them). A tensor holding NaN or inf
   otherwise took the exact logarithm of every term of every block, 2.5 times the time of a finite pair. */
ALWAYS_INLINE void kl_block_settled(const double *restrict x, const double *restrict y, Py_ssize_t m,
                                    const Params *p, double *out_ksx, double *out_ksy, double *out_odd)
{
    const double off_x = p->off_x, floor_x = p->floor_x, off_y = p->off_y, floor_y = p->floor_y;
    double ksx = 0, ksy = 0, odd = 0;
    Py_ssize_t i;
#pragma omp simd reduction(+ : ksx, ksy, odd)
    for (i = 0; i < m; i++) {
        double kx = kl_value(x[i], off_x, floor_x), ky = kl_value(y[i], off_y, floor_y);
        ksx += kx;
        ksy += ky;
        odd += is_positive_normal(kx) & is_positive_normal(ky) ? 0.0 : 1.0;
    }
    *out_ksx = ksx;
    *out_ksy = ksy;
    *out_odd = odd;
}

/* The KL sums of one block: ksx, ksy (sums of the floored, shifted values) and kt = sum kx log(kx / ky).
   With `checked` (a constant at each call, so each call compiles to its own loop) values that are not
   positive normal doubles take log(1) and are counted in `odd`, and the caller redoes the block. With
   `near` (the count of terms whose ratio is near 1, see kl_block_near) wanted, `out_near` gets it. */
ALWAYS_INLINE void kl_block(const double *restrict x, const double *restrict y, Py_ssize_t m, const Params *p,
                            int checked, double *out_ksx, double *out_ksy, double *out_kt, double *out_odd,
                            double *out_near)
{
    const double off_x = p->off_x, floor_x = p->floor_x, off_y = p->off_y, floor_y = p->floor_y;
    double ksx = 0, ksy = 0, kt = 0, odd = 0, near = 0;
    Py_ssize_t i;
#pragma omp simd reduction(+ : ksx, ksy, kt, odd, near)
    for (i = 0; i < m; i++) {
        double tx = x[i] - off_x, ty = y[i] - off_y;
        double kx = tx < floor_x ? floor_x : tx; /* NaN stays NaN: the comparison is false */
        double ky = ty < floor_y ? floor_y : ty;
        ksx += kx;
        ksy += ky;
        uint64_t keep = (uint64_t)0 - ((is_positive_normal(kx) & is_positive_normal(ky)) | (uint64_t)!checked);
        odd += keep ? 0.0 : 1.0;
        kt += kx * log_ratio(keep_or_one(kx, keep), keep_or_one(ky, keep));
        if (out_near) near += fabs(kx - ky) <= NEAR * (kx + ky) ? 1.0 : 0.0;
    }
    *out_ksx = ksx;
    *out_ksy = ksy;
    *out_kt = kt;
    *out_odd = odd;
    if (out_near) *out_near = near;
}

/* 2 atanh(s) for |s| <= NEAR = 1/32: 2 s + s z (2/3 + 2/5 z + 2/7 z^2 + 2/9 z^3), z = s^2 <= 2^-10. The first
   term left out, 2/11 s z^5, is below 2^-50 / 11 < 1e-16 of the result; the leading 2 s is exact. */
ALWAYS_INLINE double two_atanh_near(double s)
{
    double z = s * s, z2 = z * z;
    double q = (2.0 / 3.0 + z * (2.0 / 5.0)) + z2 * (2.0 / 7.0 + z * (2.0 / 9.0));
    return 2.0 * s + s * z * q;
}

/* One element's terms of kl_block_near's sums (ksx, ksy, kt, smax; off_x, floor_x, off_y, floor_y in scope): its
   s is stored in `s_slot`. A macro, so that pair_body's fused loop takes the very same steps. */
#define NEAR_KL_TERMS(xi, yi, s_slot)                                                                               \
    do {                                                                                                           \
        double tx_ = (xi) - off_x, ty_ = (yi) - off_y;                                                             \
        double kx_ = tx_ < floor_x ? floor_x : tx_;                                                                \
        double ky_ = ty_ < floor_y ? floor_y : ty_;                                                                \
        ksx += kx_;                                                                                                \
        ksy += ky_;                                                                                                \
        double s_ = (kx_ - ky_) / (kx_ + ky_), as_ = fabs(s_);                                                     \
        (s_slot) = s_;                                                                                             \
        smax = as_ > smax ? as_ : smax;                                                                            \
        kt += kx_ * two_atanh_near(s_);                                                                            \
    } while (0)

/* The KL sums of one block of positive normal terms (kl_normal), taking log(kx / ky) = 2 atanh(s) with
   s = (kx - ky) / (kx + ky) and the short series of two_atanh_near: where |s| <= NEAR, kx - ky is exact (the
   two are within a factor of 2), so s is exact to about one ulp even where kx / ky is within an ulp of 1, and
   four terms of the series suffice. Every s is kept in `s_out`, and `out_far` says whether some |s| was
   beyond NEAR: the caller then swaps those terms for exact ones (kl_far_terms). For nearly equal tensors,
   the common case, few are (bf16 against fp32: about 2%, mostly next to a side's minimum, where both are
   small). */
ALWAYS_INLINE void kl_block_near(const double *restrict x, const double *restrict y, Py_ssize_t m,
                                 const Params *p, double *restrict s_out, double *out_ksx, double *out_ksy,
                                 double *out_kt, int *out_far)
{
    const double off_x = p->off_x, floor_x = p->floor_x, off_y = p->off_y, floor_y = p->floor_y;
    double ksx = 0, ksy = 0, kt = 0, smax = 0;
    Py_ssize_t i;
#pragma omp simd reduction(+ : ksx, ksy, kt) reduction(max : smax)
    for (i = 0; i < m; i++) NEAR_KL_TERMS(x[i], y[i], s_out[i]);
    *out_ksx = ksx;
    *out_ksy = ksy;
    *out_kt = kt;
    *out_far = smax > NEAR;
}

/* What to add to kl_block_near's kt for one term whose |s| is beyond NEAR: its exact value less the short
   series' one. kl_far_terms gathers the few terms that need it and runs it over them in a vectorised loop,
   rather than computing a log of every term of the block. */
ALWAYS_INLINE double kl_far_correction(double x, double y, double s, const Params *p)
{
    double tx = x - p->off_x, ty = y - p->off_y;
    double kx = tx < p->floor_x ? p->floor_x : tx;
    double ky = ty < p->floor_y ? p->floor_y : ty;
    return kx * (log_ratio(kx, ky) - two_atanh_near(s));
}

/* Which of a block's terms are beyond NEAR (or NaN): bit j % 64 of bits[j / 64] for term j. */
static void far_bits_base(const double *s, Py_ssize_t m, uint64_t *bits)
{
    Py_ssize_t j;
    for (j = 0; j < BLOCK / 64; j++) bits[j] = 0;
    for (j = 0; j < m; j++) bits[j >> 6] |= (uint64_t)!(fabs(s[j]) <= NEAR) << (j & 63);
}

#if NBPREC_DISPATCH
/* far_bits_base four terms at a time: a compare and a move of its sign bits (a block with a few far terms
   spent more time finding them, term by term, than correcting them). */
TARGET_AVX2 static void far_bits_avx2(const double *s, Py_ssize_t m, uint64_t *bits)
{
    const __m256d near = _mm256_set1_pd(NEAR);
    const __m256d magnitude = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    Py_ssize_t j;
    for (j = 0; j < BLOCK / 64; j++) bits[j] = 0;
    for (j = 0; j + 4 <= m; j += 4) {
        __m256d a = _mm256_and_pd(_mm256_loadu_pd(s + j), magnitude);
        bits[j >> 6] |= (uint64_t)_mm256_movemask_pd(_mm256_cmp_pd(a, near, _CMP_NLE_UQ)) << (j & 63);
    }
    for (; j < m; j++) bits[j >> 6] |= (uint64_t)!(fabs(s[j]) <= NEAR) << (j & 63);
}

/* far_bits_base eight terms at a time, each word of 64 terms from eight compares into mask registers: in the
   AVX-512 build, the kernel took 3% less time on the msprobe pair's bfloat16/float32 tensors (3% of their KL
   terms are far, in 28% of the blocks) than with far_bits_avx2 (2026-11-30). */
TARGET_AVX512 static void far_bits_avx512(const double *s, Py_ssize_t m, uint64_t *bits)
{
    const __m512d near = _mm512_set1_pd(NEAR);
    Py_ssize_t w, j, k;
    for (w = 0; w < BLOCK / 64; w++) bits[w] = 0;
    for (w = 0; (w + 1) * 64 <= m; w++) {
        uint64_t word = 0;
        for (k = 0; k < 8; k++) {
            __m512d a = _mm512_abs_pd(_mm512_loadu_pd(s + w * 64 + k * 8));
            word |= (uint64_t)_mm512_cmp_pd_mask(a, near, _CMP_NLE_UQ) << (k * 8);
        }
        bits[w] = word;
    }
    for (j = w * 64; j < m; j++) bits[j >> 6] |= (uint64_t)!(fabs(s[j]) <= NEAR) << (j & 63);
}
#endif

/* The corrections of a block's terms beyond NEAR (their s kept in s_in), and how many there were: the far
   terms are found as bit masks (far_bits_*; `avx2`, a constant at each call, says which build's may be used),
   gathered in order, and corrected in one vectorised loop (the scalar loop of one correction at a time, with
   a term-by-term search, cost the msprobe pair of bench/compare.py 10% of nbprec.compare's time: about 1% of
   its terms are far, next to each side's minimum). */
ALWAYS_INLINE double kl_far_terms(const double *x, const double *y, const double *s_in, Py_ssize_t m,
                                  const Params *p, Py_ssize_t *out_count, int avx2)
{
    uint64_t bits[BLOCK / 64];
    double fx[BLOCK], fy[BLOCK], fs[BLOCK];
    double kt = 0;
    Py_ssize_t w, j, count = 0;
#if NBPREC_DISPATCH
    if (avx2 == 2)
        far_bits_avx512(s_in, m, bits);
    else if (avx2)
        far_bits_avx2(s_in, m, bits);
    else
        far_bits_base(s_in, m, bits);
#else
    (void)avx2;
    far_bits_base(s_in, m, bits);
#endif
    for (w = 0; w < BLOCK / 64; w++) { /* the far terms, gathered in order */
        uint64_t mask = bits[w];
        while (mask) {
            j = w * 64 + CTZ64(mask);
            mask &= mask - 1;
            fx[count] = x[j];
            fy[count] = y[j];
            fs[count] = s_in[j];
            count++;
        }
    }
#pragma omp simd reduction(+ : kt)
    for (j = 0; j < count; j++) kt += kl_far_correction(fx[j], fy[j], fs[j], p); /* vectorised, branch-free */
    *out_count = count;
    return kt;
}

/* max() that is NaN when either side is */
ALWAYS_INLINE double max_nan(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }

/* Whether every one of the block's m values is NaN. */
ALWAYS_INLINE int all_nan(const double *v, Py_ssize_t m)
{
    double nans = 0;
    Py_ssize_t i;
#pragma omp simd reduction(+ : nans)
    for (i = 0; i < m; i++) nans += v[i] != v[i] ? 1.0 : 0.0;
    return nans == (double)m;
}

/* What pair_body's loops add to `tot` for a block one side of which is nothing but NaN (`nan_x`: the target's,
   and v the benchmark's values; else the benchmark's, and v the target's), KL's sum being NaN already, without
   those loops: every sum of the NaN side's values, and of both sides', is NaN (NaN plus anything); that side's
   extremes, which ignore NaN, stay as they are; the pass counts add 0 (every error ratio is NaN); the relative
   error is NaN, except for a target of NaN beside a benchmark whose every |y| is at most EPS (each term 0). The
   other side's own sums (its mean, its standard deviation, its norm) and extremes are taken as the loops take
   them. A float16 run that overflowed holds whole tensors of NaN: their pairs took 2.4 times the time of a
   finite pair (2026-12-03). */
ALWAYS_INLINE void one_side_block(const double *restrict v, Py_ssize_t m, double shift, int nan_x, double *tot)
{
    double svv = 0, cv = 0, cvv = 0, big = 0, lo = INFINITY, hi = -INFINITY, rel;
    Py_ssize_t i;
#pragma omp simd reduction(+ : svv, cv, cvv, big) reduction(min : lo) reduction(max : hi)
    for (i = 0; i < m; i++) {
        double vi = v[i], u = vi - shift;
        svv += vi * vi;
        cv += u;
        cvv += u * u;
        lo = vi < lo ? vi : lo;
        hi = vi > hi ? vi : hi;
        big += fabs(vi) <= EPS ? 0.0 : 1.0; /* (NaN counts: its ratio is NaN) */
    }
    rel = nan_x && big == 0.0 ? 0.0 : NAN;
    tot[nan_x ? S_SX : S_SY] += NAN;
    tot[nan_x ? S_SY : S_SX] += cv + (double)m * shift;
    tot[nan_x ? S_SXX : S_SYY] += NAN;
    tot[nan_x ? S_SYY : S_SXX] += svv;
    tot[S_SXY] += NAN;
    tot[S_SDD] += NAN;
    tot[S_SAD] += NAN;
    tot[S_MAD] = NAN;
    tot[S_REL] += rel;
    tot[S_MREL] = max_nan(tot[S_MREL], rel);
    tot[nan_x ? S_CX : S_CY] += NAN;
    tot[nan_x ? S_CXX : S_CYY] += NAN;
    tot[nan_x ? S_CY : S_CX] += cv;
    tot[nan_x ? S_CYY : S_CXX] += cvv;
    if (nan_x) {
        tot[S_LY] = lo < tot[S_LY] ? lo : tot[S_LY];
        tot[S_HY] = hi > tot[S_HY] ? hi : tot[S_HY];
    } else {
        tot[S_LX] = lo < tot[S_LX] ? lo : tot[S_LX];
        tot[S_HX] = hi > tot[S_HX] ? hi : tot[S_HX];
    }
}

/* One element's terms of pair_body's plain sums (d gets |x - y|; shift_x, shift_y in scope) ... */
#define PLAIN_TERMS(xi, yi, d)                                                                                     \
    do {                                                                                                           \
        sxx += (xi) * (xi);                                                                                        \
        syy += (yi) * (yi);                                                                                        \
        sxy += (xi) * (yi);                                                                                        \
        (d) = fabs((xi) - (yi));                                                                                   \
        sdd += (d) * (d);                                                                                          \
        sad += (d);                                                                                                \
        mad = (d) > mad ? (d) : mad;                                                                               \
        /* sums of v - shift (shift near the mean): the means, and the variances without cancellation */         \
        double ux_ = (xi) - shift_x, uy_ = (yi) - shift_y;                                                         \
        cx += ux_;                                                                                                 \
        cxx += ux_ * ux_;                                                                                          \
        cy += uy_;                                                                                                 \
        cyy += uy_ * uy_;                                                                                          \
    } while (0)

/* ... and of its extremes and relative error (d = |x - y|; eps_b in scope). The extremes ignore NaN (the caller
   learns of NaN from cxx/cyy) and check the caller's KL offsets and floors, which it took from the dump's
   statistics. The relative error is d / |y| where |y| > eps, 0 elsewhere (NaN in y propagates); the pass ratios
   test d / |y| everywhere, with the benchmark dtype's eps in place of an exact zero. */
#define RELATIVE_TERMS(xi, yi, d)                                                                                  \
    do {                                                                                                           \
        lx = (xi) < lx ? (xi) : lx;                                                                                \
        hx = (xi) > hx ? (xi) : hx;                                                                                \
        ly = (yi) < ly ? (yi) : ly;                                                                                \
        hy = (yi) > hy ? (yi) : hy;                                                                                \
        double ay_ = fabs(yi);                                                                                     \
        double rr_ = (d) / (ay_ == 0.0 ? eps_b : ay_);                                                             \
        double r_ = ay_ <= EPS ? 0.0 : rr_;                                                                        \
        rel += r_;                                                                                                 \
        mrel = r_ > mrel ? r_ : mrel;                                                                              \
        p1 += rr_ < THOUSANDTH;                                                                                    \
        p5 += rr_ < FIVE_THOUSANDTH;                                                                               \
    } while (0)

#if NBPREC_DISPATCH
/* kl_far_terms of a block whose KL nbprec_block_avx512 took by the short series, with some terms far: its values
   converted by load_block. (noipa: not specialised for m == BLOCK, which only makes GCC warn of load_block's tail
   loops.) */
TARGET_AVX512 static __attribute__((noipa)) double far_terms_avx512(const char *xb, int xt, const char *yb, int yt,
                                                                   Py_ssize_t start, Py_ssize_t m, const double *s,
                                                                   const Params *p, Py_ssize_t *count)
{
    double x[BLOCK], y[BLOCK];
    load_block(xb, xt, start, m, x, 2);
    load_block(yb, yt, start, m, y, 2);
    return kl_far_terms(x, y, s, m, p, count, 2);
}

#endif

/* Whether the AVX-512 build fuses pair_body's loops (1: always, but for the tests of fuse_loops()). */
static int fuse_loops = 1;

/* Each block is converted once and read from L1 by three loops: the plain sums, the relative error, the KL
   terms. The AVX-512 build (`fuse`), whose 32 vector registers hold every accumulator, runs the first two as one,
   and all three as one for the usual block (KL by its short series): each element's two divisions (the relative
   error's, KL's s) keep the divider busy while the other sums run beside them, where three loops one after the
   other left it idle through the first and ran the other two at its pace. Each sum takes the same steps either
   way (tests/compare/test_fused_loops.py). Bfloat16 against float32 tensors took 1.75-1.78 ns a pair instead of
   2.08-2.16 (`bench/metrics_speed.py --target-dtype bfloat16 --gb 0.3`, an Intel Xeon with AVX-512, 2026-12-05);
   the AVX2 build fused the same way spills accumulators out of its 16 registers and took 2.27 ns instead of 1.99.
   A whole block of positive normal KL terms takes the fused loops as _fused_avx512.c writes them out, straight
   from the buffers. */
ALWAYS_INLINE void pair_body(const char *xb, int xt, const char *yb, int yt, Py_ssize_t n, const Params *p,
                             double *restrict tot, int *near_state, int avx2)
{
    double x[BLOCK], y[BLOCK], s[BLOCK];
    Py_ssize_t start, i;
    const double shift_x = p->shift_x, shift_y = p->shift_y, eps_b = p->eps_b;
    int near_first = *near_state; /* KL by the short series first (kl_block_near), the few far terms after */
    const int narrow = xt != TYPE_F64 && yt != TYPE_F64; /* (no finite KL term of such values reaches 1e43) */
    const int fuse = avx2 == 2 && fuse_loops; /* (0 in the other builds, at compile time) */
    const double off_x = p->off_x, floor_x = p->floor_x, off_y = p->off_y, floor_y = p->floor_y;
    for (start = 0; start < n; start += BLOCK) {
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK;
        double sxx = 0, syy = 0, sxy = 0, sdd = 0, sad = 0, mad = 0, cx = 0, cxx = 0, cy = 0, cyy = 0;
        double rel = 0, mrel = 0, ksx = 0, ksy = 0, kt = 0, odd = 0;
        int64_t p1 = 0, p5 = 0; /* counts: integer adds of the comparisons */
        double lx = INFINITY, hx = -INFINITY, ly = INFINITY, hy = -INFINITY;
#if NBPREC_DISPATCH
        if (fuse && p->kl_normal && m == BLOCK) { /* the usual whole block: the loops below, in AVX-512 */
            BlockSums b;
            nbprec_block_avx512(xb, xt, yb, yt, start, p, near_first, s, &b);
            sxx = b.sxx, syy = b.syy, sxy = b.sxy, sdd = b.sdd, sad = b.sad, mad = b.mad, cx = b.cx, cxx = b.cxx;
            cy = b.cy, cyy = b.cyy, rel = b.rel, mrel = b.mrel, ksx = b.ksx, ksy = b.ksy, kt = b.kt;
            lx = b.lx, hx = b.hx, ly = b.ly, hy = b.hy, p1 = b.p1, p5 = b.p5;
            if (!near_first) { /* as kl_block's caller below */
                near_first = m - b.near <= m * FAR_SHARE;
            } else if (b.smax > NEAR) { /* the far terms as below */
                Py_ssize_t count;
                kt += far_terms_avx512(xb, xt, yb, yt, start, m, s, p, &count);
                near_first = count <= m * FAR_SHARE;
            }
            goto add_block;
        }
#endif
        if (start + BLOCK < n) { /* the next block, ahead of the hardware's prefetcher */
            Py_ssize_t next = start + BLOCK, mm = n - next < BLOCK ? n - next : BLOCK, off;
            for (off = 0; off < mm * ITEMSIZE[xt]; off += 64) __builtin_prefetch(xb + next * ITEMSIZE[xt] + off);
            for (off = 0; off < mm * ITEMSIZE[yt]; off += 64) __builtin_prefetch(yb + next * ITEMSIZE[yt] + off);
        }
        load_block(xb, xt, start, m, x, avx2);
        load_block(yb, yt, start, m, y, avx2);
        if (fuse && p->kl_normal && near_first) { /* every sum of the usual block in one loop */
            double smax = 0;
#pragma omp simd reduction(+ : sxx, syy, sxy, sdd, sad, cx, cxx, cy, cyy, rel, p1, p5, ksx, ksy, kt) \
    reduction(max : mad, mrel, hx, hy, smax) reduction(min : lx, ly)
            for (i = 0; i < m; i++) {
                double xi = x[i], yi = y[i], d;
                PLAIN_TERMS(xi, yi, d);
                RELATIVE_TERMS(xi, yi, d);
                NEAR_KL_TERMS(xi, yi, s[i]);
            }
            if (smax > NEAR) { /* as kl_block_near's caller below */
                Py_ssize_t count;
                kt += kl_far_terms(x, y, s, m, p, &count, avx2);
                near_first = count <= m * FAR_SHARE;
            }
            goto add_block;
        }
        if (!p->kl_normal && isnan(tot[S_KT])) { /* (a side holding NaN: a block of nothing else, one side) */
            int nan_x = all_nan(x, m);
            if (nan_x || all_nan(y, m)) {
                one_side_block(nan_x ? y : x, m, nan_x ? shift_y : shift_x, nan_x, tot);
                continue;
            }
        }
        if (fuse) { /* the two loops below in one (the divider works beside the plain sums) */
#pragma omp simd reduction(+ : sxx, syy, sxy, sdd, sad, cx, cxx, cy, cyy, rel, p1, p5) \
    reduction(max : mad, mrel, hx, hy) reduction(min : lx, ly)
            for (i = 0; i < m; i++) {
                double xi = x[i], yi = y[i], d;
                PLAIN_TERMS(xi, yi, d);
                RELATIVE_TERMS(xi, yi, d);
            }
        } else {
#pragma omp simd reduction(+ : sxx, syy, sxy, sdd, sad, cx, cxx, cy, cyy) reduction(max : mad)
            for (i = 0; i < m; i++) {
                double d;
                PLAIN_TERMS(x[i], y[i], d);
                s[i] = d; /* for the relative error's loop (s is KL's scratch afterwards) */
            }
#pragma omp simd reduction(+ : rel, p1, p5) reduction(max : mrel, hx, hy) reduction(min : lx, ly)
            for (i = 0; i < m; i++) RELATIVE_TERMS(x[i], y[i], s[i]);
        }
        if (!p->kl_normal && isnan(tot[S_KT])) {
            /* KL's sum is NaN already: NaN plus any term is NaN, and the KL column is NaN whatever the values'
               sums are (nothing else reads them), so the block's KL terms are not computed: ksx, ksy and kt stay
               0 (pair_sums's kl_sx and kl_sy stop growing there). A side of NaN (a float16 run that overflowed:
               often most of its tensors) took 0.6 of its kernel time in these loops (2026-12-03). */
        } else if (!p->kl_normal && narrow && !isfinite(tot[S_KT])) { /* inf: see kl_block_settled */
            kl_block_settled(x, y, m, p, &ksx, &ksy, &odd);
            if (odd != 0.0) kt = kl_block_odd(x, y, m, p, narrow);
        } else if (!p->kl_normal) {
            kl_block(x, y, m, p, 1, &ksx, &ksy, &kt, &odd, NULL);
            if (odd != 0.0) kt = kl_block_odd(x, y, m, p, narrow);
        } else if (near_first) { /* every value checked once by the caller, and most terms near 1 so far */
            int far;
            kl_block_near(x, y, m, p, s, &ksx, &ksy, &kt, &far);
            if (far) {
                Py_ssize_t count;
                kt += kl_far_terms(x, y, s, m, p, &count, avx2);
                near_first = count <= m * FAR_SHARE;
            }
        } else { /* many terms far from 1 in the last block: the general loop, counting whether that lasts */
            double near;
            kl_block(x, y, m, p, 0, &ksx, &ksy, &kt, &odd, &near);
            near_first = m - near <= m * FAR_SHARE;
        }
    add_block:
        tot[S_SX] += cx + (double)m * shift_x;
        tot[S_SY] += cy + (double)m * shift_y;
        tot[S_SXX] += sxx;
        tot[S_SYY] += syy;
        tot[S_SXY] += sxy;
        tot[S_SDD] += sdd;
        tot[S_SAD] += sad;
        tot[S_MAD] = max_nan(tot[S_MAD], sdd != sdd ? NAN : mad); /* sdd is NaN exactly when some d is */
        tot[S_REL] += rel;
        tot[S_MREL] = max_nan(tot[S_MREL], rel != rel ? NAN : mrel); /* likewise rel for r */
        tot[S_P1] += p1;
        tot[S_P5] += p5;
        tot[S_KSX] += ksx;
        tot[S_KSY] += ksy;
        tot[S_KT] += kt;
        tot[S_CX] += cx;
        tot[S_CXX] += cxx;
        tot[S_CY] += cy;
        tot[S_CYY] += cyy;
        tot[S_LX] = lx < tot[S_LX] ? lx : tot[S_LX];
        tot[S_HX] = hx > tot[S_HX] ? hx : tot[S_HX];
        tot[S_LY] = ly < tot[S_LY] ? ly : tot[S_LY];
        tot[S_HY] = hy > tot[S_HY] ? hy : tot[S_HY];
    }
    *near_state = near_first;
}

/* Three builds of each kernel: AVX-512 and AVX2+FMA (x86-64), and the baseline. */
static void minmax_base(const char *b, int t, Py_ssize_t n, double *lo, double *hi, Py_ssize_t *nan,
                        Py_ssize_t *inf)
{
    minmax_body(b, t, n, lo, hi, nan, inf);
}
static void pair_base(const char *xb, int xt, const char *yb, int yt, Py_ssize_t n, const Params *p, double *tot,
                      int *near)
{
    pair_body(xb, xt, yb, yt, n, p, tot, near, 0);
}
#if NBPREC_DISPATCH
TARGET_AVX2 static void minmax_avx2(const char *b, int t, Py_ssize_t n, double *lo, double *hi, Py_ssize_t *nan,
                                    Py_ssize_t *inf)
{
    minmax_body(b, t, n, lo, hi, nan, inf);
}
TARGET_AVX2 static void pair_avx2(const char *xb, int xt, const char *yb, int yt, Py_ssize_t n, const Params *p,
                                  double *tot, int *near)
{
    pair_body(xb, xt, yb, yt, n, p, tot, near, 1);
}
TARGET_AVX512 static void minmax_avx512(const char *b, int t, Py_ssize_t n, double *lo, double *hi, Py_ssize_t *nan,
                                        Py_ssize_t *inf)
{
    minmax_body(b, t, n, lo, hi, nan, inf);
}
TARGET_AVX512 static void pair_avx512(const char *xb, int xt, const char *yb, int yt, Py_ssize_t n, const Params *p,
                                      double *tot, int *near)
{
    pair_body(xb, xt, yb, yt, n, p, tot, near, 2);
}
#endif

typedef void (*minmax_fn)(const char *, int, Py_ssize_t, double *, double *, Py_ssize_t *, Py_ssize_t *);
typedef void (*pair_fn)(const char *, int, const char *, int, Py_ssize_t, const Params *, double *, int *);

/* Chosen once at import (module init); read-only afterwards. */
static minmax_fn minmax_impl = minmax_base;
static pair_fn pair_impl = pair_base;
static const char *isa_name = "baseline";

/* ---- Python interface ---------------------------------------------------------------------------- */

/* Get a contiguous read-only buffer of n elements of `type`; sets an error and returns 0 on failure. */
int nbprec_get_buffer(PyObject *obj, int type, Py_buffer *view, Py_ssize_t *n, const char *side)
{
    if (type < 0 || type >= N_TYPES) {
        PyErr_Format(PyExc_ValueError, "%s: unknown element type code %d", side, type);
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) != 0) return 0;
    if (view->len % ITEMSIZE[type] != 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes is not a whole number of %zd-byte elements", side,
                     view->len, ITEMSIZE[type]);
        PyBuffer_Release(view);
        return 0;
    }
    *n = view->len / ITEMSIZE[type];
    return 1;
}

PyDoc_STRVAR(min_max_doc,
             "min_max(buffer, type) -> (min, max, nan_count)\n\n"
             "Minimum and maximum of a contiguous buffer of `type` elements (0 float64, 1 float32, 2 float16,\n"
             "3 bfloat16), ignoring NaN, and the number of NaN. The GIL is released.");

static PyObject *py_min_max(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int type;
    Py_buffer view;
    Py_ssize_t n, nans = 0, infs = 0;
    double lo = INFINITY, hi = -INFINITY;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oi:min_max", &obj, &type)) return NULL;
    if (!nbprec_get_buffer(obj, type, &view, &n, "min_max")) return NULL;
    Py_BEGIN_ALLOW_THREADS
    nbprec_min_max((const char *)view.buf, type, n, &lo, &hi, &nans, &infs);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("ddn", lo, hi, nans);
}

/* min_max's work (no Python object touched): the extremes of n elements, and their counts of NaN and of
   infinities (nonfinite_counts's, in the same pass). */
void nbprec_min_max(const char *b, int type, Py_ssize_t n, double *lo, double *hi, Py_ssize_t *nans,
                    Py_ssize_t *infs)
{
    minmax_impl(b, type, n, lo, hi, nans, infs);
}

/* NaN and infinities of one buffer by their bit patterns (the exponent's bits all set: a zero mantissa is an
   infinity, any other a NaN), the same counts as numpy's isnan and isinf give on the values as float64. */
#define NONFINITE_BITS(NAME, UT, EXPONENT, MANTISSA)                                                           \
    static void NAME(const UT *src, Py_ssize_t n, Py_ssize_t *out_nan, Py_ssize_t *out_inf)                    \
    {                                                                                                          \
        Py_ssize_t nans = 0, infs = 0, start, i;                                                               \
        for (start = 0; start < n; start += 32768) { /* counts of a part in lanes of the values' width */     \
            Py_ssize_t m = n - start < 32768 ? n - start : 32768;                                              \
            const UT *part = src + start;                                                                      \
            UT specials = 0, fractions = 0;                                                                    \
            _Pragma("omp simd reduction(+ : specials, fractions)")                                             \
            for (i = 0; i < m; i++) {                                                                          \
                UT special = (UT)((part[i] & (UT)(EXPONENT)) == (UT)(EXPONENT));                               \
                specials += special;                                                                           \
                fractions += special & (UT)((part[i] & (UT)(MANTISSA)) != 0);                                  \
            }                                                                                                  \
            nans += (Py_ssize_t)fractions;                                                                     \
            infs += (Py_ssize_t)(specials - fractions);                                                        \
        }                                                                                                      \
        *out_nan = nans;                                                                                       \
        *out_inf = infs;                                                                                       \
    }
NONFINITE_BITS(nonfinite64, uint64_t, 0x7ff0000000000000ULL, 0x000fffffffffffffULL)
NONFINITE_BITS(nonfinite32, uint32_t, 0x7f800000u, 0x007fffffu)
NONFINITE_BITS(nonfinite_f16, uint16_t, 0x7c00u, 0x03ffu)
NONFINITE_BITS(nonfinite_bf16, uint16_t, 0x7f80u, 0x007fu)

/* nonfinite_counts's work (no Python object touched). */
void nbprec_nonfinite(const char *b, int type, Py_ssize_t n, Py_ssize_t *nans, Py_ssize_t *infs)
{
    if (type == TYPE_F64)
        nonfinite64((const uint64_t *)b, n, nans, infs);
    else if (type == TYPE_F32)
        nonfinite32((const uint32_t *)b, n, nans, infs);
    else if (type == TYPE_F16)
        nonfinite_f16((const uint16_t *)b, n, nans, infs);
    else
        nonfinite_bf16((const uint16_t *)b, n, nans, infs);
}

PyDoc_STRVAR(nonfinite_counts_doc,
             "nonfinite_counts(buffer, type) -> (nan_count, inf_count)\n\n"
             "How many NaN and infinities a contiguous buffer of `type` elements (0 float64, 1 float32, 2 float16,\n"
             "3 bfloat16) holds, from their bit patterns. The GIL is released.");

static PyObject *py_nonfinite_counts(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int type;
    Py_buffer view;
    Py_ssize_t n, nans = 0, infs = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oi:nonfinite_counts", &obj, &type)) return NULL;
    if (!nbprec_get_buffer(obj, type, &view, &n, "nonfinite_counts")) return NULL;
    Py_BEGIN_ALLOW_THREADS
    nbprec_nonfinite((const char *)view.buf, type, n, &nans, &infs);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("nn", nans, infs);
}

PyDoc_STRVAR(pair_sums_doc,
             "pair_sums(x, x_type, y, y_type, off_x, floor_x, off_y, floor_y, shift_x, shift_y, eps_b, kl_normal)\n"
             "    -> tuple\n\n"
             "Every running sum of one pair in one pass, and each side's minimum and maximum ignoring NaN (see\n"
             "FUSED_SUMS in nbprec.compare._kernels for the order).\n"
             "x and y are contiguous buffers of the same element count. kl_normal=True promises that every\n"
             "max(v - off, floor) is a positive normal double (finite data, normal floors): the KL loop then skips\n"
             "its per-element checks. Once kl_t is NaN, kl_sx and kl_sy stop growing (the KL is NaN whatever they\n"
             "are). The GIL is released.");

/* The state of a pass over a pair in parts (pair_accumulate; STATE_SIZE values, see _fused.h): parts that start
   at multiples of BLOCK give the same bits as one call over the whole pair. */
void nbprec_init_state(double *state)
{
    int k;
    for (k = 0; k < STATE_SIZE; k++) state[k] = 0.0;
    state[S_LX] = state[S_LY] = INFINITY;
    state[S_HX] = state[S_HY] = -INFINITY;
    state[ST_NEAR] = 1.0;
}

/* Parse the arguments shared by pair_sums and pair_accumulate (up to kl_normal) and get both buffers; on
   failure an error is set and 0 returned, with no buffer held. */
static int pair_args(PyObject *const *args, Params *p, Py_buffer *xv, int *xt, Py_buffer *yv, int *yt, Py_ssize_t *n)
{
    Py_ssize_t ny;
    double *fields[7] = {&p->off_x, &p->floor_x, &p->off_y, &p->floor_y, &p->shift_x, &p->shift_y, &p->eps_b};
    int k;
    *xt = PyLong_AsLong(args[1]);
    *yt = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return 0;
    for (k = 0; k < 7; k++) {
        *fields[k] = PyFloat_AsDouble(args[4 + k]);
        if (*fields[k] == -1.0 && PyErr_Occurred()) return 0;
    }
    p->kl_normal = PyObject_IsTrue(args[11]);
    if (p->kl_normal < 0) return 0;
    if (!nbprec_get_buffer(args[0], *xt, xv, n, "pair_sums (target)")) return 0;
    if (!nbprec_get_buffer(args[2], *yt, yv, &ny, "pair_sums (benchmark)")) {
        PyBuffer_Release(xv);
        return 0;
    }
    if (*n != ny) {
        PyBuffer_Release(xv);
        PyBuffer_Release(yv);
        PyErr_Format(PyExc_ValueError, "pair_sums: element counts differ: %zd vs %zd", *n, ny);
        return 0;
    }
    return 1;
}

/* The kernel over one part of a pair, continuing `state` (touches no Python object: callable without the GIL). */
void nbprec_measure(const char *x, int xt, const char *y, int yt, Py_ssize_t n, const Params *p, double *state)
{
    int near = state[ST_NEAR] != 0.0;
    pair_impl(x, xt, y, yt, n, p, state, &near);
    state[ST_NEAR] = near;
    state[ST_N] += (double)n;
}

/* nbprec_measure of two held buffers with the GIL released. */
static void run_part(const Py_buffer *xv, int xt, const Py_buffer *yv, int yt, Py_ssize_t n, const Params *p,
                     double *state)
{
    Py_BEGIN_ALLOW_THREADS
    nbprec_measure((const char *)xv->buf, xt, (const char *)yv->buf, yt, n, p, state);
    Py_END_ALLOW_THREADS
}

/* pair_sums's result: the element count, then the totals of a finished state. */
static PyObject *sums_tuple(const double *state, Py_ssize_t n)
{
    PyObject *out = PyTuple_New(N_SUMS + 1), *count;
    int k;
    if (out == NULL) return NULL;
    count = PyLong_FromSsize_t(n);
    if (count == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, count);
    for (k = 0; k < N_SUMS; k++) {
        PyObject *v = (k == S_P1 || k == S_P5) ? PyLong_FromLongLong((long long)state[k]) : PyFloat_FromDouble(state[k]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k + 1, v);
    }
    return out;
}

static PyObject *py_pair_sums(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int xt, yt;
    Params p;
    Py_buffer xv, yv;
    Py_ssize_t n;
    double state[STATE_SIZE];
    (void)self;
    if (nargs != 12) return PyErr_Format(PyExc_TypeError, "pair_sums takes 12 arguments (%zd given)", nargs);
    if (!pair_args(args, &p, &xv, &xt, &yv, &yt, &n)) return NULL;
    nbprec_init_state(state);
    run_part(&xv, xt, &yv, yt, n, &p, state);
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    return sums_tuple(state, n);
}

PyDoc_STRVAR(pair_accumulate_doc,
             "pair_accumulate(x, x_type, y, y_type, off_x, floor_x, off_y, floor_y, shift_x, shift_y, eps_b, kl_normal,\n"
             "                state) -> None\n\n"
             "pair_sums over one part of a pair, continuing `state`, a writable contiguous float64 buffer of STATE_SIZE\n"
             "values (from new_state(), then left to this function): the running totals (in the order of pair_sums's\n"
             "tuple, less its count), the element count and a flag of the KL loop. Parts whose starts are multiples of\n"
             "BLOCK elements give exactly the bits one pair_sums call over the whole pair gives. The GIL is released.");

static PyObject *py_pair_accumulate(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int xt, yt;
    Params p;
    Py_buffer xv, yv, sv;
    Py_ssize_t n;
    (void)self;
    if (nargs != 13) return PyErr_Format(PyExc_TypeError, "pair_accumulate takes 13 arguments (%zd given)", nargs);
    if (PyObject_GetBuffer(args[12], &sv, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) return NULL;
    if (sv.len != (Py_ssize_t)(STATE_SIZE * sizeof(double))) {
        PyBuffer_Release(&sv);
        return PyErr_Format(PyExc_ValueError, "pair_accumulate: state must be %d float64 values", STATE_SIZE);
    }
    if (!pair_args(args, &p, &xv, &xt, &yv, &yt, &n)) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    run_part(&xv, xt, &yv, yt, n, &p, (double *)sv.buf);
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    PyBuffer_Release(&sv);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(new_state_doc, "new_state() -> bytearray\n\nThe state pair_accumulate starts from (STATE_SIZE float64 values).");

static PyObject *py_new_state(PyObject *self, PyObject *unused)
{
    double state[STATE_SIZE];
    (void)self;
    (void)unused;
    nbprec_init_state(state);
    return PyByteArray_FromStringAndSize((const char *)state, sizeof state);
}

PyDoc_STRVAR(log_ratio_doc, "log_ratio(a, b) -> float\n\nThe kernel's log(a / b) of positive normal doubles (for tests).");

static PyObject *py_log_ratio(PyObject *self, PyObject *args)
{
    double a, b;
    (void)self;
    if (!PyArg_ParseTuple(args, "dd:log_ratio", &a, &b)) return NULL;
    if (!is_positive_normal(a) || !is_positive_normal(b))
        return PyErr_Format(PyExc_ValueError, "log_ratio: arguments must be positive normal doubles");
    return PyFloat_FromDouble(log_ratio(a, b));
}

PyDoc_STRVAR(same_bytes_doc,
             "same_bytes(a, b) -> bool\n\n"
             "Whether two buffers hold the same bytes (memcmp; without the GIL for large ones).");

static PyObject *py_same_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer a, b;
    int same;
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "same_bytes: two buffers expected, %zd given", nargs);
    if (PyObject_GetBuffer(args[0], &a, PyBUF_SIMPLE) != 0) return NULL;
    if (PyObject_GetBuffer(args[1], &b, PyBUF_SIMPLE) != 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    same = a.len == b.len;
    if (same && a.len >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS
        same = memcmp(a.buf, b.buf, (size_t)a.len) == 0;
        Py_END_ALLOW_THREADS
    } else if (same && a.len > 0) {
        same = memcmp(a.buf, b.buf, (size_t)a.len) == 0;
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return PyBool_FromLong(same);
}

/* The builds this CPU runs, fastest first (set at import). */
static const char *isa_names[3] = {NULL, NULL, NULL};
static minmax_fn isa_minmax[3];
static pair_fn isa_pair[3];
static int n_isas = 0;

static void add_isa(const char *name, minmax_fn minmax, pair_fn pair)
{
    isa_names[n_isas] = name;
    isa_minmax[n_isas] = minmax;
    isa_pair[n_isas] = pair;
    n_isas++;
}

PyDoc_STRVAR(available_isas_doc, "available_isas() -> tuple\n\nThe kernel builds this CPU can run, fastest first.");

static PyObject *py_available_isas(PyObject *self, PyObject *unused)
{
    PyObject *out = PyTuple_New(n_isas);
    int k;
    (void)self;
    (void)unused;
    if (out == NULL) return NULL;
    for (k = 0; k < n_isas; k++) {
        PyObject *name = PyUnicode_FromString(isa_names[k]);
        if (name == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, name);
    }
    return out;
}

PyDoc_STRVAR(use_isa_doc,
             "use_isa(name) -> str\n\n"
             "Run the kernels of build `name` (one of available_isas()) from now on, and return the build in use\n"
             "before. For tests that check every build against the others; not thread-safe against running kernels.");

static PyObject *py_use_isa(PyObject *self, PyObject *args)
{
    const char *name, *before = isa_name;
    int k;
    (void)self;
    if (!PyArg_ParseTuple(args, "s:use_isa", &name)) return NULL;
    for (k = 0; k < n_isas; k++) {
        if (strcmp(name, isa_names[k]) == 0) {
            minmax_impl = isa_minmax[k];
            pair_impl = isa_pair[k];
            isa_name = isa_names[k];
            return PyUnicode_FromString(before);
        }
    }
    return PyErr_Format(PyExc_ValueError, "use_isa: %s is not a build this CPU runs (see available_isas())", name);
}

PyDoc_STRVAR(fuse_loops_doc,
             "fuse_loops(on) -> bool\n\n"
             "Whether the AVX-512 build runs a block's loops as one (see pair_body), set to `on` from now on;\n"
             "returns the setting before. For the tests that hold the fused loop to the separate ones, bit for\n"
             "bit; not thread-safe against running kernels. The other builds always run them apart.");

static PyObject *py_fuse_loops(PyObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg), before = fuse_loops;
    (void)self;
    if (on < 0) return NULL;
    fuse_loops = on;
    return PyBool_FromLong(before);
}

static PyMethodDef methods[] = {
    {"fuse_loops", py_fuse_loops, METH_O, fuse_loops_doc},
    {"available_isas", py_available_isas, METH_NOARGS, available_isas_doc},
    {"use_isa", py_use_isa, METH_VARARGS, use_isa_doc},
    {"min_max", py_min_max, METH_VARARGS, min_max_doc},
    {"nonfinite_counts", py_nonfinite_counts, METH_VARARGS, nonfinite_counts_doc},
    {"pair_sums", (PyCFunction)(void (*)(void))py_pair_sums, METH_FASTCALL, pair_sums_doc},
    {"pair_metrics", (PyCFunction)(void (*)(void))nbprec_pair_metrics, METH_FASTCALL, nbprec_pair_metrics_doc},
    {"pair_metrics_many", nbprec_pair_metrics_many, METH_O, nbprec_pair_metrics_many_doc},
    {"pair_accumulate", (PyCFunction)(void (*)(void))py_pair_accumulate, METH_FASTCALL, pair_accumulate_doc},
    {"new_state", py_new_state, METH_NOARGS, new_state_doc},
    {"log_ratio", py_log_ratio, METH_VARARGS, log_ratio_doc},
    {"same_bytes", (PyCFunction)(void (*)(void))py_same_bytes, METH_FASTCALL, same_bytes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fused",
    "One-pass metric sums of tensor pairs, in C (see nbprec/compare/_fused.c).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fused(void)
{
    PyObject *mod;
    n_isas = 0;
#if NBPREC_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
            add_isa("avx512", minmax_avx512, pair_avx512);
        add_isa("avx2+fma", minmax_avx2, pair_avx2);
    }
#endif
    add_isa("baseline", minmax_base, pair_base);
    minmax_impl = isa_minmax[0];
    pair_impl = isa_pair[0];
    isa_name = isa_names[0];
    mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddStringConstant(mod, "ISA", isa_name) < 0 || PyModule_AddIntConstant(mod, "BLOCK", BLOCK) < 0 ||
        PyModule_AddIntConstant(mod, "STATE_SIZE", STATE_SIZE) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
