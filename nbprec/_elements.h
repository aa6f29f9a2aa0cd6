/*
 * The element types of nbprec's one-pass tensor kernels and their exact conversion to double, shared by
 * nbprec.capture._stats (a captured tensor's statistics) and nbprec.overflow._profile (a payload's overflow
 * counts). Internal to the extensions: nothing here is a public C API.
 */
#ifndef NBPREC_ELEMENTS_H
#define NBPREC_ELEMENTS_H

#include <stdint.h>
#include <string.h>

/* The buffer's element type: the codes of nbprec.dtypes.ELEMENT_TYPE_CODES, by dtype name. */
enum {
    TYPE_F64 = 0,
    TYPE_F32 = 1,
    TYPE_F16 = 2,
    TYPE_BF16 = 3,
    TYPE_I64 = 4,
    TYPE_I32 = 5,
    TYPE_I16 = 6,
    TYPE_I8 = 7,
    TYPE_U8 = 8,
    TYPE_BOOL = 9,
    N_TYPES = 10
};

/* Bytes per element of each type. */
static const int type_size[N_TYPES] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE static inline
#endif

/* On x86-64 with GCC or Clang a kernel is compiled once per instruction set (a function of each TARGET calling
   the same ALWAYS_INLINE body), and best_isa() says at import which the CPU runs: 2 AVX-512, 1 AVX2+FMA, 0 the
   baseline. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NBPREC_DISPATCH 1
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
static int best_isa(void)
{
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return 2;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
}
#else
#define NBPREC_DISPATCH 0
#define TARGET_AVX2
#define TARGET_AVX512
static int best_isa(void) { return 0; }
#endif
static const char *const ISA_NAMES[] = {"baseline", "avx2+fma", "avx512"};

/* NAME_base, NAME_avx2 and NAME_avx512: the builds of a kernel BODY(base, type, n, state) of each instruction set
   (only the baseline where there is no dispatch), and NAME_BUILDS, them in best_isa()'s order. */
#if NBPREC_DISPATCH
#define ISA_BUILDS(NAME, BODY, STATE)                                                                           \
    static void NAME##_base(const char *base, int type, Py_ssize_t n, STATE *s) { BODY(base, type, n, s); }     \
    TARGET_AVX2 static void NAME##_avx2(const char *base, int type, Py_ssize_t n, STATE *s)                     \
    {                                                                                                           \
        BODY(base, type, n, s);                                                                                 \
    }                                                                                                           \
    TARGET_AVX512 static void NAME##_avx512(const char *base, int type, Py_ssize_t n, STATE *s)                 \
    {                                                                                                           \
        BODY(base, type, n, s);                                                                                 \
    }                                                                                                           \
    static void (*const NAME##_BUILDS[])(const char *, int, Py_ssize_t, STATE *) = {NAME##_base, NAME##_avx2,   \
                                                                                     NAME##_avx512};
#else
#define ISA_BUILDS(NAME, BODY, STATE)                                                                           \
    static void NAME##_base(const char *base, int type, Py_ssize_t n, STATE *s) { BODY(base, type, n, s); }     \
    static void (*const NAME##_BUILDS[])(const char *, int, Py_ssize_t, STATE *) = {NAME##_base};
#endif

static inline float bits_to_float(uint32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }

ALWAYS_INLINE float f16_to_float(uint16_t h)
{
    /* exponent and mantissa shifted to a float's place; 2^112 moves the exponent bias from 15 to 127 (exact
       for normals and subnormals); exponent 31 (inf, NaN) gets the float's all-ones exponent instead */
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13, sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t special = (uint32_t)0 - (uint32_t)((h & 0x7c00u) == 0x7c00u);
    float scaled = bits_to_float(em) * 0x1p112f;
    uint32_t finite;
    memcpy(&finite, &scaled, sizeof finite);
    return bits_to_float(sign | (finite & ~special) | ((em | 0x7f800000u) & special));
}

#define AS_LANE(v) (v)
#define BF16_TO_FLOAT(v) bits_to_float((uint32_t)(v) << 16) /* bfloat16 is the upper half of a float32 */
#define LOAD_AS(CTYPE, CONVERT)                                                                                 \
    {                                                                                                           \
        const CTYPE *src = (const CTYPE *)base + start;                                                         \
        for (i = 0; i < m; i++) out[i] = (double)CONVERT(src[i]);                                               \
        break;                                                                                                  \
    }

/* Elements start .. start + m of the buffer, as doubles (exact for every supported type). */
ALWAYS_INLINE void load_block(const char *base, int type, Py_ssize_t start, Py_ssize_t m, double *restrict out)
{
    Py_ssize_t i;
    switch (type) {
    case TYPE_F64: LOAD_AS(double, AS_LANE)
    case TYPE_F32: LOAD_AS(float, AS_LANE)
    case TYPE_BF16: LOAD_AS(uint16_t, BF16_TO_FLOAT)
    case TYPE_F16: LOAD_AS(uint16_t, f16_to_float) /* through float, which holds every float16 value exactly */
    case TYPE_I64: LOAD_AS(int64_t, AS_LANE)
    case TYPE_I32: LOAD_AS(int32_t, AS_LANE)
    case TYPE_I16: LOAD_AS(int16_t, AS_LANE)
    case TYPE_I8: LOAD_AS(int8_t, AS_LANE)
    default: LOAD_AS(uint8_t, AS_LANE) /* uint8 and bool (one byte, 0 or 1) */
    }
}

#endif
