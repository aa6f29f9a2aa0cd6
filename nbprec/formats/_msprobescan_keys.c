/*
 * nbprec.formats._msprobescan.op_kinds: what each op key of a scanned dump.json says (its op-kind code and call
 * index), in C for the usual key, an API call `{api}.{call}.{direction}`: the loop of
 * nbprec.formats.msprobe_index.DumpSourceReader._op_key, about 1.7 us an op in Python (most API calls of a dump
 * are of a module call met once, so its caches miss), a tenth of that here.
 *
 * It works on the reader's own caches, as _op_key, _api_kind and _kind do, in the same order (kind codes are
 * numbered as combinations are first met): api_kinds, (api, direction, parent) -> kind; kinds, (api, op type,
 * direction, module) -> kind, a new one numbered len(kinds); modules, parent -> module path (a new parent's read
 * here too, by module_path(parent), the reader's function, when it is not ASCII). Module-call keys
 * (`{Module|Cell}.{path}.{Class}.{direction}.{call}`) are read here as parse_op_key reads them; every other key
 * (not ASCII, a name that follows no naming) goes to op_key(key), the reader's method, which returns (kind, call,
 * grads) and words the problems. tests/formats/test_msprobe_op_kinds.py holds this to the Python loop on keys of
 * every form and of odd ones, caches and problems included.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

const char msprobe_op_kinds_doc[] =
    "op_kinds(keys, hierarchy, api_kinds, kinds, modules, module_path, op_key) -> (kinds, calls, grads)\n\n"
    "Each key's op-kind code and call index (bytes of int64) and whether it names parameter gradients (bytes),\n"
    "as DumpSourceReader._op_key gives them, on its caches; see nbprec/formats/_msprobescan_keys.c.";

/* The last dot of key[0:end], or -1. */
static Py_ssize_t last_dot(const char *key, Py_ssize_t end)
{
    while (end > 0 && key[end - 1] != '.') end--;
    return end - 1;
}

/* The value of key[start:end] when it is a call index (1 to 18 ASCII digits, msprobe_keys._is_index), else -1. */
static long long call_index(const char *key, Py_ssize_t start, Py_ssize_t end)
{
    long long value = 0;
    Py_ssize_t i;
    if (end - start < 1 || end - start > 18) return -1;
    for (i = start; i < end; i++) {
        if (key[i] < '0' || key[i] > '9') return -1;
        value = value * 10 + (key[i] - '0');
    }
    return value;
}

/* 0 forward, 1 backward, 2 parameters_grad, -1 anything else, of key[start:end]. */
static int direction_of(const char *key, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t n = end - start;
    if (n == 7 && memcmp(key + start, "forward", 7) == 0) return 0;
    if (n == 8 && memcmp(key + start, "backward", 8) == 0) return 1;
    if (n == 15 && memcmp(key + start, "parameters_grad", 15) == 0) return 2;
    return -1;
}

/* An ASCII key as _op_key reads it: 1, an API call `{api}.{call}.{direction}` (`api_end`, `direction`, `call`
   set); 2, a module call `{Module|Cell}.{path}.{Class}.{direction}.{call}` (parse_op_key's other form: also
   `op_type` at key[type_start:type_end], the module path from `module_start`, `api_end` where the word before
   the path ends; `direction` 2 for parameter gradients); 0, anything else
   (the reader's method words the problem). */
static int read_key(const char *key, Py_ssize_t n, Py_ssize_t *api_end, int *direction, long long *call,
                    Py_ssize_t *type_start, Py_ssize_t *type_end, Py_ssize_t *module_start)
{
    Py_ssize_t last = last_dot(key, n), dot, kind_dot, first;
    if (last < 0) return 0; /* no dot: head is '' */
    *direction = direction_of(key, last + 1, n);
    if (*direction == 0 || *direction == 1) { /* an API call, or nothing */
        dot = last_dot(key, last);
        *call = dot < 0 ? -1 : call_index(key, dot + 1, last);
        *api_end = dot;
        return *call < 0 ? 0 : 1;
    }
    *call = call_index(key, last + 1, n);
    if (*call < 0 || !((n > 7 && memcmp(key, "Module.", 7) == 0) || (n > 5 && memcmp(key, "Cell.", 5) == 0))) return 0;
    kind_dot = last_dot(key, last);
    if (kind_dot < 0 || (*direction = direction_of(key, kind_dot + 1, last)) < 0) return 0;
    dot = last_dot(key, kind_dot); /* prefix . op_type */
    if (dot < 0) return 0;
    *type_start = dot + 1;
    *type_end = kind_dot;
    for (first = 0; first < dot && key[first] != '.'; first++) {
    }
    *api_end = first; /* prefix.partition("."): kind_of is key[0:first] */
    *module_start = first < dot ? first + 1 : dot; /* the module path: key[module_start:dot], '' when none */
    return 2;
}

/* The code of an (api, op_type, direction, module) combination, added when new (_kind); a new reference, or NULL
   with an exception set. Steals nothing. */
static PyObject *kind_code(PyObject *kinds, PyObject *api, PyObject *op_type, PyObject *direction, PyObject *module)
{
    PyObject *combination = PyTuple_Pack(4, api, op_type, direction, module), *kind;
    if (combination == NULL) return NULL;
    kind = PyDict_GetItemWithError(kinds, combination);
    if (kind != NULL) {
        Py_INCREF(kind);
    } else if (!PyErr_Occurred()) {
        kind = PyLong_FromSsize_t(PyDict_GET_SIZE(kinds));
        if (kind != NULL && PyDict_SetItem(kinds, combination, kind) < 0) Py_CLEAR(kind);
    }
    Py_DECREF(combination);
    return kind;
}

/* The kind code of a module call key (_other_kind of a key parse_op_key reads): a new reference, or NULL with an
   exception set. */
static PyObject *module_kind(PyObject *key, const char *text, Py_ssize_t kind_of_end, Py_ssize_t type_start,
                             Py_ssize_t type_end, Py_ssize_t module_start, PyObject *direction, PyObject *kinds)
{
    PyObject *api = NULL, *op_type, *module, *kind = NULL;
    op_type = PyUnicode_Substring(key, type_start, type_end);
    module = PyUnicode_Substring(key, module_start, type_start - 1);
    if (op_type != NULL && module != NULL) { /* api: f"{kind_of}.{op_type}" */
        api = PyUnicode_New(kind_of_end + 1 + (type_end - type_start), 127);
        if (api != NULL) {
            char *out = (char *)PyUnicode_DATA(api);
            memcpy(out, text, (size_t)kind_of_end);
            out[kind_of_end] = '.';
            memcpy(out + kind_of_end + 1, text + type_start, (size_t)(type_end - type_start));
            kind = kind_code(kinds, api, op_type, direction, module);
        }
    }
    Py_XDECREF(api);
    Py_XDECREF(op_type);
    Py_XDECREF(module);
    return kind;
}

/* The module path of a module call key (msprobe_index._module_path): '' for a key of another form, or anything
   but a str; module_path(parent) for a key that is not ASCII. A new reference, or NULL with an exception set. */
static PyObject *parent_module(PyObject *parent, PyObject *module_path)
{
    Py_ssize_t api_end, type_start, type_end, module_start;
    int direction;
    long long call;
    if (!PyUnicode_CheckExact(parent)) return PyUnicode_New(0, 127);
    if (!PyUnicode_IS_ASCII(parent)) return PyObject_CallOneArg(module_path, parent);
    if (read_key((const char *)PyUnicode_DATA(parent), PyUnicode_GET_LENGTH(parent), &api_end, &direction, &call,
                 &type_start, &type_end, &module_start) != 2)
        return PyUnicode_New(0, 127); /* an API call (no module) or a key parse_op_key refuses */
    return PyUnicode_Substring(parent, module_start, type_start - 1);
}

/* The kind code of an API call of `api` in `direction` from the module call `parent` (_api_kind): a new reference,
   or NULL with an exception set. */
static PyObject *api_kind(PyObject *api, PyObject *direction, PyObject *parent, PyObject *kinds, PyObject *modules,
                          PyObject *module_path)
{
    PyObject *module, *op_type, *kind;
    Py_ssize_t len = PyUnicode_GET_LENGTH(api), first;
    module = PyDict_GetItemWithError(modules, parent); /* borrowed */
    if (module == NULL) {
        if (PyErr_Occurred()) return NULL;
        module = parent_module(parent, module_path);
        if (module == NULL) return NULL;
        if (PyDict_SetItem(modules, parent, module) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    } else {
        Py_INCREF(module);
    }
    first = PyUnicode_FindChar(api, '.', 0, len, 1); /* api.partition(".")[2] */
    op_type = first < 0 ? PyUnicode_New(0, 127) : PyUnicode_Substring(api, first + 1, len);
    kind = op_type == NULL ? NULL : kind_code(kinds, api, op_type, direction, module);
    Py_XDECREF(op_type);
    Py_DECREF(module);
    return kind;
}

/* One key through the reader's own method: its (kind, call, grads) stored at `kind`, `call` and `grads`. */
static int by_method(PyObject *op_key, PyObject *key, char *kind, char *call, char *grads)
{
    PyObject *found = PyObject_CallOneArg(op_key, key);
    long long k, c;
    int g;
    if (found == NULL) return -1;
    if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 3) {
        Py_DECREF(found);
        PyErr_SetString(PyExc_TypeError, "op_kinds: op_key must return (kind, call, grads)");
        return -1;
    }
    k = PyLong_AsLongLong(PyTuple_GET_ITEM(found, 0));
    c = k == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(PyTuple_GET_ITEM(found, 1));
    g = PyErr_Occurred() ? -1 : PyObject_IsTrue(PyTuple_GET_ITEM(found, 2));
    Py_DECREF(found);
    if (g < 0 || PyErr_Occurred()) return -1;
    int64_t k64 = (int64_t)k, c64 = (int64_t)c;
    memcpy(kind, &k64, 8);
    memcpy(call, &c64, 8);
    *grads = (char)g;
    return 0;
}

/* The kind code `found` (a new reference, released here; NULL: an error set) and the call index `value` stored at
   `kind` and `call`; -1 with an exception set. */
static int store(PyObject *found, long long value, char *kind, char *call)
{
    int64_t code;
    if (found == NULL) return -1;
    code = (int64_t)PyLong_AsLongLong(found);
    Py_DECREF(found);
    if (code == -1 && PyErr_Occurred()) return -1;
    memcpy(kind, &code, 8);
    code = (int64_t)value;
    memcpy(call, &code, 8);
    return 0;
}

PyObject *msprobe_op_kinds(PyObject *self, PyObject *args)
{
    PyObject *keys, *hierarchy, *api_kinds, *kinds, *modules, *module_path, *op_key;
    PyObject *out_kinds = NULL, *out_calls = NULL, *out_grads = NULL, *directions[2];
    Py_ssize_t n, i;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OO:op_kinds", &PyList_Type, &keys, &PyDict_Type, &hierarchy, &PyDict_Type,
                          &api_kinds, &PyDict_Type, &kinds, &PyDict_Type, &modules, &module_path, &op_key))
        return NULL;
    directions[0] = PyUnicode_InternFromString("forward");
    directions[1] = PyUnicode_InternFromString("backward");
    n = PyList_GET_SIZE(keys);
    out_kinds = PyBytes_FromStringAndSize(NULL, n * 8);
    out_calls = PyBytes_FromStringAndSize(NULL, n * 8);
    out_grads = PyBytes_FromStringAndSize(NULL, n);
    if (!directions[0] || !directions[1] || !out_kinds || !out_calls || !out_grads) goto failed;
    for (i = 0; i < n; i++) {
        char *kind = PyBytes_AS_STRING(out_kinds) + 8 * i, *call = PyBytes_AS_STRING(out_calls) + 8 * i;
        char *grads = PyBytes_AS_STRING(out_grads) + i;
        PyObject *key, *parent, *api, *cache_key, *found;
        Py_ssize_t api_end = 0, type_start = 0, type_end = 0, module_start = 0;
        int direction = 0, form = 0, rc = 0;
        long long value = 0;
        if (i >= PyList_GET_SIZE(keys)) { /* (a callback emptied the list: never the reader's) */
            PyErr_SetString(PyExc_RuntimeError, "op_kinds: keys changed size");
            goto failed;
        }
        key = PyList_GET_ITEM(keys, i);
        Py_INCREF(key);
        if (PyUnicode_CheckExact(key) && PyUnicode_IS_ASCII(key))
            form = read_key((const char *)PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key), &api_end, &direction, &value,
                            &type_start, &type_end, &module_start);
        else
            form = 0;
        if (form == 0) { /* the reader's own way, which words a problem */
            rc = by_method(op_key, key, kind, call, grads);
            Py_DECREF(key);
            if (rc < 0) goto failed;
            continue;
        }
        if (form == 2) { /* a module call */
            found = module_kind(key, (const char *)PyUnicode_DATA(key), api_end, type_start, type_end, module_start,
                                directions[direction == 0 ? 0 : 1], kinds);
            Py_DECREF(key);
            if (store(found, value, kind, call) < 0) goto failed;
            *grads = direction == 2;
            continue;
        }
        parent = PyDict_GetItemWithError(hierarchy, key); /* borrowed; a missing key: None, as .get() */
        if (parent == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto failed;
        }
        Py_INCREF(parent == NULL ? (parent = Py_None) : parent);
        api = PyUnicode_Substring(key, 0, api_end);
        cache_key = api == NULL ? NULL : PyTuple_Pack(3, api, directions[direction], parent);
        found = cache_key == NULL ? NULL : PyDict_GetItemWithError(api_kinds, cache_key);
        if (found != NULL) {
            Py_INCREF(found);
        } else if (cache_key != NULL && !PyErr_Occurred()) {
            found = api_kind(api, directions[direction], parent, kinds, modules, module_path);
            if (found != NULL && PyDict_SetItem(api_kinds, cache_key, found) < 0) Py_CLEAR(found);
        }
        Py_XDECREF(cache_key);
        Py_XDECREF(api);
        Py_DECREF(parent);
        Py_DECREF(key);
        if (store(found, value, kind, call) < 0) goto failed;
        *grads = 0;
    }
    Py_DECREF(directions[0]);
    Py_DECREF(directions[1]);
    return Py_BuildValue("(NNN)", out_kinds, out_calls, out_grads);
failed:
    Py_XDECREF(directions[0]);
    Py_XDECREF(directions[1]);
    Py_XDECREF(out_kinds);
    Py_XDECREF(out_calls);
    Py_XDECREF(out_grads);
    return NULL;
}
