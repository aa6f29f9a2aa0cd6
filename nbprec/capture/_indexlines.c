/*
 * nbprec.capture._indexlines: a statistics capture's tensor records, appended in C.
 *
 * A capture of a small transformer makes about 1,500 tensor records a training step. In Python, each costs
 * CaptureWriter.add about 3 us of interpreter work (more inside a training step, whose tensors push the
 * interpreter out of the caches) for what is string joining and a few dictionary lookups.
 *
 * IndexLines(seen, strings, shapes, slow, flush, interval) shares the writer's containers: seen (the (step, name)
 * pairs written), strings (text -> its JSON text), shapes (shape tuple -> its JSON text). Its add() takes
 * CaptureWriter.add's arguments and does what it does for the usual record: no payload, a name of printable ASCII
 * without quotes or backslashes, int fields, and role, slot, dtype and shape whose JSON texts are cached. Anything
 * else (a payload, a name to escape, a text not cached yet, a repeated name, a closed writer) goes to slow, the
 * writer's Python add, which handles it or raises, and hands the record back with row(); the texts it makes are
 * cached, so the next such record stays here. Every `interval` seconds (CLOCK_MONOTONIC, the clock of
 * time.monotonic) add() calls flush(), as the Python add does, which writes what take() gives.
 *
 * A record's index line is appended to the pending bytes, and its column-cache cells to their columns, as it is
 * added (its texts are in the processor's caches then): no str object per line, no list of them to join and
 * encode at the flush, no records' objects walked at close, where columns() joins the columns (column_cache(rows,
 * names), for a tensor-mode capture's rows, gives the same bytes). A record is kept whole or not at all.
 *
 * The line is the Python add's, byte for byte (the tests compare the two writers' files):
 *   {"name":N,"step":S,"rank":R,"order":O,<op fragment>,"role":..,"slot":..,"dtype":..,"shape":..,
 *    "numel":E,<stats fragment>}\n
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <time.h>

/* A growing byte string (PyMem). */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

/* A record's cells: name, step, rank, order, EncodedOp, role, slot, dtype, shape, numel, EncodedStats, file; its
   columns: those, with the op's 6 and the statistics' 9 encoded fields each a column of its own. */
enum { ROW_SIZE = 12, OP_FIELDS = 6, STAT_FIELDS = 9, MAX_COLUMNS = 1 + 3 + OP_FIELDS + 4 + 1 + STAT_FIELDS + 1 };

typedef struct {
    PyObject_HEAD
    PyObject *seen;
    PyObject *strings;
    PyObject *shapes;
    PyObject *slow;
    PyObject *flush;
    double interval;
    double last;
    int closed;
    Buffer pending;           /* the index lines not handed to the file yet (UTF-8) */
    Buffer cols[MAX_COLUMNS]; /* the column cache's columns so far, each cell's text after a comma but the first */
    Py_ssize_t count;         /* records in them */
} IndexLines;

static PyObject *s_fragment; /* "fragment", interned */
static PyObject *s_fields;   /* "fields", interned */

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int lines_traverse(IndexLines *self, visitproc visit, void *arg)
{
    Py_VISIT(self->seen);
    Py_VISIT(self->strings);
    Py_VISIT(self->shapes);
    Py_VISIT(self->slow);
    Py_VISIT(self->flush);
    return 0;
}

static int lines_clear(IndexLines *self)
{
    Py_CLEAR(self->seen);
    Py_CLEAR(self->strings);
    Py_CLEAR(self->shapes);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->flush);
    return 0;
}

static void free_buffers(IndexLines *self)
{
    for (int c = 0; c < MAX_COLUMNS; c++) PyMem_Free(self->cols[c].data);
    memset(self->cols, 0, sizeof self->cols);
    PyMem_Free(self->pending.data);
    memset(&self->pending, 0, sizeof self->pending);
    self->count = 0;
}

static void lines_dealloc(IndexLines *self)
{
    PyObject_GC_UnTrack(self);
    lines_clear(self);
    free_buffers(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int lines_init(IndexLines *self, PyObject *args, PyObject *kwargs)
{
    PyObject *seen, *strings, *shapes, *slow, *flush;
    double interval;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "IndexLines takes positional arguments only");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!OOd:IndexLines", &PySet_Type, &seen, &PyDict_Type, &strings, &PyDict_Type,
                          &shapes, &slow, &flush, &interval))
        return -1;
    if (!PyCallable_Check(slow) || !PyCallable_Check(flush)) {
        PyErr_SetString(PyExc_TypeError, "IndexLines: slow and flush must be callables");
        return -1;
    }
    lines_clear(self);
    free_buffers(self);
    Py_INCREF(seen);
    self->seen = seen;
    Py_INCREF(strings);
    self->strings = strings;
    Py_INCREF(shapes);
    self->shapes = shapes;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(flush);
    self->flush = flush;
    self->interval = interval;
    self->last = monotonic();
    self->closed = 0;
    return 0;
}

/* A name written as is between quotes: printable ASCII other than '"' and '\' (what json escapes). */
static int plain_name(PyObject *name)
{
    if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_ASCII(name)) return 0;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(name);
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == '"' || c == '\\') return 0;
    }
    return 1;
}

/* A cached JSON text (borrowed), or NULL (not cached, or not a str). */
static PyObject *cached(PyObject *cache, PyObject *key)
{
    PyObject *text = PyDict_GetItemWithError(cache, key);
    if (text == NULL || !PyUnicode_CheckExact(text)) return NULL;
    return text;
}

/* An int field as decimal text into buf (24 bytes); 0 when it is not an exact int that fits. */
static int int_text(PyObject *v, char *buf, Py_ssize_t *len)
{
    if (!PyLong_CheckExact(v)) return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    char tmp[24];
    int n = 0;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    Py_ssize_t k = 0;
    if (x < 0) buf[k++] = '-';
    while (n > 0) buf[k++] = tmp[--n];
    *len = k;
    return 1;
}

/* -- the buffers: index lines and the column cache's columns --------------------------------------------- */

static int buf_put(Buffer *b, const char *text, Py_ssize_t n)
{
    if (b->len + n + 1 > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap) cap *= 2;
        char *grown = PyMem_Realloc(b->data, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = grown, b->cap = cap;
    }
    memcpy(b->data + b->len, text, (size_t)n);
    b->len += n;
    return 0;
}

/* One cell: a comma before all but the first; a str as its UTF-8 bytes (it is JSON text already), an exact int
   in decimal, None as null, anything else as str() of it (what the Python join's map(str, ...) writes). */
static int put_cell(Buffer *b, PyObject *v, int first)
{
    if (!first && buf_put(b, ",", 1) < 0) return -1;
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(v, &n);
        return text == NULL ? -1 : buf_put(b, text, n);
    }
    char digits[24];
    Py_ssize_t n;
    if (int_text(v, digits, &n)) return buf_put(b, digits, n);
    if (v == Py_None) return buf_put(b, "null", 4);
    PyObject *str = PyObject_Str(v);
    if (str == NULL) return -1;
    int r = put_cell(b, str, 1);
    Py_DECREF(str);
    return r;
}

/* The `want` texts of an EncodedOp's or EncodedStats' `fields` tuple, one into each of the columns from cols[*k]
   on (*k moves past them); TypeError for fields of another form. */
static int put_fields(Buffer *cols, Py_ssize_t *k, PyObject *encoded, Py_ssize_t want, int first)
{
    PyObject *fields = PyObject_GetAttr(encoded, s_fields);
    if (fields == NULL) return -1;
    int r = 0;
    if (!PyTuple_CheckExact(fields) || PyTuple_GET_SIZE(fields) != want) {
        PyErr_SetString(PyExc_TypeError, "column_cache: a record's encoded fields are not a tuple of their size");
        r = -1;
    }
    for (Py_ssize_t c = 0; r == 0 && c < want; c++) r = put_cell(&cols[(*k)++], PyTuple_GET_ITEM(fields, c), first);
    Py_DECREF(fields);
    return r;
}

/* One record's cells (ROW_SIZE of them, see above) appended to the columns from cols[0] on; the file cell only
   when with_file; a NULL name cell when the caller wrote the name's. TypeError for cells of another form. */
static int put_record(Buffer *cols, PyObject *const *cells, int first, int with_file)
{
    Py_ssize_t k = 0, c = 0;
    if (cells[0] == NULL) k = c = 1;
    for (; c < 4; c++)
        if (put_cell(&cols[k++], cells[c], first) < 0) return -1;
    if (put_fields(cols, &k, cells[4], OP_FIELDS, first) < 0) return -1;
    for (c = 5; c < 10; c++)
        if (put_cell(&cols[k++], cells[c], first) < 0) return -1;
    if (put_fields(cols, &k, cells[10], STAT_FIELDS, first) < 0) return -1;
    return with_file ? put_cell(&cols[k], cells[11], first) : 0;
}

/* The column cache's members, '"name":[...],...', from the first len(names) columns: bytes, or NULL. */
static PyObject *join_columns(const Buffer *cols, PyObject *names)
{
    Buffer out = {NULL, 0, 0};
    Py_ssize_t ncols = PyTuple_GET_SIZE(names);
    for (Py_ssize_t c = 0; c < ncols; c++) {
        Py_ssize_t n;
        PyObject *name = PyTuple_GET_ITEM(names, c);
        const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &n) : NULL;
        if (text == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "column_cache: a column name is not a str");
            PyMem_Free(out.data);
            return NULL;
        }
        if ((c && buf_put(&out, ",", 1) < 0) || buf_put(&out, "\"", 1) < 0 || buf_put(&out, text, n) < 0 ||
            buf_put(&out, "\":[", 3) < 0 || (cols[c].len && buf_put(&out, cols[c].data, cols[c].len) < 0) ||
            buf_put(&out, "]", 1) < 0) {
            PyMem_Free(out.data);
            return NULL;
        }
    }
    PyObject *result = PyBytes_FromStringAndSize(out.data, out.len);
    PyMem_Free(out.data);
    return result;
}

/* names must be a tuple of the 24 column names, or 25 with "file" last. */
static int check_names(PyObject *names)
{
    if (PyTuple_CheckExact(names) &&
        (PyTuple_GET_SIZE(names) == MAX_COLUMNS - 1 || PyTuple_GET_SIZE(names) == MAX_COLUMNS))
        return 1;
    PyErr_SetString(PyExc_TypeError, "column_cache: names holds 24 or 25 column names");
    return 0;
}

/* The lengths of the twin's buffers before a record, to take back what a record that failed halfway wrote: a
   record is kept whole (its line, its cells, its (step, name)) or not at all. */
typedef struct {
    Py_ssize_t pending, cols[MAX_COLUMNS];
} Marks;

static void mark(const IndexLines *self, Marks *m)
{
    m->pending = self->pending.len;
    for (int c = 0; c < MAX_COLUMNS; c++) m->cols[c] = self->cols[c].len;
}

static void undo(IndexLines *self, const Marks *m)
{
    self->pending.len = m->pending;
    for (int c = 0; c < MAX_COLUMNS; c++) self->cols[c].len = m->cols[c];
}

/* A str's UTF-8 bytes appended to b. */
static int put_text(Buffer *b, PyObject *text)
{
    Py_ssize_t n;
    const char *data = PyUnicode_AsUTF8AndSize(text, &n);
    return data == NULL ? -1 : buf_put(b, data, n);
}

enum { N_ARGS = 11 }; /* add()'s arguments up to stats */

static PyObject *lines_add(IndexLines *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || self->closed || nargs < N_ARGS || nargs > 14) goto slow;
    if ((nargs > 11 && args[11] != Py_None) || (nargs > 13 && args[13] != Py_None)) goto slow; /* a payload */
    PyObject *name = args[0], *step = args[1], *rank = args[2], *order = args[3], *op = args[4];
    PyObject *role = args[5], *slot = args[6], *dtype = args[7], *shape = args[8], *numel = args[9];
    PyObject *stats = args[10];
    if (!plain_name(name) || !PyTuple_CheckExact(shape)) goto slow;
    PyObject *role_text = cached(self->strings, role);
    PyObject *slot_text = role_text ? cached(self->strings, slot) : NULL;
    PyObject *dtype_text = slot_text ? cached(self->strings, dtype) : NULL;
    PyObject *shape_text = dtype_text ? cached(self->shapes, shape) : NULL;
    if (shape_text == NULL) {
        if (PyErr_Occurred()) return NULL; /* an unhashable key */
        goto slow;
    }
    char nums[4][24];
    Py_ssize_t num_len[4];
    PyObject *ints[4] = {step, rank, order, numel};
    for (int i = 0; i < 4; i++)
        if (!int_text(ints[i], nums[i], &num_len[i])) goto slow;

    PyObject *key = PyTuple_Pack(2, step, name);
    if (key == NULL) return NULL;
    int known = PySet_Contains(self->seen, key);
    if (known != 0) {
        Py_DECREF(key);
        if (known < 0) return NULL;
        goto slow; /* written twice: the Python add says so */
    }
    PyObject *op_fragment = PyObject_GetAttr(op, s_fragment);
    PyObject *stats_fragment = op_fragment ? PyObject_GetAttr(stats, s_fragment) : NULL;
    if (stats_fragment == NULL || !PyUnicode_CheckExact(op_fragment) || !PyUnicode_CheckExact(stats_fragment)) {
        Py_DECREF(key);
        Py_XDECREF(op_fragment);
        Py_XDECREF(stats_fragment);
        if (PyErr_Occurred()) return NULL;
        goto slow;
    }

    /* the line, into the pending bytes; the name's cell, the name between quotes (it needs no escapes) */
    {
        static const char *const fixed[] = {
            "{\"name\":\"", "\",\"step\":", ",\"rank\":", ",\"order\":", ",", ",\"role\":", ",\"slot\":",
            ",\"dtype\":", ",\"shape\":", ",\"numel\":", ",",
        };
        PyObject *texts[] = {NULL, NULL, NULL, NULL, op_fragment, role_text, slot_text, dtype_text,
                             shape_text, NULL, stats_fragment};
        int num_at[] = {-1, 0, 1, 2, -1, -1, -1, -1, -1, 3, -1};
        const char *name_data = (const char *)PyUnicode_1BYTE_DATA(name);
        Py_ssize_t name_len = PyUnicode_GET_LENGTH(name);
        Buffer *line = &self->pending, *names = &self->cols[0];
        PyObject *cells[ROW_SIZE] = {NULL, step, rank, order, op, role_text, slot_text, dtype_text, shape_text,
                                     numel, stats, Py_None};
        Marks m;
        mark(self, &m);
        int failed = 0;
        for (int i = 0; i < 11 && !failed; i++) {
            if (buf_put(line, fixed[i], (Py_ssize_t)strlen(fixed[i])) < 0)
                failed = 1;
            else if (i == 0)
                failed = buf_put(line, name_data, name_len) < 0;
            else if (num_at[i] >= 0)
                failed = buf_put(line, nums[num_at[i]], num_len[num_at[i]]) < 0;
            else if (texts[i] != NULL)
                failed = put_text(line, texts[i]) < 0;
        }
        failed = failed || buf_put(line, "}\n", 2) < 0 || (self->count && buf_put(names, ",", 1) < 0) ||
                 buf_put(names, "\"", 1) < 0 || buf_put(names, name_data, name_len) < 0 ||
                 buf_put(names, "\"", 1) < 0 || put_record(self->cols, cells, self->count == 0, 1) < 0 ||
                 PySet_Add(self->seen, key) < 0;
        Py_DECREF(key);
        Py_DECREF(op_fragment);
        Py_DECREF(stats_fragment);
        if (failed) {
            undo(self, &m);
            return NULL;
        }
        self->count++;
    }

    double now = monotonic();
    if (now - self->last >= self->interval) {
        self->last = now;
        PyObject *r = PyObject_CallNoArgs(self->flush);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;

slow:
    return PyObject_Vectorcall(self->slow, args, (size_t)nargs, kwnames);
}

static PyObject *lines_close(IndexLines *self, PyObject *unused)
{
    (void)unused;
    self->closed = 1;
    Py_RETURN_NONE;
}

static PyObject *lines_row(IndexLines *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != ROW_SIZE ||
        !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "IndexLines.row(cells: a tuple of 12, line: str)");
        return NULL;
    }
    Marks m;
    mark(self, &m);
    if (put_text(&self->pending, args[1]) < 0 ||
        put_record(self->cols, &PyTuple_GET_ITEM(args[0], 0), self->count == 0, 1) < 0) {
        undo(self, &m);
        return NULL;
    }
    self->count++;
    Py_RETURN_NONE;
}

static PyObject *lines_take(IndexLines *self, PyObject *unused)
{
    (void)unused;
    PyObject *data = PyBytes_FromStringAndSize(self->pending.data, self->pending.len);
    if (data != NULL) self->pending.len = 0;
    return data;
}

static PyObject *lines_columns(IndexLines *self, PyObject *names)
{
    if (!check_names(names)) return NULL;
    if (self->count == 0) return PyBytes_FromStringAndSize(NULL, 0);
    return join_columns(self->cols, names);
}

static PyObject *lines_count(IndexLines *self, void *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(self->count);
}

static PyGetSetDef lines_getset[] = {
    {"count", (getter)lines_count, NULL, "How many records were kept.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef lines_methods[] = {
    {"add", (PyCFunction)(void (*)(void))lines_add, METH_FASTCALL | METH_KEYWORDS,
     "add(name, step, rank, order, op, role, slot, dtype, shape, numel, stats, payload=None, owned=False, "
     "same_as=None): CaptureWriter.add, in C for the usual statistics record (see nbprec/capture/_indexlines.c)."},
    {"close", (PyCFunction)lines_close, METH_NOARGS, "Send every later add() to slow (the writer closed)."},
    {"row", (PyCFunction)(void (*)(void))lines_row, METH_FASTCALL,
     "row(cells, line): keep a record the Python add wrote, after the others: its index line and its 12 cells "
     "(name text, step, rank, order, EncodedOp, role, slot, dtype and shape texts, numel, EncodedStats, file text "
     "or None); all of it, or nothing when it fails."},
    {"take", (PyCFunction)lines_take, METH_NOARGS,
     "take() -> bytes: the index lines kept since the last take (UTF-8), for the file; they are not kept after."},
    {"columns", (PyCFunction)lines_columns, METH_O,
     "columns(names) -> bytes: the column cache's members of every record kept, as column_cache(rows, names) "
     "gives them; empty without records."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(column_cache_doc,
             "column_cache(rows, names) -> bytes\n\n"
             "The columns of CaptureWriter's column cache as JSON members, '\"name\":[...],...', from its rows "
             "(name, step, rank, order, EncodedOp, role, slot, dtype, shape, numel, EncodedStats, file): names "
             "holds the 24 column names, or 25 with the file column last; empty without rows. TypeError for rows "
             "of another form.");

static PyObject *column_cache(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "column_cache(rows: list, names: tuple)");
        return NULL;
    }
    PyObject *rows = args[0], *names = args[1];
    if (!check_names(names)) return NULL;
    Py_ssize_t nrows = PyList_GET_SIZE(rows);
    if (nrows == 0) return PyBytes_FromStringAndSize(NULL, 0); /* no columns at all, as the Python join */
    Buffer cols[MAX_COLUMNS];
    memset(cols, 0, sizeof cols);
    PyObject *result = NULL;
    int with_file = PyTuple_GET_SIZE(names) == MAX_COLUMNS;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != ROW_SIZE) {
            PyErr_SetString(PyExc_TypeError, "column_cache: a row is not a tuple of 12");
            goto done;
        }
        if (put_record(cols, &PyTuple_GET_ITEM(row, 0), r == 0, with_file) < 0) goto done;
    }
    result = join_columns(cols, names);
done:
    for (int c = 0; c < MAX_COLUMNS; c++) PyMem_Free(cols[c].data);
    return result;
}

static PyMethodDef module_methods[] = {
    {"column_cache", (PyCFunction)(void (*)(void))column_cache, METH_FASTCALL, column_cache_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IndexLinesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nbprec.capture._indexlines.IndexLines",
    .tp_basicsize = sizeof(IndexLines),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A statistics capture's index records, appended in C (see nbprec/capture/_indexlines.c).",
    .tp_traverse = (traverseproc)lines_traverse,
    .tp_clear = (inquiry)lines_clear,
    .tp_dealloc = (destructor)lines_dealloc,
    .tp_init = (initproc)lines_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = lines_methods,
    .tp_getset = lines_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_indexlines", "A statistics capture's index records, in C (see nbprec/capture/_indexlines.c).",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__indexlines(void)
{
    s_fragment = PyUnicode_InternFromString("fragment");
    s_fields = PyUnicode_InternFromString("fields");
    if (s_fragment == NULL || s_fields == NULL || PyType_Ready(&IndexLinesType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&IndexLinesType);
    if (PyModule_AddObject(m, "IndexLines", (PyObject *)&IndexLinesType) < 0) {
        Py_DECREF(&IndexLinesType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
