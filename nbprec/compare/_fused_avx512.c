/*
 * nbprec.compare._fused, the whole blocks of the usual kind in AVX-512 intrinsics.
 *
 * pair_body (_fused.c) measures a block of positive normal KL terms (kl_normal) in the AVX-512 build by one
 * loop of C that the compiler vectorises: the plain sums (PLAIN_TERMS), the relative error and pass counts
 * (RELATIVE_TERMS), and KL either by its short series (NEAR_KL_TERMS, the terms near 1) or by log_ratio for
 * every term (kl_block, once many terms were far). That loop reads blocks of doubles that load_block converted
 * and stored first. Here the same loops are written out, one copy for each pair of element types:
 *
 * - the values are converted in registers as they are read, with no block of doubles stored and read back;
 * - each pass count (and KL's count of terms near 1) is the population count of a compare mask, where the
 *   compiler added masked vectors of ones;
 * - each lane takes the C loop's steps: its operations in its order, contracted into fused multiply-adds where
 *   GCC contracts them, its selects as the C conditionals select (vmaxpd a, b is `a > b ? a : b`, NaN giving b);
 *   and a sum's eight lanes are added in lane order from 0, as GCC's code for an omp simd reduction adds them.
 *
 * GCC contracts a multiply and an add of vectors into a fused multiply-add as it contracts C
 * (-ffp-contract=fast), intrinsics included, so what runs is what GCC makes of both; the tests are the guard.
 * Every sum, extreme, count and s is the C loop's to the bit (tests/compare/test_fused_loops.py: pairs that
 * agree, that diverged and that turn from one to the other, on eight pairs of types, with the fusion turned off
 * for the reference, and a sum's lanes added in another order fails them). The extremes' lanes are combined in
 * any order: none holds a NaN (a NaN never wins their comparisons), and only the sign of a zero extreme could
 * differ. On Zen 4 (2026-12-07), bfloat16 against float32 tensors that agree took 1.28 ns a pair instead of
 * 1.55 (`bench/metrics_speed.py --target-dtype bfloat16 --gb 0.3`), and tensors that diverged 2.08 instead of
 * 2.26 (`bench/kernel_paths.py` on a level L0 pair of msprobe dumps, whose parameters' gradients diverged).
 */
#include "_fused.h"
#include "_fused_kernel.h"

#if NBPREC_DISPATCH

#define AVX512_INLINE TARGET_AVX512 static inline __attribute__((always_inline))

/* Eight elements of a buffer of `type` from element i, as doubles: the conversions load_block makes. */
AVX512_INLINE __m512d load8(const char *base, int type, Py_ssize_t i)
{
    if (type == TYPE_F64) return _mm512_loadu_pd((const double *)base + i);
    if (type == TYPE_F32) return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)base + i));
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + i));
    if (type == TYPE_BF16) /* the upper half of a float32 */
        return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    return _mm512_cvtps_pd(_mm256_cvtph_ps(h));
}

/* A sum's eight lanes added in lane order, starting from 0. */
AVX512_INLINE double lanes_sum(__m512d v)
{
    double lane[8], t = 0.0;
    int k;
    _mm512_storeu_pd(lane, v);
    for (k = 0; k < 8; k++) t += lane[k];
    return t;
}

AVX512_INLINE __m512d broadcast_bits(uint64_t bits) { return _mm512_castsi512_pd(_mm512_set1_epi64((long long)bits)); }

/* The accumulators of PLAIN_TERMS and RELATIVE_TERMS, and their constants. */
typedef struct {
    __m512d sxx, syy, sxy, sdd, sad, mad, cx, cxx, cy, cyy, rel, mrel, lx, hx, ly, hy;
    int64_t p1, p5;
} PlainSums;

typedef struct {
    __m512d magnitude, shift_x, shift_y, eps_b, eps, thousandth, five_thousandth, off_x, floor_x, off_y, floor_y;
} Constants;

AVX512_INLINE void plain_start(PlainSums *a, Constants *c, const Params *p)
{
    const __m512d zero = _mm512_setzero_pd();
    a->sxx = a->syy = a->sxy = a->sdd = a->sad = a->mad = a->cx = a->cxx = zero;
    a->cy = a->cyy = a->rel = a->mrel = zero;
    a->lx = a->ly = _mm512_set1_pd(INFINITY);
    a->hx = a->hy = _mm512_set1_pd(-INFINITY);
    a->p1 = a->p5 = 0;
    c->magnitude = broadcast_bits(0x7fffffffffffffffULL);
    c->shift_x = _mm512_set1_pd(p->shift_x), c->shift_y = _mm512_set1_pd(p->shift_y);
    c->eps_b = _mm512_set1_pd(p->eps_b), c->eps = _mm512_set1_pd(EPS);
    c->thousandth = _mm512_set1_pd(THOUSANDTH), c->five_thousandth = _mm512_set1_pd(FIVE_THOUSANDTH);
    c->off_x = _mm512_set1_pd(p->off_x), c->floor_x = _mm512_set1_pd(p->floor_x);
    c->off_y = _mm512_set1_pd(p->off_y), c->floor_y = _mm512_set1_pd(p->floor_y);
}

/* PLAIN_TERMS and RELATIVE_TERMS of eight elements. */
AVX512_INLINE void plain_terms(PlainSums *a, const Constants *c, __m512d x, __m512d y)
{
    const __m512d zero = _mm512_setzero_pd();
    a->sxx = _mm512_fmadd_pd(x, x, a->sxx);
    a->syy = _mm512_fmadd_pd(y, y, a->syy);
    a->sxy = _mm512_fmadd_pd(x, y, a->sxy);
    __m512d d = _mm512_and_pd(_mm512_sub_pd(x, y), c->magnitude);
    a->sdd = _mm512_fmadd_pd(d, d, a->sdd);
    a->sad = _mm512_add_pd(a->sad, d);
    a->mad = _mm512_max_pd(d, a->mad);
    __m512d ux = _mm512_sub_pd(x, c->shift_x), uy = _mm512_sub_pd(y, c->shift_y);
    a->cx = _mm512_add_pd(a->cx, ux);
    a->cxx = _mm512_fmadd_pd(ux, ux, a->cxx);
    a->cy = _mm512_add_pd(a->cy, uy);
    a->cyy = _mm512_fmadd_pd(uy, uy, a->cyy);
    a->lx = _mm512_min_pd(x, a->lx);
    a->hx = _mm512_max_pd(x, a->hx);
    a->ly = _mm512_min_pd(y, a->ly);
    a->hy = _mm512_max_pd(y, a->hy);
    __m512d ay = _mm512_and_pd(y, c->magnitude);
    __m512d rr = _mm512_div_pd(d, _mm512_mask_blend_pd(_mm512_cmp_pd_mask(ay, zero, _CMP_EQ_OQ), ay, c->eps_b));
    __m512d r = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(ay, c->eps, _CMP_NLE_UQ), rr); /* 0 where |y| <= EPS */
    a->rel = _mm512_add_pd(a->rel, r);
    a->mrel = _mm512_max_pd(r, a->mrel);
    a->p1 += __builtin_popcount(_mm512_cmp_pd_mask(rr, c->thousandth, _CMP_LT_OQ));
    a->p5 += __builtin_popcount(_mm512_cmp_pd_mask(rr, c->five_thousandth, _CMP_LT_OQ));
}

AVX512_INLINE void plain_finish(const PlainSums *a, BlockSums *o)
{
    o->sxx = lanes_sum(a->sxx), o->syy = lanes_sum(a->syy), o->sxy = lanes_sum(a->sxy), o->sdd = lanes_sum(a->sdd);
    o->sad = lanes_sum(a->sad), o->cx = lanes_sum(a->cx), o->cxx = lanes_sum(a->cxx), o->cy = lanes_sum(a->cy);
    o->cyy = lanes_sum(a->cyy), o->rel = lanes_sum(a->rel);
    o->mad = _mm512_reduce_max_pd(a->mad), o->mrel = _mm512_reduce_max_pd(a->mrel);
    o->hx = _mm512_reduce_max_pd(a->hx), o->hy = _mm512_reduce_max_pd(a->hy);
    o->lx = _mm512_reduce_min_pd(a->lx), o->ly = _mm512_reduce_min_pd(a->ly);
    o->p1 = a->p1, o->p5 = a->p5;
}

/* The block with KL by the short series (NEAR_KL_TERMS, two_atanh_near's polynomial). */
AVX512_INLINE void near_block(const char *xb, int xt, const char *yb, int yt, Py_ssize_t start, const Params *p,
                              double *restrict s_out, BlockSums *o)
{
    const __m512d c3 = _mm512_set1_pd(2.0 / 3.0), c5 = _mm512_set1_pd(2.0 / 5.0);
    const __m512d c7 = _mm512_set1_pd(2.0 / 7.0), c9 = _mm512_set1_pd(2.0 / 9.0), two = _mm512_set1_pd(2.0);
    PlainSums a;
    Constants c;
    __m512d ksx = _mm512_setzero_pd(), ksy = ksx, kt = ksx, smax = ksx;
    Py_ssize_t i;
    plain_start(&a, &c, p);
    for (i = 0; i < BLOCK; i += 8) {
        __m512d x = load8(xb, xt, start + i), y = load8(yb, yt, start + i);
        plain_terms(&a, &c, x, y);
        __m512d kx = _mm512_max_pd(c.floor_x, _mm512_sub_pd(x, c.off_x)); /* (t < floor ? floor : t) */
        __m512d ky = _mm512_max_pd(c.floor_y, _mm512_sub_pd(y, c.off_y));
        ksx = _mm512_add_pd(ksx, kx);
        ksy = _mm512_add_pd(ksy, ky);
        __m512d s = _mm512_div_pd(_mm512_sub_pd(kx, ky), _mm512_add_pd(kx, ky));
        _mm512_storeu_pd(s_out + i, s);
        smax = _mm512_max_pd(_mm512_and_pd(s, c.magnitude), smax);
        __m512d z = _mm512_mul_pd(s, s), z2 = _mm512_mul_pd(z, z);
        __m512d q = _mm512_fmadd_pd(z2, _mm512_fmadd_pd(z, c9, c7), _mm512_fmadd_pd(z, c5, c3));
        __m512d t = _mm512_fmadd_pd(s, two, _mm512_mul_pd(_mm512_mul_pd(s, z), q));
        kt = _mm512_fmadd_pd(kx, t, kt);
    }
    plain_finish(&a, o);
    o->ksx = lanes_sum(ksx), o->ksy = lanes_sum(ksy), o->kt = lanes_sum(kt);
    o->smax = _mm512_reduce_max_pd(smax);
    o->near = 0;
}

/* The block with KL by log_ratio for every term, counting the terms near 1 (kl_block's loop, unchecked). */
AVX512_INLINE void far_block(const char *xb, int xt, const char *yb, int yt, Py_ssize_t start, const Params *p,
                             BlockSums *o)
{
    const __m512d one = _mm512_set1_pd(1.0), sqrt2 = _mm512_set1_pd(SQRT2), near = _mm512_set1_pd(NEAR);
    const __m512d ln2_hi = _mm512_set1_pd(LN2_HI), ln2_lo = _mm512_set1_pd(LN2_LO);
    const __m512i exponent_magic = _mm512_set1_epi64((long long)EXP_MAGIC);
    const __m512i mantissa = _mm512_set1_epi64((long long)MANTISSA_BITS);
    const __m512i one_bits = _mm512_set1_epi64((long long)ONE_BITS);
    const __m512d c3 = _mm512_set1_pd(1.0 / 3.0), c5 = _mm512_set1_pd(1.0 / 5.0); /* two_atanh's */
    const __m512d c7 = _mm512_set1_pd(1.0 / 7.0), c9 = _mm512_set1_pd(1.0 / 9.0);
    const __m512d c11 = _mm512_set1_pd(1.0 / 11.0), c13 = _mm512_set1_pd(1.0 / 13.0);
    const __m512d c15 = _mm512_set1_pd(1.0 / 15.0), c17 = _mm512_set1_pd(1.0 / 17.0);
    PlainSums a;
    Constants c;
    __m512d ksx = _mm512_setzero_pd(), ksy = ksx, kt = ksx;
    int64_t near_count = 0;
    Py_ssize_t i;
    plain_start(&a, &c, p);
    for (i = 0; i < BLOCK; i += 8) {
        __m512d x = load8(xb, xt, start + i), y = load8(yb, yt, start + i);
        plain_terms(&a, &c, x, y);
        __m512d kx = _mm512_max_pd(c.floor_x, _mm512_sub_pd(x, c.off_x));
        __m512d ky = _mm512_max_pd(c.floor_y, _mm512_sub_pd(y, c.off_y));
        ksx = _mm512_add_pd(ksx, kx);
        ksy = _mm512_add_pd(ksy, ky);
        /* log_ratio(kx, ky) */
        __m512i abits = _mm512_castpd_si512(kx), bbits = _mm512_castpd_si512(ky);
        __m512d k = _mm512_sub_pd(_mm512_castsi512_pd(_mm512_or_si512(_mm512_srli_epi64(abits, 52), exponent_magic)),
                                  _mm512_castsi512_pd(_mm512_or_si512(_mm512_srli_epi64(bbits, 52), exponent_magic)));
        __m512d ma = _mm512_castsi512_pd(_mm512_or_si512(_mm512_and_si512(abits, mantissa), one_bits));
        __m512d mb = _mm512_castsi512_pd(_mm512_or_si512(_mm512_and_si512(bbits, mantissa), one_bits));
        __mmask8 up = _mm512_cmp_pd_mask(ma, _mm512_mul_pd(sqrt2, mb), _CMP_GT_OQ);
        __mmask8 down = _mm512_cmp_pd_mask(_mm512_mul_pd(sqrt2, ma), mb, _CMP_LT_OQ);
        /* (masked adds: doubling a mantissa, and k plus 1 or less 1, are exact however they are done) */
        mb = _mm512_mask_add_pd(mb, up, mb, mb);
        ma = _mm512_mask_add_pd(ma, down, ma, ma);
        k = _mm512_mask_sub_pd(_mm512_mask_add_pd(k, up, k, one), down, k, one); /* (up and down never both) */
        __m512d s = _mm512_div_pd(_mm512_sub_pd(ma, mb), _mm512_add_pd(ma, mb));
        /* two_atanh(s) */
        __m512d z = _mm512_mul_pd(s, s), z2 = _mm512_mul_pd(z, z), z4 = _mm512_mul_pd(z2, z2);
        __m512d p01 = _mm512_fmadd_pd(z, c5, c3), p23 = _mm512_fmadd_pd(z, c9, c7);
        __m512d p45 = _mm512_fmadd_pd(z, c13, c11), p67 = _mm512_fmadd_pd(z, c17, c15);
        __m512d poly = _mm512_fmadd_pd(z4, _mm512_fmadd_pd(z2, p67, p45), _mm512_fmadd_pd(z2, p23, p01));
        __m512d two_s = _mm512_add_pd(s, s);
        __m512d atanh2 = _mm512_fmadd_pd(_mm512_mul_pd(two_s, z), poly, two_s);
        __m512d log_r = _mm512_fmadd_pd(k, ln2_hi, _mm512_fmadd_pd(k, ln2_lo, atanh2));
        kt = _mm512_fmadd_pd(kx, log_r, kt);
        __m512d gap = _mm512_and_pd(_mm512_sub_pd(kx, ky), c.magnitude);
        __m512d reach = _mm512_mul_pd(near, _mm512_add_pd(kx, ky));
        near_count += __builtin_popcount(_mm512_cmp_pd_mask(gap, reach, _CMP_LE_OQ)); /* |kx - ky| <= NEAR (kx + ky) */
    }
    plain_finish(&a, o);
    o->ksx = lanes_sum(ksx), o->ksy = lanes_sum(ksy), o->kt = lanes_sum(kt);
    o->smax = 0.0;
    o->near = near_count;
}

/* near_block or far_block with the two element types as constants: a loop for each of the 16 pairs of types. */
#define BLOCK_FOR(XT, YT)                                                                                          \
    do {                                                                                                           \
        if (near_first)                                                                                            \
            near_block(xb, XT, yb, YT, start, p, s_out, o);                                                        \
        else                                                                                                       \
            far_block(xb, XT, yb, YT, start, p, o);                                                                \
        return;                                                                                                    \
    } while (0)
#define BLOCK_FOR_Y(XT)                                                                                            \
    switch (yt) {                                                                                                  \
    case TYPE_F64: BLOCK_FOR(XT, TYPE_F64);                                                                        \
    case TYPE_F32: BLOCK_FOR(XT, TYPE_F32);                                                                        \
    case TYPE_F16: BLOCK_FOR(XT, TYPE_F16);                                                                        \
    default: BLOCK_FOR(XT, TYPE_BF16);                                                                             \
    }

TARGET_AVX512 void nbprec_block_avx512(const char *xb, int xt, const char *yb, int yt, Py_ssize_t start,
                                       const Params *p, int near_first, double *restrict s_out, BlockSums *o)
{
    switch (xt) {
    case TYPE_F64: BLOCK_FOR_Y(TYPE_F64)
    case TYPE_F32: BLOCK_FOR_Y(TYPE_F32)
    case TYPE_F16: BLOCK_FOR_Y(TYPE_F16)
    default: BLOCK_FOR_Y(TYPE_BF16)
    }
}

#endif
