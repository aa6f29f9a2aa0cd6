/*
 * nbprec._csvjoin: the rows of a CSV table joined from its columns, in C.
 *
 * nbprec.safe_text.write_csv_columns writes a table's columns as csv.writer writes their rows with QUOTE_MINIMAL:
 * a cell holding a comma, a quote or a character of the row ending in quotes (its quotes doubled), the others as
 * they are. In Python that is a check of each column, a tuple a row (zip) and a join of it: about 60 ns a cell, a
 * third of writing a large comparison's CSV files. join_rows does the same in two passes over the cells (the
 * text's length, then the copy).
 *
 * A column is a list of ready cells, all ASCII text (names, dtypes, shapes), or a column of numbers: a tuple of a
 * one-dimensional contiguous buffer of float64 or int64 values and the text of NaN. Numbers are written as repr()
 * and str() write them, float64 values by nbprec._floattext's formatter (found through its capsule,
 * nbprec/_floattext.h) straight into the rows: no str object is made for them, which took as long as the rest of
 * writing a comparison's tensors.csv (4,035 rows of 61 columns, 40 of them numbers). Anything else (a cell that
 * is not ASCII text, another buffer type, no formatter) makes join_rows answer None, and the caller writes the
 * rows in Python.
 *
 * shape_texts gives the cells of a shape column, "[2, 8]", each distinct shape formatted once: a comparison of
 * many shapes (a model's varying sequence lengths) spent more time on them in Python than on the rest of its CSV
 * files.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "_floattext.h"

#define ROWS 64 /* rows written at a time (see join_rows) */
#define NAN_CELL 255 /* a number cell's length byte when the value is NaN (texts are at most 24 characters) */

/* A cell's text into the row: most are short (names, dtypes, numbers), for nbprec_copy_short. */
static inline void copy_cell(char *dst, const char *src, size_t n)
{
    if (n <= 32)
        nbprec_copy_short(dst, src, n);
    else
        memcpy(dst, src, n);
}

PyDoc_STRVAR(join_rows_doc,
             "join_rows(columns, ending, specials) -> str | None\n\n"
             "The rows of `columns`, each row's cells separated by ',' and followed by `ending`, a cell holding one\n"
             "of the characters of `specials` in double quotes (its own doubled). A column is a list of str, or a\n"
             "tuple (values, nan_text) of a one-dimensional contiguous float64 or int64 buffer, written as repr()\n"
             "and str() write its values, nan_text for NaN. None when a column is neither, the columns differ in\n"
             "length, or a cell, `ending`, `specials` or a nan_text is not ASCII (or a nan_text holds one of\n"
             "`specials`).");

enum { CELLS_TEXT = 0, CELLS_FLOAT64 = 1, CELLS_INT64 = 2 };

typedef struct {
    int kind;
    PyObject **items;    /* CELLS_TEXT: the list's item array */
    Py_buffer view;      /* the numbers (held while kind is not CELLS_TEXT) */
    const char *nan;     /* the text of NaN */
    Py_ssize_t nan_len;
    char *texts;         /* the numbers' texts, one after the other (pass one writes them, pass two copies them) */
    Py_ssize_t cursor;   /* pass two: where the next one starts */
} column_t;

static const nbprec_floattext_api *formatter;

/* The float formatter of nbprec._floattext, or NULL (no exception left) when it cannot be imported. */
static const nbprec_floattext_api *float_formatter(void)
{
    if (formatter == NULL) { /* (PyCapsule_Import imports only a top-level package before 3.12: the module here) */
        PyObject *module = PyImport_ImportModule("nbprec._floattext"), *capsule = NULL;
        if (module != NULL) capsule = PyObject_GetAttrString(module, "_C_API");
        if (capsule != NULL) formatter = (const nbprec_floattext_api *)PyCapsule_GetPointer(capsule, NBPREC_FLOATTEXT_CAPSULE);
        Py_XDECREF(capsule);
        Py_XDECREF(module);
        if (formatter == NULL) PyErr_Clear();
    }
    return formatter;
}

/* Whether a byte of the `len` bytes at `text` is one `special` marks (the quote among them); how many are '"'
   too. A plain loop: cells are short, and GCC's vectorisation of a table lookup was 3x slower. */
static int needs_quotes(const unsigned char *text, Py_ssize_t len, const unsigned char *special, Py_ssize_t *quotes)
{
    int found = 0;
    Py_ssize_t i, q = 0;
    for (i = 0; i < len; i++) {
        if (special[text[i]]) {
            found = 1;
            q += text[i] == '"';
        }
    }
    *quotes = q;
    return found;
}

/* str() of an int64 into buf (at least 21 bytes); its length. */
static int write_int64(char *buf, int64_t v)
{
    char digits[20];
    int n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = digits[--n];
    return len;
}

/* Take a column of join_rows' `columns` into `col`: 1 when it is one join_rows writes, 0 when not (the caller
   answers None). */
static int take_column(PyObject *column, column_t *col, const unsigned char *special)
{
    PyObject *values, *nan;
    Py_ssize_t quotes;
    col->kind = CELLS_TEXT;
    if (PyList_Check(column)) {
        col->items = ((PyListObject *)column)->ob_item;
        return 1;
    }
    if (!PyTuple_Check(column) || PyTuple_GET_SIZE(column) != 2) return 0;
    values = PyTuple_GET_ITEM(column, 0);
    nan = PyTuple_GET_ITEM(column, 1);
    if (!PyUnicode_CheckExact(nan) || !PyUnicode_IS_ASCII(nan)) return 0;
    col->nan = (const char *)PyUnicode_DATA(nan);
    col->nan_len = PyUnicode_GET_LENGTH(nan);
    if (needs_quotes((const unsigned char *)col->nan, col->nan_len, special, &quotes)) return 0;
    if (!PyObject_CheckBuffer(values)) return 0;
    if (PyObject_GetBuffer(values, &col->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear(); /* (not a contiguous buffer: the caller's way) */
        return 0;
    }
    const char *format = col->view.format ? col->view.format : "B";
    if (col->view.ndim == 1 && col->view.itemsize == 8 && strcmp(format, "d") == 0) {
        col->kind = CELLS_FLOAT64;
    } else if (col->view.ndim == 1 && col->view.itemsize == 8 && (strcmp(format, "l") == 0 || strcmp(format, "q") == 0)) {
        col->kind = CELLS_INT64;
    } else {
        PyBuffer_Release(&col->view);
        return 0;
    }
    return 1;
}

static void release_columns(column_t *cols, Py_ssize_t n)
{
    Py_ssize_t c;
    for (c = 0; c < n; c++) {
        if (cols[c].kind != CELLS_TEXT) PyBuffer_Release(&cols[c].view);
        PyMem_Free(cols[c].texts);
    }
    PyMem_Free(cols);
}

static PyObject *py_join_rows(PyObject *self, PyObject *args)
{
    PyObject *columns, *ending, *specials_obj, *out = NULL;
    column_t *cols;
    Py_ssize_t n_cols, n_rows = -1, c, r, r0, k, total, end_len, quotes, taken = 0, *at = NULL;
    unsigned char special[128] = {0}, *info = NULL; /* a text cell: whether quoted; a number: its text's length */
    char *base;
    const nbprec_floattext_api *floats;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!UU:join_rows", &PyList_Type, &columns, &ending, &specials_obj)) return NULL;
    if (!PyUnicode_IS_ASCII(ending) || !PyUnicode_IS_ASCII(specials_obj)) Py_RETURN_NONE;
    for (k = 0; k < PyUnicode_GET_LENGTH(specials_obj); k++) special[((const unsigned char *)PyUnicode_DATA(specials_obj))[k]] = 1;
    n_cols = PyList_GET_SIZE(columns);
    if (n_cols == 0) return PyUnicode_New(0, 127);
    floats = float_formatter(); /* (first: its import runs Python code, which must not run once cells are taken) */
    cols = PyMem_Calloc((size_t)n_cols, sizeof(column_t));
    if (cols == NULL) return PyErr_NoMemory();
    for (c = 0; c < n_cols; c++, taken++) {
        PyObject *column = PyList_GET_ITEM(columns, c);
        Py_ssize_t rows;
        if (!take_column(column, &cols[c], special)) goto refused;
        rows = cols[c].kind == CELLS_TEXT ? PyList_GET_SIZE(column) : cols[c].view.len / 8;
        if (n_rows >= 0 && rows != n_rows) { /* columns of different lengths: the caller's zip says so */
            taken++;
            goto refused;
        }
        n_rows = rows;
        if (cols[c].kind == CELLS_FLOAT64 && floats == NULL) {
            taken++;
            goto refused;
        }
    }
    /* nothing below runs Python code: the lists cannot change under the two passes */
    info = PyMem_Malloc((size_t)n_cols * (size_t)n_rows + 1);
    at = PyMem_Calloc((size_t)n_rows + 1, sizeof(Py_ssize_t)); /* each row's length, then where it is written */
    if (info == NULL || at == NULL) goto no_memory;
    end_len = PyUnicode_GET_LENGTH(ending);
    if (n_rows > 0 && n_cols - 1 + end_len > PY_SSIZE_T_MAX / n_rows) goto no_memory;
    total = n_rows * (n_cols - 1 + end_len);
    for (c = 0; c < n_cols; c++) {
        column_t *col = &cols[c];
        unsigned char *cell_info = info + c * n_rows;
        if (col->kind == CELLS_TEXT) {
            for (r = 0; r < n_rows; r++) {
                PyObject *cell = col->items[r];
                if (!PyUnicode_CheckExact(cell) || !PyUnicode_IS_ASCII(cell)) goto refused;
                Py_ssize_t len = PyUnicode_GET_LENGTH(cell);
                cell_info[r] = (unsigned char)needs_quotes(PyUnicode_DATA(cell), len, special, &quotes);
                if (cell_info[r]) len += 2 + quotes;
                if (len > PY_SSIZE_T_MAX - total) goto no_memory;
                total += len;
                at[r] += len;
            }
            continue;
        }
        if (n_rows > PY_SSIZE_T_MAX / FLOAT_TEXT_MAX) goto no_memory;
        col->texts = PyMem_Malloc((size_t)n_rows * FLOAT_TEXT_MAX + 1);
        if (col->texts == NULL) goto no_memory;
        char *p = col->texts;
        const char *data = (const char *)col->view.buf;
        for (r = 0; r < n_rows; r++) {
            Py_ssize_t len;
            if (col->kind == CELLS_FLOAT64) {
                double v;
                memcpy(&v, data + 8 * r, sizeof v); /* the buffer need not be aligned */
                if (v != v) {
                    cell_info[r] = NAN_CELL;
                    len = col->nan_len;
                } else {
                    int n = floats->write_double(p, v);
                    if (n < 0) goto failed;
                    cell_info[r] = (unsigned char)n;
                    p += n;
                    len = n;
                }
            } else {
                int64_t v;
                memcpy(&v, data + 8 * r, sizeof v);
                int n = write_int64(p, v);
                cell_info[r] = (unsigned char)n;
                p += n;
                len = n;
            }
            if (len > PY_SSIZE_T_MAX - total) goto no_memory;
            total += len;
            at[r] += len;
        }
    }
    out = PyUnicode_New(total, 127);
    if (out == NULL) goto failed;
    base = (char *)PyUnicode_DATA(out);
    for (r = 0, k = 0; r < n_rows; r++) { /* each row's start */
        Py_ssize_t len = at[r] + n_cols - 1 + end_len;
        at[r] = k;
        k += len;
    }
    /* ROWS rows at a time, a column after the other: the cells of a column lie together in memory (read in
       order) and the block's rows in cache (written in place); row after row, each cell read is a cache miss */
    for (r0 = 0; r0 < n_rows; r0 += ROWS) {
        Py_ssize_t r1 = r0 + ROWS < n_rows ? r0 + ROWS : n_rows;
        for (c = 0; c < n_cols; c++) {
            column_t *col = &cols[c];
            const unsigned char *cell_info = info + c * n_rows;
            for (r = r0; r < r1; r++) {
                char *p = base + at[r];
                if (col->kind != CELLS_TEXT) {
                    if (cell_info[r] == NAN_CELL) {
                        copy_cell(p, col->nan, (size_t)col->nan_len);
                        p += col->nan_len;
                    } else {
                        nbprec_copy_short(p, col->texts + col->cursor, cell_info[r]);
                        p += cell_info[r];
                        col->cursor += cell_info[r];
                    }
                } else {
                    PyObject *cell = col->items[r];
                    const char *text = (const char *)PyUnicode_DATA(cell);
                    Py_ssize_t len = PyUnicode_GET_LENGTH(cell), i;
                    if (cell_info[r]) {
                        *p++ = '"';
                        for (i = 0; i < len; i++) {
                            if (text[i] == '"') *p++ = '"';
                            *p++ = text[i];
                        }
                        *p++ = '"';
                    } else {
                        copy_cell(p, text, (size_t)len);
                        p += len;
                    }
                }
                if (c + 1 < n_cols) {
                    *p++ = ',';
                } else {
                    copy_cell(p, PyUnicode_DATA(ending), (size_t)end_len);
                    p += end_len;
                }
                at[r] = p - base;
            }
        }
    }
    goto done;
no_memory:
    PyErr_NoMemory();
failed:
    Py_CLEAR(out);
    goto done;
refused:
    Py_CLEAR(out);
    out = Py_None;
    Py_INCREF(out);
done:
    release_columns(cols, taken);
    PyMem_Free(info);
    PyMem_Free(at);
    return out;
}

PyDoc_STRVAR(shape_texts_doc,
             "shape_texts(values) -> list\n\n"
             "The text of each of `values` that is a tuple of ints (not bools), as str(list(shape)) and json.dumps\n"
             "write it, '[2, 8]'; None for any other value. Equal shapes give the same str object.");

/* A tuple of ints (exact ones: no bool) as "[2, 8]", or NULL without an error for an int beyond 64 bits. */
static PyObject *shape_text(PyObject *shape)
{
    char text[32 * 24 + 2], *p = text;
    Py_ssize_t n = PyTuple_GET_SIZE(shape), i;
    PyObject *out;
    if (n > 32) { /* more dimensions than any framework allows: the slow way */
        PyObject *list = PySequence_List(shape);
        if (list == NULL) return NULL;
        out = PyObject_Str(list);
        Py_DECREF(list);
        return out;
    }
    *p++ = '[';
    for (i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(shape, i);
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return NULL;
        }
        p += sprintf(p, i ? ", %lld" : "%lld", v);
    }
    *p++ = ']';
    return PyUnicode_FromStringAndSize(text, p - text);
}

static int ints_only(PyObject *tuple)
{
    Py_ssize_t i;
    for (i = 0; i < PyTuple_GET_SIZE(tuple); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(tuple, i))) return 0;
    return 1;
}

static PyObject *py_shape_texts(PyObject *self, PyObject *values)
{
    PyObject *out = NULL, *made = NULL, *last = NULL, *last_text = NULL;
    Py_ssize_t n, i;
    (void)self;
    if (!PyList_Check(values)) return PyErr_Format(PyExc_TypeError, "shape_texts: a list, not %.80s",
                                                   Py_TYPE(values)->tp_name);
    n = PyList_GET_SIZE(values);
    if ((out = PyList_New(n)) == NULL || (made = PyDict_New()) == NULL) goto failed;
    for (i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i), *text;
        if (value == last) { /* the same tuple object as the row before: a dump index's rows share them */
            text = last_text;
        } else if (!PyTuple_CheckExact(value) || !ints_only(value)) { /* (2.0, 8) equals (2, 8): not looked up */
            text = Py_None;
        } else {
            text = PyDict_GetItemWithError(made, value); /* borrowed */
            if (text == NULL) {
                if (PyErr_Occurred()) goto failed;
                if ((text = shape_text(value)) == NULL) {
                    if (PyErr_Occurred()) goto failed;
                    text = Py_None;
                } else {
                    int rc = PyDict_SetItem(made, value, text);
                    Py_DECREF(text); /* (made holds it) */
                    if (rc < 0) goto failed;
                }
            }
            last = value;
            last_text = text;
        }
        PyList_SET_ITEM(out, i, Py_NewRef(text));
    }
    Py_DECREF(made);
    return out;
failed:
    Py_XDECREF(out);
    Py_XDECREF(made);
    return NULL;
}

static PyMethodDef methods[] = {
    {"join_rows", py_join_rows, METH_VARARGS, join_rows_doc},
    {"shape_texts", py_shape_texts, METH_O, shape_texts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csvjoin", "CSV rows joined from columns of cells and numbers, in C (see nbprec/_csvjoin.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__csvjoin(void) { return PyModule_Create(&module); }
