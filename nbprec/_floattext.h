/*
 * What nbprec._floattext offers the other extensions (nbprec._csvjoin): its formatter, through the capsule
 * nbprec._floattext._C_API. Internal to the extensions: nothing here is a public C API.
 */
#ifndef NBPREC_FLOATTEXT_H
#define NBPREC_FLOATTEXT_H

#define NBPREC_FLOATTEXT_CAPSULE "nbprec._floattext._C_API"

/* The longest text write_double writes: "-2.2250738585072014e-308" and its like, 24 characters. */
#define FLOAT_TEXT_MAX 24

typedef struct {
    /* The text of v (not NaN) into buf (at least 32 bytes) as repr() writes it; its length, or -1 with an
       exception set (no memory). Runs no Python code. */
    int (*write_double)(char *buf, double v);
} nbprec_floattext_api;

#endif
