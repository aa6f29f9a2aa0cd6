/*
 * nbprec.formats._msprobescan: the usual msprobe dump.json scanned in C into the columns of its index, about
 * three times faster than decoding it with the json module and walking the dicts in Python (a dump of many
 * small tensors spends more time opening its dump.json than reading its payloads).
 *
 * This is a fast path for the usual layout, never an authority: the top object holds scalar members and one
 * "data" object; each op entry is an object of known sections (input_args, input_kwargs, input, parameters,
 * output, each at most once), or for a `parameters_grad` key, parameter name -> tensor (or a one-element
 * list of it); a section is a list of arguments (tensor entries, scalar entries, bare values, lists of them) or
 * an object of named ones. Strings are plain ASCII. Anything else makes scan() return None: escapes and
 * non-ASCII bytes in a string that is kept, objects of arguments inside arguments, unknown or repeated sections,
 * a repeated field, a statistic that is not a number (null is read as NaN, and true and false, a bool tensor's
 * Max and Min, as 1.0 and 0.0), integers beyond 18 digits, invalid JSON, text after the object. The file is then read by the Python reader (nbprec/formats/msprobe_index.py), which words every
 * problem; nbprec/formats/msprobe_scan.py calls scan() and puts its output in row order. So whatever this
 * returns, the Python reader builds the same index from it (tests/formats/test_msprobe_scan.py holds the two
 * to that on every fixture, on generated dumps and on damaged files).
 *
 * scan(buffer, slot_names) -> None or (meta, keys, grads, op_of, roles, ranks, slots, data_names, dtypes, shapes,
 * md5s, stats, calls, non_tensor), slot_names being the 256 names of list positions ("0" to "255"):
 *   meta        the top object's scalar members (dict);
 *   keys        the op keys of data, in order (list of str);
 *   grads       per op: 1 when its entry was read as parameter gradients (bytes);
 *   op_of       per tensor: its op's position (bytes of int64);
 *   roles       per tensor: 0 input, 1 parameter, 2 output, 3 gradient (bytes);
 *   ranks       per tensor: the place of its section in row order (0 input_args, 1 input_kwargs, 2 input,
 *               3 parameters, 4 output; 0 for a gradient): the sections are read in the file's order, and the
 *               reader puts each op's tensors (and calls) in row order (bytes);
 *   slots       per tensor: slot_names[i] for the i-th argument of a list, else the argument's name (list);
 *   data_names, dtypes, md5s  per tensor: the field's str, or None (missing or null) (lists);
 *   shapes      per tensor: the shape as a list of ints, or None (list);
 *   stats       per tensor: Min, Max, Mean, Norm as float64, NaN for a missing or null one (bytes, 4 a tensor);
 *   calls       (op, role, slot, value, rank) of each scalar argument whose value is a bool, int or float;
 *               slot is the argument's position (int) in a list or its name (str);
 *   non_tensor  the number of arguments that are not tensors.
 *
 * Nesting that is only skipped (values of fields no column holds) is followed by recursion bounded at
 * MAX_DEPTH levels; deeper text makes scan() return None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_jsontokens.h"

#define N_SLOTS 256

typedef struct {
    PyObject *slot_names;                                          /* tuple of N_SLOTS str (borrowed) */
    PyObject *keys, *slots, *data_names, *dtypes, *shapes, *md5s; /* lists */
    PyObject *calls, *meta;
    Buf op_of, roles, ranks, grads, stats;
    Py_ssize_t non_tensor, op;
    int rank; /* the rank of the section being read (its place in row order) */
    PyObject *last_dtype; /* the previous dtype string: most tensors share a handful */
} Out;

/* -- one argument entry ------------------------------------------------------------------------------ */

enum { F_TYPE = 1, F_DTYPE = 2, F_SHAPE = 4, F_MIN = 8, F_MAX = 16, F_MEAN = 32, F_NORM = 64, F_DATA = 128, F_MD5 = 256,
       F_VALUE = 512 };
enum { V_OTHER, V_BOOL, V_INT, V_FLOAT };

typedef struct {
    int seen; /* the fields read, as F_ bits */
    const char *type;
    Py_ssize_t type_n;
    PyObject *dtype, *shape, *data_name, *md5; /* new references or NULL (missing or null) */
    double stats[4];                           /* Min, Max, Mean, Norm */
    int value_kind;
    const char *value_text;
    Py_ssize_t value_n;
    int value_constant, value_true;
} Entry;

static void entry_clear(Entry *e)
{
    Py_CLEAR(e->dtype);
    Py_CLEAR(e->shape);
    Py_CLEAR(e->data_name);
    Py_CLEAR(e->md5);
}

/* A string field's value (str) or null (NULL); anything else BAILs. */
static int string_or_null(Cur *c, PyObject **value)
{
    const char *s;
    Py_ssize_t n;
    int rc;
    if (next_is(c, 'n')) return literal(c, "null", 4);
    if ((rc = plain_string(c, &s, &n))) return rc;
    *value = PyUnicode_FromStringAndSize(s, n);
    return *value == NULL ? -1 : 0;
}

/* One size of a shape, appended to the list ctx. */
static int size_element(Cur *c, Py_ssize_t index, void *ctx)
{
    const char *s;
    Py_ssize_t n;
    int is_int, constant, rc;
    long long size;
    PyObject *item;
    (void)index;
    rc = number(c, &s, &n, &is_int, &constant);
    if (!rc && (!is_int || constant)) rc = BAIL; /* a size that is not an integer: the reader's problem */
    if (!rc) rc = to_int64(s, n, &size);
    if (rc) return rc;
    item = PyLong_FromLongLong(size);
    if (item == NULL) return -1;
    rc = PyList_Append((PyObject *)ctx, item);
    Py_DECREF(item);
    return rc;
}

static int shape_field(Cur *c, PyObject **value)
{
    PyObject *list;
    int rc;
    if (next_is(c, 'n')) return literal(c, "null", 4);
    list = PyList_New(0);
    if (list == NULL) return -1;
    if ((rc = elements(c, size_element, list))) {
        Py_DECREF(list);
        return rc;
    }
    *value = list;
    return 0;
}

static int statistic(Cur *c, double *value)
{
    const char *s;
    Py_ssize_t n;
    int is_int, constant, rc;
    if (next_is(c, 'n')) {
        *value = Py_NAN;
        return literal(c, "null", 4);
    }
    if (next_is(c, 't') || next_is(c, 'f')) { /* a bool tensor's Max and Min: 1.0 and 0.0, as float(True) */
        *value = *c->p == 't' ? 1.0 : 0.0;
        return *value ? literal(c, "true", 4) : literal(c, "false", 5);
    }
    if ((rc = number(c, &s, &n, &is_int, &constant))) return rc;
    if (is_int && !constant) { /* json makes an int, numpy its double: -0 is 0.0 */
        long long v;
        if ((rc = to_int64(s, n, &v))) return rc;
        *value = (double)v;
        return 0;
    }
    return to_double(s, n, constant, value);
}

static int entry_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Entry *e = ctx;
    static const char *const stat_names[4] = {"Min", "Max", "Mean", "Norm"};
    int field = 0, k;
    if (key_is(key, n, "type"))
        field = F_TYPE;
    else if (key_is(key, n, "dtype"))
        field = F_DTYPE;
    else if (key_is(key, n, "shape"))
        field = F_SHAPE;
    else if (key_is(key, n, "data_name"))
        field = F_DATA;
    else if (key_is(key, n, "md5"))
        field = F_MD5;
    else if (key_is(key, n, "value"))
        field = F_VALUE;
    else
        for (k = 0; k < 4; k++)
            if (key_is(key, n, stat_names[k])) field = F_MIN << k;
    if (!field) return skip_value(c, 1);
    if (e->seen & field) return BAIL; /* a repeated field: json keeps the last one; the Python reader decides */
    e->seen |= field;
    switch (field) {
    case F_TYPE:
        return plain_string(c, &e->type, &e->type_n); /* a type that is not a string: BAIL */
    case F_DTYPE:
        return string_or_null(c, &e->dtype);
    case F_SHAPE:
        return shape_field(c, &e->shape);
    case F_DATA:
        return string_or_null(c, &e->data_name);
    case F_MD5:
        return string_or_null(c, &e->md5);
    case F_VALUE: {
        int is_int, constant;
        ws(c);
        if (c->p < c->end && (*c->p == 't' || *c->p == 'f')) {
            e->value_kind = V_BOOL;
            e->value_true = *c->p == 't';
            return e->value_true ? literal(c, "true", 4) : literal(c, "false", 5);
        }
        if (c->p < c->end && (*c->p == '-' || is_digit(*c->p) || *c->p == 'N' || *c->p == 'I')) {
            int rc = number(c, &e->value_text, &e->value_n, &is_int, &constant);
            e->value_kind = is_int && !constant ? V_INT : V_FLOAT;
            e->value_constant = constant;
            return rc;
        }
        e->value_kind = V_OTHER;
        return skip_value(c, 1);
    }
    default:
        for (k = 0; k < 4; k++)
            if (field == (F_MIN << k)) return statistic(c, &e->stats[k]);
    }
    return BAIL;
}

static int ends_with(const char *s, Py_ssize_t n, const char *suffix)
{
    size_t m = strlen(suffix);
    return (size_t)n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Whether the entry is a tensor; BAIL for an object that is neither a tensor nor a scalar entry (nested
   arguments, which the Python reader walks). */
static int entry_is_tensor(const Entry *e, int *tensor)
{
    if (e->seen & F_TYPE) {
        *tensor = ends_with(e->type, e->type_n, "Tensor") || ends_with(e->type, e->type_n, "Parameter") ||
                  ends_with(e->type, e->type_n, "ndarray");
        return 0;
    }
    if ((e->seen & (F_DTYPE | F_SHAPE)) == (F_DTYPE | F_SHAPE)) {
        *tensor = 1;
        return 0;
    }
    return BAIL;
}

static int add_ref(PyObject *list, PyObject *value)
{
    return PyList_Append(list, value != NULL ? value : Py_None);
}

static int add_tensor(Out *o, Entry *e, int role, PyObject *slot)
{
    int64_t op = o->op;
    uint8_t r = (uint8_t)role;
    PyObject *dtype = e->dtype;
    if (dtype != NULL && o->last_dtype != NULL && PyUnicode_Compare(dtype, o->last_dtype) == 0) dtype = o->last_dtype;
    if (dtype != NULL && dtype != o->last_dtype) { /* a new dtype: kept for the next tensors */
        Py_INCREF(dtype);
        Py_XSETREF(o->last_dtype, dtype);
    }
    uint8_t rank = (uint8_t)o->rank;
    if (buf_add(&o->op_of, &op, sizeof op) || buf_add(&o->roles, &r, 1) || buf_add(&o->ranks, &rank, 1) ||
        buf_add(&o->stats, e->stats, sizeof e->stats) ||
        PyList_Append(o->slots, slot) || add_ref(o->data_names, e->data_name) || add_ref(o->dtypes, dtype) ||
        add_ref(o->shapes, e->shape) || add_ref(o->md5s, e->md5))
        return -1;
    return 0;
}

/* A scalar argument's value as a Python object (new reference), or NULL with no error for one that is not a
   bool, int or float. Sets *rc to BAIL or -1 when it cannot be made. */
static PyObject *scalar_value(const Entry *e, int *rc)
{
    *rc = 0;
    if (!(e->seen & F_VALUE)) return NULL;
    if (e->value_kind == V_BOOL) return Py_NewRef(e->value_true ? Py_True : Py_False);
    if (e->value_kind == V_INT) {
        long long v;
        if ((*rc = to_int64(e->value_text, e->value_n, &v))) return NULL;
        PyObject *obj = PyLong_FromLongLong(v);
        if (obj == NULL) *rc = -1;
        return obj;
    }
    if (e->value_kind == V_FLOAT) {
        double v;
        if ((*rc = to_double(e->value_text, e->value_n, e->value_constant, &v))) return NULL;
        PyObject *obj = PyFloat_FromDouble(v);
        if (obj == NULL) *rc = -1;
        return obj;
    }
    return NULL;
}

static int add_call(Out *o, int role, PyObject *slot, const Entry *e)
{
    int rc;
    PyObject *value = scalar_value(e, &rc), *call;
    if (value == NULL) return rc;
    call = Py_BuildValue("(niONi)", o->op, role, slot, value, o->rank);
    if (call == NULL) return -1;
    rc = PyList_Append(o->calls, call);
    Py_DECREF(call);
    return rc;
}

static int nested_member(Cur *c, const char *key, Py_ssize_t n, void *ctx);

typedef struct {
    Out *out;
    int role;
    PyObject *prefix;
    int depth;
} Nested;

/* One argument object at `slot` (a list position, or a name): a tensor, or a scalar entry; or, when it has
   neither an entry's "type" nor its "dtype" and "shape", an object of nested arguments (a model's output of
   named tensors, as transformers' ModelOutput), read again from its start member by member. */
static int argument(Cur *c, Out *o, int role, PyObject *slot, PyObject *call_slot, int depth)
{
    const char *start = c->p;
    Entry e;
    int rc, tensor = 0;
    if (depth > MAX_DEPTH) return BAIL;
    memset(&e, 0, sizeof e);
    e.stats[0] = e.stats[1] = e.stats[2] = e.stats[3] = Py_NAN;
    rc = members(c, entry_member, &e);
    if (!rc && !(e.seen & F_TYPE) && (e.seen & (F_DTYPE | F_SHAPE)) != (F_DTYPE | F_SHAPE)) {
        Nested nested = {o, role, slot, depth};
        entry_clear(&e);
        c->p = start;
        return members(c, nested_member, &nested);
    }
    if (!rc) rc = entry_is_tensor(&e, &tensor);
    if (!rc) {
        if (tensor) {
            rc = add_tensor(o, &e, role, slot);
        } else {
            o->non_tensor++;
            rc = add_call(o, role, call_slot, &e);
        }
    }
    entry_clear(&e);
    return rc;
}

/* -- sections ---------------------------------------------------------------------------------------- */

static int argument_list(Cur *c, Out *o, int role, PyObject *prefix, int depth);

/* A member of an object of nested arguments, named `prefix.key` as the Python reader names it. */
static int nested_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Nested *a = ctx;
    PyObject *name = PyUnicode_FromStringAndSize(key, n), *slot;
    int rc;
    if (name == NULL) return -1;
    slot = PyUnicode_FromFormat("%U.%U", a->prefix, name);
    Py_DECREF(name);
    if (slot == NULL) return -1;
    ws(c);
    if (c->p >= c->end) {
        rc = BAIL;
    } else if (*c->p == '{') {
        rc = argument(c, a->out, a->role, slot, slot, a->depth + 1);
    } else if (*c->p == '[') {
        rc = argument_list(c, a->out, a->role, slot, a->depth + 1);
    } else {
        a->out->non_tensor++; /* a bare value */
        rc = skip_value(c, 1);
    }
    Py_DECREF(slot);
    return rc;
}

typedef struct {
    Out *out;
    int role;
} Named;

/* A member of an object of named arguments (input_kwargs, parameters, a parameters_grad entry). */
static int named_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Named *named = ctx;
    Out *o = named->out;
    PyObject *name;
    int rc;
    /* an object whose own fields say it is an argument (type, or dtype and shape) is a leaf to the Python
       reader: these names BAIL, whatever comes after them */
    if (n == 0 || key_is(key, n, "type") || key_is(key, n, "dtype") || key_is(key, n, "shape")) return BAIL;
    ws(c);
    if (c->p >= c->end) return BAIL;
    name = PyUnicode_FromStringAndSize(key, n);
    if (name == NULL) return -1;
    if (*c->p == '[' && named->role == 3) { /* a gradient as a one-element list */
        c->p++;
        rc = next_is(c, '{') ? argument(c, o, named->role, name, name, 1) : BAIL;
        if (!rc) rc = expect(c, ']');
    } else if (*c->p == '{') {
        rc = argument(c, o, named->role, name, name, 1);
    } else if (*c->p == '[' && named->role != 3) {
        rc = argument_list(c, o, named->role, name, 1);
    } else if (*c->p == '[') {
        rc = BAIL; /* a gradient's list of more than one element */
    } else {
        o->non_tensor++; /* a bare value */
        rc = skip_value(c, 1);
    }
    Py_DECREF(name);
    return rc;
}

typedef struct {
    Out *out;
    int role;
    PyObject *prefix; /* NULL for a section's own list */
    int depth;
} Arguments;

/* One element of a list of arguments: a tensor or scalar entry, a nested list, or a bare value. The elements
   of a section's list are named by their positions ("0" to "255", and the position is their call slot); those
   of a nested list `prefix.0`, `prefix.1` ..., as the Python reader names them. */
static int argument_element(Cur *c, Py_ssize_t i, void *ctx)
{
    Arguments *a = ctx;
    PyObject *slot, *call_slot;
    int rc;
    ws(c);
    if (c->p >= c->end) return BAIL;
    if (a->prefix == NULL) {
        if (i >= N_SLOTS) return BAIL;
        slot = Py_NewRef(PyTuple_GET_ITEM(a->out->slot_names, i));
        call_slot = PyLong_FromSsize_t(i);
    } else {
        slot = PyUnicode_FromFormat("%U.%zd", a->prefix, i);
        call_slot = Py_XNewRef(slot);
    }
    if (slot == NULL || call_slot == NULL) {
        Py_XDECREF(slot);
        Py_XDECREF(call_slot);
        return -1;
    }
    if (*c->p == '{') {
        rc = argument(c, a->out, a->role, slot, call_slot, a->depth + 1);
    } else if (*c->p == '[') {
        rc = argument_list(c, a->out, a->role, slot, a->depth + 1);
    } else {
        a->out->non_tensor++;
        rc = skip_value(c, 1);
    }
    Py_DECREF(slot);
    Py_DECREF(call_slot);
    return rc;
}

static int argument_list(Cur *c, Out *o, int role, PyObject *prefix, int depth)
{
    Arguments a = {o, role, prefix, depth};
    return depth > MAX_DEPTH ? BAIL : elements(c, argument_element, &a);
}

typedef struct {
    Out *out;
    int seen; /* the sections read, as bits of their ranks */
} Sections;

static int section_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    static const char *const names[5] = {"input_args", "input_kwargs", "input", "parameters", "output"};
    static const int roles[5] = {0, 0, 0, 1, 2};
    Sections *s = ctx;
    int k;
    for (k = 0; k < 5; k++)
        if (key_is(key, n, names[k])) break;
    if (k == 5 || (s->seen >> k & 1)) return BAIL; /* unknown or repeated */
    s->seen |= 1 << k;
    s->out->rank = k;
    ws(c);
    if (c->p < c->end && *c->p == '[') return argument_list(c, s->out, roles[k], NULL, 0);
    if (c->p < c->end && *c->p == '{') {
        Named named = {s->out, roles[k]};
        return members(c, named_member, &named);
    }
    return BAIL;
}

/* -- ops and the top object -------------------------------------------------------------------------- */

/* Whether an op key names parameter gradients: Module. or Cell., then .parameters_grad.<digits> at its end
   (the Python reader checks this against its own parsing of the key before it uses the scan). */
static int grads_key(const char *key, Py_ssize_t n)
{
    static const char tail[] = ".parameters_grad.";
    Py_ssize_t end = n, t = (Py_ssize_t)strlen(tail);
    while (end > 0 && is_digit(key[end - 1])) end--;
    if (end == n || end < t) return 0;
    if (memcmp(key + end - t, tail, (size_t)t) != 0) return 0;
    return (n > 7 && memcmp(key, "Module.", 7) == 0) || (n > 5 && memcmp(key, "Cell.", 5) == 0);
}

static int op_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Out *o = ctx;
    PyObject *name = PyUnicode_FromStringAndSize(key, n);
    uint8_t grads = (uint8_t)grads_key(key, n);
    int rc;
    if (name == NULL) return -1;
    rc = PyList_Append(o->keys, name);
    Py_DECREF(name);
    if (rc < 0 || buf_add(&o->grads, &grads, 1)) return -1;
    if (!next_is(c, '{')) return BAIL; /* an op entry that is not an object: the reader's problem */
    o->rank = 0;
    if (grads) {
        Named named = {o, 3};
        rc = members(c, named_member, &named);
    } else {
        Sections sections = {o, 0};
        rc = members(c, section_member, &sections);
    }
    o->op++;
    return rc;
}

typedef struct {
    Out *out;
    int has_data;
} Top;

static int top_member(Cur *c, const char *key, Py_ssize_t n, void *ctx)
{
    Top *top = ctx;
    Out *o = top->out;
    PyObject *name, *value = NULL;
    const char *s;
    Py_ssize_t len;
    int rc = 0, is_int, constant;
    ws(c);
    if (c->p >= c->end) return BAIL;
    if (key_is(key, n, "data")) {
        if (top->has_data || *c->p != '{') return BAIL;
        top->has_data = 1;
        return members(c, op_member, o);
    }
    switch (*c->p) { /* the top object's scalar members are its meta; objects and lists are skipped */
    case '{':
    case '[':
        return skip_value(c, 1);
    case '"':
        if ((rc = plain_string(c, &s, &len))) return rc;
        value = PyUnicode_FromStringAndSize(s, len);
        break;
    case 't':
    case 'f': {
        int is_true = *c->p == 't';
        if ((rc = is_true ? literal(c, "true", 4) : literal(c, "false", 5))) return rc;
        value = Py_NewRef(is_true ? Py_True : Py_False);
        break;
    }
    case 'n':
        rc = literal(c, "null", 4);
        value = Py_NewRef(Py_None);
        break;
    default: {
        double d;
        long long v;
        if ((rc = number(c, &s, &len, &is_int, &constant))) return rc;
        if (is_int && !constant) {
            if ((rc = to_int64(s, len, &v))) return rc;
            value = PyLong_FromLongLong(v);
        } else {
            if ((rc = to_double(s, len, constant, &d))) return rc;
            value = PyFloat_FromDouble(d);
        }
    }
    }
    if (value == NULL) return -1;
    if (rc) {
        Py_DECREF(value);
        return rc;
    }
    name = PyUnicode_FromStringAndSize(key, n);
    rc = name == NULL ? -1 : PyDict_SetItem(o->meta, name, value);
    Py_XDECREF(name);
    Py_DECREF(value);
    return rc < 0 ? -1 : 0;
}

static PyObject *buf_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len); }

PyDoc_STRVAR(scan_doc, "scan(buffer, slot_names) -> None or the columns of an msprobe dump.json\n\n"
                       "See nbprec/formats/_msprobescan.c.");

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *slot_names, *result = NULL;
    Out o;
    Top top;
    Cur c;
    int rc;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!:scan", &view, &PyTuple_Type, &slot_names)) return NULL;
    if (PyTuple_GET_SIZE(slot_names) != N_SLOTS) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "slot_names must hold %d names", N_SLOTS);
    }
    memset(&o, 0, sizeof o);
    o.slot_names = slot_names;
    o.keys = PyList_New(0);
    o.slots = PyList_New(0);
    o.data_names = PyList_New(0);
    o.dtypes = PyList_New(0);
    o.shapes = PyList_New(0);
    o.md5s = PyList_New(0);
    o.calls = PyList_New(0);
    o.meta = PyDict_New();
    c.p = view.buf;
    c.end = c.p + view.len;
    top.out = &o;
    top.has_data = 0;
    if (!o.keys || !o.slots || !o.data_names || !o.dtypes || !o.shapes || !o.md5s || !o.calls || !o.meta)
        rc = -1;
    else
        rc = members(&c, top_member, &top);
    if (!rc && !top.has_data) rc = BAIL;
    if (!rc) {
        const char *after = c.p;
        ws(&c);
        if (c.p != c.end || c.end - after > MAX_TRAILING) rc = BAIL; /* text after the object */
    }
    if (!rc)
        result = Py_BuildValue("(OONNNNOOOOONOn)", o.meta, o.keys, buf_bytes(&o.grads), buf_bytes(&o.op_of),
                               buf_bytes(&o.roles), buf_bytes(&o.ranks), o.slots, o.data_names, o.dtypes, o.shapes,
                               o.md5s, buf_bytes(&o.stats), o.calls, o.non_tensor);
    else if (rc == BAIL)
        result = Py_NewRef(Py_None);
    PyBuffer_Release(&view);
    Py_XDECREF(o.keys);
    Py_XDECREF(o.slots);
    Py_XDECREF(o.data_names);
    Py_XDECREF(o.dtypes);
    Py_XDECREF(o.shapes);
    Py_XDECREF(o.md5s);
    Py_XDECREF(o.calls);
    Py_XDECREF(o.meta);
    Py_XDECREF(o.last_dtype);
    PyMem_Free(o.op_of.data);
    PyMem_Free(o.roles.data);
    PyMem_Free(o.ranks.data);
    PyMem_Free(o.grads.data);
    PyMem_Free(o.stats.data);
    return result;
}

/* op_kinds: nbprec/formats/_msprobescan_keys.c */
PyObject *msprobe_op_kinds(PyObject *self, PyObject *args);
extern const char msprobe_op_kinds_doc[];
PyObject *msprobe_shape_ids(PyObject *self, PyObject *args);
extern const char msprobe_shape_ids_doc[];
PyObject *msprobe_derived_names(PyObject *self, PyObject *args);
extern const char msprobe_derived_names_doc[];

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"op_kinds", msprobe_op_kinds, METH_VARARGS, msprobe_op_kinds_doc},
    {"shape_ids", msprobe_shape_ids, METH_VARARGS, msprobe_shape_ids_doc},
    {"derived_names", msprobe_derived_names, METH_VARARGS, msprobe_derived_names_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_msprobescan", "The usual msprobe dump.json scanned into index columns (see its source).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__msprobescan(void) { return PyModule_Create(&module); }
