/*
 * JSON tokens for nbprec's C scanners of JSON files (nbprec/formats/_msprobescan.c, msprobe's dump.json;
 * nbprec/formats/_columnscan.c, the native dump's column cache): a cursor over the text, whitespace, strings of
 * plain ASCII, numbers read exactly as the json module reads them, literals, lists and objects walked through
 * callbacks, and any value skipped after checking it as strictly as the json module would.
 *
 * Every function returns 0, BAIL when the text is not what the fast path reads (the caller then leaves the file to
 * its Python reader, which words the problem), or -1 with a Python error set. Included by each scanner: the
 * functions are static so that the compiler inlines the small ones into each scanner's loops.
 */
#ifndef NBPREC_JSONTOKENS_H
#define NBPREC_JSONTOKENS_H

#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define BAIL 1 /* not what the fast path reads: the caller's scan() returns None */
#define MAX_DEPTH 64
#define MAX_TRAILING (1 << 20) /* whitespace after the top object, as the Python reader allows */

typedef struct {
    const char *p, *end;
} Cur;

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static inline int buf_add(Buf *b, const void *item, size_t size)
{
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + size) cap *= 2;
        char *grown = PyMem_Realloc(b->data, cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, item, size);
    b->len += size;
    return 0;
}

/* -- tokens ------------------------------------------------------------------------------------------ */

static inline void ws(Cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static inline int next_is(Cur *c, char ch)
{
    ws(c);
    return c->p < c->end && *c->p == ch;
}

static inline int expect(Cur *c, char ch)
{
    if (!next_is(c, ch)) return BAIL;
    c->p++;
    return 0;
}

/* A string of plain ASCII (no escape, no control character): its text. */
static inline int plain_string(Cur *c, const char **s, Py_ssize_t *n)
{
    const char *p;
    if (!next_is(c, '"')) return BAIL;
    p = ++c->p;
    while (p < c->end && *p != '"') {
        unsigned char ch = (unsigned char)*p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x80) return BAIL;
        p++;
    }
    if (p >= c->end) return BAIL;
    *s = c->p;
    *n = p - c->p;
    c->p = p + 1;
    return 0;
}

static inline int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* A JSON number (json's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?) or NaN, Infinity, -Infinity,
   which the json module accepts too. *is_int: no fraction, no exponent; *constant: one of the three names. */
static inline int number(Cur *c, const char **s, Py_ssize_t *n, int *is_int, int *constant)
{
    const char *p, *start;
    ws(c);
    p = start = c->p;
    *is_int = 1;
    *constant = 0;
    if (c->end - p >= 3 && memcmp(p, "NaN", 3) == 0) {
        p += 3;
        *constant = 1;
    } else if (c->end - p >= 8 && memcmp(p, "Infinity", 8) == 0) {
        p += 8;
        *constant = 1;
    } else if (c->end - p >= 9 && memcmp(p, "-Infinity", 9) == 0) {
        p += 9;
        *constant = 1;
    } else {
        if (p < c->end && *p == '-') p++;
        if (p >= c->end || !is_digit(*p)) return BAIL;
        if (*p == '0')
            p++;
        else
            while (p < c->end && is_digit(*p)) p++;
        if (p < c->end && *p == '.') {
            *is_int = 0;
            p++;
            if (p >= c->end || !is_digit(*p)) return BAIL;
            while (p < c->end && is_digit(*p)) p++;
        }
        if (p < c->end && (*p == 'e' || *p == 'E')) {
            *is_int = 0;
            p++;
            if (p < c->end && (*p == '+' || *p == '-')) p++;
            if (p >= c->end || !is_digit(*p)) return BAIL;
            while (p < c->end && is_digit(*p)) p++;
        }
    }
    *s = start;
    *n = p - start;
    c->p = p;
    return 0;
}

#ifdef __SIZEOF_INT128__
#include "_pow5.h"

/* 5^0 .. 5^27, the powers of five below 2^64 */
static const uint64_t pow5_small[28] = {
    1u, 5u, 25u, 125u, 625u, 3125u, 15625u, 78125u, 390625u, 1953125u, 9765625u, 48828125u, 244140625u,
    1220703125u, 6103515625u, 30517578125u, 152587890625u, 762939453125u, 3814697265625u, 19073486328125u,
    95367431640625u, 476837158203125u, 2384185791015625u, 11920928955078125u, 59604644775390625u,
    298023223876953125u, 1490116119384765625u, 7450580596923828125u};

/* The double nearest to a JSON number's text (ties to even, as float() reads it), worked out exactly with 64- and
   128-bit integers for the usual text: at most 19 significant digits, a normal double. 1 (undecided) for anything
   else, which the caller leaves to Python's reader: more digits, subnormal or out-of-range results, and the rare
   product that lies too close to the midpoint between two doubles to tell.

   The text is w 10^q, w < 10^19. With w' = w 2^l (the top bit of 64 set) and T = 5^q 2^s from _pow5.h
   (_pow5_table.py), w 10^q = w' (5^q 2^s) 2^(q - s - l), and X = w' T, a 192-bit product, is the exact
   w' 5^q 2^s when T is exact, else below it by less than w' < 2^64: then X's bits from 64 up are the exact
   value's unless the bits from 64 up to the rounding bit are all ones (a carry could reach it). The double's
   53 bits are X's top ones, the next bit rounds; when T is exact a tie is a tie, and it rounds to even; when T
   is not, the value lies strictly above X, so the rounding bit alone decides. Those all-ones bits are the rule,
   not the exception, for a decimal that is exactly a double, as a bfloat16 run's statistics are (0.5, 4.3125):
   the value is then w / 5^-q times 2^q, which is worked out directly. */
static inline int decimal_double(const char *s, Py_ssize_t n, double *out)
{
    const char *p = s, *end = s + n;
    uint64_t w = 0, w_text, a, b, c, m, mask, bits;
    unsigned __int128 high, low, mid;
    int negative = 0, digits = 0, fraction = 0, exp_negative = 0, top, l, biased;
    long q = 0, exp10 = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    for (; p < end && is_digit(*p); p++) {
        if (w != 0 || *p != '0') digits++;
        w = w * 10 + (uint64_t)(*p - '0');
        if (digits > 19) return 1;
    }
    if (p < end && *p == '.') {
        for (p++; p < end && is_digit(*p); p++) {
            if (w != 0 || *p != '0') digits++;
            w = w * 10 + (uint64_t)(*p - '0');
            fraction++;
            if (digits > 19) return 1;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) exp_negative = *p++ == '-';
        for (; p < end && is_digit(*p); p++) {
            exp10 = exp10 * 10 + (*p - '0');
            if (exp10 > 100000) return 1;
        }
    }
    if (p != end) return 1;
    if (w == 0) {
        *out = negative ? -0.0 : 0.0;
        return 0;
    }
    q = (exp_negative ? -exp10 : exp10) - fraction;
    if (q < POW5_Q_MIN || q > POW5_Q_MAX) return 1;
    w_text = w;
    l = __builtin_clzll(w);
    w <<= l;
    high = (unsigned __int128)w * pow5_hi[q - POW5_Q_MIN];
    low = (unsigned __int128)w * pow5_lo[q - POW5_Q_MIN];
    c = (uint64_t)low;
    mid = (high & UINT64_MAX) + (low >> 64);
    b = (uint64_t)mid;
    a = (uint64_t)(high >> 64) + (uint64_t)(mid >> 64);
    top = (int)(a >> 63); /* the product's top bit: 191 (1) or 190 (0) */
    mask = ((uint64_t)1 << (top ? 10 : 9)) - 1; /* A's bits under the rounding bit */
    m = a >> (top ? 11 : 10);                  /* 53 bits */
    bits = (a >> (top ? 10 : 9)) & 1;          /* the rounding bit */
    if (q >= 0 && q <= POW5_EXACT_MAX) {       /* X is exact: a tie rounds to even */
        if (bits && ((a & mask) != 0 || b != 0 || c != 0 || (m & 1))) m++;
    } else if (b != UINT64_MAX || (a & mask) != mask) {
        m += bits;
    } else { /* a double or a midpoint may lie just above X: 4.3125 (= 69 2^-4) and the like, exact in binary */
        if (q >= 0 || q < -27 || w_text % pow5_small[-q] != 0) return 1; /* not one: too close to a midpoint to tell */
        *out = ldexp((double)(w_text / pow5_small[-q]), (int)q); /* (w / 5^-q) 2^q exactly, rounded once */
        if (fabs(*out) < DBL_MIN) return 1;
        if (negative) *out = -*out;
        return 0;
    }
    biased = (top ? 191 : 190) - 52 + pow5_shift[q - POW5_Q_MIN] - l + 52 + 1023;
    if (m == (uint64_t)1 << 53) { /* rounded up to the next power of two */
        m >>= 1;
        biased++;
    }
    if (biased <= 0 || biased >= 2047) return 1; /* subnormal, zero or infinite: Python's reader */
    bits = ((uint64_t)negative << 63) | ((uint64_t)biased << 52) | (m & (((uint64_t)1 << 52) - 1));
    memcpy(out, &bits, sizeof bits);
    return 0;
}
#else
static inline int decimal_double(const char *s, Py_ssize_t n, double *out) { return 1; }
#endif

/* The double a number's text reads as (what float() of it gives); BAIL for text too long to copy. */
static inline int to_double(const char *s, Py_ssize_t n, int constant, double *out)
{
    char text[64];
    char *endp;
    if (constant) {
        *out = s[0] == 'N' ? Py_NAN : (s[0] == '-' ? -Py_HUGE_VAL : Py_HUGE_VAL);
        return 0;
    }
    if (decimal_double(s, n, out) == 0) return 0;
    if (n >= (Py_ssize_t)sizeof(text)) return BAIL;
    memcpy(text, s, (size_t)n);
    text[n] = '\0';
    *out = PyOS_string_to_double(text, &endp, NULL);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return BAIL;
    }
    return endp == text + n ? 0 : BAIL;
}

/* An integer's text as int64; BAIL beyond 18 digits (the json module would make a larger int). */
static inline int to_int64(const char *s, Py_ssize_t n, long long *out)
{
    long long v = 0;
    int negative = s[0] == '-';
    Py_ssize_t i = negative;
    if (n - negative > 18) return BAIL;
    for (; i < n; i++) v = v * 10 + (s[i] - '0');
    *out = negative ? -v : v;
    return 0;
}

static inline int literal(Cur *c, const char *word, Py_ssize_t n)
{
    if (c->end - c->p < n || memcmp(c->p, word, (size_t)n) != 0) return BAIL;
    c->p += n;
    return 0;
}

/* The elements of a list: calls element(c, index, ctx) with the cursor at each one, which must consume it. */
typedef int (*ElementFn)(Cur *c, Py_ssize_t index, void *ctx);

static inline int elements(Cur *c, ElementFn element, void *ctx)
{
    Py_ssize_t i;
    int rc;
    if (expect(c, '[')) return BAIL;
    if (next_is(c, ']')) {
        c->p++;
        return 0;
    }
    for (i = 0;; i++) {
        if ((rc = element(c, i, ctx))) return rc;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        return expect(c, ']');
    }
}

static inline int skip_value(Cur *c, int depth);

static inline int skip_element(Cur *c, Py_ssize_t index, void *ctx)
{
    (void)index;
    return skip_value(c, *(int *)ctx + 1);
}

static inline int is_hex(char ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); }

/* Skip a string, checking its escapes as the json module does; non-ASCII bytes make it BAIL. */
static inline int skip_string(Cur *c)
{
    const char *p;
    if (!next_is(c, '"')) return BAIL;
    for (p = c->p + 1; p < c->end && *p != '"'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20 || ch >= 0x80) return BAIL;
        if (ch != '\\') continue;
        if (++p >= c->end) return BAIL;
        if (*p == 'u') {
            if (c->end - p < 5 || !is_hex(p[1]) || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4])) return BAIL;
            p += 4;
        } else if (*p == '\0' || !strchr("\"\\/bfnrt", *p)) {
            return BAIL;
        }
    }
    if (p >= c->end) return BAIL;
    c->p = p + 1;
    return 0;
}

/* Skip any JSON value, checking it as strictly as the json module reads it (escapes, numbers, literals);
   non-ASCII bytes and nesting beyond MAX_DEPTH make it BAIL. */
static inline int skip_value(Cur *c, int depth)
{
    const char *s;
    Py_ssize_t n;
    int is_int, constant;
    if (depth > MAX_DEPTH) return BAIL;
    ws(c);
    if (c->p >= c->end) return BAIL;
    switch (*c->p) {
    case '"':
        return skip_string(c);
    case '{':
        c->p++;
        if (next_is(c, '}')) {
            c->p++;
            return 0;
        }
        for (;;) {
            if (skip_string(c) || expect(c, ':') || skip_value(c, depth + 1)) return BAIL;
            ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            return expect(c, '}');
        }
    case '[':
        return elements(c, skip_element, &depth);
    case 't':
        return literal(c, "true", 4);
    case 'f':
        return literal(c, "false", 5);
    case 'n':
        return literal(c, "null", 4);
    default:
        return number(c, &s, &n, &is_int, &constant);
    }
}

/* The members of an object: calls member(key, n, ctx) with the cursor at each value, which must consume it. */
typedef int (*MemberFn)(Cur *c, const char *key, Py_ssize_t n, void *ctx);

static inline int members(Cur *c, MemberFn member, void *ctx)
{
    const char *key;
    Py_ssize_t n;
    int rc;
    if (expect(c, '{')) return BAIL;
    if (next_is(c, '}')) {
        c->p++;
        return 0;
    }
    for (;;) {
        if ((rc = plain_string(c, &key, &n)) || (rc = expect(c, ':')) || (rc = member(c, key, n, ctx))) return rc;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        return expect(c, '}');
    }
}

static inline int key_is(const char *key, Py_ssize_t n, const char *word)
{
    return (size_t)n == strlen(word) && memcmp(key, word, (size_t)n) == 0;
}

#endif /* NBPREC_JSONTOKENS_H */
