/*
 * nbprec.formats._columnscan: the column cache of nbprec's dump format (index.columns.json, docs/dump-format.md)
 * scanned in C straight into typed columns: numbers into float64 or int64 buffers without a Python object each,
 * text into str objects of which a repeated value (an op type, a dtype) is one object. It opens a native dump of
 * 10,000 tensors about five times faster than decoding the cache with the json module and typing its lists.
 *
 * A fast path for the cache as nbprec writes it, never an authority: anything it does not read makes scan()
 * return None, and the caller reads the file in Python (nbprec/formats/native_columns.py), which words every
 * problem. It returns None for: text that is not one JSON object, "rows" or "index_bytes" missing before "columns"
 * or not integers, a second "columns", a column that is not a list of "rows" values, a column named twice, a value
 * its kind does not read (below), a string with an escape or a control character, invalid UTF-8, integers beyond
 * 18 digits, nesting deeper than MAX_DEPTH, text after the object. What it returns, the Python reader builds
 * the same columns from (tests/formats/test_column_scan.py holds the two to that).
 *
 * scan(buffer, kinds) -> None or (rows, index_bytes, columns)
 *   kinds    dict: column name -> (kind, default); the columns it does not name are checked and counted only;
 *   columns  dict: column name -> its values, for the named columns the cache holds, by kind:
 *     'f'  numbers, "NaN", "Infinity", "-Infinity" (null: NaN): bytearray of float64;
 *     'i'  integers (null: default, an int): bytearray of int64;
 *     'b'  true, false (null: false): bytearray of one byte each, 0 or 1;
 *     's'  shapes: a list of integers as a tuple of ints, anything else but a list as (); each distinct tuple is
 *          one object: list;
 *     'r'  text of few distinct values, each distinct one held once (null: default, a str): list;
 *     't'  text (null: default, a str; with default None, null is not read): list.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_jsontokens.h"

/* Values already made, by their text: an open-addressing hash table of (text, object) whose objects the column's
   list holds (the table borrows them). */
typedef struct {
    const char *s;
    Py_ssize_t n;
    PyObject *value;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, used; /* cap: a power of two, or 0 before the first value */
} Table;

static size_t text_hash(const char *s, Py_ssize_t n)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    Py_ssize_t i;
    for (i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return (size_t)(h ^ (h >> 29));
}

/* The slot of the text s: the one holding it, or the empty one where it goes. */
static Slot *table_slot(Table *t, const char *s, Py_ssize_t n)
{
    size_t i = text_hash(s, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        Slot *slot = &t->slots[i];
        if (slot->value == NULL || (slot->n == n && memcmp(slot->s, s, (size_t)n) == 0)) return slot;
    }
}

/* The object made for the text s, or NULL when there is none yet. */
static PyObject *table_get(Table *t, const char *s, Py_ssize_t n)
{
    return t->cap ? table_slot(t, s, n)->value : NULL;
}

static int table_put(Table *t, const char *s, Py_ssize_t n, PyObject *value)
{
    if (2 * (t->used + 1) > t->cap) { /* grow: at most half full */
        Table grown = {NULL, t->cap ? 2 * t->cap : 64, t->used};
        size_t i;
        if ((grown.slots = PyMem_Calloc(grown.cap, sizeof(Slot))) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (i = 0; i < t->cap; i++)
            if (t->slots[i].value) *table_slot(&grown, t->slots[i].s, t->slots[i].n) = t->slots[i];
        PyMem_Free(t->slots);
        *t = grown;
    }
    *table_slot(t, s, n) = (Slot){s, n, value};
    t->used++;
    return 0;
}

typedef struct {
    int kind;
    PyObject *dflt; /* borrowed from kinds */
    Buf buf;        /* 'f', 'i', 'b' */
    PyObject *list; /* 's', 'r', 't' */
    Table made;     /* 's', 'r': the values made, by their text */
    PyObject *seen; /* 's': tuple -> the same tuple, each distinct shape held once whatever its text */
} Col;

/* A string's text: UTF-8 without escapes or control characters (a name in a language other than English reads;
   an escaped quote does not). *ascii: no byte beyond 0x7f. */
static int text(Cur *c, const char **s, Py_ssize_t *n, int *ascii)
{
    const char *p;
    unsigned char high = 0;
    if (!next_is(c, '"')) return BAIL;
    for (p = ++c->p; p < c->end && *p != '"'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '\\' || ch < 0x20) return BAIL;
        high |= ch;
    }
    if (p >= c->end) return BAIL;
    *s = c->p;
    *n = p - c->p;
    *ascii = high < 0x80;
    c->p = p + 1;
    return 0;
}

static PyObject *new_str(const char *s, Py_ssize_t n, int ascii)
{
    PyObject *out = ascii ? PyUnicode_FromStringAndSize(s, n) : PyUnicode_DecodeUTF8(s, n, "strict");
    if (out == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear(); /* NULL, no error: BAIL */
    return out;
}

static int append(PyObject *list, PyObject *value) /* steals value */
{
    int rc;
    if (value == NULL) return PyErr_Occurred() ? -1 : BAIL;
    rc = PyList_Append(list, value);
    Py_DECREF(value);
    return rc;
}

static int add_default(Col *col)
{
    if (col->dflt == Py_None) return BAIL;
    return PyList_Append(col->list, col->dflt);
}

/* An 'r' value: the object already made for the same text, else a new one. */
static int repeated(Col *col, const char *s, Py_ssize_t n, int ascii)
{
    PyObject *value = table_get(&col->made, s, n);
    if (value != NULL) return PyList_Append(col->list, value);
    if ((value = new_str(s, n, ascii)) == NULL) return PyErr_Occurred() ? -1 : BAIL;
    if (table_put(&col->made, s, n, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return append(col->list, value);
}

static int shape_dim(Cur *c, Py_ssize_t index, void *ctx)
{
    const char *s;
    Py_ssize_t n;
    int is_int, constant;
    long long v;
    (void)index;
    if (number(c, &s, &n, &is_int, &constant) || !is_int || to_int64(s, n, &v)) return BAIL;
    return append((PyObject *)ctx, PyLong_FromLongLong(v));
}

/* A shape: the object already made for the same text, else a new tuple, held once through col->seen. */
static int shape(Cur *c, Col *col)
{
    const char *start;
    PyObject *dims, *tuple, *kept;
    int rc;
    ws(c);
    if (c->p >= c->end) return BAIL;
    if (*c->p != '[') { /* anything else but a list is (), as make_index has it */
        if ((rc = skip_value(c, 2))) return rc;
        return append(col->list, PyTuple_New(0));
    }
    start = c->p;
    if (skip_value(c, 2)) return BAIL;
    if ((kept = table_get(&col->made, start, c->p - start)) != NULL) return PyList_Append(col->list, kept);
    c->p = start; /* a new text: read again, into a tuple */
    if ((dims = PyList_New(0)) == NULL) return -1;
    rc = elements(c, shape_dim, dims);
    tuple = rc ? NULL : PyList_AsTuple(dims);
    Py_DECREF(dims);
    if (tuple == NULL) return rc ? rc : -1;
    kept = PyDict_SetDefault(col->seen, tuple, tuple); /* borrowed */
    Py_DECREF(tuple);
    if (kept == NULL || table_put(&col->made, start, c->p - start, kept) < 0) return -1;
    return PyList_Append(col->list, kept);
}

/* A statistic as the reader's float64 column has it: numbers as float() reads them (an integer as float(int)
   does: "-0" is 0.0), the three names of non-finite values as strings or bare (the json module reads both). */
static int statistic(Cur *c, double *out)
{
    const char *s;
    Py_ssize_t n;
    int is_int, constant, ascii;
    long long v;
    ws(c);
    if (c->p < c->end && *c->p == 'n') {
        *out = Py_NAN;
        return literal(c, "null", 4);
    }
    if (c->p < c->end && *c->p == '"') {
        if (text(c, &s, &n, &ascii)) return BAIL;
        if ((n == 3 && memcmp(s, "NaN", 3) == 0) || (n == 8 && memcmp(s, "Infinity", 8) == 0) ||
            (n == 9 && memcmp(s, "-Infinity", 9) == 0))
            return to_double(s, n, 1, out);
        return BAIL;
    }
    if (number(c, &s, &n, &is_int, &constant)) return BAIL;
    if (is_int && to_int64(s, n, &v) == 0) {
        *out = (double)v;
        return 0;
    }
    return to_double(s, n, constant, out);
}

static int cell(Cur *c, Py_ssize_t index, void *ctx)
{
    Col *col = ctx;
    const char *s;
    Py_ssize_t n;
    int is_int, constant, ascii, rc;
    long long v;
    double d;
    char flag;
    (void)index;
    switch (col->kind) {
    case 'f':
        if ((rc = statistic(c, &d))) return rc;
        return buf_add(&col->buf, &d, sizeof d);
    case 'i':
        if (next_is(c, 'n')) {
            if (literal(c, "null", 4)) return BAIL;
            v = PyLong_AsLongLong(col->dflt);
            if (v == -1 && PyErr_Occurred()) return -1;
        } else if (number(c, &s, &n, &is_int, &constant) || !is_int || to_int64(s, n, &v)) {
            return BAIL;
        }
        return buf_add(&col->buf, &v, sizeof v);
    case 'b':
        flag = next_is(c, 't');
        if (flag ? literal(c, "true", 4) : literal(c, "false", 5) && literal(c, "null", 4)) return BAIL;
        return buf_add(&col->buf, &flag, 1);
    case 's':
        return shape(c, col);
    default: /* 'r', 't' */
        if (next_is(c, 'n')) return literal(c, "null", 4) ? BAIL : add_default(col);
        if (text(c, &s, &n, &ascii)) return BAIL;
        if (col->kind == 'r') return repeated(col, s, n, ascii);
        return append(col->list, new_str(s, n, ascii));
    }
}

typedef struct {
    PyObject *kinds, *out;
    long long rows, index_bytes;
    int has_rows, has_bytes, has_columns;
} Top;

static void col_clear(Col *col)
{
    PyMem_Free(col->buf.data);
    PyMem_Free(col->made.slots);
    Py_XDECREF(col->list);
    Py_XDECREF(col->seen);
}

static int count_element(Cur *c, Py_ssize_t index, void *ctx)
{
    (void)index;
    (*(Py_ssize_t *)ctx)++;
    return skip_value(c, 2);
}

/* One member of "columns": a named column read into its kind, any other checked and counted. */
static int column(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Top *top = ctx;
    PyObject *name, *spec, *done = NULL;
    Py_ssize_t count = 0;
    Col col;
    int rc;
    if ((name = PyUnicode_FromStringAndSize(key, n)) == NULL) return -1;
    spec = PyDict_GetItemWithError(top->kinds, name); /* borrowed */
    if (spec == NULL) {
        Py_DECREF(name);
        if (PyErr_Occurred()) return -1;
        if ((rc = elements(c, count_element, &count))) return rc;
        return count == top->rows ? 0 : BAIL;
    }
    memset(&col, 0, sizeof col);
    col.kind = (int)PyUnicode_READ_CHAR(PyTuple_GET_ITEM(spec, 0), 0);
    col.dflt = PyTuple_GET_ITEM(spec, 1);
    rc = PyDict_Contains(top->out, name); /* a column named twice: BAIL */
    if (rc > 0) rc = BAIL;
    if (!rc && col.kind != 'f' && col.kind != 'i' && col.kind != 'b' && (col.list = PyList_New(0)) == NULL) rc = -1;
    if (!rc && col.kind == 's' && (col.seen = PyDict_New()) == NULL) rc = -1;
    if (!rc) rc = elements(c, cell, &col);
    if (!rc) {
        count = col.list ? PyList_GET_SIZE(col.list) : (Py_ssize_t)(col.buf.len / (col.kind == 'b' ? 1 : 8));
        if (count != top->rows) rc = BAIL;
    }
    if (!rc) {
        done = col.list ? Py_NewRef(col.list)
                        : PyByteArray_FromStringAndSize(col.buf.data ? col.buf.data : "", (Py_ssize_t)col.buf.len);
        rc = done == NULL || PyDict_SetItem(top->out, name, done) < 0 ? -1 : 0;
        Py_XDECREF(done);
    }
    col_clear(&col);
    Py_DECREF(name);
    return rc;
}

static int whole_int(Cur *c, long long *out)
{
    const char *s;
    Py_ssize_t n;
    int is_int, constant;
    if (number(c, &s, &n, &is_int, &constant) || !is_int) return BAIL;
    return to_int64(s, n, out);
}

static int top_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Top *top = ctx;
    if (key_is(key, n, "columns")) {
        if (top->has_columns || !top->has_rows || !top->has_bytes) return BAIL;
        top->has_columns = 1;
        return members(c, column, top);
    }
    if (!top->has_columns && key_is(key, n, "rows")) {
        top->has_rows = 1;
        return whole_int(c, &top->rows);
    }
    if (!top->has_columns && key_is(key, n, "index_bytes")) {
        top->has_bytes = 1;
        return whole_int(c, &top->index_bytes);
    }
    return skip_value(c, 1);
}

PyDoc_STRVAR(scan_doc, "scan(buffer, kinds) -> None or (rows, index_bytes, columns) of a native dump's column cache\n\n"
                       "See nbprec/formats/_columnscan.c.");

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *kinds, *key, *spec, *result = NULL;
    Py_ssize_t pos = 0;
    Top top;
    Cur c;
    int rc = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!:scan", &view, &PyDict_Type, &kinds)) return NULL;
    while (PyDict_Next(kinds, &pos, &key, &spec)) { /* (kind, default), kind one of the letters above */
        PyObject *kind = PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 2 ? PyTuple_GET_ITEM(spec, 0) : NULL;
        Py_UCS4 letter = kind != NULL && PyUnicode_Check(kind) && PyUnicode_GET_LENGTH(kind) == 1
                             ? PyUnicode_READ_CHAR(kind, 0)
                             : 0;
        if (!PyUnicode_Check(key) || letter == 0 || letter > 127 || !strchr("fibsrt", (int)letter) ||
            (letter == 'i' && !PyLong_Check(PyTuple_GET_ITEM(spec, 1)))) {
            PyBuffer_Release(&view);
            return PyErr_Format(PyExc_ValueError, "kinds: a column name -> (kind, default), kind one of f i b s r t");
        }
    }
    memset(&top, 0, sizeof top);
    top.kinds = kinds;
    if ((top.out = PyDict_New()) == NULL) rc = -1;
    c.p = view.buf;
    c.end = c.p + view.len;
    if (!rc) rc = members(&c, top_member, &top);
    if (!rc && !top.has_columns) rc = BAIL;
    if (!rc) {
        const char *after = c.p;
        ws(&c);
        if (c.p != c.end || c.end - after > MAX_TRAILING) rc = BAIL;
    }
    if (!rc)
        result = Py_BuildValue("(LLO)", top.rows, top.index_bytes, top.out);
    else if (rc == BAIL && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
    PyBuffer_Release(&view);
    Py_XDECREF(top.out);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columnscan", "A native dump's column cache scanned into typed columns (see its source).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columnscan(void) { return PyModule_Create(&module); }
