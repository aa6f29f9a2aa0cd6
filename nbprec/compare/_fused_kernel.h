/*
 * What the metric kernel's two translation units share: pair_body and the other loops in C (_fused.c), and the
 * whole blocks written out in AVX-512 intrinsics (_fused_avx512.c). Internal to the extension.
 */
#ifndef NBPREC_FUSED_KERNEL_H
#define NBPREC_FUSED_KERNEL_H

#include <stdint.h>

#include "_fused.h" /* (Params, the element types, Py_ssize_t) */

#define BLOCK 512 /* 3 x 4 KiB of doubles per block; 1024 was 4-6% slower on the msprobe pair of bench/compare.py */
#define EPS 2.220446049250313e-16 /* float64 machine epsilon */
#define THOUSANDTH 0.001
#define FIVE_THOUSANDTH 0.005
#define NEAR 0.03125 /* KL terms with |kx - ky| / (kx + ky) <= NEAR take a short series (kl_block_near) ... */
#define FAR_SHARE 0.0625 /* ... unless more than this share of the last block's terms were not */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NBPREC_DISPATCH 1
#define TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512dq,avx512vl,avx512bw")))
#include <immintrin.h>
#else
#define NBPREC_DISPATCH 0
#define TARGET_AVX2
#endif

/* log_ratio's constants (_fused.c) */
#define LN2_HI 6.93147180369123816490e-01 /* ln 2 split in two: the high part has 32 bits, exact times k */
#define LN2_LO 1.90821492927058770002e-10
#define SQRT2 1.41421356237309504880
#define ONE_BITS 0x3ff0000000000000ULL
#define MANTISSA_BITS 0x000fffffffffffffULL
#define EXP_MAGIC 0x4330000000000000ULL /* bits of 2^52: OR-ing a small integer into them gives 2^52 + it */

#if NBPREC_DISPATCH
/* A whole block's sums as pair_body's fused loops leave them, and its KL terms' count near 1 (nbprec_block_avx512
   fills it). */
typedef struct {
    double sxx, syy, sxy, sdd, sad, mad, cx, cxx, cy, cyy, rel, mrel, ksx, ksy, kt, smax, lx, hx, ly, hy;
    int64_t p1, p5, near;
} BlockSums;

/* _fused_avx512.c: the BLOCK elements of a pair from `start` (the values positive normal KL terms: kl_normal), as
   pair_body measures such a block. With `near_first`, KL by its short series, each s stored in s_out and their
   largest magnitude in smax (the caller corrects the far terms); else KL by log_ratio for every term, with the
   count of terms near 1. */
void nbprec_block_avx512(const char *xb, int xt, const char *yb, int yt, Py_ssize_t start, const Params *p,
                         int near_first, double *restrict s_out, BlockSums *o);
#endif

#endif
