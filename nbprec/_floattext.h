/*
 * What nbprec._floattext offers the other extensions (nbprec._csvjoin): its formatter, through the capsule
 * nbprec._floattext._C_API, and the short copy both use to put texts in place. Internal to the extensions:
 * nothing here is a public C API.
 */
#ifndef NBPREC_FLOATTEXT_H
#define NBPREC_FLOATTEXT_H

#include <stdint.h>
#include <string.h>

#define NBPREC_FLOATTEXT_CAPSULE "nbprec._floattext._C_API"

/* The longest text write_double writes: "-2.2250738585072014e-308" and its like, 24 characters. */
#define FLOAT_TEXT_MAX 24

/* Copy n <= 32 bytes from src to dst with at most two fixed-size moves each way (overlapping when n is not a
   size of its own). A memcpy of a variable size this short is what GCC turns into `rep movs`, whose start-up
   cost is several times the copy's: in join_rows it took 60% of the time of a column of numbers (perf). */
typedef struct {
    uint64_t half[2];
} nbprec_sixteen;

#define NBPREC_TWO_MOVES(type, dst, src, n)                                                                    \
    do {                                                                                                       \
        type head_, tail_;                                                                                     \
        memcpy(&head_, (src), sizeof head_);                                                                   \
        memcpy(&tail_, (src) + (n) - sizeof tail_, sizeof tail_);                                              \
        memcpy((dst), &head_, sizeof head_);                                                                   \
        memcpy((dst) + (n) - sizeof tail_, &tail_, sizeof tail_);                                              \
    } while (0)

static inline void nbprec_copy_short(char *dst, const char *src, size_t n)
{
    size_t i;
    if (n >= 16)
        NBPREC_TWO_MOVES(nbprec_sixteen, dst, src, n);
    else if (n >= 8)
        NBPREC_TWO_MOVES(uint64_t, dst, src, n);
    else if (n >= 4)
        NBPREC_TWO_MOVES(uint32_t, dst, src, n);
    else
        for (i = 0; i < n; i++) dst[i] = src[i];
}

typedef struct {
    /* The text of v (not NaN) into buf (at least 32 bytes) as repr() writes it; its length, or -1 with an
       exception set (no memory). Runs no Python code. */
    int (*write_double)(char *buf, double v);
} nbprec_floattext_api;

#endif
