/*
 * Two loops of nbprec.formats.msprobe_columns.TensorColumns in C, for the columns of a scanned dump.json's tensors
 * (each about 0.2-0.3 us a tensor in Python: with the scan, most of the time of opening a statistics dump).
 *
 * shape_ids: the recorded shapes of a batch of tensors given their ids in the reader's table of distinct shapes,
 * the loop of _shape_column and _shape_id. It works on the reader's own table, as _shape_id does: known (a tuple
 * of sizes -> its id, or a code of why it has none), shapes (the distinct shapes, by id) and numels (their element
 * counts). A shape that is a list of ints (exactly int: a bool is not a size) gets the id known holds for it; a
 * new one whose sizes are from 0 to 2**63 - 1 and whose element count stays below 2**63 is added (its id: the
 * length of shapes) as _shape_id adds it. Every other shape (not a list of ints, a negative or huge size, an
 * element count that overflows on the way) gets the caller's code `unseen`, and the caller gives it to _shape_id,
 * which words its problem (an element count that overflowed before a zero size is still a shape: _shape_id finds
 * it so). Shapes are taken in row order, so new ones are numbered as the Python loop numbers them. No Python code
 * runs here (ints hash and compare in C), so the lists cannot change under the loop.
 *
 * derived_names: the names msprobe gives tensors that name no payload file (statistics and md5 dumps), op key,
 * role word and slot joined: the map of _names.
 *
 * tests/formats/test_msprobe_columns_in_c.py holds both to the Python loops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

const char msprobe_shape_ids_doc[] =
    "shape_ids(raw, known, shapes, numels, unseen) -> bytes\n\n"
    "Per item of the list raw, its shape id (bytes of int64): what the dict known holds for tuple(item) when\n"
    "the item is a list of ints, a new id (the shape appended to the lists shapes and numels, and put in known)\n"
    "for a new valid one, else unseen.";

/* The element count of the sizes of `shape` (ints), or -1 when one is negative or the count leaves int64. */
static long long element_count(PyObject *shape)
{
    Py_ssize_t k = PyList_GET_SIZE(shape), j;
    long long count = 1;
    for (j = 0; j < k; j++) {
        int overflow = 0;
        long long size = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(shape, j), &overflow);
        if (overflow || size < 0 || __builtin_mul_overflow(count, size, &count))
            return -1;
    }
    return count;
}

/* The id of `shape` (found, or added), or `unseen`; -2 (with an exception set) on an error. */
static int shape_id(PyObject *shape, PyObject *known, PyObject *shapes, PyObject *numels, long long unseen,
                    long long *id)
{
    PyObject *key, *found, *new_id = NULL, *numel = NULL;
    Py_ssize_t k, j;
    long long count;
    int rc = -2;
    *id = unseen;
    if (!PyList_CheckExact(shape))
        return 0;
    k = PyList_GET_SIZE(shape);
    for (j = 0; j < k; j++)
        if (!PyLong_CheckExact(PyList_GET_ITEM(shape, j)))
            return 0;
    key = PyList_AsTuple(shape);
    if (!key)
        return -2;
    found = PyDict_GetItemWithError(known, key); /* borrowed */
    if (found) {
        if (PyLong_CheckExact(found)) {
            long long value = PyLong_AsLongLong(found);
            if (value == -1 && PyErr_Occurred())
                PyErr_Clear(); /* (not an id the table could hold: left to the caller) */
            else
                *id = value;
        }
        Py_DECREF(key);
        return 0;
    }
    if (PyErr_Occurred())
        goto done;
    count = element_count(shape);
    if (count < 0) {
        rc = 0; /* the caller's _shape_id: a problem, or a count that overflowed before a zero */
        goto done;
    }
    new_id = PyLong_FromSsize_t(PyList_GET_SIZE(shapes));
    numel = PyLong_FromLongLong(count);
    if (!new_id || !numel || PyList_Append(shapes, key) < 0 || PyList_Append(numels, numel) < 0)
        goto done;
    if (PyDict_SetItem(known, key, new_id) < 0)
        goto done;
    *id = PyList_GET_SIZE(shapes) - 1;
    rc = 0;
done:
    Py_XDECREF(new_id);
    Py_XDECREF(numel);
    Py_DECREF(key);
    return rc;
}

PyObject *msprobe_shape_ids(PyObject *self, PyObject *args)
{
    PyObject *raw, *known, *shapes, *numels, *out;
    long long unseen;
    Py_ssize_t n, i;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!L:shape_ids", &PyList_Type, &raw, &PyDict_Type, &known, &PyList_Type,
                          &shapes, &PyList_Type, &numels, &unseen))
        return NULL;
    n = PyList_GET_SIZE(raw);
    out = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!out)
        return NULL;
    for (i = 0; i < n; i++) {
        long long id;
        int64_t value;
        if (shape_id(PyList_GET_ITEM(raw, i), known, shapes, numels, unseen, &id) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        value = (int64_t)id;
        memcpy(PyBytes_AS_STRING(out) + 8 * i, &value, 8);
    }
    return out;
}

const char msprobe_derived_names_doc[] =
    "derived_names(ops, op_of, roles, slots, words, first, count) -> list\n\n"
    "For the rows first to first + count: ops[op_of[row]] + words[roles[row]] + slots[row] (op_of: a buffer of\n"
    "int64, roles: of bytes; ops, slots: lists of str; words: a tuple of str).";

/* a + b + c, three str. */
static PyObject *joined(PyObject *a, PyObject *b, PyObject *c)
{
    PyObject *out, *head;
    if (PyUnicode_IS_ASCII(a) && PyUnicode_IS_ASCII(b) && PyUnicode_IS_ASCII(c)) {
        Py_ssize_t na = PyUnicode_GET_LENGTH(a), nb = PyUnicode_GET_LENGTH(b), nc = PyUnicode_GET_LENGTH(c);
        char *to;
        out = PyUnicode_New(na + nb + nc, 127);
        if (!out)
            return NULL;
        to = (char *)PyUnicode_DATA(out);
        memcpy(to, PyUnicode_DATA(a), na);
        memcpy(to + na, PyUnicode_DATA(b), nb);
        memcpy(to + na + nb, PyUnicode_DATA(c), nc);
        return out;
    }
    head = PyUnicode_Concat(a, b);
    if (!head)
        return NULL;
    out = PyUnicode_Concat(head, c);
    Py_DECREF(head);
    return out;
}

PyObject *msprobe_derived_names(PyObject *self, PyObject *args)
{
    PyObject *ops, *slots, *words, *out = NULL;
    Py_buffer op_of = {0}, roles = {0};
    Py_ssize_t first, count, i, n_ops, n_words;
    const int64_t *op_at;
    const unsigned char *role_at;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*y*O!O!nn:derived_names", &PyList_Type, &ops, &op_of, &roles, &PyList_Type, &slots,
                          &PyTuple_Type, &words, &first, &count))
        return NULL;
    if (first < 0 || count < 0 || first + count > op_of.len / 8 || first + count > roles.len ||
        first + count > PyList_GET_SIZE(slots)) {
        PyErr_SetString(PyExc_IndexError, "derived_names: rows beyond the columns");
        goto done;
    }
    op_at = (const int64_t *)op_of.buf;
    role_at = (const unsigned char *)roles.buf;
    n_ops = PyList_GET_SIZE(ops);
    n_words = PyTuple_GET_SIZE(words);
    out = PyList_New(count);
    if (!out)
        goto done;
    for (i = 0; i < count; i++) {
        Py_ssize_t row = first + i;
        int64_t op;
        PyObject *key, *word, *slot, *name;
        memcpy(&op, op_at + row, 8);
        if (op < 0 || op >= n_ops || role_at[row] >= n_words) {
            PyErr_SetString(PyExc_IndexError, "derived_names: an op or role beyond its list");
            Py_CLEAR(out);
            goto done;
        }
        key = PyList_GET_ITEM(ops, op);
        word = PyTuple_GET_ITEM(words, role_at[row]);
        slot = PyList_GET_ITEM(slots, row);
        if (!PyUnicode_Check(key) || !PyUnicode_Check(word) || !PyUnicode_Check(slot)) {
            PyErr_SetString(PyExc_TypeError, "derived_names: op keys, words and slots must be str");
            Py_CLEAR(out);
            goto done;
        }
        name = joined(key, word, slot);
        if (!name) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, name);
    }
done:
    PyBuffer_Release(&op_of);
    PyBuffer_Release(&roles);
    return out;
}
