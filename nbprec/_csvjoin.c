/*
 * nbprec._csvjoin: the rows of a CSV table joined from its columns of ready cells, in C.
 *
 * nbprec.safe_text.write_csv_columns writes a table's columns of text cells as csv.writer writes their rows with
 * QUOTE_MINIMAL: a cell holding a comma, a quote or a character of the row ending in quotes (its quotes doubled),
 * the others as they are. In Python that is a check of each column, a tuple a row (zip) and a join of it: about
 * 60 ns a cell, a third of writing a large comparison's CSV files. join_rows does the same in two passes over the
 * cells (the text's length, then the copy), for cells that are all ASCII text, the usual case (names, numbers,
 * dtypes); any other cell makes it answer None, and the caller writes the rows in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#define ROWS 64 /* rows written at a time (see join_rows) */

PyDoc_STRVAR(join_rows_doc,
             "join_rows(columns, ending, specials) -> str | None\n\n"
             "The rows of `columns` (a list of lists of str, all as long), each row's cells separated by ',' and\n"
             "followed by `ending`, a cell holding one of the characters of `specials` in double quotes (its own\n"
             "doubled); None when a column is not a list, the columns differ in length, or a cell, `ending` or\n"
             "`specials` is not an ASCII str.");

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

static PyObject *py_join_rows(PyObject *self, PyObject *args)
{
    PyObject *columns, *ending, *specials_obj, *out;
    PyObject ***cells; /* each column's item array */
    Py_ssize_t n_cols, n_rows, c, r, r0, k, total, end_len, quotes, *at = NULL;
    unsigned char special[128] = {0}, *quoted; /* the characters that force quotes; the cells that have them */
    char *base;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!UU:join_rows", &PyList_Type, &columns, &ending, &specials_obj)) return NULL;
    if (!PyUnicode_IS_ASCII(ending) || !PyUnicode_IS_ASCII(specials_obj)) Py_RETURN_NONE;
    for (k = 0; k < PyUnicode_GET_LENGTH(specials_obj); k++) special[((const unsigned char *)PyUnicode_DATA(specials_obj))[k]] = 1;
    n_cols = PyList_GET_SIZE(columns);
    if (n_cols == 0) return PyUnicode_New(0, 127);
    for (c = 0; c < n_cols; c++) {
        PyObject *column = PyList_GET_ITEM(columns, c);
        if (!PyList_Check(column)) Py_RETURN_NONE;
    }
    n_rows = PyList_GET_SIZE(PyList_GET_ITEM(columns, 0));
    for (c = 1; c < n_cols; c++) { /* columns of different lengths: the caller's zip says so */
        if (PyList_GET_SIZE(PyList_GET_ITEM(columns, c)) != n_rows) Py_RETURN_NONE;
    }
    /* nothing below runs Python code: the lists cannot change under the two passes */
    cells = PyMem_Malloc(n_cols * sizeof(PyObject **));
    quoted = PyMem_Malloc((size_t)n_cols * (size_t)n_rows + 1);
    at = PyMem_Calloc((size_t)n_rows + 1, sizeof(Py_ssize_t)); /* each row's length, then where it is written */
    if (cells == NULL || quoted == NULL || at == NULL) {
        PyMem_Free(cells);
        PyMem_Free(quoted);
        PyMem_Free(at);
        return PyErr_NoMemory();
    }
    for (c = 0; c < n_cols; c++) cells[c] = ((PyListObject *)PyList_GET_ITEM(columns, c))->ob_item;
    end_len = PyUnicode_GET_LENGTH(ending);
    if (n_rows > 0 && n_cols - 1 + end_len > PY_SSIZE_T_MAX / n_rows) {
        PyMem_Free(cells);
        PyMem_Free(quoted);
        PyMem_Free(at);
        return PyErr_NoMemory();
    }
    total = n_rows * (n_cols - 1 + end_len);
    for (c = 0; c < n_cols; c++) {
        for (r = 0; r < n_rows; r++) {
            PyObject *cell = cells[c][r];
            if (!PyUnicode_CheckExact(cell) || !PyUnicode_IS_ASCII(cell)) {
                PyMem_Free(cells);
                PyMem_Free(quoted);
                PyMem_Free(at);
                Py_RETURN_NONE;
            }
            Py_ssize_t len = PyUnicode_GET_LENGTH(cell);
            quoted[c * n_rows + r] = (unsigned char)needs_quotes(PyUnicode_DATA(cell), len, special, &quotes);
            if (quoted[c * n_rows + r]) len += 2 + quotes;
            if (len > PY_SSIZE_T_MAX - total) {
                PyMem_Free(cells);
                PyMem_Free(quoted);
                PyMem_Free(at);
                return PyErr_NoMemory();
            }
            total += len;
            at[r] += len;
        }
    }
    out = PyUnicode_New(total, 127);
    if (out == NULL) {
        PyMem_Free(cells);
        PyMem_Free(quoted);
        PyMem_Free(at);
        return NULL;
    }
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
            for (r = r0; r < r1; r++) {
                PyObject *cell = cells[c][r];
                const char *text = (const char *)PyUnicode_DATA(cell);
                Py_ssize_t len = PyUnicode_GET_LENGTH(cell), i;
                char *p = base + at[r];
                if (quoted[c * n_rows + r]) {
                    *p++ = '"';
                    for (i = 0; i < len; i++) {
                        if (text[i] == '"') *p++ = '"';
                        *p++ = text[i];
                    }
                    *p++ = '"';
                } else {
                    memcpy(p, text, (size_t)len);
                    p += len;
                }
                if (c + 1 < n_cols) {
                    *p++ = ',';
                } else {
                    memcpy(p, PyUnicode_DATA(ending), (size_t)end_len);
                    p += end_len;
                }
                at[r] = p - base;
            }
        }
    }
    PyMem_Free(cells);
    PyMem_Free(quoted);
    PyMem_Free(at);
    return out;
}

static PyMethodDef methods[] = {
    {"join_rows", py_join_rows, METH_VARARGS, join_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csvjoin", "CSV rows joined from columns of ready cells, in C (see nbprec/_csvjoin.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__csvjoin(void) { return PyModule_Create(&module); }
