/*
 * nbprec.graph._textformat: protobuf text format (GE graph dumps) parsed in C into the plain structure of
 * nbprec/graph/ge_parse.py (a message is a dict of field name -> list of values), about ten times faster than
 * the Python tokeniser: a GE graph of a large network is tens of MB of text.
 *
 * This is a fast path for well-formed text, never an authority. It accepts the text protobuf's printers write
 * (fields, nested `{ }` messages, decimal integers, enum names, booleans, plain quoted strings, comments and
 * separators) and hands anything else back to Python: floats, hexadecimal and octal numbers, strings with
 * escapes or adjacent literals go through ge_parse's own token functions one token at a time (`scalar_at`,
 * `string_at`, which return None for what they cannot read); lists (`[ ]`), `< >` messages, extension names,
 * characters outside tokens and every error (unbalanced braces, a missing colon, truncated text, nesting deeper
 * than the limit) make parse() return None, and the caller parses the whole text in Python, which gives the
 * error message with its line and column. So whatever this returns, the Python parser returns too (the tests
 * hold the two to that on generated texts).
 *
 * Nesting is followed with an explicit stack (no recursion): a hostile file cannot exhaust the C stack.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

#define CH(t, i) PyUnicode_READ((t)->kind, (t)->data, (i))

static int is_space(Py_UCS4 c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_alpha_(Py_UCS4 c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_digit(Py_UCS4 c) { return c >= '0' && c <= '9'; }
static int is_word(Py_UCS4 c) { return is_alpha_(c) || is_digit(c); }

/* Whitespace and `#` comments (to the end of their line), from i. */
static Py_ssize_t skip_blank(const Text *t, Py_ssize_t i)
{
    for (;;) {
        while (i < t->n && is_space(CH(t, i))) i++;
        if (i >= t->n || CH(t, i) != '#') return i;
        while (i < t->n && CH(t, i) != '\n') i++;
    }
}

/* Append value to message[name] (a new list for a new field). Steals nothing; 0 on success. */
static int add_field(PyObject *message, PyObject *name, PyObject *value)
{
    PyObject *values = PyDict_GetItemWithError(message, name); /* borrowed */
    if (values != NULL) return PyList_Append(values, value);
    if (PyErr_Occurred()) return -1;
    values = PyList_New(1);
    if (values == NULL) return -1;
    Py_INCREF(value);
    PyList_SET_ITEM(values, 0, value);
    int rc = PyDict_SetItem(message, name, values);
    Py_DECREF(values);
    return rc;
}

/* Call helper(text, i), which returns (value, end) or None; on (value, end) sets *value (new reference) and
   *end and returns 1; returns 0 for None or a malformed answer (the caller gives up), -1 on an exception. */
static int call_helper(PyObject *helper, PyObject *text, Py_ssize_t i, PyObject **value, Py_ssize_t *end)
{
    PyObject *answer = PyObject_CallFunction(helper, "On", text, i);
    if (answer == NULL) return -1;
    if (!PyTuple_Check(answer) || PyTuple_GET_SIZE(answer) != 2) {
        Py_DECREF(answer);
        return 0;
    }
    Py_ssize_t stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(answer, 1));
    if (stop == -1 && PyErr_Occurred()) {
        Py_DECREF(answer);
        return -1;
    }
    if (stop <= i) {
        Py_DECREF(answer);
        return 0;
    }
    *value = Py_NewRef(PyTuple_GET_ITEM(answer, 0));
    *end = stop;
    Py_DECREF(answer);
    return 1;
}

/* A scalar at i: decimal integers without a leading zero, enum names and the four boolean words here; any
   other scalar through scalar_at. Returns 1 with *value and *end set, 0 to give up, -1 on an exception. */
static int scalar(const Text *t, PyObject *text, Py_ssize_t i, PyObject *scalar_at, PyObject **value, Py_ssize_t *end)
{
    Py_ssize_t j = i;
    Py_UCS4 c = CH(t, j);
    if (is_alpha_(c)) {
        while (j < t->n && is_word(CH(t, j))) j++;
        if (j < t->n && CH(t, j) == '.') return 0; /* not a scalar the Python tokeniser reads */
        PyObject *word = PyUnicode_Substring(text, i, j);
        if (word == NULL) return -1;
        const char *w = PyUnicode_AsUTF8(word);
        if (w == NULL) {
            Py_DECREF(word);
            return -1;
        }
        if (!strcmp(w, "true") || !strcmp(w, "True") || !strcmp(w, "false") || !strcmp(w, "False")) {
            *value = Py_NewRef(w[0] == 't' || w[0] == 'T' ? Py_True : Py_False);
            Py_DECREF(word);
        } else if (!PyOS_strnicmp(w, "inf", 3) || !PyOS_strnicmp(w, "nan", 3)) {
            Py_DECREF(word); /* inf, infinity, nan in any case, and names that start so: Python decides */
            return call_helper(scalar_at, text, i, value, end);
        } else {
            *value = word; /* an enum name */
        }
        *end = j;
        return 1;
    }
    Py_ssize_t d = j + (c == '-');
    if (d < t->n && is_digit(CH(t, d)) && CH(t, d) != '0' && c != '-') {
        long long v = 0;
        int digits = 0;
        for (j = d; j < t->n && is_digit(CH(t, j)); j++, digits++)
            if (digits < 18) v = v * 10 + (long long)(CH(t, j) - '0'); /* longer ones: Python's int() */
        if (digits <= 18 && !(j < t->n && (is_word(CH(t, j)) || CH(t, j) == '.'))) {
            *value = PyLong_FromLongLong(v);
            if (*value == NULL) return -1;
            *end = j;
            return 1;
        }
    } else if (c == '0' && !(i + 1 < t->n && (is_word(CH(t, i + 1)) || CH(t, i + 1) == '.'))) {
        *value = PyLong_FromLong(0);
        if (*value == NULL) return -1;
        *end = i + 1;
        return 1;
    }
    return call_helper(scalar_at, text, i, value, end); /* negative, long, float, hex, octal, ... */
}

/* A quoted string at i: one literal without escapes here, anything else through string_at. */
static int string(const Text *t, PyObject *text, Py_ssize_t i, PyObject *string_at, PyObject **value, Py_ssize_t *end)
{
    Py_UCS4 quote = CH(t, i);
    Py_ssize_t j = i + 1;
    while (j < t->n) {
        Py_UCS4 c = CH(t, j);
        if (c == quote || c == '\\' || c == '\n') break;
        j++;
    }
    if (j < t->n && CH(t, j) == quote) {
        Py_ssize_t after = j + 1;
        while (after < t->n && is_space(CH(t, after))) after++;
        if (after >= t->n || (CH(t, after) != '"' && CH(t, after) != '\'')) { /* not followed by another literal */
            *value = PyUnicode_Substring(text, i + 1, j);
            if (*value == NULL) return -1;
            *end = j + 1;
            return 1;
        }
    }
    return call_helper(string_at, text, i, value, end);
}

PyDoc_STRVAR(parse_doc,
             "parse(text, scalar_at, string_at, max_depth) -> dict or None\n\n"
             "The message of protobuf text `text` as nbprec.graph.ge_parse.parse_text gives it, or None when the\n"
             "text holds something this fast path leaves to Python (lists, < > messages, extensions) or an error.\n"
             "scalar_at(text, i) and string_at(text, i) read the scalar or string token at i: (value, end) or None.");

static PyObject *parse(PyObject *self, PyObject *args)
{
    PyObject *text, *scalar_at, *string_at;
    Py_ssize_t max_depth;
    (void)self;
    if (!PyArg_ParseTuple(args, "UOOn:parse", &text, &scalar_at, &string_at, &max_depth)) return NULL;
    if (max_depth < 0) max_depth = 0;
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    PyObject **stack = PyMem_New(PyObject *, max_depth + 1); /* stack[d]: the message open at depth d */
    if (stack == NULL) return PyErr_NoMemory();
    PyObject *root = PyDict_New(), *name = NULL, *value = NULL;
    Py_ssize_t depth = 0, i = 0;
    int give_up = 0;
    if (root == NULL) goto error;
    stack[0] = root; /* the stack's references are borrowed: each message is held by its parent's list */
    for (;;) {
        i = skip_blank(&t, i);
        if (i >= t.n) {
            give_up = depth != 0; /* truncated: Python says where the open message began */
            break;
        }
        Py_UCS4 c = CH(&t, i);
        if (c == '}') {
            if (depth == 0) {
                give_up = 1;
                break;
            }
            depth--;
            i++;
            continue;
        }
        if (c == ',' || c == ';') {
            i++;
            continue;
        }
        if (!is_alpha_(c)) { /* lists, < > messages, extension names, stray characters: Python's */
            give_up = 1;
            break;
        }
        Py_ssize_t start = i;
        while (i < t.n && is_word(CH(&t, i))) i++;
        name = PyUnicode_Substring(text, start, i);
        if (name == NULL) goto error;
        while (i < t.n && is_space(CH(&t, i))) i++;
        int colon = i < t.n && CH(&t, i) == ':';
        i = skip_blank(&t, i + colon);
        if (i >= t.n) {
            give_up = 1;
            break;
        }
        c = CH(&t, i);
        int got;
        Py_ssize_t end = i;
        if (c == '{') {
            if (depth >= max_depth) {
                give_up = 1;
                break;
            }
            value = PyDict_New();
            if (value == NULL || add_field(stack[depth], name, value) < 0) goto error;
            stack[++depth] = value;
            Py_CLEAR(value);
            Py_CLEAR(name);
            i++;
            continue;
        }
        if (!colon || c == '<' || c == '[') {
            give_up = 1;
            break;
        }
        got = (c == '"' || c == '\'') ? string(&t, text, i, string_at, &value, &end)
                                      : scalar(&t, text, i, scalar_at, &value, &end);
        if (got < 0) goto error;
        if (got == 0) {
            give_up = 1;
            break;
        }
        if (add_field(stack[depth], name, value) < 0) goto error;
        Py_CLEAR(value);
        Py_CLEAR(name);
        i = end;
    }
    Py_XDECREF(name);
    Py_XDECREF(value);
    PyMem_Free(stack);
    if (give_up) {
        Py_DECREF(root);
        Py_RETURN_NONE;
    }
    return root;
error:
    Py_XDECREF(name);
    Py_XDECREF(value);
    Py_XDECREF(root);
    PyMem_Free(stack);
    return NULL;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS, parse_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_textformat",
    "Protobuf text format parsed in C, a fast path for nbprec.graph.ge_parse (see nbprec/graph/_textformat.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__textformat(void) { return PyModule_Create(&module); }
